/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The core's private structures: tag sets, queues, hardware and software
 * contexts, the elevator instance, the flush queue.  Never installed.
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
#ifndef RQ_INTERNAL_CORE_H
#define RQ_INTERNAL_CORE_H

#include <pthread.h>
#include <semaphore.h>

#include <librequest/librequest.h>

#include "compiler.h"
#include "tags.h"
#include "bio.h"

struct rq_elevator_type;

#define RQ_RESOURCE_DELAY_MS 3      /* re-run after RESOURCE with nothing in flight */
#define RQ_DEFAULT_TIMEOUT_MS 30000
#define RQ_DEFAULT_NR_REQUESTS 128  /* BLKDEV_DEFAULT_RQ */
#define RQ_ELV_HASH_BITS 6
#define RQ_DISPATCH_BATCH 32        /* requests pulled from a scheduler per round */

/* hctx->state bits */
#define HCTX_STOPPED (1u << 0)
#define HCTX_RESTART (1u << 1)      /* re-run when a request completes */
#define HCTX_ASYNC_RUN (1u << 2)    /* the service thread should run it */

/* run_state values: dispatch ownership of one hctx */
#define RUN_IDLE 0
#define RUN_BUSY 1
#define RUN_AGAIN 2

enum {
	ST_BIOS, ST_SPLITS, ST_REQUESTS, ST_DISPATCHED, ST_COMPLETED, ST_MERGES_BACK,
	ST_MERGES_FRONT, ST_MERGES_RQ, ST_PLUG_MERGES, ST_RESOURCE, ST_REQUEUES,
	ST_TIMEOUTS, ST_FLUSHES, ST_ERRORS, ST_INVALID, ST_NR
};

/* One thread's counters for one queue (lib/stats.c). */
struct rq_stats_block {
	uint64_t v[ST_NR];
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

struct rq_tag_set {
	struct rq_mq_ops ops;          /* copy, zero-filled past the driver's size */
	unsigned nr_hw_queues;
	unsigned nr_poll_queues;
	unsigned queue_depth;
	unsigned reserved_tags;
	unsigned cmd_size;
	int numa_node;
	unsigned timeout_ms;
	unsigned flags;
	void *driver_data;
	unsigned nr_cpus;
	unsigned *map;                 /* cpu -> hw queue */
	int *hctx_node;                /* hw queue -> NUMA node of its memory */
	struct rq_tags **tags;         /* per hw queue (or one shared) */
	size_t rq_size;
	pthread_mutex_t lock;          /* queue list */
	unsigned nr_queues;
	struct rq_queue *queues[64];
};

/*
 * The back-merge hash and the one-hit last_merge cache of one hardware
 * queue (of the whole queue on the single-queue front end).
 */
struct elv_merge_state {
	struct rq_hlist_node *hash[1u << RQ_ELV_HASH_BITS];
	struct rq_request *last_merge;
};

/* An attached scheduler (elevator_queue). */
struct rq_elevator_queue {
	const struct rq_elevator_type *type;
	void *data;
	struct elv_merge_state merge[];  /* one per hw queue; one on the sq front end */
};

/* Flush sequencing state (blk_flush_queue). */
struct rq_flush_queue {
	rq_spinlock_t lock;
	unsigned pending_idx;          /* which pending list collects new waiters */
	bool flush_in_flight;
	uint64_t pending_since;
	struct rq_list_node pending[2];
	struct rq_request *flush_rq;   /* the queue's own flush request */
	struct rq_request *orig_rq;    /* whose tag the flush borrowed */
};

struct rq_sq_data;

struct rq_queue {
	bool sq;                       /* single-queue front end (sqd), else mq */
	struct rq_sq_data *sqd;
	size_t rq_size;                /* request + driver payload, 64-aligned */
	struct rq_tag_set *set;        /* multi-queue only */
	const struct rq_mq_ops *ops;   /* &set->ops */
	void *queuedata;
	struct rq_queue_limits limits;
	_Atomic uint64_t capacity;
	unsigned nr_hw_queues;
	struct rq_hw_ctx **hctxs;
	unsigned nr_cpus;
	struct rq_sw_ctx *ctxs;        /* nr_cpus, cache aligned */
	unsigned *map;                 /* cpu -> hctx index (set->map) */

	struct rq_elevator_queue *elevator; /* NULL: none */
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

	/* service thread bookkeeping */
	/* statistics (lib/stats.c) */
	uint64_t id;                   /* unique, never reused */
	pthread_mutex_t stats_lock;
	struct rq_stats_block *stats_blocks;

