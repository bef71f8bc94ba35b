/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The single-queue front end: one queue, one lock, a driver that pulls.
 *
 * Bios go through the same checks, splits, plugs and merge rules as on the
 * multi-queue front end.  What differs is the queueing: every request comes
 * from a pool bounded by nr_requests, lives under the queue lock, passes a
 * single-queue scheduler (struct rq_elevator_sq_ops) that moves it to the
 * dispatch queue, and is pulled by the driver's request_fn with
 * rq_sq_peek_request() / rq_sq_start_request().
 *
 * Locking: the queue lock, sqd->lock (the library's mutex or the driver's) guards the
 * dispatch queue, the scheduler, the pool, the tag map, the merge hash and
 * the in-flight counts.  Bios never end with the lock held: bios finished
 * under it are queued and ended right after the library drops it (end of a
 * request_fn call, rq_sq_unlock(), the unlocked end helpers), or by the
 * service thread within a millisecond if the driver dropped the lock
 * itself.  Pool waiters are served strictly in arrival order: a freed
 * request is handed to the oldest waiter directly.
 */
#define _GNU_SOURCE
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>

#include "internal/alloc.h"
#include "internal/queue.h"
#include "internal/trace.h"
#include "internal/elevator.h"
#include "internal/ioc.h"

#define SQ_DEFAULT_NR_REQUESTS 128 /* BLKDEV_MAX_RQ */
#define SQ_MIN_NR_REQUESTS 4       /* BLKDEV_MIN_RQ */
#define SQ_MAX_TAGS 4096
#define SQ_HASH_LATER 64           /* inserted requests hashed at the next lookup */

/* A submitter waiting for a pool request. */
struct sq_waiter {
	struct sq_waiter *next;
	pthread_cond_t cond;
	struct rq_request *rq; /* handed over by the freer */
	bool abort;            /* queue dying */
};

/*
 * Layout: what every submitter reads without the lock (the ops, the lock
 * pointer, the sizes) comes first and is written only at set-up or a
 * scheduler switch; the library's mutex has a line of its own; the state
 * written under the lock starts on a fresh line, the submission side (pool,
 * scheduler count, waiters) apart from the completion side (in-flight
 * counts, bios to end), so a lock hold of one kind does not take the lines
 * the other kind reads without it (nr_sorted, deferred_pending).
 */
struct rq_sq_data {
	struct rq_sq_ops ops;            /* copy of the driver's, zero-filled */
	struct rq_elevator_sq_ops eops;  /* copy of the scheduler's */
	bool plain_hooks;                /* eops has no activate, completed or
					    put_request: a fetch's and an end's
					    fast ways may serve it */
	struct rq_request *(*fetch)(struct rq_queue *q, struct rq_sq_data *sqd);
					 /* rq_sq_fetch_request()'s way, set with
					    eops: sq_fetch_slow (not plain_hooks),
					    sq_fetch_one (a dispatch_one hook),
					    sq_fetch_plain */
	pthread_mutex_t *lock;
	size_t rq_size;
	struct rq_request **slots;       /* slot -> request, pool_cap of them */
	void **chunks;                   /* allocations backing the slots */
	unsigned nr_chunks;

	pthread_mutex_t own_lock rq_cacheline_aligned;

	/* submission side, under the lock */
	unsigned nr_requests rq_cacheline_aligned; /* the pool's limit */
	unsigned pool_cap;               /* requests that exist */
	unsigned allocated;              /* handed out */
	struct rq_request *free_list;    /* by rq_next */
	struct sq_waiter *wait_head, *wait_tail;
	unsigned nr_sorted;              /* requests inside the scheduler (written
					    under the lock, read without it by
					    sq_merge_candidates()) */
	unsigned nr_hash_later;          /* slots of hash_later in use */
	struct rq_request *hash_later[SQ_HASH_LATER]; /* inserted, not yet in the
					    back-merge hash, in insert order; a
					    request still waiting has its slot + 1
					    in reserved16 (sq_hash_later()) */

	/* dispatch and completion side, under the lock */
	struct rq_list_node queue_head rq_cacheline_aligned; /* the dispatch queue */
	uint64_t end_sector;             /* where the last dispatched request ended */
	unsigned in_flight[2];           /* started: [async, sync] */
	bool stopped;
	int request_fn_active;           /* request_fn is running (no recursion) */
	unsigned stat_batch[3];          /* counted while it runs (SQ_ST_*) */
	int lib_locked;                  /* the library holds the lock (it drains
					    deferred bios when it drops it) */
	bool rerun;                      /* work arrived while it ran */

	/* bios ended under the lock, ended after it is dropped in the order
	   they ended (a FIFO by ->next), and the usage references of their
	   requests, dropped after that */
	struct rq_bio *deferred;
	struct rq_bio **deferred_tail;   /* &deferred, or &last->next */
	long deferred_refs;
	_Atomic bool deferred_pending;
	_Atomic uint64_t deferred_since; /* when it became pending (service clock) */

	/* tagged command queueing */
	struct rq_request **tag_index;
	unsigned tag_depth, tag_max, tags_busy;

	/* timeouts, per pool slot (service thread, under the lock) */
	uint32_t *timeout_gen;
	uint64_t *timeout_deadline;
	_Atomic uint64_t run_at_ns;      /* delayed run (rq_sq_delay_queue) */
};

static const struct rq_fe_ops sq_fe_ops;

/*
 * Starts and ends while request_fn runs are counted in the queue (a
 * plain increment under the lock) and go to the statistics as request_fn
 * returns, once per run; elsewhere they are counted at once.
 */
enum { SQ_ST_DISPATCHED, SQ_ST_COMPLETED, SQ_ST_ERRORS, SQ_ST_NR };
static const unsigned char sq_st_index[SQ_ST_NR] = { ST_DISPATCHED, ST_COMPLETED, ST_ERRORS };

static struct rq_sq_data *sqd_of(const struct rq_queue *q)
{
	return q->fe_data;
}

/*
 * Requests entering or leaving the scheduler.  Lock held; the store is
 * atomic because sq_merge_candidates() reads the count without the lock.
 */
static inline void sq_sorted_add(struct rq_sq_data *sqd, int d)
{
	__atomic_store_n(&sqd->nr_sorted, sqd->nr_sorted + (unsigned)d, __ATOMIC_RELAXED);
}

/*
 * Could a bio merge into queued work?  Only requests inside the scheduler
 * take bio merges (the one-hit cache, the hash and the scheduler's merge
 * hook know no others), so with none there the merge attempt would find
 * nothing: a snapshot taken without the lock is as good as one taken with
 * it and dropped at once, which is what a plugged submission does anyway
 * (Linux 4.x blk_queue_bio drops the lock between elv_merge and the plug).
 * The calling thread's own inserts are always seen.
 */
static inline bool sq_merge_candidates(struct rq_sq_data *sqd)
{
	return __atomic_load_n(&sqd->nr_sorted, __ATOMIC_RELAXED) != 0;
}

/* The library takes / drops the queue lock (and so ends deferred bios). */
static inline void sq_lock(struct rq_sq_data *sqd)
{
	pthread_mutex_lock(sqd->lock);
	sqd->lib_locked++;
}

static inline void sq_unlock(struct rq_sq_data *sqd)
{
	sqd->lib_locked--;
	pthread_mutex_unlock(sqd->lock);
}

/* ------------------------------------------------------------- locking */

/*
 * Drop @n usage references, all on the first slot: the freezer sums every
 * slot, so which one a reference leaves from does not matter.  The last
 * touch of @q.
 */
static void sq_drop_refs(struct rq_queue *q, long n)
{
	if (n)
		queue_exit_ctx_n(q, &q->ctxs[0], n);
}

/* End @bio (a chain by ->next), then drop @refs usage references of @q. */
static void sq_end_chain(struct rq_queue *q, struct rq_bio *bio, long refs)
{
	while (bio) {
		struct rq_bio *next = bio->next;

		bio->next = NULL;
		bio_end_with(bio, RQ_STS_OK); /* its status is set: inline end_io */
		bio = next;
	}
	sq_drop_refs(q, refs);
}

/* Take the bios ended under the lock, and their references.  Lock held. */
static struct rq_bio *sq_take_deferred(struct rq_sq_data *sqd, long *refs)
{
	struct rq_bio *bio = sqd->deferred;

	*refs = sqd->deferred_refs;
	sqd->deferred = NULL;
	sqd->deferred_tail = &sqd->deferred;
	sqd->deferred_refs = 0;
	atomic_store_explicit(&sqd->deferred_pending, false, memory_order_relaxed);
	return bio;
}

/*
 * End the bios finished while the lock was held.  Lock NOT held; the
 * caller must hold @q otherwise (the service thread's registration).
 */
static void sq_bios_end_deferred(struct rq_queue *q)
{
	struct rq_sq_data *sqd = sqd_of(q);
	struct rq_bio *bio;
	long refs;

	if (!atomic_load_explicit(&sqd->deferred_pending, memory_order_acquire))
		return;
	sq_lock(sqd);
	bio = sq_take_deferred(sqd, &refs);
	sq_unlock(sqd);
	sq_end_chain(q, bio, refs);
}

/*
 * Drop the lock (held) and end the bios finished under it.  What ended
 * is taken before the unlock: afterwards the queue may only be held by
 * those bios' references, so the final drop is the last touch of @q.
 */
static void sq_unlock_end(struct rq_queue *q)
{
	struct rq_sq_data *sqd = sqd_of(q);
	struct rq_bio *bio = NULL;
	long refs = 0;

	if (atomic_load_explicit(&sqd->deferred_pending, memory_order_relaxed))
		bio = sq_take_deferred(sqd, &refs);
	sq_unlock(sqd);
	sq_end_chain(q, bio, refs);
}

RQ_EXPORT void rq_sq_lock(struct rq_queue *q)
{
	sq_lock(sqd_of(q));
}

RQ_EXPORT void rq_sq_unlock(struct rq_queue *q)
{
	sq_unlock_end(q);
}

/*
 * Something waits for the lock to drop.  When the library holds it (or runs
 * request_fn) it drains on the way out; otherwise the driver took the lock
 * itself, so the service thread drains within a millisecond.  Lock held.
 */
static __attribute__((noinline)) void sq_deferred_mark_slow(struct rq_sq_data *sqd)
{
	bool kick = !sqd->lib_locked && !sqd->request_fn_active;

	atomic_store_explicit(&sqd->deferred_since, kick ? service_clock_ns() : UINT64_MAX,
			      memory_order_relaxed);
	atomic_store_explicit(&sqd->deferred_pending, true, memory_order_release);
	if (kick)
		service_kick_in(1);
}

static inline void sq_deferred_mark(struct rq_sq_data *sqd)
{
	/* only lock holders write the flag: a plain test, no locked exchange */
	if (!atomic_load_explicit(&sqd->deferred_pending, memory_order_relaxed))
		sq_deferred_mark_slow(sqd);
}

