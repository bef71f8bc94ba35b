/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kyber behaviour: domains served round robin by batch sizes, token depths
 * bounding what the driver holds, latency feedback on a virtual clock
 * (late reads cut the write depth, healthy windows restore it), tunables,
 * and the 75% limit for async requests.
 *
 * Nothing here depends on wall-clock time: the library clock is a variable
 * the test advances, and the mock driver keeps every request (DEFER) until
 * the test completes it.  There is no service thread (rq_service_manual()
 * in main): submissions and completions run the hw queue inline on the
 * test's thread, so what the driver holds is settled when rq_submit_bio or
 * mock_complete_one returns, and the exact counts below cannot be shifted
 * by a background run.  The service work (the core's safety-net re-run
 * when kyber holds requests back, the run kyber asks for when a window
 * raises a depth) is done on this thread too, by advance(), at the virtual
 * moment it falls due.
 */
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

#include "fixtures.h"
#include "mock_driver.h"

#define MS (1000ull * 1000)
#define US 1000ull

/* Rules of doc/sched-kyber.md this test relies on. */
#define WINDOW_NS (100 * MS)
#define READ_DEPTH 256u
#define WRITE_DEPTH 128u
#define DISCARD_DEPTH 64u
#define OTHER_DEPTH 16u

/* ------------------------------------------------------------ helpers */

static _Atomic uint64_t vclock = 1000 * MS;

static uint64_t vclock_read(void *arg)
{
	return atomic_load(&vclock);
}


/* Move the virtual clock on, then do the service work due by then. */
static void advance(uint64_t ns)
{
	atomic_fetch_add(&vclock, ns);
	fx_service_due();
}

static uint8_t buf[4096];

/* A mock over one hw queue with 256 driver tags (256 scheduler tags), DEFER. */
static struct mock_dev *make_dev(unsigned queue_depth)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_DEFER, .queue_depth = queue_depth,
				   .nr_hw_queues = 1 };
	struct rq_queue_limits lim;
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .limits = &lim, .scheduler = "kyber" };

	rq_queue_limits_default(&lim);
	lim.max_discard_sectors = 128;
	lim.max_write_zeroes_sectors = 128;
	return mock_create(&cfg, &qc);
}

static uint64_t attr_u64(struct rq_queue *q, const char *name)
{
	char b[64];

	assert_true(rq_queue_attr_get(q, name, b, sizeof(b)) > 0);
	return strtoull(b, NULL, 10);
}

/* Submit one 4 KiB bio of @op at slot @i (slots 64 sectors apart: no merges). */
static void submit(struct mock_dev *m, struct fx_rec *rec, unsigned op, unsigned i, uint32_t opf)
{
	bool data = op == RQ_OP_READ || op == RQ_OP_WRITE;
	struct rq_bio *bio = fx_bio(rec, op, (uint64_t)i * 64, data ? buf : NULL, 4096);

	bio->opf |= opf;
	rq_submit_bio(m->q, bio);
}

/* Complete every held request of @op (all ops if @op < 0). */
static unsigned complete_op(struct mock_dev *m, int op)
{
	unsigned n = 0;

	for (unsigned i = mock_nr_held(m); i-- > 0;) {
		struct rq_request *rq = mock_held(m, i);

		if (op < 0 || rq->op == op) {
			mock_complete_one(m, i, RQ_STS_OK);
			n++;
		}
	}
	return n;
}

/* Complete until the driver holds nothing (completions dispatch more). */
static void drain(struct mock_dev *m)
{
	while (mock_nr_held(m))
		complete_op(m, -1);
}

static unsigned held_of(struct mock_dev *m, unsigned op)
{
	unsigned n = 0;

	for (unsigned i = 0; i < mock_nr_held(m); i++)
		n += mock_held(m, i)->op == op;
	return n;
}

static void expect_all_ok(struct fx_rec *rec, unsigned n)
{
	assert_true(fx_wait(rec, n, 10000));
	for (unsigned i = 0; i < n; i++) {
		assert_int_equal(fx_done(&rec[i]), 1);
		assert_int_equal(rec[i].status, RQ_STS_OK);
	}
	fx_put(rec, n);
}

/* -------------------------------------------------------------- tests */

/* The driver's queue_rq calls so far as runs of one op: "R16 W5 R8". */
static void dispatch_runs(struct mock_dev *m, char *seq)
{
	struct mock_event *evs;
	char *p = seq;
	unsigned n = mock_copy_events(m, MOCK_QUEUE_RQ, &evs);

	*p = 0;
	for (unsigned i = 0; i < n;) {
		unsigned j = i;

		while (j < n && evs[j].op == evs[i].op)
			j++;
		p += sprintf(p, "%s%c%u", p == seq ? "" : " ", "RWFDO"[evs[i].op], j - i);
		i = j;
	}
	free(evs);
}

