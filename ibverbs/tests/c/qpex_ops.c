/* The extended post (ibv_wr_*) for every opcode bypass posts, data checked byte for byte:
 * RDMA WRITE (one SGE, an SGE list, a batch of several under one wr_complete, inline, inline
 * list), WRITE with immediate, READ, SEND and SEND with immediate (SGE and inline), both
 * atomics (RC; UD and UC are in unreliable.c); wr_id / wr_flags taken per request; unsignaled
 * requests give no completion.
 */
#include "common.h"

#include <pthread.h>

#define RC_OPS                                                                              \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND | \
	 IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |                              \
	 IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)

static struct side a, b;

static void reset_bufs(void)
{
	memset(a.buf, 0, BUF);
	memset(b.buf, 0, BUF);
}

static void write_one_sge(void)
{
	reset_bufs();
	fill(a.buf, 1000, 1);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 11;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, b.mr->rkey, (uintptr_t)b.buf + 100);
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf, 1000);
	CHECK_EQ(ibv_wr_complete(a.qpx), 0);
	struct ibv_wc wc;
	expect_wc(a.cq, 11, IBV_WC_RDMA_WRITE, &wc);
	CHECK(memcmp(b.buf + 100, a.buf, 1000) == 0, "WRITE data differs");
	CHECK(b.buf[99] == 0 && b.buf[1100] == 0, "WRITE wrote outside its range");
}

/* Four WRITEs in one batch (the driver's WriteBatch), only the last signaled. */
static void write_batch(void)
{
	reset_bufs();
	fill(a.buf, 4 * 256, 2);
	ibv_wr_start(a.qpx);
	for (int i = 0; i < 4; i++) {
		a.qpx->wr_id = 20 + i;
		a.qpx->wr_flags = i == 3 ? IBV_SEND_SIGNALED : 0;
		ibv_wr_rdma_write(a.qpx, b.mr->rkey, (uintptr_t)b.buf + 2048 + i * 256);
		ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf + i * 256, 256);
	}
	CHECK_EQ(ibv_wr_complete(a.qpx), 0);
	expect_wc(a.cq, 23, IBV_WC_RDMA_WRITE, NULL);
	poll_none(a.cq, 50);
	CHECK(memcmp(b.buf + 2048, a.buf, 1024) == 0, "batched WRITE data differs");
}

/* WRITE gathering three SGEs (one zero-length, skipped), then an inline WRITE and an
 * inline-list WRITE in one mixed batch with a SEND (post_send_list). */
static void write_lists_and_inline(void)
{
	reset_bufs();
	fill(a.buf, 300, 3);
	struct ibv_sge l[3] = {
		{.addr = (uintptr_t)a.buf, .length = 100, .lkey = a.mr->lkey},
		{.addr = (uintptr_t)a.buf + 500, .length = 0, .lkey = a.mr->lkey},
		{.addr = (uintptr_t)a.buf + 200, .length = 100, .lkey = a.mr->lkey},
	};
	uint8_t inl[48], inl2[20];
	fill(inl, sizeof(inl), 4);
	fill(inl2, sizeof(inl2), 5);
	struct ibv_data_buf parts[2] = {{.addr = inl, .length = 10}, {.addr = inl2, .length = 20}};
	post_recv(&b, 77, 3000, 64);

	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 30;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, b.mr->rkey, (uintptr_t)b.buf);
	ibv_wr_set_sge_list(a.qpx, 3, l);
	memset(l, 0xff, sizeof(l)); /* the list was copied by the setter */
	a.qpx->wr_id = 31;
	a.qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_rdma_write(a.qpx, b.mr->rkey, (uintptr_t)b.buf + 1000);
	ibv_wr_set_inline_data(a.qpx, inl, sizeof(inl));
	a.qpx->wr_id = 32;
	ibv_wr_rdma_write(a.qpx, b.mr->rkey, (uintptr_t)b.buf + 1100);
	ibv_wr_set_inline_data_list(a.qpx, 2, parts);
	a.qpx->wr_id = 33;
	ibv_wr_send(a.qpx);
	ibv_wr_set_inline_data(a.qpx, inl2, sizeof(inl2));
	memset(inl, 0, sizeof(inl)); /* inline data was copied too */
	CHECK_EQ(ibv_wr_complete(a.qpx), 0);
	for (int i = 30; i < 33; i++)
		expect_wc(a.cq, i, IBV_WC_RDMA_WRITE, NULL);
	expect_wc(a.cq, 33, IBV_WC_SEND, NULL);
	struct ibv_wc wc;
	expect_wc(b.cq, 77, IBV_WC_RECV, &wc);
	CHECK_EQ(wc.byte_len, 20);
	CHECK_EQ(wc.wc_flags & IBV_WC_WITH_IMM, 0);
	CHECK(memcmp(b.buf + 3000, inl2, 20) == 0, "inline SEND data differs");
	CHECK(memcmp(b.buf, a.buf, 100) == 0 && memcmp(b.buf + 100, a.buf + 200, 100) == 0,
	      "SGE-list WRITE data differs");
	fill(inl, sizeof(inl), 4);
	CHECK(memcmp(b.buf + 1000, inl, sizeof(inl)) == 0, "inline WRITE data differs");
	CHECK(memcmp(b.buf + 1100, inl, 10) == 0 && memcmp(b.buf + 1110, inl2, 20) == 0,
	      "inline-list WRITE data differs");
}

