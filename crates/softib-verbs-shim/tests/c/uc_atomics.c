/* Atomics on a UC QP through the shim (field case 12). IBA defines atomics for RC and RD
 * only (IBA 9.8.2: UC carries SEND and RDMA WRITE). softib does what rxe (Linux 6.1 +
 * rdma-core 44) does: ibv_post_send accepts the atomic, the WR completes with
 * IBV_WC_LOC_QP_OP_ERR, the QP moves to ERR, and what was posted after it is flushed
 * (docs/troubleshooting.md, case 12). The target memory is untouched. The same atomic on an
 * RC QP works. Prints one "ok NAME" or "FAIL NAME: ..." line per check, then
 * "uc_atomics: all N checks passed" (exit 0) or "uc_atomics: M of N checks failed". */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "softib_test.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static union ibv_gid gid0;

/* A QP of `type` connected to itself (loopback), in RTS. */
static struct ibv_qp *loopback_qp(enum ibv_qp_type type)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = type,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	NEED(qp, "create_qp");
	const char *step;
	int access = IBV_ACCESS_REMOTE_WRITE | (type == IBV_QPT_RC ? IBV_ACCESS_REMOTE_ATOMIC : 0);
	errno = connect_to(qp, qp->qp_num, gid0, 1, access, &step);
	NEED(errno == 0, step);
	return qp;
}

static enum ibv_qp_state state_of(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	NEED(!ibv_query_qp(qp, &a, IBV_QP_STATE, &ia), "query_qp");
	return a.qp_state;
}

/* Waits up to 2 s for one completion. */
static int poll_one(struct ibv_wc *wc)
{
	for (int i = 0; i < 2000; i++) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n;
		usleep(1000);
	}
	return 0;
}

int main(void)
{
	int num;
	struct ibv_device **list = ibv_get_device_list(&num);
	NEED(list && num == 1, "device list");
	ctx = ibv_open_device(list[0]);
	NEED(ctx, "open");
	ibv_free_device_list(list);
	NEED(ibv_query_gid(ctx, 1, 0, &gid0) == 0, "gid 0");
	pd = ibv_alloc_pd(ctx);
	NEED(pd, "alloc_pd");
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	NEED(cq, "create_cq");
	static uint64_t buf[4] __attribute__((aligned(8)));
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE |
				       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	NEED(mr, "reg_mr");
	buf[1] = 40;

	struct ibv_qp *uc = loopback_qp(IBV_QPT_UC);
	const struct { const char *name; enum ibv_wr_opcode op; } ops[] = {
		{ "uc.fetch_add_accepted_at_post", IBV_WR_ATOMIC_FETCH_AND_ADD },
		{ "uc.cmp_swap_accepted_at_post", IBV_WR_ATOMIC_CMP_AND_SWP },
	};
	for (int i = 0; i < 2; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)&buf[0], .length = 8, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 10 + i, .sg_list = &sge, .num_sge = 1,
					  .opcode = ops[i].op, .send_flags = IBV_SEND_SIGNALED },
				   *bad = NULL;
		wr.wr.atomic.remote_addr = (uintptr_t)&buf[1];
		wr.wr.atomic.rkey = mr->rkey;
		wr.wr.atomic.compare_add = 40;
		wr.wr.atomic.swap = 2;
		errno = 0;
		int rc = ibv_post_send(uc, &wr, &bad);
		printf("UC %s: ibv_post_send returned %d (%s)\n", i ? "CMP_SWP" : "FETCH_ADD", rc,
		       rc ? strerror(rc) : "success");
		RULE(ops[i].name, rc == 0 && bad == NULL, "rc %d bad %p", rc, (void *)bad);
	}
	struct ibv_wc wc;
	int n = poll_one(&wc);
	printf("UC FETCH_ADD: completion %s\n", n ? ibv_wc_status_str(wc.status) : "none");
	RULE("uc.fetch_add_loc_qp_op_err",
	     n == 1 && wc.wr_id == 10 && wc.status == IBV_WC_LOC_QP_OP_ERR,
	     "n %d wr_id %llu status %d", n, (unsigned long long)wc.wr_id, wc.status);
	n = poll_one(&wc);
	RULE("uc.cmp_swap_flushed", n == 1 && wc.wr_id == 11 && wc.status == IBV_WC_WR_FLUSH_ERR,
	     "n %d wr_id %llu status %d", n, (unsigned long long)wc.wr_id, wc.status);
	RULE("uc.qp_in_err", state_of(uc) == IBV_QPS_ERR, "state %d", state_of(uc));
	RULE("uc.remote_memory_untouched", buf[1] == 40, "%llu", (unsigned long long)buf[1]);
	/* A QP in ERR flushes what is posted next (IBA 10.3.1), as the kernel does. */
	{
		struct ibv_sge sge = { .addr = (uintptr_t)&buf[2], .length = 8, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 20, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED },
				   *bad = NULL;
		buf[2] = 0x1234;
		wr.wr.rdma.remote_addr = (uintptr_t)&buf[3];
		wr.wr.rdma.rkey = mr->rkey;
		int rc = ibv_post_send(uc, &wr, &bad);
		n = rc ? 0 : poll_one(&wc);
		RULE("uc.write_after_is_flushed",
		     rc == 0 && n == 1 && wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 20,
		     "rc %d n %d status %d", rc, n, wc.status);
		RULE("uc.flushed_write_lands_nowhere", buf[3] == 0, "%#llx",
		     (unsigned long long)buf[3]);
	}
	/* The guide's answer: atomics on RC. */
	struct ibv_qp *rc_qp = loopback_qp(IBV_QPT_RC);
	{
		struct ibv_sge sge = { .addr = (uintptr_t)&buf[0], .length = 8, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 30, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
					  .send_flags = IBV_SEND_SIGNALED },
				   *bad = NULL;
		wr.wr.atomic.remote_addr = (uintptr_t)&buf[1];
		wr.wr.atomic.rkey = mr->rkey;
		wr.wr.atomic.compare_add = 2;
		int rc = ibv_post_send(rc_qp, &wr, &bad);
		int n = rc ? 0 : poll_one(&wc);
		printf("RC FETCH_ADD: ibv_post_send returned %d, completion %s\n", rc,
		       n ? ibv_wc_status_str(wc.status) : "none");
		RULE("rc.fetch_add_works",
		     rc == 0 && n == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD,
		     "rc %d n %d status %d", rc, n, wc.status);
		RULE("rc.fetch_add_result", buf[0] == 40 && buf[1] == 42, "old %llu new %llu",
		     (unsigned long long)buf[0], (unsigned long long)buf[1]);
	}
	ibv_destroy_qp(rc_qp);
	ibv_destroy_qp(uc);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return rules_verdict("uc_atomics");
}