/*
 * With a quiesced queue full of reads, writes, discards and write-zeroes,
 * dispatch serves 16 reads, 8 writes, 1 discard, 1 other, round robin,
 * passing over empty domains.
 */
static void test_batches_round_robin(void **state)
{
	struct mock_dev *m = make_dev(256);
	static struct fx_rec rec[86];
	char seq[256];
	unsigned k = 0;

	rq_queue_quiesce(m->q);
	for (; k < 40; k++)
		submit(m, &rec[k], RQ_OP_READ, k, 0);
	for (; k < 80; k++)
		submit(m, &rec[k], RQ_OP_WRITE, k, RQ_BIO_SYNC);
	for (; k < 83; k++)
		submit(m, &rec[k], RQ_OP_DISCARD, k, 0);
	for (; k < 86; k++)
		submit(m, &rec[k], RQ_OP_WRITE_ZEROES, k, 0);
	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), 0);
	rq_queue_unquiesce(m->q);
	assert_true(mock_wait_held(m, k, 10000));

	assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), k);
	dispatch_runs(m, seq);
	print_message("dispatch order: %s\n", seq);
	/* the last writes come in back-to-back batches of 8 once the rest is gone */
	assert_string_equal(seq, "R16 W8 D1 O1 R16 W8 D1 O1 R8 W8 D1 O1 W16");
	drain(m);
	expect_all_ok(rec, k);
	mock_destroy(m);
}

/*
 * A batch partly used when the queue ran empty carries over to the next
 * burst, as the kernel's khd->batching does (its core does not call
 * dispatch_request while has_work says nothing is queued): 4 reads, then
 * a burst of 20 reads and 5 writes serves 12 more reads (16 in the
 * batch), the writes, then the other 8 reads.  Dropping the batch would
 * serve 16 reads of the burst first.
 */
static void test_batch_carries_over(void **state)
{
	struct mock_dev *m = make_dev(256);
	static struct fx_rec rec[29];
	char seq[128];
	unsigned k = 0;

	for (; k < 4; k++)
		submit(m, &rec[k], RQ_OP_READ, k, 0);
	assert_true(mock_wait_held(m, 4, 10000));
	rq_queue_quiesce(m->q);
	for (; k < 24; k++)
		submit(m, &rec[k], RQ_OP_READ, k, 0);
	for (; k < 29; k++)
		submit(m, &rec[k], RQ_OP_WRITE, k, RQ_BIO_SYNC);
	rq_queue_unquiesce(m->q);
	assert_true(mock_wait_held(m, k, 10000));
	dispatch_runs(m, seq);
	print_message("dispatch order: %s\n", seq);
	assert_string_equal(seq, "R16 W5 R8");
	drain(m);
	expect_all_ok(rec, k);
	mock_destroy(m);
}

/*
 * Reads alone go out batch after batch, and the batch count goes on as if
 * one request at a time had been dispatched: after a burst of 37 reads
 * (batches of 16, 16 and 5) a burst of 20 reads and 5 writes serves 11
 * more reads (the third batch full), the writes, then the other 9 reads.
 * A batch count left at the first batch's end (16) would serve the writes
 * first ("R37 W5 R20"); one reset to 0 would serve 16 reads ("R53 W5 R4").
 */
static void test_batch_count_alone(void **state)
{
	struct mock_dev *m = make_dev(256);
	static struct fx_rec rec[62];
	char seq[128];
	unsigned k = 0;

	rq_queue_quiesce(m->q);
	for (; k < 37; k++)
		submit(m, &rec[k], RQ_OP_READ, k, 0);
	rq_queue_unquiesce(m->q);
	assert_true(mock_wait_held(m, k, 10000));
	rq_queue_quiesce(m->q);
	for (; k < 57; k++)
		submit(m, &rec[k], RQ_OP_READ, k, 0);
	for (; k < 62; k++)
		submit(m, &rec[k], RQ_OP_WRITE, k, RQ_BIO_SYNC);
	rq_queue_unquiesce(m->q);
	assert_true(mock_wait_held(m, k, 10000));
	dispatch_runs(m, seq);
	print_message("dispatch order: %s\n", seq);
	assert_string_equal(seq, "R48 W5 R9");
	drain(m);
	expect_all_ok(rec, k);
	mock_destroy(m);
}

