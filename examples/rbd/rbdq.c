/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * rbdq: the RBD driver in a few lines.  Opens POOL/IMAGE, writes a pattern
 * through librequest with multi-vector bios from --offset on, flushes,
 * reads it back and compares, then (unless --write-only) zeroes the first
 * quarter with write-zeroes, discards the second half and checks both read
 * as zeros, and prints what the driver did (--json: one JSON object).
 *
 *   rbdq [--ceph-conf FILE] [--id ID] [--queues N] [--sched NAME]
 *        [--offset BYTES] [--span-objects] [--write-only] [--json]
 *        POOL/IMAGE [SIZE_MIB]
 *
 * It overwrites SIZE_MIB MiB of the image from --offset: a scratch image.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librequest/librequest.h>

#include "progopt.h"
#include "rbd_drv.h"

#define CHUNK (256u * 1024) /* bytes per bio: four 64 KiB vectors */
#define DEFAULT_MIB 16
#define MAX_MIB 1024

static atomic_int ended;
static atomic_int failed;
static atomic_int last_status;

static void count_end_io(struct rq_bio *bio)
{
	if (bio->status != RQ_STS_OK) {
		atomic_fetch_add(&failed, 1);
		atomic_store(&last_status, bio->status);
	}
	atomic_fetch_add(&ended, 1);
	rq_bio_put(bio);
}

/* Submit one bio of @op over [@pos, @pos + @len) of @buf (NULL: no data). */
static void submit(struct rq_queue *q, unsigned op, uint64_t pos, char *buf, uint32_t len)
{
	struct rq_bio *bio = rq_bio_alloc(4);
	uint32_t off;

	if (!bio) {
		fprintf(stderr, "rbdq: out of memory\n");
		exit(1);
	}
	bio->op = op;
	bio->iter.sector = pos >> RQ_SECTOR_SHIFT;
	bio->end_io = count_end_io;
	if (buf) {
		for (off = 0; off < len; off += len / 4)
			rq_bio_add_vec(bio, buf + off, len / 4);
	} else {
		bio->iter.size = len;
	}
	rq_submit_bio(q, bio);
}

static void wait_all(int want)
{
	while (atomic_load(&ended) < want)
		sched_yield();
}

/* Submit [@pos, @pos + @size) as CHUNK bios of @op in one plug. */
static int submit_range(struct rq_queue *q, unsigned op, uint64_t pos, char *buf,
			uint64_t size)
{
	struct rq_plug plug;
	uint64_t off;
	int n = 0;

	rq_start_plug(&plug);
	for (off = 0; off < size; off += CHUNK, n++)
		submit(q, op, pos + off, buf ? buf + off : NULL,
		       (uint32_t)(size - off < CHUNK ? size - off : CHUNK));
	rq_finish_plug(&plug);
	return n;
}

static bool all_zero(const char *p, uint64_t n)
{
	return n == 0 || (p[0] == 0 && !memcmp(p, p + 1, n - 1));
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: rbdq [--ceph-conf FILE] [--id ID] [--queues N] [--sched NAME]\n"
"            [--offset BYTES] [--span-objects] [--write-only] [--json]\n"
"            POOL/IMAGE [SIZE_MIB]\n"
"       rbdq -h|--help | --version\n"
"\n"
"Overwrites SIZE_MIB MiB (default %d, at most %d) of the RBD image from\n"
"--offset with a pattern through librequest and the librbd driver, flushes,\n"
"reads it back, zeroes the first quarter, discards the second half and checks\n"
"both read as zeros; prints the driver's counters.  Use a scratch image.\n"
"\n"
"  --ceph-conf FILE  the cluster's ceph.conf (default: librados' search,\n"
"                    $CEPH_CONF, /etc/ceph/ceph.conf)\n"
"  --id ID           cephx client id, without \"client.\" (default admin)\n"
"  --queues N        hardware queues (default 1)\n"
"  --sched NAME      I/O scheduler (default: the library's choice)\n"
"  --offset BYTES    where to start, a multiple of 512 (suffix K, M, G)\n"
"  --span-objects    let a request span RADOS objects (one librbd call)\n"
"  --write-only      write and flush only (no read back, zeroing or discard)\n"
"  --json            print the counters as one JSON object\n",
		DEFAULT_MIB, MAX_MIB);
}

enum {
	OPT_CONF = 256, OPT_ID, OPT_QUEUES, OPT_SCHED, OPT_OFFSET, OPT_SPAN,
	OPT_WRITE_ONLY, OPT_JSON,
};

struct rbdq_opts {
	struct rqrbd_config cfg;
	uint64_t offset, size;
	bool write_only, json;
	char pool[256];
};

