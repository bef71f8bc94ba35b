/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The single-queue front end with a minimal FIFO scheduler defined here:
 * request_fn calls, fetch / end by bytes, merging, the bounded request pool,
 * flush sequencing, teardown.  (The real schedulers have their own suites.)
 */
#include <errno.h>
#include <stdlib.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <librequest/librequest.h>

#include "fixtures.h"

/* ------------------------------------------------ a FIFO sq scheduler */

struct fifo {
	struct rq_list_node list;
};

static int fifo_init(struct rq_queue *q, void **data)
{
	struct fifo *f = calloc(1, sizeof(*f));

	if (!f)
		return -ENOMEM;
	rq_list_init(&f->list);
	*data = f;
	return 0;
}

static void fifo_exit(struct rq_queue *q, void *data)
{
	free(data);
}

static void fifo_add(struct rq_queue *q, struct rq_request *rq)
{
	struct fifo *f = rq_sched_data(q);

	rq_list_add_tail(&rq->queuelist, &f->list);
}

static int fifo_dispatch(struct rq_queue *q, bool force)
{
	struct fifo *f = rq_sched_data(q);
	struct rq_request *rq = rq_list_first_rq(&f->list);

	if (!rq)
		return 0;
	rq_list_del_init(&rq->queuelist);
	rq_sq_dispatch_add_tail(q, rq);
	return 1;
}

static void fifo_merge_req(struct rq_queue *q, struct rq_request *rq, struct rq_request *next)
{
	rq_list_del_init(&next->queuelist);
}

static const struct rq_elevator_sq_ops fifo_sq_ops = {
	RQ_ELV_SQ_OPS_INIT,
	.init_queue = fifo_init,
	.exit_queue = fifo_exit,
	.add_request = fifo_add,
	.dispatch = fifo_dispatch,
	.merge_req = fifo_merge_req,
};

static const struct rq_elevator_type fifo_type = {
	RQ_ELV_TYPE_INIT,
	.name = "sqtest-fifo",
	.features = RQ_ELV_F_SQ,
	.sq_ops = &fifo_sq_ops,
};

/* ------------------------------------------------------------ driver */

#define MAX_HELD 256

struct drv {
	bool hold;                     /* keep requests instead of ending them */
	unsigned calls;                /* request_fn calls */
	unsigned nr_seen;
	struct { int op; uint64_t sector; uint32_t bytes; uint32_t opf; } seen[1024];
	struct rq_request *held[MAX_HELD];
	unsigned nr_held;
};

static struct drv drv;

static void drv_request_fn(struct rq_queue *q)
{
	struct rq_request *rq;

	drv.calls++;
	while ((rq = rq_sq_fetch_request(q))) {
		if (drv.nr_seen < 1024) {
			drv.seen[drv.nr_seen].op = rq->op;
			drv.seen[drv.nr_seen].sector = rq->sector;
			drv.seen[drv.nr_seen].bytes = rq->bytes;
			drv.seen[drv.nr_seen].opf = rq->opf;
			drv.nr_seen++;
		}
		if (drv.hold) {
			assert_true(drv.nr_held < MAX_HELD);
			drv.held[drv.nr_held++] = rq;
		} else {
			rq_sq_end_request_all_locked(rq, RQ_STS_OK);
		}
	}
}

static _Atomic int timeouts;
static _Atomic enum rq_timeout_ret timeout_answer = RQ_EH_RESET_TIMER;

/* The timeout hook: count, and answer as the test says (queue lock held). */
static enum rq_timeout_ret drv_timeout(struct rq_request *rq)
{
	atomic_fetch_add(&timeouts, 1);
	return atomic_load(&timeout_answer);
}

static const struct rq_sq_ops drv_ops = {
	RQ_SQ_OPS_INIT,
	.request_fn = drv_request_fn,
	.timeout = drv_timeout,
};

static char buf[4096];
static _Atomic int ended, bad;

static void count_end_io(struct rq_bio *bio)
{
	if (bio->status != RQ_STS_OK)
		atomic_fetch_add(&bad, 1);
	atomic_fetch_add(&ended, 1);
	rq_bio_put(bio);
}

