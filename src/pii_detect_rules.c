/* pii_detect_rules.c - the built-in rules of PII detection: for each rule its PCRE2 pattern,
 * its trigger (where the scan in pii_detect.c tries it), its gate (digit rules) and its check
 * function, and the validators the checks use: Luhn and card issuer prefixes, IBAN country
 * lengths and mod-97, SSN ranges, IPv4 octets, phone country lengths, JWT headers that decode to
 * JSON, entropy and placeholders of secret values, and the class of the key before a key=value
 * secret (mb_pii_kv_key_class, which the scan asks before it runs secret_kv).
 *
 * A check sees a match in a pii_scan (the text, its length, the key class for check_kv, the
 * cached END position for PEM blocks) and may move the value's span. The table order is the
 * type priority among built-in rules: ties at the same span go to the rule listed first.
 *
 * Below pii_detect.c, which compiles the table and runs it; this file calls nothing there. No
 * state of its own: the table is read-only and the checks touch only the pii_scan of the call,
 * so any number of threads may use them.
 */
#include <math.h>
#include <string.h>

#include "pii_detect_int.h"

#define PII_KW_BACK 40                 /* bytes searched for "phone", "ssn", ... before a bare number */

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

/* ---- the key before a key=value secret ------------------------------------------------------ */

/* Classifies the key before a ':' or '=' separator. The key is normalised (lower case, camelCase
 * and - . split into words with '_'); a password word anywhere, or a credential word inside it,
 * makes it a key whose value is checked as a secret, unless its last word says the value is
 * about the secret (password_reset_url, token_type, secret_name, ...). */
int mb_pii_kv_key_class(const char *k, size_t n)
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

/* ---- the built-in rules ---------------------------------------------------------------------- */

#define H "[0-9A-Fa-f]{1,4}"
#define V4 "(?:(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)"

/* punctuation that is not ASCII and is found right before or after an e-mail address: dashes
 * and curly quotes (U+2013, U+2014, U+2018-U+201F), guillemets, CJK marks and brackets
 * (U+3000-U+3003, U+3008-U+300F), fullwidth parentheses, comma, colon, semicolon */
#define EMAIL_PUNCT "\\xe2\\x80[\\x93\\x94\\x98-\\x9f]|\\xc2[\\xab\\xbb]|\\xe3\\x80[\\x80-\\x83\\x88-\\x8f]" \
		    "|\\xef\\xbc[\\x88\\x89\\x8c\\x9a\\x9b]"

const rule_def mb_pii_builtin_rules[] = {
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
	/* after the ASCII TLD, a byte that is not ASCII does not unmake the address: it is a closing
	 * curly quote, a dash or CJK punctuation far more often than the rest of a TLD, and an
	 * address followed by one was left whole in the text. Before the local part, such
	 * punctuation (UTF-8 bytes, which the local part may otherwise hold) is not taken into the
	 * value: the token would restore with it ("“ann@example.org" sent to an upstream). */
	{"email", MB_PII_EMAIL, TR_EMAIL, 0, 0, check_email,
	 "(?:(?<![A-Za-z0-9._%+\\x80-\\xff-])|(?<=\\xe2\\x80[\\x93\\x94\\x98-\\x9f])|(?<=\\xc2[\\xab\\xbb])"
	 "|(?<=\\xe3\\x80[\\x80-\\x83\\x88-\\x8f])|(?<=\\xef\\xbc[\\x88\\x89\\x8c\\x9a\\x9b]))(?!" EMAIL_PUNCT ")"
	 "[A-Za-z0-9_%+\\x80-\\xff-][A-Za-z0-9._%+\\x80-\\xff-]{0,63}"
	 "@(?:[A-Za-z0-9\\x80-\\xff](?:[A-Za-z0-9\\x80-\\xff-]{0,61}[A-Za-z0-9\\x80-\\xff])?\\.){1,8}"
	 "[A-Za-z]{2,24}(?![A-Za-z0-9-]|\\.[A-Za-z0-9])",
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

const size_t mb_pii_nbuiltin_rules = sizeof mb_pii_builtin_rules / sizeof mb_pii_builtin_rules[0];
