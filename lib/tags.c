/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Scalable bitmap tags: sbitmap, sbitmap_queue and the per-hctx tag maps.
 *
 * A bitmap of depth bits is cut into words of 1 << shift bits, each word on
 * its own cache line.  Every CPU starts its search at its own hint, so CPUs
 * that allocate at the same time mostly touch different words.  A bit is
 * taken with an atomic fetch-or (or a compare-and-swap for a batch) and
 * freed with an atomic and-not: no locks on the fast paths.
 *
 * Sleeping for a bit (sbq_wait_get) uses SBQ_WAIT_QUEUES wait states, each a
 * mutex + condition variable.  A sleeper registers in one of them (ws_active
 * counts sleepers across all); a put checks ws_active with one load and does
 * nothing more while nobody sleeps.  With sleepers, every put takes one from
 * the current wait state's wait_cnt; the put that brings it to zero re-arms
 * it with wake_batch, moves wake_index on to the next wait state, and wakes
 * every sleeper of its state.  Sleepers also wake up every few milliseconds
 * on their own, a safety net for wake-ups batched away (a batch needs
 * wake_batch puts; after a shrink or with shallow allocations fewer may come).
 *
 * The lost wake-up argument: a put frees its bit and then loads ws_active,
 * both sequentially consistent; a sleeper increments ws_active, issues a
 * sequentially consistent fence and then retries the allocation.  Either the
 * put's load sees the sleeper, or the sleeper's retry sees the freed bit.
 * A sleeper records its state's wake_seq when it registers and only sleeps
 * while wake_seq is unchanged, so a wake-up between its retry and its sleep
 * is not missed either.
 *
 * What may run at the same time:
 *
 *   operation                          concurrent with
 *   sbq_get, _shallow, _batch          everything but init/destroy
 *   sbq_put, sbq_put_mask              everything but init/destroy
 *   sbq_wait_get, sbq_wake_all         everything but init/destroy
 *   sbq_resize                         get/put/wait (one resize at a time)
 *   sbq_weight, sbq_for_each_set       everything (a snapshot, word by word)
 *   sbq_init, sbq_destroy              nothing
 *   rq_tags_get/_reserved/put          each other
 *   rq_tags_alloc, rq_tags_free        nothing
 *
 * Puts clear bits in the word directly; the word's "cleared" field stays 0
 * (room for a deferred-clear scheme, which a userspace put gains little from).
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include "config.h"

#include "internal/alloc.h"
#include "internal/request.h"
#include "internal/tags.h"

#define BITS_PER_LONG ((unsigned)(sizeof(unsigned long) * CHAR_BIT))
#define HINT_STRIDE 16 /* unsigned entries between two CPUs' hints: 64 bytes */
#define SBQ_MAX_DEPTH 65536u
#define SBQ_MAX_WAKE_BATCH 8u
#define SBQ_SAFETY_WAIT_NS (5 * 1000 * 1000L)
#define SBQ_POLL_MIN_TRIES 4u  /* tries for a freed bit before sleeping: at least, */
#define SBQ_POLL_MAX_TRIES 64u /* at most (8 pauses apart) */

/* ---------------------------------------------------------- node memory */

/**
 * rq_alloc_node() - zeroed memory, 64-byte aligned, on NUMA node @node.
 * @size: bytes wanted (0 gives a valid, unique block).
 * @node: the node, or -1 for anywhere.
 *
 * The library's heap (lib/alloc.c): the node's jemalloc arena, or
 * numa_alloc_onnode() with the libc backend.  Placement is best effort.
 * Context: any thread; may block in the allocator.
 * Return: the block, or NULL when memory is exhausted.
 */
void *rq_alloc_node(size_t size, int node)
{
	return mem_alloc_node(size, node);
}

/**
 * rq_free_node() - free a block from rq_alloc_node().
 * @p: the block, or NULL.
 * @size: its size as asked for (the block's header records it).
 * Context: any thread.
 */
void rq_free_node(void *p, size_t size)
{
	(void)size;
	mem_free_node(p);
}

/* ------------------------------------------------------------- sbitmap */

static inline unsigned sb_bits_per_word(const struct sbitmap *sb)
{
	return 1u << sb->shift;
}

static inline unsigned *sb_hint(const struct sbitmap *sb, unsigned cpu)
{
	/* callers pass a CPU below nr_cpus: keep the division off the fast path */
	if (unlikely(cpu >= sb->nr_cpus))
		cpu %= sb->nr_cpus;
	return &sb->alloc_hint[cpu * HINT_STRIDE];
}

