/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The mock multi-queue driver (see mock_driver.h).
 *
 * Locking: m->lock guards the mock's bookkeeping only.  It is never held
 * while calling into librequest, because ending a request may re-run the
 * queue and call queue_rq again on the same thread.
 */
#include <errno.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "fixtures.h"
#include "mock_driver.h"

/* Private state that does not belong in the public struct. */
/* Hardware queues whose dispatchers the mock tells apart (more share slots). */
#define MOCK_MAX_HW_QUEUES 64

struct mock_priv {
	struct mock_dev m;            /* first: container_of by cast */
	struct rq_mq_ops ops;
	/* THREAD mode: requests waiting for the mock thread */
	struct rq_request **pending;
	unsigned nr_pending, max_pending;
	bool thread_started;
	bool draining;                /* mock_destroy: complete inline from now on */
	unsigned long queue_rqs_calls;
	unsigned long life[MOCK_POLL + 1]; /* init/exit counts */
	int budget_min;               /* lowest budget_used ever seen */
	int budget_max;               /* highest budget_used ever seen */
	/*
	 * The core runs one dispatcher per hardware queue at a time: calls of
	 * queue_rq / queue_rqs in progress per hw queue, and how often one
	 * started while another was in progress (mock_destroy asserts 0).
	 */
	_Atomic int issuing[MOCK_MAX_HW_QUEUES];
	_Atomic unsigned long overlaps;
};

/* A dispatcher of @hctx enters the driver / leaves it. */
static void issue_enter(struct mock_priv *p, struct rq_hw_ctx *hctx)
{
	unsigned i = rq_hctx_index(hctx) % MOCK_MAX_HW_QUEUES;

	if (atomic_fetch_add(&p->issuing[i], 1) != 0)
		atomic_fetch_add(&p->overlaps, 1);
}

static void issue_exit(struct mock_priv *p, struct rq_hw_ctx *hctx)
{
	atomic_fetch_sub(&p->issuing[rq_hctx_index(hctx) % MOCK_MAX_HW_QUEUES], 1);
}

static struct mock_priv *to_priv(struct mock_dev *m)
{
	return (struct mock_priv *)m;
}

static struct mock_dev *dev_of_queue(struct rq_queue *q)
{
	return rq_queue_driver_data(q);
}

static struct mock_dev *dev_of_rq(struct rq_request *rq)
{
	return dev_of_queue(rq->q);
}

/* Append an event, with the hw queue it concerns; m->lock held. */
static struct mock_event *record_locked(struct mock_dev *m, enum mock_call call,
					struct rq_hw_ctx *hctx, struct rq_request *rq)
{
	struct mock_event *ev = recorder_add_locked(&m->rec, call, rq);

	if (hctx)
		ev->hctx = rq_hctx_index(hctx);
	else if (rq && rq->hctx)
		ev->hctx = rq_hctx_index(rq->hctx);
	return ev;
}

static void record(struct mock_dev *m, enum mock_call call, struct rq_hw_ctx *hctx,
		   struct rq_request *rq)
{
	pthread_mutex_lock(&m->lock);
	record_locked(m, call, hctx, rq);
	pthread_mutex_unlock(&m->lock);
}

static void push(struct rq_request ***arr, unsigned *nr, unsigned *max, struct rq_request *rq)
{
	if (*nr == *max) {
		*max = *max ? *max * 2 : 64;
		*arr = fixture_realloc(*arr, *max * sizeof(**arr));
	}
	(*arr)[(*nr)++] = rq;
}

/* End @rq as the device would: data first (only on success), then the core. */
static void finish_rq(struct mock_dev *m, struct rq_request *rq, rq_status_t status)
{
	if (status == RQ_STS_OK)
		status = fixture_move_data(m->mem, m->cfg.mem_bytes, rq, rq->bytes);
	pthread_mutex_lock(&m->lock);
	m->completions++;
	pthread_mutex_unlock(&m->lock);
	if (m->cfg.use_complete)
		rq_mq_complete_request(rq, status);
	else
		rq_mq_end_request(rq, status);
}

