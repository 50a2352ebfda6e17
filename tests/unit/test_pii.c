/* test_pii.c - the PII detector, tokens, the key file, sanitizing and the Lua functions.
 *
 * Validators (Luhn, mod-97, SSN ranges, IPv4 octets), each rule's edge cases, overlap
 * resolution, existing tokens, idempotence (including a text that needs a second round),
 * custom patterns and their errors, disabled types, invalid UTF-8, huge and hostile inputs,
 * match limits, the key file (creation, mode, refusals, concurrent first use), token stability
 * and collisions, the mint callback, threads sharing one detector, and pii_scan/pii_sanitize
 * from Lua. Precision and recall on the labelled corpus are in test_pii_quality.c. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "pii.h"
#include "unit.h"

static char err[1024];
static const unsigned char KEY1[MB_PII_KEY_BYTES] = "0123456789abcdef0123456789abcdef";
static const unsigned char KEY2[MB_PII_KEY_BYTES] = "fedcba9876543210fedcba9876543210";

static mb_pii_detector *new_det(const mb_pii_options *o)
{
	err[0] = '\0';
	mb_pii_detector *d = mb_pii_detector_new(o, err, sizeof err);
	if (!d)
		fprintf(stderr, "  detector: %s\n", err);
	return d;
}

/* Scans text and writes "TYPE:value|TYPE:value" into out. Returns the scan's code. */
static int scan_to(const mb_pii_detector *d, const char *text, size_t len, uint64_t types,
		   char *out, size_t outlen)
{
	mb_pii_span *sp = NULL;
	size_t n = 0;
	int rc = mb_pii_scan(d, text, len, types, NULL, &sp, &n, err, sizeof err);
	size_t o = 0;
	out[0] = '\0';
	for (size_t i = 0; i < n && o < outlen; i++)
		o += (size_t)snprintf(out + o, outlen - o, "%s%s:%.*s", i ? "|" : "",
				      mb_pii_type_name(d, sp[i].type), (int)(sp[i].stop - sp[i].start),
				      text + sp[i].start);
	free(sp);
	return rc;
}

static const char *scan_s(const mb_pii_detector *d, const char *text)
{
	static char out[8192];
	if (scan_to(d, text, strlen(text), MB_PII_ALL, out, sizeof out) != 0)
		snprintf(out, sizeof out, "ERROR %s", err);
	return out;
}

static const char *rules_s(const mb_pii_detector *d, const char *text)
{
	static char out[4096];
	mb_pii_span *sp = NULL;
	size_t n = 0, o = 0;
	out[0] = '\0';
	if (mb_pii_scan(d, text, strlen(text), MB_PII_ALL, NULL, &sp, &n, err, sizeof err) != 0)
		return "ERROR";
	for (size_t i = 0; i < n && o < sizeof out; i++)
		o += (size_t)snprintf(out + o, sizeof out - o, "%s%s", i ? "|" : "", sp[i].rule);
	free(sp);
	return out;
}

/* Sanitizes with the default tokens; returns a static copy of the text (or "ERROR ..."). */
static const char *san_s(const mb_pii_detector *d, const unsigned char *key, const char *text)
{
	static char out[65536];
	mb_pii_result r;
	if (mb_pii_sanitize(d, key, text, strlen(text), MB_PII_ALL, NULL, NULL, NULL, &r, err,
			    sizeof err) != 0) {
		snprintf(out, sizeof out, "ERROR %s", err);
		return out;
	}
	snprintf(out, sizeof out, "%s", r.text);
	mb_pii_result_free(&r);
	return out;
}

static const char *tok(const unsigned char *key, const char *type, const char *value)
{
	static char t[4][MB_PII_TOKEN_MAX];
	static int k;
	k = (k + 1) & 3;
	if (mb_pii_token(key, type, value, strlen(value), MB_PII_HEX_MIN, t[k]) != 0)
		return "BAD";
	return t[k];
}

/* ---- validators ------------------------------------------------------------------------------ */

TEST(luhn)
{
	CHECK(mb_pii_luhn_ok("4111111111111111", 16) == 1);
	CHECK(mb_pii_luhn_ok("4111111111111112", 16) == 0);
	CHECK(mb_pii_luhn_ok("4111 1111 1111 1111", 19) == 1);
	CHECK(mb_pii_luhn_ok("4111-1111-1111-1111", 19) == 1);
	CHECK(mb_pii_luhn_ok("378282246310005", 15) == 1);
	CHECK(mb_pii_luhn_ok("4222222222222", 13) == 1);
	CHECK(mb_pii_luhn_ok("411111111111", 12) == 0);             /* 12 digits */
	CHECK(mb_pii_luhn_ok("41111111111111111111", 20) == 0);     /* 20 digits */
	CHECK(mb_pii_luhn_ok("4111x11111111111", 16) == 0);
	CHECK(mb_pii_luhn_ok("4111.1111.1111.1111", 19) == 0);
	CHECK(mb_pii_luhn_ok("", 0) == 0);
	CHECK(mb_pii_luhn_ok("0000000000000000", 16) == 1);         /* the checksum alone */
}

TEST(iban_mod97)
{
	CHECK(mb_pii_iban_ok("DE89370400440532013000", 22) == 1);
	CHECK(mb_pii_iban_ok("DE89 3704 0044 0532 0130 00", 27) == 1);
	CHECK(mb_pii_iban_ok("GB82WEST12345698765432", 22) == 1);
	CHECK(mb_pii_iban_ok("NO9386011117947", 15) == 1);
	CHECK(mb_pii_iban_ok("FR1420041010050500013M02606", 27) == 1);
	CHECK(mb_pii_iban_ok("DE88370400440532013000", 22) == 0);   /* check digits */
	CHECK(mb_pii_iban_ok("DE89370400440532013001", 22) == 0);   /* one digit changed */
	CHECK(mb_pii_iban_ok("DE8937040044053201300", 21) == 0);    /* DE is 22 long */
	CHECK(mb_pii_iban_ok("XX89370400440532013000", 22) == 0);   /* no such country */
	CHECK(mb_pii_iban_ok("US89370400440532013000", 22) == 0);
	CHECK(mb_pii_iban_ok("de89370400440532013000", 22) == 0);   /* lower case */
	CHECK(mb_pii_iban_ok("DE89  3704 0044 0532 0130 00", 28) == 0);  /* double space */
	CHECK(mb_pii_iban_ok(" DE89370400440532013000", 23) == 0);
	CHECK(mb_pii_iban_ok("DE89370400440532013000 ", 23) == 0);
}

TEST(ssn_ranges)
{
	CHECK(mb_pii_ssn_ok("123-45-6789", 11) == 1);
	CHECK(mb_pii_ssn_ok("899-45-6789", 11) == 1);
	CHECK(mb_pii_ssn_ok("123 45 6789", 11) == 1);
	CHECK(mb_pii_ssn_ok("123456789", 9) == 1);
	CHECK(mb_pii_ssn_ok("000-45-6789", 11) == 0);   /* area 000 */
	CHECK(mb_pii_ssn_ok("666-45-6789", 11) == 0);   /* area 666 */
	CHECK(mb_pii_ssn_ok("900-45-6789", 11) == 0);   /* area 9xx */
	CHECK(mb_pii_ssn_ok("999-45-6789", 11) == 0);
	CHECK(mb_pii_ssn_ok("123-00-6789", 11) == 0);   /* group 00 */
	CHECK(mb_pii_ssn_ok("123-45-0000", 11) == 0);   /* serial 0000 */
	CHECK(mb_pii_ssn_ok("000000000", 9) == 0);
	CHECK(mb_pii_ssn_ok("123-45 6789", 11) == 0);   /* mixed separators */
	CHECK(mb_pii_ssn_ok("12a-45-6789", 11) == 0);
	CHECK(mb_pii_ssn_ok("12345678", 8) == 0);
}

TEST(ipv4_octets)
{
	CHECK(mb_pii_ipv4_ok("0.0.0.0", 7) == 1);
	CHECK(mb_pii_ipv4_ok("255.255.255.255", 15) == 1);
	CHECK(mb_pii_ipv4_ok("192.168.1.1", 11) == 1);
	CHECK(mb_pii_ipv4_ok("256.1.1.1", 9) == 0);
	CHECK(mb_pii_ipv4_ok("1.2.3.256", 9) == 0);
	CHECK(mb_pii_ipv4_ok("999.1.1.1", 9) == 0);
	CHECK(mb_pii_ipv4_ok("1.2.3", 5) == 0);
	CHECK(mb_pii_ipv4_ok("1.2.3.4.5", 9) == 0);
	CHECK(mb_pii_ipv4_ok("01.2.3.4", 8) == 0);      /* leading zero */
	CHECK(mb_pii_ipv4_ok("1.2.3.04", 8) == 0);
	CHECK(mb_pii_ipv4_ok("1..2.3", 6) == 0);
	CHECK(mb_pii_ipv4_ok("1.2.3.4 ", 8) == 0);
	CHECK(mb_pii_ipv4_ok("1234.1.1.1", 10) == 0);
}

/* ---- detection -------------------------------------------------------------------------------- */

