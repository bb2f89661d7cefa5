/*
 * The mlx5dv.h oracle of bypass-hw (hw/tests/mlx5dv_oracle.rs compiles and runs it).
 *
 * It uses the installed rdma-core header <infiniband/mlx5dv.h> (Debian libibverbs-dev) and
 * nothing else of rdma-core: the helpers it calls (mlx5dv_set_ctrl_seg, mlx5dv_set_data_seg,
 * mlx5dv_set_dgram_seg, mlx5dv_get_cqe_*) are static inline. It prints one line per fact:
 *
 *   const NAME VALUE                         an enum value, hex
 *   size STRUCT N                            sizeof, decimal
 *   offset STRUCT.FIELD N                    offsetof, decimal
 *   wqe CASE OPCODE K DS HEX                 a whole WQE (DS * 16 bytes)
 *   cqe C OWNER SE FORMAT OPCODE HEX         a struct mlx5_cqe64 with every field set, and what
 *                                            the mlx5dv_get_cqe_* helpers read from it
 *   errcqe NAME SYNDROME I HEX               a struct mlx5_err_cqe for each syndrome
 *
 * Field values come from fixed formulas of the case index K (and segment index J); the Rust
 * test computes the same formulas (see "shared formulas" there) and builds the same bytes with
 * the bypass-hw API. Any byte that differs fails the test.
 */
#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/mlx5dv.h>

static void hex(const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++)
		printf("%02x", b[i]);
	printf("\n");
}

#define CONST(x) printf("const %s %llx\n", #x, (unsigned long long)(x))
#define SIZE(s) printf("size %s %zu\n", #s, sizeof(struct s))
#define OFF(s, f) printf("offset %s.%s %zu\n", #s, #f, offsetof(struct s, f))

/* ---- shared formulas (mirrored in mlx5dv_oracle.rs) ---- */
static const uint8_t FM_CE_SE[4] = {
	MLX5_WQE_CTRL_CQ_UPDATE,
	MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED,
	MLX5_WQE_CTRL_FENCE | MLX5_WQE_CTRL_CQ_UPDATE,
	MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE,
};
static uint16_t f_pi(unsigned k) { return (uint16_t)(0xa000 + k * 0x111); }
static uint8_t f_opmod(unsigned k) { return (uint8_t)k; }
static uint32_t f_qpn(unsigned k) { return 0x0a0b00 + k; }
static uint8_t f_sig(unsigned k) { return (uint8_t)(0x5a ^ k); }
static uint32_t f_imm(unsigned k) { return 0x11223300 + k; }
static uint16_t f_dci(unsigned k) { return (uint16_t)(0x0100 + k); }
static uint32_t f_len(unsigned k, unsigned j) { return 0x1000 * (k + 1) + j; }
static uint32_t f_lkey(unsigned k, unsigned j) { return 0x00c0de00 + k * 16 + j; }
static uint64_t f_addr(unsigned k, unsigned j) { return 0x00007f0000000000ULL + k * 0x10000ULL + j * 0x100ULL; }
static uint64_t f_raddr(unsigned k) { return 0x0000dead00000000ULL + k * 0x1000ULL; }
static uint32_t f_rkey(unsigned k) { return 0x00beef00 + k; }
static uint64_t f_swap(unsigned k) { return 0x0102030405060708ULL + k; }
static uint64_t f_cmp(unsigned k) { return 0x1112131415161718ULL + k; }
static uint8_t f_inl(unsigned k, unsigned i) { return (uint8_t)(k * 7 + i); }

enum layout { L_CTRL, L_SEND, L_RDMA, L_ATOMIC, L_UD, L_INLINE, L_RDMA_INLINE, L_RECV };

struct wcase {
	const char *name;
	uint8_t opcode;
	enum layout layout;
	unsigned n; /* SGEs, or inline bytes */
};

