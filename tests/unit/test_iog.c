/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * I/O groups and context weights: creation and defaults, weight validation,
 * references (also from several threads at once), moving contexts between
 * groups, and the weight a priority stands for.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "internal/ioc.h"

static unsigned iog_refs(struct rq_io_group *iog)
{
	return atomic_load(&iog->refcount);
}

/* 0 gives the default 100, 1..1000 are kept, above 1000 is EINVAL. */
static void test_create(void **state)
{
	struct rq_io_group *a = rq_iog_create(0), *b = rq_iog_create(1000);

	(void)state;
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(rq_iog_weight(a), 100);
	assert_int_equal(rq_iog_weight(b), 1000);
	assert_int_equal(iog_refs(a), 1);
	assert_int_equal(rq_iog_weight(NULL), 100);
	errno = 0;
	assert_null(rq_iog_create(1001));
	assert_int_equal(errno, EINVAL);
	rq_iog_put(a);
	rq_iog_put(b);
}

static void test_set_weight(void **state)
{
	struct rq_io_group *g = rq_iog_create(300);

	(void)state;
	assert_int_equal(rq_iog_set_weight(g, 0), -EINVAL);
	assert_int_equal(rq_iog_set_weight(g, 1001), -EINVAL);
	assert_int_equal(rq_iog_set_weight(NULL, 10), -EINVAL);
	assert_int_equal(rq_iog_weight(g), 300);
	assert_int_equal(rq_iog_set_weight(g, 1), 0);
	assert_int_equal(rq_iog_weight(g), 1);
	assert_int_equal(rq_iog_set_weight(g, 1000), 0);
	assert_int_equal(rq_iog_weight(g), 1000);
	rq_iog_put(g);
}

/* A context holds its group: the application may drop its reference early. */
static void test_ioc_group(void **state)
{
	struct rq_io_context *ioc = rq_ioc_create(0);
	struct rq_io_group *g1 = rq_iog_create(500), *g2 = rq_iog_create(50), *got;
	unsigned gen = ioc_group_gen(ioc);

	(void)state;
	assert_int_equal(rq_ioc_set_group(NULL, g1), -EINVAL);
	assert_null(ioc_group_get(ioc));
	assert_int_equal(rq_ioc_set_group(ioc, g1), 0);
	assert_int_not_equal(ioc_group_gen(ioc), gen);
	assert_int_equal(iog_refs(g1), 2);
	got = ioc_group_get(ioc);
	assert_ptr_equal(got, g1);
	assert_int_equal(iog_refs(g1), 3);
	rq_iog_put(got);
	assert_int_equal(rq_ioc_set_group(ioc, g2), 0);
	assert_int_equal(iog_refs(g1), 1);
	assert_int_equal(iog_refs(g2), 2);
	rq_iog_put(g2); /* the context keeps it alive */
	got = ioc_group_get(ioc);
	assert_ptr_equal(got, g2);
	assert_int_equal(rq_iog_weight(got), 50);
	rq_iog_put(got);
	assert_int_equal(rq_ioc_set_group(ioc, NULL), 0);
	assert_null(ioc_group_get(ioc));
	assert_int_equal(rq_ioc_set_group(ioc, g1), 0);
	rq_iog_put(g1);
	rq_ioc_put(ioc); /* frees the context and, with it, g1 (ASan checks) */
}

/* Explicit weights, 0 to go back to the priority's; the kernel's mapping. */
static void test_ioc_weight(void **state)
{
	struct rq_io_context *ioc = rq_ioc_create(RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 0));

	(void)state;
	assert_int_equal(rq_ioc_weight(ioc), 0);
	assert_false(ioc_weight_is_set(ioc));
	assert_int_equal(rq_ioc_set_weight(ioc, 1001), -EINVAL);
	assert_int_equal(rq_ioc_set_weight(NULL, 5), -EINVAL);
	assert_int_equal(rq_ioc_set_weight(ioc, 300), 0);
	assert_int_equal(rq_ioc_weight(ioc), 300);
	assert_true(ioc_weight_is_set(ioc));
	assert_int_equal(rq_ioc_set_weight(ioc, 0), 0);
	assert_int_equal(rq_ioc_weight(ioc), 0);
	assert_int_equal(ioc_prio_to_weight(RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 0)), 80);
	assert_int_equal(ioc_prio_to_weight(RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 4)), 40);
	assert_int_equal(ioc_prio_to_weight(RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 7)), 10);
	assert_int_equal(ioc_prio_to_weight(RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_RT, 2)), 60);
	assert_int_equal(ioc_prio_to_weight(0), 40);
	rq_ioc_put(ioc);
}

struct race {
	struct rq_io_context *ioc;
	struct rq_io_group *g[2];
	unsigned id;
};

static void *race_thread(void *arg)
{
	struct race *r = arg;

	for (unsigned i = 0; i < 20000; i++) {
		struct rq_io_group *got;

		rq_iog_get(r->g[i & 1]);
		rq_ioc_set_group(r->ioc, (i + r->id) % 3 ? r->g[(i >> 1) & 1] : NULL);
		got = ioc_group_get(r->ioc);
		if (got && got != r->g[0] && got != r->g[1])
			abort();
		rq_iog_put(got);
		rq_iog_put(r->g[i & 1]);
	}
	return NULL;
}

/* Threads moving one context between groups: references balance. */
static void test_threads(void **state)
{
	struct race r[2];
	pthread_t t[2];
	struct rq_io_context *ioc = rq_ioc_create(0);
	struct rq_io_group *g0 = rq_iog_create(10), *g1 = rq_iog_create(20);

	(void)state;
	for (unsigned i = 0; i < 2; i++) {
		r[i] = (struct race){ .ioc = ioc, .g = { g0, g1 }, .id = i };
		assert_int_equal(pthread_create(&t[i], NULL, race_thread, &r[i]), 0);
	}
	for (unsigned i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	rq_ioc_set_group(ioc, NULL);
	assert_int_equal(iog_refs(g0), 1);
	assert_int_equal(iog_refs(g1), 1);
	rq_iog_put(g0);
	rq_iog_put(g1);
	rq_ioc_put(ioc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create),
		cmocka_unit_test(test_set_weight),
		cmocka_unit_test(test_ioc_group),
		cmocka_unit_test(test_ioc_weight),
		cmocka_unit_test(test_threads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
