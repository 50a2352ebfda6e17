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
 *     kv_key_class), and IPv6 when the hex-and-colon run around a ':' holds "::" or seven colons.
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
 */
#include "pii.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <math.h>
#include <stdarg.h>
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
#define PII_KW_BACK 40                 /* bytes searched for "phone", "ssn", ... before a bare number */

/* ---- character classes (ASCII, locale-free) ------------------------------------------------ */

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static int is_upper(unsigned char c) { return c >= 'A' && c <= 'Z'; }
static int is_lower(unsigned char c) { return c >= 'a' && c <= 'z'; }
static int is_alpha(unsigned char c) { return is_upper(c) || is_lower(c); }
static int is_alnum(unsigned char c) { return is_alpha(c) || is_digit(c); }
static int is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static unsigned char to_lower(unsigned char c) { return is_upper(c) ? (unsigned char)(c + 32) : c; }

/* bytes of an e-mail local part / domain (UTF-8 bytes allowed: internationalised addresses) */
static int is_local(unsigned char c)
{
	return is_alnum(c) || c >= 0x80 || c == '.' || c == '_' || c == '%' || c == '+' || c == '-';
}
static int is_domain(unsigned char c) { return is_alnum(c) || c >= 0x80 || c == '.' || c == '-'; }
static int is_cluster_sep(unsigned char c)
{
	return c == ' ' || c == '-' || c == '.' || c == '(' || c == ')' || c == '/';
}
static int is_keychar(unsigned char c) { return is_alnum(c) || c == '_' || c == '.' || c == '-'; }

/* ---- rules -------------------------------------------------------------------------------- */

enum { TR_EMAIL, TR_URLCRED, TR_DIGITS, TR_IBAN, TR_IPV6, TR_KV, TR_PREFIX, TR_CUSTOM };
enum { G_NONE, G_PHONE, G_PHONE_INTL, G_SSN, G_CARD, G_IPV4 };
enum { KV_NONE, KV_PASSWORD, KV_SECRET };
enum { K_NONE, K_DIGIT, K_AT, K_COLON, K_EQ, K_LBRACK, K_PREFIX };
enum { CT_DIGIT = 1, CT_SEP = 2, CT_HEX = 4 };

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

/* ---- helpers for checks ---------------------------------------------------------------------- */

static double shannon(const char *s, size_t n)
{
	unsigned cnt[256] = { 0 };
	for (size_t i = 0; i < n; i++)
		cnt[(unsigned char)s[i]]++;
	double h = 0;
	for (int c = 0; c < 256; c++) {
		if (!cnt[c])
			continue;
		double p = (double)cnt[c] / (double)n;
		h -= p * log2(p);
	}
	return h;
}

/* Character classes present: 1 lower, 2 upper, 4 digit, 8 other (not '_' or '.'). */
static int char_classes(const char *s, size_t n)
{
	int m = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (is_lower(c)) m |= 1;
		else if (is_upper(c)) m |= 2;
		else if (is_digit(c)) m |= 4;
		else if (c != '_' && c != '.') m |= 8;
	}
	return m;
}

static int popcount4(int m) { return (m & 1) + ((m >> 1) & 1) + ((m >> 2) & 1) + ((m >> 3) & 1); }

typedef struct {
	const char *w;
	size_t n;
} word;
#define W(s) { s, sizeof s - 1 }

static int word_in(const char *p, size_t n, const word *list)
{
	for (const word *w = list; w->w; w++)
		if (w->n == n && !memcmp(p, w->w, n))
			return 1;
	return 0;
}

/* Case-insensitive: is a[0..n) one of the (lower-case) words? */
static int iword_in(const char *a, size_t n, const word *list)
{
	char low[32];
	if (n > sizeof low)
		return 0;
	for (size_t i = 0; i < n; i++)
		low[i] = (char)to_lower((unsigned char)a[i]);
	return word_in(low, n, list);
}

static int ieq(const char *a, size_t n, const char *lit)
{
	size_t k = strlen(lit);
	if (n != k)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (to_lower((unsigned char)a[i]) != (unsigned char)lit[i])
			return 0;
	return 1;
}

static int iprefix(const char *a, size_t n, const char *lit)
{
	size_t k = strlen(lit);
	if (n < k)
		return 0;
	for (size_t i = 0; i < k; i++)
		if (to_lower((unsigned char)a[i]) != (unsigned char)lit[i])
			return 0;
	return 1;
}

/* Whether one of the keywords (lower case) starts a word within PII_KW_BACK bytes before pos
 * with no digit between it and pos ("ssn 123456789", not "ssn 536228126 id 123456789"). */
static int keyword_before(const char *s, size_t pos, const char *const *kw)
{
	size_t from = pos > PII_KW_BACK ? pos - PII_KW_BACK : 0;
	for (size_t i = pos; i > from; i--) {
		size_t k = i - 1;
		if (is_digit((unsigned char)s[k]))
			return 0;
		if (!is_alpha((unsigned char)s[k]) || (k > 0 && is_alpha((unsigned char)s[k - 1])))
			continue;
		for (const char *const *w = kw; *w; w++)
			if (iprefix(s + k, pos - k, *w))
				return 1;
	}
	return 0;
}

static const char *const phone_words[] = { "phone", "tel", "mobile", "cell", "fax", "sms", "call",
					    "contact", "whatsapp", "ph.", "ph:", "ph ", "mob", NULL };
static const char *const ssn_words[] = { "ssn", "social security", "soc sec", "soc. sec", "ss#",
					  "ss no", "taxpayer", NULL };

/* Copies the digits of s[0..n) into out (at most max); returns how many there were. */
static size_t digits_of(const char *s, size_t n, char *out, size_t max)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (is_digit((unsigned char)s[i])) {
			if (k < max)
				out[k] = s[i];
			k++;
		}
	return k;
}

/* ---- validators (public for tests) ------------------------------------------------------------- */

