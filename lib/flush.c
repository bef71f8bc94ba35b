/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Flush sequencing: PREFLUSH and FUA on a device with a volatile write cache.
 *
 * A request that needs more than its data step runs a small state machine:
 *
 *   PREFLUSH  ->  DATA  ->  POSTFLUSH  ->  DONE
 *
 * Steps it does not need are marked done up front: no PREFLUSH flag, no
 * data, or FUA that the device honours itself (then no POSTFLUSH).  Waiters
 * for a flush step queue on the pending list; one flush request per queue
 * is in flight at a time, and every waiter that was pending when it was
 * issued moves on when it ends, so concurrent flushes coalesce while each
 * PREFLUSH is still served by a flush issued after its request arrived.
 * A flush also waits while data steps of sequenced requests are with the
 * device (up to FLUSH_PENDING_TIMEOUT_NS), so FUA writes sent together
 * share one post-flush (the kernel's C2 and C3; 6.x asks this with or
 * without a scheduler).
 *
 * Multi-queue, as Linux 6.x (blk_insert_flush): a FUA write that needs
 * only its data step and a post-flush (write cache, no FUA) is not held
 * here: flush_insert_mq() marks it and hands it back, and it goes through
 * the plug and the scheduler like any write (never merged: it is
 * RQ_RQF_FLUSH_SEQ); its completion starts the post-flush.  The
 * single-queue front end keeps the 4.x way (flush_insert(): the machinery
 * issues every step).
 * The flush request borrows the driver tag of its first waiter (which is
 * idle while it waits), or takes one at dispatch.  An error in any step
 * ends the request with that error.  Without a write cache the submit path
 * strips PREFLUSH and FUA and ends empty flushes at once.
 *
 * Locking: fq->lock guards the lists and the in-flight state.  Issuing and
 * ending requests happen after it is dropped (end_io may submit more I/O).
 */
#include <errno.h>

#include "internal/queue.h"

#define FSEQ_PREFLUSH (1u << 0)
#define FSEQ_DATA (1u << 1)
#define FSEQ_POSTFLUSH (1u << 2)
#define FSEQ_DONE (1u << 3)
#define FSEQ_ACTIONS (FSEQ_PREFLUSH | FSEQ_DATA | FSEQ_POSTFLUSH)

/* A flush waits for data steps in flight at most this long (kernel: 5 s). */
#define FLUSH_PENDING_TIMEOUT_NS (5ull * 1000 * 1000 * 1000)

/* What to do once fq->lock is dropped. */
struct flush_actions {
	struct rq_list_node issue; /* data steps to dispatch */
	struct rq_list_node done;  /* sequences finished (status in complete_status) */
	struct rq_request *flush;  /* the flush request to dispatch */
};

static void flush_data_end_io(struct rq_request *rq, rq_status_t status);
static void flush_end_io(struct rq_request *flush_rq, rq_status_t status);

static unsigned next_step(uint32_t seq)
{
	for (unsigned step = FSEQ_PREFLUSH; step <= FSEQ_POSTFLUSH; step <<= 1)
		if (!(seq & step))
			return step;
	return FSEQ_DONE;
}

/* Record @done for @rq and move it to its next step.  Under fq->lock. */
static void complete_seq(struct rq_flush_queue *fq, struct rq_request *rq, uint32_t done,
			 rq_status_t status, struct flush_actions *act)
{
	unsigned next;

	rq_priv(rq)->flush.seq |= done;
	if (status != RQ_STS_OK && rq_priv(rq)->complete_status == RQ_STS_OK)
		rq_priv(rq)->complete_status = status;
	next = rq_priv(rq)->complete_status != RQ_STS_OK ? FSEQ_DONE : next_step(rq_priv(rq)->flush.seq);
	rq_list_del_init(&rq_priv(rq)->flush.list);
	switch (next) {
	case FSEQ_PREFLUSH:
	case FSEQ_POSTFLUSH:
		if (rq_list_empty(&fq->pending[fq->pending_idx]))
			fq->pending_since = rq_clock_ns();
		rq_list_add_tail(&rq_priv(rq)->flush.list, &fq->pending[fq->pending_idx]);
		break;
	case FSEQ_DATA:
		fq->data_in_flight++;
		rq_list_add_tail(&rq->queuelist, &act->issue);
		break;
	default:
		rq_priv(rq)->flush.seq |= FSEQ_DONE;
		rq_list_add_tail(&rq->queuelist, &act->done);
		break;
	}
}