/* Mask of the low @nr bits of a word. */
static inline unsigned long low_bits(unsigned nr)
{
	return nr >= BITS_PER_LONG ? ~0UL : (1UL << nr) - 1;
}

/*
 * The @nr lowest set bits of @bits (all of them if it has fewer), as a
 * mask.  Free bits mostly come in one run from the lowest (tags go back
 * low first), so the run is tried whole before a bit-by-bit walk.
 */
static inline unsigned long lowest_set_bits(unsigned long bits, unsigned nr)
{
	unsigned long low = bits & -bits;
	unsigned long run = bits & ~(bits + low);  /* the lowest run of set bits */
	unsigned long want = low * low_bits(nr);   /* @nr bits from @low up (fewer at the top) */
	unsigned long take = 0;
	unsigned n;

	if (!(want & ~run))
		return want;   /* the run holds them (or ends at the word's top bit) */
	if (run == bits)
		return bits;   /* one run, shorter than @nr: all of it */
	for (n = 0; n < nr && bits; n++) {
		take |= bits & -bits;
		bits &= bits - 1;
	}
	return take;
}

/*
 * The shift for @depth: whole longs, unless that leaves fewer than four
 * words, in which case words shrink until there are four (spreading CPUs).
 */
static unsigned sb_calc_shift(unsigned depth)
{
	unsigned shift = __builtin_ctz(BITS_PER_LONG);

	if (depth >= 4) {
		while ((4u << shift) > depth)
			shift--;
	}
	return shift;
}

/* Bits of word @index usable with @depth (0 past the end). */
static inline unsigned sb_word_depth(const struct sbitmap *sb, unsigned depth, unsigned index)
{
	unsigned start = index << sb->shift;

	if (start >= depth)
		return 0;
	return min_t(unsigned, sb_bits_per_word(sb), depth - start);
}

/*
 * Take one clear bit below @wdepth in @w, preferring bits at or above @off;
 * with @wrap, fall back to the bits below @off.  Return it, or -1.
 */
static int sb_word_get(struct sbitmap_word *w, unsigned wdepth, unsigned off, bool wrap)
{
	unsigned long mask = low_bits(wdepth);
	unsigned long val = atomic_load_explicit(&w->word, memory_order_relaxed);

	for (;;) {
		unsigned long free_bits = ~val & mask;
		unsigned long cand = free_bits & (~0UL << off);
		unsigned long bit, old;
		unsigned nr;

		if (!cand) {
			if (!wrap || !off || !free_bits)
				return -1;
			cand = free_bits;
		}
		nr = __builtin_ctzl(cand);
		bit = 1UL << nr;
		/* Acquire: pairs with the release of the put that freed it. */
		old = atomic_fetch_or_explicit(&w->word, bit, memory_order_acquire);
		if (!(old & bit))
			return (int)nr;
		val = old | bit;
	}
}

/*
 * Search the words from @hint on for a clear bit, using at most @shallow
 * (0: all) bits of each word.  Round-robin maps never wrap inside a word
 * before looking at the others, so bits come out in order.
 */
static int sb_find_bit(struct sbitmap *sb, unsigned hint, unsigned shallow)
{
	unsigned depth = READ_ONCE(sb->depth);
	unsigned map_nr = (depth + sb_bits_per_word(sb) - 1) >> sb->shift;
	unsigned index, off, i, nr_iter;

	if (hint >= depth)
		hint = 0;
	index = hint >> sb->shift;
	off = hint & (sb_bits_per_word(sb) - 1);
	nr_iter = map_nr + (sb->round_robin && off ? 1 : 0);

	for (i = 0; i < nr_iter; i++) {
		unsigned wdepth = sb_word_depth(sb, depth, index);
		int nr = -1;

		if (shallow && shallow < wdepth)
			wdepth = shallow;
		if (off < wdepth)
			nr = sb_word_get(&sb->map[index], wdepth, off, !sb->round_robin);
		else if (!sb->round_robin)
			nr = sb_word_get(&sb->map[index], wdepth, 0, false);
		if (nr >= 0)
			return (int)(index << sb->shift) + nr;
		off = 0;
		if (++index >= map_nr)
			index = 0;
	}
	return -1;
}

/*
 * One bit with @cpu's hint, which moves on as the kernel's does.  The
 * common case first, inline: the hint's own bit is free (a put moves the
 * hint to what it freed), the bit sb_find_bit() would try first; any other
 * case, or losing that bit to another thread, takes the search.
 */
