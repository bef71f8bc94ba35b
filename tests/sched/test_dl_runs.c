/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * mq-deadline's sorted runs change nothing anyone can see.
 *
 * mq-deadline keeps a batch inserted into an empty hardware queue as sorted
 * arrays ("runs") instead of putting each request into the trees and the
 * back-merge hash, and moves them there when something needs those.  This
 * test drives two devices with the same seeded script: one with
 * mq-deadline, one with "mq-deadline-tree", the same scheduler built
 * without runs (dl_tree_only.c).  The script mixes plugged and single
 * bios of every class and direction, contiguous, overlapping and random
 * sectors (so batches sometimes qualify for runs and sometimes not, and
 * bios merge into requests sitting in runs), completions in random order
 * (the driver keeps what it gets), virtual time jumps past read_expire and
 * prio_aging_expire, and tunable changes.  After every step the two drivers
 * must have been handed exactly the same requests (sector, size, op, flags,
 * segments) in the same order, and at the end every bio must have ended
 * exactly once on both.
 *
 * It fails when a run dispatches in another order than the tree, when a
 * merge is missed or made that the tree would not make, or when a request
 * is lost or duplicated.  The clock is virtual and there is no service
 * thread (rq_service_manual()): everything runs on the test thread.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fixtures.h"
#include "mock_driver.h"

#define STEPS 4000
#define MAX_BIOS 60000
#define SPAN_SECTORS 4096u   /* small, so requests meet */
#define QUEUE_DEPTH 8u       /* driver tags: the rest waits in the scheduler */
#define NR_REQUESTS "256"    /* scheduler tags */
#define MAX_OUTSTANDING 160u /* bios not ended; below nr_requests minus a plug */

extern const struct rq_elevator_type rq_mq_deadline_tree_type;

static uint64_t vclock_ns;
static uint8_t data_buf[65536];

static uint64_t vclock(void *arg)
{
	(void)arg;
	return __atomic_load_n(&vclock_ns, __ATOMIC_ACQUIRE);
}

struct side {
	struct mock_dev *m;
	struct fx_rec *recs;
	unsigned nr;
};

static uint64_t rng_state;

static uint32_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state >> 16);
}

static void side_create(struct side *s, const char *sched)
{
	/* no request times out: the virtual clock runs for minutes */
	struct mock_config cfg = { .completion = MOCK_COMPLETE_DEFER, .queue_depth = QUEUE_DEPTH,
				   .timeout_ms = 24u * 3600u * 1000u };
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .scheduler = sched };

	s->m = mock_create(&cfg, &qc);
	assert_int_equal(rq_queue_attr_set(s->m->q, "nr_requests", NR_REQUESTS), 0);
	s->recs = calloc(MAX_BIOS, sizeof(*s->recs));
	assert_non_null(s->recs);
	s->nr = 0;
}

/* One bio as the script says, on one side. */
struct bio_spec {
	unsigned op;
	uint64_t sector;
	uint32_t len;
	uint32_t opf;
	uint16_t ioprio;
};

static void side_submit(struct side *s, const struct bio_spec *b)
{
	struct fx_rec *rec;
	struct rq_bio *bio;

	assert_true(s->nr < MAX_BIOS);
	rec = &s->recs[s->nr++];
	bio = fx_bio(rec, b->op, b->sector, b->op == RQ_OP_DISCARD ? NULL : data_buf, b->len);
	bio->opf |= b->opf;
	bio->ioprio = b->ioprio;
	rq_submit_bio(s->m->q, bio);
}

static unsigned side_outstanding(struct side *s)
{
	unsigned n = 0;

	for (unsigned i = 0; i < s->nr; i++)
		n += fx_done(&s->recs[i]) == 0;
	return n;
}

/* Recent bios of earlier batches: later bios go right before or after them,
 * so they merge into requests that wait in the scheduler (in runs too). */
static struct bio_spec recent[64];
static unsigned nr_recent; /* bios ever remembered; recent[] is a ring */

static unsigned min_u(unsigned a, unsigned b)
{
	return a < b ? a : b;
}

