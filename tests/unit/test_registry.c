/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The scheduler registry: every rejection of rq_sched_register(), name
 * and alias clashes, unregistering, the ABI copy of an older (smaller)
 * type, the "scheduler" listing, and tunables through a toy scheduler.
 * Built-in schedulers may exist: expectations are built around them.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <librequest/librequest.h>

#include "internal/elevator.h"

/* ------------------------------------------------------ a toy scheduler */

struct toy_data {
	int quantum;   /* read-write, 1..100 */
	int served;    /* read-only */
};

static void toy_insert(struct rq_hw_ctx *hctx, struct rq_list_node *list, unsigned flags)
{
}

static struct rq_request *toy_dispatch(struct rq_hw_ctx *hctx)
{
	return NULL;
}

static bool toy_has_work(struct rq_hw_ctx *hctx)
{
	return false;
}

static int toy_quantum_show(void *data, char *buf, size_t len)
{
	return snprintf(buf, len, "%d\n", ((struct toy_data *)data)->quantum);
}

static int toy_quantum_store(void *data, const char *buf)
{
	char *end;
	long v = strtol(buf, &end, 10);

	if (end == buf || (*end && *end != '\n') || v < 1 || v > 100)
		return -EINVAL;
	((struct toy_data *)data)->quantum = (int)v;
	return 0;
}

static int toy_served_show(void *data, char *buf, size_t len)
{
	return snprintf(buf, len, "%d\n", ((struct toy_data *)data)->served);
}

static const struct rq_elv_attr toy_attrs[] = {
	{ .name = "quantum", .show = toy_quantum_show, .store = toy_quantum_store },
	{ .name = "served", .show = toy_served_show },
	{ .name = NULL },
};

/* A valid multi-queue type called @name. */
static struct rq_elevator_type toy_type(const char *name)
{
	struct rq_elevator_type t = {
		RQ_ELV_TYPE_INIT,
		.name = name,
		.ops = {
			.insert_requests = toy_insert,
			.dispatch_request = toy_dispatch,
			.has_work = toy_has_work,
		},
		.attrs = toy_attrs,
	};

	return t;
}

/* Stands for single-queue hooks: only its address matters here. */
static const int toy_sq_ops_storage;
#define TOY_SQ_OPS ((const struct rq_elevator_sq_ops *)(const void *)&toy_sq_ops_storage)

/* ------------------------------------------------------------ rejections */

static void test_register_rejects(void **state)
{
	struct rq_elevator_type t;
	char long_name[40];

	assert_int_equal(rq_sched_register(NULL), -EINVAL);

	t = toy_type("toy");
	t.abi_version = 0;
	assert_int_equal(rq_sched_register(&t), -EINVAL);
	t.abi_version = RQ_ELV_ABI + 1;
	assert_int_equal(rq_sched_register(&t), -EINVAL);

	t = toy_type("toy");
	t.size = offsetof(struct rq_elevator_type, attrs) - 1;
	assert_int_equal(rq_sched_register(&t), -EINVAL);
	t.size = 0;
	assert_int_equal(rq_sched_register(&t), -EINVAL);

	static const char *const bad_names[] = {
		"", "none", "a b", "a\tb", "tail ", "a/b", "/", "a\nb",
	};
	for (unsigned i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
		t = toy_type(bad_names[i]);
		assert_int_equal(rq_sched_register(&t), -EINVAL);
		t = toy_type("toy");
		t.alias = bad_names[i];
		assert_int_equal(rq_sched_register(&t), -EINVAL);
	}
	t = toy_type(NULL);
	assert_int_equal(rq_sched_register(&t), -EINVAL);

	memset(long_name, 'x', 32);
	long_name[32] = '\0';
	t = toy_type(long_name);
	assert_int_equal(rq_sched_register(&t), -EINVAL);
	t = toy_type("toy");
	t.alias = long_name;
	assert_int_equal(rq_sched_register(&t), -EINVAL);
	/* 31 characters is the longest name. */
	long_name[31] = '\0';
	t = toy_type(long_name);
	assert_int_equal(rq_sched_register(&t), 0);
	assert_true(rq_sched_exists(long_name));
	assert_int_equal(rq_sched_unregister(long_name), 0);

	/* Missing required multi-queue hooks. */
	t = toy_type("toy");
	t.ops.insert_requests = NULL;
	assert_int_equal(rq_sched_register(&t), -EINVAL);
	t = toy_type("toy");
	t.ops.dispatch_request = NULL;
	assert_int_equal(rq_sched_register(&t), -EINVAL);
	t = toy_type("toy");
	t.ops.has_work = NULL;
	t.features = RQ_ELV_F_MQ | RQ_ELV_F_SQ;
	t.sq_ops = TOY_SQ_OPS;
	assert_int_equal(rq_sched_register(&t), -EINVAL);

	/* Single-queue without its hooks; unknown feature bits. */
	t = toy_type("toy");
	t.features = RQ_ELV_F_SQ;
	assert_int_equal(rq_sched_register(&t), -EINVAL);
	t.features = RQ_ELV_F_MQ | (1u << 7);
	assert_int_equal(rq_sched_register(&t), -EINVAL);

	/* An alias equal to its own name. */
	t = toy_type("toy");
	t.alias = "toy";
	assert_int_equal(rq_sched_register(&t), -EINVAL);

	/* Nothing of the above got in. */
	assert_false(rq_sched_exists("toy"));
	assert_int_equal(rq_sched_unregister("toy"), -ENOENT);
}

