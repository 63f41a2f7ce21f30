/* A C program written against rdma-core 44's <rdma/rdma_cma.h>, linked with the stock
 * librdmacm and run with the softib shim preloaded (tests/rdmacm_api.rs). One process, one
 * device: a listener and active ids on one event channel connect to the device's own
 * address. It checks what the stock tools do not show: an O_NONBLOCK channel, the
 * CONNECT_REQUEST's new id and listen_id, private data in REQ, REP and REJ, REJECTED with
 * reason 28 (rdma_reject) and 8 (nobody listens), addresses and ports, data over the
 * connected QPs, DISCONNECTED on both sides, rdma_getaddrinfo and rdma_event_str; then
 * synchronous endpoints (rdma_create_ep, rdma_get_request, rdma_accept and rdma_connect
 * without a channel) with the <rdma/rdma_verbs.h> helpers on the CQs rdma_create_qp made.
 * Exit status 0 and "rdmacm_api: all checks passed" on success. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define CHECK(cond, ...)                                                    \
	do {                                                                \
		if (!(cond)) {                                              \
			fprintf(stderr, "FAILED line %d: %s: ", __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                       \
			fprintf(stderr, "\n");                              \
			exit(1);                                            \
		}                                                           \
	} while (0)

static struct rdma_event_channel *ch;

/* The next event (the channel is non-blocking: poll first). */
static struct rdma_cm_event *next_event(void)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *e;
	int n = poll(&p, 1, 20000);
	CHECK(n == 1, "no event within 20 s (poll %d)", n);
	CHECK(rdma_get_cm_event(ch, &e) == 0, "rdma_get_cm_event: errno %d", errno);
	return e;
}

static struct rdma_cm_event *expect(enum rdma_cm_event_type t)
{
	struct rdma_cm_event *e = next_event();
	CHECK(e->event == t, "got %s (status %d), wanted %s", rdma_event_str(e->event),
	      e->status, rdma_event_str(t));
	return e;
}

static struct sockaddr_in addr_of(const char *ip, uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	CHECK(inet_pton(AF_INET, ip, &a.sin_addr) == 1, "address %s", ip);
	return a;
}

/* An active id resolved to ip:port, with a QP (CQs made by rdma_create_qp). */
static struct rdma_cm_id *resolved(const char *ip, uint16_t port)
{
	struct rdma_cm_id *id;
	struct sockaddr_in dst = addr_of(ip, port);
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct rdma_cm_event *e;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create_id: errno %d", errno);
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0, "resolve_addr: %d",
	      errno);
	e = expect(RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(e->id == id && e->status == 0, "ADDR_RESOLVED for another id");
	rdma_ack_cm_event(e);
	CHECK(id->verbs != NULL, "resolve_addr binds the id to the device");
	CHECK(rdma_get_dst_port(id) == htons(port), "dst port %u", ntohs(rdma_get_dst_port(id)));
	CHECK(ntohs(rdma_get_src_port(id)) >= 32768, "ephemeral src port %u",
	      ntohs(rdma_get_src_port(id)));
	CHECK(rdma_resolve_route(id, 2000) == 0, "resolve_route: %d", errno);
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ROUTE_RESOLVED));
	CHECK(id->route.num_paths == 1 && id->route.path_rec != NULL, "one path record");
	CHECK(rdma_create_qp(id, NULL, &qa) == 0, "create_qp: errno %d", errno);
	CHECK(id->qp && id->send_cq && id->recv_cq && id->pd, "QP, CQs and PD on the id");
	CHECK(id->qp->state == IBV_QPS_INIT, "rdma_create_qp leaves the QP in INIT (%d)",
	      id->qp->state);
	return id;
}

/* The process's open file descriptors: each completion channel holds one, and a CQ left
 * alive keeps its channel from being destroyed. */
static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	CHECK(d != NULL, "opendir /proc/self/fd: errno %d", errno);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* An rdma_create_qp that must fail (EINVAL from the CQ or QP caps): it leaves no CQ or
 * completion channel behind, neither on the id nor in the caller's attributes nor as an
 * open fd. */
static void create_qp_fails_cleanly(struct rdma_cm_id *id, struct ibv_qp_init_attr *qa,
				    const char *what)
{
	int before = open_fds();
	CHECK(rdma_create_qp(id, NULL, qa) == -1, "create_qp with %s succeeded", what);
	CHECK(open_fds() == before, "create_qp with %s: %d open fds after, %d before", what,
	      open_fds(), before);
	CHECK(!id->qp && !id->send_cq && !id->recv_cq && !id->send_cq_channel &&
	      !id->recv_cq_channel, "create_qp with %s leaves CQs or channels on the id", what);
	CHECK(!qa->send_cq && !qa->recv_cq, "create_qp with %s leaves CQs in the attributes",
	      what);
}

