/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_memory: the backend queries of rqnbd --memory (the memory-backed
 * null device of examples/null), for struct nbd_export: allocation from its
 * page table, and a cache request that has nothing to do.
 */
#ifndef NBD_MEMORY_H
#define NBD_MEMORY_H

#include <stdint.h>

#include "nbd_server.h"

/**
 * nbd_memory_block_status() - an nbd_block_status_fn (@backend: the struct
 * null_dev): a 4 KiB page never written, or freed by a trim or a
 * write-zeroes of the whole page, is NBD_STATE_HOLE | NBD_STATE_ZERO;
 * a page that holds data (even zeros written by a write) is data.
 */
int nbd_memory_block_status(void *backend, uint64_t offset, uint64_t length,
			    struct nbd_extent *ext, unsigned max);

#endif /* NBD_MEMORY_H */
