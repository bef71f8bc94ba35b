/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The schedulers built into the library, registered in this order on the
 * registry's first use.  Each scheduler file adds its type here, one line.
 */
#include <stddef.h>

#include "lib/internal/elevator.h"

const struct rq_elevator_type *const rq_builtin_elevators[] = {
	NULL,
};
