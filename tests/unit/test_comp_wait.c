/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Waiting for cross-thread completions (lib/complete.c, lib/service.c, the
 * null driver's completion thread):
 *
 * - a completion batch pushed to an owner that waits in
 *   rq_wait_completions() (polling or asleep) arms no service fallback:
 *   the service is not kicked (its fd stays unreadable), while a push to
 *   an owner busy elsewhere still arms it;
 * - an owner whose polling gave up and went to sleep is woken by the push
 *   and ends every bio exactly once; a wait with nothing to come returns
 *   0 once its timeout passed;
 * - an owner whose poll gives up shows sleeping before it stops showing
 *   polling: a push at that moment finds it waiting and kicks nothing;
 * - the null driver's completion thread, with its submitter on another
 *   CPU, hands bios back every 16 requests (early hand-over), never a whole
 *   plug of 32 at once, and each bio still ends exactly once;
 * - two submitters under rq_affinity 2 waiting in rq_wait_completions()
 *   over the null driver's completion thread: every bio ends exactly
 *   once, on its submitter.
 *
 * The service runs application-driven (rq_service_manual()): its kicks
 * are visible as a readable rq_service_fd(), and no fallback ends a
 * request behind the test's back.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "fixtures.h"
#include "internal/queue.h"
#include "mock_driver.h"
#include "null_blk.h"

#define NR 24
#define PLUG 32
#define ROUNDS 64
#define PER_THREAD 3000
#define THREAD_DEPTH 16

static char buf[4096];

/* One bio and what its end_io saw. */
struct slot {
	struct rq_bio bio;
	struct rq_bvec vec;
	_Atomic int ended;
	pthread_t thread;
	_Atomic unsigned *count; /* NULL, or a counter of its submitter's */
};

static struct slot slots[2 * PER_THREAD];
static _Atomic unsigned since_batch; /* bios ended since the last batch_done */
static _Atomic unsigned max_batch;   /* the most a batch_done saw */

static void slot_end_io(struct rq_bio *bio)
{
	struct slot *s = bio->private_data;

	s->thread = pthread_self();
	atomic_fetch_add(&s->ended, 1);
	atomic_fetch_add(&since_batch, 1);
	if (s->count)
		atomic_fetch_add(s->count, 1);
}

/* Submit slot @i: a 4 KiB read at @sector, never merged (nomerges 2). */
static void submit_slot(struct rq_queue *q, unsigned i, uint64_t sector)
{
	struct rq_bio *bio = &slots[i].bio;

	rq_bio_init(bio, &slots[i].vec, 1);
	assert_int_equal(rq_bio_add_vec(bio, buf, sizeof(buf)), 0);
	bio->op = RQ_OP_READ;
	bio->iter.sector = sector;
	bio->end_io = slot_end_io;
	bio->private_data = &slots[i];
	atomic_store(&slots[i].ended, 0);
	rq_submit_bio(q, bio);
}

static unsigned nr_ended(unsigned first, unsigned n)
{
	unsigned done = 0;

	for (unsigned i = first; i < first + n; i++) {
		assert_in_range(atomic_load(&slots[i].ended), 0, 1);
		done += atomic_load(&slots[i].ended) == 1;
	}
	return done;
}

/* Was the service kicked since the last rq_service_run()? */
static bool service_kicked(void)
{
	struct pollfd p = { .fd = rq_service_fd(), .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

static struct mock_dev *defer_dev(void)
{
	struct mock_dev *m = mock_create_unmerged(MOCK_COMPLETE_DEFER, 1, 64, "none");

	assert_int_equal(rq_queue_attr_set(m->q, "rq_affinity", "2"), 0);
	return m;
}

struct ender {
	struct mock_dev *m;
	struct rq_mailbox *owner; /* NULL: do not wait for the owner */
	bool asleep;              /* wait until it sleeps, not just polls */
};

/* End every held request in one batch once the owner waits as asked. */
static void *end_when_waiting(void *arg)
{
	struct ender *e = arg;
	struct rq_comp_batch cb = RQ_COMP_BATCH_INIT;
	struct rq_request *rq;

	if (e->owner && e->asleep)
		assert_true(FX_WAIT_FOR(atomic_load(&e->owner->sleeping), 10000));
	else if (e->owner)
		assert_true(FX_WAIT_FOR(atomic_load(&e->owner->sleeping) ||
					atomic_load(&e->owner->polling), 10000));
	while ((rq = mock_take_held(e->m, 0)))
		assert_true(rq_mq_add_to_batch(&cb, rq, RQ_STS_OK));
	assert_int_equal(cb.nr, NR);
	rq_mq_end_request_batch(&cb);
	return NULL;
}

/* Submit NR bios, have another thread end them as @e says; wait for all. */
static void round_trip(struct mock_dev *m, struct ender *e)
{
	unsigned got = 0;
	pthread_t th;

	for (unsigned i = 0; i < NR; i++)
		submit_slot(m->q, i, 8 * (10 * i + 1));
	assert_true(mock_wait_held(m, NR, 10000));
	rq_service_run(); /* clears the kicks so far */
	assert_false(service_kicked());
	assert_int_equal(pthread_create(&th, NULL, end_when_waiting, e), 0);
	while (got < NR) {
		int n = rq_wait_completions(UINT64_MAX);

		assert_true(n > 0);
		got += (unsigned)n;
	}
	pthread_join(th, NULL);
	assert_int_equal(got, NR);
	assert_int_equal(nr_ended(0, NR), NR);
	for (unsigned i = 0; i < NR; i++)
		assert_true(pthread_equal(slots[i].thread, pthread_self()));
}

/*
 * A push to an owner waiting in rq_wait_completions() needs no service
 * fallback: the service stays unkicked.  A push to an owner that does not
 * wait still arms it (the fd turns readable).
 */
static void test_waiting_owner_no_service_kick(void **state)
{
	struct mock_dev *m = defer_dev();
	struct ender e = { .m = m };
	pthread_t th;

	(void)state;
	submit_slot(m->q, 0, 8); /* makes this thread's mailbox */
	assert_true(mock_wait_held(m, 1, 10000));
	mock_complete_all(m, RQ_STS_OK);
	rq_process_completions();
	e.owner = mbox_self();
	assert_non_null(e.owner);
	for (unsigned r = 0; r < 8; r++) {
		round_trip(m, &e);
		assert_false(service_kicked());
	}

	/* owner busy elsewhere: the fallback is armed */
	for (unsigned i = 0; i < NR; i++)
		submit_slot(m->q, i, 8 * (10 * i + 1));
	assert_true(mock_wait_held(m, NR, 10000));
	rq_service_run();
	e.owner = NULL;
	assert_int_equal(pthread_create(&th, NULL, end_when_waiting, &e), 0);
	pthread_join(th, NULL);
	assert_true(service_kicked());
	assert_int_equal(nr_ended(0, NR), 0);
	assert_int_equal(rq_process_completions(), NR);
	assert_int_equal(nr_ended(0, NR), NR);
	mock_destroy(m);
}

/*
 * An owner whose polling gave up sleeps and is woken by the push; a wait
 * with nothing to come returns 0 after its timeout.
 */
static void test_woken_after_polling(void **state)
{
	struct mock_dev *m = defer_dev();
	struct ender e = { .m = m, .asleep = true };
	uint64_t t0;

	(void)state;
	e.owner = mbox_self();
	assert_non_null(e.owner);
	for (unsigned r = 0; r < 4; r++)
		round_trip(m, &e);
	assert_int_equal(rq_wait_completions(0), 0);
	t0 = fixture_now_ms();
	assert_int_equal(rq_wait_completions(20 * 1000 * 1000), 0);
	assert_true(fixture_now_ms() - t0 >= 19);
	assert_false(atomic_load(&e.owner->polling));
	assert_false(atomic_load(&e.owner->sleeping));
	mock_destroy(m);
}

/* The ender of test_poll_to_sleep_no_gap(), started before the owner waits. */
struct gap_ender {
	struct mock_dev *m;
	struct rq_mailbox *owner;
	_Atomic bool ready;
	bool polled;  /* the owner polled, and its poll gave up before the push */
	bool asleep;  /* ... and showed sleeping when polling fell */
};

/*
 * Spin (a poll lasts microseconds) until the owner polls or sleeps; if it
 * polls, until its poll gives up; note whether it shows sleeping at that
 * moment; then end every held request in one batch.
 */
static void *end_after_poll(void *arg)
{
	struct gap_ender *g = arg;
	struct rq_comp_batch cb = RQ_COMP_BATCH_INIT;
	uint64_t end = fixture_now_ms() + 10000;
	struct rq_request *rq;

	atomic_store(&g->ready, true);
	while (!atomic_load(&g->owner->polling) && !atomic_load(&g->owner->sleeping))
		assert_true(fixture_now_ms() < end);
	if (atomic_load(&g->owner->polling)) {
		while (atomic_load(&g->owner->polling))
			cpu_relax();
		g->polled = true;
		g->asleep = atomic_load(&g->owner->sleeping);
	}
	while ((rq = mock_take_held(g->m, 0)))
		assert_true(rq_mq_add_to_batch(&cb, rq, RQ_STS_OK));
	assert_int_equal(cb.nr, NR);
	rq_mq_end_request_batch(&cb);
	return NULL;
}

/*
 * An owner whose poll gives up shows sleeping before polling falls, so a
 * push at that moment still finds it waiting: no service kick, and every
 * bio ends once, on the owner.  Repeated: the moment is short, and the
 * owner polls only when the last push came from another CPU.
 */
static void test_poll_to_sleep_no_gap(void **state)
{
	struct mock_dev *m = defer_dev();
	struct ender e = { .m = m };
	unsigned polled = 0;

	(void)state;
	e.owner = mbox_self();
	assert_non_null(e.owner);
	round_trip(m, &e); /* the owner's stacks have seen a push */
	for (unsigned r = 0; r < ROUNDS; r++) {
		struct gap_ender g = { .m = m, .owner = e.owner };
		unsigned got = 0;
		pthread_t th;

		for (unsigned i = 0; i < NR; i++)
			submit_slot(m->q, i, 8 * (10 * i + 1));
		assert_true(mock_wait_held(m, NR, 10000));
		rq_service_run();
		assert_int_equal(pthread_create(&th, NULL, end_after_poll, &g), 0);
		assert_true(FX_WAIT_FOR(atomic_load(&g.ready), 10000));
		while (got < NR) {
			int n = rq_wait_completions(UINT64_MAX);

			assert_true(n > 0);
			got += (unsigned)n;
		}
		pthread_join(th, NULL);
		assert_int_equal(nr_ended(0, NR), NR);
		if (g.polled) {
			polled++;
			assert_true(g.asleep);
		}
		assert_false(service_kicked());
	}
	print_message("the owner's poll gave up before the push in %u of %u rounds\n",
		      polled, ROUNDS);
	mock_destroy(m);
}

/* ---------------------------------------------- the null completion thread */

static int cpu_a = -1, cpu_b = -1; /* the submitter's and the completer's */

static bool pin_self(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return !pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static void completer_init(void)
{
	if (cpu_b >= 0)
		pin_self(cpu_b);
}

static void completer_batch_done(void)
{
	unsigned n = atomic_exchange(&since_batch, 0), cur = atomic_load(&max_batch);

	while (n > cur && !atomic_compare_exchange_weak(&max_batch, &cur, n))
		;
}

static struct null_dev *null_thread_dev(void)
{
	struct null_config cfg;
	struct null_dev *dev;

	null_config_default(&cfg);
	cfg.completion = NULL_COMPLETE_THREAD;
	cfg.hw_queue_depth = 64;
	cfg.sched = "none";
	cfg.thread_init = completer_init;
	cfg.batch_done = completer_batch_done;
	assert_int_equal(null_create(&cfg, &dev), 0);
	assert_int_equal(rq_queue_attr_set(null_queue(dev), "nomerges", "2"), 0);
	return dev;
}

/*
 * Submitter and completion thread pinned to two CPUs: each plug of 32
 * comes back in hand-overs of at most 16, every bio exactly once.
 */
static void test_null_early_handover(void **state)
{
	cpu_set_t old;
	struct null_dev *dev;
	struct rq_plug plug;

	(void)state;
	assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof(old), &old), 0);
	for (int c = 0; c < CPU_SETSIZE && cpu_b < 0; c++) {
		if (!CPU_ISSET(c, &old))
			continue;
		if (cpu_a < 0)
			cpu_a = c;
		else
			cpu_b = c;
	}
	if (cpu_b < 0 || !pin_self(cpu_a)) {
		cpu_a = cpu_b = -1;
		skip(); /* one CPU: no early hand-over to look at */
	}
	dev = null_thread_dev();
	atomic_store(&since_batch, 0);
	atomic_store(&max_batch, 0);
	for (unsigned r = 0; r < ROUNDS; r++) {
		rq_start_plug(&plug);
		for (unsigned i = 0; i < PLUG; i++)
			submit_slot(null_queue(dev), i, 8 * (r * PLUG + i));
		rq_finish_plug(&plug);
		assert_true(FX_WAIT_FOR(nr_ended(0, PLUG) == PLUG, 10000));
	}
	null_destroy(dev);
	pthread_setaffinity_np(pthread_self(), sizeof(old), &old);
	cpu_a = cpu_b = -1;
	assert_in_range(atomic_load(&max_batch), 1, 16);
}

struct bench_thread {
	struct rq_queue *q;
	unsigned first;
	_Atomic unsigned done; /* its bios that ended */
};

/* Keep THREAD_DEPTH bios in flight until PER_THREAD ended, waiting in the library. */
static void *submit_and_wait(void *arg)
{
	struct bench_thread *bt = arg;
	unsigned next = 0;

	while (atomic_load(&bt->done) < PER_THREAD) {
		while (next < PER_THREAD && next - atomic_load(&bt->done) < THREAD_DEPTH) {
			slots[bt->first + next].count = &bt->done;
			submit_slot(bt->q, bt->first + next, 8 * (bt->first + next));
			next++;
		}
		assert_true(rq_wait_completions(1000 * 1000) >= 0);
	}
	assert_int_equal(atomic_load(&bt->done), PER_THREAD);
	assert_int_equal(nr_ended(bt->first, PER_THREAD), PER_THREAD);
	for (unsigned i = bt->first; i < bt->first + PER_THREAD; i++)
		assert_true(pthread_equal(slots[i].thread, pthread_self()));
	return NULL;
}

/*
 * rq_affinity 2 over the null driver's completion thread: two submitters
 * wait in rq_wait_completions() (polling, sleeping) while the thread hands
 * back early; every bio ends exactly once, on its submitter.
 */
static void test_null_two_submitters(void **state)
{
	struct null_dev *dev = null_thread_dev();
	struct bench_thread bt[2] = {
		{ .q = null_queue(dev), .first = 0 },
		{ .q = null_queue(dev), .first = PER_THREAD },
	};
	struct null_stats st;
	pthread_t th[2];

	(void)state;
	assert_int_equal(rq_queue_attr_set(null_queue(dev), "rq_affinity", "2"), 0);
	for (unsigned i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, submit_and_wait, &bt[i]), 0);
	for (unsigned i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(nr_ended(0, 2 * PER_THREAD), 2 * PER_THREAD);
	for (unsigned i = 0; i < 2 * PER_THREAD; i++)
		slots[i].count = NULL;
	null_get_stats(dev, &st);
	assert_int_equal(st.completed, 2 * PER_THREAD);
	null_destroy(dev);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_waiting_owner_no_service_kick),
		cmocka_unit_test(test_woken_after_polling),
		cmocka_unit_test(test_poll_to_sleep_no_gap),
		cmocka_unit_test(test_null_early_handover),
		cmocka_unit_test(test_null_two_submitters),
	};

	/* kicks show on rq_service_fd(); no fallback ends requests behind us */
	assert_int_equal(rq_service_manual(), 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