static void connect_with(struct rdma_cm_id *id, const char *pd)
{
	struct rdma_conn_param cp = { .private_data = pd,
		.private_data_len = (uint8_t)(strlen(pd) + 1),
		.responder_resources = 1, .initiator_depth = 1, .retry_count = 7,
		.rnr_retry_count = 7 };
	CHECK(rdma_connect(id, &cp) == 0, "rdma_connect: errno %d", errno);
}

/* ----- synchronous endpoints (a server thread and the main thread) ----- */

static const char *sync_ip;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t listening = PTHREAD_COND_INITIALIZER;
static int is_listening;

static struct ibv_qp_init_attr ep_attr(void)
{
	struct ibv_qp_init_attr a = { .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
		.cap = { .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1,
			 .max_recv_sge = 1 } };
	return a;
}

static void *sync_server(void *arg)
{
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP },
			     *res;
	struct ibv_qp_init_attr qa = ep_attr();
	struct rdma_cm_id *listen_id, *id;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	static char buf[32];
	(void)arg;
	CHECK(rdma_getaddrinfo(sync_ip, "7353", &hints, &res) == 0, "server getaddrinfo");
	CHECK(rdma_create_ep(&listen_id, res, NULL, &qa) == 0, "create_ep passive: %d", errno);
	rdma_freeaddrinfo(res);
	CHECK(rdma_listen(listen_id, 1) == 0, "sync listen: %d", errno);
	pthread_mutex_lock(&lock);
	is_listening = 1;
	pthread_cond_signal(&listening);
	pthread_mutex_unlock(&lock);
	CHECK(rdma_get_request(listen_id, &id) == 0, "rdma_get_request: %d", errno);
	CHECK(id->qp && id->recv_cq && id->recv_cq_channel, "rdma_get_request made the QP");
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_CONNECT_REQUEST &&
	      strcmp(id->event->param.conn.private_data, "sync-req") == 0,
	      "the request is the new id's event");
	mr = rdma_reg_msgs(id, buf, sizeof buf);
	CHECK(mr, "rdma_reg_msgs");
	CHECK(rdma_post_recv(id, NULL, buf, sizeof buf, mr) == 0, "rdma_post_recv");
	CHECK(rdma_accept(id, NULL) == 0, "synchronous accept: %d", errno);
	CHECK(rdma_get_recv_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS,
	      "rdma_get_recv_comp (completion channel of the id's CQ)");
	CHECK(strcmp(buf, "sync payload") == 0, "payload %s", buf);
	rdma_dereg_mr(mr);
	rdma_disconnect(id);
	rdma_destroy_ep(id);
	rdma_destroy_ep(listen_id);
	return NULL;
}

static void sync_endpoints(const char *ip)
{
	pthread_t t;
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *res;
	struct ibv_qp_init_attr qa = ep_attr();
	struct rdma_cm_id *id;
	struct rdma_conn_param cp = { .private_data = "sync-req", .private_data_len = 9,
		.retry_count = 7, .rnr_retry_count = 7 };
	struct ibv_mr *mr;
	struct ibv_wc wc;
	static char msg[32] = "sync payload";
	sync_ip = ip;
	CHECK(pthread_create(&t, NULL, sync_server, NULL) == 0, "pthread_create");
	pthread_mutex_lock(&lock);
	while (!is_listening)
		pthread_cond_wait(&listening, &lock);
	pthread_mutex_unlock(&lock);
	CHECK(rdma_getaddrinfo(ip, "7353", &hints, &res) == 0, "client getaddrinfo");
	CHECK(res->ai_dst_addr != NULL, "active rdma_addrinfo has the destination");
	CHECK(rdma_create_ep(&id, res, NULL, &qa) == 0, "create_ep active: %d", errno);
	rdma_freeaddrinfo(res);
	CHECK(id->qp && id->send_cq_channel, "create_ep made the QP and its CQs");
	CHECK(rdma_connect(id, &cp) == 0, "synchronous connect: %d", errno);
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED,
	      "connect returns with ESTABLISHED in id->event");
	mr = rdma_reg_msgs(id, msg, sizeof msg);
	CHECK(mr && rdma_post_send(id, NULL, msg, sizeof msg, mr, 0) == 0, "rdma_post_send");
	CHECK(rdma_get_send_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS,
	      "rdma_get_send_comp");
	CHECK(pthread_join(t, NULL) == 0, "join");
	rdma_dereg_mr(mr);
	rdma_disconnect(id);
	rdma_destroy_ep(id);
}

