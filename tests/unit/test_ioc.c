/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * I/O contexts: creation, references, priority validation, weights, the
 * per-thread current context and a bio's context.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "internal/bio.h"
#include "internal/ioc.h"

static unsigned refs(struct rq_io_context *ioc)
{
	return atomic_load(&ioc->refcount);
}

/* A new context: one reference, BE/4 for 0, weight 100, unique increasing ids. */
static void test_create(void **state)
{
	struct rq_io_context *a = rq_ioc_create(0);
	struct rq_io_context *b = rq_ioc_create(RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_RT, 2));

	(void)state;
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(refs(a), 1);
	assert_int_equal(rq_ioc_prio(a), RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 4));
	assert_int_equal(rq_ioc_prio(b), RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_RT, 2));
	assert_int_equal(ioc_weight(a), 100);
	assert_true(rq_ioc_id(a) > 0);
	assert_true(rq_ioc_id(b) > rq_ioc_id(a));
	for (int i = 0; i < 4; i++)
		assert_null(a->sched_priv[i]);
	rq_ioc_put(a);
	rq_ioc_put(b);
}

/* get/put count references; the last put frees (checked by ASan). */
static void test_refcount(void **state)
{
	struct rq_io_context *ioc = rq_ioc_create(0);

	(void)state;
	rq_ioc_get(ioc);
	rq_ioc_get(ioc);
	assert_int_equal(refs(ioc), 3);
	rq_ioc_put(ioc);
	rq_ioc_put(ioc);
	assert_int_equal(refs(ioc), 1);
	rq_ioc_put(ioc);
	rq_ioc_get(NULL);
	rq_ioc_put(NULL);
}

/* Priorities: class 0..3, level 0..7, no stray bits; bad values change nothing. */
static void test_prio_validation(void **state)
{
	struct rq_io_context *ioc = rq_ioc_create(0);
	uint16_t idle7 = RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_IDLE, 7);

	(void)state;
	assert_int_equal(rq_ioc_set_prio(ioc, idle7), 0);
	assert_int_equal(rq_ioc_prio(ioc), idle7);
	assert_int_equal(rq_ioc_set_prio(ioc, RQ_IOPRIO_VALUE(4, 0)), -EINVAL);
	assert_int_equal(rq_ioc_set_prio(ioc, RQ_IOPRIO_VALUE(7, 1)), -EINVAL);
	assert_int_equal(rq_ioc_set_prio(ioc, RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 8)), -EINVAL);
	assert_int_equal(rq_ioc_set_prio(ioc, RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_NONE, 3)), -EINVAL);
	assert_int_equal(rq_ioc_prio(ioc), idle7);
	assert_int_equal(rq_ioc_set_prio(ioc, RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_RT, 0)), 0);
	assert_int_equal(rq_ioc_prio(ioc), RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_RT, 0));
	assert_int_equal(rq_ioc_set_prio(ioc, 0), 0);
	assert_int_equal(rq_ioc_prio(ioc), RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 4));
	rq_ioc_put(ioc);

	errno = 0;
	assert_null(rq_ioc_create(RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 9)));
	assert_int_equal(errno, EINVAL);
}

/* Weights are 1..1000. */
static void test_weight(void **state)
{
	struct rq_io_context *ioc = rq_ioc_create(0);

	(void)state;
	assert_int_equal(ioc_set_weight(ioc, 0), -EINVAL);
	assert_int_equal(ioc_set_weight(ioc, 1001), -EINVAL);
	assert_int_equal(ioc_weight(ioc), 100);
	assert_int_equal(ioc_set_weight(ioc, 1), 0);
	assert_int_equal(ioc_weight(ioc), 1);
	assert_int_equal(ioc_set_weight(ioc, 1000), 0);
	assert_int_equal(ioc_weight(ioc), 1000);
	rq_ioc_put(ioc);
}

/* The thread's own context is stable; a set one overrides it and holds a reference. */
static void test_current(void **state)
{
	struct rq_io_context *own = rq_ioc_current(), *ioc = rq_ioc_create(0), *other;

	(void)state;
	assert_non_null(own);
	assert_ptr_equal(rq_ioc_current(), own);
	assert_int_equal(rq_ioc_prio(own), RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 4));

	rq_ioc_set_current(ioc);
	assert_ptr_equal(rq_ioc_current(), ioc);
	assert_int_equal(refs(ioc), 2);

	other = rq_ioc_create(0);
	rq_ioc_set_current(other); /* drops the reference on ioc */
	assert_int_equal(refs(ioc), 1);
	assert_ptr_equal(rq_ioc_current(), other);
	rq_ioc_set_current(other); /* same one again: still one reference for us */
	assert_int_equal(refs(other), 2);

	rq_ioc_set_current(NULL);
	assert_int_equal(refs(other), 1);
	assert_ptr_equal(rq_ioc_current(), own);
	rq_ioc_put(ioc);
	rq_ioc_put(other);
}

struct thread_arg {
	struct rq_io_context *set;
	struct rq_io_context *own; /* the thread's own, with a reference taken */
	bool saw_set;              /* rq_ioc_current() returned @set after setting it */
};

static void *ioc_thread(void *p)
{
	struct thread_arg *a = p;

	a->own = rq_ioc_current();
	rq_ioc_get(a->own);
	rq_ioc_set_current(a->set);
	a->saw_set = rq_ioc_current() == a->set; /* no cmocka asserts off the main thread */
	return NULL;
}

/* Threads have their own contexts; both references drop when a thread exits. */
static void test_thread_exit(void **state)
{
	struct thread_arg arg = { rq_ioc_create(0), NULL, false };
	pthread_t t;

	(void)state;
	assert_int_equal(pthread_create(&t, NULL, ioc_thread, &arg), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_non_null(arg.own);
	assert_true(arg.saw_set);
	assert_ptr_not_equal(arg.own, rq_ioc_current());
	assert_int_equal(refs(arg.set), 1);
	assert_int_equal(refs(arg.own), 1); /* ours only: the thread dropped its own */
	assert_int_not_equal(rq_ioc_id(arg.own), rq_ioc_id(rq_ioc_current()));
	rq_ioc_put(arg.set);
	rq_ioc_put(arg.own);
}

/* A bio's context: its own, else the thread's; its priority likewise. */
static void test_ioc_of_bio(void **state)
{
	struct rq_io_context *ioc = rq_ioc_create(RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_IDLE, 0));
	struct rq_bio bio;

	(void)state;
	rq_bio_init(&bio, NULL, 0);
	assert_ptr_equal(ioc_of_bio(&bio), rq_ioc_current());
	assert_int_equal(ioc_bio_prio(&bio), rq_ioc_prio(rq_ioc_current()));
	bio.ioc = ioc;
	assert_ptr_equal(ioc_of_bio(&bio), ioc);
	assert_int_equal(ioc_bio_prio(&bio), RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_IDLE, 0));
	bio.ioprio = RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_RT, 3);
	assert_int_equal(ioc_bio_prio(&bio), RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_RT, 3));
	rq_ioc_put(ioc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create),
		cmocka_unit_test(test_refcount),
		cmocka_unit_test(test_prio_validation),
		cmocka_unit_test(test_weight),
		cmocka_unit_test(test_current),
		cmocka_unit_test(test_thread_exit),
		cmocka_unit_test(test_ioc_of_bio),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
