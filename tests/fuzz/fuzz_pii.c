/* fuzz_pii.c - libFuzzer target: the PII scanner, tokenizer and restorer (src/pii_detect.c,
 * pii_detect_rules.c, pii_token.c, pii_config.c, pii_lua.c, and the vault in lua/mcp/pii.lua).
 *
 * Input: byte 0 picks the detector (built-in rules only, or built-in plus the custom patterns of
 * the configuration below, both made by mb_pii_from_config), the token length the mint callback
 * starts at (8, 12 or 16 hex digits, as the vault does after a collision) and whether a subset of
 * types is asked for (byte 1 is then the mask); the rest is the text x, any bytes.
 *
 * C path, with an in-memory vault that mints like lua/mcp/pii.lua's free_token (a token bound
 * to another value gets a longer one) and restores like detokenize_pii (mb_pii_token_next, then
 * a lookup of each token):
 *  - scan: spans in order, inside the text, non-overlapping, of enabled and asked-for types, and
 *    none inside or across a token already in x (pii.h);
 *  - sanitize: every found entry has a well-formed token of its type, distinct from the others,
 *    and a value that occurs in x; counts add up to the total;
 *  - restore(sanitize(x)) == restore(x) for that vault: the tokens it minted give back exactly
 *    the values they replaced, and tokens already in x are left as they were (so for x without
 *    tokens, restore(sanitize(x)) == x);
 *  - sanitize is idempotent: sanitize(sanitize(x)) == sanitize(x), replacing nothing;
 *  - x valid UTF-8 => sanitize(x) valid UTF-8 (spans never cut a character: the workspace and
 *    resource reads tokenize only valid UTF-8 text, and their answers are strict JSON).
 * Host path: the vault of lua/mcp/pii.lua (pii.sanitize, then pii.restore through a second
 * instance of the module whose cache is empty, so bindings are read back from SQLite) must give
 * the same restore(sanitize(x)) == restore(x). PCRE2 match-limit errors are allowed outcomes (a
 * message is required). Any violation aborts.
 * Build and run: tests/fuzz/run.sh fuzz_pii
 * FUZZ_OPTIONS: -detect_leaks=0
 * (the host's vault cache grows between inputs; ASan still checks every access)
 */
#include "fuzz_host.h"
#include "fuzz_utf8.h"
#include "pii.h"

static mb_pii_detector *det[2];   /* built-in only; with the custom patterns */
static mb_pii_scratch *scr[2];

/* ---- the in-memory vault ----------------------------------------------------------------- */

typedef struct {
	char token[MB_PII_TOKEN_MAX];
	char *value;
	size_t len;
} binding;

static struct {
	binding *b;
	size_t n, cap;
	int start_hex;
} vault;

static void vault_clear(void)
{
	for (size_t i = 0; i < vault.n; i++)
		free(vault.b[i].value);
	vault.n = 0;
}

static const binding *vault_get(const char *token, size_t tlen)
{
	for (size_t i = 0; i < vault.n; i++)
		if (strlen(vault.b[i].token) == tlen && memcmp(vault.b[i].token, token, tlen) == 0)
			return &vault.b[i];
	return NULL;
}

static int mint(void *ud, const char *type, const char *value, size_t len, char token[MB_PII_TOKEN_MAX],
		char *err, size_t errlen)
{
	(void)ud;
	static const int hex[] = { 8, 12, 16 };
	for (int i = vault.start_hex; i < 3; i++) {
		char t[MB_PII_TOKEN_MAX];
		if (mb_pii_token(fz.key, type, value, len, hex[i], t) != 0)
			FZ_FAIL("mb_pii_token refused type %s", type);
		if (i == 0 && strcmp(t, token) != 0)
			FZ_FAIL("the default token %s is not mb_pii_token's %s", token, t);
		const binding *b = vault_get(t, strlen(t));
		if (b && (b->len != len || memcmp(b->value, value, len) != 0))
			continue; /* bound to another value: a longer token */
		if (!b) {
			if (vault.n == vault.cap) {
				vault.cap = vault.cap ? vault.cap * 2 : 64;
				vault.b = realloc(vault.b, vault.cap * sizeof *vault.b);
			}
			binding *nb = &vault.b[vault.n++];
			memcpy(nb->token, t, sizeof t);
			nb->value = malloc(len ? len : 1);
			memcpy(nb->value, value, len);
			nb->len = len;
		}
		memcpy(token, t, MB_PII_TOKEN_MAX);
		return 0;
	}
	snprintf(err, errlen, "no free token");
	return -1;
}

