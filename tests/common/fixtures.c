/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Shared test fixtures: the toy "test-fifo" scheduler and small helpers.
 *
 * test-fifo dispatches per hw queue in insertion order.  Mergeable requests
 * sit in one sector-sorted tree per queue (front merges) and on the core's
 * back-merge hash.  One recursive mutex per queue guards everything; the
 * merge hooks the core calls from inside rq_sched_try_merge() /
 * rq_sched_try_insert_merge() run with it already held (hence recursive).
 * Requests emptied by merges are freed with rq_sched_free_request() after
 * the lock is dropped.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fixtures.h"

struct fifo_data {
	pthread_mutex_t lock;
	unsigned nr_hw;
	struct rq_list_node *lists; /* per hw queue, by queuelist */
	struct rq_rb_root sort;     /* mergeable requests by sector */
	int insert_merge;           /* tunable: try insert merges */
};

/* rq->elv_priv[0] bits */
#define FIFO_IN_TREE 1ul

static atomic_ulong st_inserted, st_dispatched, st_bio_merges, st_insert_merges,
	st_requests_merged;

static struct fifo_data *fifo_of(struct rq_queue *q)
{
	return rq_sched_data(q);
}

static bool fifo_mergeable(const struct rq_request *rq)
{
	if (rq->op != RQ_OP_READ && rq->op != RQ_OP_WRITE && rq->op != RQ_OP_DISCARD)
		return false;
	if (rq->opf & (RQ_BIO_NOMERGE | RQ_BIO_FUA | RQ_BIO_PREFLUSH))
		return false;
	if (rq->rq_flags & (RQ_RQF_FLUSH_SEQ | RQ_RQF_FLUSH_INTERNAL))
		return false;
	return true;
}

static void tree_del(struct fifo_data *d, struct rq_request *rq)
{
	if ((uintptr_t)rq->elv_priv[0] & FIFO_IN_TREE) {
		rq_sched_rb_del(&d->sort, rq);
		rq->elv_priv[0] = (void *)((uintptr_t)rq->elv_priv[0] & ~FIFO_IN_TREE);
	}
}

static void tree_add(struct fifo_data *d, struct rq_request *rq)
{
	rq_sched_rb_add(&d->sort, rq);
	rq->elv_priv[0] = (void *)((uintptr_t)rq->elv_priv[0] | FIFO_IN_TREE);
}

/* Take @rq out of every structure of ours (list, tree, hash); lock held. */
static void fifo_remove(struct rq_queue *q, struct fifo_data *d, struct rq_request *rq)
{
	rq_list_del_init(&rq->queuelist);
	tree_del(d, rq);
	if (rq->rq_flags & RQ_RQF_HASHED)
		rq_sched_hash_del(q, rq);
}

static int fifo_init_sched(struct rq_queue *q, void **data)
{
	struct fifo_data *d = calloc(1, sizeof(*d));
	pthread_mutexattr_t a;

	if (!d)
		return -ENOMEM;
	d->nr_hw = rq_queue_nr_hw_queues(q);
	d->lists = calloc(d->nr_hw ? d->nr_hw : 1, sizeof(*d->lists));
	if (!d->lists) {
		free(d);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < d->nr_hw; i++)
		rq_list_init(&d->lists[i]);
	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&d->lock, &a);
	pthread_mutexattr_destroy(&a);
	d->insert_merge = 1;
	*data = d;
	return 0;
}

static void fifo_exit_sched(struct rq_queue *q, void *data)
{
	struct fifo_data *d = data;

	pthread_mutex_destroy(&d->lock);
	free(d->lists);
	free(d);
}

static bool fifo_bio_merge(struct rq_queue *q, struct rq_bio *bio, unsigned nr_segs)
{
	struct fifo_data *d = fifo_of(q);
	struct rq_request *free_rq = NULL;
	bool merged;

	pthread_mutex_lock(&d->lock);
	merged = rq_sched_try_merge(q, bio, nr_segs, &free_rq);
	pthread_mutex_unlock(&d->lock);
	if (free_rq)
		rq_sched_free_request(free_rq);
	if (merged)
		st_bio_merges++;
	return merged;
}

static int fifo_request_merge(struct rq_queue *q, struct rq_request **rq, struct rq_bio *bio)
{
	struct fifo_data *d = fifo_of(q);
	struct rq_request *found;
	int ret = RQ_ELV_NO_MERGE;

	pthread_mutex_lock(&d->lock);
	found = rq_sched_rb_find(&d->sort, rq_bio_end_sector(bio));
	if (found && found->op == bio->op) {
		*rq = found;
		ret = RQ_ELV_FRONT_MERGE;
	}
	pthread_mutex_unlock(&d->lock);
	return ret;
}

