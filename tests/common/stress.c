/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The stress scenario of both front ends (see stress.h).
 *
 * Each bio carries (worker << 24 | serial) as its private data; its end_io
 * counts the end in the worker's ends[serial] and drops the worker's
 * outstanding count.  A worker covers its whole region with writes of a
 * new generation, waits for them, covers it with reads, waits, and
 * compares.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "fixtures.h"
#include "mock_driver.h"
#include "stress.h"

#define MIN_BIO (4u << 10)
#define MAX_VECS 6
#define MAX_BATCH 64
#define WATCHDOG_S 120           /* without a bio ending: only a hung library */

struct worker {
	unsigned idx;
	uint64_t base;                 /* byte offset of the region */
	uint32_t *wbuf, *rbuf;         /* region_bytes each */
	unsigned rng;
	unsigned serial;               /* bios submitted (this thread only) */
	unsigned gen;                  /* last generation fully written */
	unsigned mismatches;           /* read-back errors (this thread only) */
	unsigned alloc_fail;
	bool wait_timeout;
	atomic_uint outstanding;
	atomic_uint bad_status;
	atomic_uchar *ends;            /* per serial: end_io calls */
};

/* The run in progress (one per process). */
static struct {
	const struct stress_config *cfg;
	struct rq_queue *q;
	unsigned max_serials;          /* the ends[] of each worker */
	struct worker *workers;
	atomic_uint workers_done;
	atomic_ulong ended;            /* bios ended, for the watchdog */
	atomic_bool finished;
} run;

static unsigned rnd(struct worker *w)
{
	return fx_xorshift32(&w->rng);
}

/* The 32-bit word at absolute byte offset @off for generation @gen. */
static uint32_t pattern(uint64_t off, unsigned gen)
{
	uint64_t sector = off >> RQ_SECTOR_SHIFT;
	uint32_t x = (uint32_t)(sector * 2654435761u) ^ (gen * 0x9e3779b9u) ^
		     (uint32_t)((off & (RQ_SECTOR_SIZE - 1)) << 20) ^ (uint32_t)(off >> 2);

	x ^= x >> 15;
	x *= 0x2c1b3c6du;
	x ^= x >> 12;
	return x;
}

static void fill_region(struct worker *w, unsigned gen)
{
	for (uint64_t i = 0; i < run.cfg->region_bytes / 4; i++)
		w->wbuf[i] = pattern(w->base + i * 4, gen);
}

static void stress_end_io(struct rq_bio *bio)
{
	uintptr_t v = (uintptr_t)bio->private_data;
	struct worker *w = &run.workers[v >> 24];

	if (bio->status != RQ_STS_OK)
		atomic_fetch_add(&w->bad_status, 1);
	atomic_fetch_add(&w->ends[v & 0xffffff], 1);
	rq_bio_put(bio);
	atomic_fetch_add(&run.ended, 1);
	atomic_fetch_sub(&w->outstanding, 1);
}

/* One bio of @op over [@off, @off + @size) of the region, in 1..MAX_VECS vectors. */
static bool submit_one(struct worker *w, unsigned op, uint8_t *buf, uint32_t off, uint32_t size)
{
	unsigned k = 1 + rnd(w) % MAX_VECS;
	uint32_t left = size;
	uint8_t *p = buf + off;
	struct rq_bio *bio;

	if (k > size / 512)
		k = size / 512;
	bio = rq_bio_alloc(k);
	if (!bio) {
		w->alloc_fail++;
		return false;
	}
	for (unsigned v = 0; v < k; v++) {
		uint32_t len = left;

		if (v < k - 1)
			len = 512 * (1 + rnd(w) % (left / 512 - (k - 1 - v)));
		if (rq_bio_add_vec(bio, p, len)) {
			w->alloc_fail++;
			rq_bio_put(bio);
			return false;
		}
		p += len;
		left -= len;
	}
	bio->op = op;
	bio->iter.sector = (w->base + off) >> RQ_SECTOR_SHIFT;
	bio->iter.size = size;
	bio->end_io = stress_end_io;
	bio->private_data = (void *)(((uintptr_t)w->idx << 24) | w->serial);
	w->serial++;
	atomic_fetch_add(&w->outstanding, 1);
	rq_submit_bio(run.q, bio);
	return true;
}

