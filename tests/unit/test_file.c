/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The io_uring file driver end to end through librequest, on files made
 * under a temporary directory: write and read back with several sizes and
 * multi-vector bios (buffered, and O_DIRECT on /var/tmp where the file
 * system allows it), misaligned buffers on an O_DIRECT device, flush and
 * FUA, discard and write-zeroes reading back zeros (with the zero-writing
 * fallback on tmpfs), short transfers resubmitted, reads past the end of a
 * shorter file, errno kept and mapped on a read-only file, poll queues,
 * many bios in flight on two hw queues.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include <librequest/librequest.h>

#include "file_drv.h"

#define MAX_VECS 4
#define FILE_SIZE (16u << 20)

struct tbio {
	struct rq_bio bio;
	struct rq_bvec vecs[MAX_VECS];
	atomic_int ends;
};

static void tbio_end_io(struct rq_bio *bio)
{
	struct tbio *tb = bio->private_data;

	atomic_fetch_add(&tb->ends, 1);
}

static uint64_t mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec;
}

/* Wait for @tb (bounded); poll the queue's poll queues while waiting. */
static void tbio_wait(struct rq_queue *q, struct tbio *tb, bool polled)
{
	uint64_t end = mono_s() + 30;

	while (!atomic_load(&tb->ends) && mono_s() < end) {
		if (polled)
			rq_mq_poll(q, true);
		else
			sched_yield();
	}
	assert_int_equal(atomic_load(&tb->ends), 1);
}

static void tbio_prep(struct tbio *tb, unsigned op, uint64_t pos, unsigned opf)
{
	memset(tb, 0, sizeof(*tb));
	rq_bio_init(&tb->bio, tb->vecs, MAX_VECS);
	tb->bio.op = (uint8_t)op;
	tb->bio.opf = opf;
	tb->bio.iter.sector = pos >> 9;
	tb->bio.end_io = tbio_end_io;
	tb->bio.private_data = tb;
}

/* Read or write @len bytes of @buf at byte @pos over @nvec vectors. */
static rq_status_t rw(struct rq_queue *q, unsigned op, uint64_t pos, char *buf,
		      uint32_t len, unsigned nvec, unsigned opf)
{
	struct tbio tb;
	uint32_t off = 0;
	unsigned i;

	tbio_prep(&tb, op, pos, opf);
	for (i = 0; i < nvec && off < len; i++) {
		uint32_t part = i + 1 < nvec ? ((len / nvec) & ~511u) : len - off;

		if (!part)
			continue;
		assert_int_equal(rq_bio_add_vec(&tb.bio, buf + off, part), 0);
		off += part;
	}
	assert_int_equal(off, len);
	rq_submit_bio(q, &tb.bio);
	tbio_wait(q, &tb, opf & RQ_BIO_POLLED);
	return tb.bio.status;
}

static rq_status_t op_nodata(struct rq_queue *q, unsigned op, uint64_t pos, uint32_t len,
			     unsigned opf)
{
	struct tbio tb;

	tbio_prep(&tb, op, pos, opf);
	tb.bio.iter.size = len;
	rq_submit_bio(q, &tb.bio);
	tbio_wait(q, &tb, false);
	return tb.bio.status;
}

static void fill(char *buf, uint32_t len, uint32_t seed)
{
	uint32_t i;

	for (i = 0; i < len; i++)
		buf[i] = (char)(seed * 131 + i * 7 + (i >> 9));
}

static bool all_zero(const char *buf, uint32_t len)
{
	uint32_t i;

	for (i = 0; i < len; i++)
		if (buf[i])
			return false;
	return true;
}

/* A temporary file of @size bytes under @dir; its path goes in @path. */
static bool make_file(const char *dir, uint64_t size, char *path, size_t len)
{
	int fd;

	snprintf(path, len, "%s/test_file.XXXXXX", dir);
	fd = mkstemp(path);
	if (fd < 0)
		return false;
	if (ftruncate(fd, (off_t)size)) {
		close(fd);
		unlink(path);
		return false;
	}
	close(fd);
	return true;
}

static struct file_dev *open_dev(const char *path, enum file_direct direct)
{
	struct file_config cfg;
	struct file_dev *dev = NULL;