static void test_features(void **state)
{
	struct rq_elevator_type t = toy_type("toy-feat");
	const struct rq_elevator_type *e;

	/* 0 means multi-queue. */
	assert_int_equal(rq_sched_register(&t), 0);
	e = elevator_get("toy-feat", RQ_ELV_F_MQ);
	assert_non_null(e);
	assert_int_equal(e->features, RQ_ELV_F_MQ);
	assert_null(elevator_get("toy-feat", RQ_ELV_F_SQ));
	elevator_put(e);
	assert_int_equal(rq_sched_unregister("toy-feat"), 0);

	/* Single-queue only: no multi-queue hooks needed. */
	memset(&t.ops, 0, sizeof(t.ops));
	t.features = RQ_ELV_F_SQ;
	t.sq_ops = TOY_SQ_OPS;
	assert_int_equal(rq_sched_register(&t), 0);
	assert_null(elevator_get("toy-feat", RQ_ELV_F_MQ));
	e = elevator_get("toy-feat", RQ_ELV_F_SQ);
	assert_non_null(e);
	assert_ptr_equal(e->sq_ops, TOY_SQ_OPS);
	elevator_put(e);
	assert_int_equal(rq_sched_unregister("toy-feat"), 0);
}

/* ------------------------------------------------------------ clashes */

static void test_eexist(void **state)
{
	struct rq_elevator_type a = toy_type("toy-a");
	struct rq_elevator_type b;

	a.alias = "ta";
	assert_int_equal(rq_sched_register(&a), 0);

	b = toy_type("toy-a");                 /* name = name */
	assert_int_equal(rq_sched_register(&b), -EEXIST);
	b = toy_type("ta");                    /* name = alias */
	assert_int_equal(rq_sched_register(&b), -EEXIST);
	b = toy_type("toy-b");
	b.alias = "toy-a";                     /* alias = name */
	assert_int_equal(rq_sched_register(&b), -EEXIST);
	b.alias = "ta";                        /* alias = alias */
	assert_int_equal(rq_sched_register(&b), -EEXIST);
	assert_false(rq_sched_exists("toy-b"));

	b.alias = "tb";
	assert_int_equal(rq_sched_register(&b), 0);
	assert_true(rq_sched_exists("toy-b"));
	assert_true(rq_sched_exists("tb"));
	assert_true(rq_sched_exists("ta"));

	assert_int_equal(rq_sched_unregister("toy-a"), 0);
	assert_int_equal(rq_sched_unregister("tb"), 0); /* by alias */
	assert_false(rq_sched_exists("toy-a"));
	assert_false(rq_sched_exists("ta"));
	assert_false(rq_sched_exists("toy-b"));
}

