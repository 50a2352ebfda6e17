/* auth_jwt.c - JWT access tokens checked against a JWKS with OpenSSL's libcrypto (auth_jwt.h).
 *
 * Keys are imported with OpenSSL 3's EVP_PKEY_fromdata (RSA n/e, EC P-256 x/y) and
 * EVP_PKEY_new_raw_public_key (Ed25519); signatures are checked with EVP_DigestVerify: RS256
 * (PKCS#1 v1.5, SHA-256), PS256 (PSS, SHA-256, MGF1-SHA-256, salt of the digest's length),
 * ES256 (the JWS r||s turned into the DER ECDSA-Sig-Value libcrypto reads) and EdDSA (Ed25519,
 * one-shot). Nothing cryptographic is written here: this file only parses, selects and compares.
 *
 * The order of the checks is fixed so that the cheap refusals come first and the claims are
 * trusted only after the signature: the shape (three parts, sizes), the header (alg allowed, no
 * crit), the key (kid, type for the alg), the signature, then iss, aud, exp and nbf.
 */
#include "auth_jwt.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/rsa.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"

#define TOKEN_MAX 16384     /* a longer bearer value is not a token we verify */
#define PART_MAX 12288

enum { KT_RSA, KT_EC, KT_OKP };
enum { A_RS256, A_PS256, A_ES256, A_EDDSA, A_ANY };

typedef struct jwk {
	EVP_PKEY *pkey;
	int kty;
	int alg; /* A_ANY when the JWK names none */
	char kid[128];
	int has_kid;
} jwk;

struct mb_jwks {
	jwk k[MB_JWKS_MAX_KEYS];
	size_t n;
};

/* base64url without padding into a malloc'd buffer. @returns the bytes or NULL */
static unsigned char *b64url(const char *s, size_t n, size_t *out)
{
	unsigned char *b = malloc(n * 3 / 4 + 3);
	if (!b)
		return NULL;
	const char *end;
	if (sodium_base642bin(b, n * 3 / 4 + 3, s, n, NULL, out, &end, sodium_base64_VARIANT_URLSAFE_NO_PADDING) !=
		    0 ||
	    end != s + n) {
		free(b);
		return NULL;
	}
	return b;
}

static unsigned char *jwk_bytes(json_t *o, const char *name, size_t *n)
{
	json_t *v = json_object_get(o, name);
	if (!json_is_string(v))
		return NULL;
	return b64url(json_string_value(v), json_string_length(v), n);
}

static int alg_of(const char *a)
{
	if (!a)
		return A_ANY;
	if (strcmp(a, "RS256") == 0)
		return A_RS256;
	if (strcmp(a, "PS256") == 0)
		return A_PS256;
	if (strcmp(a, "ES256") == 0)
		return A_ES256;
	if (strcmp(a, "EdDSA") == 0)
		return A_EDDSA;
	return -1;
}

static EVP_PKEY *from_params(const char *type, OSSL_PARAM_BLD *bld)
{
	EVP_PKEY *pk = NULL;
	OSSL_PARAM *params = OSSL_PARAM_BLD_to_param(bld);
	EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, type, NULL);
	if (params && ctx && EVP_PKEY_fromdata_init(ctx) == 1)
		if (EVP_PKEY_fromdata(ctx, &pk, EVP_PKEY_PUBLIC_KEY, params) != 1)
			pk = NULL;
	EVP_PKEY_CTX_free(ctx);
	OSSL_PARAM_free(params);
	return pk;
}

static EVP_PKEY *rsa_key(json_t *o)
{
	size_t nl = 0, el = 0;
	unsigned char *n = jwk_bytes(o, "n", &nl), *e = jwk_bytes(o, "e", &el);
	EVP_PKEY *pk = NULL;
	BIGNUM *bn = NULL, *be = NULL;
	OSSL_PARAM_BLD *bld = NULL;
	if (!n || !e || nl < 256 || nl > 1024 || el == 0 || el > 8)
		goto done; /* below 2048 bits, or absurd */
	bn = BN_bin2bn(n, (int)nl, NULL);
	be = BN_bin2bn(e, (int)el, NULL);
	bld = OSSL_PARAM_BLD_new();
	if (!bn || !be || !bld || BN_num_bits(bn) < 2048 ||
	    !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn) ||
	    !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, be))
		goto done;
	pk = from_params("RSA", bld);
done:
	OSSL_PARAM_BLD_free(bld);
	BN_free(bn);
	BN_free(be);
	free(n);
	free(e);
	return pk;
}

