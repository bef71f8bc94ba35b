/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Scheduler conformance over the single-queue front end: the same scenarios
 * for every single-queue scheduler.
 *
 * Usage: test_sq_conformance <scheduler>...   ("noop", "deadline", "cfq")
 *
 * Each named scheduler that is registered gets the whole suite; names that
 * are not registered are reported and skipped (exit 77 when none is).
 *
 *  - every bio ends exactly once, with the status the device gave it (or
 *    the one the library gives an invalid bio, before any driver sees it);
 *  - every request the device sees respects max_sectors, max_segments,
 *    max_discard_sectors and max_write_zeroes_sectors, and its data walk
 *    adds up to its size;
 *  - merges happen where they are allowed (contiguous, same op and
 *    priority, within the limits) and never where they are forbidden
 *    (NOMERGE, other op, other priority, past max_sectors);
 *  - the mixed workload of the multi-queue suite from 2 threads, with the
 *    scheduler chosen at creation or switched to, leaves the memory-backed
 *    device equal to the threads' shadow copies.
 *
 * None of this depends on time, but a scheduler may wait for time to pass
 * (cfq idles, slices expire): the virtual clock ticks along with real time
 * during the suite (sq_clock_ticker).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fixtures.h"
#include "sq_driver.h"

static const char *sched_name = "noop";

/* Limits of the conformance queue. */
#define MEM_BYTES (8u << 20)
#define MAX_SECTORS 64u        /* 32 KiB */
#define MAX_SEGMENTS 8u
#define MAX_DISCARD 128u
#define MAX_WZ 96u

static struct sq_dev *make_dev(const char *create_with, enum sq_mode mode, unsigned depth,
			       bool driver_lock)
{
	struct rq_queue_limits lim;
	struct sq_config c = { .mode = mode, .depth = depth, .mem_bytes = MEM_BYTES,
			       .scheduler = create_with, .limits = &lim,
			       .driver_lock = driver_lock, .drop_lock = driver_lock };

	rq_queue_limits_default(&lim);
	lim.max_sectors = MAX_SECTORS;
	lim.max_segments = MAX_SEGMENTS;
	lim.max_discard_sectors = MAX_DISCARD;
	lim.max_write_zeroes_sectors = MAX_WZ;
	lim.features = RQ_FEAT_WRITE_CACHE;
	return sq_create(&c);
}

/* The "scheduler" attribute shows @name active (in brackets). */
static void expect_active(struct rq_queue *q, const char *name)
{
	char buf[512], want[64];

	assert_true(rq_queue_attr_get(q, "scheduler", buf, sizeof(buf)) > 0);
	snprintf(want, sizeof(want), "[%s]", name);
	if (!strstr(buf, want))
		fail_msg("scheduler attribute \"%s\" does not show %s active", buf, want);
}

/* End what the device holds, and what it takes meanwhile, until every
 * record has ended. */
static void drain(struct sq_dev *d, struct fx_rec *recs, unsigned n)
{
	uint64_t end = fixture_now_ms() + 10000;
	unsigned i = 0;

	for (;;) {
		sq_complete_all(d, RQ_STS_OK);
		while (i < n && fx_done(&recs[i]))
			i++;
		if (i == n)
			return;
		if (fixture_now_ms() > end)
			fail_msg("%u of %u bios never ended", n - i, n);
		fixture_sleep_us(200);
	}
}

static void expect_once(struct fx_rec *recs, unsigned n, int status)
{
	for (unsigned i = 0; i < n; i++)
		if (fx_done(&recs[i]) != 1 || recs[i].status != status)
			fail_msg("bio %u ended %d times with %d; want once with %d", i,
				 fx_done(&recs[i]), recs[i].status, status);
}

/* ------------------------------------------------------------ workload
 *
 * The mixed workload of the multi-queue conformance suite
 * (test_conformance.c), over the single-queue device.
 */

