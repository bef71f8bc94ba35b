/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kdiff-submit: the kernel half of the differential test (tests/kdiff).
 * Submits a pattern (pattern.h) to a block device with O_DIRECT, each
 * batch as ONE io_submit() call (Linux aio through raw system calls), so
 * the kernel plugs the whole batch (io_submit plugs batches of more than
 * two iocbs), then waits for the batch; an 'F' line is an fsync() of the
 * device (blkdev_issue_flush) between batches.  A U line is a write with
 * RWF_DSYNC, which the block device's direct I/O turns into REQ_FUA.
 *
 * Buffers come from a transparent-huge-page arena, each I/O's apart from
 * the others; a scattered I/O takes every other 4 KiB page so no two of
 * its buffers are adjacent.  What decides the kernel's segments is
 * physical contiguity, so after faulting the arena in the tool reads
 * /proc/self/pagemap and prints the pattern back with the physically
 * contiguous runs of every I/O (the form kdiff-rq reads).
 *
 * The process pins itself to one CPU (--cpu, default 0): one software
 * queue, one plug.
 *
 * With --queue, --trace and --out the tool runs the whole matrix of one
 * pattern itself, which saves a process and an aio context per run (their
 * teardown waits for an RCU grace period): for every scheduler of --sched
 * and nomerges value of --nomerges, --runs times: a fresh scheduler
 * instance (none, then the scheduler, through QUEUE/scheduler), nomerges,
 * an empty trace in the tracefs instance TRACE, the pattern, and the trace
 * copied to OUT.SCHED.NOMERGES.trace.RUN.  The layout is resolved once.
 *
 * usage: kdiff-submit [--cpu N] [--queue DIR --trace DIR --out PREFIX
 *                     [--sched LIST] [--nomerges LIST] [--runs N]] DEVICE PATTERN
 * Exit: 0, 1 on an I/O or set-up error, 2 on bad usage.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <getopt.h>
#include <linux/aio_abi.h>
#include <linux/fs.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "pattern.h"

#define HUGE_SZ (2u << 20)

static long sys_io_setup(unsigned nr, aio_context_t *ctx)
{
	return syscall(SYS_io_setup, nr, ctx);
}

static long sys_io_submit(aio_context_t ctx, long n, struct iocb **iocbs)
{
	return syscall(SYS_io_submit, ctx, n, iocbs);
}

static long sys_io_getevents(aio_context_t ctx, long min, long max, struct io_event *ev)
{
	return syscall(SYS_io_getevents, ctx, min, max, ev, NULL);
}

struct io_buf {
	struct iovec *iov;
	unsigned nr_iov;
};

