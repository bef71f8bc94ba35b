/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Red-black trees: random inserts and erases (fixed seed) with the
 * invariants and the in-order walk checked after every step, then the
 * sector-sorted request helpers schedulers use.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <librequest/librequest.h>

struct item {
	struct rq_rb_node rb;
	unsigned key;
	bool in_tree;
};

#define NR_ITEMS 600
#define NR_STEPS 6000

static struct rq_rb_node *parent_of(const struct rq_rb_node *n)
{
	return (struct rq_rb_node *)(n->parent_color & ~(uintptr_t)3);
}

static bool is_black(const struct rq_rb_node *n)
{
	return !n || (n->parent_color & 1);
}

/* Check the subtree under @n; return its black height. */
static int check_subtree(const struct rq_rb_node *n, const struct rq_rb_node *parent,
			 unsigned *count)
{
	int lh, rh;

	if (!n)
		return 1;
	assert_ptr_equal(parent_of(n), parent);
	if (!is_black(n)) {
		assert_true(is_black(n->left));
		assert_true(is_black(n->right));
	}
	lh = check_subtree(n->left, n, count);
	rh = check_subtree(n->right, n, count);
	assert_int_equal(lh, rh);
	(*count)++;
	return lh + (is_black(n) ? 1 : 0);
}

static void check_tree(const struct rq_rb_root *root, unsigned expect)
{
	const struct rq_rb_node *n, *prev = NULL;
	unsigned count = 0, walked = 0;

	if (root->node)
		assert_true(is_black(root->node));
	check_subtree(root->node, NULL, &count);
	assert_int_equal(count, expect);

	/* Forward walk sorted; backward walk the mirror image. */
	for (n = rq_rb_first(root); n; n = rq_rb_next(n)) {
		const struct item *it = RQ_CONTAINER_OF(n, struct item, rb);

		if (prev)
			assert_true(RQ_CONTAINER_OF(prev, struct item, rb)->key <= it->key);
		assert_true(it->in_tree);
		prev = n;
		walked++;
	}
	assert_int_equal(walked, expect);
	assert_ptr_equal(prev, rq_rb_last(root));
	for (n = rq_rb_last(root); n; n = rq_rb_prev(n))
		walked--;
	assert_int_equal(walked, 0);
}

static void item_insert(struct rq_rb_root *root, struct item *it)
{
	struct rq_rb_node **link = &root->node, *parent = NULL;

	while (*link) {
		parent = *link;
		if (it->key < RQ_CONTAINER_OF(parent, struct item, rb)->key)
			link = &parent->left;
		else
			link = &parent->right;
	}
	rq_rb_link_node(&it->rb, parent, link);
	rq_rb_insert_color(&it->rb, root);
	it->in_tree = true;
}

static uint32_t rng_state = 12345;

static uint32_t rng(void)
{
	rng_state = rng_state * 1103515245u + 12345u;
	return rng_state >> 8;
}

static void test_random_ops(void **state)
{
	struct item *items = calloc(NR_ITEMS, sizeof(*items));
	struct rq_rb_root root = { NULL };
	unsigned in = 0, step, i;

	assert_non_null(items);
	assert_null(rq_rb_first(&root));
	assert_null(rq_rb_last(&root));
	for (i = 0; i < NR_ITEMS; i++) {
		items[i].key = rng() % 200; /* many duplicates */
		rq_rb_clear_node(&items[i].rb);
	}
	for (step = 0; step < NR_STEPS; step++) {
		struct item *it = &items[rng() % NR_ITEMS];
		/* Grow for the first half, shrink after: deep trees, then empty ones. */
		bool want_insert = (rng() % 100) < (step < NR_STEPS / 2 ? 70u : 30u);

		if (!it->in_tree && want_insert) {
			item_insert(&root, it);
			in++;
		} else if (it->in_tree && !want_insert) {
			rq_rb_erase(&it->rb, &root);
			rq_rb_clear_node(&it->rb);
			assert_true(rq_rb_empty_node(&it->rb));
			assert_null(rq_rb_next(&it->rb));
			assert_null(rq_rb_prev(&it->rb));
			it->in_tree = false;
			in--;
		} else {
			continue;
		}
		check_tree(&root, in);
	}
	/* Empty it in key order, then in reverse from a refill. */
	while (root.node) {
		struct item *it = RQ_CONTAINER_OF(rq_rb_first(&root), struct item, rb);

		rq_rb_erase(&it->rb, &root);
		it->in_tree = false;
		check_tree(&root, --in);
	}
	for (i = 0; i < NR_ITEMS; i++) {
		item_insert(&root, &items[i]);
		in++;
	}
	check_tree(&root, in);
	while (root.node) {
		struct item *it = RQ_CONTAINER_OF(rq_rb_last(&root), struct item, rb);

		rq_rb_erase(&it->rb, &root);
		it->in_tree = false;
		in--;
	}
	check_tree(&root, 0);
	free(items);
}

