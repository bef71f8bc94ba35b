/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * mq-deadline: the deadline I/O scheduler for the multi-queue front end.
 *
 * Every queued request sits in two places: a tree sorted by start sector
 * and a FIFO list in arrival order stamped with a deadline (rq->fifo_time).
 * There is one tree and one FIFO per direction (reads; writes, discards
 * and write-zeroes) and per priority class (RT, BE, IDLE; NONE counts as
 * BE).  The scheduler sends requests in batches, as Linux 6.18's: up to
 * fifo_batch requests of one direction in ascending sector order, each the
 * first request starting at or after the START of the last one sent of its
 * class and direction (latest_pos).  When a batch ends it chooses again:
 * the highest class with queued requests, reads before writes unless
 * writes have already waited through writes_starved read batches, and
 * within the direction the oldest request if its deadline has passed (or
 * nothing lies at or after the position), else the first request at or
 * after it.  The batch belongs to no class and starts as a write batch
 * with nothing sent; it and the positions survive the queue running
 * empty.  A lower class whose requests waited longer than
 * prio_aging_expire is offered the choice first, with two classes queued.  Requests inserted at the head (RQ_INSERT_AT_HEAD) skip the
 * sorting and go first.
 *
 * The scheduler ignores the core's per-CPU staging: insert_requests puts
 * requests straight into these structures.  With several hardware queues
 * each has its own set of trees, lists and batch state (a request is only
 * ever dispatched on its own hardware queue) and its own lock: the core's
 * back-merge hash and last_merge cache are per hardware queue too, so a
 * bio or request only ever meets requests of its own hardware queue, and
 * submitters and dispatchers of different hardware queues share no lock.
 *
 * Sorted runs.  A list inserted into an empty hardware queue (the common
 * case when the device keeps up: a plug's worth arrives, is dispatched, and
 * the next arrives to find nothing queued) is sorted by start sector into a
 * small array per class and direction, a run, instead of being put one by
 * one into the trees and the back-merge hash.  Dispatch walks the run in
 * the same order the tree would give, so nothing a user or driver sees
 * changes; what is saved is the tree's insert and erase on random sectors
 * (a mispredicted branch per level) and the hash's add and delete.  Runs
 * are only made when no insert merge is possible: the hardware queue holds
 * nothing, so the batch can only merge within itself, and its requests,
 * sorted, neither overlap nor touch.  Requests in a run are not on the
 * hash, so every merge path first moves every run of the hardware queue
 * into the trees and the hash ("materialises" it): bio_merge before it
 * looks, insert_requests before an insert into a non-empty queue.  The
 * merge hooks the core calls back from there (request_merge,
 * request_merged, requests_merged, former/next_request) therefore never
 * meet a run.
 *
 * Locking: hq->lock guards the state of its hardware queue.  The tunables
 * are read and written without a lock (READ_ONCE / WRITE_ONCE: a change
 * applies from the next decision on); the counter nr_queued is read
 * without the lock.
 *
 *   operation                              lock
 *   insert_requests, dispatch_request(s)    takes the hctx's hq->lock
 *   bio_merge                               takes hq->lock of the hctx the
 *                                           bio maps to, and calls
 *                                           rq_sched_try_merge() under it
 *   request_merge, request_merged,          called back by the core from
 *   requests_merged, next/former_request    rq_sched_try_merge() and
 *                                           rq_sched_try_insert_merge(),
 *                                           i.e. with that hq->lock held
 *   has_work, limit_depth                   lock-free (READ_ONCE)
 *   attribute show/store                    lock-free (READ_ONCE / WRITE_ONCE)
 *   depth_updated                           queue frozen
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librequest/elevator.h>

#include "lib/internal/alloc.h"
#include "lib/internal/compiler.h"
#include "lib/internal/clock.h"

/*
 * DL_TREE_ONLY: this scheduler without sorted runs, registered as
 * "mq-deadline-tree" (tests/sched/dl_tree_only.c).  A test runs the two on
 * the same script and checks that they dispatch the same requests in the
 * same order.
 */
#ifdef DL_TREE_ONLY
#define DL_USE_RUNS 0
#define DL_TYPE_NAME "mq-deadline-tree"
#define rq_mq_deadline_type rq_mq_deadline_tree_type
#else
#define DL_USE_RUNS 1
#define DL_TYPE_NAME "mq-deadline"
#endif

/* ------------------------------------------------------ tunable defaults */

#define DL_READ_EXPIRE_MS 500          /* ms until a read is overdue */
#define DL_WRITE_EXPIRE_MS 5000        /* ms until a write is overdue */
#define DL_WRITES_STARVED 2            /* read batches a waiting write may be passed over */
#define DL_FRONT_MERGES 1              /* 1: look for front merges in the sorted tree */
#define DL_FIFO_BATCH 16               /* requests per batch */
#define DL_PRIO_AGING_EXPIRE_MS 10000  /* ms before a lower class request goes first */
/* async_depth defaults to 3/4 of nr_requests (scheduler tags), at least 1 */

#define NSEC_PER_MSEC 1000000ull

/* ------------------------------------------------------- data structures */

/*
 * The lock of one hardware queue's state is the library's test-and-set
 * spinlock (rq_spinlock_t), standing for the kernel's dd->lock: taking it
 * is one atomic and dropping it a store, where a mutex costs an atomic
 * each way (two sections a plug: the insert and the dispatch).  A waiter
 * spins a while, then yields, so a holder the kernel preempted gets the
 * CPU back; nothing done under it blocks.
 */
#define DL_LOCK_SPINS 128 /* pauses before a waiter starts yielding */

static __attribute__((noinline)) void dl_lock_wait(rq_spinlock_t *l)
{
	for (unsigned spins = 0; !rq_spin_trylock(l); spins++) {
		if (spins < DL_LOCK_SPINS)
			cpu_relax();
		else
			sched_yield();
	}
}

static inline void dl_lock(rq_spinlock_t *l)
{
	if (unlikely(!rq_spin_trylock(l)))
		dl_lock_wait(l);
}

enum dl_dir {
	DL_READ,
	DL_WRITE,
	DL_NR_DIRS,
};

enum dl_prio {
	DL_PRIO_RT,
	DL_PRIO_BE,
	DL_PRIO_IDLE,
	DL_NR_PRIOS,
};

/* Requests one run can hold: a plug's flush on several queues (2 x 32). */
#define DL_RUN_MAX (2 * RQ_PLUG_MAX_REQUESTS)
_Static_assert(DL_RUN_MAX <= 64, "a run's live entries fit one 64-bit mask");

/**
 * struct dl_run - requests of one class and direction kept as a sorted
 * array instead of in the tree (see "Sorted runs" at the top).
 * @head: entries before it have all been dispatched.
 * @len: entries in use; 0 when the class and direction use the tree.
 * @live: entries not dispatched yet.
 * @live_mask: bit i set while entry i is not dispatched: the next live
 *	entry at or after any place is one bit scan away.
 * @sector: the entries' start sectors, ascending (kept for dispatched
 *	entries too, so the array stays searchable).
 * @rq: the requests; an entry means nothing once its @live_mask bit
 *	is clear.
 * @due: the deadline of every request of the run (they entered the
 *	scheduler together): a request's fifo_time is written only when it
 *	leaves the run for the tree (dl_fifo_time() reads either).
 */
struct dl_run {
	unsigned head, len, live;
	uint64_t live_mask;
	uint64_t due;
	uint64_t sector[DL_RUN_MAX];
	struct rq_request *rq[DL_RUN_MAX];
};

/**
 * struct dl_prio_queue - the requests of one priority class on one hw queue.
 * @sort: per direction, the requests sorted by start sector.
 * @fifo: per direction, the requests in arrival order (by queuelist).
 * @latest_pos: per direction, the start sector of the request of this
 *	class sent last (the kernel's per_prio->latest_pos): sector order
 *	continues with the first request starting at or after it.
 * @next_hint: per direction, that first request, while the tree has not
 *	changed otherwise (NULL: unknown); saves a search from the root on
 *	every dispatch of a batch.
 * @nr_queued: requests in @sort (or @run) / @fifo.
 * @hq: the hardware queue's state this belongs to.
 * @run: per direction, the sorted run that stands in for @sort while its
 *	len is not 0 (@sort is empty then).
 */
struct dl_prio_queue {
	struct dl_hctx_queue *hq;
	struct rq_rb_root sort[DL_NR_DIRS];
	struct rq_list_node fifo[DL_NR_DIRS];
	uint64_t latest_pos[DL_NR_DIRS];
	struct rq_request *next_hint[DL_NR_DIRS];
	unsigned nr_queued;
	struct dl_run run[DL_NR_DIRS];
};

/**
 * struct dl_clock - the time of one dispatch decision, read from the clock
 * only if the decision needs it (a deadline or an age to compare).
 */
