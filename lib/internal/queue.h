/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The core's private view of a queue: struct rq_queue, the front-end ops
 * table through which the core reaches the multi-queue (lib/mq.c) or the
 * single-queue (lib/sq.c) front end, software and hardware contexts, the
 * attached scheduler instance, the flush queue, and the functions each
 * lower layer offers the ones above it.  Never installed.
 *
 * The layers, each calling only the ones below it (tests/build/layers.sh
 * checks the object files):
 *
 *   mq.c | sq.c      the two front ends; never call each other
 *   mq-sched.c       attaching multi-queue schedulers (mq.c only)
 *   attr.c flush.c   attributes, flush sequencing
 *   core.c           submission and split loop, enter/freeze/quiesce,
 *                    common init and teardown, getters
 *   plug.c           per-thread plugs and their tag caches
 *   merge.c          merge rules, the back-merge hash
 *   complete.c       ending bios, freeing requests, completion mailboxes
 *   service.c        the service thread or application-driven service
 *   bio split limits ioc tags elevator stats clock rbtree status
 *   alloc.c          the library's heap (jemalloc's API, or libc)
 *
 * A lower layer reaches a front end only through q->fe (struct rq_fe_ops)
 * and a scheduler only through hooks its front end set when it attached
 * it (struct elv_merge_hooks).  The mq-private part is internal/mq.h.
 *
 * Locking, from outermost to innermost:
 *   q->sysfs_lock (mutex)     attribute writes, scheduler switch
 *   q->freeze_lock (mutex)    freeze depth and its waiters
 *   hctx run ownership        one dispatcher per hctx (run_state), not a lock
 *   scheduler's own lock      inside insert/dispatch/merge hooks
 *   fq->lock (spin)           flush sequencing
 *   hctx->lock, ctx->lock     dispatch list / staged requests (short)
 *   q->requeue_lock           requeue list
 */
#ifndef RQ_INTERNAL_QUEUE_H
#define RQ_INTERNAL_QUEUE_H

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <time.h>

#include <librequest/librequest.h>

#include "clock.h"
#include "compiler.h"
#include "tags.h"
#include "bio.h"
#include "request.h"
#include "elevator.h"

struct rq_elevator_type;

#define RQ_RESOURCE_DELAY_MS 3      /* re-run after RESOURCE with nothing in flight */
#define RQ_DEFAULT_TIMEOUT_MS 30000
#define RQ_DEFAULT_NR_REQUESTS 128  /* BLKDEV_DEFAULT_RQ */
#define RQ_ELV_HASH_BITS 6
#define RQ_DISPATCH_BATCH 32        /* requests pulled from a scheduler per round */

enum {
	ST_BIOS, ST_SPLITS, ST_REQUESTS, ST_DISPATCHED, ST_COMPLETED, ST_MERGES_BACK,
	ST_MERGES_FRONT, ST_MERGES_RQ, ST_PLUG_MERGES, ST_RESOURCE, ST_REQUEUES,
	ST_TIMEOUTS, ST_FLUSHES, ST_ERRORS, ST_INVALID,
	ST_BIO_REQUESTS, /* a bio made into a request of its own: one bio and one request */
	/* diskstats (iostats on; lib/trace.c counts them): per op group R W D F */
	ST_DS_IOS, ST_DS_MERGES = ST_DS_IOS + 4, ST_DS_SECTORS = ST_DS_MERGES + 4,
	ST_DS_NSECS = ST_DS_SECTORS + 4, ST_DS_STARTED = ST_DS_NSECS + 4, /* R W */
	ST_DS_LEFT = ST_DS_STARTED + 2, ST_DS_IO_TICKS = ST_DS_LEFT + 2,
	ST_NR
};

/* One thread's counters for one queue (lib/stats.c). */
struct rq_stats_block {
	uint64_t v[ST_NR];
	uint64_t hist[2][RQ_LAT_NR_OPS][RQ_LAT_BUCKETS]; /* q2c, d2c (iostats on) */
	pthread_t owner;
	struct rq_stats_block *next;   /* the queue's list, under stats_lock */
} rq_cacheline_aligned;

#define STATS_CACHE_SLOTS 4
struct stats_cache_slot {
	uint64_t qid;
	struct rq_stats_block *block;
};
extern __thread struct stats_cache_slot tls_stats_cache[STATS_CACHE_SLOTS]
	__attribute__((tls_model("initial-exec")));

/* Per CPU software queue (blk_mq_ctx). */
struct rq_sw_ctx {
	rq_spinlock_t lock;
	struct rq_list_node rq_list;   /* staged requests (no scheduler) */
	struct rq_hw_ctx *hctx;
	struct rq_queue *q;
	unsigned cpu;
	unsigned index_hw;             /* bit in hctx->pending */
	_Atomic long usage;            /* this CPU's share of the queue usage count */
} rq_cacheline_aligned;