/*
 * Cover the whole region with bios of @op, in batches of random sizes on a
 * plug.  With mixed_batches, one batch in three goes without a plug, so
 * bios meet queued requests and merge through the scheduler, and one in
 * four in descending order, for front merges.
 */
static bool cover_region(struct worker *w, unsigned op, void *buf)
{
	const struct stress_config *c = run.cfg;
	uint32_t off = 0;

	while (off < c->region_bytes) {
		unsigned n = 1 + rnd(w) % c->max_batch;
		bool plugged = true, reverse = false;
		uint32_t offs[MAX_BATCH], sizes[MAX_BATCH];
		struct rq_plug plug;
		unsigned k;

		if (c->mixed_batches) {
			plugged = rnd(w) % 3 != 0;
			reverse = rnd(w) % 4 == 0;
		}
		for (k = 0; k < n && off < c->region_bytes; k++) {
			uint32_t size = MIN_BIO * (1 + rnd(w) % (c->max_bio / MIN_BIO));

			if (size > c->region_bytes - off)
				size = c->region_bytes - off;
			offs[k] = off;
			sizes[k] = size;
			off += size;
		}
		if (plugged)
			rq_start_plug(&plug);
		for (unsigned i = 0; i < k; i++) {
			unsigned j = reverse ? k - 1 - i : i;

			if (!submit_one(w, op, buf, offs[j], sizes[j])) {
				if (plugged)
					rq_finish_plug(&plug);
				return false;
			}
		}
		if (plugged)
			rq_finish_plug(&plug);
	}
	return true;
}

static bool wait_idle(struct worker *w)
{
	uint64_t end = fixture_now_ms() + run.cfg->wait_ms;

	while (atomic_load(&w->outstanding)) {
		if (fixture_now_ms() > end) {
			w->wait_timeout = true;
			return false;
		}
		fx_poll_pause();
	}
	return true;
}

static void *worker_thread(void *arg)
{
	struct worker *w = arg;
	const uint32_t region = run.cfg->region_bytes;

	while (w->serial + 2 * (region / MIN_BIO) <= run.max_serials &&
	       w->serial < run.cfg->bios_per_thread) {
		unsigned gen = w->gen + 1;

		fill_region(w, gen);
		if (!cover_region(w, RQ_OP_WRITE, w->wbuf) || !wait_idle(w))
			break;
		w->gen = gen;
		memset(w->rbuf, 0xee, region);
		if (!cover_region(w, RQ_OP_READ, w->rbuf) || !wait_idle(w))
			break;
		if (memcmp(w->rbuf, w->wbuf, region))
			w->mismatches++;
	}
	atomic_fetch_add(&run.workers_done, 1);
	return NULL;
}

/*
 * pace_ms() - the run's rhythm (the watchdog's look, the time between two
 * switches): real time the soak spends, never a wait for another thread's
 * state, which the checks observe directly.
 */
static void pace_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/*
 * A hang (a lost wakeup, a switch that never drains) would otherwise sit
 * until meson's timeout: say what is stuck and abort instead.
 */
static void *watchdog_main(void *arg)
{
	unsigned long seen = atomic_load(&run.ended);
	uint64_t since = fixture_now_ms();

	while (!atomic_load(&run.finished)) {
		unsigned long now_ended = atomic_load(&run.ended);

		if (now_ended != seen) {
			seen = now_ended;
			since = fixture_now_ms();
		} else if (fixture_now_ms() > since + WATCHDOG_S * 1000ull) {
			fprintf(stderr, "%s: no bio ended for %u s; %u of %u workers done, "
				"outstanding:", run.cfg->label, WATCHDOG_S,
				atomic_load(&run.workers_done), run.cfg->threads);
			for (unsigned t = 0; t < run.cfg->threads; t++)
				fprintf(stderr, " %u", atomic_load(&run.workers[t].outstanding));
			fprintf(stderr, "\n");
			abort();
		}
		pace_ms(100);
	}
	return NULL;
}