struct dl_clock {
	uint64_t now;
	bool valid;
};

/**
 * struct dl_hctx_queue - the scheduler state of one hardware queue.
 * @lock: guards everything below (see the table at the top).
 * @dispatch: requests inserted at the head, sent before anything else.
 * @prio: the sorted requests, by priority class.
 * @nr_queued: requests on @dispatch and in @prio (written under the lock,
 *	read without it by has_work).
 * @last_dir: direction of the batch in progress (the kernel's
 *	dd->last_dir): DL_WRITE before the first one, as in the kernel.
 * @batching: requests sent in it so far.  Like the kernel's, the batch
 *	belongs to no class: whichever class is served next continues it, and
 *	it survives the queue running empty (the next burst continues it).
 * @starved: read batches started while writes were waiting.
 * @nr_runs: class queues and directions using a run instead of the tree.
 * @sort_shift: the bucket shift of the last list sorted (see dl_sort()).
 * @run_first: the first mergeable request of the list the runs were made
 *	from (NULL: none): the one the kernel, inserting one by one, would
 *	have made the one-hit merge cache.  It counts only while its entry
 *	is live: dispatch leaves it set.
 * @run_first_run: the run @run_first was put in, and @run_first_bit its
 *	entry's bit there; the runs of @hq all come from the last list made
 *	into runs (they are only made on an empty hardware queue), so while
 *	that bit is set in the run's @live_mask the entry is @run_first.
 */
struct dl_hctx_queue {
	rq_spinlock_t lock;
	struct rq_list_node dispatch;
	unsigned nr_queued;
	enum dl_dir last_dir;
	unsigned batching;
	unsigned starved;
	unsigned nr_runs;
	unsigned sort_shift;
	struct rq_request *run_first;
	const struct dl_run *run_first_run;
	uint64_t run_first_bit;
	struct dl_prio_queue prio[DL_NR_PRIOS];
} rq_cacheline_aligned;

/**
 * struct dl_data - the scheduler data of one queue (from init_sched).
 * @q: the queue.
 * @nr_hw: entries in @hqs.
 * @hqs: per hardware queue state.
 * @solo_queued: with one hardware queue, its nr_queued; else a counter
 *	that is never 0 (bio_merge's empty-queue answer is one load).
 * The rest are the tunables (see dl_attrs).
 */
struct dl_data {
	struct rq_queue *q;
	unsigned nr_hw;
	struct dl_hctx_queue *hqs;
	const unsigned *solo_queued;

	unsigned read_expire_ms;
	unsigned write_expire_ms;
	unsigned writes_starved;
	unsigned front_merges;
	unsigned fifo_batch;
	unsigned async_depth;
	unsigned prio_aging_expire_ms;
} rq_cacheline_aligned; /* read on every request: no line shared with other data */

/*
 * rq->elv_priv[0]: NULL while the request is not in our sorted structures;
 * DL_RQ_QUEUED while it is in a tree; 2 + i while it is entry i of a run.
 * rq->elv_priv[1]: while it is in either, its struct dl_prio_queue (class
 * and hw queue worked out once, at insert).
 */
#define DL_RQ_QUEUED ((void *)1)
#define DL_RUN_SLOT(i) ((void *)(uintptr_t)(2 + (i)))

/* --------------------------------------------------------------- helpers */

static inline struct dl_data *dl_of(struct rq_queue *q)
{
	return rq_sched_data(q);
}

/* The priority class of an I/O priority value (NONE and unknown: BE). */
static inline enum dl_prio dl_prio_of(uint16_t ioprio)
{
	switch (RQ_IOPRIO_CLASS(ioprio)) {
	case RQ_IOPRIO_CLASS_RT:
		return DL_PRIO_RT;
	case RQ_IOPRIO_CLASS_IDLE:
		return DL_PRIO_IDLE;
	default:
		return DL_PRIO_BE;
	}
}

/* Reads one way; writes, discards and write-zeroes the other. */
static inline enum dl_dir dl_dir_of(unsigned op)
{
	return rq_op_is_write(op) ? DL_WRITE : DL_READ;
}

static inline struct dl_hctx_queue *dl_hq(struct dl_data *dd, const struct rq_hw_ctx *hctx)
{
	unsigned idx = rq_hctx_index(hctx);

	return &dd->hqs[idx < dd->nr_hw ? idx : 0];
}

/* The class queue of a queued request (see DL_RQ_QUEUED). */
static inline struct dl_prio_queue *dl_pq(const struct rq_request *rq)
{
	return rq->elv_priv[1];
}

static inline bool dl_queued(const struct rq_request *rq)
{
	return rq->elv_priv[0] != NULL;
}

static inline bool dl_in_run(const struct rq_request *rq)
{
	return (uintptr_t)rq->elv_priv[0] >= 2;
}

static inline unsigned dl_run_index(const struct rq_request *rq)
{
	return (unsigned)((uintptr_t)rq->elv_priv[0] - 2);
}

/* The deadline of a queued request (see struct dl_run's @due). */
static inline uint64_t dl_fifo_time(const struct rq_request *rq)
{
	return dl_in_run(rq) ? dl_pq(rq)->run[dl_dir_of(rq->op)].due : rq->fifo_time;
}

/*
 * Only reads, writes and discards without NOMERGE go on the merge hash; not
 * a FUA write whose post-flush the flush machinery sequences (RQ_RQF_FLUSH_SEQ:
 * the kernel's RQF_NOMERGE_FLAGS).
 */
static inline bool dl_mergeable(const struct rq_request *rq)
{
	return (rq->op == RQ_OP_READ || rq->op == RQ_OP_WRITE || rq->op == RQ_OP_DISCARD) &&
	       !(rq->opf & (RQ_BIO_NOMERGE | RQ_BIO_FUA | RQ_BIO_PREFLUSH)) &&
	       !(rq->rq_flags & (RQ_RQF_FLUSH_SEQ | RQ_RQF_FLUSH_INTERNAL));
}

/* Add @delta to the hctx queue's counter; lock held. */
static inline void dl_count(struct dl_hctx_queue *hq, int delta)
{
	WRITE_ONCE(hq->nr_queued, hq->nr_queued + delta);
}

/*
 * Put @rq in its tree, FIFO (deadline: @now, when it enters the scheduler,
 * plus the direction's expiry) and the hash; lock held.
 */
static void dl_add(struct dl_data *dd, struct rq_request *rq, uint64_t now)
{
	struct dl_hctx_queue *hq = dl_hq(dd, rq->hctx);
	struct dl_prio_queue *pq = &hq->prio[dl_prio_of(rq->ioprio)];
	enum dl_dir dir = dl_dir_of(rq->op);
	unsigned expire_ms = dir == DL_READ ? READ_ONCE(dd->read_expire_ms) :
					      READ_ONCE(dd->write_expire_ms);

	rq->elv_priv[1] = pq;

	rq_sched_rb_add(&pq->sort[dir], rq);
	pq->next_hint[dir] = NULL;
	rq->fifo_time = now + expire_ms * NSEC_PER_MSEC;
	rq_list_add_tail(&rq->queuelist, &pq->fifo[dir]);
	if (dl_mergeable(rq)) {
		rq_sched_hash_add(dd->q, rq);
		rq_sched_last_merge_fill(dd->q, rq);
	}
	rq->elv_priv[0] = DL_RQ_QUEUED;
	pq->nr_queued++;
	dl_count(hq, 1);
}

/* Take run entry @i (request @rq) out of @run; lock held. */
static void dl_run_del(struct dl_hctx_queue *hq, struct dl_run *run, unsigned i)
{
	run->live_mask &= ~(1ull << i);
	if (!--run->live) {
		run->head = run->len = 0;
		hq->nr_runs--;
		return;
	}
	run->head = (unsigned)__builtin_ctzll(run->live_mask);
}

/* The first live entry of @run at index @i or above, or NULL. */
static inline struct rq_request *dl_run_live_from(const struct dl_run *run, unsigned i)
{
	uint64_t m = i < 64 ? run->live_mask & (~0ull << i) : 0;

	return m ? run->rq[__builtin_ctzll(m)] : NULL;
}

/* Take @rq out of its tree or run, FIFO and the hash; lock held. */
static void dl_remove(struct dl_data *dd, struct rq_request *rq)
{
	struct dl_prio_queue *pq = dl_pq(rq);
	struct dl_hctx_queue *hq = pq->hq;
	enum dl_dir dir = dl_dir_of(rq->op);

	if (pq->next_hint[dir] == rq)
		pq->next_hint[dir] = NULL;
	if (dl_in_run(rq)) {
		dl_run_del(hq, &pq->run[dir], dl_run_index(rq));
	} else {
		rq_sched_rb_del(&pq->sort[dir], rq);
		rq_sched_hash_del(dd->q, rq);
	}
	rq_list_del_init(&rq->queuelist);
	rq->elv_priv[0] = NULL;
	pq->nr_queued--;
	dl_count(hq, -1);
}

