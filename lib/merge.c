/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Merging: bios into requests (back and front), requests into requests, the
 * back-merge hash keyed by end sector and the one-hit last_merge cache.
 *
 * The rules, as the kernel documents them: only reads, writes and discards
 * merge; never across RQ_BIO_NOMERGE, PREFLUSH or FUA; only with the same op
 * and I/O priority; only when contiguous; and never beyond max_sectors for
 * the op or max_segments (segments of different bios are not coalesced).
 *
 * The hash and last_merge belong to the scheduler instance, one pair per
 * hardware queue (a bio or request only meets requests of its own hardware
 * queue, as a scheduler's sorted tree per hardware queue already has it),
 * and are used under the scheduler's lock for that hardware queue (the
 * callers of the rq_sched_* helpers).
 */
#include <errno.h>
#include <stdlib.h>

#include "internal/alloc.h"
#include "internal/queue.h"
#include "internal/elevator.h"
#include "internal/ioc.h"
#include "internal/trace.h"

/*
 * The submission's software queue, set by the core (rq_submit_bio()) for
 * the length of a submission; the merge lookups and rq_sched_bio_hctx()
 * read it.  Defined here, the lowest layer that reads it.
 */
__thread struct rq_sw_ctx *tls_submit_ctx __attribute__((tls_model("initial-exec")));

/* The priority a bio will have as a request on @q. */
static uint16_t bio_effective_prio(const struct rq_queue *q, const struct rq_bio *bio)
{
	struct rq_io_context *ioc;

	if (bio->ioprio || !q->elevator)
		return bio->ioprio;
	ioc = bio->ioc ? bio->ioc : rq_ioc_current();
	return ioc ? rq_ioc_prio(ioc) : 0;
}

bool rq_merge_ok(const struct rq_request *rq, const struct rq_bio *bio)
{
	return rq_mergeable(rq) && bio_mergeable(bio) && rq->op == bio->op &&
	       rq->ioprio == bio_effective_prio(rq->q, bio);
}

enum rq_elv_merge rq_try_merge_pos(const struct rq_request *rq, const struct rq_bio *bio)
{
	if (rq_request_end_sector(rq) == bio->iter.sector)
		return RQ_ELV_BACK_MERGE;
	if (rq->sector == rq_bio_end_sector(bio))
		return RQ_ELV_FRONT_MERGE;
	return RQ_ELV_NO_MERGE;
}

/*
 * Would @rq grown by @sectors and @nr_segs stay within the limits, the
 * grown request starting at @start?  As 6.x blk_rq_get_max_sectors(): the
 * op's cap, and for everything but discards the room left before the next
 * chunk boundary from @start (the request's sector for a back merge, the
 * bio's for a front merge).
 */
static bool fits_limits(const struct rq_request *rq, unsigned sectors, unsigned nr_segs,
			uint64_t start)
{
	const struct rq_queue_limits *lim = &rq->q->limits;
	uint64_t max = limits_max_sectors_for_op(lim, rq->op);

	if (lim->chunk_sectors && rq->op != RQ_OP_DISCARD &&
	    max > limits_chunk_left(lim, start))
		max = limits_chunk_left(lim, start);
	if (rq_request_sectors(rq) + sectors > max)
		return false;
	if (rq_op_has_data(rq->op) && rq->nr_segments + nr_segs > lim->max_segments)
		return false;
	return true;
}

bool bio_attempt_back_merge(struct rq_request *rq, struct rq_bio *bio, unsigned nr_segs)
{
	if (!fits_limits(rq, rq_bio_sectors(bio), nr_segs, rq->sector))
		return false;
	bio->next = NULL;
	rq->biotail->next = bio;
	rq->biotail = bio;
	rq->bytes += bio->iter.size;
	if (rq_op_has_data(rq->op))
		rq->nr_segments = (uint16_t)(rq->nr_segments + nr_segs);
	rq->opf |= bio->opf & (RQ_BIO_SYNC | RQ_BIO_META | RQ_BIO_PRIO);
	stat_inc(rq->q, ST_MERGES_BACK);
	trace_merge(rq->q, bio, true);
	return true;
}

