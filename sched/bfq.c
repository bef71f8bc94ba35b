/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * bfq: budget fair queueing for the multi-queue front end.
 *
 * Every io context gets a queue of its own (one for its sync requests, one
 * for its async ones).  A queue is served in turns: when its turn comes it
 * is the "in-service" queue and gets the device exclusively until it has
 * used its budget (a number of sectors), until its turn has lasted
 * timeout_sync, until it has nothing left to send, or until a queue that
 * becomes busy preempts it (higher class or weight, or an in-service queue
 * not worth idling for: bfqq_should_preempt()).  Which queue comes
 * next is decided by B-WF2Q+ over budgets: every busy queue carries a
 * virtual start time S and finish time F = S + budget / weight in the
 * virtual time of its io group, and the next turn goes to the eligible
 * queue (S <= the group's virtual time V) with the smallest F.  Groups are
 * scheduled the same way one level up, in the root group, by their own
 * weights; a group's turn is the turn of the queue it chooses.  Queues are
 * charged what they received (sectors), not time, except that a queue whose
 * turn timed out is charged at least its whole budget.
 *
 * A sync queue that empties while it is not seeky keeps its turn for
 * slice_idle, waiting for the context's next request (a process reading a
 * file sequentially issues the next read as soon as the last one ends):
 * has_work then answers false and a delayed run of the hardware queue comes
 * back when the window ends.
 *
 * Classes RT, BE and IDLE (from the context's priority) are served in
 * strict order inside each group.  With low_latency, queues that look
 * interactive (a context that starts doing I/O after being quiet for
 * a while) or soft real-time (one that comes back periodically and asks
 * for little bandwidth) have their weight multiplied for a while.  Async
 * requests and sync writes may hold only part of the scheduler tags
 * (bfq_limit_depth()), so reads always find some.
 *
 * A plug's batch of one queue, inserted where that queue has nothing, is
 * sorted once into an array, a tree only if something walks it
 * (bfq_insert_run(), bfqq_sort()), and its hash entries go in when the
 * hash is next used (sched_hash_flush()); a turn's requests are
 * dispatched from that sorted array (sched_drain_in_turn()), charged
 * once per batch with the same arithmetic: the same requests in the same
 * order and the same state as inserting and dispatching them one at a
 * time, with the work that depends on arrival order (FIFO, seek history)
 * still per request.
 *
 * With several hardware queues each has a scheduler of its own (queues,
 * groups, virtual times, and the peak-rate estimate behind the automatic
 * max_budget): a request is only ever dispatched on its own hardware
 * queue.  Each has its own lock (the core's back-merge hash and
 * last_merge are per hardware queue too), so submitters and dispatchers of
 * different hardware queues share no lock.
 *
 * Locking: bs->lock (a test-and-set word, struct bfq_lock) guards the state
 * of its hardware queue's scheduler.  The tunables are written with every
 * bs->lock held (in index order) and read under any one of them.  Each
 * hold ends in sched_unlock(), which publishes bs->ready for has_work.
 *
 *   operation                                    lock
 *   limit_depth                                  none (READ_ONCE of the
 *                                                depths and bs->wr_busy)
 *   prepare_request                              none (the queue is found
 *                                                at the first insert)
 *   insert_requests, dispatch_request(s),        takes the bs->lock of the
 *   completed_request (which also unpins),       request's (or hctx's)
 *   finish_request, requeue_request              hardware queue, once per call
 *   has_work                                     none when bs->ready or
 *                                                nothing is queued, else
 *                                                that bs->lock
 *   bio_merge                                    takes the bs->lock of the
 *                                                hardware queue the bio maps
 *                                                to and calls
 *                                                rq_sched_try_merge() under it
 *   request_merge, request_merged,               called back by the core from
 *   requests_merged, former/next_request,        rq_sched_try_merge() /
 *   allow_merge                                  rq_sched_try_insert_merge(),
 *                                                i.e. with that bs->lock held
 *   attribute store                              takes every bs->lock
 *   attribute show                               takes the first bs->lock
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
#include "lib/internal/clock.h"
#include "lib/internal/mq.h"
#include "lib/internal/ioc.h"

/* ------------------------------------------------------ tunable defaults */

#define BFQ_SLICE_IDLE_US 8000          /* us a sync queue's turn waits for its next request */
#define BFQ_LOW_LATENCY 1               /* 1: raise interactive / soft real-time queues */
#define BFQ_BACK_SEEK_MAX_KIB 16384     /* KiB behind the head a request may still be chosen */
#define BFQ_BACK_SEEK_PENALTY 2         /* a backward seek counts this many times its length */
#define BFQ_FIFO_EXPIRE_SYNC_MS 125     /* ms until a sync request is served out of order */
#define BFQ_FIFO_EXPIRE_ASYNC_MS 250    /* ms until an async request is */
#define BFQ_TIMEOUT_SYNC_MS 125         /* ms a turn may last */
#define BFQ_MAX_BUDGET 0                /* sectors per turn at most; 0: automatic */
#define BFQ_STRICT_GUARANTEES 0         /* 1: always idle, one request in flight */

/* ------------------------------------------------------ fixed parameters */

#define BFQ_DEFAULT_MAX_BUDGET 16384u   /* sectors, until a rate is measured */
#define BFQ_AUTO_BUDGET_MIN 1024u       /* sectors: bounds of the automatic value */
#define BFQ_AUTO_BUDGET_MAX 131072u
#define BFQ_MIN_BUDGET_SHIFT 5          /* smallest budget: max_budget / 32 */
#define BFQ_SEEK_THR 800u               /* sectors from the last request: a seek */
#define BFQ_SEEKY_MIN 4                 /* more seeks than this in the last 32: seeky */
#define BFQ_VT_SHIFT 20                 /* fixed-point bits of virtual time */
#define BFQ_WR_COEFF 30                 /* weight multiplier while raised */
#define BFQ_WR_MIN_IDLE_NS 2000000000ull   /* quiet this long, then busy: interactive */
#define BFQ_WR_INTERACTIVE_NS 4000000000ull /* how long interactive raising lasts */
#define BFQ_WR_SOFTRT_NS 300000000ull   /* how long soft real-time raising lasts */
#define BFQ_SOFTRT_RATE 7000ull         /* sectors/s a soft real-time queue stays below */
#define BFQ_RATE_WINDOW_NS 20000000ull  /* peak-rate sampling window */
#define BFQ_RECLAIM_NS 5000000000ull    /* unused queues of live contexts kept this long */
#define BFQ_HASH_BITS 6
#define BFQ_RUN_MAX 64                  /* requests in a sorted run at most (6 bits) */
#define BFQ_NR_CLASSES 3                /* RT, BE, IDLE */

#define NSEC_PER_MSEC 1000000ull
#define NSEC_PER_USEC 1000ull
#define NSEC_PER_SEC 1000000000ull

/* rq->elv_priv[1]: flags in the low bits, the sectors dispatched above */
#define BFQ_RQ_QUEUED 1ul      /* in its bfq queue (fifo + sort tree) */
#define BFQ_RQ_HEAD 2ul        /* on the scheduler's head-insert list */
#define BFQ_RQ_DISPATCHED 4ul  /* handed out, completion not seen yet */
#define BFQ_RQ_SECTOR_SHIFT 8

/* Why a turn ends (decides the next budget). */
enum bfq_expire {
	BFQ_EXP_EMPTY,      /* nothing left, and no (more) reason to wait */
	BFQ_EXP_EXHAUSTED,  /* the next request did not fit the budget */
	BFQ_EXP_TIMEOUT,    /* the turn lasted timeout_sync */
	BFQ_EXP_PREEMPTED,  /* idling, and a more urgent queue became busy */
};

/* ------------------------------------------------------- data structures */

/*
 * struct bfq_lock - the scheduler lock of one hardware queue: a
 * test-and-set word, as short and mostly uncontended as the kernel's
 * bfqd->lock spinlock it stands for (a mutex cost three times the
 * instructions per request).  A waiter spins a while, then yields, so a
 * holder the kernel preempted gets the CPU back; nothing under it blocks.
 */
struct bfq_lock {
	atomic_int v;
};

#define BFQ_LOCK_SPINS 128      /* pauses before a waiter starts yielding */

static void bfq_lock_slow(struct bfq_lock *l)
{
	for (unsigned spins = 0;; spins++) {
		if (!atomic_load_explicit(&l->v, memory_order_relaxed) &&
		    !atomic_exchange_explicit(&l->v, 1, memory_order_acquire))
			return;
		if (spins < BFQ_LOCK_SPINS)
			cpu_relax();
		else
			sched_yield();
	}
}

static inline void bfq_lock(struct bfq_lock *l)
{
	if (likely(!atomic_exchange_explicit(&l->v, 1, memory_order_acquire)))
		return;
	bfq_lock_slow(l);
}

static inline void bfq_unlock(struct bfq_lock *l)
{
	atomic_store_explicit(&l->v, 0, memory_order_release);
}

struct bfq_group;

/*
 * struct bfq_entity - something B-WF2Q+ schedules: a queue, or a group
 * inside the root group.
 */
struct bfq_entity {
	uint64_t start;          /* virtual start time */
	uint64_t finish;         /* virtual finish time */
	uint32_t budget;         /* sectors it may receive in this turn */
	uint32_t service;        /* sectors received since start */
	unsigned weight;         /* weight in force (raising included) */
	uint8_t cls;             /* 0 RT, 1 BE, 2 IDLE */
	bool on_st;              /* on its level's active list */
	bool finish_valid;       /* @finish survives a deactivation */
	struct rq_list_node node; /* on the level's active list */
	struct bfq_group *parent; /* the group it is scheduled in */
	struct bfq_group *group; /* the group it stands for, NULL for a queue */
};

/* struct bfq_level - the active entities of one class of one group. */
struct bfq_level {
	struct rq_list_node active;
	uint64_t vtime;          /* the level's virtual time V */
	uint64_t wsum;           /* sum of active weights */
	unsigned nr;
	/* the last charge's vt_delta(), kept: a division per request is slow */
	unsigned charge_sectors;
	uint64_t charge_wsum, charge_delta;
};

struct bfq_group {
	struct bfq_entity entity; /* in the root group; unused by the root */
	struct bfq_level lv[BFQ_NR_CLASSES];
	struct rq_io_group *iog; /* referenced; NULL for the root */
	unsigned nr_queues;      /* bfq queues attached */
	unsigned nr_active;      /* active children */
	struct rq_list_node link; /* bs->groups */
};

struct bfq_sched;

struct bfq_queue {
	struct bfq_entity entity;
	struct bfq_sched *bs;
	struct rq_io_context *ioc; /* referenced; NULL for the fallback queue */
	struct bfq_queue *hash_next;
	unsigned ref;            /* prepared requests */
	bool sync;
	bool seeky_known;        /* a first request was seen (seek history valid) */
	bool ever_busy;
	bool fifo_checked;       /* the FIFO was looked at in this turn */
	struct rq_request *next_rq; /* the request it sends next (bfq_choose_req rules) */
	unsigned ioc_gen;        /* ioc_group_gen() the group was taken at */
	struct rq_rb_root sort;  /* queued requests by sector (see @run) */
	struct rq_list_node fifo; /* queued requests by arrival */
	unsigned queued;
	unsigned dispatched;     /* handed out, not completed */
	uint64_t last_end;       /* end sector of the last request inserted */
	uint32_t seek_history;   /* 1 bits: the last 32 arrivals that seeked */
	unsigned nr_seeks;       /* 1 bits in seek_history (kept, not counted) */
	uint32_t max_budget;     /* budget of its next turn */
	uint64_t budget_timeout; /* ns; 0 until the turn's first dispatch */
	uint64_t last_used;      /* ns of the last request made for it */
	/* weight raising */
	unsigned wr_coeff;       /* 1, or BFQ_WR_COEFF while raised */
	bool wr_counted;         /* counted in bs->wr_busy (busy and raised) */
	uint64_t wr_end;         /* ns the raising ends */
	uint64_t last_empty;     /* ns it last had nothing queued */
	uint64_t busy_start;     /* ns it last became busy */
	uint64_t burst_sectors;  /* sectors dispatched since then */
	uint64_t softrt_next;    /* ns from which a new burst counts as soft real-time */
	/*
	 * While @run_n is not 0 the queued requests are run[0, run_n) in
	 * sector order and @sort is empty: the tree is built only when
	 * something walks it (bfqq_sort()); a plug's run that is drained
	 * whole is never built.  @run_next: where @next_rq was last seen in
	 * run[] (a hint: drain_index() checks it).
	 */
	unsigned run_n;
	unsigned run_next;
	struct rq_request *run[BFQ_RUN_MAX];
};

/* struct bfq_sched - the scheduler of one hardware queue. */
struct bfq_sched {
	struct bfq_lock lock;         /* guards everything below (see the top) */
	struct bfq_data *bd;
	struct rq_hw_ctx *hctx;
	struct bfq_group root;
	struct rq_list_node groups;   /* other groups */
	struct bfq_queue *hash[1u << BFQ_HASH_BITS];
	struct bfq_queue *last_hit;   /* lookup cache */
	struct bfq_queue *in_service;
	struct rq_list_node head_list; /* RQ_INSERT_AT_HEAD requests: go first */
	unsigned queued;              /* requests in bfq queues; READ_ONCE outside the lock */
	unsigned nr_head;             /* requests on head_list; READ_ONCE outside the lock */
	bool ready;                   /* has_work's answer needs no lock: see sched_unlock() */
	unsigned wr_busy;             /* busy raised queues; READ_ONCE outside the lock */
	struct bfq_queue *hash_pending; /* its run is not in the merge hash yet: sched_hash_flush() */
	unsigned in_flight;           /* handed out, not completed */
	uint64_t head_pos;            /* end sector of the last dispatch */
	bool idling;
	uint64_t idle_end;
	struct bfq_queue oom_q;       /* used when a queue cannot be allocated */
	/* automatic max_budget: peak completion rate of this hardware queue */
	uint64_t rate_t0;
	uint64_t rate_sectors;
	uint64_t peak_rate;           /* sectors per ns << 32 */
	unsigned auto_budget;
} rq_cacheline_aligned;

struct bfq_data {
	struct rq_queue *q;
	unsigned nr_sched;
	struct bfq_sched *sched;
	unsigned inflight_cap;        /* device depth + 1: see sched_ready() */
	/* scheduler tags async I/O may hold: [a raised queue is busy][sync write] */
	unsigned async_depths[2][2];
	/* tunables */
	unsigned slice_idle_us;
	unsigned low_latency;
	unsigned back_seek_max_kib;
	unsigned back_seek_penalty;
	unsigned fifo_expire_sync_ms;
	unsigned fifo_expire_async_ms;
	unsigned timeout_sync_ms;
	unsigned max_budget;          /* as set; 0: automatic */
	unsigned strict_guarantees;
};

/* --------------------------------------------------------------- helpers */

static struct bfq_data *bfq_of(struct rq_queue *q)
{
	return rq_sched_data(q);
}

static struct bfq_sched *sched_of_hctx(struct bfq_data *bd, const struct rq_hw_ctx *hctx)
{
	unsigned i = rq_hctx_index(hctx);

	return &bd->sched[i < bd->nr_sched ? i : 0];
}