/* Every worker did its share and every bio ended exactly once with OK. */
static void check_workers(void)
{
	for (unsigned t = 0; t < run.cfg->threads; t++) {
		struct worker *w = &run.workers[t];

		assert_false(w->wait_timeout);
		assert_int_equal(w->alloc_fail, 0);
		assert_int_equal(atomic_load(&w->bad_status), 0);
		assert_int_equal(w->mismatches, 0);
		assert_true(w->serial >= run.cfg->bios_per_thread);
		assert_true(w->gen >= 1);
		for (unsigned i = 0; i < w->serial; i++)
			if (atomic_load(&w->ends[i]) != 1)
				fail_msg("thread %u bio %u ended %u times", t, i,
					 (unsigned)atomic_load(&w->ends[i]));
		for (unsigned i = w->serial; i < run.max_serials; i++)
			assert_int_equal(atomic_load(&w->ends[i]), 0);
	}
}

/* Read the whole device, max_bio at a time: each region holds its last generation. */
static void check_device(void)
{
	const struct stress_config *c = run.cfg;
	const uint64_t bytes = (uint64_t)c->threads * c->region_bytes;
	uint8_t *all = malloc(bytes);

	assert_non_null(all);
	memset(all, 0xee, bytes);
	for (uint64_t off = 0; off < bytes; off += c->max_bio) {
		struct mock_io io;

		rq_submit_bio(run.q, mock_bio(&io, RQ_OP_READ, off >> RQ_SECTOR_SHIFT, all + off,
					      c->max_bio));
		mock_wait(&io);
		assert_int_equal(io.status, RQ_STS_OK);
	}
	for (unsigned t = 0; t < c->threads; t++) {
		const uint32_t *r = (const uint32_t *)(all + (uint64_t)t * c->region_bytes);
		const struct worker *w = &run.workers[t];

		for (uint64_t i = 0; i < c->region_bytes / 4; i++)
			if (r[i] != pattern(w->base + i * 4, w->gen))
				fail_msg("region %u word %llu: %08x, want %08x (gen %u)", t,
					 (unsigned long long)i, r[i], pattern(w->base + i * 4, w->gen),
					 w->gen);
	}
	free(all);
}

