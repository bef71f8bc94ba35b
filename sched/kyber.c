/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kyber: a token-based scheduler for fast multi-queue devices.
 *
 * Requests are sorted into four scheduling domains (reads, writes, discards,
 * everything else).  Each domain may have only so many requests with the
 * driver at once (its token depth, counted per hardware queue), and the
 * dispatcher serves the domains round robin, a batch of each at a time.
 * Requests wait in per-CPU lists (one per software queue and domain) and
 * are pulled per hardware queue only when their domain is served, so
 * submitters on different CPUs never share a lock.
 *
 * Completion latencies of reads and writes go into histograms whose buckets
 * are quarters of the domain's latency target.  At the end of each window
 * of the library clock the percentiles decide the depths: reads missing
 * their target cut the write and discard depths, a domain whose device
 * latency is too high shrinks its own depth, and healthy windows raise the
 * depths back step by step.  doc/sched-kyber.md states the rules.
 *
 * What may run at the same time (per queue):
 *
 *   operation                          concurrent with       protection
 *   insert_requests, bio_merge         everything            the per-CPU list's spinlock
 *   dispatch_request, has_work         all but themselves    one dispatcher per hctx (core);
 *                                                            per-hctx dispatch lists are its own
 *   completed_request                  everything            per-hctx histogram counters
 *                                                            (relaxed load/store); one window
 *                                                            closer at a time (atomic flag)
 *   finish_request, requeue_request    everything            atomic token counters; inside a
 *                                                            completion batch, the thread's
 *   completion_batch_begin/end         everything            own counts (kyber_batch), then
 *                                                            the atomic counters at its end
 *   limit_depth, prepare_request       everything            nothing shared is written
 *   attribute show/store               everything            atomics
 */
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librequest/elevator.h>

#include "lib/internal/compiler.h"
#include "lib/internal/alloc.h"

/* ------------------------------------------------------------- tunables */

/* Latency targets (nanoseconds of the library clock): iosched/read_lat_nsec, write_lat_nsec. */
#define KYBER_READ_LAT_NSEC (2ull * 1000 * 1000)   /* 2 ms */
#define KYBER_WRITE_LAT_NSEC (10ull * 1000 * 1000) /* 10 ms */

/* Length of one latency window (nanoseconds of the library clock). */
#define KYBER_WINDOW_NSEC (100ull * 1000 * 1000)   /* 100 ms */

/* Fewer samples than this in a window: no verdict, they carry over. */
#define KYBER_MIN_SAMPLES 8u

/* A healthy window raises a depth by its default / KYBER_RAISE_DIVISOR (requests). */
#define KYBER_RAISE_DIVISOR 4u

/* Async requests may use this percentage of the scheduler tags. */
#define KYBER_ASYNC_PERCENT 75u

/* Histogram buckets: bucket b holds latencies in [b/4, (b+1)/4) x target,
 * the last one everything from 7/4 x target on. */
#define KYBER_BUCKETS 8u
#define KYBER_BUCKETS_PER_TARGET 4u /* buckets 0..3 meet the target */

/* ------------------------------------------------------ data structures */

/*
 * Slots of the per-op table of struct kyber_queue_data, indexed by the op's
 * low bits: a bio's op is below RQ_OP_LAST (the core refuses others), so
 * masking it is exact and costs less than a bound check.
 */
#define KYBER_OP_SLOTS 8u
_Static_assert(RQ_OP_LAST <= KYBER_OP_SLOTS && !(KYBER_OP_SLOTS & (KYBER_OP_SLOTS - 1)),
	       "kyber: every op has a slot");

enum kyber_domain {
	KYBER_READ,
	KYBER_WRITE,
	KYBER_DISCARD,
	KYBER_OTHER,
	KYBER_NR_DOMAINS,
};

/* Domains with a latency target (the first two). */
#define KYBER_NR_TARGETS 2u

/* The two latencies measured per request. */
enum kyber_lat_kind {
	KYBER_LAT_TOTAL, /* made -> completed: includes time queued here */
	KYBER_LAT_IO,    /* issued -> completed: the device's share */
	KYBER_NR_LAT_KINDS,
};

/* Token depth (most requests with the driver) per domain and hctx. */
static const unsigned kyber_default_depth[KYBER_NR_DOMAINS] = { 256, 128, 64, 16 };

/* Requests dispatched from a domain before the next one is served. */
static const unsigned kyber_batch_size[KYBER_NR_DOMAINS] = { 16, 8, 1, 1 };

/**
 * struct kyber_ctx_queue - the requests made on one CPU (software queue),
 * per domain, waiting to be pulled by their hardware queue's dispatcher.
 * @lock: guards @rq_list; taken by submitters of that CPU and, briefly,
 *	by the dispatcher when it pulls.
 * @rq_list: requests by queuelist, oldest first, per domain.
 */
struct kyber_ctx_queue {
	rq_spinlock_t lock;
	struct rq_list_node rq_list[KYBER_NR_DOMAINS];
} __attribute__((aligned(64)));

/**
 * struct kyber_domain_data - one domain's part of the hctx data: what a
 * token of the domain points at (rq->elv_priv[0]), all that the usual
 * completion reads and writes.
 * @lat: a joint histogram of completions (target domains only): cell
 *	[bt][bi] counts those whose total latency fell in bucket bt and
 *	whose device latency fell in bucket bi, so a completion bumps one
 *	counter, and cell [0][0] (both under a quarter of the target, the
 *	usual case on a fast device) is found without a division.  The
 *	counters only grow.  Completers bump them with a plain load and store
 *	(a count lost to two completers racing on one hctx does not matter to
 *	a percentile, and no locked instruction is paid per completion); a
 *	window close reads the two histograms (total, device) off the rows
 *	and columns.
 * @quarter: copy of the queue's lat_quarter of the domain; 0 for a domain
 *	without target, which sends its completions out of line.
 * @window_end: copy of the queue's window_end.  The copies are written
 *	once per window or tunable store, on a line of their own; they follow
 *	the queue's values (window_end is copied after the queue's is raised,
 *	so a stale copy only sends a completion to find the window closed).
 * @khd: the hctx data this is part of.
 * @domain: which domain.
 */
struct kyber_domain_data {
	_Alignas(64) _Atomic uint64_t lat[KYBER_BUCKETS][KYBER_BUCKETS];
	_Alignas(64) _Atomic uint64_t quarter;
	_Atomic uint64_t window_end;
	struct kyber_hctx_data *khd;
	unsigned domain;
};