/* restore(text) with the vault: tokens found by mb_pii_token_next that the vault binds. */
static char *restore(const char *s, size_t len, size_t *out_len)
{
	size_t cap = len + 1, n = 0, pos = 0, done = 0, tlen;
	char *out = malloc(cap);
	while (mb_pii_token_next(s, len, &pos, &tlen)) {
		const binding *b = vault_get(s + pos, tlen);
		const char *add = b ? b->value : s + pos;
		size_t alen = b ? b->len : tlen;
		size_t need = n + (pos - done) + alen + (len - pos) + 1;
		if (need > cap) {
			cap = need * 2;
			out = realloc(out, cap);
		}
		memcpy(out + n, s + done, pos - done);
		n += pos - done;
		memcpy(out + n, add, alen);
		n += alen;
		pos += tlen;
		done = pos;
	}
	if (n + (len - done) + 1 > cap)
		out = realloc(out, n + (len - done) + 1);
	memcpy(out + n, s + done, len - done);
	n += len - done;
	out[n] = 0;
	*out_len = n;
	return out;
}

static void show(const char *what, const char *s, size_t n)
{
	fprintf(stderr, "%s (%zu bytes): ", what, n);
	for (size_t i = 0; i < n && i < 600; i++)
		fputc((unsigned char)s[i] >= 32 && (unsigned char)s[i] < 127 ? s[i] : '.', stderr);
	fputc('\n', stderr);
}

/* ---- the checks ------------------------------------------------------------------------------ */

static void check_scan(const mb_pii_detector *d, mb_pii_scratch *sc, const char *x, size_t len, uint64_t types)
{
	mb_pii_span *sp = NULL;
	size_t n = 0;
	char err[512] = "";
	int rc = mb_pii_scan(d, x, len, types, sc, &sp, &n, err, sizeof err);
	if (rc == MB_PII_ELIMIT) {
		if (!err[0] || sp || n)
			FZ_FAIL("scan: a limit error without a message or with spans");
		return;
	}
	if (rc != 0)
		FZ_FAIL("scan failed (%d): %s", rc, err);
	size_t prev_stop = 0;
	for (size_t i = 0; i < n; i++) {
		if (sp[i].start >= sp[i].stop || sp[i].stop > len || sp[i].start < prev_stop)
			FZ_FAIL("scan: span %zu [%zu, %zu) is empty, outside the text or overlaps the previous", i,
				sp[i].start, sp[i].stop);
		if (!((types >> sp[i].type) & 1) || !mb_pii_type_enabled(d, sp[i].type))
			FZ_FAIL("scan: span of type %d, which was not asked for", sp[i].type);
		prev_stop = sp[i].stop;
		/* no span inside or across an existing token */
		size_t pos = 0, tlen;
		while (mb_pii_token_next(x, len, &pos, &tlen)) {
			if (pos < sp[i].stop && sp[i].start < pos + tlen) {
				show("text", x, len);
				FZ_FAIL("scan: span [%zu, %zu) of type %s meets the token at [%zu, %zu)", sp[i].start,
					sp[i].stop, mb_pii_type_name(d, sp[i].type), pos, pos + tlen);
			}
			pos += tlen;
		}
	}
	free(sp);
}

