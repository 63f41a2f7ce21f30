/* A C program written against rdma-core 44's <infiniband/verbs.h>, run with the softib
 * shim preloaded (tests/verbs_api.rs). One device, two RC QPs connected to each other
 * through the device's own UDP address. It checks what perftest does not: that RDMA lands
 * exactly inside the registered region (guard bytes around it stay intact, a WRITE past its
 * end fails with a remote access error and writes nothing), READ, both atomics, SEND with
 * immediate data, INLINE from unregistered memory, completion channels, and that verbs
 * softib does not implement fail with EOPNOTSUPP instead of crashing.
 * Exit status 0 and "verbs_api: all checks passed" on success; otherwise the first failed
 * check is printed. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "softib_test.h"


enum { BUF = 8192, MR_OFF = 2048, MR_LEN = 4096, GUARD = 0x5a };

enum { RIGHTS = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC };

static struct ibv_cq *cq;

static struct ibv_wc wait_one(void)
{
	return wait_one_on(cq);
}

static void post(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;
	int rc = ibv_post_send(qp, wr, &bad);
	CHECK(rc == 0, "post_send %d", rc);
}

int main(void)
{
	int num;
	struct ibv_device **list = ibv_get_device_list(&num);
	CHECK(list && num == 1, "device list (%d)", num);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open errno %d", errno);
	ibv_free_device_list(list);

	/* ibv_query_device_ex answers through its verbs_context slot; the other extended
	 * verbs fall back or refuse through the inline wrappers. */
	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(ctx, NULL, &dx) == 0 && dx.phys_port_cnt_ex == 1,
	      "query_device_ex");
	CHECK(dx.orig_attr.phys_port_cnt == 1, "ports %d", dx.orig_attr.phys_port_cnt);
	struct ibv_port_attr port;
	CHECK(ibv_query_port(ctx, 1, &port) == 0 && port.state == IBV_PORT_ACTIVE &&
	      port.link_layer == IBV_LINK_LAYER_ETHERNET, "port");
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "gid 0");
	CHECK(gid.raw[10] == 0xff && gid.raw[11] == 0xff, "IPv4-mapped GID");
	CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0 && gid.global.interface_id == 0 &&
	      gid.global.subnet_prefix == 0, "only one GID: slot 1 is empty");
	ibv_query_gid(ctx, 1, 0, &gid);
	struct ibv_gid_entry ge;
	CHECK(ibv_query_gid_ex(ctx, 1, 0, &ge, 0) == 0 && ge.gid_type == IBV_GID_TYPE_ROCE_V2,
	      "gid_ex");
	struct ibv_cq_init_attr_ex cqx = { .cqe = 4, .wc_flags = IBV_WC_EX_WITH_CVLAN };
	errno = 0;
	CHECK(ibv_create_cq_ex(ctx, &cqx) == NULL && errno == EOPNOTSUPP, "cq_ex VLAN errno %d",
	      errno);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "pd");
	errno = 0;
	CHECK(ibv_alloc_mw(pd, 3) == NULL && errno == EINVAL, "alloc_mw of type 3");
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(ch && ch->fd >= 0, "channel");
	cq = ibv_create_cq(ctx, 64, (void *)0x1234, ch, 0);
	CHECK(cq, "cq errno %d", errno);

	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2,
			 .max_recv_sge = 2, .max_inline_data = 64 } };
	errno = 0;
	CHECK(ibv_create_qp(pd, &qa) == NULL && errno == EOPNOTSUPP, "raw packet refused (%d)",
	      errno);
	qa.qp_type = IBV_QPT_RC;
	struct ibv_qp *a = ibv_create_qp(pd, &qa), *b = ibv_create_qp(pd, &qa);
	CHECK(a && b, "qps errno %d", errno);
	CHECK(ibv_qp_to_qp_ex(a) == NULL, "a classic QP has no ibv_qp_ex");
	/* Multicast is for UD QPs (kernel ib_attach_mcast: EINVAL otherwise). */
	CHECK(ibv_attach_mcast(a, &gid, 0) == EINVAL, "attach_mcast on RC");
	struct ibv_qp_attr rl = { .rate_limit = 1000 };
	CHECK(ibv_modify_qp(a, &rl, IBV_QP_RATE_LIMIT) == EOPNOTSUPP, "rate limit");
	CONNECT(a, b->qp_num, gid, 100, RIGHTS);
	CONNECT(b, a->qp_num, gid, 100, RIGHTS);
	struct ibv_qp_attr got;
	struct ibv_qp_init_attr gi;
	CHECK(ibv_query_qp(a, &got, IBV_QP_STATE, &gi) == 0 && got.qp_state == IBV_QPS_RTS &&
	      got.dest_qp_num == b->qp_num && a->state == IBV_QPS_RTS, "query_qp");

	/* Memory: only [MR_OFF, MR_OFF + MR_LEN) of `remote` is registered. */
	uint8_t *remote = aligned_alloc(4096, BUF), *local = aligned_alloc(4096, BUF);
	memset(remote, GUARD, BUF);
	for (int i = 0; i < BUF; i++)
		local[i] = (uint8_t)(i * 7 + 1);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_REMOTE_ATOMIC;
	struct ibv_mr *rmr = ibv_reg_mr(pd, remote + MR_OFF, MR_LEN, acc);
	struct ibv_mr *lmr = ibv_reg_mr(pd, local, BUF, acc);
	CHECK(rmr && lmr, "reg_mr errno %d", errno);

	struct ibv_sge sge = { .addr = (uintptr_t)local, .length = MR_LEN, .lkey = lmr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED };
	wr.wr.rdma.remote_addr = (uintptr_t)(remote + MR_OFF);
	wr.wr.rdma.rkey = rmr->rkey;
	post(a, &wr);
	struct ibv_wc wc = wait_one();
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 1 && wc.opcode == IBV_WC_RDMA_WRITE,
	      "write: %s", ibv_wc_status_str(wc.status));
	CHECK(!memcmp(remote + MR_OFF, local, MR_LEN), "written bytes");
	for (int i = 0; i < BUF; i++)
		if (i < MR_OFF || i >= MR_OFF + MR_LEN)
			CHECK(remote[i] == GUARD, "byte %d outside the region changed", i);

	/* One byte past the region's end: refused, nothing written. */
	memset(remote + MR_OFF, 0, MR_LEN);
	wr.wr_id = 2;
	sge.length = 16;
	wr.wr.rdma.remote_addr = (uintptr_t)(remote + MR_OFF + MR_LEN - 15);
	post(a, &wr);
	wc = wait_one();
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR, "out-of-region write: %s",
	      ibv_wc_status_str(wc.status));
	for (int i = 0; i < BUF; i++)
		CHECK(remote[i] == ((i < MR_OFF || i >= MR_OFF + MR_LEN) ? GUARD : 0),
		      "byte %d changed by a refused write", i);
	/* The error moved both QPs' connection to ERR; reconnect fresh QPs. */
	struct ibv_qp *c = ibv_create_qp(pd, &qa), *d = ibv_create_qp(pd, &qa);
	CHECK(c && d, "second pair");
	while (ibv_poll_cq(cq, 1, &wc) > 0)
		;
	CONNECT(c, d->qp_num, gid, 100, RIGHTS);
	CONNECT(d, c->qp_num, gid, 100, RIGHTS);

	/* READ. */
	for (int i = 0; i < 256; i++)
		remote[MR_OFF + 100 + i] = (uint8_t)(255 - i);
	memset(local, 0, 256);
	sge.length = 256;
	wr.wr_id = 3;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.wr.rdma.remote_addr = (uintptr_t)(remote + MR_OFF + 100);
	post(c, &wr);
	wc = wait_one();
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ, "read: %s",
	      ibv_wc_status_str(wc.status));
	CHECK(!memcmp(local, remote + MR_OFF + 100, 256), "read bytes");

	/* Atomics on an aligned word of the remote region. */
	uint64_t *word = (uint64_t *)(remote + MR_OFF + 512);
	*word = 40;
	sge.length = 8;
	wr.wr_id = 4;
	wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	wr.wr.atomic.remote_addr = (uintptr_t)word;
	wr.wr.atomic.rkey = rmr->rkey;
	wr.wr.atomic.compare_add = 2;
	post(c, &wr);
	wc = wait_one();
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD, "fadd");
	CHECK(*(uint64_t *)local == 40 && *word == 42, "fetch_add %llu -> %llu",
	      (unsigned long long)*(uint64_t *)local, (unsigned long long)*word);
	wr.wr_id = 5;
	wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	wr.wr.atomic.compare_add = 42;
	wr.wr.atomic.swap = 7;
	post(c, &wr);
	wc = wait_one();
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_COMP_SWAP, "cas");
	CHECK(*(uint64_t *)local == 42 && *word == 7, "cmp_swap");

	/* SEND with immediate, and an INLINE send from an unregistered stack buffer; the
	 * receive completions come with a completion event on the channel. */
	uint8_t *rbuf = local + 4096;
	struct ibv_sge rsge = { .addr = (uintptr_t)rbuf, .length = 2048, .lkey = lmr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 10, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	CHECK(ibv_post_recv(d, &rwr, &rbad) == 0, "post_recv");
	rwr.wr_id = 11;
	rsge.addr = (uintptr_t)(rbuf + 2048);
	CHECK(ibv_post_recv(d, &rwr, &rbad) == 0, "post_recv 2");
	CHECK(ibv_req_notify_cq(cq, 0) == 0, "req_notify");
	memcpy(local, "hello softib", 12);
	sge.addr = (uintptr_t)local;
	sge.length = 12;
	wr.wr_id = 6;
	wr.opcode = IBV_WR_SEND_WITH_IMM;
	wr.imm_data = htobe32(0xabcdef01);
	post(c, &wr);
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq && ev_ctx == (void *)0x1234,
	      "cq event");
	ibv_ack_cq_events(cq, 1);
	int seen = 0;
	while (seen < 2) {
		wc = wait_one();
		if (wc.wr_id == 6) {
			CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND, "send");
		} else {
			CHECK(wc.wr_id == 10 && wc.status == IBV_WC_SUCCESS &&
			      wc.opcode == IBV_WC_RECV && wc.byte_len == 12 &&
			      (wc.wc_flags & IBV_WC_WITH_IMM) && be32toh(wc.imm_data) == 0xabcdef01 &&
			      wc.qp_num == d->qp_num, "recv with imm");
			CHECK(!memcmp(rbuf, "hello softib", 12), "received bytes");
		}
		seen++;
	}
	char stack[40];
	memset(stack, 'z', sizeof(stack));
	struct ibv_sge isge = { .addr = (uintptr_t)stack, .length = sizeof(stack), .lkey = 0 };
	struct ibv_send_wr iwr = { .wr_id = 7, .sg_list = &isge, .num_sge = 1,
		.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE };
	post(c, &iwr);
	memset(stack, 0, sizeof(stack)); /* inline data was copied at post time */
	seen = 0;
	while (seen < 2) {
		wc = wait_one();
		CHECK(wc.status == IBV_WC_SUCCESS, "inline: %s", ibv_wc_status_str(wc.status));
		if (wc.wr_id == 11) {
			CHECK(wc.byte_len == 40, "inline length %u", wc.byte_len);
			for (int i = 0; i < 40; i++)
				CHECK(rbuf[2048 + i] == 'z', "inline byte %d", i);
		}
		seen++;
	}

	/* An opcode softib does not implement is refused at post time; so is a BIND_MW
	 * without a window (tests/c/memory_windows.c checks windows). */
	struct ibv_send_wr mw = { .wr_id = 8, .opcode = IBV_WR_BIND_MW }, *bad = NULL;
	CHECK(ibv_post_send(c, &mw, &bad) == EINVAL && bad == &mw, "bind_mw without a window");
	struct ibv_send_wr tso = { .wr_id = 9, .opcode = IBV_WR_TSO };
	CHECK(ibv_post_send(c, &tso, &bad) == EOPNOTSUPP && bad == &tso, "tso");

	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0 && ibv_destroy_qp(c) == 0 &&
	      ibv_destroy_qp(d) == 0, "destroy qps");
	CHECK(ibv_dereg_mr(rmr) == 0 && ibv_dereg_mr(lmr) == 0, "dereg");
	CHECK(ibv_destroy_comp_channel(ch) == EBUSY, "channel in use");
	CHECK(ibv_destroy_cq(cq) == 0, "destroy cq");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy channel");
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc pd");
	CHECK(ibv_close_device(ctx) == 0, "close");
	free(remote);
	free(local);
	printf("verbs_api: all checks passed\n");
	return 0;
}