bool bio_attempt_front_merge(struct rq_request *rq, struct rq_bio *bio, unsigned nr_segs)
{
	if (!fits_limits(rq, rq_bio_sectors(bio), nr_segs, bio->iter.sector))
		return false;
	bio->next = rq->bio;
	rq->bio = bio;
	rq->sector = bio->iter.sector;
	rq->bytes += bio->iter.size;
	if (rq_op_has_data(rq->op))
		rq->nr_segments = (uint16_t)(rq->nr_segments + nr_segs);
	rq->opf |= bio->opf & (RQ_BIO_SYNC | RQ_BIO_META | RQ_BIO_PRIO);
	stat_inc(rq->q, ST_MERGES_FRONT);
	trace_merge(rq->q, bio, false);
	return true;
}

/*
 * Merge @bio into @rq if the rules allow, asking the scheduler's
 * allow_merge when @sched_allow.  Plug merges do not ask it.
 */
bool bio_attempt_merge(struct rq_queue *q, struct rq_request *rq, struct rq_bio *bio,
		       unsigned nr_segs, bool sched_allow)
{
	/* adjacency first: it is what random I/O fails, and it is cheap */
	enum rq_elv_merge pos = rq_try_merge_pos(rq, bio);

	if (pos == RQ_ELV_NO_MERGE || !rq_merge_ok(rq, bio))
		return false;
	if (sched_allow && q->elevator && q->elevator->type->ops.allow_merge &&
	    !q->elevator->type->ops.allow_merge(q, rq, bio))
		return false;
	if (pos == RQ_ELV_BACK_MERGE)
		return bio_attempt_back_merge(rq, bio, nr_segs);
	return bio_attempt_front_merge(rq, bio, nr_segs);
}

RQ_EXPORT bool rq_sched_list_merge(struct rq_queue *q, struct rq_list_node *list,
				   struct rq_bio *bio, unsigned nr_segs)
{
	return ctx_list_merge(q, list, bio, nr_segs);
}

/* Merge into one of the newest requests staged on a software queue. */
bool ctx_list_merge(struct rq_queue *q, struct rq_list_node *list, struct rq_bio *bio,
		    unsigned nr_segs)
{
	unsigned checked = 0;

	for (struct rq_list_node *n = list->prev; n != list && checked < 8; n = n->prev, checked++) {
		struct rq_request *rq = RQ_CONTAINER_OF(n, struct rq_request, queuelist);

		if (bio_attempt_merge(q, rq, bio, nr_segs, false))
			return true;
	}
	return false;
}

/* ---------------------------------------------------------------- hash */

static inline unsigned hash_bucket(uint64_t sector)
{
	return (unsigned)((sector * 0x9E3779B97F4A7C15ull) >> (64 - RQ_ELV_HASH_BITS));
}

/* A scheduler instance with @nr_merge (at least one) zeroed merge states. */
struct rq_elevator_queue *elv_queue_alloc(unsigned nr_merge)
{
	struct rq_elevator_queue *eq;

	if (!nr_merge)
		nr_merge = 1;
	eq = mem_zalloc(sizeof(*eq) + nr_merge * sizeof(struct elv_merge_state));
	if (eq)
		eq->nr_merge = nr_merge;
	return eq;
}

/* The merge state of @hctx's requests (the one state without hw queues). */
static inline struct elv_merge_state *ems_of_hctx(struct rq_queue *q,
						  const struct rq_hw_ctx *hctx)
{
	struct rq_elevator_queue *eq = q->elevator;

	return &eq->merge[hctx && eq->nr_merge > 1 ? hctx->queue_num : 0];
}

static inline struct elv_merge_state *ems_of_rq(struct rq_queue *q, const struct rq_request *rq)
{
	return ems_of_hctx(q, rq->hctx);
}

/*
 * Where a bio submitted now would be queued: its hw queue's state.  Inside
 * a submission of @q, the submission's software queue says (as
 * rq_sched_bio_hctx() does); else the front end's hook maps it.
 */
