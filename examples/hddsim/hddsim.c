/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * hddsim: a simulated rotating disk.  See hddsim.h for the model.
 *
 * Reading order: the model (geometry, seek, rotation, transfer), the drive
 * (its command queue, choosing and starting a command, the read-ahead
 * segment, completing), the clocks (virtual: hddsim_advance*; real: the
 * drive thread), the rq_mq_ops, the single-queue request_fn, then creation
 * and teardown.
 *
 * How the drive limits what it takes, multi-queue: queue_rq accepts while
 * the drive holds fewer than ncq_depth commands and stops the hw queue when
 * it is full (as drivers with a ring do); a request offered to a full drive
 * gets RQ_STS_DEV_RESOURCE and waits, parked by the core.  Whoever
 * completes a command starts the hw queue again, in its own thread, after
 * ending the request.  Single-queue: request_fn starts requests while fewer
 * than ncq_depth are started (rq_sq_in_flight), and whoever completes one
 * ends it and runs the queue again.  Either way the scheduler, not the
 * drive, holds the waiting work, and on a virtual clock all dispatch
 * happens in the thread that advances time.
 *
 * Locking: dev->lock guards the drive state.  It is never held across a
 * call into the library (ending a request may dispatch the next one, which
 * calls queue_rq or request_fn, which take the lock).  Single-queue:
 * request_fn takes dev->lock inside the queue lock; nothing takes them the
 * other way round.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include <librequest/elevator.h>

#include "hddsim.h"

#define HDDSIM_DEFAULT_CAPACITY (1ull << 31)
#define HDDSIM_DEFAULT_RPM 7200
#define HDDSIM_DEFAULT_SETTLE_NS 800000u
#define HDDSIM_DEFAULT_STROKE_NS 16000000u
#define HDDSIM_DEFAULT_SPT_OUTER 3200
#define HDDSIM_DEFAULT_SPT_INNER 1600
#define HDDSIM_DEFAULT_ZONES 16
#define HDDSIM_DEFAULT_RA_KIB 1024
#define HDDSIM_DEFAULT_TAGS 32
#define HDDSIM_VCLOCK_START_NS 1000000000ull /* virtual time starts at 1 s */
#define HDDSIM_MAX_SECTORS 2560              /* 1280 KiB, as SATA disks */

/* ================================================================ model */

/**
 * hddsim_geom_init() - complete a model and work out its zones.
 * @g: receives the geometry.
 * @m: the model, or NULL for the defaults.
 * Return: 0 or -EINVAL.
 */
int hddsim_geom_init(struct hddsim_geom *g, const struct hddsim_model *m)
{
	struct hddsim_model *gm = &g->m;
	uint64_t per_round = 0;
	unsigned z;

	memset(g, 0, sizeof(*g));
	if (m)
		*gm = *m;
	if (!gm->capacity_sectors)
		gm->capacity_sectors = HDDSIM_DEFAULT_CAPACITY;
	if (!gm->rpm)
		gm->rpm = HDDSIM_DEFAULT_RPM;
	if (!gm->settle_ns)
		gm->settle_ns = HDDSIM_DEFAULT_SETTLE_NS;
	if (!gm->full_stroke_ns)
		gm->full_stroke_ns = HDDSIM_DEFAULT_STROKE_NS;
	if (!gm->spt_outer)
		gm->spt_outer = HDDSIM_DEFAULT_SPT_OUTER;
	if (!gm->spt_inner)
		gm->spt_inner = gm->spt_outer < HDDSIM_DEFAULT_SPT_INNER ?
				gm->spt_outer : HDDSIM_DEFAULT_SPT_INNER;
	if (!gm->nr_zones)
		gm->nr_zones = HDDSIM_DEFAULT_ZONES;
	if (!gm->readahead_kib)
		gm->readahead_kib = HDDSIM_DEFAULT_RA_KIB;
	if (gm->rpm < 1000 || gm->rpm > 30000 || gm->spt_inner > gm->spt_outer ||
	    gm->nr_zones > HDDSIM_MAX_ZONES || gm->full_stroke_ns < gm->settle_ns)
		return -EINVAL;

	g->rev_ns = 60000000000ull / gm->rpm;
	for (z = 0; z < gm->nr_zones; z++) {
		g->spt[z] = gm->nr_zones == 1 ? gm->spt_outer :
			    gm->spt_outer - (uint32_t)((uint64_t)(gm->spt_outer - gm->spt_inner) *
						       z / (gm->nr_zones - 1));
		per_round += g->spt[z];
	}
	/* every zone has as many tracks; enough of them for the capacity */
	g->tracks_per_zone = (gm->capacity_sectors + per_round - 1) / per_round;
	if (g->tracks_per_zone < 3)
		g->tracks_per_zone = 3;
	g->nr_tracks = g->tracks_per_zone * gm->nr_zones;
	for (z = 0; z < gm->nr_zones; z++)
		g->zone_start[z + 1] = g->zone_start[z] + g->tracks_per_zone * g->spt[z];
	return 0;
}

