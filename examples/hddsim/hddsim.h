/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * hddsim: a rotating disk, simulated, as a librequest driver.
 *
 * The model: the disk is a stack of tracks, grouped into zones whose tracks
 * hold fewer sectors the further in they lie (so the outer, low-numbered
 * sectors transfer fastest).  Reaching a sector costs a seek that grows with
 * the square root of the distance in tracks (one track: the settle time;
 * the whole stroke: full_stroke_ns), then the rotational latency until the
 * sector passes under the head: the platter turns at rpm from time 0, so
 * that wait follows from the clock alone and runs are deterministic.  Each
 * track starts one settle time of rotation after the one before (track
 * skew), so a transfer or a sequential command crossing to the next track
 * loses no revolution.  One command moves at a time; with ncq_depth > 1 the
 * drive holds more and starts the one it can reach first (shortest
 * positioning time first).  After a read the drive keeps reading ahead into
 * one cache segment; a read of the following sectors is served from it.
 * There is no write cache: a write is done when it is on the platter.
 *
 * The queue is either multi-queue (one hw queue; queue_rq hands each
 * request to the drive) or single-queue (request_fn pulls requests while
 * the drive holds fewer than ncq_depth), so the schedulers of both front
 * ends can run on the same disk.
 *
 * Time is either real (a drive thread sleeps until each command is done) or
 * virtual: the clock only moves when the caller says so (hddsim_advance,
 * hddsim_advance_to), and the library's clock (rq_clock_set_source) is
 * that same clock, so schedulers see simulated time.  On a virtual clock
 * the queue is kept quiesced (either front end): submitted bios wait in
 * the scheduler (or the software queues) and reach the drive in the next
 * hddsim_advance*() call, at the virtual time of that call, whichever
 * thread the library would have dispatched them on.  A virtual-clock run
 * needs no sleeping and gives the same result every time, provided its bios
 * are submitted from one thread that stays on one CPU (the library picks
 * software queues, and kyber its lists, by CPU), and, for schedulers that
 * hold work back and ask for a delayed run (kyber, bfq, cfq idling), that
 * the process called rq_service_manual() before its first queue: the
 * library's service work is then measured on the virtual clock and done by
 * hddsim_advance*() at the virtual moment it falls due, instead of by the
 * service thread on the real clock.  (Real-clock devices in such a process
 * need the application's rq_service_run() calls, as any queue does.)
 * Switch schedulers only while it is idle.
 *
 * What may run at the same time:
 *
 *   operation                          concurrent with
 *   hddsim_geom_init, hddsim_locate,
 *   hddsim_seek_ns, hddsim_rotation_ns,
 *   hddsim_transfer_ns, hddsim_access_ns  everything (pure functions)
 *   hddsim_create                      anything; one virtual-clock device
 *                                      per process at a time
 *   hddsim_queue, hddsim_now_ns,
 *   hddsim_get_stats                   everything
 *   hddsim_advance, hddsim_advance_to  submissions; not with each other
 *   hddsim_destroy                     nothing on that device
 */
#ifndef HDDSIM_H
#define HDDSIM_H

#include <stdbool.h>
#include <stdint.h>

#include <librequest/mq.h>
#include <librequest/sq.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HDDSIM_MAX_ZONES 32

/**
 * struct hddsim_model - the disk's mechanics.  Zero fields take the
 * defaults in brackets (a 1 TiB 7200 rpm desktop disk).
 */
struct hddsim_model {
	uint64_t capacity_sectors; /* [2^31: 1 TiB] */
	unsigned rpm;              /* [7200] */
	unsigned settle_ns;        /* [800000] one-track seek, head switch */
	unsigned full_stroke_ns;   /* [16000000] seek across every track */
	unsigned spt_outer;        /* [3200] sectors per track, outer zone
				      (~196 MB/s at 7200 rpm) */
	unsigned spt_inner;        /* [1600] sectors per track, inner zone */
	unsigned nr_zones;         /* [16] 1 .. HDDSIM_MAX_ZONES */
	unsigned overhead_ns;      /* [0] controller time per command */
	unsigned readahead_kib;    /* [1024] read-ahead segment; see
				      no_readahead */
	bool no_readahead;         /* turn read-ahead off */
};

/** struct hddsim_geom - a model with its zone table worked out. */
struct hddsim_geom {
	struct hddsim_model m;
	uint64_t rev_ns;           /* one revolution */
	uint64_t nr_tracks;
	uint64_t tracks_per_zone;
	uint32_t spt[HDDSIM_MAX_ZONES];
	uint64_t zone_start[HDDSIM_MAX_ZONES + 1]; /* first sector of each zone */
};

/** struct hddsim_pos - where a sector lies. */
struct hddsim_pos {
	uint64_t track;
	uint32_t index;            /* sector within the track */
	uint32_t spt;              /* sectors on that track */
};

/** struct hddsim_timing - what one command cost. */
struct hddsim_timing {
	uint64_t overhead_ns;
	uint64_t seek_ns;
	uint64_t rotation_ns;
	uint64_t transfer_ns;
	uint64_t total_ns;
	bool cache_hit;            /* served from the read-ahead segment */
};

/**
 * hddsim_geom_init() - fill defaults into @m's copy and work out the zones.
 * @g: receives the geometry.
 * @m: the model (NULL: all defaults).
 * Return: 0, or -EINVAL for an impossible model (spt_inner > spt_outer,
 * too many zones, a seek that shrinks with distance ...).
 */
int hddsim_geom_init(struct hddsim_geom *g, const struct hddsim_model *m);

/** hddsim_locate() - the track and position of @sector. */
void hddsim_locate(const struct hddsim_geom *g, uint64_t sector, struct hddsim_pos *pos);

/**
 * hddsim_seek_ns() - time to move the head between two tracks: 0 for the
 * same track, else settle_ns + (full_stroke_ns - settle_ns) *
 * sqrt((distance - 1) / (nr_tracks - 2)).
 */
uint64_t hddsim_seek_ns(const struct hddsim_geom *g, uint64_t from_track, uint64_t to_track);

/**
 * hddsim_rotation_ns() - time from @now_ns until the start of the sector at
 * @pos passes under the head (0 .. one revolution).
 */
uint64_t hddsim_rotation_ns(const struct hddsim_geom *g, uint64_t now_ns,
			    const struct hddsim_pos *pos);

/**
 * hddsim_transfer_ns() - time to read or write @nr sectors from @sector
 * once the head is there: each track's share of a revolution, plus a
 * settle time at every track crossed.
 */
uint64_t hddsim_transfer_ns(const struct hddsim_geom *g, uint64_t sector, uint32_t nr);

/**
 * hddsim_access_ns() - a whole command without the read-ahead cache:
 * overhead, seek from @head_track, rotation, transfer, started at @now_ns.
 * @t: if not NULL, receives the parts.
 * Return: the total.
 */
uint64_t hddsim_access_ns(const struct hddsim_geom *g, uint64_t head_track, uint64_t now_ns,
			  uint64_t sector, uint32_t nr, struct hddsim_timing *t);

/** enum hddsim_clock - what time the drive runs on. */
enum hddsim_clock {
	HDDSIM_CLOCK_VIRTUAL = 0, /* advanced by hddsim_advance*(); also the library's */
	HDDSIM_CLOCK_REAL = 1,    /* CLOCK_MONOTONIC; a drive thread completes */
};

/** enum hddsim_front - which request layer front end the queue uses. */
enum hddsim_front {
	HDDSIM_FRONT_MQ = 0, /* rq_mq_alloc_queue: one hw queue, queue_rq */
	HDDSIM_FRONT_SQ = 1, /* rq_sq_alloc_queue: request_fn pulls */
};

/** struct hddsim_config - how to make a simulated disk. */
struct hddsim_config {
	struct hddsim_model model;
	enum hddsim_clock clock;     /* [HDDSIM_CLOCK_VIRTUAL] */
	enum hddsim_front front;     /* [HDDSIM_FRONT_MQ] */
	unsigned ncq_depth;          /* [1] commands the drive holds */
	unsigned hw_queue_depth;     /* [32] mq: tags (nr_requests is twice
					that with a scheduler); sq: unused */
	unsigned sq_nr_requests;     /* sq: the request pool; 0: the
					library's (128) */
	const char *sched;           /* NULL: the library's choice (mq:
					mq-deadline if registered, a
					rotational disk with one hw queue;
					sq: cfq if registered, else noop) */
	struct rq_queue_limits limits; /* zero fields: a SATA disk's */
};

/** struct hddsim_stats - what the drive did. */
struct hddsim_stats {
	uint64_t commands;   /* data commands done */
	uint64_t reads, writes, flushes;
	uint64_t sectors;
	uint64_t cache_hits; /* reads served from read-ahead */
	uint64_t seeks;      /* commands that moved the head */
	uint64_t seek_ns, rotation_ns, transfer_ns;
	uint64_t busy_ns;    /* time with a command moving */
	uint64_t refused;    /* mq: queue_rq answers of DEV_RESOURCE (drive
				full); sq: always 0 */
};

struct hddsim_dev;

/** hddsim_config_default() - fill @cfg with the defaults. */
void hddsim_config_default(struct hddsim_config *cfg);

/**
 * hddsim_create() - make a simulated disk and its queue.
 * @cfg: configuration; copied.
 * @out: receives the device.
 *
 * A virtual-clock device installs its clock as the library's
 * (rq_clock_set_source) until hddsim_destroy(); make it before other queues
 * exist.  Context: may sleep; a real-time device starts its drive thread.
 * With cfg->front HDDSIM_FRONT_SQ the queue is a single-queue one and
 * cfg->sched names one of its schedulers (noop, deadline, cfq).
 * Return: 0, -EINVAL (bad model or configuration, unknown scheduler),
 * -EBUSY (a virtual-clock device exists already), -ENOMEM.
 */
int hddsim_create(const struct hddsim_config *cfg, struct hddsim_dev **out);

/** hddsim_queue() - the queue to submit bios to. */
struct rq_queue *hddsim_queue(struct hddsim_dev *dev);

/** hddsim_geom() - the device's geometry (for the pure model functions). */
const struct hddsim_geom *hddsim_geom(struct hddsim_dev *dev);

/** hddsim_now_ns() - the device's clock: virtual, or CLOCK_MONOTONIC. */
uint64_t hddsim_now_ns(struct hddsim_dev *dev);

/**
 * hddsim_advance() - virtual clock: dispatch what was submitted, then move
 * the clock to the moment the command under the head is done and complete
 * it (its bios end in the caller's thread) and dispatch again.  With
 * application-driven service (rq_service_manual()) each dispatch also does
 * the library's service work due at that moment (rq_service_run()).
 * Return: false, with the clock unchanged, if the drive is still idle.
 */
bool hddsim_advance(struct hddsim_dev *dev);

/**
 * hddsim_advance_to() - virtual clock: complete every command done by
 * @when_ns, set the clock to @when_ns (if later), then run the hw queue so
 * work a scheduler held back (idling, throttling) can go, and, with
 * application-driven service, the service work due by then.
 */
void hddsim_advance_to(struct hddsim_dev *dev, uint64_t when_ns);

/**
 * hddsim_next_event_ns() - virtual clock: the time of the next thing that
 * happens if nothing more is submitted: the command under the head ends,
 * or (with rq_service_manual()) the library's service work falls due, as
 * rq_service_run() reported in the last dispatch window.
 * Return: that time, or UINT64_MAX if nothing is scheduled.
 */
uint64_t hddsim_next_event_ns(struct hddsim_dev *dev);

/**
 * hddsim_run_until() - virtual clock: hddsim_advance_to(@when_ns), then move
 * the clock to @when_ns even if a command is under the head (it keeps its
 * end time; @when_ns should not pass it: use hddsim_next_event_ns()), and
 * open a dispatch window there.  For event-driven callers that submit at
 * given times (trace replay) and need the library clock at that time.
 */
void hddsim_run_until(struct hddsim_dev *dev, uint64_t when_ns);

/**
 * typedef hddsim_dispatch_hook_t - called, under the drive lock, when the
 * drive accepts a request from the library (blktrace's D event), with the
 * time: the hook must not call into the device or the queue.
 */
typedef void (*hddsim_dispatch_hook_t)(void *arg, struct rq_request *rq, uint64_t now_ns);

/**
 * hddsim_set_dispatch_hook() - install @fn (NULL: none); set it while the
 * device is idle.
 */
void hddsim_set_dispatch_hook(struct hddsim_dev *dev, hddsim_dispatch_hook_t fn, void *arg);

/** hddsim_busy() - true if the drive holds a command. */
bool hddsim_busy(struct hddsim_dev *dev);

/** hddsim_get_stats() - read the counters. */
void hddsim_get_stats(struct hddsim_dev *dev, struct hddsim_stats *st);

/**
 * hddsim_destroy() - tear the queue down, stop the drive thread, give the
 * library its own clock back.
 * @dev: the device; NULL is allowed.
 * Context: may sleep; every submitted bio has ended (on a virtual clock
 * nobody would advance the clock for the rest).
 */
void hddsim_destroy(struct hddsim_dev *dev);

#ifdef __cplusplus
}
#endif

#endif /* HDDSIM_H */