/*
 * End the bios @first .. @last (linked by ->next, @last's NULL) with
 * @status once the lock is dropped, after those queued before them: bios
 * end in the order they were finished, as they would have under the lock.
 * Lock held.
 */
static void sq_bios_end_later(struct rq_sq_data *sqd, struct rq_bio *first, struct rq_bio *last,
			      rq_status_t status)
{
	if (unlikely(status != RQ_STS_OK)) {
		for (struct rq_bio *bio = first; bio; bio = bio->next)
			if (bio->status == RQ_STS_OK)
				bio->status = status;
	}
	*sqd->deferred_tail = first;
	sqd->deferred_tail = &last->next;
}

/* End @bio with @status once the lock is dropped.  Lock held. */
static void sq_bio_end_later(struct rq_queue *q, struct rq_bio *bio, rq_status_t status)
{
	struct rq_sq_data *sqd = sqd_of(q);

	bio->next = NULL;
	sq_bios_end_later(sqd, bio, bio, status);
	sq_deferred_mark(sqd);
}

/* ----------------------------------------------------------- run queue */

/* Count one event of kind @k (SQ_ST_*).  Lock held. */
static inline void sq_stat_inc(struct rq_queue *q, struct rq_sq_data *sqd, unsigned k)
{
	if (sqd->request_fn_active)
		sqd->stat_batch[k]++;
	else
		stat_inc(q, sq_st_index[k]);
}

/* What request_fn's run counted, to the statistics.  Lock held. */
static void sq_stat_flush(struct rq_queue *q, struct rq_sq_data *sqd)
{
	struct rq_stats_block *b = stats_block(q);

	for (unsigned k = 0; k < SQ_ST_NR; k++) {
		if (sqd->stat_batch[k]) {
			stat_block_add(b, sq_st_index[k], sqd->stat_batch[k]);
			sqd->stat_batch[k] = 0;
		}
	}
}

/* Call request_fn if there is work and the queue runs.  Lock held. */
static void sq_run_queue_locked(struct rq_queue *q)
{
	struct rq_sq_data *sqd = sqd_of(q);

	if (sqd->stopped || atomic_load(&q->quiesce_depth))
		return;
	if (sqd->request_fn_active) {
		sqd->rerun = true;
		return;
	}
	do {
		sqd->rerun = false;
		if (rq_list_empty(&sqd->queue_head) && !sqd->nr_sorted)
			break;
		sqd->request_fn_active++;
		sqd->ops.request_fn(q);
		sqd->request_fn_active--;
	} while (sqd->rerun && !sqd->stopped);
	if (!sqd->request_fn_active)
		sq_stat_flush(q, sqd);
}

RQ_EXPORT void rq_sq_run_queue_locked(struct rq_queue *q)
{
	sq_run_queue_locked(q);
}

RQ_EXPORT void rq_sq_run_queue(struct rq_queue *q)
{
	rq_sq_lock(q);
	sq_run_queue_locked(q);
	rq_sq_unlock(q);
}

RQ_EXPORT void rq_sq_delay_queue(struct rq_queue *q, unsigned msecs)
{
	struct rq_sq_data *sqd = sqd_of(q);
	uint64_t at = service_clock_ns() + (uint64_t)msecs * 1000000ull;
	uint64_t cur = atomic_load(&sqd->run_at_ns);

	while (cur == 0 || at < cur) {
		if (atomic_compare_exchange_weak(&sqd->run_at_ns, &cur, at)) {
			service_kick();
			break;
		}
	}
}

RQ_EXPORT void rq_sq_stop_queue(struct rq_queue *q)
{
	sqd_of(q)->stopped = true;
}

RQ_EXPORT void rq_sq_start_queue(struct rq_queue *q)
{
	sqd_of(q)->stopped = false;
	sq_run_queue_locked(q);
}

RQ_EXPORT bool rq_sq_queue_stopped(struct rq_queue *q)
{
	return sqd_of(q)->stopped;
}

/* Service pass: delayed runs and bios left by a driver-dropped lock. */
static void sq_service_light(struct rq_queue *q, uint64_t now, uint64_t *next)
{
	struct rq_sq_data *sqd = sqd_of(q);
	uint64_t at = atomic_load(&sqd->run_at_ns);

	if (at && at <= now) {
		if (atomic_compare_exchange_strong(&sqd->run_at_ns, &at, 0))
			rq_sq_run_queue(q);
	} else if (at && at < *next) {
		*next = at;
	}
	/* step in only for bios the library has not ended within a millisecond */
	if (atomic_load(&sqd->deferred_pending)) {
		uint64_t since = atomic_load_explicit(&sqd->deferred_since, memory_order_relaxed);

		if (since != UINT64_MAX && now - since >= 1000000u)
			sq_bios_end_deferred(q);
		else if (since != UINT64_MAX && since + 1000000u < *next)
			*next = since + 1000000u;
	}
}

/* The single-queue part of a service pass: the above, and with @scan the timeout scan. */
static void sq_service(struct rq_queue *q, uint64_t now, bool scan, uint64_t *next)
{
	struct rq_sq_data *sqd = sqd_of(q);
	uint64_t timeout = queue_timeout_ns(q);

	sq_service_light(q, now, next);
	if (!scan)
		return;

	/* timeouts: the generation scan of the multi-queue front end, per pool slot */
	sq_lock(sqd);
	for (unsigned i = 0; i < sqd->pool_cap; i++) {
		struct rq_request *rq = sqd->slots[i];

		/* a plugged request is made without the lock: atomic read */
		if (__atomic_load_n(&rq->state, __ATOMIC_RELAXED) != RQ_STATE_IN_FLIGHT)
			continue;
		if (sqd->timeout_gen[i] != rq_priv(rq)->gen || !sqd->timeout_deadline[i]) {
			sqd->timeout_gen[i] = rq_priv(rq)->gen;
			sqd->timeout_deadline[i] = now + timeout;
			continue;
		}
		if (now < sqd->timeout_deadline[i])
			continue;
		stat_inc(q, ST_TIMEOUTS);
		if (sqd->ops.timeout && sqd->ops.timeout(rq) == RQ_EH_DONE)
			sqd->timeout_deadline[i] = UINT64_MAX;
		else
			sqd->timeout_deadline[i] = now + timeout;
	}
	sq_unlock_end(q);
}

/* ----------------------------------------------------------- the pool */

static int pool_grow(struct rq_queue *q, unsigned cap)
{
	struct rq_sq_data *sqd = sqd_of(q);
	unsigned add = cap - sqd->pool_cap;
	struct rq_request **slots;
	uint32_t *gen;
	uint64_t *deadline;
	void **chunks;
	char *mem;

	if (cap <= sqd->pool_cap)
		return 0;
	slots = mem_realloc(sqd->slots, cap * sizeof(*slots));
	if (!slots)
		return -ENOMEM;
	sqd->slots = slots;
	gen = mem_realloc(sqd->timeout_gen, cap * sizeof(*gen));
	if (!gen)
		return -ENOMEM;
	sqd->timeout_gen = gen;
	deadline = mem_realloc(sqd->timeout_deadline, cap * sizeof(*deadline));
	if (!deadline)
		return -ENOMEM;
	sqd->timeout_deadline = deadline;
	chunks = mem_realloc(sqd->chunks, (sqd->nr_chunks + 1) * sizeof(*chunks));
	if (!chunks)
		return -ENOMEM;
	sqd->chunks = chunks;
	mem = rq_alloc_node(add * sqd->rq_size, -1);
	if (!mem)
		return -ENOMEM;
	sqd->chunks[sqd->nr_chunks++] = mem;
	for (unsigned i = 0; i < add; i++) {
		struct rq_request *rq = (struct rq_request *)(mem + i * sqd->rq_size);
		unsigned slot = sqd->pool_cap + i;

		request_layout_init(rq);
		rq->internal_tag = (int32_t)slot; /* the pool slot */
		rq->tag = -1;
		rq->reserved16 = 0; /* no sq_hash_later() slot */
		rq->q = q;
		if (sqd->ops.init_request && sqd->ops.init_request(q, rq)) {
			/* keep what was set up so far */
			add = i;
			break;
		}
		sqd->slots[slot] = rq;
		sqd->timeout_gen[slot] = 0;
		sqd->timeout_deadline[slot] = 0;
		rq->rq_next = sqd->free_list;
		sqd->free_list = rq;
	}
	sqd->pool_cap += add;
	return add ? 0 : -ENOMEM;
}

/*
 * Hand free requests to waiters, oldest first, while the limit allows.
 * Keeps the invariant "nobody waits while a request could be had".  Lock held.
 */
static void pool_serve_waiters(struct rq_sq_data *sqd)
{
	while (sqd->wait_head && sqd->free_list && sqd->allocated < sqd->nr_requests) {
		struct sq_waiter *w = sqd->wait_head;
		struct rq_request *rq = sqd->free_list;

		sqd->free_list = rq->rq_next;
		sqd->allocated++;
		sqd->wait_head = w->next;
		if (!sqd->wait_head)
			sqd->wait_tail = NULL;
		w->rq = rq;
		pthread_cond_signal(&w->cond);
	}
}

/*
 * Is the queue lock held (by some thread)?  For assertions: glibc's lock
 * word is a plain read; elsewhere a trylock that must fail.
 */
static inline bool sq_lock_is_held(struct rq_sq_data *sqd)
{
#if defined(__GLIBC__)
	return __atomic_load_n(&sqd->lock->__data.__lock, __ATOMIC_RELAXED) != 0;
#else
	if (pthread_mutex_trylock(sqd->lock))
		return true;
	pthread_mutex_unlock(sqd->lock);
	return false;
#endif
}

/* Back to the pool; the oldest waiter gets it if the limit allows.  Lock held. */
static inline void pool_put(struct rq_sq_data *sqd, struct rq_request *rq)
{
	assert(sq_lock_is_held(sqd));
	sqd->allocated--;
	rq->rq_next = sqd->free_list;
	sqd->free_list = rq;
	if (sqd->wait_head)
		pool_serve_waiters(sqd);
}

/*
 * A request from the pool for @bio, or NULL (pool empty with NOWAIT, or
 * the queue dying).  May sleep, dropping the lock.  Lock held.
 */
static struct rq_request *pool_get(struct rq_queue *q, struct rq_bio *bio)
{
	struct rq_sq_data *sqd = sqd_of(q);
	struct rq_request *rq;
	struct sq_waiter w;
	int may = RQ_ELV_MQUEUE_MAY;

