/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * rqbench: drive a librequest queue over the null driver and measure bios
 * per second, submit-to-end_io latency and heap allocations.
 *
 * Each submitting thread keeps --depth bios in flight, submitting --batch of
 * them under one plug; it owns one data buffer of --bs bytes that every bio
 * points at (so successive bios are never memory-contiguous, as with user
 * pages).  Bios are preallocated per thread (or taken from rq_bio_alloc with
 * --bio-alloc) and recycled: the measured phase exercises the library, not
 * malloc.  end_io hands a bio back to its thread: directly when it runs on
 * that thread (inline completion), else as its slot's bit in an atomic
 * bitmap, and a futex wake-up.  Latency is taken around each bio (or every Nth with
 * --lat-sample, none with --no-lat) with the TSC where it is invariant (two
 * vDSO clock reads would cost about 40 ns per bio, as much as the whole
 * target path), else with clock_gettime().
 *
 * Allocation counting (jemalloc): "allocs" is the change of
 * stats.arenas.<all>.{small,large}.nmalloc over the measured phase.  jemalloc
 * serves most allocations from a per-thread cache (tcache) that those
 * counters do not see, so rqbench turns the tcache off in its own threads and
 * in the null driver's completion threads (--tcache keeps it).  The library
 * allocates through jemalloc's API with no thread cache, from the calling
 * thread's arena or its own per-NUMA-node arenas (lib/alloc.c); the counters
 * summed over MALLCTL_ARENAS_ALL include those arenas, so every allocation
 * of the library counts, on whichever thread.  "alloc_bytes" is the exact
 * thread.allocated sum of the submitting threads.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#if HAVE_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

#include <librequest/mq.h>
#include <librequest/trace.h>

#include "floorsched.h"
#include "hist.h"
#include "null_blk.h"
#include "null_poll.h"
#include "progopt.h"

#define CACHELINE 64

enum pattern { PAT_RANDREAD, PAT_RANDWRITE, PAT_READ, PAT_WRITE, PAT_RANDRW };
static const char *const pattern_names[] = {
	"randread", "randwrite", "read", "write", "randrw",
};
static const char *const completion_names[] = { "inline", "thread", "timer" };
static const char *const placement_names[] = { "steer", "free" };

struct opts {
	const char *trace_dir;     /* --trace: blktrace files DIR/rqbench.blktrace.CPU */
	const char *trace_actions; /* --trace-actions: the queue's trace_actions mask */
	const char *front;
	const char *sched;
	const char *driver;
	unsigned threads;
	unsigned depth;
	unsigned batch;
	uint64_t bs;
	enum pattern pattern;
	double seconds;
	uint64_t ops;
	unsigned hw_queues;
	unsigned hw_depth;
	enum null_completion completion;
	uint64_t completion_nsec;
	enum null_ct_placement ct_placement;
	unsigned max_sectors_kb;
	unsigned max_segments;
	int nomerges;           /* -1: leave the queue's default */
	int rq_affinity;        /* -1: leave the queue's default */
	bool json;
	bool no_lat;
	bool cdf;
	unsigned lat_sample;
	uint64_t capacity;
	uint64_t warmup;        /* bios per thread, 0: automatic */
	bool bio_alloc;
	bool memory_backed;
	bool tcache;
	bool pin_split;         /* submitters on the first CPUs, completion threads on the rest */
	bool cpu_busy;          /* measure the submitters' CPU time outside their waits */
	bool list_scheds;
	bool empty;             /* --empty: the empty request life, no queue */
};

struct bench_thread;

/* One bio slot of a thread. */
struct bench_bio {
	struct rq_bio *bio;
	struct bench_thread *t;
	struct bench_bio *next;
	uint64_t submit_ns;     /* 0: latency not sampled */
	uint64_t lat_ns;
	struct rq_bio store;    /* the bio itself unless --bio-alloc */
};

struct bench {
	struct opts o;
	struct null_dev *dev;
	struct rq_queue *q;
	uint64_t nr_blocks;     /* capacity / bs */
	pthread_barrier_t barrier;
	atomic_bool stop;
};

struct bench_thread {
	struct bench *b;
	pthread_t thread;
	unsigned idx;
	/* owned by the submitting thread */
	struct bench_bio *slots;
	struct bench_bio *free;       /* ready to submit */
	struct bench_bio *done_local; /* ended on this thread, not reaped */
	uint64_t submitted;           /* bios submitted, every phase */
	uint64_t reaped;              /* bios reaped, every phase: in flight
					 is submitted - reaped */
	uint64_t rng;
	uint64_t seq_block, region_first, region_blocks;
	uint64_t completed;           /* bios reaped while measuring */
	uint64_t errors;
	uint64_t lat_tick;
	uint64_t alloc_bytes;
	uint32_t poll_ns;             /* adaptive polling budget (wait_completion) */
	uint64_t sleeps;              /* futex sleeps in wait_completion, measured phase */
	uint64_t plugs;               /* plugs (batches) issued, measured phase */
	uint64_t waits;               /* waits for a completion, measured phase */
	uint64_t wait_cpu_ns;         /* --cpu-busy: thread CPU time in wait_completion */
	uint64_t busy_ns;             /* --cpu-busy: thread CPU time outside it, measured phase */
	void *buf;
	struct hist hist;
	unsigned done_words;          /* words of done_bits: depth / 64, rounded up */
	/* shared with completion threads */
	_Atomic(unsigned long) *done_bits __attribute__((aligned(CACHELINE)));
				      /* slots ended elsewhere, bit i: slots[i] */
	_Atomic unsigned long done_word0; /* done_bits when depth <= 64 */
	_Atomic uint32_t wake_seq;
	atomic_bool sleeping;
	_Atomic int peer_cpu;         /* CPU of the last hand-back, -1: unknown */
} __attribute__((aligned(CACHELINE)));

#define DONE_BITS 64 /* slots per word of done_bits */

static __thread struct bench_thread *current_thread;

/* ------------------------------------------------------------- helpers */

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/*
 * Latency stamps.  Two clock_gettime() calls per bio cost about as much as
 * the whole request path, so where the CPU has an invariant TSC
 * (constant_tsc and nonstop_tsc) stamps are raw TSC reads, converted to
 * nanoseconds with a factor calibrated against CLOCK_MONOTONIC at start-up.
 */
static bool use_tsc;
static double tsc_ns_per_tick = 1.0;

static inline uint64_t lat_stamp(void)
{
#if defined(__x86_64__) || defined(__i386__)
	if (use_tsc)
		return __builtin_ia32_rdtsc();
#endif
	return now_ns();
}

static inline uint64_t lat_ns(uint64_t from, uint64_t to)
{
	return use_tsc ? (uint64_t)((double)(to - from) * tsc_ns_per_tick) : to - from;
}

static void lat_clock_init(void)
{
#if defined(__x86_64__) || defined(__i386__)
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[4096];
	bool constant = false, nonstop = false;
	uint64_t t0, c0, t1, c1;
	struct timespec ts = { 0, 20 * 1000 * 1000 };

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "flags", 5))
			continue;
		constant = strstr(line, " constant_tsc") != NULL;
		nonstop = strstr(line, " nonstop_tsc") != NULL;
		break;
	}
	fclose(f);
	if (!constant || !nonstop)
		return;
	t0 = now_ns();
	c0 = __builtin_ia32_rdtsc();
	nanosleep(&ts, NULL);
	t1 = now_ns();
	c1 = __builtin_ia32_rdtsc();
	if (c1 <= c0 || t1 <= t0)
		return;
	tsc_ns_per_tick = (double)(t1 - t0) / (double)(c1 - c0);
	use_tsc = true;