/**
 * hddsim_locate() - where a sector lies.
 * @g: geometry.
 * @sector: the sector.
 * @pos: receives track, index and sectors per track.
 */
void hddsim_locate(const struct hddsim_geom *g, uint64_t sector, struct hddsim_pos *pos)
{
	unsigned z = 0;
	uint64_t rel;

	while (z + 1 < g->m.nr_zones && sector >= g->zone_start[z + 1])
		z++;
	rel = sector - g->zone_start[z];
	pos->spt = g->spt[z];
	pos->track = z * g->tracks_per_zone + rel / pos->spt;
	pos->index = (uint32_t)(rel % pos->spt);
	if (pos->track >= g->nr_tracks) /* past the end: stay on the last track */
		pos->track = g->nr_tracks - 1;
}

/**
 * hddsim_seek_ns() - head movement time between two tracks.
 * @g: geometry.
 * @from_track: where the head is.
 * @to_track: where it goes.
 * Return: nanoseconds; 0 for the same track.
 */
uint64_t hddsim_seek_ns(const struct hddsim_geom *g, uint64_t from_track, uint64_t to_track)
{
	uint64_t d = from_track > to_track ? from_track - to_track : to_track - from_track;
	double frac;

	if (!d)
		return 0;
	frac = sqrt((double)(d - 1) / (double)(g->nr_tracks - 2));
	if (frac > 1.0)
		frac = 1.0;
	return g->m.settle_ns + (uint64_t)((double)(g->m.full_stroke_ns - g->m.settle_ns) * frac);
}

/*
 * Where in the revolution (ns after the index mark) the start of sector
 * @index of @track passes the head.  Each track is skewed by one settle time
 * against the one before, so crossing to the next track costs no rotation.
 * Integer arithmetic throughout: transfers ending at a sector land exactly
 * on that sector's start.
 */
static uint64_t hddsim_angle_ns(const struct hddsim_geom *g, uint64_t track, uint32_t index,
				uint32_t spt)
{
	return ((uint64_t)index * g->rev_ns / spt + (track % g->rev_ns) *
		(g->m.settle_ns % g->rev_ns)) % g->rev_ns;
}

/**
 * hddsim_rotation_ns() - rotational latency.
 * @g: geometry.
 * @now_ns: when the head is on the track.
 * @pos: the sector wanted.
 * Return: nanoseconds until the sector starts under the head (< one turn).
 */
uint64_t hddsim_rotation_ns(const struct hddsim_geom *g, uint64_t now_ns,
			    const struct hddsim_pos *pos)
{
	uint64_t want = hddsim_angle_ns(g, pos->track, pos->index, pos->spt);
	uint64_t at = now_ns % g->rev_ns;

	return want >= at ? want - at : g->rev_ns - at + want;
}

/**
 * hddsim_transfer_ns() - media transfer time of a run of sectors.
 * @g: geometry.
 * @sector: first sector.
 * @nr: sectors.
 * Return: nanoseconds.
 */
uint64_t hddsim_transfer_ns(const struct hddsim_geom *g, uint64_t sector, uint32_t nr)
{
	uint64_t t = 0;

	while (nr) {
		struct hddsim_pos p;
		uint32_t k;

		hddsim_locate(g, sector, &p);
		k = p.spt - p.index;
		if (k > nr)
			k = nr;
		/* as the angles are computed, so no nanosecond is lost */
		t += (uint64_t)(p.index + k) * g->rev_ns / p.spt -
		     (uint64_t)p.index * g->rev_ns / p.spt;
		nr -= k;
		sector += k;
		if (nr)
			t += g->m.settle_ns; /* to the next track (head switch) */
	}
	return t;
}

/**
 * hddsim_access_ns() - time of one command without the read-ahead cache.
 * @g: geometry.
 * @head_track: where the head is.
 * @now_ns: when the command starts.
 * @sector: first sector.
 * @nr: sectors.
 * @t: receives the parts, or NULL.
 * Return: total nanoseconds.
 */
