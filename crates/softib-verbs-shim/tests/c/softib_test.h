/* What the C test programs in this directory share: their check macros, waiting for one
 * completion, and bringing a connected QP of one device up to RTS against another QP of
 * the same device (the device reaches itself through its own UDP address). Each program is
 * one translation unit compiled by tests/common/mod.rs, so the static definitions here are
 * that program's own. */
#ifndef SOFTIB_TEST_H
#define SOFTIB_TEST_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

/* A check whose failure ends the program (exit 1) with the line and the condition. */
#define CHECK(cond, ...)                                                            \
	do {                                                                        \
		if (!(cond)) {                                                      \
			fprintf(stderr, "FAILED line %d: %s: ", __LINE__, #cond);   \
			fprintf(stderr, __VA_ARGS__);                               \
			fprintf(stderr, "\n");                                      \
			exit(1);                                                    \
		}                                                                   \
	} while (0)

/* Named rules: each prints "ok NAME" or "FAIL NAME: ...", the program goes on, and
 * rules_verdict() prints the closing line and gives the exit status. */
static int rule_checks, rule_failures;

#define RULE(name, cond, ...)                                                       \
	do {                                                                        \
		rule_checks++;                                                      \
		if (cond) {                                                         \
			printf("ok %s\n", name);                                    \
		} else {                                                            \
			rule_failures++;                                            \
			printf("FAIL %s: %s: ", name, #cond);                       \
			printf(__VA_ARGS__);                                        \
			printf("\n");                                               \
		}                                                                   \
		fflush(stdout);                                                     \
	} while (0)

/* A set-up step the rules depend on: without it the rest cannot run (exit 2). */
#define NEED(cond, what)                                                            \
	do {                                                                        \
		if (!(cond)) {                                                      \
			printf("FAIL setup: %s (errno %d)\n", what, errno);         \
			exit(2);                                                    \
		}                                                                   \
	} while (0)

/* Prints "PROGRAM: all N checks passed" or "PROGRAM: M of N checks failed"; the exit status. */
static inline int rules_verdict(const char *program)
{
	if (rule_failures) {
		printf("%s: %d of %d checks failed\n", program, rule_failures, rule_checks);
		return 1;
	}
	printf("%s: all %d checks passed\n", program, rule_checks);
	return 0;
}

/* Busy-polls `cq` for one completion; ends the program if none comes. */
static inline struct ibv_wc wait_one_on(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	for (long i = 0; i < 200000000L; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "poll_cq returned %d", n);
		if (n == 1)
			return wc;
	}
	CHECK(0, "no completion");
	return wc;
}

/* Brings an RC or UC `qp` through INIT, RTR and RTS to `dest` on the device whose GID is
 * `gid`: path MTU 1024, both PSNs `psn`, the remote rights `access` (plus LOCAL_WRITE), and
 * on RC 4 reads/atomics each way, timeout 14, 7 retries. The attribute masks are the ones
 * ibv_modify_qp requires per transition (IBA 11.2.4.2, rdma-core's qp_attr mask table).
 * Returns 0, or the errno of the transition that failed with its name in `*step`. */
static inline int connect_to(struct ibv_qp *qp, uint32_t dest, union ibv_gid gid, uint32_t psn,
			     int access, const char **step)
{
	int rc = qp->qp_type == IBV_QPT_RC;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | access };
	*step = "INIT";
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					  IBV_QP_ACCESS_FLAGS))
		return errno;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = psn;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (rc)
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	*step = "RTR";
	if (ibv_modify_qp(qp, &a, mask))
		return errno;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (rc)
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	*step = "RTS";
	if (ibv_modify_qp(qp, &a, mask))
		return errno;
	return 0;
}

/* connect_to, ending the program when a transition fails. */
#define CONNECT(qp, dest, gid, psn, access)                                         \
	do {                                                                        \
		const char *step_;                                                  \
		int err_ = connect_to((qp), (dest), (gid), (psn), (access), &step_); \
		CHECK(err_ == 0, "%s errno %d", step_, err_);                       \
	} while (0)

#endif