/*
 * Each domain's token depth bounds what the driver holds of it; a
 * completion returns a token and lets exactly one more through.
 */
static void test_token_depth(void **state)
{
	struct mock_dev *m = make_dev(256);
	static struct fx_rec rec[150];
	static const struct {
		unsigned op, n, depth;
	} cases[] = {
		{ RQ_OP_WRITE, 150, WRITE_DEPTH },
		{ RQ_OP_DISCARD, 80, DISCARD_DEPTH },
		{ RQ_OP_WRITE_ZEROES, 30, OTHER_DEPTH },
	};

	for (unsigned c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		unsigned calls;

		mock_reset_events(m);
		for (unsigned i = 0; i < cases[c].n; i++)
			submit(m, &rec[i], cases[c].op, i, RQ_BIO_SYNC);
		assert_int_equal(mock_nr_held(m), cases[c].depth);
		calls = mock_count(m, MOCK_QUEUE_RQ);
		assert_int_equal(calls, cases[c].depth);
		/*
		 * One back, one more in: with no service thread the returned
		 * token re-runs the hw queue on this (the completing) thread,
		 * so the one more is with the driver when the completion returns.
		 */
		mock_complete_one(m, 0, RQ_STS_OK);
		assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), calls + 1);
		assert_int_equal(mock_nr_held(m), cases[c].depth);
		drain(m);
		assert_int_equal(mock_count(m, MOCK_QUEUE_RQ), cases[c].n);
		expect_all_ok(rec, cases[c].n);
	}
	/* reads: 256 tokens, more than the scheduler tags here: never the limit */
	for (unsigned i = 0; i < 150; i++)
		submit(m, &rec[i], RQ_OP_READ, i, 0);
	assert_int_equal(mock_nr_held(m), 150);
	drain(m);
	expect_all_ok(rec, 150);
	mock_destroy(m);
}

/* One round: @nr reads and @nr writes; writes end after @write_ns, reads after @read_ns. */
static void round_rw(struct mock_dev *m, struct fx_rec *rec, unsigned nr, uint64_t write_ns,
		     uint64_t read_ns)
{
	for (unsigned i = 0; i < nr; i++) {
		submit(m, &rec[i], RQ_OP_READ, i, 0);
		submit(m, &rec[nr + i], RQ_OP_WRITE, 1000 + i, RQ_BIO_SYNC);
	}
	assert_int_equal(mock_nr_held(m), 2 * nr);
	advance(write_ns);
	assert_int_equal(complete_op(m, RQ_OP_WRITE), nr);
	advance(read_ns - write_ns);
	assert_int_equal(complete_op(m, RQ_OP_READ), nr);
	expect_all_ok(rec, 2 * nr);
}

/* The driver's view: submit @n sync writes, count what reaches it, drain. */
static unsigned writes_let_through(struct mock_dev *m, unsigned n)
{
	static struct fx_rec rec[200];
	unsigned held;

	for (unsigned i = 0; i < n; i++)
		submit(m, &rec[i], RQ_OP_WRITE, 2000 + i, RQ_BIO_SYNC);
	held = held_of(m, RQ_OP_WRITE);
	drain(m);
	expect_all_ok(rec, n);
	return held;
}

/*
 * Reads completing at 12x their 2 ms target for two windows halve the
 * write depth twice (and the discard depth; the read depth shrinks with
 * its own device latency); fast reads for the windows after restore every
 * depth to its default, a quarter of it per window.
 */