static EVP_PKEY *ec_key(json_t *o)
{
	json_t *crv = json_object_get(o, "crv");
	if (!json_is_string(crv) || strcmp(json_string_value(crv), "P-256") != 0)
		return NULL;
	size_t xl = 0, yl = 0;
	unsigned char *x = jwk_bytes(o, "x", &xl), *y = jwk_bytes(o, "y", &yl);
	EVP_PKEY *pk = NULL;
	if (x && y && xl == 32 && yl == 32) {
		unsigned char pub[65];
		pub[0] = 4; /* uncompressed point */
		memcpy(pub + 1, x, 32);
		memcpy(pub + 33, y, 32);
		OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
		if (bld && OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) &&
		    OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, pub, sizeof pub))
			pk = from_params("EC", bld); /* the point is checked to be on the curve */
		OSSL_PARAM_BLD_free(bld);
	}
	free(x);
	free(y);
	return pk;
}

static EVP_PKEY *okp_key(json_t *o)
{
	json_t *crv = json_object_get(o, "crv");
	if (!json_is_string(crv) || strcmp(json_string_value(crv), "Ed25519") != 0)
		return NULL;
	size_t xl = 0;
	unsigned char *x = jwk_bytes(o, "x", &xl);
	EVP_PKEY *pk = x && xl == 32 ? EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, x, xl) : NULL;
	free(x);
	return pk;
}

int mb_jwks_parse(const char *json, size_t len, mb_jwks **out, char *err, size_t errlen)
{
	*out = NULL;
	json_error_t je;
	json_t *doc = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
	json_t *keys = json_is_object(doc) ? json_object_get(doc, "keys") : NULL;
	if (!json_is_array(keys)) {
		mb_seterr(err, errlen, "the JWKS is not a JSON object with a keys array");
		json_decref(doc);
		return -1;
	}
	if (json_array_size(keys) > MB_JWKS_MAX_KEYS) {
		mb_seterr(err, errlen, "the JWKS has %zu keys, more than %d", json_array_size(keys), MB_JWKS_MAX_KEYS);
		json_decref(doc);
		return -1;
	}
	mb_jwks *set = calloc(1, sizeof *set);
	if (!set) {
		mb_seterr(err, errlen, "out of memory reading the JWKS");
		json_decref(doc);
		return -1;
	}
	size_t i;
	json_t *o;
	json_array_foreach(keys, i, o) {
		if (!json_is_object(o))
			continue;
		json_t *kty = json_object_get(o, "kty"), *use = json_object_get(o, "use");
		json_t *alg = json_object_get(o, "alg"), *kid = json_object_get(o, "kid");
		if (!json_is_string(kty) || (use && (!json_is_string(use) || strcmp(json_string_value(use), "sig"))))
			continue;
		if (alg && !json_is_string(alg))
			continue;
		int a = alg_of(alg ? json_string_value(alg) : NULL);
		if (a < 0)
			continue; /* a key for another algorithm (HS256, RS512, ...) */
		const char *t = json_string_value(kty);
		jwk *k = &set->k[set->n];
		if (strcmp(t, "RSA") == 0 && (a == A_ANY || a == A_RS256 || a == A_PS256)) {
			k->kty = KT_RSA;
			k->pkey = rsa_key(o);
		} else if (strcmp(t, "EC") == 0 && (a == A_ANY || a == A_ES256)) {
			k->kty = KT_EC;
			k->pkey = ec_key(o);
		} else if (strcmp(t, "OKP") == 0 && (a == A_ANY || a == A_EDDSA)) {
			k->kty = KT_OKP;
			k->pkey = okp_key(o);
		}
		if (!k->pkey)
			continue;
		k->alg = a;
		if (json_is_string(kid) && json_string_length(kid) < sizeof k->kid) {
			memcpy(k->kid, json_string_value(kid), json_string_length(kid) + 1);
			k->has_kid = 1;
		}
		set->n++;
	}
	json_decref(doc);
	if (!set->n) {
		mb_seterr(err, errlen, "the JWKS has no usable signing key (RSA >= 2048 bits, EC P-256, Ed25519)");
		free(set);
		return -1;
	}
	*out = set;
	return 0;
}

void mb_jwks_free(mb_jwks *k)
{
	if (!k)
		return;
	for (size_t i = 0; i < k->n; i++)
		EVP_PKEY_free(k->k[i].pkey);
	free(k);
}

size_t mb_jwks_count(const mb_jwks *k)
{
	return k ? k->n : 0;
}

