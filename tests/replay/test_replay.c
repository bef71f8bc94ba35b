/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * rq_replay_run() on tiny hand-made traces whose outcome is worked out in
 * the comments from the models' formulas (examples/hddsim/hddsim.h,
 * examples/flash/flashsim.h) and the schedulers' documented rules
 * (doc/sched-mq-deadline.md, doc/sched-bfq.md); then determinism (the
 * same run twice gives the same bytes) and the flash model's write buffer
 * and garbage-collection stall.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rqreplay.h"

static void add(struct rq_replay_trace *t, uint64_t time_ns, uint32_t pid, unsigned op,
		uint64_t offset, uint32_t bytes)
{
	struct rq_replay_io io = { time_ns, offset, bytes, op, pid, 0 };

	assert_int_equal(rq_replay_trace_add(t, &io), 0);
}

static struct rq_replay_result *run(const struct rq_replay_trace *t,
				    const struct rq_replay_model *m,
				    const struct rq_replay_config *cfg)
{
	struct rq_replay_result *r = NULL;
	char err[512] = "";

	if (rq_replay_run(t, m, cfg, &r, err, sizeof(err)))
		fail_msg("rq_replay_run: %s", err);
	return r;
}

/*
 * A flash drive reduced to one die behind one channel, holding one command:
 * every 4 KiB read costs overhead 10 us + tR 100 us + channel 10 us + host
 * link 4096 B at 4096 MB/s = 1 us, i.e. 121 us, one after the other.
 */
static struct rq_replay_model *one_die(void)
{
	static const char *const kv[][2] = {
		{ "channels", "1" }, { "dies_per_channel", "1" }, { "read_us", "100" },
		{ "xfer_us", "10" }, { "host_mbps", "4096" }, { "overhead_us", "10" },
		{ "queue_depth", "1" },
	};
	struct rq_replay_model *m;
	unsigned i;

	assert_int_equal(rq_replay_model_new("nvme", &m), 0);
	for (i = 0; i < sizeof(kv) / sizeof(kv[0]); i++)
		assert_int_equal(rq_replay_model_set(m, kv[i][0], kv[i][1]), 0);
	return m;
}

/*
 * One stream, four sequential 4 KiB reads from sector 0, closed loop at
 * depth 1, no scheduler, on hdd-7200 (hddsim's defaults).
 *
 * One revolution: 60e9 / 7200 = 8333333 ns (integer).  The virtual clock
 * starts at 1e9 ns, which is 40 ns past the index mark (120 turns are
 * 999999960 ns).  Sector 0 (track 0, index 0, angle 0) comes round after
 * 8333333 - 40 = 8333293 ns; the head is already on track 0, so no seek.
 * 8 sectors of the 3200 on an outer track take 8 * 8333333 / 3200 =
 * 20833 ns.  First latency: 8333293 + 20833 = 8354126 ns.
 *
 * The read leaves a 1 MiB read-ahead segment streaming from sector 8; each
 * following read is served as its data arrives: sectors [8k, 8k+8) are
 * under the head at (8k+8) * rev / 3200 - 8k * rev / 3200, in integers
 * 20833, 20833, 20834 ns (41666-20833, 62499-41666, 83333-62499).
 * The last completion is at 8354126 + 20833 + 20833 + 20834 = 8416626 ns.
 */
