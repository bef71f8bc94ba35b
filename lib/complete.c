/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Completion, common to both front ends: a request advancing by bytes as
 * the driver finishes pieces of it, its bios ending, a request that never
 * reached the driver being freed or failed, and the completion mailboxes
 * behind rq_affinity 2.
 *
 * Completion mailboxes: a request completed by another thread is pushed on
 * its submitter's lock-free stack and completed by the submitter at its
 * next entry into the library (or rq_process_completions()), or by the
 * service pass if the submitter does not come within a millisecond, so
 * nothing waits forever on an idle submitter.  The front end completes
 * what a mailbox hands back (q->fe->complete).  A completion batch pushes
 * each submitter's requests as one chain onto a second stack (batch_head),
 * which the owner ends as a batch (q->fe->end_batch); an owner with nothing
 * else to do waits in rq_wait_completions(): it polls its stacks for an
 * adaptive budget when the last push came from another CPU, then sleeps,
 * and a push wakes it, once per push, only while it sleeps.  A push to an
 * owner that polls or sleeps there arms no service fallback: the owner
 * looks at its stacks before it returns.
 *
 * What may run at the same time:
 *   mbox_push, mbox_push_batch      anything, any thread
 *   mbox_drain of one mailbox       its owner, the service pass (each stack
 *                                   is taken whole by one of them)
 *   mbox_self, the service tick     each other (mbox_lock)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal/alloc.h"
#include "internal/queue.h"
#include "internal/trace.h"

/*
 * Complete @bytes of @rq from its start (partial completion, both front
 * ends): bios wholly done leave the request and go to @end_bio.  Return:
 * true while bytes remain.
 */
bool request_advance(struct rq_request *rq, rq_status_t status, unsigned bytes,
		     void (*end_bio)(struct rq_queue *q, struct rq_bio *bio, rq_status_t status))
{
	while (bytes && rq->bio) {
		struct rq_bio *bio = rq->bio;
		unsigned n = bytes < bio->iter.size ? bytes : bio->iter.size;

		if (status != RQ_STS_OK && bio->status == RQ_STS_OK)
			bio->status = status;
		bio_advance(bio, n);
		rq->bytes -= n;
		rq->sector += n >> RQ_SECTOR_SHIFT;
		bytes -= n;
		if (!bio->iter.size) {
			rq->bio = bio->next;
			if (!rq->bio)
				rq->biotail = NULL;
			bio->next = NULL;
			end_bio(rq->q, bio, status);
		}
	}
	return rq->bytes > 0;
}

/*
 * Free a request that is not with the driver, dropping its usage
 * reference.  Context: any thread; with the single-queue front end, the
 * queue lock held.
 */
void request_free(struct rq_request *rq)
{
	struct rq_queue *q = rq->q;
	struct rq_sw_ctx *ctx = q->fe->release_request(rq);

	if (ctx)
		queue_exit_ctx(q, ctx);
}

/*
 * End a request that is not with the driver (teardown, a flush sequence
 * that ended, errors): its bios end with @status, then it is freed.
 */
void request_fail(struct rq_request *rq, rq_status_t status)
{
	if (status != RQ_STS_OK)
		stat_inc(rq->q, ST_ERRORS);
	stat_inc(rq->q, ST_COMPLETED);
	trace_complete_all(rq, status, OBS_C_DONE);
	request_end_bios(rq, status);
	request_free(rq);
}

/* ------------------------------------------------------------ mailboxes */

__thread struct rq_mailbox *tls_mbox __attribute__((tls_model("initial-exec")));
static pthread_mutex_t mbox_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rq_mailbox *mbox_list;
static _Atomic int mbox_pending; /* mailboxes that may hold requests */

#define MBOX_POLL_MIN_NS 2000u  /* rq_wait_completions() polls this long at least, */
#define MBOX_POLL_MAX_NS 64000u /* this long at most, before it sleeps */
static pthread_key_t mbox_key;
static pthread_once_t mbox_once = PTHREAD_ONCE_INIT;

/*
 * Complete everything in @mb (its owner, or the service pass): what
 * completion batches left first, each stack taken whole.  Return: how many.
 */