static void fifo_request_merged(struct rq_queue *q, struct rq_request *rq, enum rq_elv_merge type)
{
	struct fifo_data *d = fifo_of(q);

	pthread_mutex_lock(&d->lock);
	if (type == RQ_ELV_FRONT_MERGE && ((uintptr_t)rq->elv_priv[0] & FIFO_IN_TREE)) {
		tree_del(d, rq);
		tree_add(d, rq);
	}
	pthread_mutex_unlock(&d->lock);
}

static void fifo_requests_merged(struct rq_queue *q, struct rq_request *rq,
				 struct rq_request *next)
{
	struct fifo_data *d = fifo_of(q);

	pthread_mutex_lock(&d->lock);
	fifo_remove(q, d, next);
	pthread_mutex_unlock(&d->lock);
	st_requests_merged++;
}

static struct rq_request *fifo_former(struct rq_queue *q, struct rq_request *rq)
{
	struct fifo_data *d = fifo_of(q);
	struct rq_request *r = NULL;

	pthread_mutex_lock(&d->lock);
	if ((uintptr_t)rq->elv_priv[0] & FIFO_IN_TREE)
		r = rq_sched_rb_former(rq);
	pthread_mutex_unlock(&d->lock);
	return r;
}

static struct rq_request *fifo_latter(struct rq_queue *q, struct rq_request *rq)
{
	struct fifo_data *d = fifo_of(q);
	struct rq_request *r = NULL;

	pthread_mutex_lock(&d->lock);
	if ((uintptr_t)rq->elv_priv[0] & FIFO_IN_TREE)
		r = rq_sched_rb_latter(rq);
	pthread_mutex_unlock(&d->lock);
	return r;
}

static void fifo_insert_requests(struct rq_hw_ctx *hctx, struct rq_list_node *list,
				 unsigned flags)
{
	struct rq_queue *q = rq_hctx_queue(hctx);
	struct fifo_data *d = fifo_of(q);
	unsigned idx = rq_hctx_index(hctx);
	struct rq_list_node free_list;
	struct rq_request *rq;

	rq_list_init(&free_list);
	if (idx >= d->nr_hw)
		idx = 0;
	pthread_mutex_lock(&d->lock);
	while ((rq = rq_list_first_rq(list))) {
		rq_list_del_init(&rq->queuelist);
		st_inserted++;
		rq->elv_priv[0] = NULL;
		if (!(flags & RQ_INSERT_AT_HEAD) && d->insert_merge && fifo_mergeable(rq) &&
		    rq_sched_try_insert_merge(q, rq, &free_list)) {
			st_insert_merges++;
			continue;
		}
		if (flags & RQ_INSERT_AT_HEAD)
			rq_list_add(&rq->queuelist, &d->lists[idx]);
		else
			rq_list_add_tail(&rq->queuelist, &d->lists[idx]);
		if (fifo_mergeable(rq)) {
			tree_add(d, rq);
			if (!(rq->rq_flags & RQ_RQF_HASHED))
				rq_sched_hash_add(q, rq);
		}
	}
	pthread_mutex_unlock(&d->lock);
	/* requests emptied by insert merges: free them unlocked */
	while ((rq = rq_list_first_rq(&free_list))) {
		rq_list_del_init(&rq->queuelist);
		rq_sched_free_request(rq);
	}
}

static struct rq_request *fifo_dispatch_request(struct rq_hw_ctx *hctx)
{
	struct rq_queue *q = rq_hctx_queue(hctx);
	struct fifo_data *d = fifo_of(q);
	unsigned idx = rq_hctx_index(hctx);
	struct rq_request *rq;

	if (idx >= d->nr_hw)
		idx = 0;
	pthread_mutex_lock(&d->lock);
	rq = rq_list_first_rq(&d->lists[idx]);
	if (rq)
		fifo_remove(q, d, rq);
	pthread_mutex_unlock(&d->lock);
	if (rq)
		st_dispatched++;
	return rq;
}

static bool fifo_has_work(struct rq_hw_ctx *hctx)
{
	struct fifo_data *d = fifo_of(rq_hctx_queue(hctx));
	unsigned idx = rq_hctx_index(hctx);
	bool work;

	if (idx >= d->nr_hw)
		idx = 0;
	pthread_mutex_lock(&d->lock);
	work = !rq_list_empty(&d->lists[idx]);
	pthread_mutex_unlock(&d->lock);
	return work;
}

static int fifo_show_insert_merge(void *data, char *buf, size_t len)
{
	struct fifo_data *d = data;
	int n = snprintf(buf, len, "%d\n", d->insert_merge);

	return n < 0 || (size_t)n >= len ? -ENOSPC : n;
}