static struct bfq_queue *rq_bfqq(const struct rq_request *rq)
{
	return rq->elv_priv[0];
}

static unsigned long rq_bits(const struct rq_request *rq)
{
	return (unsigned long)(uintptr_t)rq->elv_priv[1];
}

static void rq_set_bits(struct rq_request *rq, unsigned long v)
{
	rq->elv_priv[1] = (void *)(uintptr_t)v;
}

static bool rq_is_sync(const struct rq_request *rq)
{
	return rq->op == RQ_OP_READ || (rq->opf & RQ_BIO_SYNC);
}

static bool bio_is_sync(const struct rq_bio *bio)
{
	return bio->op == RQ_OP_READ || (bio->opf & RQ_BIO_SYNC);
}

/* Virtual-time wrap-safe comparison: a after b. */
static bool vt_after(uint64_t a, uint64_t b)
{
	return (int64_t)(a - b) > 0;
}

/* Virtual time @sectors of service takes at @weight. */
static uint64_t vt_delta(uint64_t sectors, uint64_t weight)
{
	return (sectors << BFQ_VT_SHIFT) / (weight ? weight : 1);
}

static unsigned max_budget(const struct bfq_sched *bs)
{
	return bs->bd->max_budget ? bs->bd->max_budget : bs->auto_budget;
}

static unsigned min_budget(const struct bfq_sched *bs)
{
	unsigned m = max_budget(bs) >> BFQ_MIN_BUDGET_SHIFT;

	return m < 8 ? 8 : m;
}

static uint64_t slice_idle_ns(const struct bfq_data *bd)
{
	return (uint64_t)bd->slice_idle_us * NSEC_PER_USEC;
}

/* Frozen (or dying): no request can arrive, so waiting for one is useless. */
static bool queue_frozen(const struct bfq_data *bd)
{
	return rq_queue_frozen(bd->q);
}

static bool bfqq_busy(const struct bfq_queue *bfqq)
{
	return bfqq->entity.on_st;
}

static bool bfqq_seeky(const struct bfq_queue *bfqq)
{
	return bfqq->nr_seeks > BFQ_SEEKY_MIN;
}

/*
 * References bfq instances hold on an io context, counted in the context's
 * scheduler slot BFQ_IOC_SLOT (lib/internal/ioc.h: slots are the
 * schedulers').  A context whose references are all bfq's has been
 * released by the application: its process, in the kernel's terms, has
 * exited (bfqq_process_refs() is 0), and bfq no longer idles for it.
 */
#define BFQ_IOC_SLOT 1

static void bfq_ioc_get(struct rq_io_context *ioc)
{
	rq_ioc_get(ioc);
	__atomic_fetch_add((uintptr_t *)&ioc->sched_priv[BFQ_IOC_SLOT], 1, __ATOMIC_RELAXED);
}

static void bfq_ioc_put(struct rq_io_context *ioc)
{
	if (!ioc)
		return;
	__atomic_fetch_sub((uintptr_t *)&ioc->sched_priv[BFQ_IOC_SLOT], 1, __ATOMIC_RELAXED);
	rq_ioc_put(ioc);
}

/* Has the application let go of @bfqq's context (only bfq holds it)? */
static bool bfqq_ioc_gone(const struct bfq_queue *bfqq)
{
	const struct rq_io_context *ioc = bfqq->ioc;

	return ioc && ioc_refs(ioc) <=
		      __atomic_load_n((const uintptr_t *)&ioc->sched_priv[BFQ_IOC_SLOT],
				      __ATOMIC_RELAXED);
}

static unsigned ioc_class(const struct rq_io_context *ioc)
{
	unsigned c = ioc ? RQ_IOPRIO_CLASS(rq_ioc_prio(ioc)) : RQ_IOPRIO_CLASS_BE;

	return c == RQ_IOPRIO_CLASS_RT ? 0 : c == RQ_IOPRIO_CLASS_IDLE ? 2 : 1;
}

/*
 * Keep bs->wr_busy (the kernel's wr_busy_queues) equal to the number of
 * busy queues whose weight is raised: bfq_limit_depth() gives async I/O
 * fewer tags while there is one.  Called after @bfqq's busy state or
 * raising changed; lock held.
 */
static void bfqq_wr_account(struct bfq_queue *bfqq)
{
	bool on = bfqq_busy(bfqq) && bfqq->wr_coeff > 1;

	if (on == bfqq->wr_counted)
		return;
	bfqq->wr_counted = on;
	WRITE_ONCE(bfqq->bs->wr_busy, bfqq->bs->wr_busy + (on ? 1u : -1u));
}

/* The queue's weight now: the context's (or its priority's), raised or not. */
static unsigned bfqq_weight(const struct bfq_data *bd, struct bfq_queue *bfqq, uint64_t now)
{
	const struct rq_io_context *ioc = bfqq->ioc;
	unsigned w;

	if (ioc)
		w = ioc_weight_is_set(ioc) ? ioc_weight(ioc) : ioc_prio_to_weight(rq_ioc_prio(ioc));
	else
		w = ioc_prio_to_weight(RQ_IOC_PRIO_DEFAULT);
	if (bfqq->wr_coeff > 1 && (!READ_ONCE(bd->low_latency) || now >= bfqq->wr_end)) {
		bfqq->wr_coeff = 1;
		bfqq_wr_account(bfqq);
	}
	return w * bfqq->wr_coeff;
}

static unsigned group_weight(const struct bfq_group *g)
{
	return rq_iog_weight(g->iog);
}

/* ------------------------------------------------------------- B-WF2Q+ */

static struct bfq_level *entity_level(struct bfq_entity *e)
{
	return &e->parent->lv[e->cls];
}

static void entity_deactivate(struct bfq_entity *e);

/* Put @e on its level's active list with fresh timestamps. */
static void entity_activate(struct bfq_entity *e)
{
	struct bfq_level *lv = entity_level(e);
	struct bfq_group *g = e->parent;

	if (e->on_st)
		return;
	e->start = e->finish_valid && vt_after(e->finish, lv->vtime) ? e->finish : lv->vtime;
	e->finish = e->start + vt_delta(e->budget, e->weight);
	e->service = 0;
	e->on_st = true;
	rq_list_add_tail(&e->node, &lv->active);
	lv->wsum += e->weight;
	lv->nr++;
	g->nr_active++;
	if (g->entity.parent && !g->entity.on_st) {
		g->entity.budget = e->budget;
		g->entity.weight = group_weight(g);
		entity_activate(&g->entity);
	}
}

/* Take @e off its list, charged with what it received; its group follows when emptied. */
static void entity_deactivate(struct bfq_entity *e)
{
	struct bfq_level *lv = entity_level(e);
	struct bfq_group *g = e->parent;

	if (!e->on_st)
		return;
	e->finish = e->start + vt_delta(e->service, e->weight);
	e->finish_valid = true;
	e->service = 0;
	e->on_st = false;
	rq_list_del_init(&e->node);
	lv->wsum -= e->weight;
	lv->nr--;
	g->nr_active--;
	if (g->entity.parent && !g->nr_active)
		entity_deactivate(&g->entity);
}

/*
 * Charge @e with what it received and start its next turn at its finish
 * time, with @budget and @weight.
 */
static void entity_requeue(struct bfq_entity *e, uint32_t budget, unsigned weight)
{
	struct bfq_level *lv = entity_level(e);

	e->finish = e->start + vt_delta(e->service, e->weight);
	e->service = 0;
	lv->wsum = lv->wsum - e->weight + weight;
	e->weight = weight;
	e->budget = budget;
	e->start = e->finish;
	e->finish = e->start + vt_delta(budget, weight);
}

/*
 * Service: @e (and its group) received @n requests of @sectors each;
 * virtual times advance.  V moves by the last charge's step kept per
 * level, so n charges of one size in a row are n times one step, exactly
 * what n calls for one request each would add.
 */
static void entity_charge_n(struct bfq_entity *e, unsigned sectors, unsigned n)
{
	for (; e && e->parent; e = e->parent->entity.parent ? &e->parent->entity : NULL) {
		struct bfq_level *lv = entity_level(e);

		e->service += sectors * n;
		if (!lv->wsum)
			continue;
		if (sectors != lv->charge_sectors || lv->wsum != lv->charge_wsum) {
			lv->charge_sectors = sectors;
			lv->charge_wsum = lv->wsum;
			lv->charge_delta = vt_delta(sectors, lv->wsum);
		}
		lv->vtime += lv->charge_delta * n;
	}
}

static void entity_charge(struct bfq_entity *e, unsigned sectors)
{
	entity_charge_n(e, sectors, 1);
}

/*
 * The entity of @g to serve next: the highest class with active entities;
 * in it, V moves up to the smallest start time if nothing is eligible, and
 * the eligible entity (S <= V) with the smallest finish time wins.  A
 * linear scan: a group rarely has more than a handful of busy queues, and
 * the scan touches only those.
 */
static struct bfq_entity *group_pick(struct bfq_group *g)
{
	for (unsigned c = 0; c < BFQ_NR_CLASSES; c++) {
		struct bfq_level *lv = &g->lv[c];
		struct bfq_entity *best = NULL;
		struct rq_list_node *n;
		uint64_t min_start = 0;
		bool first = true;

		if (!lv->nr)
			continue;
		for (n = lv->active.next; n != &lv->active; n = n->next) {
			struct bfq_entity *e = RQ_CONTAINER_OF(n, struct bfq_entity, node);

			if (first || vt_after(min_start, e->start))
				min_start = e->start;
			first = false;
		}
		if (vt_after(min_start, lv->vtime))
			lv->vtime = min_start;
		for (n = lv->active.next; n != &lv->active; n = n->next) {
			struct bfq_entity *e = RQ_CONTAINER_OF(n, struct bfq_entity, node);

			if (vt_after(e->start, lv->vtime))
				continue;
			if (!best || vt_after(best->finish, e->finish))
				best = e;
		}
		return best;
	}
	return NULL;
}

static struct bfq_queue *entity_queue(struct bfq_entity *e)
{
	return RQ_CONTAINER_OF(e, struct bfq_queue, entity);
}

/* The queue whose turn comes next: root group first, then inside the chosen group. */
static struct bfq_queue *sched_pick(struct bfq_sched *bs)
{
	struct bfq_group *g = &bs->root;

	for (;;) {
		struct bfq_entity *e = group_pick(g);

		if (!e)
			return NULL;
		if (!e->group)
			return entity_queue(e);
		g = e->group;
	}
}

/* ------------------------------------------------------- queues and groups */

static struct bfq_group *group_find(struct bfq_sched *bs, struct rq_io_group *iog, bool create)
{
	struct bfq_group *g;

	if (!iog)
		return &bs->root;
	for (struct rq_list_node *n = bs->groups.next; n != &bs->groups; n = n->next) {
		g = RQ_CONTAINER_OF(n, struct bfq_group, link);
		if (g->iog == iog)
			return g;
	}
	if (!create)
		return NULL;
	g = mem_zalloc(sizeof(*g));
	if (!g)
		return NULL;
	for (unsigned c = 0; c < BFQ_NR_CLASSES; c++)
		rq_list_init(&g->lv[c].active);
	rq_list_init(&g->entity.node);
	g->entity.parent = &bs->root;
	g->entity.group = g;
	g->entity.cls = 1;
	g->entity.weight = rq_iog_weight(iog);
	rq_iog_get(iog);
	g->iog = iog;
	rq_list_add_tail(&g->link, &bs->groups);
	return g;
}

static void group_put_queue(struct bfq_group *g)
{
	if (--g->nr_queues || !g->iog || g->entity.on_st)
		return;
	rq_list_del_init(&g->link);
	rq_iog_put(g->iog);
	mem_free(g, sizeof(*g));
}

/* Attach @bfqq to the group its context is in now. */
static void bfqq_attach_group(struct bfq_sched *bs, struct bfq_queue *bfqq)
{
	struct rq_io_group *iog = NULL;
	struct bfq_group *g;

	if (bfqq->ioc) {
		bfqq->ioc_gen = ioc_group_gen(bfqq->ioc);
		iog = ioc_group_get(bfqq->ioc);
	}
	g = group_find(bs, iog, true);
	rq_iog_put(iog);
	if (!g)
		g = &bs->root; /* no memory for the group: schedule it at the root */
	g->nr_queues++;
	bfqq->entity.parent = g;
	bfqq->entity.finish_valid = false;
}

static unsigned hash_of(const struct rq_io_context *ioc, bool sync)
{
	uint64_t k = (uint64_t)(uintptr_t)ioc ^ sync;

	return (unsigned)((k * 0x9E3779B97F4A7C15ull) >> (64 - BFQ_HASH_BITS));
}

static void bfqq_init(struct bfq_sched *bs, struct bfq_queue *bfqq, struct rq_io_context *ioc,
		      bool sync, uint64_t now)
{
	bfqq->bs = bs;
	bfqq->ioc = ioc;
	bfqq->sync = sync;
	bfqq->sort.node = NULL;
	rq_list_init(&bfqq->fifo);
	rq_list_init(&bfqq->entity.node);
	bfqq->entity.cls = (uint8_t)ioc_class(ioc);
	bfqq->max_budget = max_budget(bs) / 2;
	bfqq->wr_coeff = 1;
	bfqq->last_used = now;
	bfqq->softrt_next = now;
}

static void bfqq_free(struct bfq_sched *bs, struct bfq_queue *bfqq)
{
	struct bfq_queue **pp = &bs->hash[hash_of(bfqq->ioc, bfqq->sync)];

	while (*pp && *pp != bfqq)
		pp = &(*pp)->hash_next;
	if (*pp)
		*pp = bfqq->hash_next;
	if (bs->last_hit == bfqq)
		bs->last_hit = NULL;
	if (bs->hash_pending == bfqq)
		bs->hash_pending = NULL;
	group_put_queue(bfqq->entity.parent);
	bfq_ioc_put(bfqq->ioc);
	mem_free(bfqq, sizeof(*bfqq));
}

/* Free @bfqq if nothing needs it: no request, not busy, and its context gone or long unused. */
static bool bfqq_reclaimable(struct bfq_sched *bs, struct bfq_queue *bfqq, uint64_t now)
{
	if (bfqq == &bs->oom_q || bfqq->ref || bfqq_busy(bfqq) || bs->in_service == bfqq)
		return false;
	return bfqq_ioc_gone(bfqq) || now - bfqq->last_used > BFQ_RECLAIM_NS;
}

static void sched_reclaim(struct bfq_sched *bs, uint64_t now)
{
	for (unsigned i = 0; i < (1u << BFQ_HASH_BITS); i++) {
		struct bfq_queue *bfqq = bs->hash[i], *next;

		for (; bfqq; bfqq = next) {
			next = bfqq->hash_next;
			if (bfqq_reclaimable(bs, bfqq, now))
				bfqq_free(bs, bfqq);
		}
	}
}

