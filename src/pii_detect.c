/* pii_detect.c - finding personal data and secrets in text (the detector behind pii.h).
 *
 * A scan is one pass of a byte loop over the text plus PCRE2 (JIT) matches in small windows.
 * Running a dozen unanchored patterns over every byte costs far more than the 10 ns a byte the
 * issue allows, so each built-in rule has a trigger, a cheap test that says where its pattern
 * can match, and the pattern only runs there (the byte loop skips eight bytes at a time while
 * none of them is a trigger byte):
 *   - digits: a "cluster" of digit runs joined by at most two separators (space - . ( ) /) and
 *     led by '+' or '('. The run lengths gate the digit rules (gate_bits: a phone number ends
 *     with a run of 4+ and has 10-11 digits in its last runs, an SSN is 3-2-4 or 9, a card 13-19
 *     digits from a run of four, IPv4 four short runs joined by dots); each gated rule searches
 *     the cluster only, and a lone short run (a time, a count) returns at once. Two capital
 *     letters right before a cluster's first digits start an IBAN candidate.
 *   - '@': e-mail (the window reaches back over local-part bytes and forward over domain bytes)
 *     and credentials in URLs (scheme://user:password@host).
 *   - ':' and '=': a key=value secret when the word before is a credential name (password,
 *     api_key, accessToken, ...; a letter-pair filter during the backward walk, then
 *     mb_pii_kv_key_class), and IPv6 when the hex-and-colon run around a ':' holds "::" or
 *     seven colons.
 *   - literal prefixes of well-known tokens (AKIA, ghp_, xoxb-, eyJ, -----BEGIN, ...), found
 *     through a rare byte inside each literal (_ - J A; lower-case first letters would fire on
 *     a quarter of all prose) and matched anchored.
 *   - '[': an existing token "[TYPE_hex]" is skipped and remembered, so that nothing inside it
 *     is ever reported (tokens are never re-tokenized).
 *   Custom patterns have no trigger: each searches the whole text.
 * Each match is then checked beyond its shape by the rule's check function (Luhn, mod-97, SSN
 * ranges, country lengths, a JWT header that decodes to JSON, entropy of secret values, ...),
 * which may also move the span (a kv secret's value, an IBAN cut at its country's length, a PEM
 * block extended to its END line, found with a memmem whose result is cached per scan so that
 * many headers without an END stay linear).
 *
 * Matches run on the whole text as the subject, so lookbehinds see the real bytes before a
 * window; the subject is cut PII_CTX bytes after a window so that a search is O(window) while
 * lookaheads still see the bytes that follow. Rules that only match at their trigger are
 * compiled anchored and without start optimizations (see rule_anchored). Candidates from all
 * rules are sorted by start, then length (longest first), then rule order (custom patterns,
 * then SECRET, EMAIL, IBAN, CARD, SSN, PHONE, IPV6, IPV4), and taken greedily when they do not
 * overlap the last one taken and do not touch an existing token.
 *
 * Patterns are compiled in byte mode (PCRE2_NEVER_UTF): any byte string, valid UTF-8 or not,
 * is a valid subject. The detector is read-only after creation; match data, the match context
 * (match limit) and the JIT stack (made only when a pattern outgrows the 32 KiB machine stack)
 * live in an mb_pii_scratch owned by one thread.
 *
 * The rules themselves (patterns, triggers, check functions, validators) are in
 * pii_detect_rules.c, below this file; pii_detect_int.h is what the two share.
 */
#include "log.h"
#include "pii_detect_int.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PII_DEF_MATCH_LIMIT 100000
#define PII_DEF_PATTERN_BYTES 4096
#define PII_MAX_CUSTOM 64
#define PII_CTX 8                      /* right context given to lookaheads after a window */
#define PII_JIT_STACK_START (32u * 1024)
#define PII_JIT_STACK_MAX (1024u * 1024)
#define PII_MAX_PREFIXES 48
#define PII_PREFIX_SPAN 70000          /* longest prefixed token (a PEM key block) */
#define PII_KV_SPAN 1200               /* separator, blanks and the longest key=value value */

/* ---- compiled rules, the detector, the scratch -------------------------------------------- */

enum { K_NONE, K_DIGIT, K_AT, K_COLON, K_EQ, K_LBRACK, K_PREFIX };
enum { CT_DIGIT = 1, CT_SEP = 2, CT_HEX = 4 };

typedef struct {
	const char *name;
	int type;
	int trigger;
	int gate;
	int vgroup;
	check_fn check;
	pcre2_code *code;
} pii_rule;

/* A literal prefix of a token rule, found through its trigger byte: the first byte of the
 * literal that is one of PII_PREFIX_TRIGGERS, at offset `at` ("ghp_" through its '_' at 3). */
typedef struct {
	char lit[16];
	uint8_t len;
	uint8_t at;
	int rule;
} prefix_lit;

/* Rare bytes that every token prefix contains; lower-case letters would fire on a quarter of
 * all prose. */
#define PII_PREFIX_TRIGGERS "_-JA"

