/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * I/O contexts: refcounted "who is this I/O for" objects, with a default
 * priority and a weight.  Each thread has a current context: one the
 * application set with rq_ioc_set_current(), else a context of its own made
 * on first use and dropped when the thread exits.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "internal/ioc.h"

/* Bits of an ioprio value that mean something. */
#define IOPRIO_LEVEL_MASK 0x7u
#define IOPRIO_USED_MASK ((uint16_t)((0x3u << RQ_IOPRIO_CLASS_SHIFT) | IOPRIO_LEVEL_MASK))

static atomic_uint_fast64_t ioc_next_id = 1;

/* Per-thread state: the context set by the application, and our own. */
struct ioc_thread {
	struct rq_io_context *set;
	struct rq_io_context *own;
};

static __thread struct ioc_thread tl_ioc __attribute__((tls_model("initial-exec")));
static __thread bool tl_ioc_registered __attribute__((tls_model("initial-exec")));

static pthread_key_t ioc_key;
static pthread_once_t ioc_key_once = PTHREAD_ONCE_INIT;
static bool ioc_key_ok;

/**
 * ioprio_valid() - is a priority value well formed?
 * @ioprio: RQ_IOPRIO_VALUE(class, level).
 *
 * Context: any.
 * Return: true for class 0..3 and level 0..7 with no other bit set, class
 * NONE only with level 0.
 */
bool ioprio_valid(uint16_t ioprio)
{
	if (ioprio & ~IOPRIO_USED_MASK)
		return false;
	if (RQ_IOPRIO_CLASS(ioprio) == RQ_IOPRIO_CLASS_NONE && RQ_IOPRIO_LEVEL(ioprio))
		return false;
	return true;
}

/**
 * rq_ioc_create() - a new io context.
 * @ioprio: default priority of its bios (RQ_IOPRIO_VALUE()); 0 means best
 *	effort, level 4.
 *
 * Context: any thread; allocates.
 * Return: the context holding one reference; NULL with errno ENOMEM, or
 * EINVAL for a malformed @ioprio.
 */
RQ_EXPORT struct rq_io_context *rq_ioc_create(uint16_t ioprio)
{
	struct rq_io_context *ioc;

	if (!ioprio_valid(ioprio)) {
		errno = EINVAL;
		return NULL;
	}
	ioc = calloc(1, sizeof(*ioc));
	if (!ioc)
		return NULL;
	atomic_init(&ioc->refcount, 1);
	ioc->ioprio = ioprio ? ioprio : RQ_IOC_PRIO_DEFAULT;
	ioc->id = atomic_fetch_add_explicit(&ioc_next_id, 1, memory_order_relaxed);
	ioc->weight = RQ_IOC_WEIGHT_DEFAULT;
	return ioc;
}

/**
 * rq_ioc_get() - take a reference on an io context.
 * @ioc: the context (NULL is ignored).
 *
 * Context: any thread; the caller already holds a reference.
 */
RQ_EXPORT void rq_ioc_get(struct rq_io_context *ioc)
{
	if (ioc)
		atomic_fetch_add_explicit(&ioc->refcount, 1, memory_order_relaxed);
}

/**
 * rq_ioc_put() - drop a reference; the last one frees the context.
 * @ioc: the context (NULL is ignored).
 *
 * Context: any thread.  Schedulers must have released sched_priv (they hold
 * references while they use it).
 */
RQ_EXPORT void rq_ioc_put(struct rq_io_context *ioc)
{
	if (ioc && atomic_fetch_sub_explicit(&ioc->refcount, 1, memory_order_acq_rel) == 1)
		free(ioc);
}

/**
 * rq_ioc_set_prio() - change a context's default priority.
 * @ioc: the context.
 * @ioprio: RQ_IOPRIO_VALUE(class 0..3, level 0..7); 0 means best effort,
 *	level 4.
 *
 * Context: any thread; bios already queued keep the priority they had.
 * Return: 0, or -EINVAL for a malformed value.
 */
RQ_EXPORT int rq_ioc_set_prio(struct rq_io_context *ioc, uint16_t ioprio)
{
	if (!ioc || !ioprio_valid(ioprio))
		return -EINVAL;
	WRITE_ONCE(ioc->ioprio, ioprio ? ioprio : RQ_IOC_PRIO_DEFAULT);
	return 0;
}

/**
 * rq_ioc_prio() - a context's default priority.
 * @ioc: the context.
 *
 * Context: any thread.
 * Return: an RQ_IOPRIO_VALUE(), never 0.
 */