/* Splits a compact JWS into its three parts. @returns 0 or -1 */
static int split(const char *tok, size_t len, const char *p[3], size_t n[3])
{
	if (len == 0 || len > TOKEN_MAX)
		return -1;
	const char *d1 = memchr(tok, '.', len);
	const char *d2 = d1 ? memchr(d1 + 1, '.', len - (size_t)(d1 + 1 - tok)) : NULL;
	if (!d2 || memchr(d2 + 1, '.', len - (size_t)(d2 + 1 - tok)))
		return -1;
	p[0] = tok, n[0] = (size_t)(d1 - tok);
	p[1] = d1 + 1, n[1] = (size_t)(d2 - d1 - 1);
	p[2] = d2 + 1, n[2] = len - (size_t)(d2 + 1 - tok);
	return n[0] && n[1] && n[0] <= PART_MAX && n[1] <= PART_MAX && n[2] <= PART_MAX ? 0 : -1;
}

static json_t *part_json(const char *s, size_t n)
{
	size_t bl = 0;
	unsigned char *b = b64url(s, n, &bl);
	if (!b)
		return NULL;
	json_error_t je;
	json_t *j = json_loadb((const char *)b, bl, JSON_REJECT_DUPLICATES, &je);
	free(b);
	if (j && !json_is_object(j)) {
		json_decref(j);
		return NULL;
	}
	return j;
}

int mb_jwt_is_jws(const char *tok, size_t len)
{
	const char *p[3];
	size_t n[3];
	if (split(tok, len, p, n) != 0 || !n[2])
		return 0;
	json_t *h = part_json(p[0], n[0]);
	json_decref(h);
	return h != NULL;
}

/* The JWS r||s of ES256 as DER. @returns malloc'd DER or NULL; *dl its length */
static unsigned char *es256_der(const unsigned char *sig, size_t sl, size_t *dl)
{
	if (sl != 64)
		return NULL;
	ECDSA_SIG *es = ECDSA_SIG_new();
	BIGNUM *r = BN_bin2bn(sig, 32, NULL), *s = BN_bin2bn(sig + 32, 32, NULL);
	unsigned char *der = NULL;
	if (es && r && s && ECDSA_SIG_set0(es, r, s) == 1) {
		r = s = NULL; /* owned by es now */
		int l = i2d_ECDSA_SIG(es, &der);
		*dl = l > 0 ? (size_t)l : 0;
		if (l <= 0)
			der = NULL;
	}
	BN_free(r);
	BN_free(s);
	ECDSA_SIG_free(es);
	return der;
}

/* Checks sig over msg with key k for alg. @returns 1 valid, 0 not */
static int sig_ok(const jwk *k, int alg, const unsigned char *msg, size_t ml, const unsigned char *sig, size_t sl)
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	EVP_PKEY_CTX *pctx = NULL;
	unsigned char *der = NULL;
	int ok = 0;
	if (!md)
		return 0;
	if (alg == A_EDDSA) {
		ok = EVP_DigestVerifyInit(md, NULL, NULL, NULL, k->pkey) == 1 && sl == 64 &&
		     EVP_DigestVerify(md, sig, sl, msg, ml) == 1;
	} else if (EVP_DigestVerifyInit(md, &pctx, EVP_sha256(), NULL, k->pkey) == 1) {
		if (alg == A_PS256 &&
		    (EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) != 1 ||
		     EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST) != 1 ||
		     EVP_PKEY_CTX_set_rsa_mgf1_md(pctx, EVP_sha256()) != 1))
			goto done;
		if (alg == A_ES256) {
			size_t dl = 0;
			der = es256_der(sig, sl, &dl);
			ok = der && EVP_DigestVerify(md, der, dl, msg, ml) == 1;
		} else {
			ok = EVP_DigestVerify(md, sig, sl, msg, ml) == 1;
		}
	}
done:
	OPENSSL_free(der);
	EVP_MD_CTX_free(md);
	return ok;
}

static int kty_for(int alg)
{
	return alg == A_ES256 ? KT_EC : alg == A_EDDSA ? KT_OKP : KT_RSA;
}

/* Copies s into err with quotes and backslashes and control characters replaced. */
static void reason(char *err, size_t errlen, const char *fmt, const char *a)
{
	char t[256];
	snprintf(t, sizeof t, fmt, a ? a : "");
	size_t i = 0;
	for (; t[i] && i + 1 < errlen; i++)
		err[i] = (t[i] == '"' || t[i] == '\\' || (unsigned char)t[i] < 0x20 || (unsigned char)t[i] >= 0x7f)
				 ? '?'
				 : t[i];
	if (errlen)
		err[i < errlen ? i : errlen - 1] = 0;
}

static int aud_has(json_t *aud, const char *want)
{
	if (json_is_string(aud))
		return strcmp(json_string_value(aud), want) == 0;
	size_t i;
	json_t *v;
	if (json_is_array(aud))
		json_array_foreach(aud, i, v)
			if (json_is_string(v) && strcmp(json_string_value(v), want) == 0)
				return 1;
	return 0;
}

