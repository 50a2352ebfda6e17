/* pq_load.h - libpq, loaded when the store is on PostgreSQL (dlopen), not at start.
 *
 * Debian's libpq5 brings OpenSSL, Kerberos (GSSAPI) and LDAP with it: linked, they would be
 * mapped by every start - a server on SQLite too, the common case - with their constructors run
 * before main, costing start-up time and memory for nothing (curl_load.h says the same of
 * libcurl, and tests/integration/gateway.test.mjs checks that no TLS or Kerberos library is
 * mapped when nothing needs one). So the binary links none of it: mb_pq_load opens libpq.so.5
 * with dlopen and resolves the functions store_pg.c and history.c call into mb_pq. Including this
 * header instead of <libpq-fe.h> turns those calls (PQexec(...), ...) into calls through the
 * table; they may be made only after mb_pq_load returned 0.
 *
 * Thread rules: mb_pq_load may be called from any thread (pthread_once inside); the table is
 * written only inside it.
 */
#ifndef MB_PQ_LOAD_H
#define MB_PQ_LOAD_H

#include <libpq-fe.h>
#include <stddef.h>

/* The library's file name for dlopen (the soname of Debian's libpq5). */
#define MB_PQ_SONAME "libpq.so.5"

/* Every libpq function moonbox calls. */
#define MB_PQ_FUNCS(X) \
	X(PQconnectdbParams) X(PQstatus) X(PQerrorMessage) X(PQfinish) X(PQsetNoticeProcessor) \
	X(PQexec) X(PQexecParams) X(PQresultStatus) X(PQclear) X(PQsetnonblocking) X(PQsocket) \
	X(PQconninfoParse) X(PQfreemem) X(PQconninfoFree) X(PQgetvalue) X(PQgetlength) X(PQftype) \
	X(PQunescapeBytea) X(PQnfields) X(PQgetisnull) X(PQfname) X(PQresultErrorField) \
	X(PQsendQuery) X(PQsendQueryParams) X(PQflush) X(PQcmdStatus) X(PQcmdTuples) X(PQntuples) \
	X(PQconsumeInput) X(PQisBusy) X(PQgetResult) X(PQnotifies) X(PQescapeIdentifier)

typedef struct mb_pq_api {
#define MB_PQ_MEMBER(f) __typeof__(f) *f;
	MB_PQ_FUNCS(MB_PQ_MEMBER)
#undef MB_PQ_MEMBER
} mb_pq_api;

extern mb_pq_api mb_pq;

/// Loads libpq, the first time; later calls return the first outcome.
/// @param err    receives e.g. "cannot load libpq.so.5 (store_url on PostgreSQL needs Debian's
///               libpq5): <dlerror>"
/// @param errlen size of err
/// @returns 0, or -1 with err set
int mb_pq_load(char *err, size_t errlen);

#ifndef MB_PQ_LOAD_IMPL
#define PQconnectdbParams mb_pq.PQconnectdbParams
#define PQstatus mb_pq.PQstatus
#define PQerrorMessage mb_pq.PQerrorMessage
#define PQfinish mb_pq.PQfinish
#define PQsetNoticeProcessor mb_pq.PQsetNoticeProcessor
#define PQexec mb_pq.PQexec
#define PQexecParams mb_pq.PQexecParams
#define PQresultStatus mb_pq.PQresultStatus
#define PQclear mb_pq.PQclear
#define PQsetnonblocking mb_pq.PQsetnonblocking
#define PQsocket mb_pq.PQsocket
#define PQconninfoParse mb_pq.PQconninfoParse
#define PQfreemem mb_pq.PQfreemem
#define PQconninfoFree mb_pq.PQconninfoFree
#define PQgetvalue mb_pq.PQgetvalue
#define PQgetlength mb_pq.PQgetlength
#define PQftype mb_pq.PQftype
#define PQunescapeBytea mb_pq.PQunescapeBytea
#define PQnfields mb_pq.PQnfields
#define PQgetisnull mb_pq.PQgetisnull
#define PQfname mb_pq.PQfname
#define PQresultErrorField mb_pq.PQresultErrorField
#define PQsendQuery mb_pq.PQsendQuery
#define PQsendQueryParams mb_pq.PQsendQueryParams
#define PQflush mb_pq.PQflush
#define PQcmdStatus mb_pq.PQcmdStatus
#define PQcmdTuples mb_pq.PQcmdTuples
#define PQntuples mb_pq.PQntuples
#define PQconsumeInput mb_pq.PQconsumeInput
#define PQisBusy mb_pq.PQisBusy
#define PQgetResult mb_pq.PQgetResult
#define PQnotifies mb_pq.PQnotifies
#define PQescapeIdentifier mb_pq.PQescapeIdentifier
#endif

#endif
