/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * cfq: the completely fair queueing scheduler of the single-queue front end,
 * with the behaviour and tunables Linux 4.x documented for cfq-iosched.
 * Written from that documentation; doc/sched-cfq.md explains it at length.
 *
 * Who gets the disk:
 *
 *   groups     every io group with queued work sits on one tree ordered by
 *              its virtual disk time; the leftmost is served.  A group is
 *              charged the time its queue used, scaled by 100 / weight, so
 *              over time groups get the disk in proportion to their weights.
 *   workloads  inside the group, the priority class (RT before BE before
 *              IDLE) and then the workload type - sync-idle (sequential
 *              sync queues that are worth waiting for), sync-noidle (seeky
 *              sync queues), async - served longest ago.  A workload gets a
 *              share of the group's slice of target_latency in proportion
 *              to its busy queues.
 *   queues     each io context has a sync queue per device; async requests
 *              share one queue per group, class and level.  The first queue
 *              of the workload's tree gets a time slice (slice_sync /
 *              slice_async, longer for lower levels; shortened under
 *              low_latency when many queues are busy), and keeps the disk
 *              until it ends, its requests run out and idling is not worth
 *              it, or another queue preempts it.
 *   requests   FIFO-expired first (checked once per slice), else the next
 *              in sector order, allowing a backward seek of up to
 *              back_seek_max at back_seek_penalty times its cost.
 *
 * Idling: when the active sync queue runs dry, cfq waits up to slice_idle
 * for its next request if the queue's think time is short and its access
 * sequential (or it is the last queue on its tree), or group_idle for its
 * group.  dispatch then returns 0 and asks for a delayed run with
 * rq_sq_delay_queue(); any run after the idle window expires the queue.
 *
 * Every hook runs with the queue lock held.  The tunables are written by
 * the attribute path without it: single words read with relaxed atomic
 * loads, so a change takes effect from the next decision on.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librequest/elevator.h>
#include <librequest/sq.h>

#include "lib/internal/ioc.h"
#include "lib/internal/alloc.h"

/* -------------------------------------------------------- tunable defaults */

#define CFQ_QUANTUM 8               /* requests a queue may have in flight per round */
#define CFQ_FIFO_EXPIRE_SYNC 125    /* ms: a sync request should start within this */
#define CFQ_FIFO_EXPIRE_ASYNC 250   /* ms: an async request should start within this */
#define CFQ_BACK_SEEK_MAX 16384     /* KiB: longest backward seek considered */
#define CFQ_BACK_SEEK_PENALTY 2     /* a backward seek costs this many forward ones */
#define CFQ_SLICE_SYNC 100          /* ms: base time slice of a sync queue */
#define CFQ_SLICE_ASYNC 40          /* ms: base time slice of an async queue */
#define CFQ_SLICE_ASYNC_RQ 2        /* base requests an async queue dispatches per slice */
#define CFQ_SLICE_IDLE 8            /* ms: wait for a sync queue's next request */
#define CFQ_GROUP_IDLE 8            /* ms: wait for a group's next request */
#define CFQ_LOW_LATENCY 1           /* 0/1: scale slices to meet target_latency */
#define CFQ_TARGET_LATENCY 300      /* ms: a round over all busy queues */

/* Fixed constants of the algorithm (not tunable in the kernel either). */
#define CFQ_SLICE_SCALE 5           /* a level moves the slice by base / 5 */
#define CFQ_MIN_TT_NS (2 * NS_PER_MS) /* shortest workload slice */
#define CFQ_IDLE_DELAY_NS (200 * NS_PER_MS) /* idle class queue: go behind the last */
#define CFQ_NEW_GROUP_DELAY (CFQ_IDLE_DELAY_NS >> 12) /* vdisktime a new group goes behind */
#define CFQ_SEEK_THR 800            /* sectors: a longer jump is a seek (disks) */
#define CFQ_SECT_THR_NONROT 64      /* sectors: smaller requests count as seeky (ssd) */
#define CFQ_HW_QUEUE_MIN 5          /* in-driver depth that means command queueing */
#define CFQ_HW_TAG_SAMPLES 50       /* samples before judging command queueing */
#define CFQ_TTIME_VALID 80          /* think time sample weight that counts */
#define CFQ_WEIGHT_REF 100          /* the weight a charge is scaled against */
#define CFQ_HASH_BITS 8
#define CFQ_SWEEP 2                 /* contexts checked for release per event */

#define NS_PER_MS 1000000ull

/* ---------------------------------------------------------- data structures */

/* Priority classes, in service order. */
enum cfq_class { CFQ_RT = 0, CFQ_BE = 1, CFQ_IDLE = 2 };

/* Workload types; the order breaks ties when choosing the next one. */
enum cfq_wl { CFQ_WL_ASYNC = 0, CFQ_WL_SYNC_NOIDLE = 1, CFQ_WL_SYNC = 2, CFQ_NR_WL = 3 };

/**
 * struct cfq_ttime - think time: how long after its last completion a
 * submitter sends its next request, as a decaying average (7/8 of the old
 * value each sample, in fixed point with 256 as one sample).
 */
struct cfq_ttime {
	uint64_t last_end_ns;
	uint64_t samples;
	uint64_t total;
	uint64_t mean;
};

/**
 * struct cfq_tree - a service tree of busy queues ordered by key, one per
 * class and workload type of a group.
 */
struct cfq_tree {
	struct rq_rb_root root;
	unsigned count;
	struct cfq_ttime ttime;
};

struct cfq_data;
struct cfq_queue;

/**
 * struct cfq_group - an io group as this queue sees it.
 * @node: on cfq_data.groups.
 * @rb: on the group tree while @on_tree (it has busy queues).
 * @vdisktime: service received, scaled by CFQ_WEIGHT_REF / weight.
 * @iog: the io group (referenced), NULL for the root group.
 * @weight: the weight in use while on the tree (re-read when it enters).
 * @ref: queues and io contexts pointing here (the root group is never freed).
 * @nr_busy: busy queues.
 * @busy_avg: a slowly decaying average of busy queues, [BE and IDLE, RT].
 * @saved_*: the workload in progress when the group was last expired.
 * @dispatched: requests of the group dispatched and not completed.
 * @async: the shared async queues, per class (RT, BE) and level; weak.
 */
struct cfq_group {
	struct rq_list_node node;
	struct rq_rb_node rb;
	bool on_tree;
	uint64_t vdisktime;
	struct rq_io_group *iog;
	unsigned weight;
	unsigned ref;
	unsigned nr_busy;
	unsigned busy_avg[2];
	uint64_t saved_wl_slice;
	int saved_wl_type, saved_wl_class;
	unsigned dispatched;
	struct cfq_ttime ttime;
	struct cfq_tree st[2][CFQ_NR_WL];
	struct cfq_tree st_idle;
	struct cfq_queue *async[2][8];
	struct cfq_queue *async_idle;
};

/**
 * struct cfq_queue - requests of one io context (sync) or shared async
 * requests of one group, class and level.
 * @ref: the io context's link (sync), each request from set_request to
 *	put_request, and being the active queue.
 * @tree / @rb / @key: place on a service tree while @on_rr (busy: it has
 *	queued requests, or is active).
 * @sort / @fifo: queued requests by sector and by arrival.
 * @next_rq: the request sector order serves next.
 * @allocated: requests between set_request and put_request.
 * @dispatched: requests moved to the dispatch queue, not completed.
 * @slice_*: the time slice: begins at the first completion once active.
 * @seek_history: one bit per request, set for a seek; @nr_seeks: its
 *	1 bits, kept as it shifts rather than counted per test.
 */
struct cfq_queue {
	unsigned ref;
	struct cfq_group *cfqg;
	struct rq_io_context *ioc;     /* sync: the context (the link holds it) */
	bool sync;
	uint16_t ioprio;               /* as last set, RQ_IOPRIO_VALUE() */
	uint8_t cls, level;

	struct cfq_tree *tree;
	struct rq_rb_node rb;
	int64_t key;
	bool on_rr;

	struct rq_rb_root sort;
	struct rq_list_node fifo;
	struct rq_request *next_rq;
	unsigned queued;
	unsigned allocated;
	unsigned dispatched;

	uint64_t slice_start, slice_end, allocated_slice, dispatch_start;
	unsigned slice_dispatch;
	bool slice_new, wait_request, must_dispatch, must_alloc_slice, fifo_checked;
	bool idle_window, deep;

	uint64_t last_request_pos;
	uint32_t seek_history;
	unsigned nr_seeks;
	struct cfq_ttime ttime;
};

/**
 * struct cfq_cic - an io context known to this queue (the kernel's cfq_io_cq):
 * holds a reference on the context, its group and its sync queue, and is
 * released once only this link holds the context and the sync queue is idle.
 */
struct cfq_cic {
	struct cfq_cic *hnext;
	struct rq_list_node lru;
	struct rq_io_context *ioc;
	unsigned group_gen;
	struct cfq_group *cfqg;
	struct cfq_queue *sync_q;
};

/**
 * struct cfq_data - one queue's cfq instance.
 * @t_*: the tunables (ms, KiB or counts as named), relaxed atomics.
 */
struct cfq_data {
	struct rq_queue *q;
	struct cfq_group root;
	struct rq_list_node groups;
	struct rq_rb_root grp_tree;
	uint64_t min_vdisktime;
	unsigned busy_weight;

	unsigned busy_queues, busy_sync_queues;
	unsigned rq_queued, rq_in_driver, rq_in_flight[2];

	struct cfq_queue *active;
	struct cfq_group *serving_group;
	int serving_class, serving_type;
	uint64_t workload_expires;
	uint64_t idle_until;           /* idling (wait_request) until, 0: not */
	uint64_t idle_real_until;      /* the same on the real clock (see arm_idle) */
	uint64_t delay_real_at;        /* real time a delayed run was asked for */
	uint64_t last_position;
	uint64_t last_delayed_sync;
	int hw_tag;                    /* -1 unknown, 0, 1 */
	unsigned hw_tag_samples, hw_tag_est;
	bool nonrot;