unsigned mbox_drain(struct rq_mailbox *mb)
{
	struct rq_request *batch = NULL, *rq = NULL;
	unsigned n = 0;

	if (atomic_load_explicit(&mb->batch_head, memory_order_relaxed))
		batch = atomic_exchange_explicit(&mb->batch_head, NULL, memory_order_acquire);
	if (atomic_load_explicit(&mb->head, memory_order_relaxed))
		rq = atomic_exchange_explicit(&mb->head, NULL, memory_order_acquire);
	if (batch)
		n += batch->q->fe->end_batch(batch);
	while (rq) {
		struct rq_request *next = rq->rq_next;

		rq->rq_next = NULL;
		rq->q->fe->complete(rq);
		rq = next;
		n++;
	}
	return n;
}

static bool mbox_has_work(struct rq_mailbox *mb)
{
	return atomic_load(&mb->head) || atomic_load(&mb->batch_head);
}

static void mbox_thread_exit(void *arg)
{
	struct rq_mailbox *mb = arg;

	mbox_drain(mb);
	pthread_mutex_lock(&mbox_lock);
	__atomic_store_n(&mb->dead, true, __ATOMIC_RELEASE); /* the service thread frees it */
	pthread_mutex_unlock(&mbox_lock);
	atomic_fetch_add(&mbox_pending, 1);
	service_kick();
}

static void mbox_service(uint64_t now);

static void mbox_key_init(void)
{
	pthread_key_create(&mbox_key, mbox_thread_exit);
	service_set_tick(mbox_service);
}

/*
 * The calling thread's mailbox, made on first use; NULL without memory.
 * Mailboxes are never freed: a completing thread may still hold a pointer
 * to one whose owner exited (it read dead as false just before), so the
 * mailbox of an exited thread is handed to the next thread that needs one.
 * What such a late push leaves there ends on the new owner or the service
 * thread, exactly once either way.
 */
struct rq_mailbox *mbox_self(void)
{
	struct rq_mailbox *mb = tls_mbox;

	if (likely(mb))
		return mb;
	pthread_once(&mbox_once, mbox_key_init);
	pthread_mutex_lock(&mbox_lock);
	for (mb = mbox_list; mb && !__atomic_load_n(&mb->dead, __ATOMIC_ACQUIRE); mb = mb->next)
		;
	if (mb) {
		atomic_store(&mb->sleeping, false);
		__atomic_store_n(&mb->dead, false, __ATOMIC_RELEASE);
	} else {
		mb = mem_alloc_aligned(RQ_CACHELINE, sizeof(*mb));
		if (!mb) {
			pthread_mutex_unlock(&mbox_lock);
			return NULL;
		}
		memset(mb, 0, sizeof(*mb));
		mb->next = mbox_list;
		mbox_list = mb;
	}
	pthread_mutex_unlock(&mbox_lock);
	pthread_setspecific(mbox_key, mb);
	tls_mbox = mb;
	return mb;
}

/*
 * Wake @mb's owner if it sleeps in rq_wait_completions(): only the first
 * waker of a sleep pays for the system call.  Pairs with the owner's
 * store of sleeping (or of polling, cleared) before its last look at the
 * stacks (all seq_cst).  Return: the owner polls or sleeps there, so it
 * looks at the stacks again before it returns: nothing more is needed.
 */
