/* The extended verbs of rdma-core 44's <infiniband/verbs.h> on softib, run with the shim
 * preloaded (tests/verbs_ext.rs): the ibv_wr_* post-send API on extended QPs, extended CQs
 * with completion timestamps, device memory, on-demand paging (explicit and implicit, a
 * remote access to a hole is a remote access error and the process lives), ibv_rereg_mr,
 * ibv_resize_cq, thread/parent domains and ibv_create_srq_ex. Two RC QPs of one device
 * talk to each other through the device's own UDP address.
 * Exit status 0 and "verbs_ext: all checks passed" on success; otherwise the first failed
 * check is printed. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include "softib_test.h"


enum { RIGHTS = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC };

static struct ibv_cq_ex *cqx;

/* A parent domain's allocators: count the calls and check what the provider asks for. */
static int allocs, frees, alloc_mode; /* 0: memalign, 1: use default, 2: NULL */
static size_t alloc_size, alloc_align;
static void *pd_alloc(struct ibv_pd *pd, void *ctx, size_t size, size_t align, uint64_t type)
{
	(void)pd;
	(void)type;
	CHECK(ctx == (void *)0x5d, "pd_context passed");
	allocs++;
	alloc_size = size;
	alloc_align = align;
	if (alloc_mode == 1)
		return IBV_ALLOCATOR_USE_DEFAULT;
	if (alloc_mode == 2)
		return NULL;
	void *p = NULL;
	CHECK(posix_memalign(&p, align, size) == 0, "memalign");
	return p;
}
static void pd_free(struct ibv_pd *pd, void *ctx, void *ptr, uint64_t type)
{
	(void)pd;
	(void)ctx;
	(void)type;
	frees++;
	free(ptr);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* One completion from the extended CQ, with its fields; fails on timeout. */
struct got {
	uint64_t wr_id, ts, wall;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len, imm, flags, qp_num;
};

static struct got wait_ex(void)
{
	struct ibv_poll_cq_attr pa = { 0 };
	struct got g;
	int rc = ENOENT;
	for (long i = 0; i < 200000000L && rc == ENOENT; i++)
		rc = ibv_start_poll(cqx, &pa);
	CHECK(rc == 0, "start_poll %d", rc);
	g.wr_id = cqx->wr_id;
	g.status = cqx->status;
	g.opcode = ibv_wc_read_opcode(cqx);
	g.byte_len = ibv_wc_read_byte_len(cqx);
	g.imm = ibv_wc_read_imm_data(cqx);
	g.flags = ibv_wc_read_wc_flags(cqx);
	g.qp_num = ibv_wc_read_qp_num(cqx);
	g.ts = ibv_wc_read_completion_ts(cqx);
	g.wall = ibv_wc_read_completion_wallclock_ns(cqx);
	ibv_end_poll(cqx);
	return g;
}

static struct ibv_qp *qp_ex_create(struct ibv_context *ctx, struct ibv_pd *pd,
				   enum ibv_qp_type type, uint64_t ops)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = ibv_cq_ex_to_cq(cqx), .recv_cq = ibv_cq_ex_to_cq(cqx),
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 2,
			 .max_recv_sge = 2, .max_inline_data = 64 },
		.qp_type = type,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd, .send_ops_flags = ops };
	return ibv_create_qp_ex(ctx, &a);
}

static void post_recv(struct ibv_qp *qp, void *buf, uint32_t len, uint32_t lkey, uint64_t id)
{
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = len, .lkey = lkey };
	struct ibv_recv_wr r = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad;
	CHECK(ibv_post_recv(qp, &r, &bad) == 0, "post_recv");
}

