/* Verb return values and errno against Linux 6.1 + rdma-core 44 (the kernel path and
 * the rxe provider), one named check per rule, run with the softib shim preloaded
 * (tests/kernel_semantics.rs). Each check prints "ok NAME" or "FAIL NAME: detail"; the
 * program goes on after a failure so that one run lists every divergence, and ends with
 * "kernel_semantics: all N checks passed" (exit 0) or "kernel_semantics: M of N checks
 * failed" (exit 1). The source each rule follows is named in the check's comment. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <poll.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>
#include "softib_test.h"

/* From rdma-core's libibverbs/driver.h, which libibverbs-dev does not install; the
 * function is exported (ibv_devinfo calls it). */
enum { GID_TYPE_SYSFS_IB_ROCE_V1 = 0, GID_TYPE_SYSFS_ROCE_V2 = 1 };
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
		       int *type);


static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq, *shared_cq;
static struct ibv_device_attr dev;
static union ibv_gid gid0;

static struct ibv_qp *make_qp(enum ibv_qp_type type, uint32_t send_wr, uint32_t recv_wr,
			      struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = type,
		.cap = { .max_send_wr = send_wr, .max_recv_wr = recv_wr,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	return ibv_create_qp(pd, &ia);
}

static int to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				 .qkey = 0x11111111,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE };
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	mask |= qp->qp_type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS;
	return ibv_modify_qp(qp, &a, mask);
}

static struct ibv_qp_attr rtr_attr(uint32_t dest)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 1;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid0;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	return a;
}

enum { RTR_MASK = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER };

/* True when one of this process's descriptors is a socket bound to UDP port `port`. */
static int holds_udp_port(int port)
{
	for (int fd = 0; fd < 1024; fd++) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		int type = 0;
		socklen_t tl = sizeof(type);
		if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) || type != SOCK_DGRAM)
			continue;
		if (getsockname(fd, (struct sockaddr *)&ss, &len))
			continue;
		if (ss.ss_family == AF_INET && ntohs(((struct sockaddr_in *)&ss)->sin_port) == port)
			return 1;
		if (ss.ss_family == AF_INET6 && ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) == port)
			return 1;
	}
	return 0;
}

static void on_alarm(int sig)
{
	(void)sig;
}

