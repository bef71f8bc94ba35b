/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fileq: the file driver in a few lines.  Makes (or opens) a file, writes a
 * pattern through librequest with multi-vector bios, flushes, reads it back
 * and compares, discards the second half and checks it reads as zeros, then
 * prints what the driver did.
 *
 *   fileq [--buffered] PATH [SIZE_MIB]
 *
 * Options are read before the file is touched: --help, --version or a bad
 * usage never creates anything.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <librequest/librequest.h>

#include "file_drv.h"
#include "progopt.h"

#define CHUNK (256u * 1024) /* bytes per bio: four 64 KiB vectors */
#define DEFAULT_MIB 16
#define MAX_MIB 4096         /* two buffers of this size; half of it in one discard */

static atomic_int ended;
static atomic_int failed;

static void count_end_io(struct rq_bio *bio)
{
	if (bio->status != RQ_STS_OK)
		atomic_fetch_add(&failed, 1);
	atomic_fetch_add(&ended, 1);
	rq_bio_put(bio);
}

/* Submit one bio of @op over [@pos, @pos + @len) of @buf (NULL: no data). */
static void submit(struct rq_queue *q, unsigned op, uint64_t pos, char *buf, uint32_t len,
		   unsigned flags)
{
	struct rq_bio *bio = rq_bio_alloc(4);
	uint32_t off;

	if (!bio) {
		fprintf(stderr, "fileq: out of memory\n");
		exit(1);
	}
	bio->op = op;
	bio->opf = flags;
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

static void usage(FILE *f)
{
	fprintf(f,
"usage: fileq [--buffered] PATH [SIZE_MIB]\n"
"       fileq -h|--help | --version\n"
"\n"
"Makes PATH (or opens it) at least SIZE_MIB MiB long (default %d, at most %d),\n"
"writes a pattern through librequest and the io_uring file driver, flushes,\n"
"reads it back, discards the second half and checks it reads as zeros.\n"
"\n"
"  --buffered   go through the page cache (default: O_DIRECT when the file\n"
"               system allows it)\n", DEFAULT_MIB, MAX_MIB);
}

enum { OPT_BUFFERED = 256 };

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "buffered", no_argument, NULL, OPT_BUFFERED },
		PROG_STD_OPTIONS,
		{ NULL, 0, NULL, 0 },
	};
	bool buffered = false;
	const char *path;
	struct file_config cfg;
	struct file_stats st;
	struct file_dev *dev;
	struct rq_queue *q;
	uint64_t size, pos;
	char *wbuf, *rbuf;
	int c, fd, ret, n = 0;

	prog_init("fileq", usage);
	while ((c = prog_getopt(argc, argv, longopts)) != -1) {
		if (c == OPT_BUFFERED)
			buffered = true;
	}
	if (optind >= argc)
		prog_usage_error("PATH: missing (the file to make or open)");
	path = argv[optind++];
	size = (uint64_t)DEFAULT_MIB << 20;
	if (optind < argc)
		size = opt_uint("SIZE_MIB", argv[optind++], 1, MAX_MIB) << 20;
	prog_no_operands(argc, argv);

	/* make the file if needed, at least SIZE long */
	fd = open(path, O_RDWR | O_CREAT, 0644);
	if (fd < 0) {
		perror(path);
		return 1;
	}
	if (lseek(fd, 0, SEEK_END) < (off_t)size && ftruncate(fd, (off_t)size)) {
		perror("ftruncate");
		return 1;
	}
	close(fd);

	file_config_default(&cfg);
	cfg.path = path;
	cfg.size_bytes = size;
	if (buffered)
		cfg.direct = FILE_DIRECT_OFF;
	ret = file_create(&cfg, &dev);   /* prints the I/O mode */
	if (ret) {
		fprintf(stderr, "fileq: %s: %s\n", path, strerror(-ret));
		return 1;
	}
	q = file_queue(dev);

	if (posix_memalign((void **)&wbuf, 4096, size) ||
	    posix_memalign((void **)&rbuf, 4096, size))
		return 1;
	for (pos = 0; pos < size; pos++)
		wbuf[pos] = (char)(pos * 7 + pos / 4096);

	for (pos = 0; pos < size; pos += CHUNK, n++)
		submit(q, RQ_OP_WRITE, pos, wbuf + pos, CHUNK, 0);
	wait_all(n);
	submit(q, RQ_OP_FLUSH, 0, NULL, 0, RQ_BIO_PREFLUSH);
	wait_all(++n);
	for (pos = 0; pos < size; pos += CHUNK, n++)
		submit(q, RQ_OP_READ, pos, rbuf + pos, CHUNK, 0);
	wait_all(n);
	printf("read back: %s\n", memcmp(wbuf, rbuf, size) ? "MISMATCH" : "same");

	submit(q, RQ_OP_DISCARD, size / 2, NULL, (uint32_t)(size / 2), 0);
	wait_all(++n);
	memset(rbuf, 0xff, size);
	for (pos = 0; pos < size; pos += CHUNK, n++)
		submit(q, RQ_OP_READ, pos, rbuf + pos, CHUNK, 0);
	wait_all(n);
	printf("after discard of the second half: first half %s, second half %s\n",
	       memcmp(wbuf, rbuf, size / 2) ? "changed" : "kept",
	       rbuf[size / 2] == 0 && !memcmp(rbuf + size / 2, rbuf + size / 2 + 1,
					       size / 2 - 1) ? "zeros" : "NOT zeros");

	file_get_stats(dev, &st);
	printf("requests: %llu reads, %llu writes, %llu flushes, %llu discards; "
	       "%llu SQEs, %llu short, %llu failed bios\n",
	       (unsigned long long)st.reads, (unsigned long long)st.writes,
	       (unsigned long long)st.flushes, (unsigned long long)st.discards,
	       (unsigned long long)st.submissions, (unsigned long long)st.short_ios,
	       (unsigned long long)atomic_load(&failed));
	file_destroy(dev);
	free(wbuf);
	free(rbuf);
	return atomic_load(&failed) ? 1 : 0;
}
