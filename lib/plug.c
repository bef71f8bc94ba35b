/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Plugging (blk_start_plug / blk_finish_plug), common to both front ends.
 *
 * A thread's plug collects the requests it makes until it flushes: when it
 * is full, when the thread finishes it, or before the thread would sleep
 * in the library (waiting for a freeze, a tag, a pool request).  A flush
 * hands each run of requests of one queue and hw queue to the front end
 * (q->fe->plug_issue), in submission order.  A bio may merge into the
 * request last added to the plug (plug_try_merge()).
 *
 * A plug also caches tags taken ahead in batches (the kernel's
 * plug->cached_rqs): see plug_cached_tag(), and queue usage references
 * taken ahead (the kernel's percpu_ref_get_many() for a plug's cached
 * requests): see plug_queue_enter().
 *
 * A plug is the calling thread's alone: nothing here runs concurrently on
 * one plug.
 */
#define _GNU_SOURCE
#include <stdlib.h>

#include "internal/queue.h"
#include "internal/trace.h"

__thread struct rq_plug *tls_plug __attribute__((tls_model("initial-exec")));

/*
 * Batched tag allocation: a plug takes up to PLUG_TAG_BATCH tags of one hw
 * queue (as many as a full plug holds requests, at most one bitmap word)
 * with a single compare-and-swap (sbq_get_batch) and hands them out as its
 * requests are made; what is left goes back in one batch when the plug
 * flushes or finishes (the kernel's plug->cached_rqs, sized there by the
 * submitter's nr_ios).  A plug of 32 requests on words of 16 bits thus
 * refills twice, not four times as with batches of 8.  Driver tags
 * without a scheduler, scheduler tags with one; not for shared tag sets
 * (fair sharing counts driver tags one by one) nor for depth-limited
 * allocations (limit_depth).
 *
 * Scheduler tags die with their scheduler, so while a plug holds any it
 * also holds one usage reference of their queue (plug->cache_q): a freeze,
 * and with it a scheduler switch or nr_requests change, waits until the
 * plug gives them back.  A plug never takes scheduler tags ahead once a
 * freeze has begun.  Driver tags live as long as the tag set.
 */
#define PLUG_TAG_BATCH RQ_PLUG_MAX_REQUESTS

void plug_return_tags(struct rq_plug *plug, unsigned cpu)
{
	struct rq_tags *tags = plug->tag_cache;

	if (!plug->cached_tags)
		return;
	sbq_put_mask(&tags->bitmap, plug->cached_tags, plug->cached_off, cpu);
	plug->cached_tags = 0;
	if (plug->cache_q) {
		/* any CPU's usage slot will do: the freezer sums them */
		queue_exit_ctx(plug->cache_q, queue_ctx(plug->cache_q, cpu));
		plug->cache_q = NULL;
	}
}

/*
 * A tag from the plug's batch, refilled from @tags (the scheduler tags of
 * @q when @sched_q is set, else driver tags); -1 if none.  @ctx is the
 * submission's software queue (of @sched_q, when set): its CPU hints the
 * bitmap and its usage slot counts the plug's reference.  With @shallow
 * (a scheduler's limit_depth: bits per word the request may use; 0: all)
 * only such a bit is handed out, and a refill takes only such bits; a
 * cached bit above the limit (taken for a request without one) is left
 * for the next request that may have it.
 */
int plug_cached_tag_refill(struct rq_plug *plug, struct rq_tags *tags, struct rq_queue *sched_q,
			   struct rq_sw_ctx *ctx, unsigned shallow)
{
	unsigned bit;

	if (unlikely(plug->tag_cache != tags)) {
		plug_return_tags(plug, ctx->cpu);
		plug->tag_cache = tags;
	}
	if (!plug->cached_tags) {
		if (sched_q && atomic_load_explicit(&sched_q->freeze_depth, memory_order_relaxed))
			return -1;
		plug->cached_tags = sbq_get_batch_shallow(&tags->bitmap, ctx->cpu, PLUG_TAG_BATCH,
							  shallow, &plug->cached_off);
		if (!plug->cached_tags)
			return -1;
		if (sched_q) {
			atomic_fetch_add_explicit(&ctx->usage, 1, memory_order_seq_cst);
			plug->cache_q = sched_q;
		}
	}
	bit = (unsigned)__builtin_ctzl(plug->cached_tags);
	if (unlikely(shallow) && bit >= shallow)
		return -1; /* the lowest is the one that would go: above the limit */
	plug->cached_tags &= plug->cached_tags - 1;
	if (!plug->cached_tags && plug->cache_q) {
		/* the request being made holds the queue from here */
		queue_exit_ctx(plug->cache_q, queue_ctx(plug->cache_q, ctx->cpu));
		plug->cache_q = NULL;
	}
	return (int)(tags->nr_reserved + plug->cached_off + bit);
}

