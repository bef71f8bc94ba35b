/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The core of a queue, common to both front ends (the kernel's blk-core.c):
 * the submission and split loop, queue enter/exit (a per-CPU usage count
 * that freezing drains), freeze, quiesce, what the two constructors and
 * destructors share, and the getters.
 *
 * The path of a bio: rq_submit_bio() checks it against the limits and the
 * capacity, enters the queue, strips flush bits a device without a write
 * cache does not need, splits it to the limits, and hands each piece to
 * the front end (q->fe->submit), which merges, plugs, allocates, schedules
 * and dispatches it.  Each piece holds one usage reference until its
 * request is freed.
 *
 * What may run at the same time: see the tables in include/librequest/queue.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal/alloc.h"
#include "internal/queue.h"
#include "internal/trace.h"

/* ------------------------------------------------------- usage / freeze */

/*
 * Take a usage reference unless the queue is frozen (wait, or fail with
 * nowait) or dying.  Pairs with queue_exit().  Returns 0, -EAGAIN, -ENODEV.
 */
int queue_enter(struct rq_queue *q, struct rq_sw_ctx *ctx, bool nowait)
{
	for (;;) {
		atomic_fetch_add_explicit(&ctx->usage, 1, memory_order_seq_cst);
		if (likely(!atomic_load_explicit(&q->freeze_depth, memory_order_seq_cst)))
			return 0;
		queue_exit_ctx(q, ctx);
		if (atomic_load(&q->dying))
			return -ENODEV;
		if (nowait)
			return -EAGAIN;
		/* our plugged requests hold usage too: let them go before sleeping */
		rq_flush_plug();
		pthread_mutex_lock(&q->freeze_lock);
		atomic_fetch_add(&q->freeze_waiters, 1);
		while (atomic_load(&q->freeze_depth) && !atomic_load(&q->dying))
			pthread_cond_wait(&q->unfreeze_cond, &q->freeze_lock);
		atomic_fetch_sub(&q->freeze_waiters, 1);
		pthread_mutex_unlock(&q->freeze_lock);
	}
}

/* The usage count, summed over every CPU's slot. */
static long queue_usage(struct rq_queue *q)
{
	long sum = 0;

	for (unsigned i = 0; i < q->nr_cpus; i++)
		sum += atomic_load_explicit(&q->ctxs[i].usage, memory_order_seq_cst);
	return sum;
}

/* @ts: CLOCK_REALTIME @ms from now (for pthread_cond_timedwait). */
void timespec_in_ms(struct timespec *ts, unsigned ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_nsec += (long)ms * 1000000L;
	while (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/*
 * Wait until no request holds a usage reference, calling @between (if
 * set) before each look: what makes progress on the front end's side
 * (running the queues, failing what is queued).  Usage drops under a
 * freeze wake the waiter; it also looks again every 2 ms.
 */
void queue_wait_drained(struct rq_queue *q, void (*between)(struct rq_queue *q))
{
	struct timespec ts;

	for (;;) {
		if (between)
			between(q);
		pthread_mutex_lock(&q->freeze_lock);
		if (queue_usage(q) == 0) {
			pthread_mutex_unlock(&q->freeze_lock);
			return;
		}
		timespec_in_ms(&ts, 2);
		pthread_cond_timedwait(&q->freeze_cond, &q->freeze_lock, &ts);
		pthread_mutex_unlock(&q->freeze_lock);
	}
}

static void run_queues_now(struct rq_queue *q)
{
	q->fe->run_queues(q, false);
}

RQ_EXPORT void rq_queue_freeze(struct rq_queue *q)
{
	/* our own plugged requests and cached tags hold usage: let them go */
	rq_flush_plug();
	pthread_mutex_lock(&q->freeze_lock);
	atomic_fetch_add_explicit(&q->freeze_depth, 1, memory_order_seq_cst);
	pthread_mutex_unlock(&q->freeze_lock);
	queue_wait_drained(q, run_queues_now);
}

RQ_EXPORT bool rq_queue_frozen(const struct rq_queue *q)
{
	return atomic_load_explicit(&q->freeze_depth, memory_order_relaxed) > 0;
}

RQ_EXPORT void rq_queue_unfreeze(struct rq_queue *q)
{
	pthread_mutex_lock(&q->freeze_lock);
	if (atomic_load(&q->freeze_depth) > 0 &&
	    atomic_fetch_sub_explicit(&q->freeze_depth, 1, memory_order_seq_cst) == 1)
		pthread_cond_broadcast(&q->unfreeze_cond);
	pthread_mutex_unlock(&q->freeze_lock);
}

RQ_EXPORT void rq_queue_quiesce(struct rq_queue *q)
{
	atomic_fetch_add_explicit(&q->quiesce_depth, 1, memory_order_seq_cst);
	q->fe->quiesce_sync(q);
}

RQ_EXPORT void rq_queue_unquiesce(struct rq_queue *q)
{
	if (atomic_load(&q->quiesce_depth) > 0 &&
	    atomic_fetch_sub_explicit(&q->quiesce_depth, 1, memory_order_seq_cst) == 1)
		q->fe->run_queues(q, false);
}

/* What a scheduler switch needs: no request in the queue, no dispatch running. */
void queue_freeze_and_quiesce(struct rq_queue *q)
{
	rq_queue_freeze(q);
	rq_queue_quiesce(q);
}

void queue_unquiesce_and_unfreeze(struct rq_queue *q)
{
	rq_queue_unquiesce(q);
	rq_queue_unfreeze(q);
}

void queue_limits_changed(struct rq_queue *q)
{
	limits_fast_lim(&q->limits, &q->fast);
}

/*
 * An internal request (the flush machinery's) on @hctx, with no tag of its
 * own: it borrows one or takes a driver tag at dispatch.
 */
struct rq_request *queue_alloc_internal_request(struct rq_queue *q, struct rq_hw_ctx *hctx)
{
	struct rq_request *rq = rq_alloc_node(q->rq_size, hctx ? hctx->numa_node : -1);

	if (rq) {
		request_layout_init(rq);
		rq_init_common(rq, q, hctx, queue_ctx(q, 0));
	}
	return rq;
}

/* ----------------------------------------------------------- submission */

/*
 * The entered bio that is not the fast case: flush bits a device without
 * a write cache does not need, then the split loop.  Out of line, so the
 * fast path keeps a small frame.
 */
static __attribute__((noinline)) void submit_bio_split(struct rq_queue *q,
							struct rq_sw_ctx *ctx,
							struct rq_bio *bio)
{
	const struct rq_fe_ops *fe = q->fe;

	if (unlikely((bio->opf & (RQ_BIO_PREFLUSH | RQ_BIO_FUA)) || bio->op == RQ_OP_FLUSH)) {
		if (!(q->limits.features & RQ_FEAT_WRITE_CACHE)) {
			/* nothing volatile to flush: strip, and end empty flushes */
			bio->opf &= ~(RQ_BIO_PREFLUSH | RQ_BIO_FUA);
			if (bio->op == RQ_OP_FLUSH) {
				queue_exit_ctx(q, ctx);
				bio_end_with(bio, RQ_STS_OK);
				return;
			}
		}
	}
	trace_queue(q, bio);
	for (;;) {
		unsigned nr_segs;
		rq_status_t split_status = RQ_STS_OK;
		struct rq_bio *piece = bio_split_to_limits_status(&q->limits, bio, &nr_segs,
								  &split_status);

		if (unlikely(!piece)) {
			queue_exit_ctx(q, ctx);
			if (split_status == RQ_STS_INVAL)
				stat_inc(q, ST_INVALID);
			bio_end_with(bio, split_status);
			return;
		}
		if (piece == bio) {
			fe->submit(q, ctx, bio, nr_segs);
			return;
		}
		/* the front piece carries the preflush; the rest need not */
		bio->opf &= ~RQ_BIO_PREFLUSH;
		stat_inc(q, ST_SPLITS);
		trace_split(q, piece, bio->iter.sector);
		atomic_fetch_add_explicit(&ctx->usage, 1, memory_order_seq_cst);
		fe->submit(q, ctx, piece, nr_segs);
	}
}

/*
 * Check, enter, split, and hand each piece to the front end.  Each piece
 * takes one usage reference (the first, the one entered) and the front
 * end drops it when the piece is merged away or its request is freed.
 * The common read or write (bio_fast_ok(), then a size that max_sectors
 * never splits) skips the full check and the split walk: one piece, one
 * segment.  The software queue is the one of the plug's usage stock
 * (plug_queue_enter(): the CPU is looked up once per stock), else the
 * calling CPU's; it is the submission's (tls_submit_ctx) from here on.
 * @fast: bio_fast_ok()'s answer (the limits it reads do not change while
 * a queue is in use; max_sectors, which may, is read inside the queue).
 * Out of line: rq_submit_bio() takes the commonest case itself.
 */
static __attribute__((noinline)) void submit_bio_on(struct rq_queue *q, struct rq_bio *bio,
						    bool fast)
{
	struct rq_sw_ctx *ctx;
	uint64_t capacity;
	rq_status_t status;
	int ret;

	mbox_run_own();
	capacity = atomic_load_explicit(&q->capacity, memory_order_relaxed);
	if (!fast) {
		status = bio_check(&q->limits, capacity, bio);
		if (unlikely(status != RQ_STS_OK)) {
			stat_inc(q, ST_INVALID);
			bio_end_with(bio, status);
			return;
		}
	}
	ctx = plug_queue_enter(q);
	if (unlikely(!ctx)) {
		ctx = queue_ctx(q, cur_cpu());
		tls_submit_ctx = ctx;
		ret = queue_enter(q, ctx, bio->opf & RQ_BIO_NOWAIT);
		if (unlikely(ret)) {
			bio_end_with(bio, ret == -EAGAIN ? RQ_STS_AGAIN : RQ_STS_IOERR);
			return;
		}
	}
	tls_submit_ctx = ctx;
	/* max_sectors may change under a freeze: read it inside the queue */
	if (likely(fast) && likely(bio->iter.size <= q->fast.max_bytes)) {
		trace_queue(q, bio);
		q->fe->submit(q, ctx, bio, 1);
		return;
	}
	submit_bio_split(q, ctx, bio);
}

/*
 * The commonest case takes no call but the front end's: nothing in the
 * mailbox, a bio bio_fast_ok() takes, nothing observed (no Q event to
 * record), and a usage reference from the plug's stock (plug_stock_take(),
 * which gives the software queue).  Everything else, and a stock that
 * needs a refill, goes to submit_bio_on(), which does it all in the same
 * order.  Only @outer lives across a call here, so the frame stays small.
 */
RQ_EXPORT void rq_submit_bio(struct rq_queue *q, struct rq_bio *bio)
{
	struct rq_sw_ctx *outer = tls_submit_ctx; /* a driver may submit from inside a submission */
	struct rq_sw_ctx *ctx;
	bool fast;

	fast = bio_fast_ok(&q->fast, atomic_load_explicit(&q->capacity, memory_order_relaxed), bio);
	if (likely(fast && !mbox_own_pending() &&
		   !atomic_load_explicit(&obs_active, memory_order_relaxed) &&
		   (ctx = plug_stock_take(q)))) {
		tls_submit_ctx = ctx;
		/* max_sectors may change under a freeze: read it inside the queue */
		if (likely(bio->iter.size <= q->fast.max_bytes))
			q->fe->submit(q, ctx, bio, 1);
		else
			submit_bio_split(q, ctx, bio);
	} else {
		submit_bio_on(q, bio, fast);
	}
	trace_step_end();
	tls_submit_ctx = outer;
}

/* ------------------------------------------------------ make, destroy */

/* The parts of a new queue both front ends set up alike; NULL without memory. */
struct rq_queue *queue_alloc_common(const struct queue_common_config *cfg)
{
	struct rq_queue *q = mem_zalloc(sizeof(*q));

	if (!q)
		return NULL;
	q->fe = cfg->fe;
	stats_init(q);
	obs_init(q);
	q->rq_size = cfg->rq_size;
	q->queuedata = cfg->queuedata;
	q->limits = *cfg->limits;
	queue_limits_changed(q);
	atomic_store(&q->capacity, cfg->capacity);
	q->nr_cpus = cfg->nr_cpus ? cfg->nr_cpus : 1;
	q->io_timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : RQ_DEFAULT_TIMEOUT_MS;
	q->hw_write_cache = cfg->limits->features & RQ_FEAT_WRITE_CACHE;
	q->rq_affinity = 1;
	q->nr_requests = cfg->nr_requests;
	pthread_mutex_init(&q->freeze_lock, NULL);
	pthread_cond_init(&q->freeze_cond, NULL);
	pthread_cond_init(&q->unfreeze_cond, NULL);
	pthread_mutex_init(&q->sysfs_lock, NULL);
	pthread_rwlock_init(&q->tsan_quiesce_lock, NULL);
	rq_spin_init(&q->requeue_lock);
	rq_list_init(&q->requeue_list);
	q->ctxs = rq_alloc_node(sizeof(*q->ctxs) * q->nr_cpus, cfg->numa_node);
	if (!q->ctxs) {
		queue_free_common(q);
		return NULL;
	}
	for (unsigned cpu = 0; cpu < q->nr_cpus; cpu++) {
		struct rq_sw_ctx *ctx = &q->ctxs[cpu];

		rq_spin_init(&ctx->lock);
		rq_list_init(&ctx->rq_list);
		ctx->cpu = cpu;
		ctx->q = q;
	}
	return q;
}

/* Undo queue_alloc_common(); the front end has freed its own parts. */
void queue_free_common(struct rq_queue *q)
{
	if (q->ctxs)
		rq_free_node(q->ctxs, sizeof(*q->ctxs) * q->nr_cpus);
	pthread_mutex_destroy(&q->freeze_lock);
	pthread_cond_destroy(&q->freeze_cond);
	pthread_cond_destroy(&q->unfreeze_cond);
	pthread_mutex_destroy(&q->sysfs_lock);
	pthread_rwlock_destroy(&q->tsan_quiesce_lock);
	obs_free(q);
	stats_free(q);
	mem_free(q, sizeof(*q));
}

/*
 * Teardown begins: nothing enters any more (frozen for good, dying), and
 * whoever waits for an unfreeze or a tag wakes up to fail.
 */
void queue_start_dying(struct rq_queue *q)
{
	atomic_store(&q->dying, true);
	atomic_fetch_add(&q->freeze_depth, 1); /* usage drops wake the destroyer */
	pthread_mutex_lock(&q->freeze_lock);
	pthread_cond_broadcast(&q->unfreeze_cond);
	pthread_mutex_unlock(&q->freeze_lock);
}

/*
 * Requests of the calling thread's plug fail, the front end fails what is
 * queued and waits for what its driver holds, then frees the queue.
 */
RQ_EXPORT void rq_queue_destroy(struct rq_queue *q)
{
	if (!q)
		return;
	queue_start_dying(q);
	plug_fail_queue(q);
	q->fe->destroy(q);
}

/* -------------------------------------------------------------- getters */

RQ_EXPORT bool rq_queue_is_sq(const struct rq_queue *q)
{
	return q->fe->elv_features & RQ_ELV_F_SQ;
}

RQ_EXPORT int rq_queue_get_limits(struct rq_queue *q, struct rq_queue_limits *lim, size_t size)
{
	struct rq_queue_limits own = q->limits;

	return rq_copy_sized_out(lim, size, &own, sizeof(own)) ? -EINVAL : 0;
}

RQ_EXPORT void rq_queue_set_capacity(struct rq_queue *q, uint64_t sectors)
{
	atomic_store(&q->capacity, sectors);
}

RQ_EXPORT uint64_t rq_queue_capacity(struct rq_queue *q)
{
	return atomic_load(&q->capacity);
}

RQ_EXPORT void *rq_queue_driver_data(struct rq_queue *q)
{
	return q->queuedata;
}

RQ_EXPORT int rq_queue_get_stats(struct rq_queue *q, struct rq_queue_stats *out, size_t size)
{
	uint64_t sum[ST_NR] = { 0 };
	struct rq_queue_stats own, *st = &own;

	if (size < sizeof(uint32_t))
		return -EINVAL;
	stats_sum(q, sum);
	st->bios = sum[ST_BIOS] + sum[ST_BIO_REQUESTS];
	st->splits = sum[ST_SPLITS];
	st->requests = sum[ST_REQUESTS] + sum[ST_BIO_REQUESTS];
	st->dispatched = sum[ST_DISPATCHED];
	st->completed = sum[ST_COMPLETED];
	st->merges_back = sum[ST_MERGES_BACK];
	st->merges_front = sum[ST_MERGES_FRONT];
	st->merges_rq = sum[ST_MERGES_RQ];
	st->plug_merges = sum[ST_PLUG_MERGES];
	st->resource = sum[ST_RESOURCE];
	st->requeues = sum[ST_REQUEUES];
	st->timeouts = sum[ST_TIMEOUTS];
	st->flushes = sum[ST_FLUSHES];
	st->errors = sum[ST_ERRORS];
	st->invalid = sum[ST_INVALID];
	rq_copy_sized_out(out, size, &own, sizeof(own));
	return 0;
}

RQ_EXPORT unsigned rq_queue_nr_hw_queues(const struct rq_queue *q)
{
	return q->nr_hw_queues;
}

/*
 * The scheduler switch's pending view (internal/mq.h, set by lib/mq-sched.c).
 * The accessors that consult it are marked inline only as a hint, so LTO
 * keeps inlining them into the schedulers' hot hooks; they stay external
 * definitions, since elevator.h declares them without inline.
 */
_Atomic unsigned sched_views_active;
__thread const struct sched_view *sched_view_tls __attribute__((tls_model("initial-exec")));

/* The installed scheduler's data, or, on a thread switching @q, the pending one's. */
RQ_EXPORT inline void *rq_sched_data(struct rq_queue *q)
{
	const struct sched_view *v = sched_view_of(q);

	if (unlikely(v))
		return v->data;
	return q->elevator ? q->elevator->data : NULL;
}

/* nr_requests in force, or, on a thread switching @q, the pending scheduler's. */
RQ_EXPORT inline unsigned rq_queue_nr_requests(const struct rq_queue *q)
{
	const struct sched_view *v = sched_view_of(q);

	if (unlikely(v))
		return v->nr_requests;
	return q->nr_requests;
}

RQ_EXPORT bool rq_queue_rotational(const struct rq_queue *q)
{
	return q->limits.features & RQ_FEAT_ROTATIONAL;
}