/*
 * The next of @rq in sector order among the queued requests of its class
 * and direction (tree or run), or NULL; lock held.
 */
static struct rq_request *dl_sorted_latter(struct rq_request *rq)
{
	const struct dl_run *run;

	if (!dl_in_run(rq))
		return rq_sched_rb_latter(rq);
	run = &dl_pq(rq)->run[dl_dir_of(rq->op)];
	return dl_run_live_from(run, dl_run_index(rq) + 1);
}

/*
 * Move every run of @hq into the trees and the hash, as if its requests
 * had been inserted one by one; lock held.  Their order, FIFO places and
 * deadlines do not change.
 */
static void dl_materialise(struct dl_data *dd, struct dl_hctx_queue *hq)
{
	struct rq_request *first = hq->run_first;

	if (first && !(hq->run_first_run->live_mask & hq->run_first_bit))
		first = NULL; /* dispatched since */
	for (unsigned p = 0; p < DL_NR_PRIOS && hq->nr_runs; p++) {
		struct dl_prio_queue *pq = &hq->prio[p];

		for (unsigned d = 0; d < DL_NR_DIRS; d++) {
			struct dl_run *run = &pq->run[d];

			if (!run->len)
				continue;
			for (uint64_t m = run->live_mask; m; m &= m - 1) {
				struct rq_request *rq = run->rq[__builtin_ctzll(m)];

				rq_sched_rb_add(&pq->sort[d], rq);
				if (dl_mergeable(rq))
					rq_sched_hash_add(dd->q, rq);
				rq->elv_priv[0] = DL_RQ_QUEUED;
				rq->fifo_time = run->due;
			}
			run->head = run->len = run->live = 0;
			run->live_mask = 0;
			hq->nr_runs--;
		}
	}
	if (first)
		rq_sched_last_merge_fill(dd->q, first);
	hq->run_first = NULL;
}

/* The class queue of @hq a request of @rq's priority goes to. */
static inline struct dl_prio_queue *dl_pq_of(struct dl_hctx_queue *hq, const struct rq_request *rq)
{
	return &hq->prio[dl_prio_of(rq->ioprio)];
}

/*
 * The requests of one dl_insert_runs() and their order: @rq and @sector in
 * list order, with one more entry past the list's (sector UINT64_MAX, a
 * sentinel for dl_fill_run()); the list walk puts each into a bucket of
 * its sector (@bucket: per index; @cnt: per bucket, the requests in it),
 * and dl_sort() turns the counts into places (where the next of the
 * bucket goes in @ord) and puts the list indices into @ord by bucket,
 * requests sharing a bucket in list order.  @ord has room for the
 * buckets' order to be read from any place on (see dl_sort()).
 */
#define DL_SORT_BITS 7
#define DL_SORT_BUCKETS (1u << DL_SORT_BITS)

struct dl_sort {
	struct rq_request *rq[DL_RUN_MAX + 1];
	uint64_t sector[DL_RUN_MAX + 1];
	uint8_t bucket[DL_RUN_MAX];
	uint8_t ord[2 * DL_RUN_MAX + 1];
	union {
		uint8_t b[DL_SORT_BUCKETS];
		uint64_t w[DL_SORT_BUCKETS / 8];
	} cnt;
};

_Static_assert(DL_RUN_MAX < 255, "a list index and a bucket's count fit a byte");
_Static_assert(DL_RUN_MAX % 8 == 0, "dl_sort() copies the order by 64-bit words");

/* Record @rq, with start sector @sector, as entry @i of @pq's @run. */
static inline void dl_run_set(struct dl_run *run, struct dl_prio_queue *pq, unsigned i,
			      struct rq_request *rq, uint64_t sector)
{
	run->sector[i] = sector;
	run->rq[i] = rq;
	rq->elv_priv[0] = DL_RUN_SLOT(i);
	rq->elv_priv[1] = pq;
}

/* Mark entries base .. base + n - 1 (n >= 1) of @pq's run of @dir live. */
static void dl_run_grow(struct dl_hctx_queue *hq, struct dl_prio_queue *pq, enum dl_dir dir,
			unsigned base, unsigned n)
{
	struct dl_run *run = &pq->run[dir];

	if (!base)
		hq->nr_runs++;
	/* base + n <= 64 */
	run->live_mask |= (~0ull >> (64 - n)) << base;
	run->len = run->live = base + n;
	pq->next_hint[dir] = NULL;
}

/*
 * Finish the @n entries of a @run that dl_fill_run() left out of order
 * (a bucket of three or more, nearly sorted after its one bubble pass):
 * an insertion sort of the entries in place, each request that moved
 * told its new slot, then the test that they neither overlap nor touch.  Return: false
 * when two do (the run stays empty; the tree path overwrites what was
 * written).  Lock held.
 */
static __attribute__((noinline)) bool dl_run_fix(struct dl_run *run, unsigned n)
{
	uint64_t lim = 0;
	unsigned moved = n; /* the first entry that moved */

	for (unsigned i = 1; i < n; i++) {
		uint64_t sector = run->sector[i];
		struct rq_request *rq;
		unsigned j = i;

		if (run->sector[i - 1] <= sector)
			continue; /* in place */
		rq = run->rq[i];
		do {
			run->sector[j] = run->sector[j - 1];
			run->rq[j] = run->rq[j - 1];
		} while (--j && run->sector[j - 1] > sector);
		run->sector[j] = sector;
		run->rq[j] = rq;
		moved = min_t(unsigned, moved, j);
	}
	for (unsigned i = 0; i < n; i++) {
		if (run->sector[i] < lim)
			return false;
		lim = run->sector[i] + rq_request_sectors(run->rq[i]) + 1;
	}
	for (unsigned i = moved; i < n; i++)
		run->rq[i]->elv_priv[0] = DL_RUN_SLOT(i);
	return true;
}

/*
 * Put the @n requests of @s into the empty run of @pq and @dir in the
 * order of @ord (from dl_sort()), with FIFO deadline @due, but each time the smaller of
 * the next in @ord and the larger one held back from before (one pass of
 * a bubble sort: two requests sharing a bucket come out in sector order
 * whatever their list order).  No branch depends on the sectors.  The
 * requests must then ascend and neither overlap nor touch; when they do
 * not, dl_run_fix() sorts the entries written and tests again.  Return:
 * false when two requests overlap or touch (the run still empty; entries
 * and requests written, which the tree path overwrites).  Lock held.
 */
static bool dl_fill_run(struct dl_hctx_queue *hq, struct dl_prio_queue *pq, enum dl_dir dir,
			const struct dl_sort *s, const uint8_t *ord, unsigned n, uint64_t due)
{
	struct dl_run *run = &pq->run[dir];
	struct rq_request *held = s->rq[ord[0]];
	uint64_t held_sector = s->sector[ord[0]];
	uint64_t lim = 0; /* one past the end of the last one: the next must start after */
	bool bad = false;

	for (unsigned m = 0; m < n; m++) {
		unsigned k = ord[m + 1];
		struct rq_request *rq = s->rq[k], *out;
		uint64_t sector = s->sector[k], out_sector;
		bool lower = sector < held_sector;

		out = lower ? rq : held;
		out_sector = lower ? sector : held_sector;
		held = lower ? held : rq;
		held_sector = lower ? held_sector : sector;
		bad |= out_sector < lim;
		lim = out_sector + rq_request_sectors(out) + 1;
		dl_run_set(run, pq, m, out, out_sector);
	}
	if (unlikely(bad) && !dl_run_fix(run, n))
		return false;
	run->due = due;
	dl_run_grow(hq, pq, dir, 0, n);
	return true;
}

/* Append @rq, deadline @due, to the run of its class and direction; lock held. */
static void dl_append_run(struct dl_hctx_queue *hq, struct dl_prio_queue *pq, enum dl_dir dir,
			  struct rq_request *rq, uint64_t due)
{
	unsigned base = pq->run[dir].len;

	pq->run[dir].due = due;
	dl_run_set(&pq->run[dir], pq, base, rq, rq->sector);
	dl_run_grow(hq, pq, dir, base, 1);
}

/* The bucket of a start sector: its bits from @shift up, modulo the buckets. */
static inline unsigned dl_bucket(uint64_t sector, unsigned shift)
{
	return (unsigned)(sector >> shift) & (DL_SORT_BUCKETS - 1);
}

/*
 * Count the @n requests of @s by bucket (dl_bucket() with @shift) and
 * record each one's; lock held.
 */