static int sb_get(struct sbitmap *sb, unsigned cpu, unsigned shallow)
{
	unsigned *hintp = sb_hint(sb, cpu);
	unsigned hint = READ_ONCE(*hintp);
	int nr = -1;

	if (likely(!shallow && hint < READ_ONCE(sb->depth))) {
		struct sbitmap_word *w = &sb->map[hint >> sb->shift];
		unsigned long bit = 1UL << (hint & (sb_bits_per_word(sb) - 1));

		/* Acquire: pairs with the release of the put that freed it. */
		if (!(atomic_load_explicit(&w->word, memory_order_relaxed) & bit) &&
		    !(atomic_fetch_or_explicit(&w->word, bit, memory_order_acquire) & bit))
			nr = (int)hint;
	}
	if (nr < 0)
		nr = sb_find_bit(sb, hint, shallow);
	if (nr < 0)
		return -1;
	if ((unsigned)nr == hint || sb->round_robin) {
		unsigned next = (unsigned)nr + 1;

		if (next >= READ_ONCE(sb->depth))
			next = 0;
		WRITE_ONCE(*hintp, next);
	}
	return nr;
}

/* --------------------------------------------------------- wait states */

static unsigned sbq_calc_wake_batch(const struct sbitmap_queue *sbq, unsigned depth)
{
	const struct sbitmap *sb = &sbq->sb;
	unsigned bpw = sb_bits_per_word(sb);
	unsigned shallow = min_t(unsigned, READ_ONCE(sbq->min_shallow_depth), bpw);
	unsigned map_nr = DIV_ROUND_UP(depth, bpw);
	unsigned usable = min_t(unsigned, depth, shallow * map_nr);
	unsigned batch = usable / SBQ_WAIT_QUEUES;

	if (batch < 1)
		batch = 1;
	if (batch > SBQ_MAX_WAKE_BATCH)
		batch = SBQ_MAX_WAKE_BATCH;
	return batch;
}

/* Set wake_batch for @depth and re-arm every wait state with it. */
static void sbq_update_wake_batch(struct sbitmap_queue *sbq, unsigned depth)
{
	unsigned batch = sbq_calc_wake_batch(sbq, depth);
	unsigned i;

	WRITE_ONCE(sbq->wake_batch, batch);
	for (i = 0; i < SBQ_WAIT_QUEUES; i++)
		atomic_store_explicit(&sbq->ws[i].wait_cnt, (int)batch, memory_order_relaxed);
}

/*
 * A shallow allocation below the smallest depth seen so far: fewer bits can
 * free for its sleepers, so wake-ups must come in smaller batches.  Rare.
 */
