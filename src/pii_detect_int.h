/* pii_detect_int.h - internals shared by the two files of PII detection: pii_detect.c (the scan
 * engine: detector, scratch, triggers, matching, overlap resolution) and pii_detect_rules.c (the
 * built-in rules, their check functions and the validators). Not for the rest of the PII code
 * (pii_token.c, pii_lua.c, ... use pii.h) nor for other modules; tests may use it.
 *
 * pii_detect.c calls into pii_detect_rules.c, never the other way: a check function sees the
 * scan only through the pii_scan it is handed. Threads: the rule table is read-only; a pii_scan
 * lives on the stack of one mb_pii_scan call.
 */
#ifndef MB_PII_DETECT_INT_H
#define MB_PII_DETECT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "pii.h"

/* ---- character classes (ASCII, locale-free) ------------------------------------------------ */

static inline int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static inline int is_upper(unsigned char c) { return c >= 'A' && c <= 'Z'; }
static inline int is_lower(unsigned char c) { return c >= 'a' && c <= 'z'; }
static inline int is_alpha(unsigned char c) { return is_upper(c) || is_lower(c); }
static inline int is_alnum(unsigned char c) { return is_alpha(c) || is_digit(c); }
static inline int is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static inline unsigned char to_lower(unsigned char c) { return is_upper(c) ? (unsigned char)(c + 32) : c; }

/* bytes of an e-mail local part / domain (UTF-8 bytes allowed: internationalised addresses) */
static inline int is_local(unsigned char c)
{
	return is_alnum(c) || c >= 0x80 || c == '.' || c == '_' || c == '%' || c == '+' || c == '-';
}
static inline int is_domain(unsigned char c) { return is_alnum(c) || c >= 0x80 || c == '.' || c == '-'; }
static inline int is_cluster_sep(unsigned char c)
{
	return c == ' ' || c == '-' || c == '.' || c == '(' || c == ')' || c == '/';
}
static inline int is_keychar(unsigned char c) { return is_alnum(c) || c == '_' || c == '.' || c == '-'; }

/* ---- rules -------------------------------------------------------------------------------- */

enum { TR_EMAIL, TR_URLCRED, TR_DIGITS, TR_IBAN, TR_IPV6, TR_KV, TR_PREFIX, TR_CUSTOM };
enum { G_NONE, G_PHONE, G_PHONE_INTL, G_SSN, G_CARD, G_IPV4 };
enum { KV_NONE, KV_PASSWORD, KV_SECRET };

typedef struct pii_scan pii_scan;
/* Checks a match (ms..me) whose value is *vs..*ve; may narrow the value. Returns 1 to keep. */
typedef int (*check_fn)(pii_scan *sc, size_t ms, size_t me, size_t *vs, size_t *ve);

typedef struct {
	const char *name;
	int type;
	int trigger;
	int gate;      /* TR_DIGITS only */
	int vgroup;    /* value: 0 whole match, n group n, -1 first group that took part */
	check_fn check;
	const char *pattern;
	const char *prefixes;  /* TR_PREFIX: literals separated by '|' */
} rule_def;

struct pii_scan {
	const mb_pii_detector *d;
	mb_pii_scratch *sc;
	const char *s;
	size_t len;
	uint64_t types;
	int rc;
	char *err;
	size_t errlen;
	int kv_class;         /* for check_kv: class of the key before the separator */
	size_t pem_end;       /* next "-----END " at or after pem_from (SIZE_MAX: none before */
	size_t pem_from;      /* pem_to); makes END searches linear over many BEGIN headers */
	size_t pem_to;
};

/* The built-in rules in priority order (pii_detect_rules.c). */
extern const rule_def mb_pii_builtin_rules[];
extern const size_t mb_pii_nbuiltin_rules;

/// Classifies the key before a ':' or '=' separator (on_kv in pii_detect.c).
/// @param k the key
/// @param n its length
/// @returns KV_PASSWORD, KV_SECRET (the value is checked as a secret) or KV_NONE
int mb_pii_kv_key_class(const char *k, size_t n);

#endif