/**
 * struct kyber_hctx_data - per hardware queue state.
 * @kqd: the queue's data (saves the completion and dispatch paths a walk
 *	through the queue and its elevator).
 * @nr_ctx: software queues of the hctx (entries of @kcqs).
 * @nr_words: 64-bit words of each pending map.
 * @kcqs: the per-CPU lists.
 * @pending: per domain, a bit per software queue that may hold requests of
 *	the domain (set by inserters, taken by the dispatcher).
 * @rqs: per domain, requests pulled from the CPUs, oldest first; the
 *	dispatcher's own.
 * @cur_domain: domain being served; the dispatcher's own.
 * @batching: requests dispatched from @cur_domain in this turn.
 * @dispatched: per domain, tokens ever taken; written by the dispatcher only
 *	(once per run of requests it hands out).
 * @returned: per domain, tokens ever given back (completers).  The tokens
 *	in use are @dispatched - @returned, so taking one needs no atomic
 *	read-modify-write.
 * @waiting: bit per domain whose dispatch found no token; the next token
 *	returned re-runs the hctx.
 * @dom: per domain, what its tokens point at (latency histogram, copies).
 * @lat_seen: per target domain, @dom[t].lat as the last window close read
 *	it (window closer only).
 */
struct kyber_hctx_data {
	struct kyber_queue_data *kqd;
	unsigned nr_ctx;
	unsigned nr_words;
	struct kyber_ctx_queue *kcqs;
	_Atomic uint64_t *pending[KYBER_NR_DOMAINS];

	struct rq_list_node rqs[KYBER_NR_DOMAINS];
	unsigned cur_domain;
	unsigned batching;

	_Alignas(64) atomic_uint dispatched[KYBER_NR_DOMAINS];
	_Alignas(64) atomic_uint returned[KYBER_NR_DOMAINS];
	atomic_uint waiting;

	struct kyber_domain_data dom[KYBER_NR_DOMAINS];
	uint64_t lat_seen[KYBER_NR_TARGETS][KYBER_BUCKETS][KYBER_BUCKETS];
};

/**
 * struct kyber_queue_data - per queue state (the iosched attributes' data).
 * @depth: per domain, the token depth in force (changed at window ends).
 *	Read by every take (once per run of requests), so it shares the first
 *	line with @merge_word's usual slots (read per bio on one hw queue):
 *	with it on a line of its own, that line was evicted by the requests
 *	between two plugs and missed once per take (doc/sched-kyber.md).
 * @async_depth: scheduler tags an async request may use (75% of them).
 * @lat_target: read and write latency targets (ns), tunables.
 * @lat_quarter: a quarter of each target (at least 1): the bucket width.
 * @window_end: library clock time at which the current window closes.
 * @window_busy: set while one thread closes a window.
 * @acc: samples gathered into the open verdict (carried over while too few);
 *	touched only by the thread closing a window.
 * @merge_word: per op, with one hardware queue whose CPU lists fit one
 *	word of pending bits (nearly always), that word for the op's domain;
 *	else &kyber_maybe_pending.  bio_merge's usual answer on one hardware
 *	queue, "nothing queued to merge with", is then one load away from the
 *	queue's data.  Set by init_hctx, reset by exit_hctx (the queue's hw
 *	queues are fixed).
 * @q: the queue.
 */
struct kyber_queue_data {
	atomic_uint depth[KYBER_NR_DOMAINS];
	atomic_uint async_depth;
	const _Atomic uint64_t *merge_word[KYBER_OP_SLOTS];
	struct rq_queue *q;
	_Atomic uint64_t lat_target[KYBER_NR_TARGETS];
	_Atomic uint64_t lat_quarter[KYBER_NR_TARGETS];
	_Atomic uint64_t window_end;
	atomic_bool window_busy;
	uint64_t acc[KYBER_NR_TARGETS][KYBER_NR_LAT_KINDS][KYBER_BUCKETS];
} rq_cacheline_aligned; /* read on every bio: no line shared with other data */
_Static_assert(offsetof(struct kyber_queue_data, depth) == 0 &&
	       offsetof(struct kyber_queue_data, merge_word[RQ_OP_WRITE + 1]) <= RQ_CACHELINE,
	       "kyber: depth and the read and write merge words share the first line");

/*
 * struct kyber_batch - the completion batch open on this thread, if any
 * (completion_batch_begin/end): tokens given back by requests of @khd's
 * hctx meanwhile are counted here, per domain, and returned together at
 * the end (kyber_batch_end()).
 * @khd: the batch's hctx data; NULL while no batch is open.
 * @tokens: per domain, tokens given back inside the batch, not yet
 *	returned.
 * @bits: domains whose tokens went back to @khd during the batch (the end
 *	wakes a dispatch waiting for any of them).
 */
struct kyber_batch {
	struct kyber_hctx_data *khd;
	unsigned tokens[KYBER_NR_DOMAINS];
	unsigned bits;
};

static __thread struct kyber_batch kyber_batch __attribute__((tls_model("initial-exec")));

/* What one window says about a target domain. */
enum kyber_verdict {
	KYBER_V_NONE, /* no samples: nothing to protect */
	KYBER_V_WAIT, /* too few samples: decide nothing yet */
	KYBER_V_GOOD, /* p99 total latency below 3/4 of the target */
	KYBER_V_OK,   /* p99 total latency within the target */
	KYBER_V_MISS, /* p99 total latency above the target */
};

/*
 * rq->elv_priv[0]: while @rq holds a token, the struct kyber_domain_data
 * of the domain and hctx the token and the latency samples go back to;
 * NULL otherwise.  One store per request at dispatch, and the completion
 * path reaches the histogram, the target and the window's end without a
 * lookup.  The core clears it when it makes a request (elv_priv is NULL
 * at prepare_request), so kyber needs no prepare_request hook and a new
 * request pays no indirect call for it.
 */
static inline struct kyber_domain_data *kyber_token(const struct rq_request *rq)
{
	return rq->elv_priv[0];
}

/* -------------------------------------------------------------- helpers */

/* A merge_word that says "look": bio_merge then finds the bio's own list. */
static const _Atomic uint64_t kyber_maybe_pending = ~0ull;

/* 75% of the scheduler tags in force (at least one). */
static void kyber_update_async_depth(struct kyber_queue_data *kqd)
{
	unsigned d = rq_queue_nr_requests(kqd->q) * KYBER_ASYNC_PERCENT / 100;

	atomic_store_explicit(&kqd->async_depth, d ? d : 1, memory_order_relaxed);
}

/* Domain of each op below RQ_OP_WRITE_ZEROES + 1; every other op is KYBER_OTHER. */
static const uint8_t kyber_op_domain[] = {
	[RQ_OP_READ] = KYBER_READ,
	[RQ_OP_WRITE] = KYBER_WRITE,
	[RQ_OP_FLUSH] = KYBER_OTHER,
	[RQ_OP_DISCARD] = KYBER_DISCARD,
	[RQ_OP_WRITE_ZEROES] = KYBER_OTHER,
};

/* A load and a compare: it runs for every bio and every completion. */
static inline unsigned kyber_domain_of_op(unsigned op)
{
	return op < sizeof(kyber_op_domain) ? kyber_op_domain[op] : KYBER_OTHER;
}

static inline struct kyber_queue_data *kyber_qd(struct rq_queue *q)
{
	return rq_sched_data(q);
}

static inline struct kyber_hctx_data *kyber_hd(const struct rq_hw_ctx *hctx)
{
	return rq_sched_hctx_data(hctx);
}

