/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Queue attributes (doc/semantics-draft.md, "Attributes"): the text every
 * attribute reads as, round trips of the writable ones, -EINVAL for bad
 * values, read-only attributes and unknown names with nothing changed,
 * iosched/<tunable> of a scheduler registered here, the effect of
 * max_sectors_kb / write_cache / nomerges / rotational on what the driver
 * sees, the attribute list and -ENOSPC for short buffers.
 */
#define _GNU_SOURCE
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
#include <cmocka.h>

#include "mock_driver.h"
#include "fixtures.h"

/* ---------------------------------------- a scheduler with two tunables */

#define TOY_NAME "attr-toy"
#define TOY_QUANTUM_DEFAULT 16

struct toy_data {
	pthread_mutex_t lock;
	struct rq_list_node list;
	unsigned quantum;      /* rw tunable, 1..1000 */
	unsigned long inserted; /* ro tunable */
};

static struct toy_data *toy_last; /* instance made by the last init_sched */
static atomic_int toy_bad_data;   /* a tunable hook got someone else's data */

static int toy_init_sched(struct rq_queue *q, void **data)
{
	struct toy_data *d = calloc(1, sizeof(*d));

	if (!d)
		return -ENOMEM;
	pthread_mutex_init(&d->lock, NULL);
	rq_list_init(&d->list);
	d->quantum = TOY_QUANTUM_DEFAULT;
	*data = d;
	toy_last = d;
	return 0;
}

static void toy_exit_sched(struct rq_queue *q, void *data)
{
	struct toy_data *d = data;

	if (toy_last == d)
		toy_last = NULL;
	pthread_mutex_destroy(&d->lock);
	free(d);
}

static void toy_insert(struct rq_hw_ctx *hctx, struct rq_list_node *list, unsigned flags)
{
	struct toy_data *d = rq_sched_data(rq_hctx_queue(hctx));

	pthread_mutex_lock(&d->lock);
	for (struct rq_list_node *p = list->next; p != list; p = p->next)
		d->inserted++;
	if (flags & RQ_INSERT_AT_HEAD)
		rq_list_splice_init(list, &d->list);
	else
		rq_list_splice_tail_init(list, &d->list);
	pthread_mutex_unlock(&d->lock);
}

static struct rq_request *toy_dispatch(struct rq_hw_ctx *hctx)
{
	struct toy_data *d = rq_sched_data(rq_hctx_queue(hctx));
	struct rq_request *rq;

	pthread_mutex_lock(&d->lock);
	rq = rq_list_first_rq(&d->list);
	if (rq)
		rq_list_del_init(&rq->queuelist);
	pthread_mutex_unlock(&d->lock);
	return rq;
}

static bool toy_has_work(struct rq_hw_ctx *hctx)
{
	struct toy_data *d = rq_sched_data(rq_hctx_queue(hctx));
	bool work;

	pthread_mutex_lock(&d->lock);
	work = !rq_list_empty(&d->list);
	pthread_mutex_unlock(&d->lock);
	return work;
}

static int toy_show_quantum(void *data, char *buf, size_t len)
{
	struct toy_data *d = data;
	int n;

	if (d != toy_last)
		atomic_fetch_add(&toy_bad_data, 1);
	pthread_mutex_lock(&d->lock);
	n = snprintf(buf, len, "%u\n", d->quantum);
	pthread_mutex_unlock(&d->lock);
	return n < 0 || (size_t)n >= len ? -ENOSPC : n;
}

static int toy_store_quantum(void *data, const char *buf)
{
	struct toy_data *d = data;
	unsigned long v = 0;
	const char *p = buf;

	if (d != toy_last)
		atomic_fetch_add(&toy_bad_data, 1);
	if (!*p)
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		v = v * 10 + (unsigned long)(*p - '0');
		if (v > 1000)
			return -EINVAL;
	}
	if ((*p && strcmp(p, "\n")) || v < 1)
		return -EINVAL;
	pthread_mutex_lock(&d->lock);
	d->quantum = (unsigned)v;
	pthread_mutex_unlock(&d->lock);
	return 0;
}