int mb_pii_luhn_ok(const char *s, size_t len)
{
	char dg[20];
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == ' ' || c == '-')
			continue;
		if (!is_digit(c) || n == sizeof dg)
			return 0;
		dg[n++] = (char)c;
	}
	if (n < 13 || n > 19)
		return 0;
	int sum = 0;
	for (size_t i = 0; i < n; i++) {
		int v = dg[n - 1 - i] - '0';
		if (i & 1) {
			v *= 2;
			if (v > 9)
				v -= 9;
		}
		sum += v;
	}
	return sum % 10 == 0;
}

/* Issuer prefixes (IIN) and the lengths each network issues. Numbers that pass Luhn by chance
 * (one in ten) are mostly ids and millisecond timestamps, which start with 1, 7, 8, 9 or 0. */
static int card_iin_ok(const char *dg, size_t n)
{
	int d1 = dg[0] - '0';
	int d2 = d1 * 10 + (dg[1] - '0');
	int d4 = d2 * 100 + (dg[2] - '0') * 10 + (dg[3] - '0');
	switch (d1) {
	case 4:                                   /* Visa */
		return n == 13 || n == 16 || n == 19;
	case 5:
		if (d2 >= 51 && d2 <= 55)             /* Mastercard */
			return n == 16;
		return (d2 == 50 || d2 >= 56) && n >= 13;  /* Maestro */
	case 2:                                   /* Mastercard 2-series */
		return d4 >= 2221 && d4 <= 2720 && n == 16;
	case 3:
		if (d2 == 34 || d2 == 37)             /* American Express */
			return n == 15;
		if (d2 == 35)                         /* JCB */
			return n >= 16;
		if (d2 == 30 || d2 == 36 || d2 == 38 || d2 == 39)  /* Diners */
			return n >= 14;
		return 0;
	case 6:                                   /* Discover, UnionPay, Maestro, RuPay */
		return n >= 16;
	default:
		return 0;
	}
}

typedef struct {
	char cc[3];
	uint8_t len;
} iban_country;

/* IBAN lengths per country (SWIFT IBAN registry). */
static const iban_country iban_countries[] = {
	{"AD", 24}, {"AE", 23}, {"AL", 28}, {"AT", 20}, {"AZ", 28}, {"BA", 20}, {"BE", 16},
	{"BG", 22}, {"BH", 22}, {"BI", 27}, {"BR", 29}, {"BY", 28}, {"CH", 21}, {"CR", 22},
	{"CY", 28}, {"CZ", 24}, {"DE", 22}, {"DJ", 27}, {"DK", 18}, {"DO", 28}, {"EE", 20},
	{"EG", 29}, {"ES", 24}, {"FI", 18}, {"FK", 18}, {"FO", 18}, {"FR", 27}, {"GB", 22},
	{"GE", 22}, {"GI", 23}, {"GL", 18}, {"GR", 27}, {"GT", 28}, {"HR", 21}, {"HU", 28},
	{"IE", 22}, {"IL", 23}, {"IQ", 23}, {"IS", 26}, {"IT", 27}, {"JO", 30}, {"KW", 30},
	{"KZ", 20}, {"LB", 28}, {"LC", 32}, {"LI", 21}, {"LT", 20}, {"LU", 20}, {"LV", 21},
	{"LY", 25}, {"MC", 27}, {"MD", 24}, {"ME", 22}, {"MK", 19}, {"MN", 20}, {"MR", 27},
	{"MT", 31}, {"MU", 30}, {"NI", 28}, {"NL", 18}, {"NO", 15}, {"OM", 23}, {"PK", 24},
	{"PL", 28}, {"PS", 29}, {"PT", 25}, {"QA", 29}, {"RO", 24}, {"RS", 22}, {"RU", 33},
	{"SA", 24}, {"SC", 31}, {"SD", 18}, {"SE", 24}, {"SI", 19}, {"SK", 24}, {"SM", 27},
	{"SO", 23}, {"ST", 25}, {"SV", 28}, {"TL", 23}, {"TN", 24}, {"TR", 26}, {"UA", 29},
	{"VA", 22}, {"VG", 24}, {"XK", 20},
};

static int iban_length(const char *cc)
{
	for (size_t i = 0; i < sizeof iban_countries / sizeof iban_countries[0]; i++)
		if (iban_countries[i].cc[0] == cc[0] && iban_countries[i].cc[1] == cc[1])
			return iban_countries[i].len;
	return 0;
}

/* mod-97 of the rearranged IBAN (country and check digits moved to the end, letters as 10..35). */
static int iban_mod97(const char *c, size_t n)
{
	unsigned r = 0;
	for (size_t k = 0; k < n; k++) {
		unsigned char ch = (unsigned char)c[(k + 4) % n];
		if (is_digit(ch))
			r = (r * 10 + (unsigned)(ch - '0')) % 97;
		else if (is_upper(ch))
			r = (r * 100 + (unsigned)(ch - 'A' + 10)) % 97;
		else
			return -1;
	}
	return (int)r;
}

int mb_pii_iban_ok(const char *s, size_t len)
{
	char c[40];
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == ' ' && i > 0 && i + 1 < len && s[i - 1] != ' ')
			continue;
		if (!is_upper(ch) && !is_digit(ch))
			return 0;
		if (n == sizeof c)
			return 0;
		c[n++] = (char)ch;
	}
	if (n < 15 || !is_upper((unsigned char)c[0]) || !is_upper((unsigned char)c[1]) ||
	    !is_digit((unsigned char)c[2]) || !is_digit((unsigned char)c[3]))
		return 0;
	int want = iban_length(c);
	return want && (size_t)want == n && iban_mod97(c, n) == 1;
}

