/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The inline fast cases of submission and dispatch issue exactly what the
 * general path issues, in the same order (doc/architecture.md, "Fast
 * paths").
 *
 * The fast cases (rq_submit_bio()'s entry, mq_submit_plugged_none(),
 * mq_submit_plugged_sched(), sq_submit_plugged_fast(), the plug's chain
 * issue) run only while nothing observes the queue: a trace or iostats on
 * any queue of the process makes obs_active non-zero and sends every bio
 * down the general path, and a trace of the queue itself also turns off
 * the plug's chain issue (obs_on()).  So a blkparse check never sees the
 * fast cases.  This test does: each workload below is submitted, the same
 * bios in the same plugs at the same virtual times, three times through a
 * new queue of the scheduler named on the command line, over a recording
 * driver:
 *
 *   plain      nothing observed: the fast cases on
 *   bystander  iostats on on another queue: obs_active set, this queue
 *              itself not observed (its requests are made and ended as in
 *              the plain run), so only the gates on obs_active differ
 *   traced     a blktrace of this queue itself (files in a temporary
 *              directory): the general path with every event point on
 *
 * and the three records must be identical: every request the driver is
 * given (queue, operation, flags, priority, first sector, bytes, segments,
 * bios, the first bio, hw queue, queue_rq's last, queue_rq or queue_rqs),
 * in order, the order in which the bios end, and the queue's counters
 * (rq_queue_get_stats()).  On a difference it prints the first one and
 * runs the plain case once more, to tell a non-deterministic run from a
 * path that issues differently.  FASTPATH_ORDER_VERBOSE=1 prints what each
 * workload's plain run issued.
 *
 * Determinism: the library clock is virtual (fx_vclock_install()) and each
 * run starts on a whole second; there is no service thread
 * (rq_service_manual()), so the delayed runs, idle windows and expiries of
 * the schedulers happen on this thread when the test moves the clock; the
 * thread is pinned to one CPU, and moved between the first two it may use
 * at fixed bios where a workload asks for it (two hw queues); io contexts
 * are made anew for each run.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "fixtures.h"
#include "internal/queue.h"
#include "internal/trace.h"

#define US 1000ull
#define MS (1000ull * US)
#define SEC (1000ull * MS)

#define MAX_BIOS 256u
#define MAX_SEGS 4u
#define SEG_MAX (48u * 1024)           /* the largest segment a bio here has */
#define MAX_HELD 64u
#define MAX_ISSUES (4u * MAX_BIOS) /* the general path may never issue more */
#define STEP_NS (50 * US)          /* virtual time between two plugs */
#define NR_IOCS 3u                 /* 0: the thread's (set for the run), 1, 2: named */

enum pattern {
	PAT_RANDOM_READ,   /* random 4 KiB reads, some touching the one before */
	PAT_SEQ_READ,      /* ascending reads (back merges), a new place every 48 */
	PAT_DESC_WRITE,    /* descending async writes (front merges) */
	PAT_MIXED,         /* four streams: reads, async writes, sync writes, random */
	PAT_MIXED_EXTRA,   /* MIXED with FUA and preflush writes, discards, bios to split */
};

/* One workload: how its bios are made, plugged and issued. */
struct workload {
	const char *name;
	enum pattern pat;
	unsigned nr_bios;
	unsigned plug;       /* bios per plug; 0: no plug */
	unsigned segs;       /* segments per bio (MIXED's random stream: 1) */
	unsigned hw_queues;  /* multi-queue: hardware queues */
	unsigned depth;      /* 0: the driver ends requests inline; else it holds this many */
	unsigned cpu_every;  /* > 0: move to the other CPU every so many bios */
	bool queue_rqs;      /* the driver has the batch hook */
	const char *nomerges; /* NULL: the default (0); else the attribute's value */
	unsigned peer_every; /* > 0: bio i goes to a second queue when i % it == 1 */
};

/* name, pattern, bios, plug, segments, hw queues, depth, cpu_every, queue_rqs, nomerges, peer */
static const struct workload workloads[] = {
	{ "random-read-plug32", PAT_RANDOM_READ, 256, 32, 1, 1, 0, 0, false },
	{ "random-read-plug1", PAT_RANDOM_READ, 64, 1, 1, 1, 0, 0, false },
	{ "seq-read-plug32", PAT_SEQ_READ, 256, 32, 1, 1, 0, 0, false },
	{ "seq-read-plug7", PAT_SEQ_READ, 224, 7, 1, 1, 0, 0, false },
	{ "seq-read-3seg-plug32", PAT_SEQ_READ, 256, 32, 3, 1, 0, 0, false },
	{ "desc-write-plug32", PAT_DESC_WRITE, 256, 32, 1, 1, 0, 0, false },
	{ "desc-write-3seg-plug7", PAT_DESC_WRITE, 224, 7, 3, 1, 0, 0, false },
	{ "mixed-plug1", PAT_MIXED, 96, 1, 1, 1, 0, 0, false },
	{ "mixed-plug7", PAT_MIXED, 224, 7, 2, 1, 0, 0, false },
	{ "mixed-plug32", PAT_MIXED, 256, 32, 1, 1, 0, 0, false },
	{ "mixed-unplugged", PAT_MIXED, 128, 0, 1, 1, 0, 0, false },
	{ "mixed-plug32-queue-rqs", PAT_MIXED, 256, 32, 1, 1, 0, 0, true },
	{ "seq-read-plug32-depth2", PAT_SEQ_READ, 256, 32, 1, 1, 2, 0, false },
	{ "desc-write-plug7-depth4", PAT_DESC_WRITE, 224, 7, 1, 1, 4, 0, false },
	{ "mixed-plug32-depth4", PAT_MIXED, 256, 32, 2, 1, 4, 0, false },
	{ "mixed-plug32-2hw", PAT_MIXED, 256, 32, 1, 2, 0, 5, false },
	{ "seq-read-plug7-2hw", PAT_SEQ_READ, 224, 7, 1, 2, 0, 3, false },
	{ "mixed-plug7-2hw-depth4", PAT_MIXED, 224, 7, 1, 2, 4, 4, false },
	{ "random-read-plug48", PAT_RANDOM_READ, 240, 48, 1, 1, 0, 0, false },
	{ "mixed-extra-plug32", PAT_MIXED_EXTRA, 256, 32, 1, 1, 0, 0, false },
	{ "mixed-extra-plug7-depth4", PAT_MIXED_EXTRA, 224, 7, 2, 1, 4, 0, false },
	{ "mixed-extra-plug32-2hw", PAT_MIXED_EXTRA, 256, 32, 1, 2, 0, 5, false },
	{ "mixed-extra-unplugged", PAT_MIXED_EXTRA, 128, 0, 1, 1, 0, 0, false },
	{ "seq-read-unplugged-depth2", PAT_SEQ_READ, 192, 0, 1, 1, 2, 0, false },
	{ "desc-write-unplugged-depth4", PAT_DESC_WRITE, 192, 0, 2, 1, 4, 0, false },
	{ "mixed-plug32-nomerges1", PAT_MIXED, 256, 32, 1, 1, 0, 0, false, "1" },
	{ "seq-read-plug7-nomerges2", PAT_SEQ_READ, 224, 7, 1, 1, 0, 0, false, "2" },
	{ "mixed-plug32-2queues", PAT_MIXED, 256, 32, 1, 1, 0, 0, false, NULL, 3 },
	{ "seq-read-plug7-2queues-2hw", PAT_SEQ_READ, 224, 7, 1, 2, 0, 3, false, NULL, 5 },
	{ "mixed-extra-plug32-2queues-depth4", PAT_MIXED_EXTRA, 256, 32, 1, 1, 4, 0, false,
	  NULL, 4 },
};

/* One bio of a workload, made before the runs so every run submits the same. */
struct bio_spec {
	uint64_t sector;
	uint32_t seg_bytes;
	uint8_t op, segs, ioc;
	uint16_t ioprio;     /* 0: the context's */
	uint32_t opf;
};

enum via { VIA_QUEUE_RQ, VIA_QUEUE_RQS, VIA_REQUEST_FN };

/* What the driver was given, one request. */
struct issue {
	uint64_t sector;
	uint32_t bytes, opf;
	uint16_t nr_segments, nr_bios;
	uint16_t first_bio, ioprio;
	uint8_t op, hctx, via;
	uint8_t dev;         /* 0: the queue under test, 1: its peer */
	bool last;
};

struct run {
	struct issue issues[MAX_ISSUES];
	unsigned nr_issues;
	bool overflow;
	uint16_t ends[MAX_BIOS];   /* bio indices in end_io order */
	unsigned nr_ends, submitted;
	int done[MAX_BIOS];
	int status[MAX_BIOS];
	struct rq_bio *bios[MAX_BIOS];
	struct rq_queue_stats stats; /* the queue's counters at the end */
};

/* The recording device behind one queue. */
struct dev {
	struct rq_tag_set *set;
	struct rq_queue *q;
	struct rq_mq_ops ops;
	struct rq_sq_ops sq_ops;
	unsigned nr_hw_queues;
	unsigned depth;            /* 0: end inline */
	unsigned budget_used;
	struct rq_request *held[MAX_HELD];
	unsigned nr_held;
	uint8_t id;                /* 0: the queue under test, 1: its peer */
	struct run *run;           /* NULL: a bystander, never given I/O */
};

enum mode { MODE_PLAIN, MODE_BYSTANDER, MODE_TRACED, NR_MODES };
static const char *const mode_names[] = { "plain", "bystander", "traced" };

static const char *sched_name;
static bool sched_sq;
static int cpus[2];
static unsigned nr_cpus;
static char tmpdir[] = "/tmp/rq-fastpath-XXXXXX";
static uint8_t bufs[MAX_SEGS][SEG_MAX + 4096]; /* one per segment, never adjacent */
static struct run runs[NR_MODES + 1];
static struct run *cur_run;

/* ------------------------------------------------------------- the driver */

static uint16_t bio_index(const struct rq_bio *bio)
{
	return (uint16_t)(uintptr_t)bio->private_data;
}

static void record(struct dev *d, struct rq_request *rq, unsigned hctx, enum via via, bool last)
{
	struct run *r = d->run;
	struct issue *is;
	uint16_t nr_bios = 0;

	assert_non_null(r);
	if (r->nr_issues == MAX_ISSUES) {
		r->overflow = true;
		return;
	}
	for (const struct rq_bio *b = rq->bio; b; b = b->next)
		nr_bios++;
	is = &r->issues[r->nr_issues++];
	*is = (struct issue){
		.sector = rq->sector, .bytes = rq->bytes, .opf = rq->opf,
		.nr_segments = rq->nr_segments, .nr_bios = nr_bios,
		.first_bio = rq->bio ? bio_index(rq->bio) : 0xffff, .ioprio = rq->ioprio,
		.op = rq->op, .hctx = (uint8_t)hctx, .via = (uint8_t)via, .dev = d->id,
		.last = last,
	};
}

/* Take @rq: hold it (depth) or end it now. */
static void accept(struct dev *d, struct rq_request *rq)
{
	if (d->depth) {
		assert_true(d->nr_held < MAX_HELD);
		d->held[d->nr_held++] = rq;
	} else if (d->q && rq_queue_is_sq(d->q)) {
		rq_sq_end_request_all_locked(rq, RQ_STS_OK);
	} else {
		rq_mq_end_request(rq, RQ_STS_OK);
	}
}

static rq_status_t drv_queue_rq(struct rq_hw_ctx *hctx, struct rq_request *rq, bool last)
{
	struct dev *d = rq_hctx_driver_data(hctx);

	record(d, rq, rq_hctx_index(hctx), VIA_QUEUE_RQ, last);
	accept(d, rq);
	return RQ_STS_OK;
}

static void drv_queue_rqs(struct rq_hw_ctx *hctx, struct rq_request **list)
{
	struct dev *d = rq_hctx_driver_data(hctx);
	struct rq_request *rq = *list, *next;

	*list = NULL;
	for (; rq; rq = next) {
		next = rq->rq_next;
		rq->rq_next = NULL;
		record(d, rq, rq_hctx_index(hctx), VIA_QUEUE_RQS, next == NULL);
		accept(d, rq);
	}
}

/* Budget bounds what the driver holds: the rest waits in the scheduler. */
static bool drv_get_budget(struct rq_queue *q)
{
	struct dev *d = rq_queue_driver_data(q);

	if (d->budget_used >= d->depth)
		return false;
	d->budget_used++;
	return true;
}

static void drv_put_budget(struct rq_queue *q)
{
	struct dev *d = rq_queue_driver_data(q);

	assert_true(d->budget_used > 0);
	d->budget_used--;
}

static int drv_init_hctx(struct rq_hw_ctx *hctx, void *set_data, unsigned idx)
{
	rq_hctx_set_driver_data(hctx, set_data);
	return 0;
}

/* CPU i serves hw queue i % n: the two CPUs the test uses, two hw queues. */
static void drv_map_queues(struct rq_tag_set *set, unsigned *map, unsigned nr)
{
	struct dev *d = rq_tag_set_driver_data(set);

	for (unsigned cpu = 0; cpu < nr; cpu++)
		map[cpu] = cpu % d->nr_hw_queues;
}

static void drv_request_fn(struct rq_queue *q)
{
	struct dev *d = rq_queue_driver_data(q);
	struct rq_request *rq;

	while (!d->depth || d->nr_held < d->depth) {
		rq = rq_sq_fetch_request(q);
		if (!rq)
			break;
		record(d, rq, 0, VIA_REQUEST_FN, false);
		accept(d, rq);
	}
}

/* End the oldest request the driver holds (which may issue more). */
static void complete_oldest(struct dev *d)
{
	struct rq_request *rq = d->held[0];

	d->nr_held--;
	memmove(&d->held[0], &d->held[1], d->nr_held * sizeof(d->held[0]));
	if (rq_queue_is_sq(d->q)) {
		rq_sq_end_request_all(rq, RQ_STS_OK);
		rq_sq_run_queue(d->q);
	} else {
		rq_mq_end_request(rq, RQ_STS_OK);
	}
}

static void limits_of_test(struct rq_queue_limits *lim)
{
	rq_queue_limits_default(lim);
	lim->max_sectors = 128;    /* 64 KiB: long merges stop, at different bios */
	lim->max_segments = 16;
	lim->max_discard_sectors = 256;
	lim->features |= RQ_FEAT_WRITE_CACHE | RQ_FEAT_FUA;
}

static struct dev *dev_create(const struct workload *w, const char *sched, bool sq,
			      struct run *r)
{
	struct dev *d = calloc(1, sizeof(*d));
	struct rq_queue_limits lim;

	assert_non_null(d);
	d->run = r;
	d->depth = w ? w->depth : 0;
	d->nr_hw_queues = w ? w->hw_queues : 1;
	limits_of_test(&lim);
	if (sq) {
		struct rq_sq_config c = { RQ_SQ_CONFIG_INIT, .ops = &d->sq_ops, .limits = &lim,
					  .capacity = 1ull << 24, .scheduler = sched,
					  .queuedata = d };

		d->sq_ops = (struct rq_sq_ops){ RQ_SQ_OPS_INIT, .request_fn = drv_request_fn };
		assert_int_equal(rq_sq_alloc_queue(&c, &d->q), 0);
		return d;
	}
	d->ops = (struct rq_mq_ops){ RQ_MQ_OPS_INIT, .queue_rq = drv_queue_rq,
				     .init_hctx = drv_init_hctx,
				     .map_queues = drv_map_queues };
	if (w && w->queue_rqs)
		d->ops.queue_rqs = drv_queue_rqs;
	if (d->depth) {
		d->ops.get_budget = drv_get_budget;
		d->ops.put_budget = drv_put_budget;
	}
	struct rq_tag_set_config sc = { RQ_TAG_SET_CONFIG_INIT, .ops = &d->ops,
					.nr_hw_queues = d->nr_hw_queues, .queue_depth = 256,
					.numa_node = -1, .driver_data = d };
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .limits = &lim,
				      .capacity = 1ull << 24, .scheduler = sched,
				      .queuedata = d };

	assert_int_equal(rq_tag_set_alloc(&sc, &d->set), 0);
	assert_int_equal(rq_mq_alloc_queue(d->set, &qc, &d->q), 0);
	return d;
}

static void dev_destroy(struct dev *d)
{
	assert_int_equal(d->nr_held, 0);
	rq_queue_destroy(d->q);
	if (d->set)
		rq_tag_set_free(d->set);
	free(d);
}

/* ------------------------------------------------------------ workloads */

/* MIXED: stream @k's next bio (positions in @pos). */
static void mixed_next(struct bio_spec *b, unsigned k, uint64_t *pos, unsigned *rng,
		       unsigned segs)
{
	uint32_t len;

	switch (k) {
	case 0: /* sequential sync reads, the thread's context, some at BE 2 */
		b->op = RQ_OP_READ;
		if (fx_xorshift32(rng) % 5 == 0)
			b->ioprio = RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 2);
		break;
	case 1: /* sequential async writes, context 1 */
		b->op = RQ_OP_WRITE;
		b->ioc = 1;
		break;
	case 2: /* descending sync writes, context 2 (BE 1) */
		b->op = RQ_OP_WRITE;
		b->opf = RQ_BIO_SYNC;
		b->ioc = 2;
		break;
	default: /* small random reads, the thread's context, some real-time */
		b->op = RQ_OP_READ;
		if (fx_xorshift32(rng) % 4 == 0)
			b->ioprio = RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_RT, 4);
		b->segs = 1;
		b->seg_bytes = (1 + fx_xorshift32(rng) % 8) * 512;
		b->sector = (uint64_t)(fx_xorshift32(rng) % 65536) * 8;
		return;
	}
	b->segs = (uint8_t)segs;
	len = b->segs * b->seg_bytes;
	if (k == 2) {
		pos[k] -= len >> 9;
		b->sector = pos[k];
	} else {
		b->sector = pos[k];
		pos[k] += len >> 9;
	}
	if (fx_xorshift32(rng) % 16 == 0)
		b->opf |= RQ_BIO_NOMERGE;
	if (fx_xorshift32(rng) % 24 == 0)
		pos[k] += 8; /* a gap: the stream goes on elsewhere */
}

