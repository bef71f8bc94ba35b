/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The library's clock: CLOCK_MONOTONIC, or a source a test or simulation
 * installs.  The default path costs one predictable branch on top of
 * clock_gettime() (a vDSO call).
 */
#include <time.h>

#include <librequest/elevator.h>

#include "internal/compiler.h"

/* Installed source; NULL means CLOCK_MONOTONIC.  Changed only while quiescent. */
static uint64_t (*clock_source)(void *arg);
static void *clock_source_arg;

/**
 * rq_clock_ns() - the library's clock, in nanoseconds.
 *
 * Context: any thread; never blocks.
 * Return: CLOCK_MONOTONIC time, or the installed source's value.
 */
RQ_EXPORT uint64_t rq_clock_ns(void)
{
	uint64_t (*fn)(void *) = LOAD_ACQUIRE(clock_source);
	struct timespec ts;

	if (unlikely(fn))
		return fn(READ_ONCE(clock_source_arg));
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/**
 * rq_clock_set_source() - replace the library's clock.
 * @fn: returns nanoseconds, never going backwards; NULL restores
 *	CLOCK_MONOTONIC.
 * @arg: passed to @fn.
 *
 * Context: before queues exist, or with all queues frozen: a reader racing
 * with the change may see the old source once.
 */
RQ_EXPORT void rq_clock_set_source(uint64_t (*fn)(void *arg), void *arg)
{
	/* Publish the argument before the function that uses it. */
	if (fn) {
		WRITE_ONCE(clock_source_arg, arg);
		STORE_RELEASE(clock_source, fn);
	} else {
		STORE_RELEASE(clock_source, fn);
		WRITE_ONCE(clock_source_arg, arg);
	}
}
