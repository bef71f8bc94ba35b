/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The single-queue front end's batched lock holds keep the kernel's
 * behaviour:
 *
 *   test_plug_fail_under_queue_lock  a queue destroyed under the caller's
 *       plug gives the plugged requests back to its pool with the queue
 *       lock held (the scheduler's put_request sees it held), and their
 *       bios fail once each;
 *   test_plug_insert_merges_own  an unplug skips insert merges that cannot
 *       succeed, yet a plug's requests still join each other at insert
 *       (A, B, A+1; and a request that grew by such a merge takes the
 *       next one: its new end counts);
 *   test_unplug_traced_same  an unplug of the plug's chain and a traced
 *       queue's unplug of a list give the scheduler the same requests in
 *       the same order, with the same insert merges;
 *   test_bios_end_in_order  bios finished under the lock end after it
 *       drops in the order they were finished: by request in completion
 *       order, by bio within a request, partial completions included;
 *   test_stats_per_run  starts, ends and errors made inside request_fn
 *       (counted once per run) and outside it (counted at once) are all
 *       in the statistics, exactly, as soon as request_fn returns;
 *   test_noop_front_lazy  noop's front-merge hash, filled at the first
 *       lookup, finds what an eager one would: not a request that left
 *       for the driver first, the oldest of two starting at one sector,
 *       and a request again after a front merge moved it;
 *   test_noop_front_looked  noop's note of how far its FIFO was looked at
 *       for the front hash follows a request merge that takes the last
 *       request looked at away: a later lookup still hashes (and a bio
 *       front-merges into) the request queued behind it;
 *   test_noop_fetch_one_merges  a fetch through noop's dispatch_one (the
 *       fast fetch: request_fn inside a plug that read the clock) with the
 *       driver stopping after one request: the fetched request takes no
 *       more merges, the ones left in noop's FIFO take back and front
 *       merges, and the driver sees the FIFO order;
 *   test_plugged_rq_fields  requests made on a plug (after the first,
 *       sq_submit()'s inline case) carry the thread's io context and its
 *       priority, or the bio's own, the plug's one clock reading, and
 *       each bio and request is counted once;
 *   test_sq_ops_old_size  a scheduler built before dispatch_one (its
 *       sq_ops size ends before it) registers and runs through dispatch:
 *       whatever lies past its size is never called;
 *   test_hash_lazy_early_stop  the back-merge hash, filled at the next
 *       merge attempt (sq_hash_catch_up()), holds what an eager one would
 *       after a driver that stopped early: a bio continuing a request left
 *       in the scheduler merges into it (noop, deadline, cfq), one
 *       continuing a fetched request does not;
 *   test_hash_lazy_many  more requests waiting than the lazy hash's slots
 *       (64), some fetched in between: every one still waiting takes its
 *       back merge, no fetched one does;
 *   test_hash_lazy_bucket_order  two requests ending at one sector (a
 *       read and a write): the newer one is found first, as an eager hash
 *       has it, so a read bio there merges only when the read is newer;
 *       and an unplug X, A, B, A+1 joins A+1 to A, found in the hash (the
 *       one-hit cache holds X);
 *   test_hash_lazy_one_hit  with nomerges 1 (the one-hit cache only) the
 *       cache is the one eager inserts leave: a request inserted while it
 *       was full never becomes it when the hash catches up.
 */
#include <dirent.h>
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
#include <unistd.h>

#include <cmocka.h>

#include <librequest/librequest.h>

/* ------------------------------------------------------------ driver */

#define MAX_HELD 160
#define MAX_ENDS 512
#define BS 4096u
#define SECS (BS >> 9)

static pthread_mutex_t drv_lock;    /* the queue lock: the driver's, error-checking */
static bool drv_hold;               /* keep requests instead of ending them */
static bool drv_paused;             /* take none: they wait in the scheduler */
static int drv_budget = -1;         /* take at most this many, then pause (-1: no limit) */
static unsigned drv_fail_every;     /* end every Nth taken with IOERR (0: none) */
static struct rq_request *held[MAX_HELD];
static unsigned nr_held;
static struct {
	uint64_t sector;
	uint32_t bytes;
	uint16_t ioprio;
	struct rq_io_context *ioc;
	uint64_t start_time_ns;
} seen[MAX_HELD];
static unsigned nr_seen;

static void drv_request_fn(struct rq_queue *q)
{
	struct rq_request *rq;

	while (!drv_paused && drv_budget && (rq = rq_sq_fetch_request(q))) {
		assert_true(nr_seen < MAX_HELD);
		seen[nr_seen].sector = rq->sector;
		seen[nr_seen].bytes = rq->bytes;
		seen[nr_seen].ioprio = rq->ioprio;
		seen[nr_seen].ioc = rq->ioc;
		seen[nr_seen].start_time_ns = rq->start_time_ns;
		nr_seen++;
		if (drv_budget > 0)
			drv_budget--;
		if (drv_hold)
			held[nr_held++] = rq;
		else if (drv_fail_every && nr_seen % drv_fail_every == 0)
			rq_sq_end_request_all_locked(rq, RQ_STS_IOERR);
		else
			rq_sq_end_request_all_locked(rq, RQ_STS_OK);
	}
}

static const struct rq_sq_ops drv_ops = {
	RQ_SQ_OPS_INIT,
	.request_fn = drv_request_fn,
};

/* ------------------------------------------- a FIFO that checks the lock */

static struct rq_list_node fifo = { &fifo, &fifo }; /* one queue at a time */
static _Atomic int nr_put_locked, nr_put_unlocked;

static void fifo_add(struct rq_queue *q, struct rq_request *rq)
{
	rq_list_add_tail(&rq->queuelist, &fifo);
}

static int fifo_dispatch(struct rq_queue *q, bool force)
{
	struct rq_request *rq = rq_list_first_rq(&fifo);

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

/*
 * A request leaves for the pool: the calling thread must hold the queue
 * lock.  The error-checking mutex says so: locking it again is EDEADLK.
 */
static void fifo_put_request(struct rq_request *rq)
{
	int ret = pthread_mutex_lock(&drv_lock);

	if (ret == EDEADLK) {
		atomic_fetch_add(&nr_put_locked, 1);
		return;
	}
	atomic_fetch_add(&nr_put_unlocked, 1);
	if (!ret)
		pthread_mutex_unlock(&drv_lock);
}

static const struct rq_elevator_sq_ops fifo_sq_ops = {
	RQ_ELV_SQ_OPS_INIT,
	.add_request = fifo_add,
	.dispatch = fifo_dispatch,
	.merge_req = fifo_merge_req,
	.put_request = fifo_put_request,
};

static const struct rq_elevator_type fifo_type = {
	RQ_ELV_TYPE_INIT,
	.name = "sqbatch-fifo",
	.features = RQ_ELV_F_SQ,
	.sq_ops = &fifo_sq_ops,
};

/* A scheduler built with the struct before dispatch_one. */
static struct rq_request *old_dispatch_one(struct rq_queue *q)
{
	fail_msg("dispatch_one past the scheduler's sq_ops size was called");
	return NULL;
}

static const struct rq_elevator_sq_ops old_sq_ops = {
	.size = offsetof(struct rq_elevator_sq_ops, dispatch_one),
	.abi_version = RQ_ELV_SQ_ABI,
	.add_request = fifo_add,
	.dispatch = fifo_dispatch,
	.merge_req = fifo_merge_req,
	.dispatch_one = old_dispatch_one,
};

static const struct rq_elevator_type old_type = {
	RQ_ELV_TYPE_INIT,
	.name = "sqbatch-old",
	.features = RQ_ELV_F_SQ,
	.sq_ops = &old_sq_ops,
};

/* ------------------------------------------------------------- bios */

static char buf[BS];
static _Atomic int ended, bad;
static struct rq_bio *end_order[MAX_ENDS];
static _Atomic unsigned nr_ends;

static void record_end_io(struct rq_bio *bio)
{
	unsigned i = atomic_fetch_add(&nr_ends, 1);

	if (i < MAX_ENDS)
		end_order[i] = bio;
	if (bio->status != RQ_STS_OK)
		atomic_fetch_add(&bad, 1);
	atomic_fetch_add(&ended, 1);
}

static struct rq_bio *mkbio(uint64_t sector)
{
	struct rq_bio *bio = rq_bio_alloc(1);

	assert_non_null(bio);
	assert_int_equal(rq_bio_add_vec(bio, buf, BS), 0);
	bio->op = RQ_OP_READ;
	bio->iter.sector = sector;
	bio->end_io = record_end_io;
	return bio;
}

static void put_bios(struct rq_bio **bios, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		rq_bio_put(bios[i]);
}

static struct rq_queue *mkq(const char *sched)
{
	pthread_mutexattr_t attr;
	struct rq_sq_config cfg = {
		RQ_SQ_CONFIG_INIT,
		.ops = &drv_ops,
		.scheduler = sched,
		.queue_lock = &drv_lock,
	};
	struct rq_queue *q;
	int ret = rq_sched_register(&fifo_type);

	assert_true(ret == 0 || ret == -EEXIST);
	ret = rq_sched_register(&old_type);
	assert_true(ret == 0 || ret == -EEXIST);
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ERRORCHECK);
	pthread_mutex_init(&drv_lock, &attr);
	pthread_mutexattr_destroy(&attr);
	drv_hold = drv_paused = false;
	drv_budget = -1;
	drv_fail_every = 0;
	nr_held = nr_seen = 0;
	atomic_store(&ended, 0);
	atomic_store(&bad, 0);
	atomic_store(&nr_ends, 0);
	atomic_store(&nr_put_locked, 0);
	atomic_store(&nr_put_unlocked, 0);
	assert_int_equal(rq_sq_alloc_queue(&cfg, &q), 0);
	return q;
}

static void destroy(struct rq_queue *q)
{
	rq_queue_destroy(q);
	pthread_mutex_destroy(&drv_lock);
}

/* The driver takes what waits in the scheduler. */
static void drv_resume(struct rq_queue *q)
{
	drv_paused = false;
	rq_sq_run_queue(q);
}

/* ------------------------------------------------------------- tests */

/*
 * Plugged requests of a queue destroyed under the plug go back to the pool
 * with the queue lock held by the destroying thread (put_request sees it),
 * and each of their bios fails once.  Before the fix they went back with
 * no lock at all, racing with completions on the pool's free list.
 */
static void test_plug_fail_under_queue_lock(void **state)
{
	struct rq_queue *q = mkq("sqbatch-fifo");
	struct rq_bio *bios[3];
	struct rq_plug plug;

	rq_start_plug(&plug);
	for (unsigned i = 0; i < 3; i++)
		rq_submit_bio(q, bios[i] = mkbio(i * 1000));
	assert_int_equal(atomic_load(&ended), 0);
	destroy(q);
	rq_finish_plug(&plug);
	assert_int_equal(atomic_load(&ended), 3);
	assert_int_equal(atomic_load(&bad), 3);
	assert_int_equal(atomic_load(&nr_put_unlocked), 0);
	assert_int_equal(atomic_load(&nr_put_locked), 3);
	put_bios(bios, 3);
}

struct want {
	uint64_t sector;          /* in units of SECS */
	unsigned bios;
};

/*
 * With the driver paused, bios at @sectors (units of SECS) on one plug;
 * then the driver takes requests as @want says, in order.
 */
static void unplug_expect(struct rq_queue *q, const uint64_t *sectors, unsigned n,
			  const struct want *want, unsigned nr_want)
{
	struct rq_bio *bios[8];
	struct rq_plug plug;
	int before = atomic_load(&ended);

	drv_paused = true;
	nr_seen = 0;
	rq_start_plug(&plug);
	for (unsigned i = 0; i < n; i++)
		rq_submit_bio(q, bios[i] = mkbio(sectors[i] * SECS));
	rq_finish_plug(&plug);
	assert_int_equal(rq_sq_nr_sorted(q), nr_want);
	drv_resume(q);
	assert_int_equal(nr_seen, nr_want);
	for (unsigned i = 0; i < nr_want; i++) {
		assert_int_equal(seen[i].sector, want[i].sector * SECS);
		assert_int_equal(seen[i].bytes, want[i].bios * BS);
	}
	assert_int_equal(atomic_load(&ended), before + (int)n);
	put_bios(bios, n);
}

struct submit_arg {
	struct rq_queue *q;
	struct rq_bio *bio;
};

static void *submit_thread(void *p)
{
	struct submit_arg *a = p;

	rq_submit_bio(a->q, a->bio);
	return NULL;
}

/*
 * A plug's own requests join at insert, with noop and an empty scheduler
 * (where the unplug filters its insert merges): A, B, A+1 gives A+(A+1)
 * and B; A, X, A+1, Y, A+2 gives one request of three bios (A+1 joined A,
 * so A now ends where A+2 starts) and X, Y.  And with a request queued
 * (by another thread) while the plug held the one that continues it, the
 * two join at insert.  A filter that skipped the plug's own requests,
 * noted only the ends of inserted ones, or stayed on with requests queued
 * before the unplug, fails.
 */
static void test_plug_insert_merges_own(void **state)
{
	static const uint64_t one[] = { 0, 1000, 1 }, two[] = { 0, 500, 1, 900, 2 };
	static const struct want want_one[] = { { 0, 2 }, { 1000, 1 } };
	static const struct want want_two[] = { { 0, 3 }, { 500, 1 }, { 900, 1 } };
	struct rq_queue *q = mkq("noop");
	struct submit_arg a = { .q = q, .bio = mkbio(2000 * SECS) };
	struct rq_queue_stats st;
	struct rq_bio *bio;
	struct rq_plug plug;
	pthread_t t;

	unplug_expect(q, one, 3, want_one, 2);
	unplug_expect(q, two, 5, want_two, 3);
	rq_queue_get_stats(q, &st, sizeof(st));
	assert_int_equal(st.merges_rq, 3);

	drv_paused = true;
	nr_seen = 0;
	rq_start_plug(&plug);
	rq_submit_bio(q, bio = mkbio(2001 * SECS));
	assert_int_equal(pthread_create(&t, NULL, submit_thread, &a), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(rq_sq_nr_sorted(q), 1);
	rq_finish_plug(&plug);
	assert_int_equal(rq_sq_nr_sorted(q), 1);
	drv_resume(q);
	assert_int_equal(nr_seen, 1);
	assert_int_equal(seen[0].sector, 2000 * SECS);
	assert_int_equal(seen[0].bytes, 2 * BS);
	assert_int_equal(atomic_load(&ended), 10);
	assert_int_equal(atomic_load(&bad), 0);
	rq_bio_put(bio);
	rq_bio_put(a.bio);
	destroy(q);
}

/*
 * An unplug takes the plug's chain as the plug held it
 * (fe->plug_issue_chain); a traced queue's unplug gets the run as a list
 * (its unplug event lists it).  Both must give the scheduler the same
 * requests, in the same order, with the same insert merges: the plugs of
 * test_plug_insert_merges_own again, once traced and once not, on one
 * queue.  A list path that lost a request, reordered the run, or merged
 * differently from the chain fails.
 */
static void test_unplug_traced_same(void **state)
{
	static const uint64_t one[] = { 0, 1000, 1 }, two[] = { 0, 500, 1, 900, 2 };
	static const struct want want_one[] = { { 0, 2 }, { 1000, 1 } };
	static const struct want want_two[] = { { 0, 3 }, { 500, 1 }, { 900, 1 } };
	char dir[] = "/tmp/rq-sq-batch-XXXXXX";
	struct rq_queue *q = mkq("noop");
	struct rq_trace_info info;
	struct rq_queue_stats st;
	struct dirent *de;
	DIR *d;

	assert_non_null(mkdtemp(dir));
	for (int traced = 1; traced >= 0; traced--) {
		if (traced)
			assert_int_equal(rq_queue_trace_start(q, dir, "unplug"), 0);
		unplug_expect(q, one, 3, want_one, 2);
		unplug_expect(q, two, 5, want_two, 3);
		if (!traced)
			continue;
		assert_int_equal(rq_queue_trace_stop(q, &info, sizeof(info)), 0);
		assert_true(info.events > 0);
		assert_int_equal(info.dropped, 0);
	}
	rq_queue_get_stats(q, &st, sizeof(st));
	assert_int_equal(st.merges_rq, 6);
	assert_int_equal(atomic_load(&bad), 0);
	destroy(q);

	d = opendir(dir);
	assert_non_null(d);
	while ((de = readdir(d))) {
		char path[320];

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		unlink(path);
	}
	closedir(d);
	assert_int_equal(rmdir(dir), 0);
}

/*
 * Bios ended under the lock end, after it drops, in the order they were
 * ended: the driver holds two requests of two bios each (plug merges) and,
 * in one lock hold, ends the second request whole, then the first by one
 * bio and then the rest.  Expected: 2a 2b 1a 1b.  Ending them last in
 * first out (a stack) gives 1b 1a 2b 2a.
 */
static void test_bios_end_in_order(void **state)
{
	static const uint64_t sectors[] = { 0, 1, 100, 101 };
	struct rq_queue *q = mkq("noop");
	struct rq_bio *bios[4];
	struct rq_plug plug;

	drv_hold = true;
	rq_start_plug(&plug);
	for (unsigned i = 0; i < 4; i++)
		rq_submit_bio(q, bios[i] = mkbio(sectors[i] * SECS));
	rq_finish_plug(&plug);
	assert_int_equal(nr_held, 2);
	assert_int_equal(held[0]->sector, 0);
	assert_int_equal(held[1]->sector, 100 * SECS);

	rq_sq_lock(q);
	assert_false(rq_sq_end_request_locked(held[1], RQ_STS_OK, 2 * BS));
	assert_true(rq_sq_end_request_locked(held[0], RQ_STS_OK, BS));
	assert_false(rq_sq_end_request_locked(held[0], RQ_STS_OK, BS));
	assert_int_equal(atomic_load(&ended), 0); /* not under the lock */
	rq_sq_unlock(q);

	assert_int_equal(atomic_load(&nr_ends), 4);
	assert_ptr_equal(end_order[0], bios[2]);
	assert_ptr_equal(end_order[1], bios[3]);
	assert_ptr_equal(end_order[2], bios[0]);
	assert_ptr_equal(end_order[3], bios[1]);
	/* every single-queue completion leaves a bio at its end */
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(bios[i]->iter.size, 0);
		assert_int_equal(bios[i]->iter.sector, (sectors[i] + 1) * SECS);
	}
	assert_int_equal(atomic_load(&bad), 0);
	put_bios(bios, 4);
	destroy(q);
}

/* The counters of @q now. */
static void expect_stats(struct rq_queue *q, uint64_t dispatched, uint64_t completed,
			 uint64_t errors)
{
	struct rq_queue_stats st;

	assert_int_equal(rq_queue_get_stats(q, &st, sizeof(st)), 0);
	assert_int_equal(st.dispatched, dispatched);
	assert_int_equal(st.completed, completed);
	assert_int_equal(st.errors, errors);
}

/*
 * Six bios on one plug at distinct places; request_fn takes and ends the
 * first four itself (every second with IOERR) and holds none.  Then two
 * more are taken and started by the caller under the lock, outside
 * request_fn, and ended there, one with an error.  After each step the
 * statistics hold every start, end and error made so far.  A count kept
 * for request_fn's run and never added, or added twice, fails.
 */
static void test_stats_per_run(void **state)
{
	struct rq_queue *q = mkq("noop");
	struct rq_bio *bios[6];
	struct rq_request *a, *b;
	struct rq_plug plug;

	drv_budget = 4;
	drv_fail_every = 2;
	rq_start_plug(&plug);
	for (unsigned i = 0; i < 6; i++)
		rq_submit_bio(q, bios[i] = mkbio(i * 1000 * SECS));
	rq_finish_plug(&plug);
	assert_int_equal(nr_seen, 4);
	assert_int_equal(atomic_load(&ended), 4);
	assert_int_equal(atomic_load(&bad), 2);
	expect_stats(q, 4, 4, 2);

	rq_sq_lock(q); /* the driver's own work, outside request_fn */
	a = rq_sq_fetch_request(q);
	b = rq_sq_fetch_request(q);
	assert_non_null(a);
	assert_non_null(b);
	assert_null(rq_sq_fetch_request(q));
	rq_sq_unlock(q);
	expect_stats(q, 6, 4, 2);
	rq_sq_lock(q);
	rq_sq_end_request_all_locked(a, RQ_STS_OK);
	rq_sq_end_request_all_locked(b, RQ_STS_IOERR);
	rq_sq_unlock(q);
	expect_stats(q, 6, 6, 3);
	assert_int_equal(atomic_load(&ended), 6);
	assert_int_equal(atomic_load(&bad), 3);
	put_bios(bios, 6);
	destroy(q);
}

/*
 * The driver saw @want, in order; the held requests end, and all @n bios
 * ended once without error.  The queue is destroyed.
 */
static void held_expect(struct rq_queue *q, const struct want *want, unsigned nr_want,
			struct rq_bio **bios, unsigned n)
{
	assert_int_equal(nr_seen, nr_want);
	for (unsigned i = 0; i < nr_want; i++) {
		assert_int_equal(seen[i].sector, want[i].sector * SECS);
		assert_int_equal(seen[i].bytes, want[i].bios * BS);
	}
	rq_sq_lock(q);
	for (unsigned i = 0; i < nr_held; i++)
		rq_sq_end_request_all_locked(held[i], RQ_STS_OK);
	rq_sq_unlock(q);
	assert_int_equal(atomic_load(&ended), n);
	assert_int_equal(atomic_load(&bad), 0);
	put_bios(bios, n);
	destroy(q);
}

/*
 * noop, the driver paused, one plug (so nothing looks at the front hash
 * while it fills): X at 5000 (it becomes the one-hit cache, so lookups
 * below go through noop's hash), A at 100, R1 and R2 both at 300.  The
 * driver takes one request: X.  Then, unplugged:
 *   a bio ending at 100 joins A (hashed at the lookup);
 *   a bio ending at 300 joins R1, the older of the two at 300;
 *   another bio ending at 300 joins R2: R1 now starts lower and moved in
 *   the hash (the merge hook caught up first, so R2 was not left out).
 * Expected on the driver: X, A (2 bios from 99), R1 (2 from 299), R2
 * (2 from 299).
 */
static void test_noop_front_lazy(void **state)
{
	static const uint64_t at[] = { 5000, 100, 300, 300 };
	static const uint64_t front[] = { 99, 299, 299 };
	static const struct want want[] = { { 5000, 1 }, { 99, 2 }, { 299, 2 }, { 299, 2 } };
	struct rq_queue *q = mkq("noop");
	struct rq_bio *bios[7];
	struct rq_plug plug;

	drv_paused = true;
	rq_start_plug(&plug);
	for (unsigned i = 0; i < 4; i++)
		rq_submit_bio(q, bios[i] = mkbio(at[i] * SECS));
	rq_finish_plug(&plug);
	assert_int_equal(rq_sq_nr_sorted(q), 4);
	drv_paused = false;
	drv_budget = 1;
	drv_hold = true;
	rq_sq_run_queue(q);
	assert_int_equal(nr_seen, 1);
	for (unsigned i = 0; i < 3; i++)
		rq_submit_bio(q, bios[4 + i] = mkbio(front[i] * SECS));
	assert_int_equal(rq_sq_nr_sorted(q), 3);
	drv_budget = -1;
	rq_sq_run_queue(q);
	held_expect(q, want, 4, bios, 7);
}

/*
 * noop, the driver paused, no plug: A at 100 and B at 102, then E at 300
 * (its front lookup, for a bio ending at 301, looks at A and B: B is the
 * last request looked at).  A bio at 101 joins A and B then joins A (a
 * request merge takes B, the last request looked at, away: A is then).
 * A bio ending at 300 must still find E, queued behind A and never looked
 * at.  Expected on the driver: A (3 bios from 100), E (2 bios from 299).
 */
static void test_noop_front_looked(void **state)
{
	static const uint64_t at[] = { 100, 102, 300, 101, 299 };
	static const struct want want[] = { { 100, 3 }, { 299, 2 } };
	struct rq_queue *q = mkq("noop");
	struct rq_bio *bios[5];

	drv_paused = true;
	for (unsigned i = 0; i < 3; i++)
		rq_submit_bio(q, bios[i] = mkbio(at[i] * SECS));
	assert_int_equal(rq_sq_nr_sorted(q), 3);
	rq_submit_bio(q, bios[3] = mkbio(at[3] * SECS));
	assert_int_equal(rq_sq_nr_sorted(q), 2); /* A took the bio, then B */
	rq_submit_bio(q, bios[4] = mkbio(at[4] * SECS));
	assert_int_equal(rq_sq_nr_sorted(q), 2); /* E took it at its front */
	drv_resume(q);
	assert_int_equal(nr_seen, 2);
	for (unsigned i = 0; i < 2; i++) {
		assert_int_equal(seen[i].sector, want[i].sector * SECS);
		assert_int_equal(seen[i].bytes, want[i].bios * BS);
	}
	assert_int_equal(atomic_load(&ended), 5);
	assert_int_equal(atomic_load(&bad), 0);
	put_bios(bios, 5);
	destroy(q);
}

/*
 * noop, the driver paused, no plug: A at 100, B at 300, C at 500.  Inside
 * a plug whose bio X (at 5000) read the clock, the driver takes one
 * request, A, the fast way (dispatch_one), and stops.  After the plug:
 * a bio at 101 does not join A (it is the driver's: a new request N), a
 * bio ending at 300 joins B at its front, one at 301 joins B at its back,
 * one at 501 joins C.  Expected on the driver: A (1 bio), B (3 from 299),
 * C (2 from 500), X, N.
 */
static void test_noop_fetch_one_merges(void **state)
{
	static const uint64_t at[] = { 100, 300, 500 };
	static const uint64_t later[] = { 101, 299, 301, 501 };
	static const struct want want[] = {
		{ 100, 1 }, { 299, 3 }, { 500, 2 }, { 5000, 1 }, { 101, 1 },
	};
	struct rq_queue *q = mkq("noop");
	struct rq_bio *bios[8];
	struct rq_plug plug;

	drv_paused = true;
	for (unsigned i = 0; i < 3; i++)
		rq_submit_bio(q, bios[i] = mkbio(at[i] * SECS));
	rq_start_plug(&plug);
	rq_submit_bio(q, bios[3] = mkbio(5000 * SECS));
	drv_paused = false;
	drv_budget = 1;
	drv_hold = true;
	rq_sq_run_queue(q);
	assert_int_equal(nr_seen, 1);
	assert_int_equal(seen[0].sector, 100 * SECS);
	assert_int_equal(rq_sq_nr_sorted(q), 2);
	rq_finish_plug(&plug);
	for (unsigned i = 0; i < 4; i++)
		rq_submit_bio(q, bios[4 + i] = mkbio(later[i] * SECS));
	assert_int_equal(rq_sq_nr_sorted(q), 4); /* B, C, X, N */
	drv_budget = -1;
	rq_sq_run_queue(q);
	held_expect(q, want, 5, bios, 8);
}

/*
 * A scheduler whose sq_ops size ends before dispatch_one, driven the fast
 * way (a plug that read the clock): requests go through its dispatch, in
 * order; the member past its size (a failing hook) is never called.
 */
static void test_sq_ops_old_size(void **state)
{
	struct rq_queue *q = mkq("sqbatch-old");
	struct rq_bio *bios[3];
	struct rq_plug plug;

	drv_paused = true;
	for (unsigned i = 0; i < 2; i++)
		rq_submit_bio(q, bios[i] = mkbio((100 + 10 * i) * SECS));
	rq_start_plug(&plug);
	rq_submit_bio(q, bios[2] = mkbio(900 * SECS));
	drv_resume(q);
	assert_int_equal(nr_seen, 2);
	rq_finish_plug(&plug);
	assert_int_equal(nr_seen, 3);
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(seen[i].sector, (i < 2 ? 100 + 10 * i : 900) * SECS);
	assert_int_equal(atomic_load(&ended), 3);
	assert_int_equal(atomic_load(&bad), 0);
	put_bios(bios, 3);
	destroy(q);
}

/*
 * Non-adjacent bios on one plug with noop: every request after the first
 * is made by sq_submit()'s inline case.  Each carries the thread's io
 * context (or the bio's own) and its priority unless the bio names one,
 * all share the plug's clock reading, and bios and requests are counted
 * once each.
 */
static void test_plugged_rq_fields(void **state)
{
	uint16_t prio = RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 3);
	uint16_t own_prio = RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_IDLE, 5);
	uint16_t bio_prio = RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_RT, 1);
	struct rq_io_context *ioc = rq_ioc_create(prio), *own = rq_ioc_create(own_prio);
	struct rq_queue *q = mkq("noop");
	struct rq_queue_stats st;
	struct rq_bio *bios[6];
	struct rq_plug plug;

	assert_non_null(ioc);
	assert_non_null(own);
	rq_ioc_set_current(ioc);
	drv_paused = true;
	rq_start_plug(&plug);
	for (unsigned i = 0; i < 6; i++) {
		bios[i] = mkbio(i * 1000);
		if (i == 3)
			bios[i]->ioprio = bio_prio;
		if (i == 5) /* 3 and 5 take the requests taken ahead with 2 and 4 */
			bios[i]->ioc = own;
		rq_submit_bio(q, bios[i]);
	}
	rq_finish_plug(&plug);
	drv_resume(q);
	assert_int_equal(nr_seen, 6);
	for (unsigned i = 0; i < 6; i++) {
		assert_int_equal(seen[i].sector, i * 1000);
		assert_ptr_equal(seen[i].ioc, i == 5 ? own : ioc);
		assert_int_equal(seen[i].ioprio, i == 3 ? bio_prio : i == 5 ? own_prio : prio);
		assert_true(seen[i].start_time_ns != 0);
		assert_true(seen[i].start_time_ns == seen[0].start_time_ns);
	}
	assert_int_equal(atomic_load(&ended), 6);
	assert_int_equal(rq_queue_get_stats(q, &st, sizeof(st)), 0);
	assert_int_equal(st.bios, 6);
	assert_int_equal(st.requests, 6);
	assert_int_equal(st.completed, 6);
	put_bios(bios, 6);
	destroy(q);
	rq_ioc_set_current(NULL);
	rq_ioc_put(own);
	rq_ioc_put(ioc);
}