/* The queue of (@ioc, @sync) on @bs, made if @create; moves it to a new group when idle. */
static struct bfq_queue *bfqq_lookup(struct bfq_sched *bs, struct rq_io_context *ioc, bool sync,
				     bool create, uint64_t now)
{
	struct bfq_queue *bfqq = bs->last_hit;
	unsigned h;

	if (!ioc)
		return create ? &bs->oom_q : NULL;
	if (!bfqq || bfqq->ioc != ioc || bfqq->sync != sync) {
		h = hash_of(ioc, sync);
		for (bfqq = bs->hash[h]; bfqq; bfqq = bfqq->hash_next)
			if (bfqq->ioc == ioc && bfqq->sync == sync)
				break;
		if (!bfqq) {
			if (!create)
				return NULL;
			sched_reclaim(bs, now);
			bfqq = mem_zalloc(sizeof(*bfqq));
			if (!bfqq)
				return &bs->oom_q;
			bfq_ioc_get(ioc);
			bfqq_init(bs, bfqq, ioc, sync, now);
			bfqq_attach_group(bs, bfqq);
			bfqq->hash_next = bs->hash[h];
			bs->hash[h] = bfqq;
		}
		bs->last_hit = bfqq;
	}
	if (create && unlikely(bfqq->ioc_gen != ioc_group_gen(ioc)) && !bfqq_busy(bfqq) &&
	    bs->in_service != bfqq) {
		group_put_queue(bfqq->entity.parent);
		bfqq_attach_group(bs, bfqq);
	}
	return bfqq;
}

/* ------------------------------------------------------ requests in a queue */

static void run_build_tree(struct rq_rb_root *root, struct rq_request **v, unsigned n);

/* @bfqq's sorted tree, built first from a pending run (see struct bfq_queue); lock held. */
static struct rq_rb_root *bfqq_sort(struct bfq_queue *bfqq)
{
	if (unlikely(bfqq->run_n)) {
		run_build_tree(&bfqq->sort, bfqq->run, bfqq->run_n);
		bfqq->run_n = 0;
	}
	return &bfqq->sort;
}

/* First request at or after @sector in @root, or NULL. */
static struct rq_request *sort_ceiling(struct rq_rb_root *root, uint64_t sector)
{
	struct rq_rb_node *n = root->node;
	struct rq_request *best = NULL;

	while (n) {
		struct rq_request *rq = RQ_CONTAINER_OF(n, struct rq_request, rb_node);

		if (rq->sector >= sector) {
			best = rq;
			n = n->left;
		} else {
			n = n->right;
		}
	}
	return best;
}

/*
 * Which of @a and @b to serve first from head position @last, as the
 * kernel's bfq_choose_req(): a sync one before an async one, then a
 * metadata one; else the nearer, a request behind @last counting
 * back_seek_penalty times its distance if within back_seek_max, and
 * "wrapped" (after everything not wrapped) if further back; on a tie the
 * higher sector, and of two wrapped ones the lower.  @one_queue: @a and
 * @b are of one bfq queue, so of one kind (sync or not): no need to ask.
 */
static inline __attribute__((always_inline)) struct rq_request *
choose_req_inline(const struct bfq_data *bd, struct rq_request *a, struct rq_request *b,
		  uint64_t last, bool one_queue)
{
	uint64_t back_max = (uint64_t)bd->back_seek_max_kib * 2, d[2] = { 0, 0 };
	struct rq_request *r[2] = { a, b };
	bool wrap[2];

	if (!a || a == b)
		return b;
	if (!b)
		return a;
	if (!one_queue && rq_is_sync(a) != rq_is_sync(b))
		return rq_is_sync(a) ? a : b;
	if ((a->opf & RQ_BIO_META) != (b->opf & RQ_BIO_META))
		return (a->opf & RQ_BIO_META) ? a : b;
	for (unsigned i = 0; i < 2; i++) {
		uint64_t s = r[i]->sector;

		wrap[i] = false;
		if (s >= last)
			d[i] = s - last;
		else if (s + back_max >= last)
			d[i] = (last - s) * bd->back_seek_penalty;
		else
			wrap[i] = true;
	}
	if (wrap[0] != wrap[1])
		return wrap[0] ? b : a;
	if (wrap[0])
		return a->sector <= b->sector ? a : b;
	if (d[0] != d[1])
		return d[0] < d[1] ? a : b;
	return a->sector >= b->sector ? a : b;
}

/* choose_req_inline(), called: inlined only in the per-request drain step. */
static struct rq_request *bfq_choose_req(const struct bfq_data *bd, struct rq_request *a,
					 struct rq_request *b, uint64_t last)
{
	return choose_req_inline(bd, a, b, last, false);
}

/*
 * The request of @bfqq to send after @last, which is about to leave it, as
 * the kernel's bfq_find_next_rq(): the oldest if it is overdue and the FIFO
 * was not looked at yet in this turn (looking counts, overdue or not),
 * else the better of @last's neighbours in sector order, measured from
 * @last's START, the one after wrapping to the first.
 */
static struct rq_request *bfqq_find_next_rq(const struct bfq_data *bd, struct bfq_queue *bfqq,
					    struct rq_request *last, uint64_t now)
{
	struct rq_request *next, *prev, *oldest;

	if (!bfqq->fifo_checked) {
		bfqq->fifo_checked = true;
		oldest = rq_list_first_rq(&bfqq->fifo);
		if (oldest && oldest != last && now >= oldest->fifo_time)
			return oldest;
	}
	prev = rq_sched_rb_former(last);
	next = rq_sched_rb_latter(last);
	if (!next) {
		struct rq_rb_node *first = rq_rb_first(&bfqq->sort);

		if (first && first != &last->rb_node)
			next = RQ_CONTAINER_OF(first, struct rq_request, rb_node);
	}
	return bfq_choose_req(bd, next, prev, last->sector);
}

/* @rq leaves @bfqq's FIFO, the hash and the counts (its tree is the caller's). */
static void bfqq_unqueue(struct rq_queue *q, struct bfq_queue *bfqq, struct rq_request *rq)
{
	rq_list_del_init(&rq->queuelist);
	rq_set_bits(rq, rq_bits(rq) & ~BFQ_RQ_QUEUED);
	if (rq->rq_flags & RQ_RQF_HASHED)
		rq_sched_hash_del(q, rq);
	bfqq->queued--;
	WRITE_ONCE(bfqq->bs->queued, bfqq->bs->queued - 1);
}

/*
 * Take @rq out of its queue (and the hash); @bfqq may empty (the caller
 * decides).  If @rq was the next to send, the next one is chosen from it
 * (bfqq_find_next_rq(), FIFO looked at @now).
 */
static void bfqq_del_rq(struct rq_queue *q, struct bfq_queue *bfqq, struct rq_request *rq,
			uint64_t now)
{
	bfqq_sort(bfqq);
	if (bfqq->next_rq == rq) {
		if (bfqq->queued > 1)
			bfqq->next_rq = bfqq_find_next_rq(bfqq->bs->bd, bfqq, rq, now);
		else
			bfqq->fifo_checked = true; /* what looking would have done */
	}
	rq_sched_rb_del(&bfqq->sort, rq);
	if (!bfqq->sort.node)
		bfqq->next_rq = NULL;
	bfqq_unqueue(q, bfqq, rq);
}

/* Seek history: was @rq far from the context's previous request? */
static void bfqq_update_seek(struct bfq_queue *bfqq, const struct rq_request *rq)
{
	uint64_t d;

	if (bfqq->seeky_known) {
		d = rq->sector > bfqq->last_end ? rq->sector - bfqq->last_end :
						  bfqq->last_end - rq->sector;
		bfqq->nr_seeks += (d > BFQ_SEEK_THR) - (bfqq->seek_history >> 31);
		bfqq->seek_history = (bfqq->seek_history << 1) | (d > BFQ_SEEK_THR);
	}
	bfqq->seeky_known = true;
	bfqq->last_end = rq_request_end_sector(rq);
}

/* Is @sector a seek from @last_end (bfqq_update_seek())? */
static inline __attribute__((always_inline)) uint64_t seek_far(uint64_t sector, uint64_t last_end)
{
	return (sector > last_end ? sector - last_end : last_end - sector) > BFQ_SEEK_THR;
}

/*
 * seek_far() for sectors and ends below 2^63 (a run's: bfq_insert_run()
 * takes none at or above 2^58): |sector - last_end| > BFQ_SEEK_THR as one
 * unsigned compare, the difference shifted by BFQ_SEEK_THR, no branch.
 */
static inline __attribute__((always_inline)) uint64_t seek_far_run(uint64_t sector,
								   uint64_t last_end)
{
	return sector - last_end + BFQ_SEEK_THR > 2 * BFQ_SEEK_THR;
}

/*
 * bfqq_update_seek() for each request of a run of @n in turn (arrival
 * order), @first the first: @bits holds the seek bits of the other n - 1
 * (bit 0 the last's, each against the end of the one before), @end the
 * last one's end.  The history is a shift register of 32 bits and
 * nr_seeks the count of its 1 bits, so shifting all the run's bits in at
 * once and counting gives what n single steps give.
 */
static void bfqq_update_seek_run(struct bfq_queue *bfqq, const struct rq_request *first,
				 uint64_t bits, unsigned n, uint64_t end)
{
	uint64_t hist = bfqq->seek_history;
	uint32_t h;

	if (bfqq->seeky_known)
		hist = hist << 1 | seek_far(first->sector, bfqq->last_end);
	h = (uint32_t)(hist << (n - 1) | bits); /* n - 1 <= 63 */
	bfqq->seek_history = h;
	bfqq->nr_seeks = (unsigned)__builtin_popcount(h);
	bfqq->seeky_known = true;
	bfqq->last_end = end;
}

/* ------------------------------------------------------------ turns */

/*
 * @bfqq became busy: decide on weight raising (low_latency) and put it on
 * its level.  Interactive: a sync queue busy for the first time, or again
 * after BFQ_WR_MIN_IDLE_NS of quiet, is raised for BFQ_WR_INTERACTIVE_NS.
 * Soft real-time: a sync queue that comes back no earlier than the time at
 * which its last burst would have stayed below BFQ_SOFTRT_RATE is raised
 * for BFQ_WR_SOFTRT_NS.
 */
static void bfqq_activate(struct bfq_data *bd, struct bfq_queue *bfqq, unsigned next_sectors,
			  uint64_t now)
{
	if (READ_ONCE(bd->low_latency) && bfqq->sync && bfqq->entity.cls != 2 && bfqq->ioc) {
		if (!bfqq->ever_busy || now - bfqq->last_empty >= BFQ_WR_MIN_IDLE_NS) {
			bfqq->wr_coeff = BFQ_WR_COEFF;
			bfqq->wr_end = now + BFQ_WR_INTERACTIVE_NS;
		} else if (bfqq->wr_coeff == 1 && now >= bfqq->softrt_next) {
			bfqq->wr_coeff = BFQ_WR_COEFF;
			bfqq->wr_end = now + BFQ_WR_SOFTRT_NS;
		}
	}
	bfqq->ever_busy = true;
	bfqq->busy_start = now;
	bfqq->burst_sectors = 0;
	bfqq->entity.cls = (uint8_t)ioc_class(bfqq->ioc);
	bfqq->entity.weight = bfqq_weight(bd, bfqq, now);
	if (!bfqq->sync)
		bfqq->max_budget = max_budget(bfqq->bs);
	if (bfqq->max_budget < min_budget(bfqq->bs))
		bfqq->max_budget = min_budget(bfqq->bs);
	bfqq->entity.budget = bfqq->max_budget > next_sectors ? bfqq->max_budget : next_sectors;
	entity_activate(&bfqq->entity);
	bfqq_wr_account(bfqq);
}

/* Nothing queued any more in @bfqq: remember when, for weight raising. */
static void bfqq_emptied(struct bfq_data *bd, struct bfq_queue *bfqq, uint64_t now)
{
	uint64_t next = bfqq->busy_start + bfqq->burst_sectors * NSEC_PER_SEC / BFQ_SOFTRT_RATE;
	uint64_t floor = now + slice_idle_ns(bd) + 4 * NSEC_PER_MSEC;

	bfqq->last_empty = now;
	bfqq->softrt_next = next > floor ? next : floor;
}

static void sched_set_idle(struct bfq_sched *bs, bool idling, uint64_t end)
{
	bs->idling = idling;
	bs->idle_end = end;
}

/*
 * End the in-service queue's turn: its next budget from why the turn
 * ended, its charge, then back in line if it still has requests, off the
 * list otherwise.  Its group is charged and requeued the same way.
 */
static void sched_expire(struct bfq_sched *bs, enum bfq_expire why, uint64_t now)
{
	struct bfq_data *bd = bs->bd;
	struct bfq_queue *bfqq = bs->in_service;
	struct bfq_entity *e = &bfqq->entity;
	struct bfq_group *g = e->parent;
	uint32_t served = e->service, b = bfqq->max_budget, maxb = max_budget(bs);
	struct rq_request *next;

	switch (why) {
	case BFQ_EXP_EXHAUSTED:
		b = b * 2 < maxb ? b * 2 : maxb;
		break;
	case BFQ_EXP_TIMEOUT:
		/* a slow turn pays for all the device time it held */
		if (e->service < e->budget)
			e->service = e->budget;
		break;
	case BFQ_EXP_EMPTY:
		b = served;
		break;
	case BFQ_EXP_PREEMPTED:
		break;
	}
	if (!bfqq->sync || b > maxb)
		b = maxb;
	if (b < min_budget(bs))
		b = min_budget(bs);
	bfqq->max_budget = b;
	bs->in_service = NULL;
	sched_set_idle(bs, false, 0);
	if (bfqq->queued) {
		next = bfqq->next_rq;
		entity_requeue(e, b > rq_request_sectors(next) ? b : rq_request_sectors(next),
			       bfqq_weight(bd, bfqq, now));
	} else {
		entity_deactivate(e);
		bfqq_wr_account(bfqq);
	}
	if (g->entity.parent && g->entity.on_st) {
		struct bfq_entity *ne = group_pick(g);

		entity_requeue(&g->entity, ne ? ne->budget : b, group_weight(g));
	}
}

static bool bfqq_should_idle(struct bfq_data *bd, const struct bfq_queue *bfqq)
{
	/*
	 * the cheap tests first: a seeky queue (the common case) reads no
	 * shared state; an IDLE-class queue is never idled for (it would
	 * hold the device from the classes above: bfq_better_to_idle())
	 */
	if (!bfqq->sync || !bfqq->ioc || !bd->slice_idle_us || bfqq->entity.cls == 2 ||
	    (!bd->strict_guarantees && bfqq_seeky(bfqq)))
		return false;
	return !queue_frozen(bd) && !bfqq_ioc_gone(bfqq);
}

/*
 * Would the kernel idle for @bfqq, the in-service queue, if it ran dry
 * (bfq_better_to_idle())?  Always with strict_guarantees (which protects
 * every turn); else as bfqq_should_idle(): never for an async, seeky or
 * IDLE-class queue, one of a released context, or with slice_idle 0.
 */
static bool bfqq_better_to_idle(struct bfq_data *bd, const struct bfq_queue *bfqq)
{
	return bd->strict_guarantees || bfqq_should_idle(bd, bfqq);
}

/*
 * The kernel's bfq_bfqq_higher_class_or_weight(): @bfqq is of a higher
 * class than @cur, or weighs more (raising included); queues of different
 * groups compare their groups' weights (a queue of the root group its own).
 */
