/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_config: rqnbd's configuration file.  See nbd_config.h.
 *
 * Reading order: value parsers, the keys of each section (a table per
 * section), the line loop, then the checks across sections.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nbd_config.h"

#define CONF_MAX_FILE (1u << 20)       /* a config file is small */
#define CONF_MAX_LINE 4096
#define CONF_MAX_SIZE (16ull << 40)    /* memory and paced exports */
#define CONF_MAX_QUEUES 64
#define CONF_MAX_DEPTH 4096
#define CONF_MAX_CONNS 4096
#define CONF_MAX_IOPS 1000000

/* The parser's state: where it is, what section it fills. */
struct conf_parse {
	const char *file;
	unsigned line;
	char *err;
	struct nbd_config *cfg;
	enum { SEC_NONE, SEC_SERVER, SEC_EXPORT, SEC_GROUP, SEC_CLIENT } sec;
	void *cur;              /* the export, group or client being filled */
	unsigned seen;          /* bit per key of the section: given twice? */
};

static int __attribute__((format(printf, 2, 3)))
conf_error(struct conf_parse *p, const char *fmt, ...)
{
	va_list ap;
	int n;

	n = snprintf(p->err, NBD_CONF_ERR_MAX, "%s:%u: ", p->file, p->line);
	va_start(ap, fmt);
	vsnprintf(p->err + n, NBD_CONF_ERR_MAX - n, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* ---------------------------------------------------------------- values */

/* A decimal number in [lo, hi].  Return: 0 or -1. */
static int parse_uint(const char *v, unsigned long long lo, unsigned long long hi,
		      unsigned long long *out)
{
	char *end;
	unsigned long long n;

	if (!isdigit((unsigned char)*v))
		return -1;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno || *end || n < lo || n > hi)
		return -1;
	*out = n;
	return 0;
}

/* A size: a number with an optional K, M, G or T (powers of 1024). */
static int parse_size(const char *v, uint64_t *out)
{
	static const char units[] = "KMGT";
	char *end;
	unsigned long long n;
	const char *u;
	unsigned shift = 0;

	if (!isdigit((unsigned char)*v))
		return -1;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno)
		return -1;
	if (*end) {
		u = strchr(units, toupper((unsigned char)*end));
		if (!u || end[1])
			return -1;
		shift = 10 * (unsigned)(u - units + 1);
	}
	if (n > (CONF_MAX_SIZE >> shift))
		return -1;
	*out = n << shift;
	return 0;
}

/* yes/no, true/false, on/off, 1/0. */
static int parse_bool(const char *v, bool *out)
{
	static const char *const yes[] = { "yes", "true", "on", "1" };
	static const char *const no[] = { "no", "false", "off", "0" };
	unsigned i;

	for (i = 0; i < 4; i++) {
		if (!strcasecmp(v, yes[i]) || !strcasecmp(v, no[i])) {
			*out = !strcasecmp(v, yes[i]);
			return 0;
		}
	}
	return -1;
}

/* Copy @v into @dst of @n bytes.  Return: 0, or -1 when it does not fit. */
static int copy_str(char *dst, size_t n, const char *v)
{
	size_t l = strlen(v);

	if (l >= n)
		return -1;
	memcpy(dst, v, l + 1);
	return 0;
}

/* A name: printable, no spaces, no ']' (it ends a section header). */
static bool name_ok(const char *v)
{
	if (!*v || strlen(v) > NBD_CONF_NAME_MAX)
		return false;
	for (; *v; v++)
		if (!isgraph((unsigned char)*v) || *v == ']')
			return false;
	return true;
}

/* ------------------------------------------------------------ [server] */

static int key_uint(struct conf_parse *p, const char *k, const char *v, unsigned lo,
		    unsigned hi, unsigned *out)
{
	unsigned long long n;

	if (parse_uint(v, lo, hi, &n))
		return conf_error(p, "%s: '%s' is not a number from %u to %u", k, v, lo, hi);
	*out = (unsigned)n;
	return 0;
}

