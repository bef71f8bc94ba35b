/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The scheduler conformance scenarios of both front ends (see workload.h).
 *
 * The mixed workload: each thread owns half of the device and keeps a
 * shadow copy of it; the bios of one plug never overlap, so the device's
 * final contents and every read are determined whatever order the
 * scheduler picks.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fixtures.h"
#include "workload.h"

void wl_limits(struct rq_queue_limits *lim)
{
	rq_queue_limits_default(lim);
	lim->max_sectors = WL_MAX_SECTORS;
	lim->max_segments = WL_MAX_SEGMENTS;
	lim->max_discard_sectors = WL_MAX_DISCARD;
	lim->max_write_zeroes_sectors = WL_MAX_WZ;
	lim->features = RQ_FEAT_WRITE_CACHE;
}

void wl_expect_active(struct rq_queue *q, const char *name)
{
	char buf[512], want[64];

	assert_true(rq_queue_attr_get(q, "scheduler", buf, sizeof(buf)) > 0);
	snprintf(want, sizeof(want), "[%s]", name);
	if (!strstr(buf, want))
		fail_msg("scheduler attribute \"%s\" does not show %s active", buf, want);
}

/* ------------------------------------------------------------ mixed workload */

struct wl_bio {
	struct fx_rec rec;
	unsigned op;
	uint32_t opf;
	uint64_t sector;
	uint32_t len;
	uint8_t *data;          /* one allocation; vectors are pieces of it with gaps */
	uint8_t *vbase[4];
	uint32_t vlen[4];
	unsigned nvec;
};

struct nomerge_rec {
	unsigned op;
	uint64_t sector;
	uint32_t len;
};

struct worker {
	struct rq_queue *q;
	unsigned id;
	unsigned seed;
	uint64_t region_start;  /* sectors */
	uint64_t region_sectors;
	uint8_t *shadow;        /* the region's expected bytes */
	unsigned batches;
	/* results, checked by the main thread */
	unsigned long bios, bad_end, bad_status, bad_read, timeouts;
	struct nomerge_rec *nomerge;
	unsigned nr_nomerge, max_nomerge;
	/* bios larger than their op's limit: split, and (as in the kernel)
	 * their pieces carry RQ_BIO_NOMERGE */
	struct nomerge_rec *split;
	unsigned nr_split, max_split;
};

static void note(struct nomerge_rec **arr, unsigned *nr, unsigned *max, struct nomerge_rec r)
{
	if (*nr == *max) {
		*max = *max ? 2 * *max : 64;
		*arr = fixture_realloc(*arr, *max * sizeof(**arr));
	}
	(*arr)[(*nr)++] = r;
}

static unsigned op_limit(unsigned op)
{
	if (op == RQ_OP_DISCARD)
		return WL_MAX_DISCARD;
	return op == RQ_OP_WRITE_ZEROES ? WL_MAX_WZ : WL_MAX_SECTORS;
}

static unsigned rnd(struct worker *w, unsigned n)
{
	return (unsigned)rand_r(&w->seed) % n;
}

/* Make the bio's buffers: 1..4 vectors, pieces of one allocation separated
 * by 512-byte gaps (never memory-contiguous), each a multiple of 512. */
static void wl_buffers(struct worker *w, struct wl_bio *b)
{
	unsigned sectors = b->len >> 9;
	unsigned nvec = 1 + rnd(w, sectors < 4 ? sectors : 4);
	uint8_t *p;

	b->data = fixture_realloc(NULL, b->len + 4 * 512);
	p = b->data;
	b->nvec = nvec;
	for (unsigned i = 0; i < nvec; i++) {
		unsigned s = i == nvec - 1 ? sectors : 1 + rnd(w, sectors - (nvec - 1 - i));

		b->vbase[i] = p;
		b->vlen[i] = s << 9;
		sectors -= s;
		p += (s << 9) + 512;
	}
}

static struct rq_bio *wl_make_bio(struct wl_bio *b)
{
	struct rq_bio *bio = rq_bio_alloc(b->nvec);

	/* worker threads: no cmocka asserts here */
	if (!bio)
		abort();
	b->rec.done = 0;
	b->rec.status = -1;
	b->rec.bio = bio;
	bio->op = b->op;
	bio->opf = b->opf;
	bio->iter.sector = b->sector;
	for (unsigned i = 0; i < b->nvec; i++)
		if (rq_bio_add_vec(bio, b->vbase[i], b->vlen[i]))
			abort();
	bio->iter.size = b->len;
	bio->end_io = fx_end_io;
	bio->private_data = &b->rec;
	return bio;
}