static bool bfqq_higher_class_or_weight(const struct bfq_queue *bfqq,
					const struct bfq_queue *cur)
{
	const struct bfq_group *pb = bfqq->entity.parent, *pc = cur->entity.parent;
	unsigned wb = bfqq->entity.weight, wc = cur->entity.weight;

	if (bfqq->entity.cls < cur->entity.cls)
		return true;
	if (pb != pc) {
		if (pb->entity.parent)
			wb = pb->entity.weight;
		if (pc->entity.parent)
			wc = pc->entity.weight;
	}
	return wb > wc;
}

/*
 * The kernel's next_queue_may_preempt(): could the root group choose
 * something else than the in-service entity next?  A queue of the root
 * group leaves the choice while in service, and so does a group whose
 * only active child is the in-service queue; a group with more active
 * queues stays in it, and preemption is for whoever else the root would
 * choose (queues of the same group never preempt each other).
 */
static bool sched_next_may_preempt(struct bfq_sched *bs, const struct bfq_queue *cur)
{
	struct bfq_group *g = cur->entity.parent;

	if (!g->entity.parent || g->nr_active <= 1)
		return true;
	return group_pick(&bs->root) != &g->entity;
}

/*
 * @bfqq just became busy while @cur is in service: end @cur's turn
 * (BFQ_EXP_PREEMPTED) as the kernel's bfq_bfqq_handle_idle_busy_switch()
 * does, when @bfqq is of a higher class or weight, or when @cur is not a
 * queue worth idling for (async, seeky, IDLE class...), provided the
 * next choice may differ from @cur.  Lock held.
 */
static bool bfqq_should_preempt(struct bfq_sched *bs, const struct bfq_queue *bfqq,
				const struct bfq_queue *cur)
{
	return (bfqq_higher_class_or_weight(bfqq, cur) || !bfqq_better_to_idle(bs->bd, cur)) &&
	       sched_next_may_preempt(bs, cur);
}

/*
 * The queue to dispatch from now, with its next request in *@next; NULL
 * when nothing may go now (idling, waiting for the in-service queue's
 * requests to complete, strict_guarantees with a request in flight).
 * Ends turns and starts new ones as needed.  *@delay_ms: arm a delayed
 * run of the hardware queue for the end of an idle window.
 */
static struct bfq_queue *sched_ready(struct bfq_sched *bs, uint64_t now,
				     struct rq_request **next, unsigned *delay_ms)
{
	struct bfq_data *bd = bs->bd;

	/*
	 * The core pulls batches from a scheduler without looking at driver
	 * tags, and what bfq hands out is out of its hands: keep at most the
	 * device's depth plus one out, so the backlog (and the choice) stays
	 * here.  The one extra is parked by the core, which then re-runs the
	 * queue on the next completion by itself.
	 */
	if (bs->in_flight >= (bd->strict_guarantees ? 1 : bd->inflight_cap))
		return NULL;
	for (unsigned loops = 0; loops < 64; loops++) {
		struct bfq_queue *bfqq = bs->in_service;
		struct rq_request *rq;

		if (!bfqq) {
			if (!bs->queued)
				return NULL;
			bfqq = sched_pick(bs);
			if (!bfqq)
				return NULL;
			bs->in_service = bfqq;
			bfqq->budget_timeout = 0;
			bfqq->fifo_checked = false;
			sched_set_idle(bs, false, 0);
		}
		if (bfqq->budget_timeout && now >= bfqq->budget_timeout) {
			sched_expire(bs, BFQ_EXP_TIMEOUT, now);
			continue;
		}
		if (!bfqq->queued) {
			if (bs->idling) {
				if (now >= bs->idle_end || queue_frozen(bd) || bfqq_ioc_gone(bfqq)) {
					sched_expire(bs, BFQ_EXP_EMPTY, now);
					continue;
				}
				*delay_ms = (unsigned)DIV_ROUND_UP(bs->idle_end - now, NSEC_PER_MSEC);
				return NULL;
			}
			if (bfqq_should_idle(bd, bfqq)) {
				/* the idle window opens when its last request completes */
				if (bfqq->dispatched)
					return NULL;
				sched_set_idle(bs, true, now + slice_idle_ns(bd));
				*delay_ms = (unsigned)DIV_ROUND_UP(slice_idle_ns(bd), NSEC_PER_MSEC);
				return NULL;
			}
			sched_expire(bs, BFQ_EXP_EMPTY, now);
			continue;
		}
		rq = bfqq->next_rq;
		if (bfqq->entity.service &&
		    bfqq->entity.service + rq_request_sectors(rq) > bfqq->entity.budget) {
			sched_expire(bs, BFQ_EXP_EXHAUSTED, now);
			continue;
		}
		*next = rq;
		return bfqq;
	}
	return NULL;
}

/* @rq of the in-service @bfqq, out of the queue, goes to the driver: charge it, move the head. */
static void sched_account_dispatch(struct bfq_sched *bs, struct bfq_queue *bfqq,
				   struct rq_request *rq, uint64_t now)
{
	struct bfq_data *bd = bs->bd;
	unsigned sectors = rq_request_sectors(rq);

	entity_charge(&bfqq->entity, sectors);
	bfqq->burst_sectors += sectors;
	bfqq->dispatched++;
	bs->in_flight++;
	bs->head_pos = rq_request_end_sector(rq);
	if (!bfqq->budget_timeout)
		bfqq->budget_timeout = now + (uint64_t)bd->timeout_sync_ms * NSEC_PER_MSEC;
	rq_set_bits(rq, (rq_bits(rq) & 0xff) | BFQ_RQ_DISPATCHED |
			    ((unsigned long)sectors << BFQ_RQ_SECTOR_SHIFT));
	if (!bfqq->queued)
		bfqq_emptied(bd, bfqq, now);
}

/* Hand @rq of the in-service @bfqq out: out of the queue, then charged. */
static void sched_dispatch_rq(struct rq_queue *q, struct bfq_sched *bs, struct bfq_queue *bfqq,
			      struct rq_request *rq, uint64_t now)
{
	bfqq_del_rq(q, bfqq, rq, now);
	sched_account_dispatch(bs, bfqq, rq, now);
}

/* A request of @bfqq left the driver (or never reached it); lock held. */
static void bfqq_request_done(struct bfq_sched *bs, struct bfq_queue *bfqq, struct rq_request *rq)
{
	rq_set_bits(rq, rq_bits(rq) & ~BFQ_RQ_DISPATCHED);
	bfqq->dispatched--;
	bs->in_flight--;
}

/*
 * Feed the automatic max_budget of @bs: sectors completed per window, peak
 * kept; lock held.
 */
static void rate_sample(struct bfq_sched *bs, unsigned sectors, uint64_t now)
{
	uint64_t dt;

	if (!bs->rate_t0 || now < bs->rate_t0) {
		bs->rate_t0 = now;
		bs->rate_sectors = 0;
		return;
	}
	bs->rate_sectors += sectors;
	dt = now - bs->rate_t0;
	if (dt < BFQ_RATE_WINDOW_NS)
		return;
	{
		uint64_t rate = (bs->rate_sectors << 32) / dt;
		uint64_t budget;

		/* the peak decays slowly, so a device that got slower is noticed */
		bs->peak_rate -= bs->peak_rate >> 4;
		if (rate > bs->peak_rate)
			bs->peak_rate = rate;
		budget = (bs->peak_rate >> 16) * ((uint64_t)bs->bd->timeout_sync_ms * NSEC_PER_MSEC) >> 16;
		if (budget < BFQ_AUTO_BUDGET_MIN)
			budget = BFQ_AUTO_BUDGET_MIN;
		if (budget > BFQ_AUTO_BUDGET_MAX)
			budget = BFQ_AUTO_BUDGET_MAX;
		bs->auto_budget = (unsigned)budget;
		bs->rate_t0 = now;
		bs->rate_sectors = 0;
	}
}

/*
 * Publish whether a request is ready to go without waiting (a head
 * request, or one of the queue whose turn it is, or of any queue when no
 * turn is on, below the in-flight cap), then drop the lock.  has_work
 * answers true from it without the lock.  Only the hardware queue's
 * dispatcher takes requests out (and it took this lock to do so), so a
 * stale true can only follow a rare removal by someone else (a queued
 * request freed or merged away, a tunable store): dispatch then finds
 * nothing and the core comes back later, as after any has_work race.
 */
static inline __attribute__((always_inline)) void sched_unlock(struct bfq_sched *bs)
{
	const struct bfq_data *bd = bs->bd;
	bool ready = bs->nr_head ||
		     (bs->queued &&
		      bs->in_flight < (bd->strict_guarantees ? 1 : bd->inflight_cap) &&
		      (!bs->in_service || bs->in_service->queued));

	if (bs->ready != ready)
		WRITE_ONCE(bs->ready, ready);
	bfq_unlock(&bs->lock);
}

/* @bfqq's last pin is gone: free it if its context is gone too.  Lock held. */
static __attribute__((noinline)) void bfqq_put_last(struct bfq_sched *bs, struct bfq_queue *bfqq)
{
	if (bfqq != &bs->oom_q && !bfqq_busy(bfqq) && bs->in_service != bfqq && bfqq_ioc_gone(bfqq))
		bfqq_free(bs, bfqq);
}

/* Drop a pin of @bfqq: free it with the last one when its context is gone.  Lock held. */
static inline void bfqq_put(struct bfq_sched *bs, struct bfq_queue *bfqq)
{
	if (!--bfqq->ref)
		bfqq_put_last(bs, bfqq);
}

/*
 * A completion of @bfqq, its last request out, ended the in-service turn's
 * requests (or strict_guarantees waits for an empty device): open the idle
 * window (a delayed run in *@delay) or ask for a run for the next turn
 * (*@kick).  Lock held.
 */
static __attribute__((noinline)) void bfq_completed_turn(struct bfq_sched *bs,
							 struct bfq_queue *bfqq, uint64_t now,
							 unsigned *delay, bool *kick)
{
	struct bfq_data *bd = bs->bd;

	if (bs->in_service == bfqq && !bfqq->queued && !bfqq->dispatched && !bs->idling) {
		if (bfqq_should_idle(bd, bfqq)) {
			sched_set_idle(bs, true, now + slice_idle_ns(bd));
			if (bs->queued)
				*delay = (unsigned)DIV_ROUND_UP(slice_idle_ns(bd), NSEC_PER_MSEC);
		} else if (bs->queued) {
			*kick = true;
		}
	}
	if (bd->strict_guarantees && !bs->in_flight && bs->queued)
		*kick = true;
}

/*
 * The accounting of a dispatched request of @bfqq, @sectors long, that
 * completed at @now: the rate sample, the in-flight counts, the turn's
 * end.  Lock held.
 */
static inline void bfq_account_done(struct bfq_sched *bs, struct bfq_queue *bfqq,
				    unsigned sectors, uint64_t now, unsigned *delay, bool *kick)
{
	rate_sample(bs, sectors, now);
	bfqq->dispatched--;
	bs->in_flight--;
	if (unlikely((bs->in_service == bfqq && !bfqq->dispatched) || bs->bd->strict_guarantees))
		bfq_completed_turn(bs, bfqq, now, delay, kick);
}

/* Drop @bs's lock, then start the runs a completion asked for. */
static void sched_unlock_run(struct bfq_sched *bs, unsigned delay, bool kick)
{
	sched_unlock(bs);
	if (delay)
		rq_mq_delay_run_hw_queue(bs->hctx, delay);
	if (kick)
		rq_mq_run_hw_queue(bs->hctx, true);
}

/*
 * struct bfq_batch - completions left, on this thread, to the end of a
 * completion batch (completion_batch_begin/end) of @bs's hardware queue:
 * each dispatched request's queue, length and completion time, in
 * completion order.  The end (or a full array, or any other bfq call for
 * @bs on this thread meanwhile) applies them, in that order, in one lock
 * hold: exactly what the per-request calls would have done, the requests
 * themselves already unpinned (the batch holds their queues' pins).
 * @bs: the batch's scheduler; NULL while no batch is open.
 * @n: completions held.
 * @bfqq, @t, @sectors: each one's queue, completion time and length, as
 * arrays (a record is then three stores at one index, no time base to
 * keep or range to check).
 */
#define BFQ_BATCH_MAX 32u

struct bfq_batch {
	struct bfq_sched *bs;
	unsigned n;
	struct bfq_queue *bfqq[BFQ_BATCH_MAX + 1]; /* [n]: NULL while flushing */
	uint64_t t[BFQ_BATCH_MAX];
	uint32_t sectors[BFQ_BATCH_MAX];
};

static __thread struct bfq_batch bfq_batch __attribute__((tls_model("initial-exec")));

/*
 * The rate samples of the batch @b (rate_sample() per record, in order):
 * when every record falls inside the open window (@late: the largest
 * completion time after the window's start, unsigned, so that one before
 * it counts as very late), each would only add its sectors, so the sum
 * @sectors is added once.
 */
static void bfq_batch_rate(struct bfq_sched *bs, const struct bfq_batch *b, uint64_t sectors,
			   uint64_t late)
{
	if (bs->rate_t0 && late < BFQ_RATE_WINDOW_NS) {
		bs->rate_sectors += sectors;
		return;
	}
	for (unsigned i = 0; i < b->n; i++)
		rate_sample(bs, b->sectors[i], b->t[i]);
}

/*
 * Apply the completions held in bfq_batch, in order, in one lock hold.
 * The rate samples touch nothing else, and nothing else reads them: they
 * go apart (bfq_batch_rate()).  Consecutive records of one queue are a
 * run whose counts and pins go at its last record.  That is exact: before
 * its last record the queue still has one of the run's requests
 * dispatched, so no earlier record could end its turn or drop its last
 * pin, and nothing else in the loop reads the counts (but
 * strict_guarantees, whose turn end reads in_flight: runs of one record).
 */
static __attribute__((noinline)) void bfq_batch_flush(void)
{
	struct bfq_batch *b = &bfq_batch;
	struct bfq_sched *bs = b->bs;
	unsigned delay = 0, k = 0;
	uint64_t sectors = 0, late = 0, t0;
	bool kick = false, strict;

	bfq_lock(&bs->lock);
	strict = bs->bd->strict_guarantees;
	t0 = bs->rate_t0; /* nothing in the loop moves the window */
	b->bfqq[b->n] = NULL; /* ends the last run */
	for (unsigned i = 0; i < b->n; i++) {
		struct bfq_queue *bfqq = b->bfqq[i];

		sectors += b->sectors[i];
		late = b->t[i] - t0 > late ? b->t[i] - t0 : late;
		k++;
		if (b->bfqq[i + 1] == bfqq && !strict)
			continue;
		bfqq->dispatched -= k;
		bs->in_flight -= k;
		if (unlikely((bs->in_service == bfqq && !bfqq->dispatched) || strict))
			bfq_completed_turn(bs, bfqq, b->t[i], &delay, &kick);
		bfqq->ref -= k - 1; /* the run's other pins: not the last (see above) */
		bfqq_put(bs, bfqq);
		k = 0;
	}
	bfq_batch_rate(bs, b, sectors, late);
	b->n = 0;
	sched_unlock_run(bs, delay, kick);
}

/*
 * Before a bfq call for @bs on this thread: completions it holds for @bs
 * go in first, so the call sees what it would have without the batch.
 */