/* Lay out every I/O's buffers in one arena; returns the arena or NULL. */
static char *lay_out(struct kd_pattern *p, struct io_buf *bufs)
{
	uint64_t size = 0, pos = 0;
	char *raw, *arena;

	for (unsigned i = 0; i < p->nr; i++) {
		struct kd_item *it = &p->items[i];

		if (it->kind != KD_IO)
			continue;
		if (it->layout == 's')
			size += 2 * it->len + KD_PAGE;
		else
			size += (it->len + KD_PAGE - 1) / KD_PAGE * KD_PAGE + KD_PAGE;
	}
	size = (size + HUGE_SZ - 1) / HUGE_SZ * HUGE_SZ;
	raw = mmap(NULL, size + HUGE_SZ, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (raw == MAP_FAILED)
		return NULL;
	arena = (char *)(((uintptr_t)raw + HUGE_SZ - 1) & ~(uintptr_t)(HUGE_SZ - 1));
	madvise(arena, size, MADV_HUGEPAGE);
	memset(arena, 0x5a, size);
	for (unsigned i = 0; i < p->nr; i++) {
		struct kd_item *it = &p->items[i];
		struct io_buf *b = &bufs[i];

		if (it->kind != KD_IO)
			continue;
		if (it->layout == 's') {
			b->nr_iov = (unsigned)(it->len / KD_PAGE);
			b->iov = calloc(b->nr_iov, sizeof(*b->iov));
			for (unsigned j = 0; j < b->nr_iov; j++) {
				b->iov[j].iov_base = arena + pos + 2ull * KD_PAGE * j;
				b->iov[j].iov_len = KD_PAGE;
			}
			pos += 2 * it->len + KD_PAGE;
		} else {
			b->nr_iov = 1;
			b->iov = calloc(1, sizeof(*b->iov));
			b->iov[0].iov_base = arena + pos;
			b->iov[0].iov_len = it->len;
			pos += (it->len + KD_PAGE - 1) / KD_PAGE * KD_PAGE + KD_PAGE;
		}
		if (!b->iov)
			return NULL;
	}
	return arena;
}

/* The page frame behind @addr, 0 when pagemap does not tell. */
static uint64_t pfn_of(int pm, const void *addr)
{
	uint64_t e;

	if (pread(pm, &e, sizeof(e), (off_t)((uintptr_t)addr / KD_PAGE * 8)) != sizeof(e))
		return 0;
	if (!(e >> 63))
		return 0;
	return e & ((1ull << 55) - 1);
}

/* Replace @it's runs with the physically contiguous pieces of @b. */
static bool resolve_runs(int pm, struct kd_item *it, const struct io_buf *b)
{
	uint64_t last = 0;
	unsigned n = 0;

	for (unsigned j = 0; j < b->nr_iov; j++) {
		const char *base = b->iov[j].iov_base;

		for (uint64_t o = 0; o < b->iov[j].iov_len; o += KD_PAGE) {
			uint64_t pfn = pfn_of(pm, base + o);
			uint64_t len = b->iov[j].iov_len - o < KD_PAGE ? b->iov[j].iov_len - o : KD_PAGE;

			if (!pfn)
				return false;
			/*
			 * Contiguous pages are one run, but not across a 4 GiB
			 * physical boundary: the kernel's segments never cross
			 * seg_boundary_mask (0xffffffff), so it counts two there,
			 * as librequest does for two vectors.
			 */
			if (n && pfn == last + 1 && pfn % (1ull << 20))
				it->runs[n - 1] += len;
			else if (n == KD_MAX_RUNS)
				return false;
			else
				it->runs[n++] = len;
			last = pfn;
		}
	}
	it->nr_runs = n;
	return true;
}

/* Submit items [from, to) as one io_submit and wait for them. */
static int run_batch(int fd, aio_context_t ctx, struct kd_pattern *p, struct io_buf *bufs,
		     unsigned from, unsigned to)
{
	unsigned n = to - from;
	struct iocb *cbs = calloc(n, sizeof(*cbs));
	struct iocb **ptrs = calloc(n, sizeof(*ptrs));
	struct io_event *ev = calloc(n, sizeof(*ev));
	long done = 0, ret;
	int rc = 0;

	if (!cbs || !ptrs || !ev)
		return 1;
	for (unsigned i = 0; i < n; i++) {
		struct kd_item *it = &p->items[from + i];

		cbs[i].aio_fildes = (uint32_t)fd;
		cbs[i].aio_lio_opcode = it->op == 'R' ? IOCB_CMD_PREADV : IOCB_CMD_PWRITEV;
		cbs[i].aio_buf = (uint64_t)(uintptr_t)bufs[from + i].iov;
		cbs[i].aio_nbytes = bufs[from + i].nr_iov;
		cbs[i].aio_offset = (int64_t)it->off;
		cbs[i].aio_rw_flags = it->op == 'U' ? RWF_DSYNC : 0;
		cbs[i].aio_data = from + i;
		ptrs[i] = &cbs[i];
	}
	ret = sys_io_submit(ctx, n, ptrs);
	if (ret != (long)n) {
		fprintf(stderr, "kdiff-submit: io_submit: %ld of %u (%s)\n", ret, n,
			ret < 0 ? strerror(errno) : "short");
		return 1;
	}
	while (done < (long)n) {
		ret = sys_io_getevents(ctx, 1, n - done, ev);
		if (ret < 0) {
			if (errno == EINTR)
				continue;
			perror("kdiff-submit: io_getevents");
			return 1;
		}
		for (long i = 0; i < ret; i++) {
			struct kd_item *it = &p->items[ev[i].data];

			if (ev[i].res != (int64_t)it->len) {
				fprintf(stderr, "kdiff-submit: %c %llu %llu: %lld\n", it->op,
					(unsigned long long)it->off, (unsigned long long)it->len,
					(long long)ev[i].res);
				rc = 1;
			}
		}
		done += ret;
	}
	free(cbs);
	free(ptrs);
	free(ev);
	return rc;
}

/* Write @val to @dir/@name; 0 or -1 with a message. */
static int put(const char *dir, const char *name, const char *val)
{
	char path[512];
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_TRUNC);
	if (fd < 0) {
		fprintf(stderr, "kdiff-submit: %s: %s\n", path, strerror(errno));
		return -1;
	}
	n = write(fd, val, strlen(val));
	close(fd);
	if (n != (ssize_t)strlen(val)) {
		fprintf(stderr, "kdiff-submit: %s <- %s: %s\n", path, val, strerror(errno));
		return -1;
	}
	return 0;
}

