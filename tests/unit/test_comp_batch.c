/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Driver completion batches (rq_mq_add_to_batch, rq_mq_end_request_batch,
 * rq_mq_end_requests): every request ends exactly once with the status it
 * joined with, partial completions and mixed statuses included; a batch may
 * mix hardware queues and queues; tags and usage all come back (a full
 * queue depth can be taken again and a freeze does not wait); under
 * rq_affinity 2 the bios end on the submitting thread.  (The null
 * driver's completion thread, which uses the batch API, is checked for
 * allocations per I/O in test_alloc.c.)
 *
 * The service runs application-driven (rq_service_manual()), so the
 * rq_affinity 2 fallback never ends a request behind the test's back.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "fixtures.h"
#include "mock_driver.h"

#define NR 24
#define DEPTH 32

static char buf[4096];

/* One bio and what its end_io saw. */
struct slot {
	struct rq_bio *bio;
	_Atomic int ended;
	rq_status_t status;
	pthread_t thread;
};

static struct slot slots[NR + DEPTH];

static void slot_end_io(struct rq_bio *bio)
{
	struct slot *s = bio->private_data;

	s->status = bio->status;
	s->thread = pthread_self();
	atomic_fetch_add(&s->ended, 1);
}

static struct mock_dev *defer_dev(unsigned nr_hw_queues, const char *sched)
{
	return mock_create_unmerged(MOCK_COMPLETE_DEFER, nr_hw_queues, DEPTH, sched);
}

/* Submit a bio of @len bytes at @sector for slot @i; it is not merged. */
static void submit_slot(struct rq_queue *q, unsigned i, uint64_t sector, uint32_t len)
{
	struct rq_bio *bio = rq_bio_alloc(1);

	assert_non_null(bio);
	assert_int_equal(rq_bio_add_vec(bio, buf, len), 0);
	bio->op = RQ_OP_READ;
	bio->iter.sector = sector;
	bio->end_io = slot_end_io;
	bio->private_data = &slots[i];
	atomic_store(&slots[i].ended, 0);
	slots[i].status = 0xff;
	slots[i].bio = bio;
	rq_submit_bio(q, bio);
}

static void put_slots(unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		rq_bio_put(slots[i].bio);
		slots[i].bio = NULL;
	}
}

static void stats(struct rq_queue *q, struct rq_queue_stats *st)
{
	assert_int_equal(rq_queue_get_stats(q, st, sizeof(*st)), 0);
}

/*
 * The queue is whole again: every tag can be taken at once (DEPTH bios are
 * all held by the driver) and a freeze finds no usage left.
 */
static void assert_all_back(struct mock_dev *m)
{
	for (unsigned i = 0; i < DEPTH; i++)
		submit_slot(m->q, NR + i, 8 * (1000 + 2 * i), 4096);
	assert_int_equal(mock_nr_held(m), DEPTH);
	assert_int_equal(mock_complete_all(m, RQ_STS_OK), DEPTH);
	rq_queue_freeze(m->q);
	rq_queue_unfreeze(m->q);
	for (unsigned i = 0; i < DEPTH; i++) {
		assert_int_equal(atomic_load(&slots[NR + i].ended), 1);
		rq_bio_put(slots[NR + i].bio);
		slots[NR + i].bio = NULL;
	}
}

