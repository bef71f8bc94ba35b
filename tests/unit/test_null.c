/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The null driver end to end through librequest: every completion mode ends
 * each bio exactly once; the memory backing keeps what was written (several
 * sizes, offsets, multi-vector bios); discard and write-zeroes read back as
 * zeros; blocking mode works; the counters count each request once by op,
 * on one hw queue each or with shared tags; thread and timer completion
 * end in arrival order when one take finds several pushed chains; the
 * completion thread counts its batches and where it took them, and under
 * NULL_CT_STEER moves off its submitter's CPU without staying pinned.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <librequest/mq.h>

#include "null_blk.h"

#define MAX_VECS 4
#define WAIT_NS (10ull * 1000000000ull)

/* A test bio in caller memory that counts its end_io calls. */
struct tbio {
	struct rq_bio bio;
	struct rq_bvec vecs[MAX_VECS];
	atomic_int ends;
	atomic_int *done;   /* shared counter of ended bios */
};

static void tbio_end_io(struct rq_bio *bio)
{
	struct tbio *tb = bio->private_data;

	atomic_fetch_add(&tb->ends, 1);
	atomic_fetch_add(tb->done, 1);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* Wait (bounded) until *@done reaches @want. */
static void wait_for(atomic_int *done, int want)
{
	uint64_t end = mono_ns() + WAIT_NS;

	while (atomic_load(done) < want && mono_ns() < end)
		sched_yield();
	assert_int_equal(atomic_load(done), want);
}

static void tbio_prep(struct tbio *tb, atomic_int *done, unsigned op, uint64_t sector)
{
	memset(tb, 0, sizeof(*tb));
	rq_bio_init(&tb->bio, tb->vecs, MAX_VECS);
	tb->bio.op = op;
	tb->bio.iter.sector = sector;
	tb->bio.end_io = tbio_end_io;
	tb->bio.private_data = tb;
	tb->done = done;
}

/* Submit one bio and wait for it; returns its status. */
static rq_status_t tbio_sync(struct rq_queue *q, struct tbio *tb)
{
	atomic_int *done = tb->done;
	int before = atomic_load(done);

	rq_submit_bio(q, &tb->bio);
	wait_for(done, before + 1);
	assert_int_equal(atomic_load(&tb->ends), 1);
	return tb->bio.status;
}

/* Data-less op of @bytes at @sector. */
static rq_status_t op_sync(struct rq_queue *q, unsigned op, uint64_t sector,
			   uint32_t bytes)
{
	atomic_int done = 0;
	struct tbio tb;

	tbio_prep(&tb, &done, op, sector);
	tb.bio.iter.size = bytes;
	return tbio_sync(q, &tb);
}

/* Read or write @len bytes of @buf at @sector, split over @nvec vectors. */
static rq_status_t rw_sync(struct rq_queue *q, unsigned op, uint64_t sector,
			   char *buf, uint32_t len, unsigned nvec)
{
	atomic_int done = 0;
	struct tbio tb;
	uint32_t off = 0;
	unsigned i;

	tbio_prep(&tb, &done, op, sector);
	for (i = 0; i < nvec; i++) {
		/* uneven 512-multiples; the last vector takes the rest */
		uint32_t part = i + 1 < nvec ? ((len / nvec) & ~511u) + (i & 1) * 512 : len - off;

		if (part > len - off)
			part = len - off;
		if (!part)
			continue;
		assert_int_equal(rq_bio_add_vec(&tb.bio, buf + off, part), 0);
		off += part;
	}
	assert_int_equal(off, len);
	return tbio_sync(q, &tb);
}

static struct null_dev *make_dev(enum null_completion mode, bool memory,
				 bool blocking)
{
	struct null_config cfg;
	struct null_dev *dev = NULL;

	null_config_default(&cfg);
	cfg.completion = mode;
	cfg.memory_backed = memory;
	cfg.blocking = blocking;
	cfg.size_bytes = 64ull << 20;
	cfg.sched = "none";
	cfg.limits.max_hw_sectors = 2560;
	cfg.limits.max_sectors = 2560;
	if (mode == NULL_COMPLETE_TIMER)
		cfg.completion_nsec = 20000;
	if (blocking)
		cfg.blocking_nsec = 1000;
	assert_int_equal(null_create(&cfg, &dev), 0);
	assert_non_null(dev);
	return dev;
}

/* ------------------------------------------------------- exactly once */

#define N_BIOS 3000

static void run_exactly_once(enum null_completion mode, bool blocking)
{
	static struct tbio bios[N_BIOS];
	static char buf[4096];
	struct null_dev *dev = make_dev(mode, false, blocking);
	struct rq_queue *q = null_queue(dev);
	struct null_stats st;
	atomic_int done = 0;
	struct rq_plug plug;
	int i;

	for (i = 0; i < N_BIOS; i++) {
		tbio_prep(&bios[i], &done, i & 1 ? RQ_OP_WRITE : RQ_OP_READ,
			  (uint64_t)(i * 37 % 16384) * 8);
		/* random-looking offsets: little merging */
		rq_bio_add_vec(&bios[i].bio, buf, sizeof(buf));
		if (i % 64 == 0)
			rq_start_plug(&plug);
		rq_submit_bio(q, &bios[i].bio);
		if (i % 64 == 63 || i == N_BIOS - 1)
			rq_finish_plug(&plug);
	}
	wait_for(&done, N_BIOS);
	for (i = 0; i < N_BIOS; i++) {
		assert_int_equal(atomic_load(&bios[i].ends), 1);
		assert_int_equal(bios[i].bio.status, RQ_STS_OK);
	}
	null_get_stats(dev, &st);
	assert_true(st.requests >= 1 && st.requests <= N_BIOS);
	assert_int_equal(st.requests, st.completed);
	assert_int_equal(st.bytes, (uint64_t)N_BIOS * sizeof(buf));
	null_destroy(dev);

	/* nothing ends twice after teardown either */
	for (i = 0; i < N_BIOS; i++)
		assert_int_equal(atomic_load(&bios[i].ends), 1);
}

static void test_inline_once(void **state)
{
	run_exactly_once(NULL_COMPLETE_INLINE, false);
}

static void test_thread_once(void **state)
{
	run_exactly_once(NULL_COMPLETE_THREAD, false);
}

static void test_timer_once(void **state)
{
	run_exactly_once(NULL_COMPLETE_TIMER, false);
}

/* The timer mode really waits completion_nsec. */
static void test_timer_delay(void **state)
{
	static char buf[4096];
	struct null_config cfg;
	struct null_dev *dev;
	uint64_t t0, t1;

	null_config_default(&cfg);
	cfg.completion = NULL_COMPLETE_TIMER;
	cfg.completion_nsec = 2000000; /* 2 ms */
	cfg.sched = "none";
	assert_int_equal(null_create(&cfg, &dev), 0);
	/* a read: an empty flush without a write cache never reaches us */
	t0 = mono_ns();
	assert_int_equal(rw_sync(null_queue(dev), RQ_OP_READ, 0, buf, sizeof(buf), 1),
			 RQ_STS_OK);
	t1 = mono_ns();
	assert_true(t1 - t0 >= 2000000);
	null_destroy(dev);
}

/* ------------------------------------------------------ memory backing */

static void fill_pattern(char *buf, size_t len, unsigned seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		buf[i] = (char)(i * 31 + seed * 7 + (i >> 9));
}

static void run_readback(enum null_completion mode)
{
	static const uint32_t sizes[] = { 512, 4096, 4608, 8192, 65536, 200704, 1048576 };
	static const uint64_t sectors[] = { 0, 7, 8, 1023, 4096 + 3, 131071 - 2048 };
	struct null_dev *dev = make_dev(mode, true, false);
	struct rq_queue *q = null_queue(dev);
	char *wbuf = malloc(1 << 20), *rbuf = malloc(1 << 20);
	unsigned si, oi, nvec, seed = 1;

	assert_non_null(wbuf);
	assert_non_null(rbuf);
	for (si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
		for (oi = 0; oi < sizeof(sectors) / sizeof(sectors[0]); oi++) {
			uint32_t len = sizes[si];

			nvec = 1 + (si + oi) % MAX_VECS;
			if (nvec > len / 512)
				nvec = len / 512;
			fill_pattern(wbuf, len, seed++);
			memset(rbuf, 0x5a, len);
			assert_int_equal(rw_sync(q, RQ_OP_WRITE, sectors[oi], wbuf,
						 len, nvec), RQ_STS_OK);
			/* read back with a different vector layout */
			assert_int_equal(rw_sync(q, RQ_OP_READ, sectors[oi], rbuf, len,
						 1 + (nvec % MAX_VECS)), RQ_STS_OK);
			assert_memory_equal(wbuf, rbuf, len);
		}
	}
	free(wbuf);
	free(rbuf);
	null_destroy(dev);
}

static void test_readback_inline(void **state)
{
	run_readback(NULL_COMPLETE_INLINE);
}

static void test_readback_thread(void **state)
{
	run_readback(NULL_COMPLETE_THREAD);
}

/* Never written: reads as zeros without allocating pages. */
static void test_unwritten_zero(void **state)
{
	struct null_dev *dev = make_dev(NULL_COMPLETE_INLINE, true, false);
	static char buf[16384], zero[16384];
	struct null_stats st;

	memset(buf, 0x77, sizeof(buf));
	assert_int_equal(rw_sync(null_queue(dev), RQ_OP_READ, 4096, buf,
				 sizeof(buf), 2), RQ_STS_OK);
	assert_memory_equal(buf, zero, sizeof(buf));
	null_get_stats(dev, &st);
	assert_int_equal(st.pages, 0);
	null_destroy(dev);
}

/* Write 32 KiB, zero a middle range with @op, check zeros and the rest. */
static void run_zeroing(unsigned op, uint64_t zsector, uint32_t zbytes)
{
	struct null_dev *dev = make_dev(NULL_COMPLETE_INLINE, true, false);
	struct rq_queue *q = null_queue(dev);
	static char wbuf[32768], rbuf[32768];
	const uint64_t base = 64; /* sector of the 32 KiB area (page aligned) */
	struct null_stats st0, st1;
	uint64_t zoff = (zsector - base) << RQ_SECTOR_SHIFT;
	uint32_t i;

	fill_pattern(wbuf, sizeof(wbuf), 99);
	assert_int_equal(rw_sync(q, RQ_OP_WRITE, base, wbuf, sizeof(wbuf), 3), RQ_STS_OK);
	null_get_stats(dev, &st0);
	assert_int_equal(st0.pages, 8);

	assert_int_equal(op_sync(q, op, zsector, zbytes), RQ_STS_OK);
	assert_int_equal(rw_sync(q, RQ_OP_READ, base, rbuf, sizeof(rbuf), 1), RQ_STS_OK);
	for (i = 0; i < sizeof(rbuf); i++) {
		if (i >= zoff && i < zoff + zbytes)
			assert_int_equal(rbuf[i], 0);
		else
			assert_int_equal(rbuf[i], wbuf[i]);
	}
	null_get_stats(dev, &st1);
	/* whole pages inside the range were given back */
	assert_true(st1.pages <= st0.pages);
	if (zoff % 4096 == 0 && zbytes >= 8192)
		assert_true(st1.pages <= st0.pages - zbytes / 4096 + 1);
	null_destroy(dev);
}

static void test_discard(void **state)
{
	run_zeroing(RQ_OP_DISCARD, 64 + 8, 16384);  /* aligned pages */
	run_zeroing(RQ_OP_DISCARD, 64 + 3, 5120);   /* partial pages */
}

static void test_write_zeroes(void **state)
{
	run_zeroing(RQ_OP_WRITE_ZEROES, 64 + 16, 8192);
	run_zeroing(RQ_OP_WRITE_ZEROES, 64 + 1, 12800);
}

/* With a volatile write cache the flush reaches the driver, which ends it OK. */
static void test_flush(void **state)
{
	struct null_config cfg;
	struct null_dev *dev;
	struct null_stats st;

	null_config_default(&cfg);
	cfg.completion = NULL_COMPLETE_THREAD;
	cfg.sched = "none";
	cfg.limits.features = RQ_FEAT_WRITE_CACHE;
	assert_int_equal(null_create(&cfg, &dev), 0);
	assert_int_equal(op_sync(null_queue(dev), RQ_OP_FLUSH, 0, 0), RQ_STS_OK);
	null_get_stats(dev, &st);
	assert_int_equal(st.flushes, 1);
	null_destroy(dev);
}

/* ------------------------------------------------------------ blocking */

struct blk_arg {
	struct rq_queue *q;
	unsigned first;
	struct tbio *bios;
	atomic_int *done;
};

#define N_BLOCKING 400

static void *blocking_submitter(void *p)
{
	struct blk_arg *a = p;
	static char buf[4096];
	unsigned i;

	for (i = a->first; i < N_BLOCKING; i += 2) {
		tbio_prep(&a->bios[i], a->done, RQ_OP_WRITE, (uint64_t)i * 8);
		rq_bio_add_vec(&a->bios[i].bio, buf, sizeof(buf));
		rq_submit_bio(a->q, &a->bios[i].bio);
	}
	return NULL;
}

static void test_blocking(void **state)
{
	static struct tbio bios[N_BLOCKING];
	struct null_dev *dev = make_dev(NULL_COMPLETE_INLINE, false, true);
	struct blk_arg args[2];
	pthread_t th[2];
	atomic_int done = 0;
	struct null_stats st;
	int i;

	for (i = 0; i < 2; i++) {
		args[i] = (struct blk_arg){ null_queue(dev), i, bios, &done };
		assert_int_equal(pthread_create(&th[i], NULL, blocking_submitter,
						&args[i]), 0);
	}
	for (i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	wait_for(&done, N_BLOCKING);
	for (i = 0; i < N_BLOCKING; i++)
		assert_int_equal(atomic_load(&bios[i].ends), 1);
	null_get_stats(dev, &st);
	assert_int_equal(st.requests, st.completed);
	null_destroy(dev);
}

/* ------------------------------------------------------ counters by op */

#define N_EACH 40 /* bios of each op per submitter */

struct op_arg {
	struct rq_queue *q;
	int cpu;            /* -1: do not pin */
	uint64_t first;     /* first sector of this submitter's area */
};

/*
 * One submitter (pinned to @cpu, so two of them use both hw queues): per
 * round a 4 KiB read, an 8 KiB write, a flush, a 16 KiB discard and a
 * 12 KiB write-zeroes, each waited for.
 */
static void *op_submitter(void *p)
{
	struct op_arg *a = p;
	static __thread char buf[8192];
	uint64_t sector = a->first;
	int i;

	if (a->cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(a->cpu, &set);
		pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	}
	for (i = 0; i < N_EACH; i++, sector += 64) {
		assert_int_equal(rw_sync(a->q, RQ_OP_READ, sector, buf, 4096, 1), RQ_STS_OK);
		assert_int_equal(rw_sync(a->q, RQ_OP_WRITE, sector + 8, buf, 8192, 2), RQ_STS_OK);
		assert_int_equal(op_sync(a->q, RQ_OP_FLUSH, 0, 0), RQ_STS_OK);
		assert_int_equal(op_sync(a->q, RQ_OP_DISCARD, sector + 24, 16384), RQ_STS_OK);
		assert_int_equal(op_sync(a->q, RQ_OP_WRITE_ZEROES, sector + 40, 12288), RQ_STS_OK);
	}
	return NULL;
}

/*
 * null_get_stats() counts each request once by its op, bytes for reads
 * and writes only, and as many completions as requests: inline (queue_rq's
 * plain path) and on the completion thread, with a hw queue per submitter
 * and with tags shared by the hw queues (a request may come through either,
 * so the hw queue queue_rq remembers in it must follow).
 */
static void run_counts(enum null_completion mode, unsigned flags)
{
	struct null_config cfg;
	struct null_dev *dev;
	struct null_stats st;
	struct op_arg args[2];
	pthread_t th[2];
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	const uint64_t n = 2 * N_EACH;
	int i;

	null_config_default(&cfg);
	cfg.completion = mode;
	cfg.nr_hw_queues = 2;
	cfg.flags = flags;
	cfg.sched = "none";
	cfg.size_bytes = 64ull << 20;
	cfg.limits.features = RQ_FEAT_WRITE_CACHE; /* flushes reach the driver */
	assert_int_equal(null_create(&cfg, &dev), 0);
	assert_int_equal(rq_queue_attr_set(null_queue(dev), "nomerges", "2"), 0);
	for (i = 0; i < 2; i++) {
		args[i] = (struct op_arg){ null_queue(dev), ncpu > 1 ? i : -1,
					   (uint64_t)i * 65536 };
		assert_int_equal(pthread_create(&th[i], NULL, op_submitter, &args[i]), 0);
	}
	for (i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	null_get_stats(dev, &st);
	assert_int_equal(st.reads, n);
	assert_int_equal(st.writes, n);
	assert_int_equal(st.flushes, n);
	assert_int_equal(st.discards, n);
	assert_int_equal(st.write_zeroes, n);
	assert_int_equal(st.requests, 5 * n);
	assert_int_equal(st.completed, st.requests);
	assert_int_equal(st.bytes, n * (4096 + 8192));
	assert_int_equal(st.busy, 0);
	null_destroy(dev);
}

static void test_counts_inline(void **state)
{
	run_counts(NULL_COMPLETE_INLINE, 0);
	run_counts(NULL_COMPLETE_INLINE, RQ_TAG_SET_SHARED_TAGS);
}

static void test_counts_thread(void **state)
{
	run_counts(NULL_COMPLETE_THREAD, 0);
	run_counts(NULL_COMPLETE_THREAD, RQ_TAG_SET_SHARED_TAGS);
}

/* ------------------------------------------------ completion placement */

#define PL_DEPTH 16 /* bios per round, one plug: one push per round */

/* The completion thread's affinity when it started, and what it saw since. */
static cpu_set_t pl_mask0;
static atomic_int pl_last_cpu;
static atomic_int pl_apart;     /* batches ended off CPU 0 */
static atomic_bool pl_mask_changed;
static atomic_bool pl_ready;    /* pl_init ran */
static bool pl_pin;     /* pl_init pins the thread to CPU 0 (else only puts it there) */

/* thread_init: go to CPU 0, the submitter's, pinned there or not. */
static void pl_init(void)
{
	cpu_set_t one;

	sched_getaffinity(0, sizeof(pl_mask0), &pl_mask0);
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	sched_setaffinity(0, sizeof(one), &one);
	if (!pl_pin)
		sched_setaffinity(0, sizeof(pl_mask0), &pl_mask0);
	atomic_store(&pl_ready, true);
}

/* batch_done: where the thread is, and whether its mask is still its own. */
static void pl_batch_done(void)
{
	cpu_set_t m;

	atomic_store(&pl_last_cpu, sched_getcpu());
	if (atomic_load(&pl_last_cpu) != 0)
		atomic_fetch_add(&pl_apart, 1);
	sched_getaffinity(0, sizeof(m), &m);
	if (!pl_pin && !CPU_EQUAL(&m, &pl_mask0))
		atomic_store(&pl_mask_changed, true);
}

static struct null_dev *pl_make_dev(enum null_ct_placement placement, bool pin)
{
	struct null_config cfg;
	struct null_dev *dev = NULL;

	pl_pin = pin;
	atomic_store(&pl_mask_changed, false);
	atomic_store(&pl_ready, false);
	atomic_store(&pl_apart, 0);
	null_config_default(&cfg);
	cfg.completion = NULL_COMPLETE_THREAD;
	cfg.ct_placement = placement;
	cfg.sched = "none";
	cfg.size_bytes = 64ull << 20;
	cfg.thread_init = pl_init;
	cfg.batch_done = pl_batch_done;
	assert_int_equal(null_create(&cfg, &dev), 0);
	assert_int_equal(rq_queue_attr_set(null_queue(dev), "nomerges", "2"), 0);
	while (!atomic_load(&pl_ready))
		sched_yield();
	return dev;
}

/* @rounds rounds of PL_DEPTH reads under one plug, each waited for. */
static void pl_rounds(struct null_dev *dev, unsigned rounds)
{
	static struct tbio bios[PL_DEPTH];
	static char buf[4096];
	atomic_int done = 0;
	struct rq_plug plug;
	unsigned r, i;

	for (r = 0; r < rounds; r++) {
		rq_start_plug(&plug);
		for (i = 0; i < PL_DEPTH; i++) {
			tbio_prep(&bios[i], &done, RQ_OP_READ, (uint64_t)i * 64);
			rq_bio_add_vec(&bios[i].bio, buf, sizeof(buf));
			rq_submit_bio(null_queue(dev), &bios[i].bio);
		}
		rq_finish_plug(&plug);
		wait_for(&done, (int)((r + 1) * PL_DEPTH));
	}
}

/* Pin the calling thread to CPU 0; @old receives its mask. */
static void pl_pin_self(cpu_set_t *old)
{
	cpu_set_t one;

	sched_getaffinity(0, sizeof(*old), old);
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
}

/*
 * The submitter and the completion thread both pinned to CPU 0: every
 * round is one push and one batch (of PL_DEPTH), every batch is taken on
 * the submitter's CPU, and a pinned thread is never moved, steered or not.
 */
static void test_placement_pinned(void **state)
{
	static const enum null_ct_placement modes[] = { NULL_CT_STEER, NULL_CT_FREE };
	const unsigned rounds = 200;
	struct null_stats st;
	cpu_set_t old;

	pl_pin_self(&old);
	for (unsigned m = 0; m < 2; m++) {
		struct null_dev *dev = pl_make_dev(modes[m], true);

		pl_rounds(dev, rounds);
		null_get_stats(dev, &st);
		assert_int_equal(st.completed, rounds * PL_DEPTH);
		assert_int_equal(st.batches, rounds);
		assert_int_equal(st.colocated, rounds);
		assert_int_equal(st.moves, 0);
		assert_true(st.sleeps <= rounds + 1);
		assert_int_equal(atomic_load(&pl_last_cpu), 0);
		null_destroy(dev);
	}
	sched_setaffinity(0, sizeof(old), &old);
}

/* ------------------------------------------- arrival order across chains */

#define ORD_CHAINS 4
#define ORD_PER_CHAIN 6
#define ORD_N (ORD_CHAINS * ORD_PER_CHAIN)

static atomic_bool ord_go;       /* the completion thread may start */
static atomic_int ord_next;      /* ends seen so far */
static int ord_seen[ORD_N];      /* ord_seen[k]: index of the k-th bio ended */
static struct tbio ord_bios[ORD_N];

/* thread_init: hold the completion thread until every chain is pushed. */
static void ord_init(void)
{
	uint64_t end = mono_ns() + WAIT_NS;

	while (!atomic_load(&ord_go) && mono_ns() < end)
		sched_yield();
}

static void ord_end_io(struct rq_bio *bio)
{
	struct tbio *tb = bio->private_data;
	int k = atomic_fetch_add(&ord_next, 1);

	if (k < ORD_N)
		ord_seen[k] = (int)(tb - ord_bios);
	atomic_fetch_add(tb->done, 1);
}

/*
 * ORD_CHAINS plugs of ORD_PER_CHAIN reads each, pushed while the
 * completion thread is held, so one take finds every chain on the stack
 * (newest first): the thread and timer modes still end them in arrival
 * order, chain after chain and within each chain.
 */
static void run_order_chains(enum null_completion mode)
{
	struct tbio *bios = ord_bios;
	static char buf[4096];
	struct null_config cfg;
	struct null_dev *dev = NULL;
	atomic_int done = 0;
	struct rq_plug plug;
	int i;

	atomic_store(&ord_go, false);
	atomic_store(&ord_next, 0);
	null_config_default(&cfg);
	cfg.completion = mode;
	cfg.completion_nsec = 1000;
	cfg.sched = "none";
	cfg.size_bytes = 64ull << 20;
	cfg.thread_init = ord_init;
	assert_int_equal(null_create(&cfg, &dev), 0);
	assert_int_equal(rq_queue_attr_set(null_queue(dev), "nomerges", "2"), 0);
	for (i = 0; i < ORD_N; i++) {
		tbio_prep(&bios[i], &done, RQ_OP_READ, (uint64_t)i * 64);
		rq_bio_add_vec(&bios[i].bio, buf, sizeof(buf));
		bios[i].bio.end_io = ord_end_io;
		if (i % ORD_PER_CHAIN == 0)
			rq_start_plug(&plug);
		rq_submit_bio(null_queue(dev), &bios[i].bio);
		if (i % ORD_PER_CHAIN == ORD_PER_CHAIN - 1)
			rq_finish_plug(&plug);
	}
	atomic_store(&ord_go, true);
	wait_for(&done, ORD_N);
	for (i = 0; i < ORD_N; i++)
		assert_int_equal(ord_seen[i], i);
	null_destroy(dev);
}

static void test_order_chains_thread(void **state)
{
	run_order_chains(NULL_COMPLETE_THREAD);
}

static void test_order_chains_timer(void **state)
{
	run_order_chains(NULL_COMPLETE_TIMER);
}

/* Runnable threads on the machine (/proc/loadavg), -1 if unknown. */
static long pl_runnable(void)
{
	char buf[128] = "";
	FILE *f = fopen("/proc/loadavg", "r");
	char *p;

	if (!f)
		return -1;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = '\0';
	fclose(f);
	p = strchr(buf, '/');
	while (p && p > buf && p[-1] >= '0' && p[-1] <= '9')
		p--;
	return p ? strtol(p, NULL, 10) : -1;
}

/*
 * The completion thread starts on its submitter's CPU 0, not pinned.
 * NULL_CT_FREE never moves it.  NULL_CT_STEER moves it off CPU 0 as soon
 * as a CPU is free, and the batch it moved for ends on another CPU; its
 * mask is its own again at every batch (never pinned).  With nothing
 * moved, a machine seen busy while the test ran (more runnable threads
 * than CPUs) skips the steered half; a quiet one fails it.
 */
static void test_placement_steer(void **state)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN), runnable = pl_runnable(), r;
	uint64_t end = mono_ns() + 3000000000ull;
	struct null_dev *dev;
	struct null_stats st;
	cpu_set_t old;

	if (ncpu < 2)
		skip();
	/* each device first: its thread would inherit the pinned mask */
	dev = pl_make_dev(NULL_CT_FREE, false);
	pl_pin_self(&old);
	pl_rounds(dev, 200);
	null_get_stats(dev, &st);
	assert_int_equal(st.moves, 0);
	null_destroy(dev);

	sched_setaffinity(0, sizeof(old), &old);
	dev = pl_make_dev(NULL_CT_STEER, false);
	pl_pin_self(&old);
	if (!CPU_ISSET(0, &pl_mask0) || CPU_COUNT(&pl_mask0) < 2) {
		null_destroy(dev);
		sched_setaffinity(0, sizeof(old), &old);
		skip();
	}
	do {
		pl_rounds(dev, 50);
		null_get_stats(dev, &st);
		r = pl_runnable();
		runnable = r > runnable ? r : runnable; /* the busiest look */
	} while (!st.moves && mono_ns() < end);
	sched_setaffinity(0, sizeof(old), &old);
	assert_false(atomic_load(&pl_mask_changed));
	if (!st.moves && runnable > ncpu) {
		null_destroy(dev);
		skip(); /* a busy machine: maybe never a CPU to steer to */
	}
	assert_true(st.moves >= 1);
	assert_true(atomic_load(&pl_apart) >= 1);
	null_destroy(dev);
}

/* ---------------------------------------------------------- config */

static void test_bad_config(void **state)
{
	struct null_config cfg;
	struct null_dev *dev = NULL;

	null_config_default(&cfg);
	cfg.blocksize = 1000;
	assert_int_equal(null_create(&cfg, &dev), -EINVAL);
	null_config_default(&cfg);
	cfg.sched = "no-such-scheduler";
	assert_true(null_create(&cfg, &dev) < 0);
	assert_int_equal(null_create(NULL, &dev), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_inline_once),
		cmocka_unit_test(test_thread_once),
		cmocka_unit_test(test_timer_once),
		cmocka_unit_test(test_timer_delay),
		cmocka_unit_test(test_readback_inline),
		cmocka_unit_test(test_readback_thread),
		cmocka_unit_test(test_unwritten_zero),
		cmocka_unit_test(test_discard),
		cmocka_unit_test(test_write_zeroes),
		cmocka_unit_test(test_flush),
		cmocka_unit_test(test_blocking),
		cmocka_unit_test(test_counts_inline),
		cmocka_unit_test(test_counts_thread),
		cmocka_unit_test(test_order_chains_thread),
		cmocka_unit_test(test_order_chains_timer),
		cmocka_unit_test(test_placement_pinned),
		cmocka_unit_test(test_placement_steer),
		cmocka_unit_test(test_bad_config),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
