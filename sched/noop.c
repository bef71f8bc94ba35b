/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * noop: the single-queue FIFO scheduler (Linux 4.x noop-iosched).
 *
 * Requests go to the driver in the order they were made.  The scheduler
 * never moves one request past another, so a read never overtakes a write
 * queued before it, nor the reverse.  What it does besides is merging:
 *
 *   back merges    the core's one-hit cache and end-sector hash find the
 *                  request a bio continues (add_request hashes it);
 *   front merges   a sector-sorted tree per data direction finds the request
 *                  a bio ends just before (the merge hook);
 *   request pairs  after a bio merge the core asks former / latter for the
 *                  FIFO neighbours and joins them when they became
 *                  contiguous (neighbours in the FIFO, so even that never
 *                  moves a request past another).
 *
 * Every hook runs with the queue lock held; noop keeps no lock of its own
 * and has no tunables.
 */
#include <errno.h>
#include <stdlib.h>

#include <librequest/elevator.h>
#include <librequest/sq.h>
#include "lib/internal/alloc.h"

/* ---------------------------------------------------------- data structures */

/* Data directions, as the kernel's rq_data_dir(): reads, and the rest. */
enum { NOOP_READ = 0, NOOP_WRITE = 1 };

/**
 * struct noop_data - one queue's noop instance.
 * @fifo: every queued request in arrival order, linked by queuelist.
 * @sort: mergeable queued requests by start sector, per data direction; a
 *	request is in its tree exactly when its rb_node is not "empty".
 */
struct noop_data {
	struct rq_list_node fifo;
	struct rq_rb_root sort[2];
};

/* --------------------------------------------------------------- helpers */

static struct noop_data *noop_of(struct rq_queue *q)
{
	return rq_sched_data(q);
}

static unsigned noop_dir(unsigned op)
{
	return op == RQ_OP_READ ? NOOP_READ : NOOP_WRITE;
}

/* Could a bio ever merge into @rq?  The core checks the details again. */
static bool noop_rq_mergeable(const struct rq_request *rq)
{
	if (rq->op != RQ_OP_READ && rq->op != RQ_OP_WRITE && rq->op != RQ_OP_DISCARD)
		return false;
	if (rq->opf & (RQ_BIO_NOMERGE | RQ_BIO_PREFLUSH | RQ_BIO_FUA))
		return false;
	return !(rq->rq_flags & (RQ_RQF_FLUSH_SEQ | RQ_RQF_FLUSH_INTERNAL));
}

/* Take @rq out of the sort tree if it is in it. */
static void noop_sort_del(struct noop_data *nd, struct rq_request *rq)
{
	if (!rq_rb_empty_node(&rq->rb_node))
		rq_sched_rb_del(&nd->sort[noop_dir(rq->op)], rq);
}

/* Forget @rq: FIFO, sort tree and the core's hash.  Queue lock held. */
static void noop_remove(struct rq_queue *q, struct noop_data *nd, struct rq_request *rq)
{
	rq_list_del_init(&rq->queuelist);
	noop_sort_del(nd, rq);
	rq_sched_hash_del(q, rq);
}

/*
 * A queued request of @op starting at @sector that could take a front merge.
 * Requests of other ops (a discard among writes) or unmergeable ones may
 * share the sector: look at all of them.
 */
static struct rq_request *noop_find_front(struct noop_data *nd, unsigned op, uint64_t sector)
{
	struct rq_request *hit = rq_sched_rb_find(&nd->sort[noop_dir(op)], sector);
	struct rq_request *rq;

	if (!hit)
		return NULL;
	for (rq = hit; rq && rq->sector == sector; rq = rq_sched_rb_former(rq))
		if (rq->op == op && noop_rq_mergeable(rq))
			return rq;
	for (rq = rq_sched_rb_latter(hit); rq && rq->sector == sector; rq = rq_sched_rb_latter(rq))
		if (rq->op == op && noop_rq_mergeable(rq))
			return rq;
	return NULL;
}

/* ------------------------------------------------------------------ ops */

/**
 * noop_init_queue() - make the per-queue data.
 * Context: queue creation or a scheduler switch, queue lock held.
 * Return: 0, -ENOMEM.
 */
static int noop_init_queue(struct rq_queue *q, void **data)
{
	struct noop_data *nd = mem_zalloc(sizeof(*nd));

	if (!nd)
		return -ENOMEM;
	rq_list_init(&nd->fifo);
	nd->sort[NOOP_READ].node = NULL;
	nd->sort[NOOP_WRITE].node = NULL;
	*data = nd;
	return 0;
}

/** noop_exit_queue() - free the per-queue data; nothing is queued. */
static void noop_exit_queue(struct rq_queue *q, void *data)
{
	mem_free(data, 0);
}

