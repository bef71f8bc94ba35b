/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The simulated disk: the model (seek grows with distance, rotation follows
 * the clock alone, transfer time proportional to length, slower inside,
 * sequential work loses no revolution), a mixed workload that ends every bio
 * exactly once under every registered scheduler of either front end
 * (multi-queue and single-queue), identical results from two virtual-clock
 * runs on either, NCQ reordering, and real-time smoke runs.  Nothing here
 * depends on wall-clock timing except the smoke runs' generous bound.
 *
 * The process drives the library's service itself (rq_service_manual(),
 * before any queue): the virtual-clock devices do the service work in
 * their dispatch windows, on the virtual clock, so every scheduler's runs
 * repeat exactly, whatever the speed of the build; the real-clock smoke
 * runs call rq_service_run() while they wait.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librequest/librequest.h>

#include "hddsim.h"

/* ---------------------------------------------------------------- model */

static void test_seek_monotone(void **state)
{
	struct hddsim_geom g;
	uint64_t prev = 0, d;

	(void)state;
	assert_int_equal(hddsim_geom_init(&g, NULL), 0);
	assert_int_equal(hddsim_seek_ns(&g, 1000, 1000), 0);
	assert_int_equal(hddsim_seek_ns(&g, 1000, 1001), g.m.settle_ns);
	assert_int_equal(hddsim_seek_ns(&g, 1001, 1000), g.m.settle_ns);
	for (d = 1; d < g.nr_tracks; d = d * 3 / 2 + 1) {
		uint64_t s = hddsim_seek_ns(&g, 0, d);

		assert_true(s > prev || (d == 1 && s == g.m.settle_ns));
		assert_true(s <= g.m.full_stroke_ns);
		prev = s;
	}
	assert_int_equal(hddsim_seek_ns(&g, 0, g.nr_tracks - 1), g.m.full_stroke_ns);
	/* symmetric */
	assert_int_equal(hddsim_seek_ns(&g, 5000, 90000), hddsim_seek_ns(&g, 90000, 5000));
}

static void test_rotation_deterministic(void **state)
{
	struct hddsim_geom g;
	struct hddsim_pos p;
	uint64_t t, w;

	(void)state;
	assert_int_equal(hddsim_geom_init(&g, NULL), 0);
	assert_int_equal(g.rev_ns, 60000000000ull / 7200);
	hddsim_locate(&g, 123456789, &p);
	for (t = 1000000000ull; t < 1000000000ull + 3 * g.rev_ns; t += 777777) {
		w = hddsim_rotation_ns(&g, t, &p);
		assert_true(w < g.rev_ns);
		assert_int_equal(w, hddsim_rotation_ns(&g, t, &p));
		assert_int_equal(w, hddsim_rotation_ns(&g, t + 5 * g.rev_ns, &p));
		/* arriving exactly then costs nothing */
		assert_int_equal(hddsim_rotation_ns(&g, t + w, &p), 0);
	}
}

static void test_sequential_no_revolution(void **state)
{
	struct hddsim_timing t1, t2;
	struct hddsim_geom g;
	struct hddsim_pos p;
	uint64_t s, end;

	(void)state;
	assert_int_equal(hddsim_geom_init(&g, NULL), 0);
	/* 256 sectors, then the next 256, across a track boundary too */
	for (s = 0; s < 20000; s += 256) {
		hddsim_locate(&g, s, &p);
		end = 5000000000ull + hddsim_access_ns(&g, p.track, 5000000000ull, s, 256, &t1);
		hddsim_locate(&g, s + 255, &p);
		hddsim_access_ns(&g, p.track, end, s + 256, 256, &t2);
		assert_int_equal(t2.rotation_ns, 0);
		assert_true(t2.seek_ns == 0 || t2.seek_ns == g.m.settle_ns);
	}
}

