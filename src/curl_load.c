/* curl_load.c - opens libcurl at the first HTTP request (see curl_load.h for why not at link
 * time): dlopen, one dlsym per function host_http_client.c uses, then curl_global_init; the outcome of
 * the first attempt is kept, so a missing library gives the same message to every request.
 */
#define MB_CURL_LOAD_IMPL
#include "curl_load.h"

#include "log.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

mb_curl_api mb_curl;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_rc = -1;
static char load_err[MB_ERR_MAX];

static const struct {
	const char *name;
	size_t off;
} syms[] = {
#define S(field, name) {name, offsetof(mb_curl_api, field)}
	S(global_init, "curl_global_init"),
	S(easy_init, "curl_easy_init"),
	S(easy_setopt, "curl_easy_setopt"),
	S(easy_getinfo, "curl_easy_getinfo"),
	S(easy_cleanup, "curl_easy_cleanup"),
	S(easy_perform, "curl_easy_perform"),
	S(easy_strerror, "curl_easy_strerror"),
	S(multi_init, "curl_multi_init"),
	S(multi_setopt, "curl_multi_setopt"),
	S(multi_add_handle, "curl_multi_add_handle"),
	S(multi_remove_handle, "curl_multi_remove_handle"),
	S(multi_assign, "curl_multi_assign"),
	S(multi_socket_action, "curl_multi_socket_action"),
	S(multi_info_read, "curl_multi_info_read"),
	S(multi_cleanup, "curl_multi_cleanup"),
	S(multi_strerror, "curl_multi_strerror"),
	S(slist_append, "curl_slist_append"),
	S(slist_free_all, "curl_slist_free_all"),
	S(url, "curl_url"),
	S(url_set, "curl_url_set"),
	S(url_cleanup, "curl_url_cleanup"),
	S(url_strerror, "curl_url_strerror"),
#undef S
};

static void load(void)
{
	/* RTLD_LOCAL: libcurl's symbols (and OpenSSL's under it) stay out of the global namespace */
	void *h = dlopen(MB_CURL_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(load_err, sizeof load_err,
			 "cannot load " MB_CURL_SONAME " (HTTP upstream servers need Debian's libcurl4): %s",
			 e ? e : "unknown error");
		return;
	}
	mb_curl_api api;
	for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
		void *f = dlsym(h, syms[i].name);
		if (!f) {
			snprintf(load_err, sizeof load_err, MB_CURL_SONAME " has no %s (libcurl 7.62 or later is needed)",
				 syms[i].name);
			return; /* the handle stays open: nothing else is loaded twice */
		}
		memcpy((char *)&api + syms[i].off, &f, sizeof f);
	}
	CURLcode rc = api.global_init(CURL_GLOBAL_DEFAULT);
	if (rc != CURLE_OK) {
		snprintf(load_err, sizeof load_err, "curl_global_init failed: %s", api.easy_strerror(rc));
		return;
	}
	mb_curl = api;
	load_rc = 0;
}

int mb_curl_load(char *err, size_t errlen)
{
	pthread_once(&once, load);
	if (load_rc != 0 && errlen)
		snprintf(err, errlen, "%s", load_err);
	return load_rc;
}
