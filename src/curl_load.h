/* curl_load.h - libcurl, loaded when the first HTTP request needs it (dlopen), not at start.
 *
 * Linking libcurl (Debian's libcurl4, built with OpenSSL) made every start load some 30 more
 * shared libraries - OpenSSL, GnuTLS (through libldap and librtmp), Kerberos, nghttp2, ssh2 -
 * whose constructors ran before main: start-up took several times as long and the idle server
 * about twice the memory (docs/benchmarks.md, "Re-run in session 4", has the figures), for a
 * library only HTTP upstream servers use. So the binary links none of it: mb_curl_load opens
 * libcurl.so.4 with dlopen, resolves the functions host_http_client.c calls into mb_curl, and
 * runs curl_global_init, once per process. Including this header instead of <curl/curl.h> turns
 * those calls (curl_easy_init(...), ...) into calls through the table; they may be made only
 * after mb_curl_load returned 0.
 *
 * Thread rules: mb_curl_load may be called from any thread (pthread_once inside); the table is
 * written only inside it.
 */
#ifndef MB_CURL_LOAD_H
#define MB_CURL_LOAD_H

#define CURL_DISABLE_TYPECHECK /* the type-checking macros would hide the table's calls */
#include <curl/curl.h>
#include <stddef.h>

/* The library's file name for dlopen (the soname of Debian's libcurl4). */
#define MB_CURL_SONAME "libcurl.so.4"

typedef struct mb_curl_api {
	CURLcode (*global_init)(long flags);
	CURL *(*easy_init)(void);
	CURLcode (*easy_setopt)(CURL *curl, CURLoption option, ...);
	CURLcode (*easy_getinfo)(CURL *curl, CURLINFO info, ...);
	void (*easy_cleanup)(CURL *curl);
	CURLcode (*easy_perform)(CURL *curl);
	const char *(*easy_strerror)(CURLcode code);
	CURLM *(*multi_init)(void);
	CURLMcode (*multi_setopt)(CURLM *multi, CURLMoption option, ...);
	CURLMcode (*multi_add_handle)(CURLM *multi, CURL *curl);
	CURLMcode (*multi_remove_handle)(CURLM *multi, CURL *curl);
	CURLMcode (*multi_assign)(CURLM *multi, curl_socket_t s, void *p);
	CURLMcode (*multi_socket_action)(CURLM *multi, curl_socket_t s, int ev, int *running);
	CURLMsg *(*multi_info_read)(CURLM *multi, int *queued);
	CURLMcode (*multi_cleanup)(CURLM *multi);
	const char *(*multi_strerror)(CURLMcode code);
	struct curl_slist *(*slist_append)(struct curl_slist *list, const char *s);
	void (*slist_free_all)(struct curl_slist *list);
	CURLU *(*url)(void);
	CURLUcode (*url_set)(CURLU *u, CURLUPart part, const char *content, unsigned int flags);
	void (*url_cleanup)(CURLU *u);
	const char *(*url_strerror)(CURLUcode code);
} mb_curl_api;

extern mb_curl_api mb_curl;

/// Loads libcurl and runs curl_global_init, the first time; later calls return the first
/// outcome.
/// @param err    receives e.g. "cannot load libcurl.so.4 (HTTP upstream servers need Debian's
///               libcurl4): <dlerror>" or "curl_global_init failed: <reason>"
/// @param errlen size of err
/// @returns 0, or -1 with err set
int mb_curl_load(char *err, size_t errlen);

#ifndef MB_CURL_LOAD_IMPL
#undef curl_easy_setopt /* curl.h makes these three pass-through macros */
#undef curl_easy_getinfo
#undef curl_multi_setopt
#define curl_easy_init mb_curl.easy_init
#define curl_easy_setopt mb_curl.easy_setopt
#define curl_easy_getinfo mb_curl.easy_getinfo
#define curl_easy_cleanup mb_curl.easy_cleanup
#define curl_easy_perform mb_curl.easy_perform
#define curl_easy_strerror mb_curl.easy_strerror
#define curl_multi_init mb_curl.multi_init
#define curl_multi_setopt mb_curl.multi_setopt
#define curl_multi_add_handle mb_curl.multi_add_handle
#define curl_multi_remove_handle mb_curl.multi_remove_handle
#define curl_multi_assign mb_curl.multi_assign
#define curl_multi_socket_action mb_curl.multi_socket_action
#define curl_multi_info_read mb_curl.multi_info_read
#define curl_multi_cleanup mb_curl.multi_cleanup
#define curl_multi_strerror mb_curl.multi_strerror
#define curl_slist_append mb_curl.slist_append
#define curl_slist_free_all mb_curl.slist_free_all
#define curl_url mb_curl.url
#define curl_url_set mb_curl.url_set
#define curl_url_cleanup mb_curl.url_cleanup
#define curl_url_strerror mb_curl.url_strerror
#endif

#endif