static inline void bfq_batch_sync(const struct bfq_sched *bs)
{
	if (unlikely(bfq_batch.n) && bfq_batch.bs == bs)
		bfq_batch_flush();
}

/* ------------------------------------------------------------------ ops */

static void bfq_sched_init(struct bfq_data *bd, struct bfq_sched *bs, struct rq_hw_ctx *hctx)
{
	memset(bs, 0, sizeof(*bs));
	bs->auto_budget = BFQ_DEFAULT_MAX_BUDGET;
	bs->bd = bd;
	bs->hctx = hctx;
	for (unsigned c = 0; c < BFQ_NR_CLASSES; c++)
		rq_list_init(&bs->root.lv[c].active);
	rq_list_init(&bs->root.entity.node);
	rq_list_init(&bs->groups);
	rq_list_init(&bs->head_list);
	bfqq_init(bs, &bs->oom_q, NULL, false, 0);
	bs->oom_q.entity.parent = &bs->root;
	bs->root.nr_queues = 1; /* the fallback queue: the root is never freed anyway */
}

/*
 * The kernel's async_depths for @nr scheduler tags (bfq_depth_updated()):
 * async I/O may hold 1/2 of them, sync writes 3/4, and while a raised
 * queue is busy 3/16 and 6/16, so sync reads always find tags.
 */
static void bfq_set_async_depths(struct bfq_data *bd, unsigned nr)
{
	static const unsigned sixteenths[2][2] = { { 8, 12 }, { 3, 6 } };

	for (unsigned wr = 0; wr < 2; wr++)
		for (unsigned sync = 0; sync < 2; sync++) {
			unsigned d = nr * sixteenths[wr][sync] / 16;

			WRITE_ONCE(bd->async_depths[wr][sync], d ? d : 1);
		}
}

static int bfq_init_sched(struct rq_queue *q, void **data)
{
	struct bfq_data *bd = mem_zalloc(sizeof(*bd));
	unsigned nr = rq_queue_nr_hw_queues(q);

	if (!bd)
		return -ENOMEM;
	bd->nr_sched = nr ? nr : 1;
	bd->sched = mem_alloc_aligned(RQ_CACHELINE, bd->nr_sched * sizeof(*bd->sched));
	if (!bd->sched) {
		mem_free(bd, sizeof(*bd));
		return -ENOMEM;
	}
	bd->q = q;
	bd->inflight_cap = q->set->queue_depth - q->set->reserved_tags + 1;
	bfq_set_async_depths(bd, rq_queue_nr_requests(q));
	bd->slice_idle_us = BFQ_SLICE_IDLE_US;
	bd->low_latency = BFQ_LOW_LATENCY;
	bd->back_seek_max_kib = BFQ_BACK_SEEK_MAX_KIB;
	bd->back_seek_penalty = BFQ_BACK_SEEK_PENALTY;
	bd->fifo_expire_sync_ms = BFQ_FIFO_EXPIRE_SYNC_MS;
	bd->fifo_expire_async_ms = BFQ_FIFO_EXPIRE_ASYNC_MS;
	bd->timeout_sync_ms = BFQ_TIMEOUT_SYNC_MS;
	bd->max_budget = BFQ_MAX_BUDGET;
	bd->strict_guarantees = BFQ_STRICT_GUARANTEES;
	for (unsigned i = 0; i < bd->nr_sched; i++)
		bfq_sched_init(bd, &bd->sched[i], nr ? rq_queue_hctx(q, i) : NULL);
	*data = bd;
	return 0;
}

static void bfq_exit_sched(struct rq_queue *q, void *data)
{
	struct bfq_data *bd = data;

	for (unsigned i = 0; i < bd->nr_sched; i++) {
		struct bfq_sched *bs = &bd->sched[i];

		bs->in_service = NULL;
		for (unsigned h = 0; h < (1u << BFQ_HASH_BITS); h++) {
			while (bs->hash[h]) {
				struct bfq_queue *bfqq = bs->hash[h];

				entity_deactivate(&bfqq->entity);
				bfqq->ref = 0;
				bfqq_free(bs, bfqq);
			}
		}
		while (!rq_list_empty(&bs->groups)) {
			struct bfq_group *g = RQ_CONTAINER_OF(bs->groups.next, struct bfq_group, link);

			rq_list_del_init(&g->link);
			rq_iog_put(g->iog);
			mem_free(g, sizeof(*g));
		}
	}
	mem_free_aligned(bd->sched, bd->nr_sched * sizeof(*bd->sched), RQ_CACHELINE);
	mem_free(bd, sizeof(*bd));
}

/*
 * prepare_request: nothing to look up yet, as the kernel's bfq (which finds
 * a request's queue when the request is first inserted or merged into,
 * bfq_init_rq()): the queue is found under the lock insert_requests takes
 * anyway, once per batch instead of once more per request.
 */
static void bfq_prepare_request(struct rq_request *rq)
{
	rq->elv_priv[0] = NULL;
	rq_set_bits(rq, 0);
}

/*
 * Give @rq (not in a queue yet) the queue of its context on @bs and pin it:
 * the queue holds a reference on the context, so rq->ioc stays valid as
 * long as the request is the scheduler's.  Lock held.
 */
static void bfq_pin_rq(struct bfq_queue *bfqq, struct rq_request *rq)
{
	bfqq->ref++;
	bfqq->last_used = rq->start_time_ns; /* the core read the clock when it made @rq */
	rq->elv_priv[0] = bfqq;
	rq_set_bits(rq, 0);
}

static struct bfq_queue *bfq_attach_rq(struct bfq_sched *bs, struct rq_request *rq)
{
	struct bfq_queue *bfqq = bfqq_lookup(bs, rq->ioc, rq_is_sync(rq), true, rq->start_time_ns);

	bfq_pin_rq(bfqq, rq);
	return bfqq;
}

/*
 * @rq leaves @bfqq for good: drop its pin, and the queue with it when its
 * context is gone (our reference is the last one).  Lock held.
 */
static void bfqq_unpin(struct bfq_sched *bs, struct bfq_queue *bfqq, struct rq_request *rq)
{
	rq->elv_priv[0] = NULL;
	rq_set_bits(rq, 0);
	bfqq_put(bs, bfqq);
}

/*
 * finish_request: unpin the queue of a request that ended without a
 * completion (bfq_completed_request() unpins the others in its own lock
 * hold, so this finds nothing to do for them); free it if its context is
 * gone.
 */
static __attribute__((noinline)) void bfq_finish_pinned(struct rq_request *rq,
							   struct bfq_queue *bfqq)
{
	struct bfq_data *bd = bfq_of(rq->q);
	struct bfq_sched *bs = bfqq->bs;
	struct rq_hw_ctx *kick = NULL;

	bfq_batch_sync(bs);
	bfq_lock(&bs->lock);
	if (rq_bits(rq) & BFQ_RQ_QUEUED) {
		bfqq_del_rq(rq->q, bfqq, rq, core_clock_ns());
		if (!bfqq->queued && bs->in_service != bfqq) {
			entity_deactivate(&bfqq->entity);
			bfqq_wr_account(bfqq);
		}
	}
	if (rq_bits(rq) & BFQ_RQ_HEAD) {
		rq_list_del_init(&rq->queuelist);
		WRITE_ONCE(bs->nr_head, bs->nr_head - 1);
	}
	if (rq_bits(rq) & BFQ_RQ_DISPATCHED) {
		/* ended without a completion (failed before the driver took it) */
		bfqq_request_done(bs, bfqq, rq);
		if ((bs->in_service == bfqq && !bfqq->dispatched) ||
		    (bd->strict_guarantees && !bs->in_flight))
			kick = bs->hctx;
	}
	bfqq_unpin(bs, bfqq, rq);
	sched_unlock(bs);
	if (kick && bs->queued)
		rq_mq_run_hw_queue(kick, true);
}

static void bfq_finish_request(struct rq_request *rq)
{
	struct bfq_queue *bfqq = rq_bfqq(rq);

	if (bfqq)
		bfq_finish_pinned(rq, bfqq);
}

/* depth_updated: nr_requests changed (queue frozen): new async depths. */
static void bfq_depth_updated(struct rq_hw_ctx *hctx)
{
	struct rq_queue *q = rq_hctx_queue(hctx);

	bfq_set_async_depths(bfq_of(q), rq_queue_nr_requests(q));
}

/*
 * limit_depth: the kernel's bfq_limit_depth().  Sync reads may use every
 * scheduler tag; async requests and sync writes (RQ_BIO_SYNC or FUA) only
 * async_depths of them, fewer while a raised queue of the hardware queue
 * is busy: a writer filling the tags cannot make a reader wait for one.
 * Lock-free (the counts are read with READ_ONCE).
 */
static void bfq_limit_depth(struct rq_alloc_data *data)
{
	bool sync = data->opf & (RQ_BIO_SYNC | RQ_BIO_FUA);
	struct bfq_data *bd;
	bool wr;

	if (data->op == RQ_OP_READ)
		return;
	bd = bfq_of(data->q);
	wr = READ_ONCE(sched_of_hctx(bd, data->hctx)->wr_busy) != 0;
	data->shallow_depth = rq_sched_shallow_depth(data->hctx,
						    READ_ONCE(bd->async_depths[wr][sync]));
}

static bool bfq_mergeable(const struct rq_request *rq)
{
	return rq_mergeable(rq);
}

/*
 * Does a request of @bfqq end where @rq starts?  Insert merges go through
 * the core's hash (per hardware queue), which knows nothing of contexts: ask it only when
 * the context's own queue has the neighbour, so requests of different
 * contexts stay apart.
 */
static bool bfqq_has_neighbour(struct bfq_queue *bfqq, const struct rq_request *rq)
{
	struct rq_request *after = sort_ceiling(bfqq_sort(bfqq), rq->sector), *before;
	struct rq_rb_node *last;

	if (after) {
		before = rq_sched_rb_former(after);
	} else {
		last = rq_rb_last(&bfqq->sort);
		before = last ? RQ_CONTAINER_OF(last, struct rq_request, rb_node) : NULL;
	}
	return before && rq_request_end_sector(before) == rq->sector;
}

/* ------------------------------------------------- runs of one queue */

/*
 * A plug's flush usually hands over a run of requests of one context and
 * kind (so of one bfq queue), in random sector order, to a queue with
 * nothing queued (the dispatch drained it).  Inserting them one by one
 * costs an rb-tree walk and rebalance, a neighbour search and a
 * bfq_choose_req() each, with branches no predictor learns.  The run is
 * instead sorted once (stable: equal sectors keep their arrival order, as
 * rq_sched_rb_add() keeps them) into the queue's run array; everything
 * that depends on arrival order (FIFO, deadlines, seek history, hash, the
 * one-hit cache, activation) still goes request by request, in arrival
 * order.  The result is the same requests in the same order, the same
 * next request and the same state as the one-by-one inserts: see
 * bfq_insert_run().  The tree itself is built only when something walks
 * it (bfqq_sort()).
 */

/*
 * The colour bit of rq_rb_node.parent_color: 0 red (what rq_rb_link_node()
 * leaves), 1 black; lib/rbtree.c's layout.
 */
#define BFQ_RB_BLACK ((uintptr_t)1)

/*
 * Sort the keys ks[0, n) (2 <= n <= BFQ_RUN_MAX) of a run, sector << 6 |
 * arrival index, into key[1, n]; key[0] = 0 (stable by construction).  Every sector must
 * fit the key (below 2^58: 128 PiB; the caller checks), @lo and @hi are
 * the lowest and highest.  A counting sort into 2^b >= n buckets by the
 * top bits of sector - @lo, each key put in its bucket by insertion among
 * the bucket's keys placed before it (random sectors are about one per
 * bucket, so that is usually one compare).  Whatever the sectors, the
 * result is the keys in order: the buckets only make it cheaper.  The
 * insertion never leaves the bucket: the slot below a bucket's first is
 * key[0], a key of a lower bucket (smaller: a lower sector) or a slot of
 * one not filled yet, zeroed first; 0 is no key's superior.
 */
#define BFQ_RUN_IDX_BITS 6

/* Turn the bucket counts c[1, nb] into each bucket's first slot c[0, nb). */
static void run_prefix(uint8_t *c, unsigned nb)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	/* 8 counts a word: multiplying by 0x0101...01 sums every byte's lower ones (< 256) */
	uint64_t carry = 0;

	for (unsigned i = 0; i <= nb; i += 8) {
		uint64_t w;

		memcpy(&w, c + i, sizeof(w));
		w = (w + carry) * 0x0101010101010101ull;
		memcpy(c + i, &w, sizeof(w));
		carry = w >> 56;
	}
#else
	for (unsigned i = 1; i < nb; i++)
		c[i] = (uint8_t)(c[i] + c[i - 1]);
#endif
}

static void run_sort(uint64_t *key, const uint64_t *ks, unsigned n, uint64_t lo, uint64_t hi)
{
	unsigned b = 32u - (unsigned)__builtin_clz(n - 1), width = 0;
	uint8_t bucket[BFQ_RUN_MAX], start[BFQ_RUN_MAX + 8] __attribute__((aligned(8)));
	uint64_t base = lo << BFQ_RUN_IDX_BITS;

	if (hi > lo)
		width = 64u - (unsigned)__builtin_clzll(hi - lo);
	/* (key - base) >> width == (sector - lo) >> (width - 6) < 2^b */
	width = (width > b ? width - b : 0) + BFQ_RUN_IDX_BITS;
	memset(start, 0, sizeof(start));
	key[0] = 0;
	for (unsigned i = 0; i < n; i++) {
		bucket[i] = (uint8_t)((ks[i] - base) >> width);
		start[bucket[i] + 1]++;
		key[i + 1] = 0;
	}
	run_prefix(start, 1u << b);
	for (unsigned i = 0; i < n; i++) {
		uint64_t k = ks[i], *at = &key[1 + start[bucket[i]]++];

		for (; at[-1] > k; at--)
			at[0] = at[-1];
		*at = k;
	}
}

/* A range of a run still to build, and where its subtree hangs. */
struct run_range {
	unsigned lo, hi, depth;
	struct rq_rb_node *parent, **link;
};

/*
 * Build the sorted v[0, n) into @root as a balanced tree, top-down
 * without recursion: each node takes the middle of its range and its
 * children the halves.  Every level above the deepest is full, so
 * colouring the deepest level red (unless it is the root's) and all others
 * black gives every path the same number of black nodes, and no red node
 * has a red child.  In order it is v[] itself.
 */
static void run_build_tree(struct rq_rb_root *root, struct rq_request **v, unsigned n)
{
	struct run_range st[BFQ_RUN_MAX];
	unsigned height = 0, red_depth, sp = 0;

	root->node = NULL;
	if (!n)
		return;
	while ((1u << height) <= n) /* levels: the smallest h with 2^h > n */
		height++;
	red_depth = height > 1 ? height - 1 : UINT_MAX;
	st[sp++] = (struct run_range){ 0, n, 0, NULL, &root->node };
	while (sp) {
		struct run_range t = st[--sp];
		unsigned mid = t.lo + (t.hi - t.lo) / 2;
		struct rq_rb_node *node = &v[mid]->rb_node;

		node->parent_color = (uintptr_t)t.parent | (t.depth == red_depth ? 0 : BFQ_RB_BLACK);
		node->left = node->right = NULL;
		*t.link = node;
		if (mid + 1 < t.hi)
			st[sp++] = (struct run_range){ mid + 1, t.hi, t.depth + 1, node, &node->right };
		if (t.lo < mid)
			st[sp++] = (struct run_range){ t.lo, mid, t.depth + 1, node, &node->left };
	}
}