struct wl_bio {
	struct fx_rec rec;
	unsigned op;
	uint32_t opf;
	uint64_t sector;
	uint32_t len;
	uint8_t *data;          /* one allocation; vectors are pieces of it with gaps */
	uint8_t *vbase[4];
	uint32_t vlen[4];
	unsigned nvec;
};

struct nomerge_rec {
	unsigned op;
	uint64_t sector;
	uint32_t len;
};

struct worker {
	struct sq_dev *d;
	unsigned id;
	unsigned seed;
	uint64_t region_start;  /* sectors */
	uint64_t region_sectors;
	uint8_t *shadow;        /* the region's expected bytes */
	unsigned batches;
	/* results, checked by the main thread */
	unsigned long bios, bad_end, bad_status, bad_read, timeouts;
	struct nomerge_rec *nomerge;
	unsigned nr_nomerge, max_nomerge;
	/* bios larger than their op's limit: split, and (as in the kernel)
	 * their pieces carry RQ_BIO_NOMERGE */
	struct nomerge_rec *split;
	unsigned nr_split, max_split;
};

static void note(struct nomerge_rec **arr, unsigned *nr, unsigned *max, struct nomerge_rec r)
{
	if (*nr == *max) {
		*max = *max ? 2 * *max : 64;
		*arr = realloc(*arr, *max * sizeof(**arr));
		if (!*arr)
			abort();
	}
	(*arr)[(*nr)++] = r;
}

static unsigned op_limit(unsigned op)
{
	return op == RQ_OP_DISCARD ? MAX_DISCARD : op == RQ_OP_WRITE_ZEROES ? MAX_WZ : MAX_SECTORS;
}

static unsigned rnd(struct worker *w, unsigned n)
{
	return (unsigned)rand_r(&w->seed) % n;
}

/* Make the bio's buffers: 1..4 vectors, pieces of one allocation separated
 * by 512-byte gaps (never memory-contiguous), each a multiple of 512. */
static void wl_buffers(struct worker *w, struct wl_bio *b)
{
	unsigned sectors = b->len >> 9;
	unsigned nvec = 1 + rnd(w, sectors < 4 ? sectors : 4);
	uint8_t *p;

	b->data = malloc(b->len + 4 * 512);
	if (!b->data)
		abort();
	p = b->data;
	b->nvec = nvec;
	for (unsigned i = 0; i < nvec; i++) {
		unsigned s = i == nvec - 1 ? sectors : 1 + rnd(w, sectors - (nvec - 1 - i));

		b->vbase[i] = p;
		b->vlen[i] = s << 9;
		sectors -= s;
		p += (s << 9) + 512;
	}
}

static struct rq_bio *wl_make_bio(struct wl_bio *b)
{
	struct rq_bio *bio = rq_bio_alloc(b->nvec);

	/* worker threads: no cmocka asserts here */
	if (!bio)
		abort();
	b->rec.done = 0;
	b->rec.status = -1;
	b->rec.bio = bio;
	bio->op = b->op;
	bio->opf = b->opf;
	bio->iter.sector = b->sector;
	for (unsigned i = 0; i < b->nvec; i++)
		if (rq_bio_add_vec(bio, b->vbase[i], b->vlen[i]))
			abort();
	bio->iter.size = b->len;
	bio->end_io = fx_end_io;
	bio->private_data = &b->rec;
	return bio;
}

/* Copy between the bio's vectors and a flat buffer. */
static void wl_gather(struct wl_bio *b, uint8_t *flat)
{
	for (unsigned i = 0, off = 0; i < b->nvec; off += b->vlen[i], i++)
		memcpy(flat + off, b->vbase[i], b->vlen[i]);
}

