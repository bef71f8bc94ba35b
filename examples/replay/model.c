/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librqreplay: device models, their presets and "key = value" files.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "replay-internal.h"

static const char *const preset_names[] = { "hdd-7200", "hdd-5400", "ssd-sata", "nvme", NULL };

const char *const *rq_replay_model_presets(void)
{
	return preset_names;
}

/* Fill @m from preset @name.  Return: 0 or -ENOENT. */
static int model_preset(struct rq_replay_model *m, const char *name)
{
	struct rq_replay_model z = { 0 };

	if (!strcmp(name, "hdd-7200")) {
		z.kind = REPLAY_HDD; /* hddsim's defaults: a 1 TiB desktop disk */
		z.hdd = (struct hddsim_model){
			.capacity_sectors = 1ull << 31, .rpm = 7200, .settle_ns = 800000,
			.full_stroke_ns = 16000000, .spt_outer = 3200, .spt_inner = 1600,
			.nr_zones = 16, .readahead_kib = 1024,
		};
		z.ncq_depth = 1;
	} else if (!strcmp(name, "hdd-5400")) {
		z.kind = REPLAY_HDD; /* a 2 TiB laptop disk */
		z.hdd.capacity_sectors = 4ull << 30;
		z.hdd.rpm = 5400;
		z.hdd.settle_ns = 1200000;
		z.hdd.full_stroke_ns = 22000000;
		z.hdd.spt_outer = 2800;
		z.hdd.spt_inner = 1400;
		z.hdd.nr_zones = 16;
		z.hdd.readahead_kib = 1024;
		z.ncq_depth = 1;
	} else if (!strcmp(name, "ssd-sata")) {
		z.kind = REPLAY_FLASH;
		z.flash = (struct flashsim_model){
			.capacity_bytes = 512ull << 30, .channels = 8, .dies_per_channel = 2,
			.read_ns = 50000, .program_ns = 700000, .erase_ns = 3500000,
			.xfer_ns = 10000, .host_mbps = 550, .overhead_ns = 20000,
			.write_buffer_kib = 4096, .pages_per_block = 256, .free_blocks = 8,
			.gc_low_blocks = 4, .gc_valid_pct = 75, .queue_depth = 32,
		};
	} else if (!strcmp(name, "nvme")) {
		z.kind = REPLAY_FLASH;
		z.flash = (struct flashsim_model){
			.capacity_bytes = 1ull << 40, .channels = 8, .dies_per_channel = 4,
			.read_ns = 60000, .program_ns = 600000, .erase_ns = 3500000,
			.xfer_ns = 5000, .host_mbps = 3200, .overhead_ns = 8000,
			.write_buffer_kib = 16384, .pages_per_block = 256, .free_blocks = 8,
			.gc_low_blocks = 4, .gc_valid_pct = 70, .queue_depth = 64,
		};
	} else {
		return -ENOENT;
	}
	snprintf(z.name, sizeof(z.name), "%s", name);
	if (z.kind == REPLAY_FLASH)
		flashsim_model_fill(&z.flash);
	*m = z;
	return 0;
}

int rq_replay_model_new(const char *preset, struct rq_replay_model **out)
{
	struct rq_replay_model *m;
	int ret;

	if (!preset || !out)
		return -EINVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	ret = model_preset(m, preset);
	if (ret) {
		free(m);
		return ret;
	}
	*out = m;
	return 0;
}

void rq_replay_model_free(struct rq_replay_model *m)
{
	free(m);
}

const char *rq_replay_model_name(const struct rq_replay_model *m)
{
	return m->name;
}

/* A parameter: its name, the field (32 or 64 bit), the unit scale to ns. */
struct param {
	const char *key;
	size_t off;
	bool wide;
	double scale;   /* value * scale is stored */
	double max;
};

#define HP(k, f, sc, mx) { k, offsetof(struct rq_replay_model, hdd.f), false, sc, mx }
#define FP(k, f, sc, mx) { k, offsetof(struct rq_replay_model, flash.f), false, sc, mx }

static const struct param hdd_params[] = {
	{ "capacity_gib", offsetof(struct rq_replay_model, hdd.capacity_sectors), true,
	  2097152.0, 1048576 },
	HP("rpm", rpm, 1, 30000),
	HP("settle_us", settle_ns, 1000, 1e6),
	HP("full_stroke_ms", full_stroke_ns, 1e6, 1000),
	HP("spt_outer", spt_outer, 1, 1e6),
	HP("spt_inner", spt_inner, 1, 1e6),
	HP("zones", nr_zones, 1, HDDSIM_MAX_ZONES),
	HP("overhead_us", overhead_ns, 1000, 1e6),
	HP("readahead_kib", readahead_kib, 1, 65536),
	{ "ncq_depth", offsetof(struct rq_replay_model, ncq_depth), false, 1, 32 },
	{ NULL, 0, false, 0, 0 },
};

