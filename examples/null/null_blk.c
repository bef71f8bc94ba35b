/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * null_blk: the example multi-queue driver.  See null_blk.h.
 *
 * Reading order: configuration defaults, the memory store (a two-level page
 * table filled on first write), the per-hw-queue completion list and its
 * thread, the rq_mq_ops, then creation and teardown.
 *
 * Concurrency: the core calls queue_rq for one hw queue from one thread at a
 * time, and for different hw queues at once.  Every per-hw-queue counter
 * therefore has one writer (queue_rq, or the completion thread) and is read
 * with relaxed atomics by null_get_stats().  The store is shared by all hw
 * queues: data copies hold its rwlock shared (pages are only ever added, with
 * a compare-and-swap), discard and write-zeroes hold it exclusive because
 * they free pages.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "null_blk.h"
#include "null_poll.h"

#define NULL_PAGE_SHIFT 12
#define NULL_PAGE_SIZE (1u << NULL_PAGE_SHIFT)
#define NULL_CHUNK_SHIFT 9 /* 512 pages (2 MiB) per second-level table */
#define NULL_CHUNK_PAGES (1u << NULL_CHUNK_SHIFT)

#define NULL_DEFAULT_DEPTH 64
#define NULL_DEFAULT_NSEC 10000ull
#define NULL_DEFAULT_SIZE (1ull << 30)
#define NULL_SLEEP_THRESHOLD_NS 20000 /* shorter waits spin on the clock */
#define NULL_HANDOVER 16            /* requests ended per hand-over (multi-queue):
				       half a plug of 32 (doc/architecture.md) */
#define NULL_STEER_MIN 16u         /* NULL_CT_STEER: batches on the submitter's CPU
				      between tries (about 100 us there), */
#define NULL_STEER_MAX 16384u      /* doubling per move up to this (about 100 ms), */
#define NULL_STEER_SETTLED 1024u   /* back to the least after this many batches apart */
#define NULL_STEER_BUSY 64u        /* after a try that found no CPU free */

#define NULL_CACHELINE 64

/* The driver's payload of every request (tag set cmd_size). */
struct null_cmd {
	struct null_cmd *next;   /* completion list link */
	struct null_cmd *chain_last; /* first of a pushed chain: its last */
	uint64_t queued_ns;      /* timer mode: when queue_rq took it */
	rq_status_t status;      /* single queue: the answer, until it is ended */
	/* multi-queue: the hw queue this request was last issued on, so
	   queue_rq looks it up once per request slot, not once per I/O
	   (null_hq_of_rq; NULL from init_request, and in the library's own
	   flush request, whose payload it allocates zeroed) */
	struct rq_hw_ctx *hctx;
	struct null_hq *hq;
};

/* Request kinds counted: every enum rq_op, and one slot for any other. */
#define NULL_NR_OPS (RQ_OP_LAST + 1)

/*
 * Counters with one writer each; see the file comment.  Indexed by the
 * request's op, so accounting is two adds and no branch; null_get_stats()
 * sums them into requests, bytes (reads and writes) and the per-op counts.
 */
struct null_counters {
	uint64_t ops[NULL_NR_OPS];      /* requests taken, by op */
	uint64_t op_bytes[NULL_NR_OPS]; /* their bytes, by op */
};

/* One hardware queue. */
struct null_hq {
	struct null_dev *dev;
	unsigned idx;
	pthread_t thread;
	bool thread_started;

	/* written by queue_rq */
	struct null_counters qc __attribute__((aligned(NULL_CACHELINE)));
	bool plain;                 /* inline completion with nothing to
				       inject, sleep or copy: queue_rq's
				       short path (fixed at creation) */
	uint32_t rng;               /* fault injection (queue_rq only) */
	uint64_t busy;
	/* queued since the last push, oldest first (queue_rq only) */
	struct null_cmd *unpushed, *unpushed_last;

	/* pushed by queue_rq, taken whole by the completion thread; every
	   push reads sleeping, so it lives on this line, which the push
	   owns already (on the counters' line below, which the thread
	   writes per batch, it cost each push a second miss) */
	_Atomic(struct null_cmd *) pending __attribute__((aligned(NULL_CACHELINE)));
	_Atomic int submit_cpu;     /* CPU of the last push, -1: unknown */
	_Atomic uint32_t wake_seq;  /* futex word */
	atomic_bool sleeping;

	/* written by the completion thread (or queue_rq when inline) */
	uint64_t completed __attribute__((aligned(NULL_CACHELINE)));
	uint64_t segments;
	uint64_t batches, sleeps, colocated, moves; /* null_stats */
	/* NULL_CT_STEER (completion thread only) */
	bool steer;                 /* on, and another CPU allowed at start */
	int loadavg_fd;             /* /proc/loadavg, -1: none */
	unsigned steer_wait;        /* colocated batches before the next try */
	unsigned steer_gap;         /* the wait after that try */
	unsigned apart_run;         /* batches apart since the last colocated one */
	atomic_bool stop;
	uint32_t poll_ns;           /* idle polling budget (completion thread) */
} __attribute__((aligned(NULL_CACHELINE)));

/* Memory backing: chunks[i][j] is page i * NULL_CHUNK_PAGES + j. */
struct null_store {
	uint64_t nr_pages;
	size_t nr_chunks;
	_Atomic(_Atomic(void *) *) *chunks;
	atomic_uint_fast64_t allocated;
	pthread_rwlock_t lock;
};

struct null_dev {
	struct null_config cfg;
	struct rq_tag_set *set;
	struct rq_queue *q;
	struct null_store store;
	struct null_hq *hqs;
};

/* ------------------------------------------------------------- helpers */

