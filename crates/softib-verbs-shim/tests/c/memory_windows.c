/* Memory windows through the real <infiniband/verbs.h> of rdma-core 44, run with the softib
 * shim preloaded (tests/memory_windows.rs): one device, RC QPs connected to each other
 * through the device's own UDP address. Type 1: ibv_alloc_mw / ibv_bind_mw (the inline
 * verbs calling context->ops), mw->rkey moved on by ibv_inc_rkey, IBV_WC_BIND_MW, a WRITE
 * through the window lands in the window's range and one leaving it fails with
 * IBV_WC_REM_ACCESS_ERR; ibv_dereg_mr of a region with a bound window fails with EINVAL
 * (rxe). Type 2: IBV_WR_BIND_MW, a READ through it, IBV_WR_LOCAL_INV (IBV_WC_LOCAL_INV),
 * then the key is dead; a bind onto a region without MW_BIND completes with
 * IBV_WC_MW_BIND_ERR and the window can still be deallocated.
 * Exit status 0 and "memory_windows: all checks passed" on success. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "softib_test.h"


enum { BUF = 16384, WIN_OFF = 4096, WIN_LEN = 4096 };

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static union ibv_gid gid;

static struct ibv_wc wait_one(void)
{
	return wait_one_on(cq);
}

/* Two RC QPs connected to each other. */
static void qp_pair(struct ibv_qp **a, struct ibv_qp **b)
{
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
			 .max_recv_sge = 1 } };
	*a = ibv_create_qp(pd, &qa);
	*b = ibv_create_qp(pd, &qa);
	CHECK(*a && *b, "qps errno %d", errno);
	CONNECT(*a, (*b)->qp_num, gid, 100, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	CONNECT(*b, (*a)->qp_num, gid, 100, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
}

static int rdma(struct ibv_qp *qp, enum ibv_wr_opcode op, struct ibv_mr *lmr, void *local,
		uint32_t len, uint64_t remote_addr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)local, .length = len, .lkey = lmr->lkey };
	struct ibv_send_wr wr = { .wr_id = 50, .sg_list = &sge, .num_sge = 1, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED }, *bad = NULL;
	wr.wr.rdma.remote_addr = remote_addr;
	wr.wr.rdma.rkey = rkey;
	CHECK(ibv_post_send(qp, &wr, &bad) == 0, "post %d", op);
	struct ibv_wc wc = wait_one();
	CHECK(wc.wr_id == 50, "wr_id %llu", (unsigned long long)wc.wr_id);
	return wc.status;
}