/*
 * MIXED_EXTRA: now and then a bio the fast cases never take, amid those
 * they do: a FUA write, a write with a preflush, a discard, a read of 96
 * KiB (split at max_sectors).  Return: false for an ordinary bio.
 */
static bool extra_next(struct bio_spec *b, uint64_t *pos, unsigned *rng)
{
	switch (fx_xorshift32(rng) % 40) {
	case 0:
	case 1: /* FUA, on the async write stream */
		b->op = RQ_OP_WRITE;
		b->opf = RQ_BIO_FUA;
		b->ioc = 1;
		b->segs = 1;
		b->sector = pos[1];
		pos[1] += 8;
		return true;
	case 2: /* a preflush on the sync write stream */
		b->op = RQ_OP_WRITE;
		b->opf = RQ_BIO_SYNC | RQ_BIO_PREFLUSH;
		b->ioc = 2;
		b->segs = 1;
		pos[2] -= 8;
		b->sector = pos[2];
		return true;
	case 3:
	case 4: /* a discard, 64 sectors, next to the last of the read stream */
		b->op = RQ_OP_DISCARD;
		b->segs = 0;
		b->seg_bytes = 64 * 512;
		b->sector = pos[0] + 64;
		return true;
	case 5: /* 96 KiB in two segments: split at 64 KiB */
		b->op = RQ_OP_READ;
		b->segs = 2;
		b->seg_bytes = SEG_MAX;
		b->sector = pos[0];
		pos[0] += 2 * SEG_MAX >> 9;
		return true;
	default:
		return false;
	}
}