	file_config_default(&cfg);
	cfg.path = path;
	cfg.direct = direct;
	cfg.quiet = true;
	cfg.sched = "none";
	assert_int_equal(file_create(&cfg, &dev), 0);
	return dev;
}

static char *abuf(size_t len)
{
	void *p = NULL;

	assert_int_equal(posix_memalign(&p, 4096, len), 0);
	return p;
}

/* Write and read back sizes from one sector to several requests' worth. */
static void roundtrip(struct file_dev *dev, const char *path)
{
	static const uint32_t sizes[] = { 512, 4096, 65536 + 4096, 1u << 20, 3u << 20 };
	struct rq_queue *q = file_queue(dev);
	char *w = abuf(3u << 20), *r = abuf(3u << 20);
	uint64_t pos = 0;
	unsigned i;
	int fd;

	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint32_t len = sizes[i];
		unsigned nvec = 1 + i % MAX_VECS;

		fill(w, len, i + 1);
		memset(r, 0xee, len);
		assert_int_equal(rw(q, RQ_OP_WRITE, pos, w, len, nvec, 0), RQ_STS_OK);
		assert_int_equal(rw(q, RQ_OP_READ, pos, r, len, MAX_VECS + 1 - nvec, 0),
				 RQ_STS_OK);
		assert_memory_equal(w, r, len);
		/* and it is in the file, where it should be */
		fd = open(path, O_RDONLY);
		assert_true(fd >= 0);
		memset(r, 0, len);
		assert_int_equal(pread(fd, r, len, (off_t)pos), (ssize_t)len);
		close(fd);
		assert_memory_equal(w, r, len);
		pos += len + 4096 * (i + 1);
	}
	free(w);
	free(r);
}

static void test_rw_buffered(void **state)
{
	char path[256];
	struct file_dev *dev;
	struct file_stats st;

	(void)state;
	assert_true(make_file("/tmp", FILE_SIZE, path, sizeof(path)));
	dev = open_dev(path, FILE_DIRECT_OFF);
	assert_false(file_is_direct(dev, NULL));
	assert_non_null(strstr(file_mode_reason(dev), "buffered"));
	roundtrip(dev, path);
	file_get_stats(dev, &st);
	assert_true(st.reads >= 5 && st.writes >= 5);
	assert_int_equal(st.errors, 0);
	assert_int_equal(rq_queue_capacity(file_queue(dev)), FILE_SIZE >> 9);
	file_destroy(dev);
	unlink(path);
}

static void test_rw_direct(void **state)
{
	struct file_config cfg;
	struct file_stats st;
	struct file_dev *dev = NULL;
	char path[256], *w, *r;
	unsigned align;
	int ret;

	(void)state;
	assert_true(make_file("/var/tmp", FILE_SIZE, path, sizeof(path)));
	file_config_default(&cfg);
	cfg.path = path;
	cfg.direct = FILE_DIRECT_ON;
	cfg.quiet = true;
	cfg.sched = "none";
	ret = file_create(&cfg, &dev);
	if (ret == -EINVAL) {
		unlink(path);
		skip(); /* this file system has no O_DIRECT */
	}
	assert_int_equal(ret, 0);
	assert_true(file_is_direct(dev, &align));
	assert_true(align >= 512);
	roundtrip(dev, path);

	/* a buffer off the O_DIRECT alignment still works: through the cache */
	w = abuf(65536 + 4096);
	r = abuf(65536 + 4096);
	fill(w + 8, 65536, 99);
	assert_int_equal(rw(file_queue(dev), RQ_OP_WRITE, 1 << 20, w + 8, 65536, 1, 0),
			 RQ_STS_OK);
	assert_int_equal(rw(file_queue(dev), RQ_OP_READ, 1 << 20, r, 65536, 2, 0), RQ_STS_OK);
	assert_memory_equal(w + 8, r, 65536);
	file_get_stats(dev, &st);
	assert_true(st.unaligned >= 1);
	assert_int_equal(st.errors, 0);
	free(w);
	free(r);
	file_destroy(dev);
	unlink(path);
}

