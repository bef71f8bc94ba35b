/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * hddbench: mixed sequential and random streams on the simulated disk,
 * under every scheduler the build offers on either front end, to show what
 * each does to throughput and read latency.
 *
 *   hddbench [--time SEC] [--sched [FRONT:]NAME[,...]] [--scenario NAME]
 *            [--readers N] [--ncq N] [--seed N] [--real]
 *   hddbench -h|--help | --version
 *
 * Schedulers: by default every name a multi-queue hddsim queue's
 * "scheduler" attribute lists (none, mq-deadline, kyber, bfq), then every
 * name a single-queue one's lists (noop, deadline, cfq).  --sched picks
 * some: "mq:NAME" or "sq:NAME" for one front end, a bare NAME for each
 * front end that lists it.
 *
 * Scenarios (each stream has its own io context, as separate processes
 * would, so fair schedulers can tell them apart):
 *   seqread    one sequential reader (128 KiB reads, one at a time) and N
 *              random readers (4 KiB, one at a time each)
 *   seqwrite   one sequential writer (128 KiB writes, 8 in flight, as
 *              write-back) and N random readers
 *   2seqread   two sequential readers far apart on the disk
 *
 * Every run is a fresh disk.  On the virtual clock (the default) a run of
 * SEC simulated seconds takes a fraction of that and prints the same
 * numbers every time: the process drives the library's service itself
 * (rq_service_manual()), so hddsim does delayed runs at their virtual
 * moment; --real runs on CLOCK_MONOTONIC, with the service thread, instead.
 * Throughput counts what completed within SEC; latency is every read's,
 * submit to end_io, in milliseconds of the disk's clock.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librequest/librequest.h>

#include "hddsim.h"
#include "progopt.h"

#define MAX_STREAMS 10
#define MAX_DEPTH 8
#define MAX_SCHEDS 16
#define MAX_SECONDS 86400
#define MAX_NCQ 32
#define IO_BUF (1u << 20)
#define IDLE_STEP_NS 1000000ull /* virtual time let pass while a scheduler idles */

struct stream;
struct run;

/* One bio a stream may have in flight. */
struct slot {
	struct rq_bio bio;
	struct stream *s;
	uint64_t submit_ns;
	bool busy;
};

/* One submitter: sequential or random, reads or writes. */
struct stream {
	struct run *run;
	char name[16];
	bool sequential;
	unsigned op;
	uint32_t bytes;
	unsigned depth;
	uint64_t next_sector;   /* sequential: where the next bio goes */
	uint64_t rng;           /* random: xorshift64 state */
	struct rq_io_context *ioc;
	struct slot slots[MAX_DEPTH];
	unsigned inflight;
	uint64_t done_bytes;    /* completed within the run's time */
	uint64_t done_ios;
	uint64_t *lat;          /* read latencies, ns */
	size_t nlat, caplat;
};

struct run {
	struct hddsim_dev *dev;
	struct stream streams[MAX_STREAMS];
	unsigned nr_streams;
	uint64_t end_ns;
	bool real;
	pthread_mutex_t lock;   /* stream state: end_io may run on the drive thread */
	pthread_cond_t cond;
	unsigned completions;
};

static char *io_buf;

/* A scheduler to run, and the front end whose queue runs it. */
struct sched_choice {
	enum hddsim_front front;
	char *name;
};

static struct {
	double seconds;
	unsigned readers;
	unsigned ncq;
	uint64_t seed;
	bool real;
	const char *scenario;
	char *want[MAX_SCHEDS];        /* --sched, as given */
	unsigned nr_want;
	struct sched_choice scheds[MAX_SCHEDS];
	unsigned nr_scheds;
} opt = { .seconds = 30, .readers = 4, .ncq = 1, .seed = 1 };

static const char *front_name(enum hddsim_front front)
{
	return front == HDDSIM_FRONT_SQ ? "sq" : "mq";
}

