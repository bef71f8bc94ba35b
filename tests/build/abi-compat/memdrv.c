/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A driver built against a previous release's headers still runs.
 *
 * A memory-backed multi-queue driver, compiled when the test runs against
 * abi/include-X.Y (the public headers as a release shipped them) and run
 * against the library just built.  It uses what a real driver bakes in from
 * the headers: the ops and config struct layouts (RQ_MQ_OPS_INIT's size),
 * struct rq_request and its payload (rq_request_pdu(), the segment walk),
 * struct rq_bio, a plug on its own stack and the statistics struct.
 *
 * Steps: a tag set with two hardware queues, a queue on mq-deadline; writes
 * from two threads (one per CPU where there are two, so both hardware queues
 * see work) inside plugs; a flush; reads back and compares; a tunable
 * written and read back; a switch to "none" and a second read-back; the
 * statistics; teardown.  Exits 0 when everything matched, 1 with a message
 * otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <librequest/librequest.h>

#define DISK_SECTORS 4096u               /* 2 MiB */
#define IO_BYTES 8192u                   /* per bio: two 4 KiB vectors */
#define NR_HW 2u
#define NR_THREADS 2u
#define CMD_MAGIC 0x6d656d64u            /* "memd" */

static unsigned char *disk;
static unsigned hctx_inits;
static unsigned long hctx_requests[NR_HW];
static int failed;

static void fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "FAIL: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	__atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
}

/* The driver's payload behind every request (cmd_size bytes). */
struct memdrv_cmd {
	uint32_t magic;
	uint32_t inits;
	struct rq_request *self;
};

static int memdrv_init_request(struct rq_tag_set *set, struct rq_request *rq,
			       unsigned hctx_idx, int numa_node)
{
	struct memdrv_cmd *cmd = rq_request_pdu(rq);

	(void)set;
	(void)hctx_idx;
	(void)numa_node;
	cmd->magic = CMD_MAGIC;
	cmd->inits++;
	cmd->self = rq;
	return 0;
}

static int memdrv_init_hctx(struct rq_hw_ctx *hctx, void *set_data, unsigned idx)
{
	(void)hctx;
	if (set_data != (void *)&disk)
		fail("init_hctx: driver_data %p, expected %p", set_data, (void *)&disk);
	if (idx >= NR_HW)
		fail("init_hctx: index %u of %u", idx, NR_HW);
	__atomic_fetch_add(&hctx_inits, 1, __ATOMIC_RELAXED);
	return 0;
}

static rq_status_t memdrv_queue_rq(struct rq_hw_ctx *hctx, struct rq_request *rq, bool last)
{
	struct memdrv_cmd *cmd = rq_request_pdu(rq);
	uint64_t pos = rq->sector << RQ_SECTOR_SHIFT;
	struct rq_req_iter ri;
	struct rq_segment seg;
	unsigned idx = rq_hctx_index(hctx);

	(void)last;
	if (cmd->magic != CMD_MAGIC || cmd->self != rq || rq_request_from_pdu(cmd) != rq)
		fail("queue_rq: the payload is not where init_request put it");
	if (rq->hctx != hctx || rq_hctx_queue(hctx) != rq->q)
		fail("queue_rq: request fields out of place (hctx %p, rq->hctx %p)",
		     (void *)hctx, (void *)rq->hctx);
	if (idx < NR_HW)
		__atomic_fetch_add(&hctx_requests[idx], 1, __ATOMIC_RELAXED);

	switch (rq->op) {
	case RQ_OP_READ:
	case RQ_OP_WRITE:
		if (rq_request_end_sector(rq) > DISK_SECTORS) {
			fail("queue_rq: sector %llu past the disk", (unsigned long long)rq->sector);
			rq_mq_end_request(rq, RQ_STS_IOERR);
			return RQ_STS_OK;
		}
		rq_req_iter_init(&ri, rq);
		while (rq_req_iter_next(&ri, &seg)) {
			if (rq->op == RQ_OP_WRITE)
				memcpy(disk + pos, seg.base, seg.len);
			else
				memcpy(seg.base, disk + pos, seg.len);
			pos += seg.len;
		}
		if (pos != (rq->sector << RQ_SECTOR_SHIFT) + rq->bytes)
			fail("queue_rq: walked %llu bytes of %u",
			     (unsigned long long)(pos - (rq->sector << RQ_SECTOR_SHIFT)), rq->bytes);
		break;
	case RQ_OP_FLUSH:
		break;
	default:
		rq_mq_end_request(rq, RQ_STS_NOTSUPP);
		return RQ_STS_OK;
	}
	rq_mq_end_request(rq, RQ_STS_OK);
	return RQ_STS_OK;
}

