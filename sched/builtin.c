/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The schedulers built into the library, registered in this order on the
 * registry's first use.  Each scheduler file adds its type here, one line.
 */
#include <stddef.h>

#include "lib/internal/elevator.h"

extern const struct rq_elevator_type rq_mq_deadline_type;
extern const struct rq_elevator_type rq_kyber_type;
extern const struct rq_elevator_type rq_bfq_type;
extern const struct rq_elevator_type rq_noop_type;
extern const struct rq_elevator_type rq_deadline_type;
extern const struct rq_elevator_type rq_cfq_type;

const struct rq_elevator_type *const rq_builtin_elevators[] = {
	&rq_mq_deadline_type,
	&rq_kyber_type,
	&rq_bfq_type,
	&rq_noop_type,
	&rq_deadline_type,
	&rq_cfq_type,
	NULL,
};