	if (sqd->eops.may_queue)
		may = sqd->eops.may_queue(q, bio->op, bio->opf);
	for (;;) {
		if ((sqd->allocated < sqd->nr_requests || may == RQ_ELV_MQUEUE_MUST) &&
		    !sqd->wait_head) {
			if (!sqd->free_list && pool_grow(q, sqd->pool_cap + 16))
				return NULL;
			rq = sqd->free_list;
			sqd->free_list = rq->rq_next;
			sqd->allocated++;
			return rq;
		}
		if ((bio->opf & RQ_BIO_NOWAIT) || atomic_load(&q->dying))
			return NULL;
		if (!plug_current() || !plug_current()->head)
			break;
		/* our own plugged requests must not hold us up: send them, look again */
		sq_unlock(sqd);
		rq_flush_plug();
		sq_lock(sqd);
	}
	/* wait in line */
	memset(&w, 0, sizeof(w));
	pthread_cond_init(&w.cond, NULL);
	if (sqd->wait_tail)
		sqd->wait_tail->next = &w;
	else
		sqd->wait_head = &w;
	sqd->wait_tail = &w;
	pool_serve_waiters(sqd);
	trace_sleep(q);
	sqd->lib_locked--; /* the wait drops the lock */
	while (!w.rq && !w.abort)
		pthread_cond_wait(&w.cond, sqd->lock);
	sqd->lib_locked++;
	pthread_cond_destroy(&w.cond);
	return w.rq;
}

/* Wake every pool waiter empty-handed (queue dying).  Lock held. */
static void pool_abort_waiters(struct rq_sq_data *sqd)
{
	struct sq_waiter *w = sqd->wait_head;

	sqd->wait_head = sqd->wait_tail = NULL;
	while (w) {
		struct sq_waiter *next = w->next;

		w->abort = true;
		pthread_cond_signal(&w->cond);
		w = next;
	}
}

/* ------------------------------------------------- the plug's requests */

/*
 * A plugging thread takes pool requests ahead, several in one lock hold
 * (the kernel's plug->cached_rq, here for the single-queue pool), and
 * makes its plugged requests from them without the lock.  What is left
 * goes back in the lock hold that issues the plug (sq_plug_issue()), so a
 * thread holds requests ahead only while its plug holds a request of the
 * same queue, and only one queue's at a time.
 *
 * Requests taken ahead count as allocated, so nr_requests is never passed.
 * A batch is as large as the plug's use of requests so far, or the last
 * plug's (1, 1, 2, 4, ... up to SQ_PLUG_BATCH), so few sit idle; it is
 * taken only while nobody waits for the pool and at least twice the batch
 * is free under nr_requests (nearer the limit the batch is halved until
 * it is).  Closer still requests are taken one by one under the lock as
 * before, and waiters keep their arrival order.
 * What differs from Linux 4.x: far from the limit, up to SQ_PLUG_BATCH - 1
 * requests per plugging thread are counted before they are made, until its
 * plug issues.  Only for schedulers without the per-request hooks may_queue
 * and set_request (noop, deadline): those decide per request, under the
 * lock, so with cfq nothing changes.
 */
#define SQ_PLUG_BATCH 32 /* RQ_PLUG_MAX_REQUESTS: one hold per plug of one queue */
#define SQ_PLUG_BIG_BIO (64u * 1024u) /* bytes */

struct sq_plug_cache {
	struct rq_queue *q;       /* whose requests these are (or were) */
	struct rq_request *head;  /* by rq_next */
	struct rq_request *tail;
	unsigned nr;              /* on the list */
	unsigned used;            /* taken off it since the plug's last issue */
	unsigned last;            /* used, at that issue */
};

static __thread struct sq_plug_cache tls_sq_cache __attribute__((tls_model("initial-exec")));

/* May plugged requests of @q come from the thread's cache?  Usage held. */
static inline bool sq_cache_allowed(const struct rq_sq_data *sqd)
{
	return !sqd->eops.may_queue && !sqd->eops.set_request;
}

/*
 * Take up to @want requests ahead for the calling thread's plug, if the
 * pool is far enough from its limit.  Lock held.
 */
static void sq_cache_fill_locked(struct rq_queue *q, unsigned want)
{
	struct rq_sq_data *sqd = sqd_of(q);
	struct sq_plug_cache *c = &tls_sq_cache;
	struct rq_request *first = sqd->free_list, *last = NULL, *rq;
	unsigned n = 0;

	/* nearer the limit, a smaller batch: twice it must still be free */
	while (want > 1 && sqd->allocated + 2 * want > sqd->nr_requests)
		want /= 2;
	if (sqd->wait_head || sqd->allocated + 2 * want > sqd->nr_requests)
		return;
	if (c->q != q) {
		c->q = q;
		c->used = c->last = 0;
	}
	/* the first want - nr of the free list, spliced whole */
	for (rq = first; rq && c->nr + n < want; rq = rq->rq_next) {
		last = rq;
		n++;
	}
	if (!n)
		return;
	sqd->free_list = rq;
	last->rq_next = c->head;
	if (!c->head)
		c->tail = last;
	c->head = first;
	c->nr += n;
	sqd->allocated += n;
}

/* The first request of the thread's cache, which holds one.  Lock not needed. */
static inline struct rq_request *sq_cache_take(void)
{
	struct sq_plug_cache *c = &tls_sq_cache;
	struct rq_request *rq = c->head;

	c->head = rq->rq_next;
	rq->rq_next = NULL;
	c->nr--;
	c->used++;
	return rq;
}

/* A request of @q from the thread's cache, or NULL.  Lock not needed. */
static inline struct rq_request *sq_cache_pop(struct rq_queue *q)
{
	struct sq_plug_cache *c = &tls_sq_cache;

	if (!c->head || c->q != q)
		return NULL;
	return sq_cache_take();
}

/* The requests of @q the thread took ahead go back to the pool.  Lock held. */
static void sq_cache_return_locked(struct rq_queue *q)
{
	struct rq_sq_data *sqd = sqd_of(q);
	struct sq_plug_cache *c = &tls_sq_cache;

	if (c->q != q)
		return;
	if (c->head) {
		c->tail->rq_next = sqd->free_list;
		sqd->free_list = c->head;
		sqd->allocated -= c->nr;
		pool_serve_waiters(sqd);
	}
	c->head = c->tail = NULL;
	c->nr = 0;
	c->last = c->used; /* how many the next plug likely needs */
	c->used = 0;
}

static unsigned sq_plug_batch(struct rq_queue *q, const struct rq_plug *plug,
			      const struct rq_bio *bio);

/*
 * A request of @q for plugged @bio: from the cache, refilled with
 * sq_plug_batch() requests in one lock hold when empty.  NULL when the
 * pool is near its limit or the cache holds another queue's: the caller
 * goes the locked way.
 */
static struct rq_request *sq_cache_get(struct rq_queue *q, const struct rq_plug *plug,
				       const struct rq_bio *bio)
{
	struct rq_sq_data *sqd = sqd_of(q);
	struct rq_request *rq = sq_cache_pop(q);

	if (rq || tls_sq_cache.head)
		return rq; /* a hit, or another queue's requests (kept for its flush) */
	sq_lock(sqd);
	sq_cache_fill_locked(q, sq_plug_batch(q, plug, bio));
	sq_unlock(sqd);
	return sq_cache_pop(q);
}

/*
 * The "nr_requests" attribute: the pool's limit (it grows to it at once).
 * Context: q->sysfs_lock held.  Return: 0, -EINVAL out of range, -ENOMEM.
 */
static int sq_set_nr_requests(struct rq_queue *q, const char *val)
{
	struct rq_sq_data *sqd = sqd_of(q);
	unsigned long nr;
	int ret = 0;

	if (rq_sched_parse_uint(val, SQ_MIN_NR_REQUESTS, 65536, &nr))
		return -EINVAL;
	sq_lock(sqd);
	if (nr > sqd->pool_cap)
		ret = pool_grow(q, (unsigned)nr);
	if (!ret) {
		sqd->nr_requests = (unsigned)nr;
		q->nr_requests = (unsigned)nr;
		pool_serve_waiters(sqd); /* room for waiters now? */
	}
	sq_unlock(sqd);
	return ret;
}

/* ------------------------------------------------------ the scheduler */

/*
 * @rq, from the pool, made for @bio at @now for io context @ioc (bio->ioc,
 * else the thread's; may be NULL); inline: its stores merge with the caller's.
 */
static inline __attribute__((always_inline))
void sq_rq_init_at(struct rq_queue *q, struct rq_sw_ctx *ctx, struct rq_request *rq,
		   struct rq_bio *bio, unsigned nr_segs, struct rq_io_context *ioc, uint64_t now)
{
	/* the pool slot (internal_tag) and the issue generation stay */
	rq_init_common(rq, q, NULL, ctx);
	rq_priv(rq)->complete_status = RQ_STS_OK;
	rq->tag = -1;
	rq->start_time_ns = now;
	rq->op = bio->op;
	rq->opf = bio->opf;
	rq->ioc = ioc;
	rq->ioprio = bio->ioprio ? bio->ioprio : (ioc ? ioc_prio(ioc) : 0);
	rq->sector = bio->iter.sector;
	rq->bytes = bio->iter.size;
	rq->nr_segments = (uint16_t)nr_segs;
	rq->bio = rq->biotail = bio;
	bio->next = NULL;
}

/* @rq, from the pool, made for @bio now (sq_rq_init_at()). */
static inline __attribute__((always_inline))
void sq_rq_init(struct rq_queue *q, struct rq_sw_ctx *ctx, struct rq_request *rq,
		struct rq_bio *bio, unsigned nr_segs)
{
	uint64_t now = core_clock_ns();

	sq_rq_init_at(q, ctx, rq, bio, nr_segs, bio->ioc ? bio->ioc : ioc_current(), now);
}

/*
 * The back-merge hash, lazily.  A request inserted into the scheduler
 * gets the one-hit cache at once (when it is empty, as the kernel's
 * elv_rqhash_add() and one-hit fill), but enters the hash only at the
 * next lookup: every merge attempt of the front end (sq_attempt_merge(),
 * sq_insert_merge()) first hashes the requests inserted since, in insert
 * order, so a lookup sees the hash an eager insert would have built
 * (merges run only after a catch-up, so nothing reorders a bucket in
 * between), and a request that leaves for the driver first (nearly every
 * request of an unplug, fetched in the same lock hold) is never hashed
 * nor unhashed.
 *
 * sqd->hash_later[] holds the requests inserted since the last catch-up,
 * in insert order; a request waiting in slot i has reserved16 == i + 1,
 * and leaving the scheduler zeroes it (one store, no test), so a slot
 * whose request's reserved16 no longer names it is stale: the request
 * left (and may be anywhere now, even on another thread's plug, which
 * writes other fields without the lock; reserved16 is written only under
 * it).  Lock held throughout.
 */

/* Hash every request inserted since the last lookup, oldest first. */
static void sq_hash_catch_up(struct rq_queue *q, struct rq_sq_data *sqd)
{
	struct elv_merge_state *ems = &q->elevator->merge[0];
	struct rq_request *keep = ems->last_merge;

	for (unsigned i = 0; i < sqd->nr_hash_later; i++) {
		struct rq_request *rq = sqd->hash_later[i];

		if (rq->reserved16 != i + 1)
			continue; /* it left the scheduler */
		rq->reserved16 = 0;
		if (rq_mergeable(rq))
			elv_sq_hash_insert(q, rq);
	}
	ems->last_merge = keep; /* filled at insert, not here */
	sqd->nr_hash_later = 0;
}