static int toy_show_inserted(void *data, char *buf, size_t len)
{
	struct toy_data *d = data;
	int n;

	pthread_mutex_lock(&d->lock);
	n = snprintf(buf, len, "%lu\n", d->inserted);
	pthread_mutex_unlock(&d->lock);
	return n < 0 || (size_t)n >= len ? -ENOSPC : n;
}

static const struct rq_elv_attr toy_attrs[] = {
	{ "quantum", toy_show_quantum, toy_store_quantum },
	{ "inserted", toy_show_inserted, NULL },
	{ NULL, NULL, NULL },
};

static int setup(void **state)
{
	static const struct rq_elevator_type toy = {
		RQ_ELV_TYPE_INIT,
		.name = TOY_NAME,
		.features = RQ_ELV_F_MQ,
		.ops = {
			.init_sched = toy_init_sched,
			.exit_sched = toy_exit_sched,
			.insert_requests = toy_insert,
			.dispatch_request = toy_dispatch,
			.has_work = toy_has_work,
		},
		.attrs = toy_attrs,
	};
	int ret;

	if (fixture_register_fifo())
		return -1;
	ret = rq_sched_register(&toy);
	return ret == 0 || ret == -EEXIST ? 0 : -1;
}

/* --------------------------------------------------------------- helpers */

/*
 * The test queue: max_hw_sectors 1024 (512 KiB), physical block 4096,
 * features @features, tag set timeout @timeout_ms, scheduler "none".
 */
static struct mock_dev *dev(uint32_t features, unsigned timeout_ms)
{
	struct mock_config cfg;
	struct rq_queue_config qc;
	struct rq_queue_limits lim;

	memset(&cfg, 0, sizeof(cfg));
	cfg.completion = MOCK_COMPLETE_INLINE;
	cfg.timeout_ms = timeout_ms;
	rq_queue_limits_default(&lim);
	lim.max_hw_sectors = 1024;
	lim.max_sectors = 0;
	lim.max_segments = 128;
	lim.max_segment_size = 65536;
	lim.logical_block_size = 512;
	lim.physical_block_size = 4096;
	lim.features = features;
	memset(&qc, 0, sizeof(qc));
	qc.size = sizeof(qc);
	qc.limits = &lim;
	qc.scheduler = "none";
	return mock_create(&cfg, &qc);
}

/* Read @name into @buf (asserts success, NUL-terminated, newline-ended). */
static const char *get(struct rq_queue *q, const char *name, char *buf, size_t len)
{
	int n = rq_queue_attr_get(q, name, buf, len);

	if (n <= 0)
		fail_msg("get %s: %d", name, n);
	assert_int_equal((size_t)n, strlen(buf));
	assert_int_equal(buf[n - 1], '\n');
	return buf;
}

static void expect_attr(struct rq_queue *q, const char *name, const char *want)
{
	char buf[512];

	get(q, name, buf, sizeof(buf));
	if (strcmp(buf, want))
		fail_msg("%s reads \"%s\", want \"%s\"", name, buf, want);
}

/* Write @value to @name; it must succeed and read back as @want. */
static void round_trip(struct rq_queue *q, const char *name, const char *value, const char *want)
{
	int r = rq_queue_attr_set(q, name, value);

	if (r)
		fail_msg("set %s = \"%s\": %d", name, value, r);
	expect_attr(q, name, want);
}

/* Switch the scheduler; it must succeed and read back bracketed. */
static void set_sched(struct rq_queue *q, const char *name)
{
	char buf[512], want[64];
	int r = rq_queue_attr_set(q, "scheduler", name);

	if (r)
		fail_msg("scheduler = %s: %d", name, r);
	get(q, "scheduler", buf, sizeof(buf));
	snprintf(want, sizeof(want), "[%s]", name);
	assert_non_null(strstr(buf, want));
}