#endif
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

/* xorshift64*: fast, good enough for uniform offsets. */
static inline uint64_t xrand(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

/* Uniform in [0, n). */
static inline uint64_t xrand_below(uint64_t *s, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)xrand(s) * n) >> 64);
}

/* ---------------------------------------------------- jemalloc statistics */

#if HAVE_JEMALLOC
static bool alloc_stats_ok = true;

static uint64_t je_u64(const char *name)
{
	uint64_t v = 0;
	size_t sz = sizeof(v);

	if (mallctl(name, &v, &sz, NULL, 0))
		alloc_stats_ok = false;
	return v;
}

/* Heap allocations so far, all arenas (see the file comment). */
static uint64_t alloc_count(void)
{
	uint64_t epoch = 1, n = 0;
	size_t sz = sizeof(epoch);
	char name[96];

	if (mallctl("epoch", &epoch, &sz, &epoch, sz)) {
		alloc_stats_ok = false;
		return 0;
	}
	snprintf(name, sizeof(name), "stats.arenas.%u.small.nmalloc",
		 (unsigned)MALLCTL_ARENAS_ALL);
	n += je_u64(name);
	snprintf(name, sizeof(name), "stats.arenas.%u.large.nmalloc",
		 (unsigned)MALLCTL_ARENAS_ALL);
	n += je_u64(name);
	return n;
}

static uint64_t thread_alloc_bytes(void)
{
	return je_u64("thread.allocated");
}

static void tcache_off(void)
{
	bool off = false;

	mallctl("thread.tcache.flush", NULL, NULL, NULL, 0);
	mallctl("thread.tcache.enabled", NULL, NULL, &off, sizeof(off));
}
#else
static bool alloc_stats_ok;
static uint64_t alloc_count(void) { return 0; }
static uint64_t thread_alloc_bytes(void) { return 0; }
static void tcache_off(void) { }
#endif

/* ------------------------------------------------------------ completion */

/*
 * Bios ended on another thread go back to their submitter as bits of its
 * done_bits, a bit per slot, not as a list linked through the bios: the
 * completing thread then writes no line of a slot or its bio (it only reads
 * them), so the submitter, which fills them again at once, finds them still
 * in its cache; and it learns which slots ended without following links
 * through lines another CPU wrote, one miss after the other.
 */

/*
 * Hand the slots @mask of word @word back to @t with one atomic OR; wake
 * it if it sleeps.
 */
static void bench_hand_back(struct bench_thread *t, unsigned word, unsigned long mask)
{
	/* the submitter's polling hint, on the line the push writes anyway */
	atomic_store_explicit(&t->peer_cpu, sched_getcpu(), memory_order_relaxed);
	atomic_fetch_or_explicit(&t->done_bits[word], mask, memory_order_seq_cst);
	/* only the first waker of a sleeping thread pays for the system call */
	if (atomic_load(&t->sleeping) && atomic_exchange(&t->sleeping, false)) {
		atomic_fetch_add(&t->wake_seq, 1);
		syscall(SYS_futex, &t->wake_seq, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	}
}

/*
 * On the null driver's completion threads, bios ended for other threads
 * wait here until the batch is over (null_config.batch_done): a submitter's
 * word is then written once per batch, not once per bio.  Elsewhere (the
 * service thread's rq_affinity 2 fallback) each goes back at once.
 */
#define STAGE_SLOTS 4
struct stage {
	struct bench_thread *t;
	unsigned word;
	unsigned long mask;
};
static __thread bool tls_staging;
static __thread struct stage tls_stage[STAGE_SLOTS];

/* null_config.batch_done: hand back what this completion thread staged. */
static void bench_batch_done(void)
{
	for (unsigned i = 0; i < STAGE_SLOTS && tls_stage[i].t; i++) {
		bench_hand_back(tls_stage[i].t, tls_stage[i].word, tls_stage[i].mask);
		tls_stage[i].t = NULL;
	}
}

static void bench_stage(struct bench_thread *t, unsigned word, unsigned long bit)
{
	unsigned i;

	for (i = 0; i < STAGE_SLOTS && tls_stage[i].t &&
		    (tls_stage[i].t != t || tls_stage[i].word != word); i++)
		;
	if (i == STAGE_SLOTS) {
		bench_batch_done();
		i = 0;
	}
	if (!tls_stage[i].t)
		tls_stage[i] = (struct stage){ .t = t, .word = word, .mask = bit };
	else
		tls_stage[i].mask |= bit;
}

/*
 * Give @bb, ended on another thread than its own, back to @t.  Out of line:
 * end_io's own-thread path then needs no registers saved.
 */
static __attribute__((noinline)) void bench_end_remote(struct bench_thread *t,
						       struct bench_bio *bb)
{
	unsigned idx = (unsigned)(bb - t->slots);
	unsigned long bit = 1UL << (idx % DONE_BITS);

	if (tls_staging)
		bench_stage(t, idx / DONE_BITS, bit);
	else
		bench_hand_back(t, idx / DONE_BITS, bit);
}

/**
 * bench_end_io() - a bio ended: note its latency and give it back to its
 * thread, which reaps it (reap_one()).
 * @bio: the bio.
 *
 * Used when bios come from rq_bio_alloc() (put by reap(), after end_io
 * returned); otherwise bench_end_io_lat() or bench_end_io_plain().
 *
 * Context: the submitting thread (inline completion) or any other.
 */
static void bench_end_io(struct rq_bio *bio)
{
	struct bench_bio *bb = bio->private_data;
	struct bench_thread *t = bb->t;

	if (bb->submit_ns)
		bb->lat_ns = lat_ns(bb->submit_ns, lat_stamp());
	if (current_thread == t) {
		bb->next = t->done_local;
		t->done_local = bb;
		return;
	}
	bench_end_remote(t, bb);
}

/**
 * bench_end_io_plain() - a bio ended, no latency to note and nothing to
 * free: on its own thread, reap it here (check its status, count it, put
 * it on the free list) instead of queueing it for reap(); elsewhere give
 * it back as bench_end_io() does.
 * @bio: the bio.
 *
 * Context: the submitting thread (inline completion) or any other.
 */
static void bench_end_io_plain(struct rq_bio *bio)
{
	struct bench_bio *bb = bio->private_data;
	struct bench_thread *t = bb->t;

	if (current_thread != t) {
		bench_end_remote(t, bb);
		return;
	}
	if (bio->status != RQ_STS_OK)
		t->errors++;
	t->reaped++;
	bb->next = t->free;
	t->free = bb;
}

/*
 * --pin-split: the CPUs the process may use at start; submitter i runs on
 * the i-th of them, the completion threads on those left (none left: not
 * pinned).  Measures the split placement whatever the machine's load.
 */
static cpu_set_t pin_cpus;
static unsigned pin_submitters;  /* 0: no pinning */

/* Pin the calling thread to the CPUs of pin_cpus numbered @from to @to - 1. */
static void pin_range(unsigned from, unsigned to)
{
	cpu_set_t set;
	unsigned k = 0;

	CPU_ZERO(&set);
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, &pin_cpus))
			continue;
		if (k >= from && k < to)
			CPU_SET(c, &set);
		k++;
	}
	if (CPU_COUNT(&set))
		sched_setaffinity(0, sizeof(set), &set);
}