static void dl_sort_count(struct dl_sort *s, unsigned n, unsigned shift)
{
	memset(&s->cnt, 0, sizeof(s->cnt));
	for (unsigned i = 0; i < n; i++) {
		unsigned b = dl_bucket(s->sector[i], shift);

		s->bucket[i] = (uint8_t)b;
		s->cnt.b[b]++;
	}
}

/*
 * Order the @n (at most DL_RUN_MAX) list indices of @s by bucket of their
 * sectors, which lie in [@lo, @hi], and return where that order starts in
 * @s->ord (@n entries and a sentinel index: the sentinel's sector
 * UINT64_MAX and request NULL are set too).  A counting sort with no
 * branch on the sectors: the buckets (DL_SORT_BUCKETS of them) are the
 * sectors' bits from a shift up, modulo the buckets, with the shift that
 * makes the span from @lo to @hi go round the buckets at most once (only
 * its two ends may share a bucket), so the buckets' order by sector
 * starts at @lo's bucket and wraps round; within a bucket the
 * list order stays.  The list walk counted the buckets with @hq's shift,
 * the one of the list before (a plug's span changes little): only when
 * this list's span needs another are the buckets counted again.  Lock
 * held.
 */
static uint8_t *dl_sort(struct dl_hctx_queue *hq, struct dl_sort *s, unsigned n,
			uint64_t lo, uint64_t hi)
{
	uint64_t span = hi - lo, wrap[DL_RUN_MAX / 8];
	unsigned shift = 0, carry = 0, start;

	if (span >> DL_SORT_BITS)
		shift = 64 - (unsigned)__builtin_clzll(span) - DL_SORT_BITS;
	if (unlikely(shift != hq->sort_shift)) {
		hq->sort_shift = shift;
		dl_sort_count(s, n, shift);
	}
	/* each bucket's count becomes the place of its first request */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	for (unsigned w = 0; w < DL_SORT_BUCKETS / 8; w++) {
		/*
		 * bytes: a word times 0x01..01 sums each byte with those below
		 * it; the top byte of that plus the places so far is the
		 * place after the word (no byte carries: n <= 64)
		 */
		uint64_t sums = s->cnt.w[w] * 0x0101010101010101ull;
		uint64_t base = carry * 0x0101010101010101ull;

		s->cnt.w[w] = (sums << 8) + base;
		carry = (unsigned)((sums + base) >> 56);
	}
#else
	for (unsigned b = 0; b < DL_SORT_BUCKETS; b++) {
		unsigned c = s->cnt.b[b];

		s->cnt.b[b] = (uint8_t)carry;
		carry += c;
	}
#endif
	/* the order from @lo's bucket on, then the buckets before it */
	start = s->cnt.b[dl_bucket(lo, shift)];
	for (unsigned i = 0; i < n; i++)
		s->ord[s->cnt.b[s->bucket[i]]++] = (uint8_t)i;
	/* the wrapped part after the rest (only @n bytes of @ord count: the two may overlap) */
	memcpy(wrap, s->ord, sizeof(wrap));
	memcpy(&s->ord[n], wrap, sizeof(wrap));
	s->ord[n + start] = (uint8_t)n;
	s->sector[n] = UINT64_MAX;
	s->rq[n] = NULL;
	return &s->ord[start];
}

/* Finish @ord's sort by sector (insertion sort: it is nearly sorted). */
static void dl_sort_exact(const struct dl_sort *s, uint8_t *ord, unsigned n)
{
	for (unsigned i = 1; i < n; i++) {
		uint8_t k = ord[i];
		uint64_t sector = s->sector[k];
		unsigned j = i;

		for (; j && s->sector[ord[j - 1]] > sector; j--)
			ord[j] = ord[j - 1];
		ord[j] = k;
	}
}

/*
 * A request's op and I/O priority in one word; two requests share op and
 * priority class when their keys agree in DL_KEY_SAME (the class bits of
 * the priority, and the op).
 */
static inline unsigned dl_key(const struct rq_request *rq)
{
	return rq->op | (unsigned)rq->ioprio << 8;
}

#define DL_KEY_SAME (0xffu | (~0u << RQ_IOPRIO_CLASS_SHIFT) << 8)

/*
 * Insert @list into @hq as sorted runs if that is the same as inserting it
 * one by one (see "Sorted runs" at the top): @hq holds nothing, the list
 * fits, and its requests sorted by sector neither overlap nor touch (so no
 * insert merge can happen and no two share a start sector).  Lock held.
 *
 * When every request has one class and direction (a plug's batch,
 * usually) the list goes onto the FIFO with one splice.
 * Return: true if done (@list is empty then); false if @list is untouched.
 */
static bool dl_insert_runs(struct dl_data *dd, struct dl_hctx_queue *hq,
			   struct rq_list_node *list, uint64_t now)
{
	struct rq_request *rq, *first_mergeable = NULL;
	struct dl_sort s;
	uint64_t lo = UINT64_MAX, hi = 0, end = 0, due[DL_NR_DIRS];
	unsigned n = 0, mixed = 0, first_key, shift = hq->sort_shift;
	uint8_t *ord;

	if (hq->nr_queued || rq_list_empty(list))
		return false;
	due[DL_READ] = now + READ_ONCE(dd->read_expire_ms) * NSEC_PER_MSEC;
	due[DL_WRITE] = now + READ_ONCE(dd->write_expire_ms) * NSEC_PER_MSEC;
	rq = rq_list_first_rq(list);
	/* one op and class (not just direction): the one-pass fill */
	first_key = dl_key(rq);
	memset(&s.cnt, 0, sizeof(s.cnt));
	for (struct rq_list_node *it = list->next; it != list; it = it->next) {
		uint64_t sector;
		unsigned b;

		if (n == DL_RUN_MAX)
			return false;
		rq = RQ_CONTAINER_OF(it, struct rq_request, queuelist);
		sector = rq->sector;
		b = dl_bucket(sector, shift); /* counted with the last list's shift */
		mixed |= dl_key(rq) ^ first_key;
		s.rq[n] = rq;
		s.sector[n] = sector;
		s.bucket[n] = (uint8_t)b;
		s.cnt.b[b]++;
		lo = min_t(uint64_t, lo, sector);
		hi = max_t(uint64_t, hi, sector);
		n++;
	}
	mixed &= DL_KEY_SAME;
	for (unsigned i = 0; i < n && !first_mergeable; i++)
		first_mergeable = dl_mergeable(s.rq[i]) ? s.rq[i] : NULL;
	ord = dl_sort(hq, &s, n, lo, hi);
	if (!mixed) {
		enum dl_dir dir = dl_dir_of(s.rq[0]->op);
		struct dl_prio_queue *pq = dl_pq_of(hq, s.rq[0]);

		if (!dl_fill_run(hq, pq, dir, &s, ord, n, due[dir]))
			return false;
	} else {
		dl_sort_exact(&s, ord, n);
		for (unsigned i = 0; i < n; i++) {
			rq = s.rq[ord[i]];
			if (i && rq->sector <= end)
				return false;
			end = max_t(uint64_t, end, rq_request_end_sector(rq));
		}
		for (unsigned i = 0; i < n; i++) {
			enum dl_dir dir;

			rq = s.rq[ord[i]];
			dir = dl_dir_of(rq->op);
			dl_append_run(hq, dl_pq_of(hq, rq), dir, rq, due[dir]);
		}
	}
	hq->run_first = first_mergeable;
	if (first_mergeable) {
		hq->run_first_run = &dl_pq(first_mergeable)->run[dl_dir_of(first_mergeable->op)];
		hq->run_first_bit = 1ull << dl_run_index(first_mergeable);
	}
	/* the FIFOs in arrival order */
	if (!mixed) {
		struct dl_prio_queue *pq = dl_pq(s.rq[0]);

		rq_list_splice_tail_init(list, &pq->fifo[dl_dir_of(s.rq[0]->op)]);
		pq->nr_queued += n;
	} else {
		while ((rq = rq_list_first_rq(list))) {
			struct dl_prio_queue *pq = dl_pq(rq);

			rq_list_del_init(&rq->queuelist);
			rq_list_add_tail(&rq->queuelist, &pq->fifo[dl_dir_of(rq->op)]);
			pq->nr_queued++;
		}
	}
	dl_count(hq, (int)n);
	return true;
}

/* The oldest request of one direction, or NULL. */
static inline struct rq_request *dl_fifo_head(struct dl_prio_queue *pq, enum dl_dir dir)
{
	return rq_list_first_rq(&pq->fifo[dir]);
}

/* The library clock for this decision, read at most once. */
static inline uint64_t dl_now(struct dl_clock *clk)
{
	if (!clk->valid) {
		clk->now = core_clock_ns(); /* the plug's reading in a plug's flush */
		clk->valid = true;
	}
	return clk->now;
}