/* Hardware queue (blk_mq_hw_ctx). */
struct rq_hw_ctx {
	rq_spinlock_t lock;            /* guards dispatch */
	struct rq_list_node dispatch;  /* parked requests, issued first */
	_Atomic unsigned state;        /* HCTX_* */
	_Atomic bool has_dispatch;     /* dispatch is not empty (hint) */
	_Atomic int run_state;         /* RUN_* */
	_Atomic uint64_t pending;      /* sw ctxs (by index_hw, mod 64) with staged work */
	_Atomic uint64_t run_at_ns;    /* delayed run deadline for the service thread */
	struct rq_queue *q;
	struct rq_tags *tags;          /* driver tags */
	struct rq_tags *sched_tags;    /* scheduler tags, with a scheduler */
	unsigned queue_num;
	int numa_node;
	bool poll;
	void *driver_data;
	void *sched_data;
	unsigned nr_ctx;
	struct rq_sw_ctx **ctxs;
	/* fair sharing of driver tags between queues (RQ_TAG_SET_SHARED) */
	_Atomic bool tag_active;       /* counted in tags->active_queues */
	_Atomic int nr_active;         /* driver tags held */
	_Atomic int share_waiters;
	pthread_mutex_t share_lock;
	pthread_cond_t share_cond;
	uint32_t *timeout_gen;         /* service thread: per driver tag */
	uint64_t *timeout_deadline;
} rq_cacheline_aligned;

/*
 * The back-merge hash and the one-hit last_merge cache of one hardware
 * queue (of the whole queue on the single-queue front end).
 */
struct elv_merge_state {
	struct rq_hlist_node *hash[1u << RQ_ELV_HASH_BITS];
	struct rq_request *last_merge;
};

/*
 * How the shared merge code (lib/merge.c) reaches the attached scheduler:
 * filled in by the front end when it attaches one (mq-sched.c from struct
 * rq_elevator_ops, sq.c from struct rq_elevator_sq_ops).  Every hook may
 * be NULL: no such decision, the core's default.
 */
struct elv_merge_hooks {
	struct rq_request *(*latter)(struct rq_queue *q, struct rq_request *rq);
	struct rq_request *(*former)(struct rq_queue *q, struct rq_request *rq);
	bool (*allow_bio)(struct rq_queue *q, struct rq_request *rq, struct rq_bio *bio);
	/* NULL: ask allow_bio about @next's first bio */
	bool (*allow_rq)(struct rq_queue *q, struct rq_request *rq, struct rq_request *next);
	int (*front_lookup)(struct rq_queue *q, struct rq_request **rq, struct rq_bio *bio);
	/* @next joined @rq: the scheduler forgets @next */
	void (*requests_merged)(struct rq_queue *q, struct rq_request *rq,
				struct rq_request *next);
	/* @rq grew by a bio merge of @type */
	void (*request_grew)(struct rq_queue *q, struct rq_request *rq, enum rq_elv_merge type);
};

/* An attached scheduler (elevator_queue). */
struct rq_elevator_queue {
	const struct rq_elevator_type *type;
	void *data;
	struct elv_merge_hooks hooks;
	unsigned nr_merge;               /* merge states: one per hw queue, one on sq */
	struct elv_merge_state merge[];
};

/* Flush sequencing state (blk_flush_queue). */
struct rq_flush_queue {
	rq_spinlock_t lock;
	unsigned pending_idx;          /* which pending list collects new waiters */
	bool flush_in_flight;
	unsigned data_in_flight;       /* data steps of sequenced requests with the device */
	uint64_t pending_since;
	struct rq_list_node pending[2];
	struct rq_request *flush_rq;   /* the queue's own flush request */
	struct rq_request *orig_rq;    /* whose tag the flush borrowed */
};

/*
 * The attached multi-queue scheduler's hooks that every request calls (or
 * tests), copied from its type by the install (mq-sched.c), all NULL
 * without a scheduler and on the single-queue front end: one load from
 * the queue on the request paths instead of three (q->elevator->type->ops).
 * They change only with q->elevator, frozen and quiesced.
 */
struct mq_elv_hooks {
	bool (*bio_merge)(struct rq_queue *q, struct rq_bio *bio, unsigned nr_segs);
	void (*limit_depth)(struct rq_alloc_data *data);
	void (*prepare_request)(struct rq_request *rq);
	void (*completed_request)(struct rq_request *rq, uint64_t now_ns);
	void (*finish_request)(struct rq_request *rq);
};

struct rq_fe_ops;