static void wl_scatter(struct wl_bio *b, const uint8_t *flat)
{
	for (unsigned i = 0, off = 0; i < b->nvec; off += b->vlen[i], i++)
		memcpy(b->vbase[i], flat + off, b->vlen[i]);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct wl_bio batch[24];
	uint8_t *flat = malloc(512 * 512);

	for (unsigned it = 0; it < w->batches; it++) {
		unsigned n = 1 + rnd(w, 24);
		uint64_t pos = rnd(w, (unsigned)(w->region_sectors / 2));
		unsigned op = RQ_OP_WRITE, k = 0;
		bool reverse = rnd(w, 5) == 0;
		struct rq_plug plug;

		/* plan: increasing, non-overlapping ranges; gap 0 half the time */
		for (k = 0; k < n; k++) {
			struct wl_bio *b = &batch[k];
			unsigned r = rnd(w, 100), sectors;

			memset(b, 0, sizeof(*b));
			if (k == 0 || rnd(w, 10) >= 7) {
				if (r < 45)
					op = RQ_OP_WRITE;
				else if (r < 80)
					op = RQ_OP_READ;
				else if (r < 88)
					op = RQ_OP_DISCARD;
				else if (r < 95)
					op = RQ_OP_WRITE_ZEROES;
				else
					op = RQ_OP_FLUSH;
			}
			b->op = op;
			if (op == RQ_OP_FLUSH) {
				b->sector = 0;
				b->len = 0;
				continue;
			}
			sectors = rnd(w, 20) == 0 ? 65 + rnd(w, 192) : 1 + rnd(w, 32);
			if (k && rnd(w, 2))
				pos += 1 + rnd(w, 64);
			if (pos + sectors > w->region_sectors)
				break;
			b->sector = w->region_start + pos;
			b->len = sectors << 9;
			pos += sectors;
			if (rq_op_has_data(op)) {
				wl_buffers(w, b);
				if (rnd(w, 10) == 0 && sectors <= MAX_SECTORS) {
					/* at most MAX_SEGMENTS vectors: never split */
					b->opf |= RQ_BIO_NOMERGE;
				}
				if (op == RQ_OP_WRITE && rnd(w, 25) == 0)
					b->opf |= rnd(w, 2) ? RQ_BIO_FUA : RQ_BIO_PREFLUSH;
			}
		}
		n = k;

		/* shadow: writes/zeroes take effect (no overlap inside a batch) */
		for (k = 0; k < n; k++) {
			struct wl_bio *b = &batch[k];
			uint64_t off = (b->sector - w->region_start) << 9;

			if (b->op == RQ_OP_WRITE) {
				fixture_fill(flat, b->len, w->seed + k, b->sector << 9);
				wl_scatter(b, flat);
				memcpy(w->shadow + off, flat, b->len);
			} else if (b->op == RQ_OP_DISCARD || b->op == RQ_OP_WRITE_ZEROES) {
				memset(w->shadow + off, 0, b->len);
			} else if (b->op == RQ_OP_READ) {
				for (unsigned v = 0; v < b->nvec; v++)
					memset(b->vbase[v], 0xcc, b->vlen[v]);
			}
			if (b->opf & RQ_BIO_NOMERGE)
				note(&w->nomerge, &w->nr_nomerge, &w->max_nomerge,
				     (struct nomerge_rec){ b->op, b->sector, b->len });
			if (b->op != RQ_OP_FLUSH && (b->len >> 9) > op_limit(b->op))
				note(&w->split, &w->nr_split, &w->max_split,
				     (struct nomerge_rec){ b->op, b->sector, b->len });
		}

		rq_start_plug(&plug);
		for (unsigned i = 0; i < n; i++) {
			struct wl_bio *b = &batch[reverse ? n - 1 - i : i];

			rq_submit_bio(w->d->q, wl_make_bio(b));
		}
		rq_finish_plug(&plug);
		w->bios += n;

		for (k = 0; k < n; k++) {
			struct wl_bio *b = &batch[k];

			if (!fx_wait(&b->rec, 1, 10000)) {
				w->timeouts++;
				/* the bio may still be in use: leak it rather than free it */
				continue;
			}
			if (fx_done(&b->rec) != 1)
				w->bad_end++;
			if (b->rec.status != RQ_STS_OK)
				w->bad_status++;
			if (b->op == RQ_OP_READ) {
				wl_gather(b, flat);
				if (memcmp(flat, w->shadow + ((b->sector - w->region_start) << 9),
					   b->len))
					w->bad_read++;
			}
			rq_bio_put(b->rec.bio);
			free(b->data);
		}
		if (w->timeouts)
			break;
	}
	free(flat);
	return NULL;
}