static void make_specs(const struct workload *w, struct bio_spec *specs)
{
	unsigned rng = 0x2545f491u ^ (unsigned)w->pat * 7919u ^ w->plug;
	uint64_t pos[4] = { 1u << 20, 2u << 20, 3u << 20, 0 };
	uint64_t base = 0;

	for (unsigned i = 0; i < w->nr_bios; i++) {
		struct bio_spec *b = &specs[i];
		uint32_t sectors;

		*b = (struct bio_spec){ .seg_bytes = 4096, .segs = (uint8_t)w->segs };
		sectors = b->segs * b->seg_bytes >> 9;
		switch (w->pat) {
		case PAT_RANDOM_READ:
			b->op = RQ_OP_READ;
			b->sector = (uint64_t)(fx_xorshift32(&rng) % 8192) * 8;
			if (i && fx_xorshift32(&rng) % 6 == 0) /* right after the one before */
				b->sector = specs[i - 1].sector + sectors;
			else if (i && fx_xorshift32(&rng) % 8 == 0 && specs[i - 1].sector >= sectors)
				b->sector = specs[i - 1].sector - sectors; /* right before it */
			break;
		case PAT_SEQ_READ:
			if (i % 48 == 0)
				base = (uint64_t)(fx_xorshift32(&rng) % 1024) * 4096 - i * sectors;
			b->op = RQ_OP_READ;
			b->sector = base + (uint64_t)i * sectors;
			break;
		case PAT_DESC_WRITE:
			if (i % 48 == 0)
				base = (uint64_t)(fx_xorshift32(&rng) % 1024 + 1) * 4096 + i * sectors;
			b->op = RQ_OP_WRITE;
			b->sector = base - (uint64_t)(i + 1) * sectors;
			break;
		case PAT_MIXED_EXTRA:
			if (extra_next(b, pos, &rng))
				break;
			/* fall through */
		case PAT_MIXED:
			mixed_next(b, fx_xorshift32(&rng) % 4, pos, &rng, w->segs);
			break;
		}
	}
}

