/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A mock multi-queue driver for tests: records every call in order, answers
 * queue_rq as the test scripts it, completes inline or keeps requests for the
 * test to complete, and optionally backs the device with memory.
 */
#ifndef RQ_TEST_MOCK_DRIVER_H
#define RQ_TEST_MOCK_DRIVER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <librequest/librequest.h>

#include "recorder.h"

/* enum mock_call and struct mock_event: recorder.h */

enum mock_completion {
	MOCK_COMPLETE_INLINE,  /* rq_mq_end_request() inside queue_rq */
	MOCK_COMPLETE_DEFER,   /* kept; the test calls mock_complete_*() */
	MOCK_COMPLETE_THREAD,  /* a mock thread ends them soon after */
};

struct mock_config {
	unsigned nr_hw_queues;     /* default 1 */
	unsigned queue_depth;      /* default 64 */
	unsigned reserved_tags;
	unsigned flags;            /* RQ_TAG_SET_* */
	unsigned timeout_ms;       /* 0: default */
	enum mock_completion completion;
	uint64_t mem_bytes;        /* > 0: memory backed device of this size */
	bool use_queue_rqs;        /* provide the batch hook */
	bool use_budget;           /* provide get/put_budget with budget_depth */
	unsigned budget_depth;
	bool use_complete;         /* provide ops->complete (ends the request) */
	bool use_timeout;          /* provide ops->timeout (answers timeout_ret) */
	enum rq_timeout_ret timeout_ret;
	/* random RESOURCE: 0..1000 per mille of queue_rq calls */
	unsigned resource_permille;
};

struct mock_dev {
	struct mock_config cfg;
	struct rq_tag_set *set;
	struct rq_queue *q;
	pthread_mutex_t lock;        /* guards everything below */
	struct recorder rec;         /* every call, in order */
	/* scripted answers for the next queue_rq calls (FIFO), then RQ_STS_OK */
	rq_status_t script[64];
	unsigned script_head, script_len;
	/* deferred requests, in arrival order */
	struct rq_request **held;
	unsigned nr_held, max_held;
	unsigned long queue_rq_calls, completions, timeouts;
	uint8_t *mem;                /* memory backing */
	int budget_used;
	pthread_t thread;
	bool thread_stop;
	pthread_cond_t cond;
	unsigned rng;
};

/**
 * mock_create() - a tag set and one queue over the mock driver.
 * @cfg: driver set-up (NULL: defaults).
 * @qcfg: queue config (NULL: defaults; capacity defaults to mem_bytes or 1 GiB).
 * Return: the device; asserts (cmocka) on failure.
 */
struct mock_dev *mock_create(const struct mock_config *cfg, const struct rq_queue_config *qcfg);
/**
 * mock_create_unmerged() - mock_create() for tests that count requests: a
 * queue of @depth tags on @nr_hw_queues hw queues, completion @how,
 * scheduler @sched, nomerges 2 (every bio its own request).
 */
struct mock_dev *mock_create_unmerged(enum mock_completion how, unsigned nr_hw_queues,
				      unsigned depth, const char *sched);
/** mock_destroy() - destroy the queue (ending what is held) and the tag set. */
void mock_destroy(struct mock_dev *m);

/** mock_script() - the next queue_rq calls answer these statuses, in order. */
void mock_script(struct mock_dev *m, const rq_status_t *sts, unsigned n);

/** mock_nr_held() - requests kept in DEFER mode. */
unsigned mock_nr_held(struct mock_dev *m);
/** mock_complete_one() - end held request @i (0 = oldest) with @status. */
void mock_complete_one(struct mock_dev *m, unsigned i, rq_status_t status);
/** mock_complete_all() - end every held request with @status; returns how many. */
unsigned mock_complete_all(struct mock_dev *m, rq_status_t status);
/** mock_held() - held request @i. */
struct rq_request *mock_held(struct mock_dev *m, unsigned i);