/*
 * Run the mixed workload over @m from 2 threads and check: every bio ended
 * exactly once with OK, reads saw the expected data, the device equals the
 * shadows, every request the driver saw respected max_sectors /
 * max_segments / max_discard / max_write_zeroes and its data walk matched its
 * size, and each NOMERGE bio reached the driver alone.
 */
static void run_workload(struct sq_dev *d, unsigned batches)
{
	struct worker w[2];
	pthread_t t[2];
	struct sq_event *evs;
	unsigned n, max_pieces;
	unsigned long bad_walk;
	const uint64_t half = (MEM_BYTES >> 9) / 2;

	for (unsigned i = 0; i < 2; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].d = d;
		w[i].id = i;
		w[i].seed = 1234 + 77 * i;
		w[i].region_start = i * half;
		w[i].region_sectors = half;
		w[i].shadow = calloc(1, half << 9);
		w[i].batches = batches;
		assert_non_null(w[i].shadow);
		/* the device starts as the shadow: zeroes */
		memset(d->mem + (w[i].region_start << 9), 0, half << 9);
	}
	for (unsigned i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
	for (unsigned i = 0; i < 2; i++)
		pthread_join(t[i], NULL);

	for (unsigned i = 0; i < 2; i++) {
		assert_int_equal(w[i].timeouts, 0);
		assert_int_equal(w[i].bad_end, 0);
		assert_int_equal(w[i].bad_status, 0);
		assert_int_equal(w[i].bad_read, 0);
		assert_true(w[i].bios > 0);
		assert_memory_equal(d->mem + (w[i].region_start << 9), w[i].shadow, half << 9);
	}

	n = sq_copy_events(d, &evs);
	assert_true(n > 0);
	for (unsigned i = 0; i < n; i++) {
		const struct sq_event *e = &evs[i];
		unsigned sectors = e->bytes >> 9;

		switch (e->op) {
		case RQ_OP_READ:
		case RQ_OP_WRITE:
			if (sectors > MAX_SECTORS || e->nr_segments > MAX_SEGMENTS || !sectors)
				fail_msg("request op %d at %llu: %u sectors, %u segments", e->op,
					 (unsigned long long)e->sector, sectors, e->nr_segments);
			break;
		case RQ_OP_DISCARD:
			assert_true(sectors > 0 && sectors <= MAX_DISCARD);
			break;
		case RQ_OP_WRITE_ZEROES:
			assert_true(sectors > 0 && sectors <= MAX_WZ);
			break;
		case RQ_OP_FLUSH:
			assert_int_equal(e->bytes, 0);
			break;
		default:
			fail_msg("unknown op %d reached the driver", e->op);
		}
		/* a NOMERGE request is exactly one NOMERGE bio, or a piece of a
		 * split bio */
		if (e->opf & RQ_BIO_NOMERGE) {
			bool found = false;

			for (unsigned k = 0; k < 2 && !found; k++) {
				for (unsigned j = 0; j < w[k].nr_nomerge && !found; j++)
					found = w[k].nomerge[j].op == e->op &&
						w[k].nomerge[j].sector == e->sector &&
						w[k].nomerge[j].len == e->bytes;
				for (unsigned j = 0; j < w[k].nr_split && !found; j++)
					found = w[k].split[j].op == e->op &&
						w[k].split[j].sector <= e->sector &&
						e->sector + sectors <=
							w[k].split[j].sector +
								(w[k].split[j].len >> 9);
			}
			if (!found)
				fail_msg("NOMERGE request at %llu, %u bytes, matches no bio",
					 (unsigned long long)e->sector, e->bytes);
		}
	}
	/* every NOMERGE bio reached the driver as a request of its own */
	for (unsigned k = 0; k < 2; k++) {
		for (unsigned j = 0; j < w[k].nr_nomerge; j++) {
			bool found = false;

			for (unsigned i = 0; i < n && !found; i++)
				found = evs[i].op == w[k].nomerge[j].op &&
					evs[i].sector == w[k].nomerge[j].sector &&
					evs[i].bytes == w[k].nomerge[j].len;
			if (!found)
				fail_msg("NOMERGE bio at %llu, %u bytes, was merged",
					 (unsigned long long)w[k].nomerge[j].sector,
					 w[k].nomerge[j].len);
		}
	}
	{
		struct rq_queue_stats st;
		unsigned long bios = w[0].bios + w[1].bios;

		rq_queue_get_stats(d->q, &st);
		print_message("%s: %lu bios, %u driver requests, %u+%u NOMERGE bios, %u+%u split bios, "
			      "merges back %llu front %llu rq %llu plug %llu, splits %llu, flushes %llu\n",
			      sched_name, bios, n, w[0].nr_nomerge, w[1].nr_nomerge, w[0].nr_split,
			      w[1].nr_split, (unsigned long long)st.merges_back,
			      (unsigned long long)st.merges_front, (unsigned long long)st.merges_rq,
			      (unsigned long long)st.plug_merges, (unsigned long long)st.splits,
			      (unsigned long long)st.flushes);
	}
	free(evs);
	sq_walk_stats(d, &max_pieces, &bad_walk);
	assert_int_equal(bad_walk, 0);
	assert_true(max_pieces <= MAX_SEGMENTS);
	for (unsigned i = 0; i < 2; i++) {
		free(w[i].shadow);
		free(w[i].nomerge);
		free(w[i].split);
	}
}