/*
 * Put the run v[0, n) into @bfqq's run[] in the order of its sorted keys
 * key[1, n] (run_sort()), each request pinned to @bfqq as it goes: queue,
 * bits and FIFO deadline (@expire after its start), what bfq_pin_rq() and
 * bfqq_arrive() set (in no particular order: each is the request's own).
 * False if a request of it could find another ending where it starts (an
 * insert merge), with the pins undone: the requests are then as they came
 * (no queue, no bits; bfq_pin_rq() and bfqq_arrive() set the rest again).
 * Conservative: as soon as one starts at or before the end of a request
 * sorted before it.
 */
static bool run_place(struct bfq_queue *bfqq, const uint64_t *key, struct rq_request *const *v,
		      unsigned n, uint64_t expire)
{
	struct rq_request **dst = bfqq->run;
	uint64_t end = 0;

	for (unsigned i = 0; i < n; i++) {
		struct rq_request *rq = v[key[i + 1] & ((1u << BFQ_RUN_IDX_BITS) - 1)];

		if (i && rq->sector <= end && bfq_mergeable(rq)) {
			while (i--) {
				dst[i]->elv_priv[0] = NULL;
				rq_set_bits(dst[i], 0);
			}
			return false;
		}
		if (rq_request_end_sector(rq) > end)
			end = rq_request_end_sector(rq);
		dst[i] = rq;
		rq->elv_priv[0] = bfqq;
		rq_set_bits(rq, BFQ_RQ_QUEUED);
		rq->fifo_time = rq->start_time_ns + expire;
	}
	return true;
}

/*
 * The next request of a queue that had none, after the sorted run v[0, n)
 * was added, as its index: what folding bfq_choose_req() over the run
 * from @last gives, in arrival order or (ties are between equal sectors,
 * which the stable sort left in arrival order) in sorted order.  Without
 * metadata requests the winner is one of three: the lowest sector (if
 * behind back_seek_max, wrapped), the first of the nearest sector behind
 * @last, the first at or after @last (a binary search of the sorted
 * keys, key[i] >> 6 being v[i]'s sector); the three have different
 * sectors, so no tie is left.  @meta: some request of the run is
 * RQ_BIO_META.
 */
static unsigned run_next_idx(const struct bfq_data *bd, struct rq_request **v, const uint64_t *key,
			     unsigned n, uint64_t last, bool meta)
{
	const uint64_t *at = key, t = last << BFQ_RUN_IDX_BITS;
	struct rq_request *best = NULL;
	unsigned c, f, bi = 0;

	if (meta) {
		for (unsigned i = 0; i < n; i++) {
			if (bfq_choose_req(bd, best, v[i], last) == v[i])
				bi = i;
			best = v[bi];
		}
		return bi;
	}
	if (last >> (64 - BFQ_RUN_IDX_BITS)) {
		c = n; /* above every key's sector */
	} else {
		for (unsigned len = n; len > 1; len -= len / 2)
			at += at[len / 2 - 1] < t ? len / 2 : 0;
		c = (unsigned)(at - key) + (*at < t); /* the first at or after @last */
	}
	if (c) {
		for (f = c - 1; f && key[f - 1] >> BFQ_RUN_IDX_BITS == key[c - 1] >> BFQ_RUN_IDX_BITS; f--)
			;
		if (bfq_choose_req(bd, v[0], v[f], last) == v[f])
			bi = f;
	}
	if (c < n && bfq_choose_req(bd, v[bi], v[c], last) == v[c])
		bi = c;
	return bi;
}

/* How long a request of @bfqq may wait before its FIFO deadline; lock held. */
static uint64_t bfqq_fifo_expire_ns(const struct bfq_queue *bfqq)
{
	const struct bfq_data *bd = bfqq->bs->bd;

	return (uint64_t)(bfqq->sync ? bd->fifo_expire_sync_ms : bd->fifo_expire_async_ms) *
	       NSEC_PER_MSEC;
}

/*
 * @rq's arrival in @bfqq, up to the tree: FIFO place and deadline (@expire
 * after its start: bfqq_fifo_expire_ns()) and, if @hash, the hash and the
 * one-hit cache when it is empty (what bfq_insert_requests() does per
 * request, in the same order; the seek history, which only @bfqq's own
 * fields hold, is the caller's: bfqq_update_seek(), bfqq_update_seek_run()).  A run
 * hashes only until a mergeable request was offered the cache (it is not
 * empty after that, and nothing in a run empties it): the rest of the run
 * is hashed when someone may look (sched_hash_flush()).  Lock held.
 */
static inline __attribute__((always_inline)) void
bfqq_arrive(struct rq_queue *q, struct bfq_queue *bfqq, struct rq_request *rq, bool hash,
	    uint64_t expire)
{
	rq->fifo_time = rq->start_time_ns + expire;
	rq_list_add_tail(&rq->queuelist, &bfqq->fifo);
	rq_set_bits(rq, rq_bits(rq) | BFQ_RQ_QUEUED);
	if (hash && bfq_mergeable(rq)) {
		rq_sched_hash_add(q, rq);
		rq_sched_last_merge_fill(q, rq);
	}
}

/*
 * Put the requests of the run bfq_insert_run() left out of the merge hash
 * in, in arrival order (the queue's FIFO: nothing but dispatch and
 * removal touched it since), before anything else on @bs is hashed or
 * the hash is looked at: the hash chains then hold what hashing each at
 * its arrival would have left.  A request dispatched or freed before
 * that was never hashed, as if hashed and removed.  Lock held.
 */
static void sched_hash_flush(struct rq_queue *q, struct bfq_sched *bs)
{
	struct bfq_queue *bfqq = bs->hash_pending;

	if (likely(!bfqq))
		return;
	bs->hash_pending = NULL;
	for (struct rq_list_node *n = bfqq->fifo.next; n != &bfqq->fifo; n = n->next) {
		struct rq_request *rq = RQ_CONTAINER_OF(n, struct rq_request, queuelist);

		if (!(rq->rq_flags & RQ_RQF_HASHED) && bfq_mergeable(rq))
			rq_sched_hash_add(q, rq);
	}
}

/*
 * @bfqq has a request again (the first of a run, or one inserted alone):
 * end the in-service queue's idle wait, or activate @bfqq (and maybe
 * preempt the in-service queue), as the kernel's bfq_add_request().
 */
static void bfqq_got_request(struct bfq_sched *bs, struct bfq_queue *bfqq, struct rq_request *rq)
{
	struct bfq_queue *cur = bs->in_service;

	if (cur == bfqq) {
		sched_set_idle(bs, false, 0); /* what it was waiting for */
	} else if (!bfqq_busy(bfqq)) {
		bfqq_activate(bs->bd, bfqq, rq_request_sectors(rq), rq->start_time_ns);
		if (cur && bfqq_should_preempt(bs, bfqq, cur))
			sched_expire(bs, BFQ_EXP_PREEMPTED, rq->start_time_ns);
	}
}

/*
 * Insert the whole of @list as one run, if it is one: new requests (no
 * queue yet: not requeued) of one context and kind, 2 to BFQ_RUN_MAX,
 * into a queue with nothing queued, none of them able to insert-merge.
 * The same state as inserting them one by one (the loop of
 * bfq_insert_requests()): the run array (the tree, once built) holds the
 * same requests in the same order, the next request is the same
 * (run_next_idx()), and the FIFO, cache, seek history, pins and activation
 * go in arrival order as before, the hash too (the part after the cache's
 * request when it is next used: sched_hash_flush()); activation and
 * preemption look at no tree, so making them after the sort changes
 * nothing.  False, with nothing done, when it is not a run.  Lock held.
 */
static bool bfq_insert_run(struct rq_queue *q, struct bfq_sched *bs, struct rq_list_node *list)
{
	struct rq_request *first = rq_list_first_rq(list), *v[BFQ_RUN_MAX], *rq;
	uint64_t key[BFQ_RUN_MAX + 1], ks[BFQ_RUN_MAX], expire, lo = UINT64_MAX, hi = 0, end = 0, seeks = 0;
	struct bfq_queue *bfqq;
	unsigned n = 0, opf = 0;
	bool sync, hash = true;

	sync = rq_is_sync(first);
	for (struct rq_list_node *it = list->next; it != list; it = it->next) {
		rq = RQ_CONTAINER_OF(it, struct rq_request, queuelist);
		if (n == BFQ_RUN_MAX || rq_bfqq(rq) || rq->ioc != first->ioc ||
		    rq_is_sync(rq) != sync)
			return false;
		seeks = seeks << 1 | seek_far_run(rq->sector, end); /* the first's bit goes out below */
		end = rq_request_end_sector(rq);
		lo = rq->sector < lo ? rq->sector : lo;
		hi = rq->sector > hi ? rq->sector : hi;
		ks[n] = rq->sector << BFQ_RUN_IDX_BITS | n;
		v[n++] = rq;
		opf |= rq->opf;
	}
	if (hi >> (64 - BFQ_RUN_IDX_BITS))
		return false; /* does not fit run_sort()'s keys */
	bfqq = bfqq_lookup(bs, first->ioc, sync, true, first->start_time_ns);
	if (bfqq->sort.node || bfqq->run_n)
		return false;
	run_sort(key, ks, n, lo, hi);
	expire = bfqq_fifo_expire_ns(bfqq);
	if (!run_place(bfqq, key, v, n, expire)) /* pinned: bfq_pin_rq(), bfqq_arrive() */
		return false;
	bfqq_update_seek_run(bfqq, first, seeks & ((1ull << (n - 1)) - 1), n, end);
	for (unsigned i = 0; i < n; i++) { /* the hash up to the first mergeable one */
		if (bfq_mergeable(v[i])) {
			rq_sched_hash_add(q, v[i]);
			rq_sched_last_merge_fill(q, v[i]);
			hash = false;
			break;
		}
	}
	bfqq->ref += n;
	bfqq->last_used = v[n - 1]->start_time_ns;
	rq_list_splice_tail_init(list, &bfqq->fifo); /* arrival order, as n list adds */
	if (!hash)
		bs->hash_pending = bfqq; /* the rest of the run: sched_hash_flush() */
	bfqq->run_n = n; /* the tree is built when needed: bfqq_sort() */
	bfqq->run_next = run_next_idx(bs->bd, bfqq->run, key + 1, n, bs->head_pos, opf & RQ_BIO_META);
	bfqq->next_rq = bfq_choose_req(bs->bd, bfqq->next_rq, bfqq->run[bfqq->run_next], bs->head_pos);
	bfqq->queued += n;
	WRITE_ONCE(bs->queued, bs->queued + n);
	bfqq_got_request(bs, bfqq, first);
	return true;
}

static void bfq_insert_requests(struct rq_hw_ctx *hctx, struct rq_list_node *list, unsigned flags)
{
	struct rq_queue *q = rq_hctx_queue(hctx);
	struct bfq_sched *bs = sched_of_hctx(bfq_of(q), hctx);
	struct bfq_queue *bfqq = NULL;
	struct rq_list_node free_list;
	struct rq_request *rq;

	rq_list_init(&free_list);
	bfq_batch_sync(bs);
	bfq_lock(&bs->lock);
	sched_hash_flush(q, bs);
	/* a run is two requests or more (list->next->next: a second one) */
	if (!(flags & RQ_INSERT_AT_HEAD) && list->next->next != list &&
	    bfq_insert_run(q, bs, list))
		goto out;
	while ((rq = rq_list_first_rq(list))) {
		rq_list_del_init(&rq->queuelist);
		if (rq_bfqq(rq))
			bfqq = rq_bfqq(rq); /* a requeue keeps its queue */
		else if (bfqq && bfqq != &bs->oom_q && rq->ioc == bfqq->ioc &&
			 rq_is_sync(rq) == bfqq->sync)
			bfq_pin_rq(bfqq, rq); /* the batch's previous request's queue */
		else
			bfqq = bfq_attach_rq(bs, rq); /* first insert */
		if (flags & RQ_INSERT_AT_HEAD) {
			rq_list_add_tail(&rq->queuelist, &bs->head_list);
			WRITE_ONCE(bs->nr_head, bs->nr_head + 1);
			rq_set_bits(rq, rq_bits(rq) | BFQ_RQ_HEAD);
			continue;
		}
		if (bfq_mergeable(rq) && bfqq_has_neighbour(bfqq, rq) &&
		    rq_sched_try_insert_merge(q, rq, &free_list))
			continue;
		bfqq_update_seek(bfqq, rq);
		bfqq_arrive(q, bfqq, rq, true, bfqq_fifo_expire_ns(bfqq));
		rq_sched_rb_add(bfqq_sort(bfqq), rq);
		bfqq->next_rq = bfq_choose_req(bs->bd, bfqq->next_rq, rq, bs->head_pos);
		bfqq->queued++;
		WRITE_ONCE(bs->queued, bs->queued + 1);
		bfqq_got_request(bs, bfqq, rq);
	}
out:
	sched_unlock(bs);
	while ((rq = rq_list_first_rq(&free_list))) {
		rq_list_del_init(&rq->queuelist);
		rq_sched_free_request(rq);
	}
}

/* The next request of @bs to hand out at @now, or NULL (see sched_ready()); lock held. */
static struct rq_request *sched_next_locked(struct rq_queue *q, struct bfq_sched *bs, uint64_t now,
					    unsigned *delay)
{
	struct rq_request *rq = rq_list_first_rq(&bs->head_list);
	struct bfq_queue *bfqq;

	if (rq) {
		rq_list_del_init(&rq->queuelist);
		WRITE_ONCE(bs->nr_head, bs->nr_head - 1);
		bfqq = rq_bfqq(rq);
		bfqq->dispatched++;
		bs->in_flight++;
		rq_set_bits(rq, BFQ_RQ_DISPATCHED |
				    ((unsigned long)rq_request_sectors(rq) << BFQ_RQ_SECTOR_SHIFT));
		return rq;
	}
	bfqq = sched_ready(bs, now, &rq, delay);
	if (!bfqq)
		return NULL;
	sched_dispatch_rq(q, bs, bfqq, rq, now);
	return rq;
}

/*
 * has_work under the lock: a request to hand out now?  With none ready it
 * may end turns and open an idle window (sched_ready()), as dispatch would.
 * *@now: the time, read here first if 0.
 */
static bool sched_has_work_locked(struct bfq_sched *bs, uint64_t *now, unsigned *delay)
{
	const struct bfq_data *bd = bs->bd;
	struct rq_request *rq = NULL;

	if (bs->nr_head)
		return true;
	if (!bs->queued)
		return false;
	if (bs->in_flight >= (bd->strict_guarantees ? 1 : bd->inflight_cap))
		return false;
	if (bs->in_service ? bs->in_service->queued : bs->queued)
		return true; /* dispatch finds a request without waiting: no clock read */
	if (!*now)
		*now = core_clock_ns();
	return sched_ready(bs, *now, &rq, delay);
}

