/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The simulated single-queue device (see sq_driver.h).
 *
 * Lock order: the queue lock, then dev->lock.  dev->lock is never held
 * while calling into librequest: ending a request may run the queue, and
 * with it request_fn, on the same thread.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "fixtures.h"
#include "mock_driver.h"
#include "sq_driver.h"

/* A request the device holds, and when (CLOCK mode) it is done. */
struct sq_slot {
	struct rq_request *rq;
	uint64_t finish_ns;
};

/* Private state behind the public struct. */
struct sq_priv {
	struct sq_dev d;               /* first: container_of by cast */
	struct rq_sq_ops ops;
	struct sq_slot *held;          /* in the order taken (= finish order) */
	unsigned nr_held, max_held;
	unsigned in_device;            /* held + being ended by the thread */
	unsigned long rfn_calls, completions, timeouts;
	bool paused;
	unsigned busy_calls, busy_delay_ms;
	bool draining;                 /* sq_destroy: end inline from now on */
	uint64_t busy_until;           /* CLOCK: the device is busy until */
	uint64_t last_end_sector;      /* CLOCK: where the head stands */
	pthread_t thread;
	bool thread_started, thread_stop;
	pthread_cond_t cond;
};

static struct sq_priv *to_priv(struct sq_dev *d)
{
	return (struct sq_priv *)d;
}

static struct sq_dev *dev_of(struct rq_queue *q)
{
	return rq_queue_driver_data(q);
}

/* ------------------------------------------------------------ the clock */

/*
 * The virtual clock: vclock_ns while no ticker runs.  While one does
 * (ticker_since != 0, the CLOCK_MONOTONIC ns it started at) it reads
 * vclock_ns plus the real time since then: 1 ms per ms, with no thread.
 */
static _Atomic uint64_t vclock_ns = 1000000000ull;
static _Atomic uint64_t ticker_since;
static pthread_once_t vclock_once = PTHREAD_ONCE_INIT;

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t vclock_read(void *arg)
{
	uint64_t since = atomic_load_explicit(&ticker_since, memory_order_acquire);
	uint64_t v = atomic_load_explicit(&vclock_ns, memory_order_acquire);

	return since ? v + (mono_ns() - since) : v;
}

static void vclock_install(void)
{
	rq_clock_set_source(vclock_read, NULL);
}

uint64_t sq_clock_now(void)
{
	return vclock_read(NULL);
}

/* Move the clock to @ns if that is later. */
static void vclock_to(uint64_t ns)
{
	uint64_t cur = vclock_read(NULL);

	if (cur < ns)
		atomic_fetch_add(&vclock_ns, ns - cur);
}

void sq_clock_advance(uint64_t ns)
{
	atomic_fetch_add(&vclock_ns, ns);
}

void sq_clock_ticker(bool on)
{
	uint64_t since = atomic_load(&ticker_since);

	if (on == !!since)
		return;
	if (on) {
		atomic_store(&ticker_since, mono_ns());
	} else {
		/* fold the real time it ran into the clock, then stop */
		atomic_fetch_add(&vclock_ns, mono_ns() - since);
		atomic_store(&ticker_since, 0);
	}
}

/* ------------------------------------------------------------- the data */

/* Move the first @bytes of @rq's remaining data; the status it ends with. */
static rq_status_t do_data(struct sq_dev *d, struct rq_request *rq, uint32_t bytes)
{
	return fixture_move_data(d->mem, d->cfg.mem_bytes, rq, bytes);
}

static void count_completion(struct sq_dev *d)
{
	pthread_mutex_lock(&d->lock);
	to_priv(d)->completions++;
	pthread_mutex_unlock(&d->lock);
}

/* End all of @rq as the device would; queue lock NOT held. */
static void end_rq(struct sq_dev *d, struct rq_request *rq, rq_status_t status)
{
	if (status == RQ_STS_OK)
		status = do_data(d, rq, rq->bytes);
	count_completion(d);
	rq_sq_end_request_all(rq, status);
}

/* The same with the queue lock held. */
static void end_rq_locked(struct sq_dev *d, struct rq_request *rq, rq_status_t status)
{
	if (status == RQ_STS_OK)
		status = do_data(d, rq, rq->bytes);
	count_completion(d);
	rq_sq_end_request_all_locked(rq, status);
}

/* --------------------------------------------------------- request_fn */

