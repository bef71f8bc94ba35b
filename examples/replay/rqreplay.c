/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * rqreplay: replay a block I/O trace through librequest's schedulers onto a
 * modelled disk or SSD, on a virtual clock; compare schedulers in one run.
 * See rqreplay(1) and doc/replay.md.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <librequest/iocontext.h>

#include "progopt.h"
#include "rqreplay.h"

#define MAX_LIST 64

static void usage(FILE *f)
{
	fprintf(f,
"usage: rqreplay [OPTIONS] TRACE\n"
"Replay TRACE through librequest's schedulers onto a modelled device, on a\n"
"virtual clock: the same inputs give the same output, byte for byte.\n"
"\n"
"Trace:\n"
"  --format F         auto (default), fio, blkparse, blktrace, csv\n"
"  --by pid|file      what makes a stream (an io context) [pid; fio: file]\n"
"Device:\n"
"  --model PRESET     hdd-7200 (default), hdd-5400, ssd-sata, nvme\n"
"  --model-file FILE  parameters as \"key = value\" lines (after the preset)\n"
"  --set KEY=VALUE    one parameter (after the file); repeatable\n"
"  --print-model      print the model's parameters and exit\n"
"Scheduling:\n"
"  --sched LIST       comma-separated schedulers, each replayed in turn\n"
"                     (mq: none, mq-deadline, kyber, bfq; sq: noop,\n"
"                     deadline, cfq) [the queue's default]\n"
"  --front mq|sq      request layer front end [mq]\n"
"  --attr NAME=VALUE  queue attribute or tunable (iosched/NAME); repeatable\n"
"  --weight KEY=W     io context weight of stream KEY (1..1000); repeatable\n"
"  --group KEY=G:W    put stream KEY in io group G of weight W; repeatable\n"
"Timing:\n"
"  --open             issue at the trace's timestamps (default)\n"
"  --speed X          open loop: replay X times faster [1]\n"
"  --closed           ignore timestamps: DEPTH I/Os in flight per stream\n"
"  --depth N          closed loop depth [1]\n"
"Output:\n"
"  --json             one JSON object on stdout instead of tables\n"
"  --cdf N            latency CDF points in JSON and plots [20]\n"
"  --plot DIR         write DIR/cdf-SCHED.dat, DIR/replay.gp and, with\n"
"                     gnuplot, DIR/latency-cdf.png\n"
"  --blktrace PREFIX  write the simulated run as PREFIX[-SCHED].blktrace.0\n"
"                     (blkparse -i, btt -i read it)\n"
"  -h, --help         this text\n"
"  --version          the version\n");
}

enum {
	O_FORMAT = 1, O_BY, O_MODEL, O_MODEL_FILE, O_SET, O_PRINT_MODEL, O_SCHED, O_FRONT,
	O_ATTR, O_WEIGHT, O_GROUP, O_OPEN, O_SPEED, O_CLOSED, O_DEPTH, O_JSON, O_CDF, O_PLOT,
	O_BLKTRACE,
};

static const struct option longopts[] = {
	{ "format", required_argument, NULL, O_FORMAT },
	{ "by", required_argument, NULL, O_BY },
	{ "model", required_argument, NULL, O_MODEL },
	{ "model-file", required_argument, NULL, O_MODEL_FILE },
	{ "set", required_argument, NULL, O_SET },
	{ "print-model", no_argument, NULL, O_PRINT_MODEL },
	{ "sched", required_argument, NULL, O_SCHED },
	{ "front", required_argument, NULL, O_FRONT },
	{ "attr", required_argument, NULL, O_ATTR },
	{ "weight", required_argument, NULL, O_WEIGHT },
	{ "group", required_argument, NULL, O_GROUP },
	{ "open", no_argument, NULL, O_OPEN },
	{ "speed", required_argument, NULL, O_SPEED },
	{ "closed", no_argument, NULL, O_CLOSED },
	{ "depth", required_argument, NULL, O_DEPTH },
	{ "json", no_argument, NULL, O_JSON },
	{ "cdf", required_argument, NULL, O_CDF },
	{ "plot", required_argument, NULL, O_PLOT },
	{ "blktrace", required_argument, NULL, O_BLKTRACE },
	PROG_STD_OPTIONS,
	{ NULL, 0, NULL, 0 },
};

