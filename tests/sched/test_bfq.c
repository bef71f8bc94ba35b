/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * bfq behaviour on a simulated disk with a virtual clock.
 *
 * The "disk" is the mock driver in DEFER mode with one tag: the test
 * completes the held request, advancing the virtual clock by a service time
 * of SVC_BASE_NS + SVC_SECTOR_NS per sector, plus SEEK_NS when the request
 * does not start within SEEK_DIST sectors of where the previous one ended.
 * Flows (an io context each) keep a fixed number of bios in flight: after
 * every completion the test tops them up and runs the hardware queue.  When
 * nothing is with the disk (bfq idling) the clock moves 1 ms and the queue
 * is run again.  Nothing depends on wall-clock time: there is no service
 * thread (rq_service_manual() in main), and the service work - the delayed
 * run that ends an idle window, the run bfq asks for when a turn ends at a
 * completion, the core's safety-net re-run - is done on the test's thread
 * by rq_service_run(), whenever the virtual clock moves and after every
 * completion, so it happens at the virtual moment it falls due, before the
 * flows submit again.
 *
 * Tolerances: bfq serves a queue for a whole budget (max_budget, set to
 * 256 sectors = 32 requests here) before switching, so service comes in
 * chunks of one budget.  Over the measured window (>= 300 budgets) the
 * chunking error is about one budget per queue, under 2%; the +/-10%
 * (weights) and +/-15% (groups, where the light side gets few turns)
 * bands leave room for the first turns, whose budgets are still growing.
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

#include "fixtures.h"
#include "mock_driver.h"

#define BS 4096u                       /* bytes per bio */
#define BIO_SECTORS (BS >> 9)
#define SVC_BASE_NS 100000ull          /* per request */
#define SVC_SECTOR_NS 1000ull          /* per sector */
#define SEEK_NS 8000000ull             /* a seek: 8 ms */
#define SEEK_DIST 64ull                /* sectors */
#define DEV_SECTORS (1ull << 24)       /* 8 GiB */

static uint64_t vclock = 1000000000ull;

static uint64_t vclock_read(void *arg)
{
	(void)arg;
	return __atomic_load_n(&vclock, __ATOMIC_ACQUIRE);
}


/* Move the virtual clock on, then do the service work due by then. */
static void vclock_advance(uint64_t ns)
{
	__atomic_add_fetch(&vclock, ns, __ATOMIC_ACQ_REL);
	fx_service_due();
}

static char databuf[BS];

struct flow {
	struct rq_io_context *ioc;
	bool random;
	unsigned depth;       /* bios kept in flight */
	unsigned outstanding;
	uint64_t next;        /* next sector (sequential flows) */
	uint64_t base, span;  /* region */
	uint64_t served;      /* sectors completed */
	unsigned rng;
	uint32_t opf;
};

static void flow_end_io(struct rq_bio *bio)
{
	struct flow *f = bio->private_data;

	assert_int_equal(bio->status, RQ_STS_OK);
	f->outstanding--;
	f->served += BIO_SECTORS;
	rq_bio_put(bio);
}

static void flow_init(struct flow *f, struct rq_io_context *ioc, bool random, unsigned depth,
		      uint64_t base, unsigned seed)
{
	memset(f, 0, sizeof(*f));
	f->ioc = ioc;
	f->random = random;
	f->depth = depth;
	f->base = base;
	f->next = base;
	f->span = DEV_SECTORS / 4;
	f->rng = seed;
	f->opf = RQ_BIO_NOMERGE; /* equal-size requests: service counts are exact */
}

static void flow_fill(struct mock_dev *m, struct flow *f)
{
	while (f->outstanding < f->depth) {
		struct rq_bio *bio = rq_bio_alloc(1);
		uint64_t sector;

		assert_non_null(bio);
		if (f->random) {
			sector = f->base + ((uint64_t)rand_r(&f->rng) * 4096ull) % f->span;
			sector &= ~7ull;
		} else {
			sector = f->next;
			f->next += BIO_SECTORS;
		}
		bio->op = RQ_OP_READ;
		bio->opf = f->opf;
		bio->iter.sector = sector;
		assert_int_equal(rq_bio_add_vec(bio, databuf, BS), 0);
		bio->iter.size = BS;
		bio->end_io = flow_end_io;
		bio->private_data = f;
		bio->ioc = f->ioc;
		f->outstanding++;
		rq_submit_bio(m->q, bio);
	}
}

struct disk {
	struct mock_dev *m;
	uint64_t head;
	uint64_t busy_ns, idle_ns;
};

static struct mock_dev *make_dev_depth(unsigned depth)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_DEFER, .queue_depth = depth };
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .scheduler = "bfq", .capacity = DEV_SECTORS };
	struct mock_dev *m;

	rq_clock_set_source(vclock_read, NULL);
	m = mock_create(&cfg, &qc);
	assert_int_equal(rq_queue_attr_set(m->q, "nr_requests", "128"), 0);
	return m;
}

static struct mock_dev *make_dev(void)
{
	return make_dev_depth(1);
}

static void set_attr(struct mock_dev *m, const char *name, const char *v)
{
	char full[64];

	snprintf(full, sizeof(full), "iosched/%s", name);
	assert_int_equal(rq_queue_attr_set(m->q, full, v), 0);
}

/* One disk step: complete the held request (or let 1 ms of idle time pass). */
static void disk_step(struct disk *d, struct flow *flows, unsigned nr)
{
	struct rq_request *rq;
	uint64_t t;

	for (unsigned i = 0; i < nr; i++)
		flow_fill(d->m, &flows[i]);
	rq_mq_run_hw_queues(d->m->q, false);
	if (!mock_nr_held(d->m)) {
		vclock_advance(1000000);
		d->idle_ns += 1000000;
		rq_mq_run_hw_queues(d->m->q, false);
		return;
	}
	rq = mock_held(d->m, 0);
	t = SVC_BASE_NS + SVC_SECTOR_NS * rq_request_sectors(rq);
	if (rq->sector > d->head + SEEK_DIST || rq->sector + SEEK_DIST < d->head)
		t += SEEK_NS;
	d->head = rq_request_end_sector(rq);
	vclock_advance(t);
	d->busy_ns += t;
	mock_complete_one(d->m, 0, RQ_STS_OK);
	fx_service_due(); /* what the completion asked for (a run to switch turns) */
}

/* Drain: complete everything still in flight, flows no longer refilled. */
static void disk_drain(struct disk *d, struct flow *flows, unsigned nr)
{
	for (unsigned i = 0; i < nr; i++)
		flows[i].depth = 0;
	for (unsigned spins = 0; spins < 100000; spins++) {
		unsigned left = 0;

		for (unsigned i = 0; i < nr; i++)
			left += flows[i].outstanding;
		if (!left)
			return;
		disk_step(d, flows, nr);
	}
	fail_msg("requests still in flight after draining");
}

static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 1e9;
}

/*
 * Run @nr flows until @steps requests completed after a warm-up of @warm
 * steps; per-flow served sectors of the measured window in @out.
 */