/* Every value of @bad (NULL-terminated) is rejected with -EINVAL; @name stays as it was. */
static void expect_rejected(struct rq_queue *q, const char *name, const char *const *bad)
{
	char before[512], after[512];

	get(q, name, before, sizeof(before));
	for (; *bad; bad++) {
		int r = rq_queue_attr_set(q, name, *bad);

		if (r != -EINVAL)
			fail_msg("set %s = \"%s\": %d, want -EINVAL", name, *bad, r);
		get(q, name, after, sizeof(after));
		if (strcmp(before, after))
			fail_msg("%s changed by a rejected \"%s\": \"%s\" -> \"%s\"", name, *bad,
				 before, after);
	}
}

/* Bad for every numeric attribute: non-numeric, empty, trailing garbage, negative, huge. */
static const char *const bad_numbers[] = {
	"abc", "", "12x", "-1", "1.5", "0x10", "4 4", "99999999999999999999", NULL,
};

static char buf4k[4096];

/* ------------------------------------------------------------------ tests */

/* Every attribute reads as sysfs prints it, from the queue's limits and config. */
static void test_read_formats(void **state)
{
	struct mock_dev *m = dev(0, 0);
	char buf[512];
	unsigned long v;
	char *end;

	expect_attr(m->q, "max_hw_sectors_kb", "512\n");
	expect_attr(m->q, "max_sectors_kb", "512\n");
	expect_attr(m->q, "max_segments", "128\n");
	expect_attr(m->q, "max_segment_size", "65536\n");
	expect_attr(m->q, "logical_block_size", "512\n");
	expect_attr(m->q, "physical_block_size", "4096\n");
	expect_attr(m->q, "rotational", "0\n");
	expect_attr(m->q, "nomerges", "0\n");
	expect_attr(m->q, "io_timeout", "30000\n");
	expect_attr(m->q, "write_cache", "write through\n");

	get(m->q, "scheduler", buf, sizeof(buf));
	assert_non_null(strstr(buf, "[none]"));
	assert_non_null(strstr(buf, FIXTURE_FIFO_NAME));
	assert_non_null(strstr(buf, TOY_NAME));

	get(m->q, "nr_requests", buf, sizeof(buf));
	v = strtoul(buf, &end, 10);
	assert_true(v > 0);
	assert_string_equal(end, "\n");

	get(m->q, "rq_affinity", buf, sizeof(buf));
	assert_true(!strcmp(buf, "0\n") || !strcmp(buf, "1\n") || !strcmp(buf, "2\n"));

	get(m->q, "stat", buf, sizeof(buf));
	mock_destroy(m);

	/* another device: rotational, write cache, a tag set timeout */
	m = dev(RQ_FEAT_ROTATIONAL | RQ_FEAT_WRITE_CACHE, 5000);
	expect_attr(m->q, "rotational", "1\n");
	expect_attr(m->q, "write_cache", "write back\n");
	expect_attr(m->q, "io_timeout", "5000\n");
	mock_destroy(m);
}

/* Writable attributes take valid values and read them back. */
static void test_round_trips(void **state)
{
	struct mock_dev *m = dev(RQ_FEAT_WRITE_CACHE, 0);

	round_trip(m->q, "nr_requests", "32", "32\n");
	round_trip(m->q, "nr_requests", "16", "16\n");
	round_trip(m->q, "nomerges", "1", "1\n");
	round_trip(m->q, "nomerges", "2", "2\n");
	round_trip(m->q, "nomerges", "0", "0\n");
	round_trip(m->q, "max_sectors_kb", "64", "64\n");
	round_trip(m->q, "max_sectors_kb", "4", "4\n");
	round_trip(m->q, "max_sectors_kb", "512", "512\n");
	round_trip(m->q, "rotational", "1", "1\n");
	assert_true(rq_queue_rotational(m->q));
	round_trip(m->q, "rotational", "0", "0\n");
	assert_false(rq_queue_rotational(m->q));
	round_trip(m->q, "rq_affinity", "2", "2\n");
	round_trip(m->q, "rq_affinity", "0", "0\n");
	round_trip(m->q, "rq_affinity", "1", "1\n");
	round_trip(m->q, "io_timeout", "250", "250\n");
	round_trip(m->q, "io_timeout", "30000", "30000\n");
	round_trip(m->q, "write_cache", "write through", "write through\n");
	round_trip(m->q, "write_cache", "write back", "write back\n");
	set_sched(m->q, FIXTURE_FIFO_NAME);
	mock_destroy(m);
}