struct rq_queue {
	const struct rq_fe_ops *fe;    /* the front end: mq_fe_ops or sq_fe_ops */
	void *fe_data;                 /* the front end's own (sq: struct rq_sq_data) */
	size_t rq_size;                /* request + driver payload, 64-aligned */
	struct rq_tag_set *set;        /* multi-queue only */
	const struct rq_mq_ops *ops;   /* &set->ops (multi-queue only) */
	void *queuedata;
	struct rq_queue_limits limits;
	struct bio_fast_lim fast;      /* from limits: queue_limits_changed() */
	_Atomic uint64_t capacity;
	unsigned nr_hw_queues;         /* 0 on the single-queue front end */
	unsigned mq_flags;             /* MQ_F_*: tag set features the mq fast path tests */
	struct rq_hw_ctx **hctxs;
	unsigned nr_cpus;
	struct rq_sw_ctx *ctxs;        /* nr_cpus, cache aligned */
	unsigned *map;                 /* cpu -> hctx index (set->map) */

	struct rq_elevator_queue *elevator; /* NULL: none */
	struct mq_elv_hooks elv;       /* multi-queue: elevator's hooks, copied */
	unsigned nr_requests;

	/* tunables (attributes) */
	unsigned nomerges;             /* 0, 1 (no extended), 2 (none) */
	unsigned rq_affinity;
	unsigned io_timeout_ms;
	bool hw_write_cache;           /* the device has a write cache */

	/* freeze / quiesce */
	_Atomic int freeze_depth;
	_Atomic int quiesce_depth;
	_Atomic bool dying;
	pthread_mutex_t freeze_lock;
	pthread_cond_t freeze_cond;    /* freezers wait here for usage == 0 */
	pthread_cond_t unfreeze_cond;  /* entries wait here for unfreeze */
	_Atomic int freeze_waiters;

	pthread_mutex_t sysfs_lock;
	pthread_rwlock_t tsan_quiesce_lock; /* ThreadSanitizer builds only */

	/* requeue */
	rq_spinlock_t requeue_lock;
	struct rq_list_node requeue_list;
	_Atomic uint64_t requeue_at_ns;

	struct rq_flush_queue fq;

	/* statistics (lib/stats.c) */
	uint64_t id;                   /* unique, never reused */
	pthread_mutex_t stats_lock;
	struct rq_stats_block *stats_blocks;

	/* observability (lib/trace.c): one test of obs_flags per event point */
	_Atomic unsigned obs_flags;    /* OBS_TRACE | OBS_IOSTAT (internal/trace.h) */
	struct rq_obs *obs;            /* trace, io_ticks stamp, histogram base */

	/* service thread bookkeeping (lib/service.c) */
	struct rq_queue *svc_next;
	bool svc_registered;
	uint64_t svc_last_scan_ns;
};

/*
 * struct rq_fe_ops - a front end, as the layers below it see it.  Each
 * front end defines one (mq_fe_ops in mq.c, sq_fe_ops in sq.c) and sets
 * q->fe when it makes a queue.  Every hook is required unless it says
 * "optional".
 */
struct rq_fe_ops {
	const char *name;              /* "mq" or "sq" */
	unsigned elv_features;         /* RQ_ELV_F_MQ or RQ_ELV_F_SQ: the schedulers it takes */

	/*
	 * @submit: one piece of a bio that fits the limits; consumes one usage
	 * reference.  Context: rq_submit_bio(), no lock held.
	 */
	void (*submit)(struct rq_queue *q, struct rq_sw_ctx *ctx, struct rq_bio *bio,
		       unsigned nr_segs);
	/*
	 * @plug_issue: a plug flush hands over a run of requests of one queue
	 * and hw queue (@first's), linked by queuelist.  Context: the plug's
	 * thread, no lock held.
	 */
	void (*plug_issue)(struct rq_list_node *list, struct rq_request *first);
	/*
	 * @plug_issue_chain: optional.  As @plug_issue, but the run is the
	 * chain @first (linked by rq_next, the last one's NULL), as the plug
	 * held it: no list to build.  The plug uses it unless the queue is
	 * observed (trace_unplug() wants the list).  NULL: @plug_issue.
	 */
	void (*plug_issue_chain)(struct rq_request *first);
	/*
	 * @release_request: a request that is not with the driver leaves for
	 * good: scheduler told, tags or pool slot back.  Return: the sw ctx
	 * whose usage reference the caller drops (NULL: none, or already
	 * dropped).
	 */
	struct rq_sw_ctx *(*release_request)(struct rq_request *rq);
	/*
	 * @plug_fail: optional.  Teardown: @rq, a request of a dying queue on
	 * the calling thread's plug (never inserted), ends with @status and
	 * leaves as request_fail() would have it, under whatever lock the
	 * front end's release needs.  NULL: request_fail().  Context:
	 * plug_fail_queue(), no lock held.
	 */
	void (*plug_fail)(struct rq_request *rq, rq_status_t status);
	/*
	 * @bio_hctx: the hw queue a bio submitted now would be queued on
	 * (merge.c asks outside a submission of @q; NULL without hw queues).
	 */
	struct rq_hw_ctx *(*bio_hctx)(struct rq_queue *q, const struct rq_bio *bio);
	/* @complete: a request a completion mailbox hands back (rq_affinity 2). */
	void (*complete)(struct rq_request *rq);
	/*
	 * @end_batch: end a list (linked by rq_next) of requests a completion
	 * batch handed to a mailbox: each is COMPLETE, its status in
	 * complete_status.  NULL for a front end without completion batches.
	 * Return: how many it ended.
	 */
	unsigned (*end_batch)(struct rq_request *list);
	/* @run_queues: run every hardware queue (the request_fn), maybe async. */
	void (*run_queues)(struct rq_queue *q, bool async);
	/*
	 * @quiesce_sync: quiesce_depth was raised: return once no dispatch
	 * that may have missed it still runs.
	 */
	void (*quiesce_sync)(struct rq_queue *q);
	/* @destroy: tear the queue down (rq_queue_destroy()) and free it. */
	void (*destroy)(struct rq_queue *q);
	/*
	 * @service: the service pass for @q at @now: delayed runs, requeue
	 * kicks, and with @scan the timeout scan; lowers *@next to when it
	 * wants to run again.  Context: one service pass at a time.
	 */
	void (*service)(struct rq_queue *q, uint64_t now, bool scan, uint64_t *next);
	/* @elevator_switch: to scheduler @name.  Context: q->sysfs_lock held. */
	int (*elevator_switch)(struct rq_queue *q, const char *name);
	/* @set_nr_requests: parse and apply @val.  Context: q->sysfs_lock held. */
	int (*set_nr_requests)(struct rq_queue *q, const char *val);