/*
 * The next request in sector order: the lowest-sector request starting at
 * or after the start of the one of this class sent last in @dir (in the
 * tree or the run), or NULL.  The kernel's deadline_from_pos(): a request
 * overlapping the one sent last, or starting where it started, comes
 * before one starting at its end.
 */
static struct rq_request *dl_next_sorted(struct dl_prio_queue *pq, enum dl_dir dir)
{
	struct rq_rb_node *n = pq->sort[dir].node;
	uint64_t pos = pq->latest_pos[dir];
	struct rq_request *best = pq->next_hint[dir];

	/* the first one at or after the last one sent, unless the tree changed */
	if (best && best->sector >= pos)
		return best;
	best = NULL;
	if (pq->run[dir].len) {
		const struct dl_run *run = &pq->run[dir];
		unsigned lo = run->head, len = run->len - run->head;

		/* the batch ran off the run's end: nothing live lies further up */
		if (run->sector[63 - __builtin_clzll(run->live_mask)] < pos)
			return NULL;
		/*
		 * The first entry at or after pos, then the first live one.  The
		 * search halves a count that depends only on the run's length
		 * and moves with a conditional move: no branch on the sectors,
		 * which are random and would mispredict half the time.
		 */
		while (len > 1) {
			unsigned half = len / 2;

			lo = run->sector[lo + half - 1] < pos ? lo + half : lo;
			len -= half;
		}
		lo += len == 1 && run->sector[lo] < pos;
		return dl_run_live_from(run, lo);
	}
	while (n) {
		struct rq_request *rq = RQ_CONTAINER_OF(n, struct rq_request, rb_node);

		if (rq->sector >= pos) {
			best = rq;
			n = n->left;
		} else {
			n = n->right;
		}
	}
	return best;
}

/*
 * Did @rq enter the scheduler after @latest_start (ns, may be negative)?
 * Its entry time is its deadline less its direction's expiry, as the
 * kernel's started_after() works it out.
 */
static bool dl_started_after(struct dl_data *dd, const struct rq_request *rq,
			     int64_t latest_start)
{
	unsigned expire_ms = dl_dir_of(rq->op) == DL_READ ? READ_ONCE(dd->read_expire_ms) :
							    READ_ONCE(dd->write_expire_ms);

	return (int64_t)(dl_fifo_time(rq) - expire_ms * NSEC_PER_MSEC) > latest_start;
}

/*
 * Choose the next request of class @prio as the kernel's
 * __dd_dispatch_request() does: continue the batch (in the direction of
 * the last one, whatever its class) while it has a next request in sector
 * order, else pick a direction (writes_starved) and a starting point (FIFO
 * if overdue or nothing lies further up).  With @aged, only a request that
 * entered before @latest_start may go; the batch state changes anyway, as
 * in the kernel.  The caller removes the request.  Lock held.
 */
static inline __attribute__((always_inline)) struct rq_request *
dl_choose_in_prio(struct dl_data *dd, struct dl_hctx_queue *hq, enum dl_prio prio,
		  struct dl_clock *clk, bool aged, int64_t latest_start)
{
	struct dl_prio_queue *pq = &hq->prio[prio];
	struct rq_request *rq, *head;
	bool reads, writes;
	enum dl_dir dir;

	/* the kernel looks for the batch's next request first; only its presence matters */
	rq = hq->batching < READ_ONCE(dd->fifo_batch) ? dl_next_sorted(pq, hq->last_dir) : NULL;
	if (!rq) {
		reads = !rq_list_empty(&pq->fifo[DL_READ]);
		writes = !rq_list_empty(&pq->fifo[DL_WRITE]);
		if (reads && (!writes || hq->starved++ < READ_ONCE(dd->writes_starved))) {
			dir = DL_READ;
		} else if (writes) {
			hq->starved = 0;
			dir = DL_WRITE;
		} else {
			return NULL;
		}
		head = dl_fifo_head(pq, dir);
		rq = dl_next_sorted(pq, dir);
		if (!rq || dl_now(clk) >= dl_fifo_time(head))
			rq = head;
		hq->last_dir = dir;
		hq->batching = 0;
	}
	if (aged && dl_started_after(dd, rq, latest_start))
		return NULL;
	hq->batching++;
	return rq;
}

/*
 * A request of a class below RT that has waited longer than
 * prio_aging_expire, chosen as the kernel's dd_dispatch_prio_aged_requests()
 * does (only with two or more classes queued; BE before IDLE), or NULL.
 * Lock held.
 */
static struct rq_request *dl_aged_request(struct dl_data *dd, struct dl_hctx_queue *hq,
					  struct dl_clock *clk)
{
	int64_t latest_start;
	unsigned classes = 0;

	for (unsigned p = 0; p < DL_NR_PRIOS; p++)
		classes += hq->prio[p].nr_queued != 0;
	if (classes < 2)
		return NULL;
	latest_start = (int64_t)dl_now(clk) -
		       (int64_t)(READ_ONCE(dd->prio_aging_expire_ms) * NSEC_PER_MSEC);
	for (unsigned p = DL_PRIO_BE; p < DL_NR_PRIOS; p++) {
		struct rq_request *rq = dl_choose_in_prio(dd, hq, p, clk, true, latest_start);

		if (rq)
			return rq;
	}
	return NULL;
}

/* ------------------------------------------------------------------- ops */

/* dl_data's @solo_queued with several hardware queues. */
static const unsigned dl_never_empty = 1;

/**
 * dl_init_sched() - allocate the scheduler data of @q with default tunables.
 * Context: "scheduler" attribute writer, before the switch's freeze (the
 * accessors already answer for this scheduler on the calling thread).
 * Return: 0 or -ENOMEM.
 */
static int dl_init_sched(struct rq_queue *q, void **data)
{
	struct dl_data *dd = mem_alloc_aligned(RQ_CACHELINE, sizeof(*dd));
	unsigned nr_hw = rq_queue_nr_hw_queues(q);

	if (!dd)
		return -ENOMEM;
	memset(dd, 0, sizeof(*dd));
	dd->nr_hw = nr_hw ? nr_hw : 1;
	dd->hqs = mem_alloc_aligned(RQ_CACHELINE, dd->nr_hw * sizeof(*dd->hqs));
	if (!dd->hqs) {
		mem_free_aligned(dd, sizeof(*dd), RQ_CACHELINE);
		return -ENOMEM;
	}
	memset(dd->hqs, 0, dd->nr_hw * sizeof(*dd->hqs));
	for (unsigned h = 0; h < dd->nr_hw; h++) {
		struct dl_hctx_queue *hq = &dd->hqs[h];

		rq_spin_init(&hq->lock);
		rq_list_init(&hq->dispatch);
		for (unsigned p = 0; p < DL_NR_PRIOS; p++) {
			hq->prio[p].hq = hq;
			for (unsigned d = 0; d < DL_NR_DIRS; d++) {
				hq->prio[p].sort[d].node = NULL;
				rq_list_init(&hq->prio[p].fifo[d]);
				hq->prio[p].latest_pos[d] = 0;
				hq->prio[p].next_hint[d] = NULL;
			}
			hq->prio[p].nr_queued = 0;
		}
		hq->nr_queued = 0;
		hq->last_dir = DL_WRITE; /* as the kernel's dd_init_sched() */
		hq->batching = 0;
		hq->starved = 0;
	}

	dd->q = q;
	dd->solo_queued = dd->nr_hw == 1 ? &dd->hqs[0].nr_queued : &dl_never_empty;
	dd->read_expire_ms = DL_READ_EXPIRE_MS;
	dd->write_expire_ms = DL_WRITE_EXPIRE_MS;
	dd->writes_starved = DL_WRITES_STARVED;
	dd->front_merges = DL_FRONT_MERGES;
	dd->fifo_batch = DL_FIFO_BATCH;
	dd->async_depth = max_t(unsigned, 1, 3 * rq_queue_nr_requests(q) / 4);
	dd->prio_aging_expire_ms = DL_PRIO_AGING_EXPIRE_MS;
	*data = dd;
	return 0;
}

/**
 * dl_exit_sched() - free the scheduler data; the queue is empty.
 * Context: "scheduler" attribute writer after the switch (the accessors
 * answer for this scheduler on the calling thread), or queue teardown.
 */
static void dl_exit_sched(struct rq_queue *q, void *data)
{
	struct dl_data *dd = data;

	(void)q;
	mem_free_aligned(dd->hqs, dd->nr_hw * sizeof(*dd->hqs), RQ_CACHELINE);
	mem_free_aligned(dd, sizeof(*dd), RQ_CACHELINE);
}

/**
 * dl_depth_updated() - nr_requests changed: async_depth goes back to 3/4
 * of the new depth.
 * Context: nr_requests attribute writer, queue frozen; once per hw queue.
 */