static void sbq_note_shallow(struct sbitmap_queue *sbq, unsigned shallow)
{
	unsigned cur = READ_ONCE(sbq->min_shallow_depth);

	while (shallow < cur) {
		if (__atomic_compare_exchange_n(&sbq->min_shallow_depth, &cur, shallow, false,
						__ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
			sbq_update_wake_batch(sbq, READ_ONCE(sbq->sb.depth));
			return;
		}
	}
}

/* Wake every sleeper of @ws. */
static void sbq_ws_wake(struct sbq_wait_state *ws)
{
	pthread_mutex_lock(&ws->lock);
	ws->wake_seq++;
	pthread_cond_broadcast(&ws->cond);
	pthread_mutex_unlock(&ws->lock);
}

/* The first wait state from wake_index on that has sleepers, or NULL. */
static struct sbq_wait_state *sbq_wake_ptr(struct sbitmap_queue *sbq, unsigned *idxp)
{
	unsigned start = atomic_load_explicit(&sbq->wake_index, memory_order_relaxed);
	unsigned i;

	for (i = 0; i < SBQ_WAIT_QUEUES; i++) {
		unsigned idx = (start + i) % SBQ_WAIT_QUEUES;
		struct sbq_wait_state *ws = &sbq->ws[idx];

		if (READ_ONCE(ws->waiters)) {
			if (idx != start)
				atomic_compare_exchange_strong_explicit(&sbq->wake_index, &start, idx,
									memory_order_relaxed,
									memory_order_relaxed);
			*idxp = idx;
			return ws;
		}
	}
	return NULL;
}

/*
 * Is anyone sleeping for a bit?  Asked right after a put frees bits.
 * Sequentially consistent: pairs with sbq_wait_get's fence.
 */
static inline bool sbq_has_sleepers(struct sbitmap_queue *sbq)
{
	return atomic_load_explicit(&sbq->ws_active, memory_order_seq_cst) != 0;
}

/*
 * @nr bits were freed while sbq_has_sleepers(): count them against the
 * current wait state.
 */
static void sbq_wake_up(struct sbitmap_queue *sbq, unsigned nr)
{
	struct sbq_wait_state *ws;
	unsigned idx, next;
	int cnt;

	ws = sbq_wake_ptr(sbq, &idx);
	if (!ws)
		return;
	cnt = atomic_fetch_sub_explicit(&ws->wait_cnt, (int)nr, memory_order_relaxed);
	if (cnt <= 0 || cnt > (int)nr)
		return; /* not this put's turn, or another put is waking */

	atomic_store_explicit(&ws->wait_cnt, (int)READ_ONCE(sbq->wake_batch),
			      memory_order_relaxed);
	next = (idx + 1) % SBQ_WAIT_QUEUES;
	atomic_compare_exchange_strong_explicit(&sbq->wake_index, &idx, next,
						memory_order_relaxed, memory_order_relaxed);
	sbq_ws_wake(ws);
}

/* ------------------------------------------------------- sbitmap_queue */

/**
 * sbq_init() - set up a bitmap of @depth bits with its wait states.
 * @sbq: the queue, zeroed or not.
 * @depth: usable bits, 1..65536; also the most sbq_resize() grows to.
 * @round_robin: hand bits out in strict order per CPU.
 * @node: NUMA node for the words and hints, -1 for any.
 *
 * Context: nothing else may use @sbq.
 * Return: 0, -EINVAL for a bad depth, -ENOMEM.
 */
int sbq_init(struct sbitmap_queue *sbq, unsigned depth, bool round_robin, int node)
{
	struct sbitmap *sb = &sbq->sb;
	pthread_condattr_t cattr;
	unsigned i;
	int nr_cpus;

	memset(sbq, 0, sizeof(*sbq));
	if (depth == 0 || depth > SBQ_MAX_DEPTH)
		return -EINVAL;

	nr_cpus = get_nprocs_conf();
	sb->nr_cpus = nr_cpus > 0 ? (unsigned)nr_cpus : 1;
	sb->depth = depth;
	sb->max_depth = depth;
	sb->shift = sb_calc_shift(depth);
	sb->map_nr = DIV_ROUND_UP(depth, sb_bits_per_word(sb));
	sb->round_robin = round_robin;

	sb->map = rq_alloc_node(sb->map_nr * sizeof(*sb->map), node);
	sb->alloc_hint = rq_alloc_node(sb->nr_cpus * HINT_STRIDE * sizeof(unsigned), node);
	if (!sb->map || !sb->alloc_hint) {
		rq_free_node(sb->map, sb->map_nr * sizeof(*sb->map));
		rq_free_node(sb->alloc_hint, sb->nr_cpus * HINT_STRIDE * sizeof(unsigned));
		memset(sbq, 0, sizeof(*sbq));
		return -ENOMEM;
	}
	/* Spread the CPUs' first searches evenly over the map. */
	if (!round_robin) {
		for (i = 0; i < sb->nr_cpus; i++)
			sb->alloc_hint[i * HINT_STRIDE] =
				(unsigned)(((uint64_t)i * depth) / sb->nr_cpus);
	}

	sbq->min_shallow_depth = sb_bits_per_word(sb);
	atomic_init(&sbq->wake_index, 0);
	atomic_init(&sbq->ws_active, 0);

	pthread_condattr_init(&cattr);
	pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
	for (i = 0; i < SBQ_WAIT_QUEUES; i++) {
		struct sbq_wait_state *ws = &sbq->ws[i];

		pthread_mutex_init(&ws->lock, NULL);
		pthread_cond_init(&ws->cond, &cattr);
		ws->waiters = 0;
		ws->wake_seq = 0;
	}
	pthread_condattr_destroy(&cattr);
	sbq_update_wake_batch(sbq, depth);
	return 0;
}

/**
 * sbq_destroy() - free what sbq_init() allocated.
 * @sbq: the queue, initialised or zeroed (then a no-op).
 * Context: nothing else may use @sbq; nobody may be sleeping in it.
 */
void sbq_destroy(struct sbitmap_queue *sbq)
{
	struct sbitmap *sb = &sbq->sb;
	unsigned i;

	if (!sb->map)
		return;
	for (i = 0; i < SBQ_WAIT_QUEUES; i++) {
		pthread_cond_destroy(&sbq->ws[i].cond);
		pthread_mutex_destroy(&sbq->ws[i].lock);
	}
	rq_free_node(sb->map, DIV_ROUND_UP(sb->max_depth, sb_bits_per_word(sb)) *
				      sizeof(*sb->map));
	rq_free_node(sb->alloc_hint, sb->nr_cpus * HINT_STRIDE * sizeof(unsigned));
	memset(sbq, 0, sizeof(*sbq));
}

/**
 * sbq_resize() - change the usable depth.
 * @sbq: the queue.
 * @depth: new depth, clamped to 1..the depth at init.
 *
 * Bits above a smaller depth stay allocated until put, and are never handed
 * out again while the depth is small.  Growing wakes every sleeper.
 * Context: concurrent with get/put/wait; not with another resize.
 */
void sbq_resize(struct sbitmap_queue *sbq, unsigned depth)
{
	struct sbitmap *sb = &sbq->sb;
	unsigned old = READ_ONCE(sb->depth);

	if (depth < 1)
		depth = 1;
	if (depth > sb->max_depth)
		depth = sb->max_depth;
	WRITE_ONCE(sb->map_nr, DIV_ROUND_UP(depth, sb_bits_per_word(sb)));
	WRITE_ONCE(sb->depth, depth);
	sbq_update_wake_batch(sbq, depth);
	if (depth > old)
		sbq_wake_all(sbq);
}

/**
 * sbq_get() - take one free bit.
 * @sbq: the queue.
 * @cpu: the caller's CPU (any number: taken modulo the CPUs configured).
 * Context: any thread; never blocks.
 * Return: the bit, or -1 when none is free.
 */
int sbq_get(struct sbitmap_queue *sbq, unsigned cpu)
{
	return sb_get(&sbq->sb, cpu, 0);
}

/**
 * sbq_get_shallow() - take one free bit among the first @shallow_depth of
 * each word.
 * @sbq: the queue.
 * @cpu: the caller's CPU.
 * @shallow_depth: bits per word that may be used; 0 means all.
 * Context: any thread; never blocks.
 * Return: the bit, or -1.
 */
int sbq_get_shallow(struct sbitmap_queue *sbq, unsigned cpu, unsigned shallow_depth)
{
	if (shallow_depth >= sb_bits_per_word(&sbq->sb))
		shallow_depth = 0;
	if (unlikely(shallow_depth && shallow_depth < READ_ONCE(sbq->min_shallow_depth)))
		sbq_note_shallow(sbq, shallow_depth);
	return sb_get(&sbq->sb, cpu, shallow_depth);
}

/**
 * sbq_get_batch_shallow() - take up to @nr free bits of one word with one
 * compare-and-swap, among the first @shallow_depth bits of each word.
 * @sbq: the queue.
 * @cpu: the caller's CPU (where the search starts).
 * @nr: bits wanted, at most the bits per word.
 * @shallow_depth: bits per word that may be used; 0 means all.
 * @offset: out: the bit number of the word's bit 0.
 * Context: any thread; never blocks.
 * Return: the mask of bits taken (bit i is bit *@offset + i), 0 if none.
 */
unsigned long sbq_get_batch_shallow(struct sbitmap_queue *sbq, unsigned cpu, unsigned nr,
				    unsigned shallow_depth, unsigned *offset)
{
	struct sbitmap *sb = &sbq->sb;
	unsigned depth = READ_ONCE(sb->depth);
	unsigned map_nr = DIV_ROUND_UP(depth, sb_bits_per_word(sb));
	unsigned hint = READ_ONCE(*sb_hint(sb, cpu));
	unsigned index, i;

	if (nr == 0)
		return 0;
	if (nr > sb_bits_per_word(sb))
		nr = sb_bits_per_word(sb);
	if (shallow_depth >= sb_bits_per_word(sb))
		shallow_depth = 0;
	if (unlikely(shallow_depth && shallow_depth < READ_ONCE(sbq->min_shallow_depth)))
		sbq_note_shallow(sbq, shallow_depth);
	if (hint >= depth)
		hint = 0;
	index = hint >> sb->shift;

	for (i = 0; i < map_nr; i++) {
		struct sbitmap_word *w = &sb->map[index];
		unsigned wdepth = sb_word_depth(sb, depth, index);
		unsigned long mask = low_bits(shallow_depth && shallow_depth < wdepth ?
					      shallow_depth : wdepth);
		unsigned long val = atomic_load_explicit(&w->word, memory_order_relaxed);

		for (;;) {
			unsigned long free_bits = ~val & mask;
			unsigned long take;

			if (!free_bits)
				break;
			take = lowest_set_bits(free_bits, nr);
			if (atomic_compare_exchange_weak_explicit(&w->word, &val, val | take,
								  memory_order_acquire,
								  memory_order_relaxed)) {
				*offset = index << sb->shift;
				return take;
			}
		}
		if (++index >= map_nr)
			index = 0;
	}
	return 0;
}

/**
 * sbq_get_batch() - sbq_get_batch_shallow() with every bit of a word usable.
 */
unsigned long sbq_get_batch(struct sbitmap_queue *sbq, unsigned cpu, unsigned nr,
			    unsigned *offset)
{
	return sbq_get_batch_shallow(sbq, cpu, nr, 0, offset);
}

/**
 * sbq_put() - free @bit and wake sleepers when a batch is complete.
 * @sbq: the queue.
 * @bit: a bit taken from @sbq and not yet put.
 * @cpu: the caller's CPU: its hint becomes @bit (cache-warm reuse).
 * Context: any thread; never blocks (a wake-up takes a wait state's lock).
 */
void sbq_put(struct sbitmap_queue *sbq, unsigned bit, unsigned cpu)
{
	struct sbitmap *sb = &sbq->sb;
	unsigned long mask = 1UL << (bit & (sb_bits_per_word(sb) - 1));

	/* Release for the next owner; seq_cst for the ws_active check. */
	atomic_fetch_and_explicit(&sb->map[bit >> sb->shift].word, ~mask, memory_order_seq_cst);
	if (!sb->round_robin && bit < READ_ONCE(sb->depth))
		WRITE_ONCE(*sb_hint(sb, cpu), bit);
	if (unlikely(sbq_has_sleepers(sbq)))
		sbq_wake_up(sbq, 1);
}

/**
 * sbq_put_mask() - free the bits of @mask in the word whose bit 0 is bit
 * @offset (what sbq_get_batch() returned), with one atomic.
 * @sbq: the queue.
 * @mask: the bits, relative to @offset; 0 does nothing.
 * @offset: the word's first bit number.
 * @cpu: the caller's CPU (its hint becomes the lowest bit).
 * Context: any thread.
 */
void sbq_put_mask(struct sbitmap_queue *sbq, unsigned long mask, unsigned offset, unsigned cpu)
{
	struct sbitmap *sb = &sbq->sb;
	unsigned first;

	if (!mask)
		return;
	atomic_fetch_and_explicit(&sb->map[offset >> sb->shift].word, ~mask, memory_order_seq_cst);
	first = offset + (unsigned)__builtin_ctzl(mask);
	if (!sb->round_robin && first < READ_ONCE(sb->depth))
		WRITE_ONCE(*sb_hint(sb, cpu), first);
	if (unlikely(sbq_has_sleepers(sbq)))
		sbq_wake_up(sbq, rq_popcountl(mask));
}

static struct timespec deadline_after_ns(long ns)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_nsec += ns;
	while (ts.tv_nsec >= 1000000000L) {
		ts.tv_nsec -= 1000000000L;
		ts.tv_sec++;
	}
	return ts;
}