static void test_latency_feedback(void **state)
{
	struct mock_dev *m = make_dev(256);
	static struct fx_rec rec[64];
	unsigned rounds;

	assert_int_equal(attr_u64(m->q, "iosched/write_depth"), WRITE_DEPTH);
	assert_int_equal(attr_u64(m->q, "iosched/read_depth"), READ_DEPTH);
	assert_int_equal(writes_let_through(m, 150), WRITE_DEPTH);

	/*
	 * The first window ends 100 ms after the queue was made.  Start 24.5 ms
	 * in, so that it closes at a (fast) write completion of round 3, after
	 * the reads of rounds 0-2; the second window (reads of rounds 3-6)
	 * closes with one more write at +200.5 ms.  No late read is left over
	 * for the third window.
	 */
	advance(24500 * US);
	for (unsigned r = 0; r < 7; r++)
		round_rw(m, rec, 16, 1 * MS, 25 * MS);
	advance(1 * MS);
	assert_int_equal(writes_let_through(m, 1), 1);
	print_message("after late reads: read %llu write %llu discard %llu other %llu\n",
		      (unsigned long long)attr_u64(m->q, "iosched/read_depth"),
		      (unsigned long long)attr_u64(m->q, "iosched/write_depth"),
		      (unsigned long long)attr_u64(m->q, "iosched/discard_depth"),
		      (unsigned long long)attr_u64(m->q, "iosched/other_depth"));
	assert_int_equal(attr_u64(m->q, "iosched/write_depth"), WRITE_DEPTH / 4);
	assert_int_equal(attr_u64(m->q, "iosched/discard_depth"), DISCARD_DEPTH / 4);
	assert_int_equal(attr_u64(m->q, "iosched/read_depth"), READ_DEPTH / 4);
	assert_int_equal(attr_u64(m->q, "iosched/other_depth"), OTHER_DEPTH);
	/* the driver sees the cut */
	assert_int_equal(writes_let_through(m, 150), WRITE_DEPTH / 4);

	/* reads back at 100 us: +1/4 of the default per window */
	for (rounds = 0; rounds < 40; rounds++) {
		if (attr_u64(m->q, "iosched/write_depth") == WRITE_DEPTH &&
		    attr_u64(m->q, "iosched/read_depth") == READ_DEPTH &&
		    attr_u64(m->q, "iosched/discard_depth") == DISCARD_DEPTH)
			break;
		round_rw(m, rec, 16, 50 * US, 100 * US);
		advance(25 * MS);
	}
	print_message("restored after %u rounds of 25 ms\n", rounds);
	assert_true(rounds < 40);
	/* 32 -> 64 -> 96 -> 128: three window closes, 4 rounds apart */
	assert_int_equal(rounds, 13);
	assert_int_equal(writes_let_through(m, 150), WRITE_DEPTH);
	mock_destroy(m);
}

/* Writes late against their own 10 ms target shrink their own depth. */
static void test_write_own_latency(void **state)
{
	struct mock_dev *m = make_dev(256);
	static struct fx_rec rec[32];

	/* writes at 20 ms (bucket 7 of their target: x 1/2), reads at 100 us */
	for (unsigned r = 0; r < 5; r++) {
		for (unsigned i = 0; i < 16; i++)
			submit(m, &rec[i], RQ_OP_WRITE, i, RQ_BIO_SYNC);
		advance(20 * MS);
		assert_int_equal(complete_op(m, RQ_OP_WRITE), 16);
		expect_all_ok(rec, 16);
		for (unsigned i = 0; i < 16; i++)
			submit(m, &rec[i], RQ_OP_READ, i, 0);
		advance(100 * US);
		assert_int_equal(complete_op(m, RQ_OP_READ), 16);
		expect_all_ok(rec, 16);
	}
	assert_int_equal(attr_u64(m->q, "iosched/write_depth"), WRITE_DEPTH / 2);
	assert_int_equal(attr_u64(m->q, "iosched/read_depth"), READ_DEPTH);
	/* writes missing their target cut discards too */
	assert_int_equal(attr_u64(m->q, "iosched/discard_depth"), DISCARD_DEPTH / 2);
	mock_destroy(m);
}

/* Submit @n reads and complete them @ns later. */
static void reads_after(struct mock_dev *m, unsigned n, uint64_t ns)
{
	static struct fx_rec rec[16];

	for (unsigned i = 0; i < n; i++)
		submit(m, &rec[i], RQ_OP_READ, i, 0);
	advance(ns);
	assert_int_equal(complete_op(m, RQ_OP_READ), n);
	expect_all_ok(rec, n);
}

/*
 * Fast completions (both latencies under a quarter of the target) count
 * in both histograms: 10 reads at 2.5 ms among 1009 at 100 us are under 1%,
 * so p99 and p90 stay in bucket 0 and no depth moves.  Were the fast ones
 * missing from the total (or the device) latencies, the late ten alone
 * would cut the write (or the read) depth.  A window of late reads alone
 * then shows that windows do close here.
 */
static void test_fast_samples_count(void **state)
{
	struct mock_dev *m = make_dev(256);

	/* the queue's first window closes 100 ms from now */
	for (unsigned i = 0; i < 10; i++)
		reads_after(m, 1, 25 * MS / 10); /* each 2.5 ms: above the target */
	for (unsigned r = 0; r < 63; r++)
		reads_after(m, 16, 100 * US);
	advance(75 * MS);
	reads_after(m, 1, 100 * US); /* past the window's end: it closes */
	assert_int_equal(attr_u64(m->q, "iosched/read_depth"), READ_DEPTH);
	assert_int_equal(attr_u64(m->q, "iosched/write_depth"), WRITE_DEPTH);
	assert_int_equal(attr_u64(m->q, "iosched/discard_depth"), DISCARD_DEPTH);

	for (unsigned i = 0; i < 8; i++)
		reads_after(m, 1, 25 * MS); /* late reads only: the next window cuts */
	advance(WINDOW_NS);
	reads_after(m, 1, 25 * MS);
	assert_int_equal(attr_u64(m->q, "iosched/write_depth"), WRITE_DEPTH / 2);
	mock_destroy(m);
}