static void test_sequential_keys(void **state)
{
	struct item items[256];
	struct rq_rb_root root = { NULL };
	unsigned i;

	for (i = 0; i < 256; i++) {
		items[i].key = i;
		item_insert(&root, &items[i]);
		check_tree(&root, i + 1);
	}
	for (i = 0; i < 256; i += 2) {
		rq_rb_erase(&items[i].rb, &root);
		items[i].in_tree = false;
		check_tree(&root, 256 - i / 2 - 1);
	}
}

/* -------------------------------------------------- request trees */

static void test_elv_rb(void **state)
{
	static const uint64_t sectors[] = { 800, 8, 400, 8, 1600, 0, 400, 8 };
	struct rq_request rqs[8];
	struct rq_rb_root root = { NULL };
	struct rq_request *rq, *prev;
	unsigned i, n;

	memset(rqs, 0, sizeof(rqs));
	assert_null(rq_sched_rb_first(&root));
	assert_null(rq_sched_rb_find(&root, 8));
	for (i = 0; i < 8; i++) {
		rqs[i].sector = sectors[i];
		rq_sched_rb_add(&root, &rqs[i]);
	}

	/* Sorted walk; equal sectors keep insertion order (equal keys go right). */
	rq = rq_sched_rb_first(&root);
	assert_ptr_equal(rq, &rqs[5]);
	assert_null(rq_sched_rb_former(rq));
	assert_ptr_equal(rq_sched_rb_latter(rq), &rqs[1]);
	assert_ptr_equal(rq_sched_rb_latter(&rqs[1]), &rqs[3]);
	assert_ptr_equal(rq_sched_rb_latter(&rqs[3]), &rqs[7]);
	assert_ptr_equal(rq_sched_rb_latter(&rqs[7]), &rqs[2]);
	assert_ptr_equal(rq_sched_rb_latter(&rqs[2]), &rqs[6]);
	assert_ptr_equal(rq_sched_rb_former(&rqs[6]), &rqs[2]);
	assert_null(rq_sched_rb_latter(&rqs[4]));
	for (n = 1, prev = rq, rq = rq_sched_rb_latter(rq); rq; prev = rq, rq = rq_sched_rb_latter(rq)) {
		assert_true(prev->sector <= rq->sector);
		assert_ptr_equal(rq_sched_rb_former(rq), prev);
		n++;
	}
	assert_int_equal(n, 8);

	/* Find. */
	rq = rq_sched_rb_find(&root, 8);
	assert_non_null(rq);
	assert_int_equal(rq->sector, 8);
	assert_ptr_equal(rq_sched_rb_find(&root, 1600), &rqs[4]);
	assert_ptr_equal(rq_sched_rb_find(&root, 0), &rqs[5]);
	assert_null(rq_sched_rb_find(&root, 9));
	assert_null(rq_sched_rb_find(&root, 1601));

	/* Delete duplicates one by one: find keeps finding the rest. */
	rq_sched_rb_del(&root, &rqs[1]);
	assert_true(rq_rb_empty_node(&rqs[1].rb_node));
	assert_null(rq_sched_rb_former(&rqs[1]));
	assert_null(rq_sched_rb_latter(&rqs[1]));
	rq = rq_sched_rb_find(&root, 8);
	assert_true(rq == &rqs[3] || rq == &rqs[7]);
	rq_sched_rb_del(&root, rq);
	rq = rq_sched_rb_find(&root, 8);
	assert_true(rq == &rqs[3] || rq == &rqs[7]);
	rq_sched_rb_del(&root, rq);
	assert_null(rq_sched_rb_find(&root, 8));
	assert_ptr_equal(rq_sched_rb_latter(&rqs[5]), &rqs[2]);

	rq_sched_rb_del(&root, &rqs[5]);
	assert_ptr_equal(rq_sched_rb_first(&root), &rqs[2]);
	rq_sched_rb_del(&root, &rqs[2]);
	rq_sched_rb_del(&root, &rqs[6]);
	rq_sched_rb_del(&root, &rqs[0]);
	assert_ptr_equal(rq_sched_rb_first(&root), &rqs[4]);
	rq_sched_rb_del(&root, &rqs[4]);
	assert_null(rq_sched_rb_first(&root));
	assert_null(root.node);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_ops),
		cmocka_unit_test(test_sequential_keys),
		cmocka_unit_test(test_elv_rb),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