/*
 * Set the latency target of target domain @t to @nsec (> 0), and the hctx
 * copies of its quarter (@hctxs: false in init_sched, before there are any).
 */
static void kyber_set_target(struct kyber_queue_data *kqd, unsigned t, uint64_t nsec, bool hctxs)
{
	uint64_t quarter = nsec / KYBER_BUCKETS_PER_TARGET;

	if (!quarter)
		quarter = 1;
	atomic_store_explicit(&kqd->lat_target[t], nsec, memory_order_relaxed);
	atomic_store_explicit(&kqd->lat_quarter[t], quarter, memory_order_relaxed);
	for (unsigned i = 0; hctxs && i < rq_queue_nr_hw_queues(kqd->q); i++) {
		struct kyber_hctx_data *khd = kyber_hd(rq_queue_hctx(kqd->q, i));

		if (khd && khd->kqd == kqd)
			atomic_store_explicit(&khd->dom[t].quarter, quarter, memory_order_relaxed);
	}
}

/* Note that software queue @idx may hold requests of @domain. */
static inline void kyber_mark_pending(struct kyber_hctx_data *khd, unsigned domain, unsigned idx)
{
	_Atomic uint64_t *word = &khd->pending[domain][idx / 64];
	uint64_t bit = 1ull << (idx % 64);

	/* the usual case: already marked, no write to the shared line */
	if (!(atomic_load_explicit(word, memory_order_relaxed) & bit))
		atomic_fetch_or_explicit(word, bit, memory_order_release);
}

/*
 * Move the requests of @domain from every marked CPU list onto the
 * dispatcher's list.  A mark is cleared before its list is emptied, so a
 * request added meanwhile either is taken now or marks the list again.
 * Context: the dispatcher of the hctx.
 */
static void kyber_flush_domain(struct kyber_hctx_data *khd, unsigned domain)
{
	for (unsigned w = 0; w < khd->nr_words; w++) {
		_Atomic uint64_t *word = &khd->pending[domain][w];
		uint64_t bits;

		if (!atomic_load_explicit(word, memory_order_relaxed))
			continue;
		bits = atomic_exchange_explicit(word, 0, memory_order_acquire);
		while (bits) {
			unsigned idx = w * 64 + (unsigned)__builtin_ctzll(bits);
			struct kyber_ctx_queue *kcq = &khd->kcqs[idx];

			bits &= bits - 1;
			rq_spin_lock(&kcq->lock);
			rq_list_splice_tail_init(&kcq->rq_list[domain], &khd->rqs[domain]);
			rq_spin_unlock(&kcq->lock);
		}
	}
}

/* May any CPU list of the hctx hold requests of @domain?  (Lockless hint.) */
static inline bool kyber_cpus_pending(const struct kyber_hctx_data *khd, unsigned domain)
{
	const _Atomic uint64_t *map = khd->pending[domain];

	/* up to 64 CPU lists (nearly always): one word, no loop */
	if (likely(khd->nr_words == 1))
		return atomic_load_explicit(&map[0], memory_order_relaxed) != 0;
	for (unsigned w = 0; w < khd->nr_words; w++)
		if (atomic_load_explicit(&khd->pending[domain][w], memory_order_relaxed))
			return true;
	return false;
}

static bool kyber_domain_pending(const struct kyber_hctx_data *khd, unsigned domain)
{
	return !rq_list_empty(&khd->rqs[domain]) || kyber_cpus_pending(khd, domain);
}

/*
 * Unlink the requests @first .. @last (queuelist nodes, in list order) from
 * their list and append them, in that order, to @to.
 */
static inline void kyber_list_move_tail(struct rq_list_node *first, struct rq_list_node *last,
					struct rq_list_node *to)
{
	first->prev->next = last->next;
	last->next->prev = first->prev;
	first->prev = to->prev;
	to->prev->next = first;
	last->next = to;
	to->prev = last;
}

/*
 * Tokens of @domain free on @khd once @taken have ever been taken: its
 * depth minus those in use, 0 when they are all in use (or a cut depth is
 * below the use).
 */
static inline unsigned kyber_free_tokens(const struct kyber_queue_data *kqd,
					 struct kyber_hctx_data *khd, unsigned domain,
					 unsigned taken)
{
	unsigned depth = atomic_load_explicit(&kqd->depth[domain], memory_order_relaxed);
	unsigned back = atomic_load_explicit(&khd->returned[domain], memory_order_seq_cst);

	return taken - back < depth ? depth - (taken - back) : 0;
}

/*
 * Tokens of @domain free, as kyber_free_tokens(), or 0.  With none free the
 * domain is marked waiting and looked at once more: a token returned
 * between the two looks sees the mark (both sides are sequentially
 * consistent), so the hctx runs again either here or from the completion.
 */
static unsigned kyber_get_tokens(const struct kyber_queue_data *kqd, struct kyber_hctx_data *khd,
				 unsigned domain, unsigned taken)
{
	unsigned n = kyber_free_tokens(kqd, khd, domain, taken);

	if (n)
		return n;
	atomic_fetch_or_explicit(&khd->waiting, 1u << domain, memory_order_seq_cst);
	return kyber_free_tokens(kqd, khd, domain, taken);
}

/*
 * Tokens of the domains in @bits just came back to @khd (their counters
 * raised): re-run @hctx if a dispatch of one of them waits.  The counters
 * are raised before the waiting bits are read, as kyber_get_tokens() sets
 * a bit before it reads the counter again (both sequentially consistent):
 * one side or the other sees the token.
 */
static inline void kyber_wake(struct kyber_hctx_data *khd, struct rq_hw_ctx *hctx, unsigned bits)
{
	if (unlikely(atomic_load_explicit(&khd->waiting, memory_order_seq_cst) & bits) &&
	    (atomic_fetch_and_explicit(&khd->waiting, ~bits, memory_order_seq_cst) & bits))
		rq_mq_run_hw_queue(hctx, false);
}

/*
 * Give back the token @rq holds, if any; re-run the hctx if one waited.
 * It is both finish_request (the request is freed: completed, failed or
 * merged away) and requeue_request (it goes back to be inserted again):
 * the core calls it directly, no wrapper in between.  Inside a completion
 * batch of the request's hctx on this thread the token is only counted;
 * kyber_batch_end() gives the batch's tokens back.
 */
static void kyber_put_token(struct rq_request *rq)
{
	struct kyber_domain_data *kd = kyber_token(rq);
	struct kyber_hctx_data *khd;

	if (!kd)
		return;
	rq->elv_priv[0] = NULL;
	khd = kd->khd;
	if (khd == kyber_batch.khd) {
		kyber_batch.tokens[kd->domain]++;
		return;
	}
	atomic_fetch_add_explicit(&khd->returned[kd->domain], 1, memory_order_seq_cst);
	kyber_wake(khd, rq->hctx, 1u << kd->domain);
}

/* completion_batch_begin: tokens of @hctx's requests wait in kyber_batch. */
static void kyber_batch_begin(struct rq_hw_ctx *hctx)
{
	kyber_batch.khd = kyber_hd(hctx);
}