static void run_window(struct mock_dev *m, struct flow *flows, unsigned nr, unsigned warm,
		       unsigned steps, uint64_t *out)
{
	struct disk d = { .m = m };
	uint64_t before[8];

	for (unsigned i = 0; i < warm; i++)
		disk_step(&d, flows, nr);
	for (unsigned i = 0; i < nr; i++)
		before[i] = flows[i].served;
	for (unsigned i = 0; i < steps; i++)
		disk_step(&d, flows, nr);
	for (unsigned i = 0; i < nr; i++)
		out[i] = flows[i].served - before[i];
	disk_drain(&d, flows, nr);
}

/*
 * Contexts of weights 300 and 100, both always backlogged, on a device
 * taking @depth requests: 3:1 +/- 10%.
 */
static void check_weights_3_to_1(unsigned depth)
{
	struct mock_dev *m = make_dev_depth(depth);
	struct rq_io_context *a = rq_ioc_create(0), *b = rq_ioc_create(0);
	struct flow f[2];
	uint64_t served[2];
	double r;

	set_attr(m, "low_latency", "0");
	set_attr(m, "max_budget", "256");
	assert_int_equal(rq_ioc_set_weight(a, 300), 0);
	assert_int_equal(rq_ioc_set_weight(b, 100), 0);
	flow_init(&f[0], a, true, 16, 0, 1);
	flow_init(&f[1], b, true, 16, DEV_SECTORS / 2, 2);
	run_window(m, f, 2, 1000, 12000, served);
	r = ratio(served[0], served[1]);
	print_message("weights 300:100, depth %u: served %llu : %llu sectors, ratio %.3f\n", depth,
		      (unsigned long long)served[0], (unsigned long long)served[1], r);
	assert_true(r > 2.7 && r < 3.3);
	mock_destroy(m);
	rq_ioc_put(a);
	rq_ioc_put(b);
}

static void test_weights_3_to_1(void **state)
{
	(void)state;
	check_weights_3_to_1(1);
}

/*
 * The same with a device that takes 8 requests: the core then pulls
 * batches (bfq's dispatch_requests, one lock hold for up to 8), which must
 * hand out what the same number of has_work/dispatch_request rounds would,
 * so the budgets and weights come out as with one request at a time.
 * The disk still serves one request per step, the oldest first.
 */
static void test_weights_3_to_1_deep(void **state)
{
	(void)state;
	check_weights_3_to_1(8);
}

/* The same through priorities: BE/0 (weight 80) against BE/6 (20) is 4:1. */
static void test_prio_weights(void **state)
{
	struct mock_dev *m = make_dev();
	struct rq_io_context *a = rq_ioc_create(RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 0));
	struct rq_io_context *b = rq_ioc_create(RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 6));
	struct flow f[2];
	uint64_t served[2];
	double r;

	(void)state;
	set_attr(m, "low_latency", "0");
	set_attr(m, "max_budget", "256");
	flow_init(&f[0], a, true, 16, 0, 3);
	flow_init(&f[1], b, true, 16, DEV_SECTORS / 2, 4);
	run_window(m, f, 2, 1000, 12000, served);
	r = ratio(served[0], served[1]);
	print_message("ioprio BE/0 : BE/6: ratio %.3f (4 expected)\n", r);
	assert_true(r > 3.6 && r < 4.4);
	mock_destroy(m);
	rq_ioc_put(a);
	rq_ioc_put(b);
}

/* Groups of weights 1000 and 100 (two contexts each): 10:1 +/- 15%. */
static void test_groups_10_to_1(void **state)
{
	struct mock_dev *m = make_dev();
	struct rq_io_group *g1 = rq_iog_create(1000), *g2 = rq_iog_create(100);
	struct rq_io_context *c[4];
	struct flow f[4];
	uint64_t served[4], heavy, light;
	double r;

	(void)state;
	set_attr(m, "low_latency", "0");
	set_attr(m, "max_budget", "256");
	for (unsigned i = 0; i < 4; i++) {
		c[i] = rq_ioc_create(0);
		assert_int_equal(rq_ioc_set_group(c[i], i < 2 ? g1 : g2), 0);
		flow_init(&f[i], c[i], true, 8, (DEV_SECTORS / 4) * i, 10 + i);
	}
	rq_iog_put(g1); /* the contexts keep them */
	rq_iog_put(g2);
	run_window(m, f, 4, 2000, 30000, served);
	heavy = served[0] + served[1];
	light = served[2] + served[3];
	r = ratio(heavy, light);
	print_message("groups 1000:100: served %llu : %llu sectors, ratio %.3f\n",
		      (unsigned long long)heavy, (unsigned long long)light, r);
	assert_true(r > 8.5 && r < 11.5);
	/* inside each group the two equal contexts share evenly */
	assert_true(ratio(served[0], served[1]) > 0.8 && ratio(served[0], served[1]) < 1.25);
	mock_destroy(m);
	for (unsigned i = 0; i < 4; i++)
		rq_ioc_put(c[i]);
}

/*
 * A sequential reader (one read at a time, the next issued as soon as the
 * last ends) against a random reader: served sectors of the sequential
 * reader over the same virtual time, with idling and without.
 */
static uint64_t seq_vs_random(const char *slice_idle)
{
	struct mock_dev *m = make_dev();
	struct rq_io_context *s = rq_ioc_create(0), *r = rq_ioc_create(0);
	struct disk d = { .m = NULL };
	struct flow f[2];
	uint64_t start, seq;

	set_attr(m, "low_latency", "0");
	set_attr(m, "slice_idle", slice_idle);
	flow_init(&f[0], s, false, 1, 0, 5);
	flow_init(&f[1], r, true, 4, DEV_SECTORS / 2, 6);
	d.m = m;
	start = vclock;
	while (vclock - start < 2000000000ull) /* 2 s of virtual time */
		disk_step(&d, f, 2);
	seq = f[0].served;
	print_message("slice_idle %s: sequential %llu sectors, random %llu sectors in 2 s\n",
		      slice_idle, (unsigned long long)seq, (unsigned long long)f[1].served);
	assert_true(f[1].served > 0); /* the random reader is not starved */
	disk_drain(&d, f, 2);
	mock_destroy(m);
	rq_ioc_put(s);
	rq_ioc_put(r);
	return seq;
}

static void test_idling_keeps_sequential(void **state)
{
	uint64_t with = seq_vs_random("8"), without = seq_vs_random("0");

	(void)state;
	/* without idling every sequential read waits behind a seek */
	assert_true(with > 4 * without);
}

/*
 * low_latency: a context that starts reading while another keeps the disk
 * busy is raised as interactive and gets most of the disk for a while.
 */