static unsigned rng_next_locked(struct mock_dev *m)
{
	if (!m->rng)
		m->rng = 2463534242u;
	return fx_xorshift32(&m->rng);
}

/*
 * Take an accepted request according to the completion mode.  Called with
 * m->lock held; returns with it released.
 */
static void accept_unlock(struct mock_dev *m, struct rq_request *rq)
{
	struct mock_priv *p = to_priv(m);

	if (m->cfg.completion == MOCK_COMPLETE_DEFER && !p->draining) {
		push(&m->held, &m->nr_held, &m->max_held, rq);
		pthread_mutex_unlock(&m->lock);
	} else if (m->cfg.completion == MOCK_COMPLETE_THREAD && p->thread_started &&
		   !m->thread_stop) {
		push(&p->pending, &p->nr_pending, &p->max_pending, rq);
		pthread_cond_broadcast(&m->cond);
		pthread_mutex_unlock(&m->lock);
	} else {
		pthread_mutex_unlock(&m->lock);
		finish_rq(m, rq, RQ_STS_OK);
	}
}

/* ------------------------------------------------------------------ ops */

static rq_status_t mock_queue_rq(struct rq_hw_ctx *hctx, struct rq_request *rq, bool last)
{
	struct mock_dev *m = dev_of_queue(rq_hctx_queue(hctx));
	struct mock_event *ev;
	rq_status_t ret = RQ_STS_OK;

	issue_enter(to_priv(m), hctx);
	pthread_mutex_lock(&m->lock);
	recorder_walk_locked(&m->rec, rq);
	ev = record_locked(m, MOCK_QUEUE_RQ, hctx, rq);
	ev->last = last;
	m->queue_rq_calls++;
	if (m->script_len) {
		ret = m->script[m->script_head];
		m->script_head = (m->script_head + 1) % 64;
		m->script_len--;
	} else if (m->cfg.resource_permille &&
		   rng_next_locked(m) % 1000 < m->cfg.resource_permille) {
		ret = RQ_STS_RESOURCE;
	}
	ev->ret = ret;
	if (ret != RQ_STS_OK) {
		pthread_mutex_unlock(&m->lock);
		issue_exit(to_priv(m), hctx);
		return ret;
	}
	accept_unlock(m, rq);
	/* @rq may be gone now: do not touch it. */
	issue_exit(to_priv(m), hctx);
	return RQ_STS_OK;
}

static void mock_queue_rqs(struct rq_hw_ctx *hctx, struct rq_request **list)
{
	struct mock_dev *m = dev_of_queue(rq_hctx_queue(hctx));
	struct rq_request *rq, *next;

	issue_enter(to_priv(m), hctx);
	pthread_mutex_lock(&m->lock);
	to_priv(m)->queue_rqs_calls++;
	pthread_mutex_unlock(&m->lock);
	rq = *list;
	*list = NULL;
	for (; rq; rq = next) {
		struct mock_event *ev;

		next = rq->rq_next;
		pthread_mutex_lock(&m->lock);
		ev = record_locked(m, MOCK_QUEUE_RQS, hctx, rq);
		ev->last = next == NULL;
		ev->ret = RQ_STS_OK;
		accept_unlock(m, rq);
	}
	issue_exit(to_priv(m), hctx);
}

static void mock_commit_rqs(struct rq_hw_ctx *hctx)
{
	record(dev_of_queue(rq_hctx_queue(hctx)), MOCK_COMMIT_RQS, hctx, NULL);
}

static bool mock_get_budget(struct rq_queue *q)
{
	struct mock_dev *m = dev_of_queue(q);
	struct mock_priv *p = to_priv(m);
	struct mock_event *ev;
	bool ok;

	pthread_mutex_lock(&m->lock);
	ev = record_locked(m, MOCK_GET_BUDGET, NULL, NULL);
	ok = m->budget_used < (int)m->cfg.budget_depth;
	if (ok) {
		m->budget_used++;
		if (m->budget_used > p->budget_max)
			p->budget_max = m->budget_used;
	}
	ev->ret = ok ? RQ_STS_OK : RQ_STS_RESOURCE;
	pthread_mutex_unlock(&m->lock);
	return ok;
}