/*
 * Give the tokens counted in kyber_batch back to @khd, one atomic add per
 * domain that had any, and note those domains in kyber_batch.bits.
 */
static void kyber_batch_return(struct kyber_hctx_data *khd)
{
	unsigned bits = 0;

	for (unsigned d = 0; d < KYBER_NR_DOMAINS; d++) {
		unsigned n = kyber_batch.tokens[d];

		if (!n)
			continue;
		kyber_batch.tokens[d] = 0;
		atomic_fetch_add_explicit(&khd->returned[d], n, memory_order_seq_cst);
		bits |= 1u << d;
	}
	kyber_batch.bits |= bits;
}

/*
 * completion_batch_end: the batch's tokens go back, then one look at the
 * waiting bits for all their domains.
 */
static void kyber_batch_end(struct rq_hw_ctx *hctx)
{
	struct kyber_hctx_data *khd = kyber_batch.khd;
	unsigned bits;

	kyber_batch_return(khd);
	bits = kyber_batch.bits;
	kyber_batch.bits = 0;
	kyber_batch.khd = NULL; /* before the wake: a run it starts is outside */
	if (bits)
		kyber_wake(khd, hctx, bits);
}

/*
 * Move up to @max requests of @domain, oldest first, to the tail of @list,
 * each with a token; return how many.  The dispatcher's list is refilled
 * from the CPU lists whenever it runs dry, and the tokens are counted here
 * and published once, so a run of requests costs one pass over them and
 * one store instead of a token round trip each.  Fewer than @max: the
 * domain had nothing more queued or no token left at that point, exactly
 * where taking them one by one would have stopped.
 * Context: the dispatcher of the hctx.
 */
static unsigned kyber_take(struct kyber_queue_data *kqd, struct kyber_hctx_data *khd,
			   unsigned domain, unsigned max, struct rq_list_node *list)
{
	struct rq_list_node *queued = &khd->rqs[domain];
	void *token = &khd->dom[domain];
	unsigned taken = atomic_load_explicit(&khd->dispatched[domain], memory_order_relaxed);
	unsigned n = 0, tokens = 0;

	while (n < max) {
		struct rq_list_node *first, *last;
		unsigned run, left;

		if (rq_list_empty(queued)) {
			kyber_flush_domain(khd, domain);
			if (rq_list_empty(queued))
				break;
		}
		if (!tokens && !(tokens = kyber_get_tokens(kqd, khd, domain, taken + n)))
			break;
		/*
		 * As many as are queued, wanted and covered by tokens, in one
		 * move: @left counts down what may still go, the walk stops at
		 * 0 or at the list's end.
		 */
		run = left = max - n < tokens ? max - n : tokens;
		first = last = queued->next;
		for (;;) {
			RQ_CONTAINER_OF(last, struct rq_request, queuelist)->elv_priv[0] = token;
			if (!--left)
				break;
			last = last->next;
			if (last == queued) {
				last = queued->prev;
				break;
			}
		}
		run -= left;
		kyber_list_move_tail(first, last, list);
		n += run;
		tokens -= run;
	}
	if (n)
		atomic_store_explicit(&khd->dispatched[domain], taken + n, memory_order_relaxed);
	return n;
}

/*
 * Histogram bucket of latency @lat against a quarter of the target: one
 * division (the buckets are equal quarters), the last bucket open-ended.
 */
static inline unsigned kyber_bucket(uint64_t lat, uint64_t quarter)
{
	uint64_t b = lat / quarter;

	return b < KYBER_BUCKETS - 1 ? (unsigned)b : KYBER_BUCKETS - 1;
}

/* Count one sample: plain load and store, see struct kyber_hctx_data. */
static inline void kyber_count(_Atomic uint64_t *c)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

/*
 * Samples counted in @c since the last window close read it (*@seen, which
 * moves on).  A racing store may have lost counts: never negative.
 * Context: the window closer.
 */
static uint64_t kyber_counted(const _Atomic uint64_t *c, uint64_t *seen)
{
	uint64_t now = atomic_load_explicit(c, memory_order_relaxed);
	uint64_t n = now > *seen ? now - *seen : 0;

	*seen = now;
	return n;
}

/* The bucket below which @pct percent of the @n samples in @hist lie. */
static unsigned kyber_percentile(const uint64_t *hist, uint64_t n, unsigned pct)
{
	uint64_t need = (n * pct + 99) / 100, seen = 0;

	for (unsigned b = 0; b < KYBER_BUCKETS; b++) {
		seen += hist[b];
		if (seen >= need)
			return b;
	}
	return KYBER_BUCKETS - 1;
}

/* depth + default / 4, at most the default. */
static unsigned kyber_raise(unsigned depth, unsigned domain)
{
	unsigned def = kyber_default_depth[domain];
	unsigned step = def / KYBER_RAISE_DIVISOR;

	depth += step ? step : 1;
	return depth < def ? depth : def;
}

/* Scale @depth down for a p90 device latency in bucket @b (4..7): x 4/(b+1). */
static unsigned kyber_scale_down(unsigned depth, unsigned b)
{
	unsigned d = depth * KYBER_BUCKETS_PER_TARGET / (b + 1);

	return d ? d : 1;
}

static unsigned kyber_halve(unsigned depth)
{
	return depth > 1 ? depth / 2 : 1;
}

/*
 * Close a window at @now: gather every hctx's counters, judge the read and
 * write domains, and set the depths by the rules of doc/sched-kyber.md.
 * Context: the one thread that set window_busy.
 */