static void test_transfer_proportional(void **state)
{
	struct hddsim_geom g;
	uint64_t one, ten, last_zone;
	uint32_t spt;

	(void)state;
	assert_int_equal(hddsim_geom_init(&g, NULL), 0);
	spt = g.spt[0];
	one = hddsim_transfer_ns(&g, 0, 100);
	ten = hddsim_transfer_ns(&g, 0, 1000);
	assert_true(one > 0);
	assert_true(ten >= 10 * one - 10 && ten <= 10 * one + 10);
	/* a whole track is one revolution; two tracks add one settle */
	assert_int_equal(hddsim_transfer_ns(&g, 0, spt), g.rev_ns);
	assert_int_equal(hddsim_transfer_ns(&g, 0, 2 * spt), 2 * g.rev_ns + g.m.settle_ns);
	/* inner zones hold fewer sectors per track: slower */
	last_zone = g.zone_start[g.m.nr_zones - 1];
	assert_true(hddsim_transfer_ns(&g, last_zone, 1000) > ten);
	/* unzoned: the same everywhere */
	{
		struct hddsim_model m = { .nr_zones = 1 };
		struct hddsim_geom u;

		assert_int_equal(hddsim_geom_init(&u, &m), 0);
		assert_int_equal(hddsim_transfer_ns(&u, 0, 1000),
				 hddsim_transfer_ns(&u, u.m.capacity_sectors - 5000, 1000));
	}
	{
		struct hddsim_model bad = { .spt_outer = 100, .spt_inner = 200 };

		assert_int_equal(hddsim_geom_init(&g, &bad), -EINVAL);
	}
}

/* ------------------------------------------------------------- workload */

#define W_STREAMS 5
#define W_PER_STREAM 120

struct wbio {
	struct rq_bio bio;
	struct hddsim_dev *dev;
	int ends;
	uint64_t done_ns;
	int *inflight;
};

struct wstream {
	bool sequential;
	unsigned op;
	uint32_t bytes;
	uint64_t next;
	uint64_t rng;
	unsigned issued;
	int inflight;
	struct rq_io_context *ioc;
	struct wbio bios[W_PER_STREAM];
};

static char wbuf[256 * 1024] __attribute__((aligned(4096)));

static void w_end_io(struct rq_bio *bio)
{
	struct wbio *wb = bio->private_data;

	wb->ends++;
	wb->done_ns = hddsim_now_ns(wb->dev);
	(*wb->inflight)--;
}

/*
 * One sequential reader, one sequential writer (2 in flight), three random
 * readers; W_PER_STREAM bios each.  Returns a digest of every completion
 * time; checks every bio ended exactly once with OK.
 */