/* A bio of @op at @sector (sectors), one block. */
static struct rq_bio *mkbio_op(uint64_t sector, enum rq_op op)
{
	struct rq_bio *bio = mkbio(sector);

	bio->op = op;
	return bio;
}

/* Bios at @units (units of SECS) on one plug, the driver paused. */
static void plug_paused(struct rq_queue *q, struct rq_bio **bios, const uint64_t *units,
			const enum rq_op *ops, unsigned n)
{
	struct rq_plug plug;

	drv_paused = true;
	rq_start_plug(&plug);
	for (unsigned i = 0; i < n; i++)
		rq_submit_bio(q, bios[i] = mkbio_op(units[i] * SECS, ops ? ops[i] : RQ_OP_READ));
	rq_finish_plug(&plug);
}

/* The driver takes @n requests now (and then none until drv_budget changes). */
static void drv_take(struct rq_queue *q, int n)
{
	drv_paused = false;
	drv_budget = n;
	rq_sq_run_queue(q);
}

static uint64_t merges_back(struct rq_queue *q)
{
	struct rq_queue_stats st;

	assert_int_equal(rq_queue_get_stats(q, &st, sizeof(st)), 0);
	return st.merges_back;
}

/*
 * One unplug of ten requests; the driver takes three and stops.  A bio
 * continuing a request still in the scheduler merges into it, one
 * continuing a fetched one does not, under every single-queue scheduler.
 * A front end that left the unplug's requests out of the hash at a merge
 * attempt (no catch-up), or hashed a fetched one, fails.
 */