/*
 * Queue usage taken ahead: the first bio a plugged thread submits to a
 * queue takes PLUG_USAGE_BATCH (a full plug's worth) usage references with
 * one atomic add; the next bios to the same queue take theirs from that
 * stock with no atomic operation, and a bio merged away gives its
 * reference back to it.  The
 * stock belongs to the thread's outermost plug and goes back when the plug
 * flushes (rq_flush_plug(): before the thread sleeps in the library, and
 * when a freeze starts on the freezing thread), finishes, or fails a queue
 * at teardown, and when a bio of another queue comes.  So a freeze waits
 * for the plugs that hold a stock, as it waits for their plugged requests
 * and cached scheduler tags; and a stock is never used once a freeze has
 * begun: the bio then enters the slow way (queue_enter()), which waits.
 * One reference, taken before the freeze began, is what each such bio
 * holds, exactly as if it had entered one by one.
 */
#define PLUG_USAGE_BATCH RQ_PLUG_MAX_REQUESTS

__thread struct rq_queue *tls_usage_q __attribute__((tls_model("initial-exec")));
__thread unsigned tls_usage_refs __attribute__((tls_model("initial-exec")));
/* the software queue of @tls_usage_q the stock was taken on (valid while it is set) */
__thread struct rq_sw_ctx *tls_usage_ctx __attribute__((tls_model("initial-exec")));

/* Give the stock of usage references back (on @cpu's slot: the freezer sums them). */
static void plug_return_usage(unsigned cpu)
{
	struct rq_queue *q = tls_usage_q;

	if (!q)
		return;
	tls_usage_q = NULL;
	if (tls_usage_refs)
		queue_exit_ctx_n(q, queue_ctx(q, cpu), tls_usage_refs);
	tls_usage_refs = 0;
}

/*
 * One usage reference of @q for a bio, from the plug's stock (refilled
 * PLUG_USAGE_BATCH at a time).  The stock is taken on the software queue
 * of the CPU the thread runs on at the refill, and the bios it serves are
 * made into requests there too: the CPU is looked up once per stock, not
 * per bio, as the kernel's plug-cached requests keep the software queue
 * they were allocated on even if the thread moves.  So a plug's requests
 * are made on one software queue (one hw queue) per stock of a queue;
 * the next refill (a new plug, another queue's bio, or a full plug's
 * worth of bios later) looks again.
 * Return: that software queue; NULL without a plug or once a freeze has
 * begun: then the caller takes the calling CPU's and enters with
 * queue_enter().  Pairs with queue_exit_ctx() or plug_queue_exit().
 */
struct rq_sw_ctx *plug_queue_enter(struct rq_queue *q)
{
	struct rq_sw_ctx *ctx;

	if (!tls_plug)
		return NULL;
	if (unlikely(atomic_load_explicit(&q->freeze_depth, memory_order_relaxed))) {
		if (tls_usage_q == q)
			plug_return_usage(tls_usage_ctx->cpu);
		return NULL;
	}
	if (likely(tls_usage_q == q && tls_usage_refs)) {
		tls_usage_refs--;
		return tls_usage_ctx;
	}
	ctx = queue_ctx(q, cur_cpu());
	plug_return_usage(ctx->cpu);
	atomic_fetch_add_explicit(&ctx->usage, PLUG_USAGE_BATCH, memory_order_seq_cst);
	if (unlikely(atomic_load_explicit(&q->freeze_depth, memory_order_seq_cst))) {
		queue_exit_ctx_n(q, ctx, PLUG_USAGE_BATCH);
		return NULL;
	}
	tls_usage_q = q;
	tls_usage_ctx = ctx;
	tls_usage_refs = PLUG_USAGE_BATCH - 1;
	return ctx;
}

/* Drop one usage reference of @q: into the plug's stock if it is @q's. */
void plug_queue_exit(struct rq_queue *q, struct rq_sw_ctx *ctx)
{
	if (tls_usage_q == q && tls_usage_refs < PLUG_USAGE_BATCH &&
	    likely(!atomic_load_explicit(&q->freeze_depth, memory_order_relaxed))) {
		tls_usage_refs++;
		return;
	}
	queue_exit_ctx(q, ctx);
}

/* ------------------------------------------------------------- plugging */

/*
 * The calling thread's plug holds requests of more than one run (queue
 * and hw queue): plug_add_slow() sets it when a request's differ from the
 * first's, a flush clears it.  Without it the flush hands the plug's
 * whole chain over as the one run it is, with no walk to find its end.
 */
static __thread bool tls_plug_runs __attribute__((tls_model("initial-exec")));

RQ_EXPORT void rq_start_plug(struct rq_plug *plug)
{
	plug->tag_cache = NULL;
	plug->cached_tags = 0;
	plug->cached_off = 0;
	plug->cache_q = NULL;
	plug->head = plug->tail = NULL;
	plug->count = 0;
	plug->multiple_queues = 0;
	plug->q = NULL;
	plug->prev = tls_plug;
	if (!tls_plug) {
		tls_plug = plug;
		tls_plug_held = true; /* core_clock_ns() keeps its reading */
		tls_plug_now = 0;
		tls_plug_runs = false;
	}
}