static void test_weight_raising(void **state)
{
	uint64_t newcomer[2], old_served[2];

	(void)state;
	for (unsigned ll = 0; ll < 2; ll++) {
		struct mock_dev *m = make_dev();
		struct rq_io_context *old = rq_ioc_create(0), *young = rq_ioc_create(0);
		struct disk d = { .m = m };
		struct flow f[2];

		set_attr(m, "low_latency", ll ? "1" : "0");
		set_attr(m, "max_budget", "256");
		flow_init(&f[0], old, true, 16, 0, 7);
		flow_init(&f[1], young, true, 0, DEV_SECTORS / 2, 8);
		for (unsigned i = 0; i < 200; i++)
			disk_step(&d, f, 2);
		vclock_advance(5000000000ull); /* the old context's raising is over */
		for (unsigned i = 0; i < 200; i++)
			disk_step(&d, f, 2);
		f[1].depth = 16;
		old_served[ll] = f[0].served;
		/* 300 random reads of ~8 ms: well inside the 4 s of raising */
		for (unsigned i = 0; i < 300; i++)
			disk_step(&d, f, 2);
		newcomer[ll] = f[1].served;
		old_served[ll] = f[0].served - old_served[ll];
		print_message("low_latency %u: newcomer %llu sectors, old %llu\n", ll,
			      (unsigned long long)newcomer[ll],
			      (unsigned long long)old_served[ll]);
		disk_drain(&d, f, 2);
		mock_destroy(m);
		rq_ioc_put(old);
		rq_ioc_put(young);
	}
	/* equal weights share about evenly; raised (x30), the newcomer takes most */
	assert_true(newcomer[0] < 2 * old_served[0]);
	assert_true(newcomer[1] > 4 * old_served[1]);
	assert_true(newcomer[1] > newcomer[0] + newcomer[0] / 2);
}

/* Every tunable reads back what was written; bad values change nothing. */
static void test_tunables(void **state)
{
	static const struct {
		const char *name, *def, *good, *bad[3];
	} t[] = {
		{ "slice_idle", "8", "3", { "1001", "-1", "x" } },
		{ "slice_idle_us", "8000", "2500", { "1000001", "", "1.5" } },
		{ "low_latency", "1", "0", { "2", "yes", "" } },
		{ "back_seek_max", "16384", "4096", { "-3", "1e3", "" } },
		{ "back_seek_penalty", "2", "7", { "0", "1001", "" } },
		{ "fifo_expire_sync", "125", "60", { "0", "60001", "" } },
		{ "fifo_expire_async", "250", "500", { "0", "z", "" } },
		{ "timeout_sync", "125", "200", { "0", "70000", "" } },
		{ "max_budget", "0", "4096", { "99999999", "-1", "" } },
		{ "strict_guarantees", "0", "1", { "2", "-", "" } },
	};
	struct mock_dev *m = make_dev();
	char name[64], buf[64], want[64];

	(void)state;
	for (unsigned i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		snprintf(name, sizeof(name), "iosched/%s", t[i].name);
		assert_true(rq_queue_attr_get(m->q, name, buf, sizeof(buf)) > 0);
		snprintf(want, sizeof(want), "%s\n", t[i].def);
		assert_string_equal(buf, want);
	}
	for (unsigned i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		snprintf(name, sizeof(name), "iosched/%s", t[i].name);
		assert_int_equal(rq_queue_attr_set(m->q, name, t[i].good), 0);
		assert_true(rq_queue_attr_get(m->q, name, buf, sizeof(buf)) > 0);
		snprintf(want, sizeof(want), "%s\n", t[i].good);
		assert_string_equal(buf, want);
		for (unsigned j = 0; j < 3; j++) {
			assert_int_equal(rq_queue_attr_set(m->q, name, t[i].bad[j]), -EINVAL);
			assert_true(rq_queue_attr_get(m->q, name, buf, sizeof(buf)) > 0);
			assert_string_equal(buf, want);
		}
	}
	/* slice_idle and slice_idle_us are one setting */
	assert_int_equal(rq_queue_attr_set(m->q, "iosched/slice_idle", "5\n"), 0);
	assert_true(rq_queue_attr_get(m->q, "iosched/slice_idle_us", buf, sizeof(buf)) > 0);
	assert_string_equal(buf, "5000\n");
	mock_destroy(m);
}

/* strict_guarantees: never more than one request with the device. */
static void test_strict_one_in_flight(void **state)
{
	struct mock_config cfg = { .completion = MOCK_COMPLETE_DEFER, .queue_depth = 8 };
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .scheduler = "bfq", .capacity = DEV_SECTORS };
	struct rq_io_context *a = rq_ioc_create(0);
	struct mock_dev *m;
	struct flow f;
	struct disk d;

	(void)state;
	rq_clock_set_source(vclock_read, NULL);
	m = mock_create(&cfg, &qc);
	d = (struct disk){ .m = m };
	set_attr(m, "strict_guarantees", "1");
	flow_init(&f, a, true, 6, 0, 9);
	for (unsigned i = 0; i < 300; i++) {
		disk_step(&d, &f, 1);
		assert_true(mock_nr_held(m) <= 1);
	}
	disk_drain(&d, &f, 1);
	mock_destroy(m);
	rq_ioc_put(a);
}

/* Submit a 4 KiB @op of @ioc at @sector with @opf, counted in @rec. */
static void submit_op(struct mock_dev *m, struct fx_rec *rec, struct rq_io_context *ioc,
		      unsigned op, uint64_t sector, uint32_t opf)
{
	struct rq_bio *bio = fx_bio(rec, op, sector, databuf, BS);

	bio->opf |= opf;
	bio->ioc = ioc;
	rq_submit_bio(m->q, bio);
}

/* Submit a 4 KiB read of @ioc at @sector with @opf, counted in @rec. */
static void submit_read(struct mock_dev *m, struct fx_rec *rec, struct rq_io_context *ioc,
			uint64_t sector, uint32_t opf)
{
	submit_op(m, rec, ioc, RQ_OP_READ, sector, opf);
}

/* Complete the oldest held request @n times, checking the sectors @want. */
static void complete_in_order(struct mock_dev *m, const uint64_t *want, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		assert_true(mock_nr_held(m) >= 1);
		assert_int_equal(mock_held(m, 0)->sector, want[i]);
		mock_complete_one(m, 0, RQ_STS_OK);
	}
}

/*
 * The next request of a queue is chosen, when the last one leaves, from
 * the START of that one (the kernel's bfq_find_next_rq()): after 1000
 * [1000, 1008), 996 is 4 sectors behind (8 with back_seek_penalty 2) and
 * 1020 20 ahead, so 996 goes next.  Measured from the end (1008) 1020
 * would be nearer (12 against 24).  The head starts at 1000: a first
 * request [992, 1000) went alone.
 */
static void test_next_from_start(void **state)
{
	static const uint64_t want[] = { 1000, 996, 1020 };
	struct rq_io_context *a = rq_ioc_create(0);
	struct mock_dev *m = make_dev();
	static struct fx_rec rec[4];

	(void)state;
	submit_read(m, &rec[0], a, 992, RQ_BIO_NOMERGE);
	complete_in_order(m, (const uint64_t[]){ 992 }, 1);
	rq_queue_quiesce(m->q);
	submit_read(m, &rec[1], a, 1000, RQ_BIO_NOMERGE);
	submit_read(m, &rec[2], a, 1020, RQ_BIO_NOMERGE);
	submit_read(m, &rec[3], a, 996, RQ_BIO_NOMERGE);
	rq_queue_unquiesce(m->q);
	complete_in_order(m, want, 3);
	assert_true(fx_wait(rec, 4, 10000));
	fx_put(rec, 4);
	mock_destroy(m);
	rq_ioc_put(a);
}