static const struct rq_mq_ops memdrv_ops = {
	RQ_MQ_OPS_INIT,
	.queue_rq = memdrv_queue_rq,
	.init_hctx = memdrv_init_hctx,
	.init_request = memdrv_init_request,
};

/* ------------------------------------------------------------- submitting */

struct waiter {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned pending;
};

static void waiter_end_io(struct rq_bio *bio)
{
	struct waiter *w = bio->private_data;

	if (bio->status != RQ_STS_OK)
		fail("bio at sector %llu ended with %s",
		     (unsigned long long)bio->iter.sector, rq_status_name(bio->status));
	rq_bio_put(bio);
	pthread_mutex_lock(&w->lock);
	if (--w->pending == 0)
		pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

/* The same for a bio in the caller's memory (rq_bio_init). */
static void waiter_end_io_stack(struct rq_bio *bio)
{
	struct waiter *w = bio->private_data;

	if (bio->status != RQ_STS_OK)
		fail("flush ended with %s", rq_status_name(bio->status));
	pthread_mutex_lock(&w->lock);
	if (--w->pending == 0)
		pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

static void waiter_wait(struct waiter *w)
{
	pthread_mutex_lock(&w->lock);
	while (w->pending)
		pthread_cond_wait(&w->cond, &w->lock);
	pthread_mutex_unlock(&w->lock);
}

static unsigned char pattern_byte(uint64_t off)
{
	return (unsigned char)((off * 2654435761u) >> 13);
}

/* Submit one bio of IO_BYTES at @sector, two vectors into @buf. */
static void submit_io(struct rq_queue *q, struct waiter *w, unsigned op, uint64_t sector,
		      unsigned char *buf)
{
	struct rq_bio *bio = rq_bio_alloc(2);

	if (!bio) {
		fail("rq_bio_alloc: out of memory");
		return;
	}
	bio->op = (uint8_t)op;
	bio->iter.sector = sector;
	bio->end_io = waiter_end_io;
	bio->private_data = w;
	if (rq_bio_add_vec(bio, buf, IO_BYTES / 2) || rq_bio_add_vec(bio, buf + IO_BYTES / 2, IO_BYTES / 2)) {
		fail("rq_bio_add_vec refused a vector");
		rq_bio_put(bio);
		return;
	}
	pthread_mutex_lock(&w->lock);
	w->pending++;
	pthread_mutex_unlock(&w->lock);
	rq_submit_bio(q, bio);
}

struct writer {
	pthread_t thread;
	struct rq_queue *q;
	unsigned idx;
	unsigned char *src;
};

/* Thread idx writes every NR_THREADS-th chunk of the disk. */
static void *writer_main(void *arg)
{
	struct writer *wr = arg;
	struct waiter w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t chunk;

	if (ncpu > 1) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET((int)(wr->idx % (unsigned)ncpu), &set);
		pthread_setaffinity_np(pthread_self(), sizeof(set), &set); /* best effort */
	}
	for (chunk = wr->idx; chunk * IO_BYTES < (uint64_t)DISK_SECTORS << RQ_SECTOR_SHIFT;
	     chunk += NR_THREADS * 8) {
		struct rq_plug plug;
		unsigned i;

		rq_start_plug(&plug);
		for (i = 0; i < NR_THREADS * 8; i += NR_THREADS) {
			uint64_t off = (chunk + i) * IO_BYTES;

			if (off >= (uint64_t)DISK_SECTORS << RQ_SECTOR_SHIFT)
				break;
			submit_io(wr->q, &w, RQ_OP_WRITE, off >> RQ_SECTOR_SHIFT, wr->src + off);
		}
		rq_finish_plug(&plug);
	}
	waiter_wait(&w);
	return NULL;
}

static void write_disk(struct rq_queue *q, unsigned char *src)
{
	struct writer wr[NR_THREADS];
	unsigned i;

	for (i = 0; i < NR_THREADS; i++) {
		wr[i].q = q;
		wr[i].idx = i;
		wr[i].src = src;
		if (pthread_create(&wr[i].thread, NULL, writer_main, &wr[i])) {
			fail("pthread_create");
			writer_main(&wr[i]);
			wr[i].q = NULL;
		}
	}
	for (i = 0; i < NR_THREADS; i++)
		if (wr[i].q)
			pthread_join(wr[i].thread, NULL);
}

static void flush_disk(struct rq_queue *q)
{
	struct waiter w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 1 };
	struct rq_bio bio;

	rq_bio_init(&bio, NULL, 1);
	bio.op = RQ_OP_FLUSH;
	bio.private_data = &w;
	bio.end_io = waiter_end_io_stack;
	rq_submit_bio(q, &bio);
	waiter_wait(&w);
}