/*
 * The next bio of the script.  A dense batch draws from SPAN_SECTORS, so
 * its requests touch and overlap and it goes through the trees; a sparse
 * one from 32 times that, so it usually becomes runs.  In both, some bios
 * continue the previous one, start on top of it, or sit next to a recent
 * bio of an earlier batch; a bio submitted @alone mostly does the last.
 */
static void next_spec(struct bio_spec *b, const struct bio_spec *prev, bool sparse, bool alone)
{
	uint64_t span = sparse ? 32ull * SPAN_SECTORS : SPAN_SECTORS;
	uint32_t r = rnd() % 100;

	b->opf = 0;
	b->ioprio = 0;
	b->len = 4096u * (1 + rnd() % 4);
	if (prev && r < (sparse ? 10u : 30u)) { /* contiguous: a plug merge */
		b->op = prev->op;
		b->sector = prev->sector + prev->len / 512;
		b->ioprio = prev->ioprio;
	} else if (prev && r < (sparse ? 12u : 38u)) { /* the same start: overlaps */
		b->op = prev->op;
		b->sector = prev->sector;
	} else if (nr_recent && r < (!prev && alone ? 80u : sparse ? 16u : 55u)) {
		/* next to a request that may still wait */
		/* mostly one of the newest, which may still be waiting */
		unsigned back = 1 + (rnd() % 4 ? rnd() % 8 : rnd() % 64);
		const struct bio_spec *o = &recent[(nr_recent - min_u(back, nr_recent)) % 64];

		b->op = o->op;
		b->ioprio = o->ioprio;
		if (rnd() % 2 || o->sector < b->len / 512)
			b->sector = o->sector + o->len / 512; /* back merge */
		else
			b->sector = o->sector - b->len / 512; /* front merge */
	} else {
		r = rnd() % 100;
		b->op = r < 60 ? RQ_OP_READ : r < 95 ? RQ_OP_WRITE : RQ_OP_DISCARD;
		b->sector = (rnd() % (span / 8)) * 8;
	}
	if (b->sector + b->len / 512 > 32ull * SPAN_SECTORS) /* the device's end */
		b->sector = 32ull * SPAN_SECTORS - b->len / 512;
	r = rnd() % 100;
	if (r < 25) {
		static const unsigned classes[] = { RQ_IOPRIO_CLASS_RT, RQ_IOPRIO_CLASS_BE,
						    RQ_IOPRIO_CLASS_IDLE };

		b->ioprio = (uint16_t)((classes[rnd() % 3] << RQ_IOPRIO_CLASS_SHIFT) | (rnd() % 8));
	}
	if (b->op == RQ_OP_WRITE && rnd() % 100 < 15)
		b->opf |= RQ_BIO_SYNC;
	if (rnd() % 100 < 3)
		b->opf |= RQ_BIO_NOMERGE;
}

/* Both drivers were handed the same requests in the same order since the
 * last check. */
static void expect_same_dispatch(struct side *a, struct side *b, unsigned step)
{
	struct mock_event *ea, *eb;
	unsigned na = mock_copy_events(a->m, MOCK_QUEUE_RQ, &ea);
	unsigned nb = mock_copy_events(b->m, MOCK_QUEUE_RQ, &eb);

	if (na != nb) {
		free(ea);
		free(eb);
		fail_msg("step %u: %u requests dispatched with runs, %u without", step, na, nb);
	}
	for (unsigned i = 0; i < na; i++) {
		if (ea[i].sector != eb[i].sector || ea[i].bytes != eb[i].bytes || ea[i].op != eb[i].op ||
		    ea[i].opf != eb[i].opf || ea[i].nr_segments != eb[i].nr_segments) {
			print_message("step %u dispatch #%u: runs op %d sector %llu bytes %u, "
				      "tree op %d sector %llu bytes %u\n",
				      step, i, ea[i].op, (unsigned long long)ea[i].sector, ea[i].bytes,
				      eb[i].op, (unsigned long long)eb[i].sector, eb[i].bytes);
			free(ea);
			free(eb);
			fail_msg("step %u: dispatch #%u differs", step, i);
		}
	}
	free(ea);
	free(eb);
	mock_reset_events(a->m);
	mock_reset_events(b->m);
}