struct mb_pii_detector {
	int ntypes;
	char names[MB_PII_MAX_TYPES][MB_PII_NAME_MAX + 1];
	uint64_t enabled;               /* types with at least one rule */
	pii_rule *rules;
	int nrules;
	int digit_rules[8];
	int ndigit_rules;
	int r_email, r_urlcred, r_iban, r_ipv6, r_kv;   /* -1 when disabled */
	prefix_lit prefixes[PII_MAX_PREFIXES];  /* sorted by trigger byte */
	int nprefixes;
	uint8_t pfx_start[256], pfx_count[256]; /* literals of each trigger byte */
	uint8_t cls[256];               /* K_* trigger of each byte */
	uint8_t keychar[256];           /* bytes of a key before ':' or '=' */
	uint8_t ctab[256];              /* CT_DIGIT, CT_SEP (cluster separator), CT_HEX bits */
	uint8_t kvpair[256][32];        /* bit [a][b]: the pair ab can start a credential word */
	uint32_t max_pairs;             /* ovector pairs needed by the rule with most groups */
	uint32_t match_limit;
};

typedef struct {
	mb_pii_span sp;
	int ri;
} pii_cand;

struct mb_pii_scratch {
	const mb_pii_detector *d;
	pcre2_match_data *md;
	pcre2_match_context *mctx;
	pcre2_jit_stack *jstack;
	pii_cand *cand;
	size_t ncand, capcand;
	size_t *tok;          /* start, stop pairs of existing tokens */
	size_t ntok, captok;
};

/* ---- types ------------------------------------------------------------------------------------- */

static const char *const builtin_names[MB_PII_NBUILTIN] = {
	"EMAIL", "PHONE", "SSN", "CARD", "IPV4", "IPV6", "SECRET", "IBAN",
};

int mb_pii_type_count(const mb_pii_detector *d)
{
	return d ? d->ntypes : MB_PII_NBUILTIN;
}

const char *mb_pii_type_name(const mb_pii_detector *d, int type)
{
	if (type < 0 || type >= mb_pii_type_count(d))
		return NULL;
	return d ? d->names[type] : builtin_names[type];
}

int mb_pii_type_find(const mb_pii_detector *d, const char *name)
{
	if (!name)
		return -1;
	size_t n = strlen(name);
	for (int t = 0; t < mb_pii_type_count(d); t++) {
		const char *tn = mb_pii_type_name(d, t);
		if (strlen(tn) != n)
			continue;
		size_t i = 0;
		while (i < n && to_lower((unsigned char)name[i]) == to_lower((unsigned char)tn[i]))
			i++;
		if (i == n)
			return t;
	}
	return -1;
}

int mb_pii_type_enabled(const mb_pii_detector *d, int type)
{
	return type >= 0 && type < d->ntypes && (d->enabled >> type & 1);
}

/* ---- detector -------------------------------------------------------------------------------- */

/* Rules that only ever match at their trigger are compiled anchored: PCRE2_ANCHORED passed at
 * match time would make pcre2_match leave the JIT code for the interpreter. They also skip the
 * start-of-match optimizations, whose search for a required byte (the '.' of a JWT) would read
 * the whole window at every attempt. */
static int rule_anchored(int trigger)
{
	return trigger == TR_PREFIX || trigger == TR_KV || trigger == TR_URLCRED || trigger == TR_IBAN;
}

static int compile_rule(mb_pii_detector *d, pii_rule *r, const char *pattern, size_t plen,
			int custom_no, char *err, size_t errlen)
{
	int ec;
	PCRE2_SIZE off;
	uint32_t opts = PCRE2_NEVER_UTF;
	if (rule_anchored(r->trigger))
		opts |= PCRE2_ANCHORED | PCRE2_NO_START_OPTIMIZE;
	r->code = pcre2_compile((PCRE2_SPTR)pattern, plen, opts, &ec, &off, NULL);
	if (!r->code) {
		char msg[256];
		if (pcre2_get_error_message(ec, (PCRE2_UCHAR *)msg, sizeof msg) < 0)
			snprintf(msg, sizeof msg, "error %d", ec);
		if (custom_no)
			mb_seterr(err, errlen, "pii: custom pattern %s (#%d): %s at offset %zu", r->name,
			       custom_no, msg, (size_t)off);
		else
			mb_seterr(err, errlen, "pii: internal error: rule %s: %s at offset %zu", r->name,
			       msg, (size_t)off);
		return MB_PII_ERR;
	}
	/* Without JIT (not built in, or no executable memory) the interpreter runs the same code. */
	(void)pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE);
	uint32_t ncap = 0;
	pcre2_pattern_info(r->code, PCRE2_INFO_CAPTURECOUNT, &ncap);
	if (ncap + 1 > d->max_pairs)
		d->max_pairs = ncap + 1;
	return 0;
}