static void test_unregister(void **state)
{
	struct rq_elevator_type t = toy_type("toy-u");
	const struct rq_elevator_type *e1, *e2;

	assert_int_equal(rq_sched_unregister("no-such"), -ENOENT);
	assert_int_equal(rq_sched_unregister("none"), -ENOENT);
	assert_int_equal(rq_sched_unregister(NULL), -EINVAL);
	assert_true(rq_sched_exists("none"));
	assert_false(rq_sched_exists(NULL));
	assert_null(elevator_get("none", RQ_ELV_F_MQ));
	assert_null(elevator_get("no-such", 0));

	assert_int_equal(rq_sched_register(&t), 0);
	e1 = elevator_get("toy-u", RQ_ELV_F_MQ);
	e2 = elevator_get("toy-u", 0);
	assert_non_null(e1);
	assert_ptr_equal(e1, e2);
	assert_int_equal(rq_sched_unregister("toy-u"), -EBUSY);
	elevator_put(e1);
	assert_int_equal(rq_sched_unregister("toy-u"), -EBUSY);
	elevator_put(e2);
	assert_int_equal(rq_sched_unregister("toy-u"), 0);
	assert_int_equal(rq_sched_unregister("toy-u"), -ENOENT);
	elevator_put(NULL);
}

/* ------------------------------------------------------------ ABI copy */

static void test_abi_copy_zero_fills(void **state)
{
	/* An "old" scheduler: its struct ends before attrs; garbage follows. */
	union {
		struct rq_elevator_type t;
		unsigned char bytes[sizeof(struct rq_elevator_type)];
	} old;
	char name[] = "toy-old";
	const struct rq_elevator_type *e;

	memset(&old, 0xa5, sizeof(old));
	old.t.size = offsetof(struct rq_elevator_type, attrs);
	old.t.abi_version = RQ_ELV_ABI;
	old.t.name = name;
	old.t.alias = NULL;
	old.t.features = 0;
	memset(&old.t.ops, 0, sizeof(old.t.ops));
	old.t.ops.insert_requests = toy_insert;
	old.t.ops.dispatch_request = toy_dispatch;
	old.t.ops.has_work = toy_has_work;
	assert_int_equal(rq_sched_register(&old.t), 0);

	/* The caller's name buffer may change: the registry has its own. */
	strcpy(name, "changed");
	assert_true(rq_sched_exists("toy-old"));
	assert_false(rq_sched_exists("changed"));

	e = elevator_get("toy-old", RQ_ELV_F_MQ);
	assert_non_null(e);
	assert_null(e->attrs);
	assert_null(e->sq_ops);
	assert_null(e->alias);
	assert_string_equal(e->name, "toy-old");
	assert_ptr_not_equal(e, &old.t);
	assert_int_equal(e->size, sizeof(struct rq_elevator_type));
	assert_ptr_equal(e->ops.has_work, toy_has_work);
	assert_null(e->ops.init_sched);
	elevator_put(e);
	assert_int_equal(rq_sched_unregister("toy-old"), 0);

	/* Old enough to lack sq_ops, so it cannot claim single-queue. */
	old.t.size = offsetof(struct rq_elevator_type, sq_ops);
	old.t.name = "toy-old2";
	old.t.features = RQ_ELV_F_SQ;
	assert_int_equal(rq_sched_register(&old.t), -EINVAL);
	old.t.features = RQ_ELV_F_MQ;
	old.t.attrs = toy_attrs;
	assert_int_equal(rq_sched_register(&old.t), 0);
	e = elevator_get("toy-old2", 0);
	assert_non_null(e);
	assert_ptr_equal(e->attrs, toy_attrs);
	assert_null(e->sq_ops);
	elevator_put(e);
	assert_int_equal(rq_sched_unregister("toy-old2"), 0);

	/*
	 * Built before the completion batch hooks (its struct ends at them,
	 * garbage after): it registers, and they read as NULL (no batch).
	 */
	old.t.size = offsetof(struct rq_elevator_type, completion_batch_begin);
	old.t.name = "toy-old3";
	old.t.dispatch_requests = NULL;
	assert_int_equal(rq_sched_register(&old.t), 0);
	e = elevator_get("toy-old3", 0);
	assert_non_null(e);
	assert_null(e->completion_batch_begin);
	assert_null(e->completion_batch_end);
	elevator_put(e);
	assert_int_equal(rq_sched_unregister("toy-old3"), 0);
}