static void set_both(struct side *s, const char *attr, const char *val)
{
	for (unsigned i = 0; i < 2; i++)
		assert_int_equal(rq_queue_attr_set(s[i].m->q, attr, val), 0);
}

/* Submit @n bios of the script (with flags @opf too) to both devices, in a
 * plug or not. */
static void submit_batch(struct side *s, unsigned n, bool sparse, bool plugged, uint32_t opf)
{
	struct bio_spec spec[40];
	struct rq_plug plug[2];

	for (unsigned i = 0; i < n; i++) {
		next_spec(&spec[i], i ? &spec[i - 1] : NULL, sparse, n == 1);
		spec[i].opf |= opf;
	}
	for (unsigned k = 0; k < 2; k++) {
		if (plugged)
			rq_start_plug(&plug[k]);
		for (unsigned i = 0; i < n; i++)
			side_submit(&s[k], &spec[i]);
		if (plugged)
			rq_finish_plug(&plug[k]);
	}
	/* the newest batch replaces the oldest memories */
	for (unsigned i = 0; i < n; i++, nr_recent++)
		recent[nr_recent % 64] = spec[i];
}

/* The devices end everything they hold (and what that lets through). */
static void drain(struct side *s, unsigned step)
{
	while (mock_nr_held(s[0].m)) {
		if (mock_nr_held(s[0].m) != mock_nr_held(s[1].m))
			fail_msg("step %u: the drivers hold %u and %u requests", step,
				 mock_nr_held(s[0].m), mock_nr_held(s[1].m));
		for (unsigned k = 0; k < 2; k++)
			mock_complete_one(s[k].m, 0, RQ_STS_OK);
	}
}

/* Both devices got the same bios, each ended exactly once; free them. */
static void sides_finish(struct side *s)
{
	assert_int_equal(s[0].nr, s[1].nr);
	for (unsigned k = 0; k < 2; k++) {
		for (unsigned i = 0; i < s[k].nr; i++)
			assert_int_equal(fx_done(&s[k].recs[i]), 1);
		mock_destroy(s[k].m);
		fx_put(s[k].recs, s[k].nr);
		free(s[k].recs);
	}
}

static void run_script(uint64_t seed)
{
	struct side s[2];

	rng_state = seed;
	nr_recent = 0;
	__atomic_store_n(&vclock_ns, 1000000000ull, __ATOMIC_RELEASE);
	side_create(&s[0], "mq-deadline");
	side_create(&s[1], "mq-deadline-tree");

	for (unsigned step = 0; step < STEPS; step++) {
		uint32_t r = rnd() % 100;

		if (r < 45 && side_outstanding(&s[0]) < MAX_OUTSTANDING) {
			/* a batch: plugged (flushes by itself past 32) or one bio */
			bool sparse = rnd() % 2;
			/* sparse ones mostly outnumber the driver's tags, so runs
			 * are left waiting for later bios to merge with */
			unsigned n = rnd() % 4 ? (sparse ? 9 : 1) + rnd() % 32 : 1;

			submit_batch(s, n, sparse, n > 1 || rnd() % 2, 0);
		} else if (r < 50 && side_outstanding(&s[0]) < MAX_OUTSTANDING) {
			/* empty the device, send a sparse batch (runs, most of them
			 * left waiting), then single bios next to its requests;
			 * NOMERGE ones skip the merge attempt and go straight to
			 * insert */
			drain(s, step);
			submit_batch(s, 20 + rnd() % 20, true, true, 0);
			for (unsigned i = 1 + rnd() % 6; i; i--)
				submit_batch(s, 1, false, rnd() % 2, rnd() % 3 ? 0 : RQ_BIO_NOMERGE);
		} else if (r < 58) {
			/* the device finishes everything: the next batch finds the
			 * scheduler empty, the case runs are made for */
			drain(s, step);
		} else if (r < 85) {
			/* the device finishes some of what it holds, in any order */
			unsigned held = mock_nr_held(s[0].m), c = held ? 1 + rnd() % held : 0;

			assert_int_equal(held, mock_nr_held(s[1].m));
			for (unsigned i = 0; i < c && (held = mock_nr_held(s[0].m)); i++) {
				unsigned idx = rnd() % held;

				if (held != mock_nr_held(s[1].m))
					fail_msg("step %u: the drivers hold %u and %u requests", step, held,
						 mock_nr_held(s[1].m));
				for (unsigned k = 0; k < 2; k++)
					mock_complete_one(s[k].m, idx, RQ_STS_OK);
			}
		} else if (r < 97) {
			/* time passes: sometimes past read_expire, rarely past aging */
			uint64_t ms = rnd() % 100 < 90 ? rnd() % 700 : 11000;

			__atomic_add_fetch(&vclock_ns, ms * 1000000ull, __ATOMIC_ACQ_REL);
		} else {
			static const char *const batch[] = { "1", "4", "16" };
			static const char *const starved[] = { "0", "1", "2", "5" };

			switch (rnd() % 3) {
			case 0: set_both(s, "iosched/fifo_batch", batch[rnd() % 3]); break;
			case 1: set_both(s, "iosched/front_merges", rnd() % 2 ? "1" : "0"); break;
			default: set_both(s, "iosched/writes_starved", starved[rnd() % 4]); break;
			}
		}
		expect_same_dispatch(&s[0], &s[1], step);
	}
	drain(s, STEPS);
	expect_same_dispatch(&s[0], &s[1], STEPS);
	assert_int_equal(mock_nr_held(s[1].m), 0);
	sides_finish(s);
	print_message("seed %llu: %u bios\n", (unsigned long long)seed, s[0].nr);
}

