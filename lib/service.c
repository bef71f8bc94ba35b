/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The service thread: the library's stand-in for kblockd and block timers.
 *
 * One thread for the whole library, started with the first queue.  It runs
 * hardware queues asked to run asynchronously or after a delay, kicks
 * delayed requeue lists, and scans in-flight requests for timeouts.  Others
 * wake it with service_kick() (a semaphore post: async-signal-safe, no lock),
 * so a driver may call the delay/async helpers from any context.
 *
 * Timeouts cost nothing per I/O: every issue bumps rq->gen; the scan keeps,
 * per driver tag, the generation it last saw and a deadline set the first
 * time it saw that generation in flight.  A request is thus timed out
 * between io_timeout and io_timeout + one scan interval after issue.
 * Each front end does its own part (q->fe->service): the multi-queue one
 * scans its driver tags (lib/mq.c), the single-queue one its request pool.
 *
 * Application-driven mode (rq_service_manual(), before the first queue):
 * no thread is started; the application calls rq_service_run() when the
 * time it returned has passed or rq_service_fd() is readable (a kick), as
 * a run-to-completion server does from its event loop.  The same pass runs
 * either way.
 *
 * Every service deadline (delayed runs, requeue kicks, the timeout scan,
 * mailbox and deferred-bio fallbacks) is a service_clock_ns() value: with
 * the thread, CLOCK_MONOTONIC, the clock it sleeps on; in
 * application-driven mode, the library clock (rq_clock_ns(), maybe a
 * simulation's virtual one), so what rq_service_run() does depends only on
 * that clock and its returned wait is in its nanoseconds.
 *
 * What may run at the same time:
 *   service_register / unregister     each other (svc_lock), the thread
 *   service_kick                      anything, any context
 *   rq_service_run                    everything; calls serialize
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "internal/queue.h"

static pthread_mutex_t svc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rq_queue *svc_queues;
static bool svc_started;
static sem_t svc_sem;
static _Atomic int svc_kicked;
static pthread_t svc_thread;

/*
 * Application-driven mode (rq_service_manual()): no thread; the
 * application calls rq_service_run(), and a kick makes svc_efd readable.
 */
static _Atomic bool svc_manual;
static int svc_efd = -1;
static pthread_mutex_t svc_run_lock = PTHREAD_MUTEX_INITIALIZER; /* one pass at a time */

/* CLOCK_MONOTONIC: the service thread's clock, real time it sleeps on. */
static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * The clock service deadlines are set and compared on: the library clock
 * when the application drives the service (it decides when that clock
 * moves and when rq_service_run() looks), else the thread's real clock.
 * The mode is fixed before the first queue exists, so every deadline of a
 * process is on one of the two.
 */
uint64_t service_clock_ns(void)
{
	if (atomic_load_explicit(&svc_manual, memory_order_acquire))
		return rq_clock_ns();
	return mono_ns();
}

RQ_EXPORT uint64_t rq_service_clock_ns(void)
{
	return service_clock_ns();
}

static pthread_once_t svc_once = PTHREAD_ONCE_INIT;

/* Called first in every pass (lib/complete.c: the completion mailboxes). */
static void (*_Atomic svc_tick)(uint64_t now);

/*
 * service_set_tick() - have every service pass call @fn(now) first.  The
 * completion layer registers its mailbox scan here, so this layer calls
 * nothing above it.  One tick; a later call replaces it.
 */
void service_set_tick(void (*fn)(uint64_t now))
{
	atomic_store_explicit(&svc_tick, fn, memory_order_release);
	service_kick();
}
static _Atomic uint64_t svc_wake_at; /* an extra wake-up (mailboxes) */
/*
 * When the thread wakes by itself: 0 while it runs a pass (it looks at
 * svc_wake_at before it sleeps again), UINT64_MAX before its first pass
 * or while it sleeps without a deadline.  Lets service_kick_in() skip
 * the kick when the thread comes by in time anyway.
 */
static _Atomic uint64_t svc_sleep_until = UINT64_MAX;

static void *service_main(void *arg);

/* Start the thread once, on first need (never in application-driven mode). */
static void service_start(void)
{
	pthread_attr_t attr;

	if (atomic_load(&svc_manual))
		return;
	sem_init(&svc_sem, 0, 0);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (!pthread_create(&svc_thread, &attr, service_main, NULL))
		svc_started = true;
	pthread_attr_destroy(&attr);
}

void service_kick(void)
{
	pthread_once(&svc_once, service_start);
	if (atomic_exchange_explicit(&svc_kicked, 1, memory_order_acq_rel))
		return;
	if (atomic_load_explicit(&svc_manual, memory_order_acquire)) {
		uint64_t one = 1;

		/* async-signal-safe; a full counter still reads as readable */
		if (write(svc_efd, &one, sizeof(one)) < 0)
			(void)0;
		return;
	}
	sem_post(&svc_sem);
}

static uint64_t scan_interval_ns(const struct rq_queue *q)
{
	uint64_t t = queue_timeout_ns(q) / 2;

	if (t > 1000000000ull)
		t = 1000000000ull;
	if (t < 1000000ull)
		t = 1000000ull;
	return t;
}

/*
 * One queue's part of a pass: its front end's due work, with the timeout
 * scan once per scan interval.  Return: @next, lowered to when the queue
 * wants the next pass.
 */
static uint64_t service_queue(struct rq_queue *q, uint64_t now, uint64_t next)
{
	uint64_t interval = scan_interval_ns(q);
	bool scan = now - q->svc_last_scan_ns >= interval;

	if (scan)
		q->svc_last_scan_ns = now;
	q->fe->service(q, now, scan, &next);
	if (q->svc_last_scan_ns + interval < next)
		next = q->svc_last_scan_ns + interval;
	return next;
}

/*
 * Publish when the thread will wake by itself (@next, or never when
 * @idle), then take an earlier svc_wake_at.  Pairs with service_kick_in():
 * it sets svc_wake_at, then reads svc_sleep_until (both seq_cst), so
 * either this sees its deadline or it sees that the thread would be late
 * and kicks.  Return: the deadline to sleep until.
 */
static uint64_t service_adopt_wake(uint64_t next, bool idle)
{
	uint64_t at;

	atomic_store(&svc_sleep_until, idle ? UINT64_MAX : next);
	at = atomic_load(&svc_wake_at);
	if (at && at < next) {
		at = atomic_exchange(&svc_wake_at, 0);
		if (at && at < next) {
			next = at;
			atomic_store(&svc_sleep_until, next);
		}
	}
	return next;
}

/*
 * One pass over everything due at @now: completion mailboxes, then every
 * queue.  Return: when the next thing falls due (service_clock_ns), or the
 * idle horizon a second ahead; *@idle when no queue exists.
 */
static uint64_t service_pass(uint64_t now, bool *idle)
{
	uint64_t next = now + 1000000000ull;

	void (*tick)(uint64_t now) = atomic_load_explicit(&svc_tick, memory_order_acquire);

	atomic_store_explicit(&svc_kicked, 0, memory_order_release);
	atomic_store(&svc_sleep_until, 0);
	if (tick)
		tick(now);
	pthread_mutex_lock(&svc_lock);
	for (struct rq_queue *q = svc_queues; q; q = q->svc_next)
		next = service_queue(q, now, next);
	*idle = !svc_queues;
	pthread_mutex_unlock(&svc_lock);
	return service_adopt_wake(next, *idle);
}

static void *service_main(void *arg)
{
	(void)arg;
	for (;;) {
		uint64_t now = mono_ns(), next, wait_ns;
		struct timespec ts;
		bool idle;

		next = service_pass(now, &idle);
		if (idle) {
			while (sem_wait(&svc_sem) && errno == EINTR)
				;
			continue;
		}
		now = mono_ns();
		wait_ns = next > now ? next - now : 0;
		if (!wait_ns)
			continue;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += (time_t)(wait_ns / 1000000000ull);
		ts.tv_nsec += (long)(wait_ns % 1000000000ull);
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		while (sem_timedwait(&svc_sem, &ts) && errno == EINTR)
			;
	}
	return NULL;
}

RQ_EXPORT int rq_service_manual(void)
{
	int ret = 0;

	pthread_mutex_lock(&svc_lock);
	if (atomic_load(&svc_manual)) {
		ret = 0;
	} else if (svc_started || svc_queues) {
		ret = -EBUSY;
	} else {
		svc_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (svc_efd < 0)
			ret = -errno;
		else
			atomic_store_explicit(&svc_manual, true, memory_order_release);
	}
	pthread_mutex_unlock(&svc_lock);
	/* a thread started meanwhile (first queue on another thread) wins */
	pthread_once(&svc_once, service_start);
	if (!ret && svc_started)
		ret = -EBUSY;
	return ret;
}

RQ_EXPORT int rq_service_fd(void)
{
	return atomic_load_explicit(&svc_manual, memory_order_acquire) ? svc_efd : -EINVAL;
}

RQ_EXPORT int64_t rq_service_run(void)
{
	uint64_t now, next, drain;
	bool idle;

	if (!atomic_load_explicit(&svc_manual, memory_order_acquire))
		return -EINVAL;
	/* clear the kick before the pass, so a kick during it stays readable */
	if (read(svc_efd, &drain, sizeof(drain)) < 0)
		(void)0;
	pthread_mutex_lock(&svc_run_lock);
	now = service_clock_ns();
	next = service_pass(now, &idle);
	pthread_mutex_unlock(&svc_run_lock);
	now = service_clock_ns();
	if (idle && !atomic_load(&svc_wake_at))
		return INT64_MAX;
	return next > now ? (int64_t)(next - now) : 0;
}

/*
 * Have the service pass look again in @msecs (mailboxes, deferred bios).
 * The thread is kicked only when it would otherwise sleep past that (not
 * while it runs a pass, nor while it sleeps until sooner): a stream of
 * pushes costs one wake-up per @msecs, not one each.  Application-driven
 * service is always kicked: its wait was returned to the application.
 */
void service_kick_in(unsigned msecs)
{
	uint64_t at = service_clock_ns() + (uint64_t)msecs * 1000000ull;
	uint64_t cur = atomic_load(&svc_wake_at);

	while ((cur == 0 || at < cur) && !atomic_compare_exchange_weak(&svc_wake_at, &cur, at))
		;
	if (!atomic_load_explicit(&svc_manual, memory_order_acquire) &&
	    atomic_load(&svc_sleep_until) <= at)
		return;
	service_kick();
}

void service_register(struct rq_queue *q)
{
	pthread_once(&svc_once, service_start);
	pthread_mutex_lock(&svc_lock);
	q->svc_last_scan_ns = service_clock_ns();
	q->svc_next = svc_queues;
	svc_queues = q;
	q->svc_registered = true;
	pthread_mutex_unlock(&svc_lock);
	service_kick();
}

/* Wait until the service thread is not inside a pass over the queues. */
void service_barrier(void)
{
	pthread_mutex_lock(&svc_lock);
	pthread_mutex_unlock(&svc_lock);
}

void service_unregister(struct rq_queue *q)
{
	pthread_mutex_lock(&svc_lock);
	for (struct rq_queue **p = &svc_queues; *p; p = &(*p)->svc_next) {
		if (*p == q) {
			*p = q->svc_next;
			break;
		}
	}
	q->svc_registered = false;
	pthread_mutex_unlock(&svc_lock);
}
