/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * diskstats and latency histograms (iostats on), exact on the virtual
 * clock: requests held by the mock driver while the clock moves by known
 * amounts give known ticks, io_ticks, in_flight and histogram buckets;
 * ios + merges equal the pieces submitted, per op; the "stat" attribute
 * is the kernel's 17 fields, "inflight" its two; a reset empties the
 * histograms; iostats off counts nothing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fixtures.h"
#include "mock_driver.h"

#define MS 1000000ull
#define T0 (1000 * MS)

static uint8_t buf[8][4096];

static struct mock_dev *make_dev(void)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_DEFER, .queue_depth = 64 };
	struct rq_queue_limits lim;
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .limits = &lim, .scheduler = "none" };

	rq_queue_limits_default(&lim);
	lim.max_discard_sectors = 1024;
	lim.features = RQ_FEAT_WRITE_CACHE;
	return mock_create(&cfg, &qc);
}

static struct rq_diskstats ds(struct mock_dev *m)
{
	struct rq_diskstats d;

	assert_int_equal(rq_queue_get_diskstats(m->q, &d, sizeof(d)), 0);
	assert_int_equal(d.size, sizeof(d));
	return d;
}

/* Complete everything held once @n requests are held, at virtual time @t. */
static void complete_at(struct mock_dev *m, unsigned n, uint64_t t)
{
	assert_true(mock_wait_held(m, n, 10000));
	fx_vclock_set(t);
	assert_int_equal(mock_complete_all(m, RQ_STS_OK), n);
}

static uint64_t hist_total(const uint64_t *b)
{
	uint64_t s = 0;

	for (unsigned i = 0; i < RQ_LAT_BUCKETS; i++)
		s += b[i];
	return s;
}

/* Bucket b holds [2^(b-1), 2^b) ns. */
static unsigned bucket_of(uint64_t ns)
{
	unsigned b = 0;

	while (b < RQ_LAT_BUCKETS - 1 && (1ull << b) <= ns)
		b++;
	return b;
}

/*
 * A read held 5 ms, two plugged writes that merge held 3 ms, a discard
 * held 2 ms, an empty flush held 1 ms: every field as the kernel defines
 * it, and the histograms hold each request in the bucket of its time.
 */
