/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The multi-queue front end (the kernel's blk-mq.c): tag sets, hardware
 * and software contexts, request and driver-tag allocation, dispatch,
 * completion and completion batches, requeue, the multi-queue part of the
 * service pass (delayed runs, the timeout scan), and teardown.
 *
 * The core hands it each piece of a bio (mq_submit()): it tries a plug
 * merge and a scheduler (or software queue) merge, takes a tag and the
 * preallocated request behind it, then either queues it on the thread's
 * plug, inserts it into the scheduler, or issues it directly.  Dispatch of
 * one hctx is owned by one thread at a time (run_state); others that want
 * it run leave a note (RUN_AGAIN) that the owner honours before it lets go.
 * The layers below reach it only through mq_fe_ops; it never calls the
 * single-queue front end.
 *
 * What may run at the same time: see the tables in include/librequest/mq.h
 * and queue.h.  Dispatch runs inside a liburcu-bp read-side section, so
 * rq_queue_quiesce() can wait for every running queue_rq with one grace period.
 */
#define _GNU_SOURCE
#define _LGPL_SOURCE
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <urcu-bp.h>
/* the end without an atomic (rq_take_in_flight()): x86-64, rseq, membarrier */
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && defined(__has_include)
#if __has_include(<sys/rseq.h>) && __has_include(<linux/membarrier.h>)
#include <linux/membarrier.h>
#include <sys/rseq.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(RSEQ_SIG) && defined(SYS_membarrier)
#define MQ_END_RSEQ 1
#endif
#endif
#endif

#include "config.h"
#if HAVE_NUMA
#include <numa.h>
#endif

#include "internal/alloc.h"
#include "internal/queue.h"
#include "internal/mq.h"
#include "internal/elevator.h"
#include "internal/ioc.h"
#include "internal/trace.h"

/*
 * Dispatch read-side sections.  liburcu-bp orders them against
 * rq_queue_quiesce() with membarrier, which ThreadSanitizer cannot see; a
 * TSan build uses a reader-writer lock with the same meaning instead, so
 * the sanitizer checks the rest of the code rather than reporting this.
 */
#if defined(__SANITIZE_THREAD__)
static inline void dispatch_read_lock(struct rq_queue *q)
{
	pthread_rwlock_rdlock(&q->tsan_quiesce_lock);
}

static inline void dispatch_read_unlock(struct rq_queue *q)
{
	pthread_rwlock_unlock(&q->tsan_quiesce_lock);
}

static void dispatch_synchronize(struct rq_queue *q)
{
	pthread_rwlock_wrlock(&q->tsan_quiesce_lock);
	pthread_rwlock_unlock(&q->tsan_quiesce_lock);
	urcu_bp_synchronize_rcu();
}
#else
static inline void dispatch_read_lock(struct rq_queue *q)
{
	(void)q;
	urcu_bp_read_lock();
}

static inline void dispatch_read_unlock(struct rq_queue *q)
{
	(void)q;
	urcu_bp_read_unlock();
}

static void dispatch_synchronize(struct rq_queue *q)
{
	(void)q;
	urcu_bp_synchronize_rcu();
}
#endif

static const struct rq_fe_ops mq_fe_ops;
static void run_hw_queue(struct rq_hw_ctx *hctx);

/* Count for the queue of @ctx (exact per-thread counters, lib/stats.c). */
static inline void ctx_stat_add(struct rq_sw_ctx *ctx, unsigned idx, uint64_t n)
{
	stat_add(ctx->q, idx, n);
}

static inline bool hctx_stopped(struct rq_hw_ctx *hctx)
{
	return atomic_load_explicit(&hctx->state, memory_order_acquire) & HCTX_STOPPED;
}

/* ------------------------------------------------------- tags, requests */

static bool queue_dying_cb(void *arg)
{
	return atomic_load(&((struct rq_queue *)arg)->dying);
}

static void flush_plug_cb(void *arg)
{
	(void)arg;
	rq_flush_plug();
}

static struct rq_hw_ctx *map_hctx(struct rq_queue *q, unsigned cpu, unsigned opf)
{
	struct rq_tag_set *set = q->set;

	if (unlikely(opf & RQ_BIO_POLLED) && set->nr_poll_queues) {
		unsigned first = set->nr_hw_queues - set->nr_poll_queues;

		return q->hctxs[first + cpu % set->nr_poll_queues];
	}
	if (unlikely(cpu >= q->nr_cpus))
		cpu %= q->nr_cpus;
	return q->hctxs[q->map[cpu]];
}

/* Get a tag from @tags, sleeping if allowed; -1 on failure. */
static int get_tag(struct rq_queue *q, struct rq_tags *tags, unsigned cpu, unsigned shallow,
		   bool nowait)
{
	int tag = rq_tags_get(tags, cpu, shallow);
	int bit;

	if (likely(tag >= 0) || nowait)
		return tag;
	trace_sleep(q);
	bit = sbq_wait_get(&tags->bitmap, cpu, shallow, flush_plug_cb, queue_dying_cb, q);
	return bit < 0 ? -1 : (int)(tags->nr_reserved + (unsigned)bit);
}

/*
 * Fair sharing of a tag set's driver tags between queues (RQ_TAG_SET_SHARED,
 * the kernel's hctx_may_queue()): while N queues are busy on the same tags,
 * each hw queue may hold at most max(ceil(depth / N), 4) driver tags.  A hw
 * queue becomes busy with its first driver tag and idle when the service
 * thread finds it holding none.  Costs nothing for unshared tag sets.
 */
static inline bool tags_shared(const struct rq_queue *q)
{
	return q->mq_flags & MQ_F_SHARED_TAGS;
}

static bool hctx_may_queue(struct rq_hw_ctx *hctx)
{
	struct rq_tags *tags = hctx->tags;
	unsigned users, depth;

	if (!atomic_load_explicit(&hctx->tag_active, memory_order_relaxed) &&
	    !atomic_exchange(&hctx->tag_active, true))
		atomic_fetch_add(&tags->active_queues, 1);
	users = (unsigned)atomic_load_explicit(&tags->active_queues, memory_order_relaxed);
	if (users <= 1)
		return true;
	depth = (tags->nr_tags - tags->nr_reserved + users - 1) / users;
	if (depth < 4)
		depth = 4;
	return (unsigned)atomic_load_explicit(&hctx->nr_active, memory_order_relaxed) < depth;
}

/* Service thread: a shared hw queue holding no driver tag is idle again. */
static void hctx_tag_idle_check(struct rq_hw_ctx *hctx)
{
	if (atomic_load(&hctx->tag_active) && !atomic_load(&hctx->nr_active) &&
	    atomic_exchange(&hctx->tag_active, false))
		atomic_fetch_sub(&hctx->tags->active_queues, 1);
}

/* Take a driver tag on @hctx; -1 if none (or over the fair share). */
static int driver_tag_get(struct rq_hw_ctx *hctx, unsigned cpu)
{
	int tag;

	if (likely(!tags_shared(hctx->q)))
		return rq_tags_get(hctx->tags, cpu, 0);
	if (!hctx_may_queue(hctx))
		return -1;
	tag = rq_tags_get(hctx->tags, cpu, 0);
	if (tag >= 0)
		atomic_fetch_add(&hctx->nr_active, 1);
	return tag;
}

/* Give driver tag @tag of @hctx back; wakes fair-share waiters. */
static void driver_tag_put(struct rq_hw_ctx *hctx, unsigned tag, unsigned cpu)
{
	rq_tags_put(hctx->tags, tag, cpu);
	if (unlikely(tags_shared(hctx->q))) {
		atomic_fetch_sub(&hctx->nr_active, 1);
		if (atomic_load(&hctx->share_waiters)) {
			pthread_mutex_lock(&hctx->share_lock);
			pthread_cond_broadcast(&hctx->share_cond);
			pthread_mutex_unlock(&hctx->share_lock);
		}
	}
}

/* A driver tag at submission (no scheduler), sleeping unless @nowait. */
static int driver_tag_get_wait(struct rq_queue *q, struct rq_hw_ctx *hctx, unsigned cpu,
			       bool nowait)
{
	int tag;

	if (likely(!tags_shared(q)))
		return get_tag(q, hctx->tags, cpu, 0, nowait);
	for (;;) {
		struct timespec ts;

		if (hctx_may_queue(hctx)) {
			tag = get_tag(q, hctx->tags, cpu, 0, nowait);
			if (tag >= 0)
				atomic_fetch_add(&hctx->nr_active, 1);
			return tag;
		}
		if (nowait || atomic_load(&q->dying))
			return -1;
		/* over our share: our own completions make room */
		trace_step_end();
		rq_flush_plug();
		pthread_mutex_lock(&hctx->share_lock);
		atomic_fetch_add(&hctx->share_waiters, 1);
		if (!hctx_may_queue(hctx)) {
			timespec_in_ms(&ts, 1);
			pthread_cond_timedwait(&hctx->share_cond, &hctx->share_lock, &ts);
		}
		atomic_fetch_sub(&hctx->share_waiters, 1);
		pthread_mutex_unlock(&hctx->share_lock);
	}
}

/*
 * The scheduler's limit_depth() for @bio (0: no limit); flushes (@flush:
 * a flush or PREFLUSH bio, which bypasses the scheduler) are not limited.
 */
static unsigned sched_limit_depth(struct rq_queue *q, struct rq_hw_ctx *hctx,
				  const struct rq_bio *bio, bool flush)
{
	struct rq_alloc_data data = { .q = q, .hctx = hctx, .op = bio->op, .opf = bio->opf };

	if (flush || !q->elv.limit_depth)
		return 0;
	q->elv.limit_depth(&data);
	return data.shallow_depth;
}

/* The request of driver tag @tag of @hctx (no scheduler), reset for @ctx. */
static inline __attribute__((always_inline)) struct rq_request *
none_rq_take(struct rq_queue *q, struct rq_hw_ctx *hctx, struct rq_sw_ctx *ctx,
	     struct rq_tags *tags, int tag)
{
	struct rq_request *rq = tags->static_rqs[tag];

	rq_init_common(rq, q, hctx, ctx);
	rq->tag = tag;
	rq->internal_tag = -1;
	rq->start_time_ns = 0;
	__atomic_store_n(&tags->rqs[tag], rq, __ATOMIC_RELEASE);
	return rq;
}

/* A new request takes @bio, its first (nr_segs segments), and its op and place. */
static inline __attribute__((always_inline)) void
rq_take_bio(struct rq_request *rq, struct rq_bio *bio, unsigned nr_segs)
{
	rq->op = bio->op;
	rq->opf = bio->opf;
	rq->ioprio = bio->ioprio;
	rq->sector = bio->iter.sector;
	rq->bytes = bio->iter.size;
	rq->nr_segments = (uint16_t)nr_segs;
	rq->bio = rq->biotail = bio;
	bio->next = NULL;
	rq->ioc = bio->ioc;
}

/*
 * The request of scheduler tag @tag of @hctx, reset for @ctx: marked as a
 * scheduler tag's, its start time the plug's clock.
 */
static inline __attribute__((always_inline)) struct rq_request *
sched_rq_take(struct rq_queue *q, struct rq_hw_ctx *hctx, struct rq_sw_ctx *ctx, int tag)
{
	struct rq_request *rq = hctx->sched_tags->static_rqs[tag];

	rq_init_common(rq, q, hctx, ctx);
	rq->internal_tag = tag;
	rq->tag = -1;
	rq->rq_flags = RQ_RQF_SCHED_TAGS;
	rq->start_time_ns = core_clock_ns();
	return rq;
}

/*
 * A scheduler's new request (rq_take_bio() done) takes io context @ioc (the
 * bio's, else the thread's) and, without a priority of its own, the
 * context's; then, unless @flush, the scheduler's prepare_request.
 */
static inline __attribute__((always_inline)) void
sched_rq_prepare(struct rq_request *rq, struct rq_queue *q,
		 const struct rq_bio *bio, struct rq_io_context *ioc, bool flush)
{
	rq->ioc = ioc;
	if (!bio->ioprio && ioc)
		rq->ioprio = ioc_prio(ioc);
	/*
	 * As the kernel: flushes and PREFLUSH writes bypass the scheduler (the
	 * flush machinery issues their steps); everything else, FUA writes
	 * included (Linux 6.x), is the scheduler's, from prepare_request to
	 * finish_request.
	 */
	if (!flush) {
		rq->rq_flags |= RQ_RQF_ELVPRIV;
		if (q->elv.prepare_request)
			q->elv.prepare_request(rq);
	}
}

/* A new request takes @bio (rq_take_bio()), its completion mailbox, its trace. */
static inline __attribute__((always_inline)) void
mq_rq_start_bio(struct rq_queue *q, struct rq_request *rq, struct rq_bio *bio, unsigned nr_segs)
{
	rq_take_bio(rq, bio, nr_segs);
	if (unlikely(READ_ONCE(q->rq_affinity) == 2))
		rq_priv(rq)->end_io_data = mbox_self();
	trace_getrq(q, rq, bio);
}

/* mq_get_request() with a scheduler: a scheduler tag. */
static inline __attribute__((always_inline)) struct rq_request *
mq_get_sched_request(struct rq_queue *q, struct rq_sw_ctx *ctx, struct rq_hw_ctx *hctx,
		     struct rq_plug *plug, struct rq_bio *bio, unsigned nr_segs)
{
	/* a flush or PREFLUSH bio bypasses the scheduler */
	bool flush = (bio->opf & RQ_BIO_PREFLUSH) || bio->op == RQ_OP_FLUSH;
	unsigned shallow = sched_limit_depth(q, hctx, bio, flush);
	struct rq_request *rq;
	int tag = -1;

	if (plug)
		tag = plug_cached_tag(plug, hctx->sched_tags, q, ctx, shallow);
	if (tag < 0)
		tag = get_tag(q, hctx->sched_tags, ctx->cpu, shallow, bio->opf & RQ_BIO_NOWAIT);
	if (tag < 0)
		return NULL;
	rq = sched_rq_take(q, hctx, ctx, tag);
	mq_rq_start_bio(q, rq, bio, nr_segs);
	sched_rq_prepare(rq, q, bio, bio->ioc ? bio->ioc : ioc_current(), flush);
	return rq;
}

/*
 * Allocate a request for @bio on @ctx: a scheduler tag with a scheduler
 * (@sched: q->elevator, the caller's test), else a driver tag (from
 * @plug's batch, when the thread has a plug).
 * Returns NULL when no tag could be had (nowait, dying).
 */
static inline __attribute__((always_inline)) struct rq_request *
mq_get_request(struct rq_queue *q, struct rq_sw_ctx *ctx, struct rq_plug *plug,
	       struct rq_bio *bio, unsigned nr_segs, bool sched)
{
	/* ctx->hctx is map_hctx()'s answer for every bio but a polled one */
	struct rq_hw_ctx *hctx = likely(!(bio->opf & RQ_BIO_POLLED)) ?
		ctx->hctx : map_hctx(q, ctx->cpu, bio->opf);
	struct rq_tags *tags = hctx->tags;
	struct rq_request *rq;
	int tag = -1;

	if (sched)
		return mq_get_sched_request(q, ctx, hctx, plug, bio, nr_segs);
	if (plug && !tags_shared(q))
		tag = plug_cached_tag(plug, tags, NULL, ctx, 0);
	if (tag < 0)
		tag = driver_tag_get_wait(q, hctx, ctx->cpu, bio->opf & RQ_BIO_NOWAIT);
	if (tag < 0)
		return NULL;
	rq = none_rq_take(q, hctx, ctx, tags, tag);
	mq_rq_start_bio(q, rq, bio, nr_segs);
	return rq;
}

/* Take a driver tag for a request made with a scheduler tag. */
static bool mq_get_driver_tag(struct rq_request *rq)
{
	struct rq_hw_ctx *hctx = rq->hctx;
	int tag;

	if (rq->tag >= 0)
		return true;
	tag = driver_tag_get(hctx, cur_cpu());
	if (tag < 0)
		return false;
	rq->tag = tag;
	__atomic_store_n(&hctx->tags->rqs[tag], rq, __ATOMIC_RELEASE);
	return true;
}

static void put_driver_tag(struct rq_request *rq, unsigned cpu)
{
	if (rq->tag >= 0 && (rq->rq_flags & RQ_RQF_SCHED_TAGS)) {
		driver_tag_put(rq->hctx, (unsigned)rq->tag, cpu);
		rq->tag = -1;
	}
}

/*
 * Completion batches.  Requests a thread ends while it issues them (a
 * driver completing inline, from queue_rq or queue_rqs) give their tags
 * and usage references back together when that issue round ends: one
 * atomic per bitmap word and one for the usage count instead of three per
 * request (the kernel batches the same way for polled completions,
 * io_comp_batch).  Only requests of the hw queue being issued, with
 * unreserved tags of an unshared set; anything else is freed at once.
 * The batch runs the hctx restart check at its end, after the tags are
 * back, and drops the usage last, as a single release does.
 */
struct comp_batch {
	struct rq_hw_ctx *hctx;
	unsigned long tags, sched;   /* driver / scheduler tag bits, one word each */
	unsigned tags_off, sched_off; /* bitmap bit of each word's bit 0 */
	unsigned cpu;                /* hint CPU: the first request's submitter */
	struct rq_sw_ctx *ctx;       /* where the usage references are dropped */
	long nr_usage;               /* requests taken */
	/* of hctx, looked up once per batch rather than per request: */
	struct sbitmap_queue *tags_sbq, *sched_sbq;
	unsigned tags_first, sched_first; /* lowest tag taken (above the reserved
					     ones); UINT_MAX: none */
	unsigned tags_word, sched_word;   /* ~(bits per word - 1) */
	/* completions of hctx's queue counted at the end (stats, once per batch) */
	uint64_t done, errors;
	/* the scheduler's completion batch hooks, if open (valid once nr_usage) */
	const struct rq_elevator_type *elv;
};

static __thread struct comp_batch *tls_cbatch __attribute__((tls_model("initial-exec")));

static void hctx_restart(struct rq_hw_ctx *hctx);

/* Start a batch for @hctx unless the thread has one already (nested issue). */
static inline bool comp_batch_start(struct comp_batch *cb, struct rq_hw_ctx *hctx)
{
	struct rq_tags *sched_tags = hctx->sched_tags;

	if (tls_cbatch)
		return false;
	cb->hctx = hctx;
	cb->tags = cb->sched = 0;
	cb->tags_off = cb->sched_off = 0;
	cb->nr_usage = 0;
	cb->ctx = NULL;
	cb->done = cb->errors = 0;
	/* fair sharing counts driver tags one by one: none of a shared set */
	cb->tags_sbq = &hctx->tags->bitmap;
	cb->tags_first = tags_shared(hctx->q) ? UINT_MAX : hctx->tags->nr_reserved;
	cb->tags_word = ~((1u << hctx->tags->bitmap.sb.shift) - 1);
	cb->sched_sbq = sched_tags ? &sched_tags->bitmap : NULL;
	cb->sched_first = sched_tags ? sched_tags->nr_reserved : UINT_MAX;
	cb->sched_word = sched_tags ? ~((1u << sched_tags->bitmap.sb.shift) - 1) : 0;
	tls_cbatch = cb;
	return true;
}

/*
 * Add @bit of @sbq (words of ~@word_mask + 1 bits) to the one-word mask
 * *@mask, flushing another word's bits.
 */
static inline void comp_batch_bit(struct sbitmap_queue *sbq, unsigned word_mask,
				  unsigned long *mask, unsigned *off, unsigned bit, unsigned cpu)
{
	unsigned word_off = bit & word_mask;

	/* *@off starts at 0 (comp_batch_start()): a word's bits come together */
	if (unlikely(*off != word_off)) {
		if (*mask)
			sbq_put_mask(sbq, *mask, *off, cpu);
		*mask = 0;
		*off = word_off;
	}
	*mask |= 1UL << (bit - word_off);
}

/* Give the batch's tags back now (it keeps its usage references). */
static void comp_batch_put_tags(struct comp_batch *cb)
{
	if (cb->tags)
		sbq_put_mask(cb->tags_sbq, cb->tags, cb->tags_off, cb->cpu);
	if (cb->sched)
		sbq_put_mask(cb->sched_sbq, cb->sched, cb->sched_off, cb->cpu);
	cb->tags = cb->sched = 0;
}

/*
 * End the thread's batch @cb: completions counted, the scheduler's
 * deferred completion work applied, tags back, restart check, usage
 * dropped last.  The dispatch owner's caller keeps the queue
 * (its own requests or usage) while a batch runs, so counting after the
 * requests of a batch that took none is as safe as the dispatch count.
 */
static void comp_batch_end(struct comp_batch *cb)
{
	tls_cbatch = NULL;
	if (cb->done) {
		struct rq_stats_block *sb = stats_block(cb->hctx->q);

		stat_block_add(sb, ST_COMPLETED, cb->done);
		if (unlikely(cb->errors))
			stat_block_add(sb, ST_ERRORS, cb->errors);
	}
	if (!cb->nr_usage)
		return;
	if (cb->elv)
		cb->elv->completion_batch_end(cb->hctx);
	comp_batch_put_tags(cb);
	hctx_restart(cb->hctx);
	queue_exit_ctx_n(cb->hctx->q, cb->ctx, cb->nr_usage);
}

/*
 * The scheduler's side of @cb opens with the first request @cb takes: from
 * then on @cb holds the queue (a usage reference) until its end, so the
 * scheduler's data outlives what it defers.
 */
static void comp_batch_elv_begin(struct comp_batch *cb)
{
	const struct rq_elevator_queue *eq = cb->hctx->q->elevator;

	cb->elv = eq && eq->type->completion_batch_begin ? eq->type : NULL;
	if (cb->elv)
		cb->elv->completion_batch_begin(cb->hctx);
}

/* The thread's completion batch if it is one of @hctx, else NULL. */
static inline struct comp_batch *comp_batch_of(const struct rq_hw_ctx *hctx)
{
	struct comp_batch *cb = tls_cbatch;

	return cb && cb->hctx == hctx ? cb : NULL;
}

/*
 * Take the tags and usage of @rq (released, on @ctx) into @cb (the
 * thread's batch for @rq's hctx, comp_batch_of()), if it may have them.
 */
static inline __attribute__((always_inline)) bool
comp_batch_take(struct comp_batch *cb, int tag, int itag, struct rq_sw_ctx *ctx)
{
	/* reserved tags, and driver tags of a shared set, are freed one by one */
	if ((tag >= 0 && (unsigned)tag < cb->tags_first) ||
	    (itag >= 0 && (unsigned)itag < cb->sched_first))
		return false;
	if (!cb->nr_usage) {
		cb->cpu = ctx->cpu;
		cb->ctx = ctx;
		comp_batch_elv_begin(cb);
	}
	if (tag >= 0)
		comp_batch_bit(cb->tags_sbq, cb->tags_word, &cb->tags, &cb->tags_off,
			       (unsigned)tag - cb->tags_first, cb->cpu);
	if (itag >= 0)
		comp_batch_bit(cb->sched_sbq, cb->sched_word, &cb->sched, &cb->sched_off,
			       (unsigned)itag - cb->sched_first, cb->cpu);
	cb->nr_usage++;
	return true;
}

/*
 * Release a request that is not with the driver: scheduler told, tags back.
 * Its usage reference is NOT dropped: returns the ctx to drop it on (NULL
 * for the flush machinery's own request, or when the thread's completion
 * batch took tags and usage), which the caller does last, after any re-run
 * of the hctx, so a destroyer waiting for usage 0 never frees an hctx still
 * in use.  The request must not be touched afterwards.
 */
static struct rq_sw_ctx *mq_release_tags(struct rq_request *rq);

/*
 * The rest of a release: the request goes idle (its bio list cleared
 * unless @bios_ended: request_end_bios() did it), its tags go back, or
 * into @cb (comp_batch_of(rq->hctx), may be NULL).
 */
static inline __attribute__((always_inline)) struct rq_sw_ctx *
release_tags_inline(struct rq_request *rq, struct comp_batch *cb, bool bios_ended)
{
	struct rq_hw_ctx *hctx = rq->hctx;
	struct rq_sw_ctx *ctx = rq_priv(rq)->ctx;
	int tag = rq->tag, itag = rq->internal_tag;
	unsigned cpu;

	if (!bios_ended)
		rq->bio = rq->biotail = NULL;
	__atomic_store_n(&rq->state, RQ_STATE_IDLE, __ATOMIC_RELEASE);
	if (cb && comp_batch_take(cb, tag, itag, ctx))
		return NULL;
	/* read only here: the submitter writes ctx's line (usage) per request */
	cpu = ctx->cpu;
	if (tag >= 0)
		driver_tag_put(hctx, (unsigned)tag, cpu);
	if (itag >= 0)
		rq_tags_put(hctx->sched_tags, (unsigned)itag, cpu);
	return ctx;
}

/*
 * The timeout scan holds @rq (core_busy 1) while the driver's timeout hook
 * runs.  Hand it the rest of the release (core_busy 2) rather than wait:
 * the hook may be this very thread (a driver ending the request inside
 * ops->timeout), or a hook that waits for this thread.  Pairs with
 * mq_timeout_hold_end().  Return: true if the scan now owns the release.
 */
static bool release_hand_to_timeout(struct rq_request *rq)
{
	uint8_t busy = 1;

	return __atomic_compare_exchange_n(&rq_priv(rq)->core_busy, &busy, 2, false,
					   __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/*
 * mq_release_request(), inline for the completion paths: every completed
 * request comes through here, and the call and its frame cost more than
 * the common case's few tests.  @bios_ended: as release_tags_inline().
 */
static inline __attribute__((always_inline)) struct rq_sw_ctx *
release_request_bios(struct rq_request *rq, struct comp_batch *cb, bool bios_ended)
{
	struct rq_queue *q = rq->q;

	/* ELVPRIV: the scheduler that prepared it is attached (a switch drains) */
	if ((rq->rq_flags & RQ_RQF_ELVPRIV) && q->elv.finish_request)
		q->elv.finish_request(rq);
	if (unlikely(rq->rq_flags & RQ_RQF_FLUSH_INTERNAL))
		return NULL; /* owned by the flush queue */
	if (unlikely(__atomic_load_n(&rq_priv(rq)->core_busy, __ATOMIC_ACQUIRE)) &&
	    release_hand_to_timeout(rq))
		return NULL; /* the scan finishes it, usage reference included */
	return release_tags_inline(rq, cb, bios_ended);
}

static inline __attribute__((always_inline)) struct rq_sw_ctx *
release_request_inline(struct rq_request *rq, struct comp_batch *cb)
{
	return release_request_bios(rq, cb, false);
}

static struct rq_sw_ctx *mq_release_request(struct rq_request *rq)
{
	return release_request_inline(rq, comp_batch_of(rq->hctx));
}

static struct rq_sw_ctx *mq_release_tags(struct rq_request *rq)
{
	return release_tags_inline(rq, comp_batch_of(rq->hctx), false);
}

/*
 * The timeout scan lets go of @rq after the driver's hook returned: if a
 * release was handed to it meanwhile (release_hand_to_timeout()), finish
 * it here: tags back, a waiting hctx re-run, the usage reference dropped.
 * Context: the service pass that set core_busy.
 */
static void mq_timeout_hold_end(struct rq_request *rq)
{
	uint8_t busy = 1;
	struct rq_hw_ctx *hctx = rq->hctx;
	struct rq_queue *q = rq->q;
	struct rq_sw_ctx *ctx;

	if (__atomic_compare_exchange_n(&rq_priv(rq)->core_busy, &busy, 0, false, __ATOMIC_RELEASE,
					__ATOMIC_ACQUIRE))
		return;
	__atomic_store_n(&rq_priv(rq)->core_busy, 0, __ATOMIC_RELAXED);
	ctx = mq_release_tags(rq);
	hctx_restart(hctx);
	if (ctx)
		queue_exit_ctx(q, ctx);
}

/* Free a request that is not with the driver, dropping its usage reference. */
static void mq_free_request(struct rq_request *rq)
{
	struct rq_queue *q = rq->q;
	struct rq_sw_ctx *ctx = mq_release_request(rq);

	if (ctx)
		queue_exit_ctx(q, ctx);
}

RQ_EXPORT void rq_sched_free_request(struct rq_request *rq)
{
	mq_free_request(rq);
}

/* The request left the driver: in-flight count, budget, restart. */
static void hctx_request_left_driver(struct rq_hw_ctx *hctx)
{
	if (unlikely(hctx->q->mq_flags & MQ_F_PUT_BUDGET))
		hctx->q->ops->put_budget(hctx->q);
}

static void hctx_restart(struct rq_hw_ctx *hctx)
{
	if (atomic_load_explicit(&hctx->state, memory_order_seq_cst) & HCTX_RESTART) {
		atomic_fetch_and(&hctx->state, ~HCTX_RESTART);
		run_hw_queue(hctx);
	}
}

/* The end of a step of flush sequencing (rq_priv(rq)->end_io set). */
static __attribute__((noinline)) void mq_end_request_seq(struct rq_request *rq,
							  rq_status_t status)
{
	struct rq_hw_ctx *hctx = rq->hctx;
	struct rq_queue *q = rq->q;
	struct rq_sw_ctx *ctx = rq_priv(rq)->ctx;

	/* internal sequencing (flush): hold the queue across its steps */
	atomic_fetch_add_explicit(&ctx->usage, 1, memory_order_seq_cst);
	hctx_request_left_driver(hctx);
	rq_priv(rq)->end_io(rq, status);
	hctx_restart(hctx);
	queue_exit_ctx(q, ctx);
}

/*
 * Common end of an in-flight request whose state we just moved to COMPLETE.
 * Inside the thread's completion batch for its hctx (a driver ending it
 * inline while this thread issues), the batch counts it in the statistics
 * and, when it took the tags, runs the restart check at its end.
 */
static inline __attribute__((always_inline)) void
mq_end_request_inflight(struct rq_request *rq, rq_status_t status)
{
	struct rq_hw_ctx *hctx = rq->hctx;
	struct rq_queue *q = rq->q;
	struct comp_batch *cb = comp_batch_of(hctx);
	struct rq_sw_ctx *ctx;
	long taken = -1;

	if (unlikely(rq_priv(rq)->end_io)) {
		mq_end_request_seq(rq, status);
		return;
	}
	if (cb) {
		/* @q, not ctx->q: the completer reads no line the submitter writes */
		cb->done++;
		if (unlikely(status != RQ_STS_OK))
			cb->errors++;
		taken = cb->nr_usage;
	} else {
		if (status != RQ_STS_OK)
			stat_inc(q, ST_ERRORS);
		stat_inc(q, ST_COMPLETED);
	}
	if ((rq->rq_flags & RQ_RQF_ELVPRIV) && q->elv.completed_request)
		q->elv.completed_request(rq, core_clock_ns());
	trace_complete_all(rq, status, OBS_C_DONE);
	request_end_bios(rq, status);
	if (unlikely(q->mq_flags & MQ_F_PUT_BUDGET))
		q->ops->put_budget(q);
	ctx = release_request_bios(rq, cb, true);
	if (ctx || !cb || cb->nr_usage == taken) {
		hctx_restart(hctx);
		if (ctx)
			queue_exit_ctx(q, ctx);
	}
}

/* ------------------------------------------- ending without an atomic */

/*
 * What the end's compare-and-swap arbitrates is a driver's completion
 * against the timeout scan: its hook may end, complete or requeue the
 * request itself, on the service thread, while the driver's completion
 * comes in.  Where the kernel offers rseq(2) and membarrier(2)'s rseq
 * command (x86-64 only, chosen once, before the first tag set), the
 * common end takes the request out of flight with no atomic: a restartable
 * sequence checks that the scan does not hold it (core_busy 0) and that it
 * is in flight, and stores COMPLETE as its last instruction.  COMPLETING
 * (rq_mq_complete_request(), which the hook may call and whose
 * ops->complete may run after the hold, on the submitter's mailbox) goes on
 * to COMPLETE with the compare-and-swap, racing ends included.
 * The kernel sends the thread to the sequence's abort handler, which starts
 * it again, when it is preempted, migrated or signalled inside it, or when
 * another thread runs membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ)
 * meanwhile.  The scan sets core_busy, runs that membarrier, then reads the
 * state (timeout_hold()): a sequence that stored COMPLETE before the
 * membarrier is seen by that read; any other one runs (again) after it and
 * sees core_busy.  So while the scan holds a request every end goes
 * through the compare-and-swap (end_take_atomic()), the hook's as well, as
 * before.  Not arbitrated any more: two threads of the driver ending the
 * same request at the same instant with no hold (a driver bug, as in the
 * kernel; doc/drivers.md).  A plain load and store would not do: a thread
 * stopped between them could store COMPLETE over a request the hook ended
 * and the core re-issued meanwhile; the restart is what closes that.
 *
 * | operation                   | may run with                  | arbitrated by  |
 * | end, fast (no hold)         | the scan's check, hold start  | rseq+membarrier|
 * | end during a hold, hook end | each other                    | cmpxchg        |
 * | complete/requeue/refusal    | ends during a hold            | cmpxchg        |
 * | end of a COMPLETING request | another end                   | cmpxchg        |
 * | two ends, no hold           | (driver bug)                  | -              |
 *
 * ThreadSanitizer does not model membarrier: a TSan build, like a thread
 * without rseq (valgrind) or another architecture, keeps the cmpxchg.
 */
#if defined(MQ_END_RSEQ)
static bool end_rseq_on;           /* set once, before the first tag set */
static ptrdiff_t end_rseq_off;     /* glibc's __rseq_offset */
static pthread_once_t end_rseq_once = PTHREAD_ONCE_INIT;

static void end_rseq_setup(void)
{
	long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);

	if (getenv("RQ_END_ATOMIC") || __rseq_size < offsetof(struct rseq, flags) ||
	    cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ) ||
	    syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0))
		return;
	end_rseq_off = __rseq_offset;
	end_rseq_on = true;
}
#endif