/* ------------------------------------------------------------- the runs */

static void end_io(struct rq_bio *bio)
{
	struct run *r = cur_run;
	uint16_t i = bio_index(bio);

	r->done[i]++;
	r->status[i] = bio->status;
	if (r->nr_ends < MAX_BIOS)
		r->ends[r->nr_ends++] = i;
}

static void pin(unsigned k)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpus[k % nr_cpus], &set);
	assert_int_equal(sched_setaffinity(0, sizeof(set), &set), 0);
}

static struct rq_bio *make_bio(const struct bio_spec *s, unsigned i,
			       struct rq_io_context *const *iocs)
{
	struct rq_bio *bio = rq_bio_alloc(s->segs);

	assert_non_null(bio);
	bio->op = s->op;
	bio->opf = s->opf;
	bio->iter.sector = s->sector;
	for (unsigned k = 0; k < s->segs; k++)
		assert_int_equal(rq_bio_add_vec(bio, bufs[k], s->seg_bytes), 0);
	if (!s->segs)
		bio->iter.size = s->seg_bytes; /* no data: the size alone */
	bio->end_io = end_io;
	bio->private_data = (void *)(uintptr_t)i;
	bio->ioc = s->ioc ? iocs[s->ioc] : NULL;
	bio->ioprio = s->ioprio;
	return bio;
}