static uint64_t run_workload_front(enum hddsim_front front, const char *sched, unsigned ncq,
				   uint64_t *elapsed)
{
	struct wstream *ws = calloc(W_STREAMS, sizeof(*ws));
	struct hddsim_config cfg;
	struct hddsim_dev *dev;
	struct rq_queue *q;
	uint64_t digest = 1469598103934665603ull, start;
	unsigned i, j, left;

	assert_non_null(ws);
	hddsim_config_default(&cfg);
	cfg.front = front;
	cfg.sched = sched;
	cfg.ncq_depth = ncq;
	assert_int_equal(hddsim_create(&cfg, &dev), 0);
	q = hddsim_queue(dev);
	assert_true(rq_queue_is_sq(q) == (front == HDDSIM_FRONT_SQ));
	start = hddsim_now_ns(dev);
	for (i = 0; i < W_STREAMS; i++) {
		ws[i].sequential = i < 2;
		ws[i].op = i == 1 ? RQ_OP_WRITE : RQ_OP_READ;
		ws[i].bytes = ws[i].sequential ? 128 * 1024 : 4096;
		ws[i].next = (uint64_t)(i + 1) << 24;
		ws[i].rng = 88172645463325252ull + i;
		ws[i].ioc = rq_ioc_create(0);
		assert_non_null(ws[i].ioc);
	}
	for (;;) {
		left = 0;
		for (i = 0; i < W_STREAMS; i++) {
			struct wstream *s = &ws[i];
			int depth = s->op == RQ_OP_WRITE ? 2 : 1;

			while (s->inflight < depth && s->issued < W_PER_STREAM) {
				struct wbio *wb = &s->bios[s->issued++];
				uint64_t sector;

				if (s->sequential) {
					sector = s->next;
					s->next += s->bytes >> 9;
				} else {
					s->rng ^= s->rng << 13;
					s->rng ^= s->rng >> 7;
					s->rng ^= s->rng << 17;
					sector = (s->rng % ((1ull << 31) / 8 - 1)) * 8;
				}
				rq_bio_init(&wb->bio, NULL, 1);
				wb->bio.op = (uint8_t)s->op;
				wb->bio.iter.sector = sector;
				assert_int_equal(rq_bio_add_vec(&wb->bio, wbuf, s->bytes), 0);
				wb->bio.end_io = w_end_io;
				wb->bio.private_data = wb;
				wb->bio.ioc = s->ioc;
				wb->dev = dev;
				wb->inflight = &s->inflight;
				s->inflight++;
				rq_submit_bio(q, &wb->bio);
			}
			left += (W_PER_STREAM - s->issued) + (unsigned)s->inflight;
		}
		if (!left)
			break;
		if (!hddsim_advance(dev))
			hddsim_advance_to(dev, hddsim_now_ns(dev) + 1000000);
		/* a simulated hour is far more than this needs: no hang */
		assert_true(hddsim_now_ns(dev) - start < 3600ull * 1000000000ull);
	}
	for (i = 0; i < W_STREAMS; i++) {
		for (j = 0; j < W_PER_STREAM; j++) {
			struct wbio *wb = &ws[i].bios[j];

			assert_int_equal(wb->ends, 1);
			assert_int_equal(wb->bio.status, RQ_STS_OK);
			digest = (digest ^ wb->done_ns) * 1099511628211ull;
		}
		rq_ioc_put(ws[i].ioc);
	}
	if (elapsed)
		*elapsed = hddsim_now_ns(dev) - start;
	hddsim_destroy(dev);
	free(ws);
	return digest;
}

static uint64_t run_workload(const char *sched, unsigned ncq, uint64_t *elapsed)
{
	return run_workload_front(HDDSIM_FRONT_MQ, sched, ncq, elapsed);
}

/*
 * The schedulers registered in this build for a queue of @front, as its
 * "scheduler" attribute lists them (multi-queue: "none" first).
 */
static unsigned list_scheds_front(enum hddsim_front front, char names[][32], unsigned max)
{
	struct hddsim_config cfg;
	struct hddsim_dev *dev;
	char buf[512], *tok, *save = NULL;
	unsigned n = 0;

	hddsim_config_default(&cfg);
	cfg.front = front;
	cfg.sched = front == HDDSIM_FRONT_SQ ? "noop" : "none";
	assert_int_equal(hddsim_create(&cfg, &dev), 0);
	assert_true(rq_queue_attr_get(hddsim_queue(dev), "scheduler", buf, sizeof(buf)) > 0);
	hddsim_destroy(dev);
	for (tok = strtok_r(buf, " \n[]", &save); tok && n < max;
	     tok = strtok_r(NULL, " \n[]", &save))
		snprintf(names[n++], 32, "%s", tok);
	return n;
}

static unsigned list_scheds(char names[][32], unsigned max)
{
	return list_scheds_front(HDDSIM_FRONT_MQ, names, max);
}

static void test_workload_every_bio_once(void **state)
{
	char names[16][32];
	unsigned i, n = list_scheds(names, 16);

	(void)state;
	assert_true(n >= 1);
	for (i = 0; i < n; i++) {
		print_message("  workload under %s\n", names[i]);
		run_workload(names[i], 1, NULL);
	}
}

static void pin_to_one_cpu(void)
{
	cpu_set_t set;
	int cpu = sched_getcpu();

	CPU_ZERO(&set);
	CPU_SET(cpu < 0 ? 0 : cpu, &set);
	assert_int_equal(sched_setaffinity(0, sizeof(set), &set), 0);
}

/*
 * Two virtual-clock runs give identical results, for every scheduler: the
 * delayed runs kyber (waiting for tokens) and bfq (idling) ask for come at
 * a virtual moment (application-driven service, see the top), not when a
 * service thread happens to wake, so a slow build (sanitizers) repeats too.
 */