static void kyber_close_window(struct kyber_queue_data *kqd)
{
	struct rq_queue *q = kqd->q;
	enum kyber_verdict v[KYBER_NR_TARGETS];
	unsigned p90_io[KYBER_NR_TARGETS];
	unsigned depth[KYBER_NR_DOMAINS];
	bool read_healthy, write_healthy;

	for (unsigned i = 0; i < rq_queue_nr_hw_queues(q); i++) {
		struct kyber_hctx_data *khd = kyber_hd(rq_queue_hctx(q, i));

		if (!khd)
			continue;
		/* rows: total latency; columns: device latency (struct kyber_hctx_data) */
		for (unsigned t = 0; t < KYBER_NR_TARGETS; t++)
			for (unsigned bt = 0; bt < KYBER_BUCKETS; bt++)
				for (unsigned bi = 0; bi < KYBER_BUCKETS; bi++) {
					uint64_t n = kyber_counted(&khd->dom[t].lat[bt][bi],
								   &khd->lat_seen[t][bt][bi]);

					kqd->acc[t][KYBER_LAT_TOTAL][bt] += n;
					kqd->acc[t][KYBER_LAT_IO][bi] += n;
				}
	}

	for (unsigned t = 0; t < KYBER_NR_TARGETS; t++) {
		const uint64_t *total = kqd->acc[t][KYBER_LAT_TOTAL];
		uint64_t n = 0;
		unsigned p99;

		p90_io[t] = 0;
		for (unsigned b = 0; b < KYBER_BUCKETS; b++)
			n += total[b];
		if (!n) {
			v[t] = KYBER_V_NONE;
			continue;
		}
		if (n < KYBER_MIN_SAMPLES) {
			v[t] = KYBER_V_WAIT;
			continue;
		}
		p99 = kyber_percentile(total, n, 99);
		p90_io[t] = kyber_percentile(kqd->acc[t][KYBER_LAT_IO], n, 90);
		v[t] = p99 >= KYBER_BUCKETS_PER_TARGET ? KYBER_V_MISS :
		       p99 == KYBER_BUCKETS_PER_TARGET - 1 ? KYBER_V_OK : KYBER_V_GOOD;
		memset(kqd->acc[t], 0, sizeof(kqd->acc[t]));
	}

	for (unsigned d = 0; d < KYBER_NR_DOMAINS; d++)
		depth[d] = atomic_load_explicit(&kqd->depth[d], memory_order_relaxed);
	read_healthy = v[KYBER_READ] == KYBER_V_NONE || v[KYBER_READ] == KYBER_V_GOOD;
	write_healthy = v[KYBER_WRITE] == KYBER_V_NONE || v[KYBER_WRITE] == KYBER_V_GOOD;

	/* reads: their own device latency sets their depth */
	if (v[KYBER_READ] > KYBER_V_WAIT && p90_io[KYBER_READ] >= KYBER_BUCKETS_PER_TARGET)
		depth[KYBER_READ] = kyber_scale_down(depth[KYBER_READ], p90_io[KYBER_READ]);
	else if (read_healthy)
		depth[KYBER_READ] = kyber_raise(depth[KYBER_READ], KYBER_READ);

	/* writes: cut for late reads, shrunk by their own device latency */
	if (v[KYBER_READ] == KYBER_V_MISS)
		depth[KYBER_WRITE] = kyber_halve(depth[KYBER_WRITE]);
	else if (v[KYBER_WRITE] > KYBER_V_WAIT && p90_io[KYBER_WRITE] >= KYBER_BUCKETS_PER_TARGET)
		depth[KYBER_WRITE] = kyber_scale_down(depth[KYBER_WRITE], p90_io[KYBER_WRITE]);
	else if (read_healthy && v[KYBER_WRITE] != KYBER_V_WAIT)
		depth[KYBER_WRITE] = kyber_raise(depth[KYBER_WRITE], KYBER_WRITE);

	/* discards: cut when reads or writes are late */
	if (v[KYBER_READ] == KYBER_V_MISS || v[KYBER_WRITE] == KYBER_V_MISS)
		depth[KYBER_DISCARD] = kyber_halve(depth[KYBER_DISCARD]);
	else if (read_healthy && write_healthy)
		depth[KYBER_DISCARD] = kyber_raise(depth[KYBER_DISCARD], KYBER_DISCARD);

	/* other: no target, never throttled */
	for (unsigned d = 0; d < KYBER_NR_DOMAINS; d++)
		atomic_store_explicit(&kqd->depth[d], depth[d], memory_order_relaxed);
}

/* Copy the window's new end @end into every hctx's domain data (the closer). */
static void kyber_copy_window_end(struct kyber_queue_data *kqd, uint64_t end)
{
	for (unsigned i = 0; i < rq_queue_nr_hw_queues(kqd->q); i++) {
		struct kyber_hctx_data *khd = kyber_hd(rq_queue_hctx(kqd->q, i));

		for (unsigned d = 0; khd && d < KYBER_NR_DOMAINS; d++)
			atomic_store_explicit(&khd->dom[d].window_end, end, memory_order_relaxed);
	}
}

/*
 * Close the window if @now is past its end and nobody else is closing it.
 * Once per window: kept out of line so that the completion path it is
 * called from stays small.
 */
static __attribute__((noinline)) void kyber_maybe_close_window(struct kyber_queue_data *kqd,
							       uint64_t now)
{
	bool raised = false;

	if (atomic_exchange_explicit(&kqd->window_busy, true, memory_order_acquire))
		return;
	if (now >= atomic_load_explicit(&kqd->window_end, memory_order_relaxed)) {
		kyber_close_window(kqd);
		atomic_store_explicit(&kqd->window_end, now + KYBER_WINDOW_NSEC,
				      memory_order_relaxed);
		/* still the only closer: the copies only ever move forward */
		kyber_copy_window_end(kqd, now + KYBER_WINDOW_NSEC);
		raised = true;
	}
	atomic_store_explicit(&kqd->window_busy, false, memory_order_release);
	/* a raised depth may let waiting requests go */
	if (raised)
		for (unsigned i = 0; i < rq_queue_nr_hw_queues(kqd->q); i++) {
			struct rq_hw_ctx *hctx = rq_queue_hctx(kqd->q, i);
			struct kyber_hctx_data *khd = kyber_hd(hctx);

			if (khd && atomic_load_explicit(&khd->waiting, memory_order_relaxed))
				rq_mq_run_hw_queue(hctx, true);
		}
}

/* ------------------------------------------------------------------ ops */

static int kyber_init_sched(struct rq_queue *q, void **data)
{
	struct kyber_queue_data *kqd = mem_alloc_aligned(RQ_CACHELINE, sizeof(*kqd));

	if (!kqd)
		return -ENOMEM;
	memset(kqd, 0, sizeof(*kqd));
	kqd->q = q;
	for (unsigned op = 0; op < KYBER_OP_SLOTS; op++)
		kqd->merge_word[op] = &kyber_maybe_pending;
	for (unsigned d = 0; d < KYBER_NR_DOMAINS; d++)
		atomic_init(&kqd->depth[d], kyber_default_depth[d]);
	kyber_set_target(kqd, KYBER_READ, KYBER_READ_LAT_NSEC, false);
	kyber_set_target(kqd, KYBER_WRITE, KYBER_WRITE_LAT_NSEC, false);
	atomic_init(&kqd->window_end, rq_clock_ns() + KYBER_WINDOW_NSEC);
	atomic_init(&kqd->window_busy, false);
	kyber_update_async_depth(kqd);
	*data = kqd;
	return 0;
}

static void kyber_exit_sched(struct rq_queue *q, void *data)
{
	mem_free_aligned(data, sizeof(struct kyber_queue_data), RQ_CACHELINE);
}

/*
 * Point the queue's merge_word table at @khd's one pending word per
 * domain (@on: the queue's only hw queue, one word of marks), or clear it.
 */
static void kyber_set_merge_words(struct kyber_hctx_data *khd, bool on)
{
	for (unsigned op = 0; op < RQ_OP_LAST; op++)
		khd->kqd->merge_word[op] = on ? &khd->pending[kyber_domain_of_op(op)][0] :
						&kyber_maybe_pending;
}

static void kyber_free_hctx_data(struct kyber_hctx_data *khd)
{
	if (!khd)
		return;
	if (khd->pending[0])
		mem_free_node((void *)khd->pending[0]);
	mem_free_node(khd->kcqs);
	mem_free_node(khd);
}