static void read_and_compare(struct rq_queue *q, const unsigned char *src, const char *when)
{
	size_t size = (size_t)DISK_SECTORS << RQ_SECTOR_SHIFT;
	unsigned char *dst = malloc(size);
	struct waiter w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
	uint64_t off;

	if (!dst) {
		fail("out of memory");
		return;
	}
	memset(dst, 0xa5, size);
	for (off = 0; off < size; off += IO_BYTES)
		submit_io(q, &w, RQ_OP_READ, off >> RQ_SECTOR_SHIFT, dst + off);
	waiter_wait(&w);
	if (memcmp(dst, src, size) || memcmp(disk, src, size))
		fail("%s: the data read back differs from what was written", when);
	free(dst);
}

static void expect_attr(struct rq_queue *q, const char *name, const char *want)
{
	char buf[256];
	int n = rq_queue_attr_get(q, name, buf, sizeof(buf));

	if (n < 0)
		fail("rq_queue_attr_get(%s): %d", name, n);
	else if (!strstr(buf, want))
		fail("attribute %s reads \"%.*s\", expected it to contain \"%s\"", name,
		     (int)strcspn(buf, "\n"), buf, want);
}

int main(void)
{
	size_t size = (size_t)DISK_SECTORS << RQ_SECTOR_SHIFT;
	struct rq_tag_set_config sc = { RQ_TAG_SET_CONFIG_INIT };
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT };
	struct rq_queue_stats st = { 0 };
	struct rq_tag_set *set = NULL;
	struct rq_queue *q = NULL;
	unsigned char *src;
	uint64_t off;
	int ret;

	printf("built against librequest %s headers\n", RQ_VERSION_STRING);
	disk = calloc(1, size);
	src = malloc(size);
	if (!disk || !src) {
		fprintf(stderr, "FAIL: out of memory\n");
		return 1;
	}
	for (off = 0; off < size; off++)
		src[off] = pattern_byte(off);

	sc.ops = &memdrv_ops;
	sc.nr_hw_queues = NR_HW;
	sc.queue_depth = 32;
	sc.cmd_size = sizeof(struct memdrv_cmd);
	sc.numa_node = -1;
	sc.driver_data = &disk;
	ret = rq_tag_set_alloc(&sc, &set);
	if (ret) {
		fprintf(stderr, "FAIL: rq_tag_set_alloc: %d\n", ret);
		return 1;
	}
	qc.capacity = DISK_SECTORS;
	qc.scheduler = "mq-deadline";
	qc.queuedata = src;
	ret = rq_mq_alloc_queue(set, &qc, &q);
	if (ret) {
		fprintf(stderr, "FAIL: rq_mq_alloc_queue: %d\n", ret);
		rq_tag_set_free(set);
		return 1;
	}
	if (rq_queue_driver_data(q) != src)
		fail("rq_queue_driver_data is not the config's queuedata");
	if (rq_queue_nr_hw_queues(q) != NR_HW || hctx_inits != NR_HW)
		fail("%u hw queues, %u init_hctx calls; expected %u", rq_queue_nr_hw_queues(q),
		     hctx_inits, NR_HW);
	if (rq_queue_capacity(q) != DISK_SECTORS)
		fail("capacity %llu", (unsigned long long)rq_queue_capacity(q));
	expect_attr(q, "scheduler", "[mq-deadline]");

	write_disk(q, src);
	flush_disk(q);
	read_and_compare(q, src, "mq-deadline");

	ret = rq_queue_attr_set(q, "iosched/read_expire", "250");
	if (ret)
		fail("setting iosched/read_expire: %d", ret);
	expect_attr(q, "iosched/read_expire", "250");
	if (rq_queue_attr_set(q, "iosched/no_such_tunable", "1") != -EINVAL)
		fail("an unknown tunable was accepted");

	ret = rq_queue_attr_set(q, "scheduler", "none");
	if (ret)
		fail("switching to none: %d", ret);
	expect_attr(q, "scheduler", "[none]");
	read_and_compare(q, src, "after the switch to none");

	rq_queue_get_stats(q, &st, sizeof(st));
	if (st.completed < 2 * (size / IO_BYTES) || st.errors)
		fail("statistics: %llu requests completed, %llu errors",
		     (unsigned long long)st.completed, (unsigned long long)st.errors);

	rq_queue_destroy(q);
	rq_tag_set_free(set);
	printf("requests per hw queue: %lu %lu; %llu bios, %llu requests\n", hctx_requests[0],
	       hctx_requests[1], (unsigned long long)st.bios, (unsigned long long)st.requests);
	free(src);
	free(disk);
	if (failed)
		return 1;
	printf("ok\n");
	return 0;
}