/* Mixed workload, scheduler chosen at queue creation, device thread. */
static void test_mixed_created(void **state)
{
	struct sq_dev *d = make_dev(sched_name, SQ_MODE_THREAD, 4, false);
	struct rq_queue_stats st;

	expect_active(d->q, sched_name);
	run_workload(d, 300);
	rq_queue_get_stats(d->q, &st);
	assert_true(st.merges_back + st.merges_front > 0);
	assert_int_equal(st.errors, 0);
	assert_true(st.splits > 0);
	sq_destroy(d);
}

/* Mixed workload, switched to through the attribute; a device ending
 * requests inside request_fn with its own queue lock, dropped around the
 * data copy. */
static void test_mixed_switched(void **state)
{
	const char *first = strcmp(sched_name, "noop") ? "noop" : "deadline";
	struct sq_dev *d = make_dev(first, SQ_MODE_INLINE, 1, true);

	expect_active(d->q, first);
	assert_int_equal(rq_queue_attr_set(d->q, "scheduler", sched_name), 0);
	expect_active(d->q, sched_name);
	run_workload(d, 200);
	sq_destroy(d);
}

/* 4 contiguous 4 KiB writes on a plug reach the device as one request. */
static void test_sequential_plug_merges(void **state)
{
	struct sq_dev *d = make_dev(sched_name, SQ_MODE_INLINE, 1, false);
	static uint8_t bufs[4][4096];
	struct fx_rec rec[4];
	struct rq_plug plug;
	struct rq_queue_stats st;

	rq_start_plug(&plug);
	for (unsigned i = 0; i < 4; i++)
		rq_submit_bio(d->q, fx_bio(&rec[i], RQ_OP_WRITE, 1000 + i * 8, bufs[i], 4096));
	rq_finish_plug(&plug);
	assert_true(fx_wait(rec, 4, 10000));
	expect_once(rec, 4, RQ_STS_OK);
	assert_int_equal(sq_nr_events(d), 1);
	assert_int_equal(sq_event(d, 0).sector, 1000);
	assert_int_equal(sq_event(d, 0).bytes, 4 * 4096);
	rq_queue_get_stats(d->q, &st);
	assert_int_equal(st.merges_back, 3);
	fx_put(rec, 4);
	sq_destroy(d);
}