/* Record @rq as taken, and walk it; dev->lock held. */
static void record_locked(struct sq_dev *d, struct rq_request *rq)
{
	recorder_add_locked(&d->rec, MOCK_QUEUE_RQ, rq);
	recorder_walk_locked(&d->rec, rq);
}

static void hold_locked(struct sq_priv *p, struct rq_request *rq, uint64_t finish_ns)
{
	if (p->nr_held == p->max_held) {
		p->max_held = p->max_held ? 2 * p->max_held : 64;
		p->held = fixture_realloc(p->held, p->max_held * sizeof(*p->held));
	}
	p->held[p->nr_held++] = (struct sq_slot){ rq, finish_ns };
	p->in_device++;
}

/* CLOCK mode: when a request taken now will be done.  dev->lock held. */
static uint64_t service_finish_locked(struct sq_priv *p, struct rq_request *rq)
{
	const struct sq_config *c = &p->d.cfg;
	uint64_t now = sq_clock_now();
	uint64_t start = p->busy_until > now ? p->busy_until : now;
	uint64_t cost = c->service_ns ? c->service_ns : 1000000;

	if (rq->sector != p->last_end_sector)
		cost += c->seek_ns;
	cost += c->ns_per_sector * rq_request_sectors(rq);
	p->last_end_sector = rq_request_end_sector(rq);
	p->busy_until = start + cost;
	return p->busy_until;
}

static void sq_request_fn(struct rq_queue *q)
{
	struct sq_dev *d = dev_of(q);
	struct sq_priv *p = to_priv(d);
	struct rq_request *rq;
	unsigned delay = 0;
	bool inline_end;

	pthread_mutex_lock(&d->lock);
	p->rfn_calls++;
	if (p->busy_calls && !p->draining) {
		p->busy_calls--;
		delay = p->busy_delay_ms ? p->busy_delay_ms : 1;
	}
	if (p->paused && !p->draining) {
		pthread_mutex_unlock(&d->lock);
		return;
	}
	pthread_mutex_unlock(&d->lock);
	if (delay) {
		rq_sq_delay_queue(q, delay);
		return;
	}

	for (;;) {
		pthread_mutex_lock(&d->lock);
		inline_end = d->cfg.mode == SQ_MODE_INLINE || p->draining;
		if (!inline_end && !d->cfg.tagged && p->in_device >= d->cfg.depth) {
			pthread_mutex_unlock(&d->lock);
			break;
		}
		pthread_mutex_unlock(&d->lock);

		rq = rq_sq_peek_request(q);
		if (!rq)
			break;
		if (d->cfg.tagged) {
			if (rq_sq_start_tag(q, rq))
				break;  /* every tag busy: an ending request re-runs us */
		} else {
			rq_sq_start_request(rq);
		}

		pthread_mutex_lock(&d->lock);
		record_locked(d, rq);
		if (inline_end) {
			pthread_mutex_unlock(&d->lock);
			if (d->cfg.drop_lock && !p->draining) {
				rq_status_t st;

				rq_sq_unlock(q);
				st = do_data(d, rq, rq->bytes);
				count_completion(d);
				rq_sq_lock(q);
				rq_sq_end_request_all_locked(rq, st);
			} else {
				end_rq_locked(d, rq, RQ_STS_OK);
			}
			continue;
		}
		hold_locked(p, rq, d->cfg.mode == SQ_MODE_CLOCK ? service_finish_locked(p, rq) : 0);
		if (d->cfg.mode == SQ_MODE_THREAD)
			pthread_cond_broadcast(&p->cond);
		pthread_mutex_unlock(&d->lock);
	}
}

static enum rq_timeout_ret sq_timeout_fn(struct rq_request *rq)
{
	struct sq_dev *d = dev_of(rq->q);

	pthread_mutex_lock(&d->lock);
	to_priv(d)->timeouts++;
	pthread_mutex_unlock(&d->lock);
	return d->cfg.timeout_ret;
}