uint64_t hddsim_access_ns(const struct hddsim_geom *g, uint64_t head_track, uint64_t now_ns,
			  uint64_t sector, uint32_t nr, struct hddsim_timing *t)
{
	struct hddsim_timing tm = { 0 };
	struct hddsim_pos p;

	hddsim_locate(g, sector, &p);
	tm.overhead_ns = g->m.overhead_ns;
	tm.seek_ns = hddsim_seek_ns(g, head_track, p.track);
	tm.rotation_ns = hddsim_rotation_ns(g, now_ns + tm.overhead_ns + tm.seek_ns, &p);
	tm.transfer_ns = hddsim_transfer_ns(g, sector, nr);
	tm.total_ns = tm.overhead_ns + tm.seek_ns + tm.rotation_ns + tm.transfer_ns;
	if (t)
		*t = tm;
	return tm.total_ns;
}

/* ================================================================ drive */

/* The driver's payload of every request: its place in the drive's queue. */
struct hddsim_cmd {
	struct hddsim_cmd *next;
};

struct hddsim_dev {
	struct hddsim_config cfg;
	struct hddsim_geom geom;
	struct rq_tag_set *set;
	struct rq_queue *q;
	struct rq_hw_ctx *hctx;
	bool owns_clock;
	bool quiesced;                /* virtual clock: see hddsim_dispatch_window */

	pthread_mutex_t lock;
	pthread_cond_t cond;          /* real time: wakes the drive thread */
	pthread_t thread;
	bool thread_started;
	bool stop;

	/* drive state, under lock */
	struct hddsim_cmd *queue;     /* accepted, not started, oldest first */
	unsigned nr_queued;
	struct hddsim_cmd *active;    /* under the head */
	uint64_t active_done_ns;
	uint64_t head_track;
	bool stopped;                 /* we stopped the hw queue */
	bool ra_valid;                /* the read-ahead segment */
	uint64_t ra_next;             /* next sector it holds or will hold */
	uint64_t ra_time_ns;          /* when ra_next is (or was) read */
	uint64_t ra_end;              /* the segment ends before this sector */
	struct hddsim_stats st;

	_Atomic uint64_t vnow;        /* the virtual clock */
	bool manual_service;          /* virtual clock, rq_service_manual():
					 windows do the service work */
	uint64_t service_due_ns;      /* manual service: when rq_service_run()
					 last said work falls due */
	hddsim_dispatch_hook_t dispatch_hook; /* see hddsim_set_dispatch_hook */
	void *dispatch_hook_arg;
};

static atomic_bool hddsim_vclock_taken;

static uint64_t hddsim_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* rq_clock_set_source() callback of a virtual-clock device. */
static uint64_t hddsim_vclock(void *arg)
{
	struct hddsim_dev *dev = arg;

	return atomic_load_explicit(&dev->vnow, memory_order_acquire);
}

/**
 * hddsim_now_ns() - the device's clock.
 * @dev: the device.
 */
uint64_t hddsim_now_ns(struct hddsim_dev *dev)
{
	if (dev->cfg.clock == HDDSIM_CLOCK_VIRTUAL)
		return atomic_load_explicit(&dev->vnow, memory_order_acquire);
	return hddsim_mono_ns();
}

static inline struct rq_request *hddsim_rq(struct hddsim_cmd *cmd)
{
	return rq_request_from_pdu(cmd);
}

static uint32_t hddsim_rq_sectors(const struct rq_request *rq)
{
	uint32_t n = rq_request_sectors(rq);

	return n ? n : 1;
}

/* True if a read of [@sector, +@nr) comes from the read-ahead segment. */
static bool hddsim_ra_hit(const struct hddsim_dev *dev, const struct rq_request *rq)
{
	return dev->ra_valid && rq->op == RQ_OP_READ && rq->sector >= dev->ra_next &&
	       rq->sector + hddsim_rq_sectors(rq) <= dev->ra_end;
}

/* Time until @cmd's data starts moving if started at @now (for SPTF). */
static uint64_t hddsim_positioning_ns(const struct hddsim_dev *dev, struct hddsim_cmd *cmd,
				      uint64_t now)
{
	const struct hddsim_geom *g = &dev->geom;
	struct rq_request *rq = hddsim_rq(cmd);
	struct hddsim_pos p;
	uint64_t seek;

	if (hddsim_ra_hit(dev, rq))
		return 0;
	hddsim_locate(g, rq->sector, &p);
	seek = hddsim_seek_ns(g, dev->head_track, p.track);
	return seek + hddsim_rotation_ns(g, now + g->m.overhead_ns + seek, &p);
}

/*
 * Take the next command off the queue: the oldest, or with NCQ the one
 * reached first (ties: the oldest).  Caller holds the lock; queue not empty.
 */
static struct hddsim_cmd *hddsim_pick(struct hddsim_dev *dev, uint64_t now)
{
	struct hddsim_cmd **best = &dev->queue, **pp, *cmd;
	uint64_t best_ns = UINT64_MAX;