static const struct param flash_params[] = {
	{ "capacity_gib", offsetof(struct rq_replay_model, flash.capacity_bytes), true,
	  1073741824.0, 1048576 },
	FP("channels", channels, 1, 256),
	FP("dies_per_channel", dies_per_channel, 1, 16),
	FP("read_us", read_ns, 1000, 1e6),
	FP("program_us", program_ns, 1000, 1e6),
	FP("erase_us", erase_ns, 1000, 1e6),
	FP("xfer_us", xfer_ns, 1000, 1e6),
	FP("host_mbps", host_mbps, 1, 1e6),
	FP("overhead_us", overhead_ns, 1000, 1e6),
	FP("write_buffer_kib", write_buffer_kib, 1, 1 << 22),
	FP("pages_per_block", pages_per_block, 1, 65536),
	FP("free_blocks", free_blocks, 1, 1 << 20),
	FP("gc_low_blocks", gc_low_blocks, 1, 1 << 20),
	FP("gc_valid_pct", gc_valid_pct, 1, 99),
	FP("queue_depth", queue_depth, 1, 4096),
	{ NULL, 0, false, 0, 0 },
};

static const struct param *model_params(const struct rq_replay_model *m)
{
	return m->kind == REPLAY_HDD ? hdd_params : flash_params;
}

int rq_replay_model_set(struct rq_replay_model *m, const char *key, const char *value)
{
	const struct param *p;
	char *end;
	double v;

	if (!m || !key || !value)
		return -EINVAL;
	if (!strcmp(key, "preset"))
		return model_preset(m, value) ? -EINVAL : 0;
	for (p = model_params(m); p->key; p++)
		if (!strcmp(p->key, key))
			break;
	if (!p->key)
		return -ENOENT;
	errno = 0;
	v = strtod(value, &end);
	if (errno || end == value || *end || !(v >= 0) || v > p->max || isinf(v))
		return -EINVAL;
	v = v * p->scale + 0.5;
	if (p->wide)
		*(uint64_t *)((char *)m + p->off) = (uint64_t)v;
	else if (v > UINT32_MAX)
		return -EINVAL;
	else
		*(unsigned *)((char *)m + p->off) = (unsigned)v;
	if (m->kind == REPLAY_FLASH)
		flashsim_model_fill(&m->flash);
	return 0;
}

static char *trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = 0;
	return s;
}

int rq_replay_model_load(struct rq_replay_model *m, const char *path, char *err, size_t errlen)
{
	unsigned long line = 0;
	char *buf = NULL;
	size_t cap = 0;
	int ret = 0;
	FILE *f;

	f = fopen(path, "r");
	if (!f) {
		ret = -errno;
		if (err && errlen)
			snprintf(err, errlen, "%s: %s", path, strerror(-ret));
		return ret;
	}
	while (!ret && getline(&buf, &cap, f) >= 0) {
		char *s, *eq, *hash;

		line++;
		hash = strchr(buf, '#');
		if (hash)
			*hash = 0;
		s = trim(buf);
		if (!*s)
			continue;
		eq = strchr(s, '=');
		if (!eq) {
			ret = -EINVAL;
			if (err && errlen)
				snprintf(err, errlen, "%s:%lu: expected \"key = value\"", path, line);
			break;
		}
		*eq = 0;
		ret = rq_replay_model_set(m, trim(s), trim(eq + 1));
		if (ret && err && errlen)
			snprintf(err, errlen, "%s:%lu: %s \"%s\"", path, line,
				 ret == -ENOENT ? "unknown key" : "bad value for", trim(s));
		if (ret)
			ret = -EINVAL;
	}
	free(buf);
	fclose(f);
	return ret;
}

void rq_replay_model_print(const struct rq_replay_model *m, FILE *f)
{
	const struct param *p;

	fprintf(f, "preset = %s\n", m->name);
	for (p = model_params(m); p->key; p++) {
		const char *base = (const char *)m + p->off;
		double v = p->wide ? (double)*(const uint64_t *)base : (double)*(const unsigned *)base;

		fprintf(f, "%s = %.10g\n", p->key, v / p->scale);
	}
}