int mb_pii_ssn_ok(const char *s, size_t len)
{
	char d[9];
	if (len == 11) {
		char sep = s[3];
		if ((sep != '-' && sep != ' ') || s[6] != sep)
			return 0;
		memcpy(d, s, 3);
		memcpy(d + 3, s + 4, 2);
		memcpy(d + 5, s + 7, 4);
	} else if (len == 9) {
		memcpy(d, s, 9);
	} else {
		return 0;
	}
	for (int i = 0; i < 9; i++)
		if (!is_digit((unsigned char)d[i]))
			return 0;
	if (!memcmp(d, "000", 3) || !memcmp(d, "666", 3) || d[0] == '9')
		return 0;
	if (!memcmp(d + 3, "00", 2) || !memcmp(d + 5, "0000", 4))
		return 0;
	return 1;
}

int mb_pii_ipv4_ok(const char *s, size_t len)
{
	size_t i = 0;
	for (int part = 0; part < 4; part++) {
		if (part) {
			if (i >= len || s[i] != '.')
				return 0;
			i++;
		}
		size_t st = i;
		unsigned v = 0;
		while (i < len && is_digit((unsigned char)s[i]) && i - st < 4)
			v = v * 10 + (unsigned)(s[i++] - '0');
		size_t nd = i - st;
		if (nd == 0 || nd > 3 || v > 255 || (nd > 1 && s[st] == '0'))
			return 0;
	}
	return i == len;
}

/* ---- check functions ------------------------------------------------------------------------- */

/* The e-mail-looking part of "scheme://user:password@host" is URL userinfo, not an address: a
 * "://" earlier in the same run of non-space bytes with no '/', '?' or '#' after it. */
static int in_url_userinfo(const char *s, size_t pos)
{
	size_t b = pos, lim = pos > 400 ? pos - 400 : 0;
	while (b > lim) {
		unsigned char c = (unsigned char)s[b - 1];
		if (c <= ' ' || c == '"' || c == '\'' || c == '<' || c == '>' || c == '/' || c == '?' ||
		    c == '#' || c == '@')
			break;
		b--;
	}
	return b >= 3 && s[b - 1] == '/' && s[b - 2] == '/' && s[b - 3] == ':';
}

static const char *const file_exts[] = { "png", "jpg", "jpeg", "gif", "svg", "webp", "bmp",
					  "ico", "tif", "tiff", "heic", "avif", "js", "mjs", "css",
					  "scss", "json", "lock", "yml", "yaml", "toml", "txt",
					  "log", "mp4", NULL };

static int check_email(pii_scan *sc, size_t ms, size_t me, size_t *vs, size_t *ve)
{
	(void)vs; (void)ve;
	const char *s = sc->s;
	const char *at = memchr(s + ms, '@', me - ms);
	if (!at)
		return 0;
	size_t a = (size_t)(at - s);
	if (s[a - 1] == '.' || s[ms] == '.')
		return 0;
	for (size_t i = ms + 1; i < a; i++)
		if (s[i] == '.' && s[i - 1] == '.')
			return 0;
	/* the TLD is not a file extension ("icon@2x.png") */
	size_t t = me;
	while (t > a && s[t - 1] != '.')
		t--;
	for (const char *const *e = file_exts; *e; e++)
		if (ieq(s + t, me - t, *e))
			return 0;
	/* nor a retina suffix as first label ("logo@2x.webp", "img@1.5x.ext") */
	size_t l = a + 1;
	while (l < me && (is_digit((unsigned char)s[l]) || s[l] == '.'))
		l++;
	if (l > a + 1 && l < me && (s[l] == 'x' || s[l] == 'X') && l + 1 < me && s[l + 1] == '.')
		return 0;
	/* "git@host:org/repo" is an scp-style remote, not an address */
	if (me + 1 < sc->len && s[me] == ':' && (is_alnum((unsigned char)s[me + 1]) || s[me + 1] == '/' ||
						  s[me + 1] == '~' || s[me + 1] == '_'))
		return 0;
	return !in_url_userinfo(s, ms);
}

static int check_phone_nanp(pii_scan *sc, size_t ms, size_t me, size_t *vs, size_t *ve)
{
	(void)vs; (void)ve;
	const char *s = sc->s;
	char d[16];
	size_t n = digits_of(s + ms, me - ms, d, sizeof d);
	const char *p = d;
	if (n == 11) {
		if (d[0] != '1')
			return 0;
		p++;
	} else if (n != 10) {
		return 0;
	}
	if (p[0] < '2' || (p[1] == '1' && p[2] == '1'))
		return 0;
	int sep = 0;
	for (size_t i = ms; i < me; i++)
		if (!is_digit((unsigned char)s[i]) && s[i] != '+')
			sep = 1;
	if (sep)
		return 1;
	/* ten bare digits are an id as often as a phone number: only a valid exchange (NXX) after
	 * "+1" or a word such as "phone" or "tel" shortly before */
	return p[3] >= '2' && (s[ms] == '+' || keyword_before(s, ms, phone_words));
}

typedef struct {
	const char *cc;
	uint8_t min, max;   /* digits including the country code */
} phone_country;

static const phone_country phone_countries[] = {
	{"1", 11, 11}, {"7", 11, 11}, {"20", 12, 12}, {"27", 11, 11}, {"30", 12, 12},
	{"31", 11, 11}, {"32", 10, 11}, {"33", 11, 11}, {"34", 11, 11}, {"36", 10, 11},
	{"39", 11, 13}, {"40", 11, 11}, {"41", 11, 11}, {"43", 10, 13}, {"44", 11, 12},
	{"45", 10, 10}, {"46", 9, 12}, {"47", 10, 10}, {"48", 11, 11}, {"49", 10, 14},
	{"52", 12, 12}, {"54", 12, 13}, {"55", 12, 13}, {"61", 11, 11}, {"64", 10, 11},
	{"65", 10, 10}, {"81", 11, 12}, {"82", 10, 12}, {"86", 12, 13}, {"90", 12, 12},
	{"91", 12, 12}, {"351", 12, 12}, {"353", 10, 12},
};

