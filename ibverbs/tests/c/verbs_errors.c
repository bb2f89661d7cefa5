/* Error paths of the basic verbs, with the errno libibverbs / mlx5 give: bad MR access flags
 * (EINVAL), destroying a CQ, PD, SRQ or completion channel still in use (EBUSY, and the object
 * still works), state transitions the QP state machine refuses (EINVAL, the state unchanged),
 * posting on a QP that cannot send (EINVAL), CQ sizes out of range (EINVAL), a bad port;
 * ibv_reg_dmabuf_mr's refusals (an fd that is not a dma-buf: EINVAL, the fd still the
 * program's; a closed fd: EBADF; flags, lengths and IOVAs man 3 ibv_reg_dmabuf_mr rules out:
 * EINVAL, checked before the fd is looked at).
 */
#define _GNU_SOURCE
#include "common.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

static void mr_access(struct side *s)
{
	int bad[] = {IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_ATOMIC,
		     IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		errno = 0;
		struct ibv_mr *mr = ibv_reg_mr(s->pd, s->buf, 64, bad[i]);
		CHECK(!mr && errno == EINVAL, "access %#x: mr %p errno %d", bad[i], (void *)mr,
		      errno);
	}
	struct ibv_mr *ok = ibv_reg_mr(s->pd, s->buf, 64, IBV_ACCESS_REMOTE_READ);
	CHECK(ok, "REMOTE_READ alone is allowed: %s", strerror(errno));
	CHECK_EQ(ibv_dereg_mr(ok), 0);
}

static void dmabuf_mr(struct side *s)
{
	int mfd = memfd_create("verbs-errors", 0);
	CHECK(mfd >= 0, "memfd_create: %s", strerror(errno));
	CHECK_EQ(ftruncate(mfd, 2 * BUF), 0);
	errno = 0;
	struct ibv_mr *mr = ibv_reg_dmabuf_mr(s->pd, 0, BUF, 0, mfd, IBV_ACCESS_LOCAL_WRITE);
	CHECK(!mr && errno == EINVAL, "a memfd is not a dma-buf: mr %p errno %d", (void *)mr,
	      errno);
	CHECK(fcntl(mfd, F_GETFD) >= 0, "the program's fd stays open: %s", strerror(errno));
	errno = 0;
	mr = ibv_reg_dmabuf_mr(s->pd, 0, BUF, 0, -1, IBV_ACCESS_LOCAL_WRITE);
	CHECK(!mr && errno == EBADF, "fd -1: errno %d", errno);
	int bad_access[] = {IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND,
			    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED,
			    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND,
			    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_HUGETLB, IBV_ACCESS_REMOTE_WRITE};
	for (size_t i = 0; i < sizeof(bad_access) / sizeof(bad_access[0]); i++) {
		errno = 0;
		mr = ibv_reg_dmabuf_mr(s->pd, 0, BUF, 0, -1, bad_access[i]);
		CHECK(!mr && errno == EINVAL, "access %#x: errno %d", bad_access[i], errno);
	}
	struct {
		uint64_t offset, iova;
		size_t len;
	} bad_range[] = {{0, 0, 0}, {16, 32, 64}, {UINT64_MAX - 8, UINT64_MAX - 8, 64},
			 {0xff0, UINT64_MAX - 0xf, 0x20}};
	for (size_t i = 0; i < sizeof(bad_range) / sizeof(bad_range[0]); i++) {
		errno = 0;
		mr = ibv_reg_dmabuf_mr(s->pd, bad_range[i].offset, bad_range[i].len,
				       bad_range[i].iova, -1, IBV_ACCESS_LOCAL_WRITE);
		CHECK(!mr && errno == EINVAL, "range %zu: errno %d", i, errno);
	}
	close(mfd);
}

static void busy_objects(struct side *s)
{
	CHECK_EQ(ibv_destroy_cq(s->cq), EBUSY);
	CHECK_EQ(ibv_dealloc_pd(s->pd), EBUSY);
	/* SRQ with a QP on it. */
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(s->pd, &sa);
	CHECK(srq, "ibv_create_srq: %s", strerror(errno));
	struct ibv_qp_init_attr qa = {.send_cq = s->cq, .recv_cq = s->cq, .srq = srq,
				      .cap = {.max_send_wr = 4, .max_send_sge = 1},
				      .qp_type = IBV_QPT_RC};
	struct ibv_qp *q = ibv_create_qp(s->pd, &qa);
	CHECK(q, "ibv_create_qp on an SRQ: %s", strerror(errno));
	CHECK_EQ(ibv_destroy_srq(srq), EBUSY);
	CHECK_EQ(ibv_destroy_qp(q), 0);
	CHECK_EQ(ibv_destroy_srq(srq), 0);
	/* Completion channel with a CQ on it. */
	struct ibv_comp_channel *ch = ibv_create_comp_channel(s->ctx);
	CHECK(ch, "ibv_create_comp_channel: %s", strerror(errno));
	struct ibv_cq *cq = ibv_create_cq(s->ctx, 8, NULL, ch, 0);
	CHECK(cq, "ibv_create_cq on a channel: %s", strerror(errno));
	CHECK_EQ(ibv_destroy_comp_channel(ch), EBUSY);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	CHECK_EQ(ibv_destroy_comp_channel(ch), 0);
}