/*
 * Before sleeping for a bit, poll for one for a while: a completion on
 * another CPU frees tags within microseconds, sooner than a sleep and a
 * wake-up.  Only on a machine with two CPUs online (read once), and
 * for a per-thread budget of tries that doubles when a poll gets a bit and
 * halves when one gives up.  Return: the bit, or -1.
 */
static int sbq_poll_get(struct sbitmap_queue *sbq, unsigned cpu, unsigned shallow_depth)
{
	static __thread unsigned budget __attribute__((tls_model("initial-exec"))) =
		SBQ_POLL_MAX_TRIES / 4;
	int bit = -1;
	unsigned i, j;

	if (cpus_online() < 2)
		return -1;
	for (i = 0; i < budget && bit < 0; i++) {
		for (j = 0; j < 8; j++)
			cpu_relax();
		bit = sbq_get_shallow(sbq, cpu, shallow_depth);
	}
	if (bit >= 0)
		budget = budget * 2 < SBQ_POLL_MAX_TRIES ? budget * 2 : SBQ_POLL_MAX_TRIES;
	else
		budget = budget / 2 > SBQ_POLL_MIN_TRIES ? budget / 2 : SBQ_POLL_MIN_TRIES;
	return bit;
}

/**
 * sbq_wait_get() - take a bit, sleeping until one frees.
 * @sbq: the queue.
 * @cpu: the caller's CPU.
 * @shallow_depth: bits per word that may be used; 0 means all.
 * @before_sleep: run once before the first sleep (NULL: nothing).
 * @should_abort: checked each time round before sleeping (NULL: never);
 *	whoever makes it true calls sbq_wake_all() for a prompt return.
 * @arg: for both callbacks.
 *
 * Context: any thread that may block; no lock a putter needs may be held.
 * Return: the bit, or -1 when @should_abort turned true.
 */
