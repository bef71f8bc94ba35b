/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * librequest: the Linux block layer's request layer as a userspace library.
 * Umbrella header: include this one.
 */
#ifndef LIBREQUEST_H
#define LIBREQUEST_H

#include <librequest/version.h>
#include <librequest/bio.h>
#include <librequest/request.h>
#include <librequest/limits.h>
#include <librequest/plug.h>
#include <librequest/iocontext.h>
#include <librequest/attr.h>
#include <librequest/stats.h>
#include <librequest/trace.h>
#include <librequest/service.h>
#include <librequest/queue.h>
#include <librequest/mq.h>
#include <librequest/elevator.h>
#include <librequest/sq.h>

#endif /* LIBREQUEST_H */