static int server_key(struct conf_parse *p, const char *k, const char *v)
{
	struct nbd_config *c = p->cfg;
	unsigned long long n;

	if ((!strcmp(k, "unix") && c->port[0]) || (!strcmp(k, "port") && c->unix_path[0]))
		return conf_error(p, "%s: [server] listens on unix or port, not both", k);
	if (!strcmp(k, "unix")) {
		if (*v != '/' || copy_str(c->unix_path, sizeof(c->unix_path), v))
			return conf_error(p, "unix: '%s' is not an absolute path under %zu bytes",
					  v, sizeof(c->unix_path));
	} else if (!strcmp(k, "port")) {
		if (parse_uint(v, 1, 65535, &n))
			return conf_error(p, "port: '%s' is not a port number (1 to 65535)", v);
		snprintf(c->port, sizeof(c->port), "%llu", n);
	} else if (!strcmp(k, "bind")) {
		if (copy_str(c->bind_addr, sizeof(c->bind_addr), v))
			return conf_error(p, "bind: address too long");
	} else if (!strcmp(k, "unnamed")) {
		c->unnamed_line = p->line;
		if (!strcmp(v, "own")) {
			c->unnamed = NBD_UNNAMED_OWN;
		} else if (!strcmp(v, "refuse")) {
			c->unnamed = NBD_UNNAMED_REFUSE;
		} else if (!strncmp(v, "group ", 6) && name_ok(v + 6 + strspn(v + 6, " \t"))) {
			c->unnamed = NBD_UNNAMED_GROUP;
			strcpy(c->unnamed_group_name, v + 6 + strspn(v + 6, " \t"));
		} else {
			return conf_error(p, "unnamed: '%s' is not own, refuse or group NAME", v);
		}
	} else if (!strcmp(k, "max-connections")) {
		return key_uint(p, k, v, 1, CONF_MAX_CONNS, &c->max_conns);
	} else if (!strcmp(k, "max-per-client")) {
		return key_uint(p, k, v, 1, CONF_MAX_CONNS, &c->max_per_client);
	} else if (!strcmp(k, "conn-requests")) {
		return key_uint(p, k, v, 1, 1024, &c->conn_requests);
	} else {
		return conf_error(p, "unknown key '%s' in [server]", k);
	}
	return 0;
}

/* ------------------------------------------------------------ [export] */

/* backend = memory SIZE | file PATH | paced IOPS SIZE */
static int export_backend(struct conf_parse *p, struct nbd_conf_export *e, const char *v)
{
	char kind[16], a[64], b[64];
	unsigned long long n;
	int k = sscanf(v, "%15s %63s %63s", kind, a, b);

	if (k >= 1 && !strcmp(kind, "file")) {
		const char *path = v + 4 + strspn(v + 4, " \t");

		if (!*path || copy_str(e->path, sizeof(e->path), path))
			return conf_error(p, "backend: file needs a PATH");
		e->backend = NBD_BACKEND_FILE;
		return 0;
	}
	if (k == 2 && !strcmp(kind, "memory")) {
		if (parse_size(a, &e->size) || !e->size || e->size % 512)
			return conf_error(p, "backend: memory size '%s' is not a multiple of "
					  "512 bytes up to 16T", a);
		e->backend = NBD_BACKEND_MEMORY;
		return 0;
	}
	if (k == 3 && !strcmp(kind, "paced")) {
		if (parse_uint(a, 1, CONF_MAX_IOPS, &n))
			return conf_error(p, "backend: paced IOPS '%s' is not 1 to %u", a,
					  CONF_MAX_IOPS);
		if (parse_size(b, &e->size) || !e->size || e->size % 512)
			return conf_error(p, "backend: paced size '%s' is not a multiple of "
					  "512 bytes up to 16T", b);
		e->iops = (unsigned)n;
		e->backend = NBD_BACKEND_PACED;
		return 0;
	}
	return conf_error(p, "backend: '%s' is not memory SIZE, file PATH or paced IOPS SIZE",
			  v);
}