static int add_prefixes(mb_pii_detector *d, const char *list, int ri, char *err, size_t errlen)
{
	const char *p = list;
	while (*p) {
		const char *e = strchr(p, '|');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (d->nprefixes == PII_MAX_PREFIXES || n < 2 || n >= sizeof d->prefixes[0].lit) {
			mb_seterr(err, errlen, "pii: internal error: prefix table");
			return MB_PII_ERR;
		}
		prefix_lit *pl = &d->prefixes[d->nprefixes++];
		memcpy(pl->lit, p, n);
		pl->lit[n] = '\0';
		pl->len = (uint8_t)n;
		pl->rule = ri;
		size_t at = strcspn(pl->lit, PII_PREFIX_TRIGGERS);
		if (at == n) {
			mb_seterr(err, errlen, "pii: internal error: prefix %s has no trigger byte", pl->lit);
			return MB_PII_ERR;
		}
		pl->at = (uint8_t)at;
		p += n + (e ? 1 : 0);
	}
	return 0;
}

static int cmp_prefix(const void *a, const void *b)
{
	const prefix_lit *x = a, *y = b;
	unsigned char cx = (unsigned char)x->lit[x->at], cy = (unsigned char)y->lit[y->at];
	if (cx != cy)
		return cx < cy ? -1 : 1;
	return x->rule - y->rule;
}

/* Upper-cases a custom name into out and checks ^[A-Z][A-Z0-9_]{0,31}$. */
static int custom_name(const char *name, char out[MB_PII_NAME_MAX + 1])
{
	if (!name)
		return 0;
	size_t n = strlen(name);
	if (n == 0 || n > MB_PII_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)name[i];
		if (is_lower(c))
			c = (unsigned char)(c - 32);
		if (!(is_upper(c) || (i > 0 && (is_digit(c) || c == '_'))))
			return 0;
		out[i] = (char)c;
	}
	out[n] = '\0';
	return 1;
}

mb_pii_detector *mb_pii_detector_new(const mb_pii_options *opt, char *err, size_t errlen)
{
	mb_pii_options o;
	if (opt)
		o = *opt;
	else
		memset(&o, 0, sizeof o);
	if (!o.match_limit)
		o.match_limit = PII_DEF_MATCH_LIMIT;
	if (!o.max_pattern_bytes)
		o.max_pattern_bytes = PII_DEF_PATTERN_BYTES;
	if (o.ncustom && !o.custom) {
		mb_seterr(err, errlen, "pii: %zu custom patterns given without the array", o.ncustom);
		return NULL;
	}
	if (o.ncustom > PII_MAX_CUSTOM) {
		mb_seterr(err, errlen, "pii: %zu custom patterns, above the limit of %d", o.ncustom,
		       PII_MAX_CUSTOM);
		return NULL;
	}
	mb_pii_detector *d = calloc(1, sizeof *d);
	if (!d) {
		mb_seterr(err, errlen, "pii: out of memory");
		return NULL;
	}
	d->rules = calloc(mb_pii_nbuiltin_rules + o.ncustom, sizeof *d->rules);
	if (!d->rules) {
		mb_seterr(err, errlen, "pii: out of memory");
		goto fail;
	}
	d->match_limit = o.match_limit;
	d->ntypes = MB_PII_NBUILTIN;
	for (int t = 0; t < MB_PII_NBUILTIN; t++)
		strcpy(d->names[t], builtin_names[t]);
	d->r_email = d->r_urlcred = d->r_iban = d->r_ipv6 = d->r_kv = -1;

	/* custom patterns first: they win ties, in configuration order */
	for (size_t i = 0; i < o.ncustom; i++) {
		const mb_pii_custom *c = &o.custom[i];
		char nm[MB_PII_NAME_MAX + 1];
		if (!custom_name(c->name, nm)) {
			mb_seterr(err, errlen, "pii: custom pattern #%zu has an invalid name \"%.40s\" (after "
			       "upper-casing it must match ^[A-Z][A-Z0-9_]{0,31}$)", i + 1,
			       c->name ? c->name : "(null)");
			goto fail;
		}
		if (!c->pattern || !*c->pattern) {
			mb_seterr(err, errlen, "pii: custom pattern %s (#%zu) has an empty pattern", nm, i + 1);
			goto fail;
		}
		size_t plen = strlen(c->pattern);
		if (plen > o.max_pattern_bytes) {
			mb_seterr(err, errlen, "pii: custom pattern %s (#%zu) is %zu bytes, above "
			       "max_pattern_bytes=%zu", nm, i + 1, plen, o.max_pattern_bytes);
			goto fail;
		}
		int t = mb_pii_type_find(d, nm);
		if (t < 0) {
			if (d->ntypes == MB_PII_MAX_TYPES) {
				mb_seterr(err, errlen, "pii: too many custom types at %s (#%zu): at most %d "
				       "distinct names", nm, i + 1, MB_PII_MAX_TYPES - MB_PII_NBUILTIN);
				goto fail;
			}
			t = d->ntypes++;
			strcpy(d->names[t], nm);
		}
		pii_rule *r = &d->rules[d->nrules];
		r->name = d->names[t];
		r->type = t;
		r->trigger = TR_CUSTOM;
		r->vgroup = -1;
		if (compile_rule(d, r, c->pattern, plen, (int)i + 1, err, errlen) != 0)
			goto fail;
		d->nrules++;
		d->enabled |= 1ull << t;
	}

	for (size_t i = 0; i < mb_pii_nbuiltin_rules; i++) {
		const rule_def *def = &mb_pii_builtin_rules[i];
		if (o.disabled >> def->type & 1)
			continue;
		int ri = d->nrules;
		pii_rule *r = &d->rules[ri];
		r->name = def->name;
		r->type = def->type;
		r->trigger = def->trigger;
		r->gate = def->gate;
		r->vgroup = def->vgroup;
		r->check = def->check;
		if (compile_rule(d, r, def->pattern, strlen(def->pattern), 0, err, errlen) != 0)
			goto fail;
		d->nrules++;
		d->enabled |= 1ull << def->type;
		switch (def->trigger) {
		case TR_EMAIL: d->r_email = ri; break;
		case TR_URLCRED: d->r_urlcred = ri; break;
		case TR_IBAN: d->r_iban = ri; break;
		case TR_IPV6: d->r_ipv6 = ri; break;
		case TR_KV: d->r_kv = ri; break;
		case TR_DIGITS: d->digit_rules[d->ndigit_rules++] = ri; break;
		case TR_PREFIX:
			if (add_prefixes(d, def->prefixes, ri, err, errlen) != 0)
				goto fail;
			break;
		}
	}

	qsort(d->prefixes, (size_t)d->nprefixes, sizeof d->prefixes[0], cmp_prefix);
	for (int k = d->nprefixes - 1; k >= 0; k--) {
		unsigned char c = (unsigned char)d->prefixes[k].lit[d->prefixes[k].at];
		d->pfx_start[c] = (uint8_t)k;
		d->pfx_count[c]++;
		d->cls[c] = K_PREFIX;
	}
	for (int c = '0'; c <= '9'; c++)
		d->cls[c] = K_DIGIT;
	for (int c = 0; c < 256; c++) {
		d->keychar[c] = (uint8_t)is_keychar((unsigned char)c);
		d->ctab[c] = (uint8_t)((is_digit((unsigned char)c) ? CT_DIGIT : 0) |
				       (is_cluster_sep((unsigned char)c) ? CT_SEP : 0) |
				       (is_hex((unsigned char)c) ? CT_HEX : 0));
	}
	static const char *const pairs[] = { "pw", "pa", "au", "se", "to", "ke", "cr", "co" };
	for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++)
		for (int up = 0; up < 4; up++) {
			unsigned char a = (unsigned char)pairs[k][0], b = (unsigned char)pairs[k][1];
			if (up & 1)
				a = (unsigned char)(a - 32);
			if (up & 2)
				b = (unsigned char)(b - 32);
			d->kvpair[a][b >> 3] |= (uint8_t)(1u << (b & 7));
		}
	d->cls['@'] = K_AT;
	d->cls[':'] = K_COLON;
	d->cls['='] = K_EQ;
	d->cls['['] = K_LBRACK;
	return d;
