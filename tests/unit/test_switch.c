/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Scheduler switching through the "scheduler" attribute
 * (doc/semantics-draft.md, "Scheduler switch"): the listing, unknown names,
 * a scheduler whose init_sched fails, and switching back and forth while
 * two threads submit, with nothing lost or completed twice.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mock_driver.h"
#include "fixtures.h"

/* ------------------------------------------- a counting FIFO scheduler */

#define TOY_NAME "switch-toy"
#define FAIL_NAME "switch-enomem"

struct toy_data {
	pthread_mutex_t lock;
	struct rq_list_node list;
};

static atomic_uint toy_inits, toy_exits, toy_exit_nonempty, toy_inserted, toy_dispatched;
static atomic_uint fail_inits;

static int toy_init_sched(struct rq_queue *q, void **data)
{
	struct toy_data *d = calloc(1, sizeof(*d));

	if (!d)
		return -ENOMEM;
	pthread_mutex_init(&d->lock, NULL);
	rq_list_init(&d->list);
	*data = d;
	atomic_fetch_add(&toy_inits, 1);
	return 0;
}

static void toy_exit_sched(struct rq_queue *q, void *data)
{
	struct toy_data *d = data;

	if (!rq_list_empty(&d->list))
		atomic_fetch_add(&toy_exit_nonempty, 1);
	pthread_mutex_destroy(&d->lock);
	free(d);
	atomic_fetch_add(&toy_exits, 1);
}

static void toy_insert(struct rq_hw_ctx *hctx, struct rq_list_node *list, unsigned flags)
{
	struct toy_data *d = rq_sched_data(rq_hctx_queue(hctx));
	unsigned n = 0;

	for (struct rq_list_node *p = list->next; p != list; p = p->next)
		n++;
	pthread_mutex_lock(&d->lock);
	if (flags & RQ_INSERT_AT_HEAD)
		rq_list_splice_init(list, &d->list);
	else
		rq_list_splice_tail_init(list, &d->list);
	pthread_mutex_unlock(&d->lock);
	atomic_fetch_add(&toy_inserted, n);
}

static struct rq_request *toy_dispatch(struct rq_hw_ctx *hctx)
{
	struct toy_data *d = rq_sched_data(rq_hctx_queue(hctx));
	struct rq_request *rq;

	pthread_mutex_lock(&d->lock);
	rq = rq_list_first_rq(&d->list);
	if (rq)
		rq_list_del_init(&rq->queuelist);
	pthread_mutex_unlock(&d->lock);
	if (rq)
		atomic_fetch_add(&toy_dispatched, 1);
	return rq;
}

static bool toy_has_work(struct rq_hw_ctx *hctx)
{
	struct toy_data *d = rq_sched_data(rq_hctx_queue(hctx));
	bool work;

	pthread_mutex_lock(&d->lock);
	work = !rq_list_empty(&d->list);
	pthread_mutex_unlock(&d->lock);
	return work;
}

/*
 * A scheduler whose hw queue hooks check that rq_sched_data()
 * is its own data while they run (a switch builds the new scheduler while
 * the old one is still installed, and retires the old one after).
 */
#define HCTX_CHECK_NAME "switch-hctx-check"

static atomic_uint hctx_hook_calls, hctx_hook_wrong_data;

static void hctx_check(struct rq_hw_ctx *hctx)
{
	struct toy_data *d = rq_sched_data(rq_hctx_queue(hctx));

	atomic_fetch_add(&hctx_hook_calls, 1);
	if (!d || rq_sched_hctx_data(hctx) != d)
		atomic_fetch_add(&hctx_hook_wrong_data, 1);
}

static int check_init_hctx(struct rq_hw_ctx *hctx, unsigned idx)
{
	rq_sched_set_hctx_data(hctx, rq_sched_data(rq_hctx_queue(hctx)));
	hctx_check(hctx);
	return 0;
}

static void check_exit_hctx(struct rq_hw_ctx *hctx, unsigned idx)
{
	hctx_check(hctx);
}

static int fail_init_sched(struct rq_queue *q, void **data)
{
	atomic_fetch_add(&fail_inits, 1);
	return -ENOMEM;
}

