/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * progopt: the command-line conventions of the librequest programs (see
 * progopt.h).  Every error here is the user's: one line, exit 2.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <librequest/version.h>

#include "progopt.h"

static const char *prog_name = "program";
static void (*prog_usage)(FILE *f);

void prog_init(const char *name, void (*usage)(FILE *f))
{
	prog_name = name;
	prog_usage = usage;
}

void prog_usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see %s --help)\n", prog_name);
	exit(PROG_EXIT_USAGE);
}

/* The option as the user wrote it, without "=VALUE". */
static const char *typed_option(char **argv, char *buf, size_t len)
{
	const char *arg = optind > 0 ? argv[optind - 1] : "";
	size_t n = strcspn(arg, "=");

	snprintf(buf, len, "%.*s", (int)(n < len ? n : len - 1), arg);
	return buf;
}

int prog_getopt(int argc, char **argv, const struct option *longopts)
{
	char typed[64];
	int c;

	opterr = 0;
	c = getopt_long(argc, argv, ":h", longopts, NULL);
	switch (c) {
	case 'h':
	case PROG_OPT_HELP:
		if (prog_usage)
			prog_usage(stdout);
		exit(0);
	case PROG_OPT_VERSION:
		printf("%s (librequest) %s\n", prog_name, RQ_VERSION_STRING);
		exit(0);
	case ':':
		if (optopt > 0 && optopt < 256)
			prog_usage_error("-%c: needs a value", optopt);
		prog_usage_error("%s: needs a value", typed_option(argv, typed, sizeof(typed)));
	case '?':
		if (optopt > 0 && optopt < 256)
			prog_usage_error("-%c: unknown option", optopt);
		if (optopt)
			prog_usage_error("%s: takes no value",
					 typed_option(argv, typed, sizeof(typed)));
		prog_usage_error("%s: unknown or ambiguous option",
				 typed_option(argv, typed, sizeof(typed)));
	default:
		return c;
	}
}

void prog_no_operands(int argc, char **argv)
{
	if (optind < argc)
		prog_usage_error("%s: unexpected argument", argv[optind]);
}

/*
 * Parse the digits at the start of @arg (decimal, or hex after 0x) into
 * @v; *@end points after them.  Return: 0, or -EINVAL (no digits, a sign,
 * blanks) or -ERANGE.
 */
static int parse_digits(const char *arg, uint64_t *v, char **end)
{
	int base = 10;

	if (!isdigit((unsigned char)arg[0]))
		return -EINVAL;
	if (arg[0] == '0' && (arg[1] == 'x' || arg[1] == 'X'))
		base = 16;
	errno = 0;
	*v = strtoull(arg, end, base);
	if (errno == ERANGE)
		return -ERANGE;
	if (*end == arg + (base == 16 ? 2 : 0))
		return -EINVAL;
	return 0;
}

uint64_t opt_uint(const char *flag, const char *arg, uint64_t lo, uint64_t hi)
{
	uint64_t v;
	char *end;
	int ret = parse_digits(arg, &v, &end);

	if (!ret && *end)
		ret = -EINVAL;
	if (arg[0] == '-')
		prog_usage_error("%s: %s is negative (allowed: %llu to %llu)", flag, arg,
				 (unsigned long long)lo, (unsigned long long)hi);
	if (ret == -EINVAL)
		prog_usage_error("%s: '%s' is not a whole number (allowed: %llu to %llu)", flag,
				 arg, (unsigned long long)lo, (unsigned long long)hi);
	if (ret || v < lo || v > hi)
		prog_usage_error("%s: %s is out of range (allowed: %llu to %llu)", flag, arg,
				 (unsigned long long)lo, (unsigned long long)hi);
	return v;
}

uint64_t opt_size(const char *flag, const char *arg, uint64_t lo, uint64_t hi)
{
	static const char units[] = "KMGT";
	const char *u;
	unsigned shift = 0;
	uint64_t v;
	char *end;
	int ret = parse_digits(arg, &v, &end);

	if (!ret && *end) {
		u = strchr(units, toupper((unsigned char)*end));
		if (!u) {
			ret = -EINVAL;
		} else {
			shift = 10 * (unsigned)(u - units + 1);
			end++;
			if (*end == 'i')
				end++;
			if (*end == 'B' || *end == 'b')
				end++;
			if (*end)
				ret = -EINVAL;
			else if (v > (UINT64_MAX >> shift))
				ret = -ERANGE;
		}
	}
	if (ret == -EINVAL)
		prog_usage_error("%s: '%s' is not a size (a whole number, optional suffix "
				 "K, M, G or T; allowed: %llu to %llu bytes)", flag, arg,
				 (unsigned long long)lo, (unsigned long long)hi);
	v <<= shift;
	if (ret || v < lo || v > hi)
		prog_usage_error("%s: %s is out of range (allowed: %llu to %llu bytes)", flag,
				 arg, (unsigned long long)lo, (unsigned long long)hi);
	return v;
}

double opt_seconds(const char *flag, const char *arg, double hi)
{
	char *end;
	double v;

	errno = 0;
	v = isdigit((unsigned char)arg[0]) || arg[0] == '.' ? strtod(arg, &end) : -1;
	if (v < 0 || errno || *end)
		prog_usage_error("%s: '%s' is not a number of seconds (allowed: above 0, "
				 "at most %g)", flag, arg, hi);
	if (!(v > 0) || v > hi)
		prog_usage_error("%s: %s is out of range (allowed: above 0, at most %g)", flag,
				 arg, hi);
	return v;
}

unsigned opt_choice(const char *flag, const char *arg, const char *const *names, unsigned n)
{
	char list[256] = "";
	size_t len = 0;
	unsigned i;

	for (i = 0; i < n; i++)
		if (!strcmp(arg, names[i]))
			return i;
	for (i = 0; i < n && len < sizeof(list); i++)
		len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s",
					i ? (i + 1 == n ? " or " : ", ") : "", names[i]);
	prog_usage_error("%s: unknown value '%s' (allowed: %s)", flag, arg, list);
}