/* null_config.thread_init: a completion thread stages (with or without tcache). */
static void completion_thread_init(void)
{
	tls_staging = true;
	if (pin_submitters && pin_submitters < (unsigned)CPU_COUNT(&pin_cpus))
		pin_range(pin_submitters, CPU_SETSIZE);
}

static void completion_thread_init_notcache(void)
{
	completion_thread_init();
	tcache_off();
}

/*
 * Account one ended bio and put it on the free list (bench_end_io_plain()
 * does the same for what ends on its own thread).  A latency is sampled
 * only while measuring, so a stamp means the sample counts.
 */
static inline void reap_one(struct bench_thread *t, struct bench_bio *bb)
{
	struct rq_bio *bio = bb->bio;

	if (bio->status != RQ_STS_OK)
		t->errors++;
	if (bb->submit_ns) {
		hist_add(&t->hist, bb->lat_ns);
		bb->submit_ns = 0;
	}
	if (t->b->o.bio_alloc) {
		rq_bio_put(bio);
		bb->bio = NULL;
	}
	t->reaped++;
	bb->next = t->free;
	t->free = bb;
}

/**
 * bench_end_io_lat() - a bio ended while latencies are sampled: note its
 * latency; on its own thread reap it here (reap_one(): status, count,
 * histogram, free list), elsewhere give it back as bench_end_io() does.
 * @bio: the bio (preallocated).
 *
 * Context: the submitting thread (inline completion) or any other.
 */
static void bench_end_io_lat(struct rq_bio *bio)
{
	struct bench_bio *bb = bio->private_data;
	struct bench_thread *t = bb->t;

	if (bb->submit_ns)
		bb->lat_ns = lat_ns(bb->submit_ns, lat_stamp());
	if (current_thread != t) {
		bench_end_remote(t, bb);
		return;
	}
	reap_one(t, bb);
}

/*
 * Collect every bio that ended since the last call; return how many (with
 * those bench_end_io_plain() or _lat() reaped in rq_process_completions()).
 */
static uint64_t reap(struct bench_thread *t)
{
	struct bench_bio *bb, *next;
	uint64_t reaped0 = t->reaped;
	bool remote = t->b->o.completion != NULL_COMPLETE_INLINE;

	if (t->b->o.rq_affinity == 2)
		rq_process_completions(); /* what the completion thread left us */
	for (bb = t->done_local, t->done_local = NULL; bb; bb = next) {
		next = bb->next;
		reap_one(t, bb);
	}
	for (unsigned w = 0; w < t->done_words; w++) {
		unsigned long mask;

		/* ended elsewhere, the word is on the completing CPU: a load
		   first would fetch it once to read and once more to write */
		if (!remote && !atomic_load_explicit(&t->done_bits[w], memory_order_relaxed))
			continue;
		mask = atomic_exchange(&t->done_bits[w], 0);
		for (; mask; mask &= mask - 1)
			reap_one(t, &t->slots[w * DONE_BITS + (unsigned)__builtin_ctzl(mask)]);
	}
	return t->reaped - reaped0;
}

static bool ended_remote(void *arg)
{
	struct bench_thread *t = arg;

	for (unsigned w = 0; w < t->done_words; w++)
		if (atomic_load_explicit(&t->done_bits[w], memory_order_relaxed))
			return true;
	return false;
}

/* The calling thread's CPU time (a system call: --cpu-busy only). */
static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/*
 * Wait until at least one bio has ended: poll, then sleep on the futex
 * (rq_affinity 2: in rq_wait_completions(), which polls by itself).
 */
static void wait_completion_now(struct bench_thread *t)
{
	uint64_t reaped0 = t->reaped;
	uint32_t seq;

	/* a completion thread on another CPU hands back a chain every few
	   requests, sooner than a futex round trip: poll first */
	if (t->b->o.rq_affinity != 2 &&
	    null_poll_worth(atomic_load_explicit(&t->peer_cpu, memory_order_relaxed)) &&
	    null_poll(&t->poll_ns, ended_remote, t) && reap(t))
		return;
	/* rq_wait_completions() may itself reap (bench_end_io_plain(), _lat()) */
	while (!reap(t) && t->reaped == reaped0) {
		if (t->b->o.rq_affinity == 2) {
			/* our bios end here: sleep on the library's mailbox (the
			   service thread may end some elsewhere after 1 ms: look
			   at done_bits again then) */
			rq_wait_completions(1000000);
			continue;
		}
		atomic_store(&t->sleeping, true);
		seq = atomic_load(&t->wake_seq);
		atomic_thread_fence(memory_order_seq_cst);
		if (!ended_remote(t)) {
			t->sleeps++;
			syscall(SYS_futex, &t->wake_seq, FUTEX_WAIT_PRIVATE, seq,
				NULL, NULL, 0);
		}
		atomic_store(&t->sleeping, false);
	}
}

/*
 * wait_completion_now(); with --cpu-busy, its CPU time (polling included)
 * is counted apart, so what is left is the submitter's own work.
 */
static void wait_completion(struct bench_thread *t)
{
	uint64_t c0;

	t->waits++;
	if (!t->b->o.cpu_busy) {
		wait_completion_now(t);
		return;
	}
	c0 = thread_cpu_ns();
	wait_completion_now(t);
	t->wait_cpu_ns += thread_cpu_ns() - c0;
}

/* ------------------------------------------------------------- submission */

/* What a phase's submission loop keeps at hand: fixed for the phase. */
struct submit_ctx {
	struct rq_queue *q;
	void *buf;
	uint64_t nr_blocks;
	uint32_t bs;
	uint32_t sectors_per_block;
	enum pattern pattern;
	unsigned op;            /* randread, randwrite: the op of every bio */
	unsigned lat_sample;
	bool lat;               /* stamp latencies (measuring, not --no-lat) */
	bool bio_alloc;
	rq_bio_end_io_t end_io;
};

/*
 * Fill and submit one bio from the free list.  @plain (a constant where
 * it is inlined): preallocated bios and no latency stamps, so neither is
 * looked at per bio; @uniform (a constant too): the pattern is randread or
 * randwrite, one op at uniform offsets.
 */
static inline __attribute__((always_inline)) void
submit_one(struct bench_thread *t, const struct submit_ctx *sc, bool plain, bool uniform)
{
	struct bench_bio *bb = t->free;
	struct rq_bio *bio;
	uint64_t block;
	unsigned op;

	t->free = bb->next;
	if (!plain && sc->bio_alloc) {
		bio = rq_bio_alloc(1);
		if (!bio) {
			fprintf(stderr, "rqbench: rq_bio_alloc failed\n");
			exit(1);
		}
		bb->bio = bio;
	} else {
		bio = bb->bio;
		rq_bio_init(bio, NULL, 1);
	}

	switch (uniform ? PAT_RANDREAD : sc->pattern) {
	case PAT_READ:
	case PAT_WRITE:
		block = t->region_first + t->seq_block;
		if (++t->seq_block == t->region_blocks)
			t->seq_block = 0;
		op = sc->pattern == PAT_READ ? RQ_OP_READ : RQ_OP_WRITE;
		break;
	case PAT_RANDRW:
		block = xrand_below(&t->rng, sc->nr_blocks);
		op = (xrand(&t->rng) >> 63) ? RQ_OP_WRITE : RQ_OP_READ;
		break;
	default:
		block = xrand_below(&t->rng, sc->nr_blocks);
		op = sc->op;
		break;
	}
	bio->op = op;
	bio->iter.sector = block * sc->sectors_per_block;
	rq_bio_add_vec(bio, sc->buf, sc->bs);
	bio->end_io = sc->end_io;
	bio->private_data = bb;

	if (!plain && sc->lat && ++t->lat_tick >= sc->lat_sample) {
		t->lat_tick = 0;
		bb->submit_ns = lat_stamp();
	}
	t->submitted++;
	rq_submit_bio(sc->q, bio);
}