static int kyber_init_hctx(struct rq_hw_ctx *hctx, unsigned idx)
{
	struct kyber_hctx_data *khd;
	unsigned nr_ctx = rq_hctx_nr_ctx(hctx);
	size_t kcq_bytes;

	if (!nr_ctx)
		nr_ctx = 1;
	/* zeroed, cache-line aligned, on the hw queue's node */
	khd = mem_alloc_node(sizeof(*khd), rq_hctx_numa_node(hctx));
	if (!khd)
		return -ENOMEM;
	memset(khd, 0, sizeof(*khd));
	/* init_sched has run: the queue's data is the new scheduler's */
	khd->kqd = kyber_qd(rq_hctx_queue(hctx));
	khd->nr_ctx = nr_ctx;
	khd->nr_words = (nr_ctx + 63) / 64;
	kcq_bytes = nr_ctx * sizeof(*khd->kcqs);
	khd->kcqs = mem_alloc_node(kcq_bytes, rq_hctx_numa_node(hctx));
	if (!khd->kcqs)
		goto fail;
	/*
	 * The pending maps of every domain in one zeroed block of whole cache
	 * lines of their own, on the node: inserters and the dispatcher of
	 * this hctx write them, and no other hctx's maps share their lines.
	 */
	khd->pending[0] = mem_alloc_node(KYBER_NR_DOMAINS * khd->nr_words * sizeof(uint64_t),
					 rq_hctx_numa_node(hctx));
	if (!khd->pending[0])
		goto fail;
	for (unsigned d = 0; d < KYBER_NR_DOMAINS; d++) {
		khd->pending[d] = khd->pending[0] + d * khd->nr_words;
		for (unsigned w = 0; w < khd->nr_words; w++)
			atomic_init(&khd->pending[d][w], 0);
		rq_list_init(&khd->rqs[d]);
		atomic_init(&khd->dispatched[d], 0);
		atomic_init(&khd->returned[d], 0);
	}
	for (unsigned i = 0; i < nr_ctx; i++) {
		rq_spin_init(&khd->kcqs[i].lock);
		for (unsigned d = 0; d < KYBER_NR_DOMAINS; d++)
			rq_list_init(&khd->kcqs[i].rq_list[d]);
	}
	atomic_init(&khd->waiting, 0);
	for (unsigned d = 0; d < KYBER_NR_DOMAINS; d++) {
		struct kyber_domain_data *kd = &khd->dom[d];

		kd->khd = khd;
		kd->domain = d;
		atomic_init(&kd->quarter, d < KYBER_NR_TARGETS ?
			    atomic_load_explicit(&khd->kqd->lat_quarter[d], memory_order_relaxed) : 0);
		atomic_init(&kd->window_end,
			    atomic_load_explicit(&khd->kqd->window_end, memory_order_relaxed));
	}
	khd->cur_domain = KYBER_READ;
	kyber_set_merge_words(khd, rq_queue_nr_hw_queues(rq_hctx_queue(hctx)) == 1 &&
					   khd->nr_words == 1);
	rq_sched_set_hctx_data(hctx, khd);
	return 0;
fail:
	kyber_free_hctx_data(khd);
	return -ENOMEM;
}

static void kyber_exit_hctx(struct rq_hw_ctx *hctx, unsigned idx)
{
	struct kyber_hctx_data *khd = kyber_hd(hctx);

	if (khd)
		kyber_set_merge_words(khd, false);
	kyber_free_hctx_data(khd);
	rq_sched_set_hctx_data(hctx, NULL);
}

/* nr_requests changed (queue frozen): recompute the async limit. */
static void kyber_depth_updated(struct rq_hw_ctx *hctx)
{
	kyber_update_async_depth(kyber_qd(rq_hctx_queue(hctx)));
}

/*
 * Async requests (writes without RQ_BIO_SYNC, discards, write-zeroes) get
 * at most 75% of the scheduler tags, keeping the rest for sync I/O.
 */
static void kyber_limit_depth(struct rq_alloc_data *data)
{
	if (data->op == RQ_OP_READ || (data->opf & RQ_BIO_SYNC))
		return;
	/* the bitmap limits per word: each word's share of async_depth */
	data->shallow_depth = rq_sched_shallow_depth(
		data->hctx, atomic_load_explicit(&kyber_qd(data->q)->async_depth,
						 memory_order_relaxed));
}

/* Merge @bio into one of the newest requests on this CPU's list of @domain. */
static __attribute__((noinline)) bool kyber_cpu_list_merge(struct rq_queue *q, struct rq_bio *bio,
							   unsigned nr_segs, unsigned domain)
{
	unsigned idx = 0;
	struct rq_hw_ctx *hctx = rq_sched_bio_hctx(q, bio, &idx);
	struct kyber_hctx_data *khd = kyber_hd(hctx);
	struct kyber_ctx_queue *kcq;
	bool merged;

	if (!khd)
		return false;
	if (idx >= khd->nr_ctx)
		idx = 0;
	/*
	 * Not marked: the list is empty, or being emptied by the dispatcher;
	 * either way nothing worth a lock to merge with.
	 */
	if (!(atomic_load_explicit(&khd->pending[domain][idx / 64], memory_order_relaxed) &
	      (1ull << (idx % 64))))
		return false;
	kcq = &khd->kcqs[idx];
	rq_spin_lock(&kcq->lock);
	merged = rq_sched_list_merge(q, &kcq->rq_list[domain], bio, nr_segs);
	rq_spin_unlock(&kcq->lock);
	return merged;
}

/*
 * Merge @bio into one of the newest requests on this CPU's list of its
 * domain.  With one hw queue every bio maps to it, whatever the CPU: when
 * none of its CPU lists of the domain is marked there is nothing to merge
 * with on any CPU, which one load of the word merge_word names for the op
 * tells before this CPU's software queue is looked up (out of line, as
 * that lookup is what costs).  With several, the look-up comes first.
 */
static bool kyber_bio_merge(struct rq_queue *q, struct rq_bio *bio, unsigned nr_segs)
{
	/* one hw queue: its one word of the domain's marks, via the queue's data */
	if (rq_queue_nr_hw_queues(q) == 1 &&
	    !atomic_load_explicit(kyber_qd(q)->merge_word[bio->op & (KYBER_OP_SLOTS - 1)],
				  memory_order_relaxed))
		return false;
	return kyber_cpu_list_merge(q, bio, nr_segs, kyber_domain_of_op(bio->op));
}

/* Index in the hctx's CPU lists of the software queue @rq was made on. */
static inline unsigned kyber_ctx_index(const struct kyber_hctx_data *khd,
				       const struct rq_request *rq)
{
	unsigned idx = rq_sched_ctx_index(rq);

	return idx < khd->nr_ctx ? idx : 0;
}

/*
 * Append each request to the list of its CPU and domain.  A plug's requests
 * mostly share a CPU and an op: each run of such neighbours is moved with
 * one splice under one lock hold.  At the head (requeues), each goes before
 * the ones inserted before it, one at a time.
 */