static void test_direct_auto(void **state)
{
	struct file_dev *dev;
	char path[256];

	(void)state;
	/* auto mode picks one and says which */
	assert_true(make_file("/var/tmp", FILE_SIZE, path, sizeof(path)));
	dev = open_dev(path, FILE_DIRECT_AUTO);
	if (file_is_direct(dev, NULL))
		assert_non_null(strstr(file_mode_reason(dev), "O_DIRECT"));
	else
		assert_non_null(strstr(file_mode_reason(dev), "buffered"));
	file_destroy(dev);
	unlink(path);
}

static void test_flush_fua(void **state)
{
	struct file_stats st;
	struct file_dev *dev;
	char path[256], *w, *r;

	(void)state;
	assert_true(make_file("/tmp", FILE_SIZE, path, sizeof(path)));
	dev = open_dev(path, FILE_DIRECT_AUTO);
	w = abuf(8192);
	r = abuf(8192);
	fill(w, 8192, 5);
	assert_int_equal(rw(file_queue(dev), RQ_OP_WRITE, 4096, w, 8192, 2, RQ_BIO_FUA),
			 RQ_STS_OK);
	assert_int_equal(op_nodata(file_queue(dev), RQ_OP_FLUSH, 0, 0, RQ_BIO_PREFLUSH),
			 RQ_STS_OK);
	assert_int_equal(rw(file_queue(dev), RQ_OP_WRITE, 65536, w, 4096, 1,
			    RQ_BIO_PREFLUSH | RQ_BIO_FUA), RQ_STS_OK);
	assert_int_equal(rw(file_queue(dev), RQ_OP_READ, 4096, r, 8192, 1, 0), RQ_STS_OK);
	assert_memory_equal(w, r, 8192);
	file_get_stats(dev, &st);
	assert_true(st.fua_writes >= 2);
	assert_true(st.flushes >= 2);
	file_destroy(dev);
	free(w);
	free(r);
	unlink(path);
}

/* Write 1 MiB, zero 256 KiB in the middle with @op, check both parts. */
static void zero_middle(struct file_dev *dev, unsigned op)
{
	struct rq_queue *q = file_queue(dev);
	char *w = abuf(1 << 20), *r = abuf(1 << 20);
	uint32_t lo = 256 << 10, len = 256 << 10;

	fill(w, 1 << 20, 7);
	assert_int_equal(rw(q, RQ_OP_WRITE, 0, w, 1 << 20, 4, 0), RQ_STS_OK);
	assert_int_equal(op_nodata(q, op, lo, len, 0), RQ_STS_OK);
	memset(r, 0xee, 1 << 20);
	assert_int_equal(rw(q, RQ_OP_READ, 0, r, 1 << 20, 3, 0), RQ_STS_OK);
	assert_memory_equal(w, r, lo);
	assert_true(all_zero(r + lo, len));
	assert_memory_equal(w + lo + len, r + lo + len, (1 << 20) - lo - len);
	free(w);
	free(r);
}

static void test_discard_reads_zeros(void **state)
{
	struct file_dev *dev;
	struct file_stats st;
	char path[256];

	(void)state;
	assert_true(make_file("/tmp", FILE_SIZE, path, sizeof(path)));
	dev = open_dev(path, FILE_DIRECT_AUTO);
	zero_middle(dev, RQ_OP_DISCARD);
	file_get_stats(dev, &st);
	assert_int_equal(st.discards, 1);
	file_destroy(dev);
	unlink(path);
}

static void test_write_zeroes(void **state)
{
	struct file_dev *dev;
	struct file_stats st;
	struct statfs sfs;
	char path[256];

	(void)state;
	assert_true(make_file("/tmp", FILE_SIZE, path, sizeof(path)));
	dev = open_dev(path, FILE_DIRECT_AUTO);
	zero_middle(dev, RQ_OP_WRITE_ZEROES);
	file_get_stats(dev, &st);
	assert_int_equal(st.write_zeroes, 1);
	assert_int_equal(st.errors, 0);
	file_destroy(dev);
	unlink(path);

	/* tmpfs has no FALLOC_FL_ZERO_RANGE: the driver writes zeros */
	if (statfs("/dev/shm", &sfs) || sfs.f_type != 0x01021994 ||
	    !make_file("/dev/shm", FILE_SIZE, path, sizeof(path)))
		return;
	dev = open_dev(path, FILE_DIRECT_OFF);
	zero_middle(dev, RQ_OP_WRITE_ZEROES);
	zero_middle(dev, RQ_OP_WRITE_ZEROES); /* the second goes straight to writes */
	file_get_stats(dev, &st);
	assert_int_equal(st.zero_writes, 2);
	assert_int_equal(st.errors, 0);
	file_destroy(dev);
	unlink(path);
}