/**
 * noop_add_request() - queue @rq at the FIFO tail; mergeable requests also
 * go on the sort tree (front merges) and the core's hash (back merges).
 * Context: queue lock held.
 */
static void noop_add_request(struct rq_queue *q, struct rq_request *rq)
{
	struct noop_data *nd = noop_of(q);

	rq_list_add_tail(&rq->queuelist, &nd->fifo);
	rq_rb_clear_node(&rq->rb_node);
	if (noop_rq_mergeable(rq)) {
		rq_sched_rb_add(&nd->sort[noop_dir(rq->op)], rq);
		rq_sched_hash_add(q, rq);
	}
}

/**
 * noop_dispatch() - move the FIFO head to the dispatch queue (everything,
 * in FIFO order, with @force).
 * Context: queue lock held.
 * Return: requests moved.
 */
static int noop_dispatch(struct rq_queue *q, bool force)
{
	struct noop_data *nd = noop_of(q);
	struct rq_request *rq;
	int moved = 0;

	while ((rq = rq_list_first_rq(&nd->fifo))) {
		noop_remove(q, nd, rq);
		rq_sq_dispatch_add_tail(q, rq);
		moved++;
		if (!force)
			break;
	}
	return moved;
}

/**
 * noop_merge() - find a queued request @bio could front-merge into.
 * Context: queue lock held; the core has tried back merges already and
 * checks the merge rules on what is returned.
 * Return: RQ_ELV_FRONT_MERGE with *@rq set, or RQ_ELV_NO_MERGE.
 */
static int noop_merge(struct rq_queue *q, struct rq_request **rq, struct rq_bio *bio)
{
	struct rq_request *found = noop_find_front(noop_of(q), bio->op, rq_bio_end_sector(bio));

	if (!found)
		return RQ_ELV_NO_MERGE;
	*rq = found;
	return RQ_ELV_FRONT_MERGE;
}

/**
 * noop_merged() - @rq grew; after a front merge its start sector moved, so
 * it moves in the sort tree.  Its FIFO place does not change.
 * Context: queue lock held.
 */
static void noop_merged(struct rq_queue *q, struct rq_request *rq, enum rq_elv_merge type)
{
	struct noop_data *nd = noop_of(q);

	if (type != RQ_ELV_FRONT_MERGE || rq_rb_empty_node(&rq->rb_node))
		return;
	noop_sort_del(nd, rq);
	rq_sched_rb_add(&nd->sort[noop_dir(rq->op)], rq);
}

/**
 * noop_merge_req() - @next was merged into @rq: forget @next.
 * Context: queue lock held.
 */
static void noop_merge_req(struct rq_queue *q, struct rq_request *rq, struct rq_request *next)
{
	noop_remove(q, noop_of(q), next);
}

/**
 * noop_former() / noop_latter() - @rq's FIFO neighbours (the candidates for
 * a request-request merge), NULL at either end.
 * Context: queue lock held.
 */
static struct rq_request *noop_former(struct rq_queue *q, struct rq_request *rq)
{
	struct noop_data *nd = noop_of(q);

	if (rq_list_empty(&rq->queuelist) || rq->queuelist.prev == &nd->fifo)
		return NULL;
	return RQ_CONTAINER_OF(rq->queuelist.prev, struct rq_request, queuelist);
}

static struct rq_request *noop_latter(struct rq_queue *q, struct rq_request *rq)
{
	struct noop_data *nd = noop_of(q);

	if (rq_list_empty(&rq->queuelist) || rq->queuelist.next == &nd->fifo)
		return NULL;
	return RQ_CONTAINER_OF(rq->queuelist.next, struct rq_request, queuelist);
}

/** noop_queue_empty() - nothing queued.  Context: queue lock held. */
static bool noop_queue_empty(struct rq_queue *q)
{
	return rq_list_empty(&noop_of(q)->fifo);
}

/* ------------------------------------------------------------------ type */

static const struct rq_elevator_sq_ops noop_sq_ops = {
	RQ_ELV_SQ_OPS_INIT,
	.init_queue = noop_init_queue,
	.exit_queue = noop_exit_queue,
	.merge = noop_merge,
	.merged = noop_merged,
	.merge_req = noop_merge_req,
	.add_request = noop_add_request,
	.dispatch = noop_dispatch,
	.former = noop_former,
	.latter = noop_latter,
	.queue_empty = noop_queue_empty,
};

const struct rq_elevator_type rq_noop_type = {
	RQ_ELV_TYPE_INIT,
	.name = "noop",
	.features = RQ_ELV_F_SQ,
	.sq_ops = &noop_sq_ops,
};