/* @rq enters the scheduler: the one-hit cache now, the hash at the next lookup. */
static inline __attribute__((always_inline))
void sq_hash_later(struct rq_queue *q, struct rq_sq_data *sqd, struct rq_request *rq)
{
	struct elv_merge_state *ems = &q->elevator->merge[0];

	if (!ems->last_merge && rq_mergeable(rq))
		ems->last_merge = rq;
	if (unlikely(sqd->nr_hash_later == SQ_HASH_LATER))
		sq_hash_catch_up(q, sqd);
	sqd->hash_later[sqd->nr_hash_later++] = rq;
	rq->reserved16 = (uint16_t)sqd->nr_hash_later;
}

/*
 * Add a request to the scheduler (ELEVATOR_INSERT_SORT).  Lock held.
 * Inline: an unplug's loop inserts a plug's requests with no call but
 * the scheduler's add_request.
 */
static inline __attribute__((always_inline))
void sq_insert_sorted(struct rq_queue *q, struct rq_request *rq)
{
	struct rq_sq_data *sqd = sqd_of(q);

	rq->rq_flags |= RQ_RQF_SORTED;
	trace_insert(rq);
	sq_sorted_add(sqd, 1);
	sq_hash_later(q, sqd, rq);
	sqd->eops.add_request(q, rq);
}

/* Insert, merging into a queued request when contiguous.  Lock held. */
static void sq_insert_merge(struct rq_queue *q, struct rq_request *rq)
{
	struct rq_list_node freed;

	sq_hash_catch_up(q, sqd_of(q));
	rq_list_init(&freed);
	if (rq_sched_try_insert_merge(q, rq, &freed)) {
		while (!rq_list_empty(&freed)) {
			struct rq_request *f = rq_list_first_rq(&freed);

			rq_list_del_init(&f->queuelist);
			request_free(f);
		}
		return;
	}
	sq_insert_sorted(q, rq);
}

/* Forget @rq as a merge candidate as it leaves the scheduler.  Lock held. */
static inline __attribute__((always_inline)) void sq_leave_scheduler(struct rq_queue *q, struct rq_request *rq)
{
	struct rq_sq_data *sqd = sqd_of(q);

	elv_sq_hash_leave(q, rq);
	rq->reserved16 = 0; /* out of sq_hash_later()'s slot, if in one */
	if (rq->rq_flags & RQ_RQF_SORTED) {
		rq->rq_flags &= ~RQ_RQF_SORTED;
		sq_sorted_add(sqd, -1);
	}
}

RQ_EXPORT void rq_sq_dispatch_add_tail(struct rq_queue *q, struct rq_request *rq)
{
	struct rq_sq_data *sqd = sqd_of(q);

	sq_leave_scheduler(q, rq);
	sqd->end_sector = rq_request_end_sector(rq);
	rq_list_add_tail(&rq->queuelist, &sqd->queue_head);
}

/*
 * Insert in sector order among the not yet started requests at the tail of
 * the dispatch queue: stop at a different op, a started one, or a soft
 * barrier; requests at or beyond the last end sector come before those
 * behind it (one elevator sweep).
 */
RQ_EXPORT void rq_sq_dispatch_sort(struct rq_queue *q, struct rq_request *rq)
{
	struct rq_sq_data *sqd = sqd_of(q);
	uint64_t boundary = sqd->end_sector;
	bool ahead = rq->sector >= boundary;
	struct rq_list_node *pos;

	sq_leave_scheduler(q, rq);
	for (pos = sqd->queue_head.prev; pos != &sqd->queue_head; pos = pos->prev) {
		struct rq_request *p = RQ_CONTAINER_OF(pos, struct rq_request, queuelist);
		bool p_ahead = p->sector >= boundary;

		if (p->op != rq->op || (p->rq_flags & RQ_RQF_STARTED))
			break;
		if (ahead && !p_ahead)
			continue;
		if (!ahead && p_ahead)
			break;
		if (rq->sector >= p->sector)
			break;
	}
	rq_list_insert(&rq->queuelist, pos, pos->next);
}

/*
 * @next joined @rq (the kernel's elv_merge_requests): a queued @next leaves
 * the scheduler through its merge_req hook; a new one was never in it.
 * Lock held.
 */
static void sq_requests_merged(struct rq_queue *q, struct rq_request *rq,
			       struct rq_request *next)
{
	struct rq_sq_data *sqd = sqd_of(q);

	if (!(next->rq_flags & RQ_RQF_SORTED))
		return;
	if (sqd->eops.merge_req)
		sqd->eops.merge_req(q, rq, next);
	next->reserved16 = 0; /* out of sq_hash_later()'s slot (the core unhashes it) */
	next->rq_flags &= ~RQ_RQF_SORTED;
	sq_sorted_add(sqd, -1);
}

RQ_EXPORT unsigned rq_sq_nr_sorted(const struct rq_queue *q)
{
	return sqd_of(q)->nr_sorted;
}

RQ_EXPORT unsigned rq_sq_in_flight(const struct rq_queue *q, bool sync)
{
	return sqd_of(q)->in_flight[sync ? 1 : 0];
}

/* ------------------------------------------------------------ driver */

/*
 * The hot helpers below are forced inline into request_fn's calls
 * (rq_sq_fetch_request(), the end helpers) and have exported wrappers.
 */
#define sq_inline static inline __attribute__((always_inline))

sq_inline struct rq_request *sq_peek(struct rq_queue *q, struct rq_sq_data *sqd)
{
	for (;;) {
		struct rq_request *rq = rq_list_first_rq(&sqd->queue_head);

		if (rq) {
			if (!(rq->rq_flags & RQ_RQF_STARTED)) {
				rq->rq_flags |= RQ_RQF_STARTED;
				if (sqd->eops.activate && (rq->rq_flags & RQ_RQF_ELVPRIV))
					sqd->eops.activate(q, rq);
			}
			return rq;
		}
		if (!sqd->nr_sorted)
			return NULL;
		if (!sqd->eops.dispatch(q, false)) {
			/*
			 * Work, but the scheduler holds it back (cfq idling for
			 * the active queue): come back, as the multi-queue core
			 * does, even if the scheduler armed no run itself.
			 */
			rq_sq_delay_queue(q, RQ_RESOURCE_DELAY_MS);
			return NULL;
		}
	}
}

RQ_EXPORT struct rq_request *rq_sq_peek_request(struct rq_queue *q)
{
	return sq_peek(q, sqd_of(q));
}

sq_inline void sq_start(struct rq_sq_data *sqd, struct rq_request *rq)
{
	rq_list_del_init(&rq->queuelist);
	rq->rq_flags |= RQ_RQF_STARTED;
	rq->io_start_time_ns = core_clock_ns();
	sqd->in_flight[rq_request_is_sync(rq)]++;
	__atomic_store_n(&rq_priv(rq)->gen, rq_priv(rq)->gen + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&rq->state, RQ_STATE_IN_FLIGHT, __ATOMIC_RELEASE);
	sq_stat_inc(rq->q, sqd, SQ_ST_DISPATCHED);
	trace_issue(rq);
}

RQ_EXPORT void rq_sq_start_request(struct rq_request *rq)
{
	sq_start(sqd_of(rq->q), rq);
}

/* A fetch the fast way below does not take: sq_peek() and sq_start() whole. */
static __attribute__((noinline)) struct rq_request *sq_fetch_slow(struct rq_queue *q,
								  struct rq_sq_data *sqd)
{
	struct rq_request *rq = sq_peek(q, sqd);

	if (rq)
		sq_start(sqd, rq);
	return rq;
}

/*
 * The scheduler had work but moved none (cfq idling): come back later, as
 * sq_peek() does.  Out of line, so the fetch saves no registers for it.
 */
static __attribute__((noinline)) struct rq_request *sq_fetch_held_back(struct rq_queue *q)
{
	rq_sq_delay_queue(q, RQ_RESOURCE_DELAY_MS);
	return NULL;
}

/* sq_start() for sq_fetch_plain()'s shape: @rq unlinked, @now read. */
sq_inline struct rq_request *sq_start_plain(struct rq_sq_data *sqd, struct rq_request *rq,
					    uint64_t now)
{
	rq->rq_flags |= RQ_RQF_STARTED;
	rq->io_start_time_ns = now;
	sqd->in_flight[rq_request_is_sync(rq)]++;
	__atomic_store_n(&rq_priv(rq)->gen, rq_priv(rq)->gen + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&rq->state, RQ_STATE_IN_FLIGHT, __ATOMIC_RELEASE);
	sqd->stat_batch[SQ_ST_DISPATCHED]++;
	return rq;
}

/*
 * What sq_peek() and sq_start() do, for the common shape only: request_fn
 * runs (starts are counted in the queue), the plug's clock is read, no
 * activate hook (sqd->plain_hooks, tested first: cfq leaves at once) and
 * no tracing; the dispatch queue's head, or the request
 * the scheduler moves to an empty one (the same one dispatch call
 * sq_peek() makes).  Anything else goes to sq_fetch_slow(): no call but
 * the scheduler's dispatch on the way, so few registers saved.
 */
static __attribute__((noinline)) struct rq_request *sq_fetch_plain(struct rq_queue *q,
								   struct rq_sq_data *sqd)
{
	struct rq_request *rq = rq_list_first_rq(&sqd->queue_head);
	uint64_t now;

	if (!rq) {
		if (!sqd->nr_sorted)
			return NULL;
		if (!sqd->eops.dispatch(q, false))
			return sq_fetch_held_back(q);
		rq = rq_list_first_rq(&sqd->queue_head);
		if (unlikely(!rq))
			return sq_fetch_slow(q, sqd);
	}
	now = tls_plug_now;
	if (unlikely(!now || !sqd->request_fn_active || obs_rq_on(rq)))
		return sq_fetch_slow(q, sqd);
	rq_list_del_init(&rq->queuelist);
	return sq_start_plain(sqd, rq, now);
}

/*
 * sq_fetch_plain() for a scheduler with a dispatch_one hook (noop): with
 * the dispatch queue empty, the request the scheduler's dispatch would
 * move there is taken straight from it (what rq_sq_dispatch_add_tail()
 * does but the list moves) and started.
 */
static __attribute__((noinline)) struct rq_request *sq_fetch_one(struct rq_queue *q,
								 struct rq_sq_data *sqd)
{
	struct rq_request *rq;

	if (!rq_list_empty(&sqd->queue_head) || unlikely(!tls_plug_now || !sqd->request_fn_active))
		return sq_fetch_plain(q, sqd);
	rq = sqd->eops.dispatch_one(q); /* NULL when empty: nr_sorted is tested after */
	sqd = sqd_of(q); /* read again rather than kept across the call: a smaller frame */
	if (!rq)
		return sqd->nr_sorted ? sq_fetch_held_back(q) : NULL;
	sq_leave_scheduler(q, rq);
	sqd->end_sector = rq_request_end_sector(rq);
	if (likely(!obs_rq_on(rq)))
		return sq_start_plain(sqd, rq, tls_plug_now);
	rq_list_add_tail(&rq->queuelist, &sqd->queue_head);
	return sq_fetch_slow(q, sqd);
}

