/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nbd_tls: rqnbd's TLS (NBD_OPT_STARTTLS) over GnuTLS: the server's
 * credentials (X.509 certificates as nbdkit and qemu-nbd read them from a
 * directory, or a psktool key file) and one session per connection, driven
 * without blocking over a socket the caller polls.  Built where GnuTLS is
 * found (RQNBD_HAVE_GNUTLS); elsewhere nbd_tls_create() fails with
 * -EOPNOTSUPP.
 *
 * What may run at the same time:
 *
 *   operation              concurrent with
 *   nbd_tls_create         anything
 *   nbd_tls_session_*      anything, each session from one thread at a time
 *   nbd_tls_destroy        nothing: after every session is freed
 */
#ifndef NBD_TLS_H
#define NBD_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/**
 * struct nbd_tls_config - where the credentials are; exactly one of
 * @certs_dir and @psk_file.
 * @certs_dir: a directory with ca-cert.pem, server-cert.pem, server-key.pem
 *	and, optionally, ca-crl.pem (the layout of nbdkit and qemu-nbd).
 * @psk_file: a key file as psktool writes it: "username:hexkey" lines.
 * @verify_peer: X.509 only: the client must present a certificate signed
 *	by ca-cert.pem (and not revoked by ca-crl.pem); its distinguished name
 *	becomes the connection's identity.
 */
struct nbd_tls_config {
	const char *certs_dir;
	const char *psk_file;
	bool verify_peer;
};

struct nbd_tls;
struct nbd_tls_session;

/** nbd_tls_available() - was rqnbd built with GnuTLS? */
bool nbd_tls_available(void);

/**
 * nbd_tls_create() - load the credentials.
 * @cfg: where they are; copied.
 * @out: receives the credentials.
 * @why: receives a one-line reason on failure (file and GnuTLS's message).
 * @n: size of @why.
 * Return: 0, -EINVAL (bad configuration or files), -ENOENT (a file is
 * missing), -ENOMEM, -EOPNOTSUPP (built without GnuTLS).
 */
int nbd_tls_create(const struct nbd_tls_config *cfg, struct nbd_tls **out, char *why,
		   size_t n);

/** nbd_tls_destroy() - free the credentials (NULL is allowed). */
void nbd_tls_destroy(struct nbd_tls *t);

/**
 * nbd_tls_session_new() - a server session over socket @fd (not owned: the
 * caller closes it after nbd_tls_session_free()).  The session reads and
 * writes with MSG_DONTWAIT whatever the socket's mode.
 * Return: 0, -ENOMEM, -EOPNOTSUPP.
 */
int nbd_tls_session_new(struct nbd_tls *t, int fd, struct nbd_tls_session **out);

/**
 * nbd_tls_handshake() - go on with the TLS handshake.
 * Return: 0 when it is done, -EAGAIN when the socket must be polled for
 * nbd_tls_poll_events() first, -EPROTO when it failed (bad client, bad
 * certificate, unknown PSK user, garbage).
 */
int nbd_tls_handshake(struct nbd_tls_session *s);

/** nbd_tls_poll_events() - POLLIN or POLLOUT: what the last -EAGAIN waits for. */
short nbd_tls_poll_events(struct nbd_tls_session *s);

/**
 * nbd_tls_recv() - read up to @n bytes of plaintext.
 * Return: bytes (> 0), 0 at the client's end of stream, -1 with errno
 * EAGAIN (nothing yet), EINTR, or EPROTO/ECONNRESET (the session is dead).
 */
ssize_t nbd_tls_recv(struct nbd_tls_session *s, void *buf, size_t n);

/**
 * nbd_tls_send() - write up to @n bytes of plaintext (at most one record).
 * After EAGAIN, call again with the same @buf and @n (GnuTLS may hold part
 * of them already).  Return: bytes taken, or -1 with errno as nbd_tls_recv().
 */
ssize_t nbd_tls_send(struct nbd_tls_session *s, const void *buf, size_t n);

/** nbd_tls_pending() - decrypted bytes waiting to be read (no poll needed). */
size_t nbd_tls_pending(struct nbd_tls_session *s);

/**
 * nbd_tls_identity() - the client's identity once the handshake is done:
 * its PSK username, or its verified certificate's distinguished name, or
 * NULL.  Lives as long as the session.
 */
const char *nbd_tls_identity(struct nbd_tls_session *s);

/** nbd_tls_session_free() - send close_notify if it can go at once, free. */
void nbd_tls_session_free(struct nbd_tls_session *s);

#endif /* NBD_TLS_H */