/*
 * After a plug (or a bio): move the clock on a step, then end what the
 * driver holds, oldest first, and let idle windows pass, until at most
 * @keep bios are in flight.
 */
static void settle(struct dev *const *devs, struct run *r, unsigned keep)
{
	fx_serve_until(fx_vclock_now() + STEP_NS);
	for (unsigned n = 0; r->submitted - r->nr_ends > keep; n++) {
		assert_true(n < 100000);
		if (devs[0]->nr_held)
			complete_oldest(devs[0]);
		else if (devs[1] && devs[1]->nr_held)
			complete_oldest(devs[1]);
		else
			fx_serve_until(fx_vclock_now() + MS);
	}
}

static void trace_files_remove(void)
{
	DIR *dir = opendir(tmpdir);
	struct dirent *de;
	char path[sizeof(tmpdir) + 300];

	assert_non_null(dir);
	while ((de = readdir(dir))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", tmpdir, de->d_name);
		unlink(path);
	}
	closedir(dir);
}

static void submit_all(const struct workload *w, const struct bio_spec *specs,
		       struct dev *const *devs, struct run *r, struct rq_io_context *const *iocs)
{
	unsigned per = w->plug ? w->plug : 1;
	unsigned keep = w->depth ? 24 : 32;

	for (unsigned i = 0; i < w->nr_bios;) {
		struct rq_plug plug;

		if (w->plug)
			rq_start_plug(&plug);
		for (unsigned k = 0; k < per && i < w->nr_bios; k++, i++) {
			if (w->cpu_every && i % w->cpu_every == 0)
				pin(i / w->cpu_every);
			r->bios[i] = make_bio(&specs[i], i, iocs);
			r->submitted++;
			rq_submit_bio(devs[w->peer_every && i % w->peer_every == 1]->q, r->bios[i]);
		}
		if (w->plug)
			rq_finish_plug(&plug);
		settle(devs, r, keep);
	}
	settle(devs, r, 0);
}

