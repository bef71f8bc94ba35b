/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kdiff-rq: the librequest half of the differential test (tests/kdiff).
 * Builds a multi-queue queue with the limits, scheduler, nomerges and
 * depth of the kernel's loop device, runs a resolved pattern (pattern.h,
 * as kdiff-submit prints it) as the kernel did, and prints every request
 * its driver is handed, in dispatch order, one a line:
 *
 *   OP SECTOR SECTORS [fua] [preflush]      OP: R, W or F (flush)
 *
 * As the kernel: one submitting thread with an io context of its own,
 * made for the run and released at its end (a process that exits); each
 * batch under one plug when it has more than two I/Os (io_submit plugs
 * only then, AIO_PLUG_THRESHOLD); an I/O becomes one bio per 256 runs
 * (BIO_MAX_VECS of __blkdev_direct_IO), each run one vector, runs placed
 * apart so no two are contiguous; writes carry SYNC and IDLE (the block
 * device's direct writes), U writes FUA too; an F line is an empty flush
 * submitted unplugged and waited for.  The driver holds what it is handed
 * and the submitting thread ends it after the batch is submitted, as the
 * loop device's worker does after the plug's dispatch.
 *
 * With lists for --sched, --nomerges and --nr-requests and --out PREFIX it
 * runs every case in turn, each on a new tag set, queue and io context,
 * into PREFIX.SCHED.NOMERGES.lib (one process per pattern, not per case).
 *
 * usage: kdiff-rq [options] PATTERN      (--help lists them)
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>

#include <librequest/librequest.h>

#include "pattern.h"

#define BIO_MAX_RUNS 255u  /* a bio's vectors (uint8_t); the kernel's is 256 */

struct drv {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct rq_request **held;
	unsigned nr_held, cap_held;
	unsigned long bios_ended;
	unsigned long progress;  /* bios submitted: moves while the submitter runs */
	bool submitting, stop;
	FILE *out;
};

static struct drv drv = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
};

static rq_status_t kd_queue_rq(struct rq_hw_ctx *hctx, struct rq_request *rq, bool last)
{
	char op = rq->op == RQ_OP_READ ? 'R' : rq->op == RQ_OP_WRITE ? 'W' :
		  rq->op == RQ_OP_FLUSH ? 'F' : '?';

	(void)hctx;
	(void)last;
	pthread_mutex_lock(&drv.lock);
	if (op == 'F')
		fprintf(drv.out, "F 0 0\n");
	else
		fprintf(drv.out, "%c %llu %u%s%s\n", op, (unsigned long long)rq->sector,
			rq->bytes / 512, rq->opf & RQ_BIO_FUA ? " fua" : "",
			rq->opf & RQ_BIO_PREFLUSH ? " preflush" : "");
	if (drv.nr_held == drv.cap_held) {
		drv.cap_held = drv.cap_held ? 2 * drv.cap_held : 256;
		drv.held = realloc(drv.held, drv.cap_held * sizeof(*drv.held));
		if (!drv.held)
			abort();
	}
	drv.held[drv.nr_held++] = rq;
	pthread_cond_broadcast(&drv.cond);
	pthread_mutex_unlock(&drv.lock);
	return RQ_STS_OK;
}

static const struct rq_mq_ops kd_ops = {
	RQ_MQ_OPS_INIT,
	.queue_rq = kd_queue_rq,
};

static void kd_end_io(struct rq_bio *bio)
{
	if (bio->status != RQ_STS_OK)
		fprintf(stderr, "kdiff-rq: a bio ended with %s\n", rq_status_name(bio->status));
	pthread_mutex_lock(&drv.lock);
	drv.bios_ended++;
	pthread_cond_broadcast(&drv.cond);
	pthread_mutex_unlock(&drv.lock);
}

/* End everything held; called with drv.lock held, drops it meanwhile. */
static void end_held_locked(void)
{
	while (drv.nr_held) {
		struct rq_request *rq = drv.held[0];

		memmove(drv.held, drv.held + 1, --drv.nr_held * sizeof(*drv.held));
		pthread_mutex_unlock(&drv.lock);
		rq_mq_end_request(rq, RQ_STS_OK);
		pthread_mutex_lock(&drv.lock);
	}
}

/* End what the driver holds until @target bios have ended; 0 or -1 (stuck). */
static int complete_until(unsigned long target)
{
	struct timespec dl;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 20;
	pthread_mutex_lock(&drv.lock);
	while (drv.bios_ended < target) {
		if (drv.nr_held) {
			end_held_locked();
			continue;
		}
		if (pthread_cond_timedwait(&drv.cond, &drv.lock, &dl)) {
			pthread_mutex_unlock(&drv.lock);
			fprintf(stderr, "kdiff-rq: stuck: %lu of %lu bios ended\n",
				drv.bios_ended, target);
			return -1;
		}
	}
	pthread_mutex_unlock(&drv.lock);
	return 0;
}

