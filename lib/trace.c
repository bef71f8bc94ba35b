/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The event points (internal/trace.h): blktrace-format traces, and the
 * diskstats and latency histograms counted while "iostats" is on.
 *
 * A trace.  Each thread that makes an event gets a ring buffer of its own
 * for the trace (made at its first event, found again through a small
 * per-thread cache keyed by the trace's id, which is never reused), and
 * only it writes there: no lock, no atomic read-modify-write, no heap
 * allocation per event.  A writer thread drains the rings every
 * millisecond, or as soon as one is half full, into one file per CPU
 * (NAME.blktrace.CPU, the CPU the event happened on), merging the rings
 * by time so each file is in time order and a thread's events keep their
 * order.  A thread whose ring is full drops the event and counts it; the
 * counts are reported (rq_queue_trace_get_info(), the trace_dropped
 * attribute, and a message record at the end of the trace).
 *
 * The writer must never write an event before one with an earlier time
 * that a thread is still committing.  A thread marks its ring busy before
 * it reads the clock and clears the mark after committing; the writer
 * reads the clock (T), then the marks: a thread not marked then reads its
 * clock after T, and a marked one commits an event later than its last
 * committed one.  So every event up to T, capped by the last committed
 * time of the marked rings, is final.  A thread's times are made strictly
 * increasing (+1 ns on a tie), so its order survives blkparse's sort.
 *
 * What may run at the same time:
 *   event points (obs_*)         everything; a thread touches only its ring
 *   the writer                   event points (reads rings up to their head)
 *   trace start / stop           event points (stop: RCU grace period before
 *                                the rings go); q->sysfs_lock orders them
 *   diskstats / histogram reads  everything (lib/stats.c)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>
#include <sched.h>

#include "internal/alloc.h"
#include "internal/queue.h"
#include "internal/trace.h"

/* ------------------------------------------------- the blktrace format */

/*
 * One record as blktrace version 7 writes it (native byte order), from the
 * layout documented in the kernel's include/uapi/linux/blktrace_api.h;
 * @pdu_len bytes of payload follow it.
 */
struct bt_record {
	uint32_t magic;        /* BT_MAGIC | BT_VERSION */
	uint32_t sequence;     /* per CPU, from 1 */
	uint64_t time;         /* ns since the trace started */
	uint64_t sector;
	uint32_t bytes;
	uint32_t action;       /* category bits << 16 | action */
	uint32_t pid;
	uint32_t device;       /* major << 20 | minor */
	uint32_t cpu;
	uint16_t error;        /* -errno, as a u16 */
	uint16_t pdu_len;
};
_Static_assert(sizeof(struct bt_record) == 48, "blk_io_trace is 48 bytes");

#define BT_MAGIC 0x65617400u
#define BT_VERSION 0x07u

/* categories (BLK_TC_*), shifted into the action word's top half */
#define TC_READ (1u << 0)
#define TC_WRITE (1u << 1)
#define TC_FLUSH (1u << 2)
#define TC_SYNC (1u << 3)
#define TC_QUEUE (1u << 4)
#define TC_REQUEUE (1u << 5)
#define TC_ISSUE (1u << 6)
#define TC_COMPLETE (1u << 7)
#define TC_FS (1u << 8)
#define TC_NOTIFY (1u << 10)
#define TC_AHEAD (1u << 11)
#define TC_META (1u << 12)
#define TC_DISCARD (1u << 13)
#define TC_FUA (1u << 15)
#define TC_ACT(c) ((uint32_t)(c) << 16)

#define TN_PROCESS 0u   /* notes: the pdu is a thread's name */
#define TN_MESSAGE 2u   /* the pdu is text */
#define COMM_LEN 16

/* The category an action belongs to, as blktrace files it. */
static uint32_t act_category(unsigned act)
{
	switch (act) {
	case TA_REQUEUE:
		return TC_ACT(TC_REQUEUE);
	case TA_ISSUE:
		return TC_ACT(TC_ISSUE);
	case TA_COMPLETE:
		return TC_ACT(TC_COMPLETE);
	case TA_SPLIT:
		return 0;
	default:
		return TC_ACT(TC_QUEUE);
	}
}

/* Categories of each op: blktrace's direction is op_is_write() (a flush is neither). */
static const uint32_t op_category[RQ_OP_LAST] = {
	[RQ_OP_READ] = TC_ACT(TC_READ),
	[RQ_OP_WRITE] = TC_ACT(TC_WRITE),
	[RQ_OP_FLUSH] = TC_ACT(TC_READ | TC_FLUSH),
	[RQ_OP_DISCARD] = TC_ACT(TC_WRITE | TC_DISCARD),
	[RQ_OP_WRITE_ZEROES] = TC_ACT(TC_WRITE),
};

/* The direction and flag categories of an op with @opf, as blktrace sets them. */
static uint32_t rw_category(unsigned op, uint32_t opf)
{
	uint32_t c = op < RQ_OP_LAST ? op_category[op] : TC_ACT(TC_READ);

	if (unlikely(opf & (RQ_BIO_SYNC | RQ_BIO_META | RQ_BIO_FUA | RQ_BIO_PREFLUSH |
			    RQ_BIO_RAHEAD))) {
		c |= (opf & RQ_BIO_SYNC) ? TC_ACT(TC_SYNC) : 0;
		c |= (opf & RQ_BIO_META) ? TC_ACT(TC_META) : 0;
		c |= (opf & RQ_BIO_FUA) ? TC_ACT(TC_FUA) : 0;
		c |= (opf & RQ_BIO_PREFLUSH) ? TC_ACT(TC_FLUSH) : 0;
		c |= (opf & RQ_BIO_RAHEAD) ? TC_ACT(TC_AHEAD) : 0;
	}
	return c;
}

/* ------------------------------------------------------ rings, a trace */

enum { PDU_NONE, PDU_BE64, PDU_COMM, PDU_TEXT };

/* An event as a thread leaves it in its ring (the writer encodes it). */
struct trace_ev {
	uint64_t time;          /* the library's clock */
	uint64_t sector;
	uint64_t pdu;           /* PDU_BE64: the value */
	uint32_t bytes;
	uint32_t action;
	uint32_t pid;
	uint16_t cpu;
	uint16_t error;
	uint8_t pdu_kind;
};

#define RING_EVENTS 16384u      /* per thread and trace: 768 KiB */
#define RING_WAIT_YIELDS 64     /* a full ring waits this long for the writer */

/*
 * A thread that made events for some trace (never freed: one small record
 * per thread, reused once its thread has exited).  @active is set while
 * the thread is inside an event point of a traced queue: a trace stops
 * only once no thread is (no RCU read lock per event), and the writer
 * holds back what such a thread might still precede.
 */
struct obs_thread {
	_Atomic unsigned active;
	_Atomic uint32_t tid;        /* 0: free (its thread exited) */
	char comm[COMM_LEN];
	struct obs_thread *next;     /* the registry, prepend only */
};

struct trace_ring {
	_Atomic uint64_t head;       /* owner: events committed */
	_Atomic uint64_t tail;       /* writer: events taken */
	_Atomic uint64_t last_time;  /* owner: time of the last commit */
	_Atomic uint64_t dropped;    /* owner: events that found the ring full */
	struct obs_thread *_Atomic owner;
	struct trace_ring *next;     /* the trace's list (prepend, under lock) */
	uint32_t tid;
	char comm[COMM_LEN];
	struct trace_ev ev[RING_EVENTS];
};

struct rq_trace {
	uint64_t id;                 /* never reused: the threads' cache key */
	uint64_t start_ns;
	uint64_t last_time;          /* writer: the last record's time */
	uint32_t dev;
	unsigned nr_cpus;
	struct trace_out *out;       /* per CPU */
	uint32_t *seq;               /* per CPU: last sequence written */
	pthread_mutex_t lock;        /* ring list additions */
	struct trace_ring *_Atomic rings;
	_Atomic unsigned nr_rings;
	_Atomic uint64_t lost;       /* events with no ring (no memory) */
	_Atomic uint64_t written;    /* records written, as of the last drain */
	uint64_t nr_written;         /* writer: records written */
	bool io_error;
	/* the writer */
	pthread_t writer;
	sem_t wake;
	_Atomic bool stop;
	struct trace_ring **cur;     /* drain scratch: rings, their positions */
	uint64_t *pos, *end;
	unsigned cur_cap;
};

static _Atomic uint64_t next_trace_id = 1;

_Atomic unsigned obs_active;

void obs_flags_change(struct rq_queue *q, unsigned bits, bool on)
{
	unsigned old = atomic_load(&q->obs_flags);
	unsigned now = on ? old | bits : old & ~bits;

	if (!old && now)
		atomic_fetch_add(&obs_active, 1);
	atomic_store(&q->obs_flags, now);
	if (old && !now)
		atomic_fetch_sub(&obs_active, 1);
}

/* ------------------------------------------------------ threads, rings */

static struct obs_thread *_Atomic obs_threads;
static pthread_mutex_t obs_threads_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t obs_thread_key;
static pthread_once_t obs_thread_once = PTHREAD_ONCE_INIT;
static __thread struct obs_thread *tls_obs_thread __attribute__((tls_model("initial-exec")));

#define RING_CACHE 4
static __thread struct {
	uint64_t id;
	struct trace_ring *ring;
} tls_ring[RING_CACHE] __attribute__((tls_model("initial-exec")));

/* The thread exits: its record may go to another thread. */
static void obs_thread_exit(void *arg)
{
	struct obs_thread *th = arg;

	atomic_store(&th->tid, 0);
}

static void obs_thread_key_init(void)
{
	pthread_key_create(&obs_thread_key, obs_thread_exit);
}

/* The calling thread's record, made (or a free one taken) on first use. */
static struct obs_thread *obs_thread_self(void)
{
	struct obs_thread *th;
	uint32_t tid = (uint32_t)gettid();

	pthread_once(&obs_thread_once, obs_thread_key_init);
	pthread_mutex_lock(&obs_threads_lock);
	for (th = atomic_load(&obs_threads); th; th = th->next)
		if (!atomic_load(&th->tid))
			break;
	if (!th) {
		th = mem_zalloc(sizeof(*th));
		if (th) {
			th->next = atomic_load(&obs_threads);
			atomic_store(&obs_threads, th);
		}
	}
	if (th) {
		atomic_store(&th->tid, tid);
		if (prctl(PR_GET_NAME, th->comm) != 0)
			snprintf(th->comm, sizeof(th->comm), "tid%u", tid);
	}
	pthread_mutex_unlock(&obs_threads_lock);
	if (th) {
		pthread_setspecific(obs_thread_key, th);
		tls_obs_thread = th;
	}
	return th;
}

/*
 * A full fence.  GCC refuses atomic_thread_fence() under ThreadSanitizer,
 * which does not model fences; a TSan build orders through a seq_cst
 * read-modify-write of one word instead, which it does model.
 */
static inline void obs_fence(void)
{
#if defined(__SANITIZE_THREAD__)
	static _Atomic unsigned fence_word;

	atomic_fetch_add_explicit(&fence_word, 0, memory_order_seq_cst);
#else
	atomic_thread_fence(memory_order_seq_cst);
#endif
}

/* Wait until no thread is inside an event point (its trace is unpublished). */
static void obs_threads_quiesce(void)
{
	obs_fence();
	for (struct obs_thread *th = atomic_load(&obs_threads); th; th = th->next)
		while (atomic_load_explicit(&th->active, memory_order_seq_cst))
			sched_yield();
}

/*
 * Commit one event to the calling thread's @r (its only writer).  A full
 * ring waits a little for the writer (it is behind), then drops the event
 * and counts it.
 */
static void ring_push(struct rq_trace *t, struct trace_ring *r, const struct trace_ev *src)
{
	uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint64_t tl = atomic_load_explicit(&r->tail, memory_order_acquire);
	uint64_t last = atomic_load_explicit(&r->last_time, memory_order_relaxed);
	uint64_t now = rq_clock_ns();
	struct trace_ev *ev;

	if (now <= last)
		now = last + 1;
	for (unsigned i = 0; h - tl >= RING_EVENTS && i < RING_WAIT_YIELDS; i++) {
		sem_post(&t->wake);
		sched_yield();
		tl = atomic_load_explicit(&r->tail, memory_order_acquire);
	}
	if (h - tl >= RING_EVENTS) {
		atomic_store_explicit(&r->dropped,
				      atomic_load_explicit(&r->dropped, memory_order_relaxed) + 1,
				      memory_order_relaxed);
		return;
	}
	ev = &r->ev[h % RING_EVENTS];
	*ev = *src;
	ev->time = now;
	atomic_store_explicit(&r->last_time, now, memory_order_relaxed);
	atomic_store_explicit(&r->head, h + 1, memory_order_release);
	if (h + 1 - tl == RING_EVENTS / 2)
		sem_post(&t->wake);
}

/*
 * The ring of thread @tid in @t, if it has one (its cache slot went to
 * another trace); a dead thread's ring may go to a new thread with its id.
 */
static struct trace_ring *ring_find(struct rq_trace *t, uint32_t tid)
{
	struct trace_ring *r;

	pthread_mutex_lock(&t->lock);
	for (r = atomic_load_explicit(&t->rings, memory_order_relaxed); r; r = r->next)
		if (r->tid == tid)
			break;
	pthread_mutex_unlock(&t->lock);
	return r;
}

/* The ring of @th in @t, made (with its name note) on first use. */
static struct trace_ring *ring_self(struct rq_trace *t, struct obs_thread *th)
{
	unsigned slot = (unsigned)(t->id % RING_CACHE);
	struct trace_ring *r;
	struct trace_ev note = { .action = TN_PROCESS | TC_ACT(TC_NOTIFY),
				 .pdu_kind = PDU_COMM };

	if (likely(tls_ring[slot].id == t->id))
		return tls_ring[slot].ring;
	r = ring_find(t, atomic_load(&th->tid));
	if (r)
		goto cache;
	r = mem_zalloc(sizeof(*r));
	if (!r)
		return NULL;
	r->tid = atomic_load(&th->tid);
	memcpy(r->comm, th->comm, sizeof(r->comm));
	note.pid = r->tid;
	note.cpu = (uint16_t)cur_cpu();
	ring_push(t, r, &note);
	pthread_mutex_lock(&t->lock);
	r->next = atomic_load_explicit(&t->rings, memory_order_relaxed);
	atomic_store_explicit(&t->rings, r, memory_order_release);
	atomic_fetch_add(&t->nr_rings, 1);
	pthread_mutex_unlock(&t->lock);
cache:
	atomic_store(&r->owner, th);
	tls_ring[slot].id = t->id;
	tls_ring[slot].ring = r;
	return r;
}

/*
 * Record one event of @q if a trace runs.  The thread is marked active
 * before it looks for the trace (a stopper that unpublished it waits for
 * the mark to go) and before it reads the clock (the writer's ordering).
 */
static void trace_emit(struct rq_queue *q, struct trace_ev *ev)
{
	struct obs_thread *th = tls_obs_thread;
	struct rq_trace *t;
	struct trace_ring *r;

	if (unlikely(!th) && !(th = obs_thread_self()))
		return;
	atomic_store_explicit(&th->active, 1, memory_order_seq_cst);
	t = atomic_load_explicit(&q->obs->trace, memory_order_seq_cst);
	if (t) {
		r = ring_self(t, th);
		ev->pid = r ? r->tid : 0;
		ev->cpu = (uint16_t)cur_cpu();
		if (r)
			ring_push(t, r, ev);
		else
			atomic_fetch_add(&t->lost, 1);
	}
	atomic_store_explicit(&th->active, 0, memory_order_release);
}

/* ------------------------------------------------------------ the writer */

/* A CPU's file and its buffer (the writer's alone). */
struct trace_out {
	int fd;
	size_t len;
	unsigned char buf[1u << 16];
};

/* Write out what @o holds; false on a write error. */
static bool out_flush(struct trace_out *o)
{
	size_t off = 0;

	while (off < o->len) {
		ssize_t n = write(o->fd, o->buf + off, o->len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		off += (size_t)n;
	}
	o->len = 0;
	return true;
}

/* Append @len bytes (at most the buffer) to @o. */
static bool out_put(struct trace_out *o, const void *p, size_t len)
{
	bool ok = true;

	if (o->len + len > sizeof(o->buf))
		ok = out_flush(o);
	memcpy(o->buf + o->len, p, len);
	o->len += len;
	return ok;
}

/* A payload's bytes: a big-endian u64, a thread's name, or a text. */
static size_t event_pdu(const struct trace_ev *ev, const char *comm, unsigned char *pdu,
			size_t room)
{
	size_t len;

	if (ev->pdu_kind == PDU_BE64) {
		for (unsigned i = 0; i < 8; i++)
			pdu[i] = (unsigned char)(ev->pdu >> (56 - 8 * i));
		return 8;
	}
	len = ev->pdu_kind == PDU_COMM ? COMM_LEN : strlen(comm) + 1;
	if (len > room)
		len = room;
	memset(pdu, 0, len);
	memcpy(pdu, comm, strnlen(comm, len - 1));
	return len;
}

/* The record of @ev, @pdu_len bytes of payload to follow. */
static void event_record(struct rq_trace *t, const struct trace_ev *ev, unsigned cpu,
			 size_t pdu_len, struct bt_record *rec)
{
	uint64_t time = ev->time > t->start_ns ? ev->time - t->start_ns : 0;

	if (time < t->last_time)
		time = t->last_time; /* a late note never goes back in time */
	t->last_time = time;
	rec->magic = BT_MAGIC | BT_VERSION;
	rec->sequence = ++t->seq[cpu];
	rec->time = time;
	rec->sector = ev->sector;
	rec->bytes = ev->bytes;
	rec->action = ev->action;
	rec->pid = ev->pid;
	rec->device = t->dev;
	rec->cpu = cpu;
	rec->error = ev->error;
	rec->pdu_len = (uint16_t)pdu_len;
}

/* An event with a payload (notes, split, unplug): through a copy. */
static void write_event_pdu(struct rq_trace *t, const struct trace_ev *ev, unsigned cpu,
			    const char *comm)
{
	struct trace_out *o = &t->out[cpu];
	unsigned char pdu[64];
	size_t len = event_pdu(ev, comm, pdu, sizeof(pdu));
	struct bt_record rec;

	event_record(t, ev, cpu, len, &rec);
	if (!out_put(o, &rec, sizeof(rec)) || !out_put(o, pdu, len))
		t->io_error = true;
}

/* Encode @ev and append it to its CPU's buffer. */
static void write_event(struct rq_trace *t, const struct trace_ev *ev, const char *comm)
{
	unsigned cpu = ev->cpu < t->nr_cpus ? ev->cpu : t->nr_cpus - 1;
	struct trace_out *o = &t->out[cpu];

	t->nr_written++;
	if (unlikely(ev->pdu_kind != PDU_NONE)) {
		write_event_pdu(t, ev, cpu, comm);
		return;
	}
	if (unlikely(o->len + sizeof(struct bt_record) > sizeof(o->buf)) && !out_flush(o))
		t->io_error = true;
	if (o->len + sizeof(struct bt_record) <= sizeof(o->buf)) {
		struct bt_record rec;

		event_record(t, ev, cpu, 0, &rec);
		memcpy(o->buf + o->len, &rec, sizeof(rec));
		o->len += sizeof(rec);
	}
}

/* Room for @n rings in the drain scratch; false without memory. */
static bool drain_room(struct rq_trace *t, unsigned n)
{
	unsigned cap = t->cur_cap ? t->cur_cap : 16;

	if (n <= t->cur_cap)
		return true;
	while (cap < n)
		cap *= 2;
	mem_free(t->cur, sizeof(*t->cur) * t->cur_cap);
	mem_free(t->pos, sizeof(*t->pos) * t->cur_cap);
	mem_free(t->end, sizeof(*t->end) * t->cur_cap);
	t->cur = mem_calloc(cap, sizeof(*t->cur));
	t->pos = mem_calloc(cap, sizeof(*t->pos));
	t->end = mem_calloc(cap, sizeof(*t->end));
	t->cur_cap = (t->cur && t->pos && t->end) ? cap : 0;
	return t->cur_cap != 0;
}

/*
 * Write every final event (all with @final: no thread writes any more),
 * merged by time across the rings.  Context: the writer, or the stopper
 * once the writer is gone.
 */
static void trace_drain(struct rq_trace *t, bool final)
{
	uint64_t limit = final ? UINT64_MAX : rq_clock_ns();
	unsigned n = 0;

	obs_fence();
	if (!drain_room(t, atomic_load(&t->nr_rings)))
		return;
	for (struct trace_ring *r = atomic_load_explicit(&t->rings, memory_order_acquire);
	     r && n < t->cur_cap; r = r->next) {
		struct obs_thread *th = atomic_load_explicit(&r->owner, memory_order_relaxed);

		if (!final && th && atomic_load_explicit(&th->active, memory_order_seq_cst)) {
			uint64_t last = atomic_load_explicit(&r->last_time, memory_order_relaxed);

			if (last < limit)
				limit = last;
		}
		t->cur[n++] = r;
	}
	for (unsigned i = 0; i < n; i++) {
		t->pos[i] = atomic_load_explicit(&t->cur[i]->tail, memory_order_relaxed);
		t->end[i] = atomic_load_explicit(&t->cur[i]->head, memory_order_acquire);
	}
	for (;;) {
		const struct trace_ev *best = NULL;
		uint64_t next = limit; /* the earliest head among the other rings */
		unsigned bi = 0;

		for (unsigned i = 0; i < n; i++) {
			const struct trace_ev *ev = &t->cur[i]->ev[t->pos[i] % RING_EVENTS];

			if (t->pos[i] == t->end[i] || ev->time > limit)
				continue;
			if (!best || ev->time < best->time) {
				if (best && best->time < next)
					next = best->time;
				best = ev;
				bi = i;
			} else if (ev->time < next) {
				next = ev->time;
			}
		}
		if (!best)
			break;
		/* a run of the best ring up to where another ring comes first */
		do {
			write_event(t, best, t->cur[bi]->comm);
			t->pos[bi]++;
			best = &t->cur[bi]->ev[t->pos[bi] % RING_EVENTS];
		} while (t->pos[bi] != t->end[bi] && best->time <= next);
	}
	for (unsigned i = 0; i < n; i++)
		atomic_store_explicit(&t->cur[i]->tail, t->pos[i], memory_order_release);
	for (unsigned c = 0; c < t->nr_cpus; c++)
		if (!out_flush(&t->out[c]))
			t->io_error = true;
	atomic_store_explicit(&t->written, t->nr_written, memory_order_relaxed);
}

static void *trace_writer(void *arg)
{
	struct rq_trace *t = arg;

	prctl(PR_SET_NAME, "rq-trace");
	while (!atomic_load(&t->stop)) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		sem_timedwait(&t->wake, &ts);
		trace_drain(t, false);
	}
	return NULL;
}

/* ------------------------------------------------------- start and stop */

static void trace_free(struct rq_trace *t)
{
	struct trace_ring *r = atomic_load(&t->rings);

	while (r) {
		struct trace_ring *next = r->next;

		mem_free(r, sizeof(*r));
		r = next;
	}
	for (unsigned c = 0; t->out && c < t->nr_cpus; c++)
		if (t->out[c].fd >= 0)
			close(t->out[c].fd);
	mem_free(t->out, sizeof(*t->out) * t->nr_cpus);
	mem_free(t->seq, sizeof(*t->seq) * t->nr_cpus);
	mem_free(t->cur, sizeof(*t->cur) * t->cur_cap);
	mem_free(t->pos, sizeof(*t->pos) * t->cur_cap);
	mem_free(t->end, sizeof(*t->end) * t->cur_cap);
	pthread_mutex_destroy(&t->lock);
	sem_destroy(&t->wake);
	mem_free(t, sizeof(*t));
}

/* Make the per-CPU files DIR/NAME.blktrace.CPU. */
static int trace_open_files(struct rq_trace *t, const char *dir, const char *name)
{
	char path[PATH_MAX];

	for (unsigned c = 0; c < t->nr_cpus; c++) {
		int n = snprintf(path, sizeof(path), "%s/%s.blktrace.%u", dir, name, c);

		if (n < 0 || (size_t)n >= sizeof(path))
			return -ENAMETOOLONG;
		t->out[c].fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (t->out[c].fd < 0)
			return -errno;
	}
	return 0;
}

static struct rq_trace *trace_alloc(struct rq_queue *q)
{
	struct rq_trace *t = mem_zalloc(sizeof(*t));
	int ncpu = get_nprocs_conf();

	if (!t)
		return NULL;
	t->nr_cpus = ncpu > 0 ? (unsigned)ncpu : 1;
	if (t->nr_cpus < q->nr_cpus)
		t->nr_cpus = q->nr_cpus;
	pthread_mutex_init(&t->lock, NULL);
	sem_init(&t->wake, 0, 0);
	t->out = mem_calloc(t->nr_cpus, sizeof(*t->out));
	t->seq = mem_calloc(t->nr_cpus, sizeof(*t->seq));
	if (!t->out || !t->seq) {
		trace_free(t);
		return NULL;
	}
	for (unsigned c = 0; c < t->nr_cpus; c++)
		t->out[c].fd = -1;
	t->id = atomic_fetch_add(&next_trace_id, 1);
	t->dev = rq_queue_trace_dev(q);
	return t;
}

/* Start a trace of @q.  Context: q->sysfs_lock held. */
int trace_start_locked(struct rq_queue *q, const char *dir, const char *name)
{
	struct rq_trace *t;
	struct stat st;
	int ret;

	if (!q->obs)
		return -ENOMEM;
	if (!dir || !name || !*name || strchr(name, '/'))
		return -EINVAL;
	if (atomic_load(&q->obs->trace))
		return -EBUSY;
	if (stat(dir, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	t = trace_alloc(q);
	if (!t)
		return -ENOMEM;
	ret = trace_open_files(t, dir, name);
	if (!ret) {
		t->start_ns = rq_clock_ns();
		ret = -pthread_create(&t->writer, NULL, trace_writer, t);
	}
	if (ret) {
		trace_free(t);
		return ret;
	}
	snprintf(q->obs->trace_path, sizeof(q->obs->trace_path), "%s/%s", dir, name);
	atomic_store_explicit(&q->obs->trace, t, memory_order_release);
	obs_flags_change(q, OBS_TRACE, true);
	return 0;
}

static void trace_fill_info(struct rq_trace *t, struct rq_trace_info *info)
{
	memset(info, 0, sizeof(*info));
	info->size = sizeof(*info);
	info->dev = t->dev;
	info->events = atomic_load(&t->written);
	info->dropped = atomic_load(&t->lost);
	info->nr_cpus = t->nr_cpus;
	info->nr_threads = atomic_load(&t->nr_rings);
	for (struct trace_ring *r = atomic_load_explicit(&t->rings, memory_order_acquire); r;
	     r = r->next)
		info->dropped += atomic_load_explicit(&r->dropped, memory_order_relaxed);
}

/* Stop @q's trace, if any.  Context: q->sysfs_lock held, or teardown. */
int trace_stop_locked(struct rq_queue *q, struct rq_trace_info *info)
{
	struct rq_trace *t = q->obs ? atomic_load(&q->obs->trace) : NULL;
	struct rq_trace_info own;
	int ret;

	if (!t)
		return -ENOENT;
	obs_flags_change(q, OBS_TRACE, false);
	atomic_store_explicit(&q->obs->trace, NULL, memory_order_release);
	obs_threads_quiesce(); /* no thread is inside trace_emit() any more */
	atomic_store(&t->stop, true);
	sem_post(&t->wake);
	pthread_join(t->writer, NULL);
	trace_drain(t, true);
	trace_fill_info(t, &own);
	if (own.dropped) {
		char text[64];
		struct trace_ev ev = { .action = TN_MESSAGE | TC_ACT(TC_NOTIFY),
				       .pdu_kind = PDU_TEXT, .time = rq_clock_ns() };

		snprintf(text, sizeof(text), "librequest: %llu events dropped",
			 (unsigned long long)own.dropped);
		write_event(t, &ev, text);
		own.events++;
	}
	for (unsigned c = 0; c < t->nr_cpus; c++)
		if (!out_flush(&t->out[c]))
			t->io_error = true;
	ret = t->io_error ? -EIO : 0;
	if (info)
		*info = own;
	q->obs->trace_path[0] = '\0';
	trace_free(t);
	return ret;
}

/* The running trace's totals.  Context: q->sysfs_lock held.  -ENOENT: none. */
int trace_info_locked(struct rq_queue *q, struct rq_trace_info *info)
{
	struct rq_trace *t = q->obs ? atomic_load(&q->obs->trace) : NULL;

	if (!t)
		return -ENOENT;
	trace_fill_info(t, info);
	return 0;
}

/* What the "trace" attribute shows: "DIR/NAME" of the running trace, or "0". */
const char *trace_path(struct rq_queue *q)
{
	return q->obs && atomic_load(&q->obs->trace) ? q->obs->trace_path : "0";
}

RQ_EXPORT int rq_queue_trace_start(struct rq_queue *q, const char *dir, const char *name)
{
	int ret;

	if (!q)
		return -EINVAL;
	pthread_mutex_lock(&q->sysfs_lock);
	ret = trace_start_locked(q, dir, name);
	pthread_mutex_unlock(&q->sysfs_lock);
	return ret;
}

RQ_EXPORT int rq_queue_trace_stop(struct rq_queue *q, struct rq_trace_info *info, size_t size)
{
	struct rq_trace_info own;
	int ret;

	if (!q)
		return -EINVAL;
	pthread_mutex_lock(&q->sysfs_lock);
	ret = trace_stop_locked(q, &own);
	pthread_mutex_unlock(&q->sysfs_lock);
	if (ret != -ENOENT && info)
		rq_copy_sized_out(info, size, &own, sizeof(own));
	return ret;
}

RQ_EXPORT int rq_queue_trace_get_info(struct rq_queue *q, struct rq_trace_info *info,
				      size_t size)
{
	struct rq_trace_info own;
	int ret;

	if (!q || !info || size < sizeof(uint32_t))
		return -EINVAL;
	pthread_mutex_lock(&q->sysfs_lock);
	ret = trace_info_locked(q, &own);
	pthread_mutex_unlock(&q->sysfs_lock);
	if (!ret)
		rq_copy_sized_out(info, size, &own, sizeof(own));
	return ret;
}

RQ_EXPORT uint32_t rq_queue_trace_dev(const struct rq_queue *q)
{
	return RQ_TRACE_DEV_MAJOR << RQ_TRACE_MINOR_BITS |
	       (uint32_t)(q->id & ((1u << RQ_TRACE_MINOR_BITS) - 1));
}

/* ----------------------------------------------------- iostats counting */

/* The calling thread's counter block for @q (NULL without memory). */
static struct rq_stats_block *obs_block(struct rq_queue *q)
{
	struct stats_cache_slot *slot = &tls_stats_cache[q->id % STATS_CACHE_SLOTS];

	return slot->qid == q->id ? slot->block : stats_block_slow(q);
}

/* diskstats' op group of @op: read, write (and write zeroes), discard, flush. */
static unsigned op_group(unsigned op)
{
	switch (op) {
	case RQ_OP_READ:
		return RQ_LAT_READ;
	case RQ_OP_DISCARD:
		return RQ_LAT_DISCARD;
	case RQ_OP_FLUSH:
		return RQ_LAT_FLUSH;
	default:
		return RQ_LAT_WRITE;
	}
}

static unsigned data_dir(unsigned op)
{
	return op == RQ_OP_READ ? 0 : 1;
}

static unsigned lat_bucket(uint64_t ns)
{
	unsigned b = ns ? 64u - (unsigned)__builtin_clzll(ns) : 0;

	return b < RQ_LAT_BUCKETS ? b : RQ_LAT_BUCKETS - 1;
}

/* One more in the calling thread's own bucket (readers load it relaxed). */
static void hist_inc(uint64_t *c)
{
	__atomic_store_n(c, *c + 1, __ATOMIC_RELAXED);
}

/* Requests with the driver now (started minus left, over every thread). */
static uint64_t inflight_now(struct rq_queue *q)
{
	uint64_t sum[ST_NR] = { 0 };

	stats_sum(q, sum);
	return sum[ST_DS_STARTED] + sum[ST_DS_STARTED + 1] - sum[ST_DS_LEFT] -
	       sum[ST_DS_LEFT + 1];
}

/*
 * io_ticks, as the kernel's update_io_ticks() (in milliseconds rather than
 * jiffies): at a request's start and end, the first thread to see a new
 * millisecond adds the time since the last stamp if the request ends or
 * any request is in flight.
 */
static void io_ticks_update(struct rq_queue *q, uint64_t now, bool end)
{
	uint64_t now_ms = now / 1000000u;
	uint64_t stamp = atomic_load_explicit(&q->obs->stamp_ms, memory_order_relaxed);

	if (now_ms > stamp &&
	    atomic_compare_exchange_strong(&q->obs->stamp_ms, &stamp, now_ms) &&
	    (end || inflight_now(q)))
		stat_add(q, ST_DS_IO_TICKS, now_ms - stamp);
}

/* @rq is no longer with the driver: out of in_flight. */
static void iostat_left(struct rq_request *rq)
{
	rq_priv(rq)->obs_started = 0;
	stat_inc(rq->q, ST_DS_LEFT + data_dir(rq->op));
}

/* A request ended (or its flush request did): ios, times, histograms. */
static void iostat_done(struct rq_request *rq, unsigned grp)
{
	struct rq_queue *q = rq->q;
	struct rq_stats_block *b = obs_block(q);
	uint64_t now = rq_clock_ns();
	uint64_t q2c = now > rq->start_time_ns ? now - rq->start_time_ns : 0;

	if (!b)
		return;
	stat_inc(q, ST_DS_IOS + grp);
	stat_add(q, ST_DS_NSECS + grp, q2c);
	hist_inc(&b->hist[0][grp][lat_bucket(q2c)]);
	if (rq->io_start_time_ns) {
		uint64_t d2c = now > rq->io_start_time_ns ? now - rq->io_start_time_ns : 0;

		hist_inc(&b->hist[1][grp][lat_bucket(d2c)]);
	}
	io_ticks_update(q, now, true);
}

/* ------------------------------------------------------- the points */

void obs_bio(struct rq_queue *q, const struct rq_bio *bio, unsigned act, uint64_t pdu)
{
	unsigned f = atomic_load_explicit(&q->obs_flags, memory_order_relaxed);

	if (f & OBS_TRACE) {
		struct trace_ev ev = {
			.sector = bio->iter.sector, .bytes = bio->iter.size,
			.action = act | act_category(act) | rw_category(bio->op, bio->opf),
			.pdu = pdu, .pdu_kind = act == TA_SPLIT ? PDU_BE64 : PDU_NONE,
		};

		trace_emit(q, &ev);
	}
	if ((f & OBS_IOSTAT) && (act == TA_BACKMERGE || act == TA_FRONTMERGE))
		stat_inc(q, ST_DS_MERGES + op_group(bio->op));
}

void obs_rq(struct rq_request *rq, unsigned act)
{
	struct rq_queue *q = rq->q;
	unsigned f = atomic_load_explicit(&q->obs_flags, memory_order_relaxed);

	if (f & OBS_TRACE) {
		struct trace_ev ev = {
			.sector = rq->sector, .bytes = rq->bytes,
			.action = act | act_category(act) | rw_category(rq->op, rq->opf) |
				  TC_ACT(TC_FS),
		};

		trace_emit(q, &ev);
	}
	if (!(f & OBS_IOSTAT))
		return;
	if (act == TA_ISSUE) {
		rq->io_start_time_ns = rq_clock_ns();
		/* every issue follows a G, an R or a completed step, which cleared it */
		rq_priv(rq)->obs_started = 1;
		stat_inc(q, ST_DS_STARTED + data_dir(rq->op));
	} else if (act == TA_REQUEUE) {
		if (rq_priv(rq)->obs_started)
			iostat_left(rq);
	} else if (act == TA_BACKMERGE) {
		stat_inc(q, ST_DS_MERGES + op_group(rq->op));
	}
}

void obs_getrq(struct rq_request *rq, const struct rq_bio *bio)
{
	struct rq_queue *q = rq->q;
	unsigned f = atomic_load_explicit(&q->obs_flags, memory_order_relaxed);

	rq->rq_flags |= RQ_RQF_IO_STAT; /* its later points test this bit */
	if (f & OBS_TRACE)
		obs_bio(q, bio, TA_GETRQ, 0);
	if (f & OBS_IOSTAT) {
		uint64_t now = rq_clock_ns();

		if (!rq->start_time_ns)
			rq->start_time_ns = now;
		rq_priv(rq)->obs_started = 0; /* not cleared at every allocation */
		io_ticks_update(q, now, false);
	}
}

/* An event of the queue, not of a bio or request: S, P. */
void obs_note(struct rq_queue *q, unsigned act, uint64_t depth)
{
	struct trace_ev ev = { .action = act | act_category(act), .pdu = depth,
			       .pdu_kind = act == TA_UNPLUG_IO ? PDU_BE64 : PDU_NONE };

	if (atomic_load_explicit(&q->obs_flags, memory_order_relaxed) & OBS_TRACE)
		trace_emit(q, &ev);
}

void obs_unplug(struct rq_queue *q, const struct rq_list_node *list)
{
	uint64_t depth = 0;

	for (const struct rq_list_node *n = list->next; n != list; n = n->next)
		depth++;
	obs_note(q, TA_UNPLUG_IO, depth);
}

void obs_complete(struct rq_request *rq, rq_status_t status, unsigned bytes, unsigned flags)
{
	struct rq_queue *q = rq->q;
	unsigned f = atomic_load_explicit(&q->obs_flags, memory_order_relaxed);
	unsigned grp = op_group(rq->op);

	if ((f & OBS_TRACE) && !(flags & OBS_C_QUIET)) {
		struct trace_ev ev = {
			.sector = rq->sector, .bytes = bytes,
			.action = TA_COMPLETE | act_category(TA_COMPLETE) |
				  rw_category(rq->op, rq->opf) | TC_ACT(TC_FS),
			.error = (uint16_t)rq_status_to_errno(status),
		};

		trace_emit(q, &ev);
	}
	if (!(f & OBS_IOSTAT))
		return;
	if (grp != RQ_LAT_FLUSH && bytes && !(flags & OBS_C_STEP))
		stat_add(q, ST_DS_SECTORS + grp, bytes >> RQ_SECTOR_SHIFT);
	if ((flags & (OBS_C_DONE | OBS_C_STEP)) && rq_priv(rq)->obs_started)
		iostat_left(rq);
	/* an RQ_OP_FLUSH bio's own request is not counted: its flush request is */
	if ((rq->rq_flags & RQ_RQF_FLUSH_INTERNAL) ||
	    ((flags & OBS_C_DONE) && grp != RQ_LAT_FLUSH))
		iostat_done(rq, grp);
}

void obs_complete_all(struct rq_request *rq, rq_status_t status, unsigned flags)
{
	obs_complete(rq, status, (flags & OBS_C_QUIET) ? 0 : rq->bytes, flags);
}

/* ------------------------------------------------------------- iostats */

/* Turn diskstats and histogram counting on or off.  Context: sysfs_lock. */
int iostat_set_locked(struct rq_queue *q, bool on)
{
	if (!q->obs)
		return -ENOMEM;
	if (on) {
		atomic_store(&q->obs->stamp_ms, rq_clock_ns() / 1000000u);
		obs_flags_change(q, OBS_IOSTAT, true);
	} else {
		obs_flags_change(q, OBS_IOSTAT, false);
	}
	return 0;
}

void obs_init(struct rq_queue *q)
{
	q->obs = mem_zalloc(sizeof(*q->obs));
	atomic_store(&q->obs_flags, 0);
}

void obs_free(struct rq_queue *q)
{
	if (!q->obs)
		return;
	trace_stop_locked(q, NULL);
	obs_flags_change(q, OBS_IOSTAT, false);
	mem_free(q->obs, sizeof(*q->obs));
	q->obs = NULL;
}