TEST(each_type_with_offsets)
{
	mb_pii_detector *d = new_det(NULL);
	const char *t = "mail jane@example.com, call (415) 555-2671, ssn 536-22-8126, card "
			"4111 1111 1111 1111, from 10.0.0.5 and 2001:db8::1, token=ghp_"
			"aB3dE6gH9jK2mN5pQ8rS1tU4vW7xY0zA2bC5, iban DE89370400440532013000.";
	CHECK_STR(scan_s(d, t), "EMAIL:jane@example.com|PHONE:(415) 555-2671|SSN:536-22-8126|"
		  "CARD:4111 1111 1111 1111|IPV4:10.0.0.5|IPV6:2001:db8::1|"
		  "SECRET:ghp_aB3dE6gH9jK2mN5pQ8rS1tU4vW7xY0zA2bC5|IBAN:DE89370400440532013000");
	mb_pii_span *sp;
	size_t n;
	CHECK(mb_pii_scan(d, t, strlen(t), MB_PII_ALL, NULL, &sp, &n, err, sizeof err) == 0);
	CHECK(n == 8);
	if (n == 8) {
		CHECK(sp[0].start == 5 && sp[0].stop == 21);        /* 0-based, stop exclusive */
		CHECK(sp[0].type == MB_PII_EMAIL);
		CHECK_STR(sp[0].rule, "email");
		CHECK_STR(sp[6].rule, "github_token");
		CHECK(sp[7].stop == strlen(t) - 1);
	}
	free(sp);
	CHECK(mb_pii_type_count(d) == MB_PII_NBUILTIN);
	CHECK_STR(mb_pii_type_name(d, MB_PII_IBAN), "IBAN");
	CHECK(mb_pii_type_name(d, MB_PII_NBUILTIN) == NULL);
	CHECK(mb_pii_type_name(d, -1) == NULL);
	CHECK_STR(mb_pii_type_name(NULL, MB_PII_SSN), "SSN");
	CHECK(mb_pii_type_find(d, "ipv6") == MB_PII_IPV6);
	CHECK(mb_pii_type_find(d, "NOPE") == -1);
	CHECK(mb_pii_type_find(NULL, "Card") == MB_PII_CARD);
	mb_pii_detector_free(d);
}

TEST(rule_edges)
{
	mb_pii_detector *d = new_det(NULL);
	/* IPv4: a dotted quad is an address; not inside longer dotted runs or next to letters */
	CHECK_STR(scan_s(d, "version 1.2.3.4"), "IPV4:1.2.3.4");
	CHECK_STR(scan_s(d, "v1.2.3.4 999.1.1.1 1.2.3.4.5 01.2.3.4 1.2.3"), "");
	/* IPv6: not "::", "::1", times, MACs, C++ scopes */
	CHECK_STR(scan_s(d, ":: ::1 12:30:45 00:1a:2b:3c:4d:5e std::vector a::b Dead::Beef"), "");
	CHECK_STR(scan_s(d, "fe80::1 and ::ffff:192.0.2.128"), "IPV6:fe80::1|IPV6:::ffff:192.0.2.128");
	/* SSN: dashed always; spaced or bare only after a keyword, with no digits between */
	CHECK_STR(scan_s(d, "id 123-45-6789"), "SSN:123-45-6789");
	CHECK_STR(scan_s(d, "id 123 45 6789 / 123456789"), "");
	CHECK_STR(scan_s(d, "SSN 123 45 6789"), "SSN:123 45 6789");
	CHECK_STR(scan_s(d, "ssn: 123456789"), "SSN:123456789");
	CHECK_STR(scan_s(d, "ssn 536228126 or 123456789"), "SSN:536228126");
	CHECK_STR(scan_s(d, "ssn 666-12-3456 900-12-3456 123-00-4567 123-45-0000"), "");
	/* phones: formatted NANP; bare ten digits only with +1 or a keyword */
	CHECK_STR(scan_s(d, "order 4155552671"), "");
	CHECK_STR(scan_s(d, "phone 4155552671"), "PHONE:4155552671");
	CHECK_STR(scan_s(d, "+14155552671"), "PHONE:+14155552671");
	CHECK_STR(scan_s(d, "call 123-456-7890"), "");                 /* area code 123 */
	CHECK_STR(scan_s(d, "+44 20 7946 0958 24 hours"), "PHONE:+44 20 7946 0958");
	CHECK_STR(scan_s(d, "+12345678 +1234567890 +5 points"), "");
	/* cards: Luhn and issuer prefix */
	CHECK_STR(scan_s(d, "4111111111111112 1712345678901 9999999999999995"), "");
	CHECK_STR(scan_s(d, "card 5555-5555-5555-4444."), "CARD:5555-5555-5555-4444");
	CHECK_STR(scan_s(d, "0.4111111111111111 4111 1111 1111 1111 1111"), "");
	/* e-mail: not scp remotes, URL userinfo, retina files or package versions */
	CHECK_STR(scan_s(d, "git@github.com:org/repo.git https://u@host.example.com/ icon@2x.png "
			 "lodash@4.17.21 user@localhost"), "");
	CHECK_STR(scan_s(d, "Contact john@example.com: he knows"), "EMAIL:john@example.com");
	/* followed by a character that is not ASCII (a closing curly quote, an em dash, CJK
	 * punctuation, a stray byte): still an address, the value ends at the TLD */
	CHECK_STR(scan_s(d, "ann@example.org\xe2\x80\x9d."), "EMAIL:ann@example.org");
	CHECK_STR(scan_s(d, "ann@example.org\xe2\x80\x94ok"), "EMAIL:ann@example.org");
	CHECK_STR(scan_s(d, "mail ann@example.org\xe3\x80\x82"), "EMAIL:ann@example.org");
	CHECK_STR(scan_s(d, "mail ann@example.org\xff"), "EMAIL:ann@example.org");
	/* nor is such punctuation before it part of the value (the token would restore with it) */
	CHECK_STR(scan_s(d, "write to \xe2\x80\x9c" "ann@example.org\xe2\x80\x9d."), "EMAIL:ann@example.org");
	CHECK_STR(scan_s(d, "\xc2\xab" "ann@example.org\xc2\xbb"), "EMAIL:ann@example.org");
	CHECK_STR(scan_s(d, "x \xe2\x80\x94" "ann@example.org"), "EMAIL:ann@example.org");
	CHECK_STR(scan_s(d, "\xe3\x80\x8c" "ann@example.org\xe3\x80\x8d"), "EMAIL:ann@example.org");
	CHECK_STR(scan_s(d, "\xef\xbc\x88" "ann@example.org\xef\xbc\x89"), "EMAIL:ann@example.org");
	CHECK_STR(scan_s(d, "j\xc3\xb6rg@example.org"), "EMAIL:j\xc3\xb6rg@example.org"); /* letters stay */
	/* secrets */
	CHECK_STR(scan_s(d, "password: ******** token: expired api_key: YOUR_API_KEY pwd=/home/x"), "");
	CHECK_STR(scan_s(d, "password_reset_url: https://x.example/reset token_type: Bearer"), "");
	CHECK_STR(scan_s(d, "\"password\": \"hunter22\""), "SECRET:hunter22");
	CHECK_STR(scan_s(d, "postgres://app:S3cretPass@db.example.com/x"), "SECRET:S3cretPass");
	CHECK_STR(rules_s(d, "postgres://app:S3cretPass@db.example.com/x"), "url_credentials");
	CHECK_STR(scan_s(d, "AKIAXXXXXXXXXXXXXXXX ghp_short xoxb-1"), "");
	CHECK_STR(scan_s(d, "key AKIAIOSFODNN7EXAMPLE."), "SECRET:AKIAIOSFODNN7EXAMPLE");
	/* a JWT whose header is not JSON with "alg" is not one */
	CHECK_STR(scan_s(d, "eyJub3QganNvbiBhdCBhbGw.eyJzdWIiOiIxIn0.c2ln"), "");
	CHECK_STR(rules_s(d, "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"), "jwt");
	/* PEM: with END, and truncated */
	CHECK_STR(scan_s(d, "k=-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY----- ok"),
		  "SECRET:-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----");
	CHECK_STR(scan_s(d, "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADAN\nBgkqhkiG end"),
		  "SECRET:-----BEGIN PRIVATE KEY-----\nMIIEvQIBADAN\nBgkqhkiG");
	CHECK_STR(scan_s(d, "-----BEGIN PUBLIC KEY-----\nMFkwEwYH\n-----END PUBLIC KEY-----"), "");
	/* IBAN cut at the country's length; glued text is not one */
	CHECK_STR(scan_s(d, "GB82 WEST 1234 5698 7654 32 EUR"), "IBAN:GB82 WEST 1234 5698 7654 32");
	CHECK_STR(scan_s(d, "DE89370400440532013000X DE88370400440532013000"), "");
	/* IBANs whose first digit run is long or short, glued or spaced */
	CHECK_STR(scan_s(d, "KZ86125KZT5004100100 GB33BUKB20201555555555 NO93 8601 1117 947"),
		  "IBAN:KZ86125KZT5004100100|IBAN:GB33BUKB20201555555555|IBAN:NO93 8601 1117 947");
	mb_pii_detector_free(d);
}

/* Overlaps: earliest start, then longest, then custom types in configuration order, then
 * SECRET, EMAIL, IBAN, CARD, SSN, PHONE, IPV6, IPV4. */