/* Issue a flush for the pending waiters if none is in flight.  Under fq->lock. */
static void kick_flush(struct rq_queue *q, struct rq_flush_queue *fq, struct flush_actions *act)
{
	struct rq_list_node *pending = &fq->pending[fq->pending_idx];
	struct rq_request *first, *flush_rq = fq->flush_rq;
	struct rq_hw_ctx *hctx;

	if (fq->flush_in_flight || rq_list_empty(pending))
		return;
	/* C2/C3: let the data steps in flight join this flush */
	if (fq->data_in_flight && rq_clock_ns() < fq->pending_since + FLUSH_PENDING_TIMEOUT_NS)
		return;
	first = &RQ_CONTAINER_OF(pending->next, struct rq_request_priv, flush.list)->rq;
	hctx = first->hctx;
	fq->pending_idx ^= 1;
	fq->flush_in_flight = true;
	fq->orig_rq = first;

	__atomic_store_n(&flush_rq->hctx, hctx, __ATOMIC_RELAXED);
	rq_priv(flush_rq)->ctx = rq_priv(first)->ctx;
	flush_rq->cpu = first->cpu;
	flush_rq->op = RQ_OP_FLUSH;
	flush_rq->opf = RQ_BIO_SYNC;
	flush_rq->ioprio = first->ioprio;
	flush_rq->sector = 0;
	flush_rq->bytes = 0;
	flush_rq->nr_segments = 0;
	flush_rq->bio = flush_rq->biotail = NULL;
	flush_rq->rq_flags = RQ_RQF_FLUSH_INTERNAL;
	flush_rq->internal_tag = -1;
	flush_rq->tag = -1;
	rq_priv(flush_rq)->end_io = flush_end_io;
	__atomic_store_n(&flush_rq->state, RQ_STATE_IDLE, __ATOMIC_RELAXED);
	flush_rq->start_time_ns = rq_clock_ns();
	q->fe->flush_prepare(flush_rq, first); /* mq: borrows @first's driver tag */
	act->flush = flush_rq;
}

/* Carry out what the sequencing decided, fq->lock no longer held. */
static void run_actions(struct rq_queue *q, struct flush_actions *act)
{
	const struct rq_fe_ops *fe = q->fe;

	while (!rq_list_empty(&act->issue)) {
		struct rq_request *rq = rq_list_first_rq(&act->issue);

		rq_list_del_init(&rq->queuelist);
		fe->flush_issue(rq, false);
	}
	if (act->flush) {
		stat_inc(q, ST_FLUSHES);
		fe->flush_issue(act->flush, true);
	}
	while (!rq_list_empty(&act->done)) {
		struct rq_request *rq = rq_list_first_rq(&act->done);

		rq_list_del_init(&rq->queuelist);
		fe->flush_seq_done(rq, rq_priv(rq)->complete_status);
	}
}

static void actions_init(struct flush_actions *act)
{
	rq_list_init(&act->issue);
	rq_list_init(&act->done);
	act->flush = NULL;
}

/* The flush request ended: every waiter it served moves on. */
static void flush_end_io(struct rq_request *flush_rq, rq_status_t status)
{
	struct rq_queue *q = flush_rq->q;
	struct rq_flush_queue *fq = &q->fq;
	struct flush_actions act;
	struct rq_list_node *running;

	actions_init(&act);
	rq_spin_lock(&fq->lock);
	q->fe->flush_step_end(flush_rq);
	flush_rq->tag = -1;
	__atomic_store_n(&flush_rq->state, RQ_STATE_IDLE, __ATOMIC_RELAXED);
	fq->orig_rq = NULL;
	fq->flush_in_flight = false;
	running = &fq->pending[fq->pending_idx ^ 1];
	while (!rq_list_empty(running)) {
		struct rq_request *rq = &RQ_CONTAINER_OF(running->next, struct rq_request_priv, flush.list)->rq;

		complete_seq(fq, rq, next_step(rq_priv(rq)->flush.seq), status, &act);
	}
	kick_flush(q, fq, &act);
	rq_spin_unlock(&fq->lock);
	run_actions(q, &act);
}

/* The data step of a sequenced request ended. */
static void flush_data_end_io(struct rq_request *rq, rq_status_t status)
{
	struct rq_queue *q = rq->q;
	struct rq_flush_queue *fq = &q->fq;
	struct flush_actions act;

	q->fe->flush_step_end(rq);
	__atomic_store_n(&rq->state, RQ_STATE_IDLE, __ATOMIC_RELEASE);
	actions_init(&act);
	rq_spin_lock(&fq->lock);
	fq->data_in_flight--;
	complete_seq(fq, rq, FSEQ_DATA, status, &act);
	kick_flush(q, fq, &act);
	rq_spin_unlock(&fq->lock);
	run_actions(q, &act);
}