/* International numbers: 10..15 digits (per country where known, counting the country code);
 * the match may end with groups that belong to the following text ("+44 20 7946 0958 24/7"), so
 * the span is cut at the last group boundary that gives an allowed length. A "(0)" trunk prefix
 * is not counted. */
static int check_phone_intl(pii_scan *sc, size_t ms, size_t me, size_t *vs, size_t *ve)
{
	const char *s = sc->s;
	char d[32];
	size_t nd = 0, ends[32], counts[32], nends = 0;
	for (size_t i = ms + 1; i < me && nd < sizeof d; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '(' && i + 2 < me && s[i + 1] == '0' && s[i + 2] == ')') {
			i += 2;
			continue;
		}
		if (!is_digit(c))
			continue;
		d[nd++] = (char)c;
		if ((i + 1 == me || !is_digit((unsigned char)s[i + 1])) && nends < 32) {
			ends[nends] = i + 1;
			counts[nends++] = nd;
		}
	}
	size_t minlen = 10, maxlen = 15, known = 0;
	for (size_t k = 0; k < sizeof phone_countries / sizeof phone_countries[0]; k++) {
		const phone_country *pc = &phone_countries[k];
		size_t cl = strlen(pc->cc);
		if (cl < nd && !memcmp(d, pc->cc, cl) && cl > known) {
			known = cl;
			minlen = pc->min;
			maxlen = pc->max;
		}
	}
	size_t best = 0;
	for (size_t k = 0; k < nends; k++)
		if (counts[k] >= minlen && counts[k] <= maxlen)
			best = ends[k];
	if (!best)
		return 0;
	if (d[0] == '1' && (d[1] < '2' || (d[2] == '1' && d[3] == '1') || d[4] < '2'))
		return 0;               /* +1: a North American number */
	*vs = ms;
	*ve = best;
	return 1;
}

static int check_ssn(pii_scan *sc, size_t ms, size_t me, size_t *vs, size_t *ve)
{
	(void)vs; (void)ve;
	if (!mb_pii_ssn_ok(sc->s + ms, me - ms))
		return 0;
	/* "AAA GG SSSS" and nine bare digits are counts and ids as often as SSNs */
	if ((me - ms == 9 || sc->s[ms + 3] == ' ') && !keyword_before(sc->s, ms, ssn_words))
		return 0;
	return 1;
}

static int check_card(pii_scan *sc, size_t ms, size_t me, size_t *vs, size_t *ve)
{
	(void)vs; (void)ve;
	char d[24];
	size_t n = digits_of(sc->s + ms, me - ms, d, sizeof d);
	return n >= 13 && n <= 19 && card_iin_ok(d, n) && mb_pii_luhn_ok(sc->s + ms, me - ms);
}

static int check_ipv4(pii_scan *sc, size_t ms, size_t me, size_t *vs, size_t *ve)
{
	(void)vs; (void)ve;
	return mb_pii_ipv4_ok(sc->s + ms, me - ms);
}

/* At least two groups and four hex digits (so not "::", "::1" or a slice like a[1::2]), and
 * either a decimal digit or three groups, so that "Dead::Beef" in code is not an address. */
static int check_ipv6(pii_scan *sc, size_t ms, size_t me, size_t *vs, size_t *ve)
{
	(void)vs; (void)ve;
	const char *s = sc->s;
	int groups = 0, digit = 0, dots = 0, hex = 0;
	for (size_t i = ms; i < me; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '.')
			dots++;
		if (is_digit(c))
			digit = 1;
		if (is_hex(c)) {
			hex++;
			if (i == ms || s[i - 1] == ':')
				groups++;
		}
	}
	if (dots)
		return 1;
	return groups >= 2 && hex >= 4 && (digit || groups >= 3);
}

static int check_iban(pii_scan *sc, size_t ms, size_t me, size_t *vs, size_t *ve)
{
	(void)me;
	const char *s = sc->s;
	int want = iban_length(s + ms);
	if (!want)
		return 0;
	char c[40];
	size_t n = 0, i = ms;
	while (n < (size_t)want && i < sc->len) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == ' ' && n > 0 && i + 1 < sc->len && s[i - 1] != ' ') {
			i++;
			continue;
		}
		if (!is_upper(ch) && !is_digit(ch))
			break;
		c[n++] = (char)ch;
		i++;
	}
	if (n != (size_t)want || (i < sc->len && is_alnum((unsigned char)s[i])))
		return 0;
	if (iban_mod97(c, n) != 1)
		return 0;
	*vs = ms;
	*ve = i;
	return 1;
}

/* base64url without padding; returns the decoded length or -1 */
static long b64url_decode(const char *s, size_t n, unsigned char *out, size_t max)
{
	unsigned acc = 0;
	int bits = 0;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		int v;
		if (is_upper(c)) v = c - 'A';
		else if (is_lower(c)) v = c - 'a' + 26;
		else if (is_digit(c)) v = c - '0' + 52;
		else if (c == '-') v = 62;
		else if (c == '_') v = 63;
		else return -1;
		acc = (acc << 6) | (unsigned)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (k == max)
				return -1;
			out[k++] = (unsigned char)(acc >> bits);
			acc &= (1u << bits) - 1;
		}
	}
	return (long)k;
}

/* The header of a JWT decodes to a JSON object with an "alg" member. */
static int check_jwt(pii_scan *sc, size_t ms, size_t me, size_t *vs, size_t *ve)
{
	(void)vs; (void)ve;
	const char *dot = memchr(sc->s + ms, '.', me - ms);
	if (!dot)
		return 0;
	unsigned char h[1024];
	long n = b64url_decode(sc->s + ms, (size_t)(dot - (sc->s + ms)), h, sizeof h);
	if (n < 8)
		return 0;
	long a = 0, b = n;
	while (a < b && (h[a] == ' ' || h[a] == '\n' || h[a] == '\r' || h[a] == '\t'))
		a++;
	while (b > a && (h[b - 1] == ' ' || h[b - 1] == '\n' || h[b - 1] == '\r' || h[b - 1] == '\t'))
		b--;
	if (b - a < 2 || h[a] != '{' || h[b - 1] != '}')
		return 0;
	return memmem(h + a, (size_t)(b - a), "\"alg\"", 5) != NULL;
}