static void dl_depth_updated(struct rq_hw_ctx *hctx)
{
	struct dl_data *dd = dl_of(rq_hctx_queue(hctx));
	unsigned depth = rq_queue_nr_requests(rq_hctx_queue(hctx));

	WRITE_ONCE(dd->async_depth, max_t(unsigned, 1, 3 * depth / 4));
}

/**
 * dl_limit_depth() - keep asynchronous requests (writes without
 * RQ_BIO_SYNC, asynchronous discards) to async_depth scheduler tags, so
 * synchronous I/O always finds some.
 *
 * The tag bitmap limits per word, so async_depth is scaled to the share of
 * each word it stands for: async_depth / nr_requests of the word's bits.
 * Context: submitter, making a request; lock-free.
 */
static void dl_limit_depth(struct rq_alloc_data *data)
{
	if (data->op == RQ_OP_READ || (data->opf & RQ_BIO_SYNC))
		return;
	data->shallow_depth = rq_sched_shallow_depth(data->hctx,
						    READ_ONCE(dl_of(data->q)->async_depth));
}

/*
 * dl_bio_merge()'s work once a hardware queue with requests queued is
 * known to be worth the lock (out of line: the common answer, nothing
 * queued, then costs no register saves).
 */
static __attribute__((noinline)) bool dl_bio_merge_locked(struct rq_queue *q, struct dl_data *dd,
							  struct rq_bio *bio, unsigned nr_segs)
{
	struct rq_hw_ctx *hctx = rq_sched_bio_hctx(q, bio, NULL);
	struct rq_request *free_rq = NULL;
	struct dl_hctx_queue *hq;
	bool merged;

	if (!hctx)
		return false;
	hq = dl_hq(dd, hctx);
	if (!READ_ONCE(hq->nr_queued))
		return false;
	dl_lock(&hq->lock);
	if (hq->nr_runs)
		dl_materialise(dd, hq);
	merged = rq_sched_try_merge(q, bio, nr_segs, &free_rq);
	rq_spin_unlock(&hq->lock);
	if (free_rq)
		rq_sched_free_request(free_rq);
	return merged;
}

/**
 * dl_bio_merge() - try to merge @bio into a queued request (back merge by
 * the core's hash, front merge by our tree, then request-request merges).
 * Only requests of the hardware queue the bio maps to are candidates (the
 * core's hash is per hardware queue, like our trees).  Nothing queued,
 * nothing to merge with (a race only misses a merge): with one hardware
 * queue that is known before the bio is mapped.
 * Context: submitter; takes that hardware queue's hq->lock.
 * Return: true if @bio now belongs to a request.
 */
static bool dl_bio_merge(struct rq_queue *q, struct rq_bio *bio, unsigned nr_segs)
{
	struct dl_data *dd = dl_of(q);

	if (!READ_ONCE(*dd->solo_queued))
		return false;
	return dl_bio_merge_locked(q, dd, bio, nr_segs);
}

/**
 * dl_request_merge() - find a queued request @bio can be put in front of:
 * one of the bio's class and direction starting where the bio ends.
 * Context: from rq_sched_try_merge(), the hq->lock held.
 * Return: RQ_ELV_FRONT_MERGE with *@rq set, or RQ_ELV_NO_MERGE.
 */
static int dl_request_merge(struct rq_queue *q, struct rq_request **rq, struct rq_bio *bio)
{
	struct dl_data *dd = dl_of(q);
	struct dl_hctx_queue *hq;
	struct rq_hw_ctx *hctx;
	struct rq_io_context *ioc;
	struct rq_request *found;
	uint16_t ioprio = bio->ioprio;

	if (!READ_ONCE(dd->front_merges))
		return RQ_ELV_NO_MERGE;
	if (!ioprio) {
		ioc = bio->ioc ? bio->ioc : rq_ioc_current();
		ioprio = ioc ? rq_ioc_prio(ioc) : 0;
	}
	hctx = rq_sched_bio_hctx(q, bio, NULL);
	if (!hctx)
		return RQ_ELV_NO_MERGE;
	hq = dl_hq(dd, hctx);
	found = rq_sched_rb_find(&hq->prio[dl_prio_of(ioprio)].sort[dl_dir_of(bio->op)],
			       rq_bio_end_sector(bio));
	if (!found)
		return RQ_ELV_NO_MERGE;
	*rq = found;
	return RQ_ELV_FRONT_MERGE;
}

/**
 * dl_request_merged() - @rq grew; after a front merge its start sector
 * moved, so it is re-sorted.
 * Context: from rq_sched_try_merge(), the hq->lock held.
 */
static void dl_request_merged(struct rq_queue *q, struct rq_request *rq, enum rq_elv_merge type)
{
	struct rq_rb_root *root;

	(void)q;
	if (type != RQ_ELV_FRONT_MERGE || !dl_queued(rq))
		return;
	root = &dl_pq(rq)->sort[dl_dir_of(rq->op)];
	rq_sched_rb_del(root, rq);
	rq_sched_rb_add(root, rq);
	dl_pq(rq)->next_hint[dl_dir_of(rq->op)] = NULL;
}

/**
 * dl_requests_merged() - @next was merged into @rq and leaves us; @rq keeps
 * the earlier deadline (and @next's place in the FIFO if that was earlier).
 * @next may be a request that was never inserted (an insert merge).
 * Context: from rq_sched_try_merge() / rq_sched_try_insert_merge(),
 * the hq->lock held.
 */
static void dl_requests_merged(struct rq_queue *q, struct rq_request *rq, struct rq_request *next)
{
	struct dl_data *dd = dl_of(q);

	if (!dl_queued(next))
		return;
	if (dl_queued(rq) && next->fifo_time < rq->fifo_time &&
	    dl_dir_of(rq->op) == dl_dir_of(next->op) && dl_pq(rq) == dl_pq(next)) {
		/* take next's place in the FIFO: put rq right after it */
		rq_list_del_init(&rq->queuelist);
		rq_list_insert(&rq->queuelist, &next->queuelist, next->queuelist.next);
		rq->fifo_time = next->fifo_time;
	}
	dl_remove(dd, next);
}

/**
 * dl_former_request() / dl_next_request() - the neighbours of @rq in its
 * sorted tree, for request-request merges (no run exists then: see
 * "Sorted runs").
 * Context: from rq_sched_try_merge(), the hq->lock held.
 * Return: the request, or NULL (also when @rq is not queued with us).
 */
static struct rq_request *dl_former_request(struct rq_queue *q, struct rq_request *rq)
{
	(void)q;
	return dl_queued(rq) ? rq_sched_rb_former(rq) : NULL;
}

static struct rq_request *dl_next_request(struct rq_queue *q, struct rq_request *rq)
{
	(void)q;
	return dl_queued(rq) ? rq_sched_rb_latter(rq) : NULL;
}

/**
 * dl_insert_requests() - take the requests on @list: at the head (the
 * hctx's dispatch list, in their order) with RQ_INSERT_AT_HEAD, else merged
 * into a queued request when contiguous with one, else sorted (as runs
 * when the hardware queue is empty and nothing can merge).
 * Context: submitter or dispatcher; takes hq->lock.  Requests emptied by
 * insert merges are freed after the lock is dropped.
 */
static void dl_insert_requests(struct rq_hw_ctx *hctx, struct rq_list_node *list, unsigned flags)
{
	struct rq_queue *q = rq_hctx_queue(hctx);
	struct dl_data *dd = dl_of(q);
	struct dl_hctx_queue *hq = dl_hq(dd, hctx);
	struct rq_list_node free_list;
	struct rq_request *rq;
	uint64_t now;

	rq_list_init(&free_list);
	now = core_clock_ns(); /* one read for the whole list; the plug's in its flush */
	dl_lock(&hq->lock);
	if (flags & RQ_INSERT_AT_HEAD) {
		unsigned n = 0;

		for (struct rq_list_node *it = list->next; it != list; it = it->next, n++)
			RQ_CONTAINER_OF(it, struct rq_request, queuelist)->elv_priv[0] = NULL;
		rq_list_splice_init(list, &hq->dispatch);
		dl_count(hq, (int)n);
		rq_spin_unlock(&hq->lock);
		return;
	}
	if (DL_USE_RUNS && dl_insert_runs(dd, hq, list, now)) {
		rq_spin_unlock(&hq->lock);
		return;
	}
	if (hq->nr_runs)
		dl_materialise(dd, hq);
	while ((rq = rq_list_first_rq(list))) {
		rq_list_del_init(&rq->queuelist);
		rq->elv_priv[0] = NULL;
		if (dl_mergeable(rq) && rq_sched_try_insert_merge(q, rq, &free_list))
			continue;
		dl_add(dd, rq, now);
	}
	rq_spin_unlock(&hq->lock);
	while ((rq = rq_list_first_rq(&free_list))) {
		rq_list_del_init(&rq->queuelist);
		rq_sched_free_request(rq);
	}
}