/*
 * Submit @nr bios (UINT64_MAX: until the stop flag), keeping depth in flight,
 * then wait for all of them.  @plain, @uniform as for submit_one().
 */
static inline __attribute__((always_inline)) void
run_loop(struct bench_thread *t, const struct submit_ctx *sc, uint64_t nr, bool plain,
	 bool uniform)
{
	const unsigned batch = t->b->o.batch;
	struct rq_plug plug;
	uint64_t issued = 0;

	for (;;) {
		uint64_t n, max;

		if (issued >= nr ||
		    atomic_load_explicit(&t->b->stop, memory_order_relaxed))
			break;
		if (!t->free && !reap(t)) {
			wait_completion(t);
			continue;
		}
		max = nr - issued < batch ? nr - issued : batch;
		if (batch > 1)
			rq_start_plug(&plug);
		for (n = 0; n < max; n++) {
			if (!t->free) {
				if (batch > 1 || !reap(t))
					break;
			}
			submit_one(t, sc, plain, uniform);
		}
		issued += n;
		t->plugs += n != 0;
		if (batch > 1)
			rq_finish_plug(&plug);
	}
	while (t->submitted != t->reaped) {
		if (!reap(t))
			wait_completion(t);
	}
}

/*
 * One phase: choose the submission loop and end_io once for it (the
 * options are fixed for the run), then count what was reaped.
 */
static void run_phase(struct bench_thread *t, uint64_t nr, bool measuring)
{
	const struct opts *o = &t->b->o;
	struct submit_ctx sc = {
		.q = t->b->q,
		.buf = t->buf,
		.nr_blocks = t->b->nr_blocks,
		.bs = (uint32_t)o->bs,
		.sectors_per_block = (uint32_t)(o->bs >> RQ_SECTOR_SHIFT),
		.pattern = o->pattern,
		.op = o->pattern == PAT_RANDWRITE ? RQ_OP_WRITE : RQ_OP_READ,
		.lat_sample = o->lat_sample,
		.lat = measuring && !o->no_lat,
		.bio_alloc = o->bio_alloc,
	};
	uint64_t reaped0 = t->reaped;

	if (!sc.lat && !sc.bio_alloc) {
		sc.end_io = bench_end_io_plain;
		if (o->pattern == PAT_RANDREAD || o->pattern == PAT_RANDWRITE)
			run_loop(t, &sc, nr, true, true);
		else
			run_loop(t, &sc, nr, true, false);
	} else {
		sc.end_io = sc.bio_alloc ? bench_end_io : bench_end_io_lat;
		run_loop(t, &sc, nr, false, false);
	}
	if (measuring)
		t->completed += t->reaped - reaped0;
}

static uint64_t warmup_ops(const struct opts *o, uint64_t per_thread)
{
	uint64_t w;

	if (o->warmup)
		return o->warmup;
	if (!o->ops)
		w = 20000;
	else
		w = per_thread / 20;
	if (w < 1000)
		w = 1000;
	if (w > 100000)
		w = 100000;
	if (o->completion == NULL_COMPLETE_TIMER && w > 2000)
		w = 2000;
	return w;
}

/*
 * The completion threads' side of a run (thread and timer modes): batches
 * taken and their mean size, how many of them on the submitter's CPU,
 * futex sleeps of the completion threads; the submitters' mean plug (bios
 * per batch issued), their waits for a completion and their futex sleeps.
 */
static void ct_summary(const struct null_stats *s0, const struct null_stats *s1,
		       uint64_t sub_sleeps, uint64_t ops, uint64_t plugs, uint64_t waits)
{
	uint64_t batches = s1->batches - s0->batches;
	uint64_t done = s1->completed - s0->completed;

	printf("; completion: %" PRIu64 " batches of %.1f, %.0f%% colocated, %" PRIu64
	       " moves, %" PRIu64 " sleeps; submitters: plugs of %.1f, %" PRIu64
	       " waits, slept %" PRIu64, batches,
	       batches ? (double)done / batches : 0.0,
	       batches ? 100.0 * (s1->colocated - s0->colocated) / batches : 0.0,
	       s1->moves - s0->moves, s1->sleeps - s0->sleeps,
	       plugs ? (double)ops / plugs : 0.0, waits, sub_sleeps);
}

static void *bench_thread_fn(void *arg)
{
	struct bench_thread *t = arg;
	struct bench *b = t->b;
	uint64_t per_thread, bytes0, cpu0;

	current_thread = t;
	if (!b->o.tcache)
		tcache_off();
	if (pin_submitters && t->idx < (unsigned)CPU_COUNT(&pin_cpus))
		pin_range(t->idx, t->idx + 1);
	per_thread = b->o.ops ? b->o.ops / b->o.threads +
		     (t->idx < b->o.ops % b->o.threads) : UINT64_MAX;

	run_phase(t, warmup_ops(&b->o, per_thread), false);
	pthread_barrier_wait(&b->barrier); /* warmed up */
	pthread_barrier_wait(&b->barrier); /* main took its snapshot */
	bytes0 = thread_alloc_bytes();
	t->sleeps = 0;
	t->plugs = 0;
	t->waits = 0;
	t->wait_cpu_ns = 0;
	cpu0 = b->o.cpu_busy ? thread_cpu_ns() : 0;
	run_phase(t, per_thread, true);
	if (b->o.cpu_busy)
		t->busy_ns = thread_cpu_ns() - cpu0 - t->wait_cpu_ns;
	t->alloc_bytes = thread_alloc_bytes() - bytes0;
	pthread_barrier_wait(&b->barrier); /* done */
	return NULL;
}

/* ------------------------------------------------- the empty request life */

/*
 * --empty: the floor every figure is a ratio to (DESIGN.md, "Performance
 * budget").  Per I/O exactly what any request layer must do and nothing
 * else: take a tag from a bitmap with an atomic read-modify-write, call
 * the "driver" through a function pointer, which ends the "request" by a
 * second indirect call (the completion callback) that frees the tag with
 * another atomic read-modify-write.  Each thread has its own bitmap on its
 * own cache line (one hardware queue per thread, as the mq runs), so
 * threads share nothing and the floor scales with them.  The calls go
 * through volatile pointers so the compiler cannot inline them away.
 */
struct empty_tags {
	_Atomic uint64_t map;          /* bit set: tag in use */
	uint64_t ended;
	void (*end_io)(struct empty_tags *et, unsigned tag);
} __attribute__((aligned(CACHELINE)));

static __attribute__((noinline)) void empty_end_io(struct empty_tags *et, unsigned tag)
{
	atomic_fetch_and_explicit(&et->map, ~(1ull << tag), memory_order_release);
	et->ended++;
}

static __attribute__((noinline)) void empty_queue_rq(struct empty_tags *et, unsigned tag)
{
	void (*volatile end_io)(struct empty_tags *, unsigned) = et->end_io;

	end_io(et, tag);
}