/*
 * A latency target stored while the queue runs applies to the next
 * completions (each hw queue's copy of it follows the store): reads at
 * 3 ms under a 40 ms target are fast (bucket 0, no depth moves); back at
 * 2 ms the same reads are late (bucket 6 of 0.5 ms quarters): writes
 * halved, reads x 4/7.  A copy left at the 2 ms quarter would cut the
 * depths in the first window already; one left at 10 ms, not in the second.
 */
static void test_target_store_applies(void **state)
{
	struct mock_dev *m = make_dev(256);

	assert_int_equal(rq_queue_attr_set(m->q, "iosched/read_lat_nsec", "40000000"), 0);
	for (unsigned i = 0; i < 8; i++)
		reads_after(m, 1, 3 * MS);
	advance(WINDOW_NS);
	reads_after(m, 1, 3 * MS); /* closes the first window */
	assert_int_equal(attr_u64(m->q, "iosched/read_depth"), READ_DEPTH);
	assert_int_equal(attr_u64(m->q, "iosched/write_depth"), WRITE_DEPTH);

	assert_int_equal(rq_queue_attr_set(m->q, "iosched/read_lat_nsec", "2000000"), 0);
	for (unsigned i = 0; i < 8; i++)
		reads_after(m, 1, 3 * MS);
	advance(WINDOW_NS);
	reads_after(m, 1, 3 * MS); /* closes the second */
	assert_int_equal(attr_u64(m->q, "iosched/write_depth"), WRITE_DEPTH / 2);
	assert_int_equal(attr_u64(m->q, "iosched/read_depth"), READ_DEPTH * 4 / 7);
	mock_destroy(m);
}

/*
 * A bio merges with the queued request of its own op on its CPU's list,
 * in every domain that merges (write-zeroes never do), each queued while
 * the domains after it hold nothing: discards, writes, then reads, two
 * contiguous 4 KiB bios each, reach the driver as one 8 KiB request each.
 * bio_merge's one-word answer ("nothing queued in the domain") must look
 * at the bio's own domain: a look at another domain's marks turns some of
 * the second bios away unmerged.
 */
static void test_merge_each_domain(void **state)
{
	static const unsigned ops[] = { RQ_OP_DISCARD, RQ_OP_WRITE, RQ_OP_READ };
	struct mock_dev *m = make_dev(256);
	static struct fx_rec rec[6];

	rq_queue_quiesce(m->q);
	for (unsigned k = 0; k < 3; k++) {
		bool data = ops[k] == RQ_OP_READ || ops[k] == RQ_OP_WRITE;

		for (unsigned j = 0; j < 2; j++)
			rq_submit_bio(m->q, fx_bio(&rec[2 * k + j], ops[k], k * 1024ull + j * 8,
						   data ? buf : NULL, 4096));
	}
	rq_queue_unquiesce(m->q);
	assert_true(mock_wait_held(m, 3, 10000));
	assert_int_equal(mock_nr_held(m), 3);
	for (unsigned i = 0; i < 3; i++)
		assert_int_equal(mock_held(m, i)->bytes, 8192);
	drain(m);
	expect_all_ok(rec, 6);
	mock_destroy(m);
}