static inline struct elv_merge_state *ems_of_bio(struct rq_queue *q, const struct rq_bio *bio)
{
	struct rq_elevator_queue *eq = q->elevator;
	struct rq_sw_ctx *ctx = tls_submit_ctx;

	if (eq->nr_merge == 1)
		return &eq->merge[0];
	if (likely(ctx && ctx->q == q && !(bio->opf & RQ_BIO_POLLED)))
		return ems_of_hctx(q, ctx->hctx);
	return ems_of_hctx(q, q->fe->bio_hctx(q, bio));
}

/* Take the hashed @rq out of its hash. */
static inline void hash_unlink(struct rq_request *rq)
{
	struct rq_hlist_node *n = &rq_priv(rq)->hash;

	*n->pprev = n->next;
	if (n->next)
		n->next->pprev = n->pprev;
	n->next = NULL;
	n->pprev = NULL;
	rq->rq_flags &= ~RQ_RQF_HASHED;
}

RQ_EXPORT void rq_sched_hash_del(struct rq_queue *q, struct rq_request *rq)
{
	if (!(rq->rq_flags & RQ_RQF_HASHED))
		return;
	hash_unlink(rq);
	if (q->elevator) {
		struct elv_merge_state *ems = ems_of_rq(q, rq);

		if (ems->last_merge == rq)
			ems->last_merge = NULL;
	}
}

/* Put the unhashed @rq in @ems's hash, by its end sector. */
static inline void hash_link(struct elv_merge_state *ems, struct rq_request *rq)
{
	struct rq_hlist_node **head = &ems->hash[hash_bucket(rq_request_end_sector(rq))];
	struct rq_hlist_node *n = &rq_priv(rq)->hash;

	n->next = *head;
	if (*head)
		(*head)->pprev = &n->next;
	*head = n;
	n->pprev = head;
	rq->rq_flags |= RQ_RQF_HASHED;
}

RQ_EXPORT void rq_sched_hash_add(struct rq_queue *q, struct rq_request *rq)
{
	if (!q->elevator || (rq->rq_flags & RQ_RQF_HASHED))
		return;
	hash_link(ems_of_rq(q, rq), rq);
}

/*
 * The single-queue sorted insert of the mergeable @rq (the kernel's
 * elv_rqhash_add() and one-hit fill): a scheduler is attached and its one
 * merge state holds every request.  Lock held.
 */
void elv_sq_hash_insert(struct rq_queue *q, struct rq_request *rq)
{
	struct elv_merge_state *ems = &q->elevator->merge[0];

	if (!(rq->rq_flags & RQ_RQF_HASHED))
		hash_link(ems, rq);
	if (!ems->last_merge)
		ems->last_merge = rq;
}

/*
 * @rq leaves the single-queue scheduler (for the dispatch queue): out of
 * the hash and the one-hit cache of the one merge state.  Lock held.
 */
void elv_sq_hash_leave(struct rq_queue *q, struct rq_request *rq)
{
	struct elv_merge_state *ems = &q->elevator->merge[0];

	if (ems->last_merge == rq)
		ems->last_merge = NULL;
	if (rq->rq_flags & RQ_RQF_HASHED)
		hash_unlink(rq);
}

/*
 * The kernel's inserts (dd_insert_request, bfq_insert_request, and the
 * legacy elevator's sorted insert) make a newly hashed request the one-hit
 * cache when the cache is empty: with nomerges 1 it is then the only way a
 * later bio or request can still join it.
 */
RQ_EXPORT bool rq_sched_last_merge_fill(struct rq_queue *q, struct rq_request *rq)
{
	struct elv_merge_state *ems;

	if (!q->elevator || !rq_mergeable(rq))
		return false;
	ems = ems_of_rq(q, rq);
	if (ems->last_merge)
		return false;
	ems->last_merge = rq;
	return true;
}

static void rqhash_reposition(struct rq_queue *q, struct rq_request *rq)
{
	if (rq->rq_flags & RQ_RQF_HASHED) {
		struct elv_merge_state *ems = ems_of_rq(q, rq);
		struct rq_request *keep = ems->last_merge;

		rq_sched_hash_del(q, rq);
		rq_sched_hash_add(q, rq);
		ems->last_merge = keep;
	}
}

/* The hashed request ending at @sector; drops unmergeable ones it meets. */
static struct rq_request *elv_hash_find(struct elv_merge_state *ems, uint64_t sector)
{
	struct rq_hlist_node *n = ems->hash[hash_bucket(sector)];

