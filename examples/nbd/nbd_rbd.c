/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_rbd: rqnbd's --rbd device over examples/rbd's librbd driver.  See
 * nbd_rbd.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbd_rbd.h"
#include "rbd_drv.h"

struct nbd_rbd {
	struct rqrbd_dev *dev;
	char *pool;     /* the spec cut in pieces: pool, image, snapshot */
	char *image;
	char *snap;
};

/* Whether @spec reads as POOL/IMAGE[@SNAP]. */
static bool nbd_rbd_spec_ok(const char *spec)
{
	const char *slash = strchr(spec, '/'), *at;

	if (!slash || slash == spec || !slash[1] || strchr(slash + 1, '/'))
		return false;
	at = strchr(slash + 1, '@');
	return !at || (at > slash + 1 && at[1] && !strchr(at + 1, '@'));
}

/* Cut @spec into @r's pool, image and snapshot.  Return: 0 or -errno. */
static int nbd_rbd_split_spec(struct nbd_rbd *r, const char *spec)
{
	char *slash, *at;

	if (!nbd_rbd_spec_ok(spec))
		return -EINVAL;
	r->pool = strdup(spec);
	if (!r->pool)
		return -ENOMEM;
	slash = strchr(r->pool, '/');
	*slash = '\0';
	r->image = slash + 1;
	at = strchr(r->image, '@');
	if (at) {
		*at = '\0';
		r->snap = at + 1;
	}
	return 0;
}

/**
 * nbd_rbd_create() - open the image and make its queue.  See nbd_rbd.h.
 * @cfg: configuration.
 * @out: receives the device.
 * Return: 0 or a negative errno.
 */
int nbd_rbd_create(const struct nbd_rbd_config *cfg, struct nbd_rbd **out)
{
	struct rqrbd_config rc;
	struct nbd_rbd *r;
	int ret;

	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	ret = nbd_rbd_split_spec(r, cfg->spec);
	if (ret)
		goto fail;
	rqrbd_config_default(&rc);
	rc.pool = r->pool;
	rc.image = r->image;
	rc.snap = r->snap;
	rc.ceph_conf = cfg->ceph_conf;
	rc.client_id = cfg->client_id;
	rc.read_only = cfg->read_only;
	rc.nr_hw_queues = cfg->nr_hw_queues;
	if (cfg->queue_depth)
		rc.hw_queue_depth = cfg->queue_depth;
	rc.sched = cfg->sched;
	ret = rqrbd_create(&rc, &r->dev);
	if (ret)
		goto fail;
	*out = r;
	return 0;
fail:
	free(r->pool);
	free(r);
	return ret;
}

/** nbd_rbd_queue() - the device's queue. */
struct rq_queue *nbd_rbd_queue(struct nbd_rbd *r)
{
	return rqrbd_queue(r->dev);
}

/** nbd_rbd_size() - the exported size. */
uint64_t nbd_rbd_size(struct nbd_rbd *r)
{
	return rqrbd_size(r->dev);
}

/**
 * nbd_rbd_destroy() - tear down, printing the driver's counters.
 * @r: the device, or NULL.
 */
void nbd_rbd_destroy(struct nbd_rbd *r)
{
	struct rqrbd_stats st;
	char line[512];

	if (!r)
		return;
	rqrbd_get_stats(r->dev, &st);
	rqrbd_stats_format(&st, line, sizeof(line));
	fprintf(stderr, "rbd: %s\n", line);
	rqrbd_destroy(r->dev);
	free(r->pool);
	free(r);
}