/* Bad values (and out-of-range ones) give -EINVAL and change nothing. */
static void test_bad_values(void **state)
{
	static const char *const bad_nomerges[] = { "3", "10", NULL };
	static const char *const bad_max_kb[] = { "3", "0x4", "513", "1024", NULL };
	static const char *const bad_rot[] = { "2", NULL };
	static const char *const bad_aff[] = { "3", NULL };
	static const char *const bad_timeout[] = { "0", NULL };
	static const char *const bad_wc[] = { "writeback", "", "write", "1", "back", NULL };
	static const char *const numeric[] = {
		"nr_requests", "nomerges", "max_sectors_kb", "rotational", "rq_affinity",
		"io_timeout",
	};
	struct mock_dev *m = dev(RQ_FEAT_WRITE_CACHE, 0);

	for (unsigned i = 0; i < sizeof(numeric) / sizeof(numeric[0]); i++)
		expect_rejected(m->q, numeric[i], bad_numbers);
	expect_rejected(m->q, "nomerges", bad_nomerges);
	expect_rejected(m->q, "max_sectors_kb", bad_max_kb);
	expect_rejected(m->q, "rotational", bad_rot);
	expect_rejected(m->q, "rq_affinity", bad_aff);
	expect_rejected(m->q, "io_timeout", bad_timeout);
	expect_rejected(m->q, "write_cache", bad_wc);
	mock_destroy(m);
}

/* Read-only attributes reject every write, even of their own value, unchanged. */
static void test_read_only(void **state)
{
	static const char *const ro[] = {
		"max_hw_sectors_kb", "max_segments", "max_segment_size",
		"logical_block_size", "physical_block_size", "stat",
	};
	struct mock_dev *m = dev(0, 0);

	for (unsigned i = 0; i < sizeof(ro) / sizeof(ro[0]); i++) {
		char cur[512], trimmed[512];
		const char *tries[4] = { trimmed, "1024", "abc", NULL };

		get(m->q, ro[i], cur, sizeof(cur));
		snprintf(trimmed, sizeof(trimmed), "%.*s", (int)strlen(cur) - 1, cur);
		if (!strcmp(ro[i], "stat"))
			tries[0] = "0"; /* multi-line counters: write something plain */
		expect_rejected(m->q, ro[i], tries);
	}
	mock_destroy(m);
}

/* Unknown names give -EINVAL for get and set. */
static void test_unknown_names(void **state)
{
	static const char *const names[] = {
		"no_such_attr", "", "Scheduler", "scheduler/", "nr_requests2", "iosched",
		"iosched/", "iosched/no_such_tunable", "queue/nr_requests",
	};
	struct mock_dev *m = dev(0, 0);
	char buf[256];

	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		int g = rq_queue_attr_get(m->q, names[i], buf, sizeof(buf));
		int s = rq_queue_attr_set(m->q, names[i], "1");

		if (g != -EINVAL || s != -EINVAL)
			fail_msg("\"%s\": get %d set %d, want -EINVAL", names[i], g, s);
	}
	/* with a scheduler attached, an unknown tunable is still unknown */
	set_sched(m->q, TOY_NAME);
	assert_int_equal(rq_queue_attr_get(m->q, "iosched/no_such_tunable", buf, sizeof(buf)),
			 -EINVAL);
	assert_int_equal(rq_queue_attr_set(m->q, "iosched/no_such_tunable", "1"), -EINVAL);
	mock_destroy(m);
}