static void hdd_sequential(void **state)
{
	struct rq_replay_config cfg = { RQ_REPLAY_CONFIG_INIT };
	static const uint64_t want[] = { 8354126, 20833, 20833, 20834 };
	struct rq_replay_trace *t = rq_replay_trace_new();
	struct rq_replay_summary s;
	struct rq_replay_result *r;
	struct rq_replay_model *m;
	unsigned i;

	(void)state;
	for (i = 0; i < 4; i++)
		add(t, 0, 1, RQ_REPLAY_READ, i * 4096, 4096);
	assert_int_equal(rq_replay_model_new("hdd-7200", &m), 0);
	cfg.sched = "none";
	cfg.closed_loop = true;
	cfg.depth = 1;
	cfg.keep_latencies = true;
	r = run(t, m, &cfg);
	for (i = 0; i < 4; i++)
		assert_int_equal(rq_replay_result_latency(r, i), want[i]);
	assert_int_equal(rq_replay_result_summary(r, -1, &s), 0);
	assert_int_equal(s.last_ns, 8416626);
	assert_int_equal(s.lat_p50_ns, 20833);   /* nearest rank: 2nd of 4 sorted */
	assert_int_equal(s.lat_max_ns, 8354126);
	assert_int_equal(s.bytes, 16384);
	rq_replay_result_free(r);
	rq_replay_model_free(m);
	rq_replay_trace_free(t);
}

/*
 * Two competing streams under mq-deadline with fifo_batch 1 (a new batch,
 * and so a deadline check, before every request) on the one-die drive.
 *
 *   t = 0:     stream 1 reads A0 (sector 0) and A1 (sector 16)
 *   t = 1 us:  stream 2 reads B far away (1 GiB), then stream 1 reads
 *              A2 .. A19 (sectors 32, 48, ...: gaps, so nothing merges)
 *
 * A0 goes at once and is done at 121 us; the drive then takes one request
 * per 121 us: the k-th (from 0) starts at 121k us.  Sector order after A1
 * runs A2 .. A19 before B, the one-way elevator.
 *
 * read_expire 500 ms (the default): nothing expires, B goes last, as the
 * 21st: start 20 * 121 = 2420 us, done 2541 us, latency 2540 us.  A19 starts
 * at 19 * 121 = 2299 us: its latency is 2420 - 1 = 2419 us.
 *
 * read_expire 1 ms: B's deadline is 1 us + 1 ms = 1001 us.  blk-mq takes a
 * request from the scheduler as the previous one is dispatched, and it waits
 * on the hw queue's dispatch list for the driver tag (the drive holds one
 * command): so the request that starts at 121k us was chosen at 121(k-1) us.
 * The first choice made at or after 1001 us is at 1089 us (k - 1 = 9): B,
 * the oldest request, expired.  It starts at 1210 us, is done at 1331 us:
 * latency 1330 us instead of 2540.  The A's lose one slot: the last one is
 * done at 21 * 121 = 2541 us (latency 2540 us).
 */
static void deadline_expiry(void **state)
{
	static const char *const expire[] = { "nr_requests=64", "iosched/fifo_batch=1",
					      "iosched/read_expire=1", NULL };
	struct rq_replay_config cfg = { RQ_REPLAY_CONFIG_INIT };
	struct rq_replay_trace *t = rq_replay_trace_new();
	struct rq_replay_model *m = one_die();
	struct rq_replay_summary a, b;
	struct rq_replay_result *r;
	const char *no_expire[4];
	unsigned i;

	(void)state;
	add(t, 0, 1, RQ_REPLAY_READ, 0, 4096);
	add(t, 0, 1, RQ_REPLAY_READ, 8192, 4096);
	add(t, 1000, 2, RQ_REPLAY_READ, 1ull << 30, 4096);
	for (i = 2; i < 20; i++)
		add(t, 1000, 1, RQ_REPLAY_READ, i * 8192, 4096);
	cfg.sched = "mq-deadline";
	memcpy(no_expire, expire, sizeof(no_expire));
	no_expire[2] = NULL;
	cfg.attrs = no_expire;
	r = run(t, m, &cfg);
	assert_int_equal(rq_replay_result_nr_streams(r), 2);
	rq_replay_result_summary(r, 0, &a);
	rq_replay_result_summary(r, 1, &b);
	assert_string_equal(b.key, "2");
	assert_int_equal(b.lat_max_ns, 2540000);
	assert_int_equal(a.lat_max_ns, 2419000);
	assert_int_equal(b.last_ns, 2541000);
	rq_replay_result_free(r);

	cfg.attrs = expire;
	r = run(t, m, &cfg);
	rq_replay_result_summary(r, 0, &a);
	rq_replay_result_summary(r, 1, &b);
	assert_int_equal(b.lat_max_ns, 1330000);
	assert_int_equal(b.last_ns, 1331000);
	assert_int_equal(a.lat_max_ns, 2540000);
	assert_int_equal(a.last_ns, 2541000);
	rq_replay_result_free(r);
	rq_replay_model_free(m);
	rq_replay_trace_free(t);
}

