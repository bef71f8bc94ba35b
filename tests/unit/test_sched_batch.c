/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The scheduler side of completion batches (completion_batch_begin/end in
 * struct rq_elevator_type): a probe scheduler logs every completed_request,
 * finish_request, begin and end with its thread and hw queue.  Checked:
 * an issue round whose requests the driver ends inline, and a driver batch
 * (rq_mq_end_requests()), each open one batch, with begin after the first
 * request's hooks and every later request's hooks of that hw queue inside
 * it, and end once after the last; a batch spanning two hw queues opens one
 * per run of each; requests ended one by one open none; and the end runs
 * while the batch still holds the queue (a freeze started from it does not
 * finish before it returns).
 *
 * The service runs application-driven (rq_service_manual()): nothing
 * runs a queue behind the test's back.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fixtures.h"
#include "mock_driver.h"

#define PROBE "test-batch-probe"
#define NR 8

/* ----------------------------------------------------- the probe scheduler */

struct probe_hctx {
	pthread_mutex_t lock;
	struct rq_list_node fifo;
};

enum ev_kind { EV_COMPLETED = 'C', EV_FINISH = 'F', EV_BEGIN = 'B', EV_END = 'E' };

struct ev {
	char kind;
	struct rq_hw_ctx *hctx;
	pthread_t thread;
};

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ev evlog[256];
static unsigned nr_ev;
/* set by a test: the end hook checks that the queue is still held */
static struct rq_queue *end_check_q;
static atomic_int end_checks;
static pthread_t freezer;

static void log_ev(char kind, struct rq_hw_ctx *hctx)
{
	pthread_mutex_lock(&log_lock);
	assert_true(nr_ev < sizeof(evlog) / sizeof(evlog[0]));
	evlog[nr_ev++] = (struct ev){ kind, hctx, pthread_self() };
	pthread_mutex_unlock(&log_lock);
}

static void log_reset(void)
{
	pthread_mutex_lock(&log_lock);
	nr_ev = 0;
	pthread_mutex_unlock(&log_lock);
}

static int probe_init_hctx(struct rq_hw_ctx *hctx, unsigned idx)
{
	struct probe_hctx *ph = calloc(1, sizeof(*ph));

	if (!ph)
		return -ENOMEM;
	pthread_mutex_init(&ph->lock, NULL);
	rq_list_init(&ph->fifo);
	rq_sched_set_hctx_data(hctx, ph);
	return 0;
}

static void probe_exit_hctx(struct rq_hw_ctx *hctx, unsigned idx)
{
	struct probe_hctx *ph = rq_sched_hctx_data(hctx);

	pthread_mutex_destroy(&ph->lock);
	free(ph);
}

static void probe_insert(struct rq_hw_ctx *hctx, struct rq_list_node *list, unsigned flags)
{
	struct probe_hctx *ph = rq_sched_hctx_data(hctx);

	pthread_mutex_lock(&ph->lock);
	if (flags & RQ_INSERT_AT_HEAD)
		rq_list_splice_init(list, &ph->fifo);
	else
		rq_list_splice_tail_init(list, &ph->fifo);
	pthread_mutex_unlock(&ph->lock);
}

static struct rq_request *probe_dispatch(struct rq_hw_ctx *hctx)
{
	struct probe_hctx *ph = rq_sched_hctx_data(hctx);
	struct rq_request *rq;

	pthread_mutex_lock(&ph->lock);
	rq = rq_list_first_rq(&ph->fifo);
	if (rq)
		rq_list_del_init(&rq->queuelist);
	pthread_mutex_unlock(&ph->lock);
	return rq;
}

static bool probe_has_work(struct rq_hw_ctx *hctx)
{
	struct probe_hctx *ph = rq_sched_hctx_data(hctx);
	bool work;

	pthread_mutex_lock(&ph->lock);
	work = !rq_list_empty(&ph->fifo);
	pthread_mutex_unlock(&ph->lock);
	return work;
}

static void probe_completed(struct rq_request *rq, uint64_t now)
{
	log_ev(EV_COMPLETED, rq->hctx);
}

static void probe_finish(struct rq_request *rq)
{
	log_ev(EV_FINISH, rq->hctx);
}

static void probe_begin(struct rq_hw_ctx *hctx)
{
	log_ev(EV_BEGIN, hctx);
}

/* A freeze of the queue from the end hook: it must not finish meanwhile. */
static void *freeze_thread(void *arg)
{
	rq_queue_freeze(arg);
	rq_queue_unfreeze(arg);
	return NULL;
}

