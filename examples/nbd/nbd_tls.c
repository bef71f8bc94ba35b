/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_tls: TLS sessions for rqnbd over GnuTLS.  See nbd_tls.h.
 *
 * The transport functions read and write the socket with MSG_DONTWAIT, so a
 * session never blocks, in the handshake (blocking socket, polled against
 * the handshake deadline by the caller) as in transmission (non-blocking
 * socket, the connection's event loop).  GnuTLS's errors become errno
 * values the callers already handle for plain sockets.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nbd_tls.h"

#ifdef RQNBD_HAVE_GNUTLS
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#define NBD_TLS_PSK_PRIORITY "NORMAL:+ECDHE-PSK:+DHE-PSK:+PSK"
#define NBD_TLS_DN_MAX 1024 /* a client certificate's name, at most */
#define NBD_TLS_MAX_ALERTS 16 /* warning alerts taken in one handshake step */

struct nbd_tls {
	gnutls_certificate_credentials_t x509; /* --tls-certificates */
	gnutls_psk_server_credentials_t psk;   /* --tls-psk */
	gnutls_priority_t prio;                /* PSK: the PSK key exchanges too */
	bool verify_peer;
};

struct nbd_tls_session {
	gnutls_session_t s;
	struct nbd_tls *t;
	int fd;
	bool done;                   /* handshake finished */
	char *identity;              /* PSK user or certificate DN, or NULL */
};

bool nbd_tls_available(void)
{
	return true;
}

static void why_set(char *why, size_t n, const char *what, const char *file, int gerr)
{
	snprintf(why, n, "%s %s: %s", what, file, gnutls_strerror(gerr));
}

/* Is @dir/@name there?  Fills @path. */
static bool tls_file(const char *dir, const char *name, char *path, size_t n)
{
	struct stat st;

	snprintf(path, n, "%s/%s", dir, name);
	return stat(path, &st) == 0;
}

/* The X.509 credentials from @dir (the nbdkit / qemu-nbd layout). */
static int tls_load_x509(struct nbd_tls *t, const char *dir, char *why, size_t n)
{
	char ca[4096], cert[4096], key[4096], crl[4096];
	int r;

	if (!tls_file(dir, "ca-cert.pem", ca, sizeof(ca)) ||
	    !tls_file(dir, "server-cert.pem", cert, sizeof(cert)) ||
	    !tls_file(dir, "server-key.pem", key, sizeof(key))) {
		snprintf(why, n, "%s: needs ca-cert.pem, server-cert.pem and server-key.pem",
			 dir);
		return -ENOENT;
	}
	if (gnutls_certificate_allocate_credentials(&t->x509))
		return -ENOMEM;
	r = gnutls_certificate_set_x509_trust_file(t->x509, ca, GNUTLS_X509_FMT_PEM);
	if (r < 0) {
		why_set(why, n, "CA certificate", ca, r);
		return -EINVAL;
	}
	r = gnutls_certificate_set_x509_key_file(t->x509, cert, key, GNUTLS_X509_FMT_PEM);
	if (r < 0) {
		why_set(why, n, "server certificate/key", cert, r);
		return -EINVAL;
	}
	if (tls_file(dir, "ca-crl.pem", crl, sizeof(crl))) {
		r = gnutls_certificate_set_x509_crl_file(t->x509, crl, GNUTLS_X509_FMT_PEM);
		if (r < 0) {
			why_set(why, n, "CRL", crl, r);
			return -EINVAL;
		}
	}
	return 0;
}

static int tls_load_psk(struct nbd_tls *t, const char *file, char *why, size_t n)
{
	struct stat st;
	int r;

	if (stat(file, &st) < 0) {
		snprintf(why, n, "PSK file %s: %s", file, strerror(errno));
		return -ENOENT;
	}
	if (gnutls_psk_allocate_server_credentials(&t->psk))
		return -ENOMEM;
	r = gnutls_psk_set_server_credentials_file(t->psk, file);
	if (r < 0) {
		why_set(why, n, "PSK file", file, r);
		return -EINVAL;
	}
	/* DHE-PSK wants group parameters: a known group, nothing generated */
	gnutls_psk_set_server_known_dh_params(t->psk, GNUTLS_SEC_PARAM_MEDIUM);
	r = gnutls_priority_init(&t->prio, NBD_TLS_PSK_PRIORITY, NULL);
	if (r < 0) {
		why_set(why, n, "priority", NBD_TLS_PSK_PRIORITY, r);
		return -EINVAL;
	}
	return 0;
}

int nbd_tls_create(const struct nbd_tls_config *cfg, struct nbd_tls **out, char *why,
		   size_t n)
{
	struct nbd_tls *t;
	int ret;

	snprintf(why, n, "bad TLS configuration");
	if (!cfg || !out || !cfg->certs_dir == !cfg->psk_file ||
	    (cfg->psk_file && cfg->verify_peer)) {
		snprintf(why, n, "give exactly one of --tls-certificates and --tls-psk "
			 "(--tls-verify-peer needs certificates)");
		return -EINVAL;
	}
	if (gnutls_check_version("3.4.6") == NULL) {
		snprintf(why, n, "GnuTLS 3.4.6 or later needed");
		return -EOPNOTSUPP;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->verify_peer = cfg->verify_peer;
	ret = cfg->certs_dir ? tls_load_x509(t, cfg->certs_dir, why, n)
			     : tls_load_psk(t, cfg->psk_file, why, n);
	if (ret) {
		nbd_tls_destroy(t);
		return ret;
	}
	*out = t;
	return 0;
}

void nbd_tls_destroy(struct nbd_tls *t)
{
	if (!t)
		return;
	if (t->x509)
		gnutls_certificate_free_credentials(t->x509);
	if (t->psk)
		gnutls_psk_free_server_credentials(t->psk);
	if (t->prio)
		gnutls_priority_deinit(t->prio);
	free(t);
}

/* ------------------------------------------------------------ transport */

static ssize_t tls_pull(gnutls_transport_ptr_t p, void *buf, size_t n)
{
	struct nbd_tls_session *ts = p;
	ssize_t r = recv(ts->fd, buf, n, MSG_DONTWAIT);

	if (r < 0)
		gnutls_transport_set_errno(ts->s, errno == EWOULDBLOCK ? EAGAIN : errno);
	return r;
}

static ssize_t tls_push(gnutls_transport_ptr_t p, const void *buf, size_t n)
{
	struct nbd_tls_session *ts = p;
	ssize_t r = send(ts->fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);

	if (r < 0)
		gnutls_transport_set_errno(ts->s, errno == EWOULDBLOCK ? EAGAIN : errno);
	return r;
}

static int tls_pull_timeout(gnutls_transport_ptr_t p, unsigned int ms)
{
	struct nbd_tls_session *ts = p;
	struct pollfd pfd = { ts->fd, POLLIN, 0 };

	(void)ms; /* never wait here: the caller polls against its deadline */
	return poll(&pfd, 1, 0);
}

int nbd_tls_session_new(struct nbd_tls *t, int fd, struct nbd_tls_session **out)
{
	struct nbd_tls_session *ts = calloc(1, sizeof(*ts));
	int r;

	if (!ts)
		return -ENOMEM;
	ts->t = t;
	ts->fd = fd;
	if (gnutls_init(&ts->s, GNUTLS_SERVER | GNUTLS_NONBLOCK)) {
		free(ts);
		return -ENOMEM;
	}
	if (t->psk) {
		r = gnutls_priority_set(ts->s, t->prio);
		if (!r)
			r = gnutls_credentials_set(ts->s, GNUTLS_CRD_PSK, t->psk);
	} else {
		r = gnutls_set_default_priority(ts->s);
		if (!r)
			r = gnutls_credentials_set(ts->s, GNUTLS_CRD_CERTIFICATE, t->x509);
		if (!r && t->verify_peer) {
			gnutls_certificate_server_set_request(ts->s, GNUTLS_CERT_REQUIRE);
			gnutls_session_set_verify_cert(ts->s, NULL, 0);
		}
	}
	if (r) {
		gnutls_deinit(ts->s);
		free(ts);
		return -ENOMEM;
	}
	gnutls_transport_set_ptr(ts->s, ts);
	gnutls_transport_set_pull_function(ts->s, tls_pull);
	gnutls_transport_set_push_function(ts->s, tls_push);
	gnutls_transport_set_pull_timeout_function(ts->s, tls_pull_timeout);
	*out = ts;
	return 0;
}

/* The verified client certificate's distinguished name. */
static char *tls_peer_dn(struct nbd_tls_session *ts)
{
	const gnutls_datum_t *certs;
	unsigned int ncerts = 0;
	gnutls_x509_crt_t crt;
	char dn[NBD_TLS_DN_MAX];
	size_t len = sizeof(dn);
	char *ret = NULL;

	certs = gnutls_certificate_get_peers(ts->s, &ncerts);
	if (!certs || !ncerts || gnutls_x509_crt_init(&crt))
		return NULL;
	if (!gnutls_x509_crt_import(crt, &certs[0], GNUTLS_X509_FMT_DER) &&
	    !gnutls_x509_crt_get_dn(crt, dn, &len))
		ret = strdup(dn);
	gnutls_x509_crt_deinit(crt);
	return ret;
}

int nbd_tls_handshake(struct nbd_tls_session *ts)
{
	int alerts = 0, r;

	if (ts->done)
		return 0;
	/* a warning alert is not an end: go on at once (a few of them) */
	do
		r = gnutls_handshake(ts->s);
	while (r < 0 && r != GNUTLS_E_AGAIN && r != GNUTLS_E_INTERRUPTED &&
	       !gnutls_error_is_fatal(r) && ++alerts < NBD_TLS_MAX_ALERTS);
	if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED)
		return -EAGAIN;
	if (r < 0)
		return -EPROTO;
	ts->done = true;
	if (ts->t->psk) {
		const char *u = gnutls_psk_server_get_username(ts->s);

		ts->identity = u ? strdup(u) : NULL;
	} else if (ts->t->verify_peer) {
		ts->identity = tls_peer_dn(ts);
	}
	return 0;
}

short nbd_tls_poll_events(struct nbd_tls_session *ts)
{
	return gnutls_record_get_direction(ts->s) ? POLLOUT : POLLIN;
}

/* A GnuTLS record error as errno; return -1. */
static ssize_t tls_err(ssize_t r)
{
	if (r == GNUTLS_E_AGAIN)
		errno = EAGAIN;
	else if (r == GNUTLS_E_INTERRUPTED)
		errno = EINTR;
	else if (r == GNUTLS_E_PUSH_ERROR || r == GNUTLS_E_PULL_ERROR)
		errno = ECONNRESET;
	else
		errno = EPROTO;
	return -1;
}

ssize_t nbd_tls_recv(struct nbd_tls_session *ts, void *buf, size_t n)
{
	ssize_t r = gnutls_record_recv(ts->s, buf, n);

	if (r >= 0)
		return r;
	if (r == GNUTLS_E_PREMATURE_TERMINATION)
		return 0; /* hung up without close_notify: an end all the same */
	return tls_err(r);
}

ssize_t nbd_tls_send(struct nbd_tls_session *ts, const void *buf, size_t n)
{
	ssize_t r = gnutls_record_send(ts->s, buf, n);

	return r >= 0 ? r : tls_err(r);
}

size_t nbd_tls_pending(struct nbd_tls_session *ts)
{
	return gnutls_record_check_pending(ts->s);
}

const char *nbd_tls_identity(struct nbd_tls_session *ts)
{
	return ts->identity;
}

void nbd_tls_session_free(struct nbd_tls_session *ts)
{
	if (!ts)
		return;
	if (ts->done)
		gnutls_bye(ts->s, GNUTLS_SHUT_WR); /* non-blocking: best effort */
	gnutls_deinit(ts->s);
	free(ts->identity);
	free(ts);
}

#else /* !RQNBD_HAVE_GNUTLS */

bool nbd_tls_available(void)
{
	return false;
}

int nbd_tls_create(const struct nbd_tls_config *cfg, struct nbd_tls **out, char *why,
		   size_t n)
{
	(void)cfg;
	(void)out;
	snprintf(why, n, "rqnbd was built without GnuTLS (libgnutls28-dev)");
	return -EOPNOTSUPP;
}

void nbd_tls_destroy(struct nbd_tls *t)
{
	(void)t;
}

int nbd_tls_session_new(struct nbd_tls *t, int fd, struct nbd_tls_session **out)
{
	(void)t;
	(void)fd;
	(void)out;
	return -EOPNOTSUPP;
}

int nbd_tls_handshake(struct nbd_tls_session *s)
{
	(void)s;
	return -EPROTO;
}

short nbd_tls_poll_events(struct nbd_tls_session *s)
{
	(void)s;
	return POLLIN;
}

ssize_t nbd_tls_recv(struct nbd_tls_session *s, void *buf, size_t n)
{
	(void)s;
	(void)buf;
	(void)n;
	errno = EPROTO;
	return -1;
}

ssize_t nbd_tls_send(struct nbd_tls_session *s, const void *buf, size_t n)
{
	return nbd_tls_recv(s, (void *)buf, n);
}

size_t nbd_tls_pending(struct nbd_tls_session *s)
{
	(void)s;
	return 0;
}

const char *nbd_tls_identity(struct nbd_tls_session *s)
{
	(void)s;
	return NULL;
}

void nbd_tls_session_free(struct nbd_tls_session *s)
{
	(void)s;
}

#endif /* RQNBD_HAVE_GNUTLS */