static void (*volatile empty_driver)(struct empty_tags *et, unsigned tag) = empty_queue_rq;

/* One empty life: tag get (compare-and-swap on the bitmap), driver, callback. */
static inline void empty_one(struct empty_tags *et, unsigned depth)
{
	uint64_t m = atomic_load_explicit(&et->map, memory_order_relaxed);
	unsigned tag;

	for (;;) {
		tag = (unsigned)__builtin_ctzll(~m);
		if (tag >= depth) {
			m = atomic_load_explicit(&et->map, memory_order_relaxed);
			continue;
		}
		if (atomic_compare_exchange_weak_explicit(&et->map, &m, m | (1ull << tag),
							  memory_order_acquire,
							  memory_order_relaxed))
			break;
	}
	empty_driver(et, tag);
}

/* @nr empty lives (UINT64_MAX: until the stop flag), checking it every 1024. */
static uint64_t empty_phase(struct bench_thread *t, struct empty_tags *et, uint64_t nr)
{
	unsigned depth = t->b->o.depth < 64 ? t->b->o.depth : 64;
	uint64_t done = 0;

	while (done < nr) {
		uint64_t chunk = nr - done < 1024 ? nr - done : 1024;

		if (atomic_load_explicit(&t->b->stop, memory_order_relaxed))
			break;
		for (uint64_t i = 0; i < chunk; i++)
			empty_one(et, depth);
		done += chunk;
	}
	return done;
}

static void *empty_thread_fn(void *arg)
{
	struct bench_thread *t = arg;
	struct bench *b = t->b;
	struct empty_tags *et;
	uint64_t per_thread, bytes0;

	current_thread = t;
	if (!b->o.tcache)
		tcache_off();
	et = aligned_alloc(CACHELINE, sizeof(*et));
	if (!et) {
		fprintf(stderr, "rqbench: out of memory\n");
		exit(1);
	}
	memset(et, 0, sizeof(*et));
	et->end_io = empty_end_io;
	per_thread = b->o.ops ? b->o.ops / b->o.threads +
		     (t->idx < b->o.ops % b->o.threads) : UINT64_MAX;
	empty_phase(t, et, warmup_ops(&b->o, per_thread));
	pthread_barrier_wait(&b->barrier); /* warmed up */
	pthread_barrier_wait(&b->barrier); /* main took its snapshot */
	bytes0 = thread_alloc_bytes();
	t->completed = empty_phase(t, et, per_thread);
	t->alloc_bytes = thread_alloc_bytes() - bytes0;
	if (et->ended != t->completed + warmup_ops(&b->o, per_thread) || et->map)
		t->errors++;
	pthread_barrier_wait(&b->barrier); /* done */
	free(et);
	return NULL;
}

/* ------------------------------------------------------------------ main */

static void usage(FILE *f)
{
	fprintf(f,
"usage: rqbench [--front mq|sq] [--sched NAME] [--driver null] [--threads N]\n"
"               [--depth N] [--batch N] [--bs BYTES]\n"
"               [--pattern randread|randwrite|read|write|randrw]\n"
"               [--seconds S | --ops N] [--hw-queues N (default: CPUs)]\n"
"               [--completion inline|thread|timer] [--max-sectors-kb N]\n"
"               [--max-segments N] [--nomerges 0|1|2] [--json]\n"
"       rqbench -h|--help | --version\n"
"  more: --queue-depth N (= --depth), --hw-depth N (driver tags per hw queue,\n"
"        default max(64, threads*depth)), --completion-nsec N (timer delay),\n"
"        --capacity BYTES (default 1G), --warmup N (bios per thread),\n"
"        --no-lat (no clock reads), --lat-sample N (time every Nth bio),\n"
"        --bio-alloc (rq_bio_alloc/rq_bio_put per bio), --memory-backed,\n"
"        --tcache (keep jemalloc's thread cache: allocs undercounts),\n"
"        --list-scheds (print the schedulers the queue offers),\n"
"        --sched floor-min|floor-hooks (rqbench's own: a FIFO per hw queue\n"
"        with the required hooks only / plus every hook kyber has, each doing\n"
"        the least; the scheduler contract's floor, doc/benchmarks.md),\n"
"        --cdf (with --json: the latency CDF as \"cdf\": [[ns, fraction], ...]),\n"

"        --trace DIR (blktrace files DIR/rqbench.blktrace.CPU: blkparse -i rqbench),\n"
"        --trace-actions LIST (with --trace: blktrace's -a mask, comma-separated:\n"
"        read,write,flush,sync,queue,requeue,issue,complete,fs,ahead,meta,discard,fua),\n"
"        --empty (no queue: the empty request life, an atomic tag get and put on\n"
"        a bitmap, an indirect driver call and a callback per I/O; the floor),\n"
"        --rq-affinity 0|1|2 (2: a completion thread's batches end on the\n"
"        submitter, which waits in rq_wait_completions()),\n"
"        --ct-placement steer|free (steer, the default: a completion thread\n"
"        moves off the CPU its batches come from; free: the scheduler's choice),\n"
"        --pin-split (submitter i on the i-th CPU allowed, completion threads\n"
"        on the CPUs left: the split placement whatever the load),\n"
"        --cpu-busy (the submitters' CPU time per bio outside their waits for\n"
"        completions: their own work and stalls, whatever the load; costs a\n"
"        system call per wait)\n");
}

enum {
	OPT_FRONT = 256, OPT_SCHED, OPT_DRIVER, OPT_THREADS, OPT_DEPTH, OPT_BATCH,
	OPT_BS, OPT_PATTERN, OPT_SECONDS, OPT_OPS, OPT_HWQ, OPT_COMPLETION,
	OPT_MAXSECT, OPT_MAXSEG, OPT_NOMERGES, OPT_JSON, OPT_HWDEPTH, OPT_CNSEC, OPT_CTPLACE,
	OPT_CAPACITY, OPT_WARMUP, OPT_NOLAT, OPT_LATSAMPLE, OPT_BIOALLOC,
	OPT_MEMORY, OPT_TCACHE, OPT_LIST, OPT_ALLOCSTATS, OPT_CDF, OPT_TRACE, OPT_EMPTY,
	OPT_AFFINITY, OPT_TRACE_ACTIONS, OPT_PINSPLIT, OPT_CPUBUSY,
};

/* Limits of the numeric options, for the parser and the usage errors. */
#define MAX_THREADS 1024
#define MAX_DEPTH 65536
#define MAX_HW_QUEUES 1024
#define MAX_SECONDS 86400.0
#define MAX_NSEC 10000000000ull       /* 10 s */