/* Copy @dir/trace to @path. */
static int save_trace(const char *dir, const char *path)
{
	char src[512], buf[65536];
	int in, out;
	ssize_t n;

	snprintf(src, sizeof(src), "%s/trace", dir);
	in = open(src, O_RDONLY);
	out = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (in < 0 || out < 0) {
		fprintf(stderr, "kdiff-submit: cannot copy %s to %s\n", src, path);
		return -1;
	}
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n)
			return -1;
	close(in);
	close(out);
	return n < 0 ? -1 : 0;
}

/* Whether @dir/scheduler has @name selected (shown as "[name]"). */
static bool sched_is(const char *dir, const char *name)
{
	char path[512], buf[256] = "", want[64];
	int fd;

	snprintf(path, sizeof(path), "%s/scheduler", dir);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return false;
	if (read(fd, buf, sizeof(buf) - 1) < 0)
		buf[0] = 0;
	close(fd);
	snprintf(want, sizeof(want), "[%s]", name);
	return strstr(buf, want) != NULL;
}

/*
 * A fresh instance of scheduler @s: one switch when another one is
 * attached, else through none (each switch freezes the queue, an RCU grace
 * period, which is most of a run's time).
 */
static int fresh_sched(const char *queue, const char *s)
{
	if (sched_is(queue, s) && strcmp(s, "none") && put(queue, "scheduler", "none"))
		return -1;
	if (sched_is(queue, s))
		return 0;
	return put(queue, "scheduler", s);
}

struct matrix {
	const char *queue, *trace, *out, *scheds, *nomerges;
	unsigned runs;
};

/* Every batch of @p, flushes between them; 0 or 1. */
static int run_pattern(int fd, aio_context_t ctx, struct kd_pattern *p, struct io_buf *bufs)
{
	unsigned from = 0;
	int rc = 0;

	for (unsigned i = 0; i <= p->nr && !rc; i++) {
		if (i < p->nr && p->items[i].kind == KD_IO)
			continue;
		if (i > from)
			rc = run_batch(fd, ctx, p, bufs, from, i);
		from = i + 1;
		if (!rc && i < p->nr && p->items[i].kind == KD_FLUSH && fsync(fd)) {
			perror("kdiff-submit: fsync");
			rc = 1;
		}
	}
	return rc;
}

/*
 * The matrix of one pattern (see the file comment); 0 or 1.  Runs are the
 * outer loop and schedulers the inner one, so that consecutive runs use
 * different schedulers and a fresh instance takes one switch.
 */
static int run_matrix(const struct matrix *m, int fd, aio_context_t ctx, struct kd_pattern *p,
		      struct io_buf *bufs)
{
	char scheds[256], path[512];