/* Hand the plug's requests over, run by run.  @plug is the thread's own (tls_plug). */
static void plug_flush_list(struct rq_plug *plug)
{
	struct rq_request *rq = plug->head;
	bool runs = tls_plug_runs;

	tls_plug_runs = false;
	plug->head = plug->tail = NULL;
	plug->count = 0;
	plug->multiple_queues = 0;
	while (rq) {
		struct rq_request *first = rq;
		struct rq_queue *q = first->q;
		struct rq_hw_ctx *hctx = first->hctx;
		struct rq_list_node list;

		if (q->fe->plug_issue_chain && !obs_on(q)) {
			struct rq_request *last = rq;

			if (!runs) {
				/* one run: the whole chain, its last rq_next NULL */
				q->fe->plug_issue_chain(first);
				break;
			}
			/* cut the run off the plug's chain; the next run starts at @rq */
			while ((rq = last->rq_next) && rq->q == q && rq->hctx == hctx)
				last = rq;
			last->rq_next = NULL;
			q->fe->plug_issue_chain(first);
			continue;
		}
		rq_list_init(&list);
		do {
			struct rq_request *next = rq->rq_next;

			rq->rq_next = NULL;
			rq_list_add_tail(&rq->queuelist, &list);
			rq = next;
		} while (rq && rq->q == q && rq->hctx == hctx);
		trace_unplug(q, &list);
		q->fe->plug_issue(&list, first);
	}
	trace_step_end();
	/*
	 * The reading served the flush too (requests issued, and ended inline,
	 * at the plug's time, as under the kernel's __blk_flush_plug(), which
	 * drops plug->cur_ktime only after the flush); what comes next reads anew.
	 */
	tls_plug_now = 0;
}

RQ_EXPORT void rq_flush_plug(void)
{
	struct rq_plug *plug = tls_plug;
	unsigned cpu;

	if (!plug)
		return;
	if (plug->head)
		plug_flush_list(plug);
	tls_plug_now = 0; /* the thread may sleep next: its reading would go stale */
	/* ... and others may need the tags it took ahead */
	cpu = cur_cpu();
	plug_return_tags(plug, cpu);
	plug_return_usage(cpu);
}

RQ_EXPORT void rq_finish_plug(struct rq_plug *plug)
{
	unsigned cpu;

	if (plug != tls_plug)
		return; /* a nested plug: the outermost one flushes */
	if (plug->head)
		plug_flush_list(plug);
	tls_plug = NULL;
	tls_plug_held = false;
	tls_plug_now = 0;
	cpu = cur_cpu();
	plug_return_tags(plug, cpu);
	plug_return_usage(cpu);
	mbox_run_own();
}

/*
 * plug_try_merge()'s part out of line: @bio joins the request last added
 * to the plug, @rq, a request of @q, if the merge rules allow.
 */
bool plug_merge_tail(struct rq_queue *q, struct rq_request *rq, struct rq_bio *bio,
		     unsigned nr_segs)
{
	if (!bio_attempt_merge(q, rq, bio, nr_segs, false))
		return false;
	stat_inc(q, ST_PLUG_MERGES);
	return true;
}

/*
 * Queue @rq on @plug, flushing it first when it is full (both front ends;
 * plug_add() in internal/queue.h does the common case inline).
 * As 6.12+ blk_add_rq_to_plug(): the size test and the queue comparison
 * look at the plug's FIRST request (rq_list_peek() of a FIFO list), and
 * with nomerges 2 the size does not flush.
 */
void plug_add_slow(struct rq_plug *plug, struct rq_request *rq)
{
	struct rq_request *first = plug->head;
	struct rq_queue *q = rq->q;

	if (likely(first)) {
		unsigned max = plug->multiple_queues ? 2u * RQ_PLUG_MAX_REQUESTS :
						       RQ_PLUG_MAX_REQUESTS;

		if (unlikely(plug->count >= max ||
			     (first->bytes >= PLUG_FLUSH_BYTES && READ_ONCE(q->nomerges) != 2))) {
			plug_flush_list(plug);
			first = NULL;
		} else {
			if (unlikely(first->q != q))
				plug->multiple_queues = 1;
			if (first->q != q || first->hctx != rq->hctx)
				tls_plug_runs = true;
			plug->tail->rq_next = rq;
		}
	}
	if (!first) {
		trace_plug(q);
		plug->head = rq;
	}
	rq->rq_next = NULL;
	plug->tail = rq;
	plug->count++;
	plug->q = q;
}

/* Teardown: requests of @q on the calling thread's plug end with IOERR. */
void plug_fail_queue(struct rq_queue *q)
{
	struct rq_plug *plug = tls_plug;
	struct rq_request *rq, **link;

	if (!plug)
		return;
	plug_return_tags(plug, cur_cpu());
	plug_return_usage(cur_cpu());
	link = &plug->head;
	plug->tail = NULL;
	while ((rq = *link)) {
		if (rq->q != q) {
			plug->tail = rq;
			link = &rq->rq_next;
			continue;
		}
		*link = rq->rq_next;
		rq->rq_next = NULL;
		plug->count--;
		if (q->fe->plug_fail)
			q->fe->plug_fail(rq, RQ_STS_IOERR); /* sq: the pool wants its lock */
		else
			request_fail(rq, RQ_STS_IOERR);
	}
}