/* The latency targets round-trip; bad values are refused, changing nothing. */
static void test_tunables(void **state)
{
	struct mock_dev *m = make_dev(64);
	static const char *const bad[] = {
		"", "0", "-5", "abc", "12x", " 5", "5 ", "1\n\n", "99999999999999999999999",
	};
	char b[64];

	assert_true(rq_queue_attr_get(m->q, "iosched/read_lat_nsec", b, sizeof(b)) > 0);
	assert_string_equal(b, "2000000\n");
	assert_true(rq_queue_attr_get(m->q, "iosched/write_lat_nsec", b, sizeof(b)) > 0);
	assert_string_equal(b, "10000000\n");
	assert_int_equal(rq_queue_attr_set(m->q, "iosched/read_lat_nsec", "3000000"), 0);
	assert_int_equal(attr_u64(m->q, "iosched/read_lat_nsec"), 3000000);
	assert_int_equal(rq_queue_attr_set(m->q, "iosched/write_lat_nsec", "25000000\n"), 0);
	assert_int_equal(attr_u64(m->q, "iosched/write_lat_nsec"), 25000000);
	assert_int_equal(rq_queue_attr_set(m->q, "iosched/read_lat_nsec", "18446744073709551615"),
			 0);
	assert_int_equal(rq_queue_attr_set(m->q, "iosched/read_lat_nsec", "1"), 0);
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(rq_queue_attr_set(m->q, "iosched/read_lat_nsec", bad[i]),
				 -EINVAL);
		assert_int_equal(rq_queue_attr_set(m->q, "iosched/write_lat_nsec", bad[i]),
				 -EINVAL);
	}
	assert_int_equal(attr_u64(m->q, "iosched/read_lat_nsec"), 1);
	assert_int_equal(attr_u64(m->q, "iosched/write_lat_nsec"), 25000000);
	/* the depths are read-only */
	assert_int_equal(rq_queue_attr_set(m->q, "iosched/write_depth", "5"), -EINVAL);
	assert_int_equal(attr_u64(m->q, "iosched/write_depth"), WRITE_DEPTH);
	assert_int_equal(attr_u64(m->q, "iosched/other_depth"), OTHER_DEPTH);
	mock_destroy(m);
}

/*
 * Async writes get at most 75% of the scheduler tags; sync reads can still
 * use the rest.  NOWAIT bios end with AGAIN instead of sleeping for a tag.
 */
static void check_async_limit(unsigned queue_depth, const char *nr_requests)
{
	struct mock_dev *m = make_dev(queue_depth);
	static struct fx_rec w[256], r[64];
	unsigned nr_tags, again = 0, ok_reads = 0;
	unsigned async_max, nr_reads;

	/* a new nr_requests (depth_updated) moves the limit with it */
	if (nr_requests)
		assert_int_equal(rq_queue_attr_set(m->q, "nr_requests", nr_requests), 0);
	nr_tags = rq_queue_nr_requests(m->q);
	async_max = nr_tags * 3 / 4;
	nr_reads = nr_tags - async_max;
	assert_true(nr_tags <= 256 && nr_reads <= 64);
	rq_queue_quiesce(m->q);
	for (unsigned i = 0; i < nr_tags; i++)
		submit(m, &w[i], RQ_OP_WRITE, i, RQ_BIO_NOWAIT);
	for (unsigned i = 0; i < nr_tags; i++)
		again += fx_done(&w[i]) == 1 && w[i].status == RQ_STS_AGAIN;
	for (unsigned i = 0; i < nr_reads; i++)
		submit(m, &r[i], RQ_OP_READ, 1000 + i, RQ_BIO_NOWAIT);
	for (unsigned i = 0; i < nr_reads; i++)
		ok_reads += fx_done(&r[i]) == 0;
	print_message("%u scheduler tags: %u async writes refused, %u/%u reads queued\n", nr_tags,
		      again, ok_reads, nr_reads);
	rq_queue_unquiesce(m->q);
	drain(m);
	assert_true(fx_wait(w, nr_tags, 10000));
	assert_true(fx_wait(r, nr_reads, 10000));
	fx_put(w, nr_tags);
	fx_put(r, nr_reads);
	mock_destroy(m);
	assert_int_equal(again, nr_tags - async_max);
	assert_int_equal(ok_reads, nr_reads);
}

static void test_async_limit(void **state)
{
	check_async_limit(32, NULL); /* 64 scheduler tags: one bitmap word */
	check_async_limit(32, "40"); /* 40 of them: 30 for async */
}

/* Several bitmap words: the limit is each word's share (the bitmap limits
 * per word), and still adds up to 75 % of the tags. */
static void test_async_limit_deep(void **state)
{
	check_async_limit(128, NULL); /* 256 scheduler tags: four words */
}

/* ------------------------------------------- driver completion batches */

/*
 * A driver of its own that keeps every request it is given and ends them
 * only when the test says, all at once, with rq_mq_end_requests(): the
 * completion-batch path (mq_end_list), where the scheduler hooks run for
 * a list of requests with one clock reading, not one by one.
 */
static struct rq_request *bheld[256];
static unsigned nr_bheld;

static rq_status_t bdev_queue_rq(struct rq_hw_ctx *hctx, struct rq_request *rq, bool last)
{
	assert_true(nr_bheld < 256);
	bheld[nr_bheld++] = rq;
	return RQ_STS_OK;
}