static void mock_put_budget(struct rq_queue *q)
{
	struct mock_dev *m = dev_of_queue(q);
	struct mock_priv *p = to_priv(m);

	pthread_mutex_lock(&m->lock);
	record_locked(m, MOCK_PUT_BUDGET, NULL, NULL);
	m->budget_used--;
	if (m->budget_used < p->budget_min)
		p->budget_min = m->budget_used;
	pthread_mutex_unlock(&m->lock);
}

static enum rq_timeout_ret mock_timeout(struct rq_request *rq)
{
	struct mock_dev *m = dev_of_rq(rq);

	pthread_mutex_lock(&m->lock);
	record_locked(m, MOCK_TIMEOUT, NULL, rq);
	m->timeouts++;
	pthread_mutex_unlock(&m->lock);
	return m->cfg.timeout_ret;
}

static void mock_complete_op(struct rq_request *rq)
{
	struct mock_dev *m = dev_of_rq(rq);

	record(m, MOCK_COMPLETE, NULL, rq);
	rq_mq_end_request(rq, rq_mq_complete_status(rq));
}

static void count_life(struct mock_dev *m, enum mock_call call)
{
	pthread_mutex_lock(&m->lock);
	to_priv(m)->life[call]++;
	pthread_mutex_unlock(&m->lock);
}

static int mock_init_hctx(struct rq_hw_ctx *hctx, void *set_data, unsigned idx)
{
	count_life(set_data, MOCK_INIT_HCTX);
	return 0;
}

static void mock_exit_hctx(struct rq_hw_ctx *hctx, unsigned idx)
{
	count_life(dev_of_queue(rq_hctx_queue(hctx)), MOCK_EXIT_HCTX);
}

static int mock_init_request(struct rq_tag_set *set, struct rq_request *rq,
			     unsigned hctx_idx, int numa_node)
{
	count_life(rq_tag_set_driver_data(set), MOCK_INIT_REQUEST);
	return 0;
}

static void mock_exit_request(struct rq_tag_set *set, struct rq_request *rq, unsigned hctx_idx)
{
	count_life(rq_tag_set_driver_data(set), MOCK_EXIT_REQUEST);
}

/* THREAD mode: end whatever queue_rq accepted, soon after. */
static void *mock_thread(void *arg)
{
	struct mock_dev *m = arg;
	struct mock_priv *p = to_priv(m);
	struct rq_request **batch = NULL;
	unsigned nr, max = 0;

	pthread_mutex_lock(&m->lock);
	for (;;) {
		while (!p->nr_pending && !m->thread_stop)
			pthread_cond_wait(&m->cond, &m->lock);
		if (!p->nr_pending && m->thread_stop)
			break;
		nr = p->nr_pending;
		if (nr > max) {
			max = nr;
			batch = fixture_realloc(batch, max * sizeof(*batch));
		}
		memcpy(batch, p->pending, nr * sizeof(*batch));
		p->nr_pending = 0;
		pthread_mutex_unlock(&m->lock);
		for (unsigned i = 0; i < nr; i++)
			finish_rq(m, batch[i], RQ_STS_OK);
		pthread_mutex_lock(&m->lock);
	}
	pthread_mutex_unlock(&m->lock);
	free(batch);
	return NULL;
}

/* ------------------------------------------------------------ lifecycle */

struct mock_dev *mock_create(const struct mock_config *cfg, const struct rq_queue_config *qcfg)
{
	struct mock_priv *p = calloc(1, sizeof(*p));
	struct mock_dev *m;
	struct rq_tag_set_config scfg;
	struct rq_queue_config qc;
	pthread_condattr_t ca;
	int ret;