int mb_jwt_verify(const char *tok, size_t len, const mb_jwks *keys, const mb_jwt_expect *exp,
		  json_t **claims, char *err, size_t errlen)
{
	*claims = NULL;
	const char *p[3];
	size_t n[3];
	json_t *hdr = NULL, *body = NULL;
	unsigned char *sig = NULL;
	int rc = MB_JWT_INVALID;
	if (split(tok, len, p, n) != 0) {
		reason(err, errlen, "the token is not a JWT (three base64url parts)%s", NULL);
		return rc;
	}
	if (!(hdr = part_json(p[0], n[0]))) {
		reason(err, errlen, "the JWT header is not base64url JSON%s", NULL);
		goto done;
	}
	json_t *jalg = json_object_get(hdr, "alg"), *jkid = json_object_get(hdr, "kid");
	const char *alg_name = json_is_string(jalg) ? json_string_value(jalg) : NULL;
	int alg = alg_name ? alg_of(alg_name) : -1;
	if (alg < 0 || alg == A_ANY) {
		reason(err, errlen, "alg %s is refused (RS256, PS256, ES256 and EdDSA are accepted)",
		       alg_name ? alg_name : "(missing)");
		goto done;
	}
	if (json_object_get(hdr, "crit")) {
		reason(err, errlen, "the JWT header has crit extensions, which are not understood%s", NULL);
		goto done;
	}
	json_t *typ = json_object_get(hdr, "typ");
	if (typ && (!json_is_string(typ) ||
		    (strcasecmp(json_string_value(typ), "at+jwt") && strcasecmp(json_string_value(typ), "application/at+jwt") &&
		     strcasecmp(json_string_value(typ), "JWT")))) {
		reason(err, errlen, "typ %s is not an access token type (at+jwt)",
		       json_is_string(typ) ? json_string_value(typ) : "?");
		goto done;
	}
	if (jkid && !json_is_string(jkid)) {
		reason(err, errlen, "kid is not a string%s", NULL);
		goto done;
	}
	/* the key: by kid; without kid, the only key of the alg's type */
	const jwk *key = NULL;
	size_t candidates = 0;
	for (size_t i = 0; keys && i < keys->n; i++) {
		const jwk *k = &keys->k[i];
		if (k->kty != kty_for(alg) || (k->alg != A_ANY && k->alg != alg))
			continue;
		if (jkid ? (k->has_kid && strcmp(k->kid, json_string_value(jkid)) == 0) : 1) {
			key = k;
			candidates++;
		}
	}
	if (!key || candidates != 1) {
		if (jkid)
			reason(err, errlen, "signing key %s is not in the issuer's JWKS", json_string_value(jkid));
		else
			reason(err, errlen, "the token has no kid and the JWKS has %s one key for its alg",
			       candidates ? "more than" : "not even");
		rc = jkid || !keys ? MB_JWT_NOKEY : MB_JWT_INVALID;
		goto done;
	}
	size_t sl = 0;
	if (!n[2] || !(sig = b64url(p[2], n[2], &sl))) {
		reason(err, errlen, "the signature is not base64url%s", NULL);
		goto done;
	}
	if (!sig_ok(key, alg, (const unsigned char *)tok, n[0] + 1 + n[1], sig, sl)) {
		reason(err, errlen, "the signature does not verify%s", NULL);
		goto done;
	}
	/* signed by the issuer's key: now the claims */
	if (!(body = part_json(p[1], n[1]))) {
		reason(err, errlen, "the JWT payload is not a JSON object%s", NULL);
		goto done;
	}
	json_t *iss = json_object_get(body, "iss");
	if (!json_is_string(iss) || strcmp(json_string_value(iss), exp->issuer) != 0) {
		reason(err, errlen, "the token's issuer is not %s", exp->issuer);
		goto done;
	}
	if (!aud_has(json_object_get(body, "aud"), exp->audience)) {
		reason(err, errlen, "the token's audience does not include %s", exp->audience);
		goto done;
	}
	json_t *jexp = json_object_get(body, "exp"), *nbf = json_object_get(body, "nbf");
	if (!json_is_number(jexp)) {
		reason(err, errlen, "the token has no exp%s", NULL);
		goto done;
	}
	if (json_number_value(jexp) + (double)exp->skew <= (double)exp->now) {
		reason(err, errlen, "the token has expired%s", NULL);
		goto done;
	}
	if (nbf && (!json_is_number(nbf) || json_number_value(nbf) > (double)(exp->now + exp->skew))) {
		reason(err, errlen, "the token is not valid yet (nbf)%s", NULL);
		goto done;
	}
	*claims = body;
	body = NULL;
	rc = MB_JWT_OK;
done:
	free(sig);
	json_decref(hdr);
	json_decref(body);
	return rc;
}
