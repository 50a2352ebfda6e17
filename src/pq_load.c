/* pq_load.c - opens libpq when the store is on PostgreSQL (see pq_load.h for why not at link
 * time): dlopen, one dlsym per function store_pg.c and history.c use; the outcome of the first
 * attempt is kept, so a missing library gives the same message to every caller.
 */
#define MB_PQ_LOAD_IMPL
#include "pq_load.h"

#include "log.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

mb_pq_api mb_pq;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_rc = -1;
static char load_err[MB_ERR_MAX];

static void load(void)
{
	/* RTLD_LOCAL: libpq's symbols (and OpenSSL's under it) stay out of the global namespace */
	void *h = dlopen(MB_PQ_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(load_err, sizeof load_err, "cannot load " MB_PQ_SONAME " (store_url on "
			 "PostgreSQL needs Debian's libpq5): %s", e ? e : "unknown error");
		return;
	}
	mb_pq_api api;
#define MB_PQ_RESOLVE(f)                                                                          \
	{                                                                                          \
		void *p = dlsym(h, #f);                                                            \
		if (!p) {                                                                          \
			snprintf(load_err, sizeof load_err, MB_PQ_SONAME " has no %s", #f);      \
			return; /* the handle stays open: nothing else is loaded twice */          \
		}                                                                                  \
		memcpy(&api.f, &p, sizeof p);                                                      \
	}
	MB_PQ_FUNCS(MB_PQ_RESOLVE)
#undef MB_PQ_RESOLVE
	mb_pq = api;
	load_rc = 0;
}

int mb_pq_load(char *err, size_t errlen)
{
	pthread_once(&once, load);
	if (load_rc != 0 && errlen)
		snprintf(err, errlen, "%s", load_err);
	return load_rc;
}