/* Mixed statuses: each bio ends once, with its request's status; counters exact. */
static void check_mixed_statuses(const char *sched)
{
	struct rq_comp_batch cb = RQ_COMP_BATCH_INIT;
	struct rq_request *rqs[NR];
	struct mock_dev *m = defer_dev(1, sched);
	struct rq_queue_stats st0, st1;

	stats(m->q, &st0);
	for (unsigned i = 0; i < NR; i++)
		submit_slot(m->q, i, 8 * (10 * i + 1), 4096);
	assert_true(mock_wait_held(m, NR, 10000));
	for (unsigned i = 0; i < NR; i++)
		rqs[i] = mock_take_held(m, 0);
	for (unsigned i = 0; i < NR; i++)
		assert_true(rq_mq_add_to_batch(&cb, rqs[i], i % 3 ? RQ_STS_OK : RQ_STS_IOERR));
	assert_int_equal(cb.nr, NR);
	/* in the batch, no longer in flight: a second end of any kind is ignored */
	assert_false(rq_mq_add_to_batch(&cb, rqs[0], RQ_STS_OK));
	assert_false(rq_mq_complete_request(rqs[1], RQ_STS_OK));
	rq_mq_end_request(rqs[2], RQ_STS_OK);
	for (unsigned i = 0; i < NR; i++)
		assert_int_equal(atomic_load(&slots[i].ended), 0);

	rq_mq_end_request_batch(&cb);
	assert_null(cb.head);
	assert_int_equal(cb.nr, 0);
	for (unsigned i = 0; i < NR; i++) {
		assert_int_equal(atomic_load(&slots[i].ended), 1);
		assert_int_equal(slots[i].status, i % 3 ? RQ_STS_OK : RQ_STS_IOERR);
		assert_true(pthread_equal(slots[i].thread, pthread_self()));
	}
	stats(m->q, &st1);
	assert_int_equal(st1.completed - st0.completed, NR);
	assert_int_equal(st1.errors - st0.errors, NR / 3);
	rq_mq_end_request_batch(&cb); /* empty: nothing */
	put_slots(NR);
	assert_all_back(m);
	mock_destroy(m);
}

static void test_mixed_statuses(void **state)
{
	(void)state;
	check_mixed_statuses("none");
}

/* With a scheduler the scheduler tags come back too, and its hooks run. */
static void test_mixed_statuses_sched(void **state)
{
	(void)state;
	check_mixed_statuses("mq-deadline");
	check_mixed_statuses("kyber");
}

/*
 * A partly completed request (rq_mq_update_request) ends in a batch: the
 * bios already done keep their status, the rest end with the batch's.
 */
static void test_partial_then_batch(void **state)
{
	struct mock_dev *m = defer_dev(1, "none");
	struct rq_comp_batch cb;
	struct rq_request *rq;
	struct rq_plug plug;

	(void)state;
	assert_int_equal(rq_queue_attr_set(m->q, "nomerges", "0"), 0);
	rq_start_plug(&plug);
	submit_slot(m->q, 0, 800, 4096);
	submit_slot(m->q, 1, 808, 4096);
	submit_slot(m->q, 2, 816, 4096);
	rq_finish_plug(&plug);
	assert_true(mock_wait_held(m, 1, 10000));
	assert_int_equal(mock_nr_held(m), 1); /* one request of three bios */
	rq = mock_take_held(m, 0);
	assert_true(rq_mq_update_request(rq, RQ_STS_OK, 4096));
	assert_int_equal(atomic_load(&slots[0].ended), 1);
	assert_int_equal(atomic_load(&slots[1].ended), 0);

	rq_comp_batch_init(&cb);
	assert_true(rq_mq_add_to_batch(&cb, rq, RQ_STS_MEDIUM));
	assert_false(rq_mq_update_request(rq, RQ_STS_OK, 4096));
	rq_mq_end_request_batch(&cb);
	assert_int_equal(slots[0].status, RQ_STS_OK);
	for (unsigned i = 1; i < 3; i++) {
		assert_int_equal(atomic_load(&slots[i].ended), 1);
		assert_int_equal(slots[i].status, RQ_STS_MEDIUM);
	}
	assert_int_equal(atomic_load(&slots[0].ended), 1);
	put_slots(3);
	assert_all_back(m);
	mock_destroy(m);
}