/* iosched/<x> without a scheduler gives -EINVAL for get and set. */
static void test_iosched_without_scheduler(void **state)
{
	struct mock_dev *m = dev(0, 0);
	char buf[256];

	assert_int_equal(rq_queue_attr_get(m->q, "iosched/quantum", buf, sizeof(buf)), -EINVAL);
	assert_int_equal(rq_queue_attr_set(m->q, "iosched/quantum", "5"), -EINVAL);
	assert_int_equal(rq_queue_attr_get(m->q, "iosched/insert_merge", buf, sizeof(buf)),
			 -EINVAL);
	assert_int_equal(rq_queue_attr_set(m->q, "iosched/insert_merge", "0"), -EINVAL);

	/* and again after switching a scheduler on and back off */
	set_sched(m->q, TOY_NAME);
	expect_attr(m->q, "iosched/quantum", "16\n");
	set_sched(m->q, "none");
	assert_int_equal(rq_queue_attr_get(m->q, "iosched/quantum", buf, sizeof(buf)), -EINVAL);
	assert_int_equal(rq_queue_attr_set(m->q, "iosched/quantum", "5"), -EINVAL);
	mock_destroy(m);
}

/*
 * Tunables of a scheduler registered here work end to end: the hooks get
 * the queue's instance, values round-trip, bad ones give -EINVAL unchanged,
 * a read-only tunable rejects writes and reflects I/O, and a new instance
 * (switch away and back) starts from the default.  test-fifo's tunable too.
 */
static void test_iosched_tunables(void **state)
{
	static const char *const bad_quantum[] = { "0", "1001", "abc", "", "5x", "-3", NULL };
	static const char *const ro_inserted[] = { "5", NULL };
	struct mock_dev *m = dev(0, 0);
	char buf[256];

	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", TOY_NAME), 0);
	assert_non_null(toy_last);
	expect_attr(m->q, "iosched/quantum", "16\n");
	round_trip(m->q, "iosched/quantum", "32", "32\n");
	assert_int_equal(toy_last->quantum, 32);
	round_trip(m->q, "iosched/quantum", "1000", "1000\n");
	expect_rejected(m->q, "iosched/quantum", bad_quantum);
	assert_int_equal(toy_last->quantum, 1000);

	expect_attr(m->q, "iosched/inserted", "0\n");
	assert_int_equal(mock_rw(m, RQ_OP_WRITE, 0, buf4k, 4096), RQ_STS_OK);
	expect_attr(m->q, "iosched/inserted", "1\n");
	expect_rejected(m->q, "iosched/inserted", ro_inserted);
	assert_int_equal(atomic_load(&toy_bad_data), 0);

	/* a fresh instance starts from the default */
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", FIXTURE_FIFO_NAME), 0);
	assert_int_equal(rq_queue_attr_get(m->q, "iosched/quantum", buf, sizeof(buf)), -EINVAL);
	expect_attr(m->q, "iosched/insert_merge", "1\n");
	round_trip(m->q, "iosched/insert_merge", "0", "0\n");
	expect_rejected(m->q, "iosched/insert_merge", (const char *const[]){ "2", "x", NULL });
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", TOY_NAME), 0);
	expect_attr(m->q, "iosched/quantum", "16\n");
	mock_destroy(m);
}