static void probe_end(struct rq_hw_ctx *hctx)
{
	struct rq_queue *q = end_check_q;

	log_ev(EV_END, hctx);
	if (q && rq_hctx_queue(hctx) == q) {
		pthread_t t;
		int ret;

		assert_int_equal(pthread_create(&t, NULL, freeze_thread, q), 0);
		/* the batch holds a usage reference until after this hook */
		for (int i = 0; i < 20; i++) {
			sched_yield();
			ret = pthread_tryjoin_np(t, NULL);
			assert_int_equal(ret, EBUSY);
		}
		freezer = t; /* joined by the test once the batch is over */
		atomic_fetch_add(&end_checks, 1);
	}
}

static struct rq_elevator_type probe_type(const char *name)
{
	struct rq_elevator_type t = {
		RQ_ELV_TYPE_INIT,
		.name = name,
		.features = RQ_ELV_F_MQ,
		.ops = {
			.init_hctx = probe_init_hctx,
			.exit_hctx = probe_exit_hctx,
			.insert_requests = probe_insert,
			.dispatch_request = probe_dispatch,
			.has_work = probe_has_work,
			.completed_request = probe_completed,
			.finish_request = probe_finish,
		},
		.completion_batch_begin = probe_begin,
		.completion_batch_end = probe_end,
	};

	return t;
}

/* ------------------------------------------------------------- helpers */

static char buf[4096];
static struct fx_rec rec[2 * NR];

static struct mock_dev *probe_dev(enum mock_completion how, unsigned nr_hw_queues)
{
	return mock_create_unmerged(how, nr_hw_queues, 32, PROBE);
}

static void submit(struct rq_queue *q, unsigned i)
{
	rq_submit_bio(q, fx_bio(&rec[i], RQ_OP_READ, (uint64_t)i * 64, buf, 4096));
}

struct span {
	struct rq_queue *q;
	unsigned first, n;
};

static void *submit_span(void *arg)
{
	const struct span *sp = arg;

	for (unsigned i = sp->first; i < sp->first + sp->n; i++)
		submit(sp->q, i);
	return NULL;
}

/*
 * Submit @n reads from slot @first on, from a thread bound to CPU @cpu if
 * it may run there (else from an unbound one).  Return: whether bound.
 */
static bool submit_on_cpu(struct rq_queue *q, unsigned cpu, unsigned first, unsigned n)
{
	struct span sp = { q, first, n };
	pthread_attr_t attr;
	cpu_set_t set;
	pthread_t t;
	bool bound;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	pthread_attr_init(&attr);
	bound = !pthread_attr_setaffinity_np(&attr, sizeof(set), &set) &&
		!pthread_create(&t, &attr, submit_span, &sp);
	if (!bound)
		assert_int_equal(pthread_create(&t, NULL, submit_span, &sp), 0);
	pthread_attr_destroy(&attr);
	assert_int_equal(pthread_join(t, NULL), 0);
	return bound;
}

static void expect_ended(unsigned n)
{
	assert_true(fx_wait(rec, n, 10000));
	for (unsigned i = 0; i < n; i++) {
		assert_int_equal(fx_done(&rec[i]), 1);
		assert_int_equal(rec[i].status, RQ_STS_OK);
	}
	fx_put(rec, n);
}

/* The log as a string of kinds: "CFBCFCFE". */
static void log_kinds(char *out)
{
	pthread_mutex_lock(&log_lock);
	for (unsigned i = 0; i < nr_ev; i++)
		out[i] = evlog[i].kind;
	out[nr_ev] = '\0';
	pthread_mutex_unlock(&log_lock);
}

/*
 * One batch of @n requests of one hw queue on this thread: the first
 * request's completed and finish, begin, the other n - 1 pairs, end.
 */
static void expect_one_batch(unsigned n)
{
	char got[512], want[512];
	unsigned k = 0;

	want[k++] = 'C';
	want[k++] = 'F';
	want[k++] = 'B';
	for (unsigned i = 1; i < n; i++) {
		want[k++] = 'C';
		want[k++] = 'F';
	}
	want[k++] = 'E';
	want[k] = '\0';
	log_kinds(got);
	assert_string_equal(got, want);
	for (unsigned i = 0; i < nr_ev; i++) {
		assert_ptr_equal(evlog[i].hctx, evlog[0].hctx);
		assert_true(pthread_equal(evlog[i].thread, pthread_self()));
	}
}

/* ---------------------------------------------------------------- tests */

/* Begin without end (or end without begin) is refused; both register. */
static void test_register_pairs(void **state)
{
	struct rq_elevator_type t = probe_type("probe-half");

	t.completion_batch_end = NULL;
	assert_int_equal(rq_sched_register(&t), -EINVAL);
	t = probe_type("probe-half");
	t.completion_batch_begin = NULL;
	assert_int_equal(rq_sched_register(&t), -EINVAL);
	assert_false(rq_sched_exists("probe-half"));
	t = probe_type("probe-half");
	assert_int_equal(rq_sched_register(&t), 0);
	assert_int_equal(rq_sched_unregister("probe-half"), 0);
}

