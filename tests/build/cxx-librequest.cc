/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Build check: the umbrella header compiles as C++11 (-Wall -Wextra -Werror),
 * its functions have C linkage (this links against librequest), and a few
 * inline helpers behave from C++.  Exits 0 when all holds.
 */
#include <librequest/librequest.h>

#include <cstdio>
#include <cstring>

namespace {

struct driver_cmd {
	int opcode;
	unsigned long cookie;
};

int failures;

void check(bool ok, const char *what)
{
	if (!ok) {
		std::fprintf(stderr, "FAIL: %s\n", what);
		failures++;
	}
}

} // namespace

int main()
{
	// A request, a word naming it, then its driver payload: the layout
	// rq_request_pdu() / rq_request_from_pdu() rely on (the library keeps
	// its own fields between the request and that word).
	struct fake {
		rq_request rq;
		unsigned char library[32];
		rq_request *owner;
		driver_cmd cmd;
	} mem;
	std::memset(&mem, 0, sizeof(mem));
	rq_request *rq = &mem.rq;
	mem.owner = rq;
	rq->pdu = &mem.cmd;
	driver_cmd *cmd = static_cast<driver_cmd *>(rq_request_pdu(rq));

	check(cmd == &mem.cmd, "rq_request_pdu() gives the payload");
	check(rq_request_from_pdu(cmd) == rq, "rq_request_from_pdu() inverts rq_request_pdu()");

	rq->sector = 8;
	rq->bytes = 4096;
	check(rq_request_sectors(rq) == 8, "rq_request_sectors()");
	check(rq_request_end_sector(rq) == 16, "rq_request_end_sector()");

	rq_list_node head;
	rq_list_init(&head);
	check(rq_list_empty(&head), "rq_list_init() makes an empty list");
	rq_list_add_tail(&rq->queuelist, &head);
	check(!rq_list_empty(&head), "rq_list_add_tail() adds");
	check(rq_list_first_rq(&head) == rq, "rq_list_first_rq() finds the request");
	rq_list_del_init(&rq->queuelist);
	check(rq_list_empty(&head), "rq_list_del_init() removes");

	check(rq_op_is_write(RQ_OP_WRITE) && !rq_op_is_write(RQ_OP_READ), "rq_op_is_write()");
	check(RQ_VERSION_CHECK(0, 0), "RQ_VERSION_CHECK()");

	// Library functions: these resolve at link time only with C linkage.
	const char *name = rq_status_name(RQ_STS_OK);
	check(name != nullptr && std::strcmp(name, "OK") == 0, "rq_status_name(RQ_STS_OK) is \"OK\"");
	uint64_t t0 = rq_clock_ns();
	check(rq_clock_ns() >= t0, "rq_clock_ns() does not go backwards");

	if (failures)
		return 1;
	std::printf("ok: librequest %s from C++\n", RQ_VERSION_STRING);
	return 0;
}