/*
 * Bios queued behind a busy device merge where the rules allow (back and
 * front, same op and priority, within max_sectors) and nowhere else.
 */
static void test_queued_merges(void **state)
{
	struct sq_dev *d = make_dev(sched_name, SQ_MODE_HOLD, 1, false);
	static uint8_t buf[64 << 9];
	static const struct {
		unsigned op;
		uint64_t sector;
		unsigned sectors;
		uint32_t opf;
		uint16_t ioprio;
	} plan[] = {
		{ RQ_OP_WRITE, 1000, 8, 0, 0 },             /* A */
		{ RQ_OP_WRITE, 1008, 8, 0, 0 },             /* back into A */
		{ RQ_OP_WRITE, 992, 8, 0, 0 },              /* front into A */
		{ RQ_OP_READ, 1016, 8, 0, 0 },              /* other op: alone */
		{ RQ_OP_WRITE, 2000, 8, RQ_BIO_NOMERGE, 0 }, /* NOMERGE: alone */
		{ RQ_OP_WRITE, 2008, 8, 0, 0 },             /* not into a NOMERGE one */
		{ RQ_OP_WRITE, 3000, 60, 0, 0 },
		{ RQ_OP_WRITE, 3060, 8, 0, 0 },             /* would pass max_sectors */
		{ RQ_OP_WRITE, 4000, 8, 0, RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 0) },
		{ RQ_OP_WRITE, 4008, 8, 0, RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 7) }, /* other prio */
	};
	enum { N = sizeof(plan) / sizeof(plan[0]) };
	static const struct { uint64_t sector; unsigned sectors; } want[] = {
		{ 992, 24 }, { 1016, 8 }, { 2000, 8 }, { 2008, 8 }, { 3000, 60 }, { 3060, 8 },
		{ 4000, 8 }, { 4008, 8 },
	};
	enum { NW = sizeof(want) / sizeof(want[0]) };
	struct fx_rec rec[N];
	struct sq_event *ev;
	unsigned n;

	sq_pause(d, true);
	for (unsigned i = 0; i < N; i++) {
		struct rq_bio *bio = fx_bio(&rec[i], plan[i].op, plan[i].sector, buf,
					    plan[i].sectors << 9);

		bio->opf |= plan[i].opf;
		bio->ioprio = plan[i].ioprio;
		rq_submit_bio(d->q, bio);
	}
	sq_pause(d, false);
	drain(d, rec, N);
	expect_once(rec, N, RQ_STS_OK);
	n = sq_copy_events(d, &ev);
	for (unsigned k = 0; k < NW; k++) {
		bool found = false;

		for (unsigned i = 0; i < n && !found; i++)
			found = ev[i].sector == want[k].sector && ev[i].bytes == want[k].sectors << 9;
		if (!found)
			fail_msg("no request of %u sectors at %llu reached the device",
				 want[k].sectors, (unsigned long long)want[k].sector);
	}
	assert_int_equal(n, NW);
	free(ev);
	fx_put(rec, N);
	sq_destroy(d);
}

/* NOMERGE bios never merge: 4 contiguous ones are 4 requests. */
static void test_nomerge_never_merges(void **state)
{
	struct sq_dev *d = make_dev(sched_name, SQ_MODE_INLINE, 1, false);
	static uint8_t bufs[4][4096];
	struct fx_rec rec[4];
	struct rq_plug plug;
	struct rq_queue_stats st;

	rq_start_plug(&plug);
	for (unsigned i = 0; i < 4; i++) {
		struct rq_bio *bio = fx_bio(&rec[i], RQ_OP_WRITE, 1000 + i * 8, bufs[i], 4096);

		bio->opf |= RQ_BIO_NOMERGE;
		rq_submit_bio(d->q, bio);
	}
	rq_finish_plug(&plug);
	assert_true(fx_wait(rec, 4, 10000));
	expect_once(rec, 4, RQ_STS_OK);
	assert_int_equal(sq_nr_events(d), 4);
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(sq_event(d, i).bytes, 4096);
	rq_queue_get_stats(d->q, &st);
	assert_int_equal(st.merges_back + st.merges_front + st.merges_rq, 0);
	fx_put(rec, 4);
	sq_destroy(d);
}