static void test_fields_exact(void **state)
{
	struct mock_dev *m;
	struct rq_diskstats d;
	struct rq_latency_hist h;
	struct rq_queue_stats st;
	struct fx_rec rec[4];
	struct rq_plug plug;
	char val[512];

	(void)state;
	fx_vclock_set(T0);
	m = make_dev();
	assert_int_equal(rq_queue_attr_get(m->q, "iostats", val, sizeof(val)), 2);
	assert_string_equal(val, "0\n");
	assert_int_equal(rq_queue_attr_set(m->q, "iostats", "1"), 0);
	assert_int_equal(rq_queue_attr_set(m->q, "iostats", "2"), -EINVAL);

	/* a read, 5 ms */
	rq_submit_bio(m->q, fx_bio(&rec[0], RQ_OP_READ, 0, buf[0], 4096));
	assert_true(mock_wait_held(m, 1, 10000));
	d = ds(m);
	assert_int_equal(d.in_flight, 1);
	assert_int_equal(d.in_flight_read, 1);
	rq_queue_attr_get(m->q, "inflight", val, sizeof(val));
	assert_string_equal(val, "       1        0\n");
	complete_at(m, 1, T0 + 5 * MS);
	assert_true(fx_wait(rec, 1, 10000));
	fx_put(rec, 1);
	d = ds(m);
	assert_int_equal(d.read_ios, 1);
	assert_int_equal(d.read_sectors, 8);
	assert_int_equal(d.read_ticks_ms, 5);
	assert_int_equal(d.io_ticks_ms, 5);
	assert_int_equal(d.in_flight, 0);

	/* two writes that merge on a plug, 3 ms */
	rq_start_plug(&plug);
	rq_submit_bio(m->q, fx_bio(&rec[0], RQ_OP_WRITE, 100, buf[1], 4096));
	rq_submit_bio(m->q, fx_bio(&rec[1], RQ_OP_WRITE, 108, buf[2], 4096));
	rq_finish_plug(&plug);
	complete_at(m, 1, T0 + 8 * MS);
	assert_true(fx_wait(rec, 2, 10000));
	fx_put(rec, 2);

	/* a discard of 8 sectors, 2 ms */
	rq_submit_bio(m->q, fx_bio(&rec[0], RQ_OP_DISCARD, 500, NULL, 4096));
	complete_at(m, 1, T0 + 10 * MS);
	assert_true(fx_wait(rec, 1, 10000));
	fx_put(rec, 1);

	/* an empty flush: the device gets one flush request, 1 ms */
	rq_submit_bio(m->q, fx_bio(&rec[0], RQ_OP_FLUSH, 0, NULL, 0));
	complete_at(m, 1, T0 + 11 * MS);
	assert_true(fx_wait(rec, 1, 10000));
	fx_put(rec, 1);

	d = ds(m);
	rq_queue_get_stats(m->q, &st, sizeof(st));
	assert_int_equal(d.write_ios, 1);
	assert_int_equal(d.write_merges, 1);
	assert_int_equal(d.write_sectors, 16);
	assert_int_equal(d.write_ticks_ms, 3);
	assert_int_equal(d.discard_ios, 1);
	assert_int_equal(d.discard_sectors, 8);
	assert_int_equal(d.discard_ticks_ms, 2);
	assert_int_equal(d.flush_ios, 1);
	assert_int_equal(d.flush_ticks_ms, 1);
	assert_int_equal(d.time_in_queue_ms, 5 + 3 + 2 + 1);
	assert_int_equal(d.io_ticks_ms, 11);
	assert_int_equal(d.in_flight, 0);
	/* every piece is a completed request or a merge (the flush bio aside) */
	assert_int_equal(d.read_ios + d.read_merges + d.write_ios + d.write_merges +
				 d.discard_ios + d.discard_merges + 1,
			 st.bios);
	assert_int_equal(d.read_merges + d.write_merges + d.discard_merges,
			 st.merges_back + st.merges_front + st.merges_rq);

	/* the kernel's /sys/block/X/stat line */
	assert_true(rq_queue_attr_get(m->q, "stat", val, sizeof(val)) > 0);
	{
		unsigned long long f[17];
		const unsigned long long want[17] = {
			1, 0, 8, 5, 1, 1, 16, 3, 0, 11, 11, 1, 0, 8, 2, 1, 1,
		};

		assert_int_equal(sscanf(val, "%llu %llu %llu %llu %llu %llu %llu %llu %llu %llu "
					     "%llu %llu %llu %llu %llu %llu %llu",
					&f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7],
					&f[8], &f[9], &f[10], &f[11], &f[12], &f[13], &f[14],
					&f[15], &f[16]),
				 17);
		for (unsigned i = 0; i < 17; i++)
			assert_int_equal(f[i], want[i]);
		assert_int_equal(strlen(val), 17 * 9);
	}

	/* histograms: totals are the completions, each in its bucket */
	assert_int_equal(rq_queue_get_latency_hist(m->q, &h, sizeof(h)), 0);
	assert_int_equal(h.nr_buckets, RQ_LAT_BUCKETS);
	assert_int_equal(hist_total(h.q2c[RQ_LAT_READ]), d.read_ios);
	assert_int_equal(hist_total(h.q2c[RQ_LAT_WRITE]), d.write_ios);
	assert_int_equal(hist_total(h.q2c[RQ_LAT_DISCARD]), d.discard_ios);
	assert_int_equal(hist_total(h.q2c[RQ_LAT_FLUSH]), d.flush_ios);
	assert_int_equal(h.q2c[RQ_LAT_READ][bucket_of(5 * MS)], 1);
	assert_int_equal(h.d2c[RQ_LAT_READ][bucket_of(5 * MS)], 1);
	assert_int_equal(h.q2c[RQ_LAT_WRITE][bucket_of(3 * MS)], 1);
	assert_int_equal(h.q2c[RQ_LAT_DISCARD][bucket_of(2 * MS)], 1);
	assert_int_equal(h.q2c[RQ_LAT_FLUSH][bucket_of(1 * MS)], 1);
	rq_queue_attr_get(m->q, "latency_hist", val, sizeof(val));
	{
		char line[64];

		snprintf(line, sizeof(line), "read q2c %llu:1\n", 1ull << bucket_of(5 * MS));
		assert_non_null(strstr(val, line));
	}

	/* reset: empty; what comes after counts */
	assert_int_equal(rq_queue_attr_set(m->q, "latency_hist", "1"), -EINVAL);
	assert_int_equal(rq_queue_attr_set(m->q, "latency_hist", "0"), 0);
	rq_queue_get_latency_hist(m->q, &h, sizeof(h));
	for (unsigned o = 0; o < RQ_LAT_NR_OPS; o++)
		assert_int_equal(hist_total(h.q2c[o]) + hist_total(h.d2c[o]), 0);
	rq_submit_bio(m->q, fx_bio(&rec[0], RQ_OP_READ, 0, buf[0], 4096));
	complete_at(m, 1, T0 + 12 * MS);
	assert_true(fx_wait(rec, 1, 10000));
	fx_put(rec, 1);
	rq_queue_get_latency_hist(m->q, &h, sizeof(h));
	assert_int_equal(hist_total(h.q2c[RQ_LAT_READ]), 1);
	assert_int_equal(h.q2c[RQ_LAT_READ][bucket_of(1 * MS)], 1);

	/* iostats off: nothing more is counted */
	assert_int_equal(rq_queue_attr_set(m->q, "iostats", "0"), 0);
	d = ds(m);
	rq_submit_bio(m->q, fx_bio(&rec[0], RQ_OP_READ, 0, buf[0], 4096));
	complete_at(m, 1, T0 + 20 * MS);
	assert_true(fx_wait(rec, 1, 10000));
	fx_put(rec, 1);
	{
		struct rq_diskstats e = ds(m);

		assert_int_equal(e.read_ios, d.read_ios);
		assert_int_equal(e.io_ticks_ms, d.io_ticks_ms);
	}
	mock_destroy(m);
}

