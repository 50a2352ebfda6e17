/* audit.c - the audit trail's hash chain: the keyed hash of a record, and `moonbox --verify-audit`.
 *
 * lua/mcp/audit.lua writes the records (table `audit`, ordered by id) in batches, each record's
 * `prev` the hash of the one before it and its `hash` mb_audit_hash over prev and its fields,
 * keyed with a key derived from the PII token key. The verifier reads the same server options,
 * opens the store read-only (SQLite, or PostgreSQL through the dlopen'd libpq of pq_load.h),
 * and walks the records in id order: a record whose hash does not match its fields was edited;
 * one whose prev is not the hash of the record before it comes after a deleted (or reordered)
 * record. The oldest record kept may follow records dropped by retention (audit_max_age_s): its
 * prev is not checked, and the report says where the chain starts. What a hash chain cannot show
 * by itself, a cut of the newest records, is what docs/audit.md says to keep the report's last
 * hash for.
 */
#include "audit.h"

#include "config.h"
#include "pii.h"
#include "pq_load.h"

#include <sodium.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char KEY_CONTEXT[] = "moonbox audit chain v1";

void mb_audit_key(const unsigned char pii_key[32], unsigned char key[MB_AUDIT_KEY_BYTES])
{
	crypto_generichash(key, MB_AUDIT_KEY_BYTES, (const unsigned char *)KEY_CONTEXT,
			   sizeof KEY_CONTEXT - 1, pii_key, 32);
}

static void part(crypto_generichash_state *st, const char *s, size_t n)
{
	unsigned char len[8];
	uint64_t v = s ? (uint64_t)n : UINT64_MAX; /* NULL is not "" */
	for (int i = 0; i < 8; i++)
		len[i] = (unsigned char)(v >> (8 * i));
	crypto_generichash_update(st, len, sizeof len);
	if (s && n)
		crypto_generichash_update(st, (const unsigned char *)s, n);
}

void mb_audit_hash(const unsigned char key[MB_AUDIT_KEY_BYTES], const char *prev, size_t prev_len,
		   const char *const fields[MB_AUDIT_NFIELDS], const size_t lens[MB_AUDIT_NFIELDS],
		   char hex[MB_AUDIT_HEX])
{
	crypto_generichash_state st;
	unsigned char out[32];
	crypto_generichash_init(&st, key, MB_AUDIT_KEY_BYTES, sizeof out);
	part(&st, prev, prev_len);
	for (int i = 0; i < MB_AUDIT_NFIELDS; i++)
		part(&st, fields[i], lens[i]);
	crypto_generichash_final(&st, out, sizeof out);
	sodium_bin2hex(hex, MB_AUDIT_HEX, out, sizeof out);
}

/* ---- the verifier ------------------------------------------------------------------------ */

/* One record as read from the store: id, prev, hash, then the MB_AUDIT_NFIELDS fields. */
enum { C_ID, C_PREV, C_HASH, C_FIELDS };
#define NCOLS (C_FIELDS + MB_AUDIT_NFIELDS)
static const char SELECT[] = "SELECT id, prev, hash, CAST(at AS TEXT), tenant, principal, client, kind,"
			     " subject, detail FROM audit ORDER BY id";

typedef struct {
	unsigned char key[MB_AUDIT_KEY_BYTES];
	long long n, first, last;
	char last_hash[MB_AUDIT_HEX];
	int broken;
} walk;

/* Checks one record; returns 0, or 1 (reported) when it breaks the chain. */
static int check(walk *w, const char *const col[NCOLS], const size_t len[NCOLS])
{
	long long id = strtoll(col[C_ID], NULL, 10);
	char hex[MB_AUDIT_HEX];
	mb_audit_hash(w->key, col[C_PREV], len[C_PREV], col + C_FIELDS, len + C_FIELDS, hex);
	if (!col[C_HASH] || len[C_HASH] != 64 || memcmp(hex, col[C_HASH], 64) != 0) {
		fprintf(stderr, "moonbox: audit record %lld (kind %.*s, tenant %.*s) does not match its hash: it "
			"was edited, or written without this server's key\n", id, (int)len[C_FIELDS + 4],
			col[C_FIELDS + 4] ? col[C_FIELDS + 4] : "", (int)len[C_FIELDS + 1],
			col[C_FIELDS + 1] ? col[C_FIELDS + 1] : "");
		return 1;
	}
	if (w->n > 0 && (!col[C_PREV] || len[C_PREV] != 64 || memcmp(col[C_PREV], w->last_hash, 64) != 0)) {
		fprintf(stderr, "moonbox: audit record %lld does not follow record %lld: a record between them "
			"was deleted, or the records were reordered\n", id, w->last);
		return 1;
	}
	if (w->n == 0)
		w->first = id;
	w->n++;
	w->last = id;
	memcpy(w->last_hash, hex, sizeof hex);
	return 0;
}