	for (unsigned r = 1; r <= m->runs; r++) {
		for (const char *n = m->nomerges; *n; n++) {
			char nm[2] = { *n, 0 }, *save = NULL;

			if (*n == ',')
				continue;
			snprintf(scheds, sizeof(scheds), "%s", m->scheds);
			for (char *s = strtok_r(scheds, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
				if (fresh_sched(m->queue, s) || put(m->queue, "nomerges", nm) ||
				    put(m->trace, "trace", "") || put(m->trace, "tracing_on", "1"))
					return 1;
				if (run_pattern(fd, ctx, p, bufs))
					return 1;
				if (put(m->trace, "tracing_on", "0"))
					return 1;
				snprintf(path, sizeof(path), "%s.%s.%s.trace.%u", m->out, s, nm, r);
				if (save_trace(m->trace, path))
					return 1;
			}
		}
	}
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: kdiff-submit [--cpu N] [--queue DIR --trace DIR --out PREFIX\n"
		   "                    [--sched LIST] [--nomerges LIST] [--runs N]] DEVICE PATTERN\n"
		   "Submit PATTERN (see tests/kdiff/pattern.h) to DEVICE with O_DIRECT, each\n"
		   "batch as one io_submit; print the pattern back with its physical runs.\n"
		   "With --queue (the device's sysfs queue directory), --trace (a tracefs\n"
		   "instance with block_rq_issue enabled) and --out, run it under every\n"
		   "scheduler and nomerges value, --runs times each, with a fresh scheduler\n"
		   "each time, and save each run's trace as OUT.SCHED.NOMERGES.trace.RUN.\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "cpu", required_argument, NULL, 'c' },
		{ "queue", required_argument, NULL, 'q' },
		{ "trace", required_argument, NULL, 't' },
		{ "out", required_argument, NULL, 'o' },
		{ "sched", required_argument, NULL, 's' },
		{ "nomerges", required_argument, NULL, 'n' },
		{ "runs", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	struct kd_pattern p;
	struct io_buf *bufs;
	aio_context_t ctx = 0;
	struct matrix m = { .scheds = "none", .nomerges = "0", .runs = 1 };
	unsigned maxb = 1, cur = 0;
	int cpu = 0, c, fd, pm, rc = 0;
	cpu_set_t set;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': cpu = atoi(optarg); break;
		case 'q': m.queue = optarg; break;
		case 't': m.trace = optarg; break;
		case 'o': m.out = optarg; break;
		case 's': m.scheds = optarg; break;
		case 'n': m.nomerges = optarg; break;
		case 'r': m.runs = (unsigned)atoi(optarg); break;
		case 'h': usage(stdout); return 0;
		case 'V': puts("kdiff-submit 1"); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (argc - optind != 2) {
		fprintf(stderr, "kdiff-submit: needs DEVICE and PATTERN\n");
		return 2;
	}
	if ((m.queue || m.trace || m.out) && !(m.queue && m.trace && m.out && m.runs)) {
		fprintf(stderr, "kdiff-submit: --queue, --trace and --out go together\n");
		return 2;
	}
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		perror("kdiff-submit: sched_setaffinity");
	if (kd_parse(argv[optind + 1], &p))
		return 2;
	bufs = calloc(p.nr + 1, sizeof(*bufs));
	if (!bufs || !lay_out(&p, bufs)) {
		fprintf(stderr, "kdiff-submit: out of memory\n");
		return 1;
	}
	pm = open("/proc/self/pagemap", O_RDONLY);
	for (unsigned i = 0; i < p.nr; i++) {
		if (p.items[i].kind != KD_IO) {
			cur = 0;
			continue;
		}
		if (++cur > maxb)
			maxb = cur;
		if (pm < 0 || !resolve_runs(pm, &p.items[i], &bufs[i]))
			fprintf(stderr, "kdiff-submit: no physical layout for item %u\n", i);
	}
	if (pm >= 0)
		close(pm);
	fd = open(argv[optind], O_RDWR | O_DIRECT);
	if (fd < 0) {
		fprintf(stderr, "kdiff-submit: %s: %s\n", argv[optind], strerror(errno));
		return 1;
	}
	if (sys_io_setup(maxb, &ctx)) {
		perror("kdiff-submit: io_setup");
		return 1;
	}
	rc = m.queue ? run_matrix(&m, fd, ctx, &p, bufs) : run_pattern(fd, ctx, &p, bufs);
	close(fd);
	for (unsigned i = 0; i < p.nr; i++) {
		kd_print_item(stdout, &p.items[i]);
		free(bufs[i].iov);
	}
	free(bufs);
	kd_free(&p);
	return rc;
}