/* Every way of a fetch is a tail call: cfq's (activate) saves no registers twice. */
RQ_EXPORT struct rq_request *rq_sq_fetch_request(struct rq_queue *q)
{
	struct rq_sq_data *sqd = sqd_of(q);

	return sqd->fetch(q, sqd);
}

/* Give the request back to the pool; returns the ctx to drop usage on.  Lock held. */
sq_inline struct rq_sw_ctx *sq_release_locked(struct rq_request *rq)
{
	struct rq_queue *q = rq->q;
	struct rq_sq_data *sqd = sqd_of(q);
	struct rq_sw_ctx *ctx = rq_priv(rq)->ctx;

	if (unlikely(rq->rq_flags & RQ_RQF_FLUSH_INTERNAL))
		return NULL;
	if (rq->rq_flags & RQ_RQF_ELVPRIV) {
		if (q->elevator && sqd->eops.put_request)
			sqd->eops.put_request(rq);
		rq->rq_flags &= ~RQ_RQF_ELVPRIV;
	}
	if (q->elevator && q->elevator->merge[0].last_merge == rq)
		q->elevator->merge[0].last_merge = NULL;
	if (rq->tag >= 0)
		rq_sq_end_tag(q, rq);
	rq->bio = rq->biotail = NULL;
	__atomic_store_n(&rq->state, RQ_STATE_IDLE, __ATOMIC_RELEASE);
	pool_put(sqd, rq);
	return ctx;
}

/* fe->release_request: the above for the core (a request freed by a merge). */
static struct rq_sw_ctx *sq_release_request(struct rq_request *rq)
{
	return sq_release_locked(rq);
}

/*
 * Can @bio be advanced over all it has left inline: is what is left the
 * rest of its last vector (or has it no vectors)?  The shapes of nearly
 * every bio.
 */
sq_inline bool sq_bio_advance_inline_ok(const struct rq_bio *bio)
{
	const struct rq_bvec_iter *it = &bio->iter;

	return !bio->vcnt || (it->idx + 1u == bio->vcnt &&
			      it->done + it->size == bio->vecs[it->idx].len);
}

/* The inline advance, for a @bio sq_bio_advance_inline_ok() admits. */
sq_inline void sq_bio_advance_inline(struct rq_bio *bio)
{
	struct rq_bvec_iter *it = &bio->iter;

	it->sector += it->size >> RQ_SECTOR_SHIFT;
	it->size = 0;
	if (bio->vcnt) {
		it->idx = bio->vcnt;
		it->done = 0;
	}
}

/* Advance @bio over all it has left, as bio_advance(bio, its size) does. */
sq_inline void sq_bio_advance_all(struct rq_bio *bio)
{
	if (!sq_bio_advance_inline_ok(bio)) {
		bio_advance(bio, bio->iter.size);
		return;
	}
	sq_bio_advance_inline(bio);
}

/*
 * Every byte of @rq is done: each bio advanced to its end, @rq's sector to
 * its end and no bytes left (as request_advance() leaves them), the bios
 * queued to end as one chain after those ended before.  @rq has bios.
 * Lock held; the caller marks the deferred work.  With @plain every bio
 * is known to pass sq_bio_advance_inline_ok().
 */
sq_inline void sq_bios_queue(struct rq_sq_data *sqd, struct rq_request *rq, rq_status_t status,
			     bool plain)
{
	for (struct rq_bio *bio = rq->bio; bio; bio = bio->next) {
		if (plain)
			sq_bio_advance_inline(bio);
		else
			sq_bio_advance_all(bio);
	}
	rq->sector = rq_request_end_sector(rq);
	rq->bytes = 0;
	rq->biotail->next = NULL;
	sq_bios_end_later(sqd, rq->bio, rq->biotail, status);
	rq->bio = rq->biotail = NULL;
}

sq_inline void sq_bios_done(struct rq_sq_data *sqd, struct rq_request *rq, rq_status_t status)
{
	sq_bios_queue(sqd, rq, status, false);
}

/*
 * Completion of @bytes of @rq; bios wholly done end after the lock drops.
 * When @bytes covers the request, sq_bios_done().  Return: true while
 * bytes remain.  Lock held.
 */
static bool sq_update_request(struct rq_request *rq, rq_status_t status, unsigned bytes)
{
	struct rq_sq_data *sqd = sqd_of(rq->q);

	if (!bytes || bytes < rq->bytes || !rq->bio)
		return request_advance(rq, status, bytes, sq_bio_end_later);
	sq_bios_done(sqd, rq, status);
	sq_deferred_mark(sqd);
	return false;
}

/*
 * @rq's remaining bios end with @status (later, in order), it goes back to
 * the pool, and its usage reference is dropped after its bios have ended.
 * Lock held.
 */
sq_inline void sq_request_leave(struct rq_request *rq, rq_status_t status)
{
	struct rq_sq_data *sqd = sqd_of(rq->q);
	bool mark = rq->bio != NULL;

	if (rq->bio) {
		rq->biotail->next = NULL;
		sq_bios_end_later(sqd, rq->bio, rq->biotail, status);
		rq->bio = rq->biotail = NULL;
	}
	rq->bytes = 0;
	if (sq_release_locked(rq)) {
		sqd->deferred_refs++;
		mark = true;
	}
	if (mark)
		sq_deferred_mark(sqd);
}

/*
 * Plug teardown (fe->plug_fail): @rq of a dying queue never reached the
 * scheduler; it leaves as a completed one does, under the lock the pool
 * needs, its bios ending once the lock drops.  No lock held.
 */
static void sq_plug_fail(struct rq_request *rq, rq_status_t status)
{
	struct rq_queue *q = rq->q;

	sq_lock(sqd_of(q));
	if (status != RQ_STS_OK)
		stat_inc(q, ST_ERRORS);
	stat_inc(q, ST_COMPLETED);
	trace_complete_all(rq, status, OBS_C_DONE);
	sq_request_leave(rq, status);
	sq_unlock_end(q);
}

/* @rq is out of the driver: in-flight count and driver tag.  Lock held. */
sq_inline void sq_left_driver(struct rq_queue *q, struct rq_sq_data *sqd, struct rq_request *rq)
{
	sqd->in_flight[rq_request_is_sync(rq)]--;
	if (rq->tag >= 0)
		rq_sq_end_tag(q, rq);
}

/* @rq is done: traced, counted, and told to the scheduler.  Lock held. */
sq_inline void sq_count_done(struct rq_queue *q, struct rq_sq_data *sqd, struct rq_request *rq,
			     rq_status_t status)
{
	trace_complete_all(rq, status, OBS_C_QUIET | OBS_C_DONE);
	if (status != RQ_STS_OK)
		sq_stat_inc(q, sqd, SQ_ST_ERRORS);
	sq_stat_inc(q, sqd, SQ_ST_COMPLETED);
	if ((rq->rq_flags & RQ_RQF_ELVPRIV) && sqd->eops.completed)
		sqd->eops.completed(q, rq);
}

/* The request is done: scheduler told, bios ended (later), pool.  Lock held. */
sq_inline void sq_finish_request(struct rq_request *rq, rq_status_t status)
{
	struct rq_queue *q = rq->q;
	struct rq_sq_data *sqd = sqd_of(q);

	sq_left_driver(q, sqd, rq);
	if (rq_priv(rq)->end_io) {
		/* flush sequencing decides what comes next */
		__atomic_store_n(&rq->state, RQ_STATE_COMPLETE, __ATOMIC_RELEASE);
		rq_priv(rq)->end_io(rq, status);
		return;
	}
	sq_count_done(q, sqd, rq, status);
	sq_request_leave(rq, status);
}

/*
 * The common end in one pass: every byte of @rq done, it has bios and no
 * flush sequencing (end_io).  What sq_update_request() and
 * sq_finish_request() do, with one deferred mark and one tag check, and
 * no one-hit cache check: a request leaves the cache as it leaves the
 * scheduler (sq_leave_scheduler()) and a started one never comes back to
 * it.  Lock held.
 */
sq_inline void sq_end_whole(struct rq_request *rq, rq_status_t status)
{
	struct rq_queue *q = rq->q;
	struct rq_sq_data *sqd = sqd_of(q);

	sq_bios_done(sqd, rq, status);
	sq_left_driver(q, sqd, rq);
	sq_count_done(q, sqd, rq, status);
	if (rq->rq_flags & RQ_RQF_ELVPRIV) {
		if (sqd->eops.put_request)
			sqd->eops.put_request(rq);
		rq->rq_flags &= ~RQ_RQF_ELVPRIV;
	}
	__atomic_store_n(&rq->state, RQ_STATE_IDLE, __ATOMIC_RELEASE);
	pool_put(sqd, rq);
	sqd->deferred_refs++;
	sq_deferred_mark(sqd);
}

sq_inline bool sq_end_locked(struct rq_request *rq, rq_status_t status, unsigned bytes)
{
	if (__atomic_load_n(&rq->state, __ATOMIC_ACQUIRE) != RQ_STATE_IN_FLIGHT)
		return false; /* never ends twice */
	trace_complete(rq, status, bytes < rq->bytes ? bytes : rq->bytes, 0);
	if (likely(bytes && bytes >= rq->bytes && rq->bio && !rq_priv(rq)->end_io)) {
		sq_end_whole(rq, status);
		return false;
	}
	if (sq_update_request(rq, status, bytes))
		return true;
	sq_finish_request(rq, status);
	return false;
}

RQ_EXPORT bool rq_sq_end_request_locked(struct rq_request *rq, rq_status_t status, unsigned bytes)
{
	return sq_end_locked(rq, status, bytes);
}

RQ_EXPORT bool rq_sq_end_request(struct rq_request *rq, rq_status_t status, unsigned bytes)
{
	struct rq_queue *q = rq->q;
	bool more;

	rq_sq_lock(q);
	more = rq_sq_end_request_locked(rq, status, bytes);
	rq_sq_unlock(q); /* ends the bios, then drops the request's reference */
	return more;
}

/* rq_sq_end_request_all_locked() of a shape the fast way below does not take. */
static __attribute__((noinline)) void sq_end_all_slow(struct rq_request *rq, rq_status_t status)
{
	sq_end_locked(rq, status, rq->bytes ? rq->bytes : 1);
}

/*
 * May the whole end of @rq take the fast way: a successful end of an
 * in-flight request with bios, each of them advanced inline
 * (sq_bio_advance_all() without bio_advance()), no flush sequencing, no
 * driver tag, untraced, while request_fn runs (counts in the queue), no
 * scheduler hook to call (sqd->plain_hooks, tested first) and nobody
 * waiting for the pool.  Lock held.
 */