static const struct rq_mq_ops bdev_ops = { RQ_MQ_OPS_INIT, .queue_rq = bdev_queue_rq };

static struct rq_tag_set *bdev_make(struct rq_queue **q)
{
	struct rq_tag_set_config scfg = { .size = sizeof(scfg), .ops = &bdev_ops, .nr_hw_queues = 1,
					  .queue_depth = 256, .numa_node = -1 };
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .scheduler = "kyber",
				      .capacity = (1ull << 30) >> RQ_SECTOR_SHIFT };
	struct rq_tag_set *set;

	nr_bheld = 0;
	assert_int_equal(rq_tag_set_alloc(&scfg, &set), 0);
	assert_int_equal(rq_mq_alloc_queue(set, &qc, q), 0);
	return set;
}

static void bdev_destroy(struct rq_tag_set *set, struct rq_queue *q)
{
	assert_int_equal(nr_bheld, 0);
	rq_queue_destroy(q);
	rq_tag_set_free(set);
}

/* End the first @n held requests with one batch; the rest move up. */
static void bdev_end(unsigned n)
{
	struct rq_request *rqs[256];

	assert_true(n <= nr_bheld);
	memcpy(rqs, bheld, n * sizeof(rqs[0]));
	/* ending them may dispatch more (tokens back): those go after the rest */
	memmove(bheld, bheld + n, (nr_bheld - n) * sizeof(bheld[0]));
	nr_bheld -= n;
	assert_int_equal(rq_mq_end_requests(rqs, n, RQ_STS_OK), n);
}

static void bsubmit(struct rq_queue *q, struct fx_rec *rec, unsigned op, unsigned i)
{
	struct rq_bio *bio = fx_bio(rec, op, (uint64_t)i * 64, buf, 4096);

	if (op == RQ_OP_WRITE)
		bio->opf |= RQ_BIO_SYNC;
	rq_submit_bio(q, bio);
}

/*
 * Tokens come back exactly once per request when the driver ends a whole
 * batch: with 150 sync writes the driver holds the 128 of the write
 * depth; ending those 128 at once gives back 128 tokens and lets the
 * other 22 go; and the next 150 again stop at exactly 128.  A token lost
 * in a batch would hold fewer, one returned twice (or a batch counted as
 * one) more or fewer.
 */
static void test_batch_end_tokens(void **state)
{
	static struct fx_rec rec[150];
	struct rq_queue *q;
	struct rq_tag_set *set = bdev_make(&q);

	for (unsigned round = 0; round < 2; round++) {
		for (unsigned i = 0; i < 150; i++)
			bsubmit(q, &rec[i], RQ_OP_WRITE, i);
		assert_int_equal(nr_bheld, WRITE_DEPTH);
		bdev_end(WRITE_DEPTH);
		assert_int_equal(nr_bheld, 150 - WRITE_DEPTH);
		bdev_end(nr_bheld);
		assert_int_equal(nr_bheld, 0);
		expect_all_ok(rec, 150);
	}
	/* and partial batches: 128 held, 100 back, 22 more in, 100 + 28 held */
	for (unsigned i = 0; i < 150; i++)
		bsubmit(q, &rec[i], RQ_OP_WRITE, i);
	bdev_end(100);
	assert_int_equal(nr_bheld, 150 - 100);
	bdev_end(nr_bheld);
	expect_all_ok(rec, 150);
	bdev_destroy(set, q);
}

/*
 * Every request of a batch is one latency sample: a window needs 8
 * samples for a verdict.  7 late reads ended in one batch give none (the
 * depths stay); the 8th, ended in the next window, makes 8 and the
 * verdict: reads at 25 ms (12.5 x their target, bucket 7) scale the read
 * depth by 4/8 and halve the write and discard depths.  A sample lost
 * from a batch leaves 7 and no verdict.
 */
static void test_batch_end_samples(void **state)
{
	static struct fx_rec rec[8];
	struct rq_queue *q;
	struct rq_tag_set *set = bdev_make(&q);
	struct fx_rec wrec;

	/* the window opened when the queue was made: stay inside it */
	for (unsigned i = 0; i < 7; i++)
		bsubmit(q, &rec[i], RQ_OP_READ, i);
	advance(25 * MS);
	bdev_end(7);
	/* past the window's end: a fast write's completion closes it */
	advance(WINDOW_NS);
	bsubmit(q, &wrec, RQ_OP_WRITE, 100);
	bdev_end(1);
	expect_all_ok(&wrec, 1);
	assert_int_equal(attr_u64(q, "iosched/read_depth"), READ_DEPTH);
	assert_int_equal(attr_u64(q, "iosched/write_depth"), WRITE_DEPTH);
	/* the 8th read, ended after the next window's end, closes it */
	bsubmit(q, &rec[7], RQ_OP_READ, 7);
	advance(WINDOW_NS);
	bdev_end(1);
	assert_int_equal(attr_u64(q, "iosched/read_depth"), READ_DEPTH / 2);
	assert_int_equal(attr_u64(q, "iosched/write_depth"), WRITE_DEPTH / 2);
	assert_int_equal(attr_u64(q, "iosched/discard_depth"), DISCARD_DEPTH / 2);
	expect_all_ok(rec, 8);
	bdev_destroy(set, q);
}