/* Submit @n bios for slots from @first on @q from CPU @cpu (if we may run there). */
static bool submit_on_cpu(struct rq_queue *q, unsigned cpu, unsigned first, unsigned n)
{
	cpu_set_t set, old;
	bool pinned;

	pthread_getaffinity_np(pthread_self(), sizeof(old), &old);
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	pinned = CPU_ISSET(cpu, &old) && !pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	for (unsigned i = first; i < first + n; i++)
		submit_slot(q, i, 8 * (20 * i + 3), 4096);
	pthread_setaffinity_np(pthread_self(), sizeof(old), &old);
	return pinned;
}

/*
 * One batch holding requests of two hardware queues and of two queues,
 * interleaved: all end once, and both queues are whole afterwards.
 */
static void test_across_hctxs_and_queues(void **state)
{
	struct mock_dev *a = defer_dev(2, "none"), *b = defer_dev(1, "none");
	struct rq_request *rqs[NR];
	unsigned na = NR / 2, n = 0;
	bool two_hctx;

	(void)state;
	submit_on_cpu(a->q, 0, 0, na / 2);
	two_hctx = submit_on_cpu(a->q, 1, na / 2, na - na / 2);
	for (unsigned i = na; i < NR; i++)
		submit_slot(b->q, i, 8 * (20 * i + 3), 4096);
	assert_true(mock_wait_held(a, na, 10000));
	assert_true(mock_wait_held(b, NR - na, 10000));
	/* interleave: a, b, a, b ... so hctx and queue change at every step */
	for (unsigned i = 0; i < NR; i++)
		rqs[n++] = i % 2 ? mock_take_held(b, 0) : mock_take_held(a, mock_nr_held(a) - 1);
	if (two_hctx)
		print_message("hctxs of queue a: %u and %u\n", rq_hctx_index(rqs[0]->hctx),
			      rq_hctx_index(rqs[NR - 2]->hctx));
	/* an entry already ended (and a NULL) is skipped */
	assert_int_equal(rq_mq_end_requests(rqs, NR, RQ_STS_OK), NR);
	assert_int_equal(rq_mq_end_requests(rqs, NR, RQ_STS_IOERR), 0);
	for (unsigned i = 0; i < NR; i++) {
		assert_int_equal(atomic_load(&slots[i].ended), 1);
		assert_int_equal(slots[i].status, RQ_STS_OK);
	}
	put_slots(NR);
	assert_all_back(a);
	assert_all_back(b);
	mock_destroy(a);
	mock_destroy(b);
}

struct batch_ender {
	struct mock_dev *m;
	unsigned n;
	pthread_t self;
};

/* Take every held request and end them in one batch, on this thread. */
static void *end_in_batch(void *arg)
{
	struct batch_ender *e = arg;
	struct rq_comp_batch cb = RQ_COMP_BATCH_INIT;
	struct rq_request *rq;

	e->self = pthread_self();
	while ((rq = mock_take_held(e->m, 0)))
		assert_true(rq_mq_add_to_batch(&cb, rq, RQ_STS_OK));
	e->n = cb.nr;
	rq_mq_end_request_batch(&cb);
	return NULL;
}

/* End every held request of @e->m in one batch on a thread of its own. */
static void end_on_other_thread(struct batch_ender *e)
{
	pthread_t th;

	assert_int_equal(pthread_create(&th, NULL, end_in_batch, e), 0);
	pthread_join(th, NULL);
}

/*
 * rq_affinity 2: a batch ended on another thread leaves the bios to their
 * submitter, which ends all of them at its next rq_process_completions().
 */