static struct rq_bio *mkbio(unsigned op, unsigned opf, uint64_t sector)
{
	struct rq_bio *bio = rq_bio_alloc(1);

	assert_non_null(bio);
	if (op == RQ_OP_READ || op == RQ_OP_WRITE)
		assert_int_equal(rq_bio_add_vec(bio, buf, sizeof(buf)), 0);
	bio->op = (uint8_t)op;
	bio->opf = opf;
	bio->iter.sector = sector;
	bio->end_io = count_end_io;
	return bio;
}

static struct rq_queue *mkq(unsigned nr_requests, unsigned features)
{
	struct rq_queue_limits lim;
	struct rq_sq_config cfg = {
		RQ_SQ_CONFIG_INIT,
		.ops = &drv_ops,
		.scheduler = "sqtest-fifo",
		.nr_requests = nr_requests,
	};
	struct rq_queue *q;
	int ret = rq_sched_register(&fifo_type);

	assert_true(ret == 0 || ret == -EEXIST);
	rq_queue_limits_default(&lim);
	lim.features = features;
	cfg.limits = &lim;
	memset(&drv, 0, sizeof(drv));
	atomic_store(&ended, 0);
	atomic_store(&bad, 0);
	assert_int_equal(rq_sq_alloc_queue(&cfg, &q), 0);
	assert_true(rq_queue_is_sq(q));
	return q;
}

/* Stop the queue (request_fn is not called), or start it (and so run it). */
static void set_stopped(struct rq_queue *q, bool stopped)
{
	rq_sq_lock(q);
	if (stopped)
		rq_sq_stop_queue(q);
	else
		rq_sq_start_queue(q);
	rq_sq_unlock(q);
}

/* Every bio reaches request_fn and ends exactly once, in order. */
static void test_basic_fifo(void **state)
{
	struct rq_queue *q = mkq(0, 0);
	char name[128];

	assert_true(rq_queue_attr_get(q, "scheduler", name, sizeof(name)) > 0);
	/* the active one in brackets, among whatever else is registered */
	assert_non_null(strstr(name, "[sqtest-fifo]"));
	assert_null(strstr(name, "none"));
	for (unsigned i = 0; i < 100; i++)
		rq_submit_bio(q, mkbio(i % 2 ? RQ_OP_WRITE : RQ_OP_READ, 0, i * 64));
	assert_int_equal(atomic_load(&ended), 100);
	assert_int_equal(atomic_load(&bad), 0);
	assert_int_equal(drv.nr_seen, 100);
	for (unsigned i = 0; i < 100; i++)
		assert_int_equal(drv.seen[i].sector, i * 64);
	rq_queue_destroy(q);
}

/* Sequential bios on a plug reach the driver merged, within the limits. */
static void test_plug_merges(void **state)
{
	struct rq_queue *q = mkq(0, 0);
	struct rq_queue_stats st;
	struct rq_plug plug;

	rq_start_plug(&plug);
	for (unsigned i = 0; i < 64; i++)
		rq_submit_bio(q, mkbio(RQ_OP_WRITE, 0, i * 8));
	assert_int_equal(drv.nr_seen, 0);
	rq_finish_plug(&plug);
	assert_int_equal(atomic_load(&ended), 64);
	/* default limits: 255 sectors per request -> 31 bios of 8 sectors each */
	assert_true(drv.nr_seen >= 2 && drv.nr_seen <= 3);
	rq_queue_get_stats(q, &st, sizeof(st));
	assert_int_equal(st.merges_back + st.merges_front, 64 - drv.nr_seen);
	rq_queue_destroy(q);
}

/* Queued (not yet fetched) contiguous requests merge in the scheduler. */
static void test_scheduler_merges(void **state)
{
	struct rq_queue *q = mkq(0, 0);

	set_stopped(q, true);
	for (unsigned i = 0; i < 8; i++)
		rq_submit_bio(q, mkbio(RQ_OP_READ, 0, 1000 + i * 8));
	assert_int_equal(drv.nr_seen, 0);
	set_stopped(q, false);
	assert_int_equal(drv.nr_seen, 1);
	assert_int_equal(drv.seen[0].bytes, 8 * 4096);
	assert_int_equal(atomic_load(&ended), 8);
	rq_queue_destroy(q);
}