/*
 * bfq, weights 3:1.  Two streams of 300 4 KiB reads each (stream 1 at
 * sectors 0, 32, 64 ...; stream 2 from 1 GiB: no merges), closed loop at
 * depth 100 each, so both are always backlogged; the one-die drive
 * (121 us a read); slice_idle 0 (no idling: each queue always has work),
 * max_budget 64 sectors (8 reads), nr_requests 256 (both depths fit).
 *
 * B-WF2Q+ (doc/sched-bfq.md): a queue's turn lasts its budget; its virtual
 * finish advances by budget / weight.  With both budgets at 64 sectors,
 * weight 300 against 100 gives queue 1 three turns for each of queue 2's:
 * 24 reads to 8.  Queue 1's 300 reads thus take 300 / 24 = 12.5 rounds,
 * during which queue 2 gets 12.5 * 8 = 100 reads: when stream 1 completes
 * its last read, 400 reads have been served and exactly 100 were stream
 * 2's, and that moment is 400 * 121 us = 48.4 ms.  (The start-up budget of
 * 32 sectors, half of max_budget, doubles after the first full turn, for
 * both queues alike, so it does not change the ratio at the end.)
 *
 * With equal weights (100 : 100) the turns alternate: the 300 reads of
 * queue 1 come with 300 - 8 = 292 of queue 2's at the moment queue 1
 * finishes, give or take a turn: the test checks 292 .. 300.
 */
static unsigned bfq_other_done(const struct rq_replay_trace *t, struct rq_replay_result *r,
			       uint64_t *when)
{
	uint64_t end1 = 0;
	unsigned n = 0;
	size_t i;

	for (i = 0; i < rq_replay_trace_count(t); i++)
		if (rq_replay_trace_io(t, i)->pid == 1 && rq_replay_result_completion(r, i) > end1)
			end1 = rq_replay_result_completion(r, i);
	for (i = 0; i < rq_replay_trace_count(t); i++)
		if (rq_replay_trace_io(t, i)->pid == 2 && rq_replay_result_completion(r, i) <= end1)
			n++;
	*when = end1;
	return n;
}

static void bfq_weights(void **state)
{
	static const char *const attrs[] = { "nr_requests=256", "iosched/slice_idle=0",
					     "iosched/max_budget=64", NULL };
	struct rq_replay_stream_opt w[] = { { "1", 300, 0, 0 }, { "2", 100, 0, 0 } };
	struct rq_replay_config cfg = { RQ_REPLAY_CONFIG_INIT };
	struct rq_replay_trace *t = rq_replay_trace_new();
	struct rq_replay_model *m = one_die();
	struct rq_replay_result *r;
	uint64_t when;
	unsigned i, n;

	(void)state;
	for (i = 0; i < 300; i++) {
		add(t, 0, 1, RQ_REPLAY_READ, (uint64_t)i * 16384, 4096);
		add(t, 0, 2, RQ_REPLAY_READ, (1ull << 30) + (uint64_t)i * 16384, 4096);
	}
	cfg.sched = "bfq";
	cfg.attrs = attrs;
	cfg.closed_loop = true;
	cfg.depth = 100;
	cfg.keep_latencies = true;
	cfg.streams = w;
	cfg.nr_streams = 2;
	r = run(t, m, &cfg);
	n = bfq_other_done(t, r, &when);
	print_message("bfq 3:1: stream 2 had %u reads done when stream 1 ended at %" PRIu64
		      " ns\n", n, when);
	assert_int_equal(n, 100);
	assert_int_equal(when, 400 * 121000ull);
	rq_replay_result_free(r);

	w[0].weight = 100;
	r = run(t, m, &cfg);
	n = bfq_other_done(t, r, &when);
	print_message("bfq 1:1: stream 2 had %u reads done when stream 1 ended\n", n);
	assert_in_range(n, 292, 300);
	rq_replay_result_free(r);
	rq_replay_model_free(m);
	rq_replay_trace_free(t);
}