/* What the end_io of the batch's third request does (test_batch_tokens_at_end). */
static struct {
	struct rq_queue *q;
	struct fx_rec rec[2];
	unsigned held_after; /* nr_bheld once the other thread's writes went in */
} xt;

static void *xt_submit(void *arg)
{
	for (unsigned i = 0; i < 2; i++)
		bsubmit(xt.q, &xt.rec[i], RQ_OP_WRITE, 500 + i);
	return NULL;
}

static void xt_end_io(struct rq_bio *bio)
{
	pthread_t t;

	/* another thread's dispatch, while this batch holds the second token */
	assert_int_equal(pthread_create(&t, NULL, xt_submit, NULL), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	xt.held_after = nr_bheld;
	fx_end_io(bio);
}

/*
 * Tokens given back inside a driver batch count for other threads when the
 * batch ends, and a dispatch that waited for them is woken by that end.
 * The driver holds the 128 writes of the write depth; a batch ends the
 * first three.  The first one's token goes back at once (the batch opens
 * with the first request it frees), the second's waits for the batch's
 * end.  From the third's end_io another thread submits two writes: one
 * takes the first token, the other finds none and waits (the driver holds
 * 125 + 1).  When the batch ends, its two tokens go back and the waiting
 * write goes (125 + 2); then exactly one more token is free: a token lost
 * or returned twice by the batch makes that 0 or 2.
 */
static void test_batch_tokens_at_end(void **state)
{
	static struct fx_rec rec[WRITE_DEPTH + 2];
	struct rq_queue *q;
	struct rq_tag_set *set = bdev_make(&q);

	xt.q = q;
	for (unsigned i = 0; i < WRITE_DEPTH; i++)
		bsubmit(q, &rec[i], RQ_OP_WRITE, i);
	assert_int_equal(nr_bheld, WRITE_DEPTH);
	/* the third request of the batch: bheld[2], slot 2 */
	rec[2].bio->end_io = xt_end_io;
	bdev_end(3);
	assert_int_equal(xt.held_after, WRITE_DEPTH - 3 + 1);
	assert_int_equal(nr_bheld, WRITE_DEPTH - 3 + 2);
	bsubmit(q, &rec[WRITE_DEPTH], RQ_OP_WRITE, WRITE_DEPTH);
	bsubmit(q, &rec[WRITE_DEPTH + 1], RQ_OP_WRITE, WRITE_DEPTH + 1);
	assert_int_equal(nr_bheld, WRITE_DEPTH);
	while (nr_bheld)
		bdev_end(nr_bheld);
	expect_all_ok(rec, WRITE_DEPTH + 2);
	expect_all_ok(xt.rec, 2);
	bdev_destroy(set, q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_batches_round_robin),
		cmocka_unit_test(test_token_depth),
		cmocka_unit_test(test_batch_carries_over),
		cmocka_unit_test(test_batch_count_alone),
		cmocka_unit_test(test_latency_feedback),
		cmocka_unit_test(test_write_own_latency),
		cmocka_unit_test(test_fast_samples_count),
		cmocka_unit_test(test_tunables),
		cmocka_unit_test(test_target_store_applies),
		cmocka_unit_test(test_merge_each_domain),
		cmocka_unit_test(test_async_limit),
		cmocka_unit_test(test_async_limit_deep),
		cmocka_unit_test(test_batch_end_tokens),
		cmocka_unit_test(test_batch_end_samples),
		cmocka_unit_test(test_batch_tokens_at_end),
	};

	/* before any queue exists: no service thread, and the virtual clock */
	if (rq_service_manual()) {
		fprintf(stderr, "rq_service_manual failed\n");
		return 1;
	}
	rq_clock_set_source(vclock_read, NULL);
	if (!rq_sched_exists("kyber")) {
		fprintf(stderr, "kyber is not available: skipped\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
