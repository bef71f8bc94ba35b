/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * flashsim: a flash SSD on a virtual clock, as a librequest driver.  The
 * model is described in flashsim.h and examples/flash/README.md.
 *
 * The drive is a set of timelines: each die and each channel is busy until
 * some time, the host link too, and the write buffer is a min-heap of the
 * times its slots free.  A command is costed entirely when the drive
 * accepts it (queue_rq or request_fn), against those timelines, which it
 * then advances; its end time goes on a min-heap of pending completions
 * that flashsim_run_until() pops in order.  Everything is integer
 * arithmetic on the virtual clock, so a run repeats exactly.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <librequest/elevator.h>
#include <librequest/service.h>

#include "flashsim.h"

#define FLASHSIM_PAGE 4096u
#define FLASHSIM_VCLOCK_START_NS 1000000000ull /* as hddsim: time starts at 1 s */
#define FLASHSIM_MAX_SECTORS 2048              /* 1 MiB commands */

/* A pending completion: the heap orders by time, then acceptance order. */
struct flashsim_done {
	uint64_t when;
	uint64_t seq;
	struct rq_request *rq;
};

struct flashsim_dev {
	struct flashsim_config cfg;
	struct flashsim_model m;
	struct rq_tag_set *set;
	struct rq_queue *q;
	unsigned nr_dies;
	uint64_t *die_free;        /* die busy until */
	uint64_t *chan_free;       /* channel busy until */
	uint64_t *die_free_pages;  /* erased pages left on each die */
	uint64_t *slots;           /* write buffer: min-heap of slot free times */
	unsigned nr_slots;
	unsigned next_die;         /* write striping */
	struct flashsim_done *done; /* min-heap */
	unsigned nr_done, cap_done;
	uint64_t seq;
	uint64_t now;
	uint64_t service_due;
	flashsim_dispatch_hook_t hook;
	void *hook_arg;
	struct flashsim_stats st;
};

static atomic_bool flashsim_taken;

/* ------------------------------------------------------------- defaults */

/** flashsim_model_fill() - defaults into the zero fields.  See flashsim.h. */
void flashsim_model_fill(struct flashsim_model *m)
{
#define FILL(f, v) do { if (!m->f) m->f = (v); } while (0)
	FILL(capacity_bytes, 256ull << 30);
	FILL(channels, 8);
	FILL(dies_per_channel, 4);
	FILL(read_ns, 60000);
	FILL(program_ns, 600000);
	FILL(erase_ns, 3500000);
	FILL(xfer_ns, 5000);
	FILL(host_mbps, 3200);
	FILL(overhead_ns, 10000);
	FILL(write_buffer_kib, 8192);
	FILL(pages_per_block, 256);
	FILL(free_blocks, 8);
	FILL(gc_low_blocks, 4);
	FILL(gc_valid_pct, 70);
	FILL(queue_depth, 64);
#undef FILL
}

/** flashsim_model_check() - is a filled model usable?  See flashsim.h. */
int flashsim_model_check(const struct flashsim_model *m)
{
	if (!m->channels || !m->dies_per_channel || m->channels * m->dies_per_channel > 4096 ||
	    !m->host_mbps || !m->pages_per_block || m->gc_low_blocks >= m->free_blocks ||
	    m->gc_valid_pct >= 100 || m->write_buffer_kib < 4 || !m->queue_depth ||
	    m->queue_depth > 4096 || m->capacity_bytes < (1u << 20))
		return -EINVAL;
	return 0;
}

/* ------------------------------------------------------------ min-heaps */