/*
 * The next request for @hq: the head-inserted ones first, then an aged
 * lower-class request, then the highest class with work (batch,
 * direction, deadline: see the top of the file); out of all our
 * structures.  Sector order goes on from the start of the request sent,
 * per class and direction (head-inserted ones included, as the kernel's
 * latest_pos).  NULL when none is queued.  hq->lock held.
 */
static struct rq_request *dl_dispatch_locked(struct dl_data *dd, struct dl_hctx_queue *hq,
					     struct dl_clock *clk)
{
	struct rq_request *rq, *next = NULL;
	struct dl_prio_queue *pq;
	enum dl_dir dir;

	rq = rq_list_first_rq(&hq->dispatch);
	if (rq) {
		rq_list_del_init(&rq->queuelist);
		dl_count(hq, -1);
		pq = &hq->prio[dl_prio_of(rq->ioprio)];
		dir = dl_dir_of(rq->op);
		pq->latest_pos[dir] = rq->sector;
		pq->next_hint[dir] = NULL;
		return rq;
	}
	rq = dl_aged_request(dd, hq, clk);
	/*
	 * The first class with requests queued (the kernel asks each class
	 * in turn; one with nothing queued answers nothing and changes
	 * nothing, so it is passed over here without asking).
	 */
	for (unsigned p = DL_PRIO_RT; !rq && p < DL_NR_PRIOS; p++) {
		if (hq->prio[p].nr_queued) {
			rq = dl_choose_in_prio(dd, hq, p, clk, false, 0);
			break;
		}
	}
	if (!rq)
		return NULL;
	pq = dl_pq(rq);
	dir = dl_dir_of(rq->op);
	/* the first request at or after rq's start once rq is gone */
	if (dl_in_run(rq)) {
		next = dl_sorted_latter(rq);
	} else {
		struct rq_request *prev = rq_sched_rb_former(rq);

		if (!prev || prev->sector < rq->sector)
			next = rq_sched_rb_latter(rq);
	}
	dl_remove(dd, rq);
	pq->latest_pos[dir] = rq->sector;
	pq->next_hint[dir] = next;
	return rq;
}

/**
 * dl_dispatch_request() - the next request for @hctx (dl_dispatch_locked).
 * Context: dispatcher of @hctx (one at a time); takes hq->lock.
 * Return: the request, out of all our structures; NULL when none is queued.
 */
static struct rq_request *dl_dispatch_request(struct rq_hw_ctx *hctx)
{
	struct dl_data *dd = dl_of(rq_hctx_queue(hctx));
	struct dl_hctx_queue *hq = dl_hq(dd, hctx);
	struct dl_clock clk = { 0, false };
	struct rq_request *rq;

	if (!READ_ONCE(hq->nr_queued))
		return NULL;
	dl_lock(&hq->lock);
	rq = dl_dispatch_locked(dd, hq, &clk);
	rq_spin_unlock(&hq->lock);
	return rq;
}

/*
 * The one class queue of @hq with requests queued, or NULL when none or
 * several have some; lock held.
 */
static struct dl_prio_queue *dl_only_class(struct dl_hctx_queue *hq)
{
	struct dl_prio_queue *only = NULL;

	for (unsigned p = 0; p < DL_NR_PRIOS; p++) {
		if (!hq->prio[p].nr_queued)
			continue;
		if (only)
			return NULL;
		only = &hq->prio[p];
	}
	return only;
}

/*
 * Chain up to @room (>= 1) entries of @rqs, those of the bits of *@left
 * (not 0) from the lowest up, after *@tail, each out of the FIFO and no
 * longer ours; their bits leave *@left and *@tail becomes the last one's
 * link.  The list is left open (its owner closes it once: no
 * re-initialising of links about to be overwritten).  Return: how many.
 */
static inline __attribute__((always_inline)) unsigned
dl_run_chain(struct rq_request *const *rqs, uint64_t *left, struct rq_list_node **tail,
	     unsigned room)
{
	uint64_t l = *left;
	struct rq_list_node *t = *tail;
	unsigned n = room;

	do {
		struct rq_request *rq = rqs[__builtin_ctzll(l)];
		struct rq_list_node *node = &rq->queuelist;
		struct rq_list_node *next = node->next, *prev = node->prev;

		l &= l - 1;
		rq->elv_priv[0] = NULL;
		next->prev = prev;
		prev->next = next;
		node->prev = t;
		t->next = node;
		t = node;
	} while (l && --n);
	*left = l;
	*tail = t;
	return room - n + !l;
}

/*
 * The bookkeeping of @n entries of @pq's run of @dir taken, once for all
 * of them (what dl_run_del() does per entry): @live the live entries
 * left, @left those after @last, the last one taken (@run_first: its bit
 * goes with it).  Lock held.
 */
static inline void dl_run_took(struct dl_hctx_queue *hq, struct dl_prio_queue *pq, enum dl_dir dir,
			       unsigned n, uint64_t live, uint64_t left,
			       const struct rq_request *last)
{
	struct dl_run *run = &pq->run[dir];

	pq->latest_pos[dir] = last->sector;
	run->live_mask = live;
	run->live -= n;
	if (!run->live) {
		run->head = run->len = 0;
		hq->nr_runs--;
	} else {
		run->head = (unsigned)__builtin_ctzll(live);
	}
	pq->next_hint[dir] = left ? run->rq[__builtin_ctzll(left)] : NULL;
	pq->nr_queued -= n;
}

/*
 * Take up to @max requests of the run of @pq and @dir onto @list in sector
 * order, from its hint (not NULL) on, as part of the batch in progress.
 * Lock held.  Return: how many.
 */
static unsigned dl_run_take(struct dl_hctx_queue *hq, struct dl_prio_queue *pq, enum dl_dir dir,
			    struct rq_list_node *list, unsigned max)
{
	struct dl_run *run = &pq->run[dir];
	struct rq_list_node *tail = list->prev;
	uint64_t from = ~0ull << dl_run_index(pq->next_hint[dir]);
	uint64_t live = run->live_mask, left = live & from;
	unsigned n;

	if (!left || !max)
		return 0;
	n = dl_run_chain(run->rq, &left, &tail, max);
	tail->next = list;
	list->prev = tail;
	live = (live & ~from) | left;
	dl_run_took(hq, pq, dir, n, live, left, RQ_CONTAINER_OF(tail, struct rq_request, queuelist));
	hq->batching += n;
	return n;
}

/*
 * dl_dispatch_run_streak()'s loop when the other direction of @pq has
 * nothing queued either, @rq (an entry of @pq's run of @dir) its first
 * request: every batch decision until @max are taken or the run is empty
 * is then foregone (dl_streak_next()'s: continue the batch with the next
 * live entry, else a new batch of @dir at the next live entry if the batch
 * is full and the FIFO head not due, else at the FIFO head), so they are
 * made here from the live mask, the batch count kept in a register and
 * the run's bookkeeping done once.  A new write batch leaves the
 * starvation count as it is: only a read batch raises it, and one of @dir
 * started last, so when that is writes it is 0 already.  Lock held.
 * Return: how many (>= 1).
 */
static unsigned dl_run_streak_alone(struct dl_hctx_queue *hq, struct dl_prio_queue *pq,
				    enum dl_dir dir, struct rq_list_node *list, unsigned max,
				    struct dl_clock *clk, unsigned fifo_batch, struct rq_request *rq)
{
	struct dl_run *run = &pq->run[dir];
	struct rq_list_node *tail = list->prev;
	uint64_t live = run->live_mask, left, from;
	unsigned batching = hq->batching, n = 0, start = dl_run_index(rq);

	for (;;) {
		unsigned room = min_t(unsigned, max - n, fifo_batch - batching), k;

		from = ~0ull << start;
		left = live & from;
		k = dl_run_chain(run->rq, &left, &tail, room);
		n += k;
		batching += k;
		live = (live & ~from) | left;
		if (n == max || !live)
			break;
		if (batching < fifo_batch && left) {
			start = (unsigned)__builtin_ctzll(left); /* the batch goes on */
			continue;
		}
		/* a new batch of @dir (the other direction has nothing queued) */
		if (batching >= fifo_batch && left && dl_now(clk) < run->due)
			start = (unsigned)__builtin_ctzll(left);
		else
			start = dl_run_index(dl_fifo_head(pq, dir));
		batching = 0; /* (a write batch's starvation count is 0 already) */
	}
	tail->next = list;
	list->prev = tail;
	dl_run_took(hq, pq, dir, n, live, left, RQ_CONTAINER_OF(tail, struct rq_request, queuelist));
	hq->batching = batching;
	return n;
}

