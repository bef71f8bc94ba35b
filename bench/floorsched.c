// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The scheduler contract's floor (issue 16): what the kernel's multi-queue
 * scheduler hooks cost here when the scheduler does no scheduling at all.
 *
 * floor-min: the required hooks only.  Each hw queue has one FIFO of
 *	requests under one spinlock: insert appends (or puts at the head
 *	with RQ_INSERT_AT_HEAD), dispatch takes from the head, one at a time
 *	or in a batch (dispatch_requests), has_work looks without the lock.
 * floor-hooks: floor-min plus every other hook kyber registers, plus
 *	prepare_request (the kernel's kyber has it), each doing the least a
 *	scheduler that uses it must:
 *	- init_sched/exit_sched: per-queue data (the async depth);
 *	- depth_updated: recompute the async share (the whole depth);
 *	- limit_depth: async writes get that share (no limit in effect);
 *	- bio_merge: nothing queued on the bio's hw queue (one lockless
 *	  look; with one hw queue its data is found through the queue's,
 *	  as kyber does) means no merge; otherwise the newest requests of the FIFO
 *	  under its lock (rq_sched_list_merge);
 *	- prepare_request / finish_request / requeue_request: mark and
 *	  unmark the request as the scheduler's (elv_priv[0]);
 *	- completed_request: the latency it would account (now minus
 *	  io_start_time_ns), kept as the hw queue's last one;
 *	- completion_batch_begin/end: nothing is deferred, so nothing to do.
 *
 * Both are real schedulers: every request is dispatched once, in FIFO
 * order per hw queue; nothing is allocated per I/O.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include <librequest/elevator.h>

#include "floorsched.h"

struct floor_hd {
	pthread_spinlock_t lock;
	struct rq_list_node fifo;  /* queuelist, oldest first */
	_Atomic bool busy;         /* fifo not empty: stored under the lock */
	unsigned async_shallow;    /* floor-hooks: limit_depth's answer */
	_Atomic uint64_t last_lat; /* floor-hooks: completed_request's */
} __attribute__((aligned(64)));

struct floor_qd {
	_Atomic unsigned async_depth; /* tags async writes may use */
	struct floor_hd *only;        /* the hw queue's data when there is one */
};

static inline struct floor_hd *floor_hd(const struct rq_hw_ctx *hctx)
{
	return rq_sched_hctx_data(hctx);
}

/* The lockless look: anything on the FIFO (the lock orders the rest). */
static inline bool floor_fifo_busy(struct floor_hd *fhd)
{
	return atomic_load_explicit(&fhd->busy, memory_order_relaxed);
}

/* Under the lock, after the FIFO changed: what the lockless look sees. */
static inline void floor_fifo_mark(struct floor_hd *fhd)
{
	atomic_store_explicit(&fhd->busy, !rq_list_empty(&fhd->fifo), memory_order_relaxed);
}

static int floor_init_hctx(struct rq_hw_ctx *hctx, unsigned idx)
{
	struct floor_hd *fhd;

	(void)idx;
	if (posix_memalign((void **)&fhd, 64, sizeof(*fhd)))
		return -ENOMEM;
	pthread_spin_init(&fhd->lock, PTHREAD_PROCESS_PRIVATE);
	rq_list_init(&fhd->fifo);
	atomic_init(&fhd->busy, false);
	fhd->async_shallow = 0;
	atomic_init(&fhd->last_lat, 0);
	rq_sched_set_hctx_data(hctx, fhd);
	return 0;
}

static void floor_exit_hctx(struct rq_hw_ctx *hctx, unsigned idx)
{
	struct floor_hd *fhd = floor_hd(hctx);

	(void)idx;
	pthread_spin_destroy(&fhd->lock);
	free(fhd);
	rq_sched_set_hctx_data(hctx, NULL);
}

static void floor_insert_requests(struct rq_hw_ctx *hctx, struct rq_list_node *list,
				  unsigned flags)
{
	struct floor_hd *fhd = floor_hd(hctx);

	pthread_spin_lock(&fhd->lock);
	if (flags & RQ_INSERT_AT_HEAD)
		rq_list_splice_init(list, &fhd->fifo);
	else
		rq_list_splice_tail_init(list, &fhd->fifo);
	floor_fifo_mark(fhd);
	pthread_spin_unlock(&fhd->lock);
}

static unsigned floor_dispatch_requests(struct rq_hw_ctx *hctx, struct rq_list_node *list,
					unsigned max)
{
	struct floor_hd *fhd = floor_hd(hctx);
	unsigned n = 0;

	if (!floor_fifo_busy(fhd))
		return 0;
	pthread_spin_lock(&fhd->lock);
	while (n < max && !rq_list_empty(&fhd->fifo)) {
		struct rq_list_node *node = fhd->fifo.next;

		rq_list_del_init(node);
		rq_list_add_tail(node, list);
		n++;
	}
	floor_fifo_mark(fhd);
	pthread_spin_unlock(&fhd->lock);
	return n;
}

static struct rq_request *floor_dispatch_request(struct rq_hw_ctx *hctx)
{
	struct rq_list_node list;
	struct rq_request *rq;