/* attr.NAME = VALUE, iosched.NAME = VALUE (= attr.iosched/NAME) */
static int export_tunable(struct conf_parse *p, struct nbd_conf_export *e, const char *k,
			  const char *v)
{
	struct nbd_conf_tunable *t;
	bool io = !strncmp(k, "iosched.", 8);
	const char *name = k + (io ? 8 : 5);
	unsigned i;

	if (!*name)
		return conf_error(p, "%s: no attribute name", k);
	if (e->ntunables == NBD_CONF_MAX_TUNABLES)
		return conf_error(p, "more than %u tunables in one export",
				  NBD_CONF_MAX_TUNABLES);
	t = &e->tunables[e->ntunables];
	if (strlen(name) + (io ? 8 : 0) >= sizeof(t->name) ||
	    copy_str(t->value, sizeof(t->value), v))
		return conf_error(p, "%s: name or value too long", k);
	snprintf(t->name, sizeof(t->name), "%s%s", io ? "iosched/" : "", name);
	for (i = 0; i < e->ntunables; i++)
		if (!strcmp(e->tunables[i].name, t->name))
			return conf_error(p, "%s: given twice (line %u)", k,
					  e->tunables[i].line);
	t->line = p->line;
	e->ntunables++;
	return 0;
}

static int export_key(struct conf_parse *p, const char *k, const char *v)
{
	struct nbd_conf_export *e = p->cur;

	if (!strncmp(k, "attr.", 5) || !strncmp(k, "iosched.", 8))
		return export_tunable(p, e, k, v);
	if (!strcmp(k, "backend"))
		return export_backend(p, e, v);
	if (!strcmp(k, "description")) {
		if (copy_str(e->description, sizeof(e->description), v))
			return conf_error(p, "description: longer than %zu bytes",
					  sizeof(e->description) - 1);
	} else if (!strcmp(k, "read-only") || !strcmp(k, "default")) {
		if (parse_bool(v, k[0] == 'r' ? &e->read_only : &e->is_default))
			return conf_error(p, "%s: '%s' is not yes or no", k, v);
	} else if (!strcmp(k, "front")) {
		if (strcmp(v, "mq") && strcmp(v, "sq"))
			return conf_error(p, "front: '%s' is not mq or sq", v);
		e->sq = !strcmp(v, "sq");
	} else if (!strcmp(k, "sched") || !strcmp(k, "scheduler")) {
		if (!name_ok(v) || copy_str(e->sched, sizeof(e->sched), v))
			return conf_error(p, "%s: '%s' is not a scheduler name", k, v);
	} else if (!strcmp(k, "queues")) {
		return key_uint(p, k, v, 1, CONF_MAX_QUEUES, &e->queues);
	} else if (!strcmp(k, "depth")) {
		return key_uint(p, k, v, 1, CONF_MAX_DEPTH, &e->depth);
	} else if (!strcmp(k, "max-connections")) {
		return key_uint(p, k, v, 1, CONF_MAX_CONNS, &e->max_conns);
	} else {
		return conf_error(p, "unknown key '%s' in [export %s]", k, e->name);
	}
	return 0;
}

/* ------------------------------------------------------ [group], [client] */

static int group_key(struct conf_parse *p, const char *k, const char *v)
{
	struct nbd_conf_group *g = p->cur;

	if (strcmp(k, "weight"))
		return conf_error(p, "unknown key '%s' in [group %s]", k, g->name);
	return key_uint(p, k, v, 1, 1000, &g->weight);
}

static const char *const class_names[] = { "none", "rt", "be", "idle" };

const char *nbd_config_class_name(unsigned ioclass)
{
	return ioclass < 4 ? class_names[ioclass] : "?";
}