static struct rq_request *bfq_dispatch_request(struct rq_hw_ctx *hctx)
{
	struct bfq_data *bd = bfq_of(rq_hctx_queue(hctx));
	struct bfq_sched *bs = sched_of_hctx(bd, hctx);
	uint64_t now = core_clock_ns();
	struct rq_request *rq;
	unsigned delay = 0;

	bfq_batch_sync(bs);
	bfq_lock(&bs->lock);
	rq = sched_next_locked(hctx->q, bs, now, &delay);
	sched_unlock(bs);
	if (delay)
		rq_mq_delay_run_hw_queue(hctx, delay);
	return rq;
}

/*
 * The in-service queue's next request, when it may simply go: no head
 * request, room below the in-flight cap, the turn neither timed out nor
 * out of budget.  Exactly the case where has_work says yes and
 * sched_ready() takes the in-service queue's next request in its first
 * round without ending or starting a turn; NULL otherwise (then the full
 * path decides).  Lock held.
 */
static struct rq_request *sched_next_in_turn(const struct bfq_sched *bs, uint64_t now)
{
	const struct bfq_data *bd = bs->bd;
	const struct bfq_queue *bfqq = bs->in_service;
	struct rq_request *rq;

	if (!bfqq || !bfqq->queued || bs->nr_head ||
	    bs->in_flight >= (bd->strict_guarantees ? 1 : bd->inflight_cap) ||
	    (bfqq->budget_timeout && now >= bfqq->budget_timeout))
		return NULL;
	rq = bfqq->next_rq;
	if (bfqq->entity.service &&
	    bfqq->entity.service + rq_request_sectors(rq) > bfqq->entity.budget)
		return NULL;
	return rq;
}

/*
 * Many requests of the in-service queue in one go (sched_drain_in_turn()):
 * its requests as the sorted array v[0, k) with a live mask (its
 * pending run as inserted, or its tree read out), so a request leaves in
 * O(1) instead of an rb-tree erase, and what is left stays a sorted run,
 * built into a tree only if something walks it (bfqq_sort(); the shape of
 * a tree is not seen by anyone, only its order).
 */
#define BFQ_DRAIN_NONE 0xffu

struct bfq_drain {
	struct rq_request **v; /* the queue's run[] */
	uint64_t live;         /* bit i: v[i] still queued (BFQ_RUN_MAX is 64) */
	unsigned k;            /* requests in v */
	bool up;               /* the walk goes up past @far (drain_next_up()) */
	unsigned far_meta;     /* its RQ_BIO_META bit (none: what the next one has) */
};

/* Append the requests of the subtree @n to d->v in order. */
static void drain_flatten(struct bfq_drain *d, struct rq_rb_node *n)
{
	for (; n; n = n->right) {
		drain_flatten(d, n->left);
		d->v[d->k++] = RQ_CONTAINER_OF(n, struct rq_request, rb_node);
	}
}

static unsigned drain_index(const struct bfq_drain *d, const struct rq_request *rq, unsigned hint)
{
	unsigned i = 0;

	if (hint < d->k && d->v[hint] == rq)
		return hint;

	while (d->v[i] != rq)
		i++;
	return i;
}

/*
 * choose_req_inline(bd, @next, @prev, @last, true) == @next for what the
 * drain has most of the time: @next after @last in sector order (not
 * wrapped, so >= @last), @prev NULL or before it (<= @last) and of the
 * same metadata kind.  @next is nearer unless @prev is within back_seek_max
 * and its penalised distance is smaller; a tie goes to the higher sector,
 * @next.  A wrapped @prev loses to the unwrapped @next.
 */
static inline bool drain_far(const struct bfq_data *bd, const struct rq_request *prev,
			     uint64_t last)
{
	return !prev || prev->sector + (uint64_t)bd->back_seek_max_kib * 2 < last;
}

static inline bool drain_choose_up(const struct bfq_data *bd, const struct rq_request *next,
				   const struct rq_request *prev, uint64_t last)
{
	if (drain_far(bd, prev, last))
		return true;
	return next->sector - last <= (last - prev->sector) * bd->back_seek_penalty;
}

/*
 * drain_find_next() while the walk goes up (d->up): the last step chose
 * the request above over the nearest live one below, because there was
 * none or it was behind back_seek_max (drain_far()).  Going up keeps both
 * true: nothing live lies between a request and the nearest live one
 * above it, so the one below stays the nearest, and the sectors only
 * grow, so it stays too far behind.  The next is then the nearest live
 * request above when it has the metadata kind d->far_meta (the one
 * below's; with none below, the first chosen one's, which only sends
 * other kinds the long way) as drain_choose_up() gives it; else
 * BFQ_DRAIN_NONE: ask drain_find_next().
 */
static inline unsigned drain_next_up(const struct bfq_drain *d, unsigned cur)
{
	uint64_t above = d->live & (~1ull << cur); /* bits cur + 1 and up (none for 63) */
	unsigned in;

	if (!above)
		return BFQ_DRAIN_NONE;
	in = (unsigned)__builtin_ctzll(above);
	if ((d->v[in]->opf & RQ_BIO_META) != d->far_meta)
		return BFQ_DRAIN_NONE;
	return in;
}

/*
 * bfqq_find_next_rq() on the array: the request to send after v[cur],
 * which is about to leave (still live), as an index.  Its neighbours in
 * sector order are the nearest live bits below and above bit @cur.
 */
static unsigned drain_find_next(struct bfq_drain *d, const struct bfq_data *bd,
				struct bfq_queue *bfqq, unsigned cur, uint64_t now)
{
	struct rq_request *last = d->v[cur], *prev = NULL, *next = NULL, *oldest;
	uint64_t below = d->live & ((1ull << cur) - 1), above = d->live & ~((2ull << cur) - 1);
	unsigned ip = BFQ_DRAIN_NONE, in = BFQ_DRAIN_NONE;

	if (!bfqq->fifo_checked) {
		bfqq->fifo_checked = true;
		oldest = rq_list_first_rq(&bfqq->fifo);
		if (oldest && oldest != last && now >= oldest->fifo_time)
			return drain_index(d, oldest, BFQ_DRAIN_NONE);
	}
	if (below) {
		ip = 63u - (unsigned)__builtin_clzll(below);
		prev = d->v[ip];
	}
	if (above) {
		in = (unsigned)__builtin_ctzll(above);
		next = d->v[in];
		if (!prev || !((next->opf ^ prev->opf) & RQ_BIO_META)) {
			if (!drain_far(bd, prev, last->sector))
				return drain_choose_up(bd, next, prev, last->sector) ? in : ip;
			d->up = true; /* @prev loses from here up: drain_next_up() */
			d->far_meta = (prev ? prev : next)->opf & RQ_BIO_META;
			return in;
		}
	} else if (below)
		in = (unsigned)__builtin_ctzll(below); /* after the last: wrap to the first */
	if (in != BFQ_DRAIN_NONE)
		next = d->v[in];
	return choose_req_inline(bd, next, prev, last->sector, true) == next ? in : ip;
}

/*
 * @bfqq's requests into @d as a sorted array with a live mask: its
 * pending run as it is, else its tree read into run[] (the queue is then
 * the drain's until sched_drain_in_turn() leaves the rest as a run).
 */
static void drain_load(struct bfq_drain *d, struct bfq_queue *bfqq)
{
	d->v = bfqq->run;
	d->k = bfqq->run_n;
	if (!d->k)
		drain_flatten(d, bfqq->sort.node);
	bfqq->run_n = 0;
	bfqq->sort.node = NULL;
	d->live = d->k == 64 ? ~0ull : (1ull << d->k) - 1;
	d->up = false;
}

/*
 * The in-service @bfqq handed out @n requests of @total sectors, the last
 * @last, ending with @charge_n of @charge_s sectors still to charge (the
 * earlier ones were charged as their size changed): what
 * sched_account_dispatch() does per request, once.  The queue's next
 * request is already set.
 */
static void drain_account(struct bfq_sched *bs, struct bfq_queue *bfqq, unsigned n,
			  uint64_t total, const struct rq_request *last, unsigned charge_s,
			  unsigned charge_n, uint64_t now)
{
	entity_charge_n(&bfqq->entity, charge_s, charge_n);
	bfqq->queued -= n;
	WRITE_ONCE(bs->queued, bs->queued - n);
	bfqq->burst_sectors += total;
	bfqq->dispatched += n;
	bs->in_flight += n;
	bs->head_pos = rq_request_end_sector(last);
	if (!bfqq->budget_timeout)
		bfqq->budget_timeout = now + (uint64_t)bs->bd->timeout_sync_ms * NSEC_PER_MSEC;
	if (!bfqq->queued)
		bfqq_emptied(bs->bd, bfqq, now);
}

/*
 * Dispatch requests of the in-service queue onto @list while its turn
 * goes on, as the one-at-a-time path would (sched_next_in_turn(), then
 * sched_dispatch_rq()), in the same order with the same state, at most
 * @room of them: the caller made sure the queue's first request may go and
 * that @room more would fit the batch and the in-flight cap; the budget is
 * checked before each, as sched_next_in_turn() does.  Each request leaves
 * the FIFO and the hash and is marked as it goes; the counts and charges
 * are added up and applied once at the end (drain_account()): nothing in
 * the loop reads them but the budget check, which sees the running sum.
 * The queue has 2..BFQ_RUN_MAX requests.  Returns how many went (at least
 * one).
 */
static unsigned sched_drain_in_turn(struct rq_queue *q, struct bfq_sched *bs,
				    struct rq_list_node *list, unsigned room, uint64_t now)
{
	struct bfq_queue *bfqq = bs->in_service;
	uint32_t service = bfqq->entity.service, budget = bfqq->entity.budget;
	unsigned cur, left = 0, n = 0, queued = bfqq->queued, run_s = 0, run_n = 0;
	unsigned lim = room < queued ? room : queued; /* the last one's next is none */
	struct rq_request *last = NULL;
	struct bfq_drain d;
	uint64_t total = service;

	drain_load(&d, bfqq);
	cur = drain_index(&d, bfqq->next_rq, bfqq->run_next);
	for (;;) {
		struct rq_request *rq = d.v[cur];
		unsigned nxt = BFQ_DRAIN_NONE, s = rq_request_sectors(rq);

		if (service && service + s > budget)
			break;
		if (n + 1 < queued) {
			if (d.up)
				nxt = drain_next_up(&d, cur);
			if (nxt == BFQ_DRAIN_NONE) {
				d.up = false;
				nxt = drain_find_next(&d, bs->bd, bfqq, cur, now);
			}
		} else
			bfqq->fifo_checked = true; /* what looking would have done */
		d.live &= ~(1ull << cur);
		rq_rb_clear_node(&rq->rb_node);
		/* out of the FIFO onto @list: rq_list_del_init() without the init */
		rq->queuelist.next->prev = rq->queuelist.prev;
		rq->queuelist.prev->next = rq->queuelist.next;
		rq_list_add_tail(&rq->queuelist, list);
		if (rq->rq_flags & RQ_RQF_HASHED)
			rq_sched_hash_del(q, rq);
		/* a queued request's bits are BFQ_RQ_QUEUED alone (bfqq_arrive(), run_place()) */
		rq_set_bits(rq, BFQ_RQ_DISPATCHED | ((unsigned long)s << BFQ_RQ_SECTOR_SHIFT));
		if (s != run_s && run_n) {
			entity_charge_n(&bfqq->entity, run_s, run_n);
			run_n = 0;
		}
		run_s = s;
		run_n++;
		service += s;
		last = rq;
		cur = nxt;
		if (++n == lim)
			break;
	}
	total = service - total;
	/* the next request: the one the budget stopped, or the last one's next */
	bfqq->next_rq = cur != BFQ_DRAIN_NONE ? d.v[cur] : NULL;
	drain_account(bs, bfqq, n, total, last, run_s, run_n, now);
	for (uint64_t m = d.live; m; m &= m - 1) {
		unsigned i = (unsigned)__builtin_ctzll(m);

		bfqq->run_next = i == cur ? left : bfqq->run_next;
		d.v[left++] = d.v[i]; /* in order, and left <= i */
	}
	bfqq->run_n = left; /* the rest, a run again: built if someone walks it */
	return n;
}

/*
 * dispatch_requests: up to @max requests, the ones the core's loop of
 * has_work and dispatch_request calls would hand out (each taken only
 * while has_work says so, exactly: a turn that runs dry is left to the
 * next dispatch, not ended here), in one lock hold and with one clock
 * read (the calls of a batch are microseconds apart; every turn, budget,
 * charge and idling decision is the same, taken at the batch's time).
 */
static unsigned bfq_dispatch_requests(struct rq_hw_ctx *hctx, struct rq_list_node *list,
				      unsigned max)
{
	struct bfq_data *bd = bfq_of(rq_hctx_queue(hctx));
	struct bfq_sched *bs = sched_of_hctx(bd, hctx);
	uint64_t now;
	unsigned n = 0, delay = 0, cap;

	bfq_batch_sync(bs);
	if (!READ_ONCE(bs->queued) && !READ_ONCE(bs->nr_head))
		return 0; /* as has_work: whoever adds a request runs the queue after */
	now = core_clock_ns(); /* the plug's reading in its flush */
	bfq_lock(&bs->lock);
	cap = bd->strict_guarantees ? 1 : bd->inflight_cap; /* tunables: any lock held */
	while (n < max) {
		struct rq_request *rq = sched_next_in_turn(bs, now);
		unsigned k = rq ? bs->in_service->queued : 0, room = max - n;

		/* rq: in_flight < cap; room: how many the cap and the batch let go */
		if (room > cap - bs->in_flight)
			room = cap - bs->in_flight;
		if (k > 1 && k <= BFQ_RUN_MAX && room > 1) {
			n += sched_drain_in_turn(hctx->q, bs, list, room, now);
			continue;
		}
		if (rq) {
			sched_dispatch_rq(hctx->q, bs, bs->in_service, rq, now);
		} else {
			if (!sched_has_work_locked(bs, &now, &delay))
				break;
			rq = sched_next_locked(hctx->q, bs, now, &delay);
			if (!rq)
				break;
		}
		rq_list_add_tail(&rq->queuelist, list);
		n++;
	}
	sched_unlock(bs);
	if (delay)
		rq_mq_delay_run_hw_queue(hctx, delay);
	return n;
}

static bool bfq_has_work(struct rq_hw_ctx *hctx)
{
	struct bfq_data *bd = bfq_of(rq_hctx_queue(hctx));
	struct bfq_sched *bs = sched_of_hctx(bd, hctx);
	uint64_t now = 0;
	unsigned delay = 0;
	bool work;

	bfq_batch_sync(bs);
	/*
	 * Lock-free answers: ready (see sched_unlock()), or empty (whoever
	 * adds a request runs the queue after).
	 */
	if (READ_ONCE(bs->ready))
		return true;
	if (!READ_ONCE(bs->queued) && !READ_ONCE(bs->nr_head))
		return false;
	bfq_lock(&bs->lock);
	work = sched_has_work_locked(bs, &now, &delay);
	sched_unlock(bs);
	if (delay)
		rq_mq_delay_run_hw_queue(hctx, delay);
	return work;
}