/* Submit @n bios given as (op, sector, length in sectors) in one plug to
 * both devices, let them finish it all and compare. */
static void plug_both(struct side *s, const uint32_t (*b)[3], unsigned n, uint16_t ioprio_last)
{
	for (unsigned k = 0; k < 2; k++) {
		struct rq_plug plug;

		rq_start_plug(&plug);
		for (unsigned i = 0; i < n; i++) {
			struct bio_spec spec = { .op = b[i][0], .sector = b[i][1], .len = b[i][2] * 512u,
						 .ioprio = i + 1 == n ? ioprio_last : 0 };

			side_submit(&s[k], &spec);
		}
		rq_finish_plug(&plug);
	}
	drain(s, 0);
	expect_same_dispatch(&s[0], &s[1], 0);
}

/*
 * A run's sort puts requests into 128 buckets spanning the plug's lowest
 * to highest start sector and relies on one bubble pass for requests that
 * share a bucket, and on an exact sort when that pass is not enough (three
 * or more in a bucket out of order: the run's entries are sorted in place
 * and each request told its new slot); an overlap or two requests that
 * touch, found then, send the list to the trees (which merge the touching
 * ones).  Plugs spanning 0 .. 16384 sectors (buckets of 256
 * sectors) with such requests in every list order must dispatch as the
 * trees do.  It fails when the fill accepts an order that is not
 * ascending (a bucket of two or three left in list order), loses a
 * request, leaves a request its old slot after the in-place sort (the
 * dispatch then takes the wrong entries), or accepts two requests that
 * touch once sorted (the trees merge them); it passes with any correct
 * sort.
 */