static int fifo_store_insert_merge(void *data, const char *buf)
{
	struct fifo_data *d = data;

	if ((buf[0] != '0' && buf[0] != '1') || (buf[1] && buf[1] != '\n'))
		return -EINVAL;
	pthread_mutex_lock(&d->lock);
	d->insert_merge = buf[0] - '0';
	pthread_mutex_unlock(&d->lock);
	return 0;
}

static const struct rq_elv_attr fifo_attrs[] = {
	{ "insert_merge", fifo_show_insert_merge, fifo_store_insert_merge },
	{ NULL, NULL, NULL },
};

static const struct rq_elevator_type fifo_type = {
	RQ_ELV_TYPE_INIT,
	.name = FIXTURE_FIFO_NAME,
	.features = RQ_ELV_F_MQ,
	.ops = {
		.init_sched = fifo_init_sched,
		.exit_sched = fifo_exit_sched,
		.bio_merge = fifo_bio_merge,
		.request_merge = fifo_request_merge,
		.request_merged = fifo_request_merged,
		.requests_merged = fifo_requests_merged,
		.insert_requests = fifo_insert_requests,
		.dispatch_request = fifo_dispatch_request,
		.has_work = fifo_has_work,
		.former_request = fifo_former,
		.next_request = fifo_latter,
	},
	.attrs = fifo_attrs,
};

static pthread_once_t fifo_once = PTHREAD_ONCE_INIT;
static int fifo_ret;

static void fifo_register_once(void)
{
	fifo_ret = rq_sched_register(&fifo_type);
	if (fifo_ret == -EEXIST)
		fifo_ret = 0;
}

int fixture_register_fifo(void)
{
	pthread_once(&fifo_once, fifo_register_once);
	return fifo_ret;
}

void fixture_fifo_stats(struct fixture_fifo_stats *st)
{
	st->inserted = st_inserted;
	st->dispatched = st_dispatched;
	st->bio_merges = st_bio_merges;
	st->insert_merges = st_insert_merges;
	st->requests_merged = st_requests_merged;
}

/* ------------------------------------------------------------------ helpers */

void fixture_fill(void *buf, uint32_t len, uint32_t seed, uint64_t offset)
{
	uint8_t *b = buf;

	for (uint32_t i = 0; i < len; i++) {
		uint64_t x = (offset + i) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)seed << 32 | seed);

		x ^= x >> 29;
		b[i] = (uint8_t)(x ^ (x >> 8) ^ 0x5a);
	}
}

uint64_t fixture_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void fx_poll_pause(void)
{
	sched_yield();
}

pid_t fx_gettid(void)
{
	return (pid_t)syscall(SYS_gettid);
}

/* Is thread @tid asleep (state S in /proc)? */
static bool thread_sleeping(pid_t tid)
{
	char path[64], buf[512], *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	f = fopen(path, "r");
	if (!f)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] == 'S';
}

bool fx_wait_blocked(const pid_t *tid, const int *returned, unsigned timeout_ms)
{
	uint64_t end = fixture_now_ms() + timeout_ms;
	unsigned sleeping = 0;

	while (sleeping < 20) {
		pid_t t = __atomic_load_n(tid, __ATOMIC_ACQUIRE);

		if (__atomic_load_n(returned, __ATOMIC_ACQUIRE) || fixture_now_ms() > end)
			return false;
		sleeping = t && thread_sleeping(t) ? sleeping + 1 : 0;
		fx_poll_pause();
	}
	return !__atomic_load_n(returned, __ATOMIC_ACQUIRE);
}

/* ------------------------------------------------------------ virtual clock */

static _Atomic uint64_t vclock_ns;

static uint64_t vclock_read(void *arg)
{
	(void)arg;
	return atomic_load_explicit(&vclock_ns, memory_order_acquire);
}

void fx_vclock_install(uint64_t start_ns)
{
	atomic_store_explicit(&vclock_ns, start_ns, memory_order_release);
	rq_clock_set_source(vclock_read, NULL);
}

uint64_t fx_vclock_now(void)
{
	return vclock_read(NULL);
}

void fx_vclock_set(uint64_t ns)
{
	if (ns < fx_vclock_now()) {
		fprintf(stderr, "fx_vclock_set: %llu is before %llu\n", (unsigned long long)ns,
			(unsigned long long)fx_vclock_now());
		abort();
	}
	atomic_store_explicit(&vclock_ns, ns, memory_order_release);
}

void fx_serve_until(uint64_t t)
{
	for (unsigned passes = 0;; passes++) {
		int64_t wait = rq_service_run();
		uint64_t now = fx_vclock_now();

		if (wait < 0 || passes == 1000000) {
			fprintf(stderr, "fx_serve_until: rq_service_run: %lld after %u passes\n",
				(long long)wait, passes);
			abort();
		}
		if (wait == 0)
			continue;
		if (now >= t || (uint64_t)wait > t - now)
			break;
		fx_vclock_set(now + (uint64_t)wait);
	}
	fx_vclock_set(t);
	fx_service_due();
}