static void test_short_io_resubmitted(void **state)
{
	struct file_config cfg;
	struct file_stats st;
	struct file_dev *dev;
	char path[256], *w, *r;

	(void)state;
	assert_true(make_file("/tmp", FILE_SIZE, path, sizeof(path)));
	file_config_default(&cfg);
	cfg.path = path;
	cfg.quiet = true;
	cfg.sched = "none";
	cfg.max_io_bytes = 12288; /* cuts inside vectors, too */
	assert_int_equal(file_create(&cfg, &dev), 0);
	w = abuf(256 << 10);
	r = abuf(256 << 10);
	fill(w, 256 << 10, 3);
	assert_int_equal(rw(file_queue(dev), RQ_OP_WRITE, 8192, w, 256 << 10, 3, 0), RQ_STS_OK);
	assert_int_equal(rw(file_queue(dev), RQ_OP_READ, 8192, r, 256 << 10, 4, 0), RQ_STS_OK);
	assert_memory_equal(w, r, 256 << 10);
	file_get_stats(dev, &st);
	/* 256 KiB in 12 KiB pieces: 22 submissions per request */
	assert_true(st.short_ios >= 2 * 21);
	assert_int_equal(st.submissions, st.reads + st.writes + st.short_ios);
	file_destroy(dev);
	free(w);
	free(r);
	unlink(path);
}

static void test_read_past_eof(void **state)
{
	struct file_config cfg;
	struct file_stats st;
	struct file_dev *dev;
	char path[256], *w, *r;

	(void)state;
	/* an 8 KiB file behind a 1 MiB device */
	assert_true(make_file("/tmp", 0, path, sizeof(path)));
	file_config_default(&cfg);
	cfg.path = path;
	cfg.quiet = true;
	cfg.sched = "none";
	cfg.direct = FILE_DIRECT_OFF;
	cfg.size_bytes = 1 << 20;
	assert_int_equal(file_create(&cfg, &dev), 0);
	w = abuf(16384);
	r = abuf(16384);
	fill(w, 8192, 11);
	assert_int_equal(rw(file_queue(dev), RQ_OP_WRITE, 0, w, 8192, 1, 0), RQ_STS_OK);
	memset(r, 0xee, 16384);
	assert_int_equal(rw(file_queue(dev), RQ_OP_READ, 0, r, 16384, 2, 0), RQ_STS_OK);
	assert_memory_equal(w, r, 8192);
	assert_true(all_zero(r + 8192, 8192));
	memset(r, 0xee, 16384);
	assert_int_equal(rw(file_queue(dev), RQ_OP_READ, 512 << 10, r, 16384, 1, 0), RQ_STS_OK);
	assert_true(all_zero(r, 16384));
	file_get_stats(dev, &st);
	assert_int_equal(st.eof_zeroed, 2);
	/* past the device's capacity: the library refuses */
	assert_int_equal(rw(file_queue(dev), RQ_OP_READ, 1 << 20, r, 4096, 1, 0), RQ_STS_IOERR);
	file_destroy(dev);
	free(w);
	free(r);
	unlink(path);
}

static void test_errno_mapped(void **state)
{
	struct file_config cfg;
	struct file_stats st;
	struct file_dev *dev;
	char path[256], *b;

	(void)state;
	assert_true(make_file("/tmp", FILE_SIZE, path, sizeof(path)));
	file_config_default(&cfg);
	cfg.path = path;
	cfg.quiet = true;
	cfg.sched = "none";
	cfg.read_only = true;
	assert_int_equal(file_create(&cfg, &dev), 0);
	assert_int_equal(file_last_errno(dev), 0);
	b = abuf(4096);
	assert_int_equal(rw(file_queue(dev), RQ_OP_READ, 0, b, 4096, 1, 0), RQ_STS_OK);
	/* the kernel says EBADF; the request ends with its status */
	assert_int_equal(rw(file_queue(dev), RQ_OP_WRITE, 0, b, 4096, 1, 0),
			 rq_errno_to_status(EBADF));
	assert_int_equal(file_last_errno(dev), EBADF);
	assert_int_equal(op_nodata(file_queue(dev), RQ_OP_DISCARD, 0, 4096, 0),
			 rq_errno_to_status(EBADF));
	file_get_stats(dev, &st);
	assert_int_equal(st.errors, 2);
	file_destroy(dev);
	free(b);
	unlink(path);

	/* no such file: creation fails with open()'s errno */
	file_config_default(&cfg);
	cfg.path = "/nonexistent/librequest-test";
	cfg.quiet = true;
	assert_int_equal(file_create(&cfg, &dev), -ENOENT);
	cfg.path = NULL;
	assert_int_equal(file_create(&cfg, &dev), -EINVAL);
}

