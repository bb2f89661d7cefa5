/* Shared helpers of the C verbs programs run by tests/c_programs.rs.
 *
 * Each program opens two contexts on device bypass0 (BYPASS_DEVICE=sim: one stepped fabric,
 * so a run is deterministic), builds a pair of QPs on them connected to the device's own GID
 * (loopback, as rdma-core's pyverbs traffic tests do), and checks results with CHECK, which
 * prints the failing line and exits 1. A program that reaches its end prints
 * "<name>: all N checks passed" and exits 0; the runner checks both.
 * Follows: verbs.h (rdma-core v44), man 3 ibv_post_send / ibv_poll_cq / ibv_wr_post.
 */
#ifndef BYPASS_C_COMMON_H
#define BYPASS_C_COMMON_H

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks;
static const char *prog_name = "?";

#define CHECK(cond, ...)                                                                   \
	do {                                                                               \
		checks++;                                                                  \
		if (!(cond)) {                                                             \
			fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__,   \
				#cond);                                                    \
			fprintf(stderr, __VA_ARGS__);                                      \
			fprintf(stderr, "\n");                                             \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

/* A check bypass is known to fail today: prints "known gap: ID" instead of exiting. The
 * runner (tests/c_programs.rs) requires exactly its list of known gaps, so a gap that gets
 * fixed fails the run until it is taken off that list and turned into a CHECK. */
#define KNOWN_GAP(id, cond)                                                                \
	do {                                                                               \
		checks++;                                                                  \
		if (!(cond))                                                               \
			printf("known gap: %s\n", id);                                     \
	} while (0)

#define CHECK_EQ(a, b)                                                                     \
	do {                                                                               \
		long long _a = (long long)(a), _b = (long long)(b);                        \
		CHECK(_a == _b, "%s = %lld, expected %s = %lld", #a, _a, #b, _b);          \
	} while (0)

#define BUF 4096
#define POLL_TRIES 2000000

/* One side: a context, PD, CQ, QP and a registered buffer. */
struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx; /* NULL unless created with send ops */
	struct ibv_mr *mr;
	uint8_t *buf;
	union ibv_gid gid;
};

static inline void done(void)
{
	printf("%s: all %d checks passed\n", prog_name, checks);
}

/* Opens device `idx` modulo the number of devices (BYPASS_DEVICE=sim,sim: two NICs on one
 * fabric; sim: two contexts on one NIC). Contexts come and go: reopen.c checks traffic after
 * a device's last context closed. */
static inline struct ibv_context *open_dev(int idx)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	CHECK(l && n >= 1, "no device (n=%d)", n);
	struct ibv_context *c = ibv_open_device(l[idx % n]);
	CHECK(c, "ibv_open_device: %s", strerror(errno));
	ibv_free_device_list(l);
	return c;
}

/* Opens a side: a QP of `type` (send ops `ops`, 0: a plain ibv_create_qp), `max_wr` deep. */
static inline void side_open(struct side *s, enum ibv_qp_type type, uint64_t ops, uint32_t max_wr)
{
	static int opened;
	memset(s, 0, sizeof(*s));
	s->ctx = open_dev(opened++);
	s->pd = ibv_alloc_pd(s->ctx);
	CHECK(s->pd, "ibv_alloc_pd: %s", strerror(errno));
	s->cq = ibv_create_cq(s->ctx, 256, NULL, NULL, 0);
	CHECK(s->cq, "ibv_create_cq: %s", strerror(errno));
	s->buf = aligned_alloc(4096, BUF);
	CHECK(s->buf, "aligned_alloc");
	memset(s->buf, 0, BUF);
	s->mr = ibv_reg_mr(s->pd, s->buf, BUF,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(s->mr, "ibv_reg_mr: %s", strerror(errno));
	CHECK_EQ(ibv_query_gid(s->ctx, 1, 0, &s->gid), 0);
	struct ibv_qp_init_attr_ex a = {
		.send_cq = s->cq,
		.recv_cq = s->cq,
		.cap = {.max_send_wr = max_wr, .max_recv_wr = max_wr, .max_send_sge = 4,
			.max_recv_sge = 4, .max_inline_data = 64},
		.qp_type = type,
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = s->pd,
	};
	if (ops) {
		a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		a.send_ops_flags = ops;
	}
	s->qp = ibv_create_qp_ex(s->ctx, &a);
	CHECK(s->qp, "ibv_create_qp_ex: %s", strerror(errno));
	s->qpx = ibv_qp_to_qp_ex(s->qp);
	if (ops)
		CHECK(s->qpx, "ibv_qp_to_qp_ex of a QP with send ops is NULL");
	else
		CHECK(!s->qpx, "ibv_qp_to_qp_ex of a plain QP is not NULL");
}

#define QKEY 0x11111111u

/* Moves s's QP to RTS, connected (RC/UC) to QP number `dqpn` at `dgid`. */
static inline void side_connect(struct side *s, uint32_t dqpn, const union ibv_gid *dgid)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .pkey_index = 0};
	int ud = s->qp->qp_type == IBV_QPT_UD;
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	if (ud) {
		a.qkey = QKEY;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				    (s->qp->qp_type == IBV_QPT_RC ? IBV_ACCESS_REMOTE_ATOMIC : 0);
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	CHECK_EQ(ibv_modify_qp(s->qp, &a, mask), 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	mask = IBV_QP_STATE;
	if (!ud) {
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = dqpn;
		a.rq_psn = 0;
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = *dgid;
		a.ah_attr.grh.hop_limit = 64;
		a.ah_attr.port_num = 1;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		if (s->qp->qp_type == IBV_QPT_RC) {
			a.max_dest_rd_atomic = 1;
			a.min_rnr_timer = 1;
			mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		}
	}
	CHECK_EQ(ibv_modify_qp(s->qp, &a, mask), 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (s->qp->qp_type == IBV_QPT_RC) {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	CHECK_EQ(ibv_modify_qp(s->qp, &a, mask), 0);
	CHECK_EQ(s->qp->state, IBV_QPS_RTS);
}

/* Two sides a (sender) and b, connected to each other. */
static inline void pair_open(struct side *a, struct side *b, enum ibv_qp_type type, uint64_t ops,
		      uint32_t max_wr)
{
	side_open(a, type, ops, max_wr);
	side_open(b, type, ops, max_wr);
	side_connect(a, b->qp->qp_num, &b->gid);
	side_connect(b, a->qp->qp_num, &a->gid);
}

static inline void side_close(struct side *s)
{
	CHECK_EQ(ibv_destroy_qp(s->qp), 0);
	CHECK_EQ(ibv_dereg_mr(s->mr), 0);
	CHECK_EQ(ibv_destroy_cq(s->cq), 0);
	CHECK_EQ(ibv_dealloc_pd(s->pd), 0);
	CHECK_EQ(ibv_close_device(s->ctx), 0);
	free(s->buf);
}

/* Polls `cq` (which drives the sim) until one completion arrives; fails after POLL_TRIES. */
static inline void poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (long i = 0; i < POLL_TRIES; i++) {
		int n = ibv_poll_cq(cq, 1, wc);
		CHECK(n >= 0, "ibv_poll_cq returned %d", n);
		if (n == 1)
			return;
	}
	CHECK(0, "no completion after %d polls", POLL_TRIES);
}

/* Polls `cq` `tries` times and checks that it stays empty. */
static inline void poll_none(struct ibv_cq *cq, int tries)
{
	struct ibv_wc wc;
	for (int i = 0; i < tries; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n == 0, "unexpected completion (n=%d wr_id=%llu opcode=%d status=%d)", n,
		      (unsigned long long)wc.wr_id, wc.opcode, wc.status);
	}
}

/* One completion on `cq`, successful, with `wr_id` and `opcode`. */
static inline void expect_wc(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_opcode opcode,
		      struct ibv_wc *out)
{
	struct ibv_wc wc;
	poll_one(cq, &wc);
	CHECK(wc.status == IBV_WC_SUCCESS, "wr_id %llu: status %d (%s)",
	      (unsigned long long)wc.wr_id, wc.status, ibv_wc_status_str(wc.status));
	CHECK_EQ(wc.wr_id, wr_id);
	CHECK_EQ(wc.opcode, opcode);
	if (out)
		*out = wc;
}

static inline void post_recv(struct side *s, uint64_t wr_id, uint32_t off, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf + off, .length = len, .lkey = s->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
	CHECK_EQ(ibv_post_recv(s->qp, &wr, &bad), 0);
}

/* Fills `len` bytes at `p` with a pattern from `seed`. */
static inline void fill(uint8_t *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(seed * 31 + i * 7 + (i >> 8));
}

#endif