static bool mbox_wake(struct rq_mailbox *mb)
{
	if (atomic_load(&mb->polling))
		return true;
	if (!atomic_load(&mb->sleeping))
		return false;
	if (atomic_exchange(&mb->sleeping, false)) {
		atomic_fetch_add(&mb->wake_seq, 1);
		syscall(SYS_futex, &mb->wake_seq, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	}
	return true;
}

/*
 * Push the chain @first..@last (linked by rq_next) on @stack of @mb with
 * one compare-and-swap.  The push that finds the stack empty arms the
 * service fallback, unless the owner polls or sleeps in
 * rq_wait_completions() and so drains it anyway: one service kick per
 * chain at most, none while the owner waits for it or has not drained
 * what it already has.
 */
static void mbox_push_chain(struct rq_mailbox *mb, _Atomic(struct rq_request *) *stack,
			    struct rq_request *first, struct rq_request *last)
{
	struct rq_request *head = atomic_load_explicit(stack, memory_order_relaxed);

	/* the owner's polling hint, on the line this push writes anyway */
	atomic_store_explicit(&mb->push_cpu, (int)cur_cpu() + 1, memory_order_relaxed);
	do {
		last->rq_next = head;
	} while (!atomic_compare_exchange_weak_explicit(stack, &head, first, memory_order_seq_cst,
							memory_order_relaxed));
	if (!head)
		__atomic_store_n(&mb->pushed_ns, service_clock_ns(), __ATOMIC_RELAXED);
	if (!mbox_wake(mb) && !head) {
		if (!atomic_load_explicit(&mbox_pending, memory_order_relaxed))
			atomic_store(&mbox_pending, 1);
		service_kick_in(1);
	}
}

/*
 * Hand @rq, completed on this thread, to its submitter's mailbox
 * (rq->end_io_data, set when it was made under rq_affinity 2).  Return:
 * false if it must be completed here: no mailbox, the caller's own, or
 * its owner has exited.
 */
bool mbox_push(struct rq_request *rq)
{
	struct rq_mailbox *mb = rq_priv(rq)->end_io_data;

	if (!mb || mb == tls_mbox || __atomic_load_n(&mb->dead, __ATOMIC_ACQUIRE))
		return false;
	mbox_push_chain(mb, &mb->head, rq, rq);
	return true;
}

/* ------------------------------------------- mailboxes of completion batches */

#define MBOX_BATCH_GROUPS 8 /* submitters one pass sorts a batch for */

/* The requests of one batch for one mailbox, in batch order. */
struct mbox_group {
	struct rq_mailbox *mb;
	struct rq_request *first, *last;
};

/* The mailbox @rq of a completion batch goes to, NULL to end it here. */
static struct rq_mailbox *mbox_batch_target(const struct rq_request *rq)
{
	struct rq_mailbox *mb;

	if (likely(READ_ONCE(rq->q->rq_affinity) != 2))
		return NULL;
	mb = rq_priv(rq)->end_io_data;
	if (!mb || mb == tls_mbox || __atomic_load_n(&mb->dead, __ATOMIC_ACQUIRE))
		return NULL;
	return mb;
}

static void mbox_groups_push(struct mbox_group *g, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		mbox_push_chain(g[i].mb, &g[i].mb->batch_head, g[i].first, g[i].last);
}

/*
 * rq_affinity 2 for a completion batch: hand each request of @list (linked
 * by rq_next) whose submitter is another live thread to that thread's
 * mailbox, one chain and so one push per mailbox (per MBOX_BATCH_GROUPS
 * submitters).  Return: the requests to end here, in their order.
 */
struct rq_request *mbox_push_batch(struct rq_request *list)
{
	struct rq_request *keep = NULL, **keep_tail = &keep, *rq;
	struct mbox_group g[MBOX_BATCH_GROUPS];
	unsigned ng = 0, i;

	for (rq = list; rq && !mbox_batch_target(rq); rq = rq->rq_next)
		;
	if (!rq)
		return list; /* the common case: nothing leaves */
	while (list) {
		struct rq_mailbox *mb = mbox_batch_target(list);

		rq = list;
		list = rq->rq_next;
		rq->rq_next = NULL;
		if (!mb) {
			*keep_tail = rq;
			keep_tail = &rq->rq_next;
			continue;
		}
		for (i = 0; i < ng && g[i].mb != mb; i++)
			;
		if (i < ng) {
			g[i].last->rq_next = rq;
			g[i].last = rq;
			continue;
		}
		if (ng == MBOX_BATCH_GROUPS) {
			mbox_groups_push(g, ng);
			ng = 0;
		}
		g[ng++] = (struct mbox_group){ .mb = mb, .first = rq, .last = rq };
	}
	mbox_groups_push(g, ng);
	return keep;
}

/* Service pass: drain mailboxes whose owner did not come (or exited). */
static void mbox_service(uint64_t now)
{
	if (!atomic_load(&mbox_pending))
		return;
	atomic_store(&mbox_pending, 0);
	pthread_mutex_lock(&mbox_lock);
	for (struct rq_mailbox *mb = mbox_list; mb; mb = mb->next) {
		if (!mbox_has_work(mb))
			continue;
		if (__atomic_load_n(&mb->dead, __ATOMIC_ACQUIRE) ||
		    now - __atomic_load_n(&mb->pushed_ns, __ATOMIC_RELAXED) >= 1000000) {
			mbox_drain(mb);
			mbox_wake(mb); /* a waiting owner looks at what ended */
		} else {
			atomic_store(&mbox_pending, 1);
		}
	}
	pthread_mutex_unlock(&mbox_lock);
}

RQ_EXPORT int rq_process_completions(void)
{
	struct rq_mailbox *mb = tls_mbox;

	return mb ? (int)mbox_drain(mb) : 0;
}

static uint64_t mbox_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * rq_wait_completions(): poll @mb's stacks before sleeping, for the
 * owner's budget (at most @limit_ns), and only when the last push came
 * from another CPU than the owner's (on the same one, polling would only
 * delay the pusher; one CPU for both never polls): a completer there hands
 * back its next chain sooner than a futex round trip.  The budget doubles
 * when a poll finds work and halves when one gives up.  While polling is
 * set, pushes neither wake the owner nor arm the service fallback; the
 * caller looks at the stacks after this returns.  Return: work was found,
 * with polling still set: the caller drains, clears it, and looks again.
 * A poll that gives up leaves polling set: the caller clears it only once
 * sleeping is set (mbox_sleep()) or it has looked a last time, so a push
 * never finds the owner between the two flags and arms the fallback.
 */
