/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librqreplay internals shared by its files; never installed.
 */
#ifndef RQREPLAY_INTERNAL_H
#define RQREPLAY_INTERNAL_H

#include <stdint.h>

#include "flashsim.h"
#include "hddsim.h"
#include "rqreplay.h"

struct rq_replay_trace {
	struct rq_replay_io *io;
	size_t nr, cap;
	char **files;           /* fio iolog file names */
	uint64_t *file_end;     /* highest byte each file reached */
	unsigned nr_files;
};

enum replay_kind {
	REPLAY_HDD = 0,
	REPLAY_FLASH = 1,
};

struct rq_replay_model {
	char name[32];
	enum replay_kind kind;
	struct hddsim_model hdd;
	unsigned ncq_depth;     /* hdd */
	struct flashsim_model flash;
};

/* Stable merge sort (qsort is not stable, and runs must repeat). */
int replay_stable_sort(void *base, size_t n, size_t size,
		       int (*cmp)(const void *, const void *));

/* Open loop: trace time @ns at replay speed @speed. */
static inline uint64_t replay_scaled(uint64_t ns, double speed)
{
	return speed == 1.0 ? ns : (uint64_t)((double)ns / speed);
}

#endif /* RQREPLAY_INTERNAL_H */