/* max_sectors_kb limits the size of the requests the driver then sees. */
static void test_max_sectors_kb_applies(void **state)
{
	static const unsigned kbs[] = { 512, 16, 4 };
	struct mock_dev *m = dev(0, 0);
	char *data = calloc(1, 131072);

	assert_non_null(data);
	for (unsigned k = 0; k < 3; k++) {
		char val[16];
		struct mock_event *ev;
		struct mock_io io;
		struct rq_bio *bio;
		uint64_t total = 0, next = 2048;
		unsigned nr;

		snprintf(val, sizeof(val), "%u", kbs[k]);
		assert_int_equal(rq_queue_attr_set(m->q, "max_sectors_kb", val), 0);
		mock_reset_events(m);

		/* one 128 KiB write, two 64 KiB vectors */
		mock_io_init(&io);
		bio = rq_bio_alloc(2);
		assert_non_null(bio);
		assert_int_equal(rq_bio_add_vec(bio, data, 65536), 0);
		assert_int_equal(rq_bio_add_vec(bio, data + 65536, 65536), 0);
		bio->op = RQ_OP_WRITE;
		bio->iter.sector = 2048;
		bio->iter.size = 131072;
		bio->end_io = mock_io_end_fn();
		bio->private_data = &io;
		io.bio = bio;
		rq_submit_bio(m->q, bio);
		mock_wait(&io);
		assert_int_equal(io.status, RQ_STS_OK);

		nr = mock_copy_events(m, MOCK_QUEUE_RQ, &ev);
		assert_true(nr >= 1);
		for (unsigned i = 0; i < nr; i++) {
			if (ev[i].bytes > kbs[k] * 1024u)
				fail_msg("max_sectors_kb %u: request of %u bytes", kbs[k], ev[i].bytes);
			assert_int_equal(ev[i].sector, next);
			next += ev[i].bytes >> RQ_SECTOR_SHIFT;
			total += ev[i].bytes;
		}
		assert_int_equal(total, 131072);
		if (kbs[k] == 512)
			assert_int_equal(nr, 1);
		else
			assert_int_equal(nr, 131072 / (kbs[k] * 1024));
		free(ev);
	}
	free(data);
	mock_destroy(m);
}

/* write_cache decides whether a FLUSH bio reaches the driver. */
static void test_write_cache_applies(void **state)
{
	struct mock_dev *m = dev(RQ_FEAT_WRITE_CACHE, 0);
	struct mock_io io;
	struct mock_event ev;

	assert_int_equal(rq_queue_attr_set(m->q, "write_cache", "write through"), 0);
	rq_submit_bio(m->q, mock_bio(&io, RQ_OP_FLUSH, 0, NULL, 0));
	mock_wait(&io);
	assert_int_equal(io.status, RQ_STS_OK);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 0);

	assert_int_equal(rq_queue_attr_set(m->q, "write_cache", "write back"), 0);
	rq_submit_bio(m->q, mock_bio(&io, RQ_OP_FLUSH, 0, NULL, 0));
	mock_wait(&io);
	assert_int_equal(io.status, RQ_STS_OK);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 1);
	assert_true(mock_find(m, MOCK_QUEUE_RQ, 0, &ev));
	assert_int_equal(ev.op, RQ_OP_FLUSH);
	mock_destroy(m);

	/*
	 * A device without a cache (as the kernel since 6.11): both writes are
	 * accepted, the queue stays "write through", and a FLUSH bio still
	 * never reaches the driver.
	 */
	m = dev(0, 0);
	assert_int_equal(rq_queue_attr_set(m->q, "write_cache", "write through"), 0);
	expect_attr(m->q, "write_cache", "write through\n");
	assert_int_equal(rq_queue_attr_set(m->q, "write_cache", "write back"), 0);
	expect_attr(m->q, "write_cache", "write through\n");
	rq_submit_bio(m->q, mock_bio(&io, RQ_OP_FLUSH, 0, NULL, 0));
	mock_wait(&io);
	assert_int_equal(io.status, RQ_STS_OK);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 0);
	mock_destroy(m);
}

/* Submit two contiguous 4 KiB writes in one plug; return the queue_rq calls they made. */
static unsigned plugged_pair(struct mock_dev *m, uint64_t sector)
{
	struct mock_io a, b;
	struct rq_plug plug;
	unsigned before = mock_count(m, MOCK_QUEUE_RQ);

	rq_start_plug(&plug);
	rq_submit_bio(m->q, mock_bio(&a, RQ_OP_WRITE, sector, buf4k, 4096));
	rq_submit_bio(m->q, mock_bio(&b, RQ_OP_WRITE, sector + 8, buf4k, 4096));
	rq_finish_plug(&plug);
	mock_wait(&a);
	mock_wait(&b);
	assert_int_equal(a.status, RQ_STS_OK);
	assert_int_equal(b.status, RQ_STS_OK);
	return mock_count(m, MOCK_QUEUE_RQ) - before;
}