int main(void)
{
	int num;
	struct ibv_device **list = ibv_get_device_list(&num);
	CHECK(list && num == 1, "device list (%d)", num);
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open errno %d", errno);
	ibv_free_device_list(list);
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "gid 0");
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(pd && cq, "pd/cq errno %d", errno);

	uint8_t *remote = aligned_alloc(4096, BUF), *local = aligned_alloc(4096, BUF);
	memset(remote, 0x5a, BUF);
	for (int i = 0; i < BUF; i++)
		local[i] = (uint8_t)(i * 13 + 3);
	/* The target region grants nothing remote itself: only windows do. */
	struct ibv_mr *rmr = ibv_reg_mr(pd, remote, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_mr *lmr = ibv_reg_mr(pd, local, BUF, IBV_ACCESS_LOCAL_WRITE);
	CHECK(rmr && lmr, "reg_mr errno %d", errno);
	struct ibv_qp *a, *b;
	qp_pair(&a, &b);

	/* Type 1, bound by the verb on b. */
	struct ibv_mw *mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	CHECK(mw1 && mw1->type == IBV_MW_TYPE_1 && mw1->pd == pd, "alloc_mw errno %d", errno);
	uint32_t old = mw1->rkey;
	struct ibv_mw_bind bind = { .wr_id = 7, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { .mr = rmr, .addr = (uintptr_t)(remote + WIN_OFF), .length = WIN_LEN,
			       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE } };
	CHECK(ibv_bind_mw(b, mw1, &bind) == 0, "bind_mw");
	CHECK(mw1->rkey == ibv_inc_rkey(old), "rkey %#x after %#x", mw1->rkey, old);
	struct ibv_wc wc = wait_one();
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 7,
	      "bind completion: %s opcode %d", ibv_wc_status_str(wc.status), wc.opcode);
	CHECK(rdma(a, IBV_WR_RDMA_WRITE, lmr, local, 1024, (uintptr_t)(remote + WIN_OFF + 512),
		   mw1->rkey) == IBV_WC_SUCCESS, "write through the window");
	CHECK(!memcmp(remote + WIN_OFF + 512, local, 1024), "bytes through the window");
	CHECK(remote[WIN_OFF + 511] == 0x5a && remote[WIN_OFF + 1536] == 0x5a, "neighbours");
	/* A type 2 window cannot be bound through the verb (verbs.h refuses it). */
	struct ibv_mw *mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw2, "alloc type 2 errno %d", errno);
	CHECK(ibv_bind_mw(b, mw2, &bind) == EINVAL, "ibv_bind_mw of a type 2 window");
	CHECK(ibv_dereg_mr(rmr) == EINVAL, "dereg of a region with a bound window (rxe: EINVAL)");
	CHECK(rdma(a, IBV_WR_RDMA_WRITE, lmr, local, 1024, (uintptr_t)(remote + WIN_OFF + 3584),
		   mw1->rkey) == IBV_WC_REM_ACCESS_ERR, "write leaving the window");
	CHECK(remote[WIN_OFF + 3584] == 0x5a, "nothing written");

	/* Type 2 on a fresh pair (the error above moved a and b to ERR). */
	struct ibv_qp *c, *d;
	qp_pair(&c, &d);
	struct ibv_send_wr bw = { .wr_id = 20, .opcode = IBV_WR_BIND_MW,
		.send_flags = IBV_SEND_SIGNALED }, *bad = NULL;
	bw.bind_mw.mw = mw2;
	bw.bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
	bw.bind_mw.bind_info = (struct ibv_mw_bind_info){ .mr = rmr, .addr = (uintptr_t)remote,
		.length = WIN_LEN, .mw_access_flags = IBV_ACCESS_REMOTE_READ };
	CHECK(ibv_post_send(d, &bw, &bad) == 0, "post BIND_MW");
	wc = wait_one();
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 20,
	      "type 2 bind: %s", ibv_wc_status_str(wc.status));
	uint32_t k2 = bw.bind_mw.rkey;
	CHECK(rdma(c, IBV_WR_RDMA_READ, lmr, local + 8192, 256, (uintptr_t)remote + 100, k2) ==
		      IBV_WC_SUCCESS, "read through the type 2 window");
	CHECK(!memcmp(local + 8192, remote + 100, 256), "read bytes");
	struct ibv_send_wr inv = { .wr_id = 21, .opcode = IBV_WR_LOCAL_INV,
		.send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = k2 };
	CHECK(ibv_post_send(d, &inv, &bad) == 0, "post LOCAL_INV");
	wc = wait_one();
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV && wc.wr_id == 21,
	      "local inv: %s opcode %d", ibv_wc_status_str(wc.status), wc.opcode);
	CHECK(rdma(c, IBV_WR_RDMA_READ, lmr, local + 8192, 256, (uintptr_t)remote + 100, k2) ==
		      IBV_WC_REM_ACCESS_ERR, "read after LOCAL_INV");

	/* A bind onto a region without IBV_ACCESS_MW_BIND fails with IBV_WC_MW_BIND_ERR;
	 * ibv_bind_mw already moved mw->rkey on (rxe: the application undoes it), and the
	 * window can still be deallocated. */
	struct ibv_qp *e, *f;
	qp_pair(&e, &f);
	struct ibv_mw *mw3 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	CHECK(mw3, "alloc mw3 errno %d", errno);
	struct ibv_mw_bind nobind = { .wr_id = 30, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { .mr = lmr, .addr = (uintptr_t)local, .length = 64,
			       .mw_access_flags = IBV_ACCESS_REMOTE_READ } };
	CHECK(ibv_bind_mw(f, mw3, &nobind) == 0, "post the failing bind");
	wc = wait_one();
	CHECK(wc.wr_id == 30 && wc.status == IBV_WC_MW_BIND_ERR, "bind without MW_BIND: %s",
	      ibv_wc_status_str(wc.status));
	CHECK(ibv_dealloc_mw(mw3) == 0, "dealloc after a failed bind");

	CHECK(ibv_dealloc_mw(mw2) == 0 && ibv_dealloc_mw(mw1) == 0, "dealloc_mw");
	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0 && ibv_destroy_qp(c) == 0 &&
	      ibv_destroy_qp(d) == 0 && ibv_destroy_qp(e) == 0 && ibv_destroy_qp(f) == 0,
	      "destroy qps");
	CHECK(ibv_dereg_mr(rmr) == 0 && ibv_dereg_mr(lmr) == 0, "dereg after dealloc_mw");
	CHECK(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0, "teardown");
	CHECK(ibv_close_device(ctx) == 0, "close");
	free(remote);
	free(local);
	printf("memory_windows: all checks passed\n");
	return 0;
}