/* ---------------------------------------------------------- listing */

static void add_name(char *out, size_t len, size_t *pos, const char *active, const char *name,
		     const char *alias)
{
	bool on = active && (!strcmp(active, name) || (alias && !strcmp(active, alias)));

	*pos += snprintf(out + *pos, len - *pos, "%s%s%s%s", *pos ? " " : "", on ? "[" : "",
			 name, on ? "]" : "");
}

/* "none" (for MQ), built-ins having @feat, then @extra, @active bracketed. */
static void expect_list(char *out, size_t len, const char *active, unsigned feat,
			const char *const *extra)
{
	size_t pos = 0;
	unsigned i;

	out[0] = '\0';
	if (feat & RQ_ELV_F_MQ)
		add_name(out, len, &pos, active, "none", NULL);
	for (i = 0; rq_builtin_elevators[i]; i++) {
		const struct rq_elevator_type *b = rq_builtin_elevators[i];
		unsigned f = b->features ? b->features : RQ_ELV_F_MQ;

		if ((f & feat) == feat)
			add_name(out, len, &pos, active, b->name, b->alias);
	}
	for (i = 0; extra[i]; i += 2)
		add_name(out, len, &pos, active, extra[i], extra[i + 1]);
	snprintf(out + pos, len - pos, "\n");
}

static void test_list_names(void **state)
{
	struct rq_elevator_type a = toy_type("toy-a"), b = toy_type("toy-b"), s = toy_type("toy-sq");
	static const char *const mq_extra[] = { "toy-a", NULL, "toy-b", "tb", NULL };
	static const char *const sq_extra[] = { "toy-sq", NULL, NULL };
	char buf[512], want[512];
	int n;

	b.alias = "tb";
	memset(&s.ops, 0, sizeof(s.ops));
	s.features = RQ_ELV_F_SQ;
	s.sq_ops = TOY_SQ_OPS;
	assert_int_equal(rq_sched_register(&a), 0);
	assert_int_equal(rq_sched_register(&s), 0);
	assert_int_equal(rq_sched_register(&b), 0);

	static const char *const actives[] = { "none", "toy-a", "toy-b", "tb", "nothing" };
	for (unsigned i = 0; i < 5; i++) {
		n = elevator_list_names(buf, sizeof(buf), actives[i], RQ_ELV_F_MQ);
		expect_list(want, sizeof(want), actives[i], RQ_ELV_F_MQ, mq_extra);
		assert_string_equal(buf, want);
		assert_int_equal(n, (int)strlen(want));
	}
	if (!rq_builtin_elevators[0]) {
		/* The exact text, when no built-in is there yet. */
		elevator_list_names(buf, sizeof(buf), "none", RQ_ELV_F_MQ);
		assert_string_equal(buf, "[none] toy-a toy-b\n");
		elevator_list_names(buf, sizeof(buf), "tb", RQ_ELV_F_MQ);
		assert_string_equal(buf, "none toy-a [toy-b]\n");
		elevator_list_names(buf, sizeof(buf), "toy-sq", RQ_ELV_F_SQ);
		assert_string_equal(buf, "[toy-sq]\n");
	}
	n = elevator_list_names(buf, sizeof(buf), NULL, RQ_ELV_F_MQ);
	expect_list(want, sizeof(want), NULL, RQ_ELV_F_MQ, mq_extra);
	assert_string_equal(buf, want);

	n = elevator_list_names(buf, sizeof(buf), "toy-sq", RQ_ELV_F_SQ);
	expect_list(want, sizeof(want), "toy-sq", RQ_ELV_F_SQ, sq_extra);
	assert_string_equal(buf, want);
	assert_null(strstr(buf, "none"));

	/* Exactly enough room, one byte short, nothing. */
	expect_list(want, sizeof(want), "toy-a", RQ_ELV_F_MQ, mq_extra);
	n = elevator_list_names(buf, strlen(want) + 1, "toy-a", RQ_ELV_F_MQ);
	assert_int_equal(n, (int)strlen(want));
	assert_string_equal(buf, want);
	assert_int_equal(elevator_list_names(buf, strlen(want), "toy-a", RQ_ELV_F_MQ), -ENOSPC);
	assert_int_equal(elevator_list_names(buf, 3, "toy-a", RQ_ELV_F_MQ), -ENOSPC);
	assert_int_equal(elevator_list_names(buf, 0, "toy-a", RQ_ELV_F_MQ), -ENOSPC);

	/* Unregistering keeps the others' order. */
	assert_int_equal(rq_sched_unregister("toy-a"), 0);
	n = elevator_list_names(buf, sizeof(buf), "toy-b", RQ_ELV_F_MQ);
	expect_list(want, sizeof(want), "toy-b", RQ_ELV_F_MQ, mq_extra + 2);
	assert_string_equal(buf, want);
	assert_int_equal(rq_sched_unregister("toy-b"), 0);
	assert_int_equal(rq_sched_unregister("toy-sq"), 0);
}