	if (dev->cfg.ncq_depth > 1) {
		for (pp = &dev->queue; *pp; pp = &(*pp)->next) {
			uint64_t ns = hddsim_positioning_ns(dev, *pp, now);

			if (ns < best_ns) {
				best_ns = ns;
				best = pp;
			}
		}
	}
	cmd = *best;
	*best = cmd->next;
	cmd->next = NULL;
	dev->nr_queued--;
	return cmd;
}

/* Start the next queued command at @now if the head is free.  Under lock. */
static void hddsim_start_next(struct hddsim_dev *dev, uint64_t now)
{
	const struct hddsim_geom *g = &dev->geom;
	struct hddsim_timing t;
	struct hddsim_cmd *cmd;
	struct rq_request *rq;
	struct hddsim_pos p;
	uint32_t nr;

	if (dev->active || !dev->queue)
		return;
	cmd = hddsim_pick(dev, now);
	rq = hddsim_rq(cmd);
	nr = hddsim_rq_sectors(rq);
	if (hddsim_ra_hit(dev, rq)) {
		/* the data streams in behind the previous read */
		uint64_t avail = dev->ra_time_ns +
				 hddsim_transfer_ns(g, dev->ra_next, (uint32_t)(rq->sector + nr -
										dev->ra_next));
		uint64_t start = now + g->m.overhead_ns;

		memset(&t, 0, sizeof(t));
		t.overhead_ns = g->m.overhead_ns;
		t.transfer_ns = avail > start ? avail - start : 0;
		t.total_ns = t.overhead_ns + t.transfer_ns;
		t.cache_hit = true;
		dev->ra_time_ns = avail;
		dev->st.cache_hits++;
	} else {
		hddsim_access_ns(g, dev->head_track, now, rq->sector, nr, &t);
		dev->ra_time_ns = now + t.total_ns;
		if (t.seek_ns)
			dev->st.seeks++;
	}
	hddsim_locate(g, rq->sector + nr - 1, &p);
	dev->head_track = p.track;
	if (rq->op == RQ_OP_READ && !g->m.no_readahead) {
		dev->ra_valid = true;
		dev->ra_next = rq->sector + nr;
		dev->ra_end = dev->ra_next + ((uint64_t)g->m.readahead_kib << 1);
	} else {
		dev->ra_valid = false;
	}
	dev->active = cmd;
	dev->active_done_ns = now + t.total_ns;
	dev->st.commands++;
	dev->st.sectors += nr;
	if (rq->op == RQ_OP_READ)
		dev->st.reads++;
	else
		dev->st.writes++;
	dev->st.seek_ns += t.seek_ns;
	dev->st.rotation_ns += t.rotation_ns;
	dev->st.transfer_ns += t.transfer_ns;
	dev->st.busy_ns += t.total_ns;
}

/* Queue an accepted command in the drive and start it if the head is free. */
static void hddsim_accept_locked(struct hddsim_dev *dev, struct hddsim_cmd *cmd)
{
	struct hddsim_cmd **tail;
	bool wake = !dev->active;

	cmd->next = NULL;
	if (dev->dispatch_hook)
		dev->dispatch_hook(dev->dispatch_hook_arg, hddsim_rq(cmd), hddsim_now_ns(dev));
	for (tail = &dev->queue; *tail; tail = &(*tail)->next)
		;
	*tail = cmd;
	dev->nr_queued++;
	hddsim_start_next(dev, hddsim_now_ns(dev));
	if (wake && dev->cfg.clock == HDDSIM_CLOCK_REAL)
		pthread_cond_signal(&dev->cond);
}

/*
 * The active command is done at @now: take it off the head, start the
 * next one, end its request, and let the library dispatch again (mq: start
 * the hw queue if the drive had been full; sq: run the queue, so request_fn
 * starts the next request).  Called with the lock held; returns with it
 * dropped.
 */
static void hddsim_complete_locked(struct hddsim_dev *dev, uint64_t now)
{
	struct hddsim_cmd *cmd = dev->active;
	bool restart;

	dev->active = NULL;
	hddsim_start_next(dev, now);
	restart = dev->stopped && dev->nr_queued + (dev->active ? 1 : 0) < dev->cfg.ncq_depth;
	if (restart)
		dev->stopped = false;
	pthread_mutex_unlock(&dev->lock);

	/* the completion first (the scheduler hears of it), then dispatch */
	if (dev->cfg.front == HDDSIM_FRONT_SQ) {
		/* under the lock throughout: the unlock is our last touch of the queue */
		rq_sq_lock(dev->q);
		rq_sq_end_request_all_locked(hddsim_rq(cmd), RQ_STS_OK);
		rq_sq_run_queue_locked(dev->q); /* quiesced (virtual clock): nothing */
		rq_sq_unlock(dev->q);
		return;
	}
	rq_mq_end_request(hddsim_rq(cmd), RQ_STS_OK);
	if (restart)
		rq_mq_start_hw_queue(dev->hctx); /* quiesced: only clears the stop */
}