static int client_key(struct conf_parse *p, const char *k, const char *v)
{
	struct nbd_conf_client *cl = p->cur;
	unsigned i;

	if (!strcmp(k, "alias") || !strcmp(k, "export") || !strcmp(k, "group")) {
		char *dst = k[0] == 'a' ? cl->alias : k[0] == 'e' ? cl->export : cl->group_name;

		if (!name_ok(v))
			return conf_error(p, "%s: '%s' is not a name (1 to %u printable bytes, "
					  "no spaces)", k, v, NBD_CONF_NAME_MAX);
		strcpy(dst, v);
	} else if (!strcmp(k, "tls-identity")) {
		if (!*v || copy_str(cl->tls_identity, sizeof(cl->tls_identity), v))
			return conf_error(p, "tls-identity: empty or too long");
	} else if (!strcmp(k, "class")) {
		for (i = 1; i < 4; i++)
			if (!strcmp(v, class_names[i]))
				break;
		if (i == 4)
			return conf_error(p, "class: '%s' is not rt, be or idle", v);
		cl->ioclass = i;
	} else if (!strcmp(k, "level")) {
		return key_uint(p, k, v, 0, 7, &cl->level);
	} else if (!strcmp(k, "weight")) {
		return key_uint(p, k, v, 1, 1000, &cl->weight);
	} else {
		return conf_error(p, "unknown key '%s' in [client %s]", k, cl->name);
	}
	return 0;
}

/* -------------------------------------------------------------- sections */

/* "[server]", "[export NAME]", ... (the brackets already stripped: @s). */
static int section_start(struct conf_parse *p, char *s)
{
	struct nbd_config *c = p->cfg;
	char *name = s + strcspn(s, " \t");

	if (*name)
		*name++ = '\0';
	name += strspn(name, " \t");
	if (!strcmp(s, "server")) {
		if (*name)
			return conf_error(p, "[server] takes no name");
		p->sec = SEC_SERVER;
		return 0;
	}
	if (strcmp(s, "export") && strcmp(s, "group") && strcmp(s, "client"))
		return conf_error(p, "unknown section [%s] (server, export, group, client)", s);
	if (!name_ok(name))
		return conf_error(p, "[%s]: needs a NAME (1 to %u printable bytes, no spaces)",
				  s, NBD_CONF_NAME_MAX);
	if (s[0] == 'e') {
		struct nbd_conf_export *e = &c->exports[c->nexports];

		if (c->nexports == NBD_CONF_MAX_EXPORTS)
			return conf_error(p, "more than %u exports", NBD_CONF_MAX_EXPORTS);
		if (nbd_config_find_export(c, name) >= 0)
			return conf_error(p, "export '%s' defined twice", name);
		strcpy(e->name, name);
		e->line = p->line;
		c->nexports++;
		p->sec = SEC_EXPORT;
		p->cur = e;
	} else if (s[0] == 'g') {
		struct nbd_conf_group *g = &c->groups[c->ngroups];
		unsigned i;

		if (c->ngroups == NBD_CONF_MAX_GROUPS)
			return conf_error(p, "more than %u groups", NBD_CONF_MAX_GROUPS);
		for (i = 0; i < c->ngroups; i++)
			if (!strcmp(c->groups[i].name, name))
				return conf_error(p, "group '%s' defined twice", name);
		strcpy(g->name, name);
		g->weight = 100;
		g->line = p->line;
		c->ngroups++;
		p->sec = SEC_GROUP;
		p->cur = g;
	} else {
		struct nbd_conf_client *cl = &c->clients[c->nclients];
		unsigned i;

		if (c->nclients == NBD_CONF_MAX_CLIENTS)
			return conf_error(p, "more than %u clients", NBD_CONF_MAX_CLIENTS);
		for (i = 0; i < c->nclients; i++)
			if (!strcmp(c->clients[i].name, name))
				return conf_error(p, "client '%s' defined twice", name);
		strcpy(cl->name, name);
		cl->group = -1;
		cl->line = p->line;
		c->nclients++;
		p->sec = SEC_CLIENT;
		p->cur = cl;
	}
	return 0;
}

/* Trim blanks at both ends of @s, in place. */
static char *trim(char *s)
{
	char *e;

	s += strspn(s, " \t\r");
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
		*--e = '\0';
	return s;
}

