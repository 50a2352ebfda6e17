/* test_auth_jwt.c - JWT access tokens against a JWKS (src/auth_jwt.c), with keys made by
 * OpenSSL in the test: RSA 2048 (RS256 and PS256), EC P-256 (ES256) and Ed25519 (EdDSA). Every
 * algorithm verifies; every hostile token is refused with a reason (alg none, HMAC keyed with
 * the public key, a key of the wrong type, tampered signature or payload, wrong issuer or
 * audience, expired, not yet valid, crit, an ID-token typ); an unknown kid is MB_JWT_NOKEY (the
 * caller may fetch the set again); key sets that are too large or hold no usable key are
 * refused, small RSA keys and HMAC keys skipped. */
#include "unit.h"

#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rsa.h>
#include <sodium.h>

#include "../../src/auth_jwt.h"

#define ISS "https://auth.example.com"
#define AUD "https://mcp.example.com/mcp"
#define NOW 1800000000LL

static EVP_PKEY *k_rsa, *k_ec, *k_ed, *k_rsa_small;

static void b64u(const unsigned char *b, size_t n, char *out, size_t cap)
{
	sodium_bin2base64(out, cap, b, n, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
}

static void bn_b64u(EVP_PKEY *k, const char *name, char *out, size_t cap)
{
	BIGNUM *bn = NULL;
	EVP_PKEY_get_bn_param(k, name, &bn);
	unsigned char buf[1024];
	int n = BN_bn2bin(bn, buf);
	b64u(buf, (size_t)n, out, cap);
	BN_free(bn);
}

/* The public JWK of k as JSON text. */
static void jwk_of(EVP_PKEY *k, const char *kid, const char *extra, char *out, size_t cap)
{
	char a[1400], b[200];
	if (EVP_PKEY_is_a(k, "RSA")) {
		bn_b64u(k, OSSL_PKEY_PARAM_RSA_N, a, sizeof a);
		bn_b64u(k, OSSL_PKEY_PARAM_RSA_E, b, sizeof b);
		snprintf(out, cap, "{\"kty\":\"RSA\",\"kid\":\"%s\",\"n\":\"%s\",\"e\":\"%s\"%s}", kid, a, b, extra);
	} else if (EVP_PKEY_is_a(k, "EC")) {
		unsigned char pub[65];
		size_t pl = 0;
		EVP_PKEY_get_octet_string_param(k, OSSL_PKEY_PARAM_PUB_KEY, pub, sizeof pub, &pl);
		b64u(pub + 1, 32, a, sizeof a);
		b64u(pub + 33, 32, b, sizeof b);
		snprintf(out, cap, "{\"kty\":\"EC\",\"crv\":\"P-256\",\"kid\":\"%s\",\"x\":\"%s\",\"y\":\"%s\"%s}", kid, a, b,
			 extra);
	} else {
		unsigned char raw[32];
		size_t rl = sizeof raw;
		EVP_PKEY_get_raw_public_key(k, raw, &rl);
		b64u(raw, rl, a, sizeof a);
		snprintf(out, cap, "{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"%s\",\"x\":\"%s\"%s}", kid, a, extra);
	}
}

/* header.payload.signature with alg over k (NULL: an empty signature; "HS256": HMAC with hkey). */
static char *token(const char *alg, EVP_PKEY *k, const char *hdr, const char *payload, const char *hkey)
{
	char h64[1024], p64[4096], sig64[1024] = "";
	b64u((const unsigned char *)hdr, strlen(hdr), h64, sizeof h64);
	b64u((const unsigned char *)payload, strlen(payload), p64, sizeof p64);
	char input[5200];
	snprintf(input, sizeof input, "%s.%s", h64, p64);
	unsigned char sig[600];
	size_t sl = sizeof sig;
	if (hkey) {
		unsigned int hl = 0;
		HMAC(EVP_sha256(), hkey, (int)strlen(hkey), (const unsigned char *)input, strlen(input), sig, &hl);
		sl = hl;
	} else if (k) {
		EVP_MD_CTX *md = EVP_MD_CTX_new();
		EVP_PKEY_CTX *pc = NULL;
		int ed = strcmp(alg, "EdDSA") == 0;
		EVP_DigestSignInit(md, &pc, ed ? NULL : EVP_sha256(), NULL, k);
		if (strcmp(alg, "PS256") == 0) {
			EVP_PKEY_CTX_set_rsa_padding(pc, RSA_PKCS1_PSS_PADDING);
			EVP_PKEY_CTX_set_rsa_pss_saltlen(pc, RSA_PSS_SALTLEN_DIGEST);
		}
		EVP_DigestSign(md, sig, &sl, (const unsigned char *)input, strlen(input));
		EVP_MD_CTX_free(md);
		if (strcmp(alg, "ES256") == 0) { /* DER -> r||s */
			const unsigned char *p = sig;
			ECDSA_SIG *es = d2i_ECDSA_SIG(NULL, &p, (long)sl);
			const BIGNUM *r, *s;
			ECDSA_SIG_get0(es, &r, &s);
			BN_bn2binpad(r, sig, 32);
			BN_bn2binpad(s, sig + 32, 32);
			sl = 64;
			ECDSA_SIG_free(es);
		}
	} else {
		sl = 0;
	}
	if (sl)
		b64u(sig, sl, sig64, sizeof sig64);
	size_t n = strlen(input) + strlen(sig64) + 2;
	char *t = malloc(n);
	snprintf(t, n, "%s.%s", input, sig64);
	return t;
}

static char *claims(const char *iss, const char *aud, long long exp, const char *extra)
{
	static char b[1024];
	snprintf(b, sizeof b, "{\"iss\":\"%s\",\"aud\":%s,\"sub\":\"alice\",\"exp\":%lld,\"scope\":\"moonbox:execute\"%s}", iss,
		 aud, exp, extra);
	return b;
}

static mb_jwks *the_set(void)
{
	char a[2000], b[400], c[400], d[2000], doc[6000];
	jwk_of(k_rsa, "rsa", "", a, sizeof a);
	jwk_of(k_ec, "ec", ",\"use\":\"sig\",\"alg\":\"ES256\"", b, sizeof b);
	jwk_of(k_ed, "ed", "", c, sizeof c);
	jwk_of(k_rsa_small, "small", "", d, sizeof d);
	snprintf(doc, sizeof doc,
		 "{\"keys\":[%s,%s,%s,%s,{\"kty\":\"oct\",\"kid\":\"hmac\",\"k\":\"c2VjcmV0\"},"
		 "{\"kty\":\"RSA\",\"kid\":\"enc\",\"use\":\"enc\",\"n\":\"AQAB\",\"e\":\"AQAB\"}]}",
		 a, b, c, d);
	mb_jwks *k = NULL;
	char err[200];
	int rc = mb_jwks_parse(doc, strlen(doc), &k, err, sizeof err);
	CHECK(rc == 0);
	return k;
}

static int verify(mb_jwks *k, const char *tok, char *err, size_t errlen)
{
	mb_jwt_expect ex = { .issuer = ISS, .audience = AUD, .now = NOW, .skew = 60 };
	json_t *c = NULL;
	int rc = mb_jwt_verify(tok, strlen(tok), k, &ex, &c, err, errlen);
	CHECK((rc == MB_JWT_OK) == (c != NULL));
	json_decref(c);
	return rc;
}

TEST(test_jwks_parse)
{
	mb_jwks *k = the_set();
	CHECK(mb_jwks_count(k) == 3); /* the 1024-bit RSA, the HMAC and the encryption keys are skipped */
	mb_jwks_free(k);
	char err[200];
	mb_jwks *bad = NULL;
	CHECK(mb_jwks_parse("{}", 2, &bad, err, sizeof err) == -1 && !bad);
	const char *oct = "{\"keys\":[{\"kty\":\"oct\",\"k\":\"c2VjcmV0\"}]}";
	CHECK(mb_jwks_parse(oct, strlen(oct), &bad, err, sizeof err) == -1);
	CHECK(strstr(err, "no usable signing key") != NULL);
	/* more than MB_JWKS_MAX_KEYS keys */
	char big[8000] = "{\"keys\":[";
	for (int i = 0; i <= MB_JWKS_MAX_KEYS; i++)
		strcat(big, i ? ",{}" : "{}");
	strcat(big, "]}");
	CHECK(mb_jwks_parse(big, strlen(big), &bad, err, sizeof err) == -1);
	CHECK(strstr(err, "more than") != NULL);
}

TEST(test_every_alg_verifies)
{
	mb_jwks *k = the_set();
	char err[200];
	const char *p = claims(ISS, "\"" AUD "\"", NOW + 300, "");
	struct { const char *alg, *kid; EVP_PKEY *key; } cases[] = {
		{ "RS256", "rsa", k_rsa }, { "PS256", "rsa", k_rsa }, { "ES256", "ec", k_ec }, { "EdDSA", "ed", k_ed },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char hdr[128];
		snprintf(hdr, sizeof hdr, "{\"alg\":\"%s\",\"typ\":\"at+jwt\",\"kid\":\"%s\"}", cases[i].alg, cases[i].kid);
		char *t = token(cases[i].alg, cases[i].key, hdr, p, NULL);
		int rc = verify(k, t, err, sizeof err);
		if (rc != MB_JWT_OK)
			fprintf(stderr, "  %s: %s\n", cases[i].alg, err);
		CHECK(rc == MB_JWT_OK);
		CHECK(mb_jwt_is_jws(t, strlen(t)));
		free(t);
	}
	/* aud as an array; no typ; typ JWT (Keycloak) */
	char *t = token("RS256", k_rsa, "{\"alg\":\"RS256\",\"kid\":\"rsa\"}",
			claims(ISS, "[\"other\",\"" AUD "\"]", NOW + 300, ""), NULL);
	CHECK(verify(k, t, err, sizeof err) == MB_JWT_OK);
	free(t);
	t = token("RS256", k_rsa, "{\"alg\":\"RS256\",\"typ\":\"JWT\",\"kid\":\"rsa\"}", p, NULL);
	CHECK(verify(k, t, err, sizeof err) == MB_JWT_OK);
	free(t);
	/* within the skew: expired 30 s ago, valid from 30 s on */
	t = token("RS256", k_rsa, "{\"alg\":\"RS256\",\"kid\":\"rsa\"}",
		  claims(ISS, "\"" AUD "\"", NOW - 30, ",\"nbf\":1800000030"), NULL);
	CHECK(verify(k, t, err, sizeof err) == MB_JWT_OK);
	free(t);
	mb_jwks_free(k);
}

static void refused(mb_jwks *k, const char *what, char *t, const char *reason)
{
	char err[200] = "";
	int rc = verify(k, t, err, sizeof err);
	if (rc != MB_JWT_INVALID || !strstr(err, reason))
		fprintf(stderr, "  %s: rc %d, \"%s\" (expected \"%s\")\n", what, rc, err, reason);
	CHECK(rc == MB_JWT_INVALID);
	CHECK(strstr(err, reason) != NULL);
	CHECK(!strchr(err, '"') && !strchr(err, '\\'));
	free(t);
}

TEST(test_hostile_tokens)
{
	mb_jwks *k = the_set();
	const char *p = claims(ISS, "\"" AUD "\"", NOW + 300, "");
	const char *rs = "{\"alg\":\"RS256\",\"kid\":\"rsa\"}";
	refused(k, "alg none", token("none", NULL, "{\"alg\":\"none\",\"kid\":\"rsa\"}", p, NULL), "alg none is refused");
	/* HMAC keyed with the public key's JWK text: refused before any key is looked at */
	char pub[2000];
	jwk_of(k_rsa, "rsa", "", pub, sizeof pub);
	refused(k, "HS256", token("HS256", NULL, "{\"alg\":\"HS256\",\"kid\":\"rsa\"}", p, pub), "alg HS256 is refused");
	refused(k, "no alg", token("RS256", k_rsa, "{\"kid\":\"rsa\"}", p, NULL), "is refused");
	refused(k, "RS512", token("RS256", k_rsa, "{\"alg\":\"RS512\",\"kid\":\"rsa\"}", p, NULL), "alg RS512");
	refused(k, "wrong issuer", token("RS256", k_rsa, rs, claims("https://evil.example.com", "\"" AUD "\"", NOW + 300, ""), NULL),
		"issuer is not");
	refused(k, "wrong audience", token("RS256", k_rsa, rs, claims(ISS, "\"https://other.example.com\"", NOW + 300, ""), NULL),
		"audience does not include");
	refused(k, "no audience", token("RS256", k_rsa, rs, claims(ISS, "[]", NOW + 300, ""), NULL), "audience");
	refused(k, "expired", token("RS256", k_rsa, rs, claims(ISS, "\"" AUD "\"", NOW - 61, ""), NULL), "expired");
	refused(k, "not yet valid", token("RS256", k_rsa, rs, claims(ISS, "\"" AUD "\"", NOW + 300, ",\"nbf\":1800000061"), NULL),
		"not valid yet");
	refused(k, "no exp", token("RS256", k_rsa, rs, "{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\"}", NULL), "no exp");
	refused(k, "crit", token("RS256", k_rsa, "{\"alg\":\"RS256\",\"kid\":\"rsa\",\"crit\":[\"x\"],\"x\":1}", p, NULL), "crit");
	refused(k, "typ", token("RS256", k_rsa, "{\"alg\":\"RS256\",\"kid\":\"rsa\",\"typ\":\"id+jwt\"}", p, NULL),
		"not an access token type");
	/* an RSA signature under the EC key's kid: no RSA key has that kid */
	char err[200];
	char *t = token("RS256", k_rsa, "{\"alg\":\"RS256\",\"kid\":\"ec\"}", p, NULL);
	CHECK(verify(k, t, err, sizeof err) == MB_JWT_NOKEY);
	free(t);
	/* the 1024-bit key was skipped: its kid is unknown */
	t = token("RS256", k_rsa_small, "{\"alg\":\"RS256\",\"kid\":\"small\"}", p, NULL);
	CHECK(verify(k, t, err, sizeof err) == MB_JWT_NOKEY);
	free(t);
	/* tampered signature, tampered payload */
	t = token("RS256", k_rsa, rs, p, NULL);
	t[strlen(t) - 5] ^= 1;
	refused(k, "tampered signature", t, "signature");
	char *good = token("RS256", k_rsa, rs, p, NULL);
	char *other = token("RS256", k_rsa, rs, claims(ISS, "\"" AUD "\"", NOW + 99999, ""), NULL);
	char *dot = strrchr(other, '.'), *gdot = strrchr(good, '.');
	size_t n = (size_t)(dot - other) + strlen(gdot) + 1;
	char *mixed = malloc(n);
	snprintf(mixed, n, "%.*s%s", (int)(dot - other), other, gdot);
	refused(k, "tampered payload", mixed, "does not verify");
	free(good);
	free(other);
	/* shapes */
	refused(k, "two parts", strdup("abc.def"), "not a JWT");
	refused(k, "bad base64", strdup("a*c.def.ghi"), "header");
	CHECK(!mb_jwt_is_jws("opaque-token-value", 18));
	mb_jwks_free(k);
}

TEST(test_unknown_kid)
{
	mb_jwks *k = the_set();
	char err[200];
	const char *p = claims(ISS, "\"" AUD "\"", NOW + 300, "");
	char *t = token("RS256", k_rsa, "{\"alg\":\"RS256\",\"kid\":\"rotated\"}", p, NULL);
	CHECK(verify(k, t, err, sizeof err) == MB_JWT_NOKEY);
	CHECK(strstr(err, "rotated") != NULL);
	CHECK(verify(NULL, t, err, sizeof err) == MB_JWT_NOKEY); /* no set yet */
	free(t);
	/* no kid: the one key of its type */
	t = token("EdDSA", k_ed, "{\"alg\":\"EdDSA\"}", p, NULL);
	CHECK(verify(k, t, err, sizeof err) == MB_JWT_OK);
	free(t);
	mb_jwks_free(k);
}

int main(void)
{
	k_rsa = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
	k_rsa_small = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)1024);
	k_ec = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	k_ed = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	if (!k_rsa || !k_rsa_small || !k_ec || !k_ed || sodium_init() < 0) {
		fprintf(stderr, "cannot make the test keys\n");
		return 1;
	}
	RUN(test_jwks_parse);
	RUN(test_every_alg_verifies);
	RUN(test_hostile_tokens);
	RUN(test_unknown_kid);
	EVP_PKEY_free(k_rsa);
	EVP_PKEY_free(k_rsa_small);
	EVP_PKEY_free(k_ec);
	EVP_PKEY_free(k_ed);
	return UNIT_END();
}