	/* flush sequencing (lib/flush.c); fq->lock is not held */
	/* @flush_prepare: @flush_rq will flush for @first (mq: borrow its tag) */
	void (*flush_prepare)(struct rq_request *flush_rq, struct rq_request *first);
	/*
	 * @flush_step_end: a step of a sequence (the flush request, or a data
	 * step) left the driver: mq gives back the driver tag it borrowed or
	 * took at dispatch.  For the flush request, fq->lock is held.
	 */
	void (*flush_step_end)(struct rq_request *rq);
	/* @flush_issue: issue a step of a sequence: a data write, or (@flush) the flush */
	void (*flush_issue)(struct rq_request *rq, bool flush);
	/* @flush_seq_done: the sequence of @rq is over: end it with @status */
	void (*flush_seq_done)(struct rq_request *rq, rq_status_t status);
};

/* ---- lib/stats.c ---- */
struct rq_stats_block *stats_block_slow(struct rq_queue *q);
void stats_sum(struct rq_queue *q, uint64_t *sum);
void stats_init(struct rq_queue *q);
void stats_free(struct rq_queue *q);

/* The calling thread's counters for @q if its cache holds them, else NULL: no call. */
static inline struct rq_stats_block *stats_block_cached(const struct rq_queue *q)
{
	struct stats_cache_slot *slot = &tls_stats_cache[q->id % STATS_CACHE_SLOTS];

	return slot->qid == q->id ? slot->block : NULL;
}

/* The calling thread's counters for @q (NULL without memory); see stat_add(). */
static inline struct rq_stats_block *stats_block(struct rq_queue *q)
{
	struct rq_stats_block *b = stats_block_cached(q);

	return likely(b) ? b : stats_block_slow(q);
}

/* Count @n events of kind @idx in block @b (from stats_block(); may be NULL). */
static inline void stat_block_add(struct rq_stats_block *b, unsigned idx, uint64_t n)
{
	if (likely(b))
		__atomic_store_n(&b->v[idx], b->v[idx] + n, __ATOMIC_RELAXED);
}

/* Count @n events of kind @idx for @q, exactly, with no atomic RMW. */
static inline void stat_add(struct rq_queue *q, unsigned idx, uint64_t n)
{
	stat_block_add(stats_block(q), idx, n);
}

static inline void stat_inc(struct rq_queue *q, unsigned idx)
{
	stat_add(q, idx, 1);
}

/* ---- helpers every layer inlines ---- */

int sched_getcpu(void); /* <sched.h>, _GNU_SOURCE */

/* The CPU the calling thread runs on now (it may move at any time). */
static inline unsigned cur_cpu(void)
{
	int c = sched_getcpu();

	return c < 0 ? 0 : (unsigned)c;
}

/* The software queue of @q for @cpu. */
static inline struct rq_sw_ctx *queue_ctx(struct rq_queue *q, unsigned cpu)
{
	if (unlikely(cpu >= q->nr_cpus))
		cpu %= q->nr_cpus;
	return &q->ctxs[cpu];
}

static inline uint64_t queue_timeout_ns(const struct rq_queue *q)
{
	return (uint64_t)READ_ONCE(q->io_timeout_ms) * 1000000ull;
}

