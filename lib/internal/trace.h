/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The event points of the request layer (lib/trace.c): blktrace records
 * while a trace runs, diskstats and latency histograms while "iostats" is
 * on.  Each point is one inline call that tests q->obs_flags once
 * (unlikely: a predictable branch, not taken while both are off) and only
 * then calls out of line.  Never installed.
 *
 *   point          blktrace   where
 *   trace_queue    Q          core.c, a bio entered, before the split loop
 *   trace_split    X          core.c, each front piece cut off
 *   trace_merge    M / F      merge.c, a bio joined a request
 *   trace_rq_merge M          merge.c, a request joined another
 *   trace_getrq    G          mq.c / sq.c, a request made for a bio
 *   trace_sleep    S          mq.c / sq.c, about to sleep for a tag
 *   trace_plug     P          plug.c, first request on an empty plug
 *   trace_unplug   U          plug.c, a run of requests leaves the plug
 *   trace_insert   I          mq.c / sq.c, into the scheduler or a sw queue
 *   trace_issue    D          mq.c / sq.c, handed to the driver
 *   trace_requeue  R          mq.c / sq.c, back from the driver
 *   trace_complete C          complete.c / mq.c / sq.c / flush.c, bytes completed
 */
#ifndef RQ_INTERNAL_TRACE_H
#define RQ_INTERNAL_TRACE_H

#include "queue.h"

enum {
	OBS_TRACE = 1u << 0,   /* a blktrace trace runs */
	OBS_IOSTAT = 1u << 1,  /* diskstats and histograms are counted */
};

/* blktrace's actions (the low 16 bits of the action word) */
enum {
	TA_QUEUE = 1, TA_BACKMERGE, TA_FRONTMERGE, TA_GETRQ, TA_SLEEPRQ, TA_REQUEUE,
	TA_ISSUE, TA_COMPLETE, TA_PLUG, TA_UNPLUG_IO, TA_UNPLUG_TIMER, TA_INSERT,
	TA_SPLIT,
};

/* trace_complete() flags */
enum {
	OBS_C_DONE = 1u << 0,   /* the request ends (diskstats ios, histograms) */
	OBS_C_STEP = 1u << 1,   /* a flush sequence's step: its sectors count at the end */
	OBS_C_QUIET = 1u << 2,  /* no record (the bytes had theirs): counting only */
};

struct rq_trace;

/* A queue's observability state (q->obs; NULL if it could not be had). */
struct rq_obs {
	struct rq_trace *_Atomic trace; /* the running trace (lib/trace.c) */
	char trace_path[256];        /* what the "trace" attribute shows */
	_Atomic uint32_t act_mask;   /* the "trace_actions" mask (TC_* << 16) */
	_Atomic uint64_t stamp_ms;   /* io_ticks: last accounted millisecond */
	/* latency histograms' reset base (lib/stats.c, under q->stats_lock) */
	uint64_t hist_base[2][RQ_LAT_NR_OPS][RQ_LAT_BUCKETS];
};

/* The out-of-line halves: cold, so the points' callers keep their fast paths tight. */
#define OBS_COLD __attribute__((cold, noinline))
OBS_COLD void obs_bio(struct rq_queue *q, const struct rq_bio *bio, unsigned act, uint64_t pdu);
OBS_COLD void obs_rq(struct rq_request *rq, unsigned act);
/* the Q and the C of a traced bio: hot where a trace runs, cold otherwise */
void obs_queue(struct rq_queue *q, const struct rq_bio *bio);
OBS_COLD void obs_getrq(struct rq_request *rq, const struct rq_bio *bio);
OBS_COLD void obs_note(struct rq_queue *q, unsigned act, uint64_t depth);
OBS_COLD void obs_complete(struct rq_request *rq, rq_status_t status, unsigned bytes,
			   unsigned flags);
void obs_complete_all(struct rq_request *rq, rq_status_t status, unsigned flags);
OBS_COLD void obs_unplug(struct rq_queue *q, const struct rq_list_node *list);
OBS_COLD void obs_step_end(void);
void obs_init(struct rq_queue *q);
void obs_free(struct rq_queue *q);
int trace_start_locked(struct rq_queue *q, const char *dir, const char *name);
int trace_stop_locked(struct rq_queue *q, struct rq_trace_info *info);
const char *trace_path(struct rq_queue *q);
int trace_actions_show(struct rq_queue *q, char *buf, size_t len);
int trace_actions_store(struct rq_queue *q, const char *val);
int trace_info_locked(struct rq_queue *q, struct rq_trace_info *info);
int iostat_set_locked(struct rq_queue *q, bool on);
/* lib/clock.c: rq_clock_ns()'s TSC scaling, false while it does not read the TSC */
bool clock_tsc_params(uint64_t *tick_base, uint64_t *nsec_base, uint64_t *mult);