int sbq_wait_get(struct sbitmap_queue *sbq, unsigned cpu, unsigned shallow_depth,
		 void (*before_sleep)(void *arg), bool (*should_abort)(void *arg), void *arg)
{
	struct sbq_wait_state *ws;
	uint64_t seq;
	int bit;

	bit = sbq_get_shallow(sbq, cpu, shallow_depth);
	if (bit >= 0)
		return bit;
	if (before_sleep)
		before_sleep(arg);
	bit = sbq_poll_get(sbq, cpu, shallow_depth);
	if (bit >= 0)
		return bit;

	ws = &sbq->ws[cpu % SBQ_WAIT_QUEUES];
	pthread_mutex_lock(&ws->lock);
	WRITE_ONCE(ws->waiters, ws->waiters + 1);
	atomic_fetch_add_explicit(&sbq->ws_active, 1, memory_order_seq_cst);
	seq = ws->wake_seq;
	pthread_mutex_unlock(&ws->lock);

	for (;;) {
		/* Pairs with the put's seq_cst free + ws_active load. */
		atomic_thread_fence(memory_order_seq_cst);
		bit = sbq_get_shallow(sbq, cpu, shallow_depth);
		if (bit >= 0)
			break;
		if (should_abort && should_abort(arg))
			break;

		pthread_mutex_lock(&ws->lock);
		if (ws->wake_seq == seq) {
			struct timespec ts = deadline_after_ns(SBQ_SAFETY_WAIT_NS);

			pthread_cond_timedwait(&ws->cond, &ws->lock, &ts);
		}
		seq = ws->wake_seq;
		pthread_mutex_unlock(&ws->lock);
	}

	pthread_mutex_lock(&ws->lock);
	WRITE_ONCE(ws->waiters, ws->waiters - 1);
	pthread_mutex_unlock(&ws->lock);
	atomic_fetch_sub_explicit(&sbq->ws_active, 1, memory_order_relaxed);
	return bit;
}