static inline bool queue_quiesced(struct rq_queue *q)
{
	return atomic_load_explicit(&q->quiesce_depth, memory_order_acquire) != 0;
}

/*
 * Drop @n usage references taken on @ctx's slot (queue_enter()).  The
 * drop is the last access to @q: a destroyer may free the queue as soon as
 * the count reaches zero.  While a freeze is on, the drop happens under
 * freeze_lock so the freezer wakes at once (freezers also re-check every
 * few milliseconds, so a freeze that starts just after the check costs a
 * little latency, never a hang).
 */
static inline void queue_exit_ctx_n(struct rq_queue *q, struct rq_sw_ctx *ctx, long n)
{
	if (likely(!atomic_load_explicit(&q->freeze_depth, memory_order_seq_cst))) {
		atomic_fetch_sub_explicit(&ctx->usage, n, memory_order_seq_cst);
		return;
	}
	pthread_mutex_lock(&q->freeze_lock);
	atomic_fetch_sub_explicit(&ctx->usage, n, memory_order_seq_cst);
	pthread_cond_broadcast(&q->freeze_cond);
	pthread_mutex_unlock(&q->freeze_lock);
}

static inline void queue_exit_ctx(struct rq_queue *q, struct rq_sw_ctx *ctx)
{
	queue_exit_ctx_n(q, ctx, 1);
}

/* Drop one usage reference on the calling CPU's slot (the freezer sums them). */
static inline void queue_exit(struct rq_queue *q)
{
	queue_exit_ctx(q, queue_ctx(q, cur_cpu()));
}

/* ---- lib/complete.c: ending bios and requests, completion mailboxes ---- */

/*
 * A thread's completion mailbox (rq_affinity 2): requests other threads
 * completed for it, a lock-free stack drained at its next entry into the
 * library, or by the service pass if it does not come within a millisecond.
 */
struct rq_mailbox {
	_Atomic(struct rq_request *) head;       /* for fe->complete, one by one */
	_Atomic(struct rq_request *) batch_head; /* from completion batches: fe->end_batch */
	uint64_t pushed_ns;
	struct rq_mailbox *next;  /* registry, under the registry lock */
	bool dead;                /* owner thread exited */
	atomic_bool sleeping;     /* the owner waits in rq_wait_completions() */
	_Atomic uint32_t wake_seq; /* its futex word */
	/* adaptive polling in rq_wait_completions() (lib/complete.c) */
	atomic_bool polling;      /* the owner polls the stacks: a push needs no wake-up */
	_Atomic int push_cpu;     /* 1 + the CPU of the last push, 0: none yet */
	uint32_t poll_ns;         /* the owner's polling budget (owner only) */
} rq_cacheline_aligned;      /* alone on its line: pushers and owner only */

extern __thread struct rq_mailbox *tls_mbox __attribute__((tls_model("initial-exec")));

bool request_advance(struct rq_request *rq, rq_status_t status, unsigned bytes,
		     void (*end_bio)(struct rq_queue *q, struct rq_bio *bio, rq_status_t status));
void request_free(struct rq_request *rq);
void request_fail(struct rq_request *rq, rq_status_t status);
struct rq_mailbox *mbox_self(void);
bool mbox_push(struct rq_request *rq);
struct rq_request *mbox_push_batch(struct rq_request *list);

/* End every remaining bio of @rq with @status (once per request end: inline). */
static inline void request_end_bios(struct rq_request *rq, rq_status_t status)
{
	struct rq_bio *bio = rq->bio;

	rq->bio = rq->biotail = NULL;
	rq->bytes = 0;
	while (bio) {
		struct rq_bio *next = bio->next;

		bio->next = NULL;
		bio_end_with(bio, status);
		bio = next;
	}
}
unsigned mbox_drain(struct rq_mailbox *mb);

/* Did other threads leave completions for the calling thread? */
static inline bool mbox_own_pending(void)
{
	struct rq_mailbox *mb = tls_mbox;

	return mb && (atomic_load_explicit(&mb->head, memory_order_relaxed) ||
		      atomic_load_explicit(&mb->batch_head, memory_order_relaxed));
}

/* Complete what other threads left for the calling thread. */
static inline void mbox_run_own(void)
{
	if (unlikely(mbox_own_pending()))
		mbox_drain(tls_mbox);
}

/* ---- lib/merge.c ---- */
bool rq_merge_ok(const struct rq_request *rq, const struct rq_bio *bio);
enum rq_elv_merge rq_try_merge_pos(const struct rq_request *rq, const struct rq_bio *bio);
bool bio_attempt_back_merge(struct rq_request *rq, struct rq_bio *bio, unsigned nr_segs);
bool bio_attempt_front_merge(struct rq_request *rq, struct rq_bio *bio, unsigned nr_segs);
bool bio_attempt_merge(struct rq_queue *q, struct rq_request *rq, struct rq_bio *bio,
		       unsigned nr_segs, bool sched_allow);