void stress_run(struct rq_queue *q, const struct stress_config *cfg, struct stress_result *res)
{
	pthread_t *th = calloc(cfg->threads, sizeof(*th)), watchdog;
	unsigned switch_fail = 0, nr_scheds = 0;

	assert_non_null(th);
	while (nr_scheds < STRESS_MAX_SCHEDS && cfg->scheds[nr_scheds])
		nr_scheds++;
	assert_true(nr_scheds >= 1);
	assert_true(cfg->max_batch >= 1 && cfg->max_batch <= MAX_BATCH);
	assert_true(cfg->region_bytes % MIN_BIO == 0 && cfg->max_bio % MIN_BIO == 0);
	memset(res, 0, sizeof(*res));
	memset(&run, 0, sizeof(run));
	run.cfg = cfg;
	run.q = q;
	run.max_serials = cfg->bios_per_thread + 2 * (cfg->region_bytes / MIN_BIO);
	run.workers = calloc(cfg->threads, sizeof(*run.workers));
	assert_non_null(run.workers);
	for (unsigned t = 0; t < cfg->threads; t++) {
		struct worker *w = &run.workers[t];

		w->idx = t;
		w->base = (uint64_t)t * cfg->region_bytes;
		w->rng = cfg->seed * (t + 1);
		w->wbuf = malloc(cfg->region_bytes);
		w->rbuf = malloc(cfg->region_bytes);
		w->ends = calloc(run.max_serials, sizeof(*w->ends));
		assert_non_null(w->wbuf);
		assert_non_null(w->rbuf);
		assert_non_null(w->ends);
	}
	for (unsigned t = 0; t < cfg->threads; t++)
		assert_int_equal(pthread_create(&th[t], NULL, worker_thread, &run.workers[t]), 0);
	assert_int_equal(pthread_create(&watchdog, NULL, watchdog_main, NULL), 0);

	/* round every scheduler at least once, and on while the workers run */
	while ((atomic_load(&run.workers_done) < cfg->threads || res->switches < nr_scheds) &&
	       res->switches < 100000) {
		if (rq_queue_attr_set(q, "scheduler", cfg->scheds[res->switches % nr_scheds]))
			switch_fail++;
		if (cfg->after_switch)
			cfg->after_switch(q, res->switches);
		res->switches++;
		pace_ms(2);
	}
	for (unsigned t = 0; t < cfg->threads; t++)
		pthread_join(th[t], NULL);
	free(th);
	atomic_store(&run.finished, true);
	pthread_join(watchdog, NULL);
	assert_int_equal(switch_fail, 0);

	check_workers();
	for (unsigned t = 0; t < cfg->threads; t++)
		res->bios += run.workers[t].serial;
	check_device();

	rq_queue_get_stats(q, &res->st, sizeof(res->st));
	assert_int_equal(res->st.errors, 0);
	assert_int_equal(res->st.invalid, 0);
	assert_true(res->st.bios >= res->bios);
	print_message("%s: %llu bios, %u switches, %llu requests, %llu resource, merges back %llu "
		      "front %llu rq %llu plug %llu\n", cfg->label, (unsigned long long)res->bios,
		      res->switches, (unsigned long long)res->st.requests,
		      (unsigned long long)res->st.resource, (unsigned long long)res->st.merges_back,
		      (unsigned long long)res->st.merges_front, (unsigned long long)res->st.merges_rq,
		      (unsigned long long)res->st.plug_merges);

	for (unsigned t = 0; t < cfg->threads; t++) {
		free(run.workers[t].wbuf);
		free(run.workers[t].rbuf);
		free(run.workers[t].ends);
	}
	free(run.workers);
	memset(&run, 0, sizeof(run));
}

/* An unsigned from environment variable @name, else @def. */
static unsigned env_unsigned(const char *name, unsigned def)
{
	const char *v = getenv(name);
	char *end;
	unsigned long n;

	if (!v || !*v)
		return def;
	n = strtoul(v, &end, 0);
	if (*end) {
		fprintf(stderr, "%s=%s: not a number\n", name, v);
		abort();
	}
	return (unsigned)n;
}

void stress_soak(struct rq_queue *q, const struct stress_config *cfg, struct stress_result *res)
{
	struct stress_config c = *cfg;
	unsigned seed = env_unsigned("RQ_STRESS_SEED", cfg->seed);
	unsigned seconds = env_unsigned("RQ_STRESS_SECONDS", 0);
	uint64_t end = fixture_now_ms() + (uint64_t)seconds * 1000;
	struct stress_result r;

	printf("%s: RQ_STRESS_SEED=%#x RQ_STRESS_SECONDS=%u; schedulers:", cfg->label, seed,
	       seconds);
	for (unsigned i = 0; i < STRESS_MAX_SCHEDS && cfg->scheds[i]; i++)
		printf(" %s", cfg->scheds[i]);
	printf("\n");
	fflush(stdout);
	memset(res, 0, sizeof(*res));
	for (unsigned round = 0;; round++) {
		c.seed = seed + round;
		printf("%s: run %u, seed %#x\n", cfg->label, round, c.seed);
		fflush(stdout);
		stress_run(q, &c, &r);
		res->bios += r.bios;
		res->switches += r.switches;
		res->st = r.st;
		if (fixture_now_ms() >= end)
			break;
	}
}
