/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librequest: the library's background work: the service thread, or
 * application-driven service from an event loop.
 */
#ifndef LIBREQUEST_SERVICE_H
#define LIBREQUEST_SERVICE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------- service
 *
 * The library's background work — hardware queue runs asked for
 * asynchronously or after a delay (RQ_STS_RESOURCE's 3 ms safety net, a
 * scheduler idling), requeue kicks, the timeout scan, completion mailboxes
 * (rq_affinity 2), the single-queue front end's deferred work — is done by
 * one service thread the library starts with the first queue.  A
 * run-to-completion application can own it instead: no thread is started,
 * and its event loop calls rq_service_run() when the returned time has
 * passed or rq_service_fd() polls readable.
 *
 * Clocks.  The service thread measures its deadlines on CLOCK_MONOTONIC and
 * sleeps on real time.  In application-driven mode every deadline (a delayed
 * run's, a requeue kick's, the timeout scan's, the 1 ms fallbacks for
 * completion mailboxes and the single-queue deferred work) is measured on
 * the library clock, rq_clock_ns(): CLOCK_MONOTONIC by default, or the
 * source rq_clock_set_source() installed.  A simulation on a virtual clock
 * thus gets from rq_service_run() exactly the work due at the virtual time
 * it has reached, however much real time has passed, and the wait it
 * returns is in that clock's nanoseconds (with a virtual clock: advance it
 * by that much, then call again).  rq_service_clock_ns() reads the clock in
 * use.
 */

/**
 * rq_service_manual() - switch the library to application-driven service.
 * Call before creating the first queue.
 * Context: any thread; once per process (again: 0, nothing changes).
 * Return: 0; -EBUSY if a queue exists or the service thread already runs;
 * -errno if the eventfd could not be made.
 */
int rq_service_manual(void);

/**
 * rq_service_run() - do the service work that is due now, by the library
 * clock (rq_clock_ns()).
 * Context: any thread, not from a driver or scheduler hook; concurrent
 * calls serialize.  Drivers' timeout hooks and queue runs happen here.
 * Return: library-clock nanoseconds until the next work falls due (0: call
 * again now; INT64_MAX: nothing is scheduled and no queue exists), or
 * -EINVAL when not in application-driven mode.
 */
int64_t rq_service_run(void);

/**
 * rq_service_fd() - an eventfd that becomes readable when work is asked
 * for sooner than rq_service_run() said (an async run, a new delay);
 * rq_service_run() clears it.
 *
 * Context: any thread; never blocks.
 * Return: the descriptor (the library's: do not close it), or -EINVAL when
 * not in application-driven mode.
 */
int rq_service_fd(void);

/**
 * rq_service_clock_ns() - the clock service deadlines are measured on:
 * rq_clock_ns() in application-driven mode, else CLOCK_MONOTONIC (the
 * service thread's).  For a scheduler that asks for a delayed run and needs
 * to know when it will come (both clocks are the same one unless a source
 * is installed).
 * Context: any thread, any hook; never blocks.
 * Return: nanoseconds.
 */
uint64_t rq_service_clock_ns(void);

#ifdef __cplusplus
}
#endif

#endif /* LIBREQUEST_SERVICE_H */