/* THREAD mode: end what request_fn took, soon after, then refill. */
static void *sq_thread(void *arg)
{
	struct sq_dev *d = arg;
	struct sq_priv *p = to_priv(d);
	struct sq_slot *batch = NULL;
	unsigned nr, max = 0;

	pthread_mutex_lock(&d->lock);
	for (;;) {
		while (!p->nr_held && !p->thread_stop)
			pthread_cond_wait(&p->cond, &d->lock);
		if (!p->nr_held && p->thread_stop)
			break;
		nr = p->nr_held;
		if (nr > max) {
			max = nr;
			batch = fixture_realloc(batch, max * sizeof(*batch));
		}
		memcpy(batch, p->held, nr * sizeof(*batch));
		p->nr_held = 0;
		pthread_mutex_unlock(&d->lock);
		for (unsigned i = 0; i < nr; i++) {
			end_rq(d, batch[i].rq, RQ_STS_OK);
			pthread_mutex_lock(&d->lock);
			p->in_device--;
			pthread_mutex_unlock(&d->lock);
		}
		rq_sq_run_queue(d->q);
		pthread_mutex_lock(&d->lock);
	}
	pthread_mutex_unlock(&d->lock);
	free(batch);
	return NULL;
}

/* ----------------------------------------------------------- lifecycle */

int sq_create_ret(const struct sq_config *cfg, struct sq_dev **out)
{
	struct sq_priv *p = calloc(1, sizeof(*p));
	struct rq_sq_config sc;
	struct sq_dev *d;
	int ret;

	assert_non_null(p);
	pthread_once(&vclock_once, vclock_install);
	d = &p->d;
	if (cfg)
		d->cfg = *cfg;
	if (!d->cfg.depth)
		d->cfg.depth = 1;
	pthread_mutex_init(&d->lock, NULL);
	pthread_mutex_init(&d->qlock, NULL);
	recorder_init(&d->rec, &d->lock);
	pthread_cond_init(&p->cond, NULL);
	if (d->cfg.mem_bytes) {
		d->mem = calloc(1, d->cfg.mem_bytes);
		assert_non_null(d->mem);
	}
	p->ops = (struct rq_sq_ops){
		RQ_SQ_OPS_INIT,
		.request_fn = sq_request_fn,
	};
	if (d->cfg.use_timeout)
		p->ops.timeout = sq_timeout_fn;

	memset(&sc, 0, sizeof(sc));

	sc.size = sizeof(sc);
	sc.ops = &p->ops;
	sc.limits = d->cfg.limits;
	sc.capacity = d->cfg.capacity;
	if (!sc.capacity)
		sc.capacity = d->cfg.mem_bytes ? d->cfg.mem_bytes >> RQ_SECTOR_SHIFT
					       : (1ull << 30) >> RQ_SECTOR_SHIFT;
	sc.scheduler = d->cfg.scheduler ? d->cfg.scheduler : "noop";
	sc.nr_requests = d->cfg.nr_requests;
	sc.cmd_size = 16;
	sc.queue_lock = d->cfg.driver_lock ? &d->qlock : NULL;
	sc.timeout_ms = d->cfg.timeout_ms;
	sc.queuedata = d;
	ret = rq_sq_alloc_queue(&sc, &d->q);
	if (ret)
		goto fail;
	if (d->cfg.tagged) {
		rq_sq_lock(d->q);
		ret = rq_sq_init_tags(d->q, d->cfg.depth);
		rq_sq_unlock(d->q);
		if (ret) {
			rq_queue_destroy(d->q);
			goto fail;
		}
	}
	if (d->cfg.mode == SQ_MODE_THREAD) {
		ret = pthread_create(&p->thread, NULL, sq_thread, d);
		assert_int_equal(ret, 0);
		p->thread_started = true;
	}
	*out = d;
	return 0;
fail:
	pthread_mutex_destroy(&d->lock);
	pthread_mutex_destroy(&d->qlock);
	pthread_cond_destroy(&p->cond);
	free(d->mem);
	free(p);
	*out = NULL;
	return ret;
}

struct sq_dev *sq_create(const struct sq_config *cfg)
{
	struct sq_dev *d = NULL;

	assert_int_equal(sq_create_ret(cfg, &d), 0);
	assert_non_null(d);
	return d;
}

void sq_destroy(struct sq_dev *d)
{
	struct sq_priv *p;

	if (!d)
		return;
	p = to_priv(d);
	pthread_mutex_lock(&d->lock);
	p->draining = true;
	p->busy_calls = 0;
	pthread_mutex_unlock(&d->lock);
	if (d->cfg.mode != SQ_MODE_THREAD)
		while (sq_nr_held(d))
			sq_complete_all(d, RQ_STS_OK);
	rq_sq_run_queue(d->q);
	rq_queue_destroy(d->q);
	if (p->thread_started) {
		pthread_mutex_lock(&d->lock);
		p->thread_stop = true;
		pthread_cond_broadcast(&p->cond);
		pthread_mutex_unlock(&d->lock);
		pthread_join(p->thread, NULL);
	}
	pthread_mutex_destroy(&d->lock);
	pthread_mutex_destroy(&d->qlock);
	pthread_cond_destroy(&p->cond);
	recorder_free(&d->rec);
	free(p->held);
	free(d->mem);
	free(p);
}

