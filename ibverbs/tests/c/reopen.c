/* Traffic after every context of the device was closed and it was opened again: an RC WRITE
 * on fresh contexts, twice (a sim NIC brought up again beside a dead twin with its GID would
 * lose it).
 */
#include "common.h"

static void rc_write(void)
{
	struct side a, b;
	pair_open(&a, &b, IBV_QPT_RC, 0, 8);
	fill(a.buf, 128, 31);
	struct ibv_sge s = {(uintptr_t)a.buf, 128, a.mr->lkey};
	struct ibv_send_wr w = {.wr_id = 1, .sg_list = &s, .num_sge = 1,
				.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED},
			   *bad = NULL;
	w.wr.rdma.remote_addr = (uintptr_t)b.buf;
	w.wr.rdma.rkey = b.mr->rkey;
	CHECK_EQ(ibv_post_send(a.qp, &w, &bad), 0);
	expect_wc(a.cq, 1, IBV_WC_RDMA_WRITE, NULL);
	CHECK(memcmp(a.buf, b.buf, 128) == 0, "WRITE data differs");
	side_close(&a);
	side_close(&b);
}

int main(void)
{
	prog_name = "reopen";
	rc_write();
	rc_write();
	done();
	return 0;
}