static void test_hash_lazy_early_stop(void **state)
{
	static const char *const scheds[] = { "noop", "deadline", "cfq" };
	static const uint64_t units[] = { 0, 100, 200, 300, 400, 500, 600, 700, 800, 900 };

	for (unsigned s = 0; s < 3; s++) {
		struct rq_queue *q = mkq(scheds[s]);
		struct rq_bio *bios[20];
		unsigned taken, n = 10;

		plug_paused(q, bios, units, NULL, 10);
		assert_int_equal(rq_sq_nr_sorted(q), 10);
		drv_take(q, 3);
		taken = nr_seen;
		assert_int_equal(taken, 3);
		assert_int_equal(rq_sq_nr_sorted(q), 7);
		/* continuing each fetched request: a new request each */
		for (unsigned i = 0; i < taken; i++)
			rq_submit_bio(q, bios[n++] = mkbio(seen[i].sector + SECS));
		assert_int_equal(merges_back(q), 0);
		assert_int_equal(rq_sq_nr_sorted(q), 10);
		/* continuing each waiting one: back merges */
		for (unsigned i = 0; i < 10; i++) {
			bool fetched = false;

			for (unsigned j = 0; j < taken; j++)
				fetched |= seen[j].sector == units[i] * SECS;
			if (!fetched)
				rq_submit_bio(q, bios[n++] = mkbio(units[i] * SECS + SECS));
		}
		assert_int_equal(n, 20);
		assert_int_equal(merges_back(q), 7);
		assert_int_equal(rq_sq_nr_sorted(q), 10);
		drv_take(q, -1);
		assert_int_equal(nr_seen, 13);
		assert_int_equal(atomic_load(&ended), 20);
		assert_int_equal(atomic_load(&bad), 0);
		put_bios(bios, 20);
		destroy(q);
	}
}