/*
 * The request dl_choose_in_prio() would choose next in @dir (the last
 * batch's direction) for @pq, the only class queued, whose requests of
 * @dir are all in a run, if the choice is foregone; NULL when the full
 * decision is needed.  While the batch has room, the first request at or
 * after the last one sent continues it.  Otherwise (room or successor
 * gone) a new batch starts, foregone when the other direction has nothing
 * queued (writes_starved then has nothing to weigh; a write batch resets
 * the starvation count, as the decision does): at the FIFO head if it is
 * due or nothing lies further up, else in sector order.  The batch state
 * moves as the decision moves it.  Lock held.
 */
static struct rq_request *dl_streak_next(struct dl_hctx_queue *hq, struct dl_prio_queue *pq,
					 enum dl_dir dir, struct dl_clock *clk, unsigned fifo_batch)
{
	struct rq_request *rq = NULL, *head;

	if (hq->batching < fifo_batch) {
		rq = dl_next_sorted(pq, dir);
		if (rq)
			return rq;
	}
	if (!rq_list_empty(&pq->fifo[dir == DL_READ ? DL_WRITE : DL_READ]))
		return NULL;
	head = dl_fifo_head(pq, dir);
	if (hq->batching >= fifo_batch)
		rq = dl_next_sorted(pq, dir);
	if (!rq || dl_now(clk) >= pq->run[dir].due) /* @head is in the run */
		rq = head;
	if (dir == DL_WRITE)
		hq->starved = 0;
	hq->batching = 0;
	return rq;
}

/*
 * Requests taken straight from a sorted run: up to @max onto @list, the
 * ones dl_dispatch_locked() would give, in its order, while nothing but
 * the batch can decide.  That holds while nothing was inserted at the
 * head, one class alone has requests queued (no aging, no higher class)
 * and the last batch's direction's requests of that class are a run; the
 * next request is then dl_streak_next()'s, and after it, within the
 * batch's room (fifo_batch), the next live entry of the run, because a
 * run's sectors strictly ascend.  So a request costs its unlinking
 * instead of a full decision.  Lock held.
 * Return: how many (0 when the decision is not foregone).
 */
static unsigned dl_dispatch_run_streak(struct dl_data *dd, struct dl_hctx_queue *hq,
				       struct rq_list_node *list, unsigned max,
				       struct dl_clock *clk)
{
	enum dl_dir dir = hq->last_dir;
	unsigned fifo_batch = READ_ONCE(dd->fifo_batch), n = 0;
	struct dl_prio_queue *pq = dl_only_class(hq);

	if (!DL_USE_RUNS || !pq || !rq_list_empty(&hq->dispatch))
		return 0;
	while (n < max && pq->run[dir].len) {
		struct rq_request *rq = dl_streak_next(hq, pq, dir, clk, fifo_batch);

		if (!rq)
			break;
		if (rq_list_empty(&pq->fifo[dir == DL_READ ? DL_WRITE : DL_READ])) {
			n += dl_run_streak_alone(hq, pq, dir, list, max - n, clk, fifo_batch, rq);
			break;
		}
		pq->next_hint[dir] = rq;
		n += dl_run_take(hq, pq, dir, list,
				 min_t(unsigned, max - n, fifo_batch - hq->batching));
	}
	if (n)
		dl_count(hq, -(int)n);
	return n;
}

/**
 * dl_dispatch_requests() - up to @max requests for @hctx onto @list, the
 * same ones, in the same order, as @max dl_dispatch_request() calls; the
 * decisions of one batch share one reading of the clock, and the rest of
 * a batch served from a sorted run is taken without deciding again
 * (dl_dispatch_run_streak()).
 * Context: dispatcher of @hctx; takes hq->lock once.
 * Return: how many.
 */
static unsigned dl_dispatch_requests(struct rq_hw_ctx *hctx, struct rq_list_node *list,
				     unsigned max)
{
	struct dl_data *dd = dl_of(rq_hctx_queue(hctx));
	struct dl_hctx_queue *hq = dl_hq(dd, hctx);
	struct dl_clock clk = { 0, false };
	struct rq_request *rq;
	unsigned n = 0;

	if (!READ_ONCE(hq->nr_queued))
		return 0;
	dl_lock(&hq->lock);
	while (n < max) {
		n += dl_dispatch_run_streak(dd, hq, list, max - n, &clk);
		if (n == max || !(rq = dl_dispatch_locked(dd, hq, &clk)))
			break;
		rq_list_add_tail(&rq->queuelist, list);
		n++;
	}
	rq_spin_unlock(&hq->lock);
	return n;
}

/**
 * dl_has_work() - anything queued for @hctx?
 * Context: dispatcher of @hctx; lock-free.
 */
static bool dl_has_work(struct rq_hw_ctx *hctx)
{
	struct dl_data *dd = dl_of(rq_hctx_queue(hctx));

	return READ_ONCE(dl_hq(dd, hctx)->nr_queued) != 0;
}

/* ---------------------------------------------------- attribute table */

/*
 * Parse all of @buf as a decimal in [@min, @max] (one trailing newline
 * allowed).  Return 0 or -EINVAL.
 */
static int dl_parse_uint(const char *buf, unsigned min, unsigned max, unsigned *out)
{
	unsigned long v;

	if (rq_sched_parse_uint(buf, min, max, &v))
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

static int dl_show_uint(unsigned v, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%u\n", v);

	return n < 0 || (size_t)n >= len ? -ENOSPC : n;
}

/* One show/store pair per tunable (lock-free: see the table at the top). */
#define DL_ATTR(name, min, max)							\
	static int dl_show_##name(void *data, char *buf, size_t len)		\
	{									\
		struct dl_data *dd = data;					\
										\
		return dl_show_uint(READ_ONCE(dd->name), buf, len);		\
	}									\
	static int dl_store_##name(void *data, const char *buf)			\
	{									\
		struct dl_data *dd = data;					\
		unsigned v;							\
										\
		if (dl_parse_uint(buf, (min), (max), &v))			\
			return -EINVAL;						\
		WRITE_ONCE(dd->name, v);					\
		return 0;							\
	}

DL_ATTR(read_expire_ms, 0, INT_MAX)
DL_ATTR(write_expire_ms, 0, INT_MAX)
DL_ATTR(writes_starved, 0, INT_MAX)
DL_ATTR(front_merges, 0, 1)
DL_ATTR(fifo_batch, 1, INT_MAX)
DL_ATTR(prio_aging_expire_ms, 0, INT_MAX)

/* async_depth: 1..nr_requests, the depth in force. */
static int dl_show_async_depth(void *data, char *buf, size_t len)
{
	struct dl_data *dd = data;

	return dl_show_uint(READ_ONCE(dd->async_depth), buf, len);
}

static int dl_store_async_depth(void *data, const char *buf)
{
	struct dl_data *dd = data;
	unsigned v;

	if (dl_parse_uint(buf, 1, rq_queue_nr_requests(dd->q), &v))
		return -EINVAL;
	WRITE_ONCE(dd->async_depth, v);
	return 0;
}

static const struct rq_elv_attr dl_attrs[] = {
	{ "read_expire", dl_show_read_expire_ms, dl_store_read_expire_ms },
	{ "write_expire", dl_show_write_expire_ms, dl_store_write_expire_ms },
	{ "writes_starved", dl_show_writes_starved, dl_store_writes_starved },
	{ "front_merges", dl_show_front_merges, dl_store_front_merges },
	{ "fifo_batch", dl_show_fifo_batch, dl_store_fifo_batch },
	{ "async_depth", dl_show_async_depth, dl_store_async_depth },
	{ "prio_aging_expire", dl_show_prio_aging_expire_ms, dl_store_prio_aging_expire_ms },
	{ NULL, NULL, NULL },
};

/* ------------------------------------------------------------------ type */

extern const struct rq_elevator_type rq_mq_deadline_type;
const struct rq_elevator_type rq_mq_deadline_type = {
	RQ_ELV_TYPE_INIT,
	.name = DL_TYPE_NAME,
	.features = RQ_ELV_F_MQ,
	.ops = {
		.init_sched = dl_init_sched,
		.exit_sched = dl_exit_sched,
		.depth_updated = dl_depth_updated,
		.limit_depth = dl_limit_depth,
		.bio_merge = dl_bio_merge,
		.request_merge = dl_request_merge,
		.request_merged = dl_request_merged,
		.requests_merged = dl_requests_merged,
		.insert_requests = dl_insert_requests,
		.dispatch_request = dl_dispatch_request,
		.has_work = dl_has_work,
		.former_request = dl_former_request,
		.next_request = dl_next_request,
	},
	.attrs = dl_attrs,
	.dispatch_requests = dl_dispatch_requests,
};