void *fixture_realloc(void *p, size_t n)
{
	void *r = realloc(p, n);

	if (!r)
		abort();
	return r;
}

rq_status_t fixture_move_data(uint8_t *mem, uint64_t mem_bytes, struct rq_request *rq,
			      uint32_t bytes)
{
	uint64_t off = rq->sector << RQ_SECTOR_SHIFT;
	struct rq_req_iter ri;
	struct rq_segment seg;

	if (!mem)
		return RQ_STS_OK;
	if (bytes > rq->bytes)
		bytes = rq->bytes;
	switch (rq->op) {
	case RQ_OP_READ:
	case RQ_OP_WRITE:
	case RQ_OP_DISCARD:
	case RQ_OP_WRITE_ZEROES:
		if (off > mem_bytes || bytes > mem_bytes - off)
			return RQ_STS_IOERR;
		break;
	default:
		return RQ_STS_OK;
	}
	if (rq->op == RQ_OP_DISCARD || rq->op == RQ_OP_WRITE_ZEROES) {
		memset(mem + off, 0, bytes);
		return RQ_STS_OK;
	}
	rq_req_iter_init(&ri, rq);
	while (bytes && rq_req_iter_next(&ri, &seg)) {
		uint32_t n = seg.len < bytes ? seg.len : bytes;

		if (rq->op == RQ_OP_READ)
			memcpy(seg.base, mem + off, n);
		else
			memcpy(mem + off, seg.base, n);
		off += n;
		bytes -= n;
	}
	return RQ_STS_OK;
}

/* --------------------------------------------------------------- bio records */

void fx_end_io(struct rq_bio *bio)
{
	struct fx_rec *rec = bio->private_data;

	__atomic_store_n(&rec->status, bio->status, __ATOMIC_RELAXED);
	__atomic_fetch_add(&rec->done, 1, __ATOMIC_RELEASE);
}

struct rq_bio *fx_bio(struct fx_rec *rec, unsigned op, uint64_t sector, void *buf, uint32_t len)
{
	struct rq_bio *bio = rq_bio_alloc(1);

	if (!bio)
		abort();
	rec->done = 0;
	rec->status = -1;
	rec->bio = bio;
	bio->op = op;
	bio->iter.sector = sector;
	if (buf && len && rq_bio_add_vec(bio, buf, len))
		abort();
	bio->iter.size = len;
	bio->end_io = fx_end_io;
	bio->private_data = rec;
	return bio;
}

void fx_service_due(void)
{
	unsigned passes = 0;
	int64_t wait;

	while ((wait = rq_service_run()) == 0) {
		if (++passes == 1000) {
			fprintf(stderr, "fx_service_due: service work still due after 1000 passes\n");
			abort();
		}
	}
	if (wait < 0) {
		fprintf(stderr, "fx_service_due: rq_service_run: %lld (not application-driven?)\n",
			(long long)wait);
		abort();
	}
}

int fx_done(struct fx_rec *rec)
{
	return __atomic_load_n(&rec->done, __ATOMIC_ACQUIRE);
}

bool fx_wait(struct fx_rec *recs, unsigned n, unsigned timeout_ms)
{
	uint64_t end = fixture_now_ms() + timeout_ms;
	unsigned i = 0;

	for (;;) {
		while (i < n && fx_done(&recs[i]) > 0)
			i++;
		if (i == n)
			return true;
		if (fixture_now_ms() >= end)
			return false;
		fx_poll_pause();
	}
}

void fx_put(struct fx_rec *recs, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		if (recs[i].bio)
			rq_bio_put(recs[i].bio);
		recs[i].bio = NULL;
	}
}

/* ------------------------------------------------- a switch on its own thread */

static void *fx_switch_thread(void *arg)
{
	struct fx_switch *s = arg;

	__atomic_store_n(&s->tid, fx_gettid(), __ATOMIC_RELEASE);
	s->ret = rq_queue_attr_set(s->q, "scheduler", s->name);
	__atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

void fx_switch_start(struct fx_switch *s, struct rq_queue *q, const char *name)
{
	s->q = q;
	s->name = name;
	s->ret = 0;
	s->done = 0;
	s->tid = 0;
	if (pthread_create(&s->thread, NULL, fx_switch_thread, s))
		abort();
}

bool fx_switch_blocked(struct fx_switch *s)
{
	return fx_wait_blocked(&s->tid, &s->done, 10000);
}

bool fx_switch_done(struct fx_switch *s)
{
	return __atomic_load_n(&s->done, __ATOMIC_ACQUIRE);
}

int fx_switch_join(struct fx_switch *s)
{
	pthread_join(s->thread, NULL);
	return s->ret;
}