#define OP(x) #x, MLX5_OPCODE_##x
static const struct wcase CASES[] = {
	{ OP(NOP), L_CTRL, 0 },
	{ OP(SEND_INVAL), L_SEND, 1 },
	{ OP(RDMA_WRITE), L_RDMA, 2 },
	{ OP(RDMA_WRITE_IMM), L_RDMA, 1 },
	{ OP(SEND), L_SEND, 2 },
	{ OP(SEND_IMM), L_SEND, 1 },
	{ OP(TSO), L_CTRL, 0 },
	{ OP(RDMA_READ), L_RDMA, 3 },
	{ OP(ATOMIC_CS), L_ATOMIC, 0 },
	{ OP(ATOMIC_FA), L_ATOMIC, 0 },
	{ OP(ATOMIC_MASKED_CS), L_CTRL, 0 },
	{ OP(ATOMIC_MASKED_FA), L_CTRL, 0 },
	{ OP(FMR), L_CTRL, 0 },
	{ OP(LOCAL_INVAL), L_CTRL, 0 },
	{ OP(CONFIG_CMD), L_CTRL, 0 },
	{ OP(SET_PSV), L_CTRL, 0 },
	{ OP(UMR), L_CTRL, 0 },
	{ OP(TAG_MATCHING), L_CTRL, 0 },
	{ OP(FLOW_TBL_ACCESS), L_CTRL, 0 },
	{ OP(MMO), L_CTRL, 0 },
	{ "SEND_UD", MLX5_OPCODE_SEND, L_UD, 2 },
	{ "SEND_INLINE", MLX5_OPCODE_SEND, L_INLINE, 37 },
	{ "SEND_INLINE_EMPTY", MLX5_OPCODE_SEND, L_INLINE, 0 },
	{ "RDMA_WRITE_INLINE", MLX5_OPCODE_RDMA_WRITE, L_RDMA_INLINE, 12 },
	{ "RECV", 0, L_RECV, 2 },
};

static void data_segs(uint8_t *p, unsigned k, unsigned n)
{
	for (unsigned j = 0; j < n; j++)
		mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)(p + 16 * j), f_len(k, j), f_lkey(k, j),
				    (uintptr_t)f_addr(k, j));
}

static unsigned inline_seg(uint8_t *p, unsigned k, unsigned len)
{
	struct mlx5_wqe_inl_data_seg *seg = (struct mlx5_wqe_inl_data_seg *)p;
	seg->byte_count = htobe32(len | MLX5_INLINE_SEG);
	for (unsigned i = 0; i < len; i++)
		p[sizeof(*seg) + i] = f_inl(k, i);
	return (len + sizeof(*seg) + 15) / 16;
}

static void wqe_case(unsigned k, const struct wcase *c)
{
	uint8_t buf[1024];
	unsigned ds = 1; /* ctrl */
	memset(buf, 0, sizeof(buf));
	uint8_t *p = buf + 16;

	switch (c->layout) {
	case L_CTRL:
		break;
	case L_SEND:
		data_segs(p, k, c->n);
		ds += c->n;
		break;
	case L_RDMA: {
		struct mlx5_wqe_raddr_seg *r = (struct mlx5_wqe_raddr_seg *)p;
		r->raddr = htobe64(f_raddr(k));
		r->rkey = htobe32(f_rkey(k));
		data_segs(p + 16, k, c->n);
		ds += 1 + c->n;
		break;
	}
	case L_ATOMIC: {
		struct mlx5_wqe_raddr_seg *r = (struct mlx5_wqe_raddr_seg *)p;
		struct mlx5_wqe_atomic_seg *a = (struct mlx5_wqe_atomic_seg *)(p + 16);
		r->raddr = htobe64(f_raddr(k));
		r->rkey = htobe32(f_rkey(k));
		if (c->opcode == MLX5_OPCODE_ATOMIC_CS) {
			a->swap_add = htobe64(f_swap(k));
			a->compare = htobe64(f_cmp(k));
		} else {
			a->swap_add = htobe64(f_swap(k));
			a->compare = 0;
		}
		mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)(p + 32), 8, f_lkey(k, 0), (uintptr_t)f_addr(k, 0));
		ds += 3;
		break;
	}
	case L_UD: {
		uint8_t rmac[6] = { 0x02, 0x00, 0x5e, 0x10, 0x20, (uint8_t)k };
		uint8_t rgid[16];
		for (unsigned i = 0; i < 16; i++)
			rgid[i] = (uint8_t)(i * 17 + k);
		mlx5dv_set_dgram_seg((struct mlx5_wqe_datagram_seg *)p, (uint64_t)(0x11110000 + k) << 32,
				     0x00abcd + k, 1, (uint8_t)(0x30 | (k & 0xf)), 0x80, (uint16_t)(0x1234 + k), rmac,
				     0x20, 64, 0x40300000 + k, rgid);
		data_segs(p + 48, k, c->n);
		ds += 3 + c->n;
		break;
	}
	case L_INLINE:
		ds += inline_seg(p, k, c->n);
		break;
	case L_RDMA_INLINE: {
		struct mlx5_wqe_raddr_seg *r = (struct mlx5_wqe_raddr_seg *)p;
		r->raddr = htobe64(f_raddr(k));
		r->rkey = htobe32(f_rkey(k));
		ds += 1 + inline_seg(p + 16, k, c->n);
		break;
	}
	case L_RECV: {
		/* An RQ WQE: data segments, then the end-of-list marker (qp.c mlx5_post_recv). */
		data_segs(buf, k, c->n);
		mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)(buf + 16 * c->n), 0, MLX5_INVALID_LKEY, 0);
		ds = c->n + 1;
		printf("wqe %s %x %u %u ", c->name, c->opcode, k, ds);
		hex(buf, 16 * ds);
		return;
	}
	}
	struct mlx5_wqe_ctrl_seg *ctrl = (struct mlx5_wqe_ctrl_seg *)buf;
	/* mlx5dv_set_ctrl_seg stores imm unconverted; its callers pass it big-endian already
	 * ("For the IBV_WR_SEND_WITH_INV, it should be htobe32(imm)"; the immediate of
	 * SEND_WITH_IMM / WRITE_WITH_IMM is a __be32 in ibv_send_wr). */
	mlx5dv_set_ctrl_seg(ctrl, f_pi(k), c->opcode, f_opmod(k), f_qpn(k), FM_CE_SE[k % 4], (uint8_t)ds, f_sig(k),
			    htobe32(f_imm(k)));
	ctrl->dci_stream_channel_id = htobe16(f_dci(k));
	printf("wqe %s %x %u %u ", c->name, c->opcode, k, ds);
	hex(buf, 16 * ds);
}

