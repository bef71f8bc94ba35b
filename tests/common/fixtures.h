/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Shared test fixtures: a toy FIFO scheduler ("test-fifo") and small helpers.
 */
#ifndef RQ_TEST_FIXTURES_H
#define RQ_TEST_FIXTURES_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <librequest/librequest.h>

/** Name the FIFO scheduler registers under. */
#define FIXTURE_FIFO_NAME "test-fifo"

/**
 * fixture_register_fifo() - register "test-fifo" once per process (later
 * calls do nothing).  Per hw queue FIFO lists, one sector-sorted tree per
 * queue for front merges, the core's hash for back merges (bio_merge through
 * rq_sched_try_merge, insert merges through rq_sched_try_insert_merge).
 * It has one tunable, "iosched/insert_merge" (0/1, default 1).
 * Return: 0 or the negative errno of rq_sched_register.
 */
int fixture_register_fifo(void);

/** fixture_fifo_stats() - calls seen by every test-fifo instance of the process. */
struct fixture_fifo_stats {
	unsigned long inserted, dispatched, bio_merges, insert_merges, requests_merged;
};
void fixture_fifo_stats(struct fixture_fifo_stats *st);

/** fixture_fill() - a deterministic byte pattern for (@seed, byte offset). */
void fixture_fill(void *buf, uint32_t len, uint32_t seed, uint64_t offset);

/** fixture_now_ms() - CLOCK_MONOTONIC in milliseconds. */
uint64_t fixture_now_ms(void);

/**
 * fx_poll_pause() - what a bounded polling loop does between two looks at
 * state another thread changes: gives the CPU away (sched_yield()).  It
 * never waits for time to pass, so nothing may rely on it for ordering:
 * the loop's condition is the synchronisation, its deadline the bound.
 */
void fx_poll_pause(void);

/** fx_gettid() - the calling thread's kernel id (for fx_wait_blocked()). */
pid_t fx_gettid(void);
/**
 * fx_wait_blocked() - wait until thread *@tid (0 until the thread set it)
 * sleeps in the kernel (state S in /proc) at 20 looks in a row while
 * *@returned stays 0: it is blocked inside the call it makes.  Observable
 * state only; gives up after @timeout_ms.
 * Return: true if it was seen blocked; false on timeout or once *@returned.
 */
bool fx_wait_blocked(const pid_t *tid, const int *returned, unsigned timeout_ms);

/**
 * FX_WAIT_FOR() - poll @cond (fx_poll_pause() between looks) until it holds
 * or @ms of real time passed: the bound that fails a test, never a delay.
 * Evaluates to @cond's last value.
 */
#define FX_WAIT_FOR(cond, ms)                                               \
	({                                                                  \
		uint64_t fx_end_ = fixture_now_ms() + (ms);                 \
		bool fx_ok_;                                                \
		while (!(fx_ok_ = (cond)) && fixture_now_ms() < fx_end_)    \
			fx_poll_pause();                                    \
		fx_ok_;                                                     \
	})

/*
 * A virtual library clock for a test program: installed once with
 * rq_clock_set_source(), it moves only when the test moves it.  With
 * application-driven service (rq_service_manual()) every service deadline
 * is on it.
 */
/** fx_vclock_install() - install the virtual clock, reading @start_ns. */
void fx_vclock_install(uint64_t start_ns);
/** fx_vclock_now() - the virtual clock, ns. */
uint64_t fx_vclock_now(void);
/** fx_vclock_set() - move the virtual clock to @ns (never back: aborts). */
void fx_vclock_set(uint64_t ns);
/**
 * fx_serve_until() - drive the service as an event loop does, up to
 * virtual time @t: call rq_service_run() and move the virtual clock to each
 * time it asks for while that is before @t, then move to @t and do what is
 * due there (fx_service_due()).  Needs fx_vclock_install() and
 * rq_service_manual(); aborts if the service is not application-driven or
 * never settles.
 */
void fx_serve_until(uint64_t t);

/**
 * fx_xorshift32() - the next of a reproducible pseudo-random sequence
 * (xorshift32) whose state is *@state (never 0); stores and returns it.
 */
static inline unsigned fx_xorshift32(unsigned *state)
{
	unsigned x = *state;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return *state = x;
}

/** fixture_realloc() - realloc() that aborts when out of memory (any thread: no cmocka). */
void *fixture_realloc(void *p, size_t n);

/**
 * fixture_move_data() - what a memory-backed test device does with the
 * first @bytes (at most rq->bytes) of @rq: reads and writes copy between
 * the request's pieces and @mem, discards and write-zeroes zero @mem;
 * other ops move nothing.  @mem NULL: nothing to move.
 * Return: RQ_STS_OK, or RQ_STS_IOERR when the range is past @mem_bytes.
 */
rq_status_t fixture_move_data(uint8_t *mem, uint64_t mem_bytes, struct rq_request *rq,
			      uint32_t bytes);

/*
 * Bio records: many bios in flight, each counting its end_io calls.  The
 * bio is not put from end_io (so a second end_io is counted, not a crash);
 * fx_put() gives them back once the test has checked.
 */
struct fx_rec {
	int done;            /* end_io calls (atomic) */
	int status;          /* status at the last end_io */
	struct rq_bio *bio;
	void *arg;           /* for the test */
};

/** fx_bio() - a cache bio over @buf/@len (NULL/len: data-less size) that counts into @rec. */
struct rq_bio *fx_bio(struct fx_rec *rec, unsigned op, uint64_t sector, void *buf, uint32_t len);
/** fx_wait() - wait up to @timeout_ms until every record ended at least once. */
bool fx_wait(struct fx_rec *recs, unsigned n, unsigned timeout_ms);
/**
 * fx_service_due() - in application-driven service (rq_service_manual()),
 * do all the service work due by the library clock now; asserts that it
 * settles (nothing stays due) within 1000 passes, else aborts.
 */
void fx_service_due(void);
/** fx_done() - end_io calls of @rec so far. */
int fx_done(struct fx_rec *rec);
/** fx_put() - give the bios back (after checking). */
void fx_put(struct fx_rec *recs, unsigned n);
/** fx_end_io() - the end_io fx_bio() sets (bio->private_data = the record). */
void fx_end_io(struct rq_bio *bio);

/*
 * A scheduler switch on a thread of its own (a switch freezes the queue, so
 * a test that holds requests or a plug must not make it itself).
 */
struct fx_switch {
	struct rq_queue *q;
	const char *name;
	pthread_t thread;
	int ret;             /* rq_queue_attr_set's answer, once done */
	int done;            /* atomic: the switch returned */
	pid_t tid;           /* atomic: the switching thread (fx_wait_blocked) */
};

/** fx_switch_start() - start switching @q to scheduler @name; asserts the thread started. */
void fx_switch_start(struct fx_switch *s, struct rq_queue *q, const char *name);
/**
 * fx_switch_blocked() - wait (bounded, 10 s) until the switch sleeps inside
 * rq_queue_attr_set without having returned (fx_wait_blocked()).
 */
bool fx_switch_blocked(struct fx_switch *s);
/** fx_switch_done() - has the switch returned? */
bool fx_switch_done(struct fx_switch *s);
/** fx_switch_join() - wait for the switch; its answer (0 or -errno). */
int fx_switch_join(struct fx_switch *s);

#endif /* RQ_TEST_FIXTURES_H */
