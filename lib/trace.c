/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The event points (internal/trace.h): blktrace-format traces, and the
 * diskstats and latency histograms counted while "iostats" is on.
 *
 * A trace.  Each thread that makes an event gets a ring of its own for
 * the trace (made at its first event, found again through a small
 * per-thread cache keyed by the trace's id, which is never reused), and
 * only it writes there: no lock, no atomic read-modify-write, no heap
 * allocation per event.  The thread writes what the record needs into
 * its ring slot (sector, bytes, action, error, CPU, a raw stamp), so an
 * event costs a few stores, and a stamp where it begins a library call's
 * events (a step, see "Steps" below: the events of one call share one):
 * the stamp is the TSC (rdtsc, with the CPU from rseq's cpu_id, or rdtscp
 * which gives both) where the library's clock itself is the TSC, else
 * rq_clock_ns() and sched_getcpu().  A G and D that follow their Q in
 * a step fold into its slot.  A writer thread takes the rings every
 * millisecond, or as soon as one is half full, merges them by stamp, and
 * for each slot fills in what only it knows (the stamp scaled to
 * nanoseconds since the start, exactly as rq_clock_ns() scales it; the
 * CPU file's sequence number; magic, pid and device) and writes its
 * records to its CPU's file buffer (NAME.blktrace.CPU, the CPU the event
 * happened on).  Each file is in
 * time order and a thread's events keep their order.  A thread whose ring
 * is full drops the event and counts it; the counts are reported
 * (rq_queue_trace_get_info(), the trace_dropped attribute, and a message
 * record at the end of the trace).
 *
 * The writer must never write an event before one with an earlier stamp
 * that a thread is still committing.  A thread marks itself active before
 * it takes the stamp and clears the mark after committing; the writer
 * takes a stamp (T), then reads the marks: a thread not marked then takes
 * its stamp after T, and a marked one commits an event no earlier than
 * its last committed one.  So every event up to T, capped by the last
 * committed stamp of the marked rings, is final (a thread keeps its mark
 * through a step, whose events reuse its stamp).  The store-then-load on
 * both sides needs a full fence on both; the threads' half is
 * membarrier(2), run by the writer (see obs_fence_all()).  A thread's
 * times are made strictly increasing (+1 ns on a tie), so its order
 * survives blkparse's sort.
 *
 * What may run at the same time:
 *   event points (obs_*)         everything; a thread touches only its ring
 *   the writer                   event points (reads rings up to their head)
 *   trace start / stop           event points (stop: waits until no thread is
 *                                marked before the rings go); q->sysfs_lock
 *                                orders them
 *   diskstats / histogram reads  everything (lib/stats.c)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>
#include <sched.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__has_include)
#if __has_include(<sys/rseq.h>)
#include <sys/rseq.h>
#if defined(RSEQ_SIG)
#define TRACE_RSEQ 1
#endif
#endif
#endif

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
/* the writer stores magic with sequence, pid with device as one word each (little endian) */
_Static_assert(offsetof(struct bt_record, sequence) == 4 && offsetof(struct bt_record, device) ==
		       offsetof(struct bt_record, pid) + 4,
	       "adjacent pairs");
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the pairs are stored little endian");

#define BT_MAGIC 0x65617400u
#define BT_VERSION 0x07u

/* inlined even where GCC would rather not (the cold obs_* functions) */
#define TRACE_INLINE static inline __attribute__((always_inline))

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
static const uint32_t act_categories[TA_SPLIT + 1] = {
	[TA_QUEUE] = TC_ACT(TC_QUEUE), [TA_BACKMERGE] = TC_ACT(TC_QUEUE),
	[TA_FRONTMERGE] = TC_ACT(TC_QUEUE), [TA_GETRQ] = TC_ACT(TC_QUEUE),
	[TA_SLEEPRQ] = TC_ACT(TC_QUEUE), [TA_REQUEUE] = TC_ACT(TC_REQUEUE),
	[TA_ISSUE] = TC_ACT(TC_ISSUE), [TA_COMPLETE] = TC_ACT(TC_COMPLETE),
	[TA_PLUG] = TC_ACT(TC_QUEUE), [TA_UNPLUG_IO] = TC_ACT(TC_QUEUE),
	[TA_UNPLUG_TIMER] = TC_ACT(TC_QUEUE), [TA_INSERT] = TC_ACT(TC_QUEUE),
	[TA_SPLIT] = 0,
};

static inline uint32_t act_category(unsigned act)
{
	return act <= TA_SPLIT ? act_categories[act] : TC_ACT(TC_QUEUE);
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
TRACE_INLINE uint32_t rw_category(unsigned op, uint32_t opf)
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

/*
 * One slot of a thread's ring: what the event's records will hold but for
 * what only the writer can know (magic, sequence, pid, device, the time
 * scaled from the raw @stamp: TSC ticks, or the library's clock in the
 * slow mode).  @fold says which records follow the event's own at its
 * time: a Q whose bio got its request (G) and went to the driver (D) in
 * the same step is one slot, and the writer writes the three records.
 * 48 bytes: three slots in two cache lines.
 */
struct trace_slot {
	uint64_t stamp;
	uint64_t sector;
	uint32_t bytes;
	uint32_t action;
	uint16_t cpu;
	uint16_t error;
	uint16_t pdu_len;
	uint16_t fold;         /* SLOT_G | SLOT_D */
	unsigned char pdu[16];
};
_Static_assert(sizeof(struct trace_slot) == 48, "a slot is 48 bytes");

/* (SLOT_G, SLOT_D: lib/internal/trace.h) */
/* The action word of a D folded into a Q slot whose action is @q_action. */
static inline uint32_t fold_d_action(uint32_t q_action)
{
	return (q_action & ~(0xffffu | TC_ACT(TC_QUEUE))) | TC_ACT(TC_ISSUE | TC_FS) | TA_ISSUE;
}

/* The action word of a G folded into a Q slot whose action is @q_action. */
static inline uint32_t fold_g_action(uint32_t q_action)
{
	return (q_action & ~0xffffu) | TA_GETRQ;
}

#define RING_EVENTS 65536u      /* per thread and trace: 3 MiB */
#define RING_WAIT_NS 200000000ll /* a full ring waits this long for the writer to free some */
#define RING_WAKE_EVENTS (RING_EVENTS / 4) /* a waiting owner is woken per this much freed */

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
	/* the owner's line */
	_Atomic uint64_t head;       /* events committed */
	uint64_t room;               /* head may grow to this before tail is read again */
	uint64_t wake_at;            /* from this head on, wake the writer once (half way to room) */
	uint64_t last_stamp;         /* slow mode: the last stamp (kept increasing) */
	uint64_t stall_tail;         /* a wait saw the tail stay here: drop, no wait, until it moves */
	_Atomic uint64_t dropped;    /* events that found the ring full */
	struct obs_thread *_Atomic owner;
	struct trace_ring *next;     /* the trace's list (prepend, under lock) */
	uint32_t tid;
	char comm[COMM_LEN];
	/* the writer's line */
	_Alignas(64) _Atomic uint64_t tail; /* events taken */
	uint64_t w_stamp;            /* the raw stamp of the last event taken */
	uint64_t w_next;             /* the earliest time its next record may have */
	uint64_t w_woke;             /* the tail when the writer last woke waiting owners */
	_Alignas(64) struct trace_slot ev[RING_EVENTS];
};

struct rq_trace {
	uint64_t id;                 /* never reused: the threads' cache key */
	bool tsc;                    /* stamps are TSC ticks, else rq_clock_ns() */
	bool rseq;                   /* with tsc: the CPU from rseq's cpu_id, else rdtscp */
	uint64_t tick_base, nsec_base, mult; /* ticks -> ns, as rq_clock_ns() scales them */
	uint64_t start_ns;
	uint32_t dev;
	_Atomic uint32_t act_mask;   /* categories traced (TC_ACT()), the queue's trace_actions */
	unsigned nr_cpus;
	struct trace_out *out;       /* per CPU */
	uint32_t *seq;               /* per CPU: last sequence written */
	pthread_mutex_t lock;        /* ring list additions */
	struct trace_ring *_Atomic rings;
	_Atomic unsigned nr_rings;
	_Atomic uint64_t lost;       /* events with no ring (no memory) */
	_Atomic uint64_t written;    /* records written, as of the last drain */
	/* the writer's, stored per run: more than a line after what the points read */
	uint64_t last_time;          /* the last record's time */
	uint64_t nr_written;         /* records written */
	bool io_error;
	/* the writer */
	pthread_t writer;
	sem_t wake;
	_Atomic bool stop;
	_Atomic uint32_t room_seq;   /* futex word of owners waiting for room: bumped to wake them */
	_Atomic unsigned room_waiters; /* owners waiting for room in their ring */
	struct trace_ring **cur;     /* drain scratch: rings, their positions */
	uint64_t *pos, *end;
	unsigned cur_cap;
};

_Static_assert(offsetof(struct rq_trace, last_time) >=
		       offsetof(struct rq_trace, act_mask) + sizeof(uint32_t) + 64,
	       "the writer's stores share no line with what the points read");

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
#define RING_CACHE OBS_RING_CACHE

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
		obs_tls.th = th;
	}
	return th;
}