#define NOMERGE_FLAGS (RQ_BIO_NOMERGE | RQ_BIO_PREFLUSH | RQ_BIO_FUA)

/* May @bio merge with anything at all (op and flags)? */
static inline bool bio_mergeable(const struct rq_bio *bio)
{
	return !(bio->opf & NOMERGE_FLAGS) &&
	       (bio->op == RQ_OP_READ || bio->op == RQ_OP_WRITE || bio->op == RQ_OP_DISCARD);
}

/* May @rq take merges at all (op, flags, not a flush sequence's)? */
static inline bool rq_mergeable(const struct rq_request *rq)
{
	return !(rq->opf & NOMERGE_FLAGS) &&
	       !(rq->rq_flags & (RQ_RQF_FLUSH_SEQ | RQ_RQF_FLUSH_INTERNAL)) &&
	       (rq->op == RQ_OP_READ || rq->op == RQ_OP_WRITE || rq->op == RQ_OP_DISCARD);
}
struct rq_elevator_queue *elv_queue_alloc(unsigned nr_merge);
void elv_sq_hash_insert(struct rq_queue *q, struct rq_request *rq);
void elv_sq_hash_leave(struct rq_queue *q, struct rq_request *rq);
bool ctx_list_merge(struct rq_queue *q, struct rq_list_node *list, struct rq_bio *bio,
		    unsigned nr_segs);

/* ---- lib/plug.c ---- */

extern __thread struct rq_plug *tls_plug __attribute__((tls_model("initial-exec")));

/* The calling thread's plug, or NULL. */
static inline struct rq_plug *plug_current(void)
{
	return tls_plug;
}


#define PLUG_FLUSH_BYTES (128u * 1024u) /* BLK_PLUG_FLUSH_SIZE */
void plug_add_slow(struct rq_plug *plug, struct rq_request *rq);

/* May @plug take a request of @q and @hctx inline (plug_add()'s common case)? */
static inline bool plug_add_fits(const struct rq_plug *plug, const struct rq_queue *q,
				 const struct rq_hw_ctx *hctx)
{
	const struct rq_request *first = plug->head;

	return likely(first && first->q == q && first->hctx == hctx &&
		      plug->count < RQ_PLUG_MAX_REQUESTS && first->bytes < PLUG_FLUSH_BYTES);
}

/* Queue @rq on @plug, which plug_add_fits() said may take it. */
static inline void plug_append(struct rq_plug *plug, struct rq_request *rq)
{
	plug->tail->rq_next = rq;
	rq->rq_next = NULL;
	plug->tail = rq;
	plug->count++;
	plug->q = rq->q;
}

/*
 * Queue @rq on @plug.  Inline the common case: a plug already holding
 * requests of the same queue and hw queue, far from full; plug_add_slow()
 * (plug.c) does the rest (first request, another queue or hw queue, a
 * flush when full) as one.
 */
static inline void plug_add(struct rq_plug *plug, struct rq_request *rq)
{
	if (unlikely(!plug_add_fits(plug, rq->q, rq->hctx))) {
		plug_add_slow(plug, rq);
		return;
	}
	plug_append(plug, rq);
}
bool plug_merge_tail(struct rq_queue *q, struct rq_request *rq, struct rq_bio *bio,
		     unsigned nr_segs);

/*
 * The request last added to @plug (may be NULL) if it is one of @q that
 * @bio touches (ends where @bio starts, or starts where it ends), else
 * NULL: adjacency, what random I/O fails (rq_try_merge_pos()), no call.
 */
static inline struct rq_request *plug_merge_candidate(const struct rq_plug *plug,
						      const struct rq_queue *q,
						      const struct rq_bio *bio)
{
	struct rq_request *rq = plug ? plug->tail : NULL;

	if (!rq || rq->q != q)
		return NULL;
	if (rq_request_end_sector(rq) != bio->iter.sector &&
	    rq->sector != rq_bio_end_sector(bio))
		return NULL;
	return rq;
}

/*
 * The one plug merge check of both front ends: may @bio join the request
 * last added to @plug, if that is a request of @q?  The caller has checked
 * that @bio may merge at all.  The common misses (no plug, an empty one,
 * another queue's request, no adjacency) cost no call.  Return: true if it merged.
 */
static inline bool plug_try_merge(struct rq_plug *plug, struct rq_queue *q, struct rq_bio *bio,
				  unsigned nr_segs)
{
	struct rq_request *rq = plug_merge_candidate(plug, q, bio);

	return rq && plug_merge_tail(q, rq, bio, nr_segs);
}
void plug_return_tags(struct rq_plug *plug, unsigned cpu);
int plug_cached_tag_refill(struct rq_plug *plug, struct rq_tags *tags, struct rq_queue *sched_q,
			   struct rq_sw_ctx *ctx, unsigned shallow);