static uint64_t null_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* Add to a counter that only the calling thread writes. */
static inline void null_count(uint64_t *c, uint64_t n)
{
	__atomic_store_n(c, *c + n, __ATOMIC_RELAXED);
}

static inline uint64_t null_read(const uint64_t *c)
{
	return __atomic_load_n(c, __ATOMIC_RELAXED);
}

static inline void null_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

static void null_futex_wait(_Atomic uint32_t *word, uint32_t val)
{
	syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void null_futex_wake(_Atomic uint32_t *word)
{
	syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/**
 * null_config_default() - fill @cfg with the defaults.
 * @cfg: configuration to overwrite.
 */
void null_config_default(struct null_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->nr_hw_queues = 1;
	cfg->hw_queue_depth = NULL_DEFAULT_DEPTH;
	cfg->completion = NULL_COMPLETE_INLINE;
	cfg->completion_nsec = NULL_DEFAULT_NSEC;
	cfg->size_bytes = NULL_DEFAULT_SIZE;
	cfg->blocksize = 512;
}

/* ---------------------------------------------------------------- store */

static int null_store_init(struct null_store *st, uint64_t size)
{
	st->nr_pages = (size + NULL_PAGE_SIZE - 1) >> NULL_PAGE_SHIFT;
	st->nr_chunks = (st->nr_pages + NULL_CHUNK_PAGES - 1) >> NULL_CHUNK_SHIFT;
	st->chunks = calloc(st->nr_chunks, sizeof(*st->chunks));
	if (!st->chunks)
		return -ENOMEM;
	atomic_init(&st->allocated, 0);
	if (pthread_rwlock_init(&st->lock, NULL)) {
		free(st->chunks);
		st->chunks = NULL;
		return -ENOMEM;
	}
	return 0;
}

static void null_store_exit(struct null_store *st)
{
	size_t i, j;

	if (!st->chunks)
		return;
	for (i = 0; i < st->nr_chunks; i++) {
		_Atomic(void *) *chunk = atomic_load(&st->chunks[i]);

		if (!chunk)
			continue;
		for (j = 0; j < NULL_CHUNK_PAGES; j++)
			free(atomic_load(&chunk[j]));
		free(chunk);
	}
	free(st->chunks);
	st->chunks = NULL;
	pthread_rwlock_destroy(&st->lock);
}

/*
 * The slot of page @pgno; with @create, make its chunk if missing.  Returns
 * NULL only when the chunk is missing and !@create, or on ENOMEM.
 */
static _Atomic(void *) *null_store_slot(struct null_store *st, uint64_t pgno,
					bool create)
{
	_Atomic(_Atomic(void *) *) *cp = &st->chunks[pgno >> NULL_CHUNK_SHIFT];
	_Atomic(void *) *chunk = atomic_load_explicit(cp, memory_order_acquire);

	if (!chunk && create) {
		_Atomic(void *) *fresh = calloc(NULL_CHUNK_PAGES, sizeof(*fresh));

		if (!fresh)
			return NULL;
		if (atomic_compare_exchange_strong_explicit(cp, &chunk, fresh,
							    memory_order_acq_rel,
							    memory_order_acquire))
			chunk = fresh;
		else
			free(fresh); /* someone else won; chunk holds theirs */
	}
	if (!chunk)
		return NULL;
	return &chunk[pgno & (NULL_CHUNK_PAGES - 1)];
}

/* The page @pgno for reading (NULL: never written, reads as zeros). */
static void *null_store_lookup(struct null_store *st, uint64_t pgno)
{
	_Atomic(void *) *slot = null_store_slot(st, pgno, false);

	return slot ? atomic_load_explicit(slot, memory_order_acquire) : NULL;
}

/* The page @pgno for writing, allocated zeroed if missing. */
static void *null_store_get(struct null_store *st, uint64_t pgno)
{
	_Atomic(void *) *slot = null_store_slot(st, pgno, true);
	void *page, *fresh;

	if (!slot)
		return NULL;
	page = atomic_load_explicit(slot, memory_order_acquire);
	if (page)
		return page;
	fresh = calloc(1, NULL_PAGE_SIZE);
	if (!fresh)
		return NULL;
	if (atomic_compare_exchange_strong_explicit(slot, &page, fresh,
						    memory_order_acq_rel,
						    memory_order_acquire)) {
		atomic_fetch_add_explicit(&st->allocated, 1, memory_order_relaxed);
		return fresh;
	}
	free(fresh);
	return page;
}

/* Copy one segment between @buf and the store at byte @pos. */
static rq_status_t null_store_copy(struct null_store *st, uint64_t pos,
				   char *buf, uint32_t len, bool write)
{
	while (len) {
		uint64_t pgno = pos >> NULL_PAGE_SHIFT;
		uint32_t off = pos & (NULL_PAGE_SIZE - 1);
		uint32_t n = NULL_PAGE_SIZE - off;
		char *page;

		if (n > len)
			n = len;
		if (pgno >= st->nr_pages)
			return RQ_STS_IOERR;
		if (write) {
			page = null_store_get(st, pgno);
			if (!page)
				return RQ_STS_RESOURCE;
			memcpy(page + off, buf, n);
		} else {
			page = null_store_lookup(st, pgno);
			if (page)
				memcpy(buf, page + off, n);
			else
				memset(buf, 0, n);
		}
		pos += n;
		buf += n;
		len -= n;
	}
	return RQ_STS_OK;
}

/*
 * Zero [@pos, @pos + @len): whole pages are freed (they read back as zeros),
 * partial ones cleared.  Caller holds the store lock exclusive.
 */
static void null_store_zero(struct null_store *st, uint64_t pos, uint64_t len)
{
	while (len) {
		uint64_t pgno = pos >> NULL_PAGE_SHIFT;
		uint32_t off = pos & (NULL_PAGE_SIZE - 1);
		uint64_t n = NULL_PAGE_SIZE - off;
		_Atomic(void *) *slot;

		if (n > len)
			n = len;
		if (pgno >= st->nr_pages)
			break;
		slot = null_store_slot(st, pgno, false);
		if (slot) {
			char *page = atomic_load_explicit(slot, memory_order_relaxed);

			if (page && n == NULL_PAGE_SIZE) {
				atomic_store_explicit(slot, NULL, memory_order_relaxed);
				atomic_fetch_sub_explicit(&st->allocated, 1,
							  memory_order_relaxed);
				free(page);
			} else if (page) {
				memset(page + off, 0, n);
			}
		}
		pos += n;
		len -= n;
	}
}

/* --------------------------------------------------------- data handling */

/*
 * Do what @rq asks of the store.  Runs where the request completes: inside
 * queue_rq (inline) or on the completion thread.
 */
static rq_status_t null_handle_rq(struct null_dev *dev, struct null_hq *hq,
				  struct rq_request *rq)
{
	struct null_store *st = &dev->store;
	struct rq_req_iter ri = { 0 };
	struct rq_segment seg;
	rq_status_t status = RQ_STS_OK;
	uint64_t pos, nsegs = 0;

	if (!dev->cfg.memory_backed)
		return RQ_STS_OK;

	pos = rq->sector << RQ_SECTOR_SHIFT;
	switch (rq->op) {
	case RQ_OP_READ:
	case RQ_OP_WRITE:
		pthread_rwlock_rdlock(&st->lock);
		rq_req_iter_init(&ri, rq);
		while (status == RQ_STS_OK && rq_req_iter_next(&ri, &seg)) {
			status = null_store_copy(st, pos, seg.base, seg.len,
						 rq->op == RQ_OP_WRITE);
			pos += seg.len;
			nsegs++;
		}
		pthread_rwlock_unlock(&st->lock);
		null_count(&hq->segments, nsegs);
		return status;
	case RQ_OP_DISCARD:
	case RQ_OP_WRITE_ZEROES:
		pthread_rwlock_wrlock(&st->lock);
		null_store_zero(st, pos, rq->bytes);
		pthread_rwlock_unlock(&st->lock);
		return RQ_STS_OK;
	case RQ_OP_FLUSH:
	default:
		return RQ_STS_OK;
	}
}

/* ------------------------------------------------------ completion thread */

/*
 * The hand-over writes no command line on the completion thread but one
 * per chain: the submitter links each chain oldest first and notes its
 * last command in its first, pushes put whole chains on a stack (newest
 * chain first), and the thread puts the chains back in order by their
 * last links alone.  So the lines of the payload (cmd->hctx, read by every
 * queue_rq) stay in the submitter's cache while the thread ends them.
 */

/*
 * Hand the commands @first..@last (linked by next, oldest first) to the hw
 * queue's completion thread with one compare-and-swap; wake it if asleep.
 */
static void null_hq_push_chain(struct null_hq *hq, struct null_cmd *first, struct null_cmd *last)
{
	/* the thread usually took everything: expect an empty list rather
	   than load the head first (a load, then the compare-and-swap, moved
	   the line from the thread's CPU twice per push) */
	struct null_cmd *head = NULL;
	int cpu = sched_getcpu();

	first->chain_last = last;
	do {
		last->next = head;
	} while (!atomic_compare_exchange_weak_explicit(&hq->pending, &head, first,
							memory_order_seq_cst,
							memory_order_relaxed));
	/* the completion thread's polling hint, on the line the push owns now */
	atomic_store_explicit(&hq->submit_cpu, cpu, memory_order_relaxed);
	/* only the first pusher after the thread fell asleep wakes it */
	if (atomic_load(&hq->sleeping) && atomic_exchange(&hq->sleeping, false)) {
		atomic_fetch_add(&hq->wake_seq, 1);
		null_futex_wake(&hq->wake_seq);
	}
}

static void null_hq_push(struct null_hq *hq, struct null_cmd *cmd)
{
	null_hq_push_chain(hq, cmd, cmd);
}

/*
 * queue_rq: keep @cmd until the core's batch ends (@last, or commit_rqs),
 * then hand the batch over in one push: the submitter writes the shared
 * list head once per batch, not per request.
 */
static void null_hq_queue(struct null_hq *hq, struct null_cmd *cmd, bool last)
{
	cmd->next = NULL;
	if (hq->unpushed)
		hq->unpushed_last->next = cmd;
	else
		hq->unpushed = cmd;
	hq->unpushed_last = cmd;
	if (last) {
		null_hq_push_chain(hq, hq->unpushed, hq->unpushed_last);
		hq->unpushed = NULL;
	}
}

/*
 * Take everything pushed so far, oldest first; append it to the head/tail
 * list.  Return: whether there was anything.
 */
static bool null_hq_take(struct null_hq *hq, struct null_cmd **head,
			 struct null_cmd **tail)
{
	struct null_cmd *list = atomic_exchange(&hq->pending, NULL);
	struct null_cmd *rev = NULL, *newest;

	if (!list)
		return false;
	newest = list->chain_last;
	while (list) {
		/* one chain: list..last; the older chains follow last */
		struct null_cmd *last = list->chain_last, *older = last->next;

		if (older != rev) /* the one chain of most takes ends NULL already */
			last->next = rev;
		rev = list;
		list = older;
	}
	/* rev is now oldest first, and the newest chain's last ends it */
	if (*tail)
		(*tail)->next = rev;
	else
		*head = rev;
	*tail = newest;
	null_count(&hq->batches, 1);
	return true;
}

static bool null_hq_has_work(void *arg)
{
	struct null_hq *hq = arg;

	return atomic_load_explicit(&hq->pending, memory_order_relaxed) ||
	       atomic_load_explicit(&hq->stop, memory_order_relaxed);
}

/* Is the last submitter on another CPU (polling, early hand-over)? */
static bool null_hq_peer_apart(struct null_hq *hq)
{
	return null_poll_worth(atomic_load_explicit(&hq->submit_cpu, memory_order_relaxed));
}

/*
 * Is a CPU free for this thread?  The machine's runnable threads (this one
 * and its submitter among them, /proc/loadavg) are at most @ncpu, the CPUs
 * it may use.  On a busy machine a pair on two CPUs each shares its CPU
 * with others, and waits for the other's time slice at every hand-over:
 * there the pair does better on one CPU.
 */
static bool null_hq_cpu_free(struct null_hq *hq, int ncpu)
{
	char buf[128], *p;
	ssize_t n = pread(hq->loadavg_fd, buf, sizeof(buf) - 1, 0);

	if (n <= 0)
		return false;
	buf[n] = '\0';
	/* "0.50 0.40 0.30 RUNNABLE/THREADS LASTPID" */
	p = strchr(buf, '/');
	while (p && p > buf && p[-1] >= '0' && p[-1] <= '9')
		p--;
	return p && strtol(p, NULL, 10) <= ncpu;
}

/*
 * NULL_CT_STEER: the batch just taken came from @cpu, the CPU this thread
 * runs on.  Move off it, if a CPU is free, trying once per gap (counted in
 * batches taken on that CPU, no clock read): allow every CPU the thread
 * may use but @cpu (the kernel migrates it before the call returns), then
 * give it its mask back, as read just before, so it is never pinned.  Each
 * move doubles the gap, so moves that do not hold (the scheduler puts the
 * pair together again) cost little; with no CPU free it looks again after
 * NULL_STEER_BUSY batches.
 * Return: whether the thread now runs on another CPU than @cpu.
 */
static bool null_hq_steer(struct null_hq *hq, int cpu)
{
	cpu_set_t mine, away;

	if (hq->steer_wait) {
		hq->steer_wait--;
		return false;
	}
	if (sched_getaffinity(0, sizeof(mine), &mine) || !null_hq_cpu_free(hq, CPU_COUNT(&mine))) {
		/* no CPU free now: look again soon (a read of /proc/loadavg
		   per 64 batches on one CPU, well under 1 % of their time) */
		hq->steer_wait = NULL_STEER_BUSY;
		return false;
	}
	hq->steer_wait = hq->steer_gap;
	hq->steer_gap = hq->steer_gap * 2 < NULL_STEER_MAX ? hq->steer_gap * 2 : NULL_STEER_MAX;
	away = mine;
	CPU_CLR(cpu, &away);
	if (!CPU_COUNT(&away) || sched_setaffinity(0, sizeof(away), &away))
		return false;
	sched_setaffinity(0, sizeof(mine), &mine);
	null_count(&hq->moves, 1);
	return sched_getcpu() != cpu;
}

/*
 * A batch was taken: is the submitter that pushed it on another CPU (then
 * the thread polls and hands back early)?  Counts the batches taken on its
 * CPU and, under NULL_CT_STEER, moves off that CPU.
 */
static bool null_hq_placed(struct null_hq *hq)
{
	int peer = atomic_load_explicit(&hq->submit_cpu, memory_order_relaxed);
	int cpu;

	if (null_poll_worth(peer)) {
		if (hq->steer_gap > NULL_STEER_MIN && ++hq->apart_run >= NULL_STEER_SETTLED) {
			hq->steer_gap = NULL_STEER_MIN;
			hq->steer_wait = 0;
		}
		return true;
	}
	null_count(&hq->colocated, 1);
	hq->apart_run = 0;
	cpu = sched_getcpu();
	return hq->steer && peer == cpu && null_hq_steer(hq, cpu);
}

/*
 * Under NULL_CT_STEER (multi-queue: the single-queue thread also pushes to
 * itself, from request_fn), note the thread's own CPUs; steer only with two.
 */
static void null_hq_steer_init(struct null_hq *hq)
{
	const struct null_config *cfg = &hq->dev->cfg;
	cpu_set_t mine;

	hq->steer_gap = NULL_STEER_MIN;
	hq->loadavg_fd = -1;
	hq->steer = cfg->ct_placement == NULL_CT_STEER && cfg->queue_mode == NULL_Q_MQ &&
		    !sched_getaffinity(0, sizeof(mine), &mine) && CPU_COUNT(&mine) > 1 &&
		    (hq->loadavg_fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC)) >= 0;
}

/* Wait until something is pushed or stop is set: poll, then sleep. */
static void null_hq_idle(struct null_hq *hq)
{
	uint32_t seq;

	/* a submitter on another CPU refills sooner than a futex round trip */
	if (null_hq_peer_apart(hq) && null_poll(&hq->poll_ns, null_hq_has_work, hq))
		return;
	atomic_store(&hq->sleeping, true);
	seq = atomic_load(&hq->wake_seq);
	if (!atomic_load(&hq->pending) && !atomic_load(&hq->stop)) {
		null_count(&hq->sleeps, 1);
		null_futex_wait(&hq->wake_seq, seq);
	}
	atomic_store(&hq->sleeping, false);
}

/* Wait until @deadline (CLOCK_MONOTONIC ns); new pushes do not interrupt. */
static void null_wait_until(uint64_t deadline)
{
	uint64_t now = null_now_ns();

	if (now >= deadline)
		return;
	if (deadline - now > NULL_SLEEP_THRESHOLD_NS) {
		struct timespec ts = {
			.tv_sec = (deadline - NULL_SLEEP_THRESHOLD_NS / 4) / 1000000000ull,
			.tv_nsec = (deadline - NULL_SLEEP_THRESHOLD_NS / 4) % 1000000000ull,
		};

		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
	}
	while (null_now_ns() < deadline)
		null_cpu_relax();
}

/*
 * Multi-queue: finish the commands from @head up to @stop (exclusive) on
 * the completion thread, and end them all with one completion batch (tags
 * back a bitmap word at a time, the queue usage dropped once; under
 * rq_affinity 2 the library hands them to their submitters, one push each).
 */
static void null_finish_mq(struct null_hq *hq, struct null_cmd *head, struct null_cmd *stop)
{
	struct rq_comp_batch cb = RQ_COMP_BATCH_INIT;
	bool data = hq->dev->cfg.memory_backed;
	struct null_cmd *cmd, *next;
	unsigned n = 0;

	for (cmd = head; cmd != stop; cmd = next, n++) {
		struct rq_request *rq = rq_request_from_pdu(cmd);

		/* read the link first: the request may be reused once ended */
		next = cmd->next;
		rq_mq_add_to_batch(&cb, rq, data ? null_handle_rq(hq->dev, hq, rq) : RQ_STS_OK);
	}
	null_count(&hq->completed, n);
	rq_mq_end_request_batch(&cb);
}

/*
 * Single queue: finish the commands from @head up to @stop (exclusive).
 * The data moves outside the queue lock; then one lock hold ends them all
 * and refills the device, so the unlock is the last touch of the queue
 * (a queue being destroyed may go once its last request has ended).
 */
static void null_finish_sq(struct null_hq *hq, struct null_cmd *head, struct null_cmd *stop)
{
	struct rq_queue *q = hq->dev->q;
	struct null_cmd *cmd, *next;
	unsigned n = 0;

	for (cmd = head; cmd != stop; cmd = cmd->next, n++)
		cmd->status = null_handle_rq(hq->dev, hq, rq_request_from_pdu(cmd));
	null_count(&hq->completed, n);
	rq_sq_lock(q);
	for (cmd = head; cmd != stop; cmd = next) {
		/* read the link first: the request may be reused once ended */
		next = cmd->next;
		rq_sq_end_request_all_locked(rq_request_from_pdu(cmd), cmd->status);
	}
	rq_sq_run_queue_locked(q);
	rq_sq_unlock(q);
}

/* Finish the commands from @head up to @stop (exclusive), either front end. */
static void null_finish(struct null_hq *hq, struct null_cmd *head, struct null_cmd *stop)
{
	if (hq->dev->cfg.queue_mode == NULL_Q_RQ)
		null_finish_sq(hq, head, stop);
	else
		null_finish_mq(hq, head, stop);
	if (hq->dev->cfg.batch_done)
		hq->dev->cfg.batch_done();
}

/**
 * null_complete_thread() - a hw queue's completion thread: ends requests in
 * arrival order, in timer mode each once its delay has passed.
 * @arg: the struct null_hq.
 *
 * Context: own thread, from null_create() until null_destroy().
 * Return: NULL.
 */
static void *null_complete_thread(void *arg)
{
	struct null_hq *hq = arg;
	struct null_dev *dev = hq->dev;
	bool timer = dev->cfg.completion == NULL_COMPLETE_TIMER;
	uint64_t delay = dev->cfg.completion_nsec;
	struct null_cmd *head = NULL, *tail = NULL, *stop;
	bool apart = false;
	unsigned n;

	/* precise sleeps for timer mode (default slack is 50 us) */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	if (dev->cfg.thread_init)
		dev->cfg.thread_init();
	null_hq_steer_init(hq);

	for (;;) {
		/* where the submitter is, looked at once per take */
		if (null_hq_take(hq, &head, &tail))
			apart = null_hq_placed(hq);
		if (!head) {
			if (atomic_load(&hq->stop))
				break;
			null_hq_idle(hq);
			continue;
		}
		if (timer) {
			/* one delay for all: FIFO order is deadline order */
			uint64_t now = null_now_ns();

			stop = head;
			while (stop && now >= stop->queued_ns + delay)
				stop = stop->next;
			null_finish(hq, head, stop);
			head = stop;
			if (!head)
				tail = NULL;
			else
				null_wait_until(head->queued_ns + delay);
			continue;
		}
		/* multi-queue, a submitter on another CPU: hand back every
		   NULL_HANDOVER requests, so it refills while this thread ends
		   the rest (on this CPU it would only preempt us) */
		stop = NULL;
		if (dev->cfg.queue_mode != NULL_Q_RQ && apart)
			for (stop = head, n = 0; stop && n < NULL_HANDOVER; n++)
				stop = stop->next;
		null_finish(hq, head, stop);
		head = stop;
		if (!head)
			tail = NULL;
	}
	if (hq->loadavg_fd >= 0)
		close(hq->loadavg_fd);
	return NULL;
}

/* ------------------------------------------------------------- mq ops */

static struct null_hq *null_hq_of(struct rq_hw_ctx *hctx)
{
	struct null_hq *hq = rq_hctx_driver_data(hctx);

	if (!hq) {
		struct null_dev *dev = rq_queue_driver_data(rq_hctx_queue(hctx));

		hq = &dev->hqs[rq_hctx_index(hctx)];
	}
	return hq;
}

/* null_hq_of_rq()'s slow path: look @hctx up and keep it in @cmd. */
static __attribute__((noinline)) struct null_hq *null_hq_remember(struct rq_hw_ctx *hctx,
								   struct null_cmd *cmd)
{
	cmd->hq = null_hq_of(hctx);
	cmd->hctx = hctx;
	return cmd->hq;
}

/*
 * The hw queue of @rq, issued on @hctx.  rq_hctx_driver_data() is a call
 * into the library: the answer is kept in the request's payload and looked
 * up again only when the request comes through another hw queue (shared
 * tags) or for the first time.
 */
static inline struct null_hq *null_hq_of_rq(struct rq_hw_ctx *hctx, struct rq_request *rq)
{
	struct null_cmd *cmd = rq_request_pdu(rq);

	if (__builtin_expect(cmd->hctx != hctx, 0))
		return null_hq_remember(hctx, cmd);
	return cmd->hq;
}

/* Count @rq as taken (queue_rq or request_fn only). */
static inline void null_account(struct null_hq *hq, const struct rq_request *rq)
{
	struct null_counters *c = &hq->qc;
	unsigned op = rq->op < RQ_OP_LAST ? rq->op : RQ_OP_LAST;

	null_count(&c->ops[op], 1);
	null_count(&c->op_bytes[op], rq->bytes);
}

/*
 * queue_rq for every configuration but the plain one: fault injection,
 * blocking, memory backing, completion on the hw queue's thread.
 */
static __attribute__((noinline)) rq_status_t null_queue_rq_full(struct null_hq *hq,
								 struct rq_request *rq,
								 bool last)
{
	struct null_dev *dev = hq->dev;
	struct null_cmd *cmd;
	rq_status_t status;

	if (dev->cfg.resource_permille) {
		/* xorshift32; queue_rq never runs concurrently on one hctx */
		uint32_t x = hq->rng ? hq->rng : 2463534242u + hq->idx;

		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		hq->rng = x;
		if (x % 1000 < dev->cfg.resource_permille) {
			null_count(&hq->busy, 1);
			return RQ_STS_RESOURCE;
		}
	}

	null_account(hq, rq);

	if (dev->cfg.blocking && dev->cfg.blocking_nsec) {
		struct timespec ts = {
			.tv_sec = dev->cfg.blocking_nsec / 1000000000ull,
			.tv_nsec = dev->cfg.blocking_nsec % 1000000000ull,
		};

		nanosleep(&ts, NULL);
	}

	if (dev->cfg.completion == NULL_COMPLETE_INLINE) {
		status = null_handle_rq(dev, hq, rq);
		null_count(&hq->completed, 1);
		rq_mq_end_request(rq, status);
		return RQ_STS_OK;
	}

	cmd = rq_request_pdu(rq);
	if (dev->cfg.completion == NULL_COMPLETE_TIMER)
		cmd->queued_ns = null_now_ns();
	null_hq_queue(hq, cmd, last);
	return RQ_STS_OK;
}

/**
 * null_queue_rq() - issue one request: end it now (inline) or queue it for
 * the hw queue's completion thread.
 * @hctx: hardware queue.
 * @rq: the request.
 * @last: false when more follow at once (thread and timer modes push the
 *	batch to the completion thread at the last one).
 *
 * The options are fixed for the device's life, so whether any of them
 * applies was decided once at creation (null_hq.plain): a plain device
 * counts and ends the request, and nothing else.
 *
 * Context: dispatch; never concurrently on one hctx.  Sleeps only in
 * blocking mode.
 * Return: RQ_STS_OK (the request is taken; it may already have ended), or
 * RQ_STS_RESOURCE (fault injection).
 */
static rq_status_t null_queue_rq(struct rq_hw_ctx *hctx, struct rq_request *rq,
				 bool last)
{
	struct null_hq *hq = null_hq_of_rq(hctx, rq);

	if (__builtin_expect(!hq->plain, 0))
		return null_queue_rq_full(hq, rq, last);
	null_account(hq, rq);
	null_count(&hq->completed, 1);
	rq_mq_end_request(rq, RQ_STS_OK);
	return RQ_STS_OK;
}

/**
 * null_commit_rqs() - the core's batch ended early (a request after the
 * last one queued could not be issued): hand over what queue_rq kept.
 * @hctx: hardware queue.
 *
 * Context: dispatch, as queue_rq.
 */
static void null_commit_rqs(struct rq_hw_ctx *hctx)
{
	struct null_hq *hq = null_hq_of(hctx);

	if (hq->unpushed) {
		null_hq_push_chain(hq, hq->unpushed, hq->unpushed_last);
		hq->unpushed = NULL;
	}
}

/**
 * null_init_hctx() - remember our per-hw-queue state in the hctx.
 * @hctx: hardware queue.
 * @set_data: the struct null_dev.
 * @idx: hardware queue index.
 *
 * Return: 0.
 */
static int null_init_hctx(struct rq_hw_ctx *hctx, void *set_data, unsigned idx)
{
	struct null_dev *dev = set_data;

	rq_hctx_set_driver_data(hctx, &dev->hqs[idx]);
	return 0;
}

/**
 * null_init_request() - set up a request's payload: no hw queue known yet.
 * @set: the tag set.
 * @rq: a preallocated request (driver or scheduler tags).
 * @hctx_idx: its hw queue (ignored: with shared tags it may be issued on any).
 * @numa_node: its node.
 *
 * Return: 0.
 */
static int null_init_request(struct rq_tag_set *set, struct rq_request *rq,
			     unsigned hctx_idx, int numa_node)
{
	struct null_cmd *cmd = rq_request_pdu(rq);

	memset(cmd, 0, sizeof(*cmd));
	return 0;
}

/* ------------------------------------------------------------- sq ops */

/**
 * null_request_fn() - the single-queue driver: take requests while fewer
 * than hw_queue_depth are in flight; end them here (inline) or hand them to
 * the completion thread.
 * @q: the queue.
 *
 * The in-flight count is read once: with the queue lock held only this
 * loop changes it, a fetch adding one and an inline end taking it back.
 *
 * Context: queue lock held.
 */
static void null_request_fn(struct rq_queue *q)
{
	struct null_dev *dev = rq_queue_driver_data(q);
	struct null_hq *hq = &dev->hqs[0];
	unsigned busy = rq_sq_in_flight(q, false) + rq_sq_in_flight(q, true);
	struct rq_request *rq;

	while (busy < dev->cfg.hw_queue_depth && (rq = rq_sq_fetch_request(q))) {
		null_account(hq, rq);
		if (hq->plain) {
			/* inline, no data to move: end it now */
			null_count(&hq->completed, 1);
			rq_sq_end_request_all_locked(rq, RQ_STS_OK);
			continue;
		}
		if (dev->cfg.completion == NULL_COMPLETE_INLINE) {
			rq_status_t status = null_handle_rq(dev, hq, rq);

			null_count(&hq->completed, 1);
			rq_sq_end_request_all_locked(rq, status);
			continue;
		}
		{
			struct null_cmd *cmd = rq_request_pdu(rq);

			if (dev->cfg.completion == NULL_COMPLETE_TIMER)
				cmd->queued_ns = null_now_ns();
			null_hq_push(hq, cmd);
			busy++;
		}
	}
}

static const struct rq_sq_ops null_sq_ops = {
	RQ_SQ_OPS_INIT,
	.request_fn = null_request_fn,
};

static const struct rq_mq_ops null_mq_ops = {
	RQ_MQ_OPS_INIT,
	.queue_rq = null_queue_rq,
	.commit_rqs = null_commit_rqs,
	.init_hctx = null_init_hctx,
	.init_request = null_init_request,
};

/* ----------------------------------------------------- create / destroy */

static int null_fill_config(struct null_config *cfg)
{
	struct rq_queue_limits *lim = &cfg->limits;

	lim->size = sizeof(*lim);
	if (!cfg->nr_hw_queues)
		cfg->nr_hw_queues = 1;
	if (!cfg->hw_queue_depth)
		cfg->hw_queue_depth = NULL_DEFAULT_DEPTH;
	if (!cfg->completion_nsec)
		cfg->completion_nsec = NULL_DEFAULT_NSEC;
	if (!cfg->size_bytes)
		cfg->size_bytes = NULL_DEFAULT_SIZE;
	if (!cfg->blocksize)
		cfg->blocksize = 512;
	if (cfg->completion > NULL_COMPLETE_TIMER || cfg->queue_mode > NULL_Q_RQ ||
	    cfg->ct_placement > NULL_CT_FREE)
		return -EINVAL;
	if (cfg->queue_mode == NULL_Q_RQ) {
		/* one queue; no blocking or busy injection in request_fn */
		if (cfg->blocking || cfg->resource_permille)
			return -EINVAL;
		cfg->nr_hw_queues = 1;
	}
	if (cfg->blocksize < 512 || cfg->blocksize > NULL_PAGE_SIZE ||
	    (cfg->blocksize & (cfg->blocksize - 1)))
		return -EINVAL;
	if (cfg->size_bytes % cfg->blocksize)
		return -EINVAL;
	if (!lim->logical_block_size)
		lim->logical_block_size = cfg->blocksize;
	else if (lim->logical_block_size != cfg->blocksize)
		return -EINVAL;
	/* a null device supports both; whole pages are freed when backed */
	if (!lim->max_discard_sectors)
		lim->max_discard_sectors = UINT32_MAX >> RQ_SECTOR_SHIFT;
	if (!lim->max_write_zeroes_sectors)
		lim->max_write_zeroes_sectors = UINT32_MAX >> RQ_SECTOR_SHIFT;
	return 0;
}

static void null_stop_threads(struct null_dev *dev)
{
	unsigned i;

	for (i = 0; i < dev->cfg.nr_hw_queues; i++) {
		struct null_hq *hq = &dev->hqs[i];

		if (!hq->thread_started)
			continue;
		atomic_store(&hq->stop, true);
		atomic_fetch_add(&hq->wake_seq, 1);
		null_futex_wake(&hq->wake_seq);
		pthread_join(hq->thread, NULL);
		hq->thread_started = false;
	}
}

/**
 * null_create() - make a null device and its queue.  See null_blk.h.
 * @cfg: configuration.
 * @out: receives the device.
 *
 * Return: 0, or a negative errno.
 */
int null_create(const struct null_config *cfg, struct null_dev **out)
{
	struct rq_tag_set_config sc = { RQ_TAG_SET_CONFIG_INIT };
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT };
	struct null_dev *dev;
	unsigned i;
	int ret;

	if (!cfg || !out)
		return -EINVAL;
	dev = calloc(1, sizeof(*dev));
	if (!dev)
		return -ENOMEM;
	dev->cfg = *cfg;
	ret = null_fill_config(&dev->cfg);
	if (ret)
		goto fail;

	ret = -ENOMEM;
	if (posix_memalign((void **)&dev->hqs, NULL_CACHELINE,
			   dev->cfg.nr_hw_queues * sizeof(*dev->hqs)))
		goto fail;
	memset(dev->hqs, 0, dev->cfg.nr_hw_queues * sizeof(*dev->hqs));
	for (i = 0; i < dev->cfg.nr_hw_queues; i++) {
		dev->hqs[i].dev = dev;
		dev->hqs[i].idx = i;
		dev->hqs[i].plain = dev->cfg.completion == NULL_COMPLETE_INLINE &&
				    !dev->cfg.memory_backed && !dev->cfg.resource_permille &&
				    !(dev->cfg.blocking && dev->cfg.blocking_nsec);
		atomic_init(&dev->hqs[i].submit_cpu, -1);
	}
	if (dev->cfg.memory_backed) {
		ret = null_store_init(&dev->store, dev->cfg.size_bytes);
		if (ret)
			goto fail;
	}

	if (dev->cfg.completion != NULL_COMPLETE_INLINE) {
		for (i = 0; i < dev->cfg.nr_hw_queues; i++) {
			if (pthread_create(&dev->hqs[i].thread, NULL,
					   null_complete_thread, &dev->hqs[i])) {
				ret = -EAGAIN;
				goto fail;
			}
			dev->hqs[i].thread_started = true;
		}
	}

	if (dev->cfg.queue_mode == NULL_Q_RQ) {
		struct rq_sq_config sq = {
			RQ_SQ_CONFIG_INIT,
			.ops = &null_sq_ops,
			.limits = &dev->cfg.limits,
			.capacity = dev->cfg.size_bytes >> RQ_SECTOR_SHIFT,
			.scheduler = dev->cfg.sched,
			.cmd_size = sizeof(struct null_cmd),
			.queuedata = dev,
		};

		ret = rq_sq_alloc_queue(&sq, &dev->q);
		if (ret)
			goto fail;
		*out = dev;
		return 0;
	}

	sc.ops = &null_mq_ops;
	sc.nr_hw_queues = dev->cfg.nr_hw_queues;
	sc.queue_depth = dev->cfg.hw_queue_depth;
	sc.cmd_size = sizeof(struct null_cmd);
	sc.numa_node = -1;
	sc.flags = dev->cfg.flags | (dev->cfg.blocking ? RQ_TAG_SET_BLOCKING : 0);
	sc.driver_data = dev;
	ret = rq_tag_set_alloc(&sc, &dev->set);
	if (ret)
		goto fail;

	qc.limits = &dev->cfg.limits;
	qc.capacity = dev->cfg.size_bytes >> RQ_SECTOR_SHIFT;
	qc.scheduler = dev->cfg.sched;
	qc.queuedata = dev;
	ret = rq_mq_alloc_queue(dev->set, &qc, &dev->q);
	if (ret)
		goto fail;

	*out = dev;
	return 0;
fail:
	null_destroy(dev);
	return ret;
}