/*
 * Queues of the process with a trace running or iostats on (lib/trace.c).
 * While it is 0 a point is a load of one global and a branch not taken,
 * with no load through the queue or request; the queue's own flags are
 * looked at only behind it.
 */
extern _Atomic unsigned obs_active;

static inline bool obs_on(const struct rq_queue *q)
{
	return unlikely(atomic_load_explicit(&obs_active, memory_order_relaxed) != 0) &&
	       atomic_load_explicit(&q->obs_flags, memory_order_relaxed) != 0;
}

static inline void trace_queue(struct rq_queue *q, const struct rq_bio *bio)
{
	if (obs_on(q))
		obs_queue(q, bio);
}

/* @piece was cut off the front; the rest starts at @rest_sector. */
static inline void trace_split(struct rq_queue *q, const struct rq_bio *piece,
			       uint64_t rest_sector)
{
	if (obs_on(q))
		obs_bio(q, piece, TA_SPLIT, rest_sector);
}

static inline void trace_merge(struct rq_queue *q, const struct rq_bio *bio, bool back)
{
	if (obs_on(q))
		obs_bio(q, bio, back ? TA_BACKMERGE : TA_FRONTMERGE, 0);
}

/*
 * A request made while its queue was traced or counted carries
 * RQ_RQF_IO_STAT (the kernel's RQF_IO_STAT: set when the request is made,
 * obs_getrq()), so its later points test a bit of rq_flags, which the
 * surrounding code has loaded anyway, instead of a global and the queue.
 */
static inline bool obs_rq_on(const struct rq_request *rq)
{
	return unlikely(rq->rq_flags & RQ_RQF_IO_STAT);
}

/* @next joined another request and goes away. */
static inline void trace_rq_merge(struct rq_request *next)
{
	if (obs_rq_on(next))
		obs_rq(next, TA_BACKMERGE);
}

/*
 * The calling thread's step (lib/trace.c, "Steps"), here so that the
 * points of its commonest events are inline: a G of the bio whose Q slot
 * is pending folds into it, and a D of that request then folds in and
 * commits it, a few loads and stores each with no call and no frame.
 * The out-of-line code sets @fold_bio when a Q opens a step with the
 * fast folds possible, and clears @fold_bio and @fold_rq at every other
 * event of the step and at its end.  Per thread, never shared.
 */
struct trace_ring;

enum {
	SLOT_G = 1u << 0,      /* a G follows the Q's record: the Q's action with TA_GETRQ */
	SLOT_D = 1u << 1,      /* then a D: the Q's direction and flags, issue, fs */
};

struct trace_step {
	struct rq_queue *q;          /* the step's queue; NULL: no step */
	const struct rq_bio *fold_bio; /* the pending Q slot's bio, nothing folded yet */
	struct rq_request *fold_rq;  /* the request whose G folded and whose D may */
	uint16_t *fold;              /* with either: the pending slot's fold bits */
	_Atomic uint64_t *head;      /* @r's head (the pending slot's index) */
	_Atomic unsigned *active;    /* the thread's mark, NULL until @id is set */
	bool d_ok;                   /* a D may fold: its action traced, the ring not half full */
	bool pending;                /* r's slot at head is written, not committed */
	uint32_t cpu;
	uint64_t stamp;
	/*
	 * Kept when the step ends: the thread's ring in the trace it last
	 * traced, which the next event's fast way reuses while @id is that
	 * trace's (0: it may not, the out-of-line code looks the ring up).
	 * @head and @active above are set with them.
	 */
	uint64_t id;
	struct rq_trace *t;          /* its trace (it cannot stop while the thread is marked) */
	struct trace_ring *r;
};

/* All the per-thread state of the event points: one TLS access reaches it. */
struct obs_thread;
#define OBS_RING_CACHE 4
struct obs_tls {
	struct trace_step step;
	struct obs_thread *th;       /* the thread's record (lib/trace.c), made on first use */
	struct {
		uint64_t id;         /* a trace's id */
		struct trace_ring *ring; /* the thread's ring in it */
	} rings[OBS_RING_CACHE];
};