static uint64_t xorshift64(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static void bench_end_io(struct rq_bio *bio)
{
	struct slot *sl = bio->private_data;
	struct stream *s = sl->s;
	struct run *r = s->run;
	uint64_t now = hddsim_now_ns(r->dev);

	pthread_mutex_lock(&r->lock);
	if (bio->status == RQ_STS_OK && now <= r->end_ns) {
		s->done_bytes += s->bytes;
		s->done_ios++;
	}
	if (s->op == RQ_OP_READ && s->nlat < s->caplat)
		s->lat[s->nlat++] = now - sl->submit_ns;
	sl->busy = false;
	s->inflight--;
	r->completions++;
	pthread_cond_signal(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

/* Put every free slot of @s to work at @now; bios go onto @out. */
static unsigned stream_fill(struct stream *s, uint64_t now, struct rq_bio **out)
{
	uint64_t cap = rq_queue_capacity(hddsim_queue(s->run->dev));
	uint64_t nsec = s->bytes >> RQ_SECTOR_SHIFT;
	unsigned i, n = 0;

	for (i = 0; i < s->depth; i++) {
		struct slot *sl = &s->slots[i];
		uint64_t sector;

		if (sl->busy)
			continue;
		if (s->sequential) {
			if (s->next_sector + nsec > cap)
				s->next_sector = 0;
			sector = s->next_sector;
			s->next_sector += nsec;
		} else {
			/* uniform over the disk, 4 KiB aligned */
			sector = (xorshift64(&s->rng) % (cap / 8 - nsec / 8)) * 8;
		}
		rq_bio_init(&sl->bio, NULL, 1);
		sl->bio.op = (uint8_t)s->op;
		sl->bio.opf = s->op == RQ_OP_READ ? RQ_BIO_SYNC : 0;
		sl->bio.iter.sector = sector;
		rq_bio_add_vec(&sl->bio, io_buf, s->bytes);
		sl->bio.end_io = bench_end_io;
		sl->bio.private_data = sl;
		sl->bio.ioc = s->ioc;
		sl->s = s;
		sl->submit_ns = now;
		sl->busy = true;
		s->inflight++;
		out[n++] = &sl->bio;
	}
	return n;
}

static void stream_add(struct run *r, const char *name, bool sequential, unsigned op,
		       uint32_t bytes, unsigned depth, uint64_t start_sector)
{
	struct stream *s = &r->streams[r->nr_streams];

	memset(s, 0, sizeof(*s));
	s->run = r;
	snprintf(s->name, sizeof(s->name), "%s", name);
	s->sequential = sequential;
	s->op = op;
	s->bytes = bytes;
	s->depth = depth;
	s->next_sector = start_sector;
	s->rng = opt.seed * 0x9e3779b97f4a7c15ull + r->nr_streams + 1;
	s->ioc = rq_ioc_create(0);
	s->caplat = 1u << 20;
	s->lat = malloc(s->caplat * sizeof(*s->lat));
	if (!s->ioc || !s->lat) {
		fprintf(stderr, "hddbench: out of memory\n");
		exit(1);
	}
	r->nr_streams++;
}

/* Build the streams of @scenario on @r's disk.  Return: false if unknown. */
static bool scenario_setup(struct run *r, const char *scenario)
{
	uint64_t cap = rq_queue_capacity(hddsim_queue(r->dev));
	unsigned i;

	if (!strcmp(scenario, "seqread"))
		stream_add(r, "seqR", true, RQ_OP_READ, 128 << 10, 1, cap / 10);
	else if (!strcmp(scenario, "seqwrite"))
		stream_add(r, "seqW", true, RQ_OP_WRITE, 128 << 10, 8, cap / 10);
	else if (!strcmp(scenario, "2seqread")) {
		stream_add(r, "seqA", true, RQ_OP_READ, 128 << 10, 1, cap / 10);
		stream_add(r, "seqB", true, RQ_OP_READ, 128 << 10, 1, cap / 10 * 6);
		return true;
	} else
		return false;
	for (i = 0; i < opt.readers && r->nr_streams < MAX_STREAMS; i++) {
		char name[16];

		snprintf(name, sizeof(name), "rand%u", i + 1);
		stream_add(r, name, false, RQ_OP_READ, 4096, 1, 0);
	}
	return true;
}

/* Drive the streams until the time is up and everything has ended. */
static void run_loop(struct run *r)
{
	struct rq_bio *bios[MAX_STREAMS * MAX_DEPTH];
	uint64_t start = hddsim_now_ns(r->dev);

	r->end_ns = start + (uint64_t)(opt.seconds * 1e9);
	for (;;) {
		uint64_t now = hddsim_now_ns(r->dev);
		unsigned n = 0, i, outstanding = 0;

		pthread_mutex_lock(&r->lock);
		if (now < r->end_ns)
			for (i = 0; i < r->nr_streams; i++)
				n += stream_fill(&r->streams[i], now, bios + n);
		pthread_mutex_unlock(&r->lock);
		/* end_io may run inside: never submit under our lock */
		for (i = 0; i < n; i++)
			rq_submit_bio(hddsim_queue(r->dev), bios[i]);

		pthread_mutex_lock(&r->lock);
		for (i = 0; i < r->nr_streams; i++)
			outstanding += r->streams[i].inflight;
		if (!outstanding && now >= r->end_ns) {
			pthread_mutex_unlock(&r->lock);
			break;
		}
		if (r->real) {
			unsigned seen = r->completions;
			struct timespec ts;

			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_nsec += 10000000;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			while (r->completions == seen &&
			       pthread_cond_timedwait(&r->cond, &r->lock, &ts) != ETIMEDOUT)
				;
			pthread_mutex_unlock(&r->lock);
			continue;
		}
		pthread_mutex_unlock(&r->lock);
		/* virtual: the next completion, or let time pass if held back */
		if (!hddsim_advance(r->dev))
			hddsim_advance_to(r->dev, now + IDLE_STEP_NS);
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Sorted latencies of every stream matching @sequential (reads only). */
static void lat_pct(struct run *r, bool sequential, double *p50, double *p99)
{
	size_t total = 0, k = 0;
	uint64_t *all;
	unsigned i;

	for (i = 0; i < r->nr_streams; i++)
		if (r->streams[i].sequential == sequential)
			total += r->streams[i].nlat;
	*p50 = *p99 = -1;
	if (!total)
		return;
	all = malloc(total * sizeof(*all));
	if (!all)
		return;
	for (i = 0; i < r->nr_streams; i++)
		if (r->streams[i].sequential == sequential) {
			memcpy(all + k, r->streams[i].lat, r->streams[i].nlat * sizeof(*all));
			k += r->streams[i].nlat;
		}
	qsort(all, total, sizeof(*all), cmp_u64);
	*p50 = all[(total - 1) * 50 / 100] / 1e6;
	*p99 = all[(total - 1) * 99 / 100] / 1e6;
	free(all);
}

static void fmt_lat(char *buf, size_t len, double p50, double p99)
{
	if (p50 < 0)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.1f / %.1f", p50, p99);
}

/* One scenario under one scheduler on a fresh disk; prints a table row. */
static int run_one(const char *scenario, enum hddsim_front front, const char *sched)
{
	struct hddsim_config cfg;
	struct hddsim_stats hst;
	char seq[64] = "", rnd[96] = "", lseq[32], lrnd[32];
	double secs = opt.seconds, p50, p99, rand_iops = 0;
	struct run *r;
	unsigned i, nrand = 0;
	int ret;

	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	hddsim_config_default(&cfg);
	cfg.ncq_depth = opt.ncq;
	cfg.front = front;
	cfg.sched = sched;
	cfg.clock = opt.real ? HDDSIM_CLOCK_REAL : HDDSIM_CLOCK_VIRTUAL;
	r->real = opt.real;
	ret = hddsim_create(&cfg, &r->dev);
	if (ret) {
		fprintf(stderr, "hddbench: %s:%s: %s\n", front_name(front), sched,
			strerror(-ret));
		free(r);
		return ret;
	}
	if (!scenario_setup(r, scenario)) {
		fprintf(stderr, "hddbench: unknown scenario %s\n", scenario);
		exit(1);
	}
	run_loop(r);
	hddsim_get_stats(r->dev, &hst);

	for (i = 0; i < r->nr_streams; i++) {
		struct stream *s = &r->streams[i];
		size_t l;

		if (s->sequential) {
			l = strlen(seq);
			snprintf(seq + l, sizeof(seq) - l, "%s%.1f", l ? " + " : "",
				 s->done_bytes / secs / 1e6);
		} else {
			rand_iops += s->done_ios / secs;
			nrand++;
		}
	}
	if (nrand) {
		size_t l;

		snprintf(rnd, sizeof(rnd), "%.0f (", rand_iops);
		for (i = 0; i < r->nr_streams; i++) {
			struct stream *s = &r->streams[i];

			if (s->sequential)
				continue;
			l = strlen(rnd);
			snprintf(rnd + l, sizeof(rnd) - l, "%s%.0f",
				 rnd[l - 1] == '(' ? "" : " ", s->done_ios / secs);
		}
		l = strlen(rnd);
		snprintf(rnd + l, sizeof(rnd) - l, ")");
	} else {
		snprintf(rnd, sizeof(rnd), "-");
	}
	lat_pct(r, true, &p50, &p99);
	fmt_lat(lseq, sizeof(lseq), r->streams[0].op == RQ_OP_READ ? p50 : -1, p99);
	lat_pct(r, false, &p50, &p99);
	fmt_lat(lrnd, sizeof(lrnd), p50, p99);
	printf("| %s | %s | %s | %s | %s | %s | %s | %.0f%% |\n", scenario, front_name(front),
	       sched, seq, rnd, lseq, lrnd,
	       hst.commands ? 100.0 * hst.seeks / hst.commands : 0.0);
	fflush(stdout);

	hddsim_destroy(r->dev);
	for (i = 0; i < r->nr_streams; i++) {
		rq_ioc_put(r->streams[i].ioc);
		free(r->streams[i].lat);
	}
	pthread_cond_destroy(&r->cond);
	pthread_mutex_destroy(&r->lock);
	free(r);
	return 0;
}

/* Every scheduler a queue of each front end offers on this build. */
static struct {
	char *names[MAX_SCHEDS];
	unsigned nr;
} avail[2];

static bool offered(enum hddsim_front front, const char *name)
{
	unsigned i;

	for (i = 0; i < avail[front].nr; i++)
		if (!strcmp(avail[front].names[i], name))
			return true;
	return false;
}

/*
 * Read the "scheduler" attribute of a fresh queue of @front into
 * avail[@front]; exits 1 when the queue cannot be made.
 */
static void read_schedulers(enum hddsim_front front)
{
	struct hddsim_config cfg;
	struct hddsim_dev *dev;
	char buf[512], *tok, *save = NULL;

	hddsim_config_default(&cfg);
	cfg.front = front;
	cfg.sched = front == HDDSIM_FRONT_SQ ? "noop" : "none";
	if (hddsim_create(&cfg, &dev) ||
	    rq_queue_attr_get(hddsim_queue(dev), "scheduler", buf, sizeof(buf)) < 0) {
		fprintf(stderr, "hddbench: cannot read the %s scheduler list\n",
			front_name(front));
		exit(1);
	}
	hddsim_destroy(dev);
	for (tok = strtok_r(buf, " \n", &save); tok && avail[front].nr < MAX_SCHEDS;
	     tok = strtok_r(NULL, " \n", &save)) {
		size_t l;

		if (*tok == '[')
			tok++;
		l = strlen(tok);
		if (l && tok[l - 1] == ']')
			tok[l - 1] = 0;
		avail[front].names[avail[front].nr++] = strdup(tok);
	}
}

/* Both lists, "mq: a b c; sq: d e f", for messages. */
static const char *offered_list(void)
{
	static char list[512];
	size_t len = 0;
	unsigned f, i;

	for (f = 0; f < 2; f++) {
		len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s:", f ? "; " : "",
					front_name(f));
		for (i = 0; i < avail[f].nr && len < sizeof(list); i++)
			len += (size_t)snprintf(list + len, sizeof(list) - len, " %s",
						avail[f].names[i]);
	}
	return list;
}

/*
 * Check each --sched word (NAME, mq:NAME or sq:NAME) against what the
 * front ends offer; a name on the wrong front end or on none is a usage
 * error (exit 2) that says which.
 */
static void check_wanted(void)
{
	unsigned i;

	for (i = 0; i < opt.nr_want; i++) {
		const char *w = opt.want[i], *name = w;
		int front = -1;

		if (!strncmp(w, "mq:", 3) || !strncmp(w, "sq:", 3)) {
			front = w[0] == 's' ? HDDSIM_FRONT_SQ : HDDSIM_FRONT_MQ;
			name += 3;
		} else if (strchr(w, ':')) {
			prog_usage_error("--sched: %s: the front end is mq: or sq:", w);
		}
		if (front >= 0 && offered(front, name))
			continue;
		if (front < 0 && (offered(HDDSIM_FRONT_MQ, name) || offered(HDDSIM_FRONT_SQ, name)))
			continue;
		if (front >= 0 && offered(!front, name))
			prog_usage_error("--sched: %s: %s is a %s scheduler (use %s:%s or %s)",
					 w, name, front == HDDSIM_FRONT_MQ ? "single-queue" :
					 "multi-queue", front_name(!front), name, name);
		prog_usage_error("--sched: %s: no such scheduler in this build (%s)", w,
				 offered_list());
	}
}

/*
 * Is @name (as --sched gave it: NAME, mq:NAME or sq:NAME) wanted on
 * @front?  No --sched: everything is.
 */
static bool sched_wanted(enum hddsim_front front, const char *name)
{
	unsigned i;

	if (!opt.nr_want)
		return true;
	for (i = 0; i < opt.nr_want; i++) {
		const char *w = opt.want[i];

		if (!strncmp(w, "mq:", 3) || !strncmp(w, "sq:", 3)) {
			if (strncmp(w, front_name(front), 2))
				continue;
			w += 3;
		}
		if (!strcmp(w, name))
			return true;
	}
	return false;
}

/* The schedulers of @front that --sched asks for, in the queue's order, into opt.scheds. */
static void pick_schedulers(enum hddsim_front front)
{
	unsigned i;

	for (i = 0; i < avail[front].nr && opt.nr_scheds < MAX_SCHEDS; i++) {
		if (!sched_wanted(front, avail[front].names[i]))
			continue;
		opt.scheds[opt.nr_scheds].front = front;
		opt.scheds[opt.nr_scheds].name = avail[front].names[i];
		opt.nr_scheds++;
	}
}

/*
 * The library picks a software queue by the submitting CPU, and some
 * schedulers (kyber) keep per-CPU lists: one CPU makes a virtual-clock run
 * repeatable.
 */
static void pin_to_one_cpu(void)
{
	cpu_set_t set;
	int cpu = sched_getcpu();

	CPU_ZERO(&set);
	CPU_SET(cpu < 0 ? 0 : cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static const char *const scenarios[] = { "seqread", "seqwrite", "2seqread" };

static void usage(FILE *f)
{
	fprintf(f,
"usage: hddbench [--time SEC] [--sched [mq:|sq:]NAME[,...]]\n"
"                [--scenario seqread|seqwrite|2seqread] [--readers N] [--ncq N]\n"
"                [--seed N] [--real]\n"
"       hddbench -h|--help | --version\n"
"\n"
"Mixed sequential and random streams on a simulated 7200 rpm disk, under\n"
"every scheduler either front end offers; prints one table row per run.\n"
"\n"
"  --time SEC        seconds of disk time per run (default 30, at most %d)\n"
"  --sched LIST      schedulers to run, comma-separated: mq:NAME or sq:NAME\n"
"                    for one front end, a bare NAME for each that offers it\n"
"                    (default: all)\n"
"  --scenario NAME   seqread, seqwrite or 2seqread (default: all three)\n"
"  --readers N       random readers beside the sequential stream (default 4,\n"
"                    0 to %d)\n"
"  --ncq N           commands the drive holds (default 1, 1 to %d)\n"
"  --seed N          random streams' seed (default 1, not 0)\n"
"  --real            run on the real clock with the service thread, not on\n"
"                    the virtual clock\n", MAX_SECONDS, MAX_STREAMS - 2, MAX_NCQ);
}

enum { OPT_TIME = 256, OPT_SCHED, OPT_SCENARIO, OPT_READERS, OPT_NCQ, OPT_SEED, OPT_REAL };

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "time", required_argument, NULL, OPT_TIME },
		{ "sched", required_argument, NULL, OPT_SCHED },
		{ "scenario", required_argument, NULL, OPT_SCENARIO },
		{ "readers", required_argument, NULL, OPT_READERS },
		{ "ncq", required_argument, NULL, OPT_NCQ },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "real", no_argument, NULL, OPT_REAL },
		PROG_STD_OPTIONS,
		{ NULL, 0, NULL, 0 },
	};
	char *save = NULL, *tok;
	unsigned i, j;
	int c;

	prog_init("hddbench", usage);
	while ((c = prog_getopt(argc, argv, longopts)) != -1) {
		switch (c) {
		case OPT_TIME:
			opt.seconds = opt_seconds("--time", optarg, MAX_SECONDS);
			break;
		case OPT_SCHED:
			for (tok = strtok_r(optarg, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
				if (opt.nr_want == MAX_SCHEDS)
					prog_usage_error("--sched: more than %d names", MAX_SCHEDS);
				opt.want[opt.nr_want++] = tok;
			}
			break;
		case OPT_SCENARIO:
			opt.scenario = scenarios[opt_choice("--scenario", optarg, scenarios, 3)];
			break;
		case OPT_READERS:
			opt.readers = (unsigned)opt_uint("--readers", optarg, 0, MAX_STREAMS - 2);
			break;
		case OPT_NCQ:
			opt.ncq = (unsigned)opt_uint("--ncq", optarg, 1, MAX_NCQ);
			break;
		case OPT_SEED:
			opt.seed = opt_uint("--seed", optarg, 1, UINT64_MAX);
			break;
		case OPT_REAL:
			opt.real = true;
			break;
		}
	}
	prog_no_operands(argc, argv);
	if (posix_memalign((void **)&io_buf, 4096, IO_BUF))
		return 1;
	memset(io_buf, 0, IO_BUF);
	if (!opt.real) {
		pin_to_one_cpu();
		/* no service thread: delayed runs come at virtual moments too */
		if (rq_service_manual()) {
			fprintf(stderr, "hddbench: cannot drive the library's service\n");
			return 1;
		}
	}
	read_schedulers(HDDSIM_FRONT_MQ);
	read_schedulers(HDDSIM_FRONT_SQ);
	check_wanted();
	pick_schedulers(HDDSIM_FRONT_MQ);
	pick_schedulers(HDDSIM_FRONT_SQ);

	printf("hddbench: 7200 rpm 1 TiB disk (hddsim defaults), ncq %u, %.0f s %s per run, "
	       "%u random readers; schedulers:", opt.ncq, opt.seconds,
	       opt.real ? "real time" : "virtual time", opt.readers);
	for (i = 0; i < opt.nr_scheds; i++)
		printf(" %s:%s", front_name(opt.scheds[i].front), opt.scheds[i].name);
	printf("\n\n| scenario | front | scheduler | sequential MB/s | random IOPS (per reader) "
	       "| seq read ms p50 / p99 | random read ms p50 / p99 | seeks |\n"
	       "|---|---|---|---|---|---|---|---|\n");
	for (j = 0; j < sizeof(scenarios) / sizeof(scenarios[0]); j++) {
		if (opt.scenario && strcmp(opt.scenario, scenarios[j]))
			continue;
		for (i = 0; i < opt.nr_scheds; i++)
			run_one(scenarios[j], opt.scheds[i].front, opt.scheds[i].name);
	}
	for (i = 0; i < 2; i++)
		for (j = 0; j < avail[i].nr; j++)
			free(avail[i].names[j]);
	free(io_buf);
	return 0;
}