/**
 * sbq_wake_all() - wake every sleeper of every wait state.
 * @sbq: the queue.
 * Context: any thread (queue dying, depth grown, abort condition set).
 */
void sbq_wake_all(struct sbitmap_queue *sbq)
{
	unsigned i;

	/*
	 * No fence needed: every wait state's wake_seq moves under its mutex,
	 * and a sleeper reads it under the same mutex before it sleeps, so
	 * what the caller set before this call is seen by every sleeper that
	 * wakes (or never slept).
	 */
	for (i = 0; i < SBQ_WAIT_QUEUES; i++)
		sbq_ws_wake(&sbq->ws[i]);
}

/* Words that may hold set bits: all of them, bits above a shrunk depth too. */
static unsigned sb_words_allocated(const struct sbitmap *sb)
{
	return DIV_ROUND_UP(sb->max_depth, sb_bits_per_word(sb));
}

/**
 * sbq_weight() - bits set now, including bits above a shrunk depth not yet
 * put.
 * @sbq: the queue.
 * Context: any thread; exact only when nobody gets or puts.
 * Return: the count.
 */
unsigned sbq_weight(const struct sbitmap_queue *sbq)
{
	const struct sbitmap *sb = &sbq->sb;
	unsigned i, weight = 0;

	if (!sb->map)
		return 0;
	for (i = 0; i < sb_words_allocated(sb); i++)
		weight += __builtin_popcountl(
			atomic_load_explicit(&sb->map[i].word, memory_order_relaxed));
	return weight;
}

/**
 * sbq_for_each_set() - call @fn for each set bit, in order.
 * @sbq: the queue.
 * @fn: called with the bit and @arg; returning false stops the walk.
 * @arg: for @fn.
 * Context: any thread; each word is read once, so bits changing during the
 * walk may or may not be seen.
 */
void sbq_for_each_set(const struct sbitmap_queue *sbq, bool (*fn)(unsigned bit, void *arg),
		      void *arg)
{
	const struct sbitmap *sb = &sbq->sb;
	unsigned i;

	if (!sb->map)
		return;
	for (i = 0; i < sb_words_allocated(sb); i++) {
		unsigned long val = atomic_load_explicit(&sb->map[i].word, memory_order_acquire);

		while (val) {
			unsigned nr = __builtin_ctzl(val);

			if (!fn((i << sb->shift) + nr, arg))
				return;
			val &= val - 1;
		}
	}
}

/* ------------------------------------------------------------ rq_tags */

/**
 * rq_tags_alloc() - tags for one hardware queue (or scheduler), with its
 * preallocated requests.
 * @nr_tags: all tags, reserved included; at most 65536 normal ones.
 * @nr_reserved: how many of them are reserved (fewer than @nr_tags).
 * @rq_size: bytes per request, rounded up to 64; 0 for no requests.
 * @round_robin: hand tags out in strict order.
 * @node: NUMA node of the bitmap and requests, -1 for any.
 *
 * The requests are zeroed, 64-byte aligned and reachable as static_rqs[tag];
 * rqs[] starts all NULL.
 * Context: any thread; may block in the allocator.
 * Return: the tags, or NULL for bad sizes or exhausted memory.
 */