static const struct option long_opts[] = {
	{ "front", required_argument, NULL, OPT_FRONT },
	{ "sched", required_argument, NULL, OPT_SCHED },
	{ "driver", required_argument, NULL, OPT_DRIVER },
	{ "threads", required_argument, NULL, OPT_THREADS },
	{ "depth", required_argument, NULL, OPT_DEPTH },
	{ "queue-depth", required_argument, NULL, OPT_DEPTH },
	{ "batch", required_argument, NULL, OPT_BATCH },
	{ "bs", required_argument, NULL, OPT_BS },
	{ "pattern", required_argument, NULL, OPT_PATTERN },
	{ "seconds", required_argument, NULL, OPT_SECONDS },
	{ "ops", required_argument, NULL, OPT_OPS },
	{ "hw-queues", required_argument, NULL, OPT_HWQ },
	{ "completion", required_argument, NULL, OPT_COMPLETION },
	{ "max-sectors-kb", required_argument, NULL, OPT_MAXSECT },
	{ "max-segments", required_argument, NULL, OPT_MAXSEG },
	{ "nomerges", required_argument, NULL, OPT_NOMERGES },
	{ "rq-affinity", required_argument, NULL, OPT_AFFINITY },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "hw-depth", required_argument, NULL, OPT_HWDEPTH },
	{ "completion-nsec", required_argument, NULL, OPT_CNSEC },
	{ "ct-placement", required_argument, NULL, OPT_CTPLACE },
	{ "capacity", required_argument, NULL, OPT_CAPACITY },
	{ "warmup", required_argument, NULL, OPT_WARMUP },
	{ "no-lat", no_argument, NULL, OPT_NOLAT },
	{ "lat-sample", required_argument, NULL, OPT_LATSAMPLE },
	{ "bio-alloc", no_argument, NULL, OPT_BIOALLOC },
	{ "memory-backed", no_argument, NULL, OPT_MEMORY },
	{ "tcache", no_argument, NULL, OPT_TCACHE },
	{ "pin-split", no_argument, NULL, OPT_PINSPLIT },
	{ "cpu-busy", no_argument, NULL, OPT_CPUBUSY },
	{ "alloc-stats", no_argument, NULL, OPT_ALLOCSTATS },
	{ "cdf", no_argument, NULL, OPT_CDF },
	{ "list-scheds", no_argument, NULL, OPT_LIST },
	{ "trace", required_argument, NULL, OPT_TRACE },
	{ "trace-actions", required_argument, NULL, OPT_TRACE_ACTIONS },
	{ "empty", no_argument, NULL, OPT_EMPTY },
	PROG_STD_OPTIONS,
	{ NULL, 0, NULL, 0 },
};