/* Tokens with a known prefix are random: "AKIAXXXXXXXXXXXXXXXX" or "ghp_xxxx..." in docs are
 * not. */
static int check_random(pii_scan *sc, size_t ms, size_t me, size_t *vs, size_t *ve)
{
	(void)vs; (void)ve;
	return shannon(sc->s + ms, me - ms) >= 3.0;
}

/* Slack tokens carry numeric team and user ids. */
static int check_slack(pii_scan *sc, size_t ms, size_t me, size_t *vs, size_t *ve)
{
	int digit = 0;
	for (size_t i = ms; i < me; i++)
		digit |= is_digit((unsigned char)sc->s[i]);
	return digit && check_random(sc, ms, me, vs, ve);
}

/* sk-... keys: mixed classes and entropy, so that "sk-this-is-not-a-real-key-..." is not one. */
static int check_sk(pii_scan *sc, size_t ms, size_t me, size_t *vs, size_t *ve)
{
	(void)vs; (void)ve;
	const char *v = sc->s + ms + 3;
	size_t n = me - ms - 3;
	return popcount4(char_classes(v, n) & 7) >= 2 && shannon(v, n) >= 3.5;
}

/* Values that stand for a secret without being one. */
static int placeholder(const char *v, size_t n)
{
	static const word words[] = {
		W("null"), W("none"), W("nil"), W("true"), W("false"), W("undefined"), W("empty"),
		W("redacted"), W("hidden"), W("masked"), W("secret"), W("password"), W("passwd"),
		W("example"), W("xxx"), W("n/a"), W("na"), W("default"), W("string"), W("str"),
		W("changeit"), W("your_password"), W("yourpassword"), W("your-password"),
		W("your_api_key"), W("your-api-key"), W("yourapikey"), W("your_token"),
		W("your-token"), W("your_secret"), W("your-secret"), W("<redacted>"), W("***"),
		W("not_set"), W("notset"), W("unset"), W("required"), W("optional"), W("invalid"),
		W("incorrect"), W("expired"), W("missing"), W("changed"), W("updated"), W("reset"),
		W("provided"), W("mismatch"), W("wrong"), W("protected"), W("encrypted"),
		W("disabled"), W("enabled"), W("unknown"), W("unchanged"), W("accepted"),
		W("rejected"), W("denied"), W("failed"), W("success"), W("ok"), W("set"), W("bearer"),
		W("basic"), W("token"), W("refresh"), W("access"), { NULL, 0 } };
	if (iword_in(v, n, words))
		return 1;
	unsigned char c0 = (unsigned char)v[0];
	if (c0 == '$' && n > 1 && (is_alpha((unsigned char)v[1]) || v[1] == '{' || v[1] == '(' ||
				  v[1] == '_'))
		return 1;                                    /* $VAR ${VAR} $(cmd) */
	if (c0 == '<' || c0 == '%' || (c0 == '{' && n > 1 && v[1] == '{'))
		return 1;                                    /* <password> %s {{ var }} */
	if (iprefix(v, n, "env:") || iprefix(v, n, "process.env") || iprefix(v, n, "os.environ") ||
	    iprefix(v, n, "vault:") || iprefix(v, n, "secretref:") || iprefix(v, n, "http://") ||
	    iprefix(v, n, "https://"))
		return 1;                                    /* references and links, not secrets */
	if (memmem(v, n, "...", 3) || memmem(v, n, "\xe2\x80\xa6", 3))
		return 1;                                    /* elided: "eyJhbGciOi..." */
	size_t masked = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)v[i];
		if (c == '*' || c == 'x' || c == 'X' || c == '#' || c == '.' || c == '-' || c == '_' ||
		    c == 0xe2 || c == 0x80 || c == 0xa2)           /* also U+2022 bullets */
			masked++;
	}
	return masked == n;
}

static int check_kv(pii_scan *sc, size_t ms, size_t me, size_t *vs, size_t *ve)
{
	(void)ms; (void)me;
	const char *s = sc->s;
	const char *v = s + *vs;
	size_t n = *ve - *vs;
	int quoted = *vs > 0 && (s[*vs - 1] == '"' || s[*vs - 1] == '\'');
	if (placeholder(v, n))
		return 0;
	/* an unquoted value followed by "(" or "[" is code: password = getpass(), os.environ[...] */
	if (!quoted && *ve < sc->len && (s[*ve] == '(' || s[*ve] == '['))
		return 0;
	int cls = char_classes(v, n);
	if (sc->kv_class == KV_PASSWORD) {
		if (n < 6 || shannon(v, n) < 2.0)
			return 0;
		if (!quoted && (v[0] == '/' || v[0] == '~'))  /* PWD=/home/... */
			return 0;
		/* mixed classes; an all-digit PIN; or a quoted passphrase */
		return popcount4(cls) >= 2 || cls == 4 || (quoted && n >= 12);
	}
	return n >= 12 && popcount4(cls & 7) >= 2 && shannon(v, n) >= 3.0;
}

static int check_urlcred(pii_scan *sc, size_t ms, size_t me, size_t *vs, size_t *ve)
{
	(void)ms; (void)me;
	size_t n = *ve - *vs;
	return n >= 3 && !placeholder(sc->s + *vs, n) && !ieq(sc->s + *vs, n, "pass");
}