struct rq_tags *rq_tags_alloc(unsigned nr_tags, unsigned nr_reserved, size_t rq_size,
			      bool round_robin, int node)
{
	struct rq_tags *tags;
	unsigned i;

	if (nr_tags == 0 || nr_reserved >= nr_tags || nr_tags - nr_reserved > SBQ_MAX_DEPTH ||
	    nr_reserved > SBQ_MAX_DEPTH)
		return NULL;

	tags = rq_alloc_node(sizeof(*tags), node);
	if (!tags)
		return NULL;
	tags->nr_tags = nr_tags;
	tags->nr_reserved = nr_reserved;
	tags->node = node;
	atomic_init(&tags->active_queues, 0);

	if (sbq_init(&tags->bitmap, nr_tags - nr_reserved, round_robin, node))
		goto fail;
	if (nr_reserved && sbq_init(&tags->breserved, nr_reserved, round_robin, node))
		goto fail;

	tags->rqs = rq_alloc_node(nr_tags * sizeof(*tags->rqs), node);
	tags->static_rqs = rq_alloc_node(nr_tags * sizeof(*tags->static_rqs), node);
	if (!tags->rqs || !tags->static_rqs)
		goto fail;

	if (rq_size) {
		if (rq_size > (SIZE_MAX - RQ_CACHELINE) / nr_tags)
			goto fail;
		tags->rq_size = (rq_size + RQ_CACHELINE - 1) & ~(size_t)(RQ_CACHELINE - 1);
		tags->rq_mem_size = tags->rq_size * nr_tags;
		tags->rq_mem = rq_alloc_node(tags->rq_mem_size, node);
		if (!tags->rq_mem)
			goto fail;
		for (i = 0; i < nr_tags; i++) {
			tags->static_rqs[i] =
				(struct rq_request *)((char *)tags->rq_mem + i * tags->rq_size);
			request_layout_init(tags->static_rqs[i]);
		}
	}
	return tags;

fail:
	rq_tags_free(tags);
	return NULL;
}

/**
 * rq_tags_free() - free tags, their bitmaps and their requests.
 * @tags: the tags, or NULL.
 * Context: no tag in use, nobody waiting.
 */
void rq_tags_free(struct rq_tags *tags)
{
	if (!tags)
		return;
	rq_free_node(tags->rq_mem, tags->rq_mem_size);
	rq_free_node(tags->static_rqs, tags->nr_tags * sizeof(*tags->static_rqs));
	rq_free_node(tags->rqs, tags->nr_tags * sizeof(*tags->rqs));
	sbq_destroy(&tags->breserved);
	sbq_destroy(&tags->bitmap);
	rq_free_node(tags, sizeof(*tags));
}

/**
 * rq_tags_get() - a normal tag.
 * @tags: the tags.
 * @cpu: the caller's CPU.
 * @shallow_depth: bits per bitmap word that may be used; 0 means all.
 * Context: any thread; never blocks.
 * Return: the tag number (nr_reserved and up), or -1.
 */
int rq_tags_get(struct rq_tags *tags, unsigned cpu, unsigned shallow_depth)
{
	int bit = shallow_depth ? sbq_get_shallow(&tags->bitmap, cpu, shallow_depth)
				: sbq_get(&tags->bitmap, cpu);

	return bit < 0 ? -1 : (int)tags->nr_reserved + bit;
}

/**
 * rq_tags_get_reserved() - a reserved tag.
 * @tags: the tags.
 * @cpu: the caller's CPU.
 * Context: any thread; never blocks.
 * Return: the tag number (below nr_reserved), or -1.
 */
int rq_tags_get_reserved(struct rq_tags *tags, unsigned cpu)
{
	if (!tags->nr_reserved)
		return -1;
	return sbq_get(&tags->breserved, cpu);
}

/**
 * rq_tags_put() - free a tag from rq_tags_get() or rq_tags_get_reserved().
 * @tags: the tags.
 * @tag: the tag number.
 * @cpu: the caller's CPU.
 * Context: any thread; wakes sleepers of the bitmap it belongs to.
 */
void rq_tags_put(struct rq_tags *tags, unsigned tag, unsigned cpu)
{
	if (tag < tags->nr_reserved)
		sbq_put(&tags->breserved, tag, cpu);
	else
		sbq_put(&tags->bitmap, tag - tags->nr_reserved, cpu);
}
