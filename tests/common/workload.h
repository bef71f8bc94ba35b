/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The scheduler conformance scenarios both front ends run
 * (tests/sched/test_conformance.c over the multi-queue mock,
 * tests/sched/test_sq_conformance.c over the single-queue device).
 *
 * A scenario sees the device as a struct wl_dev: its queue, its memory and
 * its driver's recorder (recorder.h), which both test drivers keep in the
 * same form.  The test program makes the device its front end's way, with
 * the limits of wl_limits() and WL_MEM_BYTES of memory, and destroys it.
 * Every function here checks with cmocka and fails the test when a check
 * does not hold.
 */
#ifndef RQ_TEST_WORKLOAD_H
#define RQ_TEST_WORKLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include <librequest/librequest.h>

#include "recorder.h"

/* The conformance device: its size and queue limits. */
#define WL_MEM_BYTES (8u << 20)
#define WL_MAX_SECTORS 64u        /* 32 KiB */
#define WL_MAX_SEGMENTS 8u
#define WL_MAX_DISCARD 128u
#define WL_MAX_WZ 96u

/** struct wl_dev - a conformance device, whichever front end it is on. */
struct wl_dev {
	const char *sched;        /* the scheduler under test */
	struct rq_queue *q;
	uint8_t *mem;             /* the WL_MEM_BYTES behind the device */
	struct recorder *rec;     /* the requests the driver took (MOCK_QUEUE_RQ) */
};

/** wl_limits() - the conformance queue's limits (the WL_MAX_* above, a write cache). */
void wl_limits(struct rq_queue_limits *lim);

/** wl_expect_active() - the "scheduler" attribute of @q shows @name active (in brackets). */
void wl_expect_active(struct rq_queue *q, const char *name);

/**
 * wl_run_mixed() - the mixed workload: 2 threads, each owning half of the
 * device, submit @batches plugs of 1..24 reads, writes, discards,
 * write-zeroes and flushes (some NOMERGE, FUA or PREFLUSH, some larger
 * than their op's limit, some plugs in reverse order), non-overlapping
 * within a plug.  Checks: every bio ended exactly once with OK; reads saw
 * what the threads' shadow copies say; the device equals the shadows;
 * every request the driver took respected max_sectors, max_segments,
 * max_discard_sectors and max_write_zeroes_sectors and its data walk added
 * up; each NOMERGE request is one NOMERGE bio or a piece of a split one;
 * and each NOMERGE bio reached the driver as a request of its own.
 * The driver must end requests on its own (inline or from a thread).
 */
void wl_run_mixed(const struct wl_dev *dev, unsigned batches);

/**
 * wl_mixed_created() - @dev was created with its scheduler: it shows
 * active; wl_run_mixed(); bios were merged and split, and no request
 * ended in error.
 */
void wl_mixed_created(const struct wl_dev *dev, unsigned batches);

/**
 * wl_mixed_switched() - @dev was created with @first: it shows active;
 * switching to dev->sched through the attribute works and shows; then
 * wl_run_mixed().
 */
void wl_mixed_switched(const struct wl_dev *dev, const char *first, unsigned batches);

/**
 * wl_sequential_plug_merges() - 4 contiguous 4 KiB writes on a plug end
 * once each with OK, reach the driver as one 16 KiB request at their
 * first sector, and count 3 back merges.  The driver ends requests inline.
 */
void wl_sequential_plug_merges(const struct wl_dev *dev);

/**
 * wl_nomerge_never_merges() - the same writes, NOMERGE: they end once
 * each with OK and reach the driver as 4 requests of 4 KiB; no merge is
 * counted.  The driver ends requests inline.
 */
void wl_nomerge_never_merges(const struct wl_dev *dev);

#endif /* RQ_TEST_WORKLOAD_H */