static void write_imm_and_send_imm(void)
{
	reset_bufs();
	fill(a.buf, 512, 6);
	post_recv(&b, 40, 0, 0);	/* WRITE_IMM consumes a receive, its data goes to the address */
	post_recv(&b, 41, 3000, 512);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 42;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write_imm(a.qpx, b.mr->rkey, (uintptr_t)b.buf + 1024, htobe32(0x12345678));
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf, 256);
	a.qpx->wr_id = 43;
	a.qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
	ibv_wr_send_imm(a.qpx, htobe32(0xa1b2c3d4));
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf + 256, 256);
	CHECK_EQ(ibv_wr_complete(a.qpx), 0);
	expect_wc(a.cq, 42, IBV_WC_RDMA_WRITE, NULL);
	expect_wc(a.cq, 43, IBV_WC_SEND, NULL);
	struct ibv_wc wc;
	expect_wc(b.cq, 40, IBV_WC_RECV_RDMA_WITH_IMM, &wc);
	CHECK(wc.wc_flags & IBV_WC_WITH_IMM, "WRITE_IMM: no IBV_WC_WITH_IMM");
	CHECK_EQ(be32toh(wc.imm_data), 0x12345678);
	CHECK_EQ(wc.byte_len, 256);
	expect_wc(b.cq, 41, IBV_WC_RECV, &wc);
	CHECK(wc.wc_flags & IBV_WC_WITH_IMM, "SEND_IMM: no IBV_WC_WITH_IMM");
	CHECK_EQ(be32toh(wc.imm_data), 0xa1b2c3d4);
	CHECK_EQ(wc.byte_len, 256);
	CHECK_EQ(wc.qp_num, b.qp->qp_num);
	CHECK(memcmp(b.buf + 1024, a.buf, 256) == 0, "WRITE_IMM data differs");
	CHECK(memcmp(b.buf + 3000, a.buf + 256, 256) == 0, "SEND_IMM data differs");
}

static void read_sge_list(void)
{
	reset_bufs();
	fill(b.buf + 512, 600, 7);
	struct ibv_sge l[2] = {
		{.addr = (uintptr_t)a.buf, .length = 200, .lkey = a.mr->lkey},
		{.addr = (uintptr_t)a.buf + 1000, .length = 400, .lkey = a.mr->lkey},
	};
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 50;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(a.qpx, b.mr->rkey, (uintptr_t)b.buf + 512);
	ibv_wr_set_sge_list(a.qpx, 2, l);
	CHECK_EQ(ibv_wr_complete(a.qpx), 0);
	struct ibv_wc wc;
	expect_wc(a.cq, 50, IBV_WC_RDMA_READ, &wc);
	CHECK_EQ(wc.byte_len, 600);
	CHECK(memcmp(a.buf, b.buf + 512, 200) == 0 && memcmp(a.buf + 1000, b.buf + 712, 400) == 0,
	      "READ data differs");
}