/* ------------------------------------------------------------- control */

void sq_pause(struct sq_dev *d, bool paused)
{
	pthread_mutex_lock(&d->lock);
	to_priv(d)->paused = paused;
	pthread_mutex_unlock(&d->lock);
	if (!paused)
		rq_sq_run_queue(d->q);
}

void sq_set_busy(struct sq_dev *d, unsigned calls, unsigned delay_ms)
{
	pthread_mutex_lock(&d->lock);
	to_priv(d)->busy_calls = calls;
	to_priv(d)->busy_delay_ms = delay_ms;
	pthread_mutex_unlock(&d->lock);
}

static unsigned long read_counter(struct sq_dev *d, unsigned long *c)
{
	unsigned long v;

	pthread_mutex_lock(&d->lock);
	v = *c;
	pthread_mutex_unlock(&d->lock);
	return v;
}

unsigned long sq_request_fn_calls(struct sq_dev *d)
{
	return read_counter(d, &to_priv(d)->rfn_calls);
}

unsigned long sq_completions(struct sq_dev *d)
{
	return read_counter(d, &to_priv(d)->completions);
}

unsigned long sq_timeouts(struct sq_dev *d)
{
	return read_counter(d, &to_priv(d)->timeouts);
}

/* ------------------------------------------------------ held requests */

unsigned sq_nr_held(struct sq_dev *d)
{
	unsigned n;

	pthread_mutex_lock(&d->lock);
	n = to_priv(d)->nr_held;
	pthread_mutex_unlock(&d->lock);
	return n;
}

struct rq_request *sq_held(struct sq_dev *d, unsigned i)
{
	struct sq_priv *p = to_priv(d);
	struct rq_request *rq = NULL;

	pthread_mutex_lock(&d->lock);
	if (i < p->nr_held)
		rq = p->held[i].rq;
	pthread_mutex_unlock(&d->lock);
	return rq;
}

bool sq_wait_held(struct sq_dev *d, unsigned n, unsigned timeout_ms)
{
	return FX_WAIT_FOR(sq_nr_held(d) >= n, timeout_ms);
}

/* Take held request @i off the list (it stays counted in the device). */
static struct rq_request *take_held(struct sq_dev *d, unsigned i)
{
	struct sq_priv *p = to_priv(d);
	struct rq_request *rq = NULL;

	pthread_mutex_lock(&d->lock);
	if (i < p->nr_held) {
		rq = p->held[i].rq;
		memmove(&p->held[i], &p->held[i + 1], (p->nr_held - i - 1) * sizeof(*p->held));
		p->nr_held--;
	}
	pthread_mutex_unlock(&d->lock);
	return rq;
}

static void leave_device(struct sq_dev *d)
{
	pthread_mutex_lock(&d->lock);
	to_priv(d)->in_device--;
	pthread_mutex_unlock(&d->lock);
}

bool sq_complete_one(struct sq_dev *d, unsigned i, rq_status_t status)
{
	struct rq_request *rq = take_held(d, i);

	if (!rq)
		return false;
	end_rq(d, rq, status);
	leave_device(d);
	rq_sq_run_queue(d->q);
	return true;
}

bool sq_complete_next(struct sq_dev *d, rq_status_t status)
{
	return sq_complete_one(d, 0, status);
}

unsigned sq_complete_all(struct sq_dev *d, rq_status_t status)
{
	unsigned n = 0;

	/* one at a time: each end may refill the device */
	for (unsigned left = sq_nr_held(d); left; left--) {
		if (!sq_complete_one(d, 0, status))
			break;
		n++;
	}
	return n;
}