/* Where the next "-----END " is, at or after `from` and before `limit`; SIZE_MAX if none. */
static size_t next_pem_end(pii_scan *sc, size_t from, size_t limit)
{
	if (sc->pem_end != SIZE_MAX && sc->pem_from <= from && sc->pem_end >= from)
		return sc->pem_end < limit ? sc->pem_end : SIZE_MAX;
	size_t start = from;
	if (sc->pem_end == SIZE_MAX && sc->pem_from <= from && sc->pem_to > from)
		start = sc->pem_to > from + 8 ? sc->pem_to - 8 : from;   /* searched already */
	const char *hit = start < limit ? memmem(sc->s + start, limit - start, "-----END ", 9) : NULL;
	sc->pem_from = from;
	sc->pem_end = hit ? (size_t)(hit - sc->s) : SIZE_MAX;
	sc->pem_to = limit;
	return sc->pem_end;
}

/* A PEM private key: the header matched; the block runs to its "-----END ... PRIVATE KEY-----"
 * line within 64 KiB, or else (a truncated key) over the base64 body that follows. */
static int check_pem(pii_scan *sc, size_t ms, size_t me, size_t *vs, size_t *ve)
{
	const char *s = sc->s;
	size_t len = sc->len, limit = len - me > 65536 ? me + 65536 : len;
	size_t e = next_pem_end(sc, me, limit);
	if (e != SIZE_MAX) {
		size_t k = e + 9, stop = len - k > 64 ? k + 64 : len;
		while (k + 5 <= stop && memcmp(s + k, "-----", 5) != 0)
			k++;
		if (k + 5 <= stop && memmem(s + e, k - e, "PRIVATE KEY", 11)) {
			*vs = ms;
			*ve = k + 5;
			return 1;
		}
	}
	size_t k = me;
	while (k < limit && (is_alnum((unsigned char)s[k]) || s[k] == '+' || s[k] == '/' ||
			     s[k] == '=' || s[k] == '\r' || s[k] == '\n' || s[k] == '\t' || s[k] == '\\'))
		k++;
	*vs = ms;
	*ve = k;
	return 1;
}

/* ---- the built-in rules ---------------------------------------------------------------------- */

#define H "[0-9A-Fa-f]{1,4}"
#define V4 "(?:(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)"