static void parse(int argc, char **argv, struct rbdq_opts *o)
{
	static const struct option longopts[] = {
		{ "ceph-conf", required_argument, NULL, OPT_CONF },
		{ "id", required_argument, NULL, OPT_ID },
		{ "queues", required_argument, NULL, OPT_QUEUES },
		{ "sched", required_argument, NULL, OPT_SCHED },
		{ "offset", required_argument, NULL, OPT_OFFSET },
		{ "span-objects", no_argument, NULL, OPT_SPAN },
		{ "write-only", no_argument, NULL, OPT_WRITE_ONLY },
		{ "json", no_argument, NULL, OPT_JSON },
		PROG_STD_OPTIONS,
		{ NULL, 0, NULL, 0 },
	};
	const char *spec, *slash;
	int c;

	rqrbd_config_default(&o->cfg);
	prog_init("rbdq", usage);
	while ((c = prog_getopt(argc, argv, longopts)) != -1) {
		switch (c) {
		case OPT_CONF: o->cfg.ceph_conf = optarg; break;
		case OPT_ID: o->cfg.client_id = optarg; break;
		case OPT_QUEUES: o->cfg.nr_hw_queues = (unsigned)opt_uint("--queues", optarg, 1, 64); break;
		case OPT_SCHED: o->cfg.sched = optarg; break;
		case OPT_OFFSET:
			o->offset = opt_size("--offset", optarg, 0, 1ull << 50);
			if (o->offset % RQ_SECTOR_SIZE)
				prog_usage_error("--offset: %s is not a multiple of 512", optarg);
			break;
		case OPT_SPAN: o->cfg.span_objects = true; break;
		case OPT_WRITE_ONLY: o->write_only = true; break;
		case OPT_JSON: o->json = true; break;
		}
	}
	if (optind >= argc)
		prog_usage_error("POOL/IMAGE: missing (the image to overwrite)");
	spec = argv[optind++];
	slash = strchr(spec, '/');
	if (!slash || slash == spec || !slash[1] || strchr(slash + 1, '/') ||
	    (size_t)(slash - spec) >= sizeof(o->pool))
		prog_usage_error("POOL/IMAGE: '%s' is not POOL/IMAGE", spec);
	memcpy(o->pool, spec, (size_t)(slash - spec));
	o->cfg.pool = o->pool;
	o->cfg.image = slash + 1;
	o->size = (uint64_t)DEFAULT_MIB << 20;
	if (optind < argc)
		o->size = opt_uint("SIZE_MIB", argv[optind++], 1, MAX_MIB) << 20;
	prog_no_operands(argc, argv);
}

static void print_stats(const struct rbdq_opts *o, struct rqrbd_dev *dev, bool same,
			bool zeros)
{
	struct rqrbd_stats st;
	char line[512];

	rqrbd_get_stats(dev, &st);
	if (o->json) {
		printf("{\"object_size\": %llu, \"handles\": %u, \"read_back\": \"%s\", "
		       "\"zeros\": %s, \"failed_bios\": %d, ",
		       (unsigned long long)rqrbd_object_size(dev), rqrbd_nr_handles(dev),
		       same ? "same" : "MISMATCH", o->write_only ? "null" : zeros ? "true" : "false",
		       atomic_load(&failed));
		rqrbd_stats_json(&st, stdout);
		printf("}\n");
		return;
	}
	printf("read back: %s\n", same ? "same" : "MISMATCH");
	if (!o->write_only)
		printf("after write-zeroes and discard: %s\n", zeros ? "zeros" : "NOT zeros");
	rqrbd_stats_format(&st, line, sizeof(line));
	printf("%s; %d failed bios\n", line, atomic_load(&failed));
}

int main(int argc, char **argv)
{
	struct rbdq_opts o = { 0 };
	struct rqrbd_dev *dev;
	struct rq_queue *q;
	uint64_t pos, size;
	char *wbuf, *rbuf;
	bool same, zeros = false;
	int ret, n = 0;

	parse(argc, argv, &o);
	o.cfg.quiet = o.json;
	ret = rqrbd_create(&o.cfg, &dev);
	if (ret) {
		fprintf(stderr, "rbdq: %s/%s: %s\n", o.cfg.pool, o.cfg.image, strerror(-ret));
		return 1;
	}
	q = rqrbd_queue(dev);
	size = o.size;
	if (o.offset >= rqrbd_size(dev) || size > rqrbd_size(dev) - o.offset) {
		fprintf(stderr, "rbdq: %llu MiB from offset %llu do not fit in the image (%llu bytes)\n",
			(unsigned long long)(size >> 20), (unsigned long long)o.offset,
			(unsigned long long)rqrbd_size(dev));
		rqrbd_destroy(dev);
		return 1;
	}
	if (posix_memalign((void **)&wbuf, 4096, size) ||
	    posix_memalign((void **)&rbuf, 4096, size))
		return 1;
	for (pos = 0; pos < size; pos++)
		wbuf[pos] = (char)(pos * 7 + pos / 4096 + 1);

	n += submit_range(q, RQ_OP_WRITE, o.offset, wbuf, size);
	wait_all(n);
	submit(q, RQ_OP_FLUSH, 0, NULL, 0);
	wait_all(++n);
	same = true;
	if (!o.write_only) {
		n += submit_range(q, RQ_OP_READ, o.offset, rbuf, size);
		wait_all(n);
		same = !memcmp(wbuf, rbuf, size);

		n += submit_range(q, RQ_OP_WRITE_ZEROES, o.offset, NULL, size / 4);
		n += submit_range(q, RQ_OP_DISCARD, o.offset + size / 2, NULL, size / 2);
		wait_all(n);
		memset(rbuf, 0xff, size);
		n += submit_range(q, RQ_OP_READ, o.offset, rbuf, size);
		wait_all(n);
		zeros = all_zero(rbuf, size / 4) && all_zero(rbuf + size / 2, size / 2) &&
			!memcmp(wbuf + size / 4, rbuf + size / 4, size / 4);
	}
	print_stats(&o, dev, same, zeros);
	rqrbd_destroy(dev);
	free(wbuf);
	free(rbuf);
	if (atomic_load(&failed))
		fprintf(stderr, "rbdq: %d bios failed, the last with %s\n", atomic_load(&failed),
			rq_status_name((rq_status_t)atomic_load(&last_status)));
	return atomic_load(&failed) || !same || (!o.write_only && !zeros) ? 1 : 0;
}