/* Record the completion of @rq in the batch @b, which has room. */
static inline void bfq_batch_put(struct bfq_batch *b, struct bfq_queue *bfqq, struct rq_request *rq,
				 unsigned long bits, uint64_t now)
{
	unsigned n = b->n;

	b->bfqq[n] = bfqq;
	b->t[n] = now;
	b->sectors[n] = (uint32_t)(bits >> BFQ_RQ_SECTOR_SHIFT);
	b->n = n + 1;
	/* what bfqq_request_done() and bfqq_unpin() do to @rq; the pin stays */
	rq->elv_priv[0] = NULL;
	rq_set_bits(rq, 0);
}

/* bfq_batch_add() on a full batch: apply it first. */
static __attribute__((noinline)) void bfq_batch_add_flush(struct bfq_queue *bfqq,
							  struct rq_request *rq, unsigned long bits,
							  uint64_t now)
{
	bfq_batch_flush();
	bfq_batch_put(&bfq_batch, bfqq, rq, bits, now);
}

/*
 * Hold the completion of @rq (dispatched, of @bfqq on the open batch's
 * scheduler) for the batch's end; false if it must be applied now.
 */
static inline bool bfq_batch_add(struct bfq_queue *bfqq, struct rq_request *rq, uint64_t now)
{
	struct bfq_batch *b = &bfq_batch;
	unsigned long bits = rq_bits(rq);

	if ((bits & (BFQ_RQ_DISPATCHED | BFQ_RQ_QUEUED | BFQ_RQ_HEAD)) != BFQ_RQ_DISPATCHED)
		return false;
	if (unlikely(b->n == BFQ_BATCH_MAX))
		bfq_batch_add_flush(bfqq, rq, bits, now);
	else
		bfq_batch_put(b, bfqq, rq, bits, now);
	return true;
}

/* completion_batch_begin: completions of @hctx's scheduler wait in bfq_batch. */
static void bfq_batch_begin(struct rq_hw_ctx *hctx)
{
	bfq_batch.bs = sched_of_hctx(bfq_of(rq_hctx_queue(hctx)), hctx);
}

/* completion_batch_end: apply what the batch holds, in one lock hold. */
static void bfq_batch_end(struct rq_hw_ctx *hctx)
{
	if (bfq_batch.n)
		bfq_batch_flush();
	bfq_batch.bs = NULL;
}

/* bfq_completed_request() applied now, in a lock hold of its own. */
static __attribute__((noinline)) void bfq_completed_locked(struct bfq_queue *bfqq,
							   struct rq_request *rq, uint64_t now)
{
	struct bfq_sched *bs = bfqq->bs;
	unsigned delay = 0;
	bool kick = false;

	bfq_batch_sync(bs);
	bfq_lock(&bs->lock);
	if (rq_bits(rq) & BFQ_RQ_DISPATCHED) {
		bfq_account_done(bs, bfqq, (unsigned)(rq_bits(rq) >> BFQ_RQ_SECTOR_SHIFT), now,
				 &delay, &kick);
		rq_set_bits(rq, rq_bits(rq) & ~BFQ_RQ_DISPATCHED);
	}
	/* the core's finish_request follows: its work is done here, in this hold */
	if (!(rq_bits(rq) & (BFQ_RQ_QUEUED | BFQ_RQ_HEAD)))
		bfqq_unpin(bs, bfqq, rq);
	sched_unlock_run(bs, delay, kick);
}

/*
 * completed_request: the device is done with @rq.  The in-service queue's
 * idle window opens when its last request completes; strict_guarantees
 * waits for the device to be empty (bfq_completed_turn()).  Inside a
 * completion batch of its hardware queue on this thread the work waits
 * for the batch's end (bfq_batch_add()).
 */
static void bfq_completed_request(struct rq_request *rq, uint64_t now)
{
	struct bfq_queue *bfqq = rq_bfqq(rq);

	if (!bfqq)
		return;
	if (bfqq->bs == bfq_batch.bs && bfq_batch_add(bfqq, rq, now))
		return;
	bfq_completed_locked(bfqq, rq, now);
}

static void bfq_requeue_request(struct rq_request *rq)
{
	struct bfq_queue *bfqq = rq_bfqq(rq);

	if (!bfqq)
		return;
	bfq_batch_sync(bfqq->bs);
	bfq_lock(&bfqq->bs->lock);
	if (rq_bits(rq) & BFQ_RQ_DISPATCHED)
		bfqq_request_done(bfqq->bs, bfqq, rq);
	rq_set_bits(rq, 0);
	sched_unlock(bfqq->bs);
}

/* bio_merge with requests queued on @bs, the bio's hardware queue's scheduler. */
static __attribute__((noinline)) bool bfq_bio_merge_locked(struct rq_queue *q, struct bfq_sched *bs,
							   struct rq_bio *bio, unsigned nr_segs)
{
	struct rq_request *free_rq = NULL;
	bool merged;

	bfq_lock(&bs->lock);
	sched_hash_flush(q, bs);
	merged = rq_sched_try_merge(q, bio, nr_segs, &free_rq);
	sched_unlock(bs);
	if (free_rq)
		rq_sched_free_request(free_rq);
	return merged;
}

/* bio_merge on the bio's hardware queue's scheduler, if it has requests queued. */
static __attribute__((noinline)) bool bfq_bio_merge_mapped(struct rq_queue *q, struct bfq_data *bd,
							   struct rq_bio *bio, unsigned nr_segs)
{
	struct rq_hw_ctx *hctx = rq_sched_bio_hctx(q, bio, NULL);
	struct bfq_sched *bs;

	if (!hctx)
		return false;
	bs = sched_of_hctx(bd, hctx);
	if (!READ_ONCE(bs->queued))
		return false;
	return bfq_bio_merge_locked(q, bs, bio, nr_segs);
}

static bool bfq_bio_merge(struct rq_queue *q, struct rq_bio *bio, unsigned nr_segs)
{
	struct bfq_data *bd = bfq_of(q);

	/*
	 * Only requests queued on the bio's hardware queue are candidates (the
	 * core's hash is per hardware queue, and during a submission the core
	 * keeps the bio's mapping, so the lock taken is the hash's): none
	 * queued, no lock to take (a race only misses a merge).  With one
	 * scheduler every hardware queue maps to it: no mapping to ask for
	 * when it has nothing queued (the common case of a drained queue).
	 */
	if (bd->nr_sched == 1 && !READ_ONCE(bd->sched[0].queued))
		return false;
	return bfq_bio_merge_mapped(q, bd, bio, nr_segs);
}

/* request_merge: a front merge in the sorted tree of the bio's own queue; lock held. */
static int bfq_request_merge(struct rq_queue *q, struct rq_request **rq, struct rq_bio *bio)
{
	struct bfq_data *bd = bfq_of(q);
	struct rq_hw_ctx *hctx = rq_sched_bio_hctx(q, bio, NULL);
	struct bfq_queue *bfqq;
	struct rq_request *found;

	if (!hctx)
		return RQ_ELV_NO_MERGE;
	bfqq = bfqq_lookup(sched_of_hctx(bd, hctx), ioc_of_bio(bio), bio_is_sync(bio), false, 0);
	if (!bfqq)
		return RQ_ELV_NO_MERGE;
	found = rq_sched_rb_find(bfqq_sort(bfqq), rq_bio_end_sector(bio));
	if (!found)
		return RQ_ELV_NO_MERGE;
	*rq = found;
	return RQ_ELV_FRONT_MERGE;
}

/* allow_merge: only into a request of the bio's own context and kind. */
static bool bfq_allow_merge(struct rq_queue *q, struct rq_request *rq, struct rq_bio *bio)
{
	const struct bfq_queue *bfqq = rq_bfqq(rq);

	return bfqq && bfqq->ioc == ioc_of_bio(bio) && bfqq->sync == bio_is_sync(bio);
}

/*
 * request_merged: after a front merge that moved @rq before its neighbour,
 * re-sort it and see whether it is now the better next request (the
 * kernel's bfq_request_merged()); lock held.
 */
static void bfq_request_merged(struct rq_queue *q, struct rq_request *rq, enum rq_elv_merge type)
{
	struct bfq_queue *bfqq = rq_bfqq(rq);
	struct rq_request *prev;

	if (type != RQ_ELV_FRONT_MERGE || !bfqq || !(rq_bits(rq) & BFQ_RQ_QUEUED))
		return;
	bfqq_sort(bfqq);
	prev = rq_sched_rb_former(rq);
	if (!prev || rq->sector >= prev->sector)
		return;
	rq_sched_rb_del(&bfqq->sort, rq);
	rq_sched_rb_add(&bfqq->sort, rq);
	bfqq->next_rq = bfq_choose_req(bfqq->bs->bd, bfqq->next_rq, rq, bfqq->bs->head_pos);
}

/* requests_merged: @next joined @rq; it leaves its queue (maybe another context's). */
static void bfq_requests_merged(struct rq_queue *q, struct rq_request *rq, struct rq_request *next)
{
	struct bfq_queue *nq = rq_bfqq(next), *bfqq = rq_bfqq(rq);

	if (!nq || !(rq_bits(next) & BFQ_RQ_QUEUED))
		return;
	/* @rq inherits the earlier deadline and FIFO place of its own queue's request */
	if (nq == bfqq && (rq_bits(rq) & BFQ_RQ_QUEUED) && next->fifo_time < rq->fifo_time) {
		rq_list_del_init(&rq->queuelist);
		rq_list_insert(&rq->queuelist, next->queuelist.prev, &next->queuelist);
		rq->fifo_time = next->fifo_time;
	}
	if (bfqq && bfqq->next_rq == next)
		bfqq->next_rq = rq;
	bfqq_del_rq(q, nq, next, core_clock_ns());
	if (!nq->queued && nq->bs->in_service != nq)
		entity_deactivate(&nq->entity);
}

/* former_request / next_request: @rq's neighbours in its queue's tree; lock held. */
static struct rq_request *bfq_former_request(struct rq_queue *q, struct rq_request *rq)
{
	if (!(rq_bits(rq) & BFQ_RQ_QUEUED))
		return NULL;
	bfqq_sort(rq_bfqq(rq));
	return rq_sched_rb_former(rq);
}

static struct rq_request *bfq_next_request(struct rq_queue *q, struct rq_request *rq)
{
	if (!(rq_bits(rq) & BFQ_RQ_QUEUED))
		return NULL;
	bfqq_sort(rq_bfqq(rq));
	return rq_sched_rb_latter(rq);
}

/* ------------------------------------------------------------ tunables */

/* Parse all of @buf (one optional trailing newline) as an unsigned in [min, max]. */
static int parse_uint(const char *buf, unsigned long min, unsigned long max, unsigned *out)
{
	unsigned long v;

	if (rq_sched_parse_uint(buf, min, max, &v))
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

static int emit(char *buf, size_t len, unsigned v)
{
	int n = snprintf(buf, len, "%u\n", v);

	return n < 0 || (size_t)n >= len ? -ENOSPC : n;
}

static int show_locked(void *data, char *buf, size_t len, const unsigned *field, unsigned div)
{
	struct bfq_data *bd = data;
	unsigned v;

	/* a store holds every lock: any one orders this read after it */
	bfq_lock(&bd->sched[0].lock);
	v = *field / div;
	bfq_unlock(&bd->sched[0].lock);
	return emit(buf, len, v);
}

static int store_locked(void *data, const char *buf, unsigned *field, unsigned min, unsigned max,
			unsigned mul)
{
	struct bfq_data *bd = data;
	unsigned v;

	if (parse_uint(buf, min, max, &v))
		return -EINVAL;
	for (unsigned i = 0; i < bd->nr_sched; i++)
		bfq_lock(&bd->sched[i].lock);
	*field = v * mul;
	for (unsigned i = bd->nr_sched; i-- > 0;)
		sched_unlock(&bd->sched[i]);
	return 0;
}

#define BFQ_ATTR(name, field, min, max, unit)                                            \
	static int bfq_##name##_show(void *data, char *buf, size_t len)                  \
	{                                                                                \
		return show_locked(data, buf, len, &((struct bfq_data *)data)->field, unit); \
	}                                                                                \
	static int bfq_##name##_store(void *data, const char *buf)                       \
	{                                                                                \
		return store_locked(data, buf, &((struct bfq_data *)data)->field, min, max, unit); \
	}

BFQ_ATTR(slice_idle, slice_idle_us, 0, 1000, 1000)
BFQ_ATTR(slice_idle_us, slice_idle_us, 0, 1000000, 1)
BFQ_ATTR(low_latency, low_latency, 0, 1, 1)
BFQ_ATTR(back_seek_max, back_seek_max_kib, 0, 1u << 30, 1)
BFQ_ATTR(back_seek_penalty, back_seek_penalty, 1, 1000, 1)
BFQ_ATTR(fifo_expire_sync, fifo_expire_sync_ms, 1, 60000, 1)
BFQ_ATTR(fifo_expire_async, fifo_expire_async_ms, 1, 60000, 1)
BFQ_ATTR(timeout_sync, timeout_sync_ms, 1, 60000, 1)
BFQ_ATTR(max_budget, max_budget, 0, 1u << 22, 1)
BFQ_ATTR(strict_guarantees, strict_guarantees, 0, 1, 1)

#define BFQ_ATTR_ENTRY(name) { #name, bfq_##name##_show, bfq_##name##_store }

static const struct rq_elv_attr bfq_attrs[] = {
	BFQ_ATTR_ENTRY(slice_idle),
	BFQ_ATTR_ENTRY(slice_idle_us),
	BFQ_ATTR_ENTRY(low_latency),
	BFQ_ATTR_ENTRY(back_seek_max),
	BFQ_ATTR_ENTRY(back_seek_penalty),
	BFQ_ATTR_ENTRY(fifo_expire_sync),
	BFQ_ATTR_ENTRY(fifo_expire_async),
	BFQ_ATTR_ENTRY(timeout_sync),
	BFQ_ATTR_ENTRY(max_budget),
	BFQ_ATTR_ENTRY(strict_guarantees),
	{ NULL, NULL, NULL },
};

/* ---------------------------------------------------------- registration */

const struct rq_elevator_type rq_bfq_type = {
	RQ_ELV_TYPE_INIT,
	.name = "bfq",
	.features = RQ_ELV_F_MQ,
	.ops = {
		.init_sched = bfq_init_sched,
		.exit_sched = bfq_exit_sched,
		.depth_updated = bfq_depth_updated,
		.limit_depth = bfq_limit_depth,
		.allow_merge = bfq_allow_merge,
		.bio_merge = bfq_bio_merge,
		.request_merge = bfq_request_merge,
		.request_merged = bfq_request_merged,
		.requests_merged = bfq_requests_merged,
		.prepare_request = bfq_prepare_request,
		.finish_request = bfq_finish_request,
		.insert_requests = bfq_insert_requests,
		.dispatch_request = bfq_dispatch_request,
		.has_work = bfq_has_work,
		.completed_request = bfq_completed_request,
		.requeue_request = bfq_requeue_request,
		.former_request = bfq_former_request,
		.next_request = bfq_next_request,
	},
	.attrs = bfq_attrs,
	.dispatch_requests = bfq_dispatch_requests,
	.completion_batch_begin = bfq_batch_begin,
	.completion_batch_end = bfq_batch_end,
};