static const uint8_t CQE_OPS[] = {
	MLX5_CQE_REQ, MLX5_CQE_RESP_WR_IMM, MLX5_CQE_RESP_SEND, MLX5_CQE_RESP_SEND_IMM,
	MLX5_CQE_RESP_SEND_INV, MLX5_CQE_RESIZE_CQ, MLX5_CQE_NO_PACKET, MLX5_CQE_SIG_ERR,
	MLX5_CQE_REQ_ERR, MLX5_CQE_RESP_ERR, MLX5_CQE_INVALID,
};

static void cqe_case(unsigned c)
{
	struct mlx5_cqe64 q;
	memset(&q, 0, sizeof(q));
	uint8_t wop = CASES[c % 20].opcode;
	q.wqe_id = htobe16(0x1100 + c);
	q.ml_path = (uint8_t)(0x20 + c);
	q.slid = htobe16(0x3300 + c);
	q.flags_rqpn = htobe32(0x10000000 | (0x0a0b0c + c));
	q.hds_ip_ext = MLX5_CQE_L2_OK | MLX5_CQE_L3_OK | MLX5_CQE_L4_OK;
	q.l4_hdr_type_etc = (uint8_t)(0x40 + c);
	q.vlan_info = htobe16(0x0e00 + c);
	q.srqn_uidx = htobe32(0x00123400 + c);
	q.imm_inval_pkey = htobe32(0xfeed0000 + c);
	q.app = 1;
	q.app_op = (uint8_t)(2 + c);
	q.app_info = htobe16(0x5500 + c);
	q.byte_cnt = htobe32(0x10000 + c);
	q.timestamp = htobe64(0x0102030405060708ULL * (c + 1));
	q.sop_drop_qpn = htobe32(((uint32_t)wop << 24) | (0x0a0b0c + c));
	q.wqe_counter = htobe16(0xfff0 + c);
	q.signature = (uint8_t)(0xa0 + c);
	q.op_own = (uint8_t)((CQE_OPS[c] << 4) | ((c & 3) << 2) | (((c >> 1) & 1) << 1) | (c & 1));
	printf("cqe %u %x %x %x %x ", c, mlx5dv_get_cqe_owner(&q), mlx5dv_get_cqe_se(&q), mlx5dv_get_cqe_format(&q),
	       mlx5dv_get_cqe_opcode(&q));
	hex(&q, sizeof(q));
}