static void run_workload(const struct workload *w, const struct bio_spec *specs,
			 enum mode mode, struct run *r)
{
	struct rq_io_context *iocs[NR_IOCS];
	struct dev *d, *devs[2] = { NULL, NULL }, *by = NULL;

	memset(r, 0, sizeof(*r));
	cur_run = r;
	/* every run starts on a whole second of the virtual clock */
	fx_vclock_set((fx_vclock_now() / SEC + 2) * SEC);
	pin(0);
	for (unsigned k = 0; k < NR_IOCS; k++)
		assert_non_null(iocs[k] = rq_ioc_create(0));
	assert_int_equal(rq_ioc_set_prio(iocs[2], RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 1)), 0);
	rq_ioc_set_current(iocs[0]);
	for (unsigned k = 0; k < (w->peer_every ? 2u : 1u); k++) {
		devs[k] = dev_create(w, sched_name, sched_sq, r);
		devs[k]->id = (uint8_t)k;
		if (w->nomerges)
			assert_int_equal(rq_queue_attr_set(devs[k]->q, "nomerges", w->nomerges),
					 0);
	}
	d = devs[0];
	if (mode == MODE_BYSTANDER) {
		by = dev_create(NULL, "none", false, NULL);
		assert_int_equal(rq_queue_attr_set(by->q, "iostats", "1"), 0);
	} else if (mode == MODE_TRACED) {
		assert_int_equal(rq_queue_trace_start(d->q, tmpdir, "order"), 0);
	}
	/* the observer is what it takes: the gate the fast cases test is set */
	assert_int_equal(atomic_load(&obs_active) != 0, mode != MODE_PLAIN);
	assert_int_equal(atomic_load(&d->q->obs_flags) != 0, mode == MODE_TRACED);

	submit_all(w, specs, devs, r, iocs);
	assert_int_equal(rq_queue_get_stats(d->q, &r->stats, sizeof(r->stats)), 0);

	if (mode == MODE_TRACED) {
		assert_int_equal(rq_queue_trace_stop(d->q, NULL, 0), 0);
		trace_files_remove();
	}
	if (by)
		dev_destroy(by);
	if (devs[1])
		dev_destroy(devs[1]);
	dev_destroy(d);
	rq_ioc_set_current(NULL);
	for (unsigned k = 0; k < NR_IOCS; k++)
		rq_ioc_put(iocs[k]);
	for (unsigned i = 0; i < w->nr_bios; i++)
		rq_bio_put(r->bios[i]);
	cur_run = NULL;
	pin(0);
}