/* nomerges 2 stops even plug merges; 0 allows them. */
static void test_nomerges_applies(void **state)
{
	struct mock_dev *m = dev(0, 0);

	assert_int_equal(plugged_pair(m, 0), 1);
	assert_int_equal(rq_queue_attr_set(m->q, "nomerges", "2"), 0);
	assert_int_equal(plugged_pair(m, 1000), 2);
	assert_int_equal(rq_queue_attr_set(m->q, "nomerges", "1"), 0);
	assert_int_equal(plugged_pair(m, 2000), 1); /* plug merges stay with 1 */
	assert_int_equal(rq_queue_attr_set(m->q, "nomerges", "0"), 0);
	assert_int_equal(plugged_pair(m, 3000), 1);
	mock_destroy(m);
}

/* Every line of @list is a name; @name is one of them. */
static bool list_has(const char *list, const char *name)
{
	size_t nl = strlen(name);

	for (const char *p = list; *p;) {
		const char *e = strchr(p, '\n');

		if (!e)
			return false;
		if ((size_t)(e - p) == nl && !strncmp(p, name, nl))
			return true;
		p = e + 1;
	}
	return false;
}

/* rq_queue_attr_list names every attribute, one per line; -ENOSPC when short. */
static void test_attr_list(void **state)
{
	static const char *const names[] = {
		"scheduler", "nr_requests", "nomerges", "max_sectors_kb", "max_hw_sectors_kb",
		"max_segments", "max_segment_size", "logical_block_size",
		"physical_block_size", "rotational", "rq_affinity", "io_timeout",
		"write_cache", "stat",
	};
	struct mock_dev *m = dev(0, 0);
	char buf[4096], small[8];
	int n;

	n = rq_queue_attr_list(m->q, buf, sizeof(buf));
	assert_true(n > 0);
	assert_int_equal((size_t)n, strlen(buf));
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!list_has(buf, names[i]))
			fail_msg("attribute list lacks \"%s\": %s", names[i], buf);
	assert_int_equal(rq_queue_attr_list(m->q, small, sizeof(small)), -ENOSPC);
	assert_int_equal(rq_queue_attr_list(m->q, buf, 1), -ENOSPC);
	mock_destroy(m);
}

/* rq_queue_attr_get needs room for the text and its NUL: exact fit works, one less is -ENOSPC. */
static void test_get_buffer_too_small(void **state)
{
	static const char *const names[] = { "scheduler", "io_timeout", "write_cache", "stat" };
	struct mock_dev *m = dev(0, 0);

	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char big[1024], fit[1024];
		int n = rq_queue_attr_get(m->q, names[i], big, sizeof(big));

		assert_true(n > 0);
		assert_int_equal(rq_queue_attr_get(m->q, names[i], fit, (size_t)n + 1), n);
		assert_string_equal(fit, big);
		assert_int_equal(rq_queue_attr_get(m->q, names[i], fit, (size_t)n), -ENOSPC);
		assert_int_equal(rq_queue_attr_get(m->q, names[i], fit, 1), -ENOSPC);
	}
	assert_int_equal(rq_queue_attr_set(m->q, "scheduler", TOY_NAME), 0);
	{
		char fit[4];

		/* "16\n" needs 4 bytes */
		assert_int_equal(rq_queue_attr_get(m->q, "iosched/quantum", fit, 4), 3);
		assert_int_equal(rq_queue_attr_get(m->q, "iosched/quantum", fit, 3), -ENOSPC);
	}
	mock_destroy(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_formats),
		cmocka_unit_test(test_round_trips),
		cmocka_unit_test(test_bad_values),
		cmocka_unit_test(test_read_only),
		cmocka_unit_test(test_unknown_names),
		cmocka_unit_test(test_iosched_without_scheduler),
		cmocka_unit_test(test_iosched_tunables),
		cmocka_unit_test(test_max_sectors_kb_applies),
		cmocka_unit_test(test_write_cache_applies),
		cmocka_unit_test(test_nomerges_applies),
		cmocka_unit_test(test_attr_list),
		cmocka_unit_test(test_get_buffer_too_small),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