/* Mark @rq as sequenced: its data step ends in flush_data_end_io(). */
static void flush_seq_init(struct rq_request *rq)
{
	rq->rq_flags |= RQ_RQF_FLUSH_SEQ;
	rq_priv(rq)->flush.seq = 0;
	rq_priv(rq)->complete_status = RQ_STS_OK;
	rq_priv(rq)->end_io = flush_data_end_io;
	rq_list_init(&rq_priv(rq)->flush.list);
}

/*
 * Take a request with PREFLUSH / FUA / op FLUSH.  Returns false when it only
 * needs its data step (issue it normally), true when the flush machinery
 * owns it now.  With @pass_postflush (multi-queue, Linux 6.x), a request
 * that needs its data step and a post-flush only is marked and handed back
 * too (false): it is issued normally and its end starts the post-flush.
 */
static bool flush_insert_common(struct rq_request *rq, bool pass_postflush)
{
	struct rq_queue *q = rq->q;
	struct rq_flush_queue *fq = &q->fq;
	unsigned features = q->limits.features;
	struct flush_actions act;
	uint32_t policy = 0;

	if (rq->op != RQ_OP_FLUSH && rq->bytes)
		policy |= FSEQ_DATA;
	if (features & RQ_FEAT_WRITE_CACHE) {
		if ((rq->opf & RQ_BIO_PREFLUSH) || rq->op == RQ_OP_FLUSH)
			policy |= FSEQ_PREFLUSH;
		if ((rq->opf & RQ_BIO_FUA) && !(features & RQ_FEAT_FUA))
			policy |= FSEQ_POSTFLUSH;
	}
	rq->opf &= ~RQ_BIO_PREFLUSH;
	if (!(features & RQ_FEAT_FUA) || !(features & RQ_FEAT_WRITE_CACHE))
		rq->opf &= ~RQ_BIO_FUA;
	if (pass_postflush)
		rq->opf |= RQ_BIO_SYNC; /* PREFLUSH/FUA implied it (kernel: REQ_SYNC) */

	if (!policy) {
		request_fail(rq, RQ_STS_OK);
		return true;
	}
	if (policy == FSEQ_DATA)
		return false;

	flush_seq_init(rq);
	if (pass_postflush && policy == (FSEQ_DATA | FSEQ_POSTFLUSH)) {
		rq_priv(rq)->flush.seq = FSEQ_PREFLUSH;
		rq_spin_lock(&fq->lock);
		fq->data_in_flight++;
		rq_spin_unlock(&fq->lock);
		return false;
	}
	actions_init(&act);
	rq_spin_lock(&fq->lock);
	complete_seq(fq, rq, FSEQ_ACTIONS & ~policy, RQ_STS_OK, &act);
	kick_flush(q, fq, &act);
	rq_spin_unlock(&fq->lock);
	run_actions(q, &act);
	return true;
}

bool flush_insert(struct rq_request *rq)
{
	return flush_insert_common(rq, false);
}

bool flush_insert_mq(struct rq_request *rq)
{
	return flush_insert_common(rq, true);
}

/* Teardown: waiters not yet served by an issued flush end with IOERR. */
void flush_fail_pending(struct rq_queue *q)
{
	struct rq_flush_queue *fq = &q->fq;
	struct rq_list_node *pending = &fq->pending[fq->pending_idx];
	struct flush_actions act;

	actions_init(&act);
	rq_spin_lock(&fq->lock);
	while (!rq_list_empty(pending)) {
		struct rq_request *rq = &RQ_CONTAINER_OF(pending->next, struct rq_request_priv, flush.list)->rq;

		complete_seq(fq, rq, 0, RQ_STS_IOERR, &act);
	}
	rq_spin_unlock(&fq->lock);
	run_actions(q, &act);
}

int flush_queue_init(struct rq_queue *q, struct rq_hw_ctx *hctx)
{
	struct rq_flush_queue *fq = &q->fq;

	rq_spin_init(&fq->lock);
	rq_list_init(&fq->pending[0]);
	rq_list_init(&fq->pending[1]);
	fq->pending_idx = 0;
	fq->flush_in_flight = false;
	fq->data_in_flight = 0;
	fq->flush_rq = queue_alloc_internal_request(q, hctx);
	if (!fq->flush_rq)
		return -ENOMEM;
	fq->flush_rq->rq_flags = RQ_RQF_FLUSH_INTERNAL;
	fq->flush_rq->tag = -1;
	fq->flush_rq->internal_tag = -1;
	return 0;
}

void flush_queue_exit(struct rq_queue *q)
{
	if (q->fq.flush_rq)
		rq_free_node(q->fq.flush_rq, q->rq_size);
	q->fq.flush_rq = NULL;
}