static const rule_def builtin_rules[] = {
	/* ---- SECRET (first: ties at the same span go to the higher priority type) ---- */
	{"private_key", MB_PII_SECRET, TR_PREFIX, 0, 0, check_pem,
	 "-----BEGIN (?:[A-Z0-9]+ ){0,3}PRIVATE KEY(?: BLOCK)?-----", "-----BEGIN "},
	{"aws_access_key_id", MB_PII_SECRET, TR_PREFIX, 0, 0, check_random,
	 "(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA)[A-Z0-9]{16}"
	 "(?![A-Za-z0-9])",
	 "AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA"},
	{"github_token", MB_PII_SECRET, TR_PREFIX, 0, 0, check_random,
	 "(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{22,255})"
	 "(?![A-Za-z0-9_])",
	 "ghp_|gho_|ghu_|ghs_|ghr_|github_pat_"},
	{"slack_token", MB_PII_SECRET, TR_PREFIX, 0, 0, check_slack,
	 "(?<![A-Za-z0-9])xox[baprse]-[A-Za-z0-9-]{10,250}(?![A-Za-z0-9-])",
	 "xoxb-|xoxa-|xoxp-|xoxr-|xoxs-|xoxe-"},
	{"jwt", MB_PII_SECRET, TR_PREFIX, 0, 0, check_jwt,
	 "(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,4096}+\\.[A-Za-z0-9_-]{2,16384}+\\.[A-Za-z0-9_-]{0,4096}+"
	 "(?![A-Za-z0-9_-])",
	 "eyJ"},
	{"google_api_key", MB_PII_SECRET, TR_PREFIX, 0, 0, check_random,
	 "(?<![A-Za-z0-9_-])AIza[0-9A-Za-z_-]{35}(?![A-Za-z0-9_-])", "AIza"},
	{"stripe_key", MB_PII_SECRET, TR_PREFIX, 0, 0, check_random,
	 "(?<![A-Za-z0-9_])[sr]k_(?:live|test)_[0-9A-Za-z]{16,247}(?![A-Za-z0-9_])",
	 "sk_live_|sk_test_|rk_live_|rk_test_"},
	{"sk_api_key", MB_PII_SECRET, TR_PREFIX, 0, 0, check_sk,
	 "(?<![A-Za-z0-9_-])sk-(?:ant-(?:api\\d\\d-|admin\\d\\d-)?|proj-|svcacct-|admin-)?"
	 "[A-Za-z0-9_-]{32,300}(?![A-Za-z0-9_-])",
	 "sk-"},
	{"npm_token", MB_PII_SECRET, TR_PREFIX, 0, 0, check_random,
	 "(?<![A-Za-z0-9_])npm_[A-Za-z0-9]{36}(?![A-Za-z0-9_])", "npm_"},
	{"url_credentials", MB_PII_SECRET, TR_URLCRED, 0, 1, check_urlcred,
	 "://[^\\s:/@]{0,128}:([^\\s/@]{1,256})@", NULL},
	{"secret_kv", MB_PII_SECRET, TR_KV, 0, -1, check_kv,
	 "(?:=>|:=|[:=])[ \\t]*"
	 "(?:\"((?:[^\"\\\\\\r\\n]|\\\\.){1,256})\""
	 "|'([^'\\r\\n]{1,256})'"
	 "|(?i:bearer|basic|token)[ \\t]+([A-Za-z0-9._~+/=-]{8,1024})"
	 "|((?:[^\\s\"'`,;&<>|(){}\\[\\]:=]|&(?![A-Za-z_]\\w*=)|=++(?![^\\s\"'`,;&<>|(){}\\[\\]:]))"
	 "{1,256}))",
	 NULL},
	/* ---- EMAIL ---- */
	{"email", MB_PII_EMAIL, TR_EMAIL, 0, 0, check_email,
	 "(?<![A-Za-z0-9._%+\\x80-\\xff-])"
	 "[A-Za-z0-9_%+\\x80-\\xff-][A-Za-z0-9._%+\\x80-\\xff-]{0,63}"
	 "@(?:[A-Za-z0-9\\x80-\\xff](?:[A-Za-z0-9\\x80-\\xff-]{0,61}[A-Za-z0-9\\x80-\\xff])?\\.){1,8}"
	 "[A-Za-z]{2,24}(?![A-Za-z0-9\\x80-\\xff-]|\\.[A-Za-z0-9])",
	 NULL},
	/* ---- IBAN ---- */
	{"iban", MB_PII_IBAN, TR_IBAN, 0, 0, check_iban,
	 "(?<![A-Za-z0-9])[A-Z]{2}\\d{2}(?: ?[A-Z0-9]){11,30}", NULL},
	/* ---- CARD: 13-19 digits, in groups of four or 4-6-4/4-6-5, one separator kind ---- */
	{"card", MB_PII_CARD, TR_DIGITS, G_CARD, 0, check_card,
	 "(?<![\\w.-])(?<!\\d[ -])(?<![A-Z]{2}\\d\\d )"
	 "(?:\\d{4}([ -]?)\\d{4}\\1\\d{4}\\1\\d{1,4}(?:\\1\\d{1,3})?"
	 "|\\d{4}([ -]?)\\d{6}\\2\\d{4,5})(?![\\w]|[.-]\\d|[ -]\\d{4})",
	 NULL},
	/* ---- SSN: AAA-GG-SSSS or AAA GG SSSS; nine bare digits only after "SSN" and the like ---- */
	{"ssn", MB_PII_SSN, TR_DIGITS, G_SSN, 0, check_ssn,
	 "(?<![\\w./-])\\d{3}([- ]?)\\d{2}\\1\\d{4}(?![\\w]|[./-]\\d)", NULL},
	/* ---- PHONE ---- */
	{"phone_intl", MB_PII_PHONE, TR_DIGITS, G_PHONE_INTL, 0, check_phone_intl,
	 "(?<![\\w+])\\+[1-9](?:[ .-]?(?:\\(\\d{1,4}\\)|\\d)){7,20}(?!\\w)", NULL},
	{"phone_nanp", MB_PII_PHONE, TR_DIGITS, G_PHONE, 0, check_phone_nanp,
	 "(?<![\\w+./-])(?:\\+?1[ .-]?)?(?:\\([2-9]\\d{2}\\)[ .-]?|[2-9]\\d{2}[ .-]?)"
	 "\\d{3}[ .-]?\\d{4}(?![\\w]|[./-]\\d| \\d{3})",
	 NULL},
	/* ---- IPV6 (full and compressed forms, optional IPv4 tail) ---- */
	{"ipv6", MB_PII_IPV6, TR_IPV6, 0, 0, check_ipv6,
	 "(?<![\\w:.])(?:"
	 "(?:" H ":){7}" H
	 "|(?:" H ":){6}" V4
	 "|(?:" H ":){1,7}:"
	 "|(?:" H ":){1,6}:" H
	 "|(?:" H ":){1,5}(?::" H "){1,2}"
	 "|(?:" H ":){1,4}(?::" H "){1,3}"
	 "|(?:" H ":){1,3}(?::" H "){1,4}"
	 "|(?:" H ":){1,2}(?::" H "){1,5}"
	 "|" H ":(?::" H "){1,6}"
	 "|:(?::" H "){1,7}"
	 "|::(?:[fF]{4}(?::0{1,4})?:)?" V4
	 "|(?:" H ":){1,4}:" V4
	 ")(?![\\w:]|\\.\\d)",
	 NULL},
	/* ---- IPV4: every octet 0-255, no leading zeros, not inside a longer dotted run ---- */
	{"ipv4", MB_PII_IPV4, TR_DIGITS, G_IPV4, 0, check_ipv4,
	 "(?<![\\w.])" V4 "(?![\\w]|\\.\\d)", NULL},
};

#undef H
#undef V4

#define NBUILTIN_RULES (sizeof builtin_rules / sizeof builtin_rules[0])

static const char *const builtin_names[MB_PII_NBUILTIN] = {
	"EMAIL", "PHONE", "SSN", "CARD", "IPV4", "IPV6", "SECRET", "IBAN",
};

/* ---- errors ---------------------------------------------------------------------------------- */