static void device_rules(void)
{
	/* pyverbs test_device: a zero vendor_id means no device; rxe reports 0xFFFFFF. */
	RULE("query_device.vendor_id", dev.vendor_id == 0xFFFFFF && dev.phys_port_cnt == 1,
	     "vendor %#x ports %d", dev.vendor_id, dev.phys_port_cnt);

	/* The verbs_context query_device_ex slot answers (no legacy fallback): ports
	 * in phys_port_cnt_ex (libibverbs cmd_device.c), unsupported features 0. */
	struct ibv_device_attr_ex dx;
	memset(&dx, 0xee, sizeof(dx));
	int rc = ibv_query_device_ex(ctx, NULL, &dx);
	RULE("query_device_ex.real", rc == 0 && dx.phys_port_cnt_ex == 1 &&
	     dx.orig_attr.phys_port_cnt == 1 && dx.orig_attr.vendor_id == 0xFFFFFF &&
	     dx.orig_attr.max_cqe == dev.max_cqe && dx.comp_mask == 0 &&
	     dx.odp_caps.general_caps == (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT) &&
	     dx.max_dm_size == 128 * 1024 && dx.raw_packet_caps == 0 &&
	     dx.completion_timestamp_mask == UINT64_MAX && dx.hca_core_clock == 1000000 &&
	     /* the classic flags in the low half; bit 40 IB_UVERBS_DEVICE_ATOMIC_WRITE */
	     dx.device_cap_flags_ex == (dev.device_cap_flags | (1ULL << 40)),
	     "rc %d ports_ex %u dm %llu flags_ex %#llx", rc, dx.phys_port_cnt_ex,
	     (unsigned long long)dx.max_dm_size, (unsigned long long)dx.device_cap_flags_ex);

	struct ibv_query_device_ex_input in = { .comp_mask = 1 };
	RULE("query_device_ex.bad_comp_mask", ibv_query_device_ex(ctx, &in, &dx) == EINVAL,
	     "wrong return");

	/* verbs.c ibv_query_gid_type answers enum ibv_gid_type_sysfs: RoCEv2 is 1. */
	int t = 77;
	rc = ibv_query_gid_type(ctx, 1, 0, &t);
	RULE("query_gid_type.sysfs_roce_v2", rc == 0 && t == GID_TYPE_SYSFS_ROCE_V2,
	     "rc %d type %d", rc, t);

	/* The GID table has rxe's 1024 slots, only index 0 in use. */
	struct ibv_port_attr port;
	rc = ibv_query_port(ctx, 1, &port);
	RULE("query_port.gid_tbl_len", rc == 0 && port.gid_tbl_len == 1024, "rc %d len %d", rc,
	     port.gid_tbl_len);
	/* verbs.c ibv_query_gid: an empty slot is the zero GID and success, -1 with errno
	 * EINVAL past the table. */
	union ibv_gid g;
	memset(&g, 0xff, sizeof(g));
	rc = ibv_query_gid(ctx, 1, 5, &g);
	RULE("query_gid.empty_slot_is_zero", rc == 0 && g.global.subnet_prefix == 0 &&
	     g.global.interface_id == 0, "rc %d", rc);
	errno = 0;
	rc = ibv_query_gid(ctx, 1, 1024, &g);
	RULE("query_gid.past_table", rc == -1 && errno == EINVAL, "rc %d errno %d", rc, errno);
	/* The kernel's GID query: ENODATA for an empty slot, EINVAL past the table. */
	struct ibv_gid_entry ge;
	rc = ibv_query_gid_ex(ctx, 1, 5, &ge, 0);
	RULE("query_gid_ex.empty_slot", rc == ENODATA, "rc %d", rc);
	rc = ibv_query_gid_ex(ctx, 1, 1024, &ge, 0);
	RULE("query_gid_ex.past_table", rc == EINVAL, "rc %d", rc);
	rc = ibv_query_gid_ex(ctx, 1, 0, &ge, 0);
	RULE("query_gid_ex.roce_v2", rc == 0 && ge.gid_type == IBV_GID_TYPE_ROCE_V2, "rc %d", rc);
	struct ibv_gid_entry tbl[8];
	ssize_t n = ibv_query_gid_table(ctx, tbl, 8, 0);
	RULE("query_gid_table.valid_entries_only", n == 1 && tbl[0].gid_index == 0, "n %zd", n);
	t = 77;
	rc = ibv_query_gid_type(ctx, 1, 5, &t);
	RULE("query_gid_type.empty_slot", rc == 0 && t == GID_TYPE_SYSFS_IB_ROCE_V1, "rc %d t %d",
	     rc, t);

	/* query_port returns the errno, and leaves it in errno (uverbs ioctl). */
	struct ibv_port_attr pa;
	errno = 0;
	rc = ibv_query_port(ctx, 2, &pa);
	RULE("query_port.bad_port", rc == EINVAL && errno == EINVAL, "rc %d errno %d", rc, errno);

	/* verbs.c ibv_query_pkey / ibv_get_pkey_index read sysfs: -1, errno ENOENT for a
	 * slot or P_Key that is not there. */
	__be16 pk;
	rc = ibv_query_pkey(ctx, 1, 0, &pk);
	RULE("query_pkey.default", rc == 0 && pk == htobe16(0xffff), "rc %d", rc);
	errno = 0;
	rc = ibv_query_pkey(ctx, 1, 70, &pk);
	RULE("query_pkey.past_table", rc == -1 && errno == ENOENT, "rc %d errno %d", rc, errno);
	RULE("get_pkey_index.default", ibv_get_pkey_index(ctx, 1, htobe16(0xffff)) == 0, "no");
	errno = 0;
	rc = ibv_get_pkey_index(ctx, 1, htobe16(0x1234));
	RULE("get_pkey_index.absent", rc == -1 && errno == ENOENT, "rc %d errno %d", rc, errno);

	/* kernel uverbs: 1 completion vector on rxe. */
	RULE("context.num_comp_vectors", ctx->num_comp_vectors == 1, "%d", ctx->num_comp_vectors);
}

