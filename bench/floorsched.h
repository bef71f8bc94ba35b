/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The scheduler contract's floor: two benchmark-only schedulers rqbench
 * registers through the public API (doc/benchmarks.md).
 */
#ifndef RQBENCH_FLOORSCHED_H
#define RQBENCH_FLOORSCHED_H

/* Register floor-min and floor-hooks: 0 or -errno.  Before queues are made. */
int floor_sched_register(void);
/* Unregister both; after every queue using them is gone. */
void floor_sched_unregister(void);

#endif
