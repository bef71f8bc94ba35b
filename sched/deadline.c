/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * deadline: the single-queue deadline scheduler, with the behaviour and
 * tunables Linux 4.x documented for deadline-iosched.
 *
 * Each data direction (reads; writes, discards and write-zeroes) keeps its
 * requests twice: in a tree sorted by start sector, and in a FIFO by arrival,
 * each request stamped with the time it expires (rq->fifo_time).
 *
 * The driver is fed in batches.  A batch walks one direction in ascending
 * sector order, each request followed by its successor in the tree, for at
 * most fifo_batch requests (or until the direction has no successor).  When
 * a batch ends the next one is chosen:
 *
 *   direction  reads are preferred; but when writes wait and reads have
 *              been chosen over them writes_starved times in a row, the
 *              batch goes to writes;
 *   start      the oldest request of that direction when it has expired
 *              (or when the walk has nowhere to continue), else the walk's
 *              next request in sector order.
 *
 * So an expired request waits at most for the batch in progress, and writes
 * at most for writes_starved read batches.
 *
 * Merging: the core finds back merges (one-hit cache, end-sector hash); the
 * merge hook finds front merges in the sort tree while front_merges is on.
 * When two queued requests merge the survivor keeps the earlier of the two
 * expiry times and the earlier FIFO place.
 *
 * Every hook runs with the queue lock held.  The tunables are written by
 * the attribute path without it: they are single words read with relaxed
 * atomic loads, so a change takes effect from the next decision on.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include <librequest/elevator.h>
#include <librequest/sq.h>
#include "lib/internal/alloc.h"
#include "lib/internal/clock.h"

/* -------------------------------------------------------- tunable defaults */

#define DL_READ_EXPIRE_MS 500    /* ms: a read should start within this */
#define DL_WRITE_EXPIRE_MS 5000  /* ms: a write should start within this */
#define DL_WRITES_STARVED 2      /* read batches writes may be passed over for */
#define DL_FRONT_MERGES 1        /* 0/1: look for front merges */
#define DL_FIFO_BATCH 16         /* requests per batch */

#define NSEC_PER_MSEC 1000000ull

/* ---------------------------------------------------------- data structures */

/* Data directions, as the kernel's rq_data_dir(). */
enum { DL_READ = 0, DL_WRITE = 1 };

/**
 * struct dl_data - one queue's deadline instance.
 * @sort: queued requests by start sector, per direction.
 * @fifo: queued requests by arrival (queuelist), per direction; the head
 *	is the oldest, and (unless read_expire or write_expire was lowered
 *	meanwhile) the first to expire.
 * @next_rq: where the batch in progress continues (at most one is set).
 * @batching: requests dispatched in the batch in progress.
 * @starved: read batches chosen in a row while writes waited.
 * @fifo_expire_ms, @writes_starved, @front_merges, @fifo_batch: the
 *	tunables; accessed with relaxed atomics (see the top comment).
 */
struct dl_data {
	struct rq_rb_root sort[2];
	struct rq_list_node fifo[2];
	struct rq_request *next_rq[2];
	unsigned batching;
	unsigned starved;

	unsigned fifo_expire_ms[2];
	unsigned writes_starved;
	unsigned front_merges;
	unsigned fifo_batch;
};

/* --------------------------------------------------------------- helpers */

static struct dl_data *dl_of(struct rq_queue *q)
{
	return rq_sched_data(q);
}

static unsigned dl_dir(unsigned op)
{
	return op == RQ_OP_READ ? DL_READ : DL_WRITE;
}