static void cq_rules(void)
{
	/* rxe_cq.c rxe_cq_chk_attr: cqe <= 0 or > max_cqe is EINVAL. */
	errno = 0;
	RULE("create_cq.cqe_0", !ibv_create_cq(ctx, 0, NULL, NULL, 0) && errno == EINVAL,
	     "errno %d", errno);
	errno = 0;
	RULE("create_cq.cqe_over_max",
	     !ibv_create_cq(ctx, dev.max_cqe + 1, NULL, NULL, 0) && errno == EINVAL,
	     "errno %d", errno);
	/* uverbs_cmd.c create_cq: comp_vector >= num_comp_vectors is EINVAL. */
	errno = 0;
	RULE("create_cq.comp_vector_out_of_range",
	     !ibv_create_cq(ctx, 4, NULL, NULL, ctx->num_comp_vectors) && errno == EINVAL,
	     "errno %d", errno);
	struct ibv_cq *ok = ibv_create_cq(ctx, 4, NULL, NULL, ctx->num_comp_vectors - 1);
	RULE("create_cq.last_comp_vector", ok != NULL, "errno %d", errno);
	if (ok)
		ibv_destroy_cq(ok);

	/* A CQ a QP uses cannot go: EBUSY (uverbs usecnt). */
	struct ibv_cq *busy = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	NEED(busy, "create_cq");
	struct ibv_qp_init_attr ia = { .send_cq = busy, .recv_cq = busy, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	NEED(qp, "create_qp");
	errno = 0;
	int rc = ibv_destroy_cq(busy);
	RULE("destroy_cq.busy", rc == EBUSY && errno == EBUSY, "rc %d errno %d", rc, errno);
	ibv_destroy_qp(qp);
	RULE("destroy_cq.after_qp", ibv_destroy_cq(busy) == 0, "errno %d", errno);

	/* verbs.c ibv_destroy_comp_channel: EBUSY while a CQ uses it. */
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	NEED(ch, "create_comp_channel");
	struct ibv_cq *ccq = ibv_create_cq(ctx, 4, NULL, ch, 0);
	NEED(ccq, "create_cq with channel");
	RULE("destroy_comp_channel.busy", ibv_destroy_comp_channel(ch) == EBUSY, "not EBUSY");

	/* A signal without SA_RESTART ends a blocking ibv_get_cq_event with EINTR, as a
	 * read on the kernel's channel fd does (qperf ends its tests with SIGALRM). */
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = { .it_value = { .tv_usec = 100000 } };
	setitimer(ITIMER_REAL, &it, NULL);
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	errno = 0;
	int r = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	RULE("get_cq_event.eintr", r == -1 && errno == EINTR, "rc %d errno %d", r, errno);
	signal(SIGALRM, SIG_DFL);

	ibv_destroy_cq(ccq);
	RULE("destroy_comp_channel.idle", ibv_destroy_comp_channel(ch) == 0, "errno %d", errno);
}

static void mr_rules(void)
{
	static char buf[8192] __attribute__((aligned(4096)));
	struct ibv_mr *mr;

	/* ib_umem_get: a region of no page is EINVAL. */
	errno = 0;
	RULE("reg_mr.length_0", !ibv_reg_mr(pd, buf, 0, IBV_ACCESS_LOCAL_WRITE) && errno == EINVAL,
	     "errno %d", errno);
	/* ib_check_mr_access: remote write/atomic need local write. */
	errno = 0;
	RULE("reg_mr.remote_write_needs_local_write",
	     !ibv_reg_mr(pd, buf, 64, IBV_ACCESS_REMOTE_WRITE) && errno == EINVAL, "errno %d", errno);
	errno = 0;
	RULE("reg_mr.remote_atomic_needs_local_write",
	     !ibv_reg_mr(pd, buf, 64, IBV_ACCESS_REMOTE_ATOMIC) && errno == EINVAL, "errno %d", errno);
	/* ib_check_mr_access: bits outside IB_ACCESS_SUPPORTED are EINVAL. */
	errno = 0;
	RULE("reg_mr.undefined_access_bit", !ibv_reg_mr(pd, buf, 64, 1 << 12) && errno == EINVAL,
	     "errno %d", errno);
	/* The device has on-demand paging (odp_caps), so ON_DEMAND is accepted
	 * (ib_check_mr_access refuses it only on a device without ODP). */
	errno = 0;
	mr = ibv_reg_mr(pd, buf, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	RULE("reg_mr.on_demand_with_odp", mr != NULL, "errno %d", errno);
	if (mr)
		ibv_dereg_mr(mr);
	/* The optional range (RELAXED_ORDERING) is accepted and may be ignored. */
	mr = ibv_reg_mr(pd, buf, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
	RULE("reg_mr.relaxed_ordering_accepted", mr != NULL, "errno %d", errno);
	if (mr)
		ibv_dereg_mr(mr);
	/* ib_uverbs_reg_mr: iova and address must share their offset in the page. */
	errno = 0;
	RULE("reg_mr_iova.page_offset_differs",
	     !ibv_reg_mr_iova(pd, buf + 16, 64, 0x10000, IBV_ACCESS_LOCAL_WRITE) && errno == EINVAL,
	     "errno %d", errno);
	mr = ibv_reg_mr_iova(pd, buf + 16, 64, 0x10010, IBV_ACCESS_LOCAL_WRITE);
	RULE("reg_mr_iova.same_page_offset", mr != NULL, "errno %d", errno);
	if (mr)
		ibv_dereg_mr(mr);

	/* A PD with a live MR cannot go: EBUSY, errno EBUSY. */
	struct ibv_pd *p2 = ibv_alloc_pd(ctx);
	NEED(p2, "alloc_pd");
	mr = ibv_reg_mr(p2, buf, 64, IBV_ACCESS_LOCAL_WRITE);
	NEED(mr, "reg_mr");
	errno = 0;
	int rc = ibv_dealloc_pd(p2);
	RULE("dealloc_pd.busy_with_mr", rc == EBUSY && errno == EBUSY, "rc %d errno %d", rc, errno);
	ibv_dereg_mr(mr);
	RULE("dealloc_pd.idle", ibv_dealloc_pd(p2) == 0, "errno %d", errno);
}

static void qp_rules(void)
{
	/* rxe_qp.c rxe_qp_chk_cap checks upper bounds only: 0 WRs is a legal queue. */
	struct ibv_qp *qp = make_qp(IBV_QPT_RC, 0, 4, NULL);
	RULE("create_qp.zero_send_wr", qp != NULL, "errno %d", errno);
	if (qp)
		ibv_destroy_qp(qp);
	qp = make_qp(IBV_QPT_RC, 4, 0, NULL);
	RULE("create_qp.zero_recv_wr", qp != NULL, "errno %d", errno);
	if (qp) {
		/* rxe: a queue of no slot is always full: ENOMEM, bad_wr at the WR. */
		struct ibv_recv_wr zwr = { .wr_id = 9 }, *zbad = NULL;
		int zrc = to_init(qp) ? -1 : ibv_post_recv(qp, &zwr, &zbad);
		RULE("post_recv.zero_recv_wr_queue_full", zrc == ENOMEM && zbad == &zwr, "rc %d",
		     zrc);
		ibv_destroy_qp(qp);
	}

	errno = 0;
	qp = make_qp(IBV_QPT_RC, dev.max_qp_wr + 1, 1, NULL);
	RULE("create_qp.send_wr_over_max", !qp && errno == EINVAL, "errno %d", errno);
	/* rxe_qp_chk_init: a missing CQ is EINVAL. */
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = NULL, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	errno = 0;
	RULE("create_qp.missing_cq", !ibv_create_qp(pd, &ia) && errno == EINVAL, "errno %d", errno);
	/* rxe_qp_chk_init: a type rxe lacks is EOPNOTSUPP. */
	errno = 0;
	RULE("create_qp.raw_packet", !make_qp(IBV_QPT_RAW_PACKET, 1, 1, NULL) &&
	     errno == EOPNOTSUPP, "errno %d", errno);

	qp = make_qp(IBV_QPT_RC, 4, 4, NULL);
	NEED(qp, "create_qp");

	/* rxe.c rxe_post_recv: EINVAL in RESET (C10-97.2.1); bad_wr names the WR. */
	char b[16];
	struct ibv_sge sge = { .addr = (uintptr_t)b, .length = 0, .lkey = 0 };
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &sge, .num_sge = 0 }, *rbad = NULL;
	int rc = ibv_post_recv(qp, &rwr, &rbad);
	RULE("post_recv.reset", rc == EINVAL && rbad == &rwr, "rc %d", rc);

	/* ib_modify_qp_is_ok: RESET->RESET with nothing to change is a valid no-op. */
	struct ibv_qp_attr none;
	memset(&none, 0, sizeof(none));
	rc = ibv_modify_qp(qp, &none, 0);
	RULE("modify_qp.empty_mask", rc == 0, "rc %d", rc);

	/* ib_modify_qp_is_ok: no RESET->RTS transition; EINVAL and errno. */
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS };
	errno = 0;
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	RULE("modify_qp.bad_transition", rc == EINVAL && errno == EINVAL, "rc %d errno %d", rc,
	     errno);
	/* ib_modify_qp_is_ok: RESET->INIT needs PKEY_INDEX, PORT, ACCESS_FLAGS. */
	a.qp_state = IBV_QPS_INIT;
	errno = 0;
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	RULE("modify_qp.missing_required_attr", rc == EINVAL && errno == EINVAL, "rc %d", rc);
	/* ib_modify_qp_is_ok: an attribute the transition does not take (QKEY on RC). */
	struct ibv_qp_attr ai = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 1 };
	rc = ibv_modify_qp(qp, &ai, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				    IBV_QP_ACCESS_FLAGS | IBV_QP_QKEY);
	RULE("modify_qp.unexpected_attr", rc == EINVAL, "rc %d", rc);
	/* rxe_qp_chk_attr: port 2 does not exist. */
	ai.port_num = 2;
	rc = ibv_modify_qp(qp, &ai, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				    IBV_QP_ACCESS_FLAGS);
	RULE("modify_qp.bad_port", rc == EINVAL, "rc %d", rc);
	/* uverbs modify_qp: mask bits softib lacks: EOPNOTSUPP. */
	rc = ibv_modify_qp(qp, &a, IBV_QP_RATE_LIMIT);
	RULE("modify_qp.unsupported_mask", rc == EOPNOTSUPP && errno == EOPNOTSUPP, "rc %d", rc);
	NEED(to_init(qp) == 0, "INIT");
	RULE("modify_qp.state_field", qp->state == IBV_QPS_INIT, "state %d", qp->state);
	/* rxe.c rxe_post_one_recv: more SGEs than max_recv_sge: EINVAL, bad_wr at the WR. */
	struct ibv_sge rs2[2] = { { .addr = (uintptr_t)b, .length = 8 },
				  { .addr = (uintptr_t)b + 8, .length = 8 } };
	struct ibv_recv_wr rwr2 = { .wr_id = 4, .sg_list = rs2, .num_sge = 2 }, *rbad2 = NULL;
	rc = ibv_post_recv(qp, &rwr2, &rbad2);
	RULE("post_recv.too_many_sge", rc == EINVAL && rbad2 == &rwr2, "rc %d", rc);

	/* rxe_verbs.c rxe_post_send: a send queue that is not ready (before RTS) is EINVAL,
	 * bad_wr at the WR. */
	static char sb[64];
	struct ibv_mr *smr = ibv_reg_mr(pd, sb, sizeof(sb), IBV_ACCESS_LOCAL_WRITE);
	NEED(smr, "reg_mr");
	struct ibv_sge ss[2] = { { .addr = (uintptr_t)sb, .length = 8, .lkey = smr->lkey },
				 { .addr = (uintptr_t)sb + 8, .length = 8, .lkey = smr->lkey } };
	struct ibv_send_wr swr = { .wr_id = 1, .sg_list = ss, .num_sge = 1,
				   .opcode = IBV_WR_SEND }, *sbad = NULL;
	rc = ibv_post_send(qp, &swr, &sbad);
	RULE("post_send.before_rts", rc == EINVAL && sbad == &swr, "rc %d", rc);


	a = rtr_attr(qp->qp_num);
	a.ah_attr.is_global = 0;
	errno = 0;
	rc = ibv_modify_qp(qp, &a, RTR_MASK);
	RULE("modify_qp.rtr_without_grh", rc == EINVAL && errno == EINVAL, "rc %d errno %d", rc,
	     errno);
	/* uverbs_cmd.c modify_qp: the AV's port must exist. */
	a = rtr_attr(qp->qp_num);
	a.ah_attr.port_num = 0;
	rc = ibv_modify_qp(qp, &a, RTR_MASK);
	RULE("modify_qp.av_port_0", rc == EINVAL, "rc %d", rc);
	/* rdma_get_gid_attr: an empty GID slot (3 < 1024: inside the table) is ENODATA. */
	a = rtr_attr(qp->qp_num);
	a.ah_attr.grh.sgid_index = 3;
	rc = ibv_modify_qp(qp, &a, RTR_MASK);
	RULE("modify_qp.empty_sgid_index", rc == ENODATA, "rc %d", rc);
	/* rxe_qp_chk_attr: timeout > 31 is EINVAL (RTR->RTS below). */
	/* Providers take the flow label's low 20 bits (UCX rc_verbs passes wider). */
	a = rtr_attr(qp->qp_num);
	a.ah_attr.grh.flow_label = 0xFFFFFFFF;
	rc = ibv_modify_qp(qp, &a, RTR_MASK);
	RULE("modify_qp.flow_label_low_20_bits", rc == 0, "rc %d", rc);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	rc = ibv_query_qp(qp, &qa, IBV_QP_AV, &qi);
	RULE("query_qp.flow_label_masked", rc == 0 && qa.ah_attr.grh.flow_label == 0xFFFFF,
	     "rc %d label %#x", rc, qa.ah_attr.grh.flow_label);
	struct ibv_qp_attr rts = { .qp_state = IBV_QPS_RTS, .sq_psn = 1, .timeout = 32,
				   .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 1 };
	int rts_mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		       IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	rc = ibv_modify_qp(qp, &rts, rts_mask);
	RULE("modify_qp.timeout_over_31", rc == EINVAL, "rc %d", rc);
	rts.timeout = 14;
	rts.max_rd_atomic = dev.max_qp_rd_atom + 1;
	rc = ibv_modify_qp(qp, &rts, rts_mask);
	RULE("modify_qp.max_rd_atomic_over_max", rc == EINVAL, "rc %d", rc);
	rts.max_rd_atomic = 1;
	NEED(ibv_modify_qp(qp, &rts, rts_mask) == 0, "RTS");
	/* rxe.c validate_send_wr: more SGEs than max_send_sge, inline data beyond
	 * max_inline_data, an atomic on an unaligned address: EINVAL, bad_wr at the WR. */
	struct ibv_qp_attr cq_attr;
	struct ibv_qp_init_attr cq_init;
	NEED(ibv_query_qp(qp, &cq_attr, IBV_QP_CAP, &cq_init) == 0, "query_qp");
	swr.num_sge = 2;
	sbad = NULL;
	rc = ibv_post_send(qp, &swr, &sbad);
	RULE("post_send.too_many_sge", cq_init.cap.max_send_sge < 2 ? rc == EINVAL && sbad == &swr
								 : rc == 0,
	     "rc %d max_send_sge %u", rc, cq_init.cap.max_send_sge);
	static char big[4096];
	struct ibv_sge bs = { .addr = (uintptr_t)big, .length = sizeof(big), .lkey = 0 };
	struct ibv_send_wr iwr = { .wr_id = 2, .sg_list = &bs, .num_sge = 1, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_INLINE }, *ibad = NULL;
	rc = ibv_post_send(qp, &iwr, &ibad);
	RULE("post_send.inline_too_long", rc == EINVAL && ibad == &iwr, "rc %d", rc);
	struct ibv_send_wr awr = { .wr_id = 3, .sg_list = ss, .num_sge = 1,
				   .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD }, *abad = NULL;
	awr.wr.atomic.remote_addr = 0x1004;
	awr.wr.atomic.rkey = 1;
	rc = ibv_post_send(qp, &awr, &abad);
	RULE("post_send.atomic_unaligned", rc == EINVAL && abad == &awr, "rc %d", rc);
	ibv_dereg_mr(smr);
	ibv_destroy_qp(qp);

	/* SRQ: rxe_srq_chk_attr bounds, EBUSY while a QP uses it. */
	struct ibv_srq_init_attr si = { .attr = { .max_wr = 0, .max_sge = 1 } };
	errno = 0;
	RULE("create_srq.max_wr_0", !ibv_create_srq(pd, &si) && errno == EINVAL, "errno %d", errno);
	si.attr.max_wr = 4;
	si.attr.max_sge = dev.max_srq_sge + 1;
	errno = 0;
	RULE("create_srq.max_sge_over_max", !ibv_create_srq(pd, &si) && errno == EINVAL,
	     "errno %d", errno);
	si.attr.max_sge = 0;
	struct ibv_srq *srq = ibv_create_srq(pd, &si);
	RULE("create_srq.max_sge_0_is_1", srq && si.attr.max_sge == 1, "errno %d sge %u", errno,
	     si.attr.max_sge);
	if (srq) {
		struct ibv_srq_attr sa = { .srq_limit = dev.max_srq_wr + 1 };
		errno = 0;
		rc = ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT);
		RULE("modify_srq.limit_over_max", rc == EINVAL && errno == EINVAL, "rc %d", rc);
		qp = make_qp(IBV_QPT_RC, 1, 0, srq);
		NEED(qp, "create_qp with srq");
		/* rxe.c rxe_post_recv: a QP on an SRQ has no receive queue: EINVAL. */
		NEED(to_init(qp) == 0, "INIT on srq");
		struct ibv_recv_wr qwr = { .wr_id = 5 }, *qbad = NULL;
		rc = ibv_post_recv(qp, &qwr, &qbad);
		RULE("post_recv.qp_on_srq", rc == EINVAL, "rc %d", rc);
		/* rxe.c rxe_post_one_recv: more SGEs than the SRQ's max_sge: EINVAL. */
		struct ibv_sge two[2] = { { 0 }, { 0 } };
		struct ibv_recv_wr swr2 = { .wr_id = 6, .sg_list = two, .num_sge = 2 }, *sbad2 = NULL;
		rc = ibv_post_srq_recv(srq, &swr2, &sbad2);
		RULE("post_srq_recv.too_many_sge", rc == EINVAL && sbad2 == &swr2, "rc %d", rc);
		errno = 0;
		rc = ibv_destroy_srq(srq);
		RULE("destroy_srq.busy", rc == EBUSY && errno == EBUSY, "rc %d errno %d", rc, errno);
		ibv_destroy_qp(qp);
		RULE("destroy_srq.idle", ibv_destroy_srq(srq) == 0, "errno %d", errno);
	}
}