/*
 * With nomerges 1 the one-hit cache is the only merge path, and bfq's
 * insert makes the new request the cache when it is empty (the kernel's
 * bfq_insert_request): a contiguous bio of the same context joins it.
 */
static void test_insert_fills_merge_cache(void **state)
{
	struct rq_io_context *a = rq_ioc_create(0);
	struct mock_dev *m = make_dev();
	static struct fx_rec rec[2];

	(void)state;
	assert_int_equal(rq_queue_attr_set(m->q, "nomerges", "1"), 0);
	rq_queue_quiesce(m->q);
	submit_read(m, &rec[0], a, 100, 0);
	submit_read(m, &rec[1], a, 108, 0);
	rq_queue_unquiesce(m->q);
	assert_int_equal(mock_nr_held(m), 1);
	assert_int_equal(mock_held(m, 0)->bytes, 2 * BS);
	mock_complete_one(m, 0, RQ_STS_OK);
	assert_true(fx_wait(rec, 2, 10000));
	fx_put(rec, 2);
	mock_destroy(m);
	rq_ioc_put(a);
}

/*
 * A plug's requests of one context reach bfq as one batch, sorted there as
 * a run (sched/bfq.c, bfq_insert_run()): the order they go in must be the
 * one inserting them one by one gives.  The head is at 100000 (a first
 * request [99992, 100000) went alone); the plug holds, in this order,
 * 100400, 99900, 50, 200000, 99990 (4 KiB each).  From the head's END the
 * nearest is 99990 (10 back, 20 with back_seek_penalty 2; 99900 counts
 * 200, 100400 400; 50 is more than back_seek_max behind: wrapped).  Then,
 * from each START: 99900 (90 back = 180) before 100400 (410); 100400
 * (500) before 50 (wrapped); 200000 before 50; 50 last.  A run whose next
 * request were its lowest, its first or its last, or whose tree lost its
 * order, fails.
 */
static void test_run_sorted_order(void **state)
{
	static const uint64_t want[] = { 99990, 99900, 100400, 200000, 50 };
	static const uint64_t batch[] = { 100400, 99900, 50, 200000, 99990 };
	struct rq_io_context *a = rq_ioc_create(0);
	struct mock_dev *m = make_dev();
	static struct fx_rec rec[6];
	struct rq_plug plug;

	(void)state;
	submit_read(m, &rec[0], a, 99992, RQ_BIO_NOMERGE);
	complete_in_order(m, (const uint64_t[]){ 99992 }, 1);
	rq_queue_quiesce(m->q);
	rq_start_plug(&plug);
	for (unsigned i = 0; i < 5; i++)
		submit_read(m, &rec[1 + i], a, batch[i], RQ_BIO_NOMERGE);
	rq_finish_plug(&plug);
	rq_queue_unquiesce(m->q);
	complete_in_order(m, want, 5);
	assert_true(fx_wait(rec, 6, 10000));
	fx_put(rec, 6);
	mock_destroy(m);
	rq_ioc_put(a);
}

static __thread unsigned vclock_reads; /* this thread's clock reads (vclock_counted()) */

static uint64_t vclock_counted(void *arg)
{
	vclock_reads++;
	return vclock_read(arg);
}

/*
 * Clock reads per plug: a plug of five reads of one context, dispatched
 * in its flush, reads the clock once on this thread besides the mock
 * driver's own stamps (the plug's reading, which the core takes for the
 * requests' start and bfq's dispatch shares), not once more for bfq's
 * dispatch; and the five still
 * reach the device in sector order.  Fails if bfq reads a clock of its
 * own in a plug's flush.
 */
static void test_plug_one_clock_read(void **state)
{
	static const uint64_t batch[] = { 4000, 1000, 3000, 2000, 5000 };
	struct rq_io_context *a = rq_ioc_create(0);
	struct mock_dev *m = make_dev_depth(8);
	static struct fx_rec rec[5];
	struct rq_plug plug;
	unsigned reads;

	(void)state;
	rq_clock_set_source(vclock_counted, NULL);
	rq_start_plug(&plug);
	vclock_reads = 0;
	for (unsigned i = 0; i < 5; i++)
		submit_read(m, &rec[i], a, batch[i], RQ_BIO_NOMERGE);
	rq_finish_plug(&plug);
	reads = vclock_reads;
	rq_clock_set_source(vclock_read, NULL);
	assert_int_equal(mock_nr_held(m), 5);
	assert_int_equal(reads, 1 + 5); /* the mock's recorder stamps each request it is handed */
	complete_in_order(m, (const uint64_t[]){ 1000, 2000, 3000, 4000, 5000 }, 5);
	assert_true(fx_wait(rec, 5, 10000));
	fx_put(rec, 5);
	mock_destroy(m);
	rq_ioc_put(a);
}

/*
 * With @depth driver tags, move the head to @head (a read [@head - 8,
 * @head) of one context, alone), then submit that context's reads
 * @batch[0, n) (n < 8), with the flags @opf[i] (if any) and no merges, as
 * one plug: the requests reach bfq as one batch, and the device, all of
 * them at once, once the queue is unquiesced, in the order @want.
 */
static void check_plug_order(unsigned depth, uint64_t head, const uint64_t *batch,
			     const uint32_t *opf, const uint64_t *want, unsigned n)
{
	struct rq_io_context *a = rq_ioc_create(0);
	struct mock_dev *m = make_dev_depth(depth);
	static struct fx_rec rec[8];
	struct rq_plug plug;

	submit_read(m, &rec[0], a, head - 8, RQ_BIO_NOMERGE);
	complete_in_order(m, (const uint64_t[]){ head - 8 }, 1);
	rq_queue_quiesce(m->q);
	rq_start_plug(&plug);
	for (unsigned i = 0; i < n; i++)
		submit_read(m, &rec[1 + i], a, batch[i], RQ_BIO_NOMERGE | (opf ? opf[i] : 0));
	rq_finish_plug(&plug);
	rq_queue_unquiesce(m->q);
	assert_int_equal(mock_nr_held(m), n);
	complete_in_order(m, want, n);
	assert_true(fx_wait(rec, n + 1, 10000));
	fx_put(rec, n + 1);
	mock_destroy(m);
	rq_ioc_put(a);
}

/*
 * A tie in the choice of the next request, inside a drain (several
 * requests of the in-service queue handed out in one dispatch): the head
 * is at 1000 (a first request [992, 1000) went alone), then one plug of
 * one context holds 1000, 1016, 992 (no merges).  1000 goes first
 * (distance 0); from its start 1016 is 16 ahead and 992 8 behind, 16 with
 * back_seek_penalty 2: a tie, which the higher sector wins (the kernel's
 * bfq_choose_req()), so 1016 before 992.  With four driver tags the three
 * leave in one drain (sched_drain_in_turn()); a drain that gave a tie to
 * the request behind, or measured from the end, would send 992 second.
 */
static void test_drain_tie_goes_up(void **state)
{
	static const uint64_t want[] = { 1000, 1016, 992 };
	static const uint64_t batch[] = { 1000, 1016, 992 };

	(void)state;
	check_plug_order(4, 1000, batch, NULL, want, 3);
}

