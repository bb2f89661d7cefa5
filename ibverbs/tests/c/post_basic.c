/* The plain post path (ibv_post_send / ibv_post_recv / ibv_poll_cq) for every opcode, data
 * checked byte for byte, and the ibv_wc fields: opcode, byte_len, imm_data (big-endian),
 * wc_flags (WITH_IMM, GRH), qp_num, src_qp; a list of requests with one refused
 * (*bad_wr names it, those before it are posted); polling several completions at once.
 */
#include "common.h"

static struct side a, b;

static int post(struct side *s, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;
	int r = ibv_post_send(s->qp, wr, &bad);
	if (r)
		CHECK(bad != NULL, "ibv_post_send failed (%d) without *bad_wr", r);
	return r;
}

static void rc_ops(void)
{
	fill(a.buf, 2048, 11);
	struct ibv_sge sg[2] = {
		{.addr = (uintptr_t)a.buf, .length = 300, .lkey = a.mr->lkey},
		{.addr = (uintptr_t)a.buf + 400, .length = 200, .lkey = a.mr->lkey},
	};
	/* WRITE of two SGEs, unsignaled, then a signaled SEND_IMM in the same list. */
	post_recv(&b, 100, 2048, 1024);
	struct ibv_send_wr w2 = {.wr_id = 2, .sg_list = &sg[1], .num_sge = 1,
				 .opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
				 .imm_data = htobe32(0xfeedf00d)};
	struct ibv_send_wr w1 = {.wr_id = 1, .next = &w2, .sg_list = sg, .num_sge = 2,
				 .opcode = IBV_WR_RDMA_WRITE};
	w1.wr.rdma.remote_addr = (uintptr_t)b.buf + 10;
	w1.wr.rdma.rkey = b.mr->rkey;
	CHECK_EQ(post(&a, &w1), 0);
	struct ibv_wc wc;
	expect_wc(a.cq, 2, IBV_WC_SEND, &wc);
	CHECK_EQ(wc.qp_num, a.qp->qp_num);
	expect_wc(b.cq, 100, IBV_WC_RECV, &wc);
	CHECK_EQ(wc.byte_len, 200);
	CHECK_EQ(be32toh(wc.imm_data), 0xfeedf00d);
	CHECK(wc.wc_flags & IBV_WC_WITH_IMM, "no IBV_WC_WITH_IMM");
	CHECK_EQ(wc.qp_num, b.qp->qp_num);
	CHECK_EQ(wc.src_qp, a.qp->qp_num);
	CHECK(memcmp(b.buf + 10, a.buf, 300) == 0 && memcmp(b.buf + 310, a.buf + 400, 200) == 0,
	      "WRITE data differs");
	CHECK(memcmp(b.buf + 2048, a.buf + 400, 200) == 0, "SEND_IMM data differs");

	/* WRITE_IMM: zero-length receive consumed, immediate delivered. */
	post_recv(&b, 101, 0, 0);
	struct ibv_send_wr wi = {.wr_id = 3, .sg_list = sg, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				 .send_flags = IBV_SEND_SIGNALED, .imm_data = htobe32(42)};
	wi.wr.rdma.remote_addr = (uintptr_t)b.buf + 1024;
	wi.wr.rdma.rkey = b.mr->rkey;
	CHECK_EQ(post(&a, &wi), 0);
	expect_wc(a.cq, 3, IBV_WC_RDMA_WRITE, NULL);
	expect_wc(b.cq, 101, IBV_WC_RECV_RDMA_WITH_IMM, &wc);
	CHECK_EQ(wc.byte_len, 300);
	CHECK_EQ(be32toh(wc.imm_data), 42);
	CHECK(memcmp(b.buf + 1024, a.buf, 300) == 0, "WRITE_IMM data differs");

	/* READ back into a, then an inline SEND. */
	memset(a.buf + 3000, 0, 500);
	struct ibv_sge rs = {.addr = (uintptr_t)a.buf + 3000, .length = 500, .lkey = a.mr->lkey};
	struct ibv_send_wr rd = {.wr_id = 4, .sg_list = &rs, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED};
	rd.wr.rdma.remote_addr = (uintptr_t)b.buf + 10;
	rd.wr.rdma.rkey = b.mr->rkey;
	CHECK_EQ(post(&a, &rd), 0);
	expect_wc(a.cq, 4, IBV_WC_RDMA_READ, &wc);
	CHECK_EQ(wc.byte_len, 500);
	CHECK(memcmp(a.buf + 3000, b.buf + 10, 500) == 0, "READ data differs");

	uint8_t inl[40];
	fill(inl, sizeof(inl), 12);
	struct ibv_sge is = {.addr = (uintptr_t)inl, .length = sizeof(inl), .lkey = 0};
	post_recv(&b, 102, 3500, 100);
	struct ibv_send_wr sd = {.wr_id = 5, .sg_list = &is, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
	CHECK_EQ(post(&a, &sd), 0);
	memset(inl, 0, sizeof(inl));
	expect_wc(a.cq, 5, IBV_WC_SEND, NULL);
	expect_wc(b.cq, 102, IBV_WC_RECV, &wc);
	CHECK_EQ(wc.byte_len, 40);
	CHECK_EQ(wc.wc_flags & IBV_WC_WITH_IMM, 0);
	fill(inl, sizeof(inl), 12);
	CHECK(memcmp(b.buf + 3500, inl, 40) == 0, "inline SEND data differs");

	/* Atomics: big-endian words at the target and in the result (mlx5 HCAs do this). */
	uint64_t *t = (uint64_t *)(b.buf + 4000), *res = (uint64_t *)(a.buf + 4000);
	*t = htobe64(1000);
	struct ibv_sge as = {.addr = (uintptr_t)res, .length = 8, .lkey = a.mr->lkey};
	struct ibv_send_wr fa = {.wr_id = 6, .sg_list = &as, .num_sge = 1,
				 .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				 .send_flags = IBV_SEND_SIGNALED};
	fa.wr.atomic.remote_addr = (uintptr_t)t;
	fa.wr.atomic.rkey = b.mr->rkey;
	fa.wr.atomic.compare_add = 24;
	CHECK_EQ(post(&a, &fa), 0);
	expect_wc(a.cq, 6, IBV_WC_FETCH_ADD, &wc);
	CHECK_EQ(wc.byte_len, 8);
	CHECK_EQ(be64toh(*res), 1000);
	CHECK_EQ(be64toh(*t), 1024);
	struct ibv_send_wr cs = fa;
	cs.wr_id = 7;
	cs.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	cs.wr.atomic.compare_add = 1024;
	cs.wr.atomic.swap = 7;
	CHECK_EQ(post(&a, &cs), 0);
	expect_wc(a.cq, 7, IBV_WC_COMP_SWAP, NULL);
	CHECK_EQ(be64toh(*res), 1024);
	CHECK_EQ(be64toh(*t), 7);
}

/* A list whose third request has a bad opcode: the first two post, *bad_wr is the third. */
static void bad_wr_list(void)
{
	fill(a.buf, 64, 13);
	struct ibv_sge s = {.addr = (uintptr_t)a.buf, .length = 64, .lkey = a.mr->lkey};
	struct ibv_send_wr w[3];
	memset(w, 0, sizeof(w));
	for (int i = 0; i < 3; i++) {
		w[i].wr_id = 200 + i;
		w[i].sg_list = &s;
		w[i].num_sge = 1;
		w[i].opcode = IBV_WR_RDMA_WRITE;
		w[i].send_flags = IBV_SEND_SIGNALED;
		w[i].wr.rdma.remote_addr = (uintptr_t)b.buf + 64 * i;
		w[i].wr.rdma.rkey = b.mr->rkey;
		w[i].next = i < 2 ? &w[i + 1] : NULL;
	}
	w[2].opcode = (enum ibv_wr_opcode)77;
	struct ibv_send_wr *bad = NULL;
	CHECK_EQ(ibv_post_send(a.qp, w, &bad), EINVAL);
	CHECK(bad == &w[2], "*bad_wr is not the refused request");
	/* Poll several at once. */
	struct ibv_wc wc[4];
	int got = 0;
	for (long i = 0; i < POLL_TRIES && got < 2; i++) {
		int n = ibv_poll_cq(a.cq, 4, wc + got);
		CHECK(n >= 0, "poll %d", n);
		got += n;
	}
	CHECK_EQ(got, 2);
	CHECK_EQ(wc[0].wr_id, 200);
	CHECK_EQ(wc[1].wr_id, 201);
	poll_none(a.cq, 50);

	/* Too many SGEs for the QP: EINVAL. */
	struct ibv_sge many[8];
	for (int i = 0; i < 8; i++)
		many[i] = s;
	struct ibv_send_wr m = w[0];
	m.next = NULL;
	m.sg_list = many;
	m.num_sge = 8;
	CHECK_EQ(post(&a, &m), EINVAL);
}

int main(void)
{
	prog_name = "post_basic";
	pair_open(&a, &b, IBV_QPT_RC, 0, 32);
	rc_ops();
	bad_wr_list();
	side_close(&a);
	side_close(&b);
	done();
	return 0;
}
