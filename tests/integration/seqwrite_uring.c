/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * seqwrite_uring: the kernel half of the merge fidelity check.  Writes
 * @count sequential 4 KiB blocks to a block device with O_DIRECT through
 * io_uring, @batch per io_uring_submit() (the kernel plugs each submission
 * batch), every block from its own buffer, none contiguous with another, as
 * rqbench does.  The block tracepoints then show what requests the
 * device's queue built.
 *
 * usage: seqwrite_uring DEVICE COUNT BATCH
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK 4096

int main(int argc, char **argv)
{
	struct io_uring ring;
	unsigned long count, batch, done = 0;
	char *arena;
	int fd, ret;

	if (argc != 4) {
		fprintf(stderr, "usage: %s DEVICE COUNT BATCH\n", argv[0]);
		return 2;
	}
	count = strtoul(argv[2], NULL, 0);
	batch = strtoul(argv[3], NULL, 0);
	if (!count || !batch || batch > 4096) {
		fprintf(stderr, "bad COUNT or BATCH\n");
		return 2;
	}
	fd = open(argv[1], O_WRONLY | O_DIRECT);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	/* one block per buffer, with a gap after each: never contiguous */
	if (posix_memalign((void **)&arena, BLOCK, 2 * BLOCK * batch)) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	memset(arena, 0x5a, 2 * BLOCK * batch);
	ret = io_uring_queue_init((unsigned)batch, &ring, 0);
	if (ret < 0) {
		fprintf(stderr, "io_uring_queue_init: %s\n", strerror(-ret));
		return 77;
	}
	while (done < count) {
		unsigned long n = count - done < batch ? count - done : batch;

		for (unsigned long i = 0; i < n; i++) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

			io_uring_prep_write(sqe, fd, arena + 2 * BLOCK * i, BLOCK,
					    (off_t)(done + i) * BLOCK);
		}
		ret = io_uring_submit_and_wait(&ring, (unsigned)n);
		if (ret < 0 || (unsigned long)ret != n) {
			fprintf(stderr, "submit: %d\n", ret);
			return 1;
		}
		for (unsigned long i = 0; i < n; i++) {
			struct io_uring_cqe *cqe;

			ret = io_uring_wait_cqe(&ring, &cqe);
			if (ret < 0 || cqe->res != BLOCK) {
				fprintf(stderr, "write failed: %d\n", ret < 0 ? ret : cqe->res);
				return 1;
			}
			io_uring_cqe_seen(&ring, cqe);
		}
		done += n;
	}
	io_uring_queue_exit(&ring);
	close(fd);
	return 0;
}