/**
 * null_queue() - the device's queue.
 * @dev: the device.
 */
struct rq_queue *null_queue(struct null_dev *dev)
{
	return dev->q;
}

/**
 * null_map() - see null_blk.h.
 * @dev: the device.
 * @pos: byte offset.
 * @len: bytes to look at.
 * @run: receives the length of the run at @pos.
 * Return: 1 (data), 0 (never written or freed), -EINVAL.
 */
int null_map(struct null_dev *dev, uint64_t pos, uint64_t len, uint64_t *run)
{
	struct null_store *st = &dev->store;
	uint64_t pgno = pos >> NULL_PAGE_SHIFT, end, last;
	int state = -1;

	if (!dev->cfg.memory_backed || !len || pgno >= st->nr_pages)
		return -EINVAL;
	last = (pos + len - 1) >> NULL_PAGE_SHIFT;
	if (last >= st->nr_pages)
		last = st->nr_pages - 1;
	pthread_rwlock_rdlock(&st->lock);
	for (; pgno <= last; pgno++) {
		int here;

		if (!atomic_load_explicit(&st->chunks[pgno >> NULL_CHUNK_SHIFT],
					  memory_order_acquire)) {
			/* a whole missing chunk: skip to its end */
			if (state == 1)
				break;
			state = 0;
			pgno |= NULL_CHUNK_PAGES - 1;
			continue;
		}
		here = null_store_lookup(st, pgno) != NULL;
		if (state >= 0 && here != state)
			break;
		state = here;
	}
	pthread_rwlock_unlock(&st->lock);
	end = pgno << NULL_PAGE_SHIFT;
	*run = end - pos < len ? end - pos : len;
	return state;
}