	assert_non_null(p);
	m = &p->m;
	if (cfg)
		m->cfg = *cfg;
	if (!m->cfg.nr_hw_queues)
		m->cfg.nr_hw_queues = 1;
	if (!m->cfg.queue_depth)
		m->cfg.queue_depth = 64;
	pthread_mutex_init(&m->lock, NULL);
	recorder_init(&m->rec, &m->lock);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&m->cond, &ca);
	pthread_condattr_destroy(&ca);
	m->rng = 0x9e3779b9u;
	if (m->cfg.mem_bytes) {
		m->mem = calloc(1, m->cfg.mem_bytes);
		assert_non_null(m->mem);
	}

	p->ops = (struct rq_mq_ops){
		RQ_MQ_OPS_INIT,
		.queue_rq = mock_queue_rq,
		.commit_rqs = mock_commit_rqs,
		.init_hctx = mock_init_hctx,
		.exit_hctx = mock_exit_hctx,
		.init_request = mock_init_request,
		.exit_request = mock_exit_request,
	};
	if (m->cfg.use_queue_rqs)
		p->ops.queue_rqs = mock_queue_rqs;
	if (m->cfg.use_budget) {
		p->ops.get_budget = mock_get_budget;
		p->ops.put_budget = mock_put_budget;
	}
	if (m->cfg.use_complete)
		p->ops.complete = mock_complete_op;
	if (m->cfg.use_timeout)
		p->ops.timeout = mock_timeout;

	memset(&scfg, 0, sizeof(scfg));

	scfg.size = sizeof(scfg);
	scfg.ops = &p->ops;
	scfg.nr_hw_queues = m->cfg.nr_hw_queues;
	scfg.queue_depth = m->cfg.queue_depth;
	scfg.reserved_tags = m->cfg.reserved_tags;
	scfg.cmd_size = 16;
	scfg.numa_node = -1;
	scfg.timeout_ms = m->cfg.timeout_ms;
	scfg.flags = m->cfg.flags;
	scfg.driver_data = m;
	ret = rq_tag_set_alloc(&scfg, &m->set);
	assert_int_equal(ret, 0);
	assert_non_null(m->set);

	if (qcfg)
		qc = *qcfg;
	else
		memset(&qc, 0, sizeof(qc));
	qc.size = sizeof(qc);
	qc.queuedata = m;
	if (!qc.capacity)
		qc.capacity = m->cfg.mem_bytes ? m->cfg.mem_bytes >> RQ_SECTOR_SHIFT
					       : (1ull << 30) >> RQ_SECTOR_SHIFT;
	ret = rq_mq_alloc_queue(m->set, &qc, &m->q);
	assert_int_equal(ret, 0);
	assert_non_null(m->q);

	if (m->cfg.completion == MOCK_COMPLETE_THREAD) {
		ret = pthread_create(&m->thread, NULL, mock_thread, m);
		assert_int_equal(ret, 0);
		pthread_mutex_lock(&m->lock);
		p->thread_started = true;
		pthread_mutex_unlock(&m->lock);
	}
	return m;
}

struct mock_dev *mock_create_unmerged(enum mock_completion how, unsigned nr_hw_queues,
				      unsigned depth, const char *sched)
{
	struct rq_queue_config qcfg = { RQ_QUEUE_CONFIG_INIT, .scheduler = sched };
	struct mock_config cfg;
	struct mock_dev *m;

	memset(&cfg, 0, sizeof(cfg));
	cfg.completion = how;
	cfg.nr_hw_queues = nr_hw_queues;
	cfg.queue_depth = depth;
	m = mock_create(&cfg, &qcfg);
	assert_int_equal(rq_queue_attr_set(m->q, "nomerges", "2"), 0);
	return m;
}