/* Copy between the bio's vectors and a flat buffer. */
static void wl_gather(struct wl_bio *b, uint8_t *flat)
{
	for (unsigned i = 0, off = 0; i < b->nvec; off += b->vlen[i], i++)
		memcpy(flat + off, b->vbase[i], b->vlen[i]);
}

static void wl_scatter(struct wl_bio *b, const uint8_t *flat)
{
	for (unsigned i = 0, off = 0; i < b->nvec; off += b->vlen[i], i++)
		memcpy(b->vbase[i], flat + off, b->vlen[i]);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct wl_bio batch[24];
	uint8_t *flat = fixture_realloc(NULL, 512 * 512);

	for (unsigned it = 0; it < w->batches; it++) {
		unsigned n = 1 + rnd(w, 24);
		uint64_t pos = rnd(w, (unsigned)(w->region_sectors / 2));
		unsigned op = RQ_OP_WRITE, k = 0;
		bool reverse = rnd(w, 5) == 0;
		struct rq_plug plug;

		/* plan: increasing, non-overlapping ranges; gap 0 half the time */
		for (k = 0; k < n; k++) {
			struct wl_bio *b = &batch[k];
			unsigned r = rnd(w, 100), sectors;

			memset(b, 0, sizeof(*b));
			if (k == 0 || rnd(w, 10) >= 7) {
				if (r < 45)
					op = RQ_OP_WRITE;
				else if (r < 80)
					op = RQ_OP_READ;
				else if (r < 88)
					op = RQ_OP_DISCARD;
				else if (r < 95)
					op = RQ_OP_WRITE_ZEROES;
				else
					op = RQ_OP_FLUSH;
			}
			b->op = op;
			if (op == RQ_OP_FLUSH) {
				b->sector = 0;
				b->len = 0;
				continue;
			}
			sectors = rnd(w, 20) == 0 ? 65 + rnd(w, 192) : 1 + rnd(w, 32);
			if (k && rnd(w, 2))
				pos += 1 + rnd(w, 64);
			if (pos + sectors > w->region_sectors)
				break;
			b->sector = w->region_start + pos;
			b->len = sectors << 9;
			pos += sectors;
			if (rq_op_has_data(op)) {
				wl_buffers(w, b);
				if (rnd(w, 10) == 0 && sectors <= WL_MAX_SECTORS) {
					/* at most WL_MAX_SEGMENTS vectors: never split */
					b->opf |= RQ_BIO_NOMERGE;
				}
				if (op == RQ_OP_WRITE && rnd(w, 25) == 0)
					b->opf |= rnd(w, 2) ? RQ_BIO_FUA : RQ_BIO_PREFLUSH;
			}
		}
		n = k;

		/* shadow: writes/zeroes take effect (no overlap inside a batch) */
		for (k = 0; k < n; k++) {
			struct wl_bio *b = &batch[k];
			uint64_t off = (b->sector - w->region_start) << 9;

			if (b->op == RQ_OP_WRITE) {
				fixture_fill(flat, b->len, w->seed + k, b->sector << 9);
				wl_scatter(b, flat);
				memcpy(w->shadow + off, flat, b->len);
			} else if (b->op == RQ_OP_DISCARD || b->op == RQ_OP_WRITE_ZEROES) {
				memset(w->shadow + off, 0, b->len);
			} else if (b->op == RQ_OP_READ) {
				for (unsigned v = 0; v < b->nvec; v++)
					memset(b->vbase[v], 0xcc, b->vlen[v]);
			}
			if (b->opf & RQ_BIO_NOMERGE)
				note(&w->nomerge, &w->nr_nomerge, &w->max_nomerge,
				     (struct nomerge_rec){ b->op, b->sector, b->len });
			if (b->op != RQ_OP_FLUSH && (b->len >> 9) > op_limit(b->op))
				note(&w->split, &w->nr_split, &w->max_split,
				     (struct nomerge_rec){ b->op, b->sector, b->len });
		}

		rq_start_plug(&plug);
		for (unsigned i = 0; i < n; i++) {
			struct wl_bio *b = &batch[reverse ? n - 1 - i : i];

			rq_submit_bio(w->q, wl_make_bio(b));
		}
		rq_finish_plug(&plug);
		w->bios += n;

		for (k = 0; k < n; k++) {
			struct wl_bio *b = &batch[k];

			if (!fx_wait(&b->rec, 1, 10000)) {
				w->timeouts++;
				/* the bio may still be in use: leak it rather than free it */
				continue;
			}
			if (fx_done(&b->rec) != 1)
				w->bad_end++;
			if (b->rec.status != RQ_STS_OK)
				w->bad_status++;
			if (b->op == RQ_OP_READ) {
				wl_gather(b, flat);
				if (memcmp(flat, w->shadow + ((b->sector - w->region_start) << 9),
					   b->len))
					w->bad_read++;
			}
			rq_bio_put(b->rec.bio);
			free(b->data);
		}
		if (w->timeouts)
			break;
	}
	free(flat);
	return NULL;
}

