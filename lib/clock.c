/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The library's clock: CLOCK_MONOTONIC, or a source a test or simulation
 * installs.
 *
 * Schedulers read it several times per request (start time, issue time,
 * completion), and a vDSO clock_gettime() costs 20-30 ns on virtual
 * machines, as much as a whole request.  Where the kernel itself keeps time
 * with the TSC (current clocksource "tsc": invariant and synchronised across
 * CPUs) the clock is the TSC scaled to nanoseconds, calibrated once against
 * CLOCK_MONOTONIC at first use (about 2 ms) and anchored to it, so values
 * compare with CLOCK_MONOTONIC readings to within microseconds.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <librequest/elevator.h>

#include "internal/clock.h"
#include "internal/compiler.h"

/* The reading a plug keeps, and whether the thread holds one (internal/clock.h). */
__thread uint64_t tls_plug_now __attribute__((tls_model("initial-exec")));
__thread bool tls_plug_held __attribute__((tls_model("initial-exec")));

/* Installed source; NULL means CLOCK_MONOTONIC.  Changed only while quiescent. */
static uint64_t (*clock_source)(void *arg);
static void *clock_source_arg;

static pthread_once_t tsc_once = PTHREAD_ONCE_INIT;
static bool use_tsc;
static uint64_t tsc_base;     /* TSC at the anchor */
static uint64_t ns_base;      /* CLOCK_MONOTONIC at the anchor */
static uint64_t tsc_mult;     /* ns = ticks * mult >> TSC_SHIFT */
#define TSC_SHIFT 32

static uint64_t mono_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#if defined(__x86_64__)
static inline uint64_t tsc_read(void)
{
	return __builtin_ia32_rdtsc();
}

/* Is the kernel's own clocksource the TSC? Then it is safe for us too. */
static bool kernel_uses_tsc(void)
{
	FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
	char name[32] = "";

	if (!f)
		return false;
	if (!fgets(name, sizeof(name), f))
		name[0] = 0;
	fclose(f);
	return !strncmp(name, "tsc", 3);
}

static void tsc_init(void)
{
	uint64_t t0, c0, t1, c1;

	if (!kernel_uses_tsc())
		return;
	t0 = mono_now();
	c0 = tsc_read();
	do {
		t1 = mono_now();
		c1 = tsc_read();
	} while (t1 - t0 < 2000000u);
	if (c1 <= c0)
		return;
	/* ticks -> ns as a 32.32 fixed-point factor */
	tsc_mult = (uint64_t)(((unsigned __int128)(t1 - t0) << TSC_SHIFT) / (c1 - c0));
	tsc_base = c1;
	ns_base = t1;
	use_tsc = tsc_mult != 0;
}
#else
static inline uint64_t tsc_read(void)
{
	return 0;
}

static void tsc_init(void)
{
}
#endif

/*
 * Internal (lib/trace.c, declared in internal/trace.h): how rq_clock_ns()
 * turns TSC ticks into nanoseconds, so a trace can stamp events with the
 * bare TSC and scale them later to exactly the times rq_clock_ns() gives.
 * False while the clock does not read the TSC (an installed source, or a
 * kernel clocksource other than "tsc").
 */
bool clock_tsc_params(uint64_t *tick_base, uint64_t *nsec_base, uint64_t *mult);
bool clock_tsc_params(uint64_t *tick_base, uint64_t *nsec_base, uint64_t *mult)
{
	pthread_once(&tsc_once, tsc_init);
	if (LOAD_ACQUIRE(clock_source) || !use_tsc)
		return false;
	*tick_base = tsc_base;
	*nsec_base = ns_base;
	*mult = tsc_mult;
	return true;
}

/**
 * rq_clock_ns() - the library's clock, in nanoseconds.
 *
 * Context: any thread; never blocks.
 * Return: monotonic time (TSC-based where safe, see above), or the
 * installed source's value.
 */
RQ_EXPORT uint64_t rq_clock_ns(void)
{
	uint64_t (*fn)(void *) = LOAD_ACQUIRE(clock_source);

	if (unlikely(fn))
		return fn(READ_ONCE(clock_source_arg));
	pthread_once(&tsc_once, tsc_init);
	if (likely(use_tsc)) {
		uint64_t d = tsc_read() - tsc_base;

		return ns_base + (uint64_t)(((unsigned __int128)d * tsc_mult) >> TSC_SHIFT);
	}
	return mono_now();
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