/* ---------------------------------------------------------- virtual time */

/*
 * Dispatch on a virtual clock.  Schedulers kick hw queues asynchronously
 * (the library's service thread runs them whenever it wakes), and which
 * requests a dispatch sees must not depend on when that thread happens to
 * run.  So a virtual-clock queue stays quiesced: submissions queue up (in
 * the scheduler or the software queues) and nothing reaches the driver
 * except in a dispatch window, opened by the thread that moves time: the
 * window unquiesces (which runs the hw queue in this thread) and quiesces
 * again (which waits for any run the service thread began meanwhile).
 * Inside a window nothing is submitted, so whichever thread dispatches sees
 * the same requests at the same virtual time, and a run repeats exactly.
 * The same holds for a single-queue queue: request_fn is not called while
 * it is quiesced (a delayed run the scheduler asked for finds it so), the
 * unquiesce runs it in this thread, and the quiesce waits for the queue
 * lock, so for any request_fn the service thread began meanwhile.
 *
 * When the application drives the library's service (rq_service_manual())
 * there is no service thread: its work is measured on the library clock,
 * which is ours, and the window does what is due at this virtual moment
 * (delayed runs, idle timers, kicks, the timeout scan) in this thread.
 * Nothing then depends on real time, so runs of schedulers that hold work
 * back for a while (kyber, bfq, cfq) repeat exactly too.
 */
static void hddsim_dispatch_window(struct hddsim_dev *dev)
{
	rq_queue_unquiesce(dev->q);
	if (dev->manual_service) {
		int64_t wait = rq_service_run();

		dev->service_due_ns = wait < 0 || wait == INT64_MAX ? UINT64_MAX :
				      atomic_load(&dev->vnow) + (uint64_t)wait;
	}
	rq_queue_quiesce(dev->q);
}

/**
 * hddsim_advance() - dispatch what was submitted, then complete the
 * command under the head, moving the virtual clock to its end.  See
 * hddsim.h.
 * @dev: a virtual-clock device.
 * Return: false if the drive is idle even after dispatching.
 */
bool hddsim_advance(struct hddsim_dev *dev)
{
	uint64_t t;

	if (dev->cfg.clock != HDDSIM_CLOCK_VIRTUAL)
		return false;
	hddsim_dispatch_window(dev); /* what was submitted goes now */
	pthread_mutex_lock(&dev->lock);
	if (!dev->active) {
		pthread_mutex_unlock(&dev->lock);
		return false;
	}
	t = dev->active_done_ns;
	if (t > atomic_load(&dev->vnow))
		atomic_store_explicit(&dev->vnow, t, memory_order_release);
	hddsim_complete_locked(dev, t); /* drops the lock */
	hddsim_dispatch_window(dev);
	return true;
}

/**
 * hddsim_advance_to() - let virtual time pass until @when_ns.  See hddsim.h.
 * @dev: a virtual-clock device.
 * @when_ns: the new time.
 *
 * Completes what is done by then; if work dispatched on the way puts a
 * command under the head, the clock stops there and the caller's next
 * hddsim_advance() goes on.
 */
void hddsim_advance_to(struct hddsim_dev *dev, uint64_t when_ns)
{
	bool due, idle;

	if (dev->cfg.clock != HDDSIM_CLOCK_VIRTUAL)
		return;
	for (;;) {
		pthread_mutex_lock(&dev->lock);
		due = dev->active && dev->active_done_ns <= when_ns;
		pthread_mutex_unlock(&dev->lock);
		if (!due || !hddsim_advance(dev))
			break;
	}
	hddsim_dispatch_window(dev);
	pthread_mutex_lock(&dev->lock);
	idle = !dev->active;
	if (idle && when_ns > atomic_load(&dev->vnow))
		atomic_store_explicit(&dev->vnow, when_ns, memory_order_release);
	pthread_mutex_unlock(&dev->lock);
	if (idle)
		hddsim_dispatch_window(dev); /* held-back work may go now */
}

/**
 * hddsim_next_event_ns() - virtual clock: when something next happens
 * without new submissions.  See hddsim.h.
 * @dev: a virtual-clock device.
 * Return: the earlier of the active command's end and the service work's
 * due time; UINT64_MAX if neither.
 */
uint64_t hddsim_next_event_ns(struct hddsim_dev *dev)
{
	uint64_t t = dev->manual_service ? dev->service_due_ns : UINT64_MAX;
	struct pollfd p = { .fd = rq_service_fd(), .events = POLLIN };

	/* work asked for since the last window is signalled on the fd: due now */
	if (dev->manual_service && poll(&p, 1, 0) > 0)
		return atomic_load(&dev->vnow);

	pthread_mutex_lock(&dev->lock);
	if (dev->active && dev->active_done_ns < t)
		t = dev->active_done_ns;
	pthread_mutex_unlock(&dev->lock);
	return t;
}