/* Has @plug's batch a tag of @tags that plug_cached_tag() hands out inline? */
static inline bool plug_cached_tag_ready(const struct rq_plug *plug, const struct rq_tags *tags)
{
	unsigned long bits = plug->cached_tags;

	/* the last bit of a batch that holds the queue (cache_q) drops that hold */
	return plug->tag_cache == tags && bits && !(bits == (bits & -bits) && plug->cache_q);
}

/*
 * The lowest tag of @plug's batch of @tags, taken, if below @shallow (0: no
 * limit), else -1.  plug_cached_tag_ready() said there is one to take.
 */
static inline int plug_cached_tag_pop(struct rq_plug *plug, const struct rq_tags *tags,
				      unsigned shallow)
{
	unsigned long bits = plug->cached_tags;
	unsigned bit = (unsigned)__builtin_ctzl(bits);

	if (unlikely(shallow) && bit >= shallow)
		return -1; /* the lowest is the one that would go: above the limit */
	plug->cached_tags = bits & (bits - 1);
	return (int)(tags->nr_reserved + plug->cached_off + bit);
}

/*
 * A tag from the plug's batch (plug.c, "Batched tag allocation"): the
 * common case inline, a bit of @tags already taken and under @shallow;
 * everything else (refill, another tag set, the usage a batch of scheduler
 * tags holds) out of line.  -1 if none.
 */
static inline int plug_cached_tag(struct rq_plug *plug, struct rq_tags *tags,
				  struct rq_queue *sched_q, struct rq_sw_ctx *ctx, unsigned shallow)
{
	if (!plug_cached_tag_ready(plug, tags))
		return plug_cached_tag_refill(plug, tags, sched_q, ctx, shallow);
	return plug_cached_tag_pop(plug, tags, shallow);
}
void plug_fail_queue(struct rq_queue *q);
struct rq_sw_ctx *plug_queue_enter(struct rq_queue *q);

/* plug_queue_enter()'s stock (plug.c): set only while the thread holds a plug */
extern __thread struct rq_queue *tls_usage_q __attribute__((tls_model("initial-exec")));
extern __thread unsigned tls_usage_refs __attribute__((tls_model("initial-exec")));
extern __thread struct rq_sw_ctx *tls_usage_ctx __attribute__((tls_model("initial-exec")));

/*
 * plug_queue_enter()'s common case, inline: a reference from a stock of
 * @q that holds one, with no freeze begun.  Return: the stock's software
 * queue, or NULL having taken nothing (then plug_queue_enter() decides).
 * A stock is only ever set while its thread holds a plug.
 */
static inline struct rq_sw_ctx *plug_stock_take(struct rq_queue *q)
{
	if (likely(tls_usage_q == q && tls_usage_refs) &&
	    likely(!atomic_load_explicit(&q->freeze_depth, memory_order_relaxed))) {
		tls_usage_refs--;
		return tls_usage_ctx;
	}
	return NULL;
}
void plug_queue_exit(struct rq_queue *q, struct rq_sw_ctx *ctx);

/* ---- lib/core.c ---- */

/*
 * (Defined in lib/merge.c, its lowest reader.)  The software queue of the
 * submission running on this thread, NULL
 * outside rq_submit_bio(): while it runs, the hw queue a bio maps to is
 * that of the queue its request would be made on, even if the thread moved.
 */
extern __thread struct rq_sw_ctx *tls_submit_ctx __attribute__((tls_model("initial-exec")));

int queue_enter(struct rq_queue *q, struct rq_sw_ctx *ctx, bool nowait);
void queue_wait_drained(struct rq_queue *q, void (*between)(struct rq_queue *q));
void queue_start_dying(struct rq_queue *q);
void queue_freeze_and_quiesce(struct rq_queue *q);
void queue_unquiesce_and_unfreeze(struct rq_queue *q);
void timespec_in_ms(struct timespec *ts, unsigned ms);

/*
 * Reset the core's fields of a request about to be used (both front ends).
 * Inline: it is on every request's allocation, and the caller's own stores
 * that follow (tags, op, sector ...) then merge with these.
 */
static inline void rq_init_common(struct rq_request *rq, struct rq_queue *q,
				  struct rq_hw_ctx *hctx, struct rq_sw_ctx *ctx)
{
	struct rq_request_priv *p = rq_priv(rq);