sq_inline bool sq_end_plain(struct rq_sq_data *sqd, const struct rq_request *rq)
{
	if (!sqd->plain_hooks ||
	    __atomic_load_n(&rq->state, __ATOMIC_ACQUIRE) != RQ_STATE_IN_FLIGHT || !rq->bio ||
	    rq_priv(rq)->end_io || obs_rq_on(rq) || rq->tag >= 0 || !sqd->request_fn_active ||
	    sqd->wait_head)
		return false;
	for (const struct rq_bio *bio = rq->bio; bio; bio = bio->next)
		if (!sq_bio_advance_inline_ok(bio))
			return false;
	return true;
}

/*
 * sq_end_whole() for the shape sq_end_plain() admits, with no call on the
 * way (so no registers saved): bios advanced and queued, in-flight and
 * completion counts, back to the pool, its usage reference deferred, and
 * the bios-to-end mark set if this is the first end since the lock was
 * taken (sq_deferred_mark()).
 */
RQ_EXPORT void rq_sq_end_request_all_locked(struct rq_request *rq, rq_status_t status)
{
	struct rq_sq_data *sqd = sqd_of(rq->q);

	if (unlikely(!sq_end_plain(sqd, rq) || status != RQ_STS_OK)) {
		sq_end_all_slow(rq, status);
		return;
	}
	sq_bios_queue(sqd, rq, RQ_STS_OK, true);
	sqd->in_flight[rq_request_is_sync(rq)]--;
	sqd->stat_batch[SQ_ST_COMPLETED]++;
	rq->rq_flags &= ~RQ_RQF_ELVPRIV;
	__atomic_store_n(&rq->state, RQ_STATE_IDLE, __ATOMIC_RELEASE);
	assert(sq_lock_is_held(sqd));
	sqd->allocated--;
	rq->rq_next = sqd->free_list;
	sqd->free_list = rq;
	sqd->deferred_refs++;
	/* the run's first end marks the bios to end (a tail call: no frame here) */
	if (unlikely(!atomic_load_explicit(&sqd->deferred_pending, memory_order_relaxed)))
		sq_deferred_mark_slow(sqd);
}

RQ_EXPORT void rq_sq_end_request_all(struct rq_request *rq, rq_status_t status)
{
	rq_sq_end_request(rq, status, rq->bytes ? rq->bytes : 1);
}

RQ_EXPORT void rq_sq_requeue_request(struct rq_request *rq)
{
	struct rq_queue *q = rq->q;
	struct rq_sq_data *sqd = sqd_of(q);

	if (__atomic_load_n(&rq->state, __ATOMIC_ACQUIRE) != RQ_STATE_IN_FLIGHT)
		return;
	__atomic_store_n(&rq->state, RQ_STATE_IDLE, __ATOMIC_RELEASE);
	sqd->in_flight[rq_request_is_sync(rq)]--;
	if (rq->tag >= 0)
		rq_sq_end_tag(q, rq);
	if ((rq->rq_flags & RQ_RQF_ELVPRIV) && sqd->eops.deactivate)
		sqd->eops.deactivate(q, rq);
	rq->rq_flags &= ~RQ_RQF_STARTED;
	stat_inc(q, ST_REQUEUES);
	trace_requeue(rq);
	/* to the front of the dispatch queue, ahead of sorted work */
	rq_list_add(&rq->queuelist, &sqd->queue_head);
}

/* A flush sequence is DONE: end the request like any other.  Lock held. */
static void sq_flush_seq_done(struct rq_request *rq, rq_status_t status)
{
	struct rq_sq_data *sqd = sqd_of(rq->q);

	rq_priv(rq)->end_io = NULL;
	rq->rq_flags &= ~RQ_RQF_FLUSH_SEQ;
	sqd->in_flight[rq_request_is_sync(rq)]++; /* sq_finish_request counts it out */
	sq_finish_request(rq, status);
}

/* Flush sequencing hands a step to the driver through the dispatch queue. */
static void sq_flush_queue_rq(struct rq_request *rq, bool at_head)
{
	struct rq_sq_data *sqd = sqd_of(rq->q);

	rq->rq_flags &= ~RQ_RQF_STARTED;
	if (at_head)
		rq_list_add(&rq->queuelist, &sqd->queue_head);
	else
		rq_list_add_tail(&rq->queuelist, &sqd->queue_head);
	sq_run_queue_locked(rq->q);
}

/* ------------------------------------------------------------- tags */

RQ_EXPORT int rq_sq_init_tags(struct rq_queue *q, unsigned depth)
{
	struct rq_sq_data *sqd = sqd_of(q);

	if (!depth || depth > SQ_MAX_TAGS)
		return -EINVAL;
	if (sqd->tag_index)
		return rq_sq_resize_tags(q, depth);
	sqd->tag_index = mem_calloc(depth, sizeof(*sqd->tag_index));
	if (!sqd->tag_index)
		return -ENOMEM;
	sqd->tag_depth = sqd->tag_max = depth;
	sqd->tags_busy = 0;
	return 0;
}

RQ_EXPORT int rq_sq_resize_tags(struct rq_queue *q, unsigned depth)
{
	struct rq_sq_data *sqd = sqd_of(q);

	if (!depth || depth > SQ_MAX_TAGS || !sqd->tag_index)
		return -EINVAL;
	for (unsigned t = depth; t < sqd->tag_max; t++)
		if (sqd->tag_index[t])
			return -EBUSY;
	if (depth > sqd->tag_max) {
		struct rq_request **idx = mem_realloc(sqd->tag_index, depth * sizeof(*idx));

		if (!idx)
			return -ENOMEM;
		memset(idx + sqd->tag_max, 0, (depth - sqd->tag_max) * sizeof(*idx));
		sqd->tag_index = idx;
		sqd->tag_max = depth;
	}
	sqd->tag_depth = depth;
	return 0;
}

RQ_EXPORT int rq_sq_start_tag(struct rq_queue *q, struct rq_request *rq)
{
	struct rq_sq_data *sqd = sqd_of(q);

	if (!sqd->tag_index || rq->tag >= 0)
		return 1;
	for (unsigned t = 0; t < sqd->tag_depth; t++) {
		if (!sqd->tag_index[t]) {
			sqd->tag_index[t] = rq;
			sqd->tags_busy++;
			rq_sq_start_request(rq);
			rq->tag = (int32_t)t;
			return 0;
		}
	}
	return 1;
}

RQ_EXPORT void rq_sq_end_tag(struct rq_queue *q, struct rq_request *rq)
{
	struct rq_sq_data *sqd = sqd_of(q);

	if (rq->tag < 0 || !sqd->tag_index || (unsigned)rq->tag >= sqd->tag_max ||
	    sqd->tag_index[rq->tag] != rq)
		return;
	sqd->tag_index[rq->tag] = NULL;
	sqd->tags_busy--;
	rq->tag = -1;
}

RQ_EXPORT struct rq_request *rq_sq_find_tag(struct rq_queue *q, unsigned tag)
{
	struct rq_sq_data *sqd = sqd_of(q);

	if (!sqd->tag_index || tag >= sqd->tag_max)
		return NULL;
	return sqd->tag_index[tag];
}

/* --------------------------------------------------------- submission */

/* Merge @bio into queued work (one-hit, hash, scheduler front).  Lock held. */
static bool sq_attempt_merge(struct rq_queue *q, struct rq_bio *bio, unsigned nr_segs)
{
	struct rq_request *freed = NULL;

	sq_hash_catch_up(q, sqd_of(q));
	if (!rq_sched_try_merge(q, bio, nr_segs, &freed))
		return false;
	if (freed)
		request_free(freed);
	return true;
}

/*
 * How many requests of @q to take ahead for @plug: as many as this plug
 * made so far or the last one made (so a plug of a few bios leaves few
 * idle, and a first plug takes 1, 1, 2, 4...), at most what the plug may
 * still take before it flushes (plug_add()) and SQ_PLUG_BATCH; one for a
 * large bio, whose request flushes the plug soon (BLK_PLUG_FLUSH_SIZE).
 */
static unsigned sq_plug_batch(struct rq_queue *q, const struct rq_plug *plug,
			      const struct rq_bio *bio)
{
	const struct sq_plug_cache *c = &tls_sq_cache;
	unsigned max = plug->multiple_queues ? 2u * RQ_PLUG_MAX_REQUESTS : RQ_PLUG_MAX_REQUESTS;
	unsigned want = max - (plug->count < max ? plug->count : 0);

	if (bio->iter.size >= SQ_PLUG_BIG_BIO)
		return 1;
	if (want > SQ_PLUG_BATCH)
		want = SQ_PLUG_BATCH;
	if (c->q != q)
		return 1;
	if (want > c->used && want > c->last)
		want = c->used > c->last ? c->used : c->last;
	return want ? want : 1;
}

/*
 * A plugged bio that nothing queued could take (sq_merge_candidates()) gets
 * a request the thread took ahead, and goes on @plug: no lock for it.
 * Counted in @sb, the thread's statistics of @q.  False: the locked way.
 */
static bool sq_submit_plugged(struct rq_queue *q, struct rq_sw_ctx *ctx, struct rq_plug *plug,
			      struct rq_bio *bio, unsigned nr_segs, struct rq_stats_block *sb)
{
	struct rq_sq_data *sqd = sqd_of(q);
	struct rq_request *rq;

	if (!sq_cache_allowed(sqd) || sq_merge_candidates(sqd))
		return false;
	rq = sq_cache_get(q, plug, bio);
	if (!rq)
		return false;
	sq_rq_init(q, ctx, rq, bio, nr_segs);
	stat_block_add(sb, ST_REQUESTS, 1);
	trace_getrq(q, rq, bio);
	rq->rq_flags |= RQ_RQF_ELVPRIV;
	plug_add(plug, rq);
	return true;
}

/*
 * A request for @bio, the queue lock held: a plugged one from the thread's
 * cache if it may, else from the pool (which may sleep).
 */
static struct rq_request *sq_get_request(struct rq_queue *q, struct rq_plug *plug,
					 struct rq_bio *bio, bool flush_seq)
{
	struct rq_sq_data *sqd = sqd_of(q);
	struct rq_request *rq;

	if (plug && !flush_seq && sq_cache_allowed(sqd)) {
		rq = sq_cache_pop(q);
		if (!rq && !tls_sq_cache.head) {
			sq_cache_fill_locked(q, sq_plug_batch(q, plug, bio));
			rq = sq_cache_pop(q);
		}
		if (rq)
			return rq;
	}
	return pool_get(q, bio);
}

/*
 * The locked way of sq_submit(): a merge into queued work, else a request
 * from the pool (which may sleep) to the plug, the flush machinery or the
 * scheduler.  Out of line: the plugged way is the common one.
 */