static void slot_sift_down(uint64_t *h, unsigned n, unsigned i)
{
	for (;;) {
		unsigned l = 2 * i + 1, r = l + 1, m = i;
		uint64_t t;

		if (l < n && h[l] < h[m])
			m = l;
		if (r < n && h[r] < h[m])
			m = r;
		if (m == i)
			return;
		t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

static bool done_less(const struct flashsim_done *a, const struct flashsim_done *b)
{
	return a->when < b->when || (a->when == b->when && a->seq < b->seq);
}

static int done_push(struct flashsim_dev *dev, uint64_t when, struct rq_request *rq)
{
	struct flashsim_done *h;
	unsigned i;

	if (dev->nr_done == dev->cap_done) {
		unsigned cap = dev->cap_done ? dev->cap_done * 2 : 64;

		h = realloc(dev->done, cap * sizeof(*h));
		if (!h)
			return -ENOMEM;
		dev->done = h;
		dev->cap_done = cap;
	}
	h = dev->done;
	i = dev->nr_done++;
	h[i] = (struct flashsim_done){ when, dev->seq++, rq };
	while (i && done_less(&h[i], &h[(i - 1) / 2])) {
		struct flashsim_done t = h[i];

		h[i] = h[(i - 1) / 2];
		h[(i - 1) / 2] = t;
		i = (i - 1) / 2;
	}
	return 0;
}

static struct flashsim_done done_pop(struct flashsim_dev *dev)
{
	struct flashsim_done *h = dev->done, top = h[0];
	unsigned n = --dev->nr_done, i = 0;

	h[0] = h[n];
	for (;;) {
		unsigned l = 2 * i + 1, r = l + 1, m = i;
		struct flashsim_done t;

		if (l < n && done_less(&h[l], &h[m]))
			m = l;
		if (r < n && done_less(&h[r], &h[m]))
			m = r;
		if (m == i)
			break;
		t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
	return top;
}

/* ---------------------------------------------------------------- model */

static inline uint64_t max64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/*
 * Host link: @bytes cross it after @t.  Each command pays its own transfer
 * time; the link's bandwidth is not shared out between commands (the
 * timelines are reserved when a command is accepted and cannot backfill,
 * so a shared link would make a read queued behind a slow program delay
 * every later command).
 */
static uint64_t host_xfer(struct flashsim_dev *dev, uint64_t t, uint64_t bytes)
{
	/* MB/s = bytes per microsecond: ns = bytes * 1000 / mbps */
	return t + bytes * 1000 / dev->m.host_mbps;
}

/* Die @d collects victim blocks while it is short of free ones. */
static void die_gc(struct flashsim_dev *dev, unsigned d)
{
	const struct flashsim_model *m = &dev->m;
	uint64_t low = (uint64_t)m->gc_low_blocks * m->pages_per_block;
	uint64_t valid = (uint64_t)m->pages_per_block * m->gc_valid_pct / 100;

	while (dev->die_free_pages[d] < low) {
		uint64_t cost = valid * ((uint64_t)m->read_ns + m->program_ns) + m->erase_ns;

		dev->die_free[d] += cost;
		dev->die_free_pages[d] += m->pages_per_block - valid;
		dev->st.gc_runs++;
		dev->st.erases++;
		dev->st.gc_ns += cost;
		dev->st.pages_programmed += valid;
	}
}

/*
 * One buffered page, ready at @ready, is programmed on the next die: its
 * data crosses to the die, then the die programs it.  The transfer is
 * counted on the die's timeline only: reserving the channel until the die
 * is free would block reads on the other dies of the channel behind a
 * program that has not started (the timelines cannot backfill).
 */
static uint64_t program_page(struct flashsim_dev *dev, uint64_t ready)
{
	unsigned d = dev->next_die;
	uint64_t done;

	dev->next_die = (d + 1) % dev->nr_dies;
	done = max64(ready, dev->die_free[d]) + dev->m.xfer_ns + dev->m.program_ns;
	dev->die_free[d] = done;
	dev->st.pages_programmed++;
	dev->die_free_pages[d]--;
	die_gc(dev, d); /* after the program: the page's slot is free at @done */
	return done;
}

static uint64_t cost_read(struct flashsim_dev *dev, uint64_t start, uint64_t off, uint64_t bytes)
{
	uint64_t lpn = off / FLASHSIM_PAGE, end = (off + bytes + FLASHSIM_PAGE - 1) / FLASHSIM_PAGE;
	uint64_t last = start;

	for (; lpn < end; lpn++) {
		unsigned d = (unsigned)(lpn % dev->nr_dies), c = d % dev->m.channels;
		uint64_t sensed = max64(start, dev->die_free[d]) + dev->m.read_ns;
		uint64_t out = max64(sensed, dev->chan_free[c]) + dev->m.xfer_ns;

		dev->die_free[d] = sensed;
		dev->chan_free[c] = out;
		last = max64(last, out);
		dev->st.pages_read++;
	}
	return host_xfer(dev, last, bytes);
}

static uint64_t cost_write(struct flashsim_dev *dev, uint64_t start, uint64_t bytes)
{
	uint64_t pages = (bytes + FLASHSIM_PAGE - 1) / FLASHSIM_PAGE, i, have = start;
	bool waited = false;

	for (i = 0; i < pages; i++) {
		uint64_t slot = dev->slots[0]; /* the earliest free slot */
		uint64_t in;

		if (slot > have) {
			have = slot;
			waited = true;
		}
		in = host_xfer(dev, have, FLASHSIM_PAGE);
		dev->slots[0] = program_page(dev, in);
		slot_sift_down(dev->slots, dev->nr_slots, 0);
		have = in;
	}
	dev->st.buffer_waits += waited;
	return have;
}

static uint64_t cost_flush(struct flashsim_dev *dev, uint64_t start)
{
	uint64_t t = start;
	unsigned i;

	for (i = 0; i < dev->nr_slots; i++)
		t = max64(t, dev->slots[i]);
	return t;
}

/* The drive accepts @rq now: cost it and queue its completion. */
static int flashsim_accept(struct flashsim_dev *dev, struct rq_request *rq)
{
	uint64_t start = dev->now + dev->m.overhead_ns, end;
	uint64_t bytes = (uint64_t)rq_request_sectors(rq) << 9;

	if (dev->hook)
		dev->hook(dev->hook_arg, rq, dev->now);
	dev->st.commands++;
	switch (rq->op) {
	case RQ_OP_READ:
		dev->st.reads++;
		end = cost_read(dev, start, rq->sector << 9, bytes);
		break;
	case RQ_OP_WRITE:
	case RQ_OP_WRITE_ZEROES:
		dev->st.writes++;
		end = cost_write(dev, start, bytes);
		break;
	case RQ_OP_FLUSH:
		dev->st.flushes++;
		end = cost_flush(dev, start);
		break;
	default:
		dev->st.discards++;
		end = start;
		break;
	}
	return done_push(dev, end, rq);
}

/* ---------------------------------------------------------- front ends */

static rq_status_t flashsim_queue_rq(struct rq_hw_ctx *hctx, struct rq_request *rq, bool last)
{
	struct flashsim_dev *dev = rq_hctx_driver_data(hctx);

	(void)last;
	return flashsim_accept(dev, rq) ? RQ_STS_RESOURCE : RQ_STS_OK;
}

static int flashsim_init_hctx(struct rq_hw_ctx *hctx, void *set_data, unsigned idx)
{
	(void)idx;
	rq_hctx_set_driver_data(hctx, set_data);
	return 0;
}

static const struct rq_mq_ops flashsim_mq_ops = {
	RQ_MQ_OPS_INIT,
	.queue_rq = flashsim_queue_rq,
	.init_hctx = flashsim_init_hctx,
};

/* Single queue: pull requests while the drive holds fewer than its depth. */
static void flashsim_request_fn(struct rq_queue *q)
{
	struct flashsim_dev *dev = rq_queue_driver_data(q);
	struct rq_request *rq;

	while (dev->nr_done < dev->m.queue_depth && (rq = rq_sq_fetch_request(q))) {
		if (flashsim_accept(dev, rq))
			rq_sq_end_request_all_locked(rq, RQ_STS_RESOURCE);
	}
}

static const struct rq_sq_ops flashsim_sq_ops = {
	RQ_SQ_OPS_INIT,
	.request_fn = flashsim_request_fn,
};

/* ----------------------------------------------------------------- clock */

/* Is service work asked for that rq_service_run() has not reported yet? */
static bool flashsim_kicked(void)
{
	struct pollfd p = { .fd = rq_service_fd(), .events = POLLIN };

	return poll(&p, 1, 0) > 0;
}

/*
 * Do the service work due now and learn when the next falls due.  Work
 * asked for during the pass (or since the last one) is signalled on the
 * service fd rather than in the returned wait: pass again while it is.
 */
static void flashsim_service(struct flashsim_dev *dev)
{
	int64_t wait;
	unsigned n = 0;

	do
		wait = rq_service_run();
	while (flashsim_kicked() && ++n < 16);
	dev->service_due = wait < 0 || wait == INT64_MAX ? UINT64_MAX : dev->now + (uint64_t)wait;
}

static uint64_t flashsim_vclock(void *arg)
{
	return ((struct flashsim_dev *)arg)->now;
}

/** flashsim_now_ns() - the virtual clock. */
uint64_t flashsim_now_ns(struct flashsim_dev *dev)
{
	return dev->now;
}

/** flashsim_busy() - does the drive hold a command? */
bool flashsim_busy(struct flashsim_dev *dev)
{
	return dev->nr_done > 0;
}

/** flashsim_next_event_ns() - next completion or service work.  See flashsim.h. */
uint64_t flashsim_next_event_ns(struct flashsim_dev *dev)
{
	uint64_t t;

	if (flashsim_kicked()) /* asked for since the last pass (a completion's delayed run) */
		flashsim_service(dev);
	t = dev->service_due;

	if (dev->nr_done && dev->done[0].when < t)
		t = dev->done[0].when;
	return t;
}

static void flashsim_end(struct flashsim_dev *dev, struct rq_request *rq)
{
	if (dev->cfg.front == FLASHSIM_FRONT_SQ) {
		rq_sq_lock(dev->q);
		rq_sq_end_request_all_locked(rq, RQ_STS_OK);
		rq_sq_run_queue_locked(dev->q);
		rq_sq_unlock(dev->q);
		return;
	}
	rq_mq_end_request(rq, RQ_STS_OK);
}

/** flashsim_run_until() - let virtual time pass.  See flashsim.h. */
void flashsim_run_until(struct flashsim_dev *dev, uint64_t when_ns)
{
	while (dev->nr_done && dev->done[0].when <= when_ns) {
		struct flashsim_done d = done_pop(dev);

		if (d.when > dev->now)
			dev->now = d.when;
		flashsim_end(dev, d.rq);
		if (dev->service_due <= dev->now)
			flashsim_service(dev);
	}
	if (when_ns > dev->now)
		dev->now = when_ns;
	flashsim_service(dev);
}

/** flashsim_set_dispatch_hook() - install a dispatch hook. */
void flashsim_set_dispatch_hook(struct flashsim_dev *dev, flashsim_dispatch_hook_t fn, void *arg)
{
	dev->hook = fn;
	dev->hook_arg = arg;
}

/** flashsim_get_stats() - read the counters. */
void flashsim_get_stats(struct flashsim_dev *dev, struct flashsim_stats *st)
{
	*st = dev->st;
}

/** flashsim_queue() - the device's queue. */
struct rq_queue *flashsim_queue(struct flashsim_dev *dev)
{
	return dev->q;
}

/* --------------------------------------------------------- create/destroy */

static int flashsim_alloc_state(struct flashsim_dev *dev)
{
	const struct flashsim_model *m = &dev->m;
	unsigned i;

	dev->nr_dies = m->channels * m->dies_per_channel;
	dev->nr_slots = m->write_buffer_kib / 4;
	dev->die_free = calloc(dev->nr_dies, sizeof(uint64_t));
	dev->die_free_pages = calloc(dev->nr_dies, sizeof(uint64_t));
	dev->chan_free = calloc(m->channels, sizeof(uint64_t));
	dev->slots = calloc(dev->nr_slots, sizeof(uint64_t));
	if (!dev->die_free || !dev->die_free_pages || !dev->chan_free || !dev->slots)
		return -ENOMEM;
	for (i = 0; i < dev->nr_dies; i++)
		dev->die_free_pages[i] = (uint64_t)m->free_blocks * m->pages_per_block;
	return 0;
}

static int flashsim_make_queue(struct flashsim_dev *dev, const struct rq_queue_limits *lim)
{
	struct rq_tag_set_config sc = { RQ_TAG_SET_CONFIG_INIT };
	struct rq_queue_config qc = { RQ_QUEUE_CONFIG_INIT };
	uint64_t cap = dev->m.capacity_bytes >> 9;
	int ret;

	if (dev->cfg.front == FLASHSIM_FRONT_SQ) {
		struct rq_sq_config sq = {
			RQ_SQ_CONFIG_INIT,
			.ops = &flashsim_sq_ops,
			.limits = lim,
			.capacity = cap,
			.scheduler = dev->cfg.sched,
			.nr_requests = dev->cfg.sq_nr_requests,
			.queuedata = dev,
		};

		return rq_sq_alloc_queue(&sq, &dev->q);
	}
	sc.ops = &flashsim_mq_ops;
	sc.nr_hw_queues = 1;
	sc.queue_depth = dev->m.queue_depth;
	sc.numa_node = -1;
	sc.driver_data = dev;
	ret = rq_tag_set_alloc(&sc, &dev->set);
	if (ret)
		return ret;
	qc.limits = lim;
	qc.capacity = cap;
	qc.scheduler = dev->cfg.sched;
	qc.queuedata = dev;
	return rq_mq_alloc_queue(dev->set, &qc, &dev->q);
}

/** flashsim_create() - make the device.  See flashsim.h. */
int flashsim_create(const struct flashsim_config *cfg, struct flashsim_dev **out)
{
	struct rq_queue_limits lim = { .size = sizeof(lim) };
	struct flashsim_dev *dev;
	bool taken = false;
	int ret;

	if (!cfg || !out || cfg->front > FLASHSIM_FRONT_SQ || rq_service_fd() < 0)
		return -EINVAL;
	dev = calloc(1, sizeof(*dev));
	if (!dev)
		return -ENOMEM;
	dev->cfg = *cfg;
	dev->m = cfg->model;
	flashsim_model_fill(&dev->m);
	ret = flashsim_model_check(&dev->m);
	if (!ret)
		ret = flashsim_alloc_state(dev);
	if (ret) {
		flashsim_destroy(dev);
		return ret;
	}
	if (!atomic_compare_exchange_strong(&flashsim_taken, &taken, true)) {
		flashsim_destroy(dev);
		return -EBUSY;
	}
	dev->now = FLASHSIM_VCLOCK_START_NS;
	dev->service_due = UINT64_MAX;
	rq_clock_set_source(flashsim_vclock, dev);
	lim.logical_block_size = 512;
	lim.physical_block_size = FLASHSIM_PAGE;
	lim.max_hw_sectors = FLASHSIM_MAX_SECTORS;
	lim.max_sectors = FLASHSIM_MAX_SECTORS;
	lim.max_discard_sectors = 1u << 22;
	lim.features |= RQ_FEAT_WRITE_CACHE;
	ret = flashsim_make_queue(dev, &lim);
	if (ret) {
		flashsim_destroy(dev);
		return ret;
	}
	*out = dev;
	return 0;
}

/** flashsim_destroy() - tear down.  See flashsim.h. */
void flashsim_destroy(struct flashsim_dev *dev)
{
	if (!dev)
		return;
	if (dev->q)
		rq_queue_destroy(dev->q);
	if (dev->set)
		rq_tag_set_free(dev->set);
	if (dev->now) {
		rq_clock_set_source(NULL, NULL);
		atomic_store(&flashsim_taken, false);
	}
	free(dev->die_free);
	free(dev->die_free_pages);
	free(dev->chan_free);
	free(dev->slots);
	free(dev->done);
	free(dev);
}