/*
 * The pool bounds requests: with nr_requests held by the driver a NOWAIT bio
 * ends with AGAIN; ending by bytes frees the request only when all is done.
 */
static void test_pool_and_partial(void **state)
{
	struct rq_queue *q = mkq(4, 0);

	drv.hold = true;
	for (unsigned i = 0; i < 4; i++)
		rq_submit_bio(q, mkbio(RQ_OP_READ, 0, i * 1000));
	assert_int_equal(drv.nr_held, 4);
	rq_submit_bio(q, mkbio(RQ_OP_READ, RQ_BIO_NOWAIT, 9000));
	assert_int_equal(atomic_load(&ended), 1); /* AGAIN */
	assert_int_equal(atomic_load(&bad), 1);

	/* half of the first request: still the driver's */
	assert_true(rq_sq_end_request(drv.held[0], RQ_STS_OK, 2048));
	assert_false(rq_sq_end_request(drv.held[0], RQ_STS_OK, 2048));
	assert_int_equal(atomic_load(&ended), 2);
	/* a second end of the same request does nothing */
	assert_false(rq_sq_end_request(drv.held[0], RQ_STS_OK, 4096));
	assert_int_equal(atomic_load(&ended), 2);
	for (unsigned i = 1; i < 4; i++)
		rq_sq_end_request_all(drv.held[i], RQ_STS_OK);
	assert_int_equal(atomic_load(&ended), 5);
	rq_queue_destroy(q);
}

/* With a write cache and no FUA: PREFLUSH|FUA write -> FLUSH, WRITE, FLUSH. */
static void test_flush_sequence(void **state)
{
	struct rq_queue *q = mkq(0, RQ_FEAT_WRITE_CACHE);

	rq_submit_bio(q, mkbio(RQ_OP_WRITE, RQ_BIO_PREFLUSH | RQ_BIO_FUA, 64));
	assert_int_equal(atomic_load(&ended), 1);
	assert_int_equal(atomic_load(&bad), 0);
	assert_int_equal(drv.nr_seen, 3);
	assert_int_equal(drv.seen[0].op, RQ_OP_FLUSH);
	assert_int_equal(drv.seen[1].op, RQ_OP_WRITE);
	assert_int_equal(drv.seen[1].opf & (RQ_BIO_PREFLUSH | RQ_BIO_FUA), 0);
	assert_int_equal(drv.seen[2].op, RQ_OP_FLUSH);
	rq_queue_destroy(q);
}

/*
 * Teardown: queued requests end with IOERR once; held ones are waited for.
 * end_later ends the held ones once destroy is under way (it has ended
 * the five queued ones, which it does before waiting for the driver), and
 * notes whether destroy had already returned (it must not have).
 */
static atomic_int destroyed, destroyed_before, saw_queued_end;

static void *end_later(void *arg)
{
	uint64_t end = fixture_now_ms() + 10000;

	(void)arg;
	while (atomic_load(&ended) < 5 && fixture_now_ms() < end)
		fx_poll_pause();
	atomic_store(&saw_queued_end, atomic_load(&ended) >= 5);
	atomic_store(&destroyed_before, atomic_load(&destroyed));
	for (unsigned i = 0; i < drv.nr_held; i++)
		rq_sq_end_request_all(drv.held[i], RQ_STS_OK);
	return NULL;
}

static void test_teardown(void **state)
{
	struct rq_queue *q = mkq(0, 0);
	pthread_t th;

	drv.hold = true;
	for (unsigned i = 0; i < 3; i++)
		rq_submit_bio(q, mkbio(RQ_OP_READ, 0, i * 1000));
	set_stopped(q, true);
	for (unsigned i = 0; i < 5; i++)
		rq_submit_bio(q, mkbio(RQ_OP_READ, 0, 50000 + i * 1000));
	assert_int_equal(drv.nr_held, 3);
	atomic_store(&destroyed, 0);
	assert_int_equal(pthread_create(&th, NULL, end_later, NULL), 0);
	rq_queue_destroy(q);
	atomic_store(&destroyed, 1);
	pthread_join(th, NULL);
	assert_true(atomic_load(&saw_queued_end));
	assert_int_equal(atomic_load(&destroyed_before), 0);
	assert_int_equal(atomic_load(&ended), 8);
	assert_int_equal(atomic_load(&bad), 5);
}

