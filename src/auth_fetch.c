/* auth_fetch.c - bounded HTTP requests for the OAuth resource server, off the loop thread
 * (auth_fetch.h).
 *
 * A fetch owns a copy of its request, the response buffer and a uv_work_t. The work function
 * (a pool thread) runs curl_easy_perform; the after-work function (the loop thread) calls the
 * callback and frees everything. The abort flag is an atomic the progress callback reads, so
 * shutting down never waits for a slow authorization server longer than libcurl's progress
 * interval. Secrets (the client secret) are wiped before the memory is freed.
 */
#include "auth_fetch.h"

#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "curl_load.h"
#include "log.h"

struct mb_auth_fetch {
	uv_work_t work;
	mb_auth_fetch_cb cb;
	void *ud;
	char *url, *post, *user, *secret;
	size_t max_bytes;
	long timeout_ms;
	char *buf;
	size_t len, cap;
	int over;
	long status;
	char err[512];
	atomic_int abort;
};

static size_t on_write(char *p, size_t sz, size_t nm, void *ud)
{
	mb_auth_fetch *f = ud;
	size_t n = sz * nm;
	if (f->len + n > f->max_bytes) {
		f->over = 1;
		return 0; /* libcurl ends the transfer with CURLE_WRITE_ERROR */
	}
	if (f->len + n + 1 > f->cap) {
		size_t nc = f->cap ? f->cap : 4096;
		while (nc < f->len + n + 1)
			nc *= 2;
		char *nb = realloc(f->buf, nc);
		if (!nb)
			return 0;
		f->buf = nb;
		f->cap = nc;
	}
	memcpy(f->buf + f->len, p, n);
	f->len += n;
	f->buf[f->len] = 0;
	return n;
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
	(void)a, (void)b, (void)c, (void)d;
	return atomic_load(&((mb_auth_fetch *)ud)->abort) ? 1 : 0;
}

/* The URL without its query or fragment, for messages. */
static void shown_url(const char *url, char *out, size_t cap)
{
	snprintf(out, cap, "%.*s", (int)strcspn(url, "?#"), url);
}

static void run(uv_work_t *w)
{
	mb_auth_fetch *f = w->data;
	char shown[300];
	shown_url(f->url, shown, sizeof shown);
	CURL *c = curl_easy_init();
	if (!c) {
		snprintf(f->err, sizeof f->err, "GET %s: libcurl cannot start a transfer", shown);
		return;
	}
	struct curl_slist *hdrs = curl_slist_append(NULL, "Accept: application/json");
	curl_easy_setopt(c, CURLOPT_URL, f->url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, f->timeout_ms);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, f->timeout_ms);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, f);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	if (f->post) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, f->post);
		if (f->user) {
			curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
			curl_easy_setopt(c, CURLOPT_USERNAME, f->user);
			curl_easy_setopt(c, CURLOPT_PASSWORD, f->secret ? f->secret : "");
		}
	}
	CURLcode rc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &f->status);
	if (rc != CURLE_OK) {
		if (f->over)
			snprintf(f->err, sizeof f->err, "%s %s: the response is above %zu bytes", f->post ? "POST" : "GET",
				 shown, f->max_bytes);
		else
			snprintf(f->err, sizeof f->err, "%s %s: %s", f->post ? "POST" : "GET", shown, curl_easy_strerror(rc));
	}
	curl_easy_cleanup(c);
	curl_slist_free_all(hdrs);
}

static void fetch_free(mb_auth_fetch *f)
{
	if (f->secret)
		sodium_memzero(f->secret, strlen(f->secret));
	if (f->post)
		sodium_memzero(f->post, strlen(f->post)); /* introspection bodies carry the token */
	free(f->url);
	free(f->post);
	free(f->user);
	free(f->secret);
	free(f->buf);
	free(f);
}

static void after(uv_work_t *w, int status)
{
	mb_auth_fetch *f = w->data;
	int aborted = status == UV_ECANCELED || atomic_load(&f->abort);
	const char *err = f->err[0] ? f->err : NULL;
	if (aborted && !err)
		err = "aborted";
	f->cb(f->ud, (int)f->status, f->buf ? f->buf : "", f->len, err, aborted);
	fetch_free(f);
}

static char *dup_or_null(const char *s, int *bad)
{
	if (!s)
		return NULL;
	char *d = strdup(s);
	if (!d)
		*bad = 1;
	return d;
}

mb_auth_fetch *mb_auth_fetch_start(uv_loop_t *loop, const mb_auth_fetch_req *r, mb_auth_fetch_cb cb,
				   void *ud, char *err, size_t errlen)
{
	if (mb_curl_load(err, errlen) != 0)
		return NULL;
	mb_auth_fetch *f = calloc(1, sizeof *f);
	if (!f) {
		mb_seterr(err, errlen, "out of memory");
		return NULL;
	}
	int bad = 0;
	f->url = dup_or_null(r->url, &bad);
	f->post = dup_or_null(r->post, &bad);
	f->user = dup_or_null(r->user, &bad);
	f->secret = dup_or_null(r->secret, &bad);
	f->cb = cb;
	f->ud = ud;
	f->max_bytes = r->max_bytes;
	f->timeout_ms = r->timeout_ms;
	atomic_init(&f->abort, 0);
	f->work.data = f;
	if (bad || !f->url || uv_queue_work(loop, &f->work, run, after) != 0) {
		mb_seterr(err, errlen, "cannot start a request to the authorization server");
		fetch_free(f);
		return NULL;
	}
	return f;
}

void mb_auth_fetch_abort(mb_auth_fetch *f)
{
	if (!f)
		return;
	atomic_store(&f->abort, 1);
	uv_cancel((uv_req_t *)&f->work); /* not started yet: after() runs with UV_ECANCELED */
}