/*
 * A hundred requests wait (five unplugs of twenty), more than the lazy
 * hash's 64 slots, so it catches up once while they are inserted; the
 * driver takes ten, leaving stale slots.  Each waiting request takes the
 * bio that continues it; no fetched one does.
 */
static void test_hash_lazy_many(void **state)
{
	struct rq_queue *q = mkq("noop");
	struct rq_bio *bios[200];
	uint64_t units[20];

	assert_int_equal(rq_queue_attr_set(q, "nr_requests", "256"), 0);
	for (unsigned p = 0; p < 5; p++) {
		for (unsigned i = 0; i < 20; i++)
			units[i] = (p * 20 + i) * 100;
		plug_paused(q, bios + p * 20, units, NULL, 20);
		if (p == 2)
			drv_take(q, 10); /* the first ten, FIFO */
		drv_paused = true;
	}
	assert_int_equal(nr_seen, 10);
	assert_int_equal(rq_sq_nr_sorted(q), 90);
	for (unsigned i = 0; i < 100; i++)
		rq_submit_bio(q, bios[100 + i] = mkbio(i * 100 * SECS + SECS));
	assert_int_equal(merges_back(q), 90);
	assert_int_equal(rq_sq_nr_sorted(q), 100);
	drv_take(q, -1);
	assert_int_equal(nr_seen, 110);
	for (unsigned i = 10; i < 100; i++) { /* noop: FIFO order, merged ones two bios */
		assert_int_equal(seen[i].sector, i * 100 * SECS);
		assert_int_equal(seen[i].bytes, 2 * BS);
	}
	assert_int_equal(atomic_load(&ended), 200);
	put_bios(bios, 200);
	destroy(q);
}

