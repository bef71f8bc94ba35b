/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nullq: the smallest complete librequest program.
 *
 * Makes a memory-backed null device, writes a pattern with a two-vector bio,
 * reads it back and compares, discards it, reads zeros, and prints what the
 * driver saw.
 *
 *   nullq [inline|thread|timer]
 *
 * The word picks how the driver completes requests: on the submitting
 * thread (the default), on a completion thread, or after a timer.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librequest/librequest.h>

#include "null_blk.h"
#include "progopt.h"

/* A bio the caller waits for. */
struct sync_bio {
	struct rq_bio bio;
	struct rq_bvec vecs[2];
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int done;
};

/* end_io: runs once, on whichever thread completed the bio. */
static void sync_end_io(struct rq_bio *bio)
{
	struct sync_bio *sb = bio->private_data;

	pthread_mutex_lock(&sb->lock);
	sb->done = 1;
	pthread_cond_signal(&sb->cond);
	pthread_mutex_unlock(&sb->lock);
}

/**
 * submit_wait() - submit one bio and wait for its end.
 * @q: queue.
 * @op: RQ_OP_*.
 * @sector: start sector.
 * @a: first buffer (or NULL for data-less ops).
 * @b: second buffer (or NULL).
 * @len: bytes of each buffer; for data-less ops the size.
 *
 * Return: the bio's status.
 */
static rq_status_t submit_wait(struct rq_queue *q, unsigned op, uint64_t sector,
			       void *a, void *b, uint32_t len)
{
	struct sync_bio sb;

	memset(&sb, 0, sizeof(sb));
	pthread_mutex_init(&sb.lock, NULL);
	pthread_cond_init(&sb.cond, NULL);
	rq_bio_init(&sb.bio, sb.vecs, 2);
	sb.bio.op = op;
	sb.bio.iter.sector = sector;
	sb.bio.end_io = sync_end_io;
	sb.bio.private_data = &sb;
	if (a) {
		rq_bio_add_vec(&sb.bio, a, len);
		if (b)
			rq_bio_add_vec(&sb.bio, b, len);
	} else {
		sb.bio.iter.size = len;
	}
	rq_submit_bio(q, &sb.bio);

	pthread_mutex_lock(&sb.lock);
	while (!sb.done)
		pthread_cond_wait(&sb.cond, &sb.lock);
	pthread_mutex_unlock(&sb.lock);
	pthread_cond_destroy(&sb.cond);
	pthread_mutex_destroy(&sb.lock);
	return sb.bio.status;
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: nullq [inline|thread|timer]\n"
"       nullq -h|--help | --version\n"
"\n"
"Writes, reads back, discards and reads zeros on a 64 MiB memory-backed null\n"
"device, then prints what the driver saw.  The word says how the driver\n"
"completes requests: inline on the submitting thread (default), on a\n"
"completion thread, or from a timer.  Exit 0 when every check passed.\n");
}

static const char *const completion_names[] = { "inline", "thread", "timer" };

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		PROG_STD_OPTIONS,
		{ NULL, 0, NULL, 0 },
	};
	static char wa[4096], wb[4096], ra[4096], rb[4096], zero[4096];
	struct null_config cfg;
	struct null_stats st;
	struct null_dev *dev;
	struct rq_queue *q;
	int ret, i, bad = 0;

	prog_init("nullq", usage);
	while (prog_getopt(argc, argv, longopts) != -1)
		; /* only the standard options */
	null_config_default(&cfg);
	cfg.memory_backed = true;
	cfg.size_bytes = 64ull << 20;
	if (optind < argc) {
		static const enum null_completion modes[] = {
			NULL_COMPLETE_INLINE, NULL_COMPLETE_THREAD, NULL_COMPLETE_TIMER,
		};

		cfg.completion = modes[opt_choice("completion mode", argv[optind++],
						  completion_names, 3)];
	}
	prog_no_operands(argc, argv);

	ret = null_create(&cfg, &dev);
	if (ret) {
		fprintf(stderr, "null_create: %s\n", strerror(-ret));
		return 1;
	}
	q = null_queue(dev);

	for (i = 0; i < 4096; i++) {
		wa[i] = (char)i;
		wb[i] = (char)(i * 7 + 1);
	}
	bad |= submit_wait(q, RQ_OP_WRITE, 8, wa, wb, 4096) != RQ_STS_OK;
	bad |= submit_wait(q, RQ_OP_READ, 8, ra, rb, 4096) != RQ_STS_OK;
	bad |= memcmp(wa, ra, 4096) || memcmp(wb, rb, 4096);
	printf("write/read 8 KiB at sector 8: %s\n", bad ? "MISMATCH" : "ok");

	bad |= submit_wait(q, RQ_OP_DISCARD, 8, NULL, NULL, 8192) != RQ_STS_OK;
	bad |= submit_wait(q, RQ_OP_READ, 8, ra, rb, 4096) != RQ_STS_OK;
	bad |= memcmp(ra, zero, 4096) || memcmp(rb, zero, 4096);
	printf("discard, read back zeros: %s\n", bad ? "FAILED" : "ok");

	null_get_stats(dev, &st);
	printf("driver saw %llu requests (%llu reads, %llu writes, %llu discards), "
	       "%llu bytes, %llu pages held\n",
	       (unsigned long long)st.requests, (unsigned long long)st.reads,
	       (unsigned long long)st.writes, (unsigned long long)st.discards,
	       (unsigned long long)st.bytes, (unsigned long long)st.pages);
	null_destroy(dev);
	return bad ? 1 : 0;
}