extern __thread struct obs_tls obs_tls __attribute__((tls_model("initial-exec")));

/* @rq (of @q) was made for @bio. */
static inline void trace_getrq(struct rq_queue *q, struct rq_request *rq,
			       const struct rq_bio *bio)
{
	struct trace_step *st;

	if (likely(atomic_load_explicit(&obs_active, memory_order_relaxed) == 0))
		return;
	st = &obs_tls.step;
	if (st->fold_bio == bio && st->q == q &&
	    atomic_load_explicit(&q->obs_flags, memory_order_relaxed) == OBS_TRACE) {
		rq->rq_flags |= RQ_RQF_IO_STAT; /* its later points test this bit */
		*st->fold = SLOT_G;
		st->fold_bio = NULL;
		if (st->d_ok)
			st->fold_rq = rq;
	} else if (atomic_load_explicit(&q->obs_flags, memory_order_relaxed) != 0) {
		obs_getrq(rq, bio);
	}
}

/*
 * The library call that made the calling thread's events (a submission,
 * a plug's flush) returns: their shared stamp ends here (lib/trace.c,
 * "Steps").  Costs a load of one global while nothing is traced.
 */
static inline void trace_step_end(void)
{
	if (unlikely(atomic_load_explicit(&obs_active, memory_order_relaxed) != 0) &&
	    obs_tls.step.q)
		obs_step_end();
}

/* Set or clear @bits of @q's flags, counting @q in obs_active.  Context: sysfs_lock. */
void obs_flags_change(struct rq_queue *q, unsigned bits, bool on);

static inline void trace_sleep(struct rq_queue *q)
{
	if (obs_on(q))
		obs_note(q, TA_SLEEPRQ, 0);
}

static inline void trace_plug(struct rq_queue *q)
{
	if (obs_on(q))
		obs_note(q, TA_PLUG, 0);
}

/* @list (requests linked by queuelist) leaves a plug for @q's driver side. */
static inline void trace_unplug(struct rq_queue *q, const struct rq_list_node *list)
{
	if (obs_on(q))
		obs_unplug(q, list);
}

static inline void trace_insert(struct rq_request *rq)
{
	if (obs_rq_on(rq))
		obs_rq(rq, TA_INSERT);
}

/* Every request of @list (linked by queuelist), all of @q, is inserted. */
static inline void trace_insert_list(struct rq_queue *q, const struct rq_list_node *list)
{
	if (obs_on(q))
		for (const struct rq_list_node *n = list->next; n != list; n = n->next)
			trace_insert(RQ_CONTAINER_OF(n, struct rq_request, queuelist));
}

static inline void trace_issue(struct rq_request *rq)
{
	struct trace_step *st;

	if (!obs_rq_on(rq))
		return;
	st = &obs_tls.step;
	if (st->fold_rq == rq &&
	    atomic_load_explicit(&rq->q->obs_flags, memory_order_relaxed) == OBS_TRACE) {
		/* its G folded into the pending Q slot: fold the D, commit, end the step */
		*st->fold = SLOT_G | SLOT_D;
		st->fold_rq = NULL;
		st->pending = false;
		st->q = NULL;
		atomic_store_explicit(st->head,
				      atomic_load_explicit(st->head, memory_order_relaxed) + 1,
				      memory_order_release);
		atomic_store_explicit(st->active, 0, memory_order_release);
	} else {
		obs_rq(rq, TA_ISSUE);
	}
}

static inline void trace_requeue(struct rq_request *rq)
{
	if (obs_rq_on(rq))
		obs_rq(rq, TA_REQUEUE);
}

/* @bytes of @rq completed with @status (a partial completion). */
static inline void trace_complete(struct rq_request *rq, rq_status_t status, unsigned bytes,
				  unsigned flags)
{
	if (obs_rq_on(rq))
		obs_complete(rq, status, bytes, flags);
}

/* The rest of @rq completed with @status; OBS_C_* @flags. */
static inline void trace_complete_all(struct rq_request *rq, rq_status_t status,
				      unsigned flags)
{
	if (obs_rq_on(rq))
		obs_complete_all(rq, status, flags);
}

/* The flush machinery made @flush_rq for a sequence: mark it as G does. */
static inline void trace_flush_rq(struct rq_request *flush_rq)
{
	if (obs_on(flush_rq->q))
		flush_rq->rq_flags |= RQ_RQF_IO_STAT;
}

#endif /* RQ_INTERNAL_TRACE_H */
