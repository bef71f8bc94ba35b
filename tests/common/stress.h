/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The stress scenario both front ends run (tests/stress/test_stress.c over
 * the multi-queue mock and null drivers, tests/stress/test_sq_stress.c
 * over the single-queue device).
 *
 * Worker threads write and read back their own regions of a memory-backed
 * device, one generation after another, in random batches of random
 * multi-vector bios, while the calling thread switches the scheduler
 * round the given list every ~2 ms.  One run is bounded by bio counts, not
 * time; stress_soak() repeats runs for a duration.  Meant to pass under
 * ThreadSanitizer and ASan too (what the threads share is atomic).  One
 * run at a time per process.
 *
 * Replaying or soaking: RQ_STRESS_SEED (default the config's seed) and
 * RQ_STRESS_SECONDS (default 0: one run) are read by stress_soak() and
 * printed at its start, with each run's seed.
 */
#ifndef RQ_TEST_STRESS_H
#define RQ_TEST_STRESS_H

#include <stdbool.h>
#include <stdint.h>

#include <librequest/librequest.h>

#define STRESS_MAX_SCHEDS 8

/** struct stress_config - the shape of one run. */
struct stress_config {
	const char *label;            /* for messages */
	unsigned threads;             /* workers; worker t owns region t */
	unsigned bios_per_thread;     /* each worker submits at least this many */
	uint32_t region_bytes;        /* a multiple of 4 KiB */
	uint32_t max_bio;             /* bios are 4 KiB..max_bio (a multiple of 4 KiB) */
	unsigned max_batch;           /* bios in one batch: 1..max_batch (at most 64) */
	bool mixed_batches;           /* one batch in 3 unplugged, one in 4 in descending order */
	unsigned seed;                /* worker t's generator starts at seed * (t + 1) */
	unsigned wait_ms;             /* a worker waits this long for its bios to end */
	/* switch n goes to scheds[n % count]; NULL ends the list */
	const char *scheds[STRESS_MAX_SCHEDS + 1];
	/* after each switch (optional): a tunable, the clock... */
	void (*after_switch)(struct rq_queue *q, unsigned n);
};

/** struct stress_result - what a run did, for the test's own checks. */
struct stress_result {
	uint64_t bios;                /* bios the workers submitted */
	unsigned switches;
	struct rq_queue_stats st;     /* @q's statistics at the end */
};

/**
 * stress_run() - the scenario over @q, a memory-backed device of at least
 * threads * region_bytes, idle and with nothing to read back yet.
 * Checks: every switch succeeded; every worker submitted its bios, every
 * bio ended exactly once, with OK, and no bio number was ended that was
 * never submitted; each read-back matched the generation just written; a
 * final read of the device from this thread finds each region's last
 * generation; the queue counted no error, no invalid bio and at least the
 * bios submitted.  If no bio ends for 120 s it prints what is outstanding
 * and aborts (a hang: a lost wakeup, a switch that never drains).
 */
void stress_run(struct rq_queue *q, const struct stress_config *cfg, struct stress_result *res);

/**
 * stress_soak() - stress_run() once with seed RQ_STRESS_SEED (else
 * @cfg->seed), then again with seed + 1, + 2, ... until RQ_STRESS_SECONDS
 * have passed since the start.  Prints both values first, and each run's
 * seed, so a failure can be replayed.  @res: bios and switches added up
 * over the runs, @q's statistics at the end.
 */
void stress_soak(struct rq_queue *q, const struct stress_config *cfg, struct stress_result *res);

#endif /* RQ_TEST_STRESS_H */
