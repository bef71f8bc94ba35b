/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * I/O contexts: refcounted "who is this I/O for" objects, with a default
 * priority, a weight and an io group.  Each thread has a current context:
 * one the application set with rq_ioc_set_current(), else a context of its
 * own made on first use and dropped when the thread exits.
 *
 * I/O groups stand in for cgroups with io.weight: refcounted sets of
 * contexts with a weight of 1..1000 (100 by default).  A context belongs to
 * the root group until rq_ioc_set_group() names another; it holds a
 * reference on its group.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "internal/alloc.h"
#include "internal/ioc.h"

/* Bits of an ioprio value that mean something. */
#define IOPRIO_LEVEL_MASK 0x7u
#define IOPRIO_USED_MASK ((uint16_t)((0x3u << RQ_IOPRIO_CLASS_SHIFT) | IOPRIO_LEVEL_MASK))

static atomic_uint_fast64_t ioc_next_id = 1;
static atomic_uint_fast64_t iog_next_id = 1;

/* Per-thread state (struct ioc_thread, internal/ioc.h): set and own context. */
__thread struct ioc_thread tl_ioc __attribute__((tls_model("initial-exec")));
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
	ioc = mem_zalloc(sizeof(*ioc));
	if (!ioc)
		return NULL;
	atomic_init(&ioc->refcount, 1);
	ioc->ioprio = ioprio ? ioprio : RQ_IOC_PRIO_DEFAULT;
	ioc->id = atomic_fetch_add_explicit(&ioc_next_id, 1, memory_order_relaxed);
	ioc->weight = RQ_IOC_WEIGHT_DEFAULT;
	rq_spin_init(&ioc->lock);
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
	if (ioc && atomic_fetch_sub_explicit(&ioc->refcount, 1, memory_order_acq_rel) == 1) {
		rq_iog_put(ioc->group);
		mem_free(ioc, sizeof(*ioc));
	}
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
	return ioc_prio(ioc);
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
	WRITE_ONCE(ioc->weight_set, true);
	return 0;
}

/**
 * ioc_weight_is_set() - did the application give the context a weight?
 * @ioc: the context.
 *
 * Context: any thread.
 * Return: true after ioc_set_weight() / rq_ioc_set_weight() with 1..1000,
 * false for a new context or after rq_ioc_set_weight(ioc, 0).
 */
bool ioc_weight_is_set(const struct rq_io_context *ioc)
{
	return READ_ONCE(ioc->weight_set);
}

/**
 * ioc_prio_to_weight() - the weight a priority stands for.
 * @ioprio: an RQ_IOPRIO_VALUE(); class NONE counts as best effort, level 4.
 *
 * The kernel's bfq documents (8 - level) * 10: level 0 weighs 80, level 7
 * weighs 10, whatever the class.
 *
 * Context: any.
 * Return: 10..80.
 */
unsigned ioc_prio_to_weight(uint16_t ioprio)
{
	unsigned level = RQ_IOPRIO_CLASS(ioprio) == RQ_IOPRIO_CLASS_NONE ?
				 4 : RQ_IOPRIO_LEVEL(ioprio);

	return (8 - level) * 10;
}

/**
 * rq_ioc_set_weight() - a context's weight inside its io group.
 * @ioc: the context.
 * @weight: 1..1000, or 0 to go back to the weight its priority stands for.
 *
 * Context: any thread; schedulers apply it the next time the context
 * becomes busy.
 * Return: 0, or -EINVAL for a NULL context or a weight above 1000.
 */
RQ_EXPORT int rq_ioc_set_weight(struct rq_io_context *ioc, unsigned weight)
{
	if (!ioc || weight > RQ_IOC_WEIGHT_MAX)
		return -EINVAL;
	if (!weight) {
		WRITE_ONCE(ioc->weight_set, false);
		WRITE_ONCE(ioc->weight, RQ_IOC_WEIGHT_DEFAULT);
		return 0;
	}
	return ioc_set_weight(ioc, weight);
}

/**
 * rq_ioc_weight() - the weight set with rq_ioc_set_weight().
 * @ioc: the context.
 *
 * Context: any thread.
 * Return: 1..1000, or 0 when none is set (schedulers then use the weight
 * of its priority: (8 - level) * 10).
 */
RQ_EXPORT unsigned rq_ioc_weight(const struct rq_io_context *ioc)
{
	return ioc_weight_is_set(ioc) ? ioc_weight(ioc) : 0;
}

/* ------------------------------------------------------------- io groups */

/**
 * rq_iog_create() - a new io group.
 * @weight: 1..1000; 0 means the default, 100.
 *
 * Context: any thread; allocates.
 * Return: the group holding one reference; NULL with errno EINVAL for a
 * weight above 1000, ENOMEM on memory exhaustion.
 */