bool sq_complete_bytes(struct sq_dev *d, unsigned i, unsigned bytes, rq_status_t status)
{
	struct rq_request *rq = sq_held(d, i);
	rq_status_t st = status;
	bool more;

	if (!rq)
		return false;
	if (st == RQ_STS_OK)
		st = do_data(d, rq, bytes);
	count_completion(d);
	more = rq_sq_end_request(rq, st, bytes);
	if (more)
		return true;
	/* it ended: drop it from the list (find it again, the list may have moved) */
	pthread_mutex_lock(&d->lock);
	for (unsigned k = 0; k < to_priv(d)->nr_held; k++) {
		if (to_priv(d)->held[k].rq == rq) {
			struct sq_priv *p = to_priv(d);

			memmove(&p->held[k], &p->held[k + 1], (p->nr_held - k - 1) * sizeof(*p->held));
			p->nr_held--;
			p->in_device--;
			break;
		}
	}
	pthread_mutex_unlock(&d->lock);
	rq_sq_run_queue(d->q);
	return false;
}

void sq_drain(struct sq_dev *d, struct fx_rec *recs, unsigned n)
{
	uint64_t end = fixture_now_ms() + 10000;
	unsigned i = 0;

	for (;;) {
		sq_complete_all(d, RQ_STS_OK);
		while (i < n && fx_done(&recs[i]))
			i++;
		if (i == n)
			return;
		if (fixture_now_ms() > end)
			fail_msg("%u of %u bios never ended", n - i, n);
		fx_poll_pause();
	}
}

bool sq_requeue(struct sq_dev *d, unsigned i)
{
	struct rq_request *rq = take_held(d, i);

	if (!rq)
		return false;
	leave_device(d);
	rq_sq_lock(d->q);
	rq_sq_requeue_request(rq);
	rq_sq_unlock(d->q);
	return true;
}

unsigned sq_advance(struct sq_dev *d, uint64_t ns)
{
	struct sq_priv *p = to_priv(d);
	uint64_t target = sq_clock_now() + ns;
	unsigned n = 0;

	for (;;) {
		struct rq_request *rq = NULL;
		uint64_t finish = 0;

		pthread_mutex_lock(&d->lock);
		if (p->nr_held && p->held[0].finish_ns <= target) {
			finish = p->held[0].finish_ns;
			rq = p->held[0].rq;
			memmove(&p->held[0], &p->held[1], (p->nr_held - 1) * sizeof(*p->held));
			p->nr_held--;
		}
		pthread_mutex_unlock(&d->lock);
		if (!rq)
			break;
		vclock_to(finish);
		end_rq(d, rq, RQ_STS_OK);
		leave_device(d);
		rq_sq_run_queue(d->q);
		n++;
	}
	vclock_to(target);
	return n;
}

uint64_t sq_run_until_idle(struct sq_dev *d, uint64_t max_ns)
{
	struct sq_priv *p = to_priv(d);
	uint64_t start = sq_clock_now();

	for (;;) {
		uint64_t next = 0, now = sq_clock_now();
		bool held;

		if (now - start >= max_ns)
			break;
		pthread_mutex_lock(&d->lock);
		held = p->nr_held > 0;
		if (held)
			next = p->held[0].finish_ns;
		pthread_mutex_unlock(&d->lock);
		if (!held) {
			/* nothing in the device: let it take what is queued */
			rq_sq_run_queue(d->q);
			if (!sq_nr_held(d))
				break;
			continue;
		}
		if (next > start + max_ns)
			next = start + max_ns;
		sq_advance(d, next > now ? next - now : 0);
	}
	return sq_clock_now() - start;
}

/* ------------------------------------------------------------- records */

unsigned sq_nr_events(struct sq_dev *d)
{
	return recorder_count(&d->rec, RECORDER_ALL);
}

struct mock_event sq_event(struct sq_dev *d, unsigned i)
{
	struct mock_event ev;

	assert_true(recorder_find(&d->rec, RECORDER_ALL, i, &ev));
	return ev;
}

unsigned sq_copy_events(struct sq_dev *d, struct mock_event **out)
{
	return recorder_copy(&d->rec, RECORDER_ALL, out);
}

void sq_reset_events(struct sq_dev *d)
{
	recorder_reset(&d->rec);
}

void sq_walk_stats(struct sq_dev *d, unsigned *max_pieces, unsigned long *bad_requests)
{
	recorder_walk_stats(&d->rec, max_pieces, bad_requests);
}

/* -------------------------------------------------------- synchronous io */

rq_status_t sq_rw(struct sq_dev *d, unsigned op, uint64_t sector, void *buf, uint32_t len)
{
	struct mock_io io;

	rq_submit_bio(d->q, mock_bio(&io, op, sector, buf, len));
	mock_wait(&io);
	return io.status;
}