	while (n) {
		struct rq_request *rq = &RQ_CONTAINER_OF(n, struct rq_request_priv, hash)->rq;

		n = n->next;
		if (!rq_mergeable(rq)) {
			rq_sched_hash_del(rq->q, rq);
			continue;
		}
		if (rq_request_end_sector(rq) == sector)
			return rq;
	}
	return NULL;
}

/* ------------------------------------------- the scheduler, either front end */

/*
 * The core asks the scheduler through the hooks its front end set when it
 * attached it (struct elv_merge_hooks), so one merge implementation serves
 * both front ends.
 */
static struct rq_request *elv_latter(struct rq_queue *q, struct rq_request *rq)
{
	const struct elv_merge_hooks *h = &q->elevator->hooks;

	return h->latter ? h->latter(q, rq) : NULL;
}

static struct rq_request *elv_former(struct rq_queue *q, struct rq_request *rq)
{
	const struct elv_merge_hooks *h = &q->elevator->hooks;

	return h->former ? h->former(q, rq) : NULL;
}

static bool sched_allows(struct rq_queue *q, struct rq_request *rq, struct rq_bio *bio)
{
	const struct elv_merge_hooks *h = &q->elevator->hooks;

	return !h->allow_bio || h->allow_bio(q, rq, bio);
}

/*
 * May queued @next join @rq?  The allow_rq hook (single queue:
 * allow_rq_merge), else allow_bio asked about @next's first bio (so a
 * scheduler that keeps contexts apart, as bfq does, keeps them apart here).
 */
static bool sched_allows_rq(struct rq_queue *q, struct rq_request *rq, struct rq_request *next)
{
	const struct elv_merge_hooks *h = &q->elevator->hooks;

	if (h->allow_rq)
		return h->allow_rq(q, rq, next);
	return !next->bio || sched_allows(q, rq, next->bio);
}

/* The scheduler's front-merge lookup. */
static enum rq_elv_merge elv_front_lookup(struct rq_queue *q, struct rq_request **rq,
					  struct rq_bio *bio)
{
	const struct elv_merge_hooks *h = &q->elevator->hooks;

	return h->front_lookup ? (enum rq_elv_merge)h->front_lookup(q, rq, bio) : RQ_ELV_NO_MERGE;
}

/* @next joined @rq: the scheduler forgets @next. */
static void elv_requests_merged(struct rq_queue *q, struct rq_request *rq, struct rq_request *next)
{
	const struct elv_merge_hooks *h = &q->elevator->hooks;

	if (h->requests_merged)
		h->requests_merged(q, rq, next);
}

static void elv_request_grew(struct rq_queue *q, struct rq_request *rq, enum rq_elv_merge type)
{
	const struct elv_merge_hooks *h = &q->elevator->hooks;

	if (h->request_grew)
		h->request_grew(q, rq, type);
}

/* ------------------------------------------------- request-request merges */

/*
 * Merge @next (which starts where @rq ends) into @rq.  The scheduler is told
 * through requests_merged and must forget @next.  Returns @next (now empty,
 * to be freed by the caller) or NULL.
 */
static struct rq_request *attempt_merge(struct rq_queue *q, struct rq_request *rq,
					struct rq_request *next)
{
	if (!rq_mergeable(rq) || !rq_mergeable(next) || rq->op != next->op ||
	    rq->ioprio != next->ioprio || rq_request_end_sector(rq) != next->sector)
		return NULL;
	if (!fits_limits(rq, rq_request_sectors(next), next->nr_segments, rq->sector) ||
	    !sched_allows_rq(q, rq, next))
		return NULL;
	trace_rq_merge(next);
	rq->biotail->next = next->bio;
	rq->biotail = next->biotail;
	rq->bytes += next->bytes;
	if (rq_op_has_data(rq->op))
		rq->nr_segments = (uint16_t)(rq->nr_segments + next->nr_segments);
	elv_requests_merged(q, rq, next);
	rq_sched_hash_del(q, next);
	rqhash_reposition(q, rq);
	ems_of_rq(q, rq)->last_merge = rq;
	next->bio = next->biotail = NULL;
	next->bytes = 0;
	stat_inc(q, ST_MERGES_RQ);
	return next;
}

