/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * rq_affinity: where ops->complete (and so the bio's end_io) runs when a
 * request is completed with rq_mq_complete_request() from another thread.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "fixtures.h"
#include "mock_driver.h"

static char buf[4096];
static pthread_t end_io_thread;
static _Atomic int end_io_calls;

static void record_end_io(struct rq_bio *bio)
{
	end_io_thread = pthread_self();
	atomic_fetch_add(&end_io_calls, 1);
}

struct completer {
	struct mock_dev *m;
};

static void *complete_from_other_thread(void *arg)
{
	struct completer *c = arg;

	mock_complete_all(c->m, RQ_STS_OK);
	return NULL;
}

static struct mock_dev *affinity_dev(const char *affinity)
{
	struct mock_config cfg;
	struct mock_dev *m;

	memset(&cfg, 0, sizeof(cfg));
	cfg.completion = MOCK_COMPLETE_DEFER;
	cfg.use_complete = true;
	m = mock_create(&cfg, NULL);
	assert_int_equal(rq_queue_attr_set(m->q, "rq_affinity", affinity), 0);
	return m;
}

static struct rq_bio *one_bio(void)
{
	struct rq_bio *bio = rq_bio_alloc(1);

	assert_non_null(bio);
	assert_int_equal(rq_bio_add_vec(bio, buf, sizeof(buf)), 0);
	bio->op = RQ_OP_READ;
	bio->iter.sector = 8;
	bio->end_io = record_end_io;
	return bio;
}

/*
 * rq_affinity 2: a request completed by another thread is not ended there;
 * it ends on the submitting thread when that thread processes completions.
 * The service is application-driven on the virtual clock (main()), so no
 * fallback can end it first: until the submitter looks, nothing has ended.
 */
static void test_force_runs_on_submitter(void **state)
{
	struct mock_dev *m = affinity_dev("2");
	struct rq_bio *bio = one_bio();
	struct completer c = { m };
	pthread_t th;

	atomic_store(&end_io_calls, 0);
	rq_submit_bio(m->q, bio);
	assert_int_equal(mock_nr_held(m), 1);
	assert_int_equal(pthread_create(&th, NULL, complete_from_other_thread, &c), 0);
	pthread_join(th, NULL);
	assert_int_equal(atomic_load(&end_io_calls), 0);
	assert_int_equal(rq_process_completions(), 1);
	assert_int_equal(atomic_load(&end_io_calls), 1);
	assert_true(pthread_equal(end_io_thread, pthread_self()));
	assert_int_equal(rq_process_completions(), 0);
	rq_bio_put(bio);
	mock_destroy(m);
}

/* The service as an event loop on another thread runs it: to @arg's time. */
static void *serve_to(void *arg)
{
	fx_serve_until(*(const uint64_t *)arg);
	return NULL;
}

/*
 * rq_affinity 2 with a submitter that never comes back: the service
 * fallback ends the request once a millisecond has passed since the push,
 * not before, exactly once, on the thread that runs the service.
 */
static void test_force_idle_submitter(void **state)
{
	struct mock_dev *m = affinity_dev("2");
	struct rq_bio *bio = one_bio();
	struct completer c = { m };
	uint64_t t;
	pthread_t th;

	atomic_store(&end_io_calls, 0);
	rq_submit_bio(m->q, bio);
	assert_int_equal(pthread_create(&th, NULL, complete_from_other_thread, &c), 0);
	pthread_join(th, NULL);
	t = fx_vclock_now() + 900000; /* 0.9 ms: the owner may still come */
	assert_int_equal(pthread_create(&th, NULL, serve_to, &t), 0);
	pthread_join(th, NULL);
	assert_int_equal(atomic_load(&end_io_calls), 0);
	t = fx_vclock_now() + 200000; /* past the millisecond */
	assert_int_equal(pthread_create(&th, NULL, serve_to, &t), 0);
	pthread_join(th, NULL);
	assert_int_equal(atomic_load(&end_io_calls), 1);
	assert_true(pthread_equal(end_io_thread, th));
	/* exactly once: after destroy no second end_io can come */
	mock_destroy(m);
	assert_int_equal(atomic_load(&end_io_calls), 1);
	rq_bio_put(bio);
}

/* rq_affinity 1 (and 0): the completing thread runs ops->complete itself. */
static void test_inline_on_completer(void **state)
{
	static const char *modes[] = { "0", "1" };

	for (unsigned i = 0; i < 2; i++) {
		struct mock_dev *m = affinity_dev(modes[i]);
		struct rq_bio *bio = one_bio();
		struct completer c = { m };
		pthread_t th;

		atomic_store(&end_io_calls, 0);
		rq_submit_bio(m->q, bio);
		assert_int_equal(pthread_create(&th, NULL, complete_from_other_thread, &c), 0);
		pthread_join(th, NULL);
		assert_int_equal(atomic_load(&end_io_calls), 1);
		assert_true(pthread_equal(end_io_thread, th));
		assert_int_equal(rq_process_completions(), 0);
		rq_bio_put(bio);
		mock_destroy(m);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_force_runs_on_submitter),
		cmocka_unit_test(test_force_idle_submitter),
		cmocka_unit_test(test_inline_on_completer),
	};

	/* no service thread behind the tests' backs: they drive it on the virtual clock */
	fx_vclock_install(1000000000ull);
	assert_int_equal(rq_service_manual(), 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