RQ_EXPORT uint16_t rq_ioc_prio(const struct rq_io_context *ioc)
{
	return READ_ONCE(ioc->ioprio);
}

/**
 * rq_ioc_id() - a number unique to a context, for tracing.
 * @ioc: the context.
 *
 * Context: any thread.
 * Return: the id (ids start at 1 and are never reused in a process).
 */
RQ_EXPORT uint64_t rq_ioc_id(const struct rq_io_context *ioc)
{
	return ioc->id;
}

/**
 * ioc_set_weight() - set a context's weight for proportional schedulers.
 * @ioc: the context.
 * @weight: 1..1000 (100 is the default).
 *
 * Context: any thread.
 * Return: 0, or -EINVAL outside 1..1000.
 */
int ioc_set_weight(struct rq_io_context *ioc, unsigned weight)
{
	if (!ioc || weight < RQ_IOC_WEIGHT_MIN || weight > RQ_IOC_WEIGHT_MAX)
		return -EINVAL;
	WRITE_ONCE(ioc->weight, weight);
	return 0;
}

/**
 * ioc_weight() - a context's weight.
 * @ioc: the context.
 *
 * Context: any thread.
 * Return: 1..1000.
 */
unsigned ioc_weight(const struct rq_io_context *ioc)
{
	return READ_ONCE(ioc->weight);
}

/* ------------------------------------------------------- per-thread state */

/* pthread key destructor: the thread exits; drop its contexts. */
static void ioc_thread_exit(void *arg)
{
	struct ioc_thread *t = arg;
	struct rq_io_context *set = t->set, *own = t->own;

	t->set = NULL;
	t->own = NULL;
	tl_ioc_registered = false;
	rq_ioc_put(set);
	rq_ioc_put(own);
}

static void ioc_key_create(void)
{
	ioc_key_ok = pthread_key_create(&ioc_key, ioc_thread_exit) == 0;
}

/* Arrange for the calling thread's contexts to be dropped at its exit. */
static void ioc_thread_register(void)
{
	if (tl_ioc_registered)
		return;
	pthread_once(&ioc_key_once, ioc_key_create);
	if (ioc_key_ok && pthread_setspecific(ioc_key, &tl_ioc) == 0)
		tl_ioc_registered = true;
}

/**
 * rq_ioc_current() - the calling thread's io context.
 *
 * The one set with rq_ioc_set_current(), else a context of the thread's own
 * (priority BE/4) made on first use and dropped when the thread exits.  No
 * reference is taken for the caller: take one to keep it past the thread or
 * past the next rq_ioc_set_current().
 *
 * Context: any thread; allocates on first use.
 * Return: the context, NULL only on memory exhaustion.
 */
RQ_EXPORT struct rq_io_context *rq_ioc_current(void)
{
	struct rq_io_context *ioc = tl_ioc.set;

	if (likely(ioc))
		return ioc;
	ioc = tl_ioc.own;
	if (likely(ioc))
		return ioc;
	ioc = rq_ioc_create(0);
	if (!ioc)
		return NULL;
	tl_ioc.own = ioc;
	ioc_thread_register();
	return ioc;
}

/**
 * rq_ioc_set_current() - choose the calling thread's io context.
 * @ioc: the context for the thread's bios that name none (a reference is
 *	taken), or NULL to go back to the thread's own.
 *
 * Context: any thread; affects only the calling thread.  The previously set
 * context's reference is dropped.
 */
RQ_EXPORT void rq_ioc_set_current(struct rq_io_context *ioc)
{
	struct rq_io_context *old = tl_ioc.set;

	rq_ioc_get(ioc);
	tl_ioc.set = ioc;
	if (ioc)
		ioc_thread_register();
	rq_ioc_put(old);
}

/**
 * ioc_of_bio() - the io context a bio is submitted for.
 * @bio: the bio.
 *
 * Context: the submitting thread.
 * Return: bio->ioc, else the calling thread's context; no reference taken.
 */
struct rq_io_context *ioc_of_bio(const struct rq_bio *bio)
{
	return bio->ioc ? bio->ioc : rq_ioc_current();
}

/**
 * ioc_bio_prio() - a bio's effective priority.
 * @bio: the bio.
 *
 * Context: the submitting thread.
 * Return: bio->ioprio when set, else its context's priority (BE/4 if the
 * context cannot be made).
 */
uint16_t ioc_bio_prio(const struct rq_bio *bio)
{
	struct rq_io_context *ioc;

	if (bio->ioprio)
		return bio->ioprio;
	ioc = ioc_of_bio(bio);
	return ioc ? rq_ioc_prio(ioc) : RQ_IOC_PRIO_DEFAULT;
}