/* ---------------------------------------------------------- tunables */

static void test_attrs(void **state)
{
	struct rq_elevator_type t = toy_type("toy-attr");
	struct toy_data data = { .quantum = 5, .served = 42 };
	const struct rq_elevator_type *e;
	char buf[128];

	assert_int_equal(rq_sched_register(&t), 0);
	e = elevator_get("toy-attr", RQ_ELV_F_MQ);
	assert_non_null(e);

	assert_int_equal(elevator_attr_show(e, &data, "quantum", buf, sizeof(buf)), 2);
	assert_string_equal(buf, "5\n");
	assert_int_equal(elevator_attr_show(e, &data, "served", buf, sizeof(buf)), 3);
	assert_string_equal(buf, "42\n");
	assert_int_equal(elevator_attr_show(e, &data, "iosched/served", buf, sizeof(buf)), 3);

	assert_int_equal(elevator_attr_store(e, &data, "quantum", "17"), 0);
	assert_int_equal(data.quantum, 17);
	elevator_attr_show(e, &data, "quantum", buf, sizeof(buf));
	assert_string_equal(buf, "17\n");
	assert_int_equal(elevator_attr_store(e, &data, "quantum", "abc"), -EINVAL);
	assert_int_equal(elevator_attr_store(e, &data, "quantum", "1000"), -EINVAL);
	assert_int_equal(data.quantum, 17);
	assert_int_equal(elevator_attr_store(e, &data, "served", "1"), -EINVAL);
	assert_int_equal(data.served, 42);

	assert_int_equal(elevator_attr_show(e, &data, "nope", buf, sizeof(buf)), -ENOENT);
	assert_int_equal(elevator_attr_store(e, &data, "nope", "1"), -ENOENT);
	assert_int_equal(elevator_attr_show(e, &data, "", buf, sizeof(buf)), -ENOENT);

	assert_int_equal(elevator_attr_list(e, buf, sizeof(buf)),
			 (int)strlen("iosched/quantum\niosched/served\n"));
	assert_string_equal(buf, "iosched/quantum\niosched/served\n");
	assert_int_equal(elevator_attr_list(e, buf, 20), -ENOSPC);
	elevator_put(e);
	assert_int_equal(rq_sched_unregister("toy-attr"), 0);

	/* No table: nothing to list, nothing to find. */
	t = toy_type("toy-noattr");
	t.attrs = NULL;
	assert_int_equal(rq_sched_register(&t), 0);
	e = elevator_get("toy-noattr", 0);
	assert_int_equal(elevator_attr_list(e, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "");
	assert_int_equal(elevator_attr_show(e, &data, "quantum", buf, sizeof(buf)), -ENOENT);
	elevator_put(e);
	assert_int_equal(rq_sched_unregister("toy-noattr"), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_register_rejects),
		cmocka_unit_test(test_features),
		cmocka_unit_test(test_eexist),
		cmocka_unit_test(test_unregister),
		cmocka_unit_test(test_abi_copy_zero_fills),
		cmocka_unit_test(test_list_names),
		cmocka_unit_test(test_attrs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