/* Tags: start_tag hands out tags up to the depth, find_tag, end frees. */
static void test_tags(void **state)
{
	struct rq_queue *q = mkq(0, 0);
	struct rq_request *rq;

	rq_sq_lock(q);
	assert_int_equal(rq_sq_init_tags(q, 2), 0);
	rq_sq_stop_queue(q);
	rq_sq_unlock(q);
	for (unsigned i = 0; i < 3; i++)
		rq_submit_bio(q, mkbio(RQ_OP_READ, 0, i * 1000));
	rq_sq_lock(q);
	rq = rq_sq_peek_request(q);
	assert_non_null(rq);
	assert_int_equal(rq_sq_start_tag(q, rq), 0);
	assert_true(rq_sq_find_tag(q, (unsigned)rq->tag) == rq);
	rq = rq_sq_peek_request(q);
	assert_int_equal(rq_sq_start_tag(q, rq), 0);
	rq = rq_sq_peek_request(q);
	assert_int_equal(rq_sq_start_tag(q, rq), 1); /* depth 2: busy */
	assert_int_equal(rq_sq_resize_tags(q, 1), -EBUSY);
	assert_int_equal(rq_sq_resize_tags(q, 3), 0);
	assert_int_equal(rq_sq_start_tag(q, rq), 0);
	for (unsigned t = 0; t < 3; t++)
		rq_sq_end_request_all_locked(rq_sq_find_tag(q, t), RQ_STS_OK);
	assert_null(rq_sq_find_tag(q, 0));
	rq_sq_start_queue(q);
	rq_sq_unlock(q);
	assert_int_equal(atomic_load(&ended), 3);
	rq_queue_destroy(q);
}

/* --------------------------------------- plugged requests taken ahead */

/* Submits NOWAIT reads without a plug until one ends with AGAIN. */
struct nowait_fill {
	struct rq_queue *q;
	uint64_t sector;
	unsigned made; /* requests made before the pool said no */
};

static void *nowait_fill_fn(void *arg)
{
	struct nowait_fill *f = arg;

	for (;;) {
		int bad_before = atomic_load(&bad);

		rq_submit_bio(f->q, mkbio(RQ_OP_READ, RQ_BIO_NOWAIT, f->sector + f->made * 1000));
		if (atomic_load(&bad) != bad_before)
			return NULL;
		f->made++;
	}
}

/* How many requests another thread (no plug) still gets from @q's pool. */
static unsigned nowait_fill(struct rq_queue *q, uint64_t sector)
{
	struct nowait_fill f = { .q = q, .sector = sector };
	pthread_t th;

	assert_int_equal(pthread_create(&th, NULL, nowait_fill_fn, &f), 0);
	pthread_join(th, NULL);
	return f.made;
}

/*
 * A plugging thread takes pool requests ahead, several per lock hold:
 * they count against nr_requests (another thread never gets more than the
 * limit leaves), at most SQ_PLUG_BATCH - 1 (15) sit idle, and what was
 * not used is back once the plug issues: the pool then fills to exactly
 * nr_requests.
 */
static void test_plug_requests_ahead_limit(void **state)
{
	struct rq_queue *q = mkq(64, 0);
	struct rq_plug plug;
	unsigned other;

	drv.hold = true;
	rq_start_plug(&plug);
	for (unsigned i = 0; i < 3; i++)
		rq_submit_bio(q, mkbio(RQ_OP_READ, 0, i * 1000));
	assert_int_equal(drv.nr_held, 0);
	other = nowait_fill(q, 1000000);
	assert_true(other <= 64 - 3);
	assert_true(other >= 64 - 3 - 15);
	rq_finish_plug(&plug);
	assert_int_equal(drv.nr_held, other + 3);
	other += nowait_fill(q, 2000000);
	assert_int_equal(drv.nr_held, 64);
	assert_int_equal(other, 61);
	for (unsigned i = 0; i < drv.nr_held; i++)
		rq_sq_end_request_all(drv.held[i], RQ_STS_OK);
	assert_int_equal(atomic_load(&ended), 64 + 2); /* and two AGAIN */
	assert_int_equal(atomic_load(&bad), 2);
	rq_queue_destroy(q);
}

