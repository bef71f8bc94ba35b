/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The library's heap is jemalloc's in a program that does not link or
 * preload jemalloc (issue 17 item 2).  This program links only the shared
 * librequest (not jemalloc, not the library's objects), so its own malloc
 * is libc's; jemalloc is loaded as librequest's dependency and reached with
 * dlsym().  It checks that:
 *   - the program's malloc() does not move jemalloc's thread.allocated
 *     (the embedder's situation: jemalloc is not the process allocator);
 *   - making a tag set and a queue does, by at least the preallocated
 *     requests, and destroying them gives it back (thread.deallocated);
 *   - where libnuma reports NUMA, the hw queues' memory comes from a manual
 *     arena (one per node, above the automatic ones) that holds bytes.
 * Skipped (77) when the library's heap is libc (no jemalloc, or a
 * sanitizer build: config.h RQ_ALLOC_JEMALLOC) or jemalloc's statistics
 * are compiled out.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

#include <librequest/mq.h>

#define NR_HW 2
#define DEPTH 256
#define CMD_SIZE 64

typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);

static mallctl_fn je_mallctl;

static uint64_t je_u64(const char *name)
{
	uint64_t v = 0;
	size_t sz = sizeof(v);

	assert_int_equal(je_mallctl(name, &v, &sz, NULL, 0), 0);
	return v;
}

static unsigned je_unsigned(const char *name)
{
	unsigned v = 0;
	size_t sz = sizeof(v);

	assert_int_equal(je_mallctl(name, &v, &sz, NULL, 0), 0);
	return v;
}

static rq_status_t heap_queue_rq(struct rq_hw_ctx *hctx, struct rq_request *rq, bool last)
{
	rq_mq_end_request(rq, RQ_STS_OK);
	return RQ_STS_OK;
}

static const struct rq_mq_ops heap_ops = {
	RQ_MQ_OPS_INIT,
	.queue_rq = heap_queue_rq,
};

/* A tag set of NR_HW x DEPTH requests and a queue over it (mq-deadline). */
static void make_queue(struct rq_tag_set **set, struct rq_queue **q)
{
	struct rq_tag_set_config cfg = {
		RQ_TAG_SET_CONFIG_INIT,
		.ops = &heap_ops,
		.nr_hw_queues = NR_HW,
		.queue_depth = DEPTH,
		.cmd_size = CMD_SIZE,
		.numa_node = -1,
	};
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .scheduler = "mq-deadline" };

	assert_int_equal(rq_tag_set_alloc(&cfg, set), 0);
	assert_int_equal(rq_mq_alloc_queue(*set, &qc, q), 0);
}

static void test_program_malloc_is_not_jemalloc(void **state)
{
	uint64_t before = je_u64("thread.allocated");
	void *volatile p = malloc(1 << 16);

	assert_non_null(p);
	assert_int_equal(je_u64("thread.allocated"), before);
	free(p);
}

static void test_queue_memory_from_jemalloc(void **state)
{
	uint64_t a0 = je_u64("thread.allocated"), d0 = je_u64("thread.deallocated");
	uint64_t a1, d1;
	struct rq_tag_set *set;
	struct rq_queue *q;

	make_queue(&set, &q);
	a1 = je_u64("thread.allocated");
	/* every preallocated request is at least its payload */
	assert_true(a1 - a0 >= (uint64_t)NR_HW * DEPTH * CMD_SIZE);
	rq_queue_destroy(q);
	rq_tag_set_free(set);
	d1 = je_u64("thread.deallocated");
	assert_true(d1 - d0 >= (uint64_t)NR_HW * DEPTH * CMD_SIZE);
}

static void test_node_arena(void **state)
{
	int (*numa_available_fn)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "numa_available");
	unsigned auto_arenas = je_unsigned("opt.narenas");
	struct rq_tag_set *set;
	struct rq_queue *q;
	size_t held = 0;
	unsigned n;

	if (!numa_available_fn || numa_available_fn() < 0) {
		skip(); /* no libnuma or no NUMA: node memory from the thread's arena */
		return;
	}
	make_queue(&set, &q);
	n = je_unsigned("arenas.narenas");
	assert_true(n > auto_arenas);
	{
		uint64_t epoch = 1;
		size_t sz = sizeof(epoch);

		assert_int_equal(je_mallctl("epoch", &epoch, &sz, &epoch, sz), 0);
	}
	for (unsigned i = auto_arenas; i < n; i++) {
		char name[64];
		size_t v, sz = sizeof(v);

		snprintf(name, sizeof(name), "stats.arenas.%u.small.allocated", i);
		if (!je_mallctl(name, &v, &sz, NULL, 0))
			held += v;
		snprintf(name, sizeof(name), "stats.arenas.%u.large.allocated", i);
		sz = sizeof(v);
		if (!je_mallctl(name, &v, &sz, NULL, 0))
			held += v;
	}
	assert_true(held >= (size_t)NR_HW * DEPTH * CMD_SIZE);
	rq_queue_destroy(q);
	rq_tag_set_free(set);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_program_malloc_is_not_jemalloc),
		cmocka_unit_test(test_queue_memory_from_jemalloc),
		cmocka_unit_test(test_node_arena),
	};
	bool stats = false;
	size_t sz = sizeof(stats);

	if (!RQ_ALLOC_JEMALLOC) {
		printf("the library's heap is libc (no jemalloc, or a sanitizer build): skipped\n");
		return 77;
	}
	je_mallctl = (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
	if (!je_mallctl) {
		printf("jemalloc not loaded with librequest: skipped\n");
		return 77;
	}
	if (je_mallctl("config.stats", &stats, &sz, NULL, 0) || !stats) {
		printf("jemalloc without statistics: skipped\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