fail:
	mb_pii_detector_free(d);
	return NULL;
}

void mb_pii_detector_free(mb_pii_detector *d)
{
	if (!d)
		return;
	for (int i = 0; i < d->nrules; i++)
		pcre2_code_free(d->rules[i].code);
	free(d->rules);
	free(d);
}

/* ---- scratch ----------------------------------------------------------------------------------- */

mb_pii_scratch *mb_pii_scratch_new(const mb_pii_detector *d)
{
	mb_pii_scratch *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->d = d;
	s->md = pcre2_match_data_create(d->max_pairs ? d->max_pairs : 1, NULL);
	s->mctx = pcre2_match_context_create(NULL);
	if (!s->md || !s->mctx) {
		mb_pii_scratch_free(s);
		return NULL;
	}
	pcre2_set_match_limit(s->mctx, d->match_limit);
	pcre2_set_depth_limit(s->mctx, d->match_limit);
	pcre2_set_heap_limit(s->mctx, 8192);
	return s;
}

void mb_pii_scratch_free(mb_pii_scratch *s)
{
	if (!s)
		return;
	pcre2_match_data_free(s->md);
	pcre2_match_context_free(s->mctx);
	pcre2_jit_stack_free(s->jstack);
	free(s->cand);
	free(s->tok);
	free(s);
}

/* ---- scanning ---------------------------------------------------------------------------------- */

static int add_cand(pii_scan *sc, int ri, size_t vs, size_t ve)
{
	mb_pii_scratch *x = sc->sc;
	if (x->ncand == x->capcand) {
		size_t cap = x->capcand ? x->capcand * 2 : 64;
		pii_cand *c = realloc(x->cand, cap * sizeof *c);
		if (!c) {
			mb_seterr(sc->err, sc->errlen, "pii: out of memory (%zu candidate spans)", cap);
			return sc->rc = MB_PII_ENOMEM;
		}
		x->cand = c;
		x->capcand = cap;
	}
	const pii_rule *r = &sc->d->rules[ri];
	pii_cand *c = &x->cand[x->ncand++];
	c->sp.start = vs;
	c->sp.stop = ve;
	c->sp.type = r->type;
	c->sp.rule = r->name;
	c->ri = ri;
	return 0;
}