/* The watchdog: ends held requests when the submitter is stuck mid-batch. */
static void *unstick(void *arg)
{
	unsigned long seen = ~0ul;

	(void)arg;
	pthread_mutex_lock(&drv.lock);
	while (!drv.stop) {
		struct timespec dl;

		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_nsec += 50 * 1000 * 1000;
		if (dl.tv_nsec >= 1000000000) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&drv.cond, &drv.lock, &dl);
		if (drv.submitting && drv.progress == seen && drv.nr_held)
			end_held_locked();
		seen = drv.progress;
	}
	pthread_mutex_unlock(&drv.lock);
	return NULL;
}

struct opts {
	const char *sched;      /* the case being run */
	int nomerges;
	const char *scheds;     /* the lists given */
	const char *nomerges_list;
	const char *nr_requests_list;
	const char *out;        /* NULL: one case, to stdout */
	unsigned max_sectors_kb, max_hw_sectors_kb, max_segments, max_segment_size;
	unsigned lbs, depth, nr_requests;
	bool write_cache, fua;
	uint64_t capacity;
};

/* Submit @it as its bios (one per BIO_MAX_RUNS runs); returns bios or -1. */
static long submit_io(struct rq_queue *q, const struct kd_item *it, char **pos)
{
	uint64_t sector = it->off / 512;
	long bios = 0;

	for (unsigned r = 0; r < it->nr_runs; bios++) {
		unsigned n = it->nr_runs - r < BIO_MAX_RUNS ? it->nr_runs - r : BIO_MAX_RUNS;
		struct rq_bio *bio = rq_bio_alloc(n);

		if (!bio)
			return -1;
		bio->op = it->op == 'R' ? RQ_OP_READ : RQ_OP_WRITE;
		bio->opf = it->op == 'R' ? 0 : RQ_BIO_SYNC | RQ_BIO_IDLE;
		if (it->op == 'U')
			bio->opf |= RQ_BIO_FUA;
		bio->iter.sector = sector;
		bio->end_io = kd_end_io;
		for (unsigned i = 0; i < n; i++, r++) {
			if (rq_bio_add_vec(bio, *pos, (uint32_t)it->runs[r]))
				return -1;
			*pos += (it->runs[r] + 2 * KD_PAGE - 1) / KD_PAGE * KD_PAGE;
		}
		sector += rq_bio_sectors(bio);
		rq_submit_bio(q, bio);
		pthread_mutex_lock(&drv.lock);
		drv.progress++;
		pthread_mutex_unlock(&drv.lock);
	}
	return bios;
}

static int flush_once(struct rq_queue *q, unsigned long *bios)
{
	struct rq_bio *bio = rq_bio_alloc(0);

	if (!bio)
		return -1;
	bio->op = RQ_OP_FLUSH;
	bio->opf = RQ_BIO_SYNC;
	bio->end_io = kd_end_io;
	rq_submit_bio(q, bio);
	return complete_until(++*bios);
}

static int run_pattern(struct rq_queue *q, struct kd_pattern *p, char *arena)
{
	unsigned long bios = 0;
	unsigned from = 0;
	char *pos = arena;

	for (unsigned i = 0; i <= p->nr; i++) {
		struct rq_plug plug;
		bool plugged;

		if (i < p->nr && p->items[i].kind == KD_IO)
			continue;
		plugged = i - from > 2;
		pthread_mutex_lock(&drv.lock);
		drv.submitting = true;
		pthread_mutex_unlock(&drv.lock);
		if (plugged)
			rq_start_plug(&plug);
		for (unsigned j = from; j < i; j++) {
			long n = submit_io(q, &p->items[j], &pos);

			if (n < 0) {
				fprintf(stderr, "kdiff-rq: cannot build item %u\n", j);
				return -1;
			}
			bios += (unsigned long)n;
		}
		if (plugged)
			rq_finish_plug(&plug);
		pthread_mutex_lock(&drv.lock);
		drv.submitting = false;
		pthread_mutex_unlock(&drv.lock);
		if (complete_until(bios))
			return -1;
		if (i < p->nr && p->items[i].kind == KD_FLUSH && flush_once(q, &bios))
			return -1;
		from = i + 1;
	}
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kdiff-rq [options] PATTERN\n"
		"Run a resolved pattern through a librequest queue; print what its driver\n"
		"is handed, in order.\n"
		"  --sched LIST            none, mq-deadline, kyber, bfq (default none)\n"
		"  --nomerges LIST         0, 1, 2 (default 0)\n"
		"  --out PREFIX            every case into PREFIX.SCHED.NOMERGES.lib\n"
		"                          (needed with more than one case)\n"
		"  --max-sectors-kb N      (default 1280)\n"
		"  --max-hw-sectors-kb N   (default 1280)\n"
		"  --max-segments N        (default 128)\n"
		"  --max-segment-size N    bytes (default 65536)\n"
		"  --logical-block-size N  bytes (default 512)\n"
		"  --write-cache 0|1       volatile write cache (default 1)\n"
		"  --fua 0|1               the device does FUA itself (default 0)\n"
		"  --depth N               driver tags, the loop device's hw_queue_depth (128)\n"
		"  --nr-requests LIST      the queue's nr_requests once the scheduler is set,\n"
		"                          one per scheduler of --sched\n"
		"  --capacity BYTES        device size (default 1 GiB)\n");
}