/*
 * The flash write path on one die with a one-slot (4 KiB) write buffer:
 * overhead 10 us, host link 1 us per page, xfer 1 us + tPROG 100 us, blocks
 * of 4 pages, 3 free blocks (12 pages), collect below 2 blocks (8 pages), a
 * victim holds 50 % valid pages (2): a collection costs 2 * (tR 10 us + tPROG
 * 100 us) + tBERS 1000 us = 1220 us and frees 2 pages.  Seven 4 KiB writes,
 * closed loop, depth 1 (each issued as the previous one ends):
 *
 *   w1 at 0:    slot free; data in at 10 + 1 = 11 us: latency 11 us.
 *               Programmed 11 .. 112 us (slot free at 112); 11 pages left.
 *   w2 at 11:   waits for the slot (112), in at 113: latency 102 us;
 *               program 113 .. 214; 10 left.
 *   w3, w4:     the same: in at 215, 317 (latency 102); 9, 8 pages left.
 *   w5 at 317:  in at 419 (102); program 419 .. 520; 7 left < 8: the die
 *               collects one block, busy until 520 + 1220 = 1740; 9 left.
 *   w6 at 419:  the slot frees at 520 (its program ended): in at 521 (102);
 *               its program waits for the die: 1740 .. 1841; 8 left.
 *   w7 at 521:  the slot frees at 1841: in at 1842: latency 1321 us, the
 *               garbage-collection stall.  Its program (1842 .. 1943)
 *               leaves 7 pages: a second collection, so gc_runs is 2.
 */
static void flash_gc_stall(void **state)
{
	static const char *const kv[][2] = {
		{ "channels", "1" }, { "dies_per_channel", "1" }, { "read_us", "10" },
		{ "program_us", "100" }, { "erase_us", "1000" }, { "xfer_us", "1" },
		{ "host_mbps", "4096" }, { "overhead_us", "10" }, { "write_buffer_kib", "4" },
		{ "pages_per_block", "4" }, { "free_blocks", "3" }, { "gc_low_blocks", "2" },
		{ "gc_valid_pct", "50" },
	};
	static const uint64_t want_us[] = { 11, 102, 102, 102, 102, 102, 1321 };
	struct rq_replay_config cfg = { RQ_REPLAY_CONFIG_INIT };
	struct rq_replay_trace *t = rq_replay_trace_new();
	struct rq_replay_result *r;
	struct rq_replay_model *m;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;
	unsigned i;

	(void)state;
	assert_int_equal(rq_replay_model_new("ssd-sata", &m), 0);
	for (i = 0; i < sizeof(kv) / sizeof(kv[0]); i++)
		assert_int_equal(rq_replay_model_set(m, kv[i][0], kv[i][1]), 0);
	for (i = 0; i < 7; i++)
		add(t, 0, 1, RQ_REPLAY_WRITE, (uint64_t)i * 1048576, 4096);
	cfg.sched = "none";
	cfg.closed_loop = true;
	cfg.keep_latencies = true;
	r = run(t, m, &cfg);
	for (i = 0; i < 7; i++)
		assert_int_equal(rq_replay_result_latency(r, i), want_us[i] * 1000);
	f = open_memstream(&buf, &len);
	rq_replay_result_json(r, f, 0);
	fclose(f);
	assert_non_null(strstr(buf, "\"gc_runs\":2,"));
	free(buf);
	rq_replay_result_free(r);
	rq_replay_model_free(m);
	rq_replay_trace_free(t);
}