static void test_poll_queue(void **state)
{
	struct file_config cfg;
	struct file_dev *dev;
	char path[256], *w, *r;
	unsigned i;

	(void)state;
	assert_true(make_file("/tmp", FILE_SIZE, path, sizeof(path)));
	file_config_default(&cfg);
	cfg.path = path;
	cfg.quiet = true;
	cfg.sched = "none";
	cfg.nr_hw_queues = 2;
	cfg.nr_poll_queues = 1;
	assert_int_equal(file_create(&cfg, &dev), 0);
	w = abuf(65536);
	r = abuf(65536);
	for (i = 0; i < 8; i++) {
		fill(w, 65536, 20 + i);
		assert_int_equal(rw(file_queue(dev), RQ_OP_WRITE, i * 65536, w, 65536, 2,
				    RQ_BIO_POLLED), RQ_STS_OK);
		assert_int_equal(rw(file_queue(dev), RQ_OP_READ, i * 65536, r, 65536, 3,
				    RQ_BIO_POLLED), RQ_STS_OK);
		assert_memory_equal(w, r, 65536);
	}
	file_destroy(dev);
	free(w);
	free(r);
	unlink(path);
}

#define MANY 256

static void test_many_in_flight(void **state)
{
	struct file_config cfg;
	struct file_dev *dev;
	struct tbio *tbs = calloc(MANY, sizeof(*tbs));
	char path[256], *w = abuf(MANY * 4096), *r = abuf(MANY * 4096);
	unsigned i, pass;

	(void)state;
	assert_non_null(tbs);
	assert_true(make_file("/tmp", FILE_SIZE, path, sizeof(path)));
	file_config_default(&cfg);
	cfg.path = path;
	cfg.quiet = true;
	cfg.nr_hw_queues = 2;
	cfg.hw_queue_depth = 32;
	assert_int_equal(file_create(&cfg, &dev), 0);
	fill(w, MANY * 4096, 77);
	memset(r, 0, MANY * 4096);
	for (pass = 0; pass < 2; pass++) {
		unsigned op = pass ? RQ_OP_READ : RQ_OP_WRITE;
		char *buf = pass ? r : w;

		for (i = 0; i < MANY; i++) {
			/* scattered, every other 4 KiB block */
			tbio_prep(&tbs[i], op, (uint64_t)((i * 37) % MANY) * 8192, 0);
			rq_bio_add_vec(&tbs[i].bio, buf + i * 4096, 4096);
			rq_submit_bio(file_queue(dev), &tbs[i].bio);
		}
		for (i = 0; i < MANY; i++) {
			tbio_wait(file_queue(dev), &tbs[i], false);
			assert_int_equal(tbs[i].bio.status, RQ_STS_OK);
		}
	}
	assert_memory_equal(w, r, MANY * 4096);
	file_destroy(dev);
	free(tbs);
	free(w);
	free(r);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rw_buffered),
		cmocka_unit_test(test_rw_direct),
		cmocka_unit_test(test_direct_auto),
		cmocka_unit_test(test_flush_fua),
		cmocka_unit_test(test_discard_reads_zeros),
		cmocka_unit_test(test_write_zeroes),
		cmocka_unit_test(test_short_io_resubmitted),
		cmocka_unit_test(test_read_past_eof),
		cmocka_unit_test(test_errno_mapped),
		cmocka_unit_test(test_poll_queue),
		cmocka_unit_test(test_many_in_flight),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