static struct {
	enum rq_replay_format format;
	int by;                 /* -1: by the format */
	const char *model, *model_file;
	const char *sets[MAX_LIST];
	unsigned nr_sets;
	bool print_model;
	char *scheds[MAX_LIST];
	unsigned nr_scheds;
	enum rq_replay_front front;
	const char *attrs[MAX_LIST + 1];
	unsigned nr_attrs;
	struct rq_replay_stream_opt streams[MAX_LIST];
	unsigned nr_streams;
	struct rq_replay_group_opt groups[MAX_LIST];
	unsigned nr_groups;
	bool closed;
	double speed;
	unsigned depth;
	bool json;
	unsigned cdf;
	const char *plot, *blktrace;
} opt = { .by = -1, .model = "hdd-7200", .speed = 1.0, .depth = 1, .cdf = 20 };

static struct rq_replay_stream_opt *stream_opt(const char *key)
{
	unsigned i;

	for (i = 0; i < opt.nr_streams; i++)
		if (!strcmp(opt.streams[i].key, key))
			return &opt.streams[i];
	if (opt.nr_streams == MAX_LIST)
		prog_usage_error("too many streams named (at most %d)", MAX_LIST);
	opt.streams[opt.nr_streams].key = key;
	return &opt.streams[opt.nr_streams++];
}

/* "KEY=REST": split at the last '=', so file names may hold '='... not the last. */
static char *split_eq(const char *flag, char *arg)
{
	char *eq = strrchr(arg, '=');

	if (!eq || eq == arg || !eq[1])
		prog_usage_error("%s: expected KEY=VALUE, not \"%s\"", flag, arg);
	*eq = 0;
	return eq + 1;
}

static void parse_group(char *arg)
{
	char *val = split_eq("--group", arg), *colon = strchr(val, ':');
	unsigned id, w, i;

	if (!colon)
		prog_usage_error("--group: expected KEY=GROUP:WEIGHT, not \"%s=%s\"", arg, val);
	*colon = 0;
	id = (unsigned)opt_uint("--group", val, 1, 1000);
	w = (unsigned)opt_uint("--group", colon + 1, 1, 1000);
	for (i = 0; i < opt.nr_groups; i++)
		if (opt.groups[i].id == id && opt.groups[i].weight != w)
			prog_usage_error("--group: group %u given weights %u and %u", id,
					 opt.groups[i].weight, w);
	if (i == opt.nr_groups) {
		for (i = 0; i < opt.nr_groups && opt.groups[i].id != id; i++)
			;
		if (i == opt.nr_groups) {
			if (opt.nr_groups == MAX_LIST)
				prog_usage_error("--group: too many groups");
			opt.groups[opt.nr_groups++] = (struct rq_replay_group_opt){ id, w };
		}
	}
	stream_opt(arg)->group = id;
}

static void add_list(const char *flag, const char **list, unsigned *n, const char *v)
{
	if (*n == MAX_LIST)
		prog_usage_error("%s: given more than %d times", flag, MAX_LIST);
	list[(*n)++] = v;
}