static void seterr(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
	if (!err || !errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* ---- types ------------------------------------------------------------------------------------- */

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
			seterr(err, errlen, "pii: custom pattern %s (#%d): %s at offset %zu", r->name,
			       custom_no, msg, (size_t)off);
		else
			seterr(err, errlen, "pii: internal error: rule %s: %s at offset %zu", r->name,
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
			seterr(err, errlen, "pii: internal error: prefix table");
			return MB_PII_ERR;
		}
		prefix_lit *pl = &d->prefixes[d->nprefixes++];
		memcpy(pl->lit, p, n);
		pl->lit[n] = '\0';
		pl->len = (uint8_t)n;
		pl->rule = ri;
		size_t at = strcspn(pl->lit, PII_PREFIX_TRIGGERS);
		if (at == n) {
			seterr(err, errlen, "pii: internal error: prefix %s has no trigger byte", pl->lit);
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
		seterr(err, errlen, "pii: %zu custom patterns given without the array", o.ncustom);
		return NULL;
	}
	if (o.ncustom > PII_MAX_CUSTOM) {
		seterr(err, errlen, "pii: %zu custom patterns, above the limit of %d", o.ncustom,
		       PII_MAX_CUSTOM);
		return NULL;
	}
	mb_pii_detector *d = calloc(1, sizeof *d);
	if (!d) {
		seterr(err, errlen, "pii: out of memory");
		return NULL;
	}
	d->rules = calloc(NBUILTIN_RULES + o.ncustom, sizeof *d->rules);
	if (!d->rules) {
		seterr(err, errlen, "pii: out of memory");
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
			seterr(err, errlen, "pii: custom pattern #%zu has an invalid name \"%.40s\" (after "
			       "upper-casing it must match ^[A-Z][A-Z0-9_]{0,31}$)", i + 1,
			       c->name ? c->name : "(null)");
			goto fail;
		}
		if (!c->pattern || !*c->pattern) {
			seterr(err, errlen, "pii: custom pattern %s (#%zu) has an empty pattern", nm, i + 1);
			goto fail;
		}
		size_t plen = strlen(c->pattern);
		if (plen > o.max_pattern_bytes) {
			seterr(err, errlen, "pii: custom pattern %s (#%zu) is %zu bytes, above "
			       "max_pattern_bytes=%zu", nm, i + 1, plen, o.max_pattern_bytes);
			goto fail;
		}
		int t = mb_pii_type_find(d, nm);
		if (t < 0) {
			if (d->ntypes == MB_PII_MAX_TYPES) {
				seterr(err, errlen, "pii: too many custom types at %s (#%zu): at most %d "
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

	for (size_t i = 0; i < NBUILTIN_RULES; i++) {
		const rule_def *def = &builtin_rules[i];
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
			seterr(sc->err, sc->errlen, "pii: out of memory (%zu candidate spans)", cap);
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
			seterr(sc->err, sc->errlen, "pii: out of memory (%zu tokens)", cap / 2);
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
		seterr(sc->err, sc->errlen, "pii: rule %s stopped by the PCRE2 match limit "
		       "(match_limit=%u) searching from byte %zu", r->name, (unsigned)sc->d->match_limit,
		       pos);
		return sc->rc = MB_PII_ELIMIT;
	}
	if (rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_NOMEMORY) {
		seterr(sc->err, sc->errlen, "pii: rule %s ran out of match memory (%s) searching from "
		       "byte %zu", r->name, msg, pos);
		return sc->rc = MB_PII_ELIMIT;
	}
	seterr(sc->err, sc->errlen, "pii: rule %s: match failed: %s", r->name, msg);
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

/* Classifies the key before a ':' or '=' separator. The key is normalised (lower case, camelCase
 * and - . split into words with '_'); a password word anywhere, or a credential word inside it,
 * makes it a key whose value is checked as a secret, unless its last word says the value is
 * about the secret (password_reset_url, token_type, secret_name, ...). */
static int kv_key_class(const char *k, size_t n)
{
	char w[160];
	size_t m = 0;
	for (size_t i = 0; i < n && m + 2 < sizeof w; i++) {
		unsigned char c = (unsigned char)k[i];
		if (is_upper(c)) {
			if (i > 0 && is_lower((unsigned char)k[i - 1]))
				w[m++] = '_';
			w[m++] = (char)(c + 32);
		} else if (c == '-' || c == '.') {
			w[m++] = '_';
		} else {
			w[m++] = (char)c;
		}
	}
	w[m] = '\0';
	static const word pw_words[] = { W("password"), W("passwd"), W("pwd"), W("pass"),
					 W("passphrase"), W("passcode"), W("pw"), { NULL, 0 } };
	static const word meta_words[] = {
		W("url"), W("uri"), W("endpoint"), W("link"), W("path"), W("file"), W("dir"),
		W("name"), W("type"), W("policy"), W("length"), W("len"), W("min"), W("max"),
		W("expiry"), W("expires"), W("expiration"), W("ttl"), W("age"), W("lifetime"),
		W("count"), W("limit"), W("attempts"), W("changed"), W("updated"), W("hint"),
		W("label"), W("prompt"), W("field"), W("placeholder"), W("required"), W("strength"),
		W("rules"), W("regex"), W("pattern"), W("enabled"), W("disabled"), W("mode"),
		W("version"), W("format"), W("reset"), W("at"), W("used"), W("size"), W("location"),
		W("arn"), W("ref"), { NULL, 0 } };
	static const word secret_subs[] = {
		W("secret"), W("token"), W("apikey"), W("accesskey"), W("privatekey"), W("credential"),
		W("authorization"), W("sessionid"), W("sessionkey"), W("signingkey"),
		W("encryptionkey"), W("masterkey"), W("connectionstring"), { NULL, 0 } };
	size_t lw = m;
	while (lw > 0 && w[lw - 1] != '_')
		lw--;
	if (lw > 0 && word_in(w + lw, m - lw, meta_words))
		return KV_NONE;
	int cls = KV_NONE;
	size_t st = 0;
	for (size_t i = 0; i <= m; i++) {
		if (i < m && w[i] != '_')
			continue;
		if (word_in(w + st, i - st, pw_words))
			return KV_PASSWORD;
		if (i - st == 4 && !memcmp(w + st, "auth", 4))
			cls = KV_SECRET;
		st = i + 1;
	}
	/* substrings of the key without separators */
	char j[160];
	size_t jn = 0;
	for (size_t i = 0; i < m; i++)
		if (w[i] != '_')
			j[jn++] = w[i];
	if (memmem(j, jn, "password", 8))
		return KV_PASSWORD;
	for (const word *p = secret_subs; p->w && cls == KV_NONE; p++)
		if (memmem(j, jn, p->w, p->n))
			cls = KV_SECRET;
	return cls;
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
	 * (every word kv_key_class looks for has one: pw pa au se to ke cr co) */
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
	int cls = kv_key_class(s + ws, we - ws);
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
			seterr(err, errlen, "pii: out of memory (scratch)");
			return MB_PII_ENOMEM;
		}
	} else if (scratch->d != d) {
		seterr(err, errlen, "pii: scratch belongs to another detector");
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
			seterr(err, errlen, "pii: out of memory (%zu spans)", keep);
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