TEST(overlap_rules)
{
	mb_pii_detector *d = new_det(NULL);
	/* same span: SECRET wins over EMAIL */
	CHECK_STR(scan_s(d, "password=john@example.com"), "SECRET:john@example.com");
	mb_pii_detector_free(d);

	mb_pii_custom c[] = {
		{ "AAA", "abc\\d+" }, { "BBB", "c\\d+x" },          /* earliest start */
		{ "SHORT", "pq" }, { "LONG", "pqrs" },               /* longest */
		{ "FIRST", "zz\\d" }, { "SECOND", "zz\\d" },         /* tie: configuration order */
		{ "MYSSN", "\\d{3}-\\d{2}-\\d{4}" },                 /* tie with a built-in */
		{ "G1", "g1234" }, { "G2", "34567" }, { "G3", "678" },  /* greedy: G1, G3 */
	};
	mb_pii_options o = { .custom = c, .ncustom = sizeof c / sizeof c[0] };
	d = new_det(&o);
	CHECK(d != NULL);
	if (!d)
		return;
	CHECK_STR(scan_s(d, "abc123x"), "AAA:abc123");
	CHECK_STR(scan_s(d, "pqrs"), "LONG:pqrs");
	CHECK_STR(scan_s(d, "zz1"), "FIRST:zz1");
	CHECK_STR(scan_s(d, "ssn 123-45-6789"), "MYSSN:123-45-6789");
	CHECK_STR(scan_s(d, "g12345678"), "G1:g1234|G3:678");
	/* scanning twice gives the same answer (no state kept between calls) */
	CHECK_STR(scan_s(d, "g12345678 abc1x"), "G1:g1234|G3:678|AAA:abc1");
	CHECK_STR(scan_s(d, "g12345678 abc1x"), "G1:g1234|G3:678|AAA:abc1");
	mb_pii_detector_free(d);
}

TEST(existing_tokens_are_left_alone)
{
	mb_pii_custom c[] = { { "HEXY", "[0-9a-f]{8}" }, { "TAIL", "b\\] x" } };
	mb_pii_options o = { .custom = c, .ncustom = 2 };
	mb_pii_detector *d = new_det(&o);
	CHECK(d != NULL);
	if (!d)
		return;
	CHECK_STR(scan_s(d, "[EMAIL_3f9a0c1b] x"), "");
	CHECK_STR(scan_s(d, "[CARD_4111111111111111]"), "");              /* digits inside a token */
	CHECK_STR(scan_s(d, "[PHONE_415555267100aa]"), "");
	CHECK_STR(scan_s(d, "[MY_TYPE_2_0123456789abcdef]"), "");
	CHECK_STR(scan_s(d, "[NOT A TOKEN 4111111111111111]"), "CARD:4111111111111111");
	CHECK_STR(scan_s(d, "[EMAIL_3F9A0C1B] 3f9a0c1b"), "HEXY:3f9a0c1b");  /* upper-case hex */
	mb_pii_detector_free(d);

	CHECK(mb_pii_token_check("[EMAIL_3f9a0c1b]", 16, NULL) == 16);
	CHECK(mb_pii_token_check("[EMAIL_3f9a0c1b] tail", 21, "EMAIL") == 16);
	CHECK(mb_pii_token_check("[EMAIL_3f9a0c1b]", 16, "PHONE") == 0);
	CHECK(mb_pii_token_check("[EMAIL_3f9a0c1b]", 16, "EMAI") == 0);
	CHECK(mb_pii_token_check("[A_12345678]", 12, NULL) == 12);
	CHECK(mb_pii_token_check("[A_0123456789abcdef]", 20, NULL) == 20);
	CHECK(mb_pii_token_check("[A_0123456789abcdef0]", 21, NULL) == 0);  /* 17 hex */
	CHECK(mb_pii_token_check("[A_1234567]", 11, NULL) == 0);            /* 7 hex */
	CHECK(mb_pii_token_check("[EMAIL_3F9A0C1B]", 16, NULL) == 0);
	CHECK(mb_pii_token_check("[email_3f9a0c1b]", 16, NULL) == 0);
	CHECK(mb_pii_token_check("[_3f9a0c1b]", 11, NULL) == 0);
	CHECK(mb_pii_token_check("[1A_3f9a0c1b]", 13, NULL) == 0);
	CHECK(mb_pii_token_check("[EMAIL_3f9a0c1b", 15, NULL) == 0);
	CHECK(mb_pii_token_check("[EMAIL_3f9a0c1b]", 15, NULL) == 0);       /* cut short */
	CHECK(mb_pii_token_check("[EMAIL-3f9a0c1b]", 16, NULL) == 0);
	char name32[64], name33[64];
	snprintf(name32, sizeof name32, "[%s_3f9a0c1b]", "ABCDEFGHIJKLMNOPQRSTUVWXYZ_12345");
	snprintf(name33, sizeof name33, "[%s_3f9a0c1b]", "ABCDEFGHIJKLMNOPQRSTUVWXYZ_123456");
	CHECK(mb_pii_token_check(name32, strlen(name32), NULL) == strlen(name32));
	CHECK(mb_pii_token_check(name33, strlen(name33), NULL) == 0);

	const char *t = "a [b] [EMAIL_3f9a0c1b] [X_1] [IPV4_0011223344556677]";
	size_t pos = 0, tl = 0;
	CHECK(mb_pii_token_next(t, strlen(t), &pos, &tl) == 1 && pos == 6 && tl == 16);
	pos += tl;
	CHECK(mb_pii_token_next(t, strlen(t), &pos, &tl) == 1 && pos == 29 && tl == 23);
	pos += tl;
	CHECK(mb_pii_token_next(t, strlen(t), &pos, &tl) == 0);
}

/* ---- custom patterns and options --------------------------------------------------------------- */

TEST(custom_patterns)
{
	mb_pii_custom c[] = {
		{ "employee_id", "emp[-_]id[:=]\\s*(\\d{6})" },   /* a group: the value */
		{ "email", "[a-z]+ at [a-z]+ dot com" },           /* adds to a built-in type */
		{ "ticket", "TCK-\\d+" },
	};
	mb_pii_options o = { .custom = c, .ncustom = 3 };
	mb_pii_detector *d = new_det(&o);
	CHECK(d != NULL);
	if (!d)
		return;
	CHECK(mb_pii_type_count(d) == MB_PII_NBUILTIN + 2);
	CHECK_STR(mb_pii_type_name(d, MB_PII_NBUILTIN), "EMPLOYEE_ID");
	CHECK_STR(mb_pii_type_name(d, MB_PII_NBUILTIN + 1), "TICKET");
	CHECK(mb_pii_type_find(d, "employee_id") == MB_PII_NBUILTIN);
	CHECK_STR(scan_s(d, "emp_id: 123456 and TCK-42"), "EMPLOYEE_ID:123456|TICKET:TCK-42");
	CHECK_STR(scan_s(d, "write jane at example dot com"), "EMAIL:jane at example dot com");
	CHECK_STR(rules_s(d, "TCK-1"), "TICKET");
	char out[256];
	uint64_t only_ticket = 1ull << (MB_PII_NBUILTIN + 1);
	CHECK(scan_to(d, "emp_id=123456 TCK-7 a@b.io", 26, only_ticket, out, sizeof out) == 0);
	CHECK_STR(out, "TICKET:TCK-7");
	mb_pii_detector_free(d);

	/* a pattern that can match empty does not loop */
	mb_pii_custom e[] = { { "EMPTY", "x*" } };
	mb_pii_options oe = { .custom = e, .ncustom = 1 };
	d = new_det(&oe);
	CHECK_STR(scan_s(d, "aaxxa"), "EMPTY:xx");
	mb_pii_detector_free(d);
}

static void expect_error(const mb_pii_options *o, const char *msg)
{
	err[0] = '\0';
	mb_pii_detector *d = mb_pii_detector_new(o, err, sizeof err);
	CHECK(d == NULL);
	CHECK_STR(err, msg);
	mb_pii_detector_free(d);
}

