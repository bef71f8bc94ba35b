/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A simulated single-queue device for tests: a request_fn driver over a
 * queue of the single-queue front end, with a virtual clock.
 *
 * The device takes requests in request_fn (rq_sq_fetch_request(), or peek +
 * rq_sq_start_tag() when tagged) up to its depth, records each one in
 * dispatch order (as a MOCK_QUEUE_RQ event of recorder.h, with the virtual
 * clock), and ends them according to its mode:
 *
 *   SQ_MODE_INLINE  inside request_fn, lock held (rq_sq_end_request_all_locked);
 *                   with drop_lock the data is moved with the lock dropped
 *   SQ_MODE_HOLD    kept until the test ends them: sq_complete_*(), which take
 *                   no lock and call rq_sq_end_request*() then rq_sq_run_queue()
 *   SQ_MODE_CLOCK   served one after another on the virtual clock, each for
 *                   service_ns (+ seek_ns when it does not start where the
 *                   previous one ended, + ns_per_sector per sector); the test
 *                   moves time with sq_advance()
 *   SQ_MODE_THREAD  a device thread ends them soon after (real concurrency)
 *
 * With mem_bytes the device is backed by memory: data moves when a request
 * (or part of it) ends with RQ_STS_OK.
 *
 * The virtual clock is process wide: sq_create() installs it as the
 * library's clock (rq_clock_set_source) the first time; it starts at 1 s
 * and moves only when a test moves it.
 *
 * Locking: dev->lock guards the device's bookkeeping and is taken inside
 * the queue lock (request_fn) or alone; it is never held while calling
 * into librequest.  Functions below take no queue lock unless they say so;
 * call them without it.
 */
#ifndef RQ_TEST_SQ_DRIVER_H
#define RQ_TEST_SQ_DRIVER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <librequest/librequest.h>

#include "fixtures.h"
#include "recorder.h"

enum sq_mode {
	SQ_MODE_INLINE,
	SQ_MODE_HOLD,
	SQ_MODE_CLOCK,
	SQ_MODE_THREAD,
};

/** struct sq_config - how to build the device and its queue. */
struct sq_config {
	enum sq_mode mode;
	unsigned depth;              /* requests the device holds at once; 0: 1 */
	bool tagged;                 /* TCQ: a tag map of @depth, rq_sq_start_tag() */
	bool drop_lock;              /* INLINE: move data with the queue lock dropped */
	bool driver_lock;            /* give the queue our own lock (else the library's) */
	uint64_t mem_bytes;          /* > 0: memory backed */
	uint64_t capacity;           /* sectors; 0: mem_bytes, or 1 GiB */
	const char *scheduler;       /* NULL: "noop" */
	unsigned nr_requests;        /* request pool; 0: the library's default */
	const struct rq_queue_limits *limits; /* NULL: defaults */
	unsigned timeout_ms;         /* 0: the library's default */
	bool use_timeout;            /* provide the timeout hook, answering timeout_ret */
	enum rq_timeout_ret timeout_ret;
	uint64_t service_ns;         /* CLOCK: per request; 0: 1 ms */
	uint64_t seek_ns;            /* CLOCK: when not sequential to the previous */
	uint64_t ns_per_sector;      /* CLOCK: transfer time */
};

struct sq_dev {
	struct sq_config cfg;
	struct rq_queue *q;
	pthread_mutex_t lock;        /* the device's bookkeeping (see top) */
	pthread_mutex_t qlock;       /* the queue lock with driver_lock */
	uint8_t *mem;                /* memory backing, cfg.mem_bytes */
	struct recorder rec;         /* the requests taken, in order (guarded by lock) */
};

/* --------------------------------------------------------- virtual clock */

/** sq_clock_now() - the virtual clock, ns. */
uint64_t sq_clock_now(void);
/** sq_clock_advance() - move the virtual clock on (does not end requests). */
void sq_clock_advance(uint64_t ns);
/**
 * sq_clock_ticker() - while on, the virtual clock moves on by 1 ms per
 * millisecond of real time (it reads CLOCK_MONOTONIC too; no thread), for tests whose results do not depend on
 * time but whose schedulers wait for it to pass (idling, time slices).
 * Not nested: one on, one off, switched while no I/O runs.
 */
void sq_clock_ticker(bool on);

/* ----------------------------------------------------------- lifecycle */

/** sq_create() - the device and its queue; asserts (cmocka) on failure. */
struct sq_dev *sq_create(const struct sq_config *cfg);
/**
 * sq_create_ret() - as sq_create() but returns rq_sq_alloc_queue's error
 * (0 on success) and *@out, for tests of bad configurations.
 */
