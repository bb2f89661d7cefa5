/* The extended post's errors: send_ops_flags a QP type does not take (EOPNOTSUPP at create),
 * an op the QP was not created with, the ops bypass does not post (EOPNOTSUPP from
 * wr_complete), a setter with no request begun and inline data on a READ (EINVAL), more SGEs
 * or inline bytes than the QP takes and a batch deeper than the SQ (ENOMEM); a batch with an
 * error posts nothing, wr_abort drops the batch, the lock is released either way; a full SQ
 * (ENOMEM, for ibv_wr_complete and ibv_post_send) until completions are polled; a QP not in
 * RTS (EINVAL).
 */
#include "common.h"

#define OPS (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ)
#define DEPTH 8

static struct side a, b;
static struct ibv_qp_cap cap;

/* The QP type / ops combinations create refuses. */
static void create_refusals(void)
{
	struct side s;
	side_open(&s, IBV_QPT_RC, IBV_QP_EX_WITH_SEND, 4);
	struct {
		enum ibv_qp_type t;
		uint64_t ops;
	} bad[] = {
		{IBV_QPT_RC, IBV_QP_EX_WITH_LOCAL_INV},
		{IBV_QPT_RC, IBV_QP_EX_WITH_BIND_MW},
		{IBV_QPT_RC, IBV_QP_EX_WITH_SEND_WITH_INV},
		{IBV_QPT_RC, IBV_QP_EX_WITH_TSO},
		{IBV_QPT_RC, IBV_QP_EX_WITH_ATOMIC_WRITE},
		{IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_READ},
		{IBV_QPT_UC, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD},
		{IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE},
		{IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct ibv_qp_init_attr_ex x = {
			.send_cq = s.cq, .recv_cq = s.cq, .qp_type = bad[i].t,
			.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
				.max_recv_sge = 1},
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
			.pd = s.pd, .send_ops_flags = bad[i].ops,
		};
		errno = 0;
		struct ibv_qp *q = ibv_create_qp_ex(s.ctx, &x);
		CHECK(!q && errno == EOPNOTSUPP, "type %d ops %#llx: qp %p errno %d", bad[i].t,
		      (unsigned long long)bad[i].ops, (void *)q, errno);
	}
	/* A QP with send ops but still in RESET: the post is refused (EINVAL). */
	ibv_wr_start(s.qpx);
	s.qpx->wr_id = 1;
	s.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(s.qpx);
	ibv_wr_set_sge(s.qpx, s.mr->lkey, (uintptr_t)s.buf, 8);
	CHECK_EQ(ibv_wr_complete(s.qpx), EINVAL);
	side_close(&s);
}

/* Posts one signaled WRITE of 8 bytes to b.buf + off; returns wr_complete's value. */
static int write8(uint64_t wr_id, uint32_t off)
{
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = wr_id;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, b.mr->rkey, (uintptr_t)b.buf + off);
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf, 8);
	return ibv_wr_complete(a.qpx);
}

/* A batch: a good WRITE to b.buf[0..8], then `bad` (which records an error); expects `err`
 * from wr_complete and nothing posted. */
static void batch_fails(void (*bad)(void), int err, const char *what)
{
	memset(b.buf, 0, 64);
	fill(a.buf, 8, 21);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 500;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, b.mr->rkey, (uintptr_t)b.buf);
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf, 8);
	bad();
	int r = ibv_wr_complete(a.qpx);
	CHECK(r == err, "%s: wr_complete %d (%s), expected %d", what, r, strerror(r), err);
	poll_none(a.cq, 200);
	for (int i = 0; i < 8; i++)
		CHECK(b.buf[i] == 0, "%s: the batch's good WRITE was posted", what);
	/* The lock was released and the QP still posts. */
	CHECK_EQ(write8(501, 16), 0);
	expect_wc(a.cq, 501, IBV_WC_RDMA_WRITE, NULL);
}

static void bad_read_not_in_ops_atomic(void)
{
	ibv_wr_atomic_fetch_add(a.qpx, b.mr->rkey, (uintptr_t)b.buf + 64, 1);
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf + 64, 8);
}
static void bad_inline_on_read(void)
{
	ibv_wr_rdma_read(a.qpx, b.mr->rkey, (uintptr_t)b.buf + 100);
	ibv_wr_set_inline_data(a.qpx, a.buf, 8);
}
static void bad_inline_too_big(void)
{
	ibv_wr_send(a.qpx);
	ibv_wr_set_inline_data(a.qpx, a.buf, cap.max_inline_data + 1);
}
static void bad_inline_list_too_big(void)
{
	struct ibv_data_buf l[2] = {{a.buf, cap.max_inline_data}, {a.buf, 1}};
	ibv_wr_send(a.qpx);
	ibv_wr_set_inline_data_list(a.qpx, 2, l);
}
static void bad_too_many_sges(void)
{
	struct ibv_sge l[16];
	for (int i = 0; i < 16; i++)
		l[i] = (struct ibv_sge){(uintptr_t)a.buf, 8, a.mr->lkey};
	CHECK(cap.max_send_sge < 16, "max_send_sge %u", cap.max_send_sge);
	ibv_wr_send(a.qpx);
	ibv_wr_set_sge_list(a.qpx, cap.max_send_sge + 1, l);
}
static void bad_too_deep(void)
{
	for (uint32_t i = 0; i < cap.max_send_wr; i++) {
		ibv_wr_rdma_write(a.qpx, b.mr->rkey, (uintptr_t)b.buf + 32);
		ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf, 8);
	}
}
static void bad_send_inv(void) { ibv_wr_send_inv(a.qpx, 1); }
static void bad_local_inv(void) { ibv_wr_local_inv(a.qpx, 1); }
static void bad_bind_mw(void) { ibv_wr_bind_mw(a.qpx, NULL, 1, NULL); }
static void bad_tso(void) { ibv_wr_send_tso(a.qpx, a.buf, 14, 1000); }
static void bad_xrc(void) { ibv_wr_set_xrc_srqn(a.qpx, 1); }
static void bad_atomic_write(void) { ibv_wr_atomic_write(a.qpx, b.mr->rkey, 0, a.buf); }
static void bad_ud_addr_on_rc(void)
{
	ibv_wr_send(a.qpx);
	ibv_wr_set_ud_addr(a.qpx, NULL, 1, 1);
}