static void test_virtual_clock_deterministic(void **state)
{
	char names[16][32];
	unsigned i, n = list_scheds(names, 16);

	(void)state;
	/* software queues (and kyber's lists) follow the submitting CPU */
	pin_to_one_cpu();
	for (i = 0; i < n; i++) {
		uint64_t e1, e2, d1 = run_workload(names[i], 1, &e1);
		uint64_t d2 = run_workload(names[i], 1, &e2);

		print_message("  %s: %s\n", names[i], d1 == d2 ? "same" : "DIFFERENT");
		assert_int_equal(d1, d2);
		assert_int_equal(e1, e2);
	}
}

static void test_sq_workload_every_bio_once(void **state)
{
	char names[16][32];
	unsigned i, n = list_scheds_front(HDDSIM_FRONT_SQ, names, 16);
	bool noop = false;

	(void)state;
	/* noop is built in; every single-queue scheduler, one drive command
	   at a time and with a queueing drive */
	for (i = 0; i < n; i++) {
		print_message("  single-queue workload under %s\n", names[i]);
		assert_string_not_equal(names[i], "none");
		noop |= !strcmp(names[i], "noop");
		run_workload_front(HDDSIM_FRONT_SQ, names[i], 1, NULL);
		run_workload_front(HDDSIM_FRONT_SQ, names[i], 4, NULL);
	}
	assert_true(noop);
}

/*
 * Two virtual-clock runs of each single-queue scheduler give identical
 * results, cfq's too: with application-driven service its idle timer and
 * the fallback that ends an idle window on the clock delayed runs follow
 * (sched-cfq.md) are both on the virtual clock, so a slow run (a sanitizer
 * build, a loaded machine) ends every window at the same virtual moment.
 */
static void test_sq_virtual_clock_deterministic(void **state)
{
	char names[16][32];
	unsigned i, n = list_scheds_front(HDDSIM_FRONT_SQ, names, 16);

	(void)state;
	pin_to_one_cpu();
	for (i = 0; i < n; i++) {
		unsigned ncq;

		for (ncq = 1; ncq <= 4; ncq += 3) {
			uint64_t e1, e2, d1, d2;

			d1 = run_workload_front(HDDSIM_FRONT_SQ, names[i], ncq, &e1);
			d2 = run_workload_front(HDDSIM_FRONT_SQ, names[i], ncq, &e2);
			print_message("  sq %s, ncq %u: %s\n", names[i], ncq,
				      d1 == d2 ? "same" : "DIFFERENT");
			assert_int_equal(d1, d2);
			assert_int_equal(e1, e2);
		}
	}
}

static void test_sq_other_front_scheds_refused(void **state)
{
	struct hddsim_config cfg;
	struct hddsim_dev *dev = NULL;

	(void)state;
	hddsim_config_default(&cfg);
	cfg.front = HDDSIM_FRONT_SQ;
	cfg.sched = "none"; /* a multi-queue name only */
	assert_int_equal(hddsim_create(&cfg, &dev), -EINVAL);
	cfg.front = HDDSIM_FRONT_MQ;
	cfg.sched = "noop"; /* a single-queue name only */
	assert_int_equal(hddsim_create(&cfg, &dev), -EINVAL);
	cfg.front = (enum hddsim_front)7;
	cfg.sched = NULL;
	assert_int_equal(hddsim_create(&cfg, &dev), -EINVAL);
	/* the library's default for a single-queue queue */
	cfg.front = HDDSIM_FRONT_SQ;
	assert_int_equal(hddsim_create(&cfg, &dev), 0);
	assert_true(rq_queue_is_sq(hddsim_queue(dev)));
	hddsim_destroy(dev);
}

static void test_ncq_reorders(void **state)
{
	uint64_t e1, e4;

	(void)state;
	/* shortest positioning time first among 4 queued: done sooner */
	run_workload("none", 1, &e1);
	run_workload("none", 4, &e4);
	assert_true(e4 < e1);
}