/*
 * A drain that walks up past a request too far behind (beyond
 * back_seek_max) meets a request of another metadata kind (issue 16,
 * bfq12: drain_next_up()).  The head is at 200000 (a first request
 * [199992, 200000) went alone), then one plug of one context holds A 100
 * (META, 199900 behind: more than back_seek_max's 32768 sectors), B1
 * 200000 and B2 200100 (META), C 200200 and D 200300 (no merges).  B1
 * goes first (a metadata request, at the head); from it B2 goes up (A is
 * too far behind).  From B2 the next above, C, is not metadata and A is:
 * the kernel's bfq_choose_req() prefers the metadata request whatever the
 * distance, so A goes third, then C and D.  With five driver tags all go
 * in one drain; a walk up that kept going past A without looking at the
 * kind would send C, D, then A.
 */
static void test_drain_up_meta_below(void **state)
{
	static const uint64_t want[] = { 200000, 200100, 100, 200200, 200300 };
	static const uint64_t batch[] = { 100, 200000, 200100, 200200, 200300 };
	static const uint32_t meta[] = { RQ_BIO_META, RQ_BIO_META, RQ_BIO_META, 0, 0 };

	(void)state;
	check_plug_order(8, 200000, batch, meta, want, 5);
}

/*
 * An insert merge inside one batch: the plug merges a bio only with its
 * last request, so [100, 108), [500, 508), [108, 116) of one context stay
 * three requests there; at insert [108, 116) finds its own context's
 * [100, 108), inserted just before it in the same batch, ending where it
 * starts, and joins it (the kernel's elv_attempt_insert_merge()).  Two
 * requests reach the device: [100, 116) first (the head is at 0), then 500.
 * A batch insert that sorted the run into the tree without looking for
 * such neighbours would hand out three.
 */
static void test_insert_merge_own_context(void **state)
{
	struct rq_io_context *a = rq_ioc_create(0);
	struct mock_dev *m = make_dev();
	static struct fx_rec rec[3];
	struct rq_plug plug;

	(void)state;
	rq_queue_quiesce(m->q);
	rq_start_plug(&plug);
	submit_read(m, &rec[0], a, 100, 0);
	submit_read(m, &rec[1], a, 500, 0);
	submit_read(m, &rec[2], a, 108, 0);
	rq_finish_plug(&plug);
	rq_queue_unquiesce(m->q);
	assert_int_equal(mock_nr_held(m), 1);
	assert_int_equal(mock_held(m, 0)->sector, 100);
	assert_int_equal(mock_held(m, 0)->bytes, 2 * BS);
	mock_complete_one(m, 0, RQ_STS_OK);
	assert_int_equal(mock_nr_held(m), 1);
	assert_int_equal(mock_held(m, 0)->sector, 500);
	mock_complete_one(m, 0, RQ_STS_OK);
	assert_true(fx_wait(rec, 3, 10000));
	fx_put(rec, 3);
	mock_destroy(m);
	rq_ioc_put(a);
}

/* The queue's counters now. */
static struct rq_queue_stats dev_stats(struct mock_dev *m)
{
	struct rq_queue_stats st;

	assert_int_equal(rq_queue_get_stats(m->q, &st, sizeof(st)), 0);
	return st;
}

/* Queue a plug of 4 KiB reads of @ioc at @sectors (one run), counted in @rec. */
static void submit_run(struct mock_dev *m, struct fx_rec *rec, struct rq_io_context *ioc,
		       const uint64_t *sectors, unsigned n)
{
	struct rq_plug plug;

	rq_start_plug(&plug);
	for (unsigned i = 0; i < n; i++)
		submit_read(m, &rec[i], ioc, sectors[i], 0);
	rq_finish_plug(&plug);
}

/* Complete the held requests in order, checking their sectors and sizes. */
static void complete_sized(struct mock_dev *m, const uint64_t *want, const unsigned *bytes,
			   unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		assert_true(mock_nr_held(m) >= 1);
		assert_int_equal(mock_held(m, 0)->sector, want[i]);
		assert_int_equal(mock_held(m, 0)->bytes, bytes[i]);
		mock_complete_one(m, 0, RQ_STS_OK);
	}
}

/*
 * A run (a plug's batch of one context) puts in the merge hash only its
 * requests up to the one the one-hit cache takes; the rest go in when the
 * hash is next looked at (sched/bfq.c, sched_hash_flush()).  A bio that
 * starts where the run's third request ends must still find it
 * there: a back merge (merges_back), not a new request joined at insert
 * (merges_rq), and [1300, 1308) likewise.  A bio_merge that looked before
 * the rest of the run was hashed would miss both.
 */
static void test_run_hash_back_merge(void **state)
{
	static const uint64_t run[] = { 100, 500, 900, 1300 };
	struct rq_io_context *a = rq_ioc_create(0);
	struct mock_dev *m = make_dev();
	static struct fx_rec rec[6];
	struct rq_queue_stats st;

	(void)state;
	rq_queue_quiesce(m->q);
	submit_run(m, rec, a, run, 4);
	submit_read(m, &rec[4], a, 908, 0);
	submit_read(m, &rec[5], a, 1308, 0);
	st = dev_stats(m);
	assert_int_equal(st.requests, 4);
	assert_int_equal(st.merges_back, 2);
	assert_int_equal(st.merges_rq, 0);
	rq_queue_unquiesce(m->q);
	complete_sized(m, run, (const unsigned[]){ BS, BS, 2 * BS, 2 * BS }, 4);
	assert_true(fx_wait(rec, 6, 10000));
	fx_put(rec, 6);
	mock_destroy(m);
	rq_ioc_put(a);
}

/*
 * A run's sorted requests become a tree only when something walks it
 * (sched/bfq.c, bfqq_sort()): a bio ending where the run's 900 starts (not
 * the one-hit cache's request: that is 100, the first) is a front merge
 * found in that tree (request_merge), and the
 * grown request [892, 908) goes in its sector order.  A lookup in a tree
 * not built yet would miss it, and the bio would become a request of its
 * own (five requests).
 */
static void test_run_tree_front_merge(void **state)
{
	static const uint64_t run[] = { 100, 900, 1300, 500 };
	static const uint64_t want[] = { 100, 500, 892, 1300 };
	struct rq_io_context *a = rq_ioc_create(0);
	struct mock_dev *m = make_dev();
	static struct fx_rec rec[5];
	struct rq_queue_stats st;

	(void)state;
	rq_queue_quiesce(m->q);
	submit_run(m, rec, a, run, 4);
	submit_read(m, &rec[4], a, 892, 0);
	st = dev_stats(m);
	assert_int_equal(st.requests, 4);
	assert_int_equal(st.merges_front, 1);
	rq_queue_unquiesce(m->q);
	complete_sized(m, want, (const unsigned[]){ BS, BS, 2 * BS, BS }, 4);
	assert_true(fx_wait(rec, 5, 10000));
	fx_put(rec, 5);
	mock_destroy(m);
	rq_ioc_put(a);
}

