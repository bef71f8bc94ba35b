/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * flashsim: a flash (NAND) SSD, simulated on a virtual clock, as a
 * librequest driver.
 *
 * The model (doc: examples/flash/README.md):
 *
 *   - channels x dies_per_channel dies.  A 4 KiB logical page lives on die
 *     (lpn mod dies) for reads: the layout a sequential fill leaves.
 *   - A read of a page: the die senses it (read_ns, after whatever the die
 *     is busy with), then the page crosses the die's channel (xfer_ns per
 *     page, one transfer at a time per channel).  The command ends when its
 *     last page is out, plus the host link (bytes / host_mbps) and a fixed
 *     overhead.
 *   - A write fills slots of the DRAM write buffer (write_buffer_kib): it
 *     ends when each of its pages has a slot and its data crossed the host
 *     link.  Each buffered page is then programmed in the background on the
 *     next die in turn (log-structured striping: channel transfer, then
 *     program_ns on the die); its slot is free when the program ends.  A
 *     full buffer makes writes wait for the earliest slot to free.
 *   - Every die starts with free_blocks erased blocks of pages_per_block
 *     pages (the drive is preconditioned: all logical data written).  Each
 *     programmed page uses a free page; when a die has fewer than
 *     gc_low_blocks free blocks it garbage-collects one victim block:
 *     gc_valid_pct of its pages are read and programmed elsewhere, then it
 *     is erased (erase_ns), the die busy throughout: reads and programs on
 *     that die wait (the GC stall).  The victim's valid share is a
 *     parameter, not tracked page by page.
 *   - A flush ends when every buffered page is programmed; a discard ends
 *     after the overhead.
 *
 * Time is virtual only: the clock moves in flashsim_run_until(), and the
 * library's clock (rq_clock_set_source) is that clock.  The process must
 * have called rq_service_manual() before creating the device: the service
 * work the library asks for is done by flashsim_run_until() at its virtual
 * time.  Submit from one thread on one CPU; then a run repeats exactly.
 * No quiescing is needed: without a service thread every dispatch happens
 * in the submitting or stepping thread.
 *
 * Not thread-safe: one thread drives a device; one device per process.
 */
#ifndef FLASHSIM_H
#define FLASHSIM_H

#include <stdbool.h>
#include <stdint.h>

#include <librequest/mq.h>
#include <librequest/sq.h>

#ifdef __cplusplus
extern "C" {
#endif

/** struct flashsim_model - the drive.  Zero fields take the defaults [..]. */
struct flashsim_model {
	uint64_t capacity_bytes;   /* [256 GiB] */
	unsigned channels;         /* [8] */
	unsigned dies_per_channel; /* [4] */
	unsigned read_ns;          /* [60000] tR: sense one page */
	unsigned program_ns;       /* [600000] tPROG */
	unsigned erase_ns;         /* [3500000] tBERS */
	unsigned xfer_ns;          /* [5000] one 4 KiB page over a channel */
	unsigned host_mbps;        /* [3200] host link, MB/s (10^6 B/s) */
	unsigned overhead_ns;      /* [10000] controller time per command */
	unsigned write_buffer_kib; /* [8192] DRAM write buffer */
	unsigned pages_per_block;  /* [256] 4 KiB pages */
	unsigned free_blocks;      /* [8] erased blocks per die at start */
	unsigned gc_low_blocks;    /* [4] collect below this many free blocks */
	unsigned gc_valid_pct;     /* [70] valid pages in a victim block, % */
	unsigned queue_depth;      /* [64] commands the drive holds (tags) */
};

/** enum flashsim_front - which request layer front end the queue uses. */
enum flashsim_front {
	FLASHSIM_FRONT_MQ = 0,
	FLASHSIM_FRONT_SQ = 1,
};

/** struct flashsim_config - how to make the device. */
struct flashsim_config {
	struct flashsim_model model;
	enum flashsim_front front;
	const char *sched;         /* NULL: the library's choice */
	unsigned sq_nr_requests;   /* sq: request pool; 0: the library's */
};

/** struct flashsim_stats - what the drive did. */
struct flashsim_stats {
	uint64_t commands, reads, writes, flushes, discards;
	uint64_t pages_read, pages_programmed;
	uint64_t buffer_waits;     /* writes that waited for a buffer slot */
	uint64_t gc_runs;          /* victim blocks collected */
	uint64_t gc_ns;            /* die time spent collecting */
	uint64_t erases;
};

struct flashsim_dev;

/** flashsim_model_fill() - put the defaults into @m's zero fields. */
void flashsim_model_fill(struct flashsim_model *m);

/**
 * flashsim_model_check() - is @m (after flashsim_model_fill) usable?
 * Return: 0, or -EINVAL (gc_low_blocks >= free_blocks, gc_valid_pct >= 100,
 * a zero count ...).
 */
int flashsim_model_check(const struct flashsim_model *m);

/**
 * flashsim_create() - make the device and its queue.
 * @cfg: configuration (copied).
 * @out: receives the device.
 * Return: 0; -EINVAL (model, scheduler, no rq_service_manual()), -EBUSY
 * (a device exists), -ENOMEM.
 */
int flashsim_create(const struct flashsim_config *cfg, struct flashsim_dev **out);

/** flashsim_queue() - the queue to submit bios to. */
struct rq_queue *flashsim_queue(struct flashsim_dev *dev);

/** flashsim_now_ns() - the virtual clock. */
uint64_t flashsim_now_ns(struct flashsim_dev *dev);

/**
 * flashsim_next_event_ns() - when the next command ends or the library's
 * service work falls due; UINT64_MAX if neither.
 */
uint64_t flashsim_next_event_ns(struct flashsim_dev *dev);

/**
 * flashsim_run_until() - complete every command that ends by @when_ns, in
 * order of end time, each at its time (end_io runs in the caller), doing
 * the service work due on the way; then set the clock to @when_ns.
 */
void flashsim_run_until(struct flashsim_dev *dev, uint64_t when_ns);

/** flashsim_busy() - true if the drive holds a command. */
bool flashsim_busy(struct flashsim_dev *dev);

/** typedef flashsim_dispatch_hook_t - as hddsim's: a request reached the drive. */
typedef void (*flashsim_dispatch_hook_t)(void *arg, struct rq_request *rq, uint64_t now_ns);

/** flashsim_set_dispatch_hook() - install @fn (NULL: none). */
void flashsim_set_dispatch_hook(struct flashsim_dev *dev, flashsim_dispatch_hook_t fn, void *arg);

/** flashsim_get_stats() - read the counters. */
void flashsim_get_stats(struct flashsim_dev *dev, struct flashsim_stats *st);

/** flashsim_destroy() - tear down (every bio must have ended); NULL is allowed. */
void flashsim_destroy(struct flashsim_dev *dev);

#ifdef __cplusplus
}
#endif

#endif /* FLASHSIM_H */