/*
 * A plugged bio still merges into a request waiting in the scheduler (the
 * lockless "nothing queued" shortcut must not skip it), and the plug's
 * own requests still merge with queued ones when the plug issues.
 */
static void test_plugged_bio_merges_queued(void **state)
{
	struct rq_queue *q = mkq(0, 0);
	struct rq_queue_stats st;
	struct rq_plug plug;

	set_stopped(q, true);
	rq_submit_bio(q, mkbio(RQ_OP_READ, 0, 5000));
	rq_start_plug(&plug);
	rq_submit_bio(q, mkbio(RQ_OP_READ, 0, 5008)); /* bio merge, queued request */
	rq_submit_bio(q, mkbio(RQ_OP_WRITE, 0, 9000));
	rq_submit_bio(q, mkbio(RQ_OP_READ, 0, 5016)); /* again: not the plug's tail */
	rq_finish_plug(&plug);
	rq_queue_get_stats(q, &st, sizeof(st));
	assert_int_equal(st.merges_back, 2);
	assert_int_equal(rq_sq_nr_sorted(q), 2);

	/* scheduler empty: the plug's request joins the queued one at insert */
	set_stopped(q, false);
	set_stopped(q, true);
	assert_int_equal(drv.nr_seen, 2);
	assert_int_equal(drv.seen[0].bytes, 3 * 4096);
	rq_submit_bio(q, mkbio(RQ_OP_READ, 0, 20000));
	rq_start_plug(&plug);
	rq_submit_bio(q, mkbio(RQ_OP_READ, 0, 20008));
	rq_finish_plug(&plug);
	set_stopped(q, false);
	assert_int_equal(drv.nr_seen, 3);
	assert_int_equal(drv.seen[2].bytes, 2 * 4096);
	assert_int_equal(atomic_load(&ended), 6);
	assert_int_equal(atomic_load(&bad), 0);
	rq_queue_destroy(q);
}

/*
 * One plug over two queues: each queue's requests come from its own pool and every request taken ahead goes back to the pool it came
 * from (each pool fills to its limit afterwards).
 */
static void test_plug_two_queues(void **state)
{
	struct rq_queue *q1 = mkq(16, 0), *q2;
	struct rq_plug plug;

	assert_int_equal(rq_sq_alloc_queue(&(struct rq_sq_config){
					   RQ_SQ_CONFIG_INIT, .ops = &drv_ops,
					   .scheduler = "sqtest-fifo", .nr_requests = 16 }, &q2), 0);
	drv.hold = true;
	rq_start_plug(&plug);
	/* 7 for q1 (batches of 1, 1, 2, 4: one left ahead), then 7 for q2 */
	for (unsigned i = 0; i < 7; i++)
		rq_submit_bio(q1, mkbio(RQ_OP_READ, 0, i * 1000));
	for (unsigned i = 0; i < 7; i++)
		rq_submit_bio(q2, mkbio(RQ_OP_READ, 0, i * 1000));
	rq_finish_plug(&plug);
	assert_int_equal(drv.nr_held, 14);
	assert_int_equal(nowait_fill(q1, 1000000), 9);
	assert_int_equal(nowait_fill(q2, 1000000), 9);
	for (unsigned i = 0; i < drv.nr_held; i++)
		rq_sq_end_request_all(drv.held[i], RQ_STS_OK);
	assert_int_equal(atomic_load(&ended), 32 + 2);
	rq_queue_destroy(q1);
	rq_queue_destroy(q2);
}

/*
 * A queue destroyed while the calling thread's plug holds its requests
 * (and requests taken ahead): the plugged bios fail, and the thread's
 * next plug, on a new queue (perhaps at the same address), works.
 */