/**
 * null_get_stats() - sum the per-hw-queue counters.
 * @dev: the device.
 * @st: receives the sums.
 */
void null_get_stats(struct null_dev *dev, struct null_stats *st)
{
	unsigned i;

	memset(st, 0, sizeof(*st));
	for (i = 0; i < dev->cfg.nr_hw_queues; i++) {
		const struct null_hq *hq = &dev->hqs[i];

		for (unsigned op = 0; op < NULL_NR_OPS; op++)
			st->requests += null_read(&hq->qc.ops[op]);
		st->bytes += null_read(&hq->qc.op_bytes[RQ_OP_READ]) +
			     null_read(&hq->qc.op_bytes[RQ_OP_WRITE]);
		st->reads += null_read(&hq->qc.ops[RQ_OP_READ]);
		st->writes += null_read(&hq->qc.ops[RQ_OP_WRITE]);
		st->flushes += null_read(&hq->qc.ops[RQ_OP_FLUSH]);
		st->discards += null_read(&hq->qc.ops[RQ_OP_DISCARD]);
		st->write_zeroes += null_read(&hq->qc.ops[RQ_OP_WRITE_ZEROES]);
		st->completed += null_read(&hq->completed);
		st->segments += null_read(&hq->segments);
		st->busy += null_read(&hq->busy);
		st->batches += null_read(&hq->batches);
		st->sleeps += null_read(&hq->sleeps);
		st->colocated += null_read(&hq->colocated);
		st->moves += null_read(&hq->moves);
	}
	if (dev->cfg.memory_backed)
		st->pages = atomic_load_explicit(&dev->store.allocated,
						 memory_order_relaxed);
}

/**
 * null_destroy() - tear a device down.  See null_blk.h.
 * @dev: the device, or NULL.
 */
void null_destroy(struct null_dev *dev)
{
	if (!dev)
		return;
	/* waits for requests with the driver: the threads still run */
	if (dev->q)
		rq_queue_destroy(dev->q);
	if (dev->hqs)
		null_stop_threads(dev);
	if (dev->set)
		rq_tag_set_free(dev->set);
	if (dev->cfg.memory_backed)
		null_store_exit(&dev->store);
	free(dev->hqs);
	free(dev);
}
