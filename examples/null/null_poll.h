/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * null_poll.h: bounded, adaptive polling before a futex sleep, for the null
 * driver's completion thread (waiting for pushes) and rqbench's submitters
 * (waiting for ended bios).  Header-only, so each program inlines it.
 *
 * A waiter polls only on a machine with two CPUs online, once it knows
 * its peer last ran on another CPU than its own (on the same CPU, polling
 * would only delay the peer), and for a budget of NULL_POLL_MIN_NS to
 * NULL_POLL_MAX_NS that doubles when a poll succeeds and halves when one
 * gives up.  The budget is the waiter's own (one writer).
 */
#ifndef NULL_POLL_H
#define NULL_POLL_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#define NULL_POLL_MIN_NS 2000u  /* a waiter polls this long at least, */
#define NULL_POLL_MAX_NS 64000u /* this long at most, before it sleeps */

static inline uint64_t null_poll_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void null_poll_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

/*
 * Is polling for a peer that last ran on @peer_cpu (-1: not known yet)
 * worth it?  Two CPUs online (read once) and the peer on another CPU.
 */
static inline bool null_poll_worth(int peer_cpu)
{
	static _Atomic long online;
	long n = atomic_load_explicit(&online, memory_order_relaxed);

	if (!n) {
		n = sysconf(_SC_NPROCESSORS_ONLN);
		n = n > 0 ? n : 1;
		atomic_store_explicit(&online, n, memory_order_relaxed);
	}
	return n > 1 && peer_cpu >= 0 && peer_cpu != sched_getcpu();
}

/*
 * Poll @ready(@arg) for at most *@budget_ns (0: start at a quarter of the
 * maximum), then adapt the budget.  Return: @ready said yes.
 */
static inline bool null_poll(uint32_t *budget_ns, bool (*ready)(void *arg), void *arg)
{
	uint64_t start = null_poll_now_ns();
	uint32_t b = *budget_ns ? *budget_ns : NULL_POLL_MAX_NS / 4;
	bool found;

	for (unsigned i = 1; !(found = ready(arg)); i++) {
		null_poll_relax();
		if (!(i % 16) && null_poll_now_ns() - start >= b)
			break;
	}
	if (found)
		*budget_ns = b * 2 < NULL_POLL_MAX_NS ? b * 2 : NULL_POLL_MAX_NS;
	else
		*budget_ns = b / 2 > NULL_POLL_MIN_NS ? b / 2 : NULL_POLL_MIN_NS;
	return found;
}

#endif /* NULL_POLL_H */