	struct cfq_cic *hash[1u << CFQ_HASH_BITS];
	struct rq_list_node cics;
	struct cfq_cic *last_cic;
	struct cfq_queue oom;          /* requests without an io context */

	unsigned t_quantum;
	unsigned t_fifo_expire[2];     /* [async, sync] */
	unsigned t_back_seek_max;
	unsigned t_back_seek_penalty;
	unsigned t_slice[2];           /* [async, sync] */
	unsigned t_slice_async_rq;
	unsigned t_slice_idle;
	unsigned t_group_idle;
	unsigned t_low_latency;
	unsigned t_target_latency;
};

/* --------------------------------------------------------------- helpers */

static struct cfq_data *cfqd_of(struct rq_queue *q)
{
	return rq_sched_data(q);
}

static unsigned tun(const unsigned *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static uint64_t tun_ns(const unsigned *p)
{
	return (uint64_t)tun(p) * NS_PER_MS;
}

static struct cfq_queue *rq_cfqq(const struct rq_request *rq)
{
	return rq->elv_priv[0];
}

static bool bio_is_sync(const struct rq_bio *bio)
{
	return bio->op == RQ_OP_READ || (bio->opf & RQ_BIO_SYNC);
}

/* Class and level of a priority; NONE is best effort at level 4. */
static void prio_split(uint16_t ioprio, uint8_t *cls, uint8_t *level)
{
	switch (RQ_IOPRIO_CLASS(ioprio)) {
	case RQ_IOPRIO_CLASS_RT:
		*cls = CFQ_RT;
		*level = (uint8_t)RQ_IOPRIO_LEVEL(ioprio);
		break;
	case RQ_IOPRIO_CLASS_IDLE:
		*cls = CFQ_IDLE;
		*level = 7;
		break;
	case RQ_IOPRIO_CLASS_BE:
		*cls = CFQ_BE;
		*level = (uint8_t)RQ_IOPRIO_LEVEL(ioprio);
		break;
	default:
		*cls = CFQ_BE;
		*level = 4;
		break;
	}
}

/*
 * The clock the idle timer (a delayed queue run) fires on: CLOCK_MONOTONIC
 * with the service thread, for the fallback when the library clock is
 * replaced; the library clock itself when the application drives the
 * service, which then makes the fallback the window itself.
 */
static uint64_t real_ns(void)
{
	return rq_service_clock_ns();
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/* ------------------------------------------------ think time and seeks */

static void ttime_sample(struct cfq_ttime *t, uint64_t now, uint64_t cap)
{
	uint64_t elapsed = now > t->last_end_ns ? now - t->last_end_ns : 0;

	if (elapsed > cap)
		elapsed = cap;
	t->samples = (7 * t->samples + 256) / 8;
	t->total = (7 * t->total + 256 * elapsed) / 8;
	t->mean = (t->total + 128) / t->samples;
}

static bool ttime_valid(const struct cfq_ttime *t)
{
	return t->samples > CFQ_TTIME_VALID;
}

/* Is the think time on @t longer than the idle window we would spend? */
static bool ttime_big(struct cfq_data *cfqd, const struct cfq_ttime *t, bool group)
{
	if (!ttime_valid(t))
		return false;
	return t->mean > (group ? tun_ns(&cfqd->t_group_idle) : tun_ns(&cfqd->t_slice_idle));
}

static bool cfqq_seeky(const struct cfq_queue *cfqq)
{
	return cfqq->nr_seeks > 32 / 8;
}

/* ------------------------------------------------------ queue properties */

static enum cfq_wl cfqq_type(const struct cfq_queue *cfqq)
{
	if (!cfqq->sync)
		return CFQ_WL_ASYNC;
	return cfqq->idle_window ? CFQ_WL_SYNC : CFQ_WL_SYNC_NOIDLE;
}

static struct cfq_tree *tree_for(struct cfq_group *cfqg, unsigned cls, enum cfq_wl type)
{
	return cls == CFQ_IDLE ? &cfqg->st_idle : &cfqg->st[cls][type];
}

/* Base slice of a queue: sync or async, lengthened by base/5 per level above 4. */
static uint64_t prio_slice(struct cfq_data *cfqd, bool sync, unsigned level)
{
	uint64_t base = tun_ns(&cfqd->t_slice[sync]);

	return base + base / CFQ_SLICE_SCALE * 4 - base / CFQ_SLICE_SCALE * level;
}

/* Requests an async queue may dispatch in one slice. */
static unsigned prio_maxrq(struct cfq_data *cfqd, const struct cfq_queue *cfqq)
{
	return 2 * tun(&cfqd->t_slice_async_rq) * (8 - cfqq->level);
}

static bool slice_used(const struct cfq_queue *cfqq, uint64_t now)
{
	return !cfqq->slice_new && now >= cfqq->slice_end;
}

/* Would dispatching more overrun the slice (a slice_idle per request)? */
static bool slice_used_soon(struct cfq_data *cfqd, const struct cfq_queue *cfqq, uint64_t now)
{
	return cfqq->slice_new ||
	       now + tun_ns(&cfqd->t_slice_idle) * cfqq->dispatched > cfqq->slice_end;
}

static bool iops_mode(struct cfq_data *cfqd)
{
	return !tun(&cfqd->t_slice_idle) && cfqd->hw_tag;
}

/* ------------------------------------------------------------- groups */

static void grp_tree_insert(struct cfq_data *cfqd, struct cfq_group *cfqg)
{
	struct rq_rb_node **link = &cfqd->grp_tree.node, *parent = NULL;

	while (*link) {
		struct cfq_group *cur = RQ_CONTAINER_OF(*link, struct cfq_group, rb);

		parent = *link;
		link = (int64_t)(cfqg->vdisktime - cur->vdisktime) < 0 ? &parent->left :
									 &parent->right;
	}
	rq_rb_link_node(&cfqg->rb, parent, link);
	rq_rb_insert_color(&cfqg->rb, &cfqd->grp_tree);
	cfqg->on_tree = true;
	cfqd->busy_weight += cfqg->weight;
}

static void grp_tree_erase(struct cfq_data *cfqd, struct cfq_group *cfqg)
{
	if (!cfqg->on_tree)
		return;
	rq_rb_erase(&cfqg->rb, &cfqd->grp_tree);
	cfqg->on_tree = false;
	cfqd->busy_weight -= cfqg->weight;
}

/*
 * A group gets busy: it enters just behind every busy group (a token
 * distance, so it neither jumps the queue nor waits out a round), with its
 * current weight.
 */
static void group_busy(struct cfq_data *cfqd, struct cfq_group *cfqg)
{
	struct rq_rb_node *last = rq_rb_last(&cfqd->grp_tree);

	if (cfqg->nr_busy++ || cfqg->on_tree)
		return;
	if (last)
		cfqg->vdisktime = RQ_CONTAINER_OF(last, struct cfq_group, rb)->vdisktime +
				  CFQ_NEW_GROUP_DELAY;
	else
		cfqg->vdisktime = cfqd->min_vdisktime;
	cfqg->weight = rq_iog_weight(cfqg->iog);
	grp_tree_insert(cfqd, cfqg);
}

static void group_idle(struct cfq_data *cfqd, struct cfq_group *cfqg)
{
	if (--cfqg->nr_busy)
		return;
	grp_tree_erase(cfqd, cfqg);
	cfqg->saved_wl_slice = 0;
}

/* The group's share of target_latency among the busy groups. */
static uint64_t group_slice(struct cfq_data *cfqd, const struct cfq_group *cfqg)
{
	unsigned total = cfqd->busy_weight ? cfqd->busy_weight : cfqg->weight;

	return tun_ns(&cfqd->t_target_latency) * cfqg->weight / (total ? total : 1);
}

static unsigned group_busy_class(const struct cfq_group *cfqg, bool rt)
{
	const struct cfq_tree *st = cfqg->st[rt ? CFQ_RT : CFQ_BE];

	return st[0].count + st[1].count + st[2].count;
}

/* Busy queues of a class, averaged so that it rises at once and falls slowly. */
static unsigned group_avg_queues(struct cfq_group *cfqg, bool rt)
{
	unsigned busy = group_busy_class(cfqg, rt), avg = cfqg->busy_avg[rt];
	unsigned lo = avg < busy ? avg : busy, hi = avg < busy ? busy : avg;

	cfqg->busy_avg[rt] = (3 * hi + lo + 2) / 4;
	return cfqg->busy_avg[rt];
}

static struct cfq_group *group_get(struct cfq_data *cfqd, struct rq_io_group *iog)
{
	struct cfq_group *cfqg;

	if (!iog) {
		cfqd->root.ref++;
		return &cfqd->root;
	}
	for (struct rq_list_node *n = cfqd->groups.next; n != &cfqd->groups; n = n->next) {
		cfqg = RQ_CONTAINER_OF(n, struct cfq_group, node);
		if (cfqg->iog == iog) {
			rq_iog_put(iog);
			cfqg->ref++;
			return cfqg;
		}
	}
	cfqg = mem_zalloc(sizeof(*cfqg));
	if (!cfqg) {
		rq_iog_put(iog);
		cfqd->root.ref++;
		return &cfqd->root;
	}
	cfqg->iog = iog; /* the caller's reference becomes ours */
	cfqg->weight = rq_iog_weight(iog);
	cfqg->ref = 1;
	rq_rb_clear_node(&cfqg->rb);
	rq_list_add_tail(&cfqg->node, &cfqd->groups);
	return cfqg;
}

static void group_put(struct cfq_data *cfqd, struct cfq_group *cfqg)
{
	if (--cfqg->ref || cfqg == &cfqd->root)
		return;
	grp_tree_erase(cfqd, cfqg);
	if (cfqd->serving_group == cfqg)
		cfqd->serving_group = NULL;
	rq_list_del_init(&cfqg->node);
	rq_iog_put(cfqg->iog);
	mem_free(cfqg, sizeof(*cfqg));
}

/* ------------------------------------------------------- service trees */

static void tree_insert(struct cfq_tree *st, struct cfq_queue *cfqq)
{
	struct rq_rb_node **link = &st->root.node, *parent = NULL;

	while (*link) {
		struct cfq_queue *cur = RQ_CONTAINER_OF(*link, struct cfq_queue, rb);

		parent = *link;
		link = cfqq->key < cur->key ? &parent->left : &parent->right;
	}
	rq_rb_link_node(&cfqq->rb, parent, link);
	rq_rb_insert_color(&cfqq->rb, &st->root);
	cfqq->tree = st;
	st->count++;
}

static void tree_erase(struct cfq_queue *cfqq)
{
	if (!cfqq->tree)
		return;
	rq_rb_erase(&cfqq->rb, &cfqq->tree->root);
	cfqq->tree->count--;
	cfqq->tree = NULL;
}

static struct cfq_queue *tree_first(const struct cfq_tree *st)
{
	struct rq_rb_node *n = rq_rb_first(&st->root);

	return n ? RQ_CONTAINER_OF(n, struct cfq_queue, rb) : NULL;
}

/*
 * (Re)place a busy queue on the tree of its class and type.  A queue
 * re-entering goes behind "now" by how much shorter its slice is than the
 * longest one, times the other busy queues; an idle-class queue goes behind
 * the last one; a preempting queue goes in front of everyone.
 */
static void service_tree_add(struct cfq_data *cfqd, struct cfq_queue *cfqq, bool front,
			     uint64_t now)
{
	struct cfq_tree *st = tree_for(cfqq->cfqg, cfqq->cls, cfqq_type(cfqq));
	int64_t key;

	if (cfqq->cls == CFQ_IDLE) {
		struct rq_rb_node *last = rq_rb_last(&st->root);

		key = (int64_t)CFQ_IDLE_DELAY_NS +
		      (last ? RQ_CONTAINER_OF(last, struct cfq_queue, rb)->key : (int64_t)now);
	} else if (!front) {
		int64_t others = cfqd->busy_queues ? (int64_t)cfqd->busy_queues - 1 : 0;
		int64_t shorter = (int64_t)prio_slice(cfqd, true, 0) -
				  (int64_t)prio_slice(cfqd, cfqq->sync, cfqq->level);

		key = (int64_t)now + others * shorter;
	} else {
		struct cfq_queue *first = tree_first(st);

		key = (first ? first->key : (int64_t)now) - (int64_t)(1000 * NS_PER_MS);
	}
	if (cfqq->tree) {
		if (cfqq->tree == st && cfqq->key == key)
			return;
		tree_erase(cfqq);
	}
	cfqq->key = key;
	tree_insert(st, cfqq);
}

static void cfqq_add_rr(struct cfq_data *cfqd, struct cfq_queue *cfqq, uint64_t now)
{
	cfqq->on_rr = true;
	cfqd->busy_queues++;
	if (cfqq->sync)
		cfqd->busy_sync_queues++;
	group_busy(cfqd, cfqq->cfqg);
	service_tree_add(cfqd, cfqq, false, now);
}

static void cfqq_del_rr(struct cfq_data *cfqd, struct cfq_queue *cfqq)
{
	tree_erase(cfqq);
	cfqq->on_rr = false;
	cfqd->busy_queues--;
	if (cfqq->sync)
		cfqd->busy_sync_queues--;
	group_idle(cfqd, cfqq->cfqg);
}

/* ------------------------------------------------------- queue lifetime */

static void cfqq_init(struct cfq_queue *cfqq, struct cfq_group *cfqg, bool sync,
		      uint16_t ioprio, uint64_t now)
{
	memset(cfqq, 0, sizeof(*cfqq));
	cfqq->ref = 0;
	cfqq->cfqg = cfqg;
	cfqq->sync = sync;
	cfqq->ioprio = ioprio;
	prio_split(ioprio, &cfqq->cls, &cfqq->level);
	rq_rb_clear_node(&cfqq->rb);
	rq_list_init(&cfqq->fifo);
	cfqq->idle_window = sync && cfqq->cls != CFQ_IDLE;
	cfqq->ttime.last_end_ns = now;
}

static struct cfq_queue *cfqq_alloc(struct cfq_group *cfqg, bool sync, uint16_t ioprio,
				    uint64_t now)
{
	struct cfq_queue *cfqq = mem_alloc(sizeof(*cfqq));

	if (!cfqq)
		return NULL;
	cfqq_init(cfqq, cfqg, sync, ioprio, now);
	cfqg->ref++;
	return cfqq;
}

static void cfqq_put(struct cfq_data *cfqd, struct cfq_queue *cfqq)
{
	struct cfq_group *cfqg = cfqq->cfqg;

	if (--cfqq->ref || cfqq == &cfqd->oom)
		return;
	if (!cfqq->sync) {
		if (cfqq->cls == CFQ_IDLE) {
			if (cfqg->async_idle == cfqq)
				cfqg->async_idle = NULL;
		} else if (cfqg->async[cfqq->cls][cfqq->level] == cfqq) {
			cfqg->async[cfqq->cls][cfqq->level] = NULL;
		}
	}
	mem_free(cfqq, sizeof(*cfqq));
	group_put(cfqd, cfqg);
}

/* A request of priority @ioprio arrives at a sync queue: adopt its priority. */
static void cfqq_set_prio(struct cfq_data *cfqd, struct cfq_queue *cfqq, uint16_t ioprio,
			  uint64_t now)
{
	uint8_t cls, level;

	if (cfqq->ioprio == ioprio)
		return;
	prio_split(ioprio, &cls, &level);
	cfqq->ioprio = ioprio;
	cfqq->level = level;
	if (cls == cfqq->cls)
		return;
	cfqq->cls = cls;
	if (cls == CFQ_IDLE)
		cfqq->idle_window = false;
	if (cfqq->on_rr)
		service_tree_add(cfqd, cfqq, false, now);
}

/* ---------------------------------------------------------- io contexts */

static unsigned cic_hash(const struct rq_io_context *ioc)
{
	return (unsigned)(((uintptr_t)ioc * 0x9E3779B97F4A7C15ull) >> (64 - CFQ_HASH_BITS));
}

static struct cfq_cic *cic_lookup(struct cfq_data *cfqd, const struct rq_io_context *ioc)
{
	struct cfq_cic *cic;

	if (cfqd->last_cic && cfqd->last_cic->ioc == ioc)
		return cfqd->last_cic;
	for (cic = cfqd->hash[cic_hash(ioc)]; cic; cic = cic->hnext)
		if (cic->ioc == ioc)
			break;
	if (cic)
		cfqd->last_cic = cic;
	return cic;
}

static void cic_free(struct cfq_data *cfqd, struct cfq_cic *cic)
{
	struct cfq_cic **pp = &cfqd->hash[cic_hash(cic->ioc)];

	while (*pp != cic)
		pp = &(*pp)->hnext;
	*pp = cic->hnext;
	rq_list_del_init(&cic->lru);
	if (cfqd->last_cic == cic)
		cfqd->last_cic = NULL;
	if (cic->sync_q)
		cfqq_put(cfqd, cic->sync_q);
	group_put(cfqd, cic->cfqg);
	rq_ioc_put(cic->ioc);
	mem_free(cic, sizeof(*cic));
}

/*
 * Let go of contexts the application has dropped (we hold the only
 * reference) whose sync queue has nothing to do.  A few per call.
 */
static void cic_sweep(struct cfq_data *cfqd, unsigned budget)
{
	while (budget-- && !rq_list_empty(&cfqd->cics)) {
		struct cfq_cic *cic = RQ_CONTAINER_OF(cfqd->cics.next, struct cfq_cic, lru);
		struct cfq_queue *sq = cic->sync_q;

		if (ioc_refs(cic->ioc) == 1 &&
		    (!sq || (!sq->on_rr && sq != cfqd->active && !sq->allocated))) {
			cic_free(cfqd, cic);
			continue;
		}
		/* look at it again after the others */
		rq_list_del_init(&cic->lru);
		rq_list_add_tail(&cic->lru, &cfqd->cics);
	}
}

/* The context moved to another group: its next sync requests go to a new queue. */
static void cic_regroup(struct cfq_data *cfqd, struct cfq_cic *cic)
{
	struct cfq_group *old = cic->cfqg;

	cic->group_gen = ioc_group_gen(cic->ioc);
	cic->cfqg = group_get(cfqd, ioc_group_get(cic->ioc));
	if (cic->sync_q) {
		cfqq_put(cfqd, cic->sync_q); /* it drains what it has */
		cic->sync_q = NULL;
	}
	group_put(cfqd, old);
}

static struct cfq_cic *cic_get(struct cfq_data *cfqd, struct rq_io_context *ioc)
{
	struct cfq_cic *cic = cic_lookup(cfqd, ioc);
	unsigned h;

	if (cic) {
		if (cic->group_gen != ioc_group_gen(ioc))
			cic_regroup(cfqd, cic);
		return cic;
	}
	cic_sweep(cfqd, CFQ_SWEEP);
	cic = mem_zalloc(sizeof(*cic));
	if (!cic)
		return NULL;
	rq_ioc_get(ioc);
	cic->ioc = ioc;
	cic->group_gen = ioc_group_gen(ioc);
	cic->cfqg = group_get(cfqd, ioc_group_get(ioc));
	h = cic_hash(ioc);
	cic->hnext = cfqd->hash[h];
	cfqd->hash[h] = cic;
	rq_list_add_tail(&cic->lru, &cfqd->cics);
	cfqd->last_cic = cic;
	return cic;
}

/* The async queue of @cfqg for @ioprio, made on first use; NULL without memory. */
static struct cfq_queue *async_queue(struct cfq_group *cfqg, uint16_t ioprio, bool create,
				     uint64_t now)
{
	struct cfq_queue **slot;
	uint8_t cls, level;

	prio_split(ioprio, &cls, &level);
	slot = cls == CFQ_IDLE ? &cfqg->async_idle : &cfqg->async[cls][level];
	if (!*slot && create)
		*slot = cfqq_alloc(cfqg, false, ioprio, now);
	return *slot;
}

/* The queue a bio of @ioc would join, without making anything. */
static struct cfq_queue *bio_cfqq(struct cfq_data *cfqd, struct rq_bio *bio)
{
	struct rq_io_context *ioc = ioc_of_bio(bio);
	struct cfq_cic *cic;

	if (!ioc)
		return &cfqd->oom;
	cic = cic_lookup(cfqd, ioc);
	if (!cic || cic->group_gen != ioc_group_gen(ioc))
		return NULL;
	if (bio_is_sync(bio))
		return cic->sync_q;
	return async_queue(cic->cfqg, bio->ioprio ? bio->ioprio : rq_ioc_prio(ioc), false, 0);
}

/* --------------------------------------------------------- request order */

/*
 * Which of two requests to serve after the head at @last: sync before
 * async, then the shorter way, a backward seek (within back_seek_max)
 * counting back_seek_penalty times; if both are out of reach behind, the
 * one furthest back (one long seek instead of two).
 */
static struct rq_request *choose_req(struct cfq_data *cfqd, struct rq_request *a,
				     struct rq_request *b, uint64_t last)
{
	uint64_t back_max = (uint64_t)tun(&cfqd->t_back_seek_max) * 2; /* KiB -> sectors */
	uint64_t penalty = tun(&cfqd->t_back_seek_penalty);
	uint64_t da = 0, db = 0;
	bool wrap_a = false, wrap_b = false;

	if (!a || a == b)
		return b;
	if (!b)
		return a;
	if (rq_request_is_sync(a) != rq_request_is_sync(b))
		return rq_request_is_sync(a) ? a : b;
	if (a->sector >= last)
		da = a->sector - last;
	else if (a->sector + back_max >= last)
		da = (last - a->sector) * penalty;
	else
		wrap_a = true;
	if (b->sector >= last)
		db = b->sector - last;
	else if (b->sector + back_max >= last)
		db = (last - b->sector) * penalty;
	else
		wrap_b = true;
	if (!wrap_a && !wrap_b) {
		if (da != db)
			return da < db ? a : b;
		return a->sector >= b->sector ? a : b;
	}
	if (wrap_a && wrap_b)
		return a->sector <= b->sector ? a : b;
	return wrap_a ? b : a;
}

/* The request to follow @last in @cfqq (which still holds @last). */
static struct rq_request *find_next_rq(struct cfq_data *cfqd, struct cfq_queue *cfqq,
				       struct rq_request *last)
{
	struct rq_request *next, *prev;

	if (cfqq->queued <= 1)
		return NULL; /* @last is the only one: the search would find nothing */
	next = rq_sched_rb_latter(last);
	prev = rq_sched_rb_former(last);

	if (!next) {
		next = rq_sched_rb_first(&cfqq->sort);
		if (next == last)
			next = NULL;
	}
	return choose_req(cfqd, next, prev, last->sector);
}

static void sort_add(struct cfq_data *cfqd, struct cfq_queue *cfqq, struct rq_request *rq)
{
	rq_sched_rb_add(&cfqq->sort, rq);
	cfqq->next_rq = choose_req(cfqd, cfqq->next_rq, rq, cfqd->last_position);
}

static void sort_del(struct cfq_data *cfqd, struct cfq_queue *cfqq, struct rq_request *rq)
{
	if (cfqq->next_rq == rq)
		cfqq->next_rq = find_next_rq(cfqd, cfqq, rq);
	rq_sched_rb_del(&cfqq->sort, rq);
}

/* Take @rq out of its queue (FIFO, tree, hash); the queue stays busy if active. */
static void remove_request(struct rq_queue *q, struct cfq_data *cfqd, struct rq_request *rq)
{
	struct cfq_queue *cfqq = rq_cfqq(rq);

	rq_list_del_init(&rq->queuelist);
	sort_del(cfqd, cfqq, rq);
	rq_sched_hash_del(q, rq);
	cfqq->queued--;
	cfqd->rq_queued--;
}

/* ----------------------------------------------------- slices, selection */

/*
 * The queue's time slice: its priority's base, shortened under
 * low_latency when the busy queues of its class would not all get a base
 * sync slice within the group's share of target_latency (never below
 * 2 * slice_idle scaled to the slice).
 */
static uint64_t scaled_slice(struct cfq_data *cfqd, struct cfq_queue *cfqq)
{
	uint64_t slice = prio_slice(cfqd, cfqq->sync, cfqq->level);

	if (tun(&cfqd->t_low_latency)) {
		unsigned iq = group_avg_queues(cfqq->cfqg, cfqq->cls == CFQ_RT);
		uint64_t sync_slice = tun_ns(&cfqd->t_slice[1]);
		uint64_t expect = sync_slice * iq;
		uint64_t gslice = group_slice(cfqd, cfqq->cfqg);

		if (expect > gslice && sync_slice) {
			uint64_t low = min_u64(slice, 2 * tun_ns(&cfqd->t_slice_idle) * slice /
							      sync_slice);

			slice = max_u64(slice * gslice / expect, low);
		}
	}
	return slice;
}

static void set_prio_slice(struct cfq_data *cfqd, struct cfq_queue *cfqq, uint64_t now)
{
	uint64_t slice = scaled_slice(cfqd, cfqq);

	cfqq->slice_start = now;
	cfqq->slice_end = now + slice;
	cfqq->allocated_slice = slice;
}

/* Time the queue used: the slice so far, capped at what it was given. */
static uint64_t slice_usage(const struct cfq_queue *cfqq, uint64_t now)
{
	uint64_t used;

	if (!cfqq->slice_start || cfqq->slice_start >= now)
		return max_u64(now - cfqq->dispatch_start, 1);
	used = now - cfqq->slice_start;
	return min_u64(used, cfqq->allocated_slice);
}

/* Charge the group for the expiring queue and remember its workload. */
static void group_served(struct cfq_data *cfqd, struct cfq_group *cfqg,
			 struct cfq_queue *cfqq, uint64_t now)
{
	unsigned nr_sync = cfqg->nr_busy - cfqg->st[CFQ_RT][CFQ_WL_ASYNC].count -
			   cfqg->st[CFQ_BE][CFQ_WL_ASYNC].count - cfqg->st_idle.count;
	uint64_t used = slice_usage(cfqq, now), charge = used;

	if (iops_mode(cfqd))
		charge = cfqq->slice_dispatch;
	else if (!cfqq->sync && !nr_sync)
		charge = max_u64(cfqq->allocated_slice, used);
	if (cfqg->on_tree) {
		grp_tree_erase(cfqd, cfqg);
		cfqg->vdisktime += charge * CFQ_WEIGHT_REF / (cfqg->weight ? cfqg->weight : 1);
		cfqg->weight = rq_iog_weight(cfqg->iog);
		grp_tree_insert(cfqd, cfqg);
	}
	if (cfqd->workload_expires > now) {
		cfqg->saved_wl_slice = cfqd->workload_expires - now;
		cfqg->saved_wl_type = cfqd->serving_type;
		cfqg->saved_wl_class = cfqd->serving_class;
	} else {
		cfqg->saved_wl_slice = 0;
	}
}

/* End the active queue's turn: charge it, re-sort it or take it off the trees. */
static void slice_expired(struct cfq_data *cfqd, uint64_t now)
{
	struct cfq_queue *cfqq = cfqd->active;

	if (!cfqq)
		return;
	cfqd->idle_until = 0;
	cfqq->wait_request = false;
	group_served(cfqd, cfqq->cfqg, cfqq, now);
	if (cfqq->on_rr) {
		if (!cfqq->queued)
			cfqq_del_rr(cfqd, cfqq);
		else
			service_tree_add(cfqd, cfqq, false, now);
	}
	cfqd->active = NULL;
	cfqq_put(cfqd, cfqq);
	cic_sweep(cfqd, CFQ_SWEEP);
}

/* The workload type of @cls whose first queue has waited longest. */
static enum cfq_wl choose_wl_type(struct cfq_group *cfqg, unsigned cls)
{
	enum cfq_wl best = CFQ_WL_SYNC;
	bool found = false;
	int64_t lowest = 0;

	for (int t = 0; t < CFQ_NR_WL; t++) {
		struct cfq_queue *first = tree_first(&cfqg->st[cls][t]);

		if (first && (!found || first->key < lowest)) {
			lowest = first->key;
			best = (enum cfq_wl)t;
			found = true;
		}
	}
	return best;
}

/* Pick the class and workload the group serves next, and for how long. */
static void choose_workload(struct cfq_data *cfqd, struct cfq_group *cfqg, uint64_t now)
{
	int orig = cfqd->serving_class;
	unsigned count, busy;
	uint64_t slice;

	if (group_busy_class(cfqg, true))
		cfqd->serving_class = CFQ_RT;
	else if (group_busy_class(cfqg, false))
		cfqd->serving_class = CFQ_BE;
	else {
		cfqd->serving_class = CFQ_IDLE;
		cfqd->workload_expires = now + NS_PER_MS;
		return;
	}
	if (orig == cfqd->serving_class &&
	    cfqg->st[cfqd->serving_class][cfqd->serving_type].count &&
	    now <= cfqd->workload_expires)
		return;

	cfqd->serving_type = choose_wl_type(cfqg, (unsigned)cfqd->serving_class);
	count = cfqg->st[cfqd->serving_class][cfqd->serving_type].count;
	busy = group_avg_queues(cfqg, cfqd->serving_class == CFQ_RT);
	if (busy < group_busy_class(cfqg, cfqd->serving_class == CFQ_RT))
		busy = group_busy_class(cfqg, cfqd->serving_class == CFQ_RT);
	slice = group_slice(cfqd, cfqg) * count / (busy ? busy : 1);
	if (cfqd->serving_type == CFQ_WL_ASYNC) {
		unsigned async = cfqg->st[CFQ_RT][CFQ_WL_ASYNC].count +
				 cfqg->st[CFQ_BE][CFQ_WL_ASYNC].count;
		uint64_t cap = tun_ns(&cfqd->t_target_latency) * async /
			       (cfqd->busy_queues ? cfqd->busy_queues : 1);
		uint64_t sync_slice = tun_ns(&cfqd->t_slice[1]);

		slice = min_u64(slice, cap);
		if (sync_slice)
			slice = slice * tun_ns(&cfqd->t_slice[0]) / sync_slice;
	} else {
		slice = max_u64(slice, 2 * tun_ns(&cfqd->t_slice_idle));
	}
	cfqd->workload_expires = now + max_u64(slice, CFQ_MIN_TT_NS);
}

/* Serve the group with the least virtual disk time next. */
static void choose_group(struct cfq_data *cfqd, uint64_t now)
{
	struct rq_rb_node *n = rq_rb_first(&cfqd->grp_tree);
	struct cfq_group *cfqg;

	if (!n)
		return;
	cfqg = RQ_CONTAINER_OF(n, struct cfq_group, rb);
	if ((int64_t)(cfqg->vdisktime - cfqd->min_vdisktime) > 0)
		cfqd->min_vdisktime = cfqg->vdisktime;
	cfqd->serving_group = cfqg;
	if (cfqg->saved_wl_slice) {
		cfqd->workload_expires = now + cfqg->saved_wl_slice;
		cfqd->serving_type = cfqg->saved_wl_type;
		cfqd->serving_class = cfqg->saved_wl_class;
	} else {
		cfqd->workload_expires = now - 1;
	}
	choose_workload(cfqd, cfqg, now);
}

static struct cfq_queue *next_queue(struct cfq_data *cfqd)
{
	struct cfq_group *cfqg = cfqd->serving_group;
	struct cfq_queue *cfqq;

	if (!cfqg)
		return NULL;
	cfqq = tree_first(tree_for(cfqg, (unsigned)cfqd->serving_class,
				   (enum cfq_wl)cfqd->serving_type));
	if (cfqq)
		return cfqq;
	/* any busy queue of the group, best class first */
	for (unsigned c = CFQ_RT; c <= CFQ_BE; c++)
		for (int t = CFQ_NR_WL - 1; t >= 0; t--)
			if ((cfqq = tree_first(&cfqg->st[c][t])))
				return cfqq;
	return tree_first(&cfqg->st_idle);
}

static void set_active(struct cfq_data *cfqd, struct cfq_queue *cfqq, uint64_t now)
{
	cfqd->active = cfqq;
	if (!cfqq)
		return;
	cfqq->ref++;
	cfqq->slice_start = 0;
	cfqq->slice_end = 0;
	cfqq->allocated_slice = 0;
	cfqq->dispatch_start = now;
	cfqq->slice_dispatch = 0;
	cfqq->slice_new = true;
	cfqq->wait_request = false;
	cfqq->must_dispatch = false;
	cfqq->must_alloc_slice = false;
	cfqq->fifo_checked = false;
	cfqd->idle_until = 0;
}

/* Is it worth waiting for @cfqq's next request when it runs dry? */
static bool should_idle(struct cfq_data *cfqd, struct cfq_queue *cfqq)
{
	struct cfq_tree *st = cfqq->tree;

	if (cfqq->cls == CFQ_IDLE || !tun(&cfqd->t_slice_idle))
		return false;
	if (cfqq->idle_window && !(cfqd->nonrot && cfqd->hw_tag))
		return true;
	/* the last queue of its tree idles for the whole tree */
	return st && st->count == 1 && cfqq->sync && !ttime_big(cfqd, &st->ttime, false);
}

/* Has the idle window ended (library clock, or the real clock's fallback)? */
static bool idle_over(struct cfq_data *cfqd, uint64_t now)
{
	return now >= cfqd->idle_until || real_ns() >= cfqd->idle_real_until;
}

/*
 * The active queue or a new one; NULL when nothing may be dispatched now
 * (idling, or waiting for the queue's requests in flight).
 */
static struct cfq_queue *select_queue(struct cfq_data *cfqd, uint64_t now)
{
	struct cfq_queue *cfqq = cfqd->active;

	if (!cfqd->rq_queued)
		return NULL;
	if (!cfqq)
		goto new_queue;

	if (cfqd->idle_until) {
		if (!idle_over(cfqd, now))
			return NULL;
		/* the idle window ran out */
		cfqd->idle_until = 0;
		cfqq->wait_request = false;
		if (cfqq->queued && (cfqq->must_dispatch || !slice_used(cfqq, now)))
			return cfqq;
		if (!cfqq->queued)
			cfqq->deep = false;
		goto expire;
	}
	if (slice_used(cfqq, now) && !cfqq->must_dispatch)
		goto expire;
	if (cfqq->queued)
		return cfqq;

	/* seeky deep queue the device outpaces: no idling for it */
	if (cfqq_seeky(cfqq) && cfqq->idle_window &&
	    (cfqq->slice_new || cfqq->slice_end - now > now - cfqq->slice_start)) {
		cfqq->deep = false;
		cfqq->idle_window = false;
	}
	if (cfqq->dispatched && should_idle(cfqd, cfqq))
		return NULL;
	if (tun(&cfqd->t_group_idle) && cfqq->cfqg->nr_busy == 1 && cfqq->cfqg->dispatched &&
	    !ttime_big(cfqd, &cfqq->cfqg->ttime, true))
		return NULL;
expire:
	slice_expired(cfqd, now);
new_queue:
	choose_group(cfqd, now);
	set_active(cfqd, next_queue(cfqd), now);
	return cfqd->active;
}

/* May @cfqq dispatch one more request now? */
static bool may_dispatch(struct cfq_data *cfqd, struct cfq_queue *cfqq, uint64_t now)
{
	unsigned quantum = tun(&cfqd->t_quantum);
	unsigned max_dispatch = quantum / 2 ? quantum / 2 : 1;

	/* drain async requests before idling on a sync queue, and sync before async */
	if (should_idle(cfqd, cfqq) && cfqd->rq_in_flight[0])
		return false;
	if (cfqd->rq_in_flight[1] && !cfqq->sync)
		return false;
	if (cfqq->cls == CFQ_IDLE)
		max_dispatch = 1;
	if (cfqq->dispatched >= max_dispatch) {
		bool promote_sync = cfqq->sync && cfqd->busy_sync_queues == 1;

		if (cfqd->busy_queues > 1 && cfqq->cls == CFQ_IDLE)
			return false;
		if (cfqd->busy_queues > 1 && slice_used_soon(cfqd, cfqq, now) && !promote_sync)
			return false;
		max_dispatch = cfqd->busy_queues == 1 || promote_sync ? UINT_MAX : quantum;
	}
	/* async depth ramps up with the time since a sync request was last late */
	if (!cfqq->sync && tun(&cfqd->t_low_latency)) {
		uint64_t sync_slice = tun_ns(&cfqd->t_slice[1]);
		uint64_t depth = sync_slice ? (now - cfqd->last_delayed_sync) / sync_slice : 1;

		if (!depth && !cfqq->dispatched)
			depth = 1;
		if (depth < max_dispatch)
			max_dispatch = (unsigned)depth;
	}
	return cfqq->dispatched < max_dispatch;
}

/* Move @rq from its queue to the dispatch queue. */
static void dispatch_insert(struct rq_queue *q, struct cfq_data *cfqd, struct rq_request *rq)
{
	struct cfq_queue *cfqq = rq_cfqq(rq);

	remove_request(q, cfqd, rq);
	cfqq->dispatched++;
	cfqq->cfqg->dispatched++;
	cfqd->rq_in_flight[cfqq->sync]++;
	rq_sq_dispatch_sort(q, rq);
}

/* The FIFO head if it expired; looked at once per slice. */
static struct rq_request *check_fifo(struct cfq_queue *cfqq, uint64_t now)
{
	struct rq_request *rq;

	if (cfqq->fifo_checked)
		return NULL;
	cfqq->fifo_checked = true;
	rq = rq_list_first_rq(&cfqq->fifo);
	return rq && now >= rq->fifo_time ? rq : NULL;
}

/*
 * Idling: have the queue run again when the idle window ends, on whichever
 * of the two clocks it ends first (one delayed run pending at a time).
 */
static void idle_delay_run(struct rq_queue *q, struct cfq_data *cfqd, uint64_t now, uint64_t real)
{
	uint64_t wait = cfqd->idle_until > now ? cfqd->idle_until - now : 0;
	uint64_t at, ms;

	if (cfqd->idle_real_until > real && cfqd->idle_real_until - real < wait)
		wait = cfqd->idle_real_until - real;
	at = real + wait;
	if (cfqd->delay_real_at > real && cfqd->delay_real_at <= at)
		return; /* one is pending, and early enough */
	ms = (wait + NS_PER_MS - 1) / NS_PER_MS;
	cfqd->delay_real_at = real + (ms ? ms : 1) * NS_PER_MS;
	rq_sq_delay_queue(q, (unsigned)(ms ? ms : 1));
}

/* Move everything of @cfqq to the dispatch queue. */
static int drain_queue(struct rq_queue *q, struct cfq_data *cfqd, struct cfq_queue *cfqq)
{
	int n = 0;

	while (cfqq->next_rq) {
		dispatch_insert(q, cfqd, cfqq->next_rq);
		n++;
	}
	return n;
}

static int forced_dispatch(struct rq_queue *q, struct cfq_data *cfqd, uint64_t now)
{
	int n = 0;

	slice_expired(cfqd, now);
	for (;;) {
		struct cfq_queue *cfqq;

		choose_group(cfqd, now);
		cfqq = next_queue(cfqd);
		if (!cfqq)
			break;
		n += drain_queue(q, cfqd, cfqq);
		cfqq_del_rr(cfqd, cfqq);
	}
	return n;
}

/* ------------------------------------------------------- request events */

static void update_seek(struct cfq_data *cfqd, struct cfq_queue *cfqq, struct rq_request *rq)
{
	uint64_t dist = 0;
	bool seek;

	if (cfqq->last_request_pos)
		dist = cfqq->last_request_pos > rq->sector ? cfqq->last_request_pos - rq->sector :
							      rq->sector - cfqq->last_request_pos;
	if (cfqd->nonrot)
		seek = rq_request_sectors(rq) < CFQ_SECT_THR_NONROT;
	else
		seek = dist > CFQ_SEEK_THR;
	cfqq->nr_seeks += (unsigned)seek - (cfqq->seek_history >> 31);
	cfqq->seek_history = (cfqq->seek_history << 1) | seek;
}

/*
 * Has the application dropped the queue's io context?  Only our link and
 * the queue's own requests hold it then.
 */
static bool submitter_gone(const struct cfq_queue *cfqq)
{
	return cfqq->ioc && ioc_refs(cfqq->ioc) <= 1 + cfqq->allocated;
}

static void update_idle_window(struct cfq_data *cfqd, struct cfq_queue *cfqq)
{
	if (!cfqq->sync || cfqq->cls == CFQ_IDLE)
		return;
	if (cfqq->queued >= 4)
		cfqq->deep = true;
	if (!tun(&cfqd->t_slice_idle) || (!cfqq->deep && cfqq_seeky(cfqq)) ||
	    submitter_gone(cfqq))
		cfqq->idle_window = false;
	else if (ttime_valid(&cfqq->ttime))
		cfqq->idle_window = cfqq->ttime.mean <= tun_ns(&cfqd->t_slice_idle);
}

/* Should @rq's queue take the disk from the active queue at once? */
static bool should_preempt(struct cfq_data *cfqd, struct cfq_queue *new, struct rq_request *rq,
			   uint64_t now)
{
	struct cfq_queue *cfqq = cfqd->active;

	if (!cfqq || cfqq == new)
		return false;
	if (new->cls == CFQ_IDLE)
		return false;
	if (cfqq->cls == CFQ_IDLE)
		return true;
	/* async never takes the disk from sync, nor BE from RT */
	if (!new->sync && cfqq->sync)
		return false;
	if (cfqq->cls == CFQ_RT && new->cls != CFQ_RT)
		return false;
	if (new->cfqg != cfqq->cfqg)
		return false;
	if (slice_used(cfqq, now))
		return true;
	/*
	 * Exactly two sync-noidle queues, the active one empty: no point
	 * idling on it (with more, they take turns in the tree as usual).
	 */
	if (cfqd->serving_type == CFQ_WL_SYNC_NOIDLE && cfqq_type(new) == CFQ_WL_SYNC_NOIDLE &&
	    new->tree && new->tree->count == 2 && !cfqq->queued)
		return true;
	if (rq_request_is_sync(rq) && !cfqq->sync)
		return true;
	if (new->cls == CFQ_RT && cfqq->cls != CFQ_RT)
		return true;
	return false;
}

/* @cfqq takes the disk: the active queue expires and @cfqq goes first. */
static void preempt_queue(struct cfq_data *cfqd, struct cfq_queue *cfqq, uint64_t now)
{
	enum cfq_wl old_type = cfqq_type(cfqd->active);

	slice_expired(cfqd, now);
	if (old_type != cfqq_type(cfqq))
		cfqq->cfqg->saved_wl_slice = 0;
	service_tree_add(cfqd, cfqq, true, now);
	cfqq->slice_end = 0;
	cfqq->slice_new = true;
}

/* A request joined @cfqq: learn from it, stop idling for it, maybe preempt. */
static void rq_enqueued(struct cfq_data *cfqd, struct cfq_queue *cfqq, struct rq_request *rq,
			uint64_t now)
{
	if (cfqq->sync) {
		ttime_sample(&cfqq->ttime, now, 2 * tun_ns(&cfqd->t_slice_idle));
		if (cfqq->tree)
			ttime_sample(&cfqq->tree->ttime, now, 2 * tun_ns(&cfqd->t_slice_idle));
	}
	ttime_sample(&cfqq->cfqg->ttime, now, 2 * tun_ns(&cfqd->t_group_idle));
	update_seek(cfqd, cfqq, rq);
	update_idle_window(cfqd, cfqq);
	cfqq->last_request_pos = rq_request_end_sector(rq);

	if (cfqq == cfqd->active) {
		if (cfqq->wait_request) {
			/* what we idled for came: dispatch it */
			cfqq->wait_request = false;
			cfqd->idle_until = 0;
			cfqq->must_dispatch = true;
		}
	} else if (should_preempt(cfqd, cfqq, rq, now)) {
		preempt_queue(cfqd, cfqq, now);
	}
}

/*
 * The active queue ran dry with nothing in flight: wait for its next
 * request (slice_idle) or for its group (group_idle) when that is worth it.
 */
static void arm_idle(struct rq_queue *q, struct cfq_data *cfqd, struct cfq_queue *cfqq,
		     uint64_t now)
{
	uint64_t sl, real;
	bool grp = false;

	if (cfqd->nonrot && cfqd->hw_tag && !tun(&cfqd->t_group_idle))
		return;
	if (!should_idle(cfqd, cfqq)) {
		if (!tun(&cfqd->t_group_idle))
			return;
		grp = true;
	}
	if (cfqq->dispatched)
		return;
	if (submitter_gone(cfqq))
		return;
	if (ttime_valid(&cfqq->ttime) && cfqq->slice_end - now < cfqq->ttime.mean)
		return;
	if (grp && (cfqq->cfqg->nr_busy > 1 || ttime_big(cfqd, &cfqq->cfqg->ttime, true)))
		return;
	sl = grp ? tun_ns(&cfqd->t_group_idle) : tun_ns(&cfqd->t_slice_idle);
	cfqq->wait_request = true;
	cfqd->idle_until = now + sl;
	/*
	 * With the default clock both deadlines are one; a replaced clock
	 * (a simulation, which may stand still) gets twice the window of
	 * real time before the idling gives up regardless, unless the
	 * application drives the service: then delayed runs, and real_ns(),
	 * are on the library clock too, and only the window counts.
	 */
	real = real_ns(); /* one reading serves the deadline and the delayed run */
	cfqd->idle_real_until = real + 2 * sl;
	idle_delay_run(q, cfqd, now, real);
}

static void update_hw_tag(struct cfq_data *cfqd)
{
	struct cfq_queue *a = cfqd->active;

	if (cfqd->rq_in_driver > cfqd->hw_tag_est)
		cfqd->hw_tag_est = cfqd->rq_in_driver;
	if (cfqd->hw_tag == 1)
		return;
	if (cfqd->rq_queued <= CFQ_HW_QUEUE_MIN && cfqd->rq_in_driver <= CFQ_HW_QUEUE_MIN)
		return;
	/* a queue too shallow to fill the device says nothing about it */
	if (a && a->idle_window && a->dispatched + a->queued < CFQ_HW_QUEUE_MIN &&
	    cfqd->rq_in_driver < CFQ_HW_QUEUE_MIN)
		return;
	if (cfqd->hw_tag_samples++ < CFQ_HW_TAG_SAMPLES)
		return;
	cfqd->hw_tag = cfqd->hw_tag_est >= CFQ_HW_QUEUE_MIN;
}

/* ------------------------------------------------------------------ ops */

/**
 * cfq_init_queue() - make the per-queue data with the default tunables.
 * Context: queue creation or a scheduler switch, queue lock held.
 * Return: 0, -ENOMEM.
 */
static int cfq_init_queue(struct rq_queue *q, void **data)
{
	struct cfq_data *cfqd = mem_zalloc(sizeof(*cfqd));
	uint64_t now = rq_clock_ns();

	if (!cfqd)
		return -ENOMEM;
	cfqd->q = q;
	rq_list_init(&cfqd->groups);
	rq_list_init(&cfqd->cics);
	rq_list_init(&cfqd->root.node);
	rq_rb_clear_node(&cfqd->root.rb);
	cfqd->root.ref = 1;
	cfqd->root.weight = rq_iog_weight(NULL);
	cfqq_init(&cfqd->oom, &cfqd->root, false, RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 4), now);
	cfqd->oom.ref = 1;
	cfqd->hw_tag = -1;
	cfqd->nonrot = !rq_queue_rotational(q);
	cfqd->last_delayed_sync = now > 1000 * NS_PER_MS ? now - 1000 * NS_PER_MS : 0;
	cfqd->serving_class = CFQ_BE;
	cfqd->serving_type = CFQ_WL_SYNC;

	cfqd->t_quantum = CFQ_QUANTUM;
	cfqd->t_fifo_expire[0] = CFQ_FIFO_EXPIRE_ASYNC;
	cfqd->t_fifo_expire[1] = CFQ_FIFO_EXPIRE_SYNC;
	cfqd->t_back_seek_max = CFQ_BACK_SEEK_MAX;
	cfqd->t_back_seek_penalty = CFQ_BACK_SEEK_PENALTY;
	cfqd->t_slice[0] = CFQ_SLICE_ASYNC;
	cfqd->t_slice[1] = CFQ_SLICE_SYNC;
	cfqd->t_slice_async_rq = CFQ_SLICE_ASYNC_RQ;
	cfqd->t_slice_idle = CFQ_SLICE_IDLE;
	cfqd->t_group_idle = CFQ_GROUP_IDLE;
	cfqd->t_low_latency = CFQ_LOW_LATENCY;
	cfqd->t_target_latency = CFQ_TARGET_LATENCY;
	*data = cfqd;
	return 0;
}

/**
 * cfq_exit_queue() - free the per-queue data: every context link, queue
 * and group.  Nothing is queued (the core drained it).
 * Context: queue teardown or a scheduler switch, queue lock held.
 */
static void cfq_exit_queue(struct rq_queue *q, void *data)
{
	struct cfq_data *cfqd = data;

	slice_expired(cfqd, rq_clock_ns());
	while (!rq_list_empty(&cfqd->cics))
		cic_free(cfqd, RQ_CONTAINER_OF(cfqd->cics.next, struct cfq_cic, lru));
	/* groups left are held only by async queues without requests: none */
	while (!rq_list_empty(&cfqd->groups)) {
		struct cfq_group *cfqg = RQ_CONTAINER_OF(cfqd->groups.next, struct cfq_group, node);

		rq_list_del_init(&cfqg->node);
		rq_iog_put(cfqg->iog);
		mem_free(cfqg, sizeof(*cfqg));
	}
	mem_free(cfqd, sizeof(*cfqd));
}

/**
 * cfq_set_request() - find or make @rq's queue: the sync queue of its io
 * context, or the async queue of the context's group for its priority.
 * The request holds a reference on the queue and on the io context until
 * cfq_put_request().  Without memory it joins a fallback queue; never fails.
 * Context: the submitter, queue lock held.
 * Return: 0.
 */
static int cfq_set_request(struct rq_queue *q, struct rq_request *rq, struct rq_bio *bio)
{
	struct cfq_data *cfqd = cfqd_of(q);
	struct rq_io_context *ioc = rq->ioc;
	struct cfq_queue *cfqq = NULL;
	uint64_t now = rq->start_time_ns; /* the front end read the clock to make @rq, just now */
	struct cfq_cic *cic;

	(void)bio;
	if (ioc && (cic = cic_get(cfqd, ioc))) {
		if (rq_request_is_sync(rq)) {
			cfqq = cic->sync_q;
			if (!cfqq) {
				cfqq = cfqq_alloc(cic->cfqg, true, rq->ioprio, now);
				if (cfqq) {
					cfqq->ioc = ioc;
					cfqq->ref = 1; /* the context's link */
					cic->sync_q = cfqq;
				}
			} else {
				cfqq_set_prio(cfqd, cfqq, rq->ioprio, now);
			}
		} else {
			cfqq = async_queue(cic->cfqg, rq->ioprio, true, now);
		}
	}
	if (!cfqq)
		cfqq = &cfqd->oom;
	cfqq->ref++;
	cfqq->allocated++;
	rq->elv_priv[0] = cfqq;
	rq->elv_priv[1] = ioc;
	if (ioc)
		rq_ioc_get(ioc);
	return 0;
}

/**
 * cfq_put_request() - drop what cfq_set_request() took.
 * Context: the request is freed, queue lock held.
 */
static void cfq_put_request(struct rq_request *rq)
{
	struct cfq_queue *cfqq = rq_cfqq(rq);
	struct rq_io_context *ioc = rq->elv_priv[1];

	if (!cfqq)
		return;
	rq->elv_priv[0] = rq->elv_priv[1] = NULL;
	cfqq->allocated--;
	cfqq_put(cfqd_of(rq->q), cfqq);
	rq_ioc_put(ioc);
}

/**
 * cfq_add_request() - queue @rq: FIFO with an expiry time, sector tree,
 * its queue made busy; then learn think time and seeks from it, end idling
 * that waited for it, or let its queue preempt the active one.
 * Context: queue lock held.
 */
static void cfq_add_request(struct rq_queue *q, struct rq_request *rq)
{
	struct cfq_data *cfqd = cfqd_of(q);
	struct cfq_queue *cfqq = rq_cfqq(rq);
	uint64_t now = rq_clock_ns();

	if (!cfqq) { /* set_request was not called (cannot happen): fallback */
		cfqq = &cfqd->oom;
		cfqq->ref++;
		cfqq->allocated++;
		rq->elv_priv[0] = cfqq;
		rq->elv_priv[1] = NULL;
	}
	rq->fifo_time = now + tun_ns(&cfqd->t_fifo_expire[rq_request_is_sync(rq)]);
	rq_list_add_tail(&rq->queuelist, &cfqq->fifo);
	cfqq->queued++;
	cfqd->rq_queued++;
	if (!cfqq->on_rr)
		cfqq_add_rr(cfqd, cfqq, now);
	sort_add(cfqd, cfqq, rq);
	rq_enqueued(cfqd, cfqq, rq, now);
}

/**
 * cfq_dispatch() - move one request to the dispatch queue: from the
 * active queue (chosen, expired and idled on as described at the top), the
 * FIFO's expired head if the slice has not looked yet, else the next in
 * sector order.  With @force: everything.
 * Context: queue lock held (request_fn peeking, teardown, switch).
 * Return: requests moved.
 */
static int cfq_dispatch(struct rq_queue *q, bool force)
{
	struct cfq_data *cfqd = cfqd_of(q);
	uint64_t now = rq_clock_ns();
	struct cfq_queue *cfqq;
	struct rq_request *rq;

	if (!cfqd->busy_queues)
		return 0;
	if (force)
		return forced_dispatch(q, cfqd, now);
	cfqq = select_queue(cfqd, now);
	if (!cfqq) {
		if (cfqd->idle_until)
			idle_delay_run(q, cfqd, now, real_ns());
		return 0;
	}
	if (!cfqq->queued || !may_dispatch(cfqd, cfqq, now))
		return 0;
	rq = check_fifo(cfqq, now);
	if (!rq)
		rq = cfqq->next_rq;
	dispatch_insert(q, cfqd, rq);
	cfqq->slice_dispatch++;
	cfqq->must_dispatch = false;
	/* an async queue gets slice_async_rq-based requests; an idle-class one, one */
	if (cfqd->busy_queues > 1 &&
	    ((!cfqq->sync && cfqq->slice_dispatch >= prio_maxrq(cfqd, cfqq)) ||
	     cfqq->cls == CFQ_IDLE)) {
		cfqq->slice_end = now + 1;
		cfqq->slice_new = false;
		slice_expired(cfqd, now);
	}
	return 1;
}

/**
 * cfq_activate() / cfq_deactivate() - the driver started / gave back @rq:
 * requests in the driver, and where the head will be.
 * Context: queue lock held.
 */
static void cfq_activate(struct rq_queue *q, struct rq_request *rq)
{
	struct cfq_data *cfqd = cfqd_of(q);

	cfqd->rq_in_driver++;
	cfqd->last_position = rq_request_end_sector(rq);
	update_hw_tag(cfqd);
}

static void cfq_deactivate(struct rq_queue *q, struct rq_request *rq)
{
	struct cfq_data *cfqd = cfqd_of(q);

	if (cfqd->rq_in_driver)
		cfqd->rq_in_driver--;
}

/**
 * cfq_completed() - @rq ended: in-flight accounting, the completion time
 * think time is measured from, the active queue's slice start (its first
 * completion), expiry of a used slice, or idling on a queue run dry.
 * Context: queue lock held.
 */
static void cfq_completed(struct rq_queue *q, struct rq_request *rq)
{
	struct cfq_data *cfqd = cfqd_of(q);
	struct cfq_queue *cfqq = rq_cfqq(rq);
	uint64_t now = rq_clock_ns();
	bool sync;

	if (!cfqq)
		return;
	sync = cfqq->sync;
	if ((rq->rq_flags & RQ_RQF_STARTED) && cfqd->rq_in_driver)
		cfqd->rq_in_driver--;
	update_hw_tag(cfqd);
	if (cfqq->dispatched) {
		cfqq->dispatched--;
		cfqq->cfqg->dispatched--;
		cfqd->rq_in_flight[sync]--;
	}
	if (sync) {
		cfqq->ttime.last_end_ns = now;
		if (cfqq->tree)
			cfqq->tree->ttime.last_end_ns = now;
		cfqq->cfqg->ttime.last_end_ns = now;
		if (rq->start_time_ns + tun_ns(&cfqd->t_fifo_expire[1]) <= now)
			cfqd->last_delayed_sync = now;
	}
	if (cfqd->active == cfqq) {
		if (cfqq->slice_new) {
			set_prio_slice(cfqd, cfqq, now);
			cfqq->slice_new = false;
		}
		if (slice_used(cfqq, now) || cfqq->cls == CFQ_IDLE)
			slice_expired(cfqd, now);
		else if (sync && !cfqq->queued)
			arm_idle(q, cfqd, cfqq, now);
	}
}

/**
 * cfq_merge() - the request of the bio's own queue that starts where the
 * bio ends (a front merge).
 * Context: the submitter, queue lock held.
 * Return: RQ_ELV_FRONT_MERGE with *@rq set, or RQ_ELV_NO_MERGE.
 */
static int cfq_merge(struct rq_queue *q, struct rq_request **rq, struct rq_bio *bio)
{
	struct cfq_queue *cfqq = bio_cfqq(cfqd_of(q), bio);
	struct rq_request *hit;

	if (!cfqq)
		return RQ_ELV_NO_MERGE;
	hit = rq_sched_rb_find(&cfqq->sort, rq_bio_end_sector(bio));
	if (!hit)
		return RQ_ELV_NO_MERGE;
	*rq = hit;
	return RQ_ELV_FRONT_MERGE;
}

/**
 * cfq_merged() - @rq grew at the front: sort it again.
 * Context: queue lock held.
 */
static void cfq_merged(struct rq_queue *q, struct rq_request *rq, enum rq_elv_merge type)
{
	struct cfq_data *cfqd = cfqd_of(q);
	struct cfq_queue *cfqq = rq_cfqq(rq);

	if (type != RQ_ELV_FRONT_MERGE || !cfqq || rq_rb_empty_node(&rq->rb_node))
		return;
	sort_del(cfqd, cfqq, rq);
	sort_add(cfqd, cfqq, rq);
}

/**
 * cfq_merge_req() - @next joined @rq (same queue): @rq takes @next's FIFO
 * place if that was older; @next leaves; a queue left empty and not active
 * stops being busy.
 * Context: queue lock held.
 */
static void cfq_merge_req(struct rq_queue *q, struct rq_request *rq, struct rq_request *next)
{
	struct cfq_data *cfqd = cfqd_of(q);
	struct cfq_queue *cfqq = rq_cfqq(next);

	if (!rq_list_empty(&rq->queuelist) && !rq_list_empty(&next->queuelist) &&
	    next->fifo_time < rq->fifo_time && rq_cfqq(rq) == cfqq) {
		struct rq_list_node *before = next->queuelist.prev;

		rq_list_del_init(&rq->queuelist);
		rq_list_insert(&rq->queuelist, before, before->next);
		rq->fifo_time = next->fifo_time;
	}
	if (cfqq->next_rq == next)
		cfqq->next_rq = rq;
	remove_request(q, cfqd, next);
	if (cfqq->on_rr && !cfqq->queued && cfqq != cfqd->active)
		cfqq_del_rr(cfqd, cfqq);
}

/**
 * cfq_allow_merge() - a bio joins only a request of the queue it would
 * itself go to: same sync-ness, and the same io context (sync) or group
 * (async).
 * Context: queue lock held.
 */
static bool cfq_allow_merge(struct rq_queue *q, struct rq_request *rq, struct rq_bio *bio)
{
	struct cfq_data *cfqd = cfqd_of(q);
	struct cfq_queue *cfqq = rq_cfqq(rq);
	struct rq_io_context *ioc;
	struct cfq_cic *cic;

	if (bio_is_sync(bio) != rq_request_is_sync(rq))
		return false;
	if (!cfqq)
		return true;
	ioc = ioc_of_bio(bio);
	cic = ioc ? cic_lookup(cfqd, ioc) : NULL;
	if (cfqq == &cfqd->oom)
		return !cic;
	if (!cic || cic->group_gen != ioc_group_gen(ioc))
		return false;
	return cfqq->sync ? cic->sync_q == cfqq : cic->cfqg == cfqq->cfqg;
}

/** cfq_allow_rq_merge() - two requests merge only within one queue. */
static bool cfq_allow_rq_merge(struct rq_queue *q, struct rq_request *rq, struct rq_request *next)
{
	return rq_cfqq(rq) == rq_cfqq(next);
}

/**
 * cfq_former() / cfq_latter() - @rq's neighbours in its queue's sector tree.
 * Context: queue lock held.
 */
static struct rq_request *cfq_former(struct rq_queue *q, struct rq_request *rq)
{
	return rq_rb_empty_node(&rq->rb_node) ? NULL : rq_sched_rb_former(rq);
}

static struct rq_request *cfq_latter(struct rq_queue *q, struct rq_request *rq)
{
	return rq_rb_empty_node(&rq->rb_node) ? NULL : rq_sched_rb_latter(rq);
}

/**
 * cfq_may_queue() - a queue we are idling on may take a request past
 * nr_requests once per slice (RQ_ELV_MQUEUE_MUST), so the request we wait
 * for is not stuck behind other submitters.  The io context is the calling
 * thread's (the hook is given no bio).
 * Context: the submitter, queue lock held.
 */
static int cfq_may_queue(struct rq_queue *q, unsigned op, unsigned opf)
{
	struct cfq_data *cfqd = cfqd_of(q);
	struct rq_io_context *ioc = rq_ioc_current();
	struct cfq_cic *cic = ioc ? cic_lookup(cfqd, ioc) : NULL;
	struct cfq_queue *cfqq;

	if (!cic || !(op == RQ_OP_READ || (opf & RQ_BIO_SYNC)))
		return RQ_ELV_MQUEUE_MAY;
	cfqq = cic->sync_q;
	if (cfqq && cfqq->wait_request && !cfqq->must_alloc_slice) {
		cfqq->must_alloc_slice = true;
		return RQ_ELV_MQUEUE_MUST;
	}
	return RQ_ELV_MQUEUE_MAY;
}

/** cfq_queue_empty() - nothing queued.  Queue lock held. */
static bool cfq_queue_empty(struct rq_queue *q)
{
	return !cfqd_of(q)->rq_queued;
}

/* ------------------------------------------------------ attribute table */

/*
 * Parse all of @buf (an optional trailing newline aside) as a decimal
 * number within [@min, @max].  Return: 0, or -EINVAL with *@out untouched.
 */
static int cfq_parse(const char *buf, unsigned long min, unsigned long max, unsigned *out)
{
	unsigned long v;

	if (rq_sched_parse_uint(buf, min, max, &v))
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

static int cfq_show(unsigned v, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%u\n", v);

	return n < 0 || (size_t)n >= len ? -ENOSPC : n;
}

static int cfq_store(unsigned *p, const char *buf, unsigned long min, unsigned long max)
{
	unsigned v;

	if (cfq_parse(buf, min, max, &v))
		return -EINVAL;
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
	return 0;
}

/* One show/store pair per tunable, with the range it accepts (times in ms). */
#define CFQ_ATTR(name, field, min, max)                                          \
	static int cfq_show_##name(void *data, char *buf, size_t len)            \
	{                                                                         \
		return cfq_show(tun(&((struct cfq_data *)data)->field), buf, len); \
	}                                                                         \
	static int cfq_store_##name(void *data, const char *buf)                 \
	{                                                                         \
		return cfq_store(&((struct cfq_data *)data)->field, buf, min, max); \
	}

#define CFQ_MAX_MS 3600000 /* an hour: longer is a mistake */

CFQ_ATTR(quantum, t_quantum, 1, INT_MAX)
CFQ_ATTR(fifo_expire_sync, t_fifo_expire[1], 1, CFQ_MAX_MS)
CFQ_ATTR(fifo_expire_async, t_fifo_expire[0], 1, CFQ_MAX_MS)
CFQ_ATTR(back_seek_max, t_back_seek_max, 0, INT_MAX)
CFQ_ATTR(back_seek_penalty, t_back_seek_penalty, 1, INT_MAX)
CFQ_ATTR(slice_sync, t_slice[1], 1, CFQ_MAX_MS)
CFQ_ATTR(slice_async, t_slice[0], 1, CFQ_MAX_MS)
CFQ_ATTR(slice_async_rq, t_slice_async_rq, 1, INT_MAX)
CFQ_ATTR(slice_idle, t_slice_idle, 0, CFQ_MAX_MS)
CFQ_ATTR(group_idle, t_group_idle, 0, CFQ_MAX_MS)
CFQ_ATTR(low_latency, t_low_latency, 0, 1)
CFQ_ATTR(target_latency, t_target_latency, 1, CFQ_MAX_MS)

static const struct rq_elv_attr cfq_attrs[] = {
	{ "quantum", cfq_show_quantum, cfq_store_quantum },
	{ "fifo_expire_sync", cfq_show_fifo_expire_sync, cfq_store_fifo_expire_sync },
	{ "fifo_expire_async", cfq_show_fifo_expire_async, cfq_store_fifo_expire_async },
	{ "back_seek_max", cfq_show_back_seek_max, cfq_store_back_seek_max },
	{ "back_seek_penalty", cfq_show_back_seek_penalty, cfq_store_back_seek_penalty },
	{ "slice_sync", cfq_show_slice_sync, cfq_store_slice_sync },
	{ "slice_async", cfq_show_slice_async, cfq_store_slice_async },
	{ "slice_async_rq", cfq_show_slice_async_rq, cfq_store_slice_async_rq },
	{ "slice_idle", cfq_show_slice_idle, cfq_store_slice_idle },
	{ "group_idle", cfq_show_group_idle, cfq_store_group_idle },
	{ "low_latency", cfq_show_low_latency, cfq_store_low_latency },
	{ "target_latency", cfq_show_target_latency, cfq_store_target_latency },
	{ NULL, NULL, NULL },
};

/* ------------------------------------------------------------------ type */

static const struct rq_elevator_sq_ops cfq_sq_ops = {
	RQ_ELV_SQ_OPS_INIT,
	.init_queue = cfq_init_queue,
	.exit_queue = cfq_exit_queue,
	.merge = cfq_merge,
	.merged = cfq_merged,
	.merge_req = cfq_merge_req,
	.allow_merge = cfq_allow_merge,
	.allow_rq_merge = cfq_allow_rq_merge,
	.add_request = cfq_add_request,
	.dispatch = cfq_dispatch,
	.activate = cfq_activate,
	.deactivate = cfq_deactivate,
	.completed = cfq_completed,
	.former = cfq_former,
	.latter = cfq_latter,
	.set_request = cfq_set_request,
	.put_request = cfq_put_request,
	.may_queue = cfq_may_queue,
	.queue_empty = cfq_queue_empty,
};

const struct rq_elevator_type rq_cfq_type = {
	RQ_ELV_TYPE_INIT,
	.name = "cfq",
	.features = RQ_ELV_F_SQ,
	.attrs = cfq_attrs,
	.sq_ops = &cfq_sq_ops,
};