int main(void)
{
	int num;
	struct ibv_device **list = ibv_get_device_list(&num);
	CHECK(list && num == 1, "device list (%d)", num);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open errno %d", errno);
	ibv_free_device_list(list);
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "gid");
	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(ctx, NULL, &dx) == 0, "query_device_ex");
	CHECK(dx.max_dm_size > 0 && (dx.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT) &&
	      dx.hca_core_clock == 1000000 && dx.completion_timestamp_mask == UINT64_MAX,
	      "advertised extended capabilities");

	/* Extended CQ with both timestamps and a completion channel. */
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(ch, "channel");
	struct ibv_cq_init_attr_ex ca = { .cqe = 64, .channel = ch, .cq_context = (void *)0x77,
		.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
			    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK };
	cqx = ibv_create_cq_ex(ctx, &ca);
	CHECK(cqx, "create_cq_ex errno %d", errno);
	struct ibv_poll_cq_attr pa = { 0 };
	CHECK(ibv_start_poll(cqx, &pa) == ENOENT, "an empty CQ says ENOENT");
	ca.comp_vector = 1;
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &ca) && errno == EINVAL, "comp_vector past the device");

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "pd");
	const uint64_t rc_ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
				IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
				IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
				IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_ATOMIC_WRITE;
	/* ATOMIC WRITE (IBA 1.5): advertised as the kernel does (IB_UVERBS_DEVICE_ATOMIC_WRITE,
	 * bit 40 of device_cap_flags_ex; libibverbs 44 has no name for it), RC only. */
	CHECK(dx.device_cap_flags_ex & (1ULL << 40), "ATOMIC WRITE capability %#llx",
	      (unsigned long long)dx.device_cap_flags_ex);
	errno = 0;
	CHECK(!qp_ex_create(ctx, pd, IBV_QPT_UC, IBV_QP_EX_WITH_ATOMIC_WRITE) && errno == EOPNOTSUPP,
	      "atomic write refused on UC (%d)", errno);
	errno = 0;
	CHECK(!qp_ex_create(ctx, pd, IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE) &&
	      errno == EOPNOTSUPP, "UD has no RDMA WRITE (%d)", errno);
	struct ibv_qp *a = qp_ex_create(ctx, pd, IBV_QPT_RC, rc_ops);
	struct ibv_qp *b = qp_ex_create(ctx, pd, IBV_QPT_RC, rc_ops);
	CHECK(a && b, "qp_ex errno %d", errno);
	struct ibv_qp_ex *ax = ibv_qp_to_qp_ex(a);
	CHECK(ax && (void *)ax == (void *)a, "qp_to_qp_ex");
	CONNECT(a, b->qp_num, gid, 7, RIGHTS);
	CONNECT(b, a->qp_num, gid, 7, RIGHTS);

	enum { N = 4096 };
	char *abuf = aligned_alloc(4096, N), *bbuf = aligned_alloc(4096, N);
	memset(abuf, 'a', N);
	memset(bbuf, 0, N);
	int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		 IBV_ACCESS_REMOTE_ATOMIC;
	struct ibv_mr *amr = ibv_reg_mr(pd, abuf, N, rw), *bmr = ibv_reg_mr(pd, bbuf, N, rw);
	CHECK(amr && bmr, "mrs");

	/* One batch, two WRs: a WRITE from an SGE and a SEND with immediate data inline. */
	post_recv(b, bbuf + 1024, 64, bmr->lkey, 900);
	uint64_t before = mono_ns();
	ibv_wr_start(ax);
	ax->wr_id = 1;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(ax, bmr->rkey, (uintptr_t)bbuf);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf, 512);
	ax->wr_id = 2;
	ibv_wr_send_imm(ax, htobe32(0xabcd0123));
	char stack_msg[12] = "inline-data";
	ibv_wr_set_inline_data(ax, stack_msg, sizeof(stack_msg));
	memset(stack_msg, 0, sizeof(stack_msg)); /* copied at the call */
	CHECK(ibv_wr_complete(ax) == 0, "wr_complete");
	struct got g1 = wait_ex(), g2 = wait_ex(), g3 = wait_ex();
	uint64_t after = mono_ns();
	struct got *w = NULL, *s = NULL, *r = NULL;
	struct got *all[3] = { &g1, &g2, &g3 };
	for (int i = 0; i < 3; i++) {
		CHECK(all[i]->status == IBV_WC_SUCCESS, "status %d", all[i]->status);
		if (all[i]->wr_id == 1)
			w = all[i];
		if (all[i]->wr_id == 2)
			s = all[i];
		if (all[i]->wr_id == 900)
			r = all[i];
	}
	CHECK(w && s && r, "the three completions");
	CHECK(w->opcode == IBV_WC_RDMA_WRITE && s->opcode == IBV_WC_SEND, "send opcodes");
	CHECK(r->opcode == IBV_WC_RECV && r->byte_len == 12 && (r->flags & IBV_WC_WITH_IMM) &&
	      be32toh(r->imm) == 0xabcd0123 && r->qp_num == b->qp_num, "receive fields");
	CHECK(memcmp(bbuf + 1024, "inline-data", 12) == 0, "inline payload");
	for (int i = 0; i < 512; i++)
		CHECK(bbuf[i] == 'a', "written byte %d", i);
	CHECK(bbuf[512] == 0, "nothing past the SGE");
	for (int i = 0; i < 3; i++)
		CHECK(all[i]->ts >= before && all[i]->ts <= after && all[i]->wall > 0,
		      "timestamp %llu outside [%llu, %llu]", (unsigned long long)all[i]->ts,
		      (unsigned long long)before, (unsigned long long)after);
	struct ibv_values_ex v = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK };
	CHECK(ibv_query_rt_values_ex(ctx, &v) == 0, "query_rt_values");
	uint64_t raw = (uint64_t)v.raw_clock.tv_sec * 1000000000ull + v.raw_clock.tv_nsec;
	CHECK(raw >= after && raw <= mono_ns(), "raw clock is the timestamp clock");

	/* READ and both atomics through the builders; a list of two SGEs. */
	uint64_t *word = (uint64_t *)(bbuf + 2048);
	*word = 40;
	ibv_wr_start(ax);
	ax->wr_flags = IBV_SEND_SIGNALED;
	ax->wr_id = 10;
	ibv_wr_atomic_fetch_add(ax, bmr->rkey, (uintptr_t)word, 2);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf, 8);
	ax->wr_id = 11;
	ibv_wr_atomic_cmp_swp(ax, bmr->rkey, (uintptr_t)word, 42, 99);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)(abuf + 8), 8);
	ax->wr_id = 12;
	ibv_wr_rdma_read(ax, bmr->rkey, (uintptr_t)(bbuf + 1024));
	struct ibv_sge two[2] = { { (uintptr_t)(abuf + 100), 6, amr->lkey },
				  { (uintptr_t)(abuf + 200), 6, amr->lkey } };
	ibv_wr_set_sge_list(ax, 2, two);
	CHECK(ibv_wr_complete(ax) == 0, "wr_complete atomics");
	for (int i = 0; i < 3; i++)
		CHECK(wait_ex().status == IBV_WC_SUCCESS, "atomic/read status");
	uint64_t old_fa, old_cs;
	memcpy(&old_fa, abuf, 8);
	memcpy(&old_cs, abuf + 8, 8);
	CHECK(old_fa == 40 && old_cs == 42 && *word == 99, "atomics %llu %llu %llu",
	      (unsigned long long)old_fa, (unsigned long long)old_cs, (unsigned long long)*word);
	CHECK(memcmp(abuf + 100, "inline", 6) == 0 && memcmp(abuf + 200, "-data", 5) == 0,
	      "READ scattered over two SGEs");

	/* ATOMIC WRITE: the 8 bytes are copied at the call (the stack buffer is reused at once),
	 * land as posted after the earlier WRITE of the same batch, and complete as
	 * IBV_WC_ATOMIC_WRITE; max_inline_data does not bound them. */
	uint64_t *flag = (uint64_t *)(bbuf + 3072);
	*flag = 0;
	ibv_wr_start(ax);
	ax->wr_flags = IBV_SEND_SIGNALED;
	ax->wr_id = 13;
	ibv_wr_rdma_write(ax, bmr->rkey, (uintptr_t)(bbuf + 3000));
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf, 64);
	ax->wr_id = 14;
	unsigned char value[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	ibv_wr_atomic_write(ax, bmr->rkey, (uintptr_t)flag, value);
	memset(value, 0xFF, sizeof(value));
	CHECK(ibv_wr_complete(ax) == 0, "wr_complete atomic write");
	struct got aw1 = wait_ex(), aw2 = wait_ex();
	CHECK(aw1.status == IBV_WC_SUCCESS && aw1.wr_id == 13 && aw1.opcode == IBV_WC_RDMA_WRITE,
	      "write before the atomic write: %d %llu %d", aw1.status,
	      (unsigned long long)aw1.wr_id, aw1.opcode);
	CHECK(aw2.status == IBV_WC_SUCCESS && aw2.wr_id == 14 && aw2.opcode == IBV_WC_ATOMIC_WRITE,
	      "atomic write completion: %d %llu %d", aw2.status,
	      (unsigned long long)aw2.wr_id, aw2.opcode);
	CHECK(memcmp(flag, "\1\2\3\4\5\6\7\10", 8) == 0, "atomic write bytes");
	CHECK(memcmp(bbuf + 3000, abuf, 64) == 0, "the write before it landed");

	/* Builder errors refuse the batch as a whole; abort discards one. */
	char big[65] = { 0 };
	ibv_wr_start(ax);
	ax->wr_id = 20;
	ibv_wr_send(ax);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf, 4);
	ax->wr_id = 21;
	ibv_wr_send(ax);
	ibv_wr_set_inline_data(ax, big, sizeof(big));
	CHECK(ibv_wr_complete(ax) == ENOSPC, "inline beyond max_inline_data");
	ibv_wr_start(ax);
	ibv_wr_send(ax);
	ibv_wr_abort(ax);
	CHECK(ibv_start_poll(cqx, &pa) == ENOENT, "nothing was posted");

	/* Completion channel with an extended CQ. */
	CHECK(ibv_req_notify_cq(ibv_cq_ex_to_cq(cqx), 0) == 0, "arm");
	post_recv(b, bbuf, 16, bmr->lkey, 901);
	ibv_wr_start(ax);
	ax->wr_id = 30;
	ax->wr_flags = 0;
	ibv_wr_send(ax);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf, 16);
	CHECK(ibv_wr_complete(ax) == 0, "unsignaled send");
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 &&
	      ev_cq == ibv_cq_ex_to_cq(cqx) && ev_ctx == (void *)0x77, "cq event");
	ibv_ack_cq_events(ev_cq, 1);
	struct got rv = wait_ex();
	CHECK(rv.wr_id == 901 && rv.byte_len == 16, "only the receive completes");

	/* Device memory. */
	struct ibv_alloc_dm_attr da = { .length = dx.max_dm_size + 1 };
	errno = 0;
	CHECK(!ibv_alloc_dm(ctx, &da) && errno, "beyond max_dm_size");
	da.length = 4096;
	da.log_align_req = 6;
	struct ibv_dm *dm = ibv_alloc_dm(ctx, &da);
	CHECK(dm, "alloc_dm errno %d", errno);
	CHECK(ibv_memcpy_to_dm(dm, 8, "dmdmdmdm", 8) == 0, "to_dm");
	char back[8];
	CHECK(ibv_memcpy_from_dm(back, dm, 8, 8) == 0 && !memcmp(back, "dmdmdmdm", 8), "from_dm");
	CHECK(ibv_memcpy_to_dm(dm, 2, "abcd", 4) == EINVAL, "unaligned offset");
	CHECK(ibv_memcpy_to_dm(dm, 4096, "abcd", 4) == EFAULT, "past the end");
	errno = 0;
	CHECK(!ibv_reg_dm_mr(pd, dm, 0, 64, IBV_ACCESS_LOCAL_WRITE) && errno == EINVAL,
	      "ZERO_BASED is required");
	errno = 0;
	CHECK(!ibv_reg_dm_mr(pd, dm, 4000, 200, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE) &&
	      errno == EINVAL, "beyond the DM");
	struct ibv_mr *dmr = ibv_reg_dm_mr(pd, dm, 1024, 1024, IBV_ACCESS_ZERO_BASED |
					   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(dmr, "reg_dm_mr errno %d", errno);
	ibv_wr_start(ax);
	ax->wr_id = 40;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(ax, dmr->rkey, 16); /* zero-based: DM byte 1024 + 16 */
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf, 8);
	CHECK(ibv_wr_complete(ax) == 0, "write to DM");
	CHECK(wait_ex().status == IBV_WC_SUCCESS, "write to DM completes");
	CHECK(ibv_memcpy_from_dm(back, dm, 1040, 8) == 0 && !memcmp(back, abuf, 8),
	      "the WRITE landed in device memory");
	CHECK(ibv_free_dm(dm) == EBUSY, "DM in use by an MR");
	CHECK(ibv_dereg_mr(dmr) == 0 && ibv_free_dm(dm) == 0, "free_dm");

	/* rereg: new translation and access, same keys. */
	char *other = aligned_alloc(4096, N);
	memset(other, 0, N);
	uint32_t rkey = bmr->rkey;
	CHECK(ibv_rereg_mr(bmr, 0, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_CMD && errno == EINVAL,
	      "no flag");
	CHECK(ibv_rereg_mr(bmr, 1 << 3, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT &&
	      errno == EINVAL, "unknown flag");
	CHECK(ibv_rereg_mr(bmr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_REMOTE_WRITE) == IBV_REREG_MR_ERR_CMD && errno == EINVAL,
	      "remote write without local write");
	CHECK(ibv_rereg_mr(bmr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, other, N, 0) == 0 &&
	      bmr->addr == other && bmr->rkey == rkey, "rereg translation");
	ibv_wr_start(ax);
	ax->wr_id = 50;
	ibv_wr_rdma_write(ax, rkey, (uintptr_t)other + 8);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf, 4);
	CHECK(ibv_wr_complete(ax) == 0, "write after rereg");
	CHECK(wait_ex().status == IBV_WC_SUCCESS, "write after rereg completes");
	CHECK(!memcmp(other + 8, abuf, 4), "the WRITE landed in the new buffer");

	/* resize: a classic CQ. */
	struct ibv_cq *small = ibv_create_cq(ctx, 2, NULL, NULL, 0);
	CHECK(small && ibv_resize_cq(small, 8) == 0 && small->cqe == 8, "resize up");
	CHECK(ibv_resize_cq(small, 0) == EINVAL, "resize to 0");
	CHECK(ibv_destroy_cq(small) == 0, "destroy small");

	/* Thread and parent domains; a QP and an extended CQ in the parent domain. */
	struct ibv_td_init_attr tda = { 0 };
	struct ibv_td *td = ibv_alloc_td(ctx, &tda);
	CHECK(td, "alloc_td");
	struct ibv_parent_domain_init_attr pda = { .pd = pd, .td = td,
		.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT, .pd_context = (void *)1 };
	struct ibv_pd *par = ibv_alloc_parent_domain(ctx, &pda);
	CHECK(par, "parent domain errno %d", errno);
	CHECK(ibv_dealloc_td(td) == EBUSY && ibv_dealloc_pd(pd) == EBUSY, "in use");
	struct ibv_cq_init_attr_ex pca = { .cqe = 8, .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD,
					   .parent_domain = par };
	struct ibv_cq_ex *pcq = ibv_create_cq_ex(ctx, &pca);
	CHECK(pcq, "cq_ex in a parent domain");
	struct ibv_qp_init_attr pqa = { .send_cq = ibv_cq_ex_to_cq(pcq),
		.recv_cq = ibv_cq_ex_to_cq(pcq), .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *pqp = ibv_create_qp(par, &pqa);
	CHECK(pqp, "QP in a parent domain errno %d", errno);
	CHECK(ibv_dealloc_pd(par) == EBUSY, "a parent domain with a QP stays");
	CHECK(ibv_destroy_qp(pqp) == 0, "destroy QP in the parent domain");
	CHECK(ibv_dealloc_pd(par) == 0 && ibv_dealloc_td(td) == 0, "dealloc domains");

	/* With allocators: the QP's send staging region comes from them. */
	struct ibv_parent_domain_init_attr apa = { .pd = pd,
		.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
			     IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
		.alloc = pd_alloc, .free = pd_free, .pd_context = (void *)0x5d };
	struct ibv_pd *apar = ibv_alloc_parent_domain(ctx, &apa);
	CHECK(apar, "parent domain with allocators");
	pqa.cap.max_inline_data = 128;
	pqp = ibv_create_qp(apar, &pqa);
	CHECK(pqp && allocs == 1 && alloc_size >= 128 && alloc_align == 64, "allocator called (%d %zu %zu)",
	      allocs, alloc_size, alloc_align);
	CHECK(ibv_destroy_qp(pqp) == 0 && frees == 1, "free called at destroy (%d)", frees);
	alloc_mode = 1;
	pqp = ibv_create_qp(apar, &pqa);
	CHECK(pqp && allocs == 2 && ibv_destroy_qp(pqp) == 0 && frees == 1, "USE_DEFAULT");
	alloc_mode = 2;
	errno = 0;
	CHECK(!ibv_create_qp(apar, &pqa) && errno == ENOMEM, "a NULL allocation fails the QP");
	CHECK(ibv_dealloc_pd(apar) == 0, "dealloc the parent domain with allocators");
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(pcq)) == 0, "destroy cq in parent domain");

	/* Extended SRQ: basic with a CQ mask; XRC refused. */
	struct ibv_srq_init_attr_ex sa = { .attr = { .max_wr = 8, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_CQ,
		.srq_type = IBV_SRQT_BASIC, .pd = pd, .cq = ibv_cq_ex_to_cq(cqx) };
	struct ibv_srq *srq = ibv_create_srq_ex(ctx, &sa);
	CHECK(srq && ibv_destroy_srq(srq) == 0, "basic srq_ex errno %d", errno);
	sa.srq_type = IBV_SRQT_XRC;
	errno = 0;
	CHECK(!ibv_create_srq_ex(ctx, &sa) && errno == EINVAL, "an XRC SRQ needs a domain");

	/* XRC: a domain, an XRC SRQ, an initiator QP and a target QP; a SEND through the
	 * initiator names the SRQ and completes on the SRQ's CQ. */
	struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD |
					 IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1, .oflags = O_CREAT };
	struct ibv_xrcd *xrcd = ibv_open_xrcd(ctx, &xa);
	CHECK(xrcd, "open_xrcd errno %d", errno);
	sa.comp_mask |= IBV_SRQ_INIT_ATTR_XRCD;
	sa.xrcd = xrcd;
	struct ibv_srq *xsrq = ibv_create_srq_ex(ctx, &sa);
	CHECK(xsrq, "XRC SRQ errno %d", errno);
	uint32_t srqn = 0;
	CHECK(ibv_get_srq_num(xsrq, &srqn) == 0, "srq num");
	struct ibv_qp_init_attr_ex ta = { .qp_type = IBV_QPT_XRC_RECV,
		.comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = xrcd };
	struct ibv_qp *tgt = ibv_create_qp_ex(ctx, &ta);
	CHECK(tgt, "XRC target errno %d", errno);
	struct ibv_qp *ini = qp_ex_create(ctx, pd, IBV_QPT_XRC_SEND, IBV_QP_EX_WITH_SEND);
	CHECK(ini, "XRC initiator errno %d", errno);
	CHECK(ibv_close_xrcd(xrcd) == EBUSY, "a domain in use stays");
	struct ibv_qp_attr q = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	CHECK(!ibv_modify_qp(tgt, &q, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				      IBV_QP_ACCESS_FLAGS), "target INIT errno %d", errno);
	CHECK(!ibv_modify_qp(ini, &q, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				      IBV_QP_ACCESS_FLAGS), "initiator INIT errno %d", errno);
	memset(&q, 0, sizeof(q));
	q.qp_state = IBV_QPS_RTR;
	q.path_mtu = IBV_MTU_1024;
	q.rq_psn = 5;
	q.ah_attr.is_global = 1;
	q.ah_attr.grh.dgid = gid;
	q.ah_attr.grh.hop_limit = 64;
	q.ah_attr.port_num = 1;
	q.dest_qp_num = ini->qp_num;
	q.max_dest_rd_atomic = 1;
	q.min_rnr_timer = 12;
	CHECK(!ibv_modify_qp(tgt, &q, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
	      "target RTR errno %d", errno);
	q.dest_qp_num = tgt->qp_num;
	CHECK(!ibv_modify_qp(ini, &q, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN),
	      "initiator RTR errno %d", errno);
	memset(&q, 0, sizeof(q));
	q.qp_state = IBV_QPS_RTS;
	q.sq_psn = 5;
	q.timeout = 14;
	q.retry_cnt = 7;
	q.rnr_retry = 7;
	q.max_rd_atomic = 1;
	CHECK(!ibv_modify_qp(ini, &q, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
				      IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				      IBV_QP_MAX_QP_RD_ATOMIC), "initiator RTS errno %d", errno);
	struct ibv_sge xs = { (uintptr_t)(other + 3000), 32, bmr->lkey }; /* bmr covers `other` since the rereg */
	struct ibv_recv_wr xr = { .wr_id = 700, .sg_list = &xs, .num_sge = 1 }, *xbad;
	CHECK(ibv_post_srq_recv(xsrq, &xr, &xbad) == 0, "post to the XRC SRQ");
	struct ibv_qp_ex *ix = ibv_qp_to_qp_ex(ini);
	ibv_wr_start(ix);
	ix->wr_id = 701;
	ix->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(ix);
	ibv_wr_set_xrc_srqn(ix, srqn);
	ibv_wr_set_inline_data(ix, "xrc-hello", 9);
	CHECK(ibv_wr_complete(ix) == 0, "XRC send");
	struct got x1 = wait_ex(), x2 = wait_ex();
	struct got *xrecv = x1.wr_id == 700 ? &x1 : &x2;
	CHECK(x1.status == IBV_WC_SUCCESS && x2.status == IBV_WC_SUCCESS, "XRC statuses %d %d",
	      x1.status, x2.status);
	CHECK(xrecv->wr_id == 700 && xrecv->byte_len == 9 && !memcmp(other + 3000, "xrc-hello", 9),
	      "the XRC SRQ received it");
	CHECK(ibv_destroy_qp(ini) == 0 && ibv_destroy_qp(tgt) == 0 && ibv_destroy_srq(xsrq) == 0,
	      "destroy XRC objects");
	CHECK(ibv_close_xrcd(xrcd) == 0, "close_xrcd");

	/* On-demand paging: an implicit region spans the address space. */
	struct ibv_mr *imr = ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND |
					IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(imr, "implicit ODP MR errno %d", errno);
	char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *hole = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(page != MAP_FAILED && hole != MAP_FAILED, "mmap");
	munmap(hole, 4096);
	struct ibv_sge adv = { (uintptr_t)page, 4096, imr->lkey };
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH,
			    &adv, 1) == 0, "prefetch a mapped page");
	adv.addr = (uintptr_t)hole;
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH,
			    &adv, 1) == EFAULT, "prefetch a hole");
	ibv_wr_start(ax);
	ax->wr_id = 60;
	ibv_wr_rdma_write(ax, imr->rkey, (uintptr_t)page + 100);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf, 16);
	CHECK(ibv_wr_complete(ax) == 0, "write through the implicit MR");
	CHECK(wait_ex().status == IBV_WC_SUCCESS, "write to a mapped page completes");
	CHECK(!memcmp(page + 100, abuf, 16), "the WRITE landed");
	/* A WRITE into the hole: a remote access error, and this process lives on. */
	ibv_wr_start(ax);
	ax->wr_id = 61;
	ibv_wr_rdma_write(ax, imr->rkey, (uintptr_t)hole + 8);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf, 16);
	CHECK(ibv_wr_complete(ax) == 0, "write into a hole is posted");
	struct got bad = wait_ex();
	CHECK(bad.wr_id == 61 && bad.status == IBV_WC_REM_ACCESS_ERR, "hole: status %d",
	      bad.status);
	CHECK(!memcmp(page + 100, abuf, 16), "the mapped page is untouched");

	printf("verbs_ext: all checks passed\n");
	return 0;
}