int main(int argc, char **argv)
{
	const char *ip = argc > 1 ? argv[1] : "127.0.0.1";
	struct rdma_cm_id *listener, *cli, *srv;
	struct rdma_cm_event *e;
	struct sockaddr_in any = addr_of("0.0.0.0", 7350);
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE | RAI_NUMERICHOST }, *res;
	int flags;

	CHECK(strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED") == 0,
	      "rdma_event_str");
	CHECK(rdma_getaddrinfo(ip, "7351", &hints, &res) == 0, "rdma_getaddrinfo");
	CHECK(res->ai_src_addr && res->ai_port_space == RDMA_PS_TCP &&
	      res->ai_qp_type == IBV_QPT_RC &&
	      ((struct sockaddr_in *)res->ai_src_addr)->sin_port == htons(7351),
	      "passive rdma_addrinfo");
	rdma_freeaddrinfo(res);

	ch = rdma_create_event_channel();
	CHECK(ch != NULL, "create_event_channel: errno %d", errno);
	flags = fcntl(ch->fd, F_GETFL);
	CHECK(fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK) == 0, "O_NONBLOCK");
	CHECK(rdma_get_cm_event(ch, &e) == -1 && errno == EAGAIN,
	      "an empty non-blocking channel gives EAGAIN (errno %d)", errno);

	CHECK(rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP) == 0, "create_id");
	CHECK(rdma_bind_addr(listener, (struct sockaddr *)&any) == 0, "bind wildcard: %d", errno);
	CHECK(listener->verbs == NULL, "a wildcard bind binds no device");
	CHECK(rdma_listen(listener, 4) == 0, "listen: errno %d", errno);
	{
		struct rdma_cm_id *other;
		CHECK(rdma_create_id(ch, &other, NULL, RDMA_PS_TCP) == 0, "create_id");
		CHECK(rdma_bind_addr(other, (struct sockaddr *)&any) == -1 && errno == EADDRINUSE,
		      "a second bind of the port fails with EADDRINUSE (errno %d)", errno);
		rdma_destroy_id(other);
	}

	/* 1: the listener rejects, with private data. */
	cli = resolved(ip, 7350);
	connect_with(cli, "hello-req-1");
	e = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(e->listen_id == listener && e->id != listener && e->id != cli, "a new id per request");
	CHECK(e->param.conn.private_data_len == 56 &&
	      strcmp(e->param.conn.private_data, "hello-req-1") == 0,
	      "REQ private data (len %u)", e->param.conn.private_data_len);
	CHECK(e->param.conn.responder_resources == 1 && e->param.conn.initiator_depth == 1,
	      "the requester's depths");
	srv = e->id;
	CHECK(srv->verbs != NULL, "the new id is bound to the device");
	CHECK(rdma_get_dst_port(srv) == rdma_get_src_port(cli), "peer port from rdma_cm's header");
	rdma_ack_cm_event(e);
	CHECK(rdma_reject(srv, "go away", 8) == 0, "reject: errno %d", errno);
	e = expect(RDMA_CM_EVENT_REJECTED);
	CHECK(e->id == cli && e->status == 28, "consumer reject: status %d", e->status);
	CHECK(e->param.conn.private_data_len == 148 &&
	      strcmp(e->param.conn.private_data, "go away") == 0, "REJ private data");
	rdma_ack_cm_event(e);
	rdma_destroy_id(srv);
	rdma_destroy_qp(cli);
	rdma_destroy_id(cli);

	/* 2: accepted, data flows, the client disconnects. */
	cli = resolved(ip, 7350);
	connect_with(cli, "hello-req-2");
	e = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
	srv = e->id;
	CHECK(strcmp(e->param.conn.private_data, "hello-req-2") == 0, "second REQ");
	rdma_ack_cm_event(e);
	{
		struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
				 .max_recv_sge = 1 } };
		struct rdma_conn_param cp = { .private_data = "hi-rep", .private_data_len = 7,
			.responder_resources = 1, .initiator_depth = 1, .rnr_retry_count = 7 };
		static char rbuf[64], sbuf[64] = "payload over rdma_cm";
		struct ibv_mr *rmr, *smr;
		struct ibv_sge rs, ss;
		struct ibv_recv_wr rwr = { .sg_list = &rs, .num_sge = 1 }, *bad_r;
		struct ibv_send_wr swr = { .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED }, *bad_s;
		struct ibv_wc wc;
		long spins;

		CHECK(rdma_create_qp(srv, NULL, &qa) == 0, "server create_qp: errno %d", errno);
		rmr = ibv_reg_mr(srv->pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
		smr = ibv_reg_mr(cli->pd, sbuf, sizeof sbuf, 0);
		CHECK(rmr && smr, "reg_mr");
		rs = (struct ibv_sge){ (uintptr_t)rbuf, sizeof rbuf, rmr->lkey };
		ss = (struct ibv_sge){ (uintptr_t)sbuf, sizeof sbuf, smr->lkey };
		CHECK(ibv_post_recv(srv->qp, &rwr, &bad_r) == 0, "post_recv before accept");
		CHECK(rdma_accept(srv, &cp) == 0, "accept: errno %d", errno);
		/* The client's ESTABLISHED and the server's come in either order. */
		for (int n = 0; n < 2; n++) {
			e = expect(RDMA_CM_EVENT_ESTABLISHED);
			CHECK(e->id == cli || e->id == srv, "ESTABLISHED for a stranger");
			if (e->id == cli)
				CHECK(e->param.conn.private_data_len == 196 &&
				      strcmp(e->param.conn.private_data, "hi-rep") == 0,
				      "REP private data");
			rdma_ack_cm_event(e);
		}
		CHECK(cli->qp->state == IBV_QPS_RTS && srv->qp->state == IBV_QPS_RTS, "both in RTS");
		CHECK(ibv_post_send(cli->qp, &swr, &bad_s) == 0, "post_send");
		for (spins = 0; spins < 200000000L; spins++)
			if (ibv_poll_cq(srv->recv_cq, 1, &wc) == 1)
				break;
		CHECK(wc.status == IBV_WC_SUCCESS && strcmp(rbuf, sbuf) == 0, "message received");
		CHECK(rdma_disconnect(cli) == 0, "disconnect: errno %d", errno);
		for (int n = 0; n < 2; n++) {
			e = expect(RDMA_CM_EVENT_DISCONNECTED);
			CHECK(e->id == cli || e->id == srv, "DISCONNECTED for a stranger");
			rdma_ack_cm_event(e);
		}
		CHECK(cli->qp->state == IBV_QPS_ERR, "rdma_disconnect moves the QP to error");
		ibv_dereg_mr(rmr);
		ibv_dereg_mr(smr);
	}
	rdma_destroy_qp(srv);
	rdma_destroy_id(srv);
	rdma_destroy_qp(cli);
	rdma_destroy_id(cli);

	/* 3: nobody listens on 7352: the CM answers REJ reason 8. */
	cli = resolved(ip, 7352);
	connect_with(cli, "anyone?");
	e = expect(RDMA_CM_EVENT_REJECTED);
	CHECK(e->status == 8, "invalid service ID: status %d", e->status);
	rdma_ack_cm_event(e);
	rdma_destroy_qp(cli);

	/* 4: a failed rdma_create_qp frees the CQs and channels it made for the id: QP caps the
	 * device refuses (after both CQs), a send CQ deeper than the device's (after the receive
	 * CQ); then the id still takes a QP, and gives everything back with it. */
	{
		struct ibv_device_attr da;
		int before = open_fds();
		struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
				 .max_recv_sge = 1 } };
		struct ibv_qp_init_attr sge = qa, deep = qa;
		CHECK(ibv_query_device(cli->verbs, &da) == 0, "query_device");
		sge.cap.max_send_sge = (uint32_t)da.max_sge + 1;
		create_qp_fails_cleanly(cli, &sge, "too many SGEs");
		deep.cap.max_send_wr = (uint32_t)da.max_cqe + 1;
		create_qp_fails_cleanly(cli, &deep, "a send CQ deeper than max_cqe");
		CHECK(rdma_create_qp(cli, NULL, &qa) == 0, "create_qp after failures: errno %d",
		      errno);
		CHECK(cli->qp && cli->send_cq && cli->recv_cq, "QP and CQs after failures");
		rdma_destroy_qp(cli);
		CHECK(open_fds() == before, "%d open fds after create and destroy, %d before",
		      open_fds(), before);
	}
	rdma_destroy_id(cli);

	rdma_destroy_id(listener);
	rdma_destroy_event_channel(ch);

	sync_endpoints(ip);
	printf("rdmacm_api: all checks passed\n");
	return 0;
}