/* One line (NUL-terminated, without its newline). */
static int conf_line(struct conf_parse *p, char *line)
{
	char *s = trim(line), *eq, *k, *v;
	size_t n;

	if (!*s || *s == '#' || *s == ';')
		return 0;
	if (*s == '[') {
		n = strlen(s);
		if (s[n - 1] != ']')
			return conf_error(p, "section header without ']'");
		s[n - 1] = '\0';
		return section_start(p, trim(s + 1));
	}
	eq = strchr(s, '=');
	if (!eq)
		return conf_error(p, "expected 'key = value' or '[section]'");
	*eq = '\0';
	k = trim(s);
	v = trim(eq + 1);
	n = strlen(v);
	if (n >= 2 && v[0] == '"' && v[n - 1] == '"') { /* "quoted value" */
		v[n - 1] = '\0';
		v++;
	}
	if (!*k)
		return conf_error(p, "a value without a key");
	switch (p->sec) {
	case SEC_SERVER:
		return server_key(p, k, v);
	case SEC_EXPORT:
		return export_key(p, k, v);
	case SEC_GROUP:
		return group_key(p, k, v);
	case SEC_CLIENT:
		return client_key(p, k, v);
	default:
		return conf_error(p, "'%s' before any [section]", k);
	}
}

/* --------------------------------------------------------------- checks */

static int find_group(const struct nbd_config *c, const char *name)
{
	unsigned i;

	for (i = 0; i < c->ngroups; i++)
		if (!strcmp(c->groups[i].name, name))
			return (int)i;
	return -1;
}

/* Exports: a backend each, at most one default. */
static int check_exports(struct conf_parse *p)
{
	struct nbd_config *c = p->cfg;
	int dflt = -1;
	unsigned i;

	if (!c->nexports)
		return conf_error(p, "no [export NAME] section");
	for (i = 0; i < c->nexports; i++) {
		struct nbd_conf_export *e = &c->exports[i];

		p->line = e->line;
		if (e->backend == NBD_BACKEND_NONE)
			return conf_error(p, "[export %s]: no backend", e->name);
		if (e->is_default && dflt >= 0)
			return conf_error(p, "[export %s]: a second default export (the first: "
					  "%s, line %u)", e->name, c->exports[dflt].name,
					  c->exports[dflt].line);
		if (e->is_default)
			dflt = (int)i;
	}
	return 0;
}

/* Clients: their export and group exist; aliases are unique and not
 * export names. */
static int check_clients(struct conf_parse *p)
{
	struct nbd_config *c = p->cfg;
	unsigned i, j;

	for (i = 0; i < c->nclients; i++) {
		struct nbd_conf_client *cl = &c->clients[i];

		p->line = cl->line;
		if (!cl->alias[0] && !cl->tls_identity[0])
			strcpy(cl->alias, cl->name);
		if (!cl->export[0])
			strcpy(cl->export, c->exports[nbd_config_default_export(c)].name);
		if (nbd_config_find_export(c, cl->export) < 0)
			return conf_error(p, "[client %s]: no export '%s'", cl->name, cl->export);
		if (cl->alias[0] && nbd_config_find_export(c, cl->alias) >= 0)
			return conf_error(p, "[client %s]: alias '%s' is an export's name",
					  cl->name, cl->alias);
		if (cl->group_name[0] && (cl->group = find_group(c, cl->group_name)) < 0)
			return conf_error(p, "[client %s]: no group '%s'", cl->name,
					  cl->group_name);
		for (j = 0; j < i; j++) {
			const struct nbd_conf_client *o = &c->clients[j];

			if (cl->alias[0] && !strcmp(o->alias, cl->alias))
				return conf_error(p, "[client %s]: alias '%s' taken by client %s "
						  "(line %u)", cl->name, cl->alias, o->name, o->line);
			if (cl->tls_identity[0] && !strcmp(o->tls_identity, cl->tls_identity))
				return conf_error(p, "[client %s]: tls-identity taken by client "
						  "%s (line %u)", cl->name, o->name, o->line);
		}
	}
	return 0;
}