/**
 * hddsim_run_until() - hddsim_advance_to(), then the clock reaches @when_ns
 * even with a command under the head.  See hddsim.h.
 * @dev: a virtual-clock device.
 * @when_ns: the new time.
 */
void hddsim_run_until(struct hddsim_dev *dev, uint64_t when_ns)
{
	if (dev->cfg.clock != HDDSIM_CLOCK_VIRTUAL)
		return;
	hddsim_advance_to(dev, when_ns);
	pthread_mutex_lock(&dev->lock);
	if (when_ns > atomic_load(&dev->vnow))
		atomic_store_explicit(&dev->vnow, when_ns, memory_order_release);
	pthread_mutex_unlock(&dev->lock);
	hddsim_dispatch_window(dev);
}

/**
 * hddsim_set_dispatch_hook() - call @fn when the drive accepts a request.
 * @dev: the device.
 * @fn: the hook (NULL: none).
 * @arg: its first argument.
 */
void hddsim_set_dispatch_hook(struct hddsim_dev *dev, hddsim_dispatch_hook_t fn, void *arg)
{
	pthread_mutex_lock(&dev->lock);
	dev->dispatch_hook = fn;
	dev->dispatch_hook_arg = arg;
	pthread_mutex_unlock(&dev->lock);
}

/**
 * hddsim_busy() - does the drive hold a command?
 * @dev: the device.
 */
bool hddsim_busy(struct hddsim_dev *dev)
{
	bool busy;

	pthread_mutex_lock(&dev->lock);
	busy = dev->active != NULL;
	pthread_mutex_unlock(&dev->lock);
	return busy;
}

/* ------------------------------------------------------------- real time */

/**
 * hddsim_drive_thread() - real time: sleep until the command under the
 * head is done, complete it, repeat.
 * @arg: the device.
 *
 * Context: own thread, from hddsim_create() until hddsim_destroy().
 * Return: NULL.
 */
static void *hddsim_drive_thread(void *arg)
{
	struct hddsim_dev *dev = arg;

	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	pthread_mutex_lock(&dev->lock);
	while (!dev->stop) {
		uint64_t now = hddsim_mono_ns();
		struct timespec ts;

		if (!dev->active) {
			pthread_cond_wait(&dev->cond, &dev->lock);
			continue;
		}
		if (now < dev->active_done_ns) {
			ts.tv_sec = (time_t)(dev->active_done_ns / 1000000000ull);
			ts.tv_nsec = (long)(dev->active_done_ns % 1000000000ull);
			pthread_cond_timedwait(&dev->cond, &dev->lock, &ts);
			continue;
		}
		/* the drive's own time: late wake-ups do not add up */
		hddsim_complete_locked(dev, dev->active_done_ns);
		pthread_mutex_lock(&dev->lock);
	}
	pthread_mutex_unlock(&dev->lock);
	return NULL;
}

/* ---------------------------------------------------------------- mq ops */

/**
 * hddsim_queue_rq() - hand a request to the drive.
 * @hctx: the (only) hw queue.
 * @rq: the request.
 * @last: unused: the drive starts work as it comes.
 *
 * Context: dispatch; never concurrently with itself.  Takes the drive lock.
 * Return: RQ_STS_OK (accepted; a flush ends at once: there is no write
 * cache), or RQ_STS_DEV_RESOURCE when the drive already holds ncq_depth
 * commands (the hw queue is then stopped until a command completes).
 */
static rq_status_t hddsim_queue_rq(struct rq_hw_ctx *hctx, struct rq_request *rq, bool last)
{
	struct hddsim_dev *dev = rq_hctx_driver_data(hctx);
	struct hddsim_cmd *cmd = rq_request_pdu(rq);

	if (rq->op == RQ_OP_FLUSH) {
		pthread_mutex_lock(&dev->lock);
		dev->st.flushes++;
		pthread_mutex_unlock(&dev->lock);
		rq_mq_end_request(rq, RQ_STS_OK);
		return RQ_STS_OK;
	}
	if (rq->op == RQ_OP_DISCARD)
		return RQ_STS_NOTSUPP;

	pthread_mutex_lock(&dev->lock);
	if (dev->nr_queued + (dev->active ? 1 : 0) >= dev->cfg.ncq_depth) {
		dev->stopped = true;
		dev->st.refused++;
		rq_mq_stop_hw_queue(hctx);
		pthread_mutex_unlock(&dev->lock);
		return RQ_STS_DEV_RESOURCE;
	}
	hddsim_accept_locked(dev, cmd);
	if (dev->nr_queued + 1 >= dev->cfg.ncq_depth) {
		/* full now: no more queue_rq calls until a completion */
		dev->stopped = true;
		rq_mq_stop_hw_queue(hctx);
	}
	pthread_mutex_unlock(&dev->lock);
	return RQ_STS_OK;
}