TEST(custom_pattern_errors)
{
	mb_pii_custom bad_paren[] = { { "ok", "a" }, { "bad", "(abc" } };
	mb_pii_options o = { .custom = bad_paren, .ncustom = 2 };
	expect_error(&o, "pii: custom pattern BAD (#2): missing closing parenthesis at offset 4");

	mb_pii_custom utf[] = { { "U", "(*UTF)x" } };
	o = (mb_pii_options){ .custom = utf, .ncustom = 1 };
	expect_error(&o, "pii: custom pattern U (#1): using UTF is disabled by the application at "
		     "offset 6");

	const char *names[] = { "9x", "a-b", "", "ABCDEFGHIJKLMNOPQRSTUVWXYZ_1234567", "_x", "é" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		mb_pii_custom n[] = { { names[i], "x" } };
		o = (mb_pii_options){ .custom = n, .ncustom = 1 };
		char want[256];
		snprintf(want, sizeof want, "pii: custom pattern #1 has an invalid name \"%s\" (after "
			 "upper-casing it must match ^[A-Z][A-Z0-9_]{0,31}$)", names[i]);
		expect_error(&o, want);
	}
	mb_pii_custom nul[] = { { NULL, "x" } };
	o = (mb_pii_options){ .custom = nul, .ncustom = 1 };
	expect_error(&o, "pii: custom pattern #1 has an invalid name \"(null)\" (after upper-casing "
		     "it must match ^[A-Z][A-Z0-9_]{0,31}$)");
	mb_pii_custom nopat[] = { { "X", NULL } };
	o = (mb_pii_options){ .custom = nopat, .ncustom = 1 };
	expect_error(&o, "pii: custom pattern X (#1) has an empty pattern");
	mb_pii_custom empty[] = { { "X", "" } };
	o = (mb_pii_options){ .custom = empty, .ncustom = 1 };
	expect_error(&o, "pii: custom pattern X (#1) has an empty pattern");

	mb_pii_custom longp[] = { { "LONG", "aaaaaaaaaaaaaaaaaaaaa" } };
	o = (mb_pii_options){ .custom = longp, .ncustom = 1, .max_pattern_bytes = 20 };
	expect_error(&o, "pii: custom pattern LONG (#1) is 21 bytes, above max_pattern_bytes=20");

	o = (mb_pii_options){ .custom = NULL, .ncustom = 2 };
	expect_error(&o, "pii: 2 custom patterns given without the array");

	static mb_pii_custom many[65];
	static char nm[65][16];
	for (int i = 0; i < 65; i++) {
		snprintf(nm[i], sizeof nm[i], "T%d", i);
		many[i].name = nm[i];
		many[i].pattern = "x";
	}
	o = (mb_pii_options){ .custom = many, .ncustom = 65 };
	expect_error(&o, "pii: 65 custom patterns, above the limit of 64");
	o = (mb_pii_options){ .custom = many, .ncustom = 57 };
	expect_error(&o, "pii: too many custom types at T56 (#57): at most 56 distinct names");
	o = (mb_pii_options){ .custom = many, .ncustom = 56 };
	mb_pii_detector *d = new_det(&o);
	CHECK(d != NULL && mb_pii_type_count(d) == MB_PII_MAX_TYPES);
	char out[64];
	CHECK(d && scan_to(d, "x", 1, 1ull << 63, out, sizeof out) == 0);
	CHECK_STR(out, "T55:x");
	mb_pii_detector_free(d);
}

TEST(match_limit_fails_closed)
{
	mb_pii_custom c[] = { { "SLOW", "(a+)+$" } };
	mb_pii_options o = { .custom = c, .ncustom = 1, .match_limit = 1000 };
	mb_pii_detector *d = new_det(&o);
	CHECK(d != NULL);
	if (!d)
		return;
	const char *t = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaab";
	mb_pii_span *sp = (mb_pii_span *)1;
	size_t n = 7;
	CHECK(mb_pii_scan(d, t, strlen(t), MB_PII_ALL, NULL, &sp, &n, err, sizeof err) == MB_PII_ELIMIT);
	CHECK(sp == NULL && n == 0);
	CHECK_STR(err, "pii: rule SLOW stopped by the PCRE2 match limit (match_limit=1000) searching "
		  "from byte 0");
	mb_pii_result r;
	CHECK(mb_pii_sanitize(d, KEY1, t, strlen(t), MB_PII_ALL, NULL, NULL, NULL, &r, err,
			      sizeof err) == MB_PII_ELIMIT);
	CHECK(r.text == NULL && r.found == NULL && r.counts == NULL);
	mb_pii_detector_free(d);
}

TEST(disabled_types)
{
	mb_pii_options o = { .disabled = (1ull << MB_PII_EMAIL) | (1ull << MB_PII_IPV4) };
	mb_pii_detector *d = new_det(&o);
	CHECK(d != NULL);
	if (!d)
		return;
	CHECK(mb_pii_type_enabled(d, MB_PII_EMAIL) == 0);
	CHECK(mb_pii_type_enabled(d, MB_PII_IPV4) == 0);
	CHECK(mb_pii_type_enabled(d, MB_PII_PHONE) == 1);
	CHECK(mb_pii_type_enabled(d, 99) == 0);
	const char *t = "a@example.com 10.0.0.1 (415) 555-2671";
	CHECK_STR(scan_s(d, t), "PHONE:(415) 555-2671");
	CHECK_STR(san_s(d, KEY1, "a@example.com"), "a@example.com");
	mb_pii_detector_free(d);

	d = new_det(NULL);
	char out[256];
	CHECK(scan_to(d, t, strlen(t), MB_PII_ALL & ~(1ull << MB_PII_PHONE), out, sizeof out) == 0);
	CHECK_STR(out, "EMAIL:a@example.com|IPV4:10.0.0.1");
	CHECK(scan_to(d, t, strlen(t), 0, out, sizeof out) == 0);
	CHECK_STR(out, "");
	mb_pii_detector_free(d);
}

/* ---- hostile input ------------------------------------------------------------------------------ */

TEST(invalid_utf8_and_binary)
{
	mb_pii_detector *d = new_det(NULL);
	static const char t[] = "\xff\xfe\xc3(\x80 caf\xc3\xa9@example.com \0 a@example.org \xed\xa0\x80"
				"4111111111111111\xf8";
	char out[512];
	CHECK(scan_to(d, t, sizeof t - 1, MB_PII_ALL, out, sizeof out) == 0);
	CHECK_STR(out, "EMAIL:caf\xc3\xa9@example.com|EMAIL:a@example.org|CARD:4111111111111111");
	/* random bytes of every value, several seeds: no crash, deterministic */
	size_t n = 1 << 20;
	unsigned char *b = malloc(n);
	uint64_t x = 88172645463325252ull;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		b[i] = (unsigned char)x;
	}
	mb_pii_span *s1, *s2;
	size_t n1, n2;
	CHECK(mb_pii_scan(d, (char *)b, n, MB_PII_ALL, NULL, &s1, &n1, err, sizeof err) == 0);
	CHECK(mb_pii_scan(d, (char *)b, n, MB_PII_ALL, NULL, &s2, &n2, err, sizeof err) == 0);
	CHECK(n1 == n2 && (n1 == 0 || memcmp(s1, s2, n1 * sizeof *s1) == 0));
	for (size_t i = 0; i < n1; i++)
		CHECK(s1[i].start < s1[i].stop && s1[i].stop <= n && (i == 0 || s1[i].start >= s1[i - 1].stop));
	free(s1);
	free(s2);
	mb_pii_result r;
	CHECK(mb_pii_sanitize(d, KEY1, (char *)b, n, MB_PII_ALL, NULL, NULL, NULL, &r, err,
			      sizeof err) == 0);
	mb_pii_result r2;
	CHECK(mb_pii_sanitize(d, KEY1, r.text, r.len, MB_PII_ALL, NULL, NULL, NULL, &r2, err,
			      sizeof err) == 0);
	CHECK(r2.len == r.len && memcmp(r2.text, r.text, r.len) == 0 && r2.total == 0);
	mb_pii_result_free(&r);
	mb_pii_result_free(&r2);
	free(b);
	/* empty and NULL text */
	mb_pii_span *sp = (mb_pii_span *)1;
	size_t k = 5;
	CHECK(mb_pii_scan(d, NULL, 0, MB_PII_ALL, NULL, &sp, &k, err, sizeof err) == 0 && !sp && !k);
	CHECK(mb_pii_sanitize(d, KEY1, "", 0, MB_PII_ALL, NULL, NULL, NULL, &r, err, sizeof err) == 0);
	CHECK(r.text && r.len == 0 && r.text[0] == '\0' && r.nfound == 0 && r.total == 0);
	mb_pii_result_free(&r);
	mb_pii_detector_free(d);
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static char *repeat(const char *unit, size_t total, size_t *len)
{
	size_t ul = strlen(unit), n = total / ul;
	char *b = malloc(n * ul + 1);
	for (size_t i = 0; i < n; i++)
		memcpy(b + i * ul, unit, ul);
	b[n * ul] = '\0';
	*len = n * ul;
	return b;
}

/* Large and hostile inputs finish in linear time. Bounds are generous (sanitizer builds and a
 * shared machine): a quadratic case would take minutes. */
TEST(huge_and_hostile_inputs)
{
	mb_pii_detector *d = new_det(NULL);
	mb_pii_scratch *s = mb_pii_scratch_new(d);
	static const struct {
		const char *unit;
		size_t spans_per_unit, extra;
	} cases[] = {
		{ "2024-03-15T10:23:45Z INFO user=jane@example.com ip=10.1.2.3 took 12ms\n", 2, 0 },
		{ "-----BEGIN RSA PRIVATE KEY-----", 1, 0 },
		{ "token:", 0, 0 },
		{ "password=", 0, 1 },     /* the last pair: password=password= */
		{ "x@", 0, 0 },
		{ "://a:bcd@", 1, 0 },
		{ "1 ", 0, 0 },
		{ "4111 ", 0, 0 },
		{ "1::", 0, 0 },
		{ "eyJ", 0, 0 },
		{ "GB82 ", 0, 0 },
		{ "[EMAIL_3f9a0c1b]", 0, 0 },
		{ "ghp_", 0, 0 },
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		size_t len;
		char *b = repeat(cases[c].unit, 4u << 20, &len);
		mb_pii_span *sp;
		size_t n;
		double t0 = now_ms();
		int rc = mb_pii_scan(d, b, len, MB_PII_ALL, s, &sp, &n, err, sizeof err);
		double ms = now_ms() - t0;
		CHECK(rc == 0);
		size_t units = len / strlen(cases[c].unit);
		size_t want = units * cases[c].spans_per_unit + cases[c].extra;
		if (n != want || ms > 20000) {
			unit_failed_checks++;
			fprintf(stderr, "  FAIL unit \"%s\": %zu spans (want %zu), %.0f ms\n", cases[c].unit,
				n, want, ms);
		}
		free(sp);
		free(b);
	}
	/* one 32 MB line of mixed text, sanitized */
	size_t len;
	char *b = repeat("id=7 mail a.b@example.com, tel (415) 555-2671; note: nothing to see here. ",
			 32u << 20, &len);
	mb_pii_result r;
	double t0 = now_ms();
	CHECK(mb_pii_sanitize(d, KEY1, b, len, MB_PII_ALL, NULL, NULL, s, &r, err, sizeof err) == 0);
	CHECK(now_ms() - t0 < 60000);
	CHECK(r.nfound == 2 && r.total == 2 * (len / 74));
	CHECK(r.counts[MB_PII_EMAIL] == len / 74 && r.counts[MB_PII_PHONE] == len / 74);
	mb_pii_result_free(&r);
	free(b);
	mb_pii_scratch_free(s);
	mb_pii_detector_free(d);
}