void wl_run_mixed(const struct wl_dev *dev, unsigned batches)
{
	struct worker w[2];
	pthread_t t[2];
	struct mock_event *evs;
	unsigned n, max_pieces;
	unsigned long bad_walk;
	const uint64_t half = (WL_MEM_BYTES >> 9) / 2;

	for (unsigned i = 0; i < 2; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].q = dev->q;
		w[i].id = i;
		w[i].seed = 1234 + 77 * i;
		w[i].region_start = i * half;
		w[i].region_sectors = half;
		w[i].shadow = calloc(1, half << 9);
		w[i].batches = batches;
		assert_non_null(w[i].shadow);
		/* the device starts as the shadow: zeroes */
		memset(dev->mem + (w[i].region_start << 9), 0, half << 9);
	}
	for (unsigned i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
	for (unsigned i = 0; i < 2; i++)
		pthread_join(t[i], NULL);

	for (unsigned i = 0; i < 2; i++) {
		assert_int_equal(w[i].timeouts, 0);
		assert_int_equal(w[i].bad_end, 0);
		assert_int_equal(w[i].bad_status, 0);
		assert_int_equal(w[i].bad_read, 0);
		assert_true(w[i].bios > 0);
		assert_memory_equal(dev->mem + (w[i].region_start << 9), w[i].shadow, half << 9);
	}

	n = recorder_copy(dev->rec, MOCK_QUEUE_RQ, &evs);
	assert_true(n > 0);
	for (unsigned i = 0; i < n; i++) {
		const struct mock_event *e = &evs[i];
		unsigned sectors = e->bytes >> 9;

		switch (e->op) {
		case RQ_OP_READ:
		case RQ_OP_WRITE:
			if (sectors > WL_MAX_SECTORS || e->nr_segments > WL_MAX_SEGMENTS || !sectors)
				fail_msg("request op %d at %llu: %u sectors, %u segments", e->op,
					 (unsigned long long)e->sector, sectors, e->nr_segments);
			break;
		case RQ_OP_DISCARD:
			assert_true(sectors > 0 && sectors <= WL_MAX_DISCARD);
			break;
		case RQ_OP_WRITE_ZEROES:
			assert_true(sectors > 0 && sectors <= WL_MAX_WZ);
			break;
		case RQ_OP_FLUSH:
			assert_int_equal(e->bytes, 0);
			break;
		default:
			fail_msg("unknown op %d reached the driver", e->op);
		}
		/* a NOMERGE request is exactly one NOMERGE bio, or a piece of a
		 * split bio */
		if (e->opf & RQ_BIO_NOMERGE) {
			bool found = false;

			for (unsigned k = 0; k < 2 && !found; k++) {
				for (unsigned j = 0; j < w[k].nr_nomerge && !found; j++)
					found = w[k].nomerge[j].op == e->op &&
						w[k].nomerge[j].sector == e->sector &&
						w[k].nomerge[j].len == e->bytes;
				for (unsigned j = 0; j < w[k].nr_split && !found; j++)
					found = w[k].split[j].op == e->op &&
						w[k].split[j].sector <= e->sector &&
						e->sector + sectors <=
							w[k].split[j].sector +
								(w[k].split[j].len >> 9);
			}
			if (!found)
				fail_msg("NOMERGE request at %llu, %u bytes, matches no bio",
					 (unsigned long long)e->sector, e->bytes);
		}
	}
	/* every NOMERGE bio reached the driver as a request of its own */
	for (unsigned k = 0; k < 2; k++) {
		for (unsigned j = 0; j < w[k].nr_nomerge; j++) {
			bool found = false;

			for (unsigned i = 0; i < n && !found; i++)
				found = evs[i].op == w[k].nomerge[j].op &&
					evs[i].sector == w[k].nomerge[j].sector &&
					evs[i].bytes == w[k].nomerge[j].len &&
					evs[i].ret == RQ_STS_OK;
			if (!found)
				fail_msg("NOMERGE bio at %llu, %u bytes, was merged",
					 (unsigned long long)w[k].nomerge[j].sector,
					 w[k].nomerge[j].len);
		}
	}
	{
		struct rq_queue_stats st;
		unsigned long bios = w[0].bios + w[1].bios;

		rq_queue_get_stats(dev->q, &st, sizeof(st));
		print_message("%s: %lu bios, %u driver requests, %u+%u NOMERGE bios, %u+%u split bios, "
			      "merges back %llu front %llu rq %llu plug %llu, splits %llu, flushes %llu\n",
			      dev->sched, bios, n, w[0].nr_nomerge, w[1].nr_nomerge, w[0].nr_split,
			      w[1].nr_split, (unsigned long long)st.merges_back,
			      (unsigned long long)st.merges_front, (unsigned long long)st.merges_rq,
			      (unsigned long long)st.plug_merges, (unsigned long long)st.splits,
			      (unsigned long long)st.flushes);
	}
	free(evs);
	recorder_walk_stats(dev->rec, &max_pieces, &bad_walk);
	assert_int_equal(bad_walk, 0);
	assert_true(max_pieces <= WL_MAX_SEGMENTS);
	for (unsigned i = 0; i < 2; i++) {
		free(w[i].shadow);
		free(w[i].nomerge);
		free(w[i].split);
	}
}