static unsigned num(const char *flag, const char *s)
{
	int64_t v = kd_size(s);

	if (v < 0 || v > (1ll << 32)) {
		fprintf(stderr, "kdiff-rq: %s: bad number \"%s\"\n", flag, s);
		exit(2);
	}
	return (unsigned)v;
}

static void parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "sched", 1, NULL, 's' }, { "nomerges", 1, NULL, 'n' },
		{ "max-sectors-kb", 1, NULL, 'm' }, { "max-hw-sectors-kb", 1, NULL, 'M' },
		{ "max-segments", 1, NULL, 'g' }, { "max-segment-size", 1, NULL, 'G' },
		{ "logical-block-size", 1, NULL, 'l' }, { "write-cache", 1, NULL, 'w' },
		{ "fua", 1, NULL, 'f' }, { "depth", 1, NULL, 'd' },
		{ "nr-requests", 1, NULL, 'r' }, { "capacity", 1, NULL, 'c' },
		{ "out", 1, NULL, 'o' },
		{ "help", 0, NULL, 'h' }, { "version", 0, NULL, 'V' }, { 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 's': o->scheds = optarg; break;
		case 'n': o->nomerges_list = optarg; break;
		case 'o': o->out = optarg; break;
		case 'm': o->max_sectors_kb = num("--max-sectors-kb", optarg); break;
		case 'M': o->max_hw_sectors_kb = num("--max-hw-sectors-kb", optarg); break;
		case 'g': o->max_segments = num("--max-segments", optarg); break;
		case 'G': o->max_segment_size = num("--max-segment-size", optarg); break;
		case 'l': o->lbs = num("--logical-block-size", optarg); break;
		case 'w': o->write_cache = num("--write-cache", optarg); break;
		case 'f': o->fua = num("--fua", optarg); break;
		case 'd': o->depth = num("--depth", optarg); break;
		case 'r': o->nr_requests_list = optarg; break;
		case 'c': o->capacity = (uint64_t)kd_size(optarg); break;
		case 'h': usage(stdout); exit(0);
		case 'V': puts("kdiff-rq 1"); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (argc - optind != 1) {
		fprintf(stderr, "kdiff-rq: needs one PATTERN\n");
		exit(2);
	}
	if (!o->out && (strchr(o->scheds, ',') || strchr(o->nomerges_list, ','))) {
		fprintf(stderr, "kdiff-rq: several cases need --out\n");
		exit(2);
	}
	for (const char *n = o->nomerges_list; *n; n++) {
		if (!strchr("012,", *n)) {
			fprintf(stderr, "kdiff-rq: --nomerges: 0, 1 or 2\n");
			exit(2);
		}
	}
}

static struct rq_queue *make_queue(const struct opts *o, struct rq_tag_set **setp)
{
	struct rq_tag_set_config scfg = { RQ_TAG_SET_CONFIG_INIT, .ops = &kd_ops,
					  .nr_hw_queues = 1, .queue_depth = o->depth,
					  .numa_node = -1 };
	struct rq_queue_limits lim;
	struct rq_queue_config qcfg = { RQ_QUEUE_CONFIG_INIT, .limits = &lim,
					.capacity = o->capacity / 512, .scheduler = o->sched };
	struct rq_queue *q;
	char v[32];
	int ret;

	rq_queue_limits_default(&lim);
	lim.logical_block_size = o->lbs;
	lim.physical_block_size = o->lbs;
	lim.max_hw_sectors = o->max_hw_sectors_kb * 2;
	lim.max_sectors = o->max_sectors_kb * 2;
	lim.max_segments = o->max_segments;
	lim.max_segment_size = o->max_segment_size;
	lim.features = (o->write_cache ? RQ_FEAT_WRITE_CACHE : 0) | (o->fua ? RQ_FEAT_FUA : 0);
	ret = rq_tag_set_alloc(&scfg, setp);
	if (ret) {
		fprintf(stderr, "kdiff-rq: tag set: %s\n", strerror(-ret));
		return NULL;
	}
	ret = rq_mq_alloc_queue(*setp, &qcfg, &q);
	if (ret) {
		fprintf(stderr, "kdiff-rq: queue: %s\n", strerror(-ret));
		return NULL;
	}
	snprintf(v, sizeof(v), "%d", o->nomerges);
	ret = rq_queue_attr_set(q, "nomerges", v);
	if (!ret && o->nr_requests) {
		snprintf(v, sizeof(v), "%u", o->nr_requests);
		ret = rq_queue_attr_set(q, "nr_requests", v);
	}
	if (ret) {
		fprintf(stderr, "kdiff-rq: attributes: %s\n", strerror(-ret));
		return NULL;
	}
	return q;
}

