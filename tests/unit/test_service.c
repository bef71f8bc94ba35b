/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Application-driven service (rq_service_manual(), doc/architecture.md,
 * "Threading model"): after the switch no library thread exists, the work
 * the service thread would do — the delayed run that retries a request the
 * driver refused, the timeout scan — happens only in rq_service_run(), and
 * rq_service_fd() polls readable when work is asked for.  A process whose
 * service thread already runs cannot switch.
 *
 * In that mode every service deadline is on the library clock: with a
 * virtual clock installed, a delayed run or a timeout comes on the first
 * rq_service_run() after the virtual clock passes it and never sooner,
 * whatever real time does, and the wait rq_service_run() returns is the
 * virtual time left.
 *
 * The switch is per process, so the refusal is checked in a child forked
 * before this process starts anything, and the rest runs after the switch.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "mock_driver.h"
#include "fixtures.h"

static uint8_t buf[4096];

#define MS 1000000ull

/* Threads of this process. */
static unsigned nr_threads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	unsigned n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

static bool fd_readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static rq_status_t end_at_once(struct rq_hw_ctx *hctx, struct rq_request *rq, bool last)
{
	(void)hctx;
	(void)last;
	rq_mq_end_request(rq, RQ_STS_OK);
	return RQ_STS_OK;
}

/*
 * With the service thread running (a queue exists), the switch is refused
 * and the manual calls say so; in a child, so this process stays clean.
 */
static void test_refused_once_thread_runs(void **state)
{
	pid_t pid = fork();
	int status;

	(void)state;
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rq_tag_set *set;
		struct rq_queue *q;
		struct rq_mq_ops ops = { RQ_MQ_OPS_INIT, .queue_rq = end_at_once };
		struct rq_tag_set_config sc = { RQ_TAG_SET_CONFIG_INIT, .ops = &ops, .nr_hw_queues = 1,
						.queue_depth = 4, .numa_node = -1 };

		if (rq_tag_set_alloc(&sc, &set) || rq_mq_alloc_queue(set, NULL, &q))
			_exit(2);
		if (rq_service_manual() != -EBUSY)
			_exit(3);
		if (rq_service_run() != -EINVAL || rq_service_fd() != -EINVAL)
			_exit(4);
		rq_queue_destroy(q);
		rq_tag_set_free(set);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* After the switch: no library thread, I/O works, the switch is idempotent. */
static void test_manual_owns_no_thread(void **state)
{
	unsigned before;
	struct mock_config cfg = { .completion = MOCK_COMPLETE_INLINE };
	struct rq_queue_config qc;
	struct mock_dev *m;
	struct mock_io io;

	(void)state;
	assert_int_equal(rq_service_manual(), 0);
	assert_int_equal(rq_service_manual(), 0);
	assert_true(rq_service_fd() >= 0);
	before = nr_threads();
	memset(&qc, 0, sizeof(qc));
	qc.size = sizeof(qc);
	qc.scheduler = "mq-deadline";
	m = mock_create(&cfg, &qc);
	rq_submit_bio(m->q, mock_bio(&io, RQ_OP_READ, 0, buf, 4096));
	mock_wait(&io);
	assert_int_equal(io.status, RQ_STS_OK);
	rq_bio_put(io.bio);
	assert_int_equal(nr_threads(), before);
	mock_destroy(m);
	assert_int_equal(nr_threads(), before);
}

/*
 * A request the driver refuses once (RQ_STS_RESOURCE, nothing else in
 * flight to restart the queue) waits for the 3 ms delayed run, which only
 * rq_service_run() performs; the eventfd says it was asked for.
 */
static void test_delayed_run_is_the_apps(void **state)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_INLINE };
	const rq_status_t busy = RQ_STS_RESOURCE;
	struct mock_dev *m;
	struct mock_io io;

	(void)state;
	assert_int_equal(rq_service_manual(), 0);
	fx_vclock_install(1000 * MS);
	m = mock_create(&cfg, NULL);
	while (rq_service_run() == 0) /* nothing left from earlier tests */
		;
	mock_script(m, &busy, 1);
	rq_submit_bio(m->q, mock_bio(&io, RQ_OP_READ, 0, buf, 4096));
	fx_vclock_set(fx_vclock_now() + 30 * MS);
	/* ten times the delay of (virtual) time, and nothing retried it */
	assert_int_equal(io.done, 0);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 1);
	assert_true(fd_readable(rq_service_fd()));
	fx_serve_until(fx_vclock_now()); /* the run that is due now */
	assert_int_equal(io.done, 1);
	assert_false(fd_readable(rq_service_fd()));
	assert_int_equal(io.status, RQ_STS_OK);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 2);
	rq_bio_put(io.bio);
	mock_destroy(m);
	rq_clock_set_source(NULL, NULL);
}

/*
 * The timeout scan runs in rq_service_run() too, and only there: 100 ms of
 * (virtual) time with no call times nothing out; the service runs the
 * library asks for over the next 100 ms (io_timeout 20 ms) do.
 */
static void test_timeouts_are_the_apps(void **state)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_DEFER, .use_timeout = true,
				   .timeout_ret = RQ_EH_RESET_TIMER, .timeout_ms = 20 };
	struct mock_dev *m;
	struct mock_io io;

	(void)state;
	assert_int_equal(rq_service_manual(), 0);
	fx_vclock_install(2000 * MS);
	m = mock_create(&cfg, NULL);
	rq_submit_bio(m->q, mock_bio(&io, RQ_OP_READ, 0, buf, 4096));
	assert_true(mock_wait_held(m, 1, 1000));
	fx_vclock_set(fx_vclock_now() + 100 * MS);
	assert_int_equal(mock_count(m, MOCK_TIMEOUT), 0);
	fx_serve_until(fx_vclock_now() + 100 * MS);
	assert_true(mock_count(m, MOCK_TIMEOUT) >= 1);
	assert_int_equal(mock_complete_all(m, RQ_STS_OK), 1);
	mock_wait(&io);
	assert_int_equal(io.status, RQ_STS_OK);
	rq_bio_put(io.bio);
	mock_destroy(m);
	rq_clock_set_source(NULL, NULL);
}