/*
 * A plug of NR reads reaches a driver that ends each inside queue_rq:
 * the issue round is one batch, opened at the first request it frees,
 * closed once after the last; the end runs with the queue still held.
 */
static void test_inline_round(void **state)
{
	struct mock_dev *m = probe_dev(MOCK_COMPLETE_INLINE, 1);
	struct rq_plug plug;

	log_reset();
	end_check_q = m->q;
	atomic_store(&end_checks, 0);
	rq_start_plug(&plug);
	for (unsigned i = 0; i < NR; i++)
		submit(m->q, i);
	rq_finish_plug(&plug);
	end_check_q = NULL;
	expect_ended(NR);
	expect_one_batch(NR);
	assert_int_equal(atomic_load(&end_checks), 1);
	/* the freeze started from the end hook goes through now */
	assert_int_equal(pthread_join(freezer, NULL), 0);
	mock_destroy(m);
}

/* A driver batch (rq_mq_end_requests()) of NR held requests: one batch. */
static void test_driver_batch(void **state)
{
	struct mock_dev *m = probe_dev(MOCK_COMPLETE_DEFER, 1);
	struct rq_request *rqs[NR];

	for (unsigned i = 0; i < NR; i++)
		submit(m->q, i);
	assert_true(mock_wait_held(m, NR, 10000));
	for (unsigned i = 0; i < NR; i++)
		rqs[i] = mock_take_held(m, 0);
	log_reset();
	assert_int_equal(rq_mq_end_requests(rqs, NR, RQ_STS_OK), NR);
	expect_ended(NR);
	expect_one_batch(NR);
	mock_destroy(m);
}

/* Requests ended one at a time open no batch: the hooks come as before. */
static void test_single_ends(void **state)
{
	struct mock_dev *m = probe_dev(MOCK_COMPLETE_DEFER, 1);
	char got[64];

	for (unsigned i = 0; i < 4; i++)
		submit(m->q, i);
	assert_true(mock_wait_held(m, 4, 10000));
	log_reset();
	for (unsigned i = 0; i < 4; i++)
		mock_complete_one(m, 0, RQ_STS_OK);
	expect_ended(4);
	log_kinds(got);
	assert_string_equal(got, "CFCFCFCF");
	mock_destroy(m);
}

/*
 * A driver batch with the requests of two hw queues, one run each: a
 * batch per run, each enclosing only its own hw queue's requests.
 */
static void test_two_hctxs(void **state)
{
	struct mock_dev *m = probe_dev(MOCK_COMPLETE_DEFER, 2);
	struct rq_request *rqs[2 * NR];
	struct rq_hw_ctx *open = NULL, *first, *last;
	unsigned n = 0, begins = 0, ends = 0;
	bool two;

	submit_on_cpu(m->q, 0, 0, NR);
	two = submit_on_cpu(m->q, 1, NR, NR);
	assert_true(mock_wait_held(m, 2 * NR, 10000));
	/* one run per hw queue */
	for (unsigned pass = 0; pass < 2; pass++)
		for (unsigned i = 0; i < mock_nr_held(m);) {
			struct rq_request *rq = mock_held(m, i);

			if ((rq_hctx_index(rq->hctx) == 0) == (pass == 0))
				rqs[n++] = mock_take_held(m, i);
			else
				i++;
		}
	assert_int_equal(n, 2 * NR);
	first = rqs[0]->hctx;
	last = rqs[n - 1]->hctx;
	log_reset();
	assert_int_equal(rq_mq_end_requests(rqs, n, RQ_STS_OK), n);
	expect_ended(2 * NR);
	for (unsigned i = 0; i < nr_ev; i++) {
		if (evlog[i].kind == EV_BEGIN) {
			assert_null(open);
			open = evlog[i].hctx;
			begins++;
		} else if (evlog[i].kind == EV_END) {
			assert_ptr_equal(evlog[i].hctx, open);
			open = NULL;
			ends++;
		} else if (open) {
			assert_ptr_equal(evlog[i].hctx, open);
		}
	}
	assert_null(open);
	assert_int_equal(begins, ends);
	if (two && first != last) {
		print_message("two hw queues: %u batches\n", begins);
		assert_int_equal(begins, 2);
	}
	else
		assert_int_equal(begins, 1);
	mock_destroy(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_register_pairs),
		cmocka_unit_test(test_inline_round),
		cmocka_unit_test(test_driver_batch),
		cmocka_unit_test(test_single_ends),
		cmocka_unit_test(test_two_hctxs),
	};
	struct rq_elevator_type t = probe_type(PROBE);

	assert_int_equal(rq_service_manual(), 0);
	assert_int_equal(rq_sched_register(&t), 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