/*
 * X first (so the one-hit cache holds X), then a read and a write that
 * both end at sector SECS, in one unplug; a read bio at SECS.  An eager
 * hash finds the newer of the two first: the write shadows the read (no
 * back merge: the op differs) when it came second, and the read takes the
 * bio when it came second.  A catch-up in any other order fails one case.
 */
static void test_hash_lazy_bucket_order(void **state)
{
	static const uint64_t xaba[] = { 1000, 0, 500, 1 };
	static const struct want want_xaba[] = { { 1000, 1 }, { 0, 2 }, { 500, 1 } };
	static const uint64_t units[] = { 10000, 0, 0 };
	static const enum rq_op rw[] = { RQ_OP_READ, RQ_OP_READ, RQ_OP_WRITE };
	static const enum rq_op wr[] = { RQ_OP_READ, RQ_OP_WRITE, RQ_OP_READ };

	for (int read_newer = 0; read_newer < 2; read_newer++) {
		struct rq_queue *q = mkq("noop");
		struct rq_bio *bios[4];

		plug_paused(q, bios, units, read_newer ? wr : rw, 3);
		assert_int_equal(rq_sq_nr_sorted(q), 3);
		rq_submit_bio(q, bios[3] = mkbio(SECS));
		assert_int_equal(merges_back(q), read_newer ? 1 : 0);
		assert_int_equal(rq_sq_nr_sorted(q), read_newer ? 3 : 4);
		drv_take(q, -1);
		assert_int_equal(atomic_load(&ended), 4);
		put_bios(bios, 4);
		destroy(q);
	}
	/* an insert merge the one-hit cache (X) cannot make: A+1 finds A in the hash */
	{
		struct rq_queue *q = mkq("noop");

		unplug_expect(q, xaba, 4, want_xaba, 3);
		destroy(q);
	}
}