/*
 * io_ticks counts time with requests in flight once, however many there
 * are: two reads in flight together over 4 ms, then 6 idle ms, then one
 * read of 2 ms: 6 ms busy, while time_in_queue adds each request's time.
 */
static void test_io_ticks_overlap(void **state)
{
	struct mock_dev *m;
	struct rq_diskstats d;
	struct fx_rec rec[2];
	uint64_t t = fx_vclock_now() + 100 * MS;

	(void)state;
	fx_vclock_set(t);
	m = make_dev();
	assert_int_equal(rq_queue_attr_set(m->q, "iostats", "1"), 0);
	rq_submit_bio(m->q, fx_bio(&rec[0], RQ_OP_READ, 0, buf[0], 4096));
	rq_submit_bio(m->q, fx_bio(&rec[1], RQ_OP_READ, 64, buf[1], 4096));
	complete_at(m, 2, t + 4 * MS);
	assert_true(fx_wait(rec, 2, 10000));
	fx_put(rec, 2);
	fx_vclock_set(t + 10 * MS);
	rq_submit_bio(m->q, fx_bio(&rec[0], RQ_OP_READ, 0, buf[0], 4096));
	complete_at(m, 1, t + 12 * MS);
	assert_true(fx_wait(rec, 1, 10000));
	fx_put(rec, 1);
	d = ds(m);
	assert_int_equal(d.read_ios, 3);
	assert_int_equal(d.read_ticks_ms, 4 + 4 + 2);
	assert_int_equal(d.io_ticks_ms, 4 + 2);
	mock_destroy(m);
}

/* Sizes: a short struct gets its first bytes; NULL and tiny sizes are -EINVAL. */
static void test_sized_api(void **state)
{
	struct mock_dev *m = make_dev();
	struct rq_diskstats d;
	struct rq_latency_hist h;
	uint32_t small[2] = { 0, 0xdeadbeef };

	(void)state;
	assert_int_equal(rq_queue_get_diskstats(m->q, &d, 2), -EINVAL);
	assert_int_equal(rq_queue_get_diskstats(m->q, NULL, sizeof(d)), -EINVAL);
	assert_int_equal(rq_queue_get_latency_hist(m->q, &h, 0), -EINVAL);
	assert_int_equal(rq_queue_get_diskstats(m->q, (struct rq_diskstats *)small, 4), 0);
	assert_int_equal(small[0], 4);
	assert_int_equal(small[1], 0xdeadbeef);
	mock_destroy(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fields_exact),
		cmocka_unit_test(test_io_ticks_overlap),
		cmocka_unit_test(test_sized_api),
	};

	fx_vclock_install(T0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