static int walk_sqlite(walk *w, const char *path)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, SELECT, -1, &st, NULL) != SQLITE_OK) {
		fprintf(stderr, "moonbox: --verify-audit: %s: %s\n", path, db ? sqlite3_errmsg(db) : "out of memory");
		sqlite3_close(db);
		return 2;
	}
	int rc = 0, s;
	while (rc == 0 && (s = sqlite3_step(st)) == SQLITE_ROW) {
		const char *col[NCOLS];
		size_t len[NCOLS];
		for (int i = 0; i < NCOLS; i++) {
			col[i] = (const char *)sqlite3_column_text(st, i);
			len[i] = (size_t)sqlite3_column_bytes(st, i);
		}
		rc = check(w, col, len);
	}
	if (rc == 0 && s != SQLITE_DONE) {
		fprintf(stderr, "moonbox: --verify-audit: %s: %s\n", path, sqlite3_errmsg(db));
		rc = 2;
	}
	sqlite3_finalize(st);
	sqlite3_close(db);
	return rc;
}

static int walk_pg(walk *w, const char *conninfo)
{
	char err[256];
	if (mb_pq_load(err, sizeof err) != 0) {
		fprintf(stderr, "moonbox: --verify-audit: %s\n", err);
		return 2;
	}
	const char *keys[] = { "dbname", NULL }, *vals[] = { conninfo, NULL };
	PGconn *c = PQconnectdbParams(keys, vals, 1);
	if (!c || PQstatus(c) != CONNECTION_OK) {
		fprintf(stderr, "moonbox: --verify-audit: PostgreSQL: %s", c ? PQerrorMessage(c) : "out of memory\n");
		PQfinish(c);
		return 2;
	}
	/* one read-only snapshot; a cursor keeps the memory flat however long the trail is */
	PGresult *r = PQexec(c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
	int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
	PQclear(r);
	char decl[sizeof SELECT + 64];
	snprintf(decl, sizeof decl, "DECLARE mb_audit NO SCROLL CURSOR FOR %s", SELECT);
	if (ok) {
		r = PQexec(c, decl);
		ok = PQresultStatus(r) == PGRES_COMMAND_OK;
		PQclear(r);
	}
	int rc = ok ? 0 : 2;
	while (rc == 0) {
		r = PQexec(c, "FETCH 1000 FROM mb_audit");
		if (PQresultStatus(r) != PGRES_TUPLES_OK) {
			rc = 2;
			PQclear(r);
			break;
		}
		int n = PQntuples(r);
		for (int i = 0; i < n && rc == 0; i++) {
			const char *col[NCOLS];
			size_t len[NCOLS];
			for (int j = 0; j < NCOLS; j++) {
				col[j] = PQgetisnull(r, i, j) ? NULL : PQgetvalue(r, i, j);
				len[j] = (size_t)PQgetlength(r, i, j);
			}
			rc = check(w, col, len);
		}
		PQclear(r);
		if (n == 0)
			break;
	}
	if (rc == 2)
		fprintf(stderr, "moonbox: --verify-audit: PostgreSQL: %s", PQerrorMessage(c));
	PQfinish(c);
	return rc;
}

int mb_audit_verify_main(int argc, char **argv)
{
	static mb_config cfg;
	int rc = mb_config_load(&cfg, argc, argv);
	if (rc != 0)
		return rc > 0 ? 0 : 2;
	if (sodium_init() < 0)
		return 2;
	char path[4200], err[256];
	struct stat sb;
	if (cfg.pii_key_file[0])
		snprintf(path, sizeof path, "%s", cfg.pii_key_file);
	else
		snprintf(path, sizeof path, "%s/pii.key", cfg.data_dir);
	if (stat(path, &sb) != 0) { /* never made here: a new key would verify nothing */
		fprintf(stderr, "moonbox: --verify-audit: no key file %s (the chain is keyed with the "
			"server's pii.key; give the server's --data-dir or --pii-key-file)\n", path);
		return 2;
	}
	unsigned char pii_key[MB_PII_KEY_BYTES];
	if ((cfg.pii_key_file[0] ? mb_pii_secret_load_file(cfg.pii_key_file, pii_key, err, sizeof err)
				 : mb_pii_secret_load(cfg.data_dir, pii_key, err, sizeof err)) != 0) {
		fprintf(stderr, "moonbox: --verify-audit: %s\n", err);
		return 2;
	}
	walk w = { .n = 0 };
	mb_audit_key(pii_key, w.key);
	sodium_memzero(pii_key, sizeof pii_key);
	if (cfg.store_url[0]) {
		rc = walk_pg(&w, cfg.store_url);
	} else {
		snprintf(path, sizeof path, "%s/moonbox.db", cfg.data_dir);
		if (stat(path, &sb) != 0) {
			fprintf(stderr, "moonbox: --verify-audit: no store %s\n", path);
			return 2;
		}
		rc = walk_sqlite(&w, path);
	}
	sodium_memzero(w.key, sizeof w.key);
	if (rc != 0)
		return rc;
	if (w.n == 0)
		printf("audit chain holds: no records\n");
	else
		printf("audit chain holds: %lld records, ids %lld..%lld, last hash %s\n", w.n, w.first, w.last,
		       w.last_hash);
	return fflush(stdout) == 0 ? 0 : 2;
}