/* ----------------------------------------------------------- comparing */

static void print_issue(const char *what, const struct run *r, unsigned i)
{
	const struct issue *is = &r->issues[i];

	if (i >= r->nr_issues) {
		print_message("  %-9s #%u: none (%u requests)\n", what, i, r->nr_issues);
		return;
	}
	print_message("  %-9s #%u: queue %u op %u opf %#x prio %#x sector %llu bytes %u segs %u "
		      "bios %u first %u hctx %u via %u last %d\n",
		      what, i, is->dev, is->op, is->opf, is->ioprio,
		      (unsigned long long)is->sector, is->bytes, is->nr_segments, is->nr_bios,
		      is->first_bio, is->hctx, is->via, is->last);
}

#define STAT(f) { #f, offsetof(struct rq_queue_stats, f) }
static const struct {
	const char *name;
	size_t off;
} stat_fields[] = {
	STAT(bios), STAT(splits), STAT(requests), STAT(dispatched), STAT(completed),
	STAT(merges_back), STAT(merges_front), STAT(merges_rq), STAT(plug_merges),
	STAT(resource), STAT(requeues), STAT(timeouts), STAT(flushes), STAT(errors),
	STAT(invalid),
};

static uint64_t stat_of(const struct run *r, unsigned i)
{
	uint64_t v;

	memcpy(&v, (const char *)&r->stats + stat_fields[i].off, sizeof(v));
	return v;
}

/* The first counter of rq_queue_get_stats() that differs, printed; false if none. */
static bool stats_differ(const struct workload *w, enum mode mode)
{
	for (unsigned i = 0; i < sizeof(stat_fields) / sizeof(stat_fields[0]); i++) {
		uint64_t a = stat_of(&runs[MODE_PLAIN], i), b = stat_of(&runs[mode], i);

		if (a != b) {
			print_message("%s %s: counter %s is %llu in the plain run, %llu in the %s "
				      "one\n", sched_name, w->name, stat_fields[i].name,
				      (unsigned long long)a, (unsigned long long)b,
				      mode_names[mode]);
			return true;
		}
	}
	return false;
}

/* The first difference between @a and @b, printed; -1 if none. */
static long first_difference(const struct run *a, const struct run *b, bool *in_ends)
{
	unsigned n = a->nr_issues > b->nr_issues ? a->nr_issues : b->nr_issues;

	*in_ends = false;
	for (unsigned i = 0; i < n; i++) {
		if (i >= a->nr_issues || i >= b->nr_issues ||
		    memcmp(&a->issues[i], &b->issues[i], sizeof(a->issues[i])))
			return i;
	}
	*in_ends = true;
	n = a->nr_ends > b->nr_ends ? a->nr_ends : b->nr_ends;
	for (unsigned i = 0; i < n; i++) {
		if (i >= a->nr_ends || i >= b->nr_ends || a->ends[i] != b->ends[i])
			return i;
	}
	return -1;
}

static void check_complete(const struct workload *w, const struct run *r, enum mode mode)
{
	assert_false(r->overflow);
	for (unsigned i = 0; i < w->nr_bios; i++) {
		if (r->done[i] != 1 || r->status[i] != RQ_STS_OK) {
			print_message("%s %s %s: bio %u ended %d times, status %d\n", sched_name,
				      w->name, mode_names[mode], i, r->done[i], r->status[i]);
			fail();
		}
	}
	assert_int_equal(r->nr_ends, w->nr_bios);
}

static void report(const struct workload *w, const struct bio_spec *specs, enum mode mode,
		   long at, bool in_ends)
{
	struct run *again = &runs[NR_MODES];
	bool in_ends_again;

	print_message("%s %s: the %s run differs from the plain one at %s %ld\n", sched_name,
		      w->name, mode_names[mode], in_ends ? "end" : "request", at);
	if (in_ends)
		print_message("  plain ends bio %u, %s ends bio %u\n",
			      runs[MODE_PLAIN].ends[at], mode_names[mode], runs[mode].ends[at]);
	else
		for (long i = at > 2 ? at - 2 : 0; i <= at; i++) {
			print_issue("plain", &runs[MODE_PLAIN], (unsigned)i);
			print_issue(mode_names[mode], &runs[mode], (unsigned)i);
		}
	run_workload(w, specs, MODE_PLAIN, again);
	print_message("  a second plain run %s the first\n",
		      first_difference(&runs[MODE_PLAIN], again, &in_ends_again) < 0 ?
			      "matches" : "differs from (not deterministic)");
}