static int check_all(struct conf_parse *p)
{
	struct nbd_config *c = p->cfg;
	int ret = check_exports(p);

	if (!ret)
		ret = check_clients(p);
	if (!ret && c->unnamed == NBD_UNNAMED_GROUP &&
	    (c->unnamed_group = find_group(c, c->unnamed_group_name)) < 0) {
		p->line = c->unnamed_line;
		ret = conf_error(p, "unnamed: no group '%s'", c->unnamed_group_name);
	}
	return ret;
}

/* -------------------------------------------------------------- entries */

int nbd_config_parse(const char *file, const char *text, size_t len, struct nbd_config *cfg,
		     char *err)
{
	struct conf_parse p = { .file = file, .err = err, .cfg = cfg };
	char line[CONF_MAX_LINE + 1];
	size_t pos = 0;
	int ret;

	memset(cfg, 0, sizeof(*cfg));
	cfg->size = sizeof(*cfg);
	cfg->unnamed_group = -1;
	err[0] = '\0';
	while (pos < len) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - text - pos) : len - pos;

		p.line++;
		if (n > CONF_MAX_LINE)
			return conf_error(&p, "line longer than %u bytes", CONF_MAX_LINE);
		if (memchr(text + pos, '\0', n))
			return conf_error(&p, "a NUL byte (not a text file?)");
		memcpy(line, text + pos, n);
		line[n] = '\0';
		pos += n + 1;
		ret = conf_line(&p, line);
		if (ret)
			return ret;
	}
	p.line = p.line ? p.line : 1;
	return check_all(&p);
}

int nbd_config_load(const char *path, struct nbd_config *cfg, char *err)
{
	struct stat st;
	char *text = NULL;
	ssize_t n = -1;
	int fd, ret = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0)
		ret = -errno;
	else if (!S_ISREG(st.st_mode) || st.st_size > CONF_MAX_FILE)
		ret = -EFBIG;
	else if (!(text = malloc((size_t)st.st_size + 1)))
		ret = -ENOMEM;
	else if ((n = read(fd, text, (size_t)st.st_size)) < 0)
		ret = -errno;
	if (fd >= 0)
		close(fd);
	if (ret) {
		snprintf(err, NBD_CONF_ERR_MAX, "%s: cannot read: %s", path, ret == -EFBIG ?
			 "not a regular file of at most 1 MiB" : strerror(-ret));
		free(text);
		return ret;
	}
	ret = nbd_config_parse(path, text, (size_t)n, cfg, err);
	free(text);
	return ret;
}

int nbd_config_find_export(const struct nbd_config *cfg, const char *name)
{
	unsigned i;

	for (i = 0; i < cfg->nexports; i++)
		if (!strcmp(cfg->exports[i].name, name))
			return (int)i;
	return -1;
}

int nbd_config_default_export(const struct nbd_config *cfg)
{
	unsigned i;

	for (i = 0; i < cfg->nexports; i++)
		if (cfg->exports[i].is_default)
			return (int)i;
	return 0;
}

int nbd_config_match_client(const struct nbd_config *cfg, const char *name,
			    const char *tls_identity)
{
	unsigned i;

	for (i = 0; i < cfg->nclients; i++) {
		const struct nbd_conf_client *cl = &cfg->clients[i];

		if (cl->tls_identity[0]) {
			if (tls_identity && !strcmp(cl->tls_identity, tls_identity))
				return (int)i;
		} else if (!strcmp(cl->alias, name)) {
			return (int)i;
		}
	}
	return -1;
}

int nbd_config_resolve_alias(const struct nbd_config *cfg, const char *name)
{
	unsigned i;

	for (i = 0; i < cfg->nclients; i++)
		if (!strcmp(cfg->clients[i].alias, name))
			return nbd_config_find_export(cfg, cfg->clients[i].export);
	return -1;
}

void nbd_config_default_first(struct nbd_config *cfg)
{
	int d = nbd_config_default_export(cfg);
	struct nbd_conf_export e;

	if (d <= 0)
		return;
	e = cfg->exports[d];
	memmove(&cfg->exports[1], &cfg->exports[0], (size_t)d * sizeof(e));
	cfg->exports[0] = e;
}