	rq_list_init(&list);
	if (!floor_dispatch_requests(hctx, &list, 1))
		return NULL;
	rq = rq_list_first_rq(&list);
	rq_list_del_init(&rq->queuelist);
	return rq;
}

static bool floor_has_work(struct rq_hw_ctx *hctx)
{
	return floor_fifo_busy(floor_hd(hctx));
}

/* ------------------------------------------------ floor-hooks' extras */

static int floor_init_sched(struct rq_queue *q, void **data)
{
	struct floor_qd *fqd = malloc(sizeof(*fqd));

	if (!fqd)
		return -ENOMEM;
	atomic_init(&fqd->async_depth, rq_queue_nr_requests(q));
	fqd->only = NULL;
	*data = fqd;
	return 0;
}

static void floor_exit_sched(struct rq_queue *q, void *data)
{
	(void)q;
	free(data);
}

static void floor_depth_updated(struct rq_hw_ctx *hctx)
{
	struct rq_queue *q = rq_hctx_queue(hctx);
	struct floor_qd *fqd = rq_sched_data(q);
	unsigned depth = rq_queue_nr_requests(q);

	atomic_store_explicit(&fqd->async_depth, depth, memory_order_relaxed);
	floor_hd(hctx)->async_shallow = rq_sched_shallow_depth(hctx, depth);
}

static int floor_hooks_init_hctx(struct rq_hw_ctx *hctx, unsigned idx)
{
	struct rq_queue *q = rq_hctx_queue(hctx);
	int ret = floor_init_hctx(hctx, idx);

	if (ret)
		return ret;
	floor_depth_updated(hctx);
	if (rq_queue_nr_hw_queues(q) == 1)
		((struct floor_qd *)rq_sched_data(q))->only = floor_hd(hctx);
	return 0;
}

static void floor_limit_depth(struct rq_alloc_data *data)
{
	if (data->op == RQ_OP_READ || (data->opf & RQ_BIO_SYNC))
		return;
	data->shallow_depth = floor_hd(data->hctx)->async_shallow;
}

static bool floor_bio_merge(struct rq_queue *q, struct rq_bio *bio, unsigned nr_segs)
{
	struct floor_hd *fhd = ((struct floor_qd *)rq_sched_data(q))->only;
	bool merged;

	/* one hw queue: its data without the look-up of the bio's */
	if (!fhd)
		fhd = floor_hd(rq_sched_bio_hctx(q, bio, NULL));

	if (!floor_fifo_busy(fhd))
		return false;
	pthread_spin_lock(&fhd->lock);
	merged = rq_sched_list_merge(q, &fhd->fifo, bio, nr_segs);
	pthread_spin_unlock(&fhd->lock);
	return merged;
}

static void floor_prepare_request(struct rq_request *rq)
{
	rq->elv_priv[0] = rq->hctx;
}

static void floor_finish_request(struct rq_request *rq)
{
	rq->elv_priv[0] = NULL;
}

static void floor_completed_request(struct rq_request *rq, uint64_t now_ns)
{
	struct floor_hd *fhd = floor_hd(rq->hctx);
	uint64_t lat = now_ns > rq->io_start_time_ns ? now_ns - rq->io_start_time_ns : 0;

	atomic_store_explicit(&fhd->last_lat, lat, memory_order_relaxed);
}

static void floor_batch_edge(struct rq_hw_ctx *hctx)
{
	(void)hctx; /* nothing deferred: nothing to open or apply */
}

static const struct rq_elevator_type floor_min = {
	RQ_ELV_TYPE_INIT,
	.name = "floor-min",
	.ops = {
		.init_hctx = floor_init_hctx,
		.exit_hctx = floor_exit_hctx,
		.insert_requests = floor_insert_requests,
		.dispatch_request = floor_dispatch_request,
		.has_work = floor_has_work,
	},
	.dispatch_requests = floor_dispatch_requests,
};

static const struct rq_elevator_type floor_hooks = {
	RQ_ELV_TYPE_INIT,
	.name = "floor-hooks",
	.ops = {
		.init_sched = floor_init_sched,
		.exit_sched = floor_exit_sched,
		.init_hctx = floor_hooks_init_hctx,
		.exit_hctx = floor_exit_hctx,
		.depth_updated = floor_depth_updated,
		.limit_depth = floor_limit_depth,
		.bio_merge = floor_bio_merge,
		.prepare_request = floor_prepare_request,
		.insert_requests = floor_insert_requests,
		.dispatch_request = floor_dispatch_request,
		.has_work = floor_has_work,
		.completed_request = floor_completed_request,
		.finish_request = floor_finish_request,
		.requeue_request = floor_finish_request,
	},
	.dispatch_requests = floor_dispatch_requests,
	.completion_batch_begin = floor_batch_edge,
	.completion_batch_end = floor_batch_edge,
};

int floor_sched_register(void)
{
	int ret = rq_sched_register(&floor_min);

	if (ret)
		return ret;
	ret = rq_sched_register(&floor_hooks);
	if (ret)
		rq_sched_unregister(floor_min.name);
	return ret;
}

void floor_sched_unregister(void)
{
	rq_sched_unregister(floor_hooks.name);
	rq_sched_unregister(floor_min.name);
}