static bool mbox_poll(struct rq_mailbox *mb, uint64_t limit_ns)
{
	int peer = atomic_load_explicit(&mb->push_cpu, memory_order_relaxed);
	uint64_t start, budget;
	bool found;

	if (cpus_online() < 2 || !peer || peer == (int)cur_cpu() + 1)
		return false;
	if (!mb->poll_ns)
		mb->poll_ns = MBOX_POLL_MAX_NS / 4;
	budget = mb->poll_ns < limit_ns ? mb->poll_ns : limit_ns;
	atomic_store(&mb->polling, true);
	start = mbox_now_ns();
	for (unsigned i = 1; !(found = mbox_has_work(mb)); i++) {
		cpu_relax();
		if (!(i % 16) && mbox_now_ns() - start >= budget)
			break;
	}
	if (found) {
		/* polling stays set until the caller has drained (rq_wait_completions()) */
		mb->poll_ns = mb->poll_ns * 2 < MBOX_POLL_MAX_NS ? mb->poll_ns * 2 : MBOX_POLL_MAX_NS;
	} else
		mb->poll_ns = mb->poll_ns / 2 > MBOX_POLL_MIN_NS ? mb->poll_ns / 2 : MBOX_POLL_MIN_NS;
	return found;
}

/*
 * Sleep on @mb until a push wakes the owner or @tsp passes.  sleeping is
 * set before a poll's polling is cleared: a push sees one or the other.
 */
static void mbox_sleep(struct rq_mailbox *mb, const struct timespec *tsp)
{
	uint32_t seq = atomic_load(&mb->wake_seq);

	atomic_store(&mb->sleeping, true);
	atomic_store(&mb->polling, false);
	if (!mbox_has_work(mb))
		syscall(SYS_futex, &mb->wake_seq, FUTEX_WAIT_PRIVATE, seq, tsp, NULL, 0);
	atomic_store(&mb->sleeping, false);
}

RQ_EXPORT int rq_wait_completions(uint64_t timeout_ns)
{
	struct rq_mailbox *mb = mbox_self();
	struct timespec ts, *tsp = NULL;
	uint64_t start;
	unsigned n;

	if (!mb)
		return -ENOMEM;
	n = mbox_drain(mb);
	if (n || !timeout_ns)
		return (int)n;
	start = mbox_now_ns();
	if (mbox_poll(mb, timeout_ns)) {
		/*
		 * Drain with polling still set: a push whose chain the poll
		 * found may look at the flags only now, and must not take the
		 * owner for gone and arm the service.  Then clear it and look
		 * once more for a push that saw it set after the first drain.
		 */
		n = mbox_drain(mb);
		atomic_store(&mb->polling, false);
		atomic_thread_fence(memory_order_seq_cst);
		return (int)(n + mbox_drain(mb));
	} else {
		uint64_t spent = mbox_now_ns() - start;

		if (spent >= timeout_ns) {
			atomic_store(&mb->polling, false);
			atomic_thread_fence(memory_order_seq_cst);
			return (int)mbox_drain(mb);
		}
		if (timeout_ns != UINT64_MAX) {
			ts.tv_sec = (time_t)((timeout_ns - spent) / 1000000000u);
			ts.tv_nsec = (long)((timeout_ns - spent) % 1000000000u);
			tsp = &ts;
		}
		mbox_sleep(mb, tsp);
	}
	/* a push that saw polling or sleeping set relies on this look */
	atomic_thread_fence(memory_order_seq_cst);
	return (int)mbox_drain(mb);
}