/* Choose how requests end, once per process; before any request exists. */
static void end_mode_init(void)
{
#if defined(MQ_END_RSEQ)
	pthread_once(&end_rseq_once, end_rseq_setup);
#endif
}

/*
 * Move @rq from in flight (or handed to rq_mq_complete_request()) to
 * COMPLETE with a compare-and-swap.  Return: false if it was neither.
 */
static bool end_take_atomic(struct rq_request *rq)
{
	uint8_t expected = RQ_STATE_IN_FLIGHT;

	if (__atomic_compare_exchange_n(&rq->state, &expected, RQ_STATE_COMPLETE, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return true;
	expected = RQ_STATE_COMPLETING;
	return __atomic_compare_exchange_n(&rq->state, &expected, RQ_STATE_COMPLETE, false,
					   __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/*
 * Move @rq from in flight (or handed to rq_mq_complete_request()) to
 * COMPLETE.  Return: false if it was neither: never complete twice.
 * The restartable sequence, on glibc's struct rseq of the thread: give up
 * (compare-and-swap) if the thread has none (cpu_id < 0), point rseq_cs at
 * the descriptor, then inside the sequence: core_busy 0, state IN_FLIGHT,
 * store COMPLETE: the commit, its last instruction.  The abort handler starts it over.  Either
 * way out clears rseq_cs: the kernel must never read a descriptor of a
 * library that was unloaded since.
 */
static inline __attribute__((always_inline)) bool rq_take_in_flight(struct rq_request *rq)
{
#if defined(MQ_END_RSEQ)
	_Static_assert(RQ_STATE_IN_FLIGHT == 1 && RQ_STATE_COMPLETE == 2,
		       "the states the sequence tests and stores");
	if (likely(end_rseq_on)) {
		asm goto(".pushsection __rseq_cs, \"aw\"\n\t"
			 ".balign 32\n"
			 ".Lrq_end_cs%=:\n\t"
			 ".long 0, 0\n\t"
			 ".quad .Lrq_end_go%=, .Lrq_end_done%= - .Lrq_end_go%=, .Lrq_end_abort%=\n\t"
			 ".popsection\n\t"
			 ".pushsection __rseq_failure, \"ax\"\n\t"
			 ".long %c[sig]\n"
			 ".Lrq_end_abort%=:\n\t"
			 "jmp .Lrq_end_again%=\n\t"
			 ".popsection\n"
			 ".Lrq_end_again%=:\n\t"
			 "cmpl $0, %%fs:%c[cpu_id](%[off])\n\t"
			 "jl %l[slow]\n\t"
			 "leaq .Lrq_end_cs%=(%%rip), %%rax\n\t"
			 "movq %%rax, %%fs:%c[cs](%[off])\n"
			 ".Lrq_end_go%=:\n\t"
			 "cmpb $0, (%[busy])\n\t"
			 "jne .Lrq_end_out%=\n\t"
			 "cmpb $1, (%[state])\n\t"
			 "jne .Lrq_end_out%=\n\t"
			 "movb $2, (%[state])\n"
			 ".Lrq_end_done%=:\n\t"
			 "movq $0, %%fs:%c[cs](%[off])\n\t"
			 ".pushsection .text.unlikely, \"ax\"\n"
			 ".Lrq_end_out%=:\n\t"
			 "movq $0, %%fs:%c[cs](%[off])\n\t"
			 "jmp %l[slow]\n\t"
			 ".popsection\n"
			 :
			 : [off] "r"(end_rseq_off), [busy] "r"(&rq_priv(rq)->core_busy),
			   [state] "r"(&rq->state), [sig] "i"(RSEQ_SIG),
			   [cpu_id] "i"(offsetof(struct rseq, cpu_id)),
			   [cs] "i"(offsetof(struct rseq, rseq_cs))
			 : "rax", "cc", "memory"
			 : slow);
		return true;
	}
slow:
#endif
	return end_take_atomic(rq);
}

/*
 * The scan's hold of @rq starts (core_busy 1); then no end takes it
 * without the compare-and-swap until mq_timeout_hold_end().
 * Return: true if it is still in flight with generation @gen.
 */
static bool timeout_hold(struct rq_request *rq, uint32_t gen)
{
	__atomic_store_n(&rq_priv(rq)->core_busy, 1, __ATOMIC_SEQ_CST);
#if defined(MQ_END_RSEQ)
	/*
	 * Registered once per process; a child of fork() may find its mm
	 * unregistered (the kernel clears it at exec, and may at fork), so a
	 * refusal registers again.  Failing after that, no end is safe.
	 */
	if (end_rseq_on && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, 0, 0) &&
	    (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0) ||
	     syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, 0, 0)))
		abort();
#endif
	return __atomic_load_n(&rq->state, __ATOMIC_SEQ_CST) == RQ_STATE_IN_FLIGHT &&
	       __atomic_load_n(&rq_priv(rq)->gen, __ATOMIC_SEQ_CST) == gen;
}

RQ_EXPORT void rq_mq_end_request(struct rq_request *rq, rq_status_t status)
{
	if (rq_take_in_flight(rq))
		mq_end_request_inflight(rq, status);
}

/* ------------------------------------------------ driver completion batches */

/*
 * End @rq (state COMPLETE) inside mq_end_list(): as
 * mq_end_request_inflight(), but statistics were counted for the whole
 * run, the clock is read once per list (*@now, 0 until read), and when the
 * thread's batch took the tags and usage the restart check is left to the
 * batch end, so the completing thread reads no line of the hctx the
 * submitter writes.
 */
static void mq_end_request_batched(struct rq_request *rq, rq_status_t status, uint64_t *now)
{
	struct rq_hw_ctx *hctx = rq->hctx;
	struct rq_queue *q = rq->q;
	struct comp_batch *cb;
	struct rq_sw_ctx *ctx;
	long taken;

	if (unlikely(rq_priv(rq)->end_io)) {
		mq_end_request_seq(rq, status);
		return;
	}
	if ((rq->rq_flags & RQ_RQF_ELVPRIV) && q->elv.completed_request) {
		if (!*now)
			*now = core_clock_ns();
		q->elv.completed_request(rq, *now);
	}
	trace_complete_all(rq, status, OBS_C_DONE);
	request_end_bios(rq, status);
	hctx_request_left_driver(hctx);
	cb = comp_batch_of(hctx);
	taken = cb ? cb->nr_usage : -1;
	ctx = release_request_inline(rq, cb);
	if (ctx || !cb || cb->nr_usage == taken) {
		hctx_restart(hctx);
		if (ctx)
			queue_exit_ctx(q, ctx);
	}
}

/*
 * Count the completions of @list in the statistics, once per run of one
 * queue, while every request still holds its queue.
 */
static void mq_end_list_stats(struct rq_request *list)
{
	while (list) {
		struct rq_queue *q = list->q;
		uint64_t done = 0, errors = 0;

		for (; list && list->q == q; list = list->rq_next) {
			if (rq_priv(list)->end_io)
				continue; /* flush sequencing counts its own */
			done++;
			errors += rq_priv(list)->complete_status != RQ_STS_OK;
		}
		if (errors)
			stat_add(q, ST_ERRORS, errors);
		stat_add(q, ST_COMPLETED, done);
	}
}

/*
 * End mq_end_list()'s batch @cb, dropping its usage references on the
 * calling thread's CPU slot, as a put does on the CPU that makes it (the
 * freezer sums the slots).  On the submitter's slot, a completion thread
 * wrote the submitter's software context line, which every submission
 * reads, once per batch, and the submitter fetched it back from the
 * completion thread's CPU once per plug.
 */
static void mq_end_list_batch_end(struct comp_batch *cb)
{
	if (cb->nr_usage) {
		unsigned cpu = cur_cpu();

		if (cpu != cb->cpu) /* cb->ctx->cpu, without reading its line */
			cb->ctx = queue_ctx(cb->hctx->q, cpu);
	}
	comp_batch_end(cb);
}

/*
 * End every request of @list (linked by rq_next, each COMPLETE with its
 * status in complete_status), one completion batch per run of requests of
 * one hw queue.  Also the mq front end's end_batch (mailbox drain).
 * Return: how many.
 */
static unsigned mq_end_list(struct rq_request *list)
{
	struct rq_hw_ctx *hctx = NULL;
	struct comp_batch cb;
	bool own = false;
	uint64_t now = 0;
	unsigned n = 0;

	mq_end_list_stats(list);
	while (list) {
		struct rq_request *rq = list;

		list = rq->rq_next;
		rq->rq_next = NULL;
		if (rq->hctx != hctx) {
			if (own)
				mq_end_list_batch_end(&cb);
			hctx = rq->hctx;
			own = comp_batch_start(&cb, hctx);
		}
		mq_end_request_batched(rq, rq_priv(rq)->complete_status, &now);
		n++;
	}
	if (own)
		mq_end_list_batch_end(&cb);
	return n;
}

RQ_EXPORT bool rq_mq_add_to_batch(struct rq_comp_batch *cb, struct rq_request *rq,
				  rq_status_t status)
{
	/* a single-queue request ends under its queue lock, never here */
	if (unlikely(rq->q->fe != &mq_fe_ops) || !rq_take_in_flight(rq))
		return false;
	/* stored only if it changes: a completion thread then leaves this
	   line (payload pointer, ctx, generation) to the submitter, which
	   reads it again when it reuses the request */
	if (rq_priv(rq)->complete_status != (uint8_t)status)
		rq_priv(rq)->complete_status = (uint8_t)status;
	rq->rq_next = NULL;
	if (cb->tail)
		cb->tail->rq_next = rq;
	else
		cb->head = rq;
	cb->tail = rq;
	cb->nr++;
	return true;
}

RQ_EXPORT void rq_mq_end_request_batch(struct rq_comp_batch *cb)
{
	struct rq_request *list = cb->head;

	cb->head = cb->tail = NULL;
	cb->nr = 0;
	if (!list)
		return;
	/* rq_affinity 2: the submitters' requests go to their mailboxes */
	list = mbox_push_batch(list);
	mq_end_list(list);
}

RQ_EXPORT unsigned rq_mq_end_requests(struct rq_request *const *rqs, unsigned nr,
				      rq_status_t status)
{
	struct rq_comp_batch cb = RQ_COMP_BATCH_INIT;
	unsigned n = 0;

	for (unsigned i = 0; i < nr; i++)
		if (rqs[i] && rq_mq_add_to_batch(&cb, rqs[i], status))
			n++;
	rq_mq_end_request_batch(&cb);
	return n;
}

static void end_bio_now(struct rq_queue *q, struct rq_bio *bio, rq_status_t status)
{
	(void)q;
	bio_end_with(bio, status);
}

RQ_EXPORT bool rq_mq_update_request(struct rq_request *rq, rq_status_t status, unsigned bytes)
{
	uint8_t st = __atomic_load_n(&rq->state, __ATOMIC_ACQUIRE);

	if (st != RQ_STATE_IN_FLIGHT && st != RQ_STATE_COMPLETING)
		return false;
	trace_complete(rq, status, bytes < rq->bytes ? bytes : rq->bytes, 0);
	return request_advance(rq, status, bytes, end_bio_now);
}

RQ_EXPORT rq_status_t rq_mq_complete_status(const struct rq_request *rq)
{
	return rq_priv(rq)->complete_status;
}

/* Run ops->complete (or end the request) here and now. */
static void complete_here(struct rq_request *rq)
{
	if (rq->q->ops->complete)
		rq->q->ops->complete(rq);
	else
		rq_mq_end_request(rq, rq_priv(rq)->complete_status);
}

RQ_EXPORT bool rq_mq_complete_request(struct rq_request *rq, rq_status_t status)
{
	uint8_t expected = RQ_STATE_IN_FLIGHT;

	if (!__atomic_compare_exchange_n(&rq->state, &expected, RQ_STATE_COMPLETING, false,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return false;
	rq_priv(rq)->complete_status = status;
	if (READ_ONCE(rq->q->rq_affinity) == 2 && mbox_push(rq))
		return true;
	complete_here(rq);
	return true;
}

RQ_EXPORT void rq_mq_start_request(struct rq_request *rq)
{
	rq->rq_flags |= RQ_RQF_STARTED;
}

RQ_EXPORT struct rq_request *rq_mq_tag_to_rq(struct rq_hw_ctx *hctx, unsigned tag)
{
	if (tag >= hctx->tags->nr_tags)
		return NULL;
	return hctx->tags->rqs[tag];
}

/* ------------------------------------------------------------ dispatch */

/*
 * Claim dispatch of @hctx, or leave a note for the thread that has it.
 * Only IDLE -> BUSY claims: each round starts from an expected IDLE, since
 * a failed compare-and-swap leaves the value it found in @s (a BUSY that
 * became AGAIN meanwhile must not be taken for a free hctx).
 */
static bool hctx_try_own(struct rq_hw_ctx *hctx)
{
	for (;;) {
		int s = RUN_IDLE;

		if (atomic_compare_exchange_weak_explicit(&hctx->run_state, &s, RUN_BUSY,
							  memory_order_acquire,
							  memory_order_relaxed))
			return true;
		if (s == RUN_AGAIN)
			return false;
		if (s == RUN_BUSY &&
		    atomic_compare_exchange_weak_explicit(&hctx->run_state, &s, RUN_AGAIN,
							  memory_order_acq_rel,
							  memory_order_relaxed))
			return false;
		/* it changed under us (or a spurious failure): look again */
	}
}

static void hctx_dispatch_all(struct rq_hw_ctx *hctx);

/* Let go of dispatch, running again first if someone asked meanwhile. */
static void hctx_release(struct rq_hw_ctx *hctx)
{
	for (;;) {
		int s = RUN_BUSY;

		if (atomic_compare_exchange_strong_explicit(&hctx->run_state, &s, RUN_IDLE,
							    memory_order_release,
							    memory_order_relaxed))
			return;
		atomic_store_explicit(&hctx->run_state, RUN_BUSY, memory_order_relaxed);
		hctx_dispatch_all(hctx);
	}
}

static void run_hw_queue(struct rq_hw_ctx *hctx)
{
	if (hctx_try_own(hctx)) {
		hctx_dispatch_all(hctx);
		hctx_release(hctx);
	}
}

static void hctx_delay_run(struct rq_hw_ctx *hctx, unsigned msecs)
{
	uint64_t at = service_clock_ns() + (uint64_t)msecs * 1000000ull;
	uint64_t cur = atomic_load(&hctx->run_at_ns);

	while (cur == 0 || at < cur) {
		if (atomic_compare_exchange_weak(&hctx->run_at_ns, &cur, at)) {
			service_kick();
			break;
		}
	}
}

/* Stage requests on the software queue @ctx for a later run of its hctx. */
static void ctx_stage(struct rq_sw_ctx *ctx, struct rq_list_node *list, bool at_head)
{
	struct rq_hw_ctx *hctx = ctx->hctx;

	trace_insert_list(ctx->q, list);
	rq_spin_lock(&ctx->lock);
	if (at_head)
		rq_list_splice_init(list, &ctx->rq_list);
	else
		rq_list_splice_tail_init(list, &ctx->rq_list);
	rq_spin_unlock(&ctx->lock);
	atomic_fetch_or_explicit(&hctx->pending, 1ull << (ctx->index_hw % 64),
				 memory_order_release);
}

/* Add @list to the hctx dispatch (parked) list, at its head or tail. */
static void hctx_park(struct rq_hw_ctx *hctx, struct rq_list_node *list, bool at_head)
{
	rq_spin_lock(&hctx->lock);
	if (at_head)
		rq_list_splice_init(list, &hctx->dispatch);
	else
		rq_list_splice_tail_init(list, &hctx->dispatch);
	atomic_store_explicit(&hctx->has_dispatch, !rq_list_empty(&hctx->dispatch),
			      memory_order_release);
	rq_spin_unlock(&hctx->lock);
}

/* Move everything parked on @hctx to the tail of @list. */
static void hctx_take_dispatch(struct rq_hw_ctx *hctx, struct rq_list_node *list)
{
	rq_spin_lock(&hctx->lock);
	rq_list_splice_tail_init(&hctx->dispatch, list);
	atomic_store_explicit(&hctx->has_dispatch, false, memory_order_release);
	rq_spin_unlock(&hctx->lock);
}

/* Lockless hint: is anything parked? */
static inline bool hctx_has_dispatch(struct rq_hw_ctx *hctx)
{
	return atomic_load_explicit(&hctx->has_dispatch, memory_order_acquire);
}

static inline void rq_start(struct rq_hw_ctx *hctx, struct rq_request *rq)
{
	if (rq->rq_flags & RQ_RQF_ELVPRIV)
		rq->io_start_time_ns = core_clock_ns(); /* schedulers measure latency */
	__atomic_store_n(&rq_priv(rq)->gen, rq_priv(rq)->gen + 1, __ATOMIC_RELAXED);
	rq->rq_flags |= RQ_RQF_STARTED;
	__atomic_store_n(&rq->state, RQ_STATE_IN_FLIGHT, __ATOMIC_RELEASE);
	trace_issue(rq);
}

/* Undo rq_start() for a request the driver refused. */
static inline void rq_unstart(struct rq_hw_ctx *hctx, struct rq_request *rq)
{
	__atomic_store_n(&rq->state, RQ_STATE_IDLE, __ATOMIC_RELEASE);
	trace_requeue(rq);
}

/*
 * The driver is busy: park the rest, ask for a re-run on the next
 * completion, and as a safety net after a short delay.
 */
static void hctx_busy(struct rq_hw_ctx *hctx, struct rq_list_node *list)
{
	hctx_park(hctx, list, true);
	atomic_fetch_or_explicit(&hctx->state, HCTX_RESTART, memory_order_seq_cst);
	hctx_delay_run(hctx, RQ_RESOURCE_DELAY_MS);
}

/*
 * Link the requests of @list (by queuelist) by rq_next, in order, each
 * queuelist made empty for the driver; @list ends empty.  Return: the first.
 */
static struct rq_request *list_to_chain(struct rq_list_node *list)
{
	struct rq_request *head = NULL, **tail = &head;
	struct rq_list_node *it, *next;

	for (it = list->next; it != list; it = next) {
		next = it->next;
		rq_list_init(it);
		*tail = RQ_CONTAINER_OF(it, struct rq_request, queuelist);
		tail = &(*tail)->rq_next;
	}
	*tail = NULL;
	rq_list_init(list);
	return head;
}

/* Move the requests of the rq_next chain @head, in order, to the tail of @list. */
static void chain_to_list(struct rq_request *head, struct rq_list_node *list)
{
	while (head) {
		struct rq_request *rq = head;

		head = rq->rq_next;
		rq->rq_next = NULL;
		rq_list_add_tail(&rq->queuelist, list);
	}
}

/*
 * The driver refused @rq (RESOURCE): it goes back to idle, with its budget
 * and a driver tag taken at dispatch given back.  The caller keeps it.
 */
static void dispatch_refused(struct rq_queue *q, struct rq_request *rq)
{
	uint8_t expected = RQ_STATE_IN_FLIGHT;

	__atomic_compare_exchange_n(&rq->state, &expected, RQ_STATE_IDLE, false,
				    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	trace_requeue(rq);
	if (q->ops->put_budget)
		q->ops->put_budget(q);
	if (rq->rq_flags & RQ_RQF_SCHED_TAGS)
		put_driver_tag(rq, cur_cpu());
}

/*
 * Issue the requests of the chain @head (linked by rq_next, each with an
 * empty queuelist) to the driver, as the kernel issues a plug's list
 * directly: no list node is written per request.  Each leaves the chain
 * (rq_next NULL) before the driver sees it.
 * Return: true if all were issued, false if the driver (or tags, or budget)
 * ran out; then the rest are parked on hctx->dispatch.
 * Context: dispatch owner of @hctx, inside a read-side section.
 */
static bool dispatch_rq_chain(struct rq_hw_ctx *hctx, struct rq_request *head)
{
	struct rq_queue *q = hctx->q;
	const struct rq_mq_ops *ops = q->ops;
	struct rq_sw_ctx *sctx = NULL;
	bool need_commit = false;
	uint64_t queued = 0, resource = 0;
	struct comp_batch cb;
	bool own_batch = comp_batch_start(&cb, hctx);
	bool busy = false;

	while (head) {
		struct rq_request *rq = head;
		rq_status_t ret;
		bool last;

		if (unlikely(rq->tag < 0) && !mq_get_driver_tag(rq)) {
			/* tags this round freed may still sit in the batch */
			if (own_batch && cb.tags) {
				comp_batch_put_tags(&cb);
				continue;
			}
			busy = true;
			break;
		}
		if (ops->get_budget && !ops->get_budget(q)) {
			busy = true;
			break;
		}
		head = rq->rq_next;
		rq->rq_next = NULL;
		last = !head;
		if (!sctx)
			sctx = rq_priv(rq)->ctx;
		rq_start(hctx, rq);
		ret = ops->queue_rq(hctx, rq, last);
		if (likely(ret == RQ_STS_OK)) {
			queued++;
			need_commit = !last;
			continue;
		}
		if (ret == RQ_STS_RESOURCE || ret == RQ_STS_DEV_RESOURCE) {
			dispatch_refused(q, rq);
			rq->rq_next = head;
			head = rq;
			resource++;
			busy = true;
			break;
		}
		/* any other status ends the request */
		rq_mq_end_request(rq, ret);
	}
	/*
	 * The last request the driver took went with last=false, and nothing
	 * it took since came with last: the round stopped early (busy), or the
	 * request it was told was last ended with an error.  Kick it.
	 */
	if (need_commit && ops->commit_rqs)
		ops->commit_rqs(hctx);
	if (own_batch)
		comp_batch_end(&cb);
	if (sctx) {
		ctx_stat_add(sctx, ST_DISPATCHED, queued);
		if (resource)
			ctx_stat_add(sctx, ST_RESOURCE, resource);
	}
	if (busy) {
		struct rq_list_node rest;

		rq_list_init(&rest);
		chain_to_list(head, &rest);
		hctx_busy(hctx, &rest);
	}
	return !busy;
}

/*
 * Issue the requests of @list (linked by queuelist) to the driver; @list
 * ends empty.  Return and context: as dispatch_rq_chain().
 */
static bool dispatch_rq_list(struct rq_hw_ctx *hctx, struct rq_list_node *list)
{
	return dispatch_rq_chain(hctx, list_to_chain(list));
}

/* Collect staged requests of every software queue of @hctx. */
static void hctx_collect_staged(struct rq_hw_ctx *hctx, struct rq_list_node *list)
{
	uint64_t pending = atomic_exchange_explicit(&hctx->pending, 0, memory_order_acquire);

	if (!pending)
		return;
	for (unsigned i = 0; i < hctx->nr_ctx; i++) {
		struct rq_sw_ctx *ctx = hctx->ctxs[i];

		if (!(pending & (1ull << (i % 64))))
			continue;
		rq_spin_lock(&ctx->lock);
		rq_list_splice_tail_init(&ctx->rq_list, list);
		rq_spin_unlock(&ctx->lock);
	}
}

/*
 * Pull up to @max requests from the scheduler onto @list: one call of its
 * dispatch_requests if it has one, else dispatch_request while it has work.
 */
static unsigned sched_pull(struct rq_hw_ctx *hctx, const struct rq_elevator_type *e,
			   struct rq_list_node *list, unsigned max)
{
	unsigned n = 0;

	if (e->dispatch_requests)
		return e->dispatch_requests(hctx, list, max);
	while (n < max && e->ops.has_work(hctx)) {
		struct rq_request *rq = e->ops.dispatch_request(hctx);

		if (!rq)
			break;
		rq_list_add_tail(&rq->queuelist, list);
		n++;
	}
	return n;
}

/*
 * Driver tags taken ahead for one pull: up to RQ_DISPATCH_TAG_WORDS masks
 * of bitmap words, each with the bit number of its word's bit 0 (as
 * sbq_get_batch() gave them).  A batch spans words when a word has fewer
 * bits than the batch (a 64-tag set has 16-bit words).
 */
#define RQ_DISPATCH_TAG_WORDS 4

struct dispatch_tags {
	unsigned long bits[RQ_DISPATCH_TAG_WORDS];
	unsigned off[RQ_DISPATCH_TAG_WORDS];
	unsigned nr;
};

/* Take up to @want driver tags, a word at a time; return how many. */
static unsigned sched_get_tags(struct rq_tags *tags, unsigned cpu, unsigned want,
			       struct dispatch_tags *dt)
{
	unsigned got = 0;

	dt->nr = 0;
	while (got < want && dt->nr < RQ_DISPATCH_TAG_WORDS) {
		unsigned long bits = sbq_get_batch(&tags->bitmap, cpu, want - got,
						   &dt->off[dt->nr]);

		if (!bits)
			break;
		dt->bits[dt->nr++] = bits;
		got += rq_popcountl(bits);
	}
	return got;
}

/* Give back the tags of @dt left unused, one atomic per word. */
static void sched_put_tags(struct rq_tags *tags, unsigned cpu, struct dispatch_tags *dt)
{
	for (unsigned i = 0; i < dt->nr; i++)
		sbq_put_mask(&tags->bitmap, dt->bits[i], dt->off[i], cpu);
}

/*
 * Give driver tags to the requests of @pulled that have none: from the
 * words of @dt (the bits used are cleared), lowest word and bit first,
 * while they last and the request is of @hctx, else one by one.  The
 * word's base and the rqs table stay in registers: a request costs a bit
 * scan and two stores.  In the same walk the requests leave @pulled (left
 * unusable) for the rq_next chain ending at *@tail, in order; *@tail is
 * moved to the last one's rq_next, which is left for the caller to end.
 * Return: false if a request got no tag.
 */
static __attribute__((noinline)) bool sched_tag_pulled(struct rq_hw_ctx *hctx,
						       struct rq_list_node *pulled,
						       struct dispatch_tags *dt,
						       struct rq_request ***tail)
{
	struct rq_tags *tags = hctx->tags;
	struct rq_request **rqs = tags->rqs, **link = *tail;
	unsigned w = 0, base = dt->nr ? tags->nr_reserved + dt->off[0] : 0;
	unsigned long b = dt->nr ? dt->bits[0] : 0;
	bool ok = true;

	for (struct rq_list_node *it = pulled->next, *next; it != pulled; it = next) {
		struct rq_request *rq = RQ_CONTAINER_OF(it, struct rq_request, queuelist);

		next = it->next;
		rq_list_init(it);
		*link = rq;
		link = &rq->rq_next;
		if (rq->tag >= 0)
			continue;
		if (unlikely(!b) && w + 1 < dt->nr) { /* this word is used up: the next */
			dt->bits[w++] = 0;
			b = dt->bits[w];
			base = tags->nr_reserved + dt->off[w];
		}
		if (likely(b && rq->hctx == hctx)) {
			unsigned tag = base + (unsigned)__builtin_ctzl(b);

			b &= b - 1;
			rq->tag = (int)tag;
			__atomic_store_n(&rqs[tag], rq, __ATOMIC_RELEASE);
		} else if (!mq_get_driver_tag(rq)) {
			ok = false;
		}
	}
	*tail = link;
	if (dt->nr)
		dt->bits[w] = b;
	return ok;
}

/*
 * Pull up to a batch from the scheduler and issue it.  False if busy.
 *
 * As the kernel, a request leaves the scheduler only while driver tags
 * remain: the device is full otherwise, and the scheduler keeps deciding
 * what goes next.  The kernel takes a driver tag per request pulled and
 * stops at the first it cannot have; here (unshared tag sets) the tags are
 * taken first, up to a batch, a bitmap word's worth with one atomic, the
 * scheduler is asked once for at most that many requests, and the tags
 * left over go back with one atomic a word.  With a shared tag set (fair
 * share counts tags one by one) or no tag free, one request is pulled and
 * tagged as the kernel does.
 */
static bool sched_dispatch(struct rq_hw_ctx *hctx, bool *progress)
{
	const struct rq_elevator_type *e = hctx->q->elevator->type;
	struct rq_tags *tags = hctx->tags;
	bool batch_tags = !tags_shared(hctx->q);
	unsigned cpu, n = 0;
	struct rq_request *head = NULL, **tail = &head;
	bool no_tag = false;

	*progress = false;
	if (!e->ops.has_work(hctx))
		return true;
	cpu = cur_cpu(); /* only with work: the last round of a run has none */
	do {
		struct dispatch_tags dt = { .nr = 0 };
		unsigned want = 1, got;
		struct rq_list_node pulled;

		if (batch_tags) {
			got = sched_get_tags(tags, cpu, RQ_DISPATCH_BATCH - n, &dt);
			if (got)
				want = got;
		}
		rq_list_init(&pulled);
		got = sched_pull(hctx, e, &pulled, want);
		if (!got) {
			/*
			 * Work, but the scheduler holds it back (idling, a
			 * class waiting): come back, as the kernel does.
			 */
			sched_put_tags(tags, cpu, &dt);
			hctx_delay_run(hctx, RQ_RESOURCE_DELAY_MS);
			break;
		}
		/* tag them and chain them up for dispatch, in one walk */
		n += got;
		no_tag = !sched_tag_pulled(hctx, &pulled, &dt, &tail);
		sched_put_tags(tags, cpu, &dt);
	} while (!no_tag && n < RQ_DISPATCH_BATCH && e->ops.has_work(hctx));
	*progress = n != 0;
	if (!n)
		return true;
	*tail = NULL;
	return dispatch_rq_chain(hctx, head);
}

/*
 * One full run of @hctx: parked requests first, then the scheduler or the
 * software queues, until nothing is left or the driver is busy.
 * Context: dispatch owner.
 */
static void hctx_dispatch_all(struct rq_hw_ctx *hctx)
{
	struct rq_queue *q = hctx->q;
	struct rq_list_node list;

	dispatch_read_lock(q);
	for (;;) {
		if (queue_quiesced(q) || hctx_stopped(hctx))
			break;
		rq_list_init(&list);
		if (hctx_has_dispatch(hctx)) {
			hctx_take_dispatch(hctx, &list);
			if (!dispatch_rq_list(hctx, &list))
				break;
			continue;
		}
		if (q->elevator) {
			bool progress;

			if (!sched_dispatch(hctx, &progress) || !progress)
				break;
			continue;
		}
		hctx_collect_staged(hctx, &list);
		if (rq_list_empty(&list))
			break;
		if (!dispatch_rq_list(hctx, &list))
			break;
	}
	dispatch_read_unlock(q);
}

/* Stage the chain @head on @ctx for whoever runs its hctx. */
static void ctx_stage_chain(struct rq_sw_ctx *ctx, struct rq_request *head)
{
	struct rq_list_node list;

	rq_list_init(&list);
	chain_to_list(head, &list);
	ctx_stage(ctx, &list, false);
}

/*
 * Issue the chain @head (requests of @hctx linked by rq_next, no
 * scheduler) now if we can own the hctx and nothing is parked or staged;
 * else stage them for whoever runs it.
 */
static void issue_chain_directly(struct rq_hw_ctx *hctx, struct rq_sw_ctx *ctx,
				 struct rq_request *head, bool use_queue_rqs)
{
	struct rq_queue *q = hctx->q;

	if (!hctx_try_own(hctx)) {
		ctx_stage_chain(ctx, head);
		run_hw_queue(hctx);
		return;
	}
	dispatch_read_lock(q);
	if (queue_quiesced(q) || hctx_stopped(hctx) || hctx_has_dispatch(hctx) ||
	    atomic_load_explicit(&hctx->pending, memory_order_relaxed)) {
		ctx_stage_chain(ctx, head);
		dispatch_read_unlock(q);
		atomic_store(&hctx->run_state, RUN_AGAIN);
		hctx_release(hctx);
		return;
	}
	if (use_queue_rqs && q->ops->queue_rqs && !q->ops->get_budget) {
		struct rq_request *rq;
		struct comp_batch cb;
		bool own_batch = comp_batch_start(&cb, hctx);
		uint64_t n = 0;

		for (rq = head; rq; rq = rq->rq_next, n++)
			rq_start(hctx, rq);
		q->ops->queue_rqs(hctx, &head);
		/* what the driver left goes the normal way */
		for (rq = head; rq; rq = rq->rq_next, n--)
			rq_unstart(hctx, rq);
		if (own_batch)
			comp_batch_end(&cb);
		ctx_stat_add(ctx, ST_DISPATCHED, n);
	}
	if (head)
		dispatch_rq_chain(hctx, head);
	dispatch_read_unlock(q);
	hctx_release(hctx);
}

/* Hand a request to the scheduler (or stage it) and optionally run. */
static void mq_insert_request(struct rq_request *rq, bool at_head, bool run)
{
	struct rq_hw_ctx *hctx = rq->hctx;
	struct rq_queue *q = rq->q;
	struct rq_list_node list;

	rq_list_init(&list);
	rq_list_add_tail(&rq->queuelist, &list);
	if (q->elevator && (rq->rq_flags & (RQ_RQF_ELVPRIV | RQ_RQF_FLUSH_SEQ)) == RQ_RQF_ELVPRIV) {
		rq->rq_flags |= RQ_RQF_SORTED;
		trace_insert(rq);
		q->elevator->type->ops.insert_requests(hctx, &list, at_head ? RQ_INSERT_AT_HEAD : 0);
	} else if (q->elevator) {
		/* a FUA write outside a plug goes first (blk_mq_insert_request) */
		hctx_park(hctx, &list, at_head || (rq->rq_flags & RQ_RQF_FLUSH_SEQ));
	} else {
		ctx_stage(rq_priv(rq)->ctx, &list, at_head);
	}
	if (run)
		run_hw_queue(hctx);
}

/*
 * The end of a plug flush with a scheduler: @bypass (flushes, FUA writes)
 * goes to the dispatch list, @sorted into the scheduler, and @hctx runs.
 */
static void plug_hand_over(struct rq_hw_ctx *hctx, struct rq_list_node *sorted,
			   struct rq_list_node *bypass)
{
	if (!rq_list_empty(bypass))
		hctx_park(hctx, bypass, false);
	if (!rq_list_empty(sorted))
		hctx->q->elevator->type->ops.insert_requests(hctx, sorted, 0);
	run_hw_queue(hctx);
}

/*
 * A plug flush hands over a run @first... (linked by rq_next, submission
 * order) of one queue and hctx.  Without a scheduler it is issued
 * directly as the chain it is; with one each request is sorted into it,
 * or (flushes and FUA writes, as in the kernel) goes past it to the
 * dispatch list, in the one walk that unlinks the chain.
 */
static void mq_plug_issue_chain(struct rq_request *first)
{
	struct rq_queue *q = first->q;
	struct rq_hw_ctx *hctx = first->hctx;
	struct rq_list_node list, bypass;
	struct rq_list_node *tail = &list, *btail = &bypass;
	struct rq_request *rq, *next;

	if (!q->elevator) {
		issue_chain_directly(hctx, rq_priv(first)->ctx, first, true);
		return;
	}
	/* the two lists are built with their tails in registers, closed after */
	for (rq = first; rq; rq = next) {
		struct rq_list_node *n = &rq->queuelist;

		next = rq->rq_next;
		rq->rq_next = NULL;
		if (likely(rq->rq_flags & RQ_RQF_ELVPRIV)) {
			rq->rq_flags |= RQ_RQF_SORTED;
			n->prev = tail;
			tail->next = n;
			tail = n;
		} else {
			n->prev = btail;
			btail->next = n;
			btail = n;
		}
	}
	tail->next = &list;
	list.prev = tail;
	btail->next = &bypass;
	bypass.prev = btail;
	trace_insert_list(q, &list);
	plug_hand_over(hctx, &list, &bypass);
}

/*
 * The same for a run the plug built as @list (a traced queue's: its
 * unplug event counts the list), whose first request is @first.
 */
static void mq_plug_issue(struct rq_list_node *list, struct rq_request *first)
{
	(void)first;
	mq_plug_issue_chain(list_to_chain(list));
}

/* ----------------------------------------------------------- submission */

/* Try merging @bio into queued work without making a request. */
/* May @ctx hold staged requests (its bit in its hctx's pending map)? */
static inline bool ctx_maybe_staged(const struct rq_sw_ctx *ctx)
{
	return atomic_load_explicit(&ctx->hctx->pending, memory_order_relaxed) &
	       (1ull << (ctx->index_hw % 64));
}

/* The scheduler's bio_merge for @bio, if it has one: true if @bio merged. */
static inline bool mq_sched_bio_merge(struct rq_queue *q, struct rq_bio *bio, unsigned nr_segs)
{
	return q->elv.bio_merge && q->elv.bio_merge(q, bio, nr_segs);
}

/* @sched: q->elevator (the caller's test) */
static inline __attribute__((always_inline)) bool
mq_attempt_bio_merge(struct rq_queue *q, struct rq_sw_ctx *ctx, struct rq_plug *plug,
		     struct rq_bio *bio, unsigned nr_segs, bool sched)
{
	if (READ_ONCE(q->nomerges) == 2 || !bio_mergeable(bio))
		return false;
	if (plug_try_merge(plug, q, bio, nr_segs))
		return true;
	if (sched)
		return mq_sched_bio_merge(q, bio, nr_segs);
	if (ctx_maybe_staged(ctx)) {
		bool merged;

		rq_spin_lock(&ctx->lock);
		merged = ctx_list_merge(q, &ctx->rq_list, bio, nr_segs);
		rq_spin_unlock(&ctx->lock);
		return merged;
	}
	return false;
}

/*
 * Submit one piece that fits the limits; consumes one usage reference.
 * @sched: q->elevator, which cannot change while the piece holds its usage
 * reference (a switch freezes the queue): each front half (mq_submit(),
 * mq_submit_sched()) has a copy made for it, without the other's code.
 */
static inline __attribute__((always_inline)) void
mq_submit_slow(struct rq_queue *q, struct rq_sw_ctx *ctx, struct rq_bio *bio,
	       unsigned nr_segs, bool sched)
{
	struct rq_plug *plug = plug_current();
	struct rq_stats_block *sb = stats_block(q); /* one look-up for every count */
	struct rq_request *rq;
	bool flush_seq = (bio->opf & (RQ_BIO_PREFLUSH | RQ_BIO_FUA)) || bio->op == RQ_OP_FLUSH;

	/*
	 * Counted first, as a bio and a request in one (ST_BIO_REQUESTS): a
	 * bio that makes no request takes its request back (the sums wrap),
	 * so every bio is counted before it can end.
	 */
	stat_block_add(sb, ST_BIO_REQUESTS, 1);
	if (!flush_seq && mq_attempt_bio_merge(q, ctx, plug, bio, nr_segs, sched)) {
		stat_block_add(sb, ST_REQUESTS, (uint64_t)-1);
		plug_queue_exit(q, ctx);
		return;
	}
	rq = mq_get_request(q, ctx, plug, bio, nr_segs, sched);
	if (unlikely(!rq)) {
		stat_block_add(sb, ST_REQUESTS, (uint64_t)-1);
		queue_exit_ctx(q, ctx);
		bio_end_with(bio, atomic_load(&q->dying) ? RQ_STS_IOERR : RQ_STS_AGAIN);
		return;
	}
	if (unlikely(flush_seq) && flush_insert_mq(rq))
		return;
	if (plug) {
		plug_add(plug, rq);
		return;
	}
	if (sched) {
		mq_insert_request(rq, false, true);
		return;
	}
	rq->rq_next = NULL;
	issue_chain_directly(rq->hctx, ctx, rq, false);
}

/* mq_submit_slow() for a queue without a scheduler. */
static __attribute__((noinline)) void mq_submit_slow_none(struct rq_queue *q,
							  struct rq_sw_ctx *ctx,
							  struct rq_bio *bio, unsigned nr_segs)
{
	mq_submit_slow(q, ctx, bio, nr_segs, false);
}

/* mq_submit_slow() for a queue with a scheduler. */
static __attribute__((noinline)) void mq_submit_slow_sched(struct rq_queue *q,
							   struct rq_sw_ctx *ctx,
							   struct rq_bio *bio, unsigned nr_segs)
{
	mq_submit_slow(q, ctx, bio, nr_segs, true);
}

/*
 * mq_submit_slow()'s commonest case, inline and with no call, so that it
 * needs no frame: no scheduler (the caller's test), a plug that takes the request inline
 * (plug_add_fits()) and has a tag for it in its batch, a bio that is no
 * flush step and not polled and that merges with nothing (not adjacent to
 * the plug's last request, nothing staged), nothing observed, rq_affinity
 * below 2, the thread's counters cached.  All of it is checked before
 * anything changes; then the same steps as mq_submit_slow() take, in the
 * same order.  Return: false, having done nothing, if mq_submit_slow()
 * must take @bio.
 */
static inline __attribute__((always_inline)) bool
mq_submit_plugged_none(struct rq_queue *q, struct rq_sw_ctx *ctx, struct rq_plug *plug,
		       struct rq_bio *bio, unsigned nr_segs)
{
	struct rq_hw_ctx *hctx = ctx->hctx;
	struct rq_tags *tags = hctx->tags;
	struct rq_stats_block *sb;
	struct rq_request *rq;

	if (tags_shared(q) || (bio->opf & (RQ_BIO_PREFLUSH | RQ_BIO_FUA | RQ_BIO_POLLED)) ||
	    bio->op == RQ_OP_FLUSH || atomic_load_explicit(&obs_active, memory_order_relaxed) ||
	    READ_ONCE(q->rq_affinity) == 2 || !plug_add_fits(plug, q, hctx) ||
	    !plug_cached_tag_ready(plug, tags))
		return false;
	if (READ_ONCE(q->nomerges) != 2 && bio_mergeable(bio) &&
	    (plug_merge_candidate(plug, q, bio) || ctx_maybe_staged(ctx)))
		return false;
	sb = stats_block_cached(q);
	if (unlikely(!sb))
		return false;
	stat_block_add(sb, ST_BIO_REQUESTS, 1);
	rq = none_rq_take(q, hctx, ctx, tags, plug_cached_tag_pop(plug, tags, 0));
	rq_take_bio(rq, bio, nr_segs);
	plug_append(plug, rq);
	return true;
}

/*
 * mq_submit_plugged_sched()'s request when the scheduler limits its depth
 * (@shallow): the tag from the plug's batch if its lowest is below the
 * limit, else from the scheduler tags, as mq_get_request() takes it; then
 * the rest of mq_submit_slow()'s steps.  Return: true (@bio is taken).
 */
static __attribute__((noinline)) bool
mq_submit_sched_limited(struct rq_queue *q, struct rq_sw_ctx *ctx, struct rq_plug *plug,
			struct rq_bio *bio, unsigned nr_segs, struct rq_io_context *ioc,
			unsigned shallow)
{
	struct rq_hw_ctx *hctx = ctx->hctx;
	struct rq_request *rq;
	int tag = plug_cached_tag_pop(plug, hctx->sched_tags, shallow);

	if (tag < 0)
		tag = get_tag(q, hctx->sched_tags, ctx->cpu, shallow, bio->opf & RQ_BIO_NOWAIT);
	if (unlikely(tag < 0)) {
		stat_add(q, ST_REQUESTS, (uint64_t)-1);
		queue_exit_ctx(q, ctx);
		bio_end_with(bio, atomic_load(&q->dying) ? RQ_STS_IOERR : RQ_STS_AGAIN);
		return true;
	}
	rq = sched_rq_take(q, hctx, ctx, tag);
	rq_take_bio(rq, bio, nr_segs);
	sched_rq_prepare(rq, q, bio, ioc, false);
	plug_add(plug, rq); /* a wait for the tag may have flushed the plug */
	return true;
}

/*
 * mq_submit_slow()'s commonest case with a scheduler, with nothing but the
 * scheduler's hooks called: a plug that takes the request inline and has a
 * scheduler tag for it in its batch, a bio that is no flush step and not
 * polled and does not touch the plug's last request, an io context to hand
 * (the bio's, or the thread's made already), nothing observed, rq_affinity
 * below 2, the thread's counters cached.  All of it is checked before
 * anything changes; then mq_submit_slow()'s steps in its order: count
 * ST_BIO_REQUESTS, the scheduler's bio_merge, its limit_depth, the tag from
 * the plug's batch, the request's set-up and io context, prepare_request,
 * the plug.  Return: false, having done nothing, if mq_submit_slow() must
 * take @bio.
 */
static inline __attribute__((always_inline)) bool
mq_submit_plugged_sched(struct rq_queue *q, struct rq_sw_ctx *ctx, struct rq_plug *plug,
			struct rq_bio *bio, unsigned nr_segs)
{
	struct rq_hw_ctx *hctx = ctx->hctx;
	struct rq_io_context *ioc = bio->ioc ? bio->ioc : ioc_current_cached();
	struct rq_stats_block *sb;
	struct rq_request *rq;
	bool merge;
	int tag;

	if ((bio->opf & (RQ_BIO_PREFLUSH | RQ_BIO_FUA | RQ_BIO_POLLED)) ||
	    bio->op == RQ_OP_FLUSH || atomic_load_explicit(&obs_active, memory_order_relaxed) ||
	    READ_ONCE(q->rq_affinity) == 2 || !ioc || !plug_add_fits(plug, q, hctx) ||
	    !plug_cached_tag_ready(plug, hctx->sched_tags))
		return false;
	merge = READ_ONCE(q->nomerges) != 2 && bio_mergeable(bio);
	if (merge && plug_merge_candidate(plug, q, bio))
		return false;
	sb = stats_block_cached(q);
	if (unlikely(!sb))
		return false;
	stat_block_add(sb, ST_BIO_REQUESTS, 1);
	/*
	 * Past a hook's call what the caller's registers do not hold is read
	 * again (the hooks, the hw queue and its tags): fewer values live
	 * across the calls, fewer spills.
	 */
	if (merge && mq_sched_bio_merge(q, bio, nr_segs)) {
		stat_add(q, ST_REQUESTS, (uint64_t)-1);
		plug_queue_exit(q, ctx);
		return true;
	}
	tag = sched_limit_depth(q, ctx->hctx, bio, false);
	if (unlikely(tag)) /* a limit: the tag as mq_get_request() would take it */
		return mq_submit_sched_limited(q, ctx, plug, bio, nr_segs, ioc, (unsigned)tag);
	hctx = ctx->hctx;
	tag = plug_cached_tag_pop(plug, hctx->sched_tags, 0);
	rq = sched_rq_take(q, hctx, ctx, tag);
	rq_take_bio(rq, bio, nr_segs);
	sched_rq_prepare(rq, q, bio, ioc, false);
	plug_append(plug, rq);
	return true;
}

/* A bio on a queue with a scheduler (mq_submit()'s second half). */
static __attribute__((noinline)) void mq_submit_sched(struct rq_queue *q, struct rq_sw_ctx *ctx,
						      struct rq_bio *bio, unsigned nr_segs)
{
	struct rq_plug *plug = plug_current();

	if (plug && mq_submit_plugged_sched(q, ctx, plug, bio, nr_segs))
		return;
	mq_submit_slow_sched(q, ctx, bio, nr_segs);
}

static void mq_submit(struct rq_queue *q, struct rq_sw_ctx *ctx, struct rq_bio *bio,
		      unsigned nr_segs)
{
	struct rq_plug *plug;

	if (q->elevator) {
		mq_submit_sched(q, ctx, bio, nr_segs);
		return;
	}
	if ((plug = plug_current()) && mq_submit_plugged_none(q, ctx, plug, bio, nr_segs))
		return;
	mq_submit_slow_none(q, ctx, bio, nr_segs);
}


/* -------------------------------------------------------- hw queue ops */

RQ_EXPORT void rq_mq_run_hw_queue(struct rq_hw_ctx *hctx, bool async)
{
	if (async) {
		atomic_fetch_or(&hctx->state, HCTX_ASYNC_RUN);
		service_kick();
		return;
	}
	run_hw_queue(hctx);
}

RQ_EXPORT void rq_mq_run_hw_queues(struct rq_queue *q, bool async)
{
	for (unsigned i = 0; i < q->nr_hw_queues; i++)
		rq_mq_run_hw_queue(q->hctxs[i], async);
}

RQ_EXPORT void rq_mq_delay_run_hw_queue(struct rq_hw_ctx *hctx, unsigned msecs)
{
	hctx_delay_run(hctx, msecs);
}

RQ_EXPORT void rq_mq_stop_hw_queue(struct rq_hw_ctx *hctx)
{
	atomic_fetch_or(&hctx->state, HCTX_STOPPED);
}

RQ_EXPORT void rq_mq_start_hw_queue(struct rq_hw_ctx *hctx)
{
	atomic_fetch_and(&hctx->state, ~HCTX_STOPPED);
	run_hw_queue(hctx);
}

RQ_EXPORT void rq_mq_stop_hw_queues(struct rq_queue *q)
{
	for (unsigned i = 0; i < q->nr_hw_queues; i++)
		rq_mq_stop_hw_queue(q->hctxs[i]);
}

RQ_EXPORT void rq_mq_start_hw_queues(struct rq_queue *q)
{
	for (unsigned i = 0; i < q->nr_hw_queues; i++)
		rq_mq_start_hw_queue(q->hctxs[i]);
}

RQ_EXPORT void rq_mq_start_stopped_hw_queues(struct rq_queue *q, bool async)
{
	for (unsigned i = 0; i < q->nr_hw_queues; i++) {
		struct rq_hw_ctx *hctx = q->hctxs[i];

		if (atomic_fetch_and(&hctx->state, ~HCTX_STOPPED) & HCTX_STOPPED)
			rq_mq_run_hw_queue(hctx, async);
	}
}

RQ_EXPORT bool rq_mq_hw_queue_stopped(struct rq_hw_ctx *hctx)
{
	return hctx_stopped(hctx);
}

RQ_EXPORT int rq_mq_poll(struct rq_queue *q, bool all)
{
	struct rq_tag_set *set = q->set;
	unsigned first, n;
	int done = 0;

	done = rq_process_completions();
	if (!set->nr_poll_queues || !q->ops->poll)
		return done;
	first = set->nr_hw_queues - set->nr_poll_queues;
	if (all) {
		for (n = first; n < set->nr_hw_queues; n++)
			done += q->ops->poll(q->hctxs[n], 32);
		return done;
	}
	n = first + cur_cpu() % set->nr_poll_queues;
	return done + q->ops->poll(q->hctxs[n], 32);
}

/* ------------------------------------------------------------- requeue */

RQ_EXPORT void rq_mq_requeue_request(struct rq_request *rq, bool kick)
{
	struct rq_queue *q = rq->q;
	uint8_t expected = RQ_STATE_IN_FLIGHT;

	if (!__atomic_compare_exchange_n(&rq->state, &expected, RQ_STATE_IDLE, false,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return;
	hctx_request_left_driver(rq->hctx);
	if (q->elevator && q->elevator->type->ops.requeue_request &&
	    (rq->rq_flags & RQ_RQF_ELVPRIV))
		q->elevator->type->ops.requeue_request(rq);
	stat_inc(q, ST_REQUEUES);
	trace_requeue(rq);
	rq_spin_lock(&q->requeue_lock);
	rq_list_add_tail(&rq->queuelist, &q->requeue_list);
	rq_spin_unlock(&q->requeue_lock);
	if (kick)
		rq_mq_kick_requeue_list(q);
}

RQ_EXPORT void rq_mq_kick_requeue_list(struct rq_queue *q)
{
	struct rq_list_node list;

	rq_list_init(&list);
	rq_spin_lock(&q->requeue_lock);
	rq_list_splice_tail_init(&q->requeue_list, &list);
	rq_spin_unlock(&q->requeue_lock);
	while (!rq_list_empty(&list)) {
		struct rq_request *rq = rq_list_first_rq(&list);
		struct rq_list_node one;

		rq_list_del_init(&rq->queuelist);
		rq_list_init(&one);
		rq_list_add_tail(&rq->queuelist, &one);
		hctx_park(rq->hctx, &one, false);
	}
	rq_mq_run_hw_queues(q, false);
}

RQ_EXPORT void rq_mq_delay_kick_requeue_list(struct rq_queue *q, unsigned msecs)
{
	uint64_t at = service_clock_ns() + (uint64_t)msecs * 1000000ull;
	uint64_t cur = atomic_load(&q->requeue_at_ns);

	while (cur == 0 || at < cur) {
		if (atomic_compare_exchange_weak(&q->requeue_at_ns, &cur, at)) {
			service_kick();
			break;
		}
	}
}

/* ------------------------------------------------------------ tag sets */

static int cpu_node(unsigned cpu)
{
#if HAVE_NUMA
	if (numa_available() >= 0) {
		int node = numa_node_of_cpu((int)cpu);

		return node < 0 ? 0 : node;
	}
#endif
	(void)cpu;
	return 0;
}

/*
 * Spread CPUs over the (non-poll) hw queues node by node: CPUs are ordered
 * by NUMA node, then cut into equal runs, so a queue serves CPUs of one node
 * whenever there are at least as many queues as nodes.
 */
static void default_map_queues(struct rq_tag_set *set, unsigned *map, unsigned nr_cpus)
{
	unsigned nr = set->nr_hw_queues - set->nr_poll_queues;
	unsigned *order = mem_calloc(nr_cpus, sizeof(*order));
	int *node = mem_calloc(nr_cpus, sizeof(*node));

	if (!nr)
		nr = set->nr_hw_queues;
	if (!order || !node) {
		for (unsigned cpu = 0; cpu < nr_cpus; cpu++)
			map[cpu] = (unsigned)(((uint64_t)cpu * nr) / nr_cpus);
		mem_free(order, 0);
		mem_free(node, 0);
		return;
	}
	for (unsigned cpu = 0; cpu < nr_cpus; cpu++) {
		order[cpu] = cpu;
		node[cpu] = cpu_node(cpu);
	}
	/* stable insertion sort by node (CPU counts are small) */
	for (unsigned i = 1; i < nr_cpus; i++) {
		unsigned c = order[i], j = i;

		while (j && node[order[j - 1]] > node[c]) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = c;
	}
	for (unsigned i = 0; i < nr_cpus; i++)
		map[order[i]] = (unsigned)(((uint64_t)i * nr) / nr_cpus);
	mem_free(order, nr_cpus * sizeof(*order));
	mem_free(node, nr_cpus * sizeof(*node));
}

/*
 * The NUMA node a hw queue's memory lives on: the node of the first CPU
 * mapped to it (so its tags and requests are local to the CPUs that use
 * them), else the tag set's preference; -1 without NUMA.
 */
static int hw_queue_node(const struct rq_tag_set *set, unsigned idx)
{
#if HAVE_NUMA
	if (numa_available() >= 0) {
		for (unsigned cpu = 0; cpu < set->nr_cpus; cpu++)
			if (set->map[cpu] == idx)
				return cpu_node(cpu);
	}
#endif
	return set->numa_node;
}

/* Is @cfg (copied in) a tag set the library can make? */
static bool tag_set_config_ok(const struct rq_tag_set_config *cfg)
{
	if (!cfg->ops || cfg->ops->abi_version != RQ_MQ_OPS_ABI ||
	    cfg->ops->size < offsetof(struct rq_mq_ops, queue_rq) + sizeof(void *))
		return false;
	return cfg->nr_hw_queues && cfg->nr_hw_queues <= 1024 && cfg->queue_depth &&
	       cfg->queue_depth <= 65536 && cfg->reserved_tags < cfg->queue_depth &&
	       cfg->nr_poll_queues < cfg->nr_hw_queues && cfg->cmd_size <= (1u << 20);
}

RQ_EXPORT int rq_tag_set_alloc(const struct rq_tag_set_config *cfg, struct rq_tag_set **out)
{
	struct rq_tag_set_config c;
	struct rq_tag_set *set;
	size_t ops_size;
	unsigned nr_tags_sets;

	if (!cfg || !out || rq_copy_sized_in(&c, sizeof(c), cfg, RQ_TAG_SET_CONFIG_SIZE_0_1))
		return -EINVAL;
	cfg = &c;
	if (!tag_set_config_ok(cfg))
		return -EINVAL;
	set = mem_zalloc(sizeof(*set));
	if (!set)
		return -ENOMEM;
	ops_size = cfg->ops->size < sizeof(set->ops) ? cfg->ops->size : sizeof(set->ops);
	memcpy(&set->ops, cfg->ops, ops_size);
	set->ops.size = sizeof(set->ops);
	if (!set->ops.queue_rq) {
		mem_free(set, sizeof(*set));
		return -EINVAL;
	}
	set->nr_hw_queues = cfg->nr_hw_queues;
	set->nr_poll_queues = cfg->nr_poll_queues;
	set->queue_depth = cfg->queue_depth;
	set->reserved_tags = cfg->reserved_tags;
	set->cmd_size = cfg->cmd_size;
	set->numa_node = cfg->numa_node;
	set->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : RQ_DEFAULT_TIMEOUT_MS;
	set->flags = cfg->flags;
	set->driver_data = cfg->driver_data;
	end_mode_init(); /* before any request of the set exists */
	set->nr_cpus = (unsigned)get_nprocs_conf();
	if (!set->nr_cpus)
		set->nr_cpus = 1;
	set->rq_size = request_size(cfg->cmd_size);
	pthread_mutex_init(&set->lock, NULL);
	set->map = mem_calloc(set->nr_cpus, sizeof(*set->map));
	nr_tags_sets = (set->flags & RQ_TAG_SET_SHARED_TAGS) ? 1 : set->nr_hw_queues;
	set->tags = mem_calloc(set->nr_hw_queues, sizeof(*set->tags));
	if (!set->map || !set->tags)
		goto fail;
	if (set->ops.map_queues)
		set->ops.map_queues(set, set->map, set->nr_cpus);
	else
		default_map_queues(set, set->map, set->nr_cpus);
	for (unsigned cpu = 0; cpu < set->nr_cpus; cpu++)
		if (set->map[cpu] >= set->nr_hw_queues)
			goto fail;
	set->hctx_node = mem_calloc(set->nr_hw_queues, sizeof(*set->hctx_node));
	if (!set->hctx_node)
		goto fail;
	for (unsigned i = 0; i < set->nr_hw_queues; i++)
		set->hctx_node[i] = hw_queue_node(set, i);
	for (unsigned i = 0; i < nr_tags_sets; i++) {
		int node = set->hctx_node[i];

		set->tags[i] = rq_tags_alloc(set->queue_depth, set->reserved_tags, set->rq_size,
					     false, node);
		if (!set->tags[i])
			goto fail;
		if (set->ops.init_request) {
			for (unsigned t = 0; t < set->queue_depth; t++) {
				if (set->ops.init_request(set, set->tags[i]->static_rqs[t], i, node))
					goto fail;
			}
		}
	}
	for (unsigned i = nr_tags_sets; i < set->nr_hw_queues; i++)
		set->tags[i] = set->tags[0];
	*out = set;
	return 0;
fail:
	rq_tag_set_free(set);
	return -ENOMEM;
}

RQ_EXPORT void rq_tag_set_free(struct rq_tag_set *set)
{
	unsigned nr_tags_sets;

	if (!set)
		return;
	nr_tags_sets = (set->flags & RQ_TAG_SET_SHARED_TAGS) ? 1 : set->nr_hw_queues;
	if (set->tags) {
		for (unsigned i = 0; i < nr_tags_sets; i++) {
			if (!set->tags[i])
				continue;
			if (set->ops.exit_request) {
				for (unsigned t = 0; t < set->queue_depth; t++)
					set->ops.exit_request(set, set->tags[i]->static_rqs[t], i);
			}
			rq_tags_free(set->tags[i]);
		}
	}
	mem_free(set->tags, 0);
	mem_free(set->map, 0);
	mem_free(set->hctx_node, 0);
	pthread_mutex_destroy(&set->lock);
	mem_free(set, sizeof(*set));
}

RQ_EXPORT void *rq_tag_set_driver_data(struct rq_tag_set *set)
{
	return set->driver_data;
}

/* --------------------------------------------------------------- queues */

static void hctx_free(struct rq_queue *q, struct rq_hw_ctx *hctx, unsigned idx, bool inited)
{
	if (!hctx)
		return;
	if (inited && q->ops->exit_hctx)
		q->ops->exit_hctx(hctx, idx);
	if (atomic_load(&hctx->tag_active))
		atomic_fetch_sub(&hctx->tags->active_queues, 1);
	pthread_mutex_destroy(&hctx->share_lock);
	pthread_cond_destroy(&hctx->share_cond);
	rq_free_node(hctx->ctxs, 0);
	rq_free_node(hctx->timeout_gen, 0);
	rq_free_node(hctx->timeout_deadline, 0);
	rq_free_node(hctx, sizeof(*hctx));
}

static int hctx_alloc(struct rq_queue *q, unsigned idx)
{
	struct rq_tag_set *set = q->set;
	int node = set->hctx_node[idx];
	struct rq_hw_ctx *hctx = rq_alloc_node(sizeof(*hctx), node);
	unsigned nr_tags = set->queue_depth;

	if (!hctx)
		return -ENOMEM;
	q->hctxs[idx] = hctx;
	rq_spin_init(&hctx->lock);
	rq_list_init(&hctx->dispatch);
	pthread_mutex_init(&hctx->share_lock, NULL);
	pthread_cond_init(&hctx->share_cond, NULL);
	hctx->q = q;
	hctx->tags = set->tags[idx];
	hctx->queue_num = idx;
	hctx->numa_node = node;
	hctx->poll = idx >= set->nr_hw_queues - set->nr_poll_queues;
	/* on the hw queue's node, like the hctx: its dispatch and timeout scan use them */
	hctx->ctxs = rq_alloc_node(q->nr_cpus * sizeof(*hctx->ctxs), node);
	hctx->timeout_gen = rq_alloc_node(nr_tags * sizeof(*hctx->timeout_gen), node);
	hctx->timeout_deadline = rq_alloc_node(nr_tags * sizeof(*hctx->timeout_deadline), node);
	if (!hctx->ctxs || !hctx->timeout_gen || !hctx->timeout_deadline)
		return -ENOMEM;
	if (set->ops.init_hctx && set->ops.init_hctx(hctx, set->driver_data, idx)) {
		hctx_free(q, hctx, idx, false);
		q->hctxs[idx] = NULL;
		return -EIO;
	}
	return 0;
}

/* Free the hw queues, then the queue; the queue is empty. */
static void mq_queue_free(struct rq_queue *q)
{
	if (q->hctxs) {
		for (unsigned i = 0; i < q->nr_hw_queues; i++)
			hctx_free(q, q->hctxs[i], i, true);
	}
	mem_free(q->hctxs, 0);
	flush_queue_exit(q);
	queue_free_common(q);
}

/* The hw queues of a new queue, and each CPU's software queue mapped to one. */
static int mq_alloc_hctxs(struct rq_queue *q)
{
	int ret;

	q->hctxs = mem_calloc(q->nr_hw_queues, sizeof(*q->hctxs));
	if (!q->hctxs)
		return -ENOMEM;
	for (unsigned i = 0; i < q->nr_hw_queues; i++) {
		ret = hctx_alloc(q, i);
		if (ret)
			return ret;
	}
	for (unsigned cpu = 0; cpu < q->nr_cpus; cpu++) {
		struct rq_sw_ctx *ctx = &q->ctxs[cpu];
		struct rq_hw_ctx *hctx = q->hctxs[q->map[cpu]];

		ctx->hctx = hctx;
		ctx->index_hw = hctx->nr_ctx;
		hctx->ctxs[hctx->nr_ctx++] = ctx;
	}
	return 0;
}

/*
 * The scheduler a new queue starts with: the one asked for, else
 * mq-deadline for a rotational device with one hw queue (as the kernel
 * picks), else none (NULL).
 */
static const char *mq_initial_sched(const struct rq_tag_set *set,
				    const struct rq_queue_config *cfg,
				    const struct rq_queue_limits *lim)
{
	if (cfg && cfg->scheduler)
		return strcmp(cfg->scheduler, "none") ? cfg->scheduler : NULL;
	if ((lim->features & RQ_FEAT_ROTATIONAL) && set->nr_hw_queues == 1 &&
	    !(set->flags & RQ_TAG_SET_NO_SCHED) && rq_sched_exists("mq-deadline"))
		return "mq-deadline";
	return NULL;
}

/* Add @q to the queues of @set (for fair tag sharing); -ENOSPC when full. */
static int mq_set_add_queue(struct rq_tag_set *set, struct rq_queue *q)
{
	int ret = 0;

	pthread_mutex_lock(&set->lock);
	if (set->nr_queues < ARRAY_SIZE(set->queues))
		set->queues[set->nr_queues++] = q;
	else
		ret = -ENOSPC;
	pthread_mutex_unlock(&set->lock);
	return ret;
}

static void mq_set_del_queue(struct rq_tag_set *set, struct rq_queue *q)
{
	pthread_mutex_lock(&set->lock);
	for (unsigned i = 0; i < set->nr_queues; i++) {
		if (set->queues[i] == q) {
			set->queues[i] = set->queues[--set->nr_queues];
			break;
		}
	}
	pthread_mutex_unlock(&set->lock);
}

RQ_EXPORT int rq_mq_alloc_queue(struct rq_tag_set *set, const struct rq_queue_config *cfg,
				struct rq_queue **out)
{
	struct queue_common_config cc = { .fe = &mq_fe_ops };
	struct rq_queue_config c;
	struct rq_queue_limits lim;
	struct rq_queue *q;
	const char *sched;
	int ret;

	if (!set || !out)
		return -EINVAL;
	if (cfg) {
		if (rq_copy_sized_in(&c, sizeof(c), cfg, RQ_QUEUE_CONFIG_SIZE_0_1))
			return -EINVAL;
		cfg = &c;
	}
	if (cfg && cfg->limits) {
		if (limits_copy_in(&lim, cfg->limits))
			return -EINVAL;
	} else {
		rq_queue_limits_default(&lim);
	}
	if (rq_queue_limits_validate(&lim))
		return -EINVAL;
	sched = mq_initial_sched(set, cfg, &lim);
	if (sched && (!rq_sched_exists(sched) || (set->flags & RQ_TAG_SET_NO_SCHED)))
		return -EINVAL;
	cc.limits = &lim;
	cc.capacity = cfg ? cfg->capacity : 0;
	cc.queuedata = cfg ? cfg->queuedata : NULL;
	cc.timeout_ms = set->timeout_ms;
	cc.nr_requests = set->queue_depth;
	cc.nr_cpus = set->nr_cpus;
	cc.rq_size = set->rq_size;
	cc.numa_node = set->numa_node;
	q = queue_alloc_common(&cc);
	if (!q)
		return -ENOMEM;
	q->set = set;
	q->ops = &set->ops;
	q->mq_flags = ((set->flags & RQ_TAG_SET_SHARED) ? MQ_F_SHARED_TAGS : 0) |
		      (set->ops.put_budget ? MQ_F_PUT_BUDGET : 0);
	q->nr_hw_queues = set->nr_hw_queues;
	q->map = set->map;
	ret = mq_alloc_hctxs(q);
	if (!ret)
		ret = flush_queue_init(q, q->hctxs[0]);
	if (!ret && sched)
		ret = queue_elevator_switch(q, sched);
	if (!ret)
		ret = mq_set_add_queue(set, q);
	if (ret) {
		mq_elevator_detach(q);
		mq_queue_free(q);
		return ret;
	}
	service_register(q);
	*out = q;
	return 0;
}

/* End with IOERR every request that is queued but not with the driver. */
static void queue_fail_queued(struct rq_queue *q)
{
	struct rq_list_node list;

	rq_list_init(&list);
	rq_spin_lock(&q->requeue_lock);
	rq_list_splice_tail_init(&q->requeue_list, &list);
	rq_spin_unlock(&q->requeue_lock);
	for (unsigned i = 0; i < q->nr_hw_queues; i++) {
		struct rq_hw_ctx *hctx = q->hctxs[i];

		hctx_take_dispatch(hctx, &list);
		for (unsigned c = 0; c < hctx->nr_ctx; c++) {
			struct rq_sw_ctx *ctx = hctx->ctxs[c];

			rq_spin_lock(&ctx->lock);
			rq_list_splice_tail_init(&ctx->rq_list, &list);
			rq_spin_unlock(&ctx->lock);
		}
		atomic_store(&hctx->pending, 0);
		if (q->elevator) {
			const struct rq_elevator_type *e = q->elevator->type;
			struct rq_request *rq;

			while (e->ops.has_work(hctx) && (rq = e->ops.dispatch_request(hctx)))
				rq_list_add_tail(&rq->queuelist, &list);
		}
	}
	while (!rq_list_empty(&list)) {
		struct rq_request *rq = rq_list_first_rq(&list);

		rq_list_del_init(&rq->queuelist);
		if (rq_priv(rq)->end_io) {
			/* the flush request, or a data step: the sequence fails */
			rq_priv(rq)->end_io(rq, RQ_STS_IOERR);
			continue;
		}
		request_fail(rq, RQ_STS_IOERR);
	}
	flush_fail_pending(q);
}

/*
 * Teardown (rq_queue_destroy(), after the core marked @q dying and failed
 * the caller's plugged requests): what is queued fails with IOERR, what
 * the driver holds is waited for (timeouts still run), then everything goes.
 */
static void mq_queue_destroy(struct rq_queue *q)
{
	for (unsigned i = 0; i < q->nr_hw_queues; i++) {
		sbq_wake_all(&q->hctxs[i]->tags->bitmap);
		if (q->hctxs[i]->sched_tags)
			sbq_wake_all(&q->hctxs[i]->sched_tags->bitmap);
	}
	rq_queue_quiesce(q);
	queue_wait_drained(q, queue_fail_queued);
	/* a dispatcher may still be letting go of an hctx it emptied */
	for (unsigned i = 0; i < q->nr_hw_queues; i++)
		while (atomic_load(&q->hctxs[i]->run_state) != RUN_IDLE)
			sched_yield();
	service_unregister(q);
	dispatch_synchronize(q);
	mq_elevator_detach(q);
	mq_set_del_queue(q->set, q);
	mq_queue_free(q);
}

/* ------------------------------------------------------------- service */

/*
 * Look at every in-flight request of @q once.  Timeouts cost nothing per
 * I/O: every issue bumps rq->gen; the scan keeps, per driver tag, the
 * generation it last saw and a deadline set the first time it saw that
 * generation in flight.  While the driver's timeout hook runs,
 * rq->core_busy keeps the request from being reused: a release that comes
 * meanwhile (the hook itself may end, complete or requeue and re-end it)
 * is handed to the scan, which finishes it when the hook returns
 * (mq_timeout_hold_end()); nothing waits on it.  Context: service pass.
 */
static void timeout_scan(struct rq_queue *q, uint64_t now)
{
	uint64_t timeout = queue_timeout_ns(q);

	for (unsigned i = 0; i < q->nr_hw_queues; i++) {
		struct rq_hw_ctx *hctx = q->hctxs[i];
		struct rq_tags *tags = hctx->tags;

		for (unsigned tag = 0; tag < tags->nr_tags; tag++) {
			struct rq_request *rq = __atomic_load_n(&tags->rqs[tag], __ATOMIC_ACQUIRE);
			uint32_t gen;

			if (!rq || __atomic_load_n(&rq->hctx, __ATOMIC_RELAXED) != hctx ||
			    __atomic_load_n(&rq->state, __ATOMIC_ACQUIRE) != RQ_STATE_IN_FLIGHT)
				continue;
			gen = __atomic_load_n(&rq_priv(rq)->gen, __ATOMIC_ACQUIRE);
			if (hctx->timeout_gen[tag] != gen || !hctx->timeout_deadline[tag]) {
				hctx->timeout_gen[tag] = gen;
				hctx->timeout_deadline[tag] = now + timeout;
				continue;
			}
			if (now < hctx->timeout_deadline[tag])
				continue;
			if (timeout_hold(rq, gen)) {
				enum rq_timeout_ret ret = RQ_EH_RESET_TIMER;

				stat_inc(q, ST_TIMEOUTS);
				if (q->ops->timeout)
					ret = q->ops->timeout(rq);
				/* DONE: the driver ends it; never call again for this issue */
				hctx->timeout_deadline[tag] = ret == RQ_EH_RESET_TIMER ? now + timeout :
											 UINT64_MAX;
			}
			mq_timeout_hold_end(rq);
		}
	}
}

/*
 * The multi-queue part of a service pass: async and delayed hw queue runs,
 * the delayed requeue kick, and with @scan the timeout scan and the fair
 * share's idle check.
 */
static void mq_service(struct rq_queue *q, uint64_t now, bool scan, uint64_t *next)
{
	uint64_t at;

	for (unsigned i = 0; i < q->nr_hw_queues; i++) {
		struct rq_hw_ctx *hctx = q->hctxs[i];

		if (atomic_fetch_and(&hctx->state, ~HCTX_ASYNC_RUN) & HCTX_ASYNC_RUN)
			run_hw_queue(hctx);
		at = atomic_load(&hctx->run_at_ns);
		if (at && at <= now) {
			if (atomic_compare_exchange_strong(&hctx->run_at_ns, &at, 0))
				run_hw_queue(hctx);
		} else if (at && at < *next) {
			*next = at;
		}
	}
	at = atomic_load(&q->requeue_at_ns);
	if (at && at <= now) {
		if (atomic_compare_exchange_strong(&q->requeue_at_ns, &at, 0))
			rq_mq_kick_requeue_list(q);
	} else if (at && at < *next) {
		*next = at;
	}
	if (!scan)
		return;
	timeout_scan(q, now);
	if (tags_shared(q))
		for (unsigned i = 0; i < q->nr_hw_queues; i++)
			hctx_tag_idle_check(q->hctxs[i]);
}

/* --------------------------------------------------------- flush steps */

/* The flush request borrows @first's driver tag (idle while it waits), if any. */
static void mq_flush_prepare(struct rq_request *flush_rq, struct rq_request *first)
{
	flush_rq->tag = first->tag;
	if (flush_rq->tag >= 0)
		__atomic_store_n(&flush_rq->hctx->tags->rqs[flush_rq->tag], flush_rq,
				 __ATOMIC_RELEASE);
}

/*
 * A step left the driver.  The flush request hands a borrowed tag back to
 * its owner, or frees one it took at dispatch; a data step made with a
 * scheduler tag frees the driver tag it took at dispatch.
 */
static void mq_flush_step_end(struct rq_request *rq)
{
	struct rq_hw_ctx *hctx = rq->hctx;

	if (rq->rq_flags & RQ_RQF_ELVPRIV) {
		/* a FUA write's data step: the scheduler is done with it (once) */
		const struct rq_elevator_type *e = rq->q->elevator->type;

		if (e->ops.completed_request)
			e->ops.completed_request(rq, core_clock_ns());
		if (e->ops.finish_request)
			e->ops.finish_request(rq);
		rq->rq_flags &= ~RQ_RQF_ELVPRIV;
	}
	if (rq->tag < 0)
		return;
	if (rq->rq_flags & RQ_RQF_FLUSH_INTERNAL) {
		/* the flush request's end: fq->lock is held, orig_rq is stable */
		struct rq_request *orig = rq->q->fq.orig_rq;

		if (orig && orig->tag == rq->tag)
			__atomic_store_n(&hctx->tags->rqs[rq->tag], orig, __ATOMIC_RELEASE);
		else
			driver_tag_put(hctx, (unsigned)rq->tag, cur_cpu());
	} else if (rq->rq_flags & RQ_RQF_SCHED_TAGS) {
		driver_tag_put(hctx, (unsigned)rq->tag, cur_cpu());
		rq->tag = -1;
	}
}

/*
 * A step goes to the dispatch list: data steps at the tail, the flush
 * request at the head.  Once parked it may complete at once: its hctx is
 * read first.
 */
static void mq_flush_issue(struct rq_request *rq, bool flush)
{
	struct rq_hw_ctx *hctx = rq->hctx;
	struct rq_list_node one;

	rq_list_init(&one);
	rq_list_add_tail(&rq->queuelist, &one);
	hctx_park(hctx, &one, flush);
	run_hw_queue(hctx);
}

/* The sequence of @rq is over: it ends like a request that never left. */
static void mq_flush_seq_done(struct rq_request *rq, rq_status_t status)
{
	rq_priv(rq)->end_io = NULL;
	rq->rq_flags &= ~RQ_RQF_FLUSH_SEQ;
	request_fail(rq, status);
}

static struct rq_hw_ctx *mq_bio_hctx(struct rq_queue *q, const struct rq_bio *bio)
{
	return rq_sched_bio_hctx(q, bio, NULL);
}

static const struct rq_fe_ops mq_fe_ops = {
	.name = "mq",
	.elv_features = RQ_ELV_F_MQ,
	.submit = mq_submit,
	.plug_issue = mq_plug_issue,
	.plug_issue_chain = mq_plug_issue_chain,
	.release_request = mq_release_request,
	.bio_hctx = mq_bio_hctx,
	.complete = complete_here,
	.end_batch = mq_end_list,
	.run_queues = rq_mq_run_hw_queues,
	.quiesce_sync = dispatch_synchronize,
	.destroy = mq_queue_destroy,
	.service = mq_service,
	.elevator_switch = mq_elevator_switch,
	.set_nr_requests = mq_set_nr_requests,
	.flush_prepare = mq_flush_prepare,
	.flush_step_end = mq_flush_step_end,
	.flush_issue = mq_flush_issue,
	.flush_seq_done = mq_flush_seq_done,
};

/* -------------------------------------------------------------- getters */

RQ_EXPORT unsigned rq_hctx_index(const struct rq_hw_ctx *hctx)
{
	return hctx->queue_num;
}

RQ_EXPORT struct rq_queue *rq_hctx_queue(const struct rq_hw_ctx *hctx)
{
	return hctx->q;
}

RQ_EXPORT void *rq_hctx_driver_data(const struct rq_hw_ctx *hctx)
{
	return hctx->driver_data;
}

RQ_EXPORT void rq_hctx_set_driver_data(struct rq_hw_ctx *hctx, void *data)
{
	hctx->driver_data = data;
}

RQ_EXPORT int rq_hctx_numa_node(const struct rq_hw_ctx *hctx)
{
	return hctx->numa_node;
}

RQ_EXPORT bool rq_hctx_is_poll(const struct rq_hw_ctx *hctx)
{
	return hctx->poll;
}

RQ_EXPORT struct rq_hw_ctx *rq_queue_hctx(struct rq_queue *q, unsigned idx)
{
	return idx < q->nr_hw_queues ? q->hctxs[idx] : NULL;
}

/*
 * hctx->sched_data, or, on a thread switching the queue, the pending
 * scheduler's (inline: see rq_sched_data()).
 */
RQ_EXPORT inline void *rq_sched_hctx_data(const struct rq_hw_ctx *hctx)
{
	const struct sched_view *v = sched_view_of(hctx->q);

	if (unlikely(v))
		return v->hctx_data[hctx->queue_num];
	return hctx->sched_data;
}

/* Set hctx->sched_data, or, on a thread switching the queue, the pending one's. */
RQ_EXPORT inline void rq_sched_set_hctx_data(struct rq_hw_ctx *hctx, void *data)
{
	const struct sched_view *v = sched_view_of(hctx->q);

	if (unlikely(v))
		v->hctx_data[hctx->queue_num] = data;
	else
		hctx->sched_data = data;
}

/* The bits per word of the tags a request of @hctx's scheduler takes. */
static unsigned tags_word_bits(const struct rq_hw_ctx *hctx, const struct sched_view *v)
{
	const struct rq_tags *tags = hctx->sched_tags ? hctx->sched_tags : hctx->tags;

	/* a pending scheduler's own tags (a switch to one has them) */
	if (unlikely(v) && v->tags)
		tags = v->tags[hctx->queue_num];
	return 1u << tags->bitmap.sb.shift;
}

RQ_EXPORT unsigned rq_sched_word_bits(const struct rq_hw_ctx *hctx)
{
	return tags_word_bits(hctx, sched_view_of(hctx->q));
}

/*
 * The bitmap's nr_requests bits fill whole words of 2^shift bits but the
 * last, which holds the rest.  A shallow depth s lets a request use
 * min(s, bits of the word) of each: the smallest s that adds up to @depth.
 */
RQ_EXPORT unsigned rq_sched_shallow_depth(const struct rq_hw_ctx *hctx, unsigned depth)
{
	const struct sched_view *v = sched_view_of(hctx->q);
	unsigned nr = v ? v->nr_requests : hctx->q->nr_requests, bits, words, last, s;

	if (!nr || depth >= nr)
		return 0;
	bits = tags_word_bits(hctx, v);
	words = DIV_ROUND_UP(nr, bits);
	last = nr - (words - 1) * bits;
	s = DIV_ROUND_UP(depth, words);
	if (s > last) /* the last word is full before the others reach s */
		s = DIV_ROUND_UP(depth - last, words - 1);
	return s ? s : 1;
}

RQ_EXPORT unsigned rq_hctx_nr_ctx(const struct rq_hw_ctx *hctx)
{
	return hctx->nr_ctx;
}

RQ_EXPORT unsigned rq_sched_ctx_index(const struct rq_request *rq)
{
	return rq_priv(rq)->ctx->index_hw;
}

/* rq_sched_bio_hctx() from @ctx's CPU: polled bios, other queues, outside submissions. */
static __attribute__((noinline)) struct rq_hw_ctx *
bio_map_hctx_slow(struct rq_queue *q, struct rq_sw_ctx *ctx, const struct rq_bio *bio,
		  unsigned *ctx_index)
{
	struct rq_hw_ctx *hctx;

	ctx = queue_ctx(q, ctx ? ctx->cpu : cur_cpu());
	hctx = map_hctx(q, ctx->cpu, bio->opf);
	if (ctx_index)
		*ctx_index = hctx == ctx->hctx ? ctx->index_hw : 0;
	return hctx;
}

/*
 * Schedulers ask from bio_merge, once or twice per bio: inside a submission
 * of @q the answer is the submission's software queue's hw queue, which
 * map_hctx() would give for a bio that is not polled (ctx->hctx is set from
 * the same map when the queue is made).  Small, so LTO can inline it.
 */
RQ_EXPORT struct rq_hw_ctx *rq_sched_bio_hctx(struct rq_queue *q, const struct rq_bio *bio,
					    unsigned *ctx_index)
{
	struct rq_sw_ctx *ctx = tls_submit_ctx;

	if (unlikely(!ctx || ctx->q != q || (bio->opf & RQ_BIO_POLLED)))
		return bio_map_hctx_slow(q, ctx, bio, ctx_index);
	if (ctx_index)
		*ctx_index = ctx->index_hw;
	return ctx->hctx;
}