/**
 * hddsim_init_hctx() - remember the device in the hw queue.
 * @hctx: the hw queue.
 * @set_data: the device.
 * @idx: 0.
 * Return: 0.
 */
static int hddsim_init_hctx(struct rq_hw_ctx *hctx, void *set_data, unsigned idx)
{
	struct hddsim_dev *dev = set_data;

	rq_hctx_set_driver_data(hctx, dev);
	dev->hctx = hctx;
	return 0;
}

static const struct rq_mq_ops hddsim_mq_ops = {
	RQ_MQ_OPS_INIT,
	.queue_rq = hddsim_queue_rq,
	.init_hctx = hddsim_init_hctx,
};

/* -------------------------------------------------------------- sq ops */

/**
 * hddsim_request_fn() - the single-queue driver: start requests while the
 * drive holds fewer than ncq_depth and hand them to it, as queue_rq does.
 * @q: the queue.
 *
 * A flush ends at once (there is no write cache), a discard with
 * RQ_STS_NOTSUPP; neither occupies the drive.  Whoever completes a command
 * runs the queue again, so a full drive simply leaves the rest where the
 * scheduler put it.
 *
 * Context: queue lock held; takes the drive lock inside it.
 */
static void hddsim_request_fn(struct rq_queue *q)
{
	struct hddsim_dev *dev = rq_queue_driver_data(q);
	struct rq_request *rq;

	while (rq_sq_in_flight(q, false) + rq_sq_in_flight(q, true) < dev->cfg.ncq_depth &&
	       (rq = rq_sq_fetch_request(q))) {
		if (rq->op == RQ_OP_FLUSH || rq->op == RQ_OP_DISCARD) {
			bool flush = rq->op == RQ_OP_FLUSH;

			if (flush) {
				pthread_mutex_lock(&dev->lock);
				dev->st.flushes++;
				pthread_mutex_unlock(&dev->lock);
			}
			rq_sq_end_request_all_locked(rq, flush ? RQ_STS_OK : RQ_STS_NOTSUPP);
			continue;
		}
		pthread_mutex_lock(&dev->lock);
		hddsim_accept_locked(dev, rq_request_pdu(rq));
		pthread_mutex_unlock(&dev->lock);
	}
}

static const struct rq_sq_ops hddsim_sq_ops = {
	RQ_SQ_OPS_INIT,
	.request_fn = hddsim_request_fn,
};

/* ------------------------------------------------------ create / destroy */

/**
 * hddsim_config_default() - fill @cfg with the defaults.
 * @cfg: configuration to overwrite.
 */
void hddsim_config_default(struct hddsim_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->clock = HDDSIM_CLOCK_VIRTUAL;
	cfg->ncq_depth = 1;
	cfg->hw_queue_depth = HDDSIM_DEFAULT_TAGS;
}

/**
 * hddsim_create() - make a simulated disk.  See hddsim.h.
 * @cfg: configuration.
 * @out: receives the device.
 * Return: 0 or a negative errno.
 */
