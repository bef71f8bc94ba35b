/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * qsetup: the cost of making and tearing down a queue, the part of the
 * library that allocates (doc/allocation.md).  Each round makes a tag set
 * of --hw-queues x --depth requests and a queue over it with --sched, then
 * destroys both; it prints the mean wall time of a round, split into
 * set-up and teardown, and, when jemalloc is in the process, the
 * jemalloc allocations a round makes (stats.arenas.<all>.{small,large}.nmalloc)
 * and the bytes it leaves resident afterwards.
 *
 * It does not link jemalloc: run it as it is, it is an embedder whose
 * malloc is libc's (jemalloc comes in only as librequest's dependency);
 * under LD_PRELOAD=libjemalloc.so.2 it is a program that uses jemalloc
 * itself, as rqbench does.  mallctl is found with dlsym().  Not installed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librequest/mq.h>

typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);

static mallctl_fn je_mallctl;

/* jemalloc allocations so far over every arena, or 0 without jemalloc. */
static uint64_t je_nmalloc(void)
{
	static const char *const names[] = {
		"stats.arenas.4096.small.nmalloc", "stats.arenas.4096.large.nmalloc",
	};
	uint64_t epoch = 1, v, n = 0;
	size_t sz = sizeof(epoch);

	if (!je_mallctl || je_mallctl("epoch", &epoch, &sz, &epoch, sz))
		return 0;
	for (unsigned i = 0; i < 2; i++) {
		sz = sizeof(v);
		if (!je_mallctl(names[i], &v, &sz, NULL, 0)) /* 4096: MALLCTL_ARENAS_ALL */
			n += v;
	}
	return n;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static rq_status_t qsetup_queue_rq(struct rq_hw_ctx *hctx, struct rq_request *rq, bool last)
{
	rq_mq_end_request(rq, RQ_STS_OK);
	return RQ_STS_OK;
}

static const struct rq_mq_ops qsetup_ops = {
	RQ_MQ_OPS_INIT,
	.queue_rq = qsetup_queue_rq,
};

static void usage(FILE *f)
{
	fprintf(f, "usage: qsetup [--hw-queues N] [--depth N] [--cmd-size BYTES] [--sched NAME]\n"
		   "              [--rounds N]\n"
		   "       qsetup -h|--help\n");
}

/* A positive number from @arg for @flag, or exit 2. */
static unsigned num_arg(const char *flag, const char *arg)
{
	char *end;
	unsigned long v = strtoul(arg, &end, 0);

	if (!*arg || *end || v == 0 || v > 1u << 20) {
		fprintf(stderr, "qsetup: %s: \"%s\" is not a number from 1 to %u\n", flag, arg,
			1u << 20);
		exit(2);
	}
	return (unsigned)v;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "hw-queues", required_argument, NULL, 'q' },
		{ "depth", required_argument, NULL, 'd' },
		{ "cmd-size", required_argument, NULL, 'c' },
		{ "sched", required_argument, NULL, 's' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	unsigned nr_hw = 4, depth = 1024, cmd_size = 64, rounds = 200;
	const char *sched = "none";
	uint64_t t_setup = 0, t_down = 0, a0, a1;
	int c;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'q': nr_hw = num_arg("--hw-queues", optarg); break;
		case 'd': depth = num_arg("--depth", optarg); break;
		case 'c': cmd_size = num_arg("--cmd-size", optarg); break;
		case 's': sched = optarg; break;
		case 'r': rounds = num_arg("--rounds", optarg); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	je_mallctl = (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
	a0 = je_nmalloc();
	for (unsigned r = 0; r < rounds; r++) {
		struct rq_tag_set_config cfg = {
			RQ_TAG_SET_CONFIG_INIT,
			.ops = &qsetup_ops,
			.nr_hw_queues = nr_hw,
			.queue_depth = depth,
			.cmd_size = cmd_size,
			.numa_node = -1,
		};
		struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT, .scheduler = sched };
		struct rq_tag_set *set;
		struct rq_queue *q;
		uint64_t t0 = now_ns(), t1, t2;
		int ret = rq_tag_set_alloc(&cfg, &set);

		if (!ret) {
			ret = rq_mq_alloc_queue(set, &qc, &q);
			if (ret)
				rq_tag_set_free(set);
		}
		if (ret) {
			fprintf(stderr, "qsetup: making the queue: %s\n", strerror(-ret));
			return 1;
		}
		t1 = now_ns();
		rq_queue_destroy(q);
		rq_tag_set_free(set);
		t2 = now_ns();
		t_setup += t1 - t0;
		t_down += t2 - t1;
	}
	a1 = je_nmalloc();
	printf("qsetup %u x %u sched %s: %u rounds, set-up %.1f us, teardown %.1f us, "
	       "round %.1f us",
	       nr_hw, depth, sched, rounds, t_setup / 1e3 / rounds, t_down / 1e3 / rounds,
	       (t_setup + t_down) / 1e3 / rounds);
	if (je_mallctl)
		printf("; jemalloc allocs/round %.1f", (double)(a1 - a0) / rounds);
	printf("\n");
	return 0;
}