int sq_create_ret(const struct sq_config *cfg, struct sq_dev **out);
/**
 * sq_destroy() - end what the device holds (OK), destroy the queue (from
 * then on HOLD/CLOCK end requests inline), stop the thread, free.
 */
void sq_destroy(struct sq_dev *d);

/* ------------------------------------------------------------- control */

/**
 * sq_pause() - while paused, request_fn takes nothing (it still counts its
 * calls).  Unpausing runs the queue.
 */
void sq_pause(struct sq_dev *d, bool paused);
/**
 * sq_set_busy() - the next @calls request_fn calls find the device busy:
 * they take nothing and call rq_sq_delay_queue(q, @delay_ms).
 */
void sq_set_busy(struct sq_dev *d, unsigned calls, unsigned delay_ms);

/** sq_request_fn_calls() - request_fn calls so far. */
unsigned long sq_request_fn_calls(struct sq_dev *d);
/** sq_completions() - requests (or parts) the device ended so far. */
unsigned long sq_completions(struct sq_dev *d);
/** sq_timeouts() - timeout hook calls so far. */
unsigned long sq_timeouts(struct sq_dev *d);

/* ------------------------------------------------------ held requests */

/** sq_nr_held() - requests the device holds (HOLD, CLOCK, THREAD pending). */
unsigned sq_nr_held(struct sq_dev *d);
/** sq_held() - held request @i (0 = the oldest), or NULL. */
struct rq_request *sq_held(struct sq_dev *d, unsigned i);
/** sq_wait_held() - wait until at least @n are held; false after @timeout_ms. */
bool sq_wait_held(struct sq_dev *d, unsigned n, unsigned timeout_ms);
/**
 * sq_complete_one() - end held request @i with @status (all its bytes),
 * then run the queue.  Return: false if there is no such request.
 */
bool sq_complete_one(struct sq_dev *d, unsigned i, rq_status_t status);
/** sq_complete_next() - sq_complete_one(d, 0, status). */
bool sq_complete_next(struct sq_dev *d, rq_status_t status);
/** sq_complete_all() - end every held request with @status; returns how many. */
unsigned sq_complete_all(struct sq_dev *d, rq_status_t status);
/**
 * sq_complete_bytes() - end the first @bytes of held request @i with
 * @status (rq_sq_end_request).  Return: true if bytes remain (it stays
 * held), false once it ended (and the queue was run).
 */
bool sq_complete_bytes(struct sq_dev *d, unsigned i, unsigned bytes, rq_status_t status);
/**
 * sq_drain() - end (OK) what the device holds, and what it takes
 * meanwhile, until every one of @recs (fixtures.h) has ended; fails the
 * test after 10 s.
 */
void sq_drain(struct sq_dev *d, struct fx_rec *recs, unsigned n);
/**
 * sq_requeue() - give held request @i back (rq_sq_requeue_request under the
 * queue lock).  The queue is not run: call rq_sq_run_queue().
 * Return: false if there is no such request.
 */
bool sq_requeue(struct sq_dev *d, unsigned i);

/**
 * sq_advance() - CLOCK mode: move the virtual clock on by @ns, ending each
 * request when its service time is over (the clock stands at its finish
 * time while it ends, and the queue runs, so the next starts then).
 * Return: requests ended.
 */
unsigned sq_advance(struct sq_dev *d, uint64_t ns);
/**
 * sq_run_until_idle() - CLOCK mode: advance until the device holds nothing
 * and nothing is queued, at most @max_ns.  Return: virtual time used.
 */
uint64_t sq_run_until_idle(struct sq_dev *d, uint64_t max_ns);

/* ------------------------------------------------------------- records */

/** sq_nr_events() - requests taken so far. */
unsigned sq_nr_events(struct sq_dev *d);
/** sq_event() - the @i-th request taken (copy); asserts it exists. */
struct mock_event sq_event(struct sq_dev *d, unsigned i);
/** sq_copy_events() - malloc'ed copy of all events (free it); returns the count. */
unsigned sq_copy_events(struct sq_dev *d, struct mock_event **out);
/** sq_reset_events() - forget recorded events. */
void sq_reset_events(struct sq_dev *d);
/**
 * sq_walk_stats() - each data request taken is walked with rq_req_iter: the
 * most pieces seen in one, and how many did not add up to rq->bytes.
 */
void sq_walk_stats(struct sq_dev *d, unsigned *max_pieces, unsigned long *bad_requests);

/* -------------------------------------------------------- synchronous io */

/** sq_rw() - submit one bio over @buf/@len and wait (10 s) for it; its status. */
rq_status_t sq_rw(struct sq_dev *d, unsigned op, uint64_t sector, void *buf, uint32_t len);

#endif /* RQ_TEST_SQ_DRIVER_H */