static int add_token_range(pii_scan *sc, size_t start, size_t stop)
{
	mb_pii_scratch *x = sc->sc;
	if (x->ntok + 2 > x->captok) {
		size_t cap = x->captok ? x->captok * 2 : 64;
		size_t *t = realloc(x->tok, cap * sizeof *t);
		if (!t) {
			mb_seterr(sc->err, sc->errlen, "pii: out of memory (%zu tokens)", cap / 2);
			return sc->rc = MB_PII_ENOMEM;
		}
		x->tok = t;
		x->captok = cap;
	}
	x->tok[x->ntok++] = start;
	x->tok[x->ntok++] = stop;
	return 0;
}

/* One pcre2_match. Returns the number of ovector pairs it set (> 0) on a match, 0 for none,
 * or a negative error with sc->rc set. */
static int pii_match(pii_scan *sc, const pii_rule *r, size_t sublen, size_t pos, uint32_t opts)
{
	mb_pii_scratch *x = sc->sc;
	int rc = pcre2_match(r->code, (PCRE2_SPTR)sc->s, sublen, pos, opts, x->md, x->mctx);
	if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !x->jstack) {
		x->jstack = pcre2_jit_stack_create(PII_JIT_STACK_START, PII_JIT_STACK_MAX, NULL);
		if (x->jstack) {
			pcre2_jit_stack_assign(x->mctx, NULL, x->jstack);
			rc = pcre2_match(r->code, (PCRE2_SPTR)sc->s, sublen, pos, opts, x->md, x->mctx);
		}
	}
	if (rc > 0)
		return rc;
	if (rc == 0)    /* cannot happen: the match data has room for every rule's groups */
		rc = PCRE2_ERROR_NOMEMORY;
	if (rc == PCRE2_ERROR_NOMATCH || rc == PCRE2_ERROR_PARTIAL)
		return 0;
	char msg[160];
	if (pcre2_get_error_message(rc, (PCRE2_UCHAR *)msg, sizeof msg) < 0)
		snprintf(msg, sizeof msg, "error %d", rc);
	if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT) {
		mb_seterr(sc->err, sc->errlen, "pii: rule %s stopped by the PCRE2 match limit "
		       "(match_limit=%u) searching from byte %zu", r->name, (unsigned)sc->d->match_limit,
		       pos);
		return sc->rc = MB_PII_ELIMIT;
	}
	if (rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_NOMEMORY) {
		mb_seterr(sc->err, sc->errlen, "pii: rule %s ran out of match memory (%s) searching from "
		       "byte %zu", r->name, msg, pos);
		return sc->rc = MB_PII_ELIMIT;
	}
	mb_seterr(sc->err, sc->errlen, "pii: rule %s: match failed: %s", r->name, msg);
	return sc->rc = MB_PII_ERR;
}

/* Runs rule ri from `from`; a match must end by `to`. The subject is cut at to + PII_CTX, which
 * bounds the work of a search (and of lazy quantifiers in anchored ones). Every match that
 * passes the rule's check becomes a candidate. */
static int run_rule(pii_scan *sc, int ri, size_t from, size_t to, int anchored)
{
	const pii_rule *r = &sc->d->rules[ri];
	if (!(sc->types >> r->type & 1))
		return 0;
	size_t sublen = sc->len - to > PII_CTX ? to + PII_CTX : sc->len;
	size_t pos = from;
	while (pos <= to && pos <= sublen) {
		int rc = pii_match(sc, r, sublen, pos, 0);   /* anchored rules are compiled so */
		if (rc <= 0)
			return rc;
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(sc->sc->md);
		size_t ms = ov[0], me = ov[1];
		if (me < ms || ms >= to) /* \K tricks in custom patterns; or past the window */
			return 0;
		int ok = 0;
		if (me <= to) {
			size_t vs = ms, ve = me;
			if (r->vgroup > 0) {
				vs = ov[2 * r->vgroup];
				ve = ov[2 * r->vgroup + 1];
			} else if (r->vgroup < 0) {
				/* only the first rc pairs belong to this match; later ones are stale */
				for (int g = 1; g < rc; g++)
					if (ov[2 * g] != PCRE2_UNSET) {
						vs = ov[2 * g];
						ve = ov[2 * g + 1];
						break;
					}
			}
			if (vs != PCRE2_UNSET && vs < ve && ve <= sc->len &&
			    (!r->check || r->check(sc, ms, me, &vs, &ve))) {
				if (add_cand(sc, ri, vs, ve) != 0)
					return sc->rc;
				ok = 1;
			}
		}
		if (anchored)
			return 0;
		pos = ok && me > ms ? me : ms + 1;
	}
	return 0;
}

/* Gate bits: which digit rules can match somewhere in a cluster, from its run lengths. */
enum { GB_PHONE = 1, GB_SSN = 2, GB_CARD = 4, GB_IPV4 = 8 };