static void kyber_insert_requests(struct rq_hw_ctx *hctx, struct rq_list_node *list,
				  unsigned flags)
{
	struct kyber_hctx_data *khd = kyber_hd(hctx);
	struct kyber_ctx_queue *locked = NULL;

	while (!rq_list_empty(list)) {
		struct rq_list_node *first = list->next, *last = first;
		struct rq_request *rq = RQ_CONTAINER_OF(first, struct rq_request, queuelist);
		unsigned idx = kyber_ctx_index(khd, rq);
		unsigned domain = kyber_domain_of_op(rq->op);
		struct kyber_ctx_queue *kcq = &khd->kcqs[idx];

		if (kcq != locked) {
			if (locked)
				rq_spin_unlock(&locked->lock);
			rq_spin_lock(&kcq->lock);
			locked = kcq;
		}
		if (flags & RQ_INSERT_AT_HEAD) {
			rq_list_del_init(first);
			rq_list_add(first, &kcq->rq_list[domain]);
		} else {
			/* the run: followers made on the same CPU with the same op */
			const int32_t cpu = rq->cpu;
			const uint8_t op = rq->op;
			struct rq_list_node *next;

			while ((next = last->next) != list) {
				const struct rq_request *nrq =
					RQ_CONTAINER_OF(next, struct rq_request, queuelist);

				if (nrq->cpu != cpu || nrq->op != op)
					break;
				last = next;
			}
			kyber_list_move_tail(first, last, &kcq->rq_list[domain]);
		}
		kyber_mark_pending(khd, domain, idx);
	}
	if (locked)
		rq_spin_unlock(&locked->lock);
}

static bool kyber_has_work(struct rq_hw_ctx *hctx);

/* May a domain other than @domain have requests queued?  (Lockless hint.) */
static inline bool kyber_others_pending(const struct kyber_hctx_data *khd, unsigned domain)
{
	for (unsigned d = 0; d < KYBER_NR_DOMAINS; d++)
		if (d != domain && kyber_domain_pending(khd, d))
			return true;
	return false;
}

/*
 * The batch count of the domain served after @got more of its requests
 * went out, its batches following each other (no other domain had any):
 * a batch that reached @size is followed by a new one of the same domain.
 */
static inline unsigned kyber_batching_after(unsigned batching, unsigned got, unsigned size)
{
	unsigned total = batching + got;

	return total <= size ? total : (total - size - 1) % size + 1;
}

/*
 * Up to @max requests for @hctx onto the tail of @list, in the order @max
 * kyber_dispatch_request() calls would give them (see there), a run of the
 * current domain at a time.
 */
static unsigned kyber_dispatch_requests(struct rq_hw_ctx *hctx, struct rq_list_node *list,
					unsigned max)
{
	struct kyber_hctx_data *khd = kyber_hd(hctx);
	struct kyber_queue_data *kqd = khd->kqd;
	unsigned n = 0;

	/*
	 * A dispatch inside this thread's completion batch of the hctx (a
	 * bio's end_io submitting): the batch's tokens so far count, as they
	 * would have one by one.  Whoever waits is run by the batch's end.
	 */
	if (unlikely(kyber_batch.khd == khd))
		kyber_batch_return(khd);
	while (n < max) {
		unsigned domain = khd->cur_domain, want, got = 0;

		/*
		 * No other domain has anything queued (the usual case): turn
		 * after turn would come back to this one, a batch after the
		 * other, so one take serves them all; short of @max (nothing
		 * more queued, or no token), the steps below decide as if one
		 * request at a time had gone out.  (Requests of other domains
		 * queued meanwhile count as queued after this dispatch.)
		 */
		if (!kyber_others_pending(khd, domain)) {
			want = max - n;
			got = kyber_take(kqd, khd, domain, want, list);
			khd->batching = kyber_batching_after(khd->batching, got,
							     kyber_batch_size[domain]);
			n += got;
			if (got == want)
				break;
			/*
			 * Nothing queued anywhere (the usual way a run ends): the
			 * steps below would take nothing more and stop at the
			 * has_work test; stop here, without the second take.
			 */
			if (!kyber_has_work(hctx))
				break;
			got = 0;
		}
		/* the current domain goes on with its batch */
		if (khd->batching < kyber_batch_size[domain]) {
			want = kyber_batch_size[domain] - khd->batching;
			if (want > max - n)
				want = max - n;
			got = kyber_take(kqd, khd, domain, want, list);
			khd->batching += got;
			n += got;
			if (got == want)
				continue;
		}
		/*
		 * Nothing queued anywhere: the kernel's core asks has_work before
		 * each dispatch_request and does not call it, so the batch in
		 * progress (cur_domain, batching) carries over to the next burst.
		 */
		if (!kyber_has_work(hctx))
			break;
		/*
		 * Its batch is done or it has no more to give: the next ones in
		 * turn.  Those with nothing queued anywhere (most of them, most
		 * of the time) are passed over on a lockless look.
		 */
		got = 0;
		for (unsigned i = 0; i < KYBER_NR_DOMAINS; i++) {
			domain = (domain + 1) % KYBER_NR_DOMAINS;
			if (!kyber_domain_pending(khd, domain))
				continue;
			want = kyber_batch_size[domain] < max - n ? kyber_batch_size[domain] : max - n;
			got = kyber_take(kqd, khd, domain, want, list);
			if (got)
				break;
		}
		khd->cur_domain = domain;
		khd->batching = got;
		n += got;
		if (!got)
			break;
	}
	return n;
}

/*
 * Serve the current domain until its batch is done, then the others round
 * robin; a domain with nothing queued or no token left is passed over.
 * The next request in that order, or NULL: kyber_dispatch_requests() of one.
 */
static struct rq_request *kyber_dispatch_request(struct rq_hw_ctx *hctx)
{
	struct rq_list_node list;
	struct rq_request *rq;

	rq_list_init(&list);
	if (!kyber_dispatch_requests(hctx, &list, 1))
		return NULL;
	rq = rq_list_first_rq(&list);
	rq_list_del_init(&rq->queuelist);
	return rq;
}

static bool kyber_has_work(struct rq_hw_ctx *hctx)
{
	struct kyber_hctx_data *khd = kyber_hd(hctx);

	for (unsigned d = 0; d < KYBER_NR_DOMAINS; d++)
		if (kyber_domain_pending(khd, d))
			return true;
	return false;
}

/* Reads and writes are their own target domains: the op is the domain. */
_Static_assert((int)RQ_OP_READ == (int)KYBER_READ && (int)RQ_OP_WRITE == (int)KYBER_WRITE &&
	       KYBER_NR_TARGETS == 2, "kyber: target domains are the ops");

/*
 * Count one completion in @cell of @kd's histogram; close the window if
 * @now is past its end (@kd's copy of it: see struct kyber_domain_data).
 */
static inline void kyber_sample(struct kyber_domain_data *kd, _Atomic uint64_t *cell, uint64_t now)
{
	kyber_count(cell);
	if (unlikely(now >= atomic_load_explicit(&kd->window_end, memory_order_relaxed)))
		kyber_maybe_close_window(kd->khd->kqd, now);
}