void wl_mixed_created(const struct wl_dev *dev, unsigned batches)
{
	struct rq_queue_stats st;

	wl_expect_active(dev->q, dev->sched);
	wl_run_mixed(dev, batches);
	rq_queue_get_stats(dev->q, &st, sizeof(st));
	assert_true(st.merges_back + st.merges_front > 0);
	assert_int_equal(st.errors, 0);
	assert_true(st.splits > 0);
}

void wl_mixed_switched(const struct wl_dev *dev, const char *first, unsigned batches)
{
	wl_expect_active(dev->q, first);
	assert_int_equal(rq_queue_attr_set(dev->q, "scheduler", dev->sched), 0);
	wl_expect_active(dev->q, dev->sched);
	wl_run_mixed(dev, batches);
}

/* ------------------------------------------------------------- plug merges */

/*
 * 4 contiguous 4 KiB writes at sector 1000 on one plug (NOMERGE if
 * @nomerge); each ends once with OK.  Return: the requests the driver took.
 */
static unsigned plug_four(const struct wl_dev *dev, bool nomerge, struct mock_event **evs)
{
	static uint8_t bufs[4][4096];
	struct fx_rec rec[4];
	struct rq_plug plug;

	rq_start_plug(&plug);
	for (unsigned i = 0; i < 4; i++) {
		struct rq_bio *bio = fx_bio(&rec[i], RQ_OP_WRITE, 1000 + i * 8, bufs[i], 4096);

		if (nomerge)
			bio->opf |= RQ_BIO_NOMERGE;
		rq_submit_bio(dev->q, bio);
	}
	rq_finish_plug(&plug);
	assert_true(fx_wait(rec, 4, 10000));
	for (unsigned i = 0; i < 4; i++)
		if (fx_done(&rec[i]) != 1 || rec[i].status != RQ_STS_OK)
			fail_msg("bio %u ended %d times with %d; want once with OK", i,
				 fx_done(&rec[i]), rec[i].status);
	fx_put(rec, 4);
	return recorder_copy(dev->rec, MOCK_QUEUE_RQ, evs);
}

void wl_sequential_plug_merges(const struct wl_dev *dev)
{
	struct rq_queue_stats st;
	struct mock_event *evs;

	assert_int_equal(plug_four(dev, false, &evs), 1);
	assert_int_equal(evs[0].sector, 1000);
	assert_int_equal(evs[0].bytes, 4 * 4096);
	free(evs);
	rq_queue_get_stats(dev->q, &st, sizeof(st));
	assert_int_equal(st.merges_back, 3);
}

void wl_nomerge_never_merges(const struct wl_dev *dev)
{
	struct rq_queue_stats st;
	struct mock_event *evs;

	assert_int_equal(plug_four(dev, true, &evs), 4);
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(evs[i].bytes, 4096);
	free(evs);
	rq_queue_get_stats(dev->q, &st, sizeof(st));
	assert_int_equal(st.merges_back + st.merges_front + st.merges_rq, 0);
}