int hddsim_create(const struct hddsim_config *cfg, struct hddsim_dev **out)
{
	struct rq_tag_set_config sc = { RQ_TAG_SET_CONFIG_INIT };
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT };
	struct rq_queue_limits lim;
	pthread_condattr_t ca;
	struct hddsim_dev *dev;
	int ret;

	if (!cfg || !out || cfg->clock > HDDSIM_CLOCK_REAL || cfg->front > HDDSIM_FRONT_SQ)
		return -EINVAL;
	dev = calloc(1, sizeof(*dev));
	if (!dev)
		return -ENOMEM;
	dev->cfg = *cfg;
	if (!dev->cfg.ncq_depth)
		dev->cfg.ncq_depth = 1;
	if (!dev->cfg.hw_queue_depth)
		dev->cfg.hw_queue_depth = HDDSIM_DEFAULT_TAGS;
	pthread_mutex_init(&dev->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&dev->cond, &ca);
	pthread_condattr_destroy(&ca);
	atomic_init(&dev->vnow, HDDSIM_VCLOCK_START_NS);
	dev->service_due_ns = UINT64_MAX;
	ret = hddsim_geom_init(&dev->geom, &cfg->model);
	if (ret || dev->cfg.ncq_depth > 32)
		goto fail_free;

	lim = cfg->limits;
	lim.size = sizeof(lim);
	if (!lim.physical_block_size)
		lim.physical_block_size = 4096;
	if (!lim.max_hw_sectors)
		lim.max_hw_sectors = HDDSIM_MAX_SECTORS;
	if (!lim.max_sectors)
		lim.max_sectors = lim.max_hw_sectors;
	if (!lim.max_write_zeroes_sectors)
		lim.max_write_zeroes_sectors = 65535;
	lim.max_discard_sectors = 0; /* no TRIM on a spinning disk */
	lim.features |= RQ_FEAT_ROTATIONAL;
	lim.features &= ~(RQ_FEAT_WRITE_CACHE | RQ_FEAT_FUA);

	if (dev->cfg.clock == HDDSIM_CLOCK_VIRTUAL) {
		bool taken = false;

		if (!atomic_compare_exchange_strong(&hddsim_vclock_taken, &taken, true)) {
			ret = -EBUSY;
			goto fail_free;
		}
		dev->owns_clock = true;
		dev->manual_service = rq_service_fd() >= 0;
		rq_clock_set_source(hddsim_vclock, dev);
	} else {
		if (pthread_create(&dev->thread, NULL, hddsim_drive_thread, dev)) {
			ret = -EAGAIN;
			goto fail;
		}
		dev->thread_started = true;
	}

	if (dev->cfg.front == HDDSIM_FRONT_SQ) {
		struct rq_sq_config sq = {
			RQ_SQ_CONFIG_INIT,
			.ops = &hddsim_sq_ops,
			.limits = &lim,
			.capacity = dev->geom.m.capacity_sectors,
			.scheduler = cfg->sched,
			.nr_requests = cfg->sq_nr_requests,
			.cmd_size = sizeof(struct hddsim_cmd),
			.queuedata = dev,
		};

		ret = rq_sq_alloc_queue(&sq, &dev->q);
	} else {
		sc.ops = &hddsim_mq_ops;
		sc.nr_hw_queues = 1;
		sc.queue_depth = dev->cfg.hw_queue_depth;
		sc.cmd_size = sizeof(struct hddsim_cmd);
		sc.numa_node = -1;
		sc.driver_data = dev;
		ret = rq_tag_set_alloc(&sc, &dev->set);
		if (ret)
			goto fail;
		qc.limits = &lim;
		qc.capacity = dev->geom.m.capacity_sectors;
		qc.scheduler = cfg->sched;
		qc.queuedata = dev;
		ret = rq_mq_alloc_queue(dev->set, &qc, &dev->q);
	}
	if (ret)
		goto fail;
	if (dev->cfg.clock == HDDSIM_CLOCK_VIRTUAL) {
		/* dispatch only in windows: see hddsim_dispatch_window() */
		rq_queue_quiesce(dev->q);
		dev->quiesced = true;
	}
	*out = dev;
	return 0;
fail:
	hddsim_destroy(dev);
	return ret;
fail_free:
	pthread_cond_destroy(&dev->cond);
	pthread_mutex_destroy(&dev->lock);
	free(dev);
	return ret ? ret : -EINVAL;
}

/** hddsim_queue() - the device's queue. */
struct rq_queue *hddsim_queue(struct hddsim_dev *dev)
{
	return dev->q;
}

/** hddsim_geom() - the device's geometry. */
const struct hddsim_geom *hddsim_geom(struct hddsim_dev *dev)
{
	return &dev->geom;
}

/**
 * hddsim_get_stats() - copy the counters.
 * @dev: the device.
 * @st: receives them.
 */
void hddsim_get_stats(struct hddsim_dev *dev, struct hddsim_stats *st)
{
	pthread_mutex_lock(&dev->lock);
	*st = dev->st;
	pthread_mutex_unlock(&dev->lock);
}

/**
 * hddsim_destroy() - tear a device down.  See hddsim.h.
 * @dev: the device, or NULL.
 */
void hddsim_destroy(struct hddsim_dev *dev)
{
	if (!dev)
		return;
	if (dev->quiesced)
		rq_queue_unquiesce(dev->q);
	if (dev->q)
		rq_queue_destroy(dev->q);
	if (dev->thread_started) {
		pthread_mutex_lock(&dev->lock);
		dev->stop = true;
		pthread_cond_signal(&dev->cond);
		pthread_mutex_unlock(&dev->lock);
		pthread_join(dev->thread, NULL);
	}
	if (dev->set)
		rq_tag_set_free(dev->set);
	if (dev->owns_clock) {
		rq_clock_set_source(NULL, NULL);
		atomic_store(&hddsim_vclock_taken, false);
	}
	pthread_cond_destroy(&dev->cond);
	pthread_mutex_destroy(&dev->lock);
	free(dev);
}
