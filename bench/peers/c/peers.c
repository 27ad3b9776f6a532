/* The two workloads against libibverbs, written as a C program writes them: the floor.
 * peers_c write|pingpong N GID_INDEX
 *   write:    N RDMA WRITEs of 64 B, one in 16 signaled, at most 128 in flight.
 *   pingpong: N round trips of a 64 B SEND and its 64 B reply.
 * Two RC QPs of the first device, connected to each other. Prints the empty polls. */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIZE 64
#define DEPTH 128
#define SIGNAL_EVERY 16

static void die(const char *what)
{
	fprintf(stderr, "peers_c: %s failed\n", what);
	exit(1);
}

static struct ibv_qp *create_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr attr = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = DEPTH, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &attr);
	struct ibv_qp_attr init = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				    .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	if (!qp || ibv_modify_qp(qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					       IBV_QP_ACCESS_FLAGS))
		die("creating a QP");
	return qp;
}

/* INIT -> RTR -> RTS towards the QP numbered peer on the same port. */
static void connect_to(struct ibv_qp *qp, uint32_t peer, union ibv_gid *gid, int gid_index,
		       enum ibv_mtu mtu)
{
	struct ibv_qp_attr rtr = {
		.qp_state = IBV_QPS_RTR, .path_mtu = mtu, .dest_qp_num = peer, .rq_psn = 0,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = *gid, .sgid_index = gid_index, .hop_limit = 1 } },
	};
	struct ibv_qp_attr rts = { .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
				   .rnr_retry = 7, .sq_psn = 0, .max_rd_atomic = 1 };
	if (ibv_modify_qp(qp, &rtr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					    IBV_QP_MIN_RNR_TIMER) ||
	    ibv_modify_qp(qp, &rts, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("connecting the QPs");
}

static long empty_polls;

/* Polls cq until a completion of opcode want; returns its wr_id. */
static uint64_t wait_for(struct ibv_cq *cq, enum ibv_wc_opcode want)
{
	struct ibv_wc wc;
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0 || (n == 1 && wc.status != IBV_WC_SUCCESS))
			die("a completion");
		if (n == 0)
			empty_polls++;
		else if (wc.opcode == want)
			return wc.wr_id;
	}
}

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, char *buf)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = SIZE, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 0, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(qp, &wr, &bad))
		die("ibv_post_recv");
}

static void post_send(struct ibv_qp *qp, struct ibv_mr *mr, char *buf, uint64_t wr_id,
		      enum ibv_wr_opcode opcode, unsigned flags, struct ibv_mr *remote)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = SIZE, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				  .opcode = opcode, .send_flags = flags }, *bad;
	if (remote) {
		wr.wr.rdma.remote_addr = (uintptr_t)remote->addr;
		wr.wr.rdma.rkey = remote->rkey;
	}
	if (ibv_post_send(qp, &wr, &bad))
		die("ibv_post_send");
}

int main(int argc, char **argv)
{
	if (argc != 4 || (strcmp(argv[1], "write") && strcmp(argv[1], "pingpong")))
		die("usage: peers_c write|pingpong N GID_INDEX; parsing the arguments");
	long n = atol(argv[2]);
	int gid_index = atoi(argv[3]);
	if (!strcmp(argv[1], "write") && n % SIGNAL_EVERY)
		die("write: N must be a multiple of 16; parsing the arguments");

	struct ibv_device **devices = ibv_get_device_list(NULL);
	struct ibv_context *ctx = devices && devices[0] ? ibv_open_device(devices[0]) : NULL;
	if (!ctx)
		die("opening the first device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq_a = ibv_create_cq(ctx, 2 * DEPTH, NULL, NULL, 0);
	struct ibv_cq *cq_b = ibv_create_cq(ctx, 2 * DEPTH, NULL, NULL, 0);
	static char a_buf[2 * SIZE], b_buf[2 * SIZE]; /* each: what it sends, then what it receives */
	struct ibv_mr *a_mr = ibv_reg_mr(pd, a_buf, sizeof a_buf, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *b_mr = ibv_reg_mr(pd, b_buf, sizeof b_buf,
					 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!pd || !cq_a || !cq_b || !a_mr || !b_mr)
		die("allocating the resources");
	struct ibv_qp *a = create_qp(pd, cq_a), *b = create_qp(pd, cq_b);
	struct ibv_port_attr port;
	union ibv_gid gid;
	if (ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, gid_index, &gid))
		die("querying the port");
	connect_to(a, b->qp_num, &gid, gid_index, port.active_mtu);
	connect_to(b, a->qp_num, &gid, gid_index, port.active_mtu);

	if (!strcmp(argv[1], "write")) {
		long posted = 0, completed = 0;
		struct ibv_wc wcs[DEPTH / SIGNAL_EVERY];
		while (completed < n) {
			for (; posted < n && posted - completed < DEPTH; posted++) {
				unsigned flags = (posted + 1) % SIGNAL_EVERY ? 0 : IBV_SEND_SIGNALED;
				post_send(a, a_mr, a_buf, posted, IBV_WR_RDMA_WRITE, flags, b_mr);
			}
			int got = ibv_poll_cq(cq_a, DEPTH / SIGNAL_EVERY, wcs);
			if (got < 0)
				die("ibv_poll_cq");
			if (got == 0)
				empty_polls++;
			for (int i = 0; i < got; i++) {
				if (wcs[i].status != IBV_WC_SUCCESS)
					die("an RDMA WRITE");
				completed += SIGNAL_EVERY;
			}
		}
	} else {
		post_recv(a, a_mr, a_buf + SIZE);
		post_recv(b, b_mr, b_buf + SIZE);
		for (long i = 0; i < n; i++) {
			post_send(a, a_mr, a_buf, i, IBV_WR_SEND, IBV_SEND_SIGNALED, NULL);
			wait_for(cq_b, IBV_WC_RECV);
			post_recv(b, b_mr, b_buf + SIZE);
			post_send(b, b_mr, b_buf, i, IBV_WR_SEND, IBV_SEND_SIGNALED, NULL);
			wait_for(cq_a, IBV_WC_RECV);
			post_recv(a, a_mr, a_buf + SIZE);
		}
	}
	printf("empty polls: %ld\n", empty_polls);
	return 0;
}