#define SYND(x) { #x, MLX5_CQE_SYNDROME_##x }
static const struct {
	const char *name;
	uint8_t value;
} SYNDROMES[] = {
	SYND(LOCAL_LENGTH_ERR),	    SYND(LOCAL_QP_OP_ERR),	   SYND(LOCAL_PROT_ERR),
	SYND(WR_FLUSH_ERR),	    SYND(MW_BIND_ERR),		   SYND(BAD_RESP_ERR),
	SYND(LOCAL_ACCESS_ERR),	    SYND(REMOTE_INVAL_REQ_ERR),	   SYND(REMOTE_ACCESS_ERR),
	SYND(REMOTE_OP_ERR),	    SYND(TRANSPORT_RETRY_EXC_ERR), SYND(RNR_RETRY_EXC_ERR),
	SYND(REMOTE_ABORTED_ERR),
};

static void errcqe_case(unsigned i)
{
	struct mlx5_err_cqe e;
	memset(&e, 0, sizeof(e));
	e.srqn = htobe32(0x00abc000 + i);
	e.vendor_err_synd = i == 0 ? MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT : (uint8_t)i;
	e.syndrome = SYNDROMES[i].value;
	e.s_wqe_opcode_qpn = htobe32(((uint32_t)CASES[i % 20].opcode << 24) | (0x000a0b + i));
	e.wqe_counter = htobe16(0x0100 + i);
	e.signature = (uint8_t)(0x3c + i);
	e.op_own = (uint8_t)(((i & 1 ? MLX5_CQE_REQ_ERR : MLX5_CQE_RESP_ERR) << 4) | (i & 1));
	printf("errcqe %s %x %u ", SYNDROMES[i].name, SYNDROMES[i].value, i);
	hex(&e, sizeof(e));
}