void mock_destroy(struct mock_dev *m)
{
	struct mock_priv *p = to_priv(m);

	if (!m)
		return;
	/* From now on DEFER completes inline, so teardown never waits on us. */
	pthread_mutex_lock(&m->lock);
	p->draining = true;
	pthread_mutex_unlock(&m->lock);
	while (mock_nr_held(m))
		mock_complete_all(m, RQ_STS_OK);
	rq_queue_destroy(m->q);
	if (atomic_load(&p->overlaps))
		fail_msg("queue_rq ran for one hardware queue on two threads at once (%lu times)",
			 (unsigned long)atomic_load(&p->overlaps));
	if (m->cfg.completion == MOCK_COMPLETE_THREAD) {
		pthread_mutex_lock(&m->lock);
		m->thread_stop = true;
		pthread_cond_broadcast(&m->cond);
		pthread_mutex_unlock(&m->lock);
		pthread_join(m->thread, NULL);
	}
	rq_tag_set_free(m->set);
	pthread_mutex_destroy(&m->lock);
	pthread_cond_destroy(&m->cond);
	recorder_free(&m->rec);
	free(m->held);
	free(p->pending);
	free(m->mem);
	free(p);
}

/* ------------------------------------------------------- test controls */

void mock_script(struct mock_dev *m, const rq_status_t *sts, unsigned n)
{
	pthread_mutex_lock(&m->lock);
	for (unsigned i = 0; i < n; i++) {
		assert_true(m->script_len < 64);
		m->script[(m->script_head + m->script_len) % 64] = sts[i];
		m->script_len++;
	}
	pthread_mutex_unlock(&m->lock);
}

unsigned mock_nr_held(struct mock_dev *m)
{
	unsigned n;

	pthread_mutex_lock(&m->lock);
	n = m->nr_held;
	pthread_mutex_unlock(&m->lock);
	return n;
}

struct rq_request *mock_held(struct mock_dev *m, unsigned i)
{
	struct rq_request *rq = NULL;

	pthread_mutex_lock(&m->lock);
	if (i < m->nr_held)
		rq = m->held[i];
	pthread_mutex_unlock(&m->lock);
	return rq;
}

struct rq_request *mock_take_held(struct mock_dev *m, unsigned i)
{
	struct rq_request *rq = NULL;

	pthread_mutex_lock(&m->lock);
	if (i < m->nr_held) {
		rq = m->held[i];
		memmove(&m->held[i], &m->held[i + 1], (m->nr_held - i - 1) * sizeof(*m->held));
		m->nr_held--;
	}
	pthread_mutex_unlock(&m->lock);
	return rq;
}

void mock_complete_one(struct mock_dev *m, unsigned i, rq_status_t status)
{
	struct rq_request *rq = mock_take_held(m, i);

	assert_non_null(rq);
	finish_rq(m, rq, status);
}

void mock_finish(struct mock_dev *m, struct rq_request *rq, rq_status_t status)
{
	finish_rq(m, rq, status);
}

unsigned mock_complete_all(struct mock_dev *m, rq_status_t status)
{
	struct rq_request **batch;
	unsigned nr;

	pthread_mutex_lock(&m->lock);
	nr = m->nr_held;
	batch = m->held;
	m->held = NULL;
	m->nr_held = m->max_held = 0;
	pthread_mutex_unlock(&m->lock);
	for (unsigned i = 0; i < nr; i++)
		finish_rq(m, batch[i], status);
	free(batch);
	return nr;
}

unsigned mock_count(struct mock_dev *m, enum mock_call call)
{
	unsigned n;

	switch (call) {
	case MOCK_INIT_HCTX:
	case MOCK_EXIT_HCTX:
	case MOCK_INIT_REQUEST:
	case MOCK_EXIT_REQUEST:
		pthread_mutex_lock(&m->lock);
		n = to_priv(m)->life[call];
		pthread_mutex_unlock(&m->lock);
		return n;
	default:
		return recorder_count(&m->rec, call);
	}
}

struct mock_event mock_event(struct mock_dev *m, unsigned i)
{
	struct mock_event ev;

	assert_true(recorder_find(&m->rec, RECORDER_ALL, i, &ev));
	return ev;
}

unsigned mock_nr_events(struct mock_dev *m)
{
	return recorder_count(&m->rec, RECORDER_ALL);
}

bool mock_find(struct mock_dev *m, enum mock_call call, unsigned i, struct mock_event *out)
{
	return recorder_find(&m->rec, call, i, out);
}