/* mlx5 HCAs (and the sim) treat the target and the fetched value as big-endian 64-bit
 * words; the operands are host order. */
static void atomics(void)
{
	reset_bufs();
	uint64_t *target = (uint64_t *)(b.buf + 64);
	uint64_t *res = (uint64_t *)(a.buf + 8);
	*target = htobe64(100);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 60;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_fetch_add(a.qpx, b.mr->rkey, (uintptr_t)target, 5);
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)res, 8);
	CHECK_EQ(ibv_wr_complete(a.qpx), 0);
	struct ibv_wc wc;
	expect_wc(a.cq, 60, IBV_WC_FETCH_ADD, &wc);
	CHECK_EQ(be64toh(*res), 100);
	CHECK_EQ(be64toh(*target), 105);

	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 61;
	ibv_wr_atomic_cmp_swp(a.qpx, b.mr->rkey, (uintptr_t)target, 105, 0xdeadbeefcafeULL);
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)res, 8);
	a.qpx->wr_id = 62;
	ibv_wr_atomic_cmp_swp(a.qpx, b.mr->rkey, (uintptr_t)target, 1, 2); /* no match */
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)res + 8, 8);
	CHECK_EQ(ibv_wr_complete(a.qpx), 0);
	expect_wc(a.cq, 61, IBV_WC_COMP_SWAP, NULL);
	expect_wc(a.cq, 62, IBV_WC_COMP_SWAP, NULL);
	CHECK_EQ(be64toh(res[0]), 105);
	CHECK_EQ(be64toh(res[1]), 0xdeadbeefcafeULL);
	CHECK_EQ(be64toh(*target), 0xdeadbeefcafeULL);
}

/* Two threads post batches to one QP at once (wr_start holds the QP's lock until
 * wr_complete): every WRITE lands and completes once. */
#define THREAD_WRS 30
static void *poster(void *arg)
{
	uintptr_t t = (uintptr_t)arg;
	for (int i = 0; i < THREAD_WRS; i++) {
		ibv_wr_start(a.qpx);
		a.qpx->wr_id = 1000 * (t + 1) + i;
		a.qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(a.qpx, b.mr->rkey, (uintptr_t)b.buf + 2048 + t * 1024 + i * 8);
		ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf + t * 1024 + i * 8, 8);
		if (ibv_wr_complete(a.qpx))
			return (void *)1;
	}
	return NULL;
}

static void two_threads(void)
{
	reset_bufs();
	fill(a.buf, 2048, 10);
	pthread_t th[2];
	for (uintptr_t t = 0; t < 2; t++)
		CHECK_EQ(pthread_create(&th[t], NULL, poster, (void *)t), 0);
	for (int t = 0; t < 2; t++) {
		void *r;
		CHECK_EQ(pthread_join(th[t], &r), 0);
		CHECK(r == NULL, "thread %d: wr_complete failed", t);
	}
	int seen[2][THREAD_WRS] = {{0}};
	for (int n = 0; n < 2 * THREAD_WRS; n++) {
		struct ibv_wc wc;
		poll_one(a.cq, &wc);
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		uint64_t t = wc.wr_id / 1000 - 1, i = wc.wr_id % 1000;
		CHECK(t < 2 && i < THREAD_WRS, "wr_id %llu", (unsigned long long)wc.wr_id);
		CHECK(!seen[t][i]++, "wr_id %llu twice", (unsigned long long)wc.wr_id);
	}
	CHECK(memcmp(b.buf + 2048, a.buf, THREAD_WRS * 8) == 0 &&
		      memcmp(b.buf + 3072, a.buf + 1024, THREAD_WRS * 8) == 0,
	      "threaded WRITE data differs");
}

int main(void)
{
	prog_name = "qpex_ops";
	pair_open(&a, &b, IBV_QPT_RC, RC_OPS, 64);
	write_one_sge();
	write_batch();
	write_lists_and_inline();
	write_imm_and_send_imm();
	read_sge_list();
	atomics();
	two_threads();
	/* Many rounds of one-WRITE batches: the SQ wraps, the fast path's credits refill. */
	for (int i = 0; i < 200; i++)
		write_one_sge();
	side_close(&a);
	side_close(&b);
	done();
	return 0;
}