static struct rq_request *attempt_back_merge(struct rq_queue *q, struct rq_request *rq)
{
	struct rq_request *next = elv_latter(q, rq);

	return next ? attempt_merge(q, rq, next) : NULL;
}

static struct rq_request *attempt_front_merge(struct rq_queue *q, struct rq_request *rq)
{
	struct rq_request *prev = elv_former(q, rq);

	return prev ? attempt_merge(q, prev, rq) : NULL;
}

static void elv_merged_request(struct rq_queue *q, struct rq_request *rq, enum rq_elv_merge type)
{
	elv_request_grew(q, rq, type);
	if (type == RQ_ELV_BACK_MERGE)
		rqhash_reposition(q, rq);
	ems_of_rq(q, rq)->last_merge = rq;
}

RQ_EXPORT bool rq_sched_try_merge(struct rq_queue *q, struct rq_bio *bio, unsigned nr_segs,
				  struct rq_request **merged)
{
	enum rq_elv_merge type = RQ_ELV_NO_MERGE;
	struct elv_merge_state *ems;
	struct rq_request *rq = NULL;

	if (merged)
		*merged = NULL;
	if (!q->elevator || READ_ONCE(q->nomerges) == 2 || !bio_mergeable(bio))
		return false;
	ems = ems_of_bio(q, bio);
	/* the one-hit cache first */
	if (ems->last_merge && rq_merge_ok(ems->last_merge, bio)) {
		type = rq_try_merge_pos(ems->last_merge, bio);
		if (type != RQ_ELV_NO_MERGE && sched_allows(q, ems->last_merge, bio))
			rq = ems->last_merge;
		else
			type = RQ_ELV_NO_MERGE;
	}
	if (type == RQ_ELV_NO_MERGE && READ_ONCE(q->nomerges) == 0) {
		rq = elv_hash_find(ems, bio->iter.sector);
		if (rq && rq_merge_ok(rq, bio) && sched_allows(q, rq, bio)) {
			type = RQ_ELV_BACK_MERGE;
		} else {
			rq = NULL;
			type = elv_front_lookup(q, &rq, bio);
			if (type != RQ_ELV_NO_MERGE &&
			    (!rq || !rq_merge_ok(rq, bio) || rq_try_merge_pos(rq, bio) != type ||
			     !sched_allows(q, rq, bio)))
				type = RQ_ELV_NO_MERGE;
		}
	}
	if (type != RQ_ELV_BACK_MERGE && type != RQ_ELV_FRONT_MERGE)
		return false;
	{
		bool back = type == RQ_ELV_BACK_MERGE;
		struct rq_request *freed;

		if (back ? !bio_attempt_back_merge(rq, bio, nr_segs) :
			   !bio_attempt_front_merge(rq, bio, nr_segs))
			return false;
		/* the grown request may now touch its neighbour */
		freed = back ? attempt_back_merge(q, rq) : attempt_front_merge(q, rq);
		if (!freed)
			elv_merged_request(q, rq, type);
		if (merged)
			*merged = freed;
		else if (freed)
			request_free(freed);
		return true;
	}
}

RQ_EXPORT bool rq_sched_try_insert_merge(struct rq_queue *q, struct rq_request *rq,
					 struct rq_list_node *free)
{
	struct elv_merge_state *ems;
	bool ret = false;

	if (!q->elevator || READ_ONCE(q->nomerges) == 2)
		return false;
	ems = ems_of_rq(q, rq);
	if (ems->last_merge && ems->last_merge != rq && attempt_merge(q, ems->last_merge, rq)) {
		rq_list_add(&rq->queuelist, free);
		return true;
	}
	if (READ_ONCE(q->nomerges))
		return false;
	for (;;) {
		struct rq_request *prev = elv_hash_find(ems, rq->sector);

		if (!prev || prev == rq || !attempt_merge(q, prev, rq))
			break;
		rq_list_add(&rq->queuelist, free);
		ret = true;
		/* the grown request may now join another */
		rq = prev;
	}
	return ret;
}
