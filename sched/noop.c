/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * noop: the single-queue FIFO scheduler (Linux 4.x noop-iosched).
 *
 * Requests go to the driver in the order they were made.  The scheduler
 * never moves one request past another, so a read never overtakes a write
 * queued before it, nor the reverse.  What it does besides is merging:
 *
 *   back merges    the core's one-hit cache and end-sector hash find the
 *                  request a bio continues (the core hashes a
 *                  request as it inserts it);
 *   front merges   a hash by start sector finds the request a bio ends
 *                  just before (the merge hook): O(1) per add, lookup and
 *                  removal, where a sorted tree cost a walk and rebalancing
 *                  on every request.  Requests enter it lazily: the FIFO
 *                  tail added since the last lookup is hashed, in FIFO
 *                  order, by the next lookup (or front merge), so requests
 *                  that reach the driver before anyone looks never pay for
 *                  it (nor does their add or removal: the part looked at
 *                  is the FIFO up to one request, none until a lookup),
 *                  and a lookup sees what an eager hash would;
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

#define NOOP_HASH_BITS 6 /* buckets of the front-merge hash, as the core's */

/**
 * struct noop_data - one queue's noop instance.
 * @fifo: every queued request in arrival order, linked by queuelist.
 * @front: mergeable queued requests by start sector, newest first in each
 *	bucket, linked by elv_priv[0] (next request) and elv_priv[1] (the
 *	link pointing at the request); a request is hashed exactly when its
 *	elv_priv[1] is set.
 * @looked: the last request of the FIFO looked at for @front (every one
 *	ahead of it was, none behind it was), or NULL: none was.
 */
struct noop_data {
	struct rq_list_node fifo;
	struct rq_request *looked;
	struct rq_request *front[1u << NOOP_HASH_BITS];
};

/* --------------------------------------------------------------- helpers */

static struct noop_data *noop_of(struct rq_queue *q)
{
	return rq_sched_data(q);
}

/* The front-merge bucket of requests starting at @sector. */
static struct rq_request **noop_bucket(struct noop_data *nd, uint64_t sector)
{
	return &nd->front[(sector * 0x9E3779B97F4A7C15ull) >> (64 - NOOP_HASH_BITS)];
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

/* Put @rq in the front-merge hash, by its start sector. */
static void noop_front_add(struct noop_data *nd, struct rq_request *rq)
{
	struct rq_request **head = noop_bucket(nd, rq->sector);

	rq->elv_priv[0] = *head;
	if (*head)
		(*head)->elv_priv[1] = &rq->elv_priv[0];
	rq->elv_priv[1] = head;
	*head = rq;
}

/* Take @rq out of the front-merge hash if it is in it. */
static void noop_front_del(struct rq_request *rq)
{
	struct rq_request **link = rq->elv_priv[1];
	struct rq_request *next = rq->elv_priv[0];

	if (!link)
		return;
	*link = next;
	if (next)
		next->elv_priv[1] = link;
	rq->elv_priv[0] = rq->elv_priv[1] = NULL;
}

/* The FIFO request after @rq, or NULL at the tail. */
static struct rq_request *noop_fifo_next(struct noop_data *nd, struct rq_request *rq)
{
	if (rq->queuelist.next == &nd->fifo)
		return NULL;
	return RQ_CONTAINER_OF(rq->queuelist.next, struct rq_request, queuelist);
}

/* The FIFO request ahead of @rq, or NULL at the head. */
static struct rq_request *noop_fifo_prev(struct noop_data *nd, struct rq_request *rq)
{
	if (rq->queuelist.prev == &nd->fifo)
		return NULL;
	return RQ_CONTAINER_OF(rq->queuelist.prev, struct rq_request, queuelist);
}

/*
 * Hash the FIFO tail added since the last lookup, oldest first: the order
 * (and so which of several requests a lookup prefers) an eager hash gives.
 */
static void noop_front_catch_up(struct noop_data *nd)
{
	struct rq_request *rq;

	rq = nd->looked ? noop_fifo_next(nd, nd->looked) : rq_list_first_rq(&nd->fifo);
	for (; rq; rq = noop_fifo_next(nd, rq)) {
		if (noop_rq_mergeable(rq))
			noop_front_add(nd, rq);
		nd->looked = rq;
	}
}

/*
 * Forget @rq: FIFO and front-merge hash.  The core's back-merge hash is the
 * core's: it hashes a request as it inserts it and unhashes it as it leaves
 * (rq_sq_dispatch_*(), a request merge).  Queue lock held.
 */
static void noop_remove(struct rq_queue *q, struct noop_data *nd, struct rq_request *rq)
{
	if (rq == nd->looked)
		nd->looked = noop_fifo_prev(nd, rq);
	rq_list_del_init(&rq->queuelist);
	noop_front_del(rq);
}

/*
 * The queued request of @op starting at @sector that could take a front
 * merge, of several the one hashed longest ago.  Requests of other ops (a discard among writes) or
 * unmergeable ones may share the sector: look at all of them.
 */
static struct rq_request *noop_find_front(struct noop_data *nd, unsigned op, uint64_t sector)
{
	struct rq_request *rq, *found = NULL;

	noop_front_catch_up(nd);
	for (rq = *noop_bucket(nd, sector); rq; rq = rq->elv_priv[0])
		if (rq->sector == sector && rq->op == op && noop_rq_mergeable(rq))
			found = rq; /* newest first: keep the last match */
	return found;
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
	*data = nd;
	return 0;
}

/** noop_exit_queue() - free the per-queue data; nothing is queued. */
static void noop_exit_queue(struct rq_queue *q, void *data)
{
	mem_free(data, 0);
}

/**
 * noop_add_request() - queue @rq at the FIFO tail, behind the requests
 * looked at for the front-merge hash: a mergeable one goes in it at the
 * next lookup (the core has put it in its back-merge hash).
 * Context: queue lock held.
 */
static void noop_add_request(struct rq_queue *q, struct rq_request *rq)
{
	struct noop_data *nd = noop_of(q);

	rq_list_add_tail(&rq->queuelist, &nd->fifo);
	rq->elv_priv[0] = rq->elv_priv[1] = NULL;
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
 * noop_dispatch_one() - take the FIFO head out for the driver: what
 * noop_dispatch() moves to an empty dispatch queue, without the move (the
 * core starts it at once).
 * Context: queue lock held.
 * Return: the request, or NULL: nothing queued.
 */
static struct rq_request *noop_dispatch_one(struct rq_queue *q)
{
	struct noop_data *nd = noop_of(q);
	struct rq_request *rq = rq_list_first_rq(&nd->fifo);

	if (rq)
		noop_remove(q, nd, rq);
	return rq;
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
 * it moves in the front-merge hash.  Its FIFO place does not change.
 * Context: queue lock held.
 */
static void noop_merged(struct rq_queue *q, struct rq_request *rq, enum rq_elv_merge type)
{
	struct noop_data *nd = noop_of(q);

	if (type != RQ_ELV_FRONT_MERGE)
		return;
	/* what was queued before the merge is hashed before @rq moves to the top */
	noop_front_catch_up(nd);
	if (!rq->elv_priv[1])
		return;
	noop_front_del(rq);
	noop_front_add(nd, rq);
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
	.dispatch_one = noop_dispatch_one,
};

const struct rq_elevator_type rq_noop_type = {
	RQ_ELV_TYPE_INIT,
	.name = "noop",
	.features = RQ_ELV_F_SQ,
	.sq_ops = &noop_sq_ops,
};