static void register_scheds(void)
{
	static const struct rq_elevator_type toy = {
		RQ_ELV_TYPE_INIT,
		.name = TOY_NAME,
		.features = RQ_ELV_F_MQ,
		.ops = {
			.init_sched = toy_init_sched,
			.exit_sched = toy_exit_sched,
			.insert_requests = toy_insert,
			.dispatch_request = toy_dispatch,
			.has_work = toy_has_work,
		},
	};
	static const struct rq_elevator_type failing = {
		RQ_ELV_TYPE_INIT,
		.name = FAIL_NAME,
		.features = RQ_ELV_F_MQ,
		.ops = {
			.init_sched = fail_init_sched,
			.exit_sched = toy_exit_sched,
			.insert_requests = toy_insert,
			.dispatch_request = toy_dispatch,
			.has_work = toy_has_work,
		},
	};
	static const struct rq_elevator_type hctx_checker = {
		RQ_ELV_TYPE_INIT,
		.name = HCTX_CHECK_NAME,
		.features = RQ_ELV_F_MQ,
		.ops = {
			.init_sched = toy_init_sched,
			.exit_sched = toy_exit_sched,
			.init_hctx = check_init_hctx,
			.exit_hctx = check_exit_hctx,
			.insert_requests = toy_insert,
			.dispatch_request = toy_dispatch,
			.has_work = toy_has_work,
		},
	};
	int ret;

	ret = rq_sched_register(&hctx_checker);
	assert_true(ret == 0 || ret == -EEXIST);
	assert_int_equal(fixture_register_fifo(), 0);
	ret = rq_sched_register(&toy);
	assert_true(ret == 0 || ret == -EEXIST);
	ret = rq_sched_register(&failing);
	assert_true(ret == 0 || ret == -EEXIST);
}

static int setup(void **state)
{
	register_scheds();
	return 0;
}

/* --------------------------------------------------------------- helpers */

static struct mock_dev *dev(enum mock_completion c)
{
	struct mock_config cfg;

	memset(&cfg, 0, sizeof(cfg));
	cfg.completion = c;
	return mock_create(&cfg, NULL);
}

static void read_sched(struct mock_dev *m, char *buf, size_t len)
{
	int n = rq_queue_attr_get(m->q, "scheduler", buf, len);

	assert_true(n > 0);
	assert_int_equal((size_t)n, strlen(buf));
	assert_int_equal(buf[n - 1], '\n');
}

/* True if @list names @name as a whole word (optionally bracketed). */
static bool has_word(const char *list, const char *word)
{
	size_t wl = strlen(word);

	for (const char *p = list; (p = strstr(p, word)); p++) {
		bool start = p == list || p[-1] == ' ' || p[-1] == '[';
		char e = p[wl];

		if (start && (e == ' ' || e == ']' || e == '\n' || e == '\0'))
			return true;
	}
	return false;
}

/* The listing has exactly one bracketed name, @active, and lists @also unbracketed. */
static void expect_active(struct mock_dev *m, const char *active, const char *also)
{
	char buf[512], want[64];
	const char *open;

	read_sched(m, buf, sizeof(buf));
	snprintf(want, sizeof(want), "[%s]", active);
	open = strchr(buf, '[');
	assert_non_null(open);
	assert_null(strchr(open + 1, '['));
	assert_non_null(strstr(buf, want));
	assert_true(has_word(buf, also));
	assert_true(has_word(buf, TOY_NAME));
	assert_true(has_word(buf, FAIL_NAME));
}

static int io_done(struct mock_io *io)
{
	int d;

	pthread_mutex_lock(&io->lock);
	d = io->done;
	pthread_mutex_unlock(&io->lock);
	return d;
}

static char buf4k[4096];

/* ------------------------------------------------------------------ tests */

/*
 * The default queue reads "[none]" with every registered scheduler listed;
 * switching to test-fifo and back moves the brackets; each switch returns 0.
 */
static void test_listing_and_switch(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE);

	expect_active(m, "none", FIXTURE_FIFO_NAME);
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", FIXTURE_FIFO_NAME), 0);
	expect_active(m, FIXTURE_FIFO_NAME, "none");
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", "none"), 0);
	expect_active(m, "none", FIXTURE_FIFO_NAME);
	mock_destroy(m);
}