int main(void)
{
	/* WQE opcodes (the case table above names each one again). */
	CONST(MLX5_OPCODE_NOP); CONST(MLX5_OPCODE_SEND_INVAL); CONST(MLX5_OPCODE_RDMA_WRITE);
	CONST(MLX5_OPCODE_RDMA_WRITE_IMM); CONST(MLX5_OPCODE_SEND); CONST(MLX5_OPCODE_SEND_IMM);
	CONST(MLX5_OPCODE_TSO); CONST(MLX5_OPCODE_RDMA_READ); CONST(MLX5_OPCODE_ATOMIC_CS);
	CONST(MLX5_OPCODE_ATOMIC_FA); CONST(MLX5_OPCODE_ATOMIC_MASKED_CS); CONST(MLX5_OPCODE_ATOMIC_MASKED_FA);
	CONST(MLX5_OPCODE_FMR); CONST(MLX5_OPCODE_LOCAL_INVAL); CONST(MLX5_OPCODE_CONFIG_CMD);
	CONST(MLX5_OPCODE_SET_PSV); CONST(MLX5_OPCODE_UMR); CONST(MLX5_OPCODE_TAG_MATCHING);
	CONST(MLX5_OPCODE_FLOW_TBL_ACCESS); CONST(MLX5_OPCODE_MMO);
	/* CQE opcodes and op_own bits */
	CONST(MLX5_CQE_OWNER_MASK); CONST(MLX5_CQE_REQ); CONST(MLX5_CQE_RESP_WR_IMM); CONST(MLX5_CQE_RESP_SEND);
	CONST(MLX5_CQE_RESP_SEND_IMM); CONST(MLX5_CQE_RESP_SEND_INV); CONST(MLX5_CQE_RESIZE_CQ);
	CONST(MLX5_CQE_NO_PACKET); CONST(MLX5_CQE_SIG_ERR); CONST(MLX5_CQE_REQ_ERR); CONST(MLX5_CQE_RESP_ERR);
	CONST(MLX5_CQE_INVALID); CONST(MLX5_INLINE_SCATTER_32); CONST(MLX5_INLINE_SCATTER_64);
	CONST(MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT);
	CONST(MLX5_CQE_L2_OK); CONST(MLX5_CQE_L3_OK); CONST(MLX5_CQE_L4_OK);
	CONST(MLX5_CQE_L3_HDR_TYPE_NONE); CONST(MLX5_CQE_L3_HDR_TYPE_IPV6); CONST(MLX5_CQE_L3_HDR_TYPE_IPV4);
	for (unsigned i = 0; i < sizeof(SYNDROMES) / sizeof(SYNDROMES[0]); i++)
		printf("const MLX5_CQE_SYNDROME_%s %x\n", SYNDROMES[i].name, SYNDROMES[i].value);
	/* WQE flags and sizes, doorbells */
	CONST(MLX5_WQE_CTRL_CQ_UPDATE); CONST(MLX5_WQE_CTRL_SOLICITED); CONST(MLX5_WQE_CTRL_FENCE);
	CONST(MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE); CONST(MLX5_SEND_WQE_BB); CONST(MLX5_SEND_WQE_SHIFT);
	CONST(MLX5_INLINE_SEG); CONST(MLX5_INVALID_LKEY); CONST(MLX5_EXTENDED_UD_AV);
	CONST(MLX5_RCV_DBR); CONST(MLX5_SND_DBR); CONST(MLX5_CQ_DOORBELL);
	CONST(MLX5_CQ_DB_REQ_NOT_SOL); CONST(MLX5_CQ_DB_REQ_NOT);

	/* sizes and offsets */
	SIZE(mlx5_wqe_ctrl_seg);
	OFF(mlx5_wqe_ctrl_seg, opmod_idx_opcode); OFF(mlx5_wqe_ctrl_seg, qpn_ds); OFF(mlx5_wqe_ctrl_seg, signature);
	OFF(mlx5_wqe_ctrl_seg, dci_stream_channel_id); OFF(mlx5_wqe_ctrl_seg, fm_ce_se); OFF(mlx5_wqe_ctrl_seg, imm);
	SIZE(mlx5_wqe_raddr_seg);
	OFF(mlx5_wqe_raddr_seg, raddr); OFF(mlx5_wqe_raddr_seg, rkey); OFF(mlx5_wqe_raddr_seg, reserved);
	SIZE(mlx5_wqe_data_seg);
	OFF(mlx5_wqe_data_seg, byte_count); OFF(mlx5_wqe_data_seg, lkey); OFF(mlx5_wqe_data_seg, addr);
	SIZE(mlx5_wqe_atomic_seg);
	OFF(mlx5_wqe_atomic_seg, swap_add); OFF(mlx5_wqe_atomic_seg, compare);
	SIZE(mlx5_wqe_inl_data_seg);
	OFF(mlx5_wqe_inl_data_seg, byte_count);
	SIZE(mlx5_wqe_datagram_seg);
	SIZE(mlx5_wqe_av);
	OFF(mlx5_wqe_av, key.qkey.qkey); OFF(mlx5_wqe_av, key.qkey.reserved); OFF(mlx5_wqe_av, dqp_dct);
	OFF(mlx5_wqe_av, stat_rate_sl); OFF(mlx5_wqe_av, fl_mlid); OFF(mlx5_wqe_av, rlid);
	OFF(mlx5_wqe_av, reserved0); OFF(mlx5_wqe_av, rmac); OFF(mlx5_wqe_av, tclass); OFF(mlx5_wqe_av, hop_limit);
	OFF(mlx5_wqe_av, grh_gid_fl); OFF(mlx5_wqe_av, rgid);
	SIZE(mlx5_cqe64);
	OFF(mlx5_cqe64, wqe_id); OFF(mlx5_cqe64, ml_path); OFF(mlx5_cqe64, slid); OFF(mlx5_cqe64, flags_rqpn);
	OFF(mlx5_cqe64, hds_ip_ext); OFF(mlx5_cqe64, l4_hdr_type_etc); OFF(mlx5_cqe64, vlan_info);
	OFF(mlx5_cqe64, srqn_uidx); OFF(mlx5_cqe64, imm_inval_pkey); OFF(mlx5_cqe64, app); OFF(mlx5_cqe64, app_op);
	OFF(mlx5_cqe64, app_info); OFF(mlx5_cqe64, byte_cnt); OFF(mlx5_cqe64, timestamp);
	OFF(mlx5_cqe64, sop_drop_qpn); OFF(mlx5_cqe64, wqe_counter); OFF(mlx5_cqe64, signature);
	OFF(mlx5_cqe64, op_own);
	SIZE(mlx5_err_cqe);
	OFF(mlx5_err_cqe, srqn); OFF(mlx5_err_cqe, vendor_err_synd); OFF(mlx5_err_cqe, syndrome);
	OFF(mlx5_err_cqe, s_wqe_opcode_qpn); OFF(mlx5_err_cqe, wqe_counter); OFF(mlx5_err_cqe, signature);
	OFF(mlx5_err_cqe, op_own);

	for (unsigned k = 0; k < sizeof(CASES) / sizeof(CASES[0]); k++)
		wqe_case(k, &CASES[k]);
	for (unsigned c = 0; c < sizeof(CQE_OPS); c++)
		cqe_case(c);
	for (unsigned i = 0; i < sizeof(SYNDROMES) / sizeof(SYNDROMES[0]); i++)
		errcqe_case(i);
	return 0;
}