/** mock_count() - recorded calls of kind @call. */
unsigned mock_count(struct mock_dev *m, enum mock_call call);
/** mock_event() - recorded event @i (copy). */
struct mock_event mock_event(struct mock_dev *m, unsigned i);
/** mock_reset_events() - forget recorded events. */
void mock_reset_events(struct mock_dev *m);

/* Synchronous helpers: submit and wait for end_io. */
struct mock_io {
	struct rq_bio *bio;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int done;               /* times end_io ran (must end at 1) */
	rq_status_t status;
};
/** mock_bio() - a bio from the cache for @op at @sector over @buf/@len (end_io counts into @io). */
struct rq_bio *mock_bio(struct mock_io *io, unsigned op, uint64_t sector, void *buf, uint32_t len);
/** mock_wait() - wait until @io ended (asserts it ended exactly once within 10 s). */
void mock_wait(struct mock_io *io);
/** mock_rw() - submit one bio and wait; returns its status. */
rq_status_t mock_rw(struct mock_dev *m, unsigned op, uint64_t sector, void *buf, uint32_t len);

/* ------------------------------------------------------------------ additions
 *
 * Notes on recording:
 * - init/exit_hctx and init/exit_request are counted, not logged as events:
 *   mock_count() returns their counts since mock_create() (never reset).
 * - get_budget events have ret RQ_STS_OK when granted, RQ_STS_RESOURCE when not.
 * - queue_rqs logs one MOCK_QUEUE_RQS event per request of the batch (fields of
 *   the request, last set on the final one); mock_queue_rqs_calls() counts
 *   the calls.  m->queue_rq_calls counts queue_rq calls only.
 * - data moves (memory backing) only when a request ends with RQ_STS_OK.
 * - from mock_destroy() on, DEFER mode completes inline.
 */

/** mock_nr_events() - events recorded since the last reset. */
unsigned mock_nr_events(struct mock_dev *m);
/** mock_find() - the @i-th (0-based) recorded event of kind @call; false if none. */
bool mock_find(struct mock_dev *m, enum mock_call call, unsigned i, struct mock_event *out);
/** mock_copy_events() - malloc'ed copy of all events of kind @call (free it); returns count. */
unsigned mock_copy_events(struct mock_dev *m, enum mock_call call, struct mock_event **out);
/** mock_take_held() - remove held request @i from the list without ending it (NULL if none). */
struct rq_request *mock_take_held(struct mock_dev *m, unsigned i);
/** mock_finish() - end @rq as the device would (data copy on OK, counted, complete/end). */
void mock_finish(struct mock_dev *m, struct rq_request *rq, rq_status_t status);
/** mock_queue_rqs_calls() - how many times queue_rqs was called. */
unsigned long mock_queue_rqs_calls(struct mock_dev *m);
/** mock_budget_range() - budget in use now, lowest and highest values it had. */
void mock_budget_range(struct mock_dev *m, int *used, int *min, int *max);
/** mock_wait_held() - wait until at least @n requests are held; false on timeout. */
bool mock_wait_held(struct mock_dev *m, unsigned n, unsigned timeout_ms);
/** mock_wait_count() - wait until at least @n events of @call were logged; false on timeout. */
bool mock_wait_count(struct mock_dev *m, enum mock_call call, unsigned n, unsigned timeout_ms);
/** mock_io_init() - initialise @io (mock_bio() does it) for a bio built by hand. */
void mock_io_init(struct mock_io *io);
/** mock_io_end_fn() - the end_io mock_bio() uses (bio->private_data = the mock_io). */
rq_bio_end_io_t mock_io_end_fn(void);
/** mock_io_wait_timeout() - wait up to @timeout_ms for @io to end; true if it did (no assert). */
bool mock_io_wait_timeout(struct mock_io *io, unsigned timeout_ms);
/**
 * mock_walk_stats() - queue_rq walks every READ/WRITE request with
 * rq_req_iter: the most pieces seen in one request, and how many requests'
 * pieces did not add up to rq->bytes.
 */
void mock_walk_stats(struct mock_dev *m, unsigned *max_pieces, unsigned long *bad_requests);

#endif /* RQ_TEST_MOCK_DRIVER_H */