unsigned mock_copy_events(struct mock_dev *m, enum mock_call call, struct mock_event **out)
{
	return recorder_copy(&m->rec, call, out);
}

void mock_reset_events(struct mock_dev *m)
{
	recorder_reset(&m->rec);
}

unsigned long mock_queue_rqs_calls(struct mock_dev *m)
{
	unsigned long n;

	pthread_mutex_lock(&m->lock);
	n = to_priv(m)->queue_rqs_calls;
	pthread_mutex_unlock(&m->lock);
	return n;
}

void mock_budget_range(struct mock_dev *m, int *used, int *min, int *max)
{
	pthread_mutex_lock(&m->lock);
	if (used)
		*used = m->budget_used;
	if (min)
		*min = to_priv(m)->budget_min;
	if (max)
		*max = to_priv(m)->budget_max;
	pthread_mutex_unlock(&m->lock);
}

static void deadline_in(struct timespec *ts, unsigned ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

bool mock_wait_held(struct mock_dev *m, unsigned n, unsigned timeout_ms)
{
	return FX_WAIT_FOR(mock_nr_held(m) >= n, timeout_ms);
}

bool mock_wait_count(struct mock_dev *m, enum mock_call call, unsigned n, unsigned timeout_ms)
{
	return FX_WAIT_FOR(mock_count(m, call) >= n, timeout_ms);
}

/* --------------------------------------------------------- synchronous io */

static void mock_io_end(struct rq_bio *bio)
{
	struct mock_io *io = bio->private_data;

	pthread_mutex_lock(&io->lock);
	io->done++;
	io->status = bio->status;
	pthread_cond_broadcast(&io->cond);
	pthread_mutex_unlock(&io->lock);
}

void mock_io_init(struct mock_io *io)
{
	pthread_condattr_t ca;

	memset(io, 0, sizeof(*io));
	pthread_mutex_init(&io->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&io->cond, &ca);
	pthread_condattr_destroy(&ca);
}

rq_bio_end_io_t mock_io_end_fn(void)
{
	return mock_io_end;
}

struct rq_bio *mock_bio(struct mock_io *io, unsigned op, uint64_t sector, void *buf, uint32_t len)
{
	struct rq_bio *bio;

	mock_io_init(io);
	bio = rq_bio_alloc(1);
	assert_non_null(bio);
	bio->op = op;
	bio->iter.sector = sector;
	if (buf && len)
		assert_int_equal(rq_bio_add_vec(bio, buf, len), 0);
	bio->iter.size = len;
	bio->end_io = mock_io_end;
	bio->private_data = io;
	io->bio = bio;
	return bio;
}

bool mock_io_wait_timeout(struct mock_io *io, unsigned timeout_ms)
{
	struct timespec ts;
	bool done;

	deadline_in(&ts, timeout_ms);
	pthread_mutex_lock(&io->lock);
	while (!io->done) {
		if (pthread_cond_timedwait(&io->cond, &io->lock, &ts) == ETIMEDOUT)
			break;
	}
	done = io->done > 0;
	pthread_mutex_unlock(&io->lock);
	return done;
}

void mock_wait(struct mock_io *io)
{
	int done;

	mock_io_wait_timeout(io, 10000);
	pthread_mutex_lock(&io->lock);
	done = io->done;
	pthread_mutex_unlock(&io->lock);
	assert_int_equal(done, 1);
	if (io->bio) {
		rq_bio_put(io->bio);
		io->bio = NULL;
	}
}

rq_status_t mock_rw(struct mock_dev *m, unsigned op, uint64_t sector, void *buf, uint32_t len)
{
	struct mock_io io;

	rq_submit_bio(m->q, mock_bio(&io, op, sector, buf, len));
	mock_wait(&io);
	return io.status;
}

void mock_walk_stats(struct mock_dev *m, unsigned *max_pieces, unsigned long *bad_requests)
{
	recorder_walk_stats(&m->rec, max_pieces, bad_requests);
}