static void ud_rules(void)
{
	/* Address handles: RoCE needs a GRH; a wide flow label is fine. */
	struct ibv_ah_attr aa = { .is_global = 0, .port_num = 1 };
	errno = 0;
	RULE("create_ah.no_grh", !ibv_create_ah(pd, &aa) && errno == EINVAL, "errno %d", errno);
	aa.is_global = 1;
	aa.grh.dgid = gid0;
	aa.port_num = 2;
	errno = 0;
	RULE("create_ah.bad_port", !ibv_create_ah(pd, &aa) && errno == EINVAL, "errno %d", errno);
	aa.port_num = 1;
	aa.grh.hop_limit = 64;
	aa.grh.flow_label = 0xFFFFFFFF;
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	RULE("create_ah.flow_label_low_20_bits", ah != NULL, "errno %d", errno);
	NEED(ah, "create_ah");

	/* wc.sl of a UD receive: mlx5's RoCE packet type, UDP (bit 3) + IPv4 (2). A CQ of
	 * its own: the earlier checks left completions in the shared one. */
	struct ibv_comp_channel *uch = ibv_create_comp_channel(ctx);
	NEED(uch, "UD channel");
	cq = ibv_create_cq(ctx, 16, NULL, uch, 0);
	NEED(cq, "UD CQ");
	NEED(ibv_req_notify_cq(cq, 0) == 0, "req_notify_cq");
	struct ibv_qp *s = make_qp(IBV_QPT_UD, 4, 4, NULL), *r = make_qp(IBV_QPT_UD, 4, 4, NULL);
	NEED(s && r, "UD QPs");
	struct ibv_qp *both[2] = { s, r };
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
		NEED(to_init(both[i]) == 0, "UD INIT");
		NEED(ibv_modify_qp(both[i], &a, IBV_QP_STATE) == 0, "UD RTR");
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = 1;
		NEED(ibv_modify_qp(both[i], &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0, "UD RTS");
	}
	static char rbuf[40 + 64], sbuf[64] = "hello";
	struct ibv_mr *rmr = ibv_reg_mr(pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *smr = ibv_reg_mr(pd, sbuf, sizeof(sbuf), 0);
	NEED(rmr && smr, "UD MRs");
	struct ibv_sge rs = { .addr = (uintptr_t)rbuf, .length = sizeof(rbuf), .lkey = rmr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 7, .sg_list = &rs, .num_sge = 1 }, *rbad;
	NEED(ibv_post_recv(r, &rwr, &rbad) == 0, "UD post_recv");
	struct ibv_sge ss = { .addr = (uintptr_t)sbuf, .length = 8, .lkey = smr->lkey };
	struct ibv_send_wr swr = { .wr_id = 8, .sg_list = &ss, .num_sge = 1,
				   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *sbad;
	swr.wr.ud.ah = ah;
	swr.wr.ud.remote_qpn = r->qp_num;
	swr.wr.ud.remote_qkey = 0x11111111;
	NEED(ibv_post_send(s, &swr, &sbad) == 0, "UD post_send");
	struct ibv_wc wc, recv = { .status = IBV_WC_GENERAL_ERR };
	int got = 0;
	for (long i = 0; i < 50000000L && got < 2; i++) {
		if (ibv_poll_cq(cq, 1, &wc) == 1) {
			got++;
			if (wc.opcode == IBV_WC_RECV)
				recv = wc;
		}
	}
	RULE("ud_recv.wc_sl_is_roce_packet_type",
	     got == 2 && recv.status == IBV_WC_SUCCESS && (recv.wc_flags & IBV_WC_GRH) &&
	     recv.sl == 0xA, "got %d status %d flags %#x sl %#x", got, recv.status,
	     recv.wc_flags, recv.sl);
	/* The completion event is queued on the channel; destroying the CQ takes it off
	 * (uverbs releases a destroyed CQ's events), so no later ibv_get_cq_event returns
	 * the freed CQ. */
	struct pollfd pfd = { .fd = uch->fd, .events = POLLIN };
	int ready = poll(&pfd, 1, 5000);

	/* Multicast (kernel ib_attach_mcast / rxe_attach_mcast): rxe's limits; a UD QP joins a
	 * multicast GID (IPv4-mapped 239.x on RoCEv2), twice is no error; a unicast GID or a
	 * detach of a QP not attached is EINVAL. */
	RULE("query_device.mcast_limits",
	     dev.max_mcast_grp == 8192 && dev.max_mcast_qp_attach == 56 &&
	     dev.max_total_mcast_qp_attach == 0x70000, "%d %d %d", dev.max_mcast_grp,
	     dev.max_mcast_qp_attach, dev.max_total_mcast_qp_attach);
	union ibv_gid mgid = { .raw = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 77, 141, 9 } };
	RULE("attach_mcast.unicast_gid", ibv_attach_mcast(r, &gid0, 0) == EINVAL && errno == EINVAL,
	     "errno %d", errno);
	RULE("attach_mcast.ud", ibv_attach_mcast(r, &mgid, 0) == 0, "errno %d", errno);
	RULE("attach_mcast.again", ibv_attach_mcast(r, &mgid, 0) == 0, "errno %d", errno);
	RULE("detach_mcast.attached", ibv_detach_mcast(r, &mgid, 0) == 0, "errno %d", errno);
	RULE("detach_mcast.not_attached",
	     ibv_detach_mcast(r, &mgid, 0) == EINVAL && errno == EINVAL, "errno %d", errno);
	NEED(ibv_attach_mcast(s, &mgid, 0) == 0, "attach before destroy");
	ibv_destroy_qp(s);
	ibv_destroy_qp(r);
	ibv_destroy_cq(cq);
	cq = shared_cq;
	fcntl(uch->fd, F_SETFL, fcntl(uch->fd, F_GETFL) | O_NONBLOCK);
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx;
	errno = 0;
	int er = ibv_get_cq_event(uch, &ev_cq, &ev_ctx);
	RULE("destroy_cq.discards_queued_events", ready == 1 && er == -1 && errno == EAGAIN,
	     "poll %d rc %d errno %d cq %p", ready, er, errno, (void *)ev_cq);
	RULE("destroy_comp_channel.after_discard", ibv_destroy_comp_channel(uch) == 0, "busy");
	ibv_dereg_mr(rmr);
	ibv_dereg_mr(smr);
	ibv_destroy_ah(ah);
}

int main(void)
{
	int num;
	struct ibv_device **list = ibv_get_device_list(&num);
	NEED(list && num == 1, "device list");
	ctx = ibv_open_device(list[0]);
	NEED(ctx, "open");
	/* A forked child must not keep the device's address: if it outlives the parent's
	 * device, the parent's next ibv_open_device cannot bind the address (ENODEV; what
	 * failed pyverbs' tests after its multi-process ones). First thing, before anything
	 * else holds the device, so that closing the context really closes it. */
	pid_t child = fork();
	NEED(child >= 0, "fork");
	if (child == 0) {
		usleep(500000);
		_exit(holds_udp_port(4791) ? 1 : 0);
	}
	ibv_close_device(ctx);
	ctx = ibv_open_device(list[0]);
	RULE("open_device.while_forked_child_lives", ctx != NULL, "errno %d", errno);
	int status = -1;
	waitpid(child, &status, 0);
	RULE("fork.child_keeps_no_device_socket", WIFEXITED(status) && WEXITSTATUS(status) == 0,
	     "status %#x", status);
	NEED(ctx, "open again");
	RULE("fork.parent_keeps_device_socket", holds_udp_port(4791), "parent lost its socket");
	ibv_free_device_list(list);
	NEED(ibv_query_device(ctx, &dev) == 0, "query_device");
	NEED(ibv_query_gid(ctx, 1, 0, &gid0) == 0, "gid 0");
	pd = ibv_alloc_pd(ctx);
	NEED(pd, "alloc_pd");
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	NEED(cq, "create_cq");
	shared_cq = cq;

	device_rules();
	cq_rules();
	mr_rules();
	qp_rules();
	ud_rules();

	/* The PD still has the CQ's QPs gone; nothing else: it goes. */
	ibv_destroy_cq(cq);
	RULE("dealloc_pd.idle_at_end", ibv_dealloc_pd(pd) == 0, "errno %d", errno);
	ibv_close_device(ctx);
	return rules_verdict("kernel_semantics");
}