/*
 * With nothing of the other contexts held, @b reads at 500000 as rec[nr - 1]:
 * held at once unless bfq is @idling, held once slice_idle (8 ms) is past
 * either way; then completed, and rec[0, nr) waited for and put.
 */
static void other_context_read(struct mock_dev *m, struct fx_rec *rec, unsigned nr,
			       struct rq_io_context *b, bool idling)
{
	submit_read(m, &rec[nr - 1], b, 500000, 0);
	assert_int_equal(mock_nr_held(m), idling ? 0 : 1);
	vclock_advance(20 * 1000 * 1000ull);
	assert_int_equal(mock_nr_held(m), 1);
	mock_complete_one(m, 0, RQ_STS_OK);
	assert_true(fx_wait(rec, nr, 10000));
	fx_put(rec, nr);
}

/*
 * A run's seek history goes in arrival order, as one-by-one inserts
 * (sched/bfq.c, bfqq_update_seek_run()): 16 reads alternating between two
 * areas 100000 sectors apart seek at every arrival (seeky: not idled for,
 * so another context's read goes at once after the last completes), though
 * sorted they are two sequential streams; 16 reads 16 sectors apart do not
 * seek (idled for: the other read waits for slice_idle).
 */
static void test_run_seek_history(void **state)
{
	(void)state;
	for (unsigned seeky = 0; seeky < 2; seeky++) {
		struct rq_io_context *a = rq_ioc_create(0), *b = rq_ioc_create(0);
		struct mock_dev *m = make_dev();
		static struct fx_rec rec[17];
		uint64_t run[16];

		for (unsigned i = 0; i < 16; i++)
			run[i] = seeky ? (i & 1) * 100000ull + (i / 2) * 16 : 1000 + i * 16ull;
		submit_run(m, rec, a, run, 16);
		for (unsigned i = 0; i < 16; i++) {
			assert_true(mock_nr_held(m) >= 1);
			mock_complete_one(m, 0, RQ_STS_OK);
		}
		other_context_read(m, rec, 17, b, !seeky);
		mock_destroy(m);
		rq_ioc_put(a);
		rq_ioc_put(b);
	}
}

/*
 * A run's seek bits go into the history all at once (sched/bfq.c,
 * bfqq_update_seek_run()): the run's first request is measured against
 * the queue's last end, not against anything of the run.  Eight runs of 4
 * reads, each 16 sectors after the one before, far from sector 0: no seek
 * anywhere, so the queue is idled for (another context's read waits for
 * slice_idle).  Fails if the first request's place in the run's bits is
 * not cleared (its distance from sector 0 counted as a seek: eight seeks
 * in the last 32 arrivals, seeky).
 */
static void test_run_seek_history_runs(void **state)
{
	struct rq_io_context *a = rq_ioc_create(0), *b = rq_ioc_create(0);
	struct mock_dev *m = make_dev();
	static struct fx_rec rec[8 * 4 + 1];
	uint64_t run[4];

	(void)state;
	for (unsigned r = 0; r < 8; r++) {
		for (unsigned i = 0; i < 4; i++)
			run[i] = 100000 + (r * 4 + i) * 16ull;
		submit_run(m, rec + r * 4, a, run, 4);
		for (unsigned i = 0; i < 4; i++) {
			assert_true(mock_nr_held(m) >= 1);
			mock_complete_one(m, 0, RQ_STS_OK);
		}
	}
	other_context_read(m, rec, 8 * 4 + 1, b, true);
	mock_destroy(m);
	rq_ioc_put(a);
	rq_ioc_put(b);
}

/*
 * A run's seek bits at the threshold (sched/bfq.c, seek_far_run()): 16
 * reads of 4 KiB, each starting BFQ_SEEK_THR (800) sectors from the end
 * of the one before, after it or before it, seek nowhere (idled for: the
 * other context's read waits); 801 sectors away, every one seeks (seeky:
 * the other read goes at once).  Fails if the compare counts 800 as a seek
 * or misses 801, in either direction.
 */
static void test_run_seek_threshold(void **state)
{
	(void)state;
	for (unsigned c = 0; c < 4; c++) {
		struct rq_io_context *a = rq_ioc_create(0), *b = rq_ioc_create(0);
		struct mock_dev *m = make_dev();
		static struct fx_rec rec[17];
		uint64_t run[16], gap = c & 1 ? 801 : 800;

		for (unsigned i = 0; i < 16; i++) /* 8 sectors a read */
			run[i] = c & 2 ? 100000 - i * (gap - 8) : 100000 + i * (8 + gap);
		submit_run(m, rec, a, run, 16);
		for (unsigned i = 0; i < 16; i++) {
			assert_true(mock_nr_held(m) >= 1);
			mock_complete_one(m, 0, RQ_STS_OK);
		}
		other_context_read(m, rec, 17, b, gap == 800);
		mock_destroy(m);
		rq_ioc_put(a);
		rq_ioc_put(b);
	}
}

/*
 * bfq idles for a sync queue whose last request completed, waiting for its
 * context's next one; once the application releases the context (as a
 * process exits in the kernel: bfq_exit_icq -> bfq_exit_bfqq expires it),
 * the idling ends: another context's request goes at once, not after
 * slice_idle.  While the context lives, it waits.
 */
static void test_released_context_ends_idling(void **state)
{
	(void)state;
	for (unsigned release = 0; release < 2; release++) {
		struct rq_io_context *a = rq_ioc_create(0), *b = rq_ioc_create(0);
		struct mock_dev *m = make_dev();
		static struct fx_rec rec[2];

		submit_read(m, &rec[0], a, 1000, 0);
		complete_in_order(m, (const uint64_t[]){ 1000 }, 1); /* idling on a now */
		if (release)
			rq_ioc_put(a);
		other_context_read(m, rec, 2, b, !release);
		mock_destroy(m);
		if (!release)
			rq_ioc_put(a);
		rq_ioc_put(b);
	}
}

/*
 * Serve the disk one request at a time (1 ms of virtual time passes when
 * bfq holds everything back) until the request at @sector is the one
 * with the disk; return how many requests went before it (@limit: never).
 */
static unsigned served_before(struct mock_dev *m, uint64_t sector, unsigned limit)
{
	unsigned n = 0;

	for (unsigned spins = 0; n < limit && spins < 100000; spins++) {
		if (!mock_nr_held(m)) {
			vclock_advance(1000000);
			rq_mq_run_hw_queues(m->q, false);
			continue;
		}
		if (mock_held(m, 0)->sector == sector)
			return n;
		mock_complete_one(m, 0, RQ_STS_OK);
		fx_service_due();
		n++;
	}
	return limit;
}

/* Complete everything until the @n records ended (idle windows pass on the virtual clock). */
static void drain_recs(struct mock_dev *m, struct fx_rec *recs, unsigned n)
{
	for (unsigned spins = 0; spins < 100000; spins++) {
		unsigned left = 0;

		for (unsigned i = 0; i < n; i++)
			left += !fx_done(&recs[i]);
		if (!left)
			return;
		if (mock_nr_held(m)) {
			mock_complete_one(m, 0, RQ_STS_OK);
			fx_service_due();
		} else {
			vclock_advance(1000000);
			rq_mq_run_hw_queues(m->q, false);
		}
	}
	fail_msg("requests still in flight after draining");
}