/* An unknown (or empty) scheduler name gives -EINVAL and leaves the active one. */
static void test_unknown_name(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE);

	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", "no-such-sched"), -EINVAL);
	expect_active(m, "none", FIXTURE_FIFO_NAME);
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", FIXTURE_FIFO_NAME), 0);
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", "no-such-sched"), -EINVAL);
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", ""), -EINVAL);
	expect_active(m, FIXTURE_FIFO_NAME, "none");
	/* and it still schedules I/O */
	assert_int_equal(mock_rw(m, RQ_OP_WRITE, 0, buf4k, 4096), RQ_STS_OK);
	mock_destroy(m);
}

/*
 * After switching to test-fifo the driver still receives requests, and they
 * go through the scheduler; after switching back to none too.
 */
static void test_io_after_switch(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE);
	struct fixture_fifo_stats before, after;

	assert_int_equal(mock_rw(m, RQ_OP_WRITE, 0, buf4k, 4096), RQ_STS_OK);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 1);

	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", FIXTURE_FIFO_NAME), 0);
	fixture_fifo_stats(&before);
	assert_int_equal(mock_rw(m, RQ_OP_WRITE, 1000, buf4k, 4096), RQ_STS_OK);
	assert_int_equal(mock_rw(m, RQ_OP_READ, 2000, buf4k, 4096), RQ_STS_OK);
	fixture_fifo_stats(&after);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 3);
	assert_true(after.inserted >= before.inserted + 2);
	assert_true(after.dispatched >= before.dispatched + 2);

	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", "none"), 0);
	assert_int_equal(mock_rw(m, RQ_OP_WRITE, 3000, buf4k, 4096), RQ_STS_OK);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 4);
	mock_destroy(m);
}

/*
 * A switch builds the new scheduler before dropping the old: init_sched
 * runs once per switch to the toy, exit_sched once per switch away (on an
 * empty scheduler), and switching none -> toy -> test-fifo -> toy -> none
 * leaves inits == exits.
 */
static void test_init_exit_pairing(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE);
	unsigned i0 = atomic_load(&toy_inits), e0 = atomic_load(&toy_exits);

	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", TOY_NAME), 0);
	assert_int_equal(atomic_load(&toy_inits), i0 + 1);
	assert_int_equal(atomic_load(&toy_exits), e0);
	assert_int_equal(mock_rw(m, RQ_OP_WRITE, 0, buf4k, 4096), RQ_STS_OK);
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", FIXTURE_FIFO_NAME), 0);
	assert_int_equal(atomic_load(&toy_exits), e0 + 1);
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", TOY_NAME), 0);
	assert_int_equal(atomic_load(&toy_inits), i0 + 2);
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", "none"), 0);
	assert_int_equal(atomic_load(&toy_exits), e0 + 2);
	assert_int_equal(atomic_load(&toy_exit_nonempty), 0);
	mock_destroy(m);
	assert_int_equal(atomic_load(&toy_inits), atomic_load(&toy_exits));
}

/*
 * Switching to a scheduler whose init_sched fails returns that error
 * (-ENOMEM) and leaves the old scheduler active and working: from none, and
 * from the toy (whose instance is not torn down and keeps dispatching).
 */
static void test_failed_init_keeps_old(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_INLINE);
	unsigned f0 = atomic_load(&fail_inits), e0, d0;

	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", FAIL_NAME), -ENOMEM);
	assert_int_equal(atomic_load(&fail_inits), f0 + 1);
	expect_active(m, "none", FIXTURE_FIFO_NAME);
	assert_int_equal(mock_rw(m, RQ_OP_WRITE, 0, buf4k, 4096), RQ_STS_OK);

	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", TOY_NAME), 0);
	e0 = atomic_load(&toy_exits);
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", FAIL_NAME), -ENOMEM);
	expect_active(m, TOY_NAME, "none");
	assert_int_equal(atomic_load(&toy_exits), e0);
	d0 = atomic_load(&toy_dispatched);
	assert_int_equal(mock_rw(m, RQ_OP_WRITE, 64, buf4k, 4096), RQ_STS_OK);
	assert_true(atomic_load(&toy_dispatched) >= d0 + 1);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 2);
	mock_destroy(m); /* with the toy active: destroy exits it */
	assert_int_equal(atomic_load(&toy_inits), atomic_load(&toy_exits));
}