static enum ibv_qp_state state_of(struct ibv_qp *q)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;
	CHECK_EQ(ibv_query_qp(q, &a, IBV_QP_STATE, &i), 0);
	return a.qp_state;
}

static void bad_transitions(struct side *s)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	CHECK_EQ(ibv_modify_qp(s->qp, &a, IBV_QP_STATE), EINVAL);
	a.qp_state = IBV_QPS_RTS;
	CHECK_EQ(ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), EINVAL);
	a.qp_state = (enum ibv_qp_state)77;
	CHECK_EQ(ibv_modify_qp(s->qp, &a, IBV_QP_STATE), EINVAL);
	CHECK_EQ(state_of(s->qp), IBV_QPS_RESET);
	CHECK_EQ(s->qp->state, IBV_QPS_RESET);

	/* Posting on a QP in RESET: EINVAL, *bad_wr set. */
	struct ibv_sge sg = {(uintptr_t)s->buf, 8, s->mr->lkey};
	struct ibv_send_wr w = {.wr_id = 1, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED},
			   *bad = NULL;
	CHECK_EQ(ibv_post_send(s->qp, &w, &bad), EINVAL);
	CHECK(bad == &w, "*bad_wr");

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	CHECK_EQ(ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						 IBV_QP_ACCESS_FLAGS),
		 0);
	CHECK_EQ(state_of(s->qp), IBV_QPS_INIT);
	/* INIT -> RTS skips RTR. */
	a.qp_state = IBV_QPS_RTS;
	CHECK_EQ(ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), EINVAL);
	/* INIT -> RTR of an RC QP without its address: EINVAL. */
	a.qp_state = IBV_QPS_RTR;
	CHECK_EQ(ibv_modify_qp(s->qp, &a, IBV_QP_STATE), EINVAL);
	CHECK_EQ(state_of(s->qp), IBV_QPS_INIT);
	/* Posting on a QP in INIT: EINVAL. */
	CHECK_EQ(ibv_post_send(s->qp, &w, &bad), EINVAL);
	/* Any state -> RESET and -> ERR are allowed. */
	a.qp_state = IBV_QPS_ERR;
	CHECK_EQ(ibv_modify_qp(s->qp, &a, IBV_QP_STATE), 0);
	CHECK_EQ(state_of(s->qp), IBV_QPS_ERR);
	a.qp_state = IBV_QPS_RESET;
	CHECK_EQ(ibv_modify_qp(s->qp, &a, IBV_QP_STATE), 0);
	CHECK_EQ(state_of(s->qp), IBV_QPS_RESET);
}

static void sizes_and_ports(struct side *s)
{
	struct ibv_device_attr da;
	CHECK_EQ(ibv_query_device(s->ctx, &da), 0);
	errno = 0;
	struct ibv_cq *cq = ibv_create_cq(s->ctx, da.max_cqe + 1, NULL, NULL, 0);
	CHECK(!cq && errno == EINVAL, "cqe > max_cqe: cq %p errno %d", (void *)cq, errno);
	errno = 0;
	struct ibv_qp_init_attr qa = {.send_cq = s->cq, .recv_cq = s->cq,
				      .cap = {.max_send_wr = (uint32_t)da.max_qp_wr + 1,
					      .max_recv_wr = 1, .max_send_sge = 1,
					      .max_recv_sge = 1},
				      .qp_type = IBV_QPT_RC};
	struct ibv_qp *q = ibv_create_qp(s->pd, &qa);
	CHECK(!q && errno == EINVAL, "max_send_wr > max_qp_wr: qp %p errno %d", (void *)q, errno);
	struct ibv_port_attr pa;
	CHECK(ibv_query_port(s->ctx, 1, &pa) == 0, "port 1");
	CHECK(ibv_query_port(s->ctx, 2, &pa) != 0, "port 2 of a one-port device");
	union ibv_gid g;
	CHECK(ibv_query_gid(s->ctx, 1, pa.gid_tbl_len, &g) != 0, "GID index past the table");
}

int main(void)
{
	prog_name = "verbs_errors";
	struct side s;
	side_open(&s, IBV_QPT_RC, 0, 8);
	mr_access(&s);
	dmabuf_mr(&s);
	busy_objects(&s);
	bad_transitions(&s);
	sizes_and_ports(&s);
	side_close(&s);
	done();
	return 0;
}