static __attribute__((noinline)) void sq_submit_locked(struct rq_queue *q, struct rq_sw_ctx *ctx,
						       struct rq_plug *plug, struct rq_bio *bio,
						       unsigned nr_segs, struct rq_stats_block *sb)
{
	struct rq_sq_data *sqd = sqd_of(q);
	bool flush_seq = (bio->opf & (RQ_BIO_PREFLUSH | RQ_BIO_FUA)) || bio->op == RQ_OP_FLUSH;
	struct rq_request *rq;

	sq_lock(sqd);
	/* only requests in the scheduler take bio merges (sq_merge_candidates()) */
	if (!flush_seq && sqd->nr_sorted && sq_attempt_merge(q, bio, nr_segs)) {
		sq_unlock(sqd);
		queue_exit(q);
		return;
	}
	rq = sq_get_request(q, plug, bio, flush_seq);
	if (!rq) {
		sq_unlock(sqd);
		queue_exit(q);
		bio_end_with(bio, atomic_load(&q->dying) ? RQ_STS_IOERR : RQ_STS_AGAIN);
		return;
	}
	sq_rq_init(q, ctx, rq, bio, nr_segs);
	stat_block_add(sb, ST_REQUESTS, 1);
	trace_getrq(q, rq, bio);
	if (flush_seq) {
		if (!flush_insert(rq)) /* data only: straight to the driver */
			sq_flush_queue_rq(rq, false);
		sq_unlock_end(q);
		return;
	}
	rq->rq_flags |= RQ_RQF_ELVPRIV;
	if (sqd->eops.set_request && sqd->eops.set_request(q, rq, bio))
		rq->rq_flags &= ~RQ_RQF_ELVPRIV;
	if (plug) {
		sq_unlock(sqd);
		plug_add(plug, rq);
		return;
	}
	sq_insert_sorted(q, rq);
	sq_run_queue_locked(q);
	sq_unlock_end(q);
}

/*
 * sq_submit()'s commonest case, with no call: a plug that takes the request
 * inline (plug_add_fits()), a bio that is no flush step and does not touch
 * the plug's last request, nothing in the scheduler (no bio merge could
 * succeed), a scheduler that lets plugged requests come from the thread's
 * cache and a request of @q in it, the thread's counters, io context and
 * plug's clock reading at hand, nothing observed (so the getrq trace point
 * has nothing to do).  All of it is checked before anything changes; then
 * sq_submit_slow()'s steps in its order: count ST_BIOS, the cached request,
 * its set-up, count ST_REQUESTS, RQF_ELVPRIV, the plug.  Return: false,
 * having done nothing, if sq_submit_slow() must take @bio.
 */
static inline __attribute__((always_inline)) bool
sq_submit_plugged_fast(struct rq_queue *q, struct rq_sw_ctx *ctx, struct rq_plug *plug,
		       struct rq_bio *bio, unsigned nr_segs)
{
	struct rq_sq_data *sqd = sqd_of(q);
	const struct sq_plug_cache *c = &tls_sq_cache;
	struct rq_io_context *ioc;
	struct rq_stats_block *sb;
	struct rq_request *rq;
	uint64_t now;

	/*
	 * First what a scheduler with set_request (cfq) fails: no cache.  A
	 * cache of @q implies sq_cache_allowed(): it is filled only then, and
	 * only while the plug holds a request of @q (and so a usage reference,
	 * which keeps a scheduler switch out) until the unplug returns it.
	 */
	if (!c->head || c->q != q ||
	    (bio->opf & (RQ_BIO_PREFLUSH | RQ_BIO_FUA)) || bio->op == RQ_OP_FLUSH ||
	    sq_merge_candidates(sqd) ||
	    !plug_add_fits(plug, q, NULL) || /* the front end's requests have no hctx */
	    atomic_load_explicit(&obs_active, memory_order_relaxed))
		return false;
	assert(sq_cache_allowed(sqd));
	ioc = bio->ioc ? bio->ioc : ioc_current_cached();
	now = tls_plug_now;
	if (!ioc || !now)
		return false;
	if (READ_ONCE(q->nomerges) != 2 && bio_mergeable(bio) &&
	    plug_merge_candidate(plug, q, bio))
		return false;
	sb = stats_block_cached(q);
	if (unlikely(!sb))
		return false;
	stat_block_add(sb, ST_BIOS, 1);
	rq = sq_cache_take();
	sq_rq_init_at(q, ctx, rq, bio, nr_segs, ioc, now);
	stat_block_add(sb, ST_REQUESTS, 1);
	rq->rq_flags |= RQ_RQF_ELVPRIV;
	plug_append(plug, rq);
	return true;
}

/*
 * sq_submit()'s general way: a plug merge, a request the thread took
 * ahead, else the locked way.  Out of line, so that the fast case needs
 * no stack frame.
 */
static __attribute__((noinline)) void sq_submit_slow(struct rq_queue *q, struct rq_sw_ctx *ctx,
						     struct rq_bio *bio, unsigned nr_segs)
{
	struct rq_plug *plug = plug_current();
	bool flush_seq = (bio->opf & (RQ_BIO_PREFLUSH | RQ_BIO_FUA)) || bio->op == RQ_OP_FLUSH;
	struct rq_stats_block *sb = stats_block(q);

	stat_block_add(sb, ST_BIOS, 1);
	if (!flush_seq && READ_ONCE(q->nomerges) != 2 && bio_mergeable(bio) &&
	    plug_try_merge(plug, q, bio, nr_segs)) {
		queue_exit(q);
		return;
	}
	if (plug && !flush_seq && sq_submit_plugged(q, ctx, plug, bio, nr_segs, sb))
		return;
	sq_submit_locked(q, ctx, plug, bio, nr_segs, sb);
}

/* Submit one piece that fits the limits; consumes one usage reference. */
static void sq_submit(struct rq_queue *q, struct rq_sw_ctx *ctx, struct rq_bio *bio,
		      unsigned nr_segs)
{
	struct rq_plug *plug = plug_current();

	if (plug && sq_submit_plugged_fast(q, ctx, plug, bio, nr_segs))
		return;
	sq_submit_slow(q, ctx, bio, nr_segs);
}

/*
 * Insert merges of one unplug.  At insert a request can only join a request
 * in the scheduler that ends where it starts (the one-hit cache, the hash).
 * When the scheduler was empty as the unplug began, those are the unplug's
 * own requests inserted before it, or requests that took some of them in
 * and so end where one of them ended.  The unplug notes each end sector in
 * a 4096-bit filter (false positives only: about 1 insert in 270 of full
 * plugs of random I/O; an attempt costs more than its lookup since it
 * hashes the requests inserted before it, sq_hash_catch_up()); a request
 * whose start is not in it is inserted without the attempt, which would
 * find nothing.  A plug's
 * requests thus still join each other (A, B, A+1: A+1 joins A), and with
 * requests queued before the unplug every insert tries as before.
 */
#define SQ_ENDS_BITS 12

struct sq_ends {
	uint64_t w[(1u << SQ_ENDS_BITS) / 64];
};

static inline uint64_t *sq_ends_word(struct sq_ends *e, uint64_t sector, uint64_t *bit)
{
	unsigned b = (unsigned)((sector * 0x9E3779B97F4A7C15ull) >> (64 - SQ_ENDS_BITS));

	*bit = 1ull << (b & 63u);
	return &e->w[b >> 6];
}

/* Insert @rq, trying insert merges only if @e (NULL: always) says one may succeed. */
static void sq_insert_filtered(struct rq_queue *q, struct rq_request *rq, struct sq_ends *e)
{
	uint64_t *w, bit, end;

	if (!e) {
		sq_insert_merge(q, rq);
		return;
	}
	end = rq_request_end_sector(rq); /* before a merge empties it */
	w = sq_ends_word(e, rq->sector, &bit);
	if (*w & bit)
		sq_insert_merge(q, rq);
	else
		sq_insert_sorted(q, rq);
	w = sq_ends_word(e, end, &bit);
	*w |= bit;
}

/*
 * An unplug's lock hold begins: the requests taken ahead and not used go
 * back; the insert filter @ends (emptied) if the scheduler is empty, else
 * NULL (every insert tries to merge).
 */
static struct sq_ends *sq_unplug_begin(struct rq_queue *q, struct sq_ends *ends)
{
	struct rq_sq_data *sqd = sqd_of(q);

	sq_lock(sqd);
	sq_cache_return_locked(q);
	if (sqd->nr_sorted)
		return NULL;
	sqd->nr_hash_later = 0; /* nothing in the scheduler: every slot is stale */
	memset(ends, 0, sizeof(*ends));
	return ends;
}

/* ... and ends: request_fn runs, the lock drops, what ended under it ends. */
static void sq_unplug_end(struct rq_queue *q)
{
	sq_run_queue_locked(q);
	sq_unlock_end(q);
}

/*
 * Unplug (fe->plug_issue_chain): the plugged requests of one queue, the
 * chain @first as the plug held it, into the scheduler in order, then run.
 */
static void sq_plug_issue_chain(struct rq_request *first)
{
	struct rq_queue *q = first->q;
	struct sq_ends ends, *e = sq_unplug_begin(q, &ends);

	while (first) {
		struct rq_request *rq = first;

		first = rq->rq_next; /* before an insert merge frees @rq */
		rq->rq_next = NULL;
		sq_insert_filtered(q, rq, e);
	}
	sq_unplug_end(q);
}

/* As sq_plug_issue_chain(), the run as a list (fe->plug_issue: a traced queue's). */
static void sq_plug_issue(struct rq_list_node *list, struct rq_request *first)
{
	struct rq_queue *q = first->q;
	struct sq_ends ends, *e = sq_unplug_begin(q, &ends);

	while (!rq_list_empty(list)) {
		struct rq_request *rq = rq_list_first_rq(list);

		rq_list_del_init(&rq->queuelist);
		sq_insert_filtered(q, rq, e);
	}
	sq_unplug_end(q);
}

/* ----------------------------------------------------------- switching */

static void sq_eops_copy(struct rq_elevator_sq_ops *dst, const struct rq_elevator_sq_ops *src)
{
	size_t n = src->size < sizeof(*dst) ? src->size : sizeof(*dst);

	memset(dst, 0, sizeof(*dst));
	memcpy(dst, src, n);
	dst->size = sizeof(*dst);
}

/* The merge decisions of single-queue scheduler @o, for lib/merge.c. */
static void sq_merge_hooks(struct elv_merge_hooks *h, const struct rq_elevator_sq_ops *o)
{
	h->latter = o->latter;
	h->former = o->former;
	h->allow_bio = o->allow_merge;
	h->allow_rq = o->allow_rq_merge;
	h->front_lookup = o->merge;
	h->requests_merged = sq_requests_merged;
	h->request_grew = o->merged;
}

/*
 * Switch scheduler: the new one is built first; with the queue drained
 * (frozen) and the lock held the old one is replaced; a failure leaves it
 * running.  Caller holds q->sysfs_lock.
 */