/*
 * A switch waits for requests the driver holds (it freezes): with one held
 * by a DEFER driver, the switch in another thread completes only after the
 * request is ended, and the request ends once with OK.
 */
static void test_switch_waits_for_held(void **state)
{
	struct mock_dev *m = dev(MOCK_COMPLETE_DEFER);
	struct fx_switch s;
	struct mock_io io;

	rq_submit_bio(m->q, mock_bio(&io, RQ_OP_WRITE, 0, buf4k, 4096));
	assert_true(mock_wait_held(m, 1, 10000));
	fx_switch_start(&s, m->q, FIXTURE_FIFO_NAME);
	/* blocked inside the switch (asleep, not returned) while the request is held */
	assert_true(fx_switch_blocked(&s));
	assert_false(fx_switch_done(&s));
	mock_complete_all(m, RQ_STS_OK);
	assert_true(FX_WAIT_FOR(fx_switch_done(&s), 10000));
	assert_int_equal(fx_switch_join(&s), 0);
	mock_wait(&io);
	assert_int_equal(io.status, RQ_STS_OK);
	expect_active(m, FIXTURE_FIFO_NAME, "none");

	/* new I/O goes through test-fifo to the (deferring) driver */
	rq_submit_bio(m->q, mock_bio(&io, RQ_OP_WRITE, 64, buf4k, 4096));
	assert_true(mock_wait_held(m, 1, 10000));
	assert_int_equal(io_done(&io), 0);
	mock_complete_all(m, RQ_STS_OK);
	mock_wait(&io);
	assert_int_equal(io.status, RQ_STS_OK);
	mock_destroy(m);
}

/* -------------------------------------------------- switching under load */

#define LOAD_THREADS 2
#define LOAD_BIOS 20000

struct load {
	struct mock_dev *m;
	atomic_uchar ends[LOAD_THREADS * LOAD_BIOS];
	atomic_uint finished;
	atomic_uint bad;
	atomic_uint alloc_fail;
	atomic_uint submitters_done;
	char buf[LOAD_THREADS][4096];
};

static struct load *load_state;

static void load_end_io(struct rq_bio *bio)
{
	struct load *l = load_state;

	if (bio->status != RQ_STS_OK)
		atomic_fetch_add(&l->bad, 1);
	atomic_fetch_add(&l->ends[(uintptr_t)bio->private_data], 1);
	atomic_fetch_add(&l->finished, 1);
	rq_bio_put(bio);
}

static void *load_thread(void *arg)
{
	unsigned t = (unsigned)(uintptr_t)arg;
	struct load *l = load_state;
	unsigned rng = 12345 + t;

	for (unsigned i = 0; i < LOAD_BIOS; i++) {
		struct rq_bio *bio = rq_bio_alloc(1);

		if (!bio || rq_bio_add_vec(bio, l->buf[t], 4096)) {
			atomic_fetch_add(&l->alloc_fail, 1);
			break;
		}
		rng = rng * 1103515245u + 12345u;
		bio->op = (rng >> 16) % 4 ? RQ_OP_WRITE : RQ_OP_READ;
		/* mostly sequential per thread (merges), sometimes a jump */
		bio->iter.sector = ((uint64_t)t << 20) + (uint64_t)i * 8 + /* within 1 GiB */
				   (((rng >> 8) % 16 == 0) ? 4096 : 0);
		bio->iter.size = 4096;
		bio->end_io = load_end_io;
		bio->private_data = (void *)(uintptr_t)(t * LOAD_BIOS + i);
		rq_submit_bio(l->m->q, bio);
	}
	atomic_fetch_add(&l->submitters_done, 1);
	return NULL;
}