/* Called at the end of each digit run. r and sep are rings of the last five run lengths and of
 * the separator lengths before them; run k back from the newest is at (nr - 1 - k) % 5. dots1
 * counts the newest runs of 1-3 digits joined by single dots. */
static int gate_bits(const size_t r[5], const size_t sep[5], size_t nr, size_t dots1)
{
	int g = 0;
	size_t sum = 0;
#define RUN(k) r[(nr - 1 - (k)) % 5]
	for (size_t k = 0; k < nr && k < 5; k++) {
		sum += RUN(k);
		/* a phone number ends with a run of 4+ digits: 10 or 11 digits in its last 1-4 runs */
		if (k < 4 && (sum == 10 || sum == 11) && RUN(0) >= 4)
			g |= GB_PHONE;
		/* a card starts with a run of four (or is one run) and has 13-19 digits */
		if (sum >= 13 && sum <= 19 && (k == 0 || RUN(k) == 4))
			g |= GB_CARD;
	}
	if (RUN(0) == 9 || (nr >= 3 && RUN(0) == 4 && RUN(1) == 2 && RUN(2) == 3 &&
			     sep[(nr - 1) % 5] == 1 && sep[(nr - 2) % 5] == 1))
		g |= GB_SSN;
#undef RUN
	if (dots1 >= 4)
		g |= GB_IPV4;
	return g;
}

static size_t on_digits(pii_scan *sc, size_t i)
{
	const mb_pii_detector *d = sc->d;
	const char *s = sc->s;
	const unsigned char *u = (const unsigned char *)s;
	const uint8_t *ct = d->ctab;
	size_t len = sc->len;
	/* fast path: one run of at most 8 digits that no separator continues (a time, a count, an
	 * id) can only be the check digits of an IBAN */
	size_t j = i;
	while (j < len && (ct[u[j]] & CT_DIGIT))
		j++;
	if (j - i <= 8 && !(j + 1 < len && (ct[u[j]] & CT_SEP) &&
			    ((ct[u[j + 1]] & CT_DIGIT) ||
			     (j + 2 < len && (ct[u[j + 1]] & CT_SEP) && (ct[u[j + 2]] & CT_DIGIT))))) {
		if (j - i >= 2 && d->r_iban >= 0 && i >= 2 && is_upper(u[i - 2]) && is_upper(u[i - 1]) &&
		    (i == 2 || !is_alnum(u[i - 3])))
			run_rule(sc, d->r_iban, i - 2, i - 2 + 50 < len ? i - 2 + 50 : len, 1);
		return j;
	}
	j = i;
	size_t from = i, last = i, ndig = 0, nr = 0, dots1 = 0;
	size_t r[5], sep[5];    /* rings; only the nr newest entries are read */
	int plus = 0, gates = 0;
	if (from > 0 && s[from - 1] == '(')
		from--;
	if (from > 0 && s[from - 1] == '+') {
		from--;
		plus = 1;
	}
	size_t seplen = 0;
	int dotsep = 0;
	for (;;) {
		size_t st = j;
		while (j < len && (ct[u[j]] & CT_DIGIT))
			j++;
		size_t rl = j - st;
		ndig += rl;
		r[nr % 5] = rl;
		sep[nr % 5] = seplen;
		nr++;
		dots1 = rl <= 3 ? (dotsep || nr == 1 ? dots1 + 1 : 1) : 0;
		/* every rule needs 9+ digits or four dotted runs: dates, times and ids stop here */
		if (ndig >= 9 || dots1 >= 4)
			gates |= gate_bits(r, sep, nr, dots1);
		last = j;
		size_t k = j;
		while (k < len && k - j < 3 && (ct[u[k]] & CT_SEP))
			k++;
		if (k - j == 0 || k - j > 2 || k >= len || !(ct[u[k]] & CT_DIGIT))
			break;
		seplen = k - j;
		dotsep = seplen == 1 && s[j] == '.';
		j = k;
	}
	int iban = d->r_iban >= 0 && i >= 2 && is_upper((unsigned char)s[i - 2]) &&
		   is_upper((unsigned char)s[i - 1]) && (i == 2 || !is_alnum((unsigned char)s[i - 3])) &&
		   i + 1 < len && is_digit((unsigned char)s[i + 1]);
	if (!gates && !(plus && ndig >= 9) && !iban)
		return last;
	for (int k = 0; k < d->ndigit_rules && !sc->rc && (gates || plus); k++) {
		int ri = d->digit_rules[k];
		int pass = 0;
		switch (d->rules[ri].gate) {
		case G_PHONE: pass = gates & GB_PHONE; break;
		case G_PHONE_INTL: pass = plus && ndig >= 9; break;
		case G_SSN: pass = gates & GB_SSN; break;
		case G_CARD: pass = gates & GB_CARD; break;
		case G_IPV4: pass = gates & GB_IPV4; break;
		}
		if (pass)
			run_rule(sc, ri, from, last, 0);
	}
	/* IBAN: two capitals, then two digits, at a word start */
	if (iban && !sc->rc)
		run_rule(sc, d->r_iban, i - 2, i - 2 + 50 < len ? i - 2 + 50 : len, 1);
	return last;
}