/*
 * The threads' marks against the writer's and the stopper's reads of them
 * are Dekker's pattern: each side stores, then loads what the other side
 * stores, which needs a full fence on both sides.  Event points make many
 * marks and the writer reads them once a millisecond, so the fence is all
 * on the writer's side where the kernel offers it: membarrier(2)'s private
 * expedited command runs a full fence on every CPU running a thread of the
 * process (a thread not running passed one when it was switched out), and
 * a thread's mark needs only the compiler not to move it.  Without
 * membarrier (or under ThreadSanitizer, which does not model it) every
 * mark is followed by a fence.
 */
static _Atomic bool obs_asym_fence;
static pthread_once_t obs_membarrier_once = PTHREAD_ONCE_INIT;

#define MB_CMD_PRIVATE_EXPEDITED (1 << 3)          /* linux/membarrier.h */
#define MB_CMD_REGISTER_PRIVATE_EXPEDITED (1 << 4)

static void obs_membarrier_init(void)
{
#if !defined(__SANITIZE_THREAD__) && defined(SYS_membarrier)
	if (syscall(SYS_membarrier, MB_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 &&
	    syscall(SYS_membarrier, MB_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
		atomic_store(&obs_asym_fence, true);
#endif
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

/* The writer's or stopper's half: a fence on every thread of the process. */
static void obs_fence_all(void)
{
	obs_fence();
#if defined(SYS_membarrier)
	if (atomic_load_explicit(&obs_asym_fence, memory_order_relaxed) &&
	    syscall(SYS_membarrier, MB_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
		abort(); /* registered, so it cannot fail */
#endif
}

/* A thread enters an event point of a traced queue. */
TRACE_INLINE void obs_enter(struct obs_thread *th)
{
	atomic_store_explicit(&th->active, 1, memory_order_relaxed);
	if (likely(atomic_load_explicit(&obs_asym_fence, memory_order_relaxed)))
		atomic_signal_fence(memory_order_seq_cst);
	else
		obs_fence();
}

TRACE_INLINE void obs_exit(struct obs_thread *th)
{
	atomic_store_explicit(&th->active, 0, memory_order_release);
}

/* Wait until no thread is inside an event point (its trace is unpublished). */
static void obs_threads_quiesce(void)
{
	obs_fence_all();
	for (struct obs_thread *th = atomic_load(&obs_threads); th; th = th->next)
		while (atomic_load_explicit(&th->active, memory_order_acquire))
			sched_yield();
}

/* The slow mode's stamp: the library's clock, kept strictly increasing per ring. */
static uint64_t __attribute__((noinline)) trace_stamp_clock(struct trace_ring *r, uint32_t *cpu)
{
	uint64_t now = rq_clock_ns();

	if (now <= r->last_stamp)
		now = r->last_stamp + 1;
	r->last_stamp = now;
	*cpu = cur_cpu();
	return now;
}

/* The stamp of an event now and the CPU it happens on. */
TRACE_INLINE uint64_t trace_stamp(struct rq_trace *t, struct trace_ring *r, uint32_t *cpu)
{
#if defined(__x86_64__)
	if (likely(t->tsc)) {
		unsigned aux;
		uint64_t now;

#if defined(TRACE_RSEQ)
		if (likely(t->rseq)) {
			/* the kernel keeps the thread's CPU here (rseq(2)), a plain load */
			*cpu = *(volatile uint32_t *)((char *)__builtin_thread_pointer() +
						      __rseq_offset + offsetof(struct rseq, cpu_id));
			return __builtin_ia32_rdtsc();
		}
#endif
		/* one instruction: the TSC and the kernel's TSC_AUX, node << 12 | cpu */
		now = __builtin_ia32_rdtscp(&aux);
		*cpu = aux & 0xfff;
		return now;
	}
#endif
	return trace_stamp_clock(r, cpu);
}

/* The writer's "now", in stamps: every stamp read before is at most this. */
static uint64_t trace_stamp_now(const struct rq_trace *t)
{
#if defined(__x86_64__)
	if (t->tsc) {
		uint64_t now = __builtin_ia32_rdtsc();

		__builtin_ia32_lfence(); /* read before what follows */
		return now;
	}
#endif
	return rq_clock_ns();
}

/* @r's owner passed its ring's wake_at: wake the writer, once until ring_wait() looks again. */
static void __attribute__((noinline)) trace_wake(struct rq_trace *t, struct trace_ring *r)
{
	r->wake_at = UINT64_MAX;
	sem_post(&t->wake);
}

/* Real time for a ring's wait (the library's clock may be a test's, standing still). */
static uint64_t wait_clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * Sleep until the writer frees room in @r (whose slot @h is taken), at
 * most until @deadline (CLOCK_MONOTONIC ns): the owner does not spin on
 * the CPU the writer may need.  The waiter counts itself, then reads the
 * tail; the writer stores the tail, then reads the count (all seq_cst),
 * so one of them sees the other.  Return: the tail.
 */
static uint64_t ring_sleep(struct rq_trace *t, struct trace_ring *r, uint64_t h,
			   uint64_t deadline)
{
	uint32_t seq = atomic_load(&t->room_seq);
	uint64_t tl, now = wait_clock_ns();

	atomic_fetch_add(&t->room_waiters, 1);
	tl = atomic_load(&r->tail);
	if (h - tl >= RING_EVENTS && now < deadline) {
		struct timespec ts = { .tv_sec = (time_t)((deadline - now) / 1000000000u),
				       .tv_nsec = (long)((deadline - now) % 1000000000u) };

		sem_post(&t->wake);
		syscall(SYS_futex, &t->room_seq, FUTEX_WAIT_PRIVATE, seq, &ts, NULL, 0);
		tl = atomic_load(&r->tail);
	}
	atomic_fetch_sub(&t->room_waiters, 1);
	return tl;
}

/*
 * @r is full as far as its owner last looked: look again, wait for the
 * writer (it is behind) until it frees a slot, and if it frees none for
 * RING_WAIT_NS count the event as dropped; until the tail moves, the
 * events after it drop with no wait.  True if there is room now.
 */
static bool __attribute__((noinline)) ring_wait(struct rq_trace *t, struct trace_ring *r,
						uint64_t h)
{
	uint64_t tl = atomic_load_explicit(&r->tail, memory_order_acquire);

	if (h - tl >= RING_EVENTS && tl != r->stall_tail) {
		uint64_t deadline = wait_clock_ns() + RING_WAIT_NS;

		while (h - tl >= RING_EVENTS && wait_clock_ns() < deadline)
			tl = ring_sleep(t, r, h, deadline);
		if (h - tl >= RING_EVENTS)
			r->stall_tail = tl;
	}
	r->room = tl + RING_EVENTS;
	r->wake_at = tl + RING_EVENTS / 2;
	if (h - tl < RING_EVENTS)
		return true;
	atomic_store_explicit(&r->dropped,
			      atomic_load_explicit(&r->dropped, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	return false;
}

TRACE_INLINE void slot_fill(struct trace_slot *s, uint64_t stamp, uint32_t cpu, uint64_t sector,
			    uint32_t bytes, uint32_t action, uint16_t error, const void *pdu,
			    unsigned pdu_len)
{
	s->stamp = stamp;
	s->sector = sector;
	s->bytes = bytes;
	s->action = action;
	s->cpu = (uint16_t)cpu;
	s->error = error;
	s->pdu_len = (uint16_t)pdu_len;
	s->fold = 0;
	if (pdu_len)
		memcpy(s->pdu, pdu, pdu_len);
}

/* Commit slot @h of @r (its owner's only writer); half way to full, wake the writer. */
TRACE_INLINE void ring_commit(struct rq_trace *t, struct trace_ring *r, uint64_t h)
{
	atomic_store_explicit(&r->head, h + 1, memory_order_release);
	if (unlikely(h >= r->wake_at))
		trace_wake(t, r);
}

/* One record with its own stamp into the calling thread's @r: the name note. */
static void ring_put(struct rq_trace *t, struct trace_ring *r, uint32_t action,
		     const void *pdu, unsigned pdu_len)
{
	uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint32_t cpu;
	uint64_t stamp;

	if (unlikely(h >= r->room) && !ring_wait(t, r, h))
		return;
	stamp = trace_stamp(t, r, &cpu);
	slot_fill(&r->ev[h % RING_EVENTS], stamp, cpu, 0, 0, action, 0, pdu, pdu_len);
	ring_commit(t, r, h);
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
static struct trace_ring *__attribute__((noinline)) ring_self(struct rq_trace *t,
							      struct obs_thread *th)
{
	unsigned slot = (unsigned)(t->id % RING_CACHE);
	struct trace_ring *r = ring_find(t, atomic_load(&th->tid));

	if (r)
		goto cache;
	r = mem_zalloc(sizeof(*r));
	if (!r)
		return NULL;
	r->tid = atomic_load(&th->tid);
	r->room = RING_EVENTS;
	r->wake_at = RING_EVENTS / 2;
	r->stall_tail = UINT64_MAX;
	memcpy(r->comm, th->comm, sizeof(r->comm));
	ring_put(t, r, TN_PROCESS | TC_ACT(TC_NOTIFY), r->comm, COMM_LEN);
	pthread_mutex_lock(&t->lock);
	r->next = atomic_load_explicit(&t->rings, memory_order_relaxed);
	atomic_store_explicit(&t->rings, r, memory_order_release);
	atomic_fetch_add(&t->nr_rings, 1);
	pthread_mutex_unlock(&t->lock);
cache:
	atomic_store(&r->owner, th);
	obs_tls.rings[slot].id = t->id;
	obs_tls.rings[slot].ring = r;
	return r;
}

/*
 * Steps.  The events one library call makes for a bio before anything
 * else gets control (Q, G, D of a bio issued straight to the driver; U,
 * I, D of a plug's requests) share one stamp: the first event of the
 * step (Q at submission, U at an unplug) takes it and keeps the thread
 * marked, the others reuse it, and the step ends before the driver, a
 * completion's callbacks or a sleep get control (at D, C, I and S) and
 * when the call returns (trace_step_end()).  Keeping the mark through the
 * step keeps the writer's rule: a marked thread commits nothing earlier
 * than its last committed stamp.  A G and a D that follow their Q in the
 * step fold into its slot, which stays uncommitted (@pending) until the
 * next event or the end of the step.  Per thread, never shared.
 */
enum {
	EV_OPEN = 1u << 0,     /* the event begins a step (Q, U) */
	EV_HOLD = 1u << 1,     /* its slot waits for a G and a D to fold in (Q) */
	EV_CLOSE = 1u << 2,    /* the step ends with it (D, C, I, S) */
	EV_FOLD_G = 1u << 3,   /* it may fold into the pending Q slot as its G */
	EV_FOLD_D = 1u << 4,   /* ... as its D, after its G */
};

/* (struct trace_step: lib/internal/trace.h, whose points fold G and D inline) */

/*
 * How each action takes part in a step: Q and U begin one (a Q's slot
 * waits for its G and D), G and D fold into a Q, and the step ends before
 * the driver (D), a sleep (S) or a completion's callbacks (C) get
 * control, and at an insert (I): what a scheduler's dispatch takes, D
 * has its own time.
 */
static const unsigned char act_modes[TA_SPLIT + 1] = {
	[TA_QUEUE] = EV_OPEN | EV_HOLD, [TA_UNPLUG_IO] = EV_OPEN, [TA_GETRQ] = EV_FOLD_G,
	[TA_ISSUE] = EV_FOLD_D | EV_CLOSE, [TA_SLEEPRQ] = EV_CLOSE, [TA_COMPLETE] = EV_CLOSE,
	[TA_INSERT] = EV_CLOSE,
};

static inline unsigned act_mode(unsigned act)
{
	return act <= TA_SPLIT ? act_modes[act] : 0;
}

__thread struct obs_tls obs_tls __attribute__((tls_model("initial-exec")));

/*
 * Steps are for multi-queue queues: on the single-queue front end the
 * queue lock's holder runs request_fn and ends other threads' bios when
 * it drops the lock, both inside a submission.
 */
static inline bool step_queue(const struct rq_queue *q)
{
	return q->nr_hw_queues != 0;
}

/* End the calling thread's step: commit what it holds, clear its mark. */
static void __attribute__((noinline)) step_close(struct trace_step *st)
{
	if (st->pending) {
		st->pending = false;
		ring_commit(st->t, st->r,
			    atomic_load_explicit(&st->r->head, memory_order_relaxed));
	}
	st->q = NULL;
	st->fold_bio = NULL;
	st->fold_rq = NULL;
	obs_exit(obs_tls.th);
}

void obs_step_end(void)
{
	if (obs_tls.step.q)
		step_close(&obs_tls.step);
}

/* Fold a G or D into pending slot @s if it is the same bio's: true if it did. */
TRACE_INLINE bool slot_fold(struct trace_slot *s, uint64_t sector, uint32_t bytes,
			    uint32_t action, uint16_t error, unsigned mode)
{
	if (s->sector != sector || s->bytes != bytes || error)
		return false;
	if ((mode & EV_FOLD_G) && !s->fold && action == fold_g_action(s->action)) {
		s->fold = SLOT_G;
		return true;
	}
	if ((mode & EV_FOLD_D) && s->fold == SLOT_G && action == fold_d_action(s->action)) {
		s->fold = SLOT_G | SLOT_D;
		return true;
	}
	return false;
}

/* An event of the calling thread's open step (@st->q is the event's queue). */
TRACE_INLINE void step_emit(struct trace_step *st, uint64_t sector, uint32_t bytes,
			    uint32_t action, uint16_t error, const void *pdu, unsigned pdu_len,
			    unsigned mode)
{
	struct rq_trace *t = st->t;
	struct trace_ring *r = st->r;
	uint64_t h;

	st->fold_bio = NULL; /* an event the inline folds did not take */
	st->fold_rq = NULL;
	if (unlikely(!(action & atomic_load_explicit(&t->act_mask, memory_order_relaxed))))
		goto out;
	h = atomic_load_explicit(&r->head, memory_order_relaxed);
	if (st->pending) {
		if ((mode & (EV_FOLD_G | EV_FOLD_D)) &&
		    slot_fold(&r->ev[h % RING_EVENTS], sector, bytes, action, error, mode))
			goto out;
		st->pending = false;
		ring_commit(t, r, h++);
	}
	if (unlikely(h >= r->room) && !ring_wait(t, r, h))
		goto out;
	slot_fill(&r->ev[h % RING_EVENTS], st->stamp, st->cpu, sector, bytes, action, error,
		  pdu, pdu_len);
	if (mode & EV_HOLD)
		st->pending = true;
	else
		ring_commit(t, r, h);
out:
	if (mode & EV_CLOSE)
		step_close(st);
}

/*
 * Keep @r, the calling thread's (@th) ring in @t, in its step for the
 * fast ways (event_new()): usable there if stamps are TSC ticks and a
 * mark needs no fence of its own.  Context: no step open.
 */
static void step_cache(struct trace_step *st, struct rq_trace *t, struct trace_ring *r,
		       struct obs_thread *th)
{
	bool fast = false;

#if defined(__x86_64__)
	fast = t->tsc && atomic_load_explicit(&obs_asym_fence, memory_order_relaxed);
#endif
	st->t = t;
	st->r = r;
	st->head = &r->head;
	st->active = fast ? &th->active : NULL;
	st->id = fast ? t->id : 0;
}

/*
 * An event outside a step: the thread marks itself before it looks for
 * the trace (a stopper that unpublished it waits for the mark to go) and
 * before it reads the clock (the writer's ordering), writes the record
 * into its ring and commits it; an EV_OPEN event stays marked and opens
 * a step with its stamp.
 */
TRACE_INLINE void trace_emit_new(struct trace_step *st, struct rq_queue *q, uint64_t sector,
				 uint32_t bytes, uint32_t action, uint16_t error,
				 const void *pdu, unsigned pdu_len, unsigned mode)
{
	struct obs_thread *th = obs_tls.th;
	struct trace_ring *r;
	struct rq_trace *t;
	uint64_t h, stamp;
	unsigned slot;
	uint32_t cpu;

	if (unlikely(!th) && !(th = obs_thread_self()))
		return;
	obs_enter(th);
	t = atomic_load_explicit(&q->obs->trace, memory_order_acquire);
	if (unlikely(!t) ||
	    unlikely(!(action & atomic_load_explicit(&t->act_mask, memory_order_relaxed))))
		goto out;
	slot = (unsigned)(t->id % RING_CACHE);
	r = obs_tls.rings[slot].ring;
	if (unlikely(obs_tls.rings[slot].id != t->id) && !(r = ring_self(t, th))) {
		atomic_fetch_add(&t->lost, 1);
		goto out;
	}
	step_cache(st, t, r, th);
	h = atomic_load_explicit(&r->head, memory_order_relaxed);
	if (unlikely(h >= r->room) && !ring_wait(t, r, h))
		goto out;
	stamp = trace_stamp(t, r, &cpu);
	slot_fill(&r->ev[h % RING_EVENTS], stamp, cpu, sector, bytes, action, error, pdu,
		  pdu_len);
	if ((mode & EV_OPEN) && step_queue(q)) {
		st->q = q;
		st->stamp = stamp;
		st->cpu = cpu;
		st->pending = (mode & EV_HOLD) != 0;
		st->d_ok = false;
		if (!(mode & EV_HOLD))
			ring_commit(t, r, h);
		return; /* marked until the step ends */
	}
	ring_commit(t, r, h);
out:
	obs_exit(th);
}

/* Record one event of @q if a trace runs, in the calling thread's step or on its own. */
TRACE_INLINE void trace_emit(struct rq_queue *q, uint64_t sector, uint32_t bytes,
			     uint32_t action, uint16_t error, const void *pdu, unsigned pdu_len,
			     unsigned mode)
{
	struct trace_step *st = &obs_tls.step;

	if (st->q == q) {
		step_emit(st, sector, bytes, action, error, pdu, pdu_len, mode);
		return;
	}
	if (unlikely(st->q != NULL))
		step_close(st); /* another queue's step (a driver submitting to another queue) */
	trace_emit_new(st, q, sector, bytes, action, error, pdu, pdu_len, mode);
}

/* trace_event()'s general way: anything its leaf paths do not take. */
static void __attribute__((noinline)) trace_event_slow(struct rq_queue *q, uint64_t sector,
						       uint32_t bytes, uint32_t action,
						       uint32_t error)
{
	trace_emit(q, sector, bytes, action, (uint16_t)error, NULL, 0,
		   act_mode(action & 0xffffu));
}

/*
 * trace_event() in the thread's open step of @q (leaf: a call only in
 * tail position, so no frame): fold into the pending Q slot, or write a
 * slot with the step's stamp; end the step if the action does.
 */
static void __attribute__((hot, noinline)) trace_event_step(struct rq_queue *q,
							     uint64_t sector, uint32_t bytes,
							     uint32_t action, uint32_t error)
{
	struct trace_step *st = &obs_tls.step;
	struct trace_ring *r = st->r;
	unsigned mode = act_mode(action & 0xffffu);
	uint64_t h;

	st->fold_bio = NULL; /* an event the inline folds did not take */
	st->fold_rq = NULL;
	if (unlikely(!(action & atomic_load_explicit(&st->t->act_mask, memory_order_relaxed))))
		goto slow;
	h = atomic_load_explicit(&r->head, memory_order_relaxed);
	if (st->pending) {
		if ((mode & (EV_FOLD_G | EV_FOLD_D)) &&
		    slot_fold(&r->ev[h % RING_EVENTS], sector, bytes, action, (uint16_t)error,
			      mode)) {
			if (mode & EV_CLOSE)
				goto close; /* commit the folded slot */
			return;
		}
		if (unlikely(h + 1 >= r->room))
			goto slow;
		st->pending = false;
		h++;
	} else if (unlikely(h >= r->room)) {
		goto slow;
	}
	slot_fill(&r->ev[h % RING_EVENTS], st->stamp, st->cpu, sector, bytes, action,
		  (uint16_t)error, NULL, 0);
	st->pending = mode & EV_HOLD;
	atomic_store_explicit(&r->head, (mode & EV_HOLD) ? h : h + 1, memory_order_release);
	if (mode & EV_CLOSE) {
		st->q = NULL;
		atomic_store_explicit(&obs_tls.th->active, 0, memory_order_release);
	}
	if (unlikely(h >= r->wake_at))
		trace_wake(st->t, r);
	return;
close:
	st->pending = false;
	st->q = NULL;
	atomic_store_explicit(&r->head, h + 1, memory_order_release);
	atomic_store_explicit(&obs_tls.th->active, 0, memory_order_release);
	if (unlikely(h >= r->wake_at))
		trace_wake(st->t, r);
	return;
slow:
	trace_event_slow(q, sector, bytes, action, error);
}

/*
 * A Q of @bio opened a step with its slot @s pending: let the points fold
 * its G inline, and its D if the D's action is traced (not a flush's or a
 * FUA request's: the flush machinery may change it) and committing it
 * needs no wake of the writer.
 */
TRACE_INLINE void step_fold_arm(struct trace_step *st, const struct rq_bio *bio,
				struct trace_slot *s, struct rq_trace *t, struct trace_ring *r,
				uint32_t action, uint64_t h)
{
	st->fold_bio = bio;
	st->fold = &s->fold;
	st->d_ok = (fold_d_action(action) &
		    atomic_load_explicit(&t->act_mask, memory_order_relaxed)) &&
		   !(action & TC_ACT(TC_FLUSH | TC_FUA)) && h < r->wake_at;
}

/*
 * trace_event() outside a step: a thread with its record and its ring
 * for the running trace, room in the ring, the TSC stamps, membarrier on
 * the writer's side.  A Q (@bio, else NULL: a compile-time constant in
 * each of the two functions below) opens a step with its stamp and lets
 * its G and D fold in inline (trace_getrq(), trace_issue()).
 */
TRACE_INLINE void event_new(struct rq_queue *q, uint64_t sector, uint32_t bytes,
			    uint32_t action, uint32_t error, const struct rq_bio *bio)
{
#if defined(__x86_64__)
	struct trace_step *st = &obs_tls.step;
	_Atomic unsigned *active = st->active;
	struct trace_ring *r;
	struct rq_trace *t;
	struct trace_slot *s;
	uint64_t h, stamp;
	uint32_t cpu;

	if (unlikely(st->q || !active))
		goto slow;
	atomic_store_explicit(active, 1, memory_order_relaxed);
	atomic_signal_fence(memory_order_seq_cst);
	t = atomic_load_explicit(&q->obs->trace, memory_order_acquire);
	if (unlikely(!t) ||
	    unlikely(!(action & atomic_load_explicit(&t->act_mask, memory_order_relaxed))))
		goto out;
	r = st->r;
	if (unlikely(t->id != st->id))
		goto slow_out;
	h = atomic_load_explicit(&r->head, memory_order_relaxed);
	if (unlikely(h >= r->room))
		goto slow_out;
	s = &r->ev[h % RING_EVENTS];
#if defined(TRACE_RSEQ)
	if (likely(t->rseq)) {
		cpu = *(volatile uint32_t *)((char *)__builtin_thread_pointer() + __rseq_offset +
					     offsetof(struct rseq, cpu_id));
		stamp = __builtin_ia32_rdtsc();
	} else
#endif
	{
		unsigned aux;

		stamp = __builtin_ia32_rdtscp(&aux);
		cpu = aux & 0xfff;
	}
	slot_fill(s, stamp, cpu, sector, bytes, action, (uint16_t)error, NULL, 0);
	if (bio && step_queue(q)) {
		/* @t, @r, @head, @active are the step's already; fold_rq is NULL */
		st->q = q;
		st->stamp = stamp;
		st->cpu = cpu;
		st->pending = true;
		step_fold_arm(st, bio, s, t, r, action, h);
		return; /* marked, the slot uncommitted, until the step goes on */
	}
	atomic_store_explicit(&r->head, h + 1, memory_order_release);
	atomic_store_explicit(active, 0, memory_order_release);
	if (unlikely(h >= r->wake_at))
		trace_wake(t, r);
	return;
slow_out:
	atomic_store_explicit(active, 0, memory_order_release);
slow:
	trace_event_slow(q, sector, bytes, action, error);
	return;
out:
	atomic_store_explicit(active, 0, memory_order_release);
#else
	(void)bio;
	trace_event_slow(q, sector, bytes, action, error);
#endif
}

/* An event outside a step that opens none (leaf: a call only in tail position). */
static void __attribute__((hot, noinline)) trace_event_new(struct rq_queue *q, uint64_t sector,
							    uint32_t bytes, uint32_t action,
							    uint32_t error)
{
	event_new(q, sector, bytes, action, error, NULL);
}

/* A Q of @bio outside a step, with its @action: it opens one (leaf). */
static void __attribute__((hot, noinline)) trace_event_open(struct rq_queue *q,
							     const struct rq_bio *bio,
							     uint32_t action)
{
	event_new(q, bio->iter.sector, bio->iter.size, action, 0, bio);
}

/* An event of @q: in the calling thread's step of @q, or on its own. */
TRACE_INLINE void trace_event(struct rq_queue *q, uint64_t sector, uint32_t bytes,
			      uint32_t action, uint32_t error)
{
	if (obs_tls.step.q == q)
		trace_event_step(q, sector, bytes, action, error);
	else
		trace_event_new(q, sector, bytes, action, error);
}

/* The Q of @bio, @action: in the calling thread's step of @q (rare), or opening one. */
TRACE_INLINE void trace_queue_bio(struct rq_queue *q, const struct rq_bio *bio, uint32_t action)
{
	if (obs_tls.step.q == q)
		trace_event_step(q, bio->iter.sector, bio->iter.size, action, 0);
	else
		trace_event_open(q, bio, action);
}

/* An event with an 8-byte payload: @pdu, big-endian in the record. */
static void __attribute__((noinline)) trace_event_pdu(struct rq_queue *q, uint64_t sector,
						      uint32_t bytes, uint32_t action,
						      uint64_t pdu)
{
	uint64_t be = __builtin_bswap64(pdu);

	trace_emit(q, sector, bytes, action, 0, &be, sizeof(be), act_mode(action & 0xffffu));
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

/*
 * Give @rec its place in @cpu's file (@time, never before the last
 * record's; the CPU's next sequence number) and append it with
 * @rec->pdu_len bytes of @pdu.  For the writer's own records.
 */
static void out_record(struct rq_trace *t, unsigned cpu, struct bt_record *rec,
		       const void *pdu, uint64_t time)
{
	struct trace_out *o = &t->out[cpu];
	size_t len = sizeof(*rec) + rec->pdu_len;

	if (time < t->last_time)
		time = t->last_time;
	t->last_time = time;
	rec->magic = BT_MAGIC | BT_VERSION;
	rec->sequence = ++t->seq[cpu];
	rec->time = time;
	rec->device = t->dev;
	rec->cpu = cpu;
	t->nr_written++;
	if (o->len + len > sizeof(o->buf) && !out_flush(o))
		t->io_error = true;
	memcpy(o->buf + o->len, rec, sizeof(*rec));
	memcpy(o->buf + o->len + sizeof(*rec), pdu, rec->pdu_len);
	o->len += len;
}

/* The writer's place in one CPU's file during a run. */
struct run_out {
	unsigned cpu;                /* UINT_MAX before the first record */
	struct trace_out *o;
	size_t len;
	uint32_t seq;
};

/*
 * Switch @ro to @cpu's buffer (the last CPU's for a CPU past them),
 * keeping the last one's length and sequence.
 */
static void run_out_switch(struct rq_trace *t, struct run_out *ro, unsigned cpu)
{
	if (cpu >= t->nr_cpus)
		cpu = t->nr_cpus - 1;
	if (ro->o) {
		ro->o->len = ro->len;
		t->seq[ro->cpu] = ro->seq;
	}
	ro->cpu = cpu;
	ro->o = &t->out[cpu];
	ro->len = ro->o->len;
	ro->seq = t->seq[cpu];
}

/*
 * A record's 48 bytes as six 8-byte words: magic and sequence, time,
 * sector, bytes and action, pid and device, CPU with error and payload
 * length (little endian, see struct bt_record).  Past it.
 */
TRACE_INLINE unsigned char *rec_put(unsigned char *p, uint32_t seq, uint64_t time, uint64_t sector,
				    uint64_t bytes_action, uint64_t pid_dev, uint64_t cpu_word)
{
	const uint64_t magic_seq = (uint64_t)seq << 32 | (BT_MAGIC | BT_VERSION);

	/* one store each (a buffer's records need not be 8-aligned: a message's payload) */
	memcpy(p, &magic_seq, 8);
	memcpy(p + 8, &time, 8);
	memcpy(p + 16, &sector, 8);
	memcpy(p + 24, &bytes_action, 8);
	memcpy(p + 32, &pid_dev, 8);
	memcpy(p + 40, &cpu_word, 8);
	return p + sizeof(struct bt_record);
}

/* A bytes-and-action word with @action instead of the slot's. */
TRACE_INLINE uint64_t ba_with(uint64_t bytes_action, uint32_t action)
{
	return (uint32_t)bytes_action | (uint64_t)action << 32;
}

/*
 * The writer took @r's events before @pos: give their slots back to the
 * owner, and wake owners waiting for room if it freed RING_WAKE_EVENTS
 * since it last did, or with @all.  See ring_sleep() for the order.
 */
static void ring_release(struct rq_trace *t, struct trace_ring *r, uint64_t pos, bool all)
{
	atomic_store(&r->tail, pos);
	if (!all && pos - r->w_woke < RING_WAKE_EVENTS)
		return;
	r->w_woke = pos;
	if (atomic_load(&t->room_waiters)) {
		atomic_fetch_add(&t->room_seq, 1);
		syscall(SYS_futex, &t->room_seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
	}
}

/* Room in @ro's buffer for one slot's records (three, or one with its payload). */
#define SLOT_OUT_MAX (3 * sizeof(struct bt_record) + sizeof(((struct trace_slot *)0)->pdu))

/* A slot's cpu, error, pdu_len, fold as one word (little endian) */
_Static_assert(offsetof(struct trace_slot, error) == offsetof(struct trace_slot, cpu) + 2 &&
		       offsetof(struct trace_slot, pdu_len) == offsetof(struct trace_slot, cpu) + 4 &&
		       offsetof(struct trace_slot, fold) == offsetof(struct trace_slot, cpu) + 6 &&
		       offsetof(struct trace_slot, action) == offsetof(struct trace_slot, bytes) + 4,
	       "a slot's words");

/*
 * Write ring @i's events from its position while they are no later than
 * @next (at least one).  Each slot's record gets its stamp scaled to
 * nanoseconds since the trace started, kept strictly after the ring's
 * last record (the thread's order survives blkparse's sort by time) and
 * never before the last record written; its CPU's next sequence number;
 * and goes to its CPU's buffer, followed by the G and D folded into it,
 * each a nanosecond later.  The slot is read as words (sector; bytes and
 * action, as the record has them; CPU, error, payload length and fold
 * bits), the record written as six.  What the loop reads of @t is in
 * locals: stores to a byte buffer alias everything.
 */
static void __attribute__((noinline)) write_run(struct rq_trace *t, unsigned i, uint64_t next)
{
	struct trace_ring *r = t->cur[i];
	const uint64_t end = t->end[i];
	uint64_t pos = t->pos[i], nrec = 0;
	/* the earliest time the next record may have: after the ring's last, not before any */
	uint64_t lo = r->w_next > t->last_time ? r->w_next : t->last_time;
	/* stamp -> time since start: base + (stamp - tick_base) * mult >> 32 */
	const uint64_t tick_base = t->tsc ? t->tick_base : 0;
	const uint64_t mult = t->tsc ? t->mult : 1ull << 32;
	const int64_t base = (int64_t)((t->tsc ? t->nsec_base : 0) - t->start_ns);
	const uint64_t pid_dev = (uint64_t)t->dev << 32 | r->tid;
	const struct trace_slot *s = &r->ev[pos % RING_EVENTS];
	uint64_t stamp = s->stamp, w_stamp;
	struct run_out ro = { .cpu = UINT_MAX, .o = NULL };

	do {
		uint64_t cw, ba, time;
		unsigned char *p;
		int64_t ns;

		/* 32 slots on, written on the owner's CPU (past the ring's end: it does not fault) */
		__builtin_prefetch((const void *)((uintptr_t)s + 32 * sizeof(*s)));
		memcpy(&cw, &s->cpu, sizeof(cw));
		memcpy(&ba, &s->bytes, sizeof(ba));
		ns = base + (int64_t)(((unsigned __int128)(stamp - tick_base) * mult) >> 32);
		time = ns > 0 && stamp >= tick_base ? (uint64_t)ns : 0;
		time = time < lo ? lo : time;
		if (unlikely((uint16_t)cw != ro.cpu))
			run_out_switch(t, &ro, (uint16_t)cw);
		if (unlikely(ro.len + SLOT_OUT_MAX > sizeof(ro.o->buf))) {
			ro.o->len = ro.len;
			if (!out_flush(ro.o))
				t->io_error = true;
			ro.len = 0;
			ring_release(t, r, pos, false); /* slots copied out: the owner may reuse them */
		}
		/* the record's CPU word: the CPU, the slot's error and payload length */
		p = rec_put(ro.o->buf + ro.len, ++ro.seq, time, s->sector, ba, pid_dev,
			    ro.cpu | (cw & 0xffffffff0000ull) << 16);
		memcpy(p, s->pdu, sizeof(s->pdu)); /* past the payload: overwritten or not sent */
		p += (uint16_t)(cw >> 32);
		nrec++;
		if (cw >> 48 & SLOT_G) {
			p = rec_put(p, ++ro.seq, ++time, s->sector,
				    ba_with(ba, fold_g_action((uint32_t)(ba >> 32))), pid_dev, ro.cpu);
			nrec++;
		}
		if (cw >> 48 & SLOT_D) {
			p = rec_put(p, ++ro.seq, ++time, s->sector,
				    ba_with(ba, fold_d_action((uint32_t)(ba >> 32))), pid_dev, ro.cpu);
			nrec++;
		}
		ro.len = (size_t)(p - ro.o->buf);
		lo = time + 1;
		w_stamp = stamp;
		if (++pos == end)
			break;
		if (unlikely(++s == r->ev + RING_EVENTS))
			s = r->ev;
		stamp = s->stamp;
	} while (stamp <= next);
	ro.o->len = ro.len;
	t->seq[ro.cpu] = ro.seq;
	r->w_stamp = w_stamp;
	r->w_next = lo;
	t->last_time = lo - 1;
	t->nr_written += nrec;
	t->pos[i] = pos;
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
 * Take every ring's committed range into the drain scratch and lower
 * @limit to what no thread can still precede: a thread inside an event
 * point makes its next stamp after its last committed one, a thread
 * outside after @limit (read before the marks, a fence on every thread
 * between).  Each ring's mark is read before its head: a thread seen out
 * has its events before the mark visible.  Return: the rings taken.
 */
static unsigned drain_collect(struct rq_trace *t, bool final, uint64_t *limit)
{
	unsigned n = 0;

	for (struct trace_ring *r = atomic_load_explicit(&t->rings, memory_order_acquire);
	     r && n < t->cur_cap; r = r->next) {
		struct obs_thread *th = atomic_load_explicit(&r->owner, memory_order_relaxed);
		bool active = !final && th &&
			      atomic_load_explicit(&th->active, memory_order_acquire);

		t->cur[n] = r;
		t->pos[n] = atomic_load_explicit(&r->tail, memory_order_relaxed);
		t->end[n] = atomic_load_explicit(&r->head, memory_order_acquire);
		if (active) {
			uint64_t last = t->end[n] > t->pos[n] ?
						r->ev[(t->end[n] - 1) % RING_EVENTS].stamp :
						r->w_stamp;

			if (last < *limit)
				*limit = last;
		}
		n++;
	}
	return n;
}

/*
 * Has any ring committed an event the writer has not taken?  A commit not
 * seen yet wakes the writer again, or its next round finds it.
 */
static bool drain_pending(struct rq_trace *t)
{
	for (struct trace_ring *r = atomic_load_explicit(&t->rings, memory_order_acquire); r;
	     r = r->next)
		if (atomic_load_explicit(&r->head, memory_order_relaxed) !=
		    atomic_load_explicit(&r->tail, memory_order_relaxed))
			return true;
	return false;
}

/*
 * Write every final event (all with @final: no thread writes any more),
 * merged by time across the rings.  Context: the writer, or the stopper
 * once the writer is gone.
 */
static void trace_drain(struct rq_trace *t, bool final)
{
	uint64_t limit = final ? UINT64_MAX : trace_stamp_now(t);
	unsigned n;

	if (!final && !drain_pending(t))
		return; /* no fence on every thread for nothing */
	obs_fence_all();
	if (!drain_room(t, atomic_load(&t->nr_rings)))
		return;
	n = drain_collect(t, final, &limit);
	for (;;) {
		struct trace_slot *best = NULL;
		uint64_t next = limit; /* the earliest stamp among the other rings */
		unsigned bi = 0;

		for (unsigned i = 0; i < n; i++) {
			struct trace_slot *s = &t->cur[i]->ev[t->pos[i] % RING_EVENTS];

			if (t->pos[i] == t->end[i] || s->stamp > limit)
				continue;
			if (!best || s->stamp < best->stamp) {
				if (best && best->stamp < next)
					next = best->stamp;
				best = s;
				bi = i;
			} else if (s->stamp < next) {
				next = s->stamp;
			}
		}
		if (!best)
			break;
		/* a run of the best ring up to where another ring comes first */
		write_run(t, bi, next);
	}
	for (unsigned i = 0; i < n; i++)
		ring_release(t, t->cur[i], t->pos[i], true);
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
		/* one drain takes all there is: the wake-ups posted meanwhile with it */
		while (sem_trywait(&t->wake) == 0)
			;
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

/*
 * How @t's events are stamped: with rdtscp (the TSC and the CPU in one
 * instruction) where rq_clock_ns() itself reads the TSC and the kernel
 * keeps the CPU's number in TSC_AUX (checked against sched_getcpu());
 * else with rq_clock_ns() and sched_getcpu(), as a test's virtual clock
 * needs.
 */
static void trace_pick_clock(struct rq_trace *t)
{
#if defined(__x86_64__)
	unsigned a, b, c, d, aux;

	if (!__get_cpuid(0x80000001u, &a, &b, &c, &d) || !(d & (1u << 27)) ||
	    !clock_tsc_params(&t->tick_base, &t->nsec_base, &t->mult))
		return;
	for (unsigned i = 0; i < 16; i++) {
		int c1 = sched_getcpu();

		__builtin_ia32_rdtscp(&aux);
		if (c1 >= 0 && c1 == sched_getcpu()) {
			t->tsc = (aux & 0xfff) == (unsigned)c1;
			break;
		}
	}
#if defined(TRACE_RSEQ)
	/* glibc registered rseq for every thread (its size is 0 if it could not) */
	t->rseq = t->tsc && __rseq_size > 0 && __rseq_offset != 0;
#endif
#else
	(void)t;
#endif
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
	atomic_store(&t->act_mask, atomic_load(&q->obs->act_mask));
	pthread_once(&obs_membarrier_once, obs_membarrier_init);
	trace_pick_clock(t);
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
	atomic_store_explicit(&q->obs->trace, NULL, memory_order_release);
	obs_step_end(); /* the stopper's own step, if it stops from inside one */
	obs_threads_quiesce(); /* no thread is in an event point or a step any more */
	/*
	 * Only now: a thread's step ends at trace_step_end(), which looks at
	 * obs_active; cleared first, a step open at the stop would keep its
	 * thread marked and the wait above would not end.  Until here new
	 * events find no trace and open no step.
	 */
	obs_flags_change(q, OBS_TRACE, false);
	atomic_store(&t->stop, true);
	sem_post(&t->wake);
	pthread_join(t->writer, NULL);
	trace_drain(t, true);
	trace_fill_info(t, &own);
	if (own.dropped) {
		char text[64];
		struct bt_record rec = { .action = TN_MESSAGE | TC_ACT(TC_NOTIFY) };
		uint64_t now = rq_clock_ns();
		int len = snprintf(text, sizeof(text), "librequest: %llu events dropped",
				   (unsigned long long)own.dropped);

		rec.pdu_len = (uint16_t)(len + 1);
		out_record(t, 0, &rec, text, now > t->start_ns ? now - t->start_ns : 0);
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

/*
 * blktrace's action mask (-a NAME, the kernel's trace/act_mask): the
 * categories that apply here, by bit (TC_*).  An event is traced if any
 * of its categories is in the mask; thread names and the drop message
 * always are.
 */
static const char *const act_mask_names[16] = {
	"read", "write", "flush", "sync", "queue", "requeue", "issue", "complete", "fs",
	[11] = "ahead", "meta", "discard", [15] = "fua",
};
#define TRACE_ACTS_ALL TC_ACT(0xb9ffu) /* every named bit */

/* The "trace_actions" attribute: the mask's names, comma-separated. */
int trace_actions_show(struct rq_queue *q, char *buf, size_t len)
{
	uint32_t mask = q->obs ? atomic_load(&q->obs->act_mask) >> 16 : 0;
	size_t n = 0;

	for (unsigned b = 0; b < 16; b++) {
		int w;

		if (!(mask & (1u << b)) || !act_mask_names[b])
			continue;
		w = snprintf(buf + n, len - n, "%s%s", n ? "," : "", act_mask_names[b]);
		if (w < 0 || (size_t)w >= len - n)
			return -ENOSPC;
		n += (size_t)w;
	}
	if (n + 2 > len)
		return -ENOSPC;
	buf[n++] = '\n';
	buf[n] = '\0';
	return (int)n;
}

/*
 * Set the mask from @val: names, comma-separated, any case, an optional
 * newline at the end.  It applies from the next event, to a running trace
 * too.  Context: q->sysfs_lock held.  -EINVAL: an unknown or empty name.
 */
int trace_actions_store(struct rq_queue *q, const char *val)
{
	size_t end = strcspn(val, "\n");
	uint32_t mask = 0;
	struct rq_trace *t;

	if (!q->obs || (val[end] && val[end + 1]))
		return -EINVAL;
	for (size_t i = 0; i <= end;) {
		size_t w = strcspn(val + i, ",\n");
		unsigned b;

		for (b = 0; b < 16; b++)
			if (act_mask_names[b] && strlen(act_mask_names[b]) == w &&
			    !strncasecmp(val + i, act_mask_names[b], w))
				break;
		if (b == 16)
			return -EINVAL;
		mask |= TC_ACT(1u << b);
		i += w + 1;
	}
	atomic_store(&q->obs->act_mask, mask);
	t = atomic_load(&q->obs->trace);
	if (t)
		atomic_store(&t->act_mask, mask);
	return 0;
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


/*
 * A point that only traces ends in a call in tail position (no frame of
 * its own); with iostats on, an out-of-line function counts and then
 * traces.
 */
void obs_bio(struct rq_queue *q, const struct rq_bio *bio, unsigned act, uint64_t pdu)
{
	unsigned f = atomic_load_explicit(&q->obs_flags, memory_order_relaxed);
	uint32_t action;

	if ((f & OBS_IOSTAT) && (act == TA_BACKMERGE || act == TA_FRONTMERGE))
		stat_inc(q, ST_DS_MERGES + op_group(bio->op));
	if (!(f & OBS_TRACE))
		return;
	action = act | act_category(act) | rw_category(bio->op, bio->opf);
	if (unlikely(act == TA_SPLIT))
		trace_event_pdu(q, bio->iter.sector, bio->iter.size, action, pdu);
	else if (act == TA_QUEUE)
		trace_queue_bio(q, bio, action);
	else
		trace_event(q, bio->iter.sector, bio->iter.size, action, 0);
}

/* Q: a bio entered @q (leaf while only a trace runs). */
void __attribute__((hot)) obs_queue(struct rq_queue *q, const struct rq_bio *bio)
{
	uint32_t action;

	if (unlikely(atomic_load_explicit(&q->obs_flags, memory_order_relaxed) != OBS_TRACE)) {
		obs_bio(q, bio, TA_QUEUE, 0);
		return;
	}
	action = TA_QUEUE | TC_ACT(TC_QUEUE) | rw_category(bio->op, bio->opf);
	if (unlikely(obs_tls.step.q == q))
		trace_event_step(q, bio->iter.sector, bio->iter.size, action, 0);
	else
		event_new(q, bio->iter.sector, bio->iter.size, action, 0, bio); /* no call more */
}

TRACE_INLINE void trace_rq(struct rq_request *rq, unsigned act)
{
	trace_event(rq->q, rq->sector, rq->bytes,
		    act | act_category(act) | rw_category(rq->op, rq->opf) | TC_ACT(TC_FS), 0);
}

/* obs_rq() with iostats on: count, then trace if @f says so. */
static void __attribute__((noinline)) iostat_rq(struct rq_request *rq, unsigned act, unsigned f)
{
	struct rq_queue *q = rq->q;

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
	if (f & OBS_TRACE)
		trace_rq(rq, act);
}

void obs_rq(struct rq_request *rq, unsigned act)
{
	struct rq_queue *q = rq->q;
	unsigned f = atomic_load_explicit(&q->obs_flags, memory_order_relaxed);

	if (unlikely(f & OBS_IOSTAT))
		iostat_rq(rq, act, f);
	else if (f & OBS_TRACE)
		trace_rq(rq, act);
}

TRACE_INLINE void trace_getrq_bio(struct rq_queue *q, const struct rq_bio *bio)
{
	trace_event(q, bio->iter.sector, bio->iter.size,
		    TA_GETRQ | TC_ACT(TC_QUEUE) | rw_category(bio->op, bio->opf), 0);
}

/* obs_getrq() with iostats on: the start time, then trace if @f says so. */
static void __attribute__((noinline)) iostat_getrq(struct rq_request *rq,
						   const struct rq_bio *bio, unsigned f)
{
	uint64_t now = rq_clock_ns();

	if (!rq->start_time_ns)
		rq->start_time_ns = now;
	rq_priv(rq)->obs_started = 0; /* not cleared at every allocation */
	io_ticks_update(rq->q, now, false);
	if (f & OBS_TRACE)
		trace_getrq_bio(rq->q, bio);
}

void obs_getrq(struct rq_request *rq, const struct rq_bio *bio)
{
	struct rq_queue *q = rq->q;
	unsigned f = atomic_load_explicit(&q->obs_flags, memory_order_relaxed);

	rq->rq_flags |= RQ_RQF_IO_STAT; /* its later points test this bit */
	if (unlikely(f & OBS_IOSTAT))
		iostat_getrq(rq, bio, f);
	else if (f & OBS_TRACE)
		trace_getrq_bio(q, bio);
}

/* An event of the queue, not of a bio or request: S, P. */
void obs_note(struct rq_queue *q, unsigned act, uint64_t depth)
{
	if (!(atomic_load_explicit(&q->obs_flags, memory_order_relaxed) & OBS_TRACE))
		return;
	if (act == TA_UNPLUG_IO)
		trace_event_pdu(q, 0, 0, act | act_category(act), depth);
	else
		trace_event(q, 0, 0, act | act_category(act), 0);
}

void obs_unplug(struct rq_queue *q, const struct rq_list_node *list)
{
	uint64_t depth = 0;

	for (const struct rq_list_node *n = list->next; n != list; n = n->next)
		depth++;
	obs_note(q, TA_UNPLUG_IO, depth);
}

TRACE_INLINE void trace_complete_rq(struct rq_request *rq, rq_status_t status, unsigned bytes)
{
	trace_event(rq->q, rq->sector, bytes,
		    TA_COMPLETE | TC_ACT(TC_COMPLETE) | rw_category(rq->op, rq->opf) | TC_ACT(TC_FS),
		    status ? (uint16_t)rq_status_to_errno(status) : 0);
}

/* obs_complete() with iostats on: count, then trace if @f says so. */
static void __attribute__((noinline)) iostat_complete(struct rq_request *rq, rq_status_t status,
						      unsigned bytes, unsigned flags, unsigned f)
{
	struct rq_queue *q = rq->q;
	unsigned grp = op_group(rq->op);

	if (grp != RQ_LAT_FLUSH && bytes && !(flags & OBS_C_STEP))
		stat_add(q, ST_DS_SECTORS + grp, bytes >> RQ_SECTOR_SHIFT);
	if ((flags & (OBS_C_DONE | OBS_C_STEP)) && rq_priv(rq)->obs_started)
		iostat_left(rq);
	/* an RQ_OP_FLUSH bio's own request is not counted: its flush request is */
	if ((rq->rq_flags & RQ_RQF_FLUSH_INTERNAL) ||
	    ((flags & OBS_C_DONE) && grp != RQ_LAT_FLUSH))
		iostat_done(rq, grp);
	if ((f & OBS_TRACE) && !(flags & OBS_C_QUIET))
		trace_complete_rq(rq, status, bytes);
}

void obs_complete(struct rq_request *rq, rq_status_t status, unsigned bytes, unsigned flags)
{
	struct rq_queue *q = rq->q;
	unsigned f = atomic_load_explicit(&q->obs_flags, memory_order_relaxed);

	if (unlikely(f & OBS_IOSTAT))
		iostat_complete(rq, status, bytes, flags, f);
	else if ((f & OBS_TRACE) && !(flags & OBS_C_QUIET))
		trace_complete_rq(rq, status, bytes);
}

/* (hot: a traced request's C; a point that only traces ends in a tail call) */
void __attribute__((hot)) obs_complete_all(struct rq_request *rq, rq_status_t status,
					   unsigned flags)
{
	struct rq_queue *q = rq->q;

	if (likely(atomic_load_explicit(&q->obs_flags, memory_order_relaxed) == OBS_TRACE) &&
	    !(flags & OBS_C_QUIET)) {
		uint32_t action = TA_COMPLETE | TC_ACT(TC_COMPLETE) | TC_ACT(TC_FS) |
				  rw_category(rq->op, rq->opf);
		uint32_t error = status ? (uint16_t)rq_status_to_errno(status) : 0;

		/* trace_event() with the event's own slot inline: no call more */
		if (unlikely(obs_tls.step.q == q))
			trace_event_step(q, rq->sector, rq->bytes, action, error);
		else
			event_new(q, rq->sector, rq->bytes, action, error, NULL);
	} else
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
	if (q->obs)
		atomic_store(&q->obs->act_mask, TRACE_ACTS_ALL);
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