/* What the plain run issued, for a reader checking that a workload does what it says. */
static void print_summary(const struct workload *w, const struct run *r)
{
	unsigned merged = 0, hctx1 = 0, sync = 0, writes = 0, last = 0, other = 0;

	for (unsigned i = 0; i < r->nr_issues; i++) {
		merged += r->issues[i].nr_bios > 1;
		hctx1 += r->issues[i].hctx == 1;
		sync += (r->issues[i].opf & RQ_BIO_SYNC) != 0;
		writes += r->issues[i].op == RQ_OP_WRITE;
		last += r->issues[i].last;
		other += r->issues[i].op > RQ_OP_WRITE;
	}
	print_message("%s %s: %u bios, %u requests (%u merged, %u writes, %u sync, "
		      "%u on hw queue 1, %u last, %u flushes or discards); counted: %llu requests, %llu plug merges, "
		      "%llu back, %llu front, %llu request merges\n", sched_name, w->name,
		      w->nr_bios, r->nr_issues, merged, writes, sync, hctx1, last, other,
		      (unsigned long long)r->stats.requests,
		      (unsigned long long)r->stats.plug_merges,
		      (unsigned long long)r->stats.merges_back,
		      (unsigned long long)r->stats.merges_front,
		      (unsigned long long)r->stats.merges_rq);
}

static void test_workload(void **state)
{
	const struct workload *w = *state;
	struct bio_spec specs[MAX_BIOS];
	bool in_ends;
	long at;

	assert_true(w->nr_bios <= MAX_BIOS);
	make_specs(w, specs);
	for (enum mode m = MODE_PLAIN; m < NR_MODES; m++) {
		run_workload(w, specs, m, &runs[m]);
		check_complete(w, &runs[m], m);
	}
	if (getenv("FASTPATH_ORDER_VERBOSE"))
		print_summary(w, &runs[MODE_PLAIN]);
	for (enum mode m = MODE_BYSTANDER; m < NR_MODES; m++) {
		at = first_difference(&runs[MODE_PLAIN], &runs[m], &in_ends);
		if (at >= 0) {
			report(w, specs, m, at, in_ends);
			fail();
		}
		if (stats_differ(w, m))
			fail();
	}
}

/*
 * One thread submits and completes: a submission that waits (for a tag,
 * a request) waits for ever.  Say so rather than leave it to the suite's
 * timeout.
 */
static void watchdog(int sig)
{
	static const char msg[] = "fastpath-order: no progress in 60 s: a submission waits "
				  "for a tag or request only this thread could free\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(1);
	_exit(1);
}

/* The CPUs the thread may use (the first two): two hw queues need two. */
static void find_cpus(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set))
		abort();
	for (int c = 0; c < CPU_SETSIZE && nr_cpus < 2; c++)
		if (CPU_ISSET(c, &set))
			cpus[nr_cpus++] = c;
	if (!nr_cpus)
		abort();
}

int main(int argc, char **argv)
{
	struct CMUnitTest tests[sizeof(workloads) / sizeof(workloads[0])];
	static const char *const mq_names[] = { "none", "mq-deadline", "kyber", "bfq" };
	char group[64];
	int ret;

	if (argc != 2) {
		fprintf(stderr, "usage: %s SCHEDULER\n", argv[0]);
		return 1;
	}
	sched_name = argv[1];
	sched_sq = true;
	for (unsigned i = 0; i < sizeof(mq_names) / sizeof(mq_names[0]); i++)
		if (!strcmp(sched_name, mq_names[i]))
			sched_sq = false;
	if (strcmp(sched_name, "none") && !rq_sched_exists(sched_name)) {
		fprintf(stderr, "scheduler %s is not available: skipped\n", sched_name);
		return 77;
	}
	/* before any queue: no service thread (see the top) */
	if (rq_service_manual()) {
		fprintf(stderr, "rq_service_manual failed\n");
		return 1;
	}
	fx_vclock_install(SEC);
	find_cpus();
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	for (unsigned i = 0; i < sizeof(workloads) / sizeof(workloads[0]); i++)
		tests[i] = (struct CMUnitTest){ .name = workloads[i].name,
						.test_func = test_workload,
						.initial_state = (void *)&workloads[i] };
	signal(SIGALRM, watchdog);
	alarm(60);
	snprintf(group, sizeof(group), "fastpath-order-%s", sched_name);
	ret = _cmocka_run_group_tests(group, tests, sizeof(tests) / sizeof(tests[0]), NULL, NULL);
	rmdir(tmpdir);
	return ret ? 1 : 0;
}