static void test_affinity2_on_submitter(void **state)
{
	struct mock_dev *m = defer_dev(1, "none");
	struct batch_ender e = { .m = m };

	(void)state;
	assert_int_equal(rq_queue_attr_set(m->q, "rq_affinity", "2"), 0);
	for (unsigned i = 0; i < NR; i++)
		submit_slot(m->q, i, 8 * (10 * i + 1), 4096);
	assert_true(mock_wait_held(m, NR, 10000));
	end_on_other_thread(&e);
	assert_int_equal(e.n, NR);
	for (unsigned i = 0; i < NR; i++)
		assert_int_equal(atomic_load(&slots[i].ended), 0);
	assert_int_equal(rq_process_completions(), NR);
	for (unsigned i = 0; i < NR; i++) {
		assert_int_equal(atomic_load(&slots[i].ended), 1);
		assert_true(pthread_equal(slots[i].thread, pthread_self()));
	}
	assert_int_equal(rq_process_completions(), 0);
	put_slots(NR);
	assert_all_back(m);

	/* rq_affinity 1: the ending thread ends the bios itself */
	assert_int_equal(rq_queue_attr_set(m->q, "rq_affinity", "1"), 0);
	for (unsigned i = 0; i < NR; i++)
		submit_slot(m->q, i, 8 * (10 * i + 1), 4096);
	assert_true(mock_wait_held(m, NR, 10000));
	end_on_other_thread(&e);
	for (unsigned i = 0; i < NR; i++) {
		assert_int_equal(atomic_load(&slots[i].ended), 1);
		assert_true(pthread_equal(slots[i].thread, e.self));
	}
	assert_int_equal(rq_process_completions(), 0);
	put_slots(NR);
	mock_destroy(m);
}

struct submitter {
	struct mock_dev *m;
	unsigned first, n;
};

static void *submit_and_exit(void *arg)
{
	struct submitter *sb = arg;

	for (unsigned i = sb->first; i < sb->first + sb->n; i++)
		submit_slot(sb->m->q, i, 8 * (10 * i + 1), 4096);
	return NULL;
}

static bool all_ended(unsigned first, unsigned n)
{
	rq_service_run();
	for (unsigned i = first; i < first + n; i++)
		if (atomic_load(&slots[i].ended) != 1)
			return false;
	return true;
}

/*
 * rq_affinity 2 with a submitter that exited before its requests ended: a
 * batch ended afterwards still ends each of them exactly once (the service
 * pass drains the dead thread's mailbox), and the next thread to submit
 * takes that mailbox over and gets its own completions in it.
 */
static void test_affinity2_submitter_exited(void **state)
{
	struct mock_dev *m = defer_dev(1, "none");
	struct batch_ender e = { .m = m };
	struct submitter sb = { .m = m, .first = 0, .n = NR / 2 };
	pthread_t th;

	(void)state;
	assert_int_equal(rq_queue_attr_set(m->q, "rq_affinity", "2"), 0);
	assert_int_equal(pthread_create(&th, NULL, submit_and_exit, &sb), 0);
	pthread_join(th, NULL);
	assert_true(mock_wait_held(m, NR / 2, 10000));
	end_on_other_thread(&e);
	assert_int_equal(e.n, NR / 2);
	FX_WAIT_FOR(all_ended(0, NR / 2), 10000);
	assert_true(all_ended(0, NR / 2));

	/* a new submitter (likely on the recycled mailbox) */
	sb.first = NR / 2;
	assert_int_equal(pthread_create(&th, NULL, submit_and_exit, &sb), 0);
	pthread_join(th, NULL);
	assert_true(mock_wait_held(m, NR / 2, 10000));
	end_on_other_thread(&e);
	FX_WAIT_FOR(all_ended(NR / 2, NR / 2), 10000);
	assert_true(all_ended(0, NR));
	assert_int_equal(rq_process_completions(), 0);
	put_slots(NR);
	assert_all_back(m);
	mock_destroy(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mixed_statuses),
		cmocka_unit_test(test_mixed_statuses_sched),
		cmocka_unit_test(test_partial_then_batch),
		cmocka_unit_test(test_across_hctxs_and_queues),
		cmocka_unit_test(test_affinity2_on_submitter),
		cmocka_unit_test(test_affinity2_submitter_exited),
	};

	/* no service fallback behind our back: rq_affinity 2 waits for us */
	assert_int_equal(rq_service_manual(), 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
