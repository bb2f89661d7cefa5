/* The unreliable transports: UD sends, plain (ibv_post_send with wr.ud) and extended
 * (ibv_wr_set_ud_addr), data checked byte for byte after the 40-byte GRH, with the receive's
 * ibv_wc (byte_len with the GRH, src_qp, IBV_WC_GRH, imm_data); an extended RDMA WRITE on UC.
 * On the sim like the others (deterministic: nothing is lost there).
 */
#include "common.h"

static int post_one(struct side *s, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;
	return ibv_post_send(s->qp, wr, &bad);
}

static void plain(void)
{
	struct side u, v;
	pair_open(&u, &v, IBV_QPT_UD, 0, 16);
	struct ibv_ah_attr ah_attr = {.is_global = 1, .port_num = 1,
				      .grh = {.dgid = v.gid, .hop_limit = 64}};
	struct ibv_ah *ah = ibv_create_ah(u.pd, &ah_attr);
	CHECK(ah, "ibv_create_ah: %s", strerror(errno));
	fill(u.buf, 256, 14);
	post_recv(&v, 300, 0, 40 + 256);
	struct ibv_sge s = {.addr = (uintptr_t)u.buf, .length = 256, .lkey = u.mr->lkey};
	struct ibv_send_wr w = {.wr_id = 301, .sg_list = &s, .num_sge = 1,
				.opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
				.imm_data = htobe32(0x01020304)};
	w.wr.ud.ah = ah;
	w.wr.ud.remote_qpn = v.qp->qp_num;
	w.wr.ud.remote_qkey = QKEY;
	CHECK_EQ(post_one(&u, &w), 0);
	expect_wc(u.cq, 301, IBV_WC_SEND, NULL);
	struct ibv_wc wc;
	expect_wc(v.cq, 300, IBV_WC_RECV, &wc);
	CHECK_EQ(wc.byte_len, 40 + 256);
	CHECK_EQ(wc.src_qp, u.qp->qp_num);
	CHECK_EQ(be32toh(wc.imm_data), 0x01020304);
	CHECK(wc.wc_flags & IBV_WC_GRH, "UD receive without IBV_WC_GRH");
	CHECK(wc.wc_flags & IBV_WC_WITH_IMM, "UD receive without IBV_WC_WITH_IMM");
	CHECK(memcmp(v.buf + 40, u.buf, 256) == 0, "UD data differs");
	/* A UD request without an AH is refused. */
	w.wr.ud.ah = NULL;
	CHECK_EQ(post_one(&u, &w), EINVAL);
	CHECK_EQ(ibv_destroy_ah(ah), 0);
	side_close(&u);
	side_close(&v);
}

static void extended(void)
{
	struct side u, v;
	pair_open(&u, &v, IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM, 16);
	struct ibv_ah_attr ah_attr = {.is_global = 1, .port_num = 1,
				      .grh = {.dgid = v.gid, .hop_limit = 64}};
	struct ibv_ah *ah = ibv_create_ah(u.pd, &ah_attr);
	CHECK(ah, "ibv_create_ah: %s", strerror(errno));
	fill(u.buf, 300, 8);
	post_recv(&v, 90, 0, 40 + 300);
	post_recv(&v, 91, 1024, 40 + 300);
	ibv_wr_start(u.qpx);
	u.qpx->wr_id = 92;
	u.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(u.qpx);
	ibv_wr_set_ud_addr(u.qpx, ah, v.qp->qp_num, QKEY);
	ibv_wr_set_sge(u.qpx, u.mr->lkey, (uintptr_t)u.buf, 300);
	u.qpx->wr_id = 93;
	ibv_wr_send_imm(u.qpx, htobe32(7));
	ibv_wr_set_ud_addr(u.qpx, ah, v.qp->qp_num, QKEY);
	ibv_wr_set_inline_data(u.qpx, u.buf, 16);
	CHECK_EQ(ibv_wr_complete(u.qpx), 0);
	expect_wc(u.cq, 92, IBV_WC_SEND, NULL);
	expect_wc(u.cq, 93, IBV_WC_SEND, NULL);
	struct ibv_wc wc;
	expect_wc(v.cq, 90, IBV_WC_RECV, &wc);
	CHECK_EQ(wc.byte_len, 40 + 300);
	CHECK_EQ(wc.src_qp, u.qp->qp_num);
	CHECK(wc.wc_flags & IBV_WC_GRH, "UD receive without IBV_WC_GRH");
	CHECK(memcmp(v.buf + 40, u.buf, 300) == 0, "UD SEND data differs");
	expect_wc(v.cq, 91, IBV_WC_RECV, &wc);
	CHECK_EQ(wc.byte_len, 40 + 16);
	CHECK_EQ(be32toh(wc.imm_data), 7);
	CHECK(memcmp(v.buf + 1024 + 40, u.buf, 16) == 0, "UD inline SEND data differs");
	CHECK_EQ(ibv_destroy_ah(ah), 0);
	side_close(&u);
	side_close(&v);
}

/* UC takes sends and writes. */
static void uc_write(void)
{
	struct side u, v;
	pair_open(&u, &v, IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND, 16);
	fill(u.buf, 700, 9);
	ibv_wr_start(u.qpx);
	u.qpx->wr_id = 95;
	u.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(u.qpx, v.mr->rkey, (uintptr_t)v.buf + 8);
	ibv_wr_set_sge(u.qpx, u.mr->lkey, (uintptr_t)u.buf, 700);
	CHECK_EQ(ibv_wr_complete(u.qpx), 0);
	expect_wc(u.cq, 95, IBV_WC_RDMA_WRITE, NULL);
	for (int i = 0; i < 1000 && memcmp(v.buf + 8, u.buf, 700); i++)
		poll_none(v.cq, 1); /* UC: the sender's completion does not wait for the peer */
	CHECK(memcmp(v.buf + 8, u.buf, 700) == 0, "UC WRITE data differs");
	side_close(&u);
	side_close(&v);
}

int main(void)
{
	prog_name = "unreliable";
	plain();
	extended();
	uc_write();
	done();
	return 0;
}