/*
 * nomerges 1: only the one-hit cache merges.  A and B in one unplug (the
 * cache is A, the first); the driver takes A, which empties the cache.  A
 * bio continuing B must not merge: B was inserted while the cache was
 * full, so an eager insert never made it the cache, and hashing it later
 * must not either.  A bio continuing a new request inserted with the
 * cache empty does merge.
 */
static void test_hash_lazy_one_hit(void **state)
{
	static const uint64_t units[] = { 0, 100 };
	struct rq_queue *q = mkq("noop");
	struct rq_bio *bios[5];

	assert_int_equal(rq_queue_attr_set(q, "nomerges", "1"), 0);
	plug_paused(q, bios, units, NULL, 2);
	drv_take(q, 1);
	assert_int_equal(nr_seen, 1);
	assert_int_equal(seen[0].sector, 0);
	rq_submit_bio(q, bios[2] = mkbio(101 * SECS));
	assert_int_equal(merges_back(q), 0);
	assert_int_equal(rq_sq_nr_sorted(q), 2);
	/* the cache is the first request inserted while it was empty: 101 */
	rq_submit_bio(q, bios[3] = mkbio(102 * SECS));
	assert_int_equal(merges_back(q), 1);
	rq_submit_bio(q, bios[4] = mkbio(101 * SECS + 2 * SECS)); /* 103: 101 grew to 103 */
	assert_int_equal(merges_back(q), 2);
	assert_int_equal(rq_sq_nr_sorted(q), 2);
	drv_take(q, -1);
	assert_int_equal(atomic_load(&ended), 5);
	put_bios(bios, 5);
	destroy(q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plug_fail_under_queue_lock),
		cmocka_unit_test(test_plug_insert_merges_own),
		cmocka_unit_test(test_unplug_traced_same),
		cmocka_unit_test(test_bios_end_in_order),
		cmocka_unit_test(test_stats_per_run),
		cmocka_unit_test(test_noop_front_lazy),
		cmocka_unit_test(test_noop_front_looked),
		cmocka_unit_test(test_noop_fetch_one_merges),
		cmocka_unit_test(test_plugged_rq_fields),
		cmocka_unit_test(test_sq_ops_old_size),
		cmocka_unit_test(test_hash_lazy_early_stop),
		cmocka_unit_test(test_hash_lazy_many),
		cmocka_unit_test(test_hash_lazy_bucket_order),
		cmocka_unit_test(test_hash_lazy_one_hit),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