/* A random mixed trace: 4 pids, reads and writes, bursts and gaps. */
static struct rq_replay_trace *mixed_trace(unsigned n)
{
	struct rq_replay_trace *t = rq_replay_trace_new();
	uint64_t x = 88172645463325252ull, time = 0;
	unsigned i;

	for (i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		time += (x >> 40) % 4 ? 0 : (x >> 20) % 3000000;
		add(t, time, 1 + (unsigned)(x % 4), (x >> 8) % 4 ? RQ_REPLAY_READ :
			RQ_REPLAY_WRITE, ((x >> 12) % (1u << 22)) * 4096, 4096u << ((x >> 30) % 4));
	}
	return t;
}

static char *run_json(const struct rq_replay_trace *t, const char *preset, const char *sched)
{
	struct rq_replay_config cfg = { RQ_REPLAY_CONFIG_INIT };
	struct rq_replay_result *r;
	struct rq_replay_model *m;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	assert_int_equal(rq_replay_model_new(preset, &m), 0);
	cfg.sched = sched;
	r = run(t, m, &cfg);
	f = open_memstream(&buf, &len);
	rq_replay_result_json(r, f, 50);
	rq_replay_result_print(r, f);
	fclose(f);
	rq_replay_result_free(r);
	rq_replay_model_free(m);
	return buf;
}

/* The same trace, scheduler and model twice: the same bytes, every scheduler. */
static void determinism(void **state)
{
	static const char *const scheds[] = { "none", "mq-deadline", "kyber", "bfq" };
	static const char *const presets[] = { "hdd-7200", "nvme" };
	struct rq_replay_trace *t = mixed_trace(2000);
	unsigned s, p, k;

	(void)state;
	for (p = 0; p < 2; p++) {
		for (s = 0; s < 4; s++) {
			char *first = run_json(t, presets[p], scheds[s]);

			for (k = 0; k < 2; k++) {
				char *again = run_json(t, presets[p], scheds[s]);

				if (strcmp(first, again))
					fail_msg("%s on %s: run %u differs", scheds[s], presets[p],
						 k + 2);
				free(again);
			}
			free(first);
		}
	}
	rq_replay_trace_free(t);
}

/* Bad configurations fail with a reason, before anything runs. */
static void bad_config(void **state)
{
	static const char *const attrs[] = { "iosched/no_such_tunable=1", NULL };
	struct rq_replay_stream_opt so = { "77", 10, 0, 0 };
	struct rq_replay_config cfg = { RQ_REPLAY_CONFIG_INIT };
	struct rq_replay_trace *t = rq_replay_trace_new();
	struct rq_replay_result *r = NULL;
	struct rq_replay_model *m;
	char err[512];

	(void)state;
	add(t, 0, 1, RQ_REPLAY_READ, 0, 4096);
	assert_int_equal(rq_replay_model_new("nvme", &m), 0);
	cfg.sched = "no-such-sched";
	assert_int_equal(rq_replay_run(t, m, &cfg, &r, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "no-such-sched"));
	cfg.sched = "mq-deadline";
	cfg.attrs = attrs;
	assert_int_equal(rq_replay_run(t, m, &cfg, &r, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "no_such_tunable"));
	cfg.attrs = NULL;
	cfg.streams = &so;
	cfg.nr_streams = 1;
	assert_int_equal(rq_replay_run(t, m, &cfg, &r, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "stream \"77\" is not in the trace"));
	cfg.nr_streams = 0;
	add(t, 0, 1, RQ_REPLAY_READ, 1ull << 50, 4096);
	assert_int_equal(rq_replay_run(t, m, &cfg, &r, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "past the model's capacity"));
	assert_null(r);
	rq_replay_model_free(m);
	rq_replay_trace_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(hdd_sequential),
		cmocka_unit_test(deadline_expiry),
		cmocka_unit_test(bfq_weights),
		cmocka_unit_test(flash_gc_stall),
		cmocka_unit_test(determinism),
		cmocka_unit_test(bad_config),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
