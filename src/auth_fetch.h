/* auth_fetch.h - one bounded HTTP GET (or form POST) that does not block the loop: the
 * authorization server's discovery document, its JWKS and, later, introspection.
 *
 * The transfer is a libcurl easy transfer (curl_load.h: libcurl is opened at the first one)
 * run on libuv's thread pool (uv_queue_work); the callback runs on the loop thread. Bounded:
 * a total timeout, a response size cap (a larger body is an error, not a truncation), http and
 * https only, no redirects, TLS peers verified with the system CA store. mb_auth_fetch_abort
 * makes a running transfer stop at libcurl's next progress check (within about a second) and
 * the callback still runs once, with aborted set.
 *
 * Threads: start and abort on the loop thread; the callback on the loop thread.
 */
#ifndef MB_AUTH_FETCH_H
#define MB_AUTH_FETCH_H

#include <stddef.h>
#include <uv.h>

typedef struct mb_auth_fetch mb_auth_fetch;

/* Called once per fetch, on the loop thread. body (NUL-terminated, len bytes) and status are
 * valid when err is NULL; err names the URL (without its query) and the reason otherwise. The
 * fetch is freed after the callback returns. */
typedef void (*mb_auth_fetch_cb)(void *ud, int status, const char *body, size_t len, const char *err,
				 int aborted);

typedef struct mb_auth_fetch_req {
	const char *url;
	const char *post;          /* application/x-www-form-urlencoded body, or NULL for GET */
	const char *user, *secret; /* HTTP Basic credentials for the POST, or NULL */
	size_t max_bytes;
	long timeout_ms;
} mb_auth_fetch_req;

/// Starts a fetch. The request's strings are copied.
/// @returns the fetch (a handle for mb_auth_fetch_abort, valid until its callback returns), or
///          NULL with err set (libcurl cannot be loaded, out of memory)
mb_auth_fetch *mb_auth_fetch_start(uv_loop_t *loop, const mb_auth_fetch_req *r, mb_auth_fetch_cb cb,
				   void *ud, char *err, size_t errlen);

/// Asks a running fetch to stop; its callback runs with aborted = 1.
void mb_auth_fetch_abort(mb_auth_fetch *f);

#endif