/* wr_abort drops what the batch holds. */
static void abort_drops(void)
{
	memset(b.buf, 0, 64);
	fill(a.buf, 8, 22);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 600;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, b.mr->rkey, (uintptr_t)b.buf);
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf, 8);
	ibv_wr_abort(a.qpx);
	poll_none(a.cq, 200);
	CHECK(b.buf[0] == 0 && b.buf[7] == 0, "aborted WRITE was posted");
	/* An empty batch completes with 0. */
	ibv_wr_start(a.qpx);
	CHECK_EQ(ibv_wr_complete(a.qpx), 0);
	CHECK_EQ(write8(601, 0), 0);
	expect_wc(a.cq, 601, IBV_WC_RDMA_WRITE, NULL);
	CHECK(memcmp(b.buf, a.buf, 8) == 0, "WRITE after abort differs");
}

/* Fills the SQ without polling (the stepped sim does not move meanwhile): ENOMEM once it is
 * full, for the extended and the plain post; polling frees it. */
static void sq_full(void)
{
	uint32_t posted = 0;
	int r = 0;
	for (uint32_t i = 0; i < 4 * cap.max_send_wr + 4; i++) {
		r = write8(700 + i, 8);
		if (r)
			break;
		posted++;
	}
	CHECK_EQ(r, ENOMEM);
	CHECK(posted >= cap.max_send_wr, "only %u posted of max_send_wr %u", posted,
	      cap.max_send_wr);
	struct ibv_sge s = {(uintptr_t)a.buf, 8, a.mr->lkey};
	struct ibv_send_wr w = {.wr_id = 1, .sg_list = &s, .num_sge = 1,
				.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED},
			   *bad = NULL;
	w.wr.rdma.remote_addr = (uintptr_t)b.buf;
	w.wr.rdma.rkey = b.mr->rkey;
	CHECK_EQ(ibv_post_send(a.qp, &w, &bad), ENOMEM);
	CHECK(bad == &w, "*bad_wr");
	for (uint32_t i = 0; i < posted; i++)
		expect_wc(a.cq, 700 + i, IBV_WC_RDMA_WRITE, NULL);
	poll_none(a.cq, 100);
	CHECK_EQ(write8(999, 8), 0);
	expect_wc(a.cq, 999, IBV_WC_RDMA_WRITE, NULL);
}

int main(void)
{
	prog_name = "qpex_errors";
	create_refusals();
	pair_open(&a, &b, IBV_QPT_RC, OPS, DEPTH);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK_EQ(ibv_query_qp(a.qp, &qa, IBV_QP_CAP, &qi), 0);
	cap = qi.cap;
	CHECK(cap.max_send_wr >= DEPTH, "max_send_wr %u", cap.max_send_wr);
	CHECK(cap.max_inline_data >= 64, "max_inline_data %u", cap.max_inline_data);
	batch_fails(bad_read_not_in_ops_atomic, EOPNOTSUPP, "atomic not in send_ops_flags");
	batch_fails(bad_inline_on_read, EINVAL, "inline data on a READ");
	batch_fails(bad_inline_too_big, ENOMEM, "inline data past max_inline_data");
	batch_fails(bad_inline_list_too_big, ENOMEM, "inline list past max_inline_data");
	batch_fails(bad_too_many_sges, ENOMEM, "SGE list past max_send_sge");
	batch_fails(bad_too_deep, ENOMEM, "batch deeper than max_send_wr");
	batch_fails(bad_send_inv, EOPNOTSUPP, "wr_send_inv");
	batch_fails(bad_local_inv, EOPNOTSUPP, "wr_local_inv");
	batch_fails(bad_bind_mw, EOPNOTSUPP, "wr_bind_mw");
	batch_fails(bad_tso, EOPNOTSUPP, "wr_send_tso");
	batch_fails(bad_xrc, EOPNOTSUPP, "wr_set_xrc_srqn");
	batch_fails(bad_atomic_write, EOPNOTSUPP, "wr_atomic_write");
	batch_fails(bad_ud_addr_on_rc, EINVAL, "wr_set_ud_addr with a NULL AH");
	abort_drops();
	/* A setter as the first call of a batch: EINVAL. */
	ibv_wr_start(a.qpx);
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf, 8);
	CHECK_EQ(ibv_wr_complete(a.qpx), EINVAL);
	sq_full();
	side_close(&a);
	side_close(&b);
	done();
	return 0;
}