/*
 * 2 threads submit 20000 bios each (completion on the mock's thread) while
 * the main thread switches none <-> test-fifo each time 1..4 x 16 more
 * bios ended: every switch succeeds, every bio ends exactly once with OK
 * (checked once the queue is destroyed, so no late second end_io can
 * hide), and test-fifo saw I/O.
 */
static void test_switch_under_load(void **state)
{
	struct load *l = calloc(1, sizeof(*l));
	pthread_t th[LOAD_THREADS];
	struct fixture_fifo_stats f0, f1;
	unsigned switches = 0, failures = 0, seen;
	struct mock_config cfg;

	assert_non_null(l);
	memset(&cfg, 0, sizeof(cfg));
	cfg.completion = MOCK_COMPLETE_THREAD;
	l->m = mock_create(&cfg, NULL);
	load_state = l;
	fixture_fifo_stats(&f0);

	for (unsigned t = 0; t < LOAD_THREADS; t++)
		assert_int_equal(pthread_create(&th[t], NULL, load_thread, (void *)(uintptr_t)t), 0);
	while ((atomic_load(&l->submitters_done) < LOAD_THREADS || switches < 4) &&
	       switches < 20000) {
		const char *name = switches % 2 ? "none" : FIXTURE_FIFO_NAME;

		if (rq_queue_attr_set(l->m->q, "scheduler", name))
			failures++;
		switches++;
		/* the next switch once some I/O went through this scheduler */
		seen = atomic_load(&l->finished);
		assert_true(FX_WAIT_FOR(atomic_load(&l->finished) >= seen + 16 * (1 + switches % 4) ||
				     atomic_load(&l->submitters_done) == LOAD_THREADS, 10000));
	}
	for (unsigned t = 0; t < LOAD_THREADS; t++)
		pthread_join(th[t], NULL);
	assert_int_equal(failures, 0);
	assert_true(switches >= 2);
	assert_int_equal(atomic_load(&l->alloc_fail), 0);
	assert_true(FX_WAIT_FOR(atomic_load(&l->finished) >= LOAD_THREADS * LOAD_BIOS, 10000));
	fixture_fifo_stats(&f1);
	assert_true(f1.inserted > f0.inserted);
	print_message("switches: %u\n", switches);
	mock_destroy(l->m);
	for (unsigned i = 0; i < LOAD_THREADS * LOAD_BIOS; i++)
		if (atomic_load(&l->ends[i]) != 1)
			fail_msg("bio %u ended %u times", i, (unsigned)atomic_load(&l->ends[i]));
	assert_int_equal(atomic_load(&l->bad), 0);
	load_state = NULL;
	free(l);
}

/*
 * Switching into and out of a scheduler with hw queue hooks, from and to
 * schedulers with data of their own: each init_hctx/exit_hctx call sees
 * its own scheduler's data through rq_sched_data().
 */
static void test_hctx_hooks_see_own_data(void **state)
{
	struct mock_config cfg = { .nr_hw_queues = 2, .completion = MOCK_COMPLETE_INLINE };
	struct mock_dev *m = mock_create(&cfg, NULL);
	static const char *const order[] = { "mq-deadline", HCTX_CHECK_NAME, "kyber",
					     HCTX_CHECK_NAME, "none", HCTX_CHECK_NAME };

	atomic_store(&hctx_hook_calls, 0);
	atomic_store(&hctx_hook_wrong_data, 0);
	for (unsigned i = 0; i < sizeof(order) / sizeof(order[0]); i++)
		assert_int_equal(rq_queue_attr_set(m->q, "scheduler", order[i]), 0);
	mock_destroy(m);
	/* three installs and three retirements (the last at destroy), 2 hw queues each */
	assert_int_equal(atomic_load(&hctx_hook_calls), 12);
	assert_int_equal(atomic_load(&hctx_hook_wrong_data), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_listing_and_switch),
		cmocka_unit_test(test_unknown_name),
		cmocka_unit_test(test_io_after_switch),
		cmocka_unit_test(test_init_exit_pairing),
		cmocka_unit_test(test_failed_init_keeps_old),
		cmocka_unit_test(test_switch_waits_for_held),
		cmocka_unit_test(test_switch_under_load),
		cmocka_unit_test(test_hctx_hooks_see_own_data),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