/* One case: a new tag set, queue and io context; the pattern; teardown. */
static int run_case(struct opts *o, struct kd_pattern *p, char *arena)
{
	struct rq_io_context *ioc;
	pthread_t watchdog;
	struct rq_tag_set *set;
	struct rq_queue *q;
	int rc;

	pthread_mutex_lock(&drv.lock);
	drv.nr_held = 0;
	drv.bios_ended = drv.progress = 0;
	drv.submitting = drv.stop = false;
	pthread_mutex_unlock(&drv.lock);
	q = make_queue(o, &set);
	if (!q)
		return 1;
	ioc = rq_ioc_create(RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 4));
	if (!ioc || pthread_create(&watchdog, NULL, unstick, NULL))
		return 1;
	rq_ioc_set_current(ioc);
	rc = run_pattern(q, p, arena);
	pthread_mutex_lock(&drv.lock);
	drv.stop = true;
	pthread_cond_broadcast(&drv.cond);
	pthread_mutex_unlock(&drv.lock);
	pthread_join(watchdog, NULL);
	/* the "process" exits: its io context goes away */
	rq_ioc_set_current(NULL);
	rq_ioc_put(ioc);
	fflush(drv.out);
	rq_queue_destroy(q);
	rq_tag_set_free(set);
	return rc ? 1 : 0;
}

/* Every case of the lists in @o, each into its own file (or stdout). */
static int run_cases(struct opts *o, struct kd_pattern *p, char *arena)
{
	char scheds[256], nrs[256], path[512];
	char *ss = NULL, *sn = NULL, *nr;
	int rc = 0;

	snprintf(scheds, sizeof(scheds), "%s", o->scheds);
	snprintf(nrs, sizeof(nrs), "%s", o->nr_requests_list ? o->nr_requests_list : "");
	nr = strtok_r(nrs, ",", &sn);
	for (char *s = strtok_r(scheds, ",", &ss); s && !rc; s = strtok_r(NULL, ",", &ss)) {
		o->sched = s;
		o->nr_requests = nr ? num("--nr-requests", nr) : 0;
		nr = nr ? strtok_r(NULL, ",", &sn) : NULL;
		for (const char *n = o->nomerges_list; *n && !rc; n++) {
			if (*n == ',')
				continue;
			o->nomerges = *n - '0';
			drv.out = stdout;
			if (o->out) {
				snprintf(path, sizeof(path), "%s.%s.%c.lib", o->out, s, *n);
				drv.out = fopen(path, "w");
				if (!drv.out) {
					fprintf(stderr, "kdiff-rq: %s: %s\n", path, strerror(errno));
					return 1;
				}
			}
			rc = run_case(o, p, arena);
			if (o->out)
				fclose(drv.out);
		}
	}
	return rc;
}

int main(int argc, char **argv)
{
	struct opts o = { .scheds = "none", .nomerges_list = "0", .max_sectors_kb = 1280, .max_hw_sectors_kb = 1280,
			  .max_segments = 128, .max_segment_size = 65536, .lbs = 512,
			  .depth = 128, .write_cache = true, .capacity = 1ull << 30 };
	struct kd_pattern p;
	uint64_t span = 0;
	char *raw, *arena;
	int rc;

	parse_opts(argc, argv, &o);
	if (kd_parse(argv[optind], &p))
		return 2;
	for (unsigned i = 0; i < p.nr; i++)
		for (unsigned r = 0; r < p.items[i].nr_runs; r++)
			span += p.items[i].runs[r] + 2 * KD_PAGE;
	/* never touched; 4 GiB aligned so no run crosses a segment boundary */
	raw = mmap(NULL, span + (4ull << 30), PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (raw == MAP_FAILED || span > (4ull << 30)) {
		fprintf(stderr, "kdiff-rq: no room for the buffers\n");
		return 1;
	}
	arena = (char *)(((uintptr_t)raw + (4ull << 30) - 1) & ~(uintptr_t)((4ull << 30) - 1));
	rc = run_cases(&o, &p, arena);
	kd_free(&p);
	free(drv.held);
	munmap(raw, span + (4ull << 30));
	return rc;
}
