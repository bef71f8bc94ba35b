/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * mq-deadline built without its sorted runs, as "mq-deadline-tree": every
 * request goes through the trees and the hash one by one.  test_dl_runs
 * compares the real scheduler against it.
 */
#define DL_TREE_ONLY 1
#include "sched/mq-deadline.c"