/* A virtual library clock: moves only when a test moves it. */
static uint64_t vclock_ns;

static uint64_t vclock(void *arg)
{
	(void)arg;
	return __atomic_load_n(&vclock_ns, __ATOMIC_ACQUIRE);
}

static void vclock_advance(uint64_t ns)
{
	__atomic_add_fetch(&vclock_ns, ns, __ATOMIC_ACQ_REL);
}

/*
 * A request the driver refuses once waits for the 3 ms delayed run, and
 * those 3 ms are virtual: the real time that passes between the calls
 * runs nothing; each rq_service_run() before the
 * deadline says how much virtual time is left, to the nanosecond; the
 * first one after the clock reaches it retries the request.  Fails if the
 * deadline is set or compared on the real clock.
 */
static void test_delayed_run_on_virtual_clock(void **state)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_INLINE };
	const rq_status_t busy = RQ_STS_RESOURCE;
	struct mock_dev *m;
	struct mock_io io;

	(void)state;
	assert_int_equal(rq_service_manual(), 0);
	__atomic_store_n(&vclock_ns, 5000 * MS, __ATOMIC_RELEASE);
	rq_clock_set_source(vclock, NULL);
	assert_int_equal(rq_service_clock_ns(), 5000 * MS);
	m = mock_create(&cfg, NULL);
	while (rq_service_run() == 0) /* nothing left from earlier tests */
		;
	mock_script(m, &busy, 1);
	rq_submit_bio(m->q, mock_bio(&io, RQ_OP_READ, 0, buf, 4096));
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 1);
	assert_true(fd_readable(rq_service_fd()));

	/* due at virtual 5003 ms: the whole delay is left, to the nanosecond,
	 * whatever real time passed between the calls */
	for (int i = 0; i < 3; i++) {
		int64_t wait;

		wait = rq_service_run();
		assert_int_equal(io.done, 0);
		assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 1);
		assert_int_equal(wait, 3 * MS);
	}

	vclock_advance(2 * MS);
	assert_int_equal(rq_service_run(), 1 * MS);
	vclock_advance(1 * MS - 1);
	assert_int_equal(rq_service_run(), 1);
	assert_int_equal(io.done, 0);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 1);

	/* the deadline itself: this call retries, and completes inline */
	vclock_advance(1);
	assert_true(rq_service_run() > 0);
	assert_int_equal(io.done, 1);
	assert_int_equal(io.status, RQ_STS_OK);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 2);
	rq_bio_put(io.bio);
	mock_destroy(m);
	rq_clock_set_source(NULL, NULL);
}

/*
 * The timeout scan counts virtual time too: a request held by the driver
 * is not timed out by ten service runs while the virtual clock stands
 * still (whatever real time passes), and is between io_timeout and io_timeout
 * plus one scan interval (half of it) of virtual time after it was issued.
 */
static void test_timeouts_on_virtual_clock(void **state)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_DEFER, .use_timeout = true,
				   .timeout_ret = RQ_EH_RESET_TIMER, .timeout_ms = 20 };
	struct mock_dev *m;
	struct mock_io io;
	uint64_t issued, waited;

	(void)state;
	assert_int_equal(rq_service_manual(), 0);
	__atomic_store_n(&vclock_ns, 9000 * MS, __ATOMIC_RELEASE);
	rq_clock_set_source(vclock, NULL);
	m = mock_create(&cfg, NULL);
	while (rq_service_run() == 0)
		;
	rq_submit_bio(m->q, mock_bio(&io, RQ_OP_READ, 0, buf, 4096));
	assert_true(mock_wait_held(m, 1, 1000));
	issued = vclock(NULL);
	for (int i = 0; i < 10; i++)
		assert_true(rq_service_run() > 0);
	assert_int_equal(mock_count(m, MOCK_TIMEOUT), 0);
	/* step virtual time by what rq_service_run() asks for, at most 1 ms */
	while (!mock_count(m, MOCK_TIMEOUT)) {
		int64_t wait = rq_service_run();

		assert_true(wait > 0);
		assert_true(vclock(NULL) - issued <= 40 * MS);
		if (!mock_count(m, MOCK_TIMEOUT))
			vclock_advance(wait < (int64_t)MS ? (uint64_t)wait : MS);
	}
	waited = vclock(NULL) - issued;
	assert_true(waited >= 20 * MS);
	assert_true(waited <= 30 * MS);
	assert_int_equal(mock_complete_all(m, RQ_STS_OK), 1);
	mock_wait(&io);
	assert_int_equal(io.status, RQ_STS_OK);
	rq_bio_put(io.bio);
	mock_destroy(m);
	rq_clock_set_source(NULL, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		/* first: forks before this process starts anything */
		cmocka_unit_test(test_refused_once_thread_runs),
		cmocka_unit_test(test_manual_owns_no_thread),
		cmocka_unit_test(test_delayed_run_is_the_apps),
		cmocka_unit_test(test_timeouts_are_the_apps),
		cmocka_unit_test(test_delayed_run_on_virtual_clock),
		cmocka_unit_test(test_timeouts_on_virtual_clock),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