static void test_one_virtual_device(void **state)
{
	struct hddsim_config cfg;
	struct hddsim_dev *a, *b = NULL;

	(void)state;
	hddsim_config_default(&cfg);
	cfg.sched = "none";
	assert_int_equal(hddsim_create(&cfg, &a), 0);
	assert_int_equal(rq_clock_ns(), hddsim_now_ns(a));
	assert_int_equal(hddsim_create(&cfg, &b), -EBUSY);
	hddsim_advance_to(a, hddsim_now_ns(a) + 12345);
	assert_int_equal(rq_clock_ns(), hddsim_now_ns(a));
	assert_false(hddsim_advance(a));
	hddsim_destroy(a);
	assert_int_equal(hddsim_create(&cfg, &b), 0);
	hddsim_destroy(b);
}

/* ------------------------------------------------------------ real time */

static atomic_int real_done;

static void real_end_io(struct rq_bio *bio)
{
	if (bio->status == RQ_STS_OK)
		atomic_fetch_add(&real_done, 1);
	rq_bio_put(bio);
}

static void real_clock_run(enum hddsim_front front, const char *sched)
{
	struct hddsim_config cfg;
	struct hddsim_stats st;
	struct hddsim_dev *dev;
	struct timespec t0, t;
	unsigned i;

	hddsim_config_default(&cfg);
	cfg.clock = HDDSIM_CLOCK_REAL;
	cfg.front = front;
	cfg.sched = sched;
	/* a quick disk: the run takes milliseconds */
	cfg.model.capacity_sectors = 1 << 20;
	cfg.model.rpm = 15000;
	cfg.model.settle_ns = 20000;
	cfg.model.full_stroke_ns = 200000;
	cfg.model.spt_outer = 20000;
	cfg.model.spt_inner = 10000;
	assert_int_equal(hddsim_create(&cfg, &dev), 0);
	atomic_store(&real_done, 0);
	for (i = 0; i < 64; i++) {
		struct rq_bio *bio = rq_bio_alloc(1);

		assert_non_null(bio);
		bio->op = i & 1 ? RQ_OP_WRITE : RQ_OP_READ;
		bio->iter.sector = (uint64_t)(i * 7919 % 1000) * 1000;
		rq_bio_add_vec(bio, wbuf, 4096);
		bio->end_io = real_end_io;
		rq_submit_bio(hddsim_queue(dev), bio);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		/* no service thread: delayed runs (cfq idling) are ours to make */
		assert_true(rq_service_run() >= 0);
		sched_yield();
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (atomic_load(&real_done) < 64 && t.tv_sec - t0.tv_sec < 30);
	assert_int_equal(atomic_load(&real_done), 64);
	hddsim_get_stats(dev, &st);
	assert_int_equal(st.commands, 64);
	hddsim_destroy(dev);
}

static void test_real_clock_completes(void **state)
{
	(void)state;
	real_clock_run(HDDSIM_FRONT_MQ, "none");
}

static void test_sq_real_clock_completes(void **state)
{
	(void)state;
	/* cfq idles and has the queue run by a delayed run: rq_service_run() */
	real_clock_run(HDDSIM_FRONT_SQ, "noop");
	real_clock_run(HDDSIM_FRONT_SQ, "deadline");
	real_clock_run(HDDSIM_FRONT_SQ, "cfq");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_seek_monotone),
		cmocka_unit_test(test_rotation_deterministic),
		cmocka_unit_test(test_sequential_no_revolution),
		cmocka_unit_test(test_transfer_proportional),
		cmocka_unit_test(test_workload_every_bio_once),
		cmocka_unit_test(test_virtual_clock_deterministic),
		cmocka_unit_test(test_sq_workload_every_bio_once),
		cmocka_unit_test(test_sq_virtual_clock_deterministic),
		cmocka_unit_test(test_sq_other_front_scheds_refused),
		cmocka_unit_test(test_ncq_reorders),
		cmocka_unit_test(test_one_virtual_device),
		cmocka_unit_test(test_real_clock_completes),
		cmocka_unit_test(test_sq_real_clock_completes),
	};

	/* before any queue: see the top */
	if (rq_service_manual())
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