#define NR_BULK 48u
#define FAR_SECTOR 4000000ull

/*
 * On @m (low_latency off): NR_BULK 4 KiB @op requests of @a (the first
 * goes to the disk at once: @a's turn is on), then a read of @b far away.
 * Return how many requests the disk served before that read; everything
 * is drained and @m destroyed.
 */
static unsigned bulk_then_read(struct mock_dev *m, struct rq_io_context *a, unsigned op,
			       struct rq_io_context *b)
{
	static struct fx_rec rec[NR_BULK + 1];
	unsigned before;

	set_attr(m, "low_latency", "0");
	for (unsigned i = 0; i < NR_BULK; i++)
		submit_op(m, &rec[i], a, op, 1000 + 8 * i, RQ_BIO_NOMERGE);
	assert_int_equal(mock_nr_held(m), 1);
	submit_read(m, &rec[NR_BULK], b, FAR_SECTOR, RQ_BIO_NOMERGE);
	before = served_before(m, FAR_SECTOR, NR_BULK + 1);
	drain_recs(m, rec, NR_BULK + 1);
	fx_put(rec, NR_BULK + 1);
	mock_destroy(m);
	return before;
}

/*
 * Issue 14: an async writer in service, with NR_BULK writes queued and a
 * budget far larger, and a reader's request arrives.  The writer's queue
 * is not one the kernel idles for (bfq_better_to_idle() is false for
 * async queues), so the reader's arrival ends its turn (BFQQE_PREEMPTED):
 * the read goes to the disk after at most the writes already handed out
 * (the one on the disk and the one the core holds), not after the whole
 * batch.  low_latency is off: the reader is not raised, same class, same
 * weight; only the in-service queue's kind decides.
 */
static void test_async_writer_preempted(void **state)
{
	struct rq_io_context *w = rq_ioc_create(0), *r = rq_ioc_create(0);
	unsigned before;

	(void)state;
	before = bulk_then_read(make_dev(), w, RQ_OP_WRITE, r);
	print_message("async writer in service: read served after %u writes\n", before);
	assert_true(before <= 2);
	rq_ioc_put(w);
	rq_ioc_put(r);
}

/*
 * A sequential sync reader in service (a queue bfq protects by idling)
 * with NR_BULK reads queued.  A read of a context of the same class and
 * weight waits for the end of its turn (it had all its reads served
 * first); a read of an RT context ends the turn at once (higher class:
 * bfq_bfqq_higher_class_or_weight()).
 */
static void test_rt_reader_preempts(void **state)
{
	(void)state;
	for (unsigned rt = 0; rt < 2; rt++) {
		struct rq_io_context *a = rq_ioc_create(0);
		struct rq_io_context *b =
			rq_ioc_create(rt ? RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_RT, 4) : 0);
		unsigned before = bulk_then_read(make_dev(), a, RQ_OP_READ, b);

		print_message("sequential BE reader in service, %s read: served after %u\n",
			      rt ? "RT" : "BE", before);
		if (rt)
			assert_true(before <= 2);
		else
			assert_int_equal(before, NR_BULK);
		rq_ioc_put(a);
		rq_ioc_put(b);
	}
}

/*
 * Groups (the kernel's bfq_bfqq_higher_class_or_weight() and
 * next_queue_may_preempt()): a sequential reader of a group of weight 100
 * in service, 48 reads queued.  A read of a context in a group of weight
 * 1000 preempts it (queues of different groups compare their groups'
 * weights).  A read of an RT context of the SAME group does not: the root
 * group would choose that group again anyway, so the RT queue waits for
 * the turn to end, then goes first inside the group.
 */
static void test_group_preemption(void **state)
{
	(void)state;
	for (unsigned same = 0; same < 2; same++) {
		struct rq_io_group *g1 = rq_iog_create(100), *g2 = rq_iog_create(1000);
		struct rq_io_context *a = rq_ioc_create(0);
		struct rq_io_context *b =
			rq_ioc_create(same ? RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_RT, 4) : 0);
		unsigned before;

		assert_int_equal(rq_ioc_set_group(a, g1), 0);
		assert_int_equal(rq_ioc_set_group(b, same ? g1 : g2), 0);
		before = bulk_then_read(make_dev(), a, RQ_OP_READ, b);
		print_message("group 100 in service, %s: served after %u\n",
			      same ? "RT of the same group" : "group 1000", before);
		if (same)
			assert_int_equal(before, NR_BULK);
		else
			assert_true(before <= 2);
		rq_ioc_put(a);
		rq_ioc_put(b);
		rq_iog_put(g1);
		rq_iog_put(g2);
	}
}

/*
 * An IDLE-class queue is not idled for (bfq_better_to_idle()): when its
 * read completes, another IDLE context's read goes at once; a BE queue in
 * the same place (another BE context's read arriving) keeps the disk idle
 * for slice_idle, waiting for its next.
 */
static void test_idle_class_not_idled(void **state)
{
	(void)state;
	for (unsigned idle = 0; idle < 2; idle++) {
		uint16_t prio = idle ? RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_IDLE, 0) : 0;
		struct rq_io_context *a = rq_ioc_create(prio), *b = rq_ioc_create(prio);
		struct mock_dev *m = make_dev();
		static struct fx_rec rec[2];

		set_attr(m, "low_latency", "0");
		submit_read(m, &rec[0], a, 1000, 0);
		complete_in_order(m, (const uint64_t[]){ 1000 }, 1);
		fx_service_due();
		submit_read(m, &rec[1], b, FAR_SECTOR, 0);
		assert_int_equal(mock_nr_held(m), idle ? 1 : 0);
		drain_recs(m, rec, 2);
		fx_put(rec, 2);
		mock_destroy(m);
		rq_ioc_put(a);
		rq_ioc_put(b);
	}
}

/* Records of @recs[from, to) that ended with @status. */
static unsigned count_status(struct fx_rec *recs, unsigned from, unsigned to, int status)
{
	unsigned n = 0;

	for (unsigned i = from; i < to; i++)
		if (fx_done(&recs[i]) && recs[i].status == status)
			n++;
	return n;
}

/*
 * bfq_limit_depth (the kernel's async_depths): of nr_requests 128
 * scheduler tags async writes may hold 64 (1/2), sync writes 96 (3/4),
 * reads all; while a raised queue is busy async writes only 24 (3/16).
 * NOWAIT bios that find no tag they may use end with AGAIN.
 */