static void on_at(pii_scan *sc, size_t a)
{
	const mb_pii_detector *d = sc->d;
	const char *s = sc->s;
	if (d->r_email >= 0) {
		size_t b = a;
		while (b > 0 && a - b < 64 && is_local((unsigned char)s[b - 1]))
			b--;
		size_t e = a + 1;
		int dot = 0;
		while (e < sc->len && e - a <= 254 && is_domain((unsigned char)s[e])) {
			dot |= s[e] == '.';
			e++;
		}
		if (b < a && dot)
			run_rule(sc, d->r_email, b, e, 0);
	}
	if (d->r_urlcred >= 0 && !sc->rc) {
		size_t b = a, lim = a > 400 ? a - 400 : 0;
		while (b > lim) {
			unsigned char c = (unsigned char)s[b - 1];
			if (c <= ' ' || c == '"' || c == '\'' || c == '<' || c == '>' || c == '@')
				break;
			b--;
		}
		for (size_t p = a; p >= b + 3; p--)
			if (s[p - 3] == ':' && s[p - 2] == '/' && s[p - 1] == '/') {
				run_rule(sc, d->r_urlcred, p - 3, a + 1, 1);
				break;
			}
	}
}

static void on_kv(pii_scan *sc, size_t p)
{
	const char *s = sc->s;
	size_t len = sc->len;
	char c = s[p];
	if (c == '=') {
		if (p + 1 < len && s[p + 1] == '=')
			return;
		if (p > 0 && (s[p - 1] == '!' || s[p - 1] == '<' || s[p - 1] == '>' || s[p - 1] == '=' ||
			      s[p - 1] == ':'))
			return;
	} else {
		if (p + 1 < len && (s[p + 1] == ':' || s[p + 1] == '/'))
			return;
		if (p > 0 && s[p - 1] == ':')
			return;
	}
	size_t q = p;
	int sp = 0;
	while (q > 0 && sp < 4 && (s[q - 1] == ' ' || s[q - 1] == '\t')) {
		q--;
		sp++;
	}
	if (q > 0 && (s[q - 1] == '"' || s[q - 1] == '\'' || s[q - 1] == '`'))
		q--;
	/* credential keys end with a letter; this also skips "10:23" and "[0]=" cheaply */
	if (q == 0 || !is_alpha((unsigned char)s[q - 1]))
		return;
	/* walk back over the key, noting whether a letter pair of a credential word occurs in it
	 * (every word mb_pii_kv_key_class looks for has one: pw pa au se to ke cr co) */
	const mb_pii_detector *d = sc->d;
	const unsigned char *u = (const unsigned char *)s;
	size_t we = q, ws = q;
	unsigned maybe = 0;
	while (ws > 0 && we - ws < 64 && d->keychar[u[ws - 1]]) {
		ws--;
		if (ws + 1 < we)
			maybe |= d->kvpair[u[ws]][u[ws + 1] >> 3] >> (u[ws + 1] & 7);
	}
	if (!(maybe & 1) || we - ws < 2 || (ws > 0 && d->keychar[u[ws - 1]]))
		return;
	int cls = mb_pii_kv_key_class(s + ws, we - ws);
	if (cls == KV_NONE)
		return;
	sc->kv_class = cls;
	run_rule(sc, sc->d->r_kv, p, len - p > PII_KV_SPAN ? p + PII_KV_SPAN : len, 1);
}

static void on_colon_ipv6(pii_scan *sc, size_t p, size_t *done_until)
{
	const char *s = sc->s;
	size_t len = sc->len;
	if (p < *done_until)
		return;
	/* an address that starts at this ':' starts with "::"; otherwise a hex digit precedes it
	 * (this skips every '"key":' in JSON) */
	const unsigned char *u = (const unsigned char *)s;
	const uint8_t *ct = sc->d->ctab;
	if (!(p > 0 && (ct[u[p - 1]] & CT_HEX)) && !(p + 1 < len && s[p + 1] == ':'))
		return;
	size_t b = p;
	while (b > 0 && p - b < 40 && ((ct[u[b - 1]] & CT_HEX) || s[b - 1] == ':'))
		b--;
	size_t e = p, colons = 0;
	int dbl = 0;
	while (e < len && e - b < 48 && ((ct[u[e]] & CT_HEX) || s[e] == ':' || s[e] == '.')) {
		if (s[e] == ':') {
			colons++;
			if (e > 0 && s[e - 1] == ':')
				dbl = 1;
		}
		e++;
	}
	*done_until = e;
	if (!dbl && colons < 7)
		return;
	run_rule(sc, sc->d->r_ipv6, b, e, 0);
}