/* ---- tokens and sanitizing ----------------------------------------------------------------------- */

TEST(token_format_and_keys)
{
	char t[MB_PII_TOKEN_MAX], t2[MB_PII_TOKEN_MAX];
	CHECK(mb_pii_token(KEY1, "EMAIL", "a@b.co", 6, 8, t) == 0);
	CHECK(strlen(t) == 16 && mb_pii_token_check(t, 16, "EMAIL") == 16);
	/* known answer: HMAC-SHA256(key, "EMAIL\0a@b.co"), first 8 hex digits */
	unsigned char mac[32];
	crypto_auth_hmacsha256_state st;
	crypto_auth_hmacsha256_init(&st, KEY1, 32);
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)"EMAIL\0a@b.co", 12);
	crypto_auth_hmacsha256_final(&st, mac);
	char want[32];
	snprintf(want, sizeof want, "[EMAIL_%02x%02x%02x%02x]", mac[0], mac[1], mac[2], mac[3]);
	CHECK_STR(t, want);
	CHECK(mb_pii_token(KEY1, "EMAIL", "a@b.co", 6, 16, t2) == 0);
	CHECK(strlen(t2) == 24 && strncmp(t2, t, 15) == 0);          /* a longer prefix */
	CHECK(mb_pii_token(KEY1, "EMAIL", "a@b.co", 6, 12, t2) == 0 && strlen(t2) == 20);
	CHECK(mb_pii_token(KEY2, "EMAIL", "a@b.co", 6, 8, t2) == 0 && strcmp(t, t2) != 0);
	CHECK(mb_pii_token(KEY1, "PHONE", "a@b.co", 6, 8, t2) == 0 && strcmp(t + 6, t2 + 6) != 0);
	CHECK(mb_pii_token(KEY1, "EMAIL", "a@b.cO", 6, 8, t2) == 0 && strcmp(t, t2) != 0);
	CHECK(mb_pii_token(KEY1, "EMAIL", "a@b.co", 6, 7, t2) == MB_PII_ERR);
	CHECK(mb_pii_token(KEY1, "EMAIL", "a@b.co", 6, 17, t2) == MB_PII_ERR);
	CHECK(mb_pii_token(KEY1, "email", "a@b.co", 6, 8, t2) == MB_PII_ERR);
	CHECK(mb_pii_token(KEY1, "", "a@b.co", 6, 8, t2) == MB_PII_ERR);
	CHECK(mb_pii_token(KEY1, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_123456", "x", 1, 8, t2) == MB_PII_ERR);
	CHECK(mb_pii_token(KEY1, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_12345", "x", 1, 16, t2) == 0);
	CHECK(strlen(t2) == MB_PII_TOKEN_MAX - 1);
	/* "type || 0x00 || value": EMAIL+"Xa" differs from EMAILX+"a" */
	CHECK(mb_pii_token(KEY1, "EMAIL", "Xa", 2, 8, t) == 0);
	CHECK(mb_pii_token(KEY1, "EMAILX", "a", 1, 8, t2) == 0);
	CHECK(strcmp(t + 6, t2 + 7) != 0);
	/* values with NUL bytes */
	CHECK(mb_pii_token(KEY1, "X", "a\0b", 3, 8, t) == 0);
	CHECK(mb_pii_token(KEY1, "X", "a\0c", 3, 8, t2) == 0 && strcmp(t, t2) != 0);
}

TEST(sanitize_result)
{
	mb_pii_detector *d = new_det(NULL);
	const char *in = "mail a@example.com and a@example.com, call (415) 555-2671";
	mb_pii_result r;
	CHECK(mb_pii_sanitize(d, KEY1, in, strlen(in), MB_PII_ALL, NULL, NULL, NULL, &r, err,
			      sizeof err) == 0);
	char want[512];
	snprintf(want, sizeof want, "mail %s and %s, call %s", tok(KEY1, "EMAIL", "a@example.com"),
		 tok(KEY1, "EMAIL", "a@example.com"), tok(KEY1, "PHONE", "(415) 555-2671"));
	CHECK_STR(r.text, want);
	CHECK(r.len == strlen(want));
	CHECK(r.nfound == 2 && r.total == 3 && r.ntypes == MB_PII_NBUILTIN);
	CHECK(r.counts[MB_PII_EMAIL] == 2 && r.counts[MB_PII_PHONE] == 1 && r.counts[MB_PII_SSN] == 0);
	if (r.nfound == 2) {
		CHECK_STR(r.found[0].token, tok(KEY1, "EMAIL", "a@example.com"));
		CHECK_STR(r.found[0].value, "a@example.com");
		CHECK(r.found[0].value_len == 13 && r.found[0].count == 2 &&
		      r.found[0].type == MB_PII_EMAIL);
		CHECK_STR(r.found[1].value, "(415) 555-2671");
		CHECK(r.found[1].count == 1);
	}
	mb_pii_result_free(&r);
	CHECK(r.text == NULL && r.nfound == 0);
	mb_pii_result_free(NULL);
	/* only some types */
	CHECK(mb_pii_sanitize(d, KEY1, in, strlen(in), 1ull << MB_PII_PHONE, NULL, NULL, NULL, &r,
			      err, sizeof err) == 0);
	snprintf(want, sizeof want, "mail a@example.com and a@example.com, call %s",
		 tok(KEY1, "PHONE", "(415) 555-2671"));
	CHECK_STR(r.text, want);
	mb_pii_result_free(&r);
	/* no key */
	CHECK(mb_pii_sanitize(d, NULL, in, strlen(in), MB_PII_ALL, NULL, NULL, NULL, &r, err,
			      sizeof err) == MB_PII_ERR);
	CHECK_STR(err, "pii: no key for tokens");
	mb_pii_detector_free(d);
}

TEST(token_stability_across_detectors)
{
	mb_pii_detector *a = new_det(NULL), *b = new_det(NULL);
	const char *in = "jane@example.com 10.0.0.1 536-22-8126 DE89370400440532013000";
	char s1[1024];
	snprintf(s1, sizeof s1, "%s", san_s(a, KEY1, in));
	CHECK_STR(san_s(b, KEY1, in), s1);
	CHECK(strcmp(san_s(b, KEY2, in), s1) != 0);
	char want[1024];
	snprintf(want, sizeof want, "%s %s %s %s", tok(KEY1, "EMAIL", "jane@example.com"),
		 tok(KEY1, "IPV4", "10.0.0.1"), tok(KEY1, "SSN", "536-22-8126"),
		 tok(KEY1, "IBAN", "DE89370400440532013000"));
	CHECK_STR(s1, want);
	mb_pii_detector_free(a);
	mb_pii_detector_free(b);
}

/* Idempotence: every corpus line, pairs of lines glued together, and a text whose second
 * round finds what the first could not. */
TEST(idempotence)
{
	mb_pii_detector *d = new_det(NULL);
	/* round 1 finds the e-mail; the phone touches "m" and is found only next to "]" */
	const char *in = "x@example.com+44 20 7946 0958";
	char want[256];
	snprintf(want, sizeof want, "%s%s", tok(KEY1, "EMAIL", "x@example.com"),
		 tok(KEY1, "PHONE", "+44 20 7946 0958"));
	CHECK_STR(san_s(d, KEY1, in), want);
	CHECK_STR(san_s(d, KEY1, want), want);

	FILE *f = fopen("tests/pii/corpus.jsonl", "r");
	CHECK(f != NULL);
	if (!f) {
		mb_pii_detector_free(d);
		return;
	}
	char *lines[1200];
	size_t nl = 0;
	char buf[16384];
	while (nl < 1200 && fgets(buf, sizeof buf, f))
		lines[nl++] = strdup(buf);   /* JSON text: PII inside JSON strings is PII too */
	fclose(f);
	CHECK(nl > 500);
	size_t bad = 0, changed = 0;
	for (size_t i = 0; i < nl * 3; i++) {
		char text[40000];
		if (i < nl)
			snprintf(text, sizeof text, "%s", lines[i]);
		else
			snprintf(text, sizeof text, "%s%s", lines[(i * 7919) % nl], lines[(i * 104729 + 1) % nl]);
		mb_pii_result r1, r2;
		if (mb_pii_sanitize(d, KEY1, text, strlen(text), MB_PII_ALL, NULL, NULL, NULL, &r1, err,
				    sizeof err) != 0) {
			bad++;
			continue;
		}
		changed += r1.total > 0;
		if (mb_pii_sanitize(d, KEY1, r1.text, r1.len, MB_PII_ALL, NULL, NULL, NULL, &r2, err,
				    sizeof err) != 0 || r2.len != r1.len || memcmp(r2.text, r1.text, r1.len) ||
		    r2.total != 0) {
			if (bad++ < 5)
				fprintf(stderr, "  not idempotent:\n    %s\n    %s\n", r1.text, r2.text);
		}
		mb_pii_result_free(&r1);
		mb_pii_result_free(&r2);
	}
	CHECK(bad == 0);
	CHECK(changed > 300);
	for (size_t i = 0; i < nl; i++)
		free(lines[i]);
	mb_pii_detector_free(d);
}

typedef struct {
	int calls;
	int mode;
	char seen[8][MB_PII_TOKEN_MAX];
} mint_ud;

static int test_mint(void *ud, const char *type, const char *value, size_t len,
		     char token[MB_PII_TOKEN_MAX], char *e, size_t elen)
{
	mint_ud *m = ud;
	if (m->calls < 8)
		snprintf(m->seen[m->calls], MB_PII_TOKEN_MAX, "%s", token);
	m->calls++;
	(void)value;
	(void)len;
	switch (m->mode) {
	case 0:  /* keep the default */
		return 0;
	case 1:  /* a longer token, as the vault does after a collision */
		return mb_pii_token(KEY1, type, value, len, 12, token);
	case 2:
		snprintf(token, MB_PII_TOKEN_MAX, "[%s_XYZ]", type);
		return 0;
	case 3:
		snprintf(e, elen, "vault: database is locked");
		return -1;
	case 4:
		snprintf(token, MB_PII_TOKEN_MAX, "[%s_0123456789abcdef]", type);
		return 0;
	case 5:
		snprintf(token, MB_PII_TOKEN_MAX, "[PHONE_01234567]");
		return 0;
	default:
		return -1;
	}
}

TEST(mint_callback)
{
	mb_pii_detector *d = new_det(NULL);
	const char *in = "a@example.com b@example.com a@example.com";
	mb_pii_result r;
	mint_ud m = { 0 };
	CHECK(mb_pii_sanitize(d, KEY1, in, strlen(in), MB_PII_ALL, test_mint, &m, NULL, &r, err,
			      sizeof err) == 0);
	CHECK(m.calls == 2);                              /* once per distinct value */
	CHECK_STR(m.seen[0], tok(KEY1, "EMAIL", "a@example.com"));
	CHECK_STR(m.seen[1], tok(KEY1, "EMAIL", "b@example.com"));
	mb_pii_result_free(&r);

	m = (mint_ud){ .mode = 1 };
	CHECK(mb_pii_sanitize(d, KEY1, in, strlen(in), MB_PII_ALL, test_mint, &m, NULL, &r, err,
			      sizeof err) == 0);
	char t12[MB_PII_TOKEN_MAX];
	mb_pii_token(KEY1, "EMAIL", "a@example.com", 13, 12, t12);
	CHECK(r.nfound == 2 && strcmp(r.found[0].token, t12) == 0);
	CHECK(strncmp(r.text, t12, strlen(t12)) == 0);
	mb_pii_result_free(&r);

	m = (mint_ud){ .mode = 2 };
	CHECK(mb_pii_sanitize(d, KEY1, in, strlen(in), MB_PII_ALL, test_mint, &m, NULL, &r, err,
			      sizeof err) == MB_PII_ERR);
	CHECK_STR(err, "pii: mint returned \"[EMAIL_XYZ]\" for type EMAIL; expected "
		  "[EMAIL_<8-16 lowercase hex digits>]");
	CHECK(r.text == NULL);
	m = (mint_ud){ .mode = 3 };
	CHECK(mb_pii_sanitize(d, KEY1, in, strlen(in), MB_PII_ALL, test_mint, &m, NULL, &r, err,
			      sizeof err) == MB_PII_ERR);
	CHECK_STR(err, "vault: database is locked");
	m = (mint_ud){ .mode = 4 };
	CHECK(mb_pii_sanitize(d, KEY1, in, strlen(in), MB_PII_ALL, test_mint, &m, NULL, &r, err,
			      sizeof err) == MB_PII_ERR);
	CHECK_STR(err, "pii: mint returned [EMAIL_0123456789abcdef] for two different values of "
		  "type EMAIL");
	m = (mint_ud){ .mode = 5 };
	CHECK(mb_pii_sanitize(d, KEY1, in, strlen(in), MB_PII_ALL, test_mint, &m, NULL, &r, err,
			      sizeof err) == MB_PII_ERR);
	CHECK_STR(err, "pii: mint returned \"[PHONE_01234567]\" for type EMAIL; expected "
		  "[EMAIL_<8-16 lowercase hex digits>]");
	m = (mint_ud){ .mode = 6 };
	CHECK(mb_pii_sanitize(d, KEY1, in, strlen(in), MB_PII_ALL, test_mint, &m, NULL, &r, err,
			      sizeof err) == MB_PII_ERR);
	CHECK_STR(err, "pii: mint callback failed");
	mb_pii_detector_free(d);
}

/* Two values whose default tokens collide get distinct tokens within one call. */
TEST(collision_lengthens_token)
{
	/* find two values "v<n>" with the same first 8 hex digits under KEY1 (birthday search) */
	size_t cap = 1u << 20;
	uint32_t *seen = calloc(cap, sizeof *seen);      /* hash of prefix -> n + 1 */
	uint32_t *pref = calloc(cap, sizeof *pref);
	long a = -1, b = -1;
	for (long n = 0; n < 2000000 && a < 0; n++) {
		char v[16], t[MB_PII_TOKEN_MAX];
		snprintf(v, sizeof v, "v%ld", n);
		mb_pii_token(KEY1, "VAL", v, strlen(v), 8, t);
		uint32_t p = (uint32_t)strtoul(t + 5, NULL, 16);
		size_t i = (p * 2654435761u) & (cap - 1);
		for (; seen[i]; i = (i + 1) & (cap - 1))
			if (pref[i] == p) {
				a = (long)seen[i] - 1;
				b = n;
				break;
			}
		if (a < 0) {
			seen[i] = (uint32_t)n + 1;
			pref[i] = p;
		}
	}
	free(seen);
	free(pref);
	CHECK(a >= 0);
	if (a < 0)
		return;
	mb_pii_custom c[] = { { "VAL", "\\bv\\d+\\b" } };
	mb_pii_options o = { .custom = c, .ncustom = 1 };
	mb_pii_detector *d = new_det(&o);
	char in[64];
	snprintf(in, sizeof in, "v%ld v%ld v%ld", a, b, a);
	mb_pii_result r;
	CHECK(mb_pii_sanitize(d, KEY1, in, strlen(in), MB_PII_ALL, NULL, NULL, NULL, &r, err,
			      sizeof err) == 0);
	CHECK(r.nfound == 2);
	if (r.nfound == 2) {
		char va[16], vb[16], ta[MB_PII_TOKEN_MAX], tb[MB_PII_TOKEN_MAX], want[3 * MB_PII_TOKEN_MAX + 8];
		snprintf(va, sizeof va, "v%ld", a);
		snprintf(vb, sizeof vb, "v%ld", b);
		mb_pii_token(KEY1, "VAL", va, strlen(va), 8, ta);
		mb_pii_token(KEY1, "VAL", vb, strlen(vb), 12, tb);
		CHECK_STR(r.found[0].token, ta);
		CHECK_STR(r.found[1].token, tb);              /* lengthened to 12 */
		snprintf(want, sizeof want, "%s %s %s", ta, tb, ta);
		CHECK_STR(r.text, want);
	}
	mb_pii_result_free(&r);
	mb_pii_detector_free(d);
}

/* ---- scratch and threads --------------------------------------------------------------------- */

TEST(scratch_belongs_to_its_detector)
{
	mb_pii_detector *a = new_det(NULL), *b = new_det(NULL);
	mb_pii_scratch *s = mb_pii_scratch_new(a);
	mb_pii_span *sp;
	size_t n;
	CHECK(mb_pii_scan(b, "a@b.io", 6, MB_PII_ALL, s, &sp, &n, err, sizeof err) == MB_PII_ERR);
	CHECK_STR(err, "pii: scratch belongs to another detector");
	CHECK(mb_pii_scan(a, "a@b.io", 6, MB_PII_ALL, s, &sp, &n, err, sizeof err) == 0 && n == 1);
	free(sp);
	mb_pii_scratch_free(s);
	mb_pii_scratch_free(NULL);
	mb_pii_detector_free(a);
	mb_pii_detector_free(b);
	mb_pii_detector_free(NULL);
}

typedef struct {
	const mb_pii_detector *d;
	const char *text;
	size_t len;
	char *want;
	int ok;
} thread_arg;

static void *scan_thread(void *p)
{
	thread_arg *a = p;
	mb_pii_scratch *s = mb_pii_scratch_new(a->d);
	char e[256];
	a->ok = 1;
	for (int i = 0; i < 30; i++) {
		mb_pii_result r;
		if (mb_pii_sanitize(a->d, KEY1, a->text, a->len, MB_PII_ALL, NULL, NULL, i & 1 ? s : NULL,
				    &r, e, sizeof e) != 0 || strcmp(r.text, a->want) != 0)
			a->ok = 0;
		mb_pii_result_free(&r);
	}
	mb_pii_scratch_free(s);
	return NULL;
}

TEST(threads_share_a_detector)
{
	mb_pii_custom c[] = { { "TICKET", "TCK-\\d+" } };
	mb_pii_options o = { .custom = c, .ncustom = 1 };
	mb_pii_detector *d = new_det(&o);
	size_t len;
	char *text = repeat("a@example.com TCK-12 (415) 555-2671 eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0."
			    "c2lnbmF0dXJl 2001:db8::1 ", 200000, &len);
	mb_pii_result r;
	CHECK(mb_pii_sanitize(d, KEY1, text, len, MB_PII_ALL, NULL, NULL, NULL, &r, err, sizeof err) == 0);
	thread_arg args[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		args[i] = (thread_arg){ .d = d, .text = text, .len = len, .want = r.text };
		CHECK(pthread_create(&th[i], NULL, scan_thread, &args[i]) == 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK(args[i].ok == 1);
	}
	mb_pii_result_free(&r);
	free(text);
	mb_pii_detector_free(d);
}

/* ---- the key file --------------------------------------------------------------------------- */

static char tmpdir[256];

static void make_tmpdir(void)
{
	unit_tmpdir(tmpdir, sizeof tmpdir, "/tmp/mb-pii-test.XXXXXX");
}

static void rm_tmpdir(void)
{
	unit_rmtree(tmpdir);
}

TEST(secret_file)
{
	make_tmpdir();
	char path[512], want[2048];
	snprintf(path, sizeof path, "%s/pii.key", tmpdir);
	unsigned char k1[32], k2[32], zero[32] = { 0 };
	CHECK(mb_pii_secret_load(tmpdir, k1, err, sizeof err) == 0);
	struct stat st;
	CHECK(stat(path, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600 &&
	      st.st_size == 32);
	CHECK(memcmp(k1, zero, 32) != 0);
	CHECK(mb_pii_secret_load(tmpdir, k2, err, sizeof err) == 0 && memcmp(k1, k2, 32) == 0);
	/* the file holds exactly the key */
	unsigned char raw[64];
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0 && read(fd, raw, sizeof raw) == 32 && memcmp(raw, k1, 32) == 0);
	close(fd);
	/* no temporary file is left behind */
	char cmd[600];
	snprintf(cmd, sizeof cmd, "test \"$(ls -A '%s')\" = pii.key", tmpdir);
	CHECK(system(cmd) == 0);

	/* group or other access */
	CHECK(chmod(path, 0640) == 0);
	CHECK(mb_pii_secret_load(tmpdir, k2, err, sizeof err) == MB_PII_ERR);
	snprintf(want, sizeof want, "pii: key file %s has mode 0640; it must not be accessible by "
		 "group or others (chmod 600 %s)", path, path);
	CHECK_STR(err, want);
	CHECK(chmod(path, 0604) == 0);
	CHECK(mb_pii_secret_load(tmpdir, k2, err, sizeof err) == MB_PII_ERR);
	CHECK(chmod(path, 0400) == 0);                       /* read-only for the owner is fine */
	CHECK(mb_pii_secret_load(tmpdir, k2, err, sizeof err) == 0 && memcmp(k1, k2, 32) == 0);
	CHECK(chmod(path, 0600) == 0);

	/* wrong size */
	CHECK(truncate(path, 31) == 0);
	CHECK(mb_pii_secret_load(tmpdir, k2, err, sizeof err) == MB_PII_ERR);
	snprintf(want, sizeof want, "pii: key file %s is 31 bytes; it must be exactly 32 (restore it "
		 "from a backup; deleting it makes a new key, and values get new tokens)", path);
	CHECK_STR(err, want);
	CHECK(truncate(path, 33) == 0);
	CHECK(mb_pii_secret_load(tmpdir, k2, err, sizeof err) == MB_PII_ERR);
	CHECK(truncate(path, 0) == 0);
	CHECK(mb_pii_secret_load(tmpdir, k2, err, sizeof err) == MB_PII_ERR);

	/* a symbolic link, a directory */
	CHECK(unlink(path) == 0);
	char target[512];
	snprintf(target, sizeof target, "%s/elsewhere", tmpdir);
	fd = open(target, O_WRONLY | O_CREAT, 0600);
	CHECK(fd >= 0 && write(fd, k1, 32) == 32);
	close(fd);
	CHECK(symlink(target, path) == 0);
	CHECK(mb_pii_secret_load(tmpdir, k2, err, sizeof err) == MB_PII_ERR);
	snprintf(want, sizeof want, "pii: key file %s is a symbolic link; it must be a regular file",
		 path);
	CHECK_STR(err, want);
	CHECK(unlink(path) == 0 && mkdir(path, 0700) == 0);
	CHECK(mb_pii_secret_load(tmpdir, k2, err, sizeof err) == MB_PII_ERR);
	snprintf(want, sizeof want, "pii: key file %s is not a regular file", path);
	CHECK_STR(err, want);
	CHECK(rmdir(path) == 0);

	/* a missing data directory */
	char missing[600];
	snprintf(missing, sizeof missing, "%s/nope", tmpdir);
	CHECK(mb_pii_secret_load(missing, k2, err, sizeof err) == MB_PII_ERR);
	snprintf(want, sizeof want, "pii: cannot create key file %s/pii.key: No such file or "
		 "directory", missing);
	CHECK_STR(err, want);
	CHECK(mb_pii_secret_load("", k2, err, sizeof err) == MB_PII_ERR);
	CHECK_STR(err, "pii: no data directory for the key file");
	CHECK(mb_pii_secret_load(NULL, k2, err, sizeof err) == MB_PII_ERR);

	/* a new key after deletion differs (random) */
	CHECK(mb_pii_secret_load(tmpdir, k2, err, sizeof err) == 0 && memcmp(k1, k2, 32) != 0);
	rm_tmpdir();
}

/* Several processes starting at once agree on one key. */
TEST(secret_file_concurrent_first_use)
{
	make_tmpdir();
	int pfd[2];
	CHECK(pipe(pfd) == 0);
	enum { N = 6 };
	for (int i = 0; i < N; i++) {
		pid_t p = fork();
		if (p == 0) {
			unsigned char k[32];
			char e[256];
			if (mb_pii_secret_load(tmpdir, k, e, sizeof e) != 0)
				memset(k, 0, sizeof k);
			if (write(pfd[1], k, 32) != 32)
				_exit(2);
			_exit(0);
		}
	}
	close(pfd[1]);
	unsigned char first[32], k[32];
	int got = 0, same = 1;
	while (read(pfd[0], k, 32) == 32) {
		if (!got)
			memcpy(first, k, 32);
		else if (memcmp(first, k, 32) != 0)
			same = 0;
		got++;
	}
	close(pfd[0]);
	while (wait(NULL) > 0)
		;
	CHECK(got == N && same);
	unsigned char mine[32];
	CHECK(mb_pii_secret_load(tmpdir, mine, err, sizeof err) == 0 && memcmp(mine, first, 32) == 0);
	rm_tmpdir();
}

/* pii_key_file: the key lives where it says, the temporary file goes to that directory (not to
 * a data directory), and replicas starting together on one shared file end with one key: N
 * processes released at once by a pipe all create (link) or read it. */
TEST(secret_key_file_shared)
{
	make_tmpdir();
	char shared[300], path[400], cmd[900];
	snprintf(shared, sizeof shared, "%s/shared", tmpdir);
	CHECK(mkdir(shared, 0700) == 0);
	snprintf(path, sizeof path, "%s/team.key", shared);
	for (int round = 0; round < 20; round++) {
		unlink(path);
		int go[2], res[2];
		CHECK(pipe(go) == 0 && pipe(res) == 0);
		enum { N = 8 };
		for (int i = 0; i < N; i++) {
			pid_t p = fork();
			if (p == 0) {
				close(go[1]);
				char c;
				if (read(go[0], &c, 1) != 0) /* EOF: everybody starts now */
					_exit(3);
				unsigned char k[32];
				char e[256];
				if (mb_pii_secret_load_file(path, k, e, sizeof e) != 0)
					memset(k, 0, sizeof k);
				if (write(res[1], k, 32) != 32)
					_exit(2);
				_exit(0);
			}
		}
		close(go[0]);
		close(res[1]);
		close(go[1]); /* release them */
		unsigned char first[32], k[32], zero[32] = { 0 };
		int got = 0, same = 1;
		while (read(res[0], k, 32) == 32) {
			if (!got)
				memcpy(first, k, 32);
			else if (memcmp(first, k, 32) != 0)
				same = 0;
			got++;
		}
		close(res[0]);
		while (wait(NULL) > 0)
			;
		CHECK(got == N && same && memcmp(first, zero, 32) != 0);
		unsigned char mine[32];
		CHECK(mb_pii_secret_load_file(path, mine, err, sizeof err) == 0 &&
		      memcmp(mine, first, 32) == 0);
		if (!(got == N && same))
			break;
	}
	struct stat st;
	CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600 && st.st_size == 32);
	/* no temporary file left in the key's directory, nothing made next to it */
	snprintf(cmd, sizeof cmd, "test \"$(ls -A '%s')\" = team.key && test \"$(ls -A '%s')\" = shared",
		 shared, tmpdir);
	CHECK(system(cmd) == 0);
	/* the same checks as the default file */
	CHECK(chmod(path, 0644) == 0);
	unsigned char k2[32];
	CHECK(mb_pii_secret_load_file(path, k2, err, sizeof err) == MB_PII_ERR);
	CHECK(strstr(err, "has mode 0644") != NULL && strstr(err, path) != NULL);
	CHECK(chmod(path, 0600) == 0);
	/* a missing directory is not created */
	char missing[500];
	snprintf(missing, sizeof missing, "%s/nope/team.key", tmpdir);
	CHECK(mb_pii_secret_load_file(missing, k2, err, sizeof err) == MB_PII_ERR);
	CHECK(strstr(err, "cannot create key file") != NULL);
	CHECK(mb_pii_secret_load_file("", k2, err, sizeof err) == MB_PII_ERR);
	CHECK_STR(err, "pii: no key file");
	snprintf(missing, sizeof missing, "%s/", shared);
	CHECK(mb_pii_secret_load_file(missing, k2, err, sizeof err) == MB_PII_ERR);
	rm_tmpdir();
}

/* ---- Lua -------------------------------------------------------------------------------------- */

static lua_State *lua_with_pii(const mb_pii_detector *d, const unsigned char *key)
{
	lua_State *L = luaL_newstate();
	luaL_openlibs(L);
	lua_newtable(L);
	mb_pii_lua_open(L, d, key);
	lua_setglobal(L, "mb");
	return L;
}

/* Runs chunk; returns "" on success or the error message. */
static const char *run_lua(lua_State *L, const char *chunk)
{
	static char msg[2048];
	msg[0] = '\0';
	if (luaL_dostring(L, chunk) != LUA_OK) {
		snprintf(msg, sizeof msg, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "(non-string error)");
		lua_pop(L, 1);
	}
	return msg;
}

TEST(lua_functions)
{
	mb_pii_custom c[] = { { "TICKET", "TCK-\\d+" } };
	mb_pii_options o = { .custom = c, .ncustom = 1 };
	mb_pii_detector *d = new_det(&o);
	lua_State *L = lua_with_pii(d, KEY1);
	char chunk[4096];
	CHECK_STR(run_lua(L,
		"local s = 'mail a@example.com, TCK-9'\n"
		"local r = mb.pii_scan(s)\n"
		"assert(#r == 2, #r)\n"
		"assert(r[1].type == 'EMAIL' and r[1].start == 6 and r[1].stop == 18)\n"
		"assert(s:sub(r[1].start, r[1].stop) == 'a@example.com')\n"
		"assert(r[2].type == 'TICKET' and s:sub(r[2].start, r[2].stop) == 'TCK-9')\n"
		"assert(#mb.pii_scan(s, 'ticket') == 1 and #mb.pii_scan(s, {'EMAIL', 'TICKET'}) == 2)\n"
		"assert(next(mb.pii_scan('nothing here')) == nil)\n"
		"assert(#mb.pii_scan('') == 0)\n"), "");
	snprintf(chunk, sizeof chunk,
		 "local out, found, counts = mb.pii_sanitize('a@example.com a@example.com TCK-1')\n"
		 "assert(out == '%s %s %s', out)\n"
		 "assert(#found == 2 and found[1].token == '%s' and found[1].type == 'EMAIL')\n"
		 "assert(found[1].value == 'a@example.com' and found[1].count == 2)\n"
		 "assert(found[2].type == 'TICKET' and found[2].value == 'TCK-1')\n"
		 "assert(counts.EMAIL == 2 and counts.TICKET == 1 and counts.PHONE == nil)\n",
		 tok(KEY1, "EMAIL", "a@example.com"), tok(KEY1, "EMAIL", "a@example.com"),
		 tok(KEY1, "TICKET", "TCK-1"), tok(KEY1, "EMAIL", "a@example.com"));
	CHECK_STR(run_lua(L, chunk), "");
	/* the mint function: sees the default token; nil keeps it; a string replaces it */
	snprintf(chunk, sizeof chunk,
		 "local calls = {}\n"
		 "local out = mb.pii_sanitize('a@example.com TCK-1', function(t, v, def)\n"
		 "  calls[#calls + 1] = t .. '|' .. v .. '|' .. def\n"
		 "  if t == 'TICKET' then return '[TICKET_00000000aaaa]' end\n"
		 "end)\n"
		 "assert(out == '%s [TICKET_00000000aaaa]', out)\n"
		 "assert(calls[1] == 'EMAIL|a@example.com|%s', calls[1])\n"
		 "assert(#calls == 2)\n",
		 tok(KEY1, "EMAIL", "a@example.com"), tok(KEY1, "EMAIL", "a@example.com"));
	CHECK_STR(run_lua(L, chunk), "");
	/* errors: propagated unchanged (tables too), bad tokens and return types named */
	CHECK_STR(run_lua(L,
		"local e = {}\n"
		"local ok, got = pcall(mb.pii_sanitize, 'a@example.com', function() error(e) end)\n"
		"assert(not ok and got == e)\n"), "");
	CHECK_STR(run_lua(L, "mb.pii_sanitize('a@example.com', function() error('vault down', 0) end)"),
		  "vault down");
	CHECK_STR(run_lua(L, "mb.pii_sanitize('a@example.com', function() return '[EMAIL_1]' end)"),
		  "[string \"mb.pii_sanitize('a@example.com', function() r...\"]:1: pii: mint returned "
		  "\"[EMAIL_1]\" for type EMAIL; expected [EMAIL_<8-16 lowercase hex digits>]");
	CHECK_STR(run_lua(L, "mb.pii_sanitize('a@example.com', function() return {} end)"),
		  "[string \"mb.pii_sanitize('a@example.com', function() r...\"]:1: pii: mint function "
		  "must return a token string or nil, not a table");
	CHECK_STR(run_lua(L, "mb.pii_sanitize('a@example.com', function() return string.rep('x', 100) end)"),
		  "[string \"mb.pii_sanitize('a@example.com', function() r...\"]:1: pii: mint returned "
		  "\"\" for type EMAIL; expected [EMAIL_<8-16 lowercase hex digits>]");
	CHECK_STR(run_lua(L, "mb.pii_scan('x', {'EMAIL', 'NOPE'})"),
		  "[string \"mb.pii_scan('x', {'EMAIL', 'NOPE'})\"]:1: pii: unknown type 'NOPE' (known: "
		  "EMAIL, PHONE, SSN, CARD, IPV4, IPV6, SECRET, IBAN, TICKET)");
	CHECK_STR(run_lua(L, "mb.pii_scan('x', {1})"),
		  "[string \"mb.pii_scan('x', {1})\"]:1: pii: unknown type '1' (known: EMAIL, PHONE, "
		  "SSN, CARD, IPV4, IPV6, SECRET, IBAN, TICKET)");
	CHECK_STR(run_lua(L, "mb.pii_scan('x', 5)"),
		  "[string \"mb.pii_scan('x', 5)\"]:1: bad argument #2 to 'pii_scan' (nil, type name or "
		  "array of type names expected, got number)");
	CHECK_STR(run_lua(L, "mb.pii_scan()"),
		  "[string \"mb.pii_scan()\"]:1: bad argument #1 to 'pii_scan' (string expected, got no value)");
	CHECK_STR(run_lua(L, "mb.pii_sanitize('x', 5)"),
		  "[string \"mb.pii_sanitize('x', 5)\"]:1: bad argument #2 to 'pii_sanitize' (function "
		  "expected, got number)");
	/* the mint function may itself scan (reentrancy) */
	CHECK_STR(run_lua(L,
		"local out = mb.pii_sanitize('a@example.com b@example.com', function(t, v)\n"
		"  assert(#mb.pii_scan(v .. ' ' .. v) == 2)\n"
		"end)\n"
		"assert(not out:find('@'))\n"), "");
	/* many calls: results are freed (run under ASan) */
	CHECK_STR(run_lua(L,
		"for i = 1, 2000 do\n"
		"  local ok = pcall(mb.pii_sanitize, 'a@example.com ' .. i, function() error('x') end)\n"
		"  assert(not ok)\n"
		"  mb.pii_scan(('b@example.com %d '):rep(10):format(i,i,i,i,i,i,i,i,i,i))\n"
		"end\n"), "");
	lua_close(L);

	/* no key: scanning works, sanitizing explains */
	L = lua_with_pii(d, NULL);
	CHECK_STR(run_lua(L, "assert(#mb.pii_scan('a@example.com') == 1)"), "");
	CHECK_STR(run_lua(L, "mb.pii_sanitize('a@example.com')"),
		  "[string \"mb.pii_sanitize('a@example.com')\"]:1: pii: pii_sanitize needs a key (none "
		  "was given to this state)");
	lua_close(L);
	mb_pii_detector_free(d);
}

int main(void)
{
	if (sodium_init() < 0)
		return 1;
	RUN(luhn);
	RUN(iban_mod97);
	RUN(ssn_ranges);
	RUN(ipv4_octets);
	RUN(each_type_with_offsets);
	RUN(rule_edges);
	RUN(overlap_rules);
	RUN(existing_tokens_are_left_alone);
	RUN(custom_patterns);
	RUN(custom_pattern_errors);
	RUN(match_limit_fails_closed);
	RUN(disabled_types);
	RUN(invalid_utf8_and_binary);
	RUN(huge_and_hostile_inputs);
	RUN(token_format_and_keys);
	RUN(sanitize_result);
	RUN(token_stability_across_detectors);
	RUN(idempotence);
	RUN(mint_callback);
	RUN(collision_lengthens_token);
	RUN(scratch_belongs_to_its_detector);
	RUN(threads_share_a_detector);
	RUN(secret_file);
	RUN(secret_file_concurrent_first_use);
	RUN(secret_key_file_shared);
	RUN(lua_functions);
	return UNIT_END();
}