static void test_plug_destroy_with_requests_ahead(void **state)
{
	struct rq_queue *q = mkq(0, 0);
	struct rq_plug plug;

	rq_start_plug(&plug);
	for (unsigned i = 0; i < 3; i++)
		rq_submit_bio(q, mkbio(RQ_OP_READ, 0, i * 1000));
	rq_queue_destroy(q);
	assert_int_equal(atomic_load(&ended), 3);
	assert_int_equal(atomic_load(&bad), 3);
	q = mkq(0, 0);
	for (unsigned i = 0; i < 40; i++)
		rq_submit_bio(q, mkbio(RQ_OP_READ, 0, i * 1000));
	rq_finish_plug(&plug);
	assert_int_equal(atomic_load(&ended), 40);
	assert_int_equal(atomic_load(&bad), 0);
	assert_int_equal(drv.nr_seen, 40);
	rq_queue_destroy(q);
}

#define MS 1000000ull

/*
 * Timeouts, on the virtual clock with application-driven service (set in
 * main()): the queue scans every io_timeout / 2 = 20 ms from its creation
 * (v0); the first scan at or after a request's issue sets its deadline
 * one io_timeout (40 ms) later, and the hook runs on the scan at that
 * deadline, never on a service run 1 ns before.  Issued at v0 (no scan
 * there: the queue was just registered), the request is first seen at
 * v0 + 20 ms, so the hook runs at v0 + 60 ms exactly, inside the promised
 * window [issue + io_timeout, issue + io_timeout + 20 ms].  RESET_TIMER
 * calls it again exactly every 40 ms; DONE is answered once, then no call
 * for five more periods while the driver still sits on it, and the driver
 * then ends it.  A request ended in time never sees the hook.
 */
static void test_timeouts(void **state)
{
	uint64_t v0 = fx_vclock_now(), due;
	struct rq_queue *q = mkq(0, 0);

	atomic_store(&timeouts, 0);
	assert_int_equal(rq_queue_attr_set(q, "io_timeout", "40"), 0);
	drv.hold = true;
	atomic_store(&timeout_answer, RQ_EH_RESET_TIMER);
	rq_submit_bio(q, mkbio(RQ_OP_READ, 0, 0));
	assert_int_equal(drv.nr_held, 1);
	due = v0 + 60 * MS;
	for (int call = 1; call <= 2; call++, due += 40 * MS) {
		fx_serve_until(due - 1);
		assert_int_equal(atomic_load(&timeouts), call - 1);
		fx_serve_until(due);
		assert_int_equal(atomic_load(&timeouts), call);
	}

	/* DONE: called once for this issue (at the next deadline), then the driver ends it */
	atomic_store(&timeout_answer, RQ_EH_DONE);
	fx_serve_until(due - 1);
	assert_int_equal(atomic_load(&timeouts), 2);
	fx_serve_until(due);
	assert_int_equal(atomic_load(&timeouts), 3);
	fx_serve_until(due + 200 * MS); /* five timeout periods */
	assert_int_equal(atomic_load(&timeouts), 3);
	rq_sq_end_request_all(drv.held[0], RQ_STS_TIMEOUT);
	assert_int_equal(atomic_load(&ended), 1);
	assert_int_equal(atomic_load(&bad), 1);

	/* ended in time: no call, however long the clock runs after */
	drv.hold = false;
	rq_submit_bio(q, mkbio(RQ_OP_READ, 0, 64));
	assert_int_equal(atomic_load(&ended), 2);
	fx_serve_until(fx_vclock_now() + 200 * MS);
	assert_int_equal(atomic_load(&timeouts), 3);
	atomic_store(&timeout_answer, RQ_EH_RESET_TIMER);
	rq_queue_destroy(q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_basic_fifo),
		cmocka_unit_test(test_plug_merges),
		cmocka_unit_test(test_scheduler_merges),
		cmocka_unit_test(test_pool_and_partial),
		cmocka_unit_test(test_flush_sequence),
		cmocka_unit_test(test_teardown),
		cmocka_unit_test(test_tags),
		cmocka_unit_test(test_timeouts),
		cmocka_unit_test(test_plug_requests_ahead_limit),
		cmocka_unit_test(test_plugged_bio_merges_queued),
		cmocka_unit_test(test_plug_two_queues),
		cmocka_unit_test(test_plug_destroy_with_requests_ahead),
	};

	/* before the first queue: the service (timeout scan, delayed runs)
	 * runs only in fx_serve_until(), on a virtual clock the test moves */
	if (rq_service_manual())
		return 1;
	fx_vclock_install(1000 * MS);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