static void on_prefix(pii_scan *sc, size_t i)
{
	const mb_pii_detector *d = sc->d;
	const char *s = sc->s;
	unsigned char c = (unsigned char)s[i];
	int last_rule = -1;
	for (int k = d->pfx_start[c]; k < d->pfx_start[c] + d->pfx_count[c]; k++) {
		const prefix_lit *pl = &d->prefixes[k];
		if (i < pl->at)
			continue;
		size_t st = i - pl->at;
		if (s[st] != pl->lit[0] || pl->rule == last_rule || sc->len - st < pl->len ||
		    memcmp(s + st, pl->lit, pl->len))
			continue;
		last_rule = pl->rule;   /* one attempt per rule and position */
		run_rule(sc, pl->rule, st, sc->len - st > PII_PREFIX_SPAN ? st + PII_PREFIX_SPAN : sc->len, 1);
		if (sc->rc)
			return;
	}
}

static int cmp_cand(const void *a, const void *b)
{
	const pii_cand *x = a, *y = b;
	if (x->sp.start != y->sp.start)
		return x->sp.start < y->sp.start ? -1 : 1;
	if (x->sp.stop != y->sp.stop)
		return x->sp.stop > y->sp.stop ? -1 : 1;
	return x->ri - y->ri;  /* rules are ordered by type priority (custom first) */
}

int mb_pii_scan(const mb_pii_detector *d, const char *text, size_t len, uint64_t types,
		mb_pii_scratch *scratch, mb_pii_span **out, size_t *n, char *err, size_t errlen)
{
	*out = NULL;
	*n = 0;
	mb_pii_scratch *own = NULL;
	if (!scratch) {
		scratch = own = mb_pii_scratch_new(d);
		if (!scratch) {
			mb_seterr(err, errlen, "pii: out of memory (scratch)");
			return MB_PII_ENOMEM;
		}
	} else if (scratch->d != d) {
		mb_seterr(err, errlen, "pii: scratch belongs to another detector");
		return MB_PII_ERR;
	}
	if (!text)
		len = 0;
	pii_scan sc = { .d = d, .sc = scratch, .s = text, .len = len, .types = types & d->enabled,
			.err = err, .errlen = errlen, .pem_end = SIZE_MAX };
	scratch->ncand = 0;
	scratch->ntok = 0;
	size_t ipv6_done = 0;
	uint64_t tmask = sc.types;
	int want_kv = d->r_kv >= 0 && (tmask >> MB_PII_SECRET & 1);
	int want_v6 = d->r_ipv6 >= 0 && (tmask >> MB_PII_IPV6 & 1);

	const unsigned char *u = (const unsigned char *)text;
	const uint8_t *cls = d->cls;
	size_t i = 0;
	while (!sc.rc) {
		/* most bytes trigger nothing: skip them eight at a time */
		while (i + 8 <= len && !(cls[u[i]] | cls[u[i + 1]] | cls[u[i + 2]] | cls[u[i + 3]] |
					 cls[u[i + 4]] | cls[u[i + 5]] | cls[u[i + 6]] | cls[u[i + 7]]))
			i += 8;
		while (i < len && !cls[u[i]])
			i++;
		if (i >= len)
			break;
		switch (cls[u[i]]) {
		case K_DIGIT:
			i = on_digits(&sc, i);
			continue;
		case K_AT:
			on_at(&sc, i);
			break;
		case K_COLON:
			if (want_v6)
				on_colon_ipv6(&sc, i, &ipv6_done);
			if (want_kv && !sc.rc)
				on_kv(&sc, i);
			break;
		case K_EQ:
			if (want_kv)
				on_kv(&sc, i);
			break;
		case K_LBRACK: {
			size_t t = mb_pii_token_check(text + i, len - i, NULL);
			if (t) {
				add_token_range(&sc, i, i + t);
				i += t;
				continue;
			}
			break;
		}
		case K_PREFIX:
			on_prefix(&sc, i);
			break;
		}
		i++;
	}
	for (int ri = 0; ri < d->nrules && !sc.rc; ri++)
		if (d->rules[ri].trigger == TR_CUSTOM)
			run_rule(&sc, ri, 0, len, 0);
	if (sc.rc)
		goto done;

	/* resolve: earliest start, longest, type priority; nothing that touches a token */
	if (scratch->ncand > 1)
		qsort(scratch->cand, scratch->ncand, sizeof *scratch->cand, cmp_cand);
	size_t keep = 0, t = 0, last_stop = 0;
	int any = 0;
	for (size_t c = 0; c < scratch->ncand; c++) {
		mb_pii_span *sp = &scratch->cand[c].sp;
		while (t < scratch->ntok && scratch->tok[t + 1] <= sp->start)
			t += 2;
		if (t < scratch->ntok && scratch->tok[t] < sp->stop)
			continue;
		if (any && sp->start < last_stop)
			continue;
		scratch->cand[keep++] = scratch->cand[c];
		last_stop = sp->stop;
		any = 1;
	}
	if (keep) {
		mb_pii_span *o = malloc(keep * sizeof *o);
		if (!o) {
			mb_seterr(err, errlen, "pii: out of memory (%zu spans)", keep);
			sc.rc = MB_PII_ENOMEM;
			goto done;
		}
		for (size_t c = 0; c < keep; c++)
			o[c] = scratch->cand[c].sp;
		*out = o;
		*n = keep;
	}
done:
	mb_pii_scratch_free(own);
	return sc.rc;
}
