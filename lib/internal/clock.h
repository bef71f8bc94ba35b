/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The clock layer's per-thread reading (lib/clock.c): the kernel's
 * plug->cur_ktime.  While the thread holds a plug (lib/plug.c sets
 * tls_plug_held for the outermost one) the first core_clock_ns() reads
 * the clock and later ones return that reading, through the plug's flush,
 * which drops it at its end; without a plug every call reads the clock.
 * Services the built-in schedulers may use too (tests/build/layers.sh).
 */
#ifndef RQ_INTERNAL_CLOCK_H
#define RQ_INTERNAL_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

#include <librequest/elevator.h>

extern __thread uint64_t tls_plug_now __attribute__((tls_model("initial-exec")));
extern __thread bool tls_plug_held __attribute__((tls_model("initial-exec")));

/*
 * Time for request bookkeeping: one clock read serves every request made,
 * issued or completed inline while the thread holds a plug, its flush
 * included; the next reading comes after the flush.
 */
static inline uint64_t core_clock_ns(void)
{
	uint64_t t = tls_plug_now;

	if (t)
		return t;
	t = rq_clock_ns();
	if (tls_plug_held)
		tls_plug_now = t;
	return t;
}

#endif