/*
 * kyber_completed_request() for the other cases, @kd the domain data of
 * the token or, for a request kyber did not dispatch, of its op on its
 * hctx: a domain without target counts nothing; else a latency that
 * reached a quarter of the target, or a clock behind one of its times (an
 * unsigned difference wrapped): a latency below zero counts as zero.  A
 * request never issued (issue time 0) has no device latency and counts
 * nothing.  Out of line and called last, so that the usual case saves no
 * register across a call.
 */
static __attribute__((noinline)) void kyber_sample_late(struct rq_request *rq,
							struct kyber_domain_data *kd, uint64_t now)
{
	uint64_t quarter = atomic_load_explicit(&kd->quarter, memory_order_relaxed);
	uint64_t total, io;

	if (kd->domain >= KYBER_NR_TARGETS || !rq->io_start_time_ns)
		return;
	total = now > rq->start_time_ns ? now - rq->start_time_ns : 0;
	io = now > rq->io_start_time_ns ? now - rq->io_start_time_ns : 0;
	kyber_sample(kd, &kd->lat[kyber_bucket(total, quarter)][kyber_bucket(io, quarter)], now);
}

/* A completion without a token: only a read or a write is counted. */
static __attribute__((noinline)) void kyber_sample_untokened(struct rq_request *rq, uint64_t now)
{
	struct kyber_hctx_data *khd = kyber_hd(rq->hctx);

	if (rq->op < KYBER_NR_TARGETS && khd)
		kyber_sample_late(rq, &khd->dom[kyber_domain_of_op(rq->op)], now);
}

/*
 * Count the request's latencies: one counter of its domain's joint
 * histogram (see struct kyber_domain_data); maybe close the window.  The
 * token is the domain's data on its hctx, whose copies of the target's
 * quarter and the window's end are all the usual case reads.  Both
 * latencies under a quarter of the target (the usual case) is cell
 * [0][0], found without a division; the unsigned differences send a
 * clock behind the request's times to kyber_sample_late(), and a request
 * never issued (issue time 0) and a domain without target (quarter 0)
 * go there too.
 */
static void kyber_completed_request(struct rq_request *rq, uint64_t now)
{
	struct kyber_domain_data *kd = kyber_token(rq);
	uint64_t quarter, io;

	if (unlikely(!kd)) {
		kyber_sample_untokened(rq, now);
		return;
	}
	quarter = atomic_load_explicit(&kd->quarter, memory_order_relaxed);
	io = rq->io_start_time_ns;
	if (unlikely(now - rq->start_time_ns >= quarter || now - io >= quarter || !io)) {
		kyber_sample_late(rq, kd, now);
		return;
	}
	kyber_sample(kd, &kd->lat[0][0], now);
}

/* ----------------------------------------------------------- attributes */

static int kyber_print(char *buf, size_t len, uint64_t v)
{
	int n = snprintf(buf, len, "%llu\n", (unsigned long long)v);

	return n < 0 || (size_t)n >= len ? -ENOSPC : n;
}

/* Parse a positive decimal u64 with an optional trailing newline. */
static int kyber_parse_nsec(const char *buf, uint64_t *out)
{
	uint64_t v = 0;
	const char *p = buf;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned digit = (unsigned)(*p - '0');

		if (v > (UINT64_MAX - digit) / 10)
			return -EINVAL;
		v = v * 10 + digit;
	}
	if (*p == '\n')
		p++;
	if (*p || !v)
		return -EINVAL;
	*out = v;
	return 0;
}

static int kyber_lat_show(void *data, char *buf, size_t len, unsigned t)
{
	struct kyber_queue_data *kqd = data;

	return kyber_print(buf, len, atomic_load(&kqd->lat_target[t]));
}

static int kyber_lat_store(void *data, const char *buf, unsigned t)
{
	struct kyber_queue_data *kqd = data;
	uint64_t v;

	if (kyber_parse_nsec(buf, &v))
		return -EINVAL;
	kyber_set_target(kqd, t, v, true);
	return 0;
}

static int kyber_read_lat_show(void *data, char *buf, size_t len)
{
	return kyber_lat_show(data, buf, len, KYBER_READ);
}

static int kyber_read_lat_store(void *data, const char *buf)
{
	return kyber_lat_store(data, buf, KYBER_READ);
}

static int kyber_write_lat_show(void *data, char *buf, size_t len)
{
	return kyber_lat_show(data, buf, len, KYBER_WRITE);
}

static int kyber_write_lat_store(void *data, const char *buf)
{
	return kyber_lat_store(data, buf, KYBER_WRITE);
}

static int kyber_depth_show(void *data, char *buf, size_t len, unsigned d)
{
	struct kyber_queue_data *kqd = data;

	return kyber_print(buf, len, atomic_load(&kqd->depth[d]));
}

static int kyber_read_depth_show(void *data, char *buf, size_t len)
{
	return kyber_depth_show(data, buf, len, KYBER_READ);
}

static int kyber_write_depth_show(void *data, char *buf, size_t len)
{
	return kyber_depth_show(data, buf, len, KYBER_WRITE);
}

static int kyber_discard_depth_show(void *data, char *buf, size_t len)
{
	return kyber_depth_show(data, buf, len, KYBER_DISCARD);
}

static int kyber_other_depth_show(void *data, char *buf, size_t len)
{
	return kyber_depth_show(data, buf, len, KYBER_OTHER);
}

static const struct rq_elv_attr kyber_attrs[] = {
	{ "read_lat_nsec", kyber_read_lat_show, kyber_read_lat_store },
	{ "write_lat_nsec", kyber_write_lat_show, kyber_write_lat_store },
	/* read-only: the token depths in force */
	{ "read_depth", kyber_read_depth_show, NULL },
	{ "write_depth", kyber_write_depth_show, NULL },
	{ "discard_depth", kyber_discard_depth_show, NULL },
	{ "other_depth", kyber_other_depth_show, NULL },
	{ NULL, NULL, NULL },
};

/* ----------------------------------------------------------------- type */

const struct rq_elevator_type rq_kyber_type = {
	RQ_ELV_TYPE_INIT,
	.name = "kyber",
	.features = RQ_ELV_F_MQ,
	.ops = {
		.init_sched = kyber_init_sched,
		.exit_sched = kyber_exit_sched,
		.init_hctx = kyber_init_hctx,
		.exit_hctx = kyber_exit_hctx,
		.depth_updated = kyber_depth_updated,
		.limit_depth = kyber_limit_depth,
		.bio_merge = kyber_bio_merge,
		.insert_requests = kyber_insert_requests,
		.dispatch_request = kyber_dispatch_request,
		.has_work = kyber_has_work,
		.completed_request = kyber_completed_request,
		.finish_request = kyber_put_token,
		.requeue_request = kyber_put_token,
	},
	.attrs = kyber_attrs,
	.dispatch_requests = kyber_dispatch_requests,
	.completion_batch_begin = kyber_batch_begin,
	.completion_batch_end = kyber_batch_end,
};