	/* the timeout scan reads these without a lock */
	__atomic_store_n(&rq->q, q, __ATOMIC_RELAXED);
	__atomic_store_n(&rq->hctx, hctx, __ATOMIC_RELAXED);
	__atomic_store_n(&rq->state, RQ_STATE_IDLE, __ATOMIC_RELAXED);
	p->ctx = ctx;
	rq->cpu = (int32_t)ctx->cpu;
	rq->rq_flags = 0;
	p->core_busy = 0;
	rq->fifo_time = 0;
	rq->rq_next = NULL;
	p->end_io = NULL;
	p->end_io_data = NULL;
	rq->elv_priv[0] = rq->elv_priv[1] = NULL;
	p->hash.next = NULL;
	p->hash.pprev = NULL;
	rq_rb_clear_node(&rq->rb_node);
	rq_list_init(&rq->queuelist);
	p->flush.seq = 0;
	rq->io_start_time_ns = 0;
}
/* q->limits changed (or were set): derive q->fast.  Queue frozen or not yet used. */
void queue_limits_changed(struct rq_queue *q);
struct rq_request *queue_alloc_internal_request(struct rq_queue *q, struct rq_hw_ctx *hctx);

/* What both front ends' constructors fill in the same way. */
struct queue_common_config {
	const struct rq_fe_ops *fe;
	const struct rq_queue_limits *limits; /* validated */
	uint64_t capacity;
	void *queuedata;
	unsigned timeout_ms;
	unsigned nr_requests;
	unsigned nr_cpus;
	size_t rq_size;
	int numa_node;                  /* of the software queues */
};
struct rq_queue *queue_alloc_common(const struct queue_common_config *cfg);
void queue_free_common(struct rq_queue *q);

/*
 * ---- the pending view of a scheduler switch ----
 * Set by lib/mq-sched.c; the core's accessors rq_sched_data() and
 * rq_queue_nr_requests() read it, so it lives at the core's level
 * (variables in lib/core.c).
 */

/**
 * struct sched_view - the scheduler that the accessors show one thread
 * while it switches @q: the new one while it is set up before the freeze,
 * the old one while it is retired after.
 * @q: the queue being switched.
 * @data: what rq_sched_data(@q) returns (NULL until init_sched returns).
 * @hctx_data: per hw queue (by queue_num): what rq_sched_hctx_data()
 *	returns and where rq_sched_set_hctx_data() writes.
 * @tags: per hw queue scheduler tags of that scheduler (NULL for none).
 * @nr_requests: what rq_queue_nr_requests(@q) and rq_sched_shallow_depth()
 *	count with.
 *
 * Set with sched_view_begin() and cleared with sched_view_end(), both on
 * the switching thread, around scheduler hooks only (never around a
 * freeze, which may run the installed scheduler on this thread).  Any
 * other thread, and this one outside those brackets, sees the installed
 * scheduler.
 */
struct sched_view {
	const struct rq_queue *q;
	void *data;
	void **hctx_data;
	struct rq_tags **tags;
	unsigned nr_requests;
};

/*
 * Threads with a view set, process-wide; and this thread's view (lib/core.c).
 * The count only lets every other thread skip the TLS access: a thread
 * reads its own count increment in program order, so a relaxed load is
 * enough, and a stale non-zero count elsewhere costs only the TLS check.
 */
extern _Atomic unsigned sched_views_active;
extern __thread const struct sched_view *sched_view_tls
	__attribute__((tls_model("initial-exec")));

/**
 * sched_view_of() - the pending view this thread has of @q, if any.
 * @q: the queue a scheduler accessor was asked about.
 *
 * The common case (no switch anywhere in the process) is one relaxed load
 * of a global and a branch not taken; the TLS lookup behind it makes no
 * call, so an accessor inlined into a scheduler (LTO) needs no extra
 * registers saved.  Context: any thread; lock-free.
 * Return: the view, or NULL (then the installed scheduler answers).
 */
static inline const struct sched_view *sched_view_of(const struct rq_queue *q)
{
	if (unlikely(atomic_load_explicit(&sched_views_active, memory_order_relaxed))) {
		const struct sched_view *v = sched_view_tls;

		if (v && v->q == q)
			return v;
	}
	return NULL;
}

/* ---- lib/flush.c ---- */
/* Return true if the flush machinery took @rq (with a write cache). */
bool flush_insert(struct rq_request *rq);
/*
 * As flush_insert(), but a write that needs its data step and a post-flush
 * only is marked RQ_RQF_FLUSH_SEQ and handed back (false) to go through the
 * plug and the scheduler; its end starts the post-flush (Linux 6.x).
 */
bool flush_insert_mq(struct rq_request *rq);
int flush_queue_init(struct rq_queue *q, struct rq_hw_ctx *hctx);
void flush_queue_exit(struct rq_queue *q);
void flush_fail_pending(struct rq_queue *q);

/* ---- lib/attr.c ---- */
int queue_elevator_switch(struct rq_queue *q, const char *name);

/* ---- lib/service.c ---- */
void service_register(struct rq_queue *q);
void service_unregister(struct rq_queue *q);
void service_kick(void);
void service_kick_in(unsigned msecs);
void service_barrier(void);
void service_set_tick(void (*fn)(uint64_t now));
uint64_t service_clock_ns(void); /* when service deadlines fall due */
#endif /* RQ_INTERNAL_QUEUE_H */