static const char host_step[] =
	"local x = FZ_X\n"
	"local A = package.loaded['mcp.pii']\n"
	"if not FZ_FRESH then\n"
	"  package.loaded['mcp.pii'] = nil\n"
	"  FZ_FRESH = require('mcp.pii')\n"
	"  package.loaded['mcp.pii'] = A\n"
	"end\n"
	"local ok, s = pcall(A.sanitize, 'fz', x)\n"
	"if not ok then\n"
	"  if type(s) == 'string' and s ~= '' then return 'ok' end\n"
	"  return 'SANITIZE RAISED A NON-MESSAGE'\n"
	"end\n"
	"local r1 = FZ_FRESH.restore('fz', s)\n"
	"local r0 = FZ_FRESH.restore('fz', x)\n"
	"if r1 ~= r0 then return string.format('VAULT RESTORE DIFFERS:\\n x  %q\\n s  %q\\n r(s) %q\\n r(x) %q', x, s, r1, r0) end\n"
	"local s2 = A.sanitize('fz', s)\n"
	"if s2 ~= s then return string.format('VAULT SANITIZE NOT IDEMPOTENT: %q -> %q', s, s2) end\n"
	"return 'ok'\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!fz.host) {
		char *extra[] = { "--pii-custom-patterns",
				  "{\"employee_id\":\"emp[-_]id[:=]\\\\s*(\\\\d{6})\",\"email\":\"[a-z]+ at [a-z]+ dot com\","
				  "\"TICKET\":\"TCK-\\\\d+\",\"HEXY\":\"[0-9a-f]{8}\",\"TAIL\":\"b\\\\] x\"}", NULL };
		fz_host_start("pii", extra);
		det[1] = fz.pii;
		mb_config plain = fz.cfg;
		plain.pii_custom_patterns[0] = 0;
		unsigned char key[MB_PII_KEY_BYTES];
		char err[512];
		if (mb_pii_from_config(&plain, &det[0], key, err, sizeof err) != 0)
			FZ_FAIL("plain detector: %s", err);
		if (memcmp(key, fz.key, sizeof key) != 0)
			FZ_FAIL("two loads of the key file gave different keys");
		scr[0] = mb_pii_scratch_new(det[0]);
		scr[1] = mb_pii_scratch_new(det[1]);
	}
	fz_begin();
	if (size < 2)
		return 0;
	int which = data[0] & 1;
	vault.start_hex = (data[0] >> 1) % 3;
	uint64_t types = MB_PII_ALL;
	if (data[0] & 8)
		types = (uint64_t)data[1] | ((uint64_t)data[1] << 8);
	const char *x = (const char *)data + 2;
	size_t len = size - 2;
	const mb_pii_detector *d = det[which];
	mb_pii_scratch *sc = scr[which];

	check_scan(d, sc, x, len, types);

	vault_clear();
	mb_pii_result res;
	char err[512] = "";
	int rc = mb_pii_sanitize(d, fz.key, x, len, types, mint, NULL, sc, &res, err, sizeof err);
	if (rc == MB_PII_ELIMIT) {
		if (!err[0])
			FZ_FAIL("sanitize: a limit error without a message");
	} else if (rc != 0) {
		FZ_FAIL("sanitize failed (%d): %s", rc, err);
	} else {
		size_t total = 0;
		for (size_t i = 0; i < res.nfound; i++) {
			const mb_pii_found *f = &res.found[i];
			const char *tn = mb_pii_type_name(d, f->type);
			size_t tl = strlen(f->token);
			if (!tn || mb_pii_token_check(f->token, tl, tn) != tl)
				FZ_FAIL("found %zu: token %s is not a token of type %s", i, f->token, tn ? tn : "?");
			if (f->count < 1 || !f->value_len || !memmem(x, len, f->value, f->value_len))
				FZ_FAIL("found %zu (%s): count %zu, or a value that is not in the text", i, f->token,
					f->count);
			for (size_t k = 0; k < i; k++)
				if (strcmp(res.found[k].token, f->token) == 0)
					FZ_FAIL("token %s given to two values", f->token);
			total += f->count;
		}
		size_t by_type = 0;
		for (size_t t = 0; t < res.ntypes; t++)
			by_type += res.counts[t];
		if (total != res.total || by_type != res.total)
			FZ_FAIL("counts: %zu by value, %zu by type, total %zu", total, by_type, res.total);
		if (strlen(res.text) > res.len || res.text[res.len] != 0)
			FZ_FAIL("sanitized text is not NUL-terminated at its length");

		size_t l1, l0;
		char *r1 = restore(res.text, res.len, &l1), *r0 = restore(x, len, &l0);
		if (l1 != l0 || memcmp(r1, r0, l0) != 0) {
			show("text", x, len);
			show("sanitized", res.text, res.len);
			show("restore(sanitized)", r1, l1);
			show("restore(text)", r0, l0);
			FZ_FAIL("restore(sanitize(x)) != restore(x)");
		}
		free(r1);
		free(r0);

		if (fz_valid_utf8(x, len) && !fz_valid_utf8(res.text, res.len)) {
			show("text", x, len);
			show("sanitized", res.text, res.len);
			FZ_FAIL("valid UTF-8 in, invalid UTF-8 out");
		}

		mb_pii_result again;
		rc = mb_pii_sanitize(d, fz.key, res.text, res.len, types, mint, NULL, sc, &again, err, sizeof err);
		if (rc == 0) {
			if (again.len != res.len || memcmp(again.text, res.text, res.len) != 0 || again.total != 0) {
				show("text", x, len);
				show("once", res.text, res.len);
				show("twice", again.text, again.len);
				FZ_FAIL("sanitize is not idempotent (%zu more replaced)", again.total);
			}
			mb_pii_result_free(&again);
		} else if (rc != MB_PII_ELIMIT) {
			FZ_FAIL("second sanitize failed (%d): %s", rc, err);
		}
		mb_pii_result_free(&res);
	}

	/* the host's vault, with the detector that has the custom patterns */
	if (which == 1 && !(data[0] & 8)) {
		lua_State *L = mb_host_state(fz.host);
		lua_pushlstring(L, x, len);
		lua_setglobal(L, "FZ_X");
		const char *r = fz_lua(host_step);
		if (strcmp(r, "ok") != 0)
			FZ_FAIL("%s", r);
		fz_check_bad("pii vault");
	}
	return 0;
}