	struct rq_queue *svc_next;
	bool svc_registered;
	uint64_t svc_last_scan_ns;
};

/* ---- lib/stats.c ---- */
struct rq_stats_block *stats_block_slow(struct rq_queue *q);
void stats_sum(struct rq_queue *q, uint64_t *sum);
void stats_init(struct rq_queue *q);
void stats_free(struct rq_queue *q);

/* Count @n events of kind @idx for @q, exactly, with no atomic RMW. */
static inline void stat_add(struct rq_queue *q, unsigned idx, uint64_t n)
{
	struct stats_cache_slot *slot = &tls_stats_cache[q->id % STATS_CACHE_SLOTS];
	struct rq_stats_block *b = slot->qid == q->id ? slot->block : stats_block_slow(q);

	if (likely(b))
		__atomic_store_n(&b->v[idx], b->v[idx] + n, __ATOMIC_RELAXED);
}

static inline void stat_inc(struct rq_queue *q, unsigned idx)
{
	stat_add(q, idx, 1);
}

/* ---- lib/mq.c ---- */
unsigned cur_cpu(void);
struct rq_sw_ctx *queue_ctx(struct rq_queue *q, unsigned cpu);
void queue_exit(struct rq_queue *q);
void run_hw_queue(struct rq_hw_ctx *hctx);
void hctx_park(struct rq_hw_ctx *hctx, struct rq_list_node *list, bool at_head);
void mq_insert_request(struct rq_request *rq, bool at_head, bool run);
void mq_free_request(struct rq_request *rq);
void rq_init_common(struct rq_request *rq, struct rq_queue *q, struct rq_hw_ctx *hctx,
		    struct rq_sw_ctx *ctx);
bool request_advance(struct rq_request *rq, rq_status_t status, unsigned bytes,
		     void (*end_bio)(struct rq_queue *q, struct rq_bio *bio, rq_status_t status));
bool mq_get_driver_tag(struct rq_request *rq);
void driver_tag_put(struct rq_hw_ctx *hctx, unsigned tag, unsigned cpu);
void hctx_tag_idle_check(struct rq_hw_ctx *hctx);
void mq_end_request_locked(struct rq_request *rq, rq_status_t status);
void mq_fail_request(struct rq_request *rq, rq_status_t status);
void mq_timeout_hold_end(struct rq_request *rq);
uint64_t queue_timeout_ns(const struct rq_queue *q);
void mq_freeze_and_quiesce(struct rq_queue *q);
void mq_unquiesce_and_unfreeze(struct rq_queue *q);
struct rq_request *mq_alloc_internal_request(struct rq_queue *q, struct rq_hw_ctx *hctx);

/* ---- lib/merge.c ---- */
bool rq_merge_ok(const struct rq_request *rq, const struct rq_bio *bio);
enum rq_elv_merge rq_try_merge_pos(const struct rq_request *rq, const struct rq_bio *bio);
bool bio_attempt_back_merge(struct rq_request *rq, struct rq_bio *bio, unsigned nr_segs);
bool bio_attempt_front_merge(struct rq_request *rq, struct rq_bio *bio, unsigned nr_segs);
bool bio_attempt_merge(struct rq_queue *q, struct rq_request *rq, struct rq_bio *bio,
		       unsigned nr_segs, bool sched_allow);
bool bio_mergeable(const struct rq_bio *bio);
bool rq_mergeable(const struct rq_request *rq);
struct rq_elevator_queue *elv_queue_alloc(unsigned nr_merge);
bool ctx_list_merge(struct rq_queue *q, struct rq_list_node *list, struct rq_bio *bio,
		    unsigned nr_segs);

/* ---- lib/flush.c ---- */
/* Return true if the flush machinery took @rq (with a write cache). */
bool flush_insert(struct rq_request *rq);
bool flush_needs_sequencing(const struct rq_queue *q, const struct rq_bio *bio);
int flush_queue_init(struct rq_queue *q);
void flush_queue_exit(struct rq_queue *q);
void flush_fail_pending(struct rq_queue *q);

/* ---- lib/sq.c ---- */
void sq_submit_piece(struct rq_queue *q, struct rq_sw_ctx *ctx, struct rq_bio *bio,
		     unsigned nr_segs);
void sq_plug_issue(struct rq_list_node *list, struct rq_request *first);
struct rq_sw_ctx *sq_release_request(struct rq_request *rq);
void sq_flush_queue_rq(struct rq_request *rq, bool at_head);
void sq_run_queue_locked(struct rq_queue *q);
int sq_elevator_switch(struct rq_queue *q, const char *name);
void sq_service(struct rq_queue *q, uint64_t now, uint64_t *next);
void sq_service_light(struct rq_queue *q, uint64_t now, uint64_t *next);
int sq_set_nr_requests(struct rq_queue *q, unsigned long nr);
void sq_queue_free(struct rq_queue *q);
const struct rq_elevator_sq_ops *sq_eops(const struct rq_queue *q);
void sq_requests_merged(struct rq_queue *q, struct rq_request *rq, struct rq_request *next);
void sq_bios_end_deferred(struct rq_queue *q);
void sq_flush_seq_done(struct rq_request *rq, rq_status_t status);
void sq_teardown(struct rq_queue *q);
struct rq_plug *plug_current(void);
void plug_add(struct rq_plug *plug, struct rq_request *rq);

/* ---- lib/attr.c ---- */
int elevator_switch(struct rq_queue *q, const char *name);
void elevator_detach(struct rq_queue *q);

/* ---- lib/service.c ---- */
void service_register(struct rq_queue *q);
void service_unregister(struct rq_queue *q);
void service_kick(void);
void service_barrier(void);
void mbox_service(uint64_t now);
void rq_mq_delay_kick_service(unsigned msecs);
uint64_t service_clock_ns(void); /* when service deadlines fall due */

#endif /* RQ_INTERNAL_CORE_H */