static unsigned dl_tunable(const unsigned *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* Take @rq out of its sort tree; the batch skips to its successor. */
static void dl_sort_del(struct dl_data *dd, struct rq_request *rq)
{
	unsigned dir = dl_dir(rq->op);

	if (dd->next_rq[dir] == rq)
		dd->next_rq[dir] = rq_sched_rb_latter(rq);
	rq_sched_rb_del(&dd->sort[dir], rq);
}

/*
 * Forget @rq: FIFO and tree.  The core's hash is the core's: it unhashes
 * @rq itself as @rq leaves for the dispatch queue or merges away.  Queue
 * lock held.
 */
static void dl_remove(struct dl_data *dd, struct rq_request *rq)
{
	rq_list_del_init(&rq->queuelist);
	dl_sort_del(dd, rq);
}

/*
 * Has the oldest request of @dir passed its expiry time?  Now is the
 * plug's clock reading inside a plug's unplug, else a fresh one.
 */
static bool dl_fifo_expired(struct dl_data *dd, unsigned dir)
{
	struct rq_request *head = rq_list_first_rq(&dd->fifo[dir]);

	return head && core_clock_ns() >= head->fifo_time;
}

/*
 * Hand @rq to the dispatch queue, remembering its sector successor as the
 * place the batch continues.
 */
static void dl_move_to_dispatch(struct rq_queue *q, struct dl_data *dd, struct rq_request *rq)
{
	unsigned dir = dl_dir(rq->op);

	dd->next_rq[DL_READ] = NULL;
	dd->next_rq[DL_WRITE] = NULL;
	dd->next_rq[dir] = rq_sched_rb_latter(rq);
	dl_remove(dd, rq);
	dd->batching++;
	rq_sq_dispatch_add_tail(q, rq);
}

/* Which direction the next batch serves, or -1 when nothing is queued. */
static int dl_choose_dir(struct dl_data *dd)
{
	bool reads = !rq_list_empty(&dd->fifo[DL_READ]);
	bool writes = !rq_list_empty(&dd->fifo[DL_WRITE]);

	if (reads) {
		if (!writes)
			return DL_READ;
		if (dd->starved < dl_tunable(&dd->writes_starved)) {
			dd->starved++;
			return DL_READ;
		}
	}
	if (writes) {
		dd->starved = 0;
		return DL_WRITE;
	}
	return -1;
}

/* Move one request to the dispatch queue.  Return: 1, or 0 when empty. */
static int dl_dispatch_one(struct rq_queue *q, struct dl_data *dd)
{
	struct rq_request *rq = dd->next_rq[DL_WRITE] ? dd->next_rq[DL_WRITE] : dd->next_rq[DL_READ];
	int dir;

	/* the batch in progress goes on while it may */
	if (rq && dd->batching < dl_tunable(&dd->fifo_batch)) {
		dl_move_to_dispatch(q, dd, rq);
		return 1;
	}

	dir = dl_choose_dir(dd);
	if (dir < 0)
		return 0;
	rq = dd->next_rq[dir];
	if (!rq || dl_fifo_expired(dd, dir))
		rq = rq_list_first_rq(&dd->fifo[dir]);
	dd->batching = 0;
	dl_move_to_dispatch(q, dd, rq);
	return 1;
}

/* ------------------------------------------------------------------ ops */

/**
 * dl_init_queue() - make the per-queue data with the default tunables.
 * Context: queue creation or a scheduler switch, queue lock held.
 * Return: 0, -ENOMEM.
 */
static int dl_init_queue(struct rq_queue *q, void **data)
{
	struct dl_data *dd = mem_zalloc(sizeof(*dd));

	if (!dd)
		return -ENOMEM;
	for (unsigned dir = DL_READ; dir <= DL_WRITE; dir++) {
		dd->sort[dir].node = NULL;
		rq_list_init(&dd->fifo[dir]);
	}
	dd->fifo_expire_ms[DL_READ] = DL_READ_EXPIRE_MS;
	dd->fifo_expire_ms[DL_WRITE] = DL_WRITE_EXPIRE_MS;
	dd->writes_starved = DL_WRITES_STARVED;
	dd->front_merges = DL_FRONT_MERGES;
	dd->fifo_batch = DL_FIFO_BATCH;
	*data = dd;
	return 0;
}

/** dl_exit_queue() - free the per-queue data; nothing is queued. */
static void dl_exit_queue(struct rq_queue *q, void *data)
{
	mem_free(data, 0);
}

/**
 * dl_add_request() - queue @rq: into its direction's tree, and at its FIFO
 * tail with an expiry time of now plus the direction's expire tunable.
 * Context: queue lock held.
 */
static void dl_add_request(struct rq_queue *q, struct rq_request *rq)
{
	struct dl_data *dd = dl_of(q);
	unsigned dir = dl_dir(rq->op);

	rq_sched_rb_add(&dd->sort[dir], rq);
	/* the plug's one clock reading in an unplug (as mq-deadline; 4.x: jiffies) */
	rq->fifo_time = core_clock_ns() + dl_tunable(&dd->fifo_expire_ms[dir]) * NSEC_PER_MSEC;
	rq_list_add_tail(&rq->queuelist, &dd->fifo[dir]);
	/* the core hashed @rq already when it was mergeable (as the kernel) */
}

/**
 * dl_dispatch() - move the next request of the batch logic to the dispatch
 * queue; with @force, everything that is queued.
 * Context: queue lock held.
 * Return: requests moved.
 */
static int dl_dispatch(struct rq_queue *q, bool force)
{
	struct dl_data *dd = dl_of(q);
	int moved = 0;

	if (!force)
		return dl_dispatch_one(q, dd);
	while (dl_dispatch_one(q, dd))
		moved++;
	return moved;
}

/**
 * dl_merge() - with front_merges on, the queued request of the bio's
 * direction that starts where @bio ends.
 * Context: queue lock held; the core checks the merge rules on the result.
 * Return: RQ_ELV_FRONT_MERGE with *@rq set, or RQ_ELV_NO_MERGE.
 */
static int dl_merge(struct rq_queue *q, struct rq_request **rq, struct rq_bio *bio)
{
	struct dl_data *dd = dl_of(q);
	uint64_t sector = rq_bio_end_sector(bio);
	struct rq_request *hit, *cand;

	if (!dl_tunable(&dd->front_merges))
		return RQ_ELV_NO_MERGE;
	hit = rq_sched_rb_find(&dd->sort[dl_dir(bio->op)], sector);
	/* a discard may share the start sector with a write: find the same op */
	for (cand = hit; cand && cand->sector == sector; cand = rq_sched_rb_former(cand))
		if (cand->op == bio->op)
			goto found;
	for (cand = hit ? rq_sched_rb_latter(hit) : NULL; cand && cand->sector == sector;
	     cand = rq_sched_rb_latter(cand))
		if (cand->op == bio->op)
			goto found;
	return RQ_ELV_NO_MERGE;
found:
	*rq = cand;
	return RQ_ELV_FRONT_MERGE;
}

/**
 * dl_merged() - @rq grew; after a front merge its start sector changed, so
 * it is sorted again.
 * Context: queue lock held.
 */
static void dl_merged(struct rq_queue *q, struct rq_request *rq, enum rq_elv_merge type)
{
	struct dl_data *dd = dl_of(q);
	unsigned dir = dl_dir(rq->op);

	if (type != RQ_ELV_FRONT_MERGE)
		return;
	rq_sched_rb_del(&dd->sort[dir], rq);
	rq_sched_rb_add(&dd->sort[dir], rq);
}

/**
 * dl_merge_req() - @next was merged into @rq: @rq takes over @next's expiry
 * time and FIFO place if they were earlier, and @next is forgotten.
 * Context: queue lock held.
 */
static void dl_merge_req(struct rq_queue *q, struct rq_request *rq, struct rq_request *next)
{
	struct dl_data *dd = dl_of(q);

	if (!rq_list_empty(&rq->queuelist) && !rq_list_empty(&next->queuelist) &&
	    next->fifo_time < rq->fifo_time) {
		/* take next's place: just after the request before it */
		struct rq_list_node *before = next->queuelist.prev;

		rq_list_del_init(&rq->queuelist);
		rq_list_insert(&rq->queuelist, before, before->next);
		rq->fifo_time = next->fifo_time;
	}
	dl_remove(dd, next);
}

/**
 * dl_former() / dl_latter() - @rq's neighbours in sector order within its
 * direction, NULL at either end.
 * Context: queue lock held.
 */
static struct rq_request *dl_former(struct rq_queue *q, struct rq_request *rq)
{
	return rq_rb_empty_node(&rq->rb_node) ? NULL : rq_sched_rb_former(rq);
}

static struct rq_request *dl_latter(struct rq_queue *q, struct rq_request *rq)
{
	return rq_rb_empty_node(&rq->rb_node) ? NULL : rq_sched_rb_latter(rq);
}

/** dl_queue_empty() - nothing queued in either direction.  Queue lock held. */
static bool dl_queue_empty(struct rq_queue *q)
{
	struct dl_data *dd = dl_of(q);

	return rq_list_empty(&dd->fifo[DL_READ]) && rq_list_empty(&dd->fifo[DL_WRITE]);
}

/* ------------------------------------------------------ attribute table */

/*
 * Parse all of @buf (an optional trailing newline aside) as a decimal
 * number within [@min, @max].  Return: 0, or -EINVAL with *@out untouched.
 */
static int dl_parse(const char *buf, unsigned long min, unsigned long max, unsigned *out)
{
	unsigned long v;

	if (rq_sched_parse_uint(buf, min, max, &v))
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

static int dl_show(unsigned v, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%u\n", v);

	return n < 0 || (size_t)n >= len ? -ENOSPC : n;
}

static int dl_store(unsigned *p, const char *buf, unsigned long min, unsigned long max)
{
	unsigned v;

	if (dl_parse(buf, min, max, &v))
		return -EINVAL;
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
	return 0;
}

/* One show/store pair per tunable, with the range it accepts. */
#define DL_ATTR(name, field, min, max)                                           \
	static int dl_show_##name(void *data, char *buf, size_t len)             \
	{                                                                         \
		return dl_show(dl_tunable(&((struct dl_data *)data)->field), buf, len); \
	}                                                                         \
	static int dl_store_##name(void *data, const char *buf)                  \
	{                                                                         \
		return dl_store(&((struct dl_data *)data)->field, buf, min, max); \
	}

DL_ATTR(read_expire, fifo_expire_ms[DL_READ], 0, INT_MAX)
DL_ATTR(write_expire, fifo_expire_ms[DL_WRITE], 0, INT_MAX)
DL_ATTR(writes_starved, writes_starved, 0, INT_MAX)
DL_ATTR(front_merges, front_merges, 0, 1)
DL_ATTR(fifo_batch, fifo_batch, 0, INT_MAX)

static const struct rq_elv_attr dl_attrs[] = {
	{ "read_expire", dl_show_read_expire, dl_store_read_expire },
	{ "write_expire", dl_show_write_expire, dl_store_write_expire },
	{ "writes_starved", dl_show_writes_starved, dl_store_writes_starved },
	{ "front_merges", dl_show_front_merges, dl_store_front_merges },
	{ "fifo_batch", dl_show_fifo_batch, dl_store_fifo_batch },
	{ NULL, NULL, NULL },
};

/* ------------------------------------------------------------------ type */

static const struct rq_elevator_sq_ops dl_sq_ops = {
	RQ_ELV_SQ_OPS_INIT,
	.init_queue = dl_init_queue,
	.exit_queue = dl_exit_queue,
	.merge = dl_merge,
	.merged = dl_merged,
	.merge_req = dl_merge_req,
	.add_request = dl_add_request,
	.dispatch = dl_dispatch,
	.former = dl_former,
	.latter = dl_latter,
	.queue_empty = dl_queue_empty,
};

const struct rq_elevator_type rq_deadline_type = {
	RQ_ELV_TYPE_INIT,
	.name = "deadline",
	.features = RQ_ELV_F_SQ,
	.attrs = dl_attrs,
	.sq_ops = &dl_sq_ops,
};