static void test_async_depth(void **state)
{
	struct rq_io_context *w = rq_ioc_create(0), *s = rq_ioc_create(0), *r = rq_ioc_create(0);
	struct mock_dev *m = make_dev();
	static struct fx_rec rec[240];
	unsigned n = 0;

	(void)state;
	set_attr(m, "low_latency", "0"); /* no raising in the first part */
	for (unsigned i = 0; i < 100; i++, n++)
		submit_op(m, &rec[n], w, RQ_OP_WRITE, 1000 + 8 * n, RQ_BIO_NOMERGE | RQ_BIO_NOWAIT);
	assert_int_equal(count_status(rec, 0, 100, RQ_STS_AGAIN), 36);
	for (unsigned i = 0; i < 40; i++, n++)
		submit_op(m, &rec[n], s, RQ_OP_WRITE, 1000 + 8 * n,
			  RQ_BIO_NOMERGE | RQ_BIO_NOWAIT | RQ_BIO_SYNC);
	assert_int_equal(count_status(rec, 100, 140, RQ_STS_AGAIN), 8);
	for (unsigned i = 0; i < 32; i++, n++)
		submit_read(m, &rec[n], r, 1000 + 8 * n, RQ_BIO_NOMERGE | RQ_BIO_NOWAIT);
	assert_int_equal(count_status(rec, 140, 172, RQ_STS_AGAIN), 0);
	drain_recs(m, rec, n);

	/* a raised reader (low_latency, a new context) is busy: 3/16 for async */
	set_attr(m, "low_latency", "1");
	{
		struct rq_io_context *young = rq_ioc_create(0);

		submit_read(m, &rec[n++], young, FAR_SECTOR, RQ_BIO_NOMERGE);
		assert_int_equal(mock_nr_held(m), 1);
		for (unsigned i = 0; i < 40; i++, n++)
			submit_op(m, &rec[n], w, RQ_OP_WRITE, 1000 + 8 * n,
				  RQ_BIO_NOMERGE | RQ_BIO_NOWAIT);
		assert_int_equal(count_status(rec, n - 40, n, RQ_STS_AGAIN), 16);
		drain_recs(m, rec, n);
		rq_ioc_put(young);
	}
	fx_put(rec, n);
	mock_destroy(m);
	rq_ioc_put(w);
	rq_ioc_put(s);
	rq_ioc_put(r);
}

/* Submit a 4 KiB read at @sector for context @ioc into @rec. */
static void submit_ioc(struct mock_dev *m, struct fx_rec *rec, struct rq_io_context *ioc,
		       uint64_t sector)
{
	struct rq_bio *bio = fx_bio(rec, RQ_OP_READ, sector, databuf, BS);

	bio->ioc = ioc;
	rq_submit_bio(m->q, bio);
}

/* End every request the driver holds in one driver batch; return how many. */
static unsigned end_held_batch(struct mock_dev *m)
{
	struct rq_request *rqs[64];
	unsigned n = 0;

	while (mock_nr_held(m) && n < 64)
		rqs[n++] = mock_take_held(m, 0);
	assert_int_equal(rq_mq_end_requests(rqs, n, RQ_STS_OK), n);
	return n;
}

/*
 * Completions ended in driver batches (bfq applies a batch's accounting
 * in one lock hold at its end) are each accounted exactly once, in time:
 * on a device taking 8 requests, rounds of 12 reads of two contexts send
 * 8, and ending those 8 in one batch lets exactly the other 4 go, round
 * after round (a completion lost would leave the in-flight count high and
 * send fewer; one counted twice stops dispatch).  And the turn logic runs
 * per completion inside the batch: a sequential reader whose 4 requests
 * end in one batch keeps its turn (the idle window opens at the batch's
 * end, with the run that ends it), so another context's read, queued
 * meanwhile, goes when the window, slice_idle, has passed: not before,
 * and not later.
 */
static void test_batch_completions(void **state)
{
	struct mock_dev *m = make_dev_depth(8);
	struct rq_io_context *a = rq_ioc_create(0), *b = rq_ioc_create(0);
	static struct fx_rec rec[12];

	assert_int_equal(rq_queue_attr_set(m->q, "nomerges", "2"), 0);
	assert_int_equal(rq_queue_attr_set(m->q, "iosched/low_latency", "0"), 0);
	assert_int_equal(rq_queue_attr_set(m->q, "iosched/slice_idle_us", "0"), 0);
	for (unsigned round = 0; round < 40; round++) {
		for (unsigned i = 0; i < 12; i++)
			submit_ioc(m, &rec[i], i % 2 ? a : b, (round * 12 + i) * 4096ull);
		assert_int_equal(mock_nr_held(m), 8);
		assert_int_equal(end_held_batch(m), 8);
		assert_int_equal(mock_nr_held(m), 4);
		assert_int_equal(end_held_batch(m), 4);
		assert_int_equal(mock_nr_held(m), 0);
		assert_true(fx_wait(rec, 12, 1000));
		fx_put(rec, 12);
	}
	/* a new context: its seek history is its own sequential reads */
	rq_ioc_put(a);
	a = rq_ioc_create(0);
	assert_int_equal(rq_queue_attr_set(m->q, "iosched/slice_idle_us", "8000"), 0);
	for (unsigned i = 0; i < 4; i++)
		submit_ioc(m, &rec[i], a, 1000000 + i * BIO_SECTORS);
	assert_int_equal(mock_nr_held(m), 4);
	/* b waits while a's turn has requests out */
	submit_ioc(m, &rec[4], b, 4000000);
	assert_int_equal(mock_nr_held(m), 4);
	assert_int_equal(end_held_batch(m), 4);
	assert_int_equal(mock_nr_held(m), 0);
	vclock_advance(4000000);
	assert_int_equal(mock_nr_held(m), 0);
	vclock_advance(4000000);
	assert_int_equal(mock_nr_held(m), 1);
	assert_int_equal(end_held_batch(m), 1);
	assert_true(fx_wait(rec, 5, 1000));
	fx_put(rec, 5);
	mock_destroy(m);
	rq_ioc_put(a);
	rq_ioc_put(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tunables),
		cmocka_unit_test(test_weights_3_to_1),
		cmocka_unit_test(test_weights_3_to_1_deep),
		cmocka_unit_test(test_prio_weights),
		cmocka_unit_test(test_groups_10_to_1),
		cmocka_unit_test(test_idling_keeps_sequential),
		cmocka_unit_test(test_weight_raising),
		cmocka_unit_test(test_strict_one_in_flight),
		cmocka_unit_test(test_next_from_start),
		cmocka_unit_test(test_insert_fills_merge_cache),
		cmocka_unit_test(test_run_sorted_order),
		cmocka_unit_test(test_drain_tie_goes_up),
		cmocka_unit_test(test_drain_up_meta_below),
		cmocka_unit_test(test_insert_merge_own_context),
		cmocka_unit_test(test_run_hash_back_merge),
		cmocka_unit_test(test_run_tree_front_merge),
		cmocka_unit_test(test_run_seek_history),
		cmocka_unit_test(test_run_seek_history_runs),
		cmocka_unit_test(test_run_seek_threshold),
		cmocka_unit_test(test_released_context_ends_idling),
		cmocka_unit_test(test_async_writer_preempted),
		cmocka_unit_test(test_rt_reader_preempts),
		cmocka_unit_test(test_group_preemption),
		cmocka_unit_test(test_idle_class_not_idled),
		cmocka_unit_test(test_async_depth),
		cmocka_unit_test(test_batch_completions),
		cmocka_unit_test(test_plug_one_clock_read),
	};

	/* before any queue: no service thread (see the top) */
	if (rq_service_manual()) {
		fprintf(stderr, "rq_service_manual failed\n");
		return 1;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