static int sq_elevator_switch(struct rq_queue *q, const char *name)
{
	struct rq_sq_data *sqd = sqd_of(q);
	const struct rq_elevator_type *e = elevator_get(name, RQ_ELV_F_SQ);
	struct rq_elevator_queue *eq, *old = q->elevator;
	struct rq_elevator_sq_ops new_ops, old_ops = sqd->eops;
	void *data = NULL;
	int ret = 0;

	if (!e)
		return -EINVAL;
	if (old && old->type == e) {
		elevator_put(e);
		return 0;
	}
	if (!e->sq_ops || e->sq_ops->abi_version != RQ_ELV_SQ_ABI ||
	    e->sq_ops->size < offsetof(struct rq_elevator_sq_ops, dispatch) + sizeof(void *) ||
	    !e->sq_ops->add_request || !e->sq_ops->dispatch) {
		elevator_put(e);
		return -EINVAL;
	}
	eq = elv_queue_alloc(1);
	if (!eq) {
		elevator_put(e);
		return -ENOMEM;
	}
	eq->type = e;
	sq_eops_copy(&new_ops, e->sq_ops);
	sq_merge_hooks(&eq->hooks, &new_ops);

	rq_queue_freeze(q);
	sq_lock(sqd);
	if (new_ops.init_queue) {
		/* the old scheduler is idle now; init may look at the queue */
		ret = new_ops.init_queue(q, &data);
		if (ret) {
			sq_unlock(sqd);
			rq_queue_unfreeze(q);
			mem_free(eq, 0);
			elevator_put(e);
			return ret;
		}
	}
	eq->data = data;
	if (old) {
		/* anything left is moved out first (nothing should be: frozen) */
		if (sqd->nr_sorted)
			old_ops.dispatch(q, true);
		if (old_ops.exit_queue)
			old_ops.exit_queue(q, old->data);
	}
	q->elevator = eq;
	sqd->eops = new_ops;
	sqd->plain_hooks = !new_ops.activate && !new_ops.completed && !new_ops.put_request;
	sqd->fetch = !sqd->plain_hooks ? sq_fetch_slow :
		     new_ops.dispatch_one ? sq_fetch_one : sq_fetch_plain;
	sq_unlock(sqd);
	rq_queue_unfreeze(q);
	if (old) {
		elevator_put(old->type);
		mem_free(old, 0);
	}
	return 0;
}

/* ------------------------------------------------------- create, destroy */

#define RQ_SQ_CONFIG_SIZE_0_1 (offsetof(struct rq_sq_config, queuedata) + sizeof(void *))

/*
 * Check @cfg (already copied in); the pool size to start with, or 0 if
 * @cfg is not acceptable.
 */
static unsigned sq_config_check(const struct rq_sq_config *cfg, struct rq_queue_limits *lim)
{
	unsigned nr;

	if (!cfg->ops || cfg->ops->abi_version != RQ_SQ_OPS_ABI ||
	    cfg->ops->size < offsetof(struct rq_sq_ops, request_fn) + sizeof(void *) ||
	    !cfg->ops->request_fn || cfg->cmd_size > (1u << 20))
		return 0;
	nr = cfg->nr_requests ? cfg->nr_requests : SQ_DEFAULT_NR_REQUESTS;
	if (nr < SQ_MIN_NR_REQUESTS || nr > 65536)
		return 0;
	if (!cfg->limits)
		rq_queue_limits_default(lim);
	else if (limits_copy_in(lim, cfg->limits))
		return 0;
	return rq_queue_limits_validate(lim) ? 0 : nr;
}

/*
 * The library's queue lock: adaptive (glibc spins a while before it
 * sleeps), as the kernel's queue_lock is a spinlock: holds are short, and
 * a submitter that finds it taken mostly gets it without a futex sleep
 * and wake-up.
 */
static void sq_lock_init(pthread_mutex_t *lock)
{
	pthread_mutexattr_t attr;

	pthread_mutexattr_init(&attr);
	pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
	pthread_mutex_init(lock, &attr);
	pthread_mutexattr_destroy(&attr);
}

/* The front end's own part of a new queue: driver ops, lock, pool. */
static struct rq_sq_data *sq_data_alloc(const struct rq_sq_config *cfg, unsigned nr)
{
	struct rq_sq_data *sqd = mem_alloc_aligned(RQ_CACHELINE, sizeof(*sqd));

	if (!sqd)
		return NULL;
	memset(sqd, 0, sizeof(*sqd));
	memcpy(&sqd->ops, cfg->ops, cfg->ops->size < sizeof(sqd->ops) ? cfg->ops->size :
									  sizeof(sqd->ops));
	sqd->ops.size = sizeof(sqd->ops);
	sq_lock_init(&sqd->own_lock);
	sqd->lock = cfg->queue_lock ? cfg->queue_lock : &sqd->own_lock;
	rq_list_init(&sqd->queue_head);
	sqd->fetch = sq_fetch_slow;
	sqd->deferred_tail = &sqd->deferred;
	sqd->rq_size = request_size(cfg->cmd_size);
	sqd->nr_requests = nr;
	return sqd;
}

static void sq_queue_free(struct rq_queue *q);

RQ_EXPORT int rq_sq_alloc_queue(const struct rq_sq_config *cfg, struct rq_queue **out)
{
	struct queue_common_config cc = { .fe = &sq_fe_ops, .numa_node = -1 };
	struct rq_queue_limits lim;
	struct rq_sq_config c;
	struct rq_sq_data *sqd;
	struct rq_queue *q = NULL;
	const char *sched;
	unsigned nr;
	int ret;

	if (!cfg || !out || rq_copy_sized_in(&c, sizeof(c), cfg, RQ_SQ_CONFIG_SIZE_0_1))
		return -EINVAL;
	cfg = &c;
	nr = sq_config_check(cfg, &lim);
	if (!nr)
		return -EINVAL;
	sched = cfg->scheduler;
	if (!sched)
		sched = rq_sched_exists("cfq") ? "cfq" : "noop";
	sqd = sq_data_alloc(cfg, nr);
	cc.limits = &lim;
	cc.capacity = cfg->capacity;
	cc.queuedata = cfg->queuedata;
	cc.timeout_ms = cfg->timeout_ms;
	cc.nr_requests = nr;
	cc.nr_cpus = (unsigned)get_nprocs_conf();
	cc.rq_size = sqd ? sqd->rq_size : 0;
	if (sqd)
		q = queue_alloc_common(&cc);
	if (!q) {
		mem_free_aligned(sqd, sizeof(*sqd), RQ_CACHELINE);
		return -ENOMEM;
	}
	q->fe_data = sqd;
	ret = pool_grow(q, nr);
	if (!ret)
		ret = flush_queue_init(q, NULL);
	if (!ret)
		ret = queue_elevator_switch(q, sched);
	if (ret) {
		sq_queue_free(q);
		return ret;
	}
	service_register(q);
	*out = q;
	return 0;
}

/* Free everything; the queue is empty. */
static void sq_queue_free(struct rq_queue *q)
{
	struct rq_sq_data *sqd = sqd_of(q);

	if (q->elevator) {
		if (sqd->eops.exit_queue)
			sqd->eops.exit_queue(q, q->elevator->data);
		elevator_put(q->elevator->type);
		mem_free(q->elevator, 0);
		q->elevator = NULL;
	}
	for (unsigned i = 0; i < sqd->pool_cap; i++)
		if (sqd->ops.exit_request)
			sqd->ops.exit_request(q, sqd->slots[i]);
	for (unsigned i = 0; i < sqd->nr_chunks; i++)
		rq_free_node(sqd->chunks[i], 0);
	mem_free(sqd->chunks, 0);
	mem_free(sqd->slots, 0);
	mem_free(sqd->timeout_gen, 0);
	mem_free(sqd->timeout_deadline, 0);
	mem_free(sqd->tag_index, 0);
	flush_queue_exit(q);
	pthread_mutex_destroy(&sqd->own_lock);
	mem_free_aligned(sqd, sizeof(*sqd), RQ_CACHELINE);
	queue_free_common(q);
}

/*
 * Teardown of a live queue, once per look until it is drained: requests
 * not started end with IOERR, pool waiters give up; requests the driver
 * holds are waited for.
 */
static void sq_teardown(struct rq_queue *q)
{
	struct rq_sq_data *sqd = sqd_of(q);

	sq_lock(sqd);
	pool_abort_waiters(sqd);
	if (q->elevator && sqd->nr_sorted)
		sqd->eops.dispatch(q, true);
	while (!rq_list_empty(&sqd->queue_head)) {
		struct rq_request *rq = rq_list_first_rq(&sqd->queue_head);

		rq_list_del_init(&rq->queuelist);
		sqd->in_flight[rq_request_is_sync(rq)]++;
		__atomic_store_n(&rq->state, RQ_STATE_IN_FLIGHT, __ATOMIC_RELEASE);
		rq_sq_end_request_all_locked(rq, RQ_STS_IOERR);
	}
	sq_unlock_end(q);
}

/* rq_queue_destroy(), after the core marked @q dying: fail, drain, free. */
static void sq_queue_destroy(struct rq_queue *q)
{
	if (tls_sq_cache.q == q)
		memset(&tls_sq_cache, 0, sizeof(tls_sq_cache)); /* the plug failed them */
	queue_wait_drained(q, sq_teardown);
	service_unregister(q);
	sq_queue_free(q);
}

/* ------------------------------------------------------ the core's view */

static void sq_run_queues(struct rq_queue *q, bool async)
{
	if (async)
		rq_sq_delay_queue(q, 0);
	else
		rq_sq_run_queue(q);
}

/* request_fn runs under the queue lock and checks quiesce_depth there. */
static void sq_quiesce_sync(struct rq_queue *q)
{
	rq_sq_lock(q);
	rq_sq_unlock(q);
}

/* No hardware queues: one merge state, no mailboxes. */
static struct rq_hw_ctx *sq_bio_hctx(struct rq_queue *q, const struct rq_bio *bio)
{
	return NULL;
}

static void sq_complete(struct rq_request *rq)
{
	rq_sq_end_request_all(rq, rq_priv(rq)->complete_status);
}

/* The flush request takes no tag here; a step goes through the dispatch queue. */
static void sq_flush_prepare(struct rq_request *flush_rq, struct rq_request *first)
{
}

static void sq_flush_step_end(struct rq_request *rq)
{
}

/* Data steps ahead of sorted work, the flush request behind what is queued. */
static void sq_flush_issue(struct rq_request *rq, bool flush)
{
	sq_flush_queue_rq(rq, !flush);
}

static const struct rq_fe_ops sq_fe_ops = {
	.name = "sq",
	.elv_features = RQ_ELV_F_SQ,
	.submit = sq_submit,
	.plug_issue = sq_plug_issue,
	.plug_issue_chain = sq_plug_issue_chain,
	.release_request = sq_release_request,
	.plug_fail = sq_plug_fail,
	.bio_hctx = sq_bio_hctx,
	.complete = sq_complete,
	.run_queues = sq_run_queues,
	.quiesce_sync = sq_quiesce_sync,
	.destroy = sq_queue_destroy,
	.service = sq_service,
	.elevator_switch = sq_elevator_switch,
	.set_nr_requests = sq_set_nr_requests,
	.flush_prepare = sq_flush_prepare,
	.flush_step_end = sq_flush_step_end,
	.flush_issue = sq_flush_issue,
	.flush_seq_done = sq_flush_seq_done,
};