/* Each bio ends once with the status its request ended with; a bio past
 * the capacity ends with IOERR before the device sees it. */
static void test_statuses(void **state)
{
	struct sq_dev *d = make_dev(sched_name, SQ_MODE_HOLD, 8, false);
	static const rq_status_t sts[] = { RQ_STS_OK, RQ_STS_IOERR, RQ_STS_MEDIUM, RQ_STS_NOSPC,
					   RQ_STS_TARGET };
	enum { N = sizeof(sts) / sizeof(sts[0]) };
	static uint8_t buf[4096];
	struct fx_rec rec[N + 1];

	for (unsigned i = 0; i < N; i++)
		rq_submit_bio(d->q, fx_bio(&rec[i], i & 1 ? RQ_OP_READ : RQ_OP_WRITE, i * 64, buf,
					   4096));
	/* end each request as it reaches the device (a scheduler may hold
	   some back while others are in flight) */
	for (unsigned i = 0; i < N; i++) {
		struct rq_request *rq;
		unsigned k;

		assert_true(sq_wait_held(d, 1, 10000));
		rq = sq_held(d, 0);
		k = (unsigned)(rq->sector / 64);
		assert_true(k < N);
		assert_true(sq_complete_next(d, sts[k]));
	}
	assert_true(fx_wait(rec, N, 10000));
	for (unsigned i = 0; i < N; i++)
		expect_once(&rec[i], 1, sts[i]);

	rq_submit_bio(d->q, fx_bio(&rec[N], RQ_OP_WRITE, (MEM_BYTES >> 9) - 4, buf, 4096));
	assert_true(fx_wait(&rec[N], 1, 10000));
	expect_once(&rec[N], 1, RQ_STS_IOERR);
	assert_int_equal(sq_nr_events(d), N);
	fx_put(rec, N + 1);
	sq_destroy(d);
}

/* Teardown with requests held by the device and more queued: every bio
 * ends exactly once. */
static void test_destroy_with_held(void **state)
{
	struct sq_dev *d = make_dev(sched_name, SQ_MODE_HOLD, 4, false);
	static uint8_t bufs[8][4096];
	struct fx_rec rec[8];

	for (unsigned i = 0; i < 8; i++)
		rq_submit_bio(d->q, fx_bio(&rec[i], RQ_OP_WRITE, i * 64, bufs[i], 4096));
	assert_true(sq_wait_held(d, 4, 10000));
	sq_destroy(d);
	for (unsigned i = 0; i < 8; i++)
		assert_int_equal(fx_done(&rec[i]), 1);
	fx_put(rec, 8);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sequential_plug_merges),
		cmocka_unit_test(test_nomerge_never_merges),
		cmocka_unit_test(test_queued_merges),
		cmocka_unit_test(test_statuses),
		cmocka_unit_test(test_mixed_created),
		cmocka_unit_test(test_mixed_switched),
		cmocka_unit_test(test_destroy_with_held),
	};
	static const char *const defaults[] = { "noop", "deadline", "cfq" };
	const char *const *names = defaults;
	int nr = 3, ran = 0, failed = 0;

	if (argc > 1) {
		names = (const char *const *)&argv[1];
		nr = argc - 1;
	}
	for (int i = 0; i < nr; i++) {
		char group[64];

		if (!rq_elevator_exists(names[i])) {
			fprintf(stderr, "scheduler %s is not available: skipped\n", names[i]);
			continue;
		}
		sched_name = names[i];
		sq_clock_ticker(true);
		snprintf(group, sizeof(group), "sq-conformance-%s", sched_name);
		failed += _cmocka_run_group_tests(group, tests, sizeof(tests) / sizeof(tests[0]),
						  NULL, NULL);
		sq_clock_ticker(false);
		ran++;
	}
	if (!ran)
		return 77;
	return failed ? 1 : 0;
}