static void parse_sched(char *arg)
{
	char *save = NULL, *s;

	for (s = strtok_r(arg, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
		if (opt.nr_scheds == MAX_LIST)
			prog_usage_error("--sched: too many schedulers");
		opt.scheds[opt.nr_scheds++] = s;
	}
	if (!opt.nr_scheds)
		prog_usage_error("--sched: empty list");
}

static void parse_args(int argc, char **argv)
{
	static const char *const formats[] = { "auto", "fio", "blkparse", "blktrace", "csv" };
	static const char *const bys[] = { "pid", "file" };
	static const char *const fronts[] = { "mq", "sq" };
	char *endp;
	int c;

	while ((c = prog_getopt(argc, argv, longopts)) != -1) {
		switch (c) {
		case O_FORMAT:
			opt.format = (enum rq_replay_format)opt_choice("--format", optarg, formats, 5);
			break;
		case O_BY:
			opt.by = (int)opt_choice("--by", optarg, bys, 2);
			break;
		case O_MODEL:
			opt.model = optarg;
			break;
		case O_MODEL_FILE:
			opt.model_file = optarg;
			break;
		case O_SET:
			split_eq("--set", optarg)[-1] = '=';
			add_list("--set", opt.sets, &opt.nr_sets, optarg);
			break;
		case O_PRINT_MODEL:
			opt.print_model = true;
			break;
		case O_SCHED:
			parse_sched(optarg);
			break;
		case O_FRONT:
			opt.front = (enum rq_replay_front)opt_choice("--front", optarg, fronts, 2);
			break;
		case O_ATTR:
			split_eq("--attr", optarg)[-1] = '=';
			add_list("--attr", opt.attrs, &opt.nr_attrs, optarg);
			break;
		case O_WEIGHT: {
			char *v = split_eq("--weight", optarg);

			stream_opt(optarg)->weight = (unsigned)opt_uint("--weight", v, 1, 1000);
			break;
		}
		case O_GROUP:
			parse_group(optarg);
			break;
		case O_OPEN:
			opt.closed = false;
			break;
		case O_SPEED:
			opt.speed = strtod(optarg, &endp);
			if (*endp || endp == optarg || !(opt.speed > 0) || opt.speed > 1e9)
				prog_usage_error("--speed: expected a positive number, not \"%s\"",
						 optarg);
			break;
		case O_CLOSED:
			opt.closed = true;
			break;
		case O_DEPTH:
			opt.depth = (unsigned)opt_uint("--depth", optarg, 1, 4096);
			break;
		case O_JSON:
			opt.json = true;
			break;
		case O_CDF:
			opt.cdf = (unsigned)opt_uint("--cdf", optarg, 0, 100000);
			break;
		case O_PLOT:
			opt.plot = optarg;
			break;
		case O_BLKTRACE:
			opt.blktrace = optarg;
			break;
		}
	}
}

static struct rq_replay_model *make_model(void)
{
	struct rq_replay_model *m;
	char err[512];
	unsigned i;
	int ret;

	ret = rq_replay_model_new(opt.model, &m);
	if (ret == -ENOENT)
		prog_usage_error("--model: unknown preset \"%s\" (hdd-7200, hdd-5400, ssd-sata, "
				 "nvme)", opt.model);
	if (ret) {
		fprintf(stderr, "rqreplay: %s\n", strerror(-ret));
		exit(1);
	}
	if (opt.model_file && rq_replay_model_load(m, opt.model_file, err, sizeof(err))) {
		rq_replay_model_free(m);
		fprintf(stderr, "rqreplay: %s\n", err);
		exit(1);
	}
	for (i = 0; i < opt.nr_sets; i++) {
		char key[128], *eq = strrchr(opt.sets[i], '=');

		snprintf(key, sizeof(key), "%.*s", (int)(eq - opt.sets[i]), opt.sets[i]);
		ret = rq_replay_model_set(m, key, eq + 1);
		if (ret) {
			rq_replay_model_free(m);
			if (ret == -ENOENT)
				prog_usage_error("--set: unknown parameter \"%s\" for %s", key,
						 opt.model);
			prog_usage_error("--set: bad value \"%s\" for %s", eq + 1, key);
		}
	}
	return m;
}

/* ------------------------------------------------------------- output */

static void print_comparison(struct rq_replay_result **res, unsigned n)
{
	unsigned i;

	printf("\ncomparison (all streams)\n%-12s %8s %9s %10s %10s %10s %10s %10s\n", "sched",
	       "ios", "MB/s", "IOPS", "mean_us", "p50_us", "p99_us", "max_us");
	for (i = 0; i < n; i++) {
		struct rq_replay_summary s;

		rq_replay_result_summary(res[i], -1, &s);
		printf("%-12s %8" PRIu64 " %9.2f %10.1f %10.1f %10.1f %10.1f %10.1f\n",
		       rq_replay_result_sched(res[i]), s.ios, s.mb_per_s, s.iops,
		       s.lat_mean_ns / 1000.0, s.lat_p50_ns / 1000.0, s.lat_p99_ns / 1000.0,
		       s.lat_max_ns / 1000.0);
	}
}

static int write_plot(struct rq_replay_result **res, unsigned n, const char *model)
{
	char path[4200];
	unsigned i;
	FILE *gp;

	if (mkdir(opt.plot, 0777) && errno != EEXIST) {
		fprintf(stderr, "rqreplay: --plot %s: %s\n", opt.plot, strerror(errno));
		return 1;
	}
	for (i = 0; i < n; i++) {
		FILE *f;

		snprintf(path, sizeof(path), "%s/cdf-%s.dat", opt.plot,
			 rq_replay_result_sched(res[i]));
		f = fopen(path, "w");
		if (!f) {
			fprintf(stderr, "rqreplay: %s: %s\n", path, strerror(errno));
			return 1;
		}
		fprintf(f, "# latency_us fraction (%s on %s)\n", rq_replay_result_sched(res[i]),
			model);
		rq_replay_result_cdf(res[i], -1, f, opt.cdf ? opt.cdf * 10 : 200);
		fclose(f);
	}
	snprintf(path, sizeof(path), "%s/replay.gp", opt.plot);
	gp = fopen(path, "w");
	if (!gp) {
		fprintf(stderr, "rqreplay: %s: %s\n", path, strerror(errno));
		return 1;
	}
	fprintf(gp, "# rqreplay: latency CDF per scheduler; run: cd %s && gnuplot replay.gp\n"
		"set terminal pngcairo size 800,500\nset output 'latency-cdf.png'\n"
		"set title 'latency CDF on %s'\nset xlabel 'latency (us)'\n"
		"set ylabel 'fraction of I/Os'\nset logscale x\nset key bottom right\n"
		"set grid\nplot ", opt.plot, model);
	for (i = 0; i < n; i++)
		fprintf(gp, "%s'cdf-%s.dat' using 1:2 with steps lw 2 title '%s'",
			i ? ", \\\n     " : "", rq_replay_result_sched(res[i]),
			rq_replay_result_sched(res[i]));
	fprintf(gp, "\n");
	fclose(gp);
	fflush(stdout); /* the child must not flush our buffer a second time */
	if (fork() == 0) {
		if (chdir(opt.plot) == 0 && freopen("/dev/null", "w", stdout))
			execlp("gnuplot", "gnuplot", "replay.gp", (char *)NULL);
		_exit(127);
	} else {
		int st;

		wait(&st);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			fprintf(stderr, "rqreplay: gnuplot failed or is missing: %s/replay.gp "
				"and the .dat files are written, no PNG\n", opt.plot);
	}
	return 0;
}

/* ---------------------------------------------------------------- main */

static int replay_one(const struct rq_replay_trace *t, const struct rq_replay_model *m,
		      char *sched, struct rq_replay_result **out)
{
	struct rq_replay_config cfg = { RQ_REPLAY_CONFIG_INIT };
	char prefix[4200], err[512];
	int ret;

	cfg.sched = sched;
	cfg.front = opt.front;
	cfg.attrs = opt.attrs;
	cfg.closed_loop = opt.closed;
	cfg.depth = opt.depth;
	cfg.speed = opt.speed;
	cfg.map = opt.by >= 0 ? (enum rq_replay_map)opt.by :
		  rq_replay_trace_file_name(t, 0) ? RQ_REPLAY_BY_FILE : RQ_REPLAY_BY_PID;
	cfg.streams = opt.streams;
	cfg.nr_streams = opt.nr_streams;
	cfg.groups = opt.groups;
	cfg.nr_groups = opt.nr_groups;
	if (opt.blktrace) {
		if (opt.nr_scheds > 1)
			snprintf(prefix, sizeof(prefix), "%s-%s", opt.blktrace, sched);
		else
			snprintf(prefix, sizeof(prefix), "%s", opt.blktrace);
		cfg.blktrace_out = prefix;
	}
	ret = rq_replay_run(t, m, &cfg, out, err, sizeof(err));
	if (ret)
		fprintf(stderr, "rqreplay: %s\n", err);
	return ret;
}

int main(int argc, char **argv)
{
	struct rq_replay_result *res[MAX_LIST];
	struct rq_replay_trace *t;
	struct rq_replay_model *m;
	char err[512], *none = NULL;
	unsigned i, n;
	int ret;

	prog_init("rqreplay", usage);
	parse_args(argc, argv);
	m = make_model();
	if (opt.print_model) {
		if (optind < argc)
			rq_replay_model_free(m);
		prog_no_operands(argc, argv);
		rq_replay_model_print(m, stdout);
		rq_replay_model_free(m);
		return 0;
	}
	if (optind != argc - 1) {
		rq_replay_model_free(m);
		prog_usage_error(optind >= argc ? "no TRACE given" : "one TRACE only, not \"%s\"",
				 argv[optind + 1]);
	}
	ret = rq_replay_trace_load(argv[optind], opt.format, &t, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "rqreplay: %s\n", err);
		rq_replay_model_free(m);
		return 1;
	}
	n = opt.nr_scheds ? opt.nr_scheds : 1;
	for (i = 0; i < n; i++) {
		if (replay_one(t, m, opt.nr_scheds ? opt.scheds[i] : none, &res[i])) {
			while (i--)
				rq_replay_result_free(res[i]);
			rq_replay_trace_free(t);
			rq_replay_model_free(m);
			return 1;
		}
	}
	if (opt.json) {
		printf("{\"trace\":{\"ios\":%zu},\"model\":\"%s\",\"runs\":[",
		       rq_replay_trace_count(t), rq_replay_model_name(m));
		for (i = 0; i < n; i++) {
			printf("%s", i ? "," : "");
			rq_replay_result_json(res[i], stdout, opt.cdf);
		}
		printf("]}\n");
	} else {
		for (i = 0; i < n; i++) {
			printf("%s", i ? "\n" : "");
			rq_replay_result_print(res[i], stdout);
		}
		if (n > 1)
			print_comparison(res, n);
	}
	if (opt.plot && write_plot(res, n, rq_replay_model_name(m)))
		ret = 1;
	for (i = 0; i < n; i++)
		rq_replay_result_free(res[i]);
	rq_replay_trace_free(t);
	rq_replay_model_free(m);
	return fflush(stdout) || ret ? 1 : 0;
}
