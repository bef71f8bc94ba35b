/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * progopt: the command-line conventions every librequest program shares.
 *
 *   -h, --help     usage to stdout, exit 0
 *   --version      "NAME (librequest) VERSION" to stdout, exit 0
 *   bad usage      one line "NAME: WHAT: WHY" to stderr, exit 2 (PROG_EXIT_USAGE)
 *
 * A program calls prog_init() with its name and usage printer, adds
 * PROG_STD_OPTIONS to its getopt_long() table, reads options with
 * prog_getopt() (which handles help, version and getopt's own errors), and
 * converts values with the strict parsers below: a number is digits only
 * (or 0x and hex digits), no sign, no trailing junk, within the range the
 * message names.  Not thread-safe: for main() before any thread starts.
 */
#ifndef PROGOPT_H
#define PROGOPT_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

#define PROG_EXIT_USAGE 2

/* getopt_long values of the standard options, above any char and program value. */
enum {
	PROG_OPT_HELP = 0x1000,
	PROG_OPT_VERSION,
};

#define PROG_STD_OPTIONS \
	{ "help", no_argument, NULL, PROG_OPT_HELP }, \
	{ "version", no_argument, NULL, PROG_OPT_VERSION }

/**
 * prog_init() - name the program and its usage text.
 * @name: the program's name, as messages and --version print it.
 * @usage: prints the full usage text to the stream it is given.
 */
void prog_init(const char *name, void (*usage)(FILE *f));

/**
 * prog_getopt() - getopt_long() with the family's conventions.
 * @argc, @argv: main()'s.
 * @longopts: the program's table, ending with PROG_STD_OPTIONS and a zero row.
 *
 * The short options are "h" only.  Handles -h/--help and --version (exits
 * 0), an unknown option, a missing value and a value given to a flag that
 * takes none (one line, exits 2).
 *
 * Return: the next option's value, or -1 at the end of the options.
 */
int prog_getopt(int argc, char **argv, const struct option *longopts);

/**
 * prog_usage_error() - one line "NAME: MESSAGE" to stderr, exit 2.
 * @fmt: printf format of the message: say which flag and why.
 */
void prog_usage_error(const char *fmt, ...)
	__attribute__((noreturn, format(printf, 1, 2)));

/**
 * prog_no_operands() - exit 2 naming the first operand, if there is one.
 * @argc, @argv: main()'s, after the options (optind is the first operand).
 */
void prog_no_operands(int argc, char **argv);

/**
 * opt_uint() - a whole number in [@lo, @hi], or exit 2.
 * @flag: the flag, for the message ("--depth").
 * @arg: its value.
 * @lo, @hi: the allowed range, inclusive.
 */
uint64_t opt_uint(const char *flag, const char *arg, uint64_t lo, uint64_t hi);

/**
 * opt_size() - a size in bytes with an optional binary suffix, or exit 2.
 * @flag, @arg: as opt_uint().
 * @lo, @hi: the allowed range in bytes, inclusive.
 *
 * Suffixes K, M, G, T (powers of 1024, either case), optionally followed by
 * "iB" or "B".
 */
uint64_t opt_size(const char *flag, const char *arg, uint64_t lo, uint64_t hi);

/**
 * opt_seconds() - a positive decimal number of seconds up to @hi, or exit 2.
 * @flag, @arg: as opt_uint().
 * @hi: the largest value allowed.
 */
double opt_seconds(const char *flag, const char *arg, double hi);

/**
 * opt_choice() - the index of @arg in @names, or exit 2 listing them.
 * @flag, @arg: as opt_uint().
 * @names: the allowed words.
 * @n: how many.
 */
unsigned opt_choice(const char *flag, const char *arg, const char *const *names, unsigned n);

#endif /* PROGOPT_H */