RQ_EXPORT struct rq_io_group *rq_iog_create(unsigned weight)
{
	struct rq_io_group *iog;

	if (weight > RQ_IOC_WEIGHT_MAX) {
		errno = EINVAL;
		return NULL;
	}
	iog = mem_zalloc(sizeof(*iog));
	if (!iog)
		return NULL;
	atomic_init(&iog->refcount, 1);
	iog->weight = weight ? weight : RQ_IOG_WEIGHT_DEFAULT;
	iog->id = atomic_fetch_add_explicit(&iog_next_id, 1, memory_order_relaxed);
	return iog;
}

/**
 * rq_iog_get() - take a reference on an io group.
 * @iog: the group (NULL is ignored).
 *
 * Context: any thread; the caller already holds a reference.
 */
RQ_EXPORT void rq_iog_get(struct rq_io_group *iog)
{
	if (iog)
		atomic_fetch_add_explicit(&iog->refcount, 1, memory_order_relaxed);
}

/**
 * rq_iog_put() - drop a reference; the last one frees the group.
 * @iog: the group (NULL is ignored).
 *
 * Context: any thread.  Contexts and schedulers using the group hold their
 * own references, so the application may drop its one at any time.
 */
RQ_EXPORT void rq_iog_put(struct rq_io_group *iog)
{
	if (iog && atomic_fetch_sub_explicit(&iog->refcount, 1, memory_order_acq_rel) == 1)
		mem_free(iog, sizeof(*iog));
}

/**
 * rq_iog_set_weight() - change a group's weight.
 * @iog: the group.
 * @weight: 1..1000.
 *
 * Context: any thread; schedulers apply it the next time the group is
 * scheduled anew.
 * Return: 0, or -EINVAL for a NULL group or a weight outside 1..1000.
 */
RQ_EXPORT int rq_iog_set_weight(struct rq_io_group *iog, unsigned weight)
{
	if (!iog || weight < RQ_IOC_WEIGHT_MIN || weight > RQ_IOC_WEIGHT_MAX)
		return -EINVAL;
	WRITE_ONCE(iog->weight, weight);
	return 0;
}

/**
 * rq_iog_weight() - a group's weight.
 * @iog: the group, or NULL for the root group.
 *
 * Context: any thread.
 * Return: 1..1000 (the root group weighs the default, 100).
 */
RQ_EXPORT unsigned rq_iog_weight(const struct rq_io_group *iog)
{
	return iog ? READ_ONCE(iog->weight) : RQ_IOG_WEIGHT_DEFAULT;
}

/**
 * rq_ioc_set_group() - move a context to an io group.
 * @ioc: the context.
 * @iog: the group (a reference is taken), or NULL for the root group.
 *
 * Context: any thread.  Requests already made keep the group they had;
 * schedulers move the context's queues once those are idle.
 * Return: 0, or -EINVAL for a NULL context.
 */
RQ_EXPORT int rq_ioc_set_group(struct rq_io_context *ioc, struct rq_io_group *iog)
{
	struct rq_io_group *old;

	if (!ioc)
		return -EINVAL;
	rq_iog_get(iog);
	rq_spin_lock(&ioc->lock);
	old = ioc->group;
	ioc->group = iog;
	WRITE_ONCE(ioc->group_gen, ioc->group_gen + 1);
	rq_spin_unlock(&ioc->lock);
	rq_iog_put(old);
	return 0;
}

/**
 * ioc_group_get() - a context's group, with a reference.
 * @ioc: the context.
 *
 * Context: any thread; pairs with rq_iog_put().
 * Return: the group, or NULL for the root group.
 */
struct rq_io_group *ioc_group_get(struct rq_io_context *ioc)
{
	struct rq_io_group *iog;

	rq_spin_lock(&ioc->lock);
	iog = ioc->group;
	rq_iog_get(iog);
	rq_spin_unlock(&ioc->lock);
	return iog;
}

/**
 * ioc_group_gen() - a number that changes whenever the context's group is
 * set, so schedulers notice a move without taking the lock.
 * @ioc: the context.
 *
 * Context: any thread.
 */
unsigned ioc_group_gen(const struct rq_io_context *ioc)
{
	return READ_ONCE(ioc->group_gen);
}

/**
 * ioc_refs() - a context's reference count right now.
 * @ioc: the context.
 *
 * Context: any thread.  Only meaningful to a holder of a reference: when it
 * reads 1, that holder has the last one and nobody can take another.
 */
unsigned ioc_refs(const struct rq_io_context *ioc)
{
	return atomic_load_explicit(&ioc->refcount, memory_order_acquire);
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
	struct rq_io_context *ioc = ioc_current_cached();

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
	return bio->ioc ? bio->ioc : ioc_current();
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
	return ioc ? ioc_prio(ioc) : RQ_IOC_PRIO_DEFAULT;
}