static void parse_args(int argc, char **argv, struct opts *o)
{
	int c;

	memset(o, 0, sizeof(*o));
	o->front = "mq";
	o->sched = "none";
	o->driver = "null";
	o->threads = 1;
	o->depth = 32;
	o->batch = 1;
	o->bs = 4096;
	o->pattern = PAT_RANDREAD;
	/* multi-queue as intended: one hw queue per CPU, like a modern device */
	o->hw_queues = (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
	if (!o->hw_queues)
		o->hw_queues = 1;
	o->completion = NULL_COMPLETE_INLINE;
	o->nomerges = -1;
	o->rq_affinity = -1;
	o->lat_sample = 1;
	o->capacity = 1ull << 30;

	prog_init("rqbench", usage);
	while ((c = prog_getopt(argc, argv, long_opts)) != -1) {
		switch (c) {
		case OPT_FRONT: o->front = optarg; break;
		case OPT_SCHED: o->sched = optarg; break;
		case OPT_DRIVER: o->driver = optarg; break;
		case OPT_THREADS:
			o->threads = (unsigned)opt_uint("--threads", optarg, 1, MAX_THREADS);
			break;
		case OPT_DEPTH:
			o->depth = (unsigned)opt_uint("--depth", optarg, 1, MAX_DEPTH);
			break;
		case OPT_BATCH:
			o->batch = (unsigned)opt_uint("--batch", optarg, 1, MAX_DEPTH);
			break;
		case OPT_BS:
			o->bs = opt_size("--bs", optarg, 512, UINT32_MAX);
			if (o->bs % 512)
				prog_usage_error("--bs: %s is not a multiple of 512", optarg);
			break;
		case OPT_PATTERN:
			o->pattern = opt_choice("--pattern", optarg, pattern_names, 5);
			break;
		case OPT_SECONDS:
			o->seconds = opt_seconds("--seconds", optarg, MAX_SECONDS);
			break;
		case OPT_OPS: o->ops = opt_size("--ops", optarg, 1, UINT64_MAX); break;
		case OPT_HWQ:
			o->hw_queues = (unsigned)opt_uint("--hw-queues", optarg, 1, MAX_HW_QUEUES);
			break;
		case OPT_COMPLETION:
			o->completion = opt_choice("--completion", optarg, completion_names, 3);
			break;
		case OPT_MAXSECT:
			o->max_sectors_kb = (unsigned)opt_uint("--max-sectors-kb", optarg, 0,
							       UINT32_MAX / 2);
			break;
		case OPT_MAXSEG:
			o->max_segments = (unsigned)opt_uint("--max-segments", optarg, 0, 65535);
			break;
		case OPT_NOMERGES:
			o->nomerges = (int)opt_uint("--nomerges", optarg, 0, 2);
			break;
		case OPT_AFFINITY:
			o->rq_affinity = (int)opt_uint("--rq-affinity", optarg, 0, 2);
			break;
		case OPT_JSON: o->json = true; break;
		case OPT_HWDEPTH:
			o->hw_depth = (unsigned)opt_uint("--hw-depth", optarg, 0, MAX_DEPTH);
			break;
		case OPT_CTPLACE:
			o->ct_placement = opt_choice("--ct-placement", optarg, placement_names, 2);
			break;
		case OPT_CNSEC:
			o->completion_nsec = opt_uint("--completion-nsec", optarg, 0, MAX_NSEC);
			break;
		case OPT_CAPACITY:
			o->capacity = opt_size("--capacity", optarg, 4096, UINT64_MAX);
			break;
		case OPT_WARMUP: o->warmup = opt_size("--warmup", optarg, 0, UINT64_MAX); break;
		case OPT_NOLAT: o->no_lat = true; break;
		case OPT_LATSAMPLE:
			o->lat_sample = (unsigned)opt_uint("--lat-sample", optarg, 1, UINT32_MAX);
			break;
		case OPT_BIOALLOC: o->bio_alloc = true; break;
		case OPT_MEMORY: o->memory_backed = true; break;
		case OPT_TCACHE: o->tcache = true; break;
		case OPT_PINSPLIT: o->pin_split = true; break;
		case OPT_CPUBUSY: o->cpu_busy = true; break;
		case OPT_ALLOCSTATS: o->tcache = false; break;
		case OPT_LIST: o->list_scheds = true; break;
		case OPT_CDF: o->cdf = true; break;
		case OPT_TRACE: o->trace_dir = optarg; break;
		case OPT_TRACE_ACTIONS: o->trace_actions = optarg; break;
		case OPT_EMPTY: o->empty = true; break;
		}
	}
	prog_no_operands(argc, argv);
	if (strcmp(o->front, "mq") && strcmp(o->front, "sq"))
		prog_usage_error("--front: unknown value '%s' (allowed: mq or sq)", o->front);
	/* the single-queue front end has no "none": noop is its plainest */
	if (!strcmp(o->front, "sq") && !strcmp(o->sched, "none"))
		o->sched = "noop";
	if (strcmp(o->driver, "null"))
		prog_usage_error("--driver: unknown value '%s' (allowed: null)", o->driver);
	if (o->cdf && (!o->json || o->no_lat))
		prog_usage_error("--cdf: needs --json and latency sampling (not --no-lat)");
	if (o->seconds && o->ops)
		prog_usage_error("--seconds, --ops: give one or the other");
	if (!o->seconds && !o->ops)
		o->seconds = 3;
	if (o->capacity < o->bs * o->threads)
		prog_usage_error("--capacity: smaller than --bs times --threads");
	if (o->trace_actions && !o->trace_dir)
		prog_usage_error("--trace-actions: needs --trace");
	if (o->empty && (o->trace_dir || o->list_scheds || o->cdf))
		prog_usage_error("--empty: no queue to trace, list or time (--trace, --list-scheds, --cdf)");
	if (o->empty) {
		/* no queue: name the run so scripts can tell it apart */
		o->front = "empty";
		o->sched = "none";
		o->driver = "none";
		o->no_lat = true;
	}
}

/* Make the device and queue as the options say; exits on failure. */
static void bench_setup(struct bench *b)
{
	struct opts *o = &b->o;
	struct null_config cfg;
	struct rq_queue_limits *lim = &cfg.limits;
	char val[16];
	int ret;

	null_config_default(&cfg);
	cfg.nr_hw_queues = o->hw_queues;
	cfg.hw_queue_depth = o->hw_depth;
	if (!cfg.hw_queue_depth) {
		uint64_t d = (uint64_t)o->threads * o->depth;

		cfg.hw_queue_depth = d < 64 ? 64 : d > 65536 ? 65536 : (unsigned)d;
	}
	cfg.completion = o->completion;
	if (o->completion_nsec)
		cfg.completion_nsec = o->completion_nsec;
	cfg.ct_placement = o->ct_placement;
	cfg.size_bytes = o->capacity - o->capacity % 4096;
	cfg.memory_backed = o->memory_backed;
	cfg.sched = o->sched;
	if (!strcmp(o->front, "sq"))
		cfg.queue_mode = NULL_Q_RQ;
	if (o->pin_split && !sched_getaffinity(0, sizeof(pin_cpus), &pin_cpus))
		pin_submitters = o->threads;
	cfg.thread_init = o->tcache ? completion_thread_init : completion_thread_init_notcache;
	cfg.batch_done = bench_batch_done;

	/* requests may grow to max_sectors_kb (default 1280 KiB, as Linux) */
	lim->max_sectors = o->max_sectors_kb ? o->max_sectors_kb * 2 : 2560;
	lim->max_hw_sectors = lim->max_sectors > 2560 ? lim->max_sectors : 2560;
	lim->max_segments = o->max_segments;

	ret = null_create(&cfg, &b->dev);
	if (ret) {
		fprintf(stderr, "rqbench: cannot create the null device (sched %s): %s\n",
			o->sched, strerror(-ret));
		exit(1);
	}
	b->q = null_queue(b->dev);
	b->nr_blocks = cfg.size_bytes / o->bs;
	if (o->nomerges >= 0) {
		snprintf(val, sizeof(val), "%d", o->nomerges);
		ret = rq_queue_attr_set(b->q, "nomerges", val);
		if (ret) {
			fprintf(stderr, "rqbench: nomerges=%s: %s\n", val, strerror(-ret));
			exit(1);
		}
	}
	if (o->rq_affinity >= 0) {
		snprintf(val, sizeof(val), "%d", o->rq_affinity);
		ret = rq_queue_attr_set(b->q, "rq_affinity", val);
		if (ret) {
			fprintf(stderr, "rqbench: rq_affinity=%s: %s\n", val, strerror(-ret));
			exit(1);
		}
	}
}

/* Print the scheduler names the queue offers, one per line. */
static int list_scheds(struct bench *b)
{
	char buf[512], *tok, *save = NULL;
	int ret;

	ret = rq_queue_attr_get(b->q, "scheduler", buf, sizeof(buf));
	if (ret < 0) {
		fprintf(stderr, "rqbench: reading scheduler: %s\n", strerror(-ret));
		return 1;
	}
	for (tok = strtok_r(buf, " \t\n", &save); tok;
	     tok = strtok_r(NULL, " \t\n", &save)) {
		size_t n = strlen(tok);

		if (tok[0] == '[' && n > 1 && tok[n - 1] == ']') {
			tok[n - 1] = '\0';
			tok++;
		}
		printf("%s\n", tok);
	}
	return 0;
}

/*
 * Bios and requests merged.  The core counts a merge on a plug both as a
 * plug merge and as a back/front merge, so plug_merges is a subset of the
 * others and is reported on its own rather than added in.
 */
static uint64_t merges_of(const struct rq_queue_stats *s)
{
	return s->merges_back + s->merges_front + s->merges_rq;
}

static double elapsed_s(uint64_t t0, uint64_t t1)
{
	return (double)(t1 - t0) / 1e9;
}

int main(int argc, char **argv)
{
	struct bench b;
	struct bench_thread *th;
	struct rq_queue_stats qs0, qs1;
	struct null_stats ns0, ns1;
	struct hist *all;
	uint64_t t0, t1, a0, a1, ops = 0, errors = 0, abytes = 0, sleeps = 0, busy = 0;
	uint64_t plugs = 0, waits = 0;
	double secs, iops;
	unsigned i, j;

	memset(&b, 0, sizeof(b));
	parse_args(argc, argv, &b.o);
	if (!b.o.no_lat)
		lat_clock_init();
	if (!b.o.tcache)
		tcache_off();
	if (!b.o.empty) {
		int ret = floor_sched_register();

		if (ret) {
			fprintf(stderr, "rqbench: registering the floor schedulers: %s\n",
				strerror(-ret));
			return 1;
		}
		bench_setup(&b);
	}
	if (b.o.trace_dir) {
		int ret = b.o.trace_actions ?
				  rq_queue_attr_set(b.q, "trace_actions", b.o.trace_actions) : 0;

		if (ret) {
			fprintf(stderr, "rqbench: --trace-actions %s: %s\n", b.o.trace_actions,
				strerror(-ret));
			exit(1);
		}
		ret = rq_queue_trace_start(b.q, b.o.trace_dir, "rqbench");
		if (ret) {
			fprintf(stderr, "rqbench: --trace %s: %s\n", b.o.trace_dir, strerror(-ret));
			exit(1);
		}
	}
	if (b.o.list_scheds) {
		int ret = list_scheds(&b);

		null_destroy(b.dev);
		floor_sched_unregister();
		return ret;
	}

	if (posix_memalign((void **)&th, CACHELINE, b.o.threads * sizeof(*th)))
		return 1;
	memset(th, 0, b.o.threads * sizeof(*th));
	all = calloc(1, sizeof(*all));
	if (!all)
		return 1;
	pthread_barrier_init(&b.barrier, NULL, b.o.threads + 1);
	for (i = 0; i < b.o.threads; i++) {
		struct bench_thread *t = &th[i];
		uint64_t region = b.nr_blocks / b.o.threads;

		t->b = &b;
		t->idx = i;
		atomic_init(&t->peer_cpu, -1);
		t->rng = 0x9e3779b97f4a7c15ull * (i + 1) ^ 0xd1b54a32d192ed03ull;
		t->region_first = region * i;
		t->region_blocks = region;
		t->slots = calloc(b.o.depth, sizeof(*t->slots));
		t->done_words = (b.o.depth + DONE_BITS - 1) / DONE_BITS;
		t->done_bits = t->done_words == 1 ? &t->done_word0 :
			       calloc(t->done_words, sizeof(*t->done_bits));
		if (posix_memalign(&t->buf, 4096, b.o.bs) || !t->slots || !t->done_bits) {
			fprintf(stderr, "rqbench: out of memory\n");
			return 1;
		}
		memset(t->buf, 0xa5, b.o.bs);
		for (j = 0; j < b.o.depth; j++) {
			struct bench_bio *bb = &t->slots[j];

			bb->t = t;
			bb->bio = &bb->store;
			bb->next = t->free;
			t->free = bb;
		}
		if (pthread_create(&t->thread, NULL, b.o.empty ? empty_thread_fn : bench_thread_fn,
				   t)) {
			fprintf(stderr, "rqbench: cannot start threads\n");
			return 1;
		}
	}

	pthread_barrier_wait(&b.barrier); /* all warmed up and idle */
	memset(&qs0, 0, sizeof(qs0));
	memset(&qs1, 0, sizeof(qs1));
	memset(&ns0, 0, sizeof(ns0));
	memset(&ns1, 0, sizeof(ns1));
	if (!b.o.empty) {
		rq_queue_get_stats(b.q, &qs0, sizeof(qs0));
		null_get_stats(b.dev, &ns0);
	}
	a0 = alloc_count();
	t0 = now_ns();
	pthread_barrier_wait(&b.barrier); /* go */
	if (b.o.seconds) {
		struct timespec ts = {
			.tv_sec = (time_t)b.o.seconds,
			.tv_nsec = (long)((b.o.seconds - (double)(time_t)b.o.seconds) * 1e9),
		};

		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
		atomic_store(&b.stop, true);
	}
	pthread_barrier_wait(&b.barrier); /* done */
	t1 = now_ns();
	a1 = alloc_count();
	if (!b.o.empty) {
		rq_queue_get_stats(b.q, &qs1, sizeof(qs1));
		null_get_stats(b.dev, &ns1);
	}

	for (i = 0; i < b.o.threads; i++) {
		pthread_join(th[i].thread, NULL);
		ops += th[i].completed;
		errors += th[i].errors;
		abytes += th[i].alloc_bytes;
		sleeps += th[i].sleeps;
		busy += th[i].busy_ns;
		plugs += th[i].plugs;
		waits += th[i].waits;
		hist_merge(all, &th[i].hist);
	}
	if (b.o.empty)
		ns1.requests = ops; /* every empty life is one "request" */
	secs = elapsed_s(t0, t1);
	iops = secs > 0 ? (double)ops / secs : 0;

	if (b.o.json) {
		printf("{\"front\":\"%s\",\"sched\":\"%s\",\"driver\":\"%s\","
		       "\"threads\":%u,\"depth\":%u,\"batch\":%u,\"bs\":%" PRIu64 ","
		       "\"pattern\":\"%s\",\"completion\":\"%s\",\"hw_queues\":%u,"
		       "\"ops\":%" PRIu64 ",\"requests\":%" PRIu64 ",\"merges\":%" PRIu64 ","
		       "\"seconds\":%.6f,\"iops\":%.0f,\"ns_per_bio\":%.2f,"
		       "\"lat_ns\":{\"p50\":%" PRIu64 ",\"p99\":%" PRIu64
		       ",\"p999\":%" PRIu64 ",\"max\":%" PRIu64 "},"
		       "\"lat_samples\":%" PRIu64 ",\"plug_merges\":%" PRIu64 ","
		       "\"errors\":%" PRIu64 ",",
		       b.o.front, b.o.sched, b.o.driver, b.o.threads, b.o.depth,
		       b.o.batch, b.o.bs, pattern_names[b.o.pattern],
		       completion_names[b.o.completion], b.o.hw_queues, ops,
		       ns1.requests - ns0.requests, merges_of(&qs1) - merges_of(&qs0),
		       secs, iops, ops ? secs * 1e9 * b.o.threads / ops : 0.0,
		       hist_percentile(all, 50), hist_percentile(all, 99),
		       hist_percentile(all, 99.9), all->max, all->count,
		       qs1.plug_merges - qs0.plug_merges, errors);
		if (b.o.completion != NULL_COMPLETE_INLINE)
			printf("\"ct_batches\":%" PRIu64 ",\"ct_sleeps\":%" PRIu64
			       ",\"ct_colocated\":%" PRIu64 ",\"ct_moves\":%" PRIu64
			       ",\"submitter_sleeps\":%" PRIu64 ",\"submitter_plugs\":%" PRIu64
			       ",\"submitter_waits\":%" PRIu64 ",",
			       ns1.batches - ns0.batches, ns1.sleeps - ns0.sleeps,
			       ns1.colocated - ns0.colocated, ns1.moves - ns0.moves, sleeps,
			       plugs, waits);
		if (b.o.cpu_busy)
			printf("\"submitter_busy_ns\":%.1f,", ops ? (double)busy / ops : 0.0);
		if (b.o.cdf) {
			printf("\"cdf\":");
			hist_cdf_json(stdout, all);
			printf(",");
		}
		if (alloc_stats_ok)
			printf("\"allocs\":%" PRIu64 ",\"alloc_bytes\":%" PRIu64 "}\n",
			       a1 - a0, abytes);
		else
			printf("\"allocs\":null,\"alloc_bytes\":null}\n");
	} else {
		printf("%s/%s null %s: %u thr depth %u batch %u bs %" PRIu64 " %s: "
		       "%.2f M IOPS (%.1f ns/bio/thread), %" PRIu64 " bios, %" PRIu64
		       " requests, %" PRIu64 " merges, %.3f s",
		       b.o.front, b.o.sched, completion_names[b.o.completion],
		       b.o.threads, b.o.depth, b.o.batch, b.o.bs,
		       pattern_names[b.o.pattern], iops / 1e6,
		       ops ? secs * 1e9 * b.o.threads / ops : 0.0, ops,
		       ns1.requests - ns0.requests, merges_of(&qs1) - merges_of(&qs0), secs);
		if (all->count)
			printf("; lat ns p50 %" PRIu64 " p99 %" PRIu64 " p99.9 %" PRIu64
			       " max %" PRIu64, hist_percentile(all, 50),
			       hist_percentile(all, 99), hist_percentile(all, 99.9), all->max);
		if (b.o.completion != NULL_COMPLETE_INLINE)
			ct_summary(&ns0, &ns1, sleeps, ops, plugs, waits);
		if (b.o.cpu_busy)
			printf("; submitters busy %.1f ns/bio", ops ? (double)busy / ops : 0.0);
		if (alloc_stats_ok)
			printf("; allocs %" PRIu64, a1 - a0);
		if (errors)
			printf("; %" PRIu64 " ERRORS", errors);
		printf("\n");
	}

	if (b.o.trace_dir) {
		/* the trace saw the queue's whole life: its counters are the totals */
		struct rq_trace_info ti;
		char cnt[512] = "";

		if (rq_queue_trace_stop(b.q, &ti, sizeof(ti)))
			errors++;
		rq_queue_attr_get(b.q, "counters", cnt, sizeof(cnt));
		fprintf(stderr, "rqbench: trace %s/rqbench: %" PRIu64 " events, %" PRIu64
			" dropped; queue %s", b.o.trace_dir, ti.events, ti.dropped, cnt);
	}
	if (!b.o.empty) {
		null_destroy(b.dev);
		floor_sched_unregister();
	}
	for (i = 0; i < b.o.threads; i++) {
		free(th[i].slots);
		free(th[i].buf);
		if (th[i].done_bits != &th[i].done_word0)
			free(th[i].done_bits);
	}
	free(th);
	free(all);
	pthread_barrier_destroy(&b.barrier);
	return errors ? 1 : 0;
}
