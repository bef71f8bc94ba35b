/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * I/O contexts inside the library: who a bio is submitted for.  Schedulers
 * that are fair between submitters (cfq, bfq) keep their per-context state
 * in sched_priv.
 *
 * What may run at the same time:
 *
 *   operation                          concurrent with
 *   rq_ioc_get / rq_ioc_put            everything
 *   rq_ioc_prio, ioc_weight (reads)    everything (relaxed atomics)
 *   rq_ioc_set_prio, ioc_set_weight    everything; readers see old or new
 *   rq_ioc_current / set_current       everything; per-thread state
 *   rq_iog_get / rq_iog_put            everything
 *   rq_iog_set_weight, rq_iog_weight   everything (relaxed atomics)
 *   rq_ioc_set_group, ioc_group_get    everything; ioc->lock orders them
 */
#ifndef RQ_INTERNAL_IOC_H
#define RQ_INTERNAL_IOC_H

#include <librequest/bio.h>
#include <librequest/iocontext.h>
#include <librequest/queue.h>

#include "compiler.h"

/* Scheduler slots in an io context. */
#define RQ_IOC_SCHED_SLOTS 4

/* Default and bounds of an io context's weight (as the io.weight of cgroups). */
#define RQ_IOC_WEIGHT_DEFAULT 100u
#define RQ_IOC_WEIGHT_MIN 1u
#define RQ_IOC_WEIGHT_MAX 1000u

/* The priority an io context gets for 0: best effort, level 4. */
#define RQ_IOC_PRIO_DEFAULT RQ_IOPRIO_VALUE(RQ_IOPRIO_CLASS_BE, 4)

struct rq_io_context {
	atomic_uint refcount;
	uint16_t ioprio;        /* RQ_IOPRIO_VALUE(); access with READ/WRITE_ONCE */
	uint64_t id;            /* unique, from a global counter */
	unsigned weight;        /* 1..1000; access with READ/WRITE_ONCE */
	bool weight_set;        /* weight set by the application (else derive it) */
	rq_spinlock_t lock;     /* guards @group against rq_ioc_set_group() */
	struct rq_io_group *group; /* referenced; NULL: the root group */
	unsigned group_gen;     /* bumped by every rq_ioc_set_group(); READ_ONCE */
	void *sched_priv[RQ_IOC_SCHED_SLOTS]; /* owned by schedulers */
};

/*
 * struct rq_io_group - a set of io contexts sharing one weight, standing in
 * for a cgroup with io.weight: proportional schedulers divide the device
 * between groups by group weight, then inside a group between contexts.
 */
struct rq_io_group {
	atomic_uint refcount;
	unsigned weight;        /* 1..1000; access with READ/WRITE_ONCE */
	uint64_t id;            /* unique, from a global counter */
};

/* Default weight of a group. */
#define RQ_IOG_WEIGHT_DEFAULT 100u

/* Per-thread state (lib/ioc.c): the context set by the application, and our own. */
struct ioc_thread {
	struct rq_io_context *set;
	struct rq_io_context *own;
};

extern __thread struct ioc_thread tl_ioc
	__attribute__((tls_model("initial-exec"), visibility("hidden")));

/**
 * ioc_current_cached() - the calling thread's io context if it has one
 * already (set, else its own), without making one.  Context: any thread.
 * Return: the context, or NULL when rq_ioc_current() would have to make it.
 */
static inline struct rq_io_context *ioc_current_cached(void)
{
	struct rq_io_context *ioc = tl_ioc.set;

	return likely(ioc) ? ioc : tl_ioc.own;
}

/**
 * ioc_current() - rq_ioc_current() for the library's own paths: the
 * lookup inline (a submission pays two thread-local loads, not a call
 * through the exported symbol), the first use's creation out of line.
 * Context: any thread; allocates on the thread's first use.
 * Return: as rq_ioc_current().
 */
static inline struct rq_io_context *ioc_current(void)
{
	struct rq_io_context *ioc = ioc_current_cached();

	return likely(ioc) ? ioc : rq_ioc_current();
}

/** ioc_prio() - rq_ioc_prio() inline: the context's priority, never 0. */
static inline uint16_t ioc_prio(const struct rq_io_context *ioc)
{
	return READ_ONCE(ioc->ioprio);
}

/**
 * ioc_of_bio() - the io context a bio is submitted for: bio->ioc, else the
 * calling thread's (rq_ioc_current()).  No reference is taken.
 * Context: the submitting thread.  Return: NULL only on memory exhaustion.
 */
struct rq_io_context *ioc_of_bio(const struct rq_bio *bio);

/**
 * ioc_bio_prio() - a bio's effective priority: bio->ioprio, else its
 * context's.  Context: the submitting thread.
 */
uint16_t ioc_bio_prio(const struct rq_bio *bio);

/**
 * ioc_set_weight() - a context's share weight for proportional schedulers.
 * Return: 0, or -EINVAL outside 1..1000.
 */
int ioc_set_weight(struct rq_io_context *ioc, unsigned weight);

/** ioc_weight() - a context's weight (100 unless set). */
unsigned ioc_weight(const struct rq_io_context *ioc);

/**
 * ioc_weight_is_set() - true once the application gave the context a weight
 * (rq_ioc_set_weight() / ioc_set_weight()); schedulers otherwise derive one
 * from the priority (ioc_prio_to_weight()).
 */
bool ioc_weight_is_set(const struct rq_io_context *ioc);

/**
 * ioc_prio_to_weight() - the weight a priority stands for, as the kernel's
 * bfq maps it: (8 - level) * 10, so level 0 -> 80 ... level 7 -> 10, for
 * every class (the class itself orders service, not the weight).
 */
unsigned ioc_prio_to_weight(uint16_t ioprio);

/**
 * ioc_group_get() - the context's group with a reference (put it with
 * rq_iog_put()), or NULL for the root group.  Context: any thread.
 */
struct rq_io_group *ioc_group_get(struct rq_io_context *ioc);

/** ioc_group_gen() - changes whenever the context's group is set. */
unsigned ioc_group_gen(const struct rq_io_context *ioc);

/** ioc_refs() - current reference count (a scheduler holding the only one may let go). */
unsigned ioc_refs(const struct rq_io_context *ioc);

/**
 * ioprio_valid() - is @ioprio a valid RQ_IOPRIO_VALUE(): class 0..3, level
 * 0..7, no other bits, and class NONE only with level 0?
 */
bool ioprio_valid(uint16_t ioprio);

#endif /* RQ_INTERNAL_IOC_H */
