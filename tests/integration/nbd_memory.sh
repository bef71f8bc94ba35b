#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Memory is bounded per client and comes back.  20 clients each pipeline
# 64 reads of 1 MiB (then 8 of 8 MiB) and never read a reply: rqnbd's RSS
# grows by at most the buffer budget (--buffer-total 64M here) plus the
# fixed cost of 20 connections, instead of 64 MiB a client; when they go,
# RSS comes back near idle.  Eight clients that take their replies and
# stay connected leave RSS near idle too (cached buffers are trimmed).
# When such clients hold the whole pool, a good client is still served
# within 5 s (the 30 s rate window shrinks to 1 s while the pool is short).
#
# usage: nbd_memory.sh RQNBD    Skips (77) without python3.
set -u
. "$(dirname "$0")/nbd_lib.sh"
need python3
nbd_init "$1"

# budget 64 MiB in all, 4 MiB a connection; 20 x 4 MiB would be 80 MiB
nbd_start --memory 128M --conn-buffer 4M --buffer-total 64M --stall-timeout 0
$abuse memory "$sock" "$nbd_pid" 20 64 $((1 << 20)) 100 24 || fail "1 MiB reads"
$abuse memory "$sock" "$nbd_pid" 20 8 $((4 << 20)) 100 24 || fail "4 MiB reads"
$abuse idle-after-reads "$sock" "$nbd_pid" 8 24 || fail "idle readers"
nbd_stop

# the pool runs short (8 clients want 32 MiB of a 16 MiB pool): those that
# hold buffers and read nothing are closed within a second, not after the
# 30 s window, and a good client gets its turn
nbd_start --memory 64M --conn-buffer 4M --buffer-total 16M
$abuse pressure "$sock" "$nbd_pid" 8 5 || fail "pool pressure"
nbd_stop

# the defaults: 8 MiB a connection, 256 MiB in all
nbd_start --memory 128M --stall-timeout 0
$abuse memory "$sock" "$nbd_pid" 20 64 $((1 << 20)) 200 24 || fail "defaults"
nbd_stop
echo "ok: memory bounded and returned"