static void test_run_sort_buckets(void **state)
{
	static const uint32_t two_reversed[][3] = {
		{ RQ_OP_READ, 0, 8 }, { RQ_OP_READ, 2048 + 100, 8 }, { RQ_OP_READ, 2048 + 10, 8 },
		{ RQ_OP_READ, 9000, 8 }, { RQ_OP_READ, 16384, 8 },
	};
	static const uint32_t three_reversed[][3] = {
		{ RQ_OP_READ, 16384, 8 }, { RQ_OP_READ, 1000, 8 }, { RQ_OP_READ, 900, 8 },
		{ RQ_OP_READ, 800, 8 }, { RQ_OP_READ, 0, 8 }, { RQ_OP_READ, 5000, 8 },
	};
	static const uint32_t three_one_pass[][3] = { /* 3, 1, 2: one pass sorts it */
		{ RQ_OP_WRITE, 0, 8 }, { RQ_OP_WRITE, 1000, 8 }, { RQ_OP_WRITE, 800, 8 },
		{ RQ_OP_WRITE, 900, 8 }, { RQ_OP_WRITE, 16384, 8 },
	};
	static const uint32_t four_mixed[][3] = {
		{ RQ_OP_READ, 4090, 4 }, { RQ_OP_READ, 0, 8 }, { RQ_OP_READ, 4000, 8 },
		{ RQ_OP_READ, 4060, 8 }, { RQ_OP_READ, 16384, 8 }, { RQ_OP_READ, 4030, 8 },
		{ RQ_OP_READ, 12000, 8 }, { RQ_OP_READ, 11990, 8 },
	};
	static const uint32_t overlap_in_bucket[][3] = {
		{ RQ_OP_READ, 0, 8 }, { RQ_OP_READ, 5008, 16 }, { RQ_OP_READ, 5000, 16 },
		{ RQ_OP_READ, 16384, 8 },
	};
	/*
	 * 908 starts where 900 ends, not next to it in the plug (no plug
	 * merge); the trees back-merge it into 900 at insert.
	 */
	static const uint32_t touch_after_sort[][3] = {
		{ RQ_OP_READ, 16384, 8 }, { RQ_OP_READ, 900, 8 }, { RQ_OP_READ, 1000, 8 },
		{ RQ_OP_READ, 908, 8 }, { RQ_OP_READ, 0, 8 }, { RQ_OP_READ, 5000, 8 },
	};
	static const uint32_t four_in_bucket[][3] = { /* slots move by up to three */
		{ RQ_OP_READ, 0, 8 }, { RQ_OP_READ, 1100, 8 }, { RQ_OP_READ, 1060, 8 },
		{ RQ_OP_READ, 1030, 8 }, { RQ_OP_READ, 1000, 8 }, { RQ_OP_READ, 16384, 8 },
		{ RQ_OP_READ, 7000, 8 },
	};
	struct side s[2];

	(void)state;
	__atomic_store_n(&vclock_ns, 1000000000ull, __ATOMIC_RELEASE);
	side_create(&s[0], "mq-deadline");
	side_create(&s[1], "mq-deadline-tree");
	for (unsigned round = 0; round < 3; round++) {
		/* the batch position moves on between rounds */
		plug_both(s, two_reversed, 5, 0);
		plug_both(s, three_reversed, 6, 0);
		plug_both(s, three_one_pass, 5, 0);
		plug_both(s, four_mixed, 8, 0);
		plug_both(s, overlap_in_bucket, 4, 0);
		plug_both(s, touch_after_sort, 6, 0);
		plug_both(s, four_in_bucket, 7, 0);
		/* a list of two classes: the mixed path's sort */
		plug_both(s, four_mixed, 8, RQ_IOPRIO_CLASS_RT << RQ_IOPRIO_CLASS_SHIFT);
		plug_both(s, three_reversed, 6, RQ_IOPRIO_CLASS_IDLE << RQ_IOPRIO_CLASS_SHIFT);
	}
	sides_finish(s);
}

/* Several seeds, so that runs meet every path at least once. */
static void test_runs_match_tree(void **state)
{
	(void)state;
	for (uint64_t seed = 1; seed <= 4; seed++)
		run_script(0x9E3779B97F4A7C15ull * seed);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_run_sort_buckets),
		cmocka_unit_test(test_runs_match_tree),
	};

	/*
	 * No service thread: a busy driver's safety-net re-run would otherwise
	 * dispatch on it, at its own moment, on one device and not the other.
	 * Every dispatch then happens on this thread, when a plug ends or a
	 * request completes.
	 */
	assert_int_equal(rq_service_manual(), 0);
	assert_int_equal(rq_sched_register(&rq_mq_deadline_tree_type), 0);
	rq_clock_set_source(vclock, NULL);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
