/* pii_token.c - keyed tokens for detected values, the installation key, and sanitizing.
 *
 * A token is "[" TYPE "_" hex "]": the hex digits are the start of HMAC-SHA256(key, TYPE ||
 * 0x00 || value) (libsodium), 8 by default. The same value of the same type gets the same
 * token in every call, process and restart that uses the same key; without the key (and the
 * vault that maps tokens back) a token says nothing about its value beyond its type.
 *
 * mb_pii_sanitize runs rounds: scan, then replace each span by its token, until a scan of the
 * output finds nothing (normally the second round). The extra round is what makes sanitizing
 * idempotent: replacing a value can change what is next to its neighbours (a phone number glued
 * to an e-mail address becomes a phone number next to "]"), and whatever a later round would
 * find, this call finds now. Existing tokens are never reported by the scan, so every round
 * leaves earlier tokens as they are and the rounds stop. (Rescanning only near the inserted
 * tokens was tried: exact, but no faster, since a scan's time goes to finding and filtering
 * triggers, not to the pattern runs it could skip.)
 *
 * Each distinct (type, value) of a call is minted once (a hash map of found entries): the
 * default token, then the caller's mint callback, which can lengthen it when its vault already
 * binds the default token to another value. Without a callback the call lengthens a token that
 * it has itself given to another value in the same call (12, then 16 hex digits).
 *
 * mb_pii_secret_load_file manages the key file (pii_key_file, default DATA_DIR/pii.key): 32
 * random bytes, created through a temporary file in the key file's directory that is linked into
 * place (atomic; a crash never leaves a short key, processes starting together - replicas on one
 * shared file included - agree on one key), refused when its size, type, owner or mode is wrong.
 */
#include "pii.h"

#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PII_MAX_ROUNDS 16

/* ---- tokens ---------------------------------------------------------------------------------- */

static void token_from_mac(const unsigned char mac[32], const char *type, int hexchars,
			   char out[MB_PII_TOKEN_MAX])
{
	static const char hx[] = "0123456789abcdef";
	size_t tl = strlen(type), k = 0;
	out[k++] = '[';
	memcpy(out + k, type, tl);
	k += tl;
	out[k++] = '_';
	for (int i = 0; i < hexchars; i++)
		out[k++] = hx[(mac[i / 2] >> ((i & 1) ? 0 : 4)) & 15];
	out[k++] = ']';
	out[k] = '\0';
}

static void mac_value(const crypto_auth_hmacsha256_state *base, const char *type,
		      const char *value, size_t len, unsigned char mac[32])
{
	crypto_auth_hmacsha256_state st = *base;
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)type, strlen(type));
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)"", 1);
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)value, len);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_memzero(&st, sizeof st);
}

int mb_pii_token(const unsigned char key[MB_PII_KEY_BYTES], const char *type, const char *value,
		 size_t len, int hexchars, char out[MB_PII_TOKEN_MAX])
{
	if (!type || !mb_pii_type_name_valid(type, strlen(type)) || hexchars < MB_PII_HEX_MIN ||
	    hexchars > MB_PII_HEX_MAX || (!value && len))
		return MB_PII_ERR;
	crypto_auth_hmacsha256_state base;
	unsigned char mac[32];
	crypto_auth_hmacsha256_init(&base, key, MB_PII_KEY_BYTES);
	mac_value(&base, type, value ? value : "", len, mac);
	token_from_mac(mac, type, hexchars, out);
	sodium_memzero(&base, sizeof base);
	return 0;
}

/* ---- the key file ---------------------------------------------------------------------------- */

static int read_key(int fd, const char *path, unsigned char key[MB_PII_KEY_BYTES], char *err,
		    size_t errlen)
{
	struct stat st;
	if (fstat(fd, &st) != 0) {
		mb_seterr(err, errlen, "pii: cannot stat key file %s: %s", path, strerror(errno));
		return MB_PII_ERR;
	}
	if (!S_ISREG(st.st_mode)) {
		mb_seterr(err, errlen, "pii: key file %s is not a regular file", path);
		return MB_PII_ERR;
	}
	if (st.st_uid != geteuid()) {
		mb_seterr(err, errlen, "pii: key file %s is owned by uid %u, not by this user (uid %u)",
		          path, (unsigned)st.st_uid, (unsigned)geteuid());
		return MB_PII_ERR;
	}
	if (st.st_mode & 077) {
		mb_seterr(err, errlen, "pii: key file %s has mode 0%03o; it must not be accessible by group "
		          "or others (chmod 600 %s)", path, (unsigned)(st.st_mode & 0777), path);
		return MB_PII_ERR;
	}
	if (st.st_size != MB_PII_KEY_BYTES) {
		mb_seterr(err, errlen, "pii: key file %s is %lld bytes; it must be exactly %d (restore it "
		          "from a backup; deleting it makes a new key, and values get new tokens)", path,
		          (long long)st.st_size, MB_PII_KEY_BYTES);
		return MB_PII_ERR;
	}
	size_t got = 0;
	while (got < MB_PII_KEY_BYTES) {
		ssize_t r = read(fd, key + got, MB_PII_KEY_BYTES - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			mb_seterr(err, errlen, "pii: cannot read key file %s: %s", path,
			          r < 0 ? strerror(errno) : "unexpected end of file");
			sodium_memzero(key, MB_PII_KEY_BYTES);
			return MB_PII_ERR;
		}
		got += (size_t)r;
	}
	return 0;
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Creates the key through a temporary file in the key file's own directory (dir), linked to
 * path. The temporary name carries the pid and random bytes: replicas on several hosts may share
 * the directory (NFS), where pids alone would collide. link() either makes path or fails with
 * EEXIST, so of several processes creating the key at once exactly one wins and the others read
 * its key. Returns 0 (created), 1 (someone else created it first: read theirs) or MB_PII_ERR. */
static int create_key(const char *dir, const char *base, const char *path,
		      unsigned char key[MB_PII_KEY_BYTES], char *err, size_t errlen)
{
	char tmp[4300];
	if ((size_t)snprintf(tmp, sizeof tmp, "%s/.%s.%ld.%08x.tmp", dir, base, (long)getpid(),
			     (unsigned)randombytes_random()) >= sizeof tmp) {
		mb_seterr(err, errlen, "pii: key file path is too long (%zu bytes)", strlen(path));
		return MB_PII_ERR;
	}
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		mb_seterr(err, errlen, "pii: cannot create key file %s: %s", path, strerror(errno));
		return MB_PII_ERR;
	}
	unsigned char buf[MB_PII_KEY_BYTES];
	randombytes_buf(buf, sizeof buf);
	int ok = fchmod(fd, 0600) == 0 && write_all(fd, buf, sizeof buf) == 0 && fsync(fd) == 0;
	int e = errno;
	if (close(fd) != 0 && ok) {
		ok = 0;
		e = errno;
	}
	if (!ok) {
		unlink(tmp);
		sodium_memzero(buf, sizeof buf);
		mb_seterr(err, errlen, "pii: cannot write key file %s: %s", tmp, strerror(e));
		return MB_PII_ERR;
	}
	int rc = link(tmp, path);
	e = errno;
	unlink(tmp);
	if (rc != 0) {
		sodium_memzero(buf, sizeof buf);
		if (e == EEXIST)
			return 1;
		mb_seterr(err, errlen, "pii: cannot create key file %s: %s", path, strerror(e));
		return MB_PII_ERR;
	}
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		(void)fsync(dfd);
		close(dfd);
	}
	memcpy(key, buf, sizeof buf);
	sodium_memzero(buf, sizeof buf);
	return 0;
}

int mb_pii_secret_load_file(const char *path, unsigned char key[MB_PII_KEY_BYTES], char *err,
			    size_t errlen)
{
	if (!path || !*path) {
		mb_seterr(err, errlen, "pii: no key file");
		return MB_PII_ERR;
	}
	if (sodium_init() < 0) {
		mb_seterr(err, errlen, "pii: libsodium initialisation failed");
		return MB_PII_ERR;
	}
	/* the directory that gets the temporary file, and the name it is made from */
	char dir[4200];
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	size_t dlen = slash ? (size_t)(slash - path) : 1;
	if (dlen >= sizeof dir || strlen(path) >= sizeof dir) {
		mb_seterr(err, errlen, "pii: key file path is too long (%zu bytes)", strlen(path));
		return MB_PII_ERR;
	}
	if (!*base) {
		mb_seterr(err, errlen, "pii: key file %s names a directory, not a file", path);
		return MB_PII_ERR;
	}
	if (!slash)
		memcpy(dir, ".", 2);
	else if (dlen == 0)
		memcpy(dir, "/", 2);
	else {
		memcpy(dir, path, dlen);
		dir[dlen] = 0;
	}
	for (int attempt = 0; attempt < 3; attempt++) {
		int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
		if (fd >= 0) {
			int rc = read_key(fd, path, key, err, errlen);
			close(fd);
			return rc;
		}
		if (errno == ELOOP) {
			mb_seterr(err, errlen, "pii: key file %s is a symbolic link; it must be a regular file",
			          path);
			return MB_PII_ERR;
		}
		if (errno != ENOENT) {
			mb_seterr(err, errlen, "pii: cannot open key file %s: %s", path, strerror(errno));
			return MB_PII_ERR;
		}
		int rc = create_key(dir, base, path, key, err, errlen);
		if (rc <= 0)
			return rc;
	}
	mb_seterr(err, errlen, "pii: key file %s keeps appearing and disappearing", path);
	return MB_PII_ERR;
}

int mb_pii_secret_load(const char *data_dir, unsigned char key[MB_PII_KEY_BYTES], char *err,
		       size_t errlen)
{
	if (!data_dir || !*data_dir) {
		mb_seterr(err, errlen, "pii: no data directory for the key file");
		return MB_PII_ERR;
	}
	char path[4200];
	if ((size_t)snprintf(path, sizeof path, "%s/pii.key", data_dir) >= sizeof path) {
		mb_seterr(err, errlen, "pii: data directory path is too long (%zu bytes)", strlen(data_dir));
		return MB_PII_ERR;
	}
	return mb_pii_secret_load_file(path, key, err, errlen);
}

/* ---- sanitize ---------------------------------------------------------------------------------- */

typedef struct {
	const mb_pii_detector *d;
	crypto_auth_hmacsha256_state base;
	mb_pii_mint_fn mint;
	void *ud;
	mb_pii_result *res;
	size_t capfound;
	uint32_t *byval;    /* open addressing: found index + 1, keyed by (type, value) */
	uint32_t *bytok;    /* ... keyed by token */
	size_t cap;         /* slots in each table (power of two) */
	char *err;
	size_t errlen;
} san;

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 1099511628211ull;
	}
	return h;
}

static uint64_t hash_val(int type, const char *v, size_t n)
{
	uint64_t h = fnv(14695981039346656037ull, &type, sizeof type);
	return fnv(h, v, n);
}

static uint64_t hash_tok(const char *t)
{
	return fnv(14695981039346656037ull, t, strlen(t));
}

static void table_put(uint32_t *tab, size_t cap, uint64_t h, uint32_t idx1)
{
	size_t m = cap - 1, i = (size_t)h & m;
	while (tab[i])
		i = (i + 1) & m;
	tab[i] = idx1;
}

static int tables_grow(san *z)
{
	size_t cap = z->cap ? z->cap * 2 : 64;
	uint32_t *a = calloc(cap, sizeof *a), *b = calloc(cap, sizeof *b);
	if (!a || !b) {
		free(a);
		free(b);
		return -1;
	}
	for (size_t k = 0; k < z->res->nfound; k++) {
		const mb_pii_found *f = &z->res->found[k];
		table_put(a, cap, hash_val(f->type, f->value, f->value_len), (uint32_t)k + 1);
		table_put(b, cap, hash_tok(f->token), (uint32_t)k + 1);
	}
	free(z->byval);
	free(z->bytok);
	z->byval = a;
	z->bytok = b;
	z->cap = cap;
	return 0;
}

static mb_pii_found *find_val(san *z, int type, const char *v, size_t n)
{
	if (!z->cap)
		return NULL;
	size_t m = z->cap - 1, i = (size_t)hash_val(type, v, n) & m;
	for (; z->byval[i]; i = (i + 1) & m) {
		mb_pii_found *f = &z->res->found[z->byval[i] - 1];
		if (f->type == type && f->value_len == n && !memcmp(f->value, v, n))
			return f;
	}
	return NULL;
}

static mb_pii_found *find_tok(san *z, const char *t)
{
	if (!z->cap)
		return NULL;
	size_t m = z->cap - 1, i = (size_t)hash_tok(t) & m;
	for (; z->bytok[i]; i = (i + 1) & m) {
		mb_pii_found *f = &z->res->found[z->bytok[i] - 1];
		if (!strcmp(f->token, t))
			return f;
	}
	return NULL;
}

/* Returns the index of the found entry for (type, value), minting its token on first sight, or
 * -1 with *rc and the message set. (An index: the array moves when it grows.) */
static long mint_value(san *z, int type, const char *v, size_t n, int *rc)
{
	mb_pii_found *f = find_val(z, type, v, n);
	if (f)
		return (long)(f - z->res->found);
	mb_pii_result *res = z->res;
	const char *tname = mb_pii_type_name(z->d, type);
	char token[MB_PII_TOKEN_MAX];
	unsigned char mac[32];
	mac_value(&z->base, tname, v, n, mac);
	token_from_mac(mac, tname, MB_PII_HEX_MIN, token);
	if (z->mint) {
		char cerr[MB_ERR_MAX] = "";
		if (z->mint(z->ud, tname, v, n, token, cerr, sizeof cerr) < 0) {
			mb_seterr(z->err, z->errlen, "%s", cerr[0] ? cerr : "pii: mint callback failed");
			*rc = MB_PII_ERR;
			return -1;
		}
		token[MB_PII_TOKEN_MAX - 1] = '\0';
		size_t tl = strlen(token);
		if (tl == 0 || mb_pii_token_check(token, tl, tname) != tl) {
			mb_seterr(z->err, z->errlen, "pii: mint returned \"%.60s\" for type %s; expected "
			          "[%s_<%d-%d lowercase hex digits>]", token, tname, tname, MB_PII_HEX_MIN,
			          MB_PII_HEX_MAX);
			*rc = MB_PII_ERR;
			return -1;
		}
		if (find_tok(z, token)) {
			mb_seterr(z->err, z->errlen, "pii: mint returned %s for two different values of type "
			          "%s", token, tname);
			*rc = MB_PII_ERR;
			return -1;
		}
	} else {
		for (int hx = MB_PII_HEX_MIN + 4; find_tok(z, token); hx += 4) {
			if (hx > MB_PII_HEX_MAX) {
				mb_seterr(z->err, z->errlen, "pii: token collision beyond %d hex digits for type %s",
				          MB_PII_HEX_MAX, tname);
				*rc = MB_PII_ERR;
				return -1;
			}
			token_from_mac(mac, tname, hx, token);
		}
	}
	if (res->nfound == z->capfound) {
		size_t cap = z->capfound ? z->capfound * 2 : 16;
		mb_pii_found *nf = realloc(res->found, cap * sizeof *nf);
		if (!nf)
			goto nomem;
		res->found = nf;
		z->capfound = cap;
	}
	if ((res->nfound + 1) * 2 > z->cap && tables_grow(z) != 0)
		goto nomem;
	f = &res->found[res->nfound];
	memset(f, 0, sizeof *f);
	f->value = malloc(n + 1);
	if (!f->value)
		goto nomem;
	memcpy(f->value, v, n);
	f->value[n] = '\0';
	f->value_len = n;
	f->type = type;
	memcpy(f->token, token, sizeof token);
	res->nfound++;
	table_put(z->byval, z->cap, hash_val(type, v, n), (uint32_t)res->nfound);
	table_put(z->bytok, z->cap, hash_tok(f->token), (uint32_t)res->nfound);
	return (long)res->nfound - 1;
nomem:
	mb_seterr(z->err, z->errlen, "pii: out of memory (%zu distinct values)", res->nfound + 1);
	*rc = MB_PII_ENOMEM;
	return -1;
}

void mb_pii_result_free(mb_pii_result *res)
{
	if (!res)
		return;
	for (size_t i = 0; i < res->nfound; i++) {
		sodium_memzero(res->found[i].value, res->found[i].value_len);
		free(res->found[i].value);
	}
	free(res->found);
	free(res->counts);
	free(res->text);
	memset(res, 0, sizeof *res);
}

int mb_pii_sanitize(const mb_pii_detector *d, const unsigned char key[MB_PII_KEY_BYTES],
		    const char *text, size_t len, uint64_t types, mb_pii_mint_fn mint, void *ud,
		    mb_pii_scratch *scratch, mb_pii_result *res, char *err, size_t errlen)
{
	memset(res, 0, sizeof *res);
	if (!key) {
		mb_seterr(err, errlen, "pii: no key for tokens");
		return MB_PII_ERR;
	}
	if (!text)
		len = 0;
	mb_pii_scratch *own = NULL;
	if (!scratch) {
		scratch = own = mb_pii_scratch_new(d);
		if (!scratch) {
			mb_seterr(err, errlen, "pii: out of memory (scratch)");
			return MB_PII_ENOMEM;
		}
	}
	san z = { .d = d, .mint = mint, .ud = ud, .res = res, .err = err, .errlen = errlen };
	crypto_auth_hmacsha256_init(&z.base, key, MB_PII_KEY_BYTES);
	int rc = 0;
	char *buf = NULL;          /* the output of the last round, owned */
	const char *cur = text ? text : "";
	size_t curlen = len;
	mb_pii_span *sp = NULL;
	size_t n = 0;
	res->ntypes = (size_t)mb_pii_type_count(d);
	res->counts = calloc(res->ntypes, sizeof *res->counts);
	if (!res->counts)
		goto nomem;

	int round;
	for (round = 0; round < PII_MAX_ROUNDS; round++) {
		rc = mb_pii_scan(d, cur, curlen, types, scratch, &sp, &n, err, errlen);
		if (rc != 0)
			goto fail;
		if (n == 0)
			break;
		/* output size: text minus spans plus tokens */
		size_t outlen = curlen;
		long *fs = malloc(n * sizeof *fs);
		if (!fs)
			goto nomem;
		for (size_t k = 0; k < n; k++) {
			fs[k] = mint_value(&z, sp[k].type, cur + sp[k].start, sp[k].stop - sp[k].start, &rc);
			if (fs[k] < 0) {
				free(fs);
				goto fail;
			}
			outlen = outlen - (sp[k].stop - sp[k].start) + strlen(res->found[fs[k]].token);
		}
		char *out = malloc(outlen + 1);
		if (!out) {
			free(fs);
			goto nomem;
		}
		size_t o = 0, prev = 0;
		for (size_t k = 0; k < n; k++) {
			mb_pii_found *f = &res->found[fs[k]];
			size_t tl = strlen(f->token);
			memcpy(out + o, cur + prev, sp[k].start - prev);
			o += sp[k].start - prev;
			memcpy(out + o, f->token, tl);
			o += tl;
			prev = sp[k].stop;
			f->count++;
			res->counts[sp[k].type]++;
			res->total++;
		}
		memcpy(out + o, cur + prev, curlen - prev);
		o += curlen - prev;
		out[o] = '\0';
		free(fs);
		free(sp);
		sp = NULL;
		free(buf);
		buf = out;
		cur = buf;
		curlen = o;
	}
	if (round == PII_MAX_ROUNDS) {
		mb_seterr(err, errlen, "pii: sanitizing did not settle after %d rounds", PII_MAX_ROUNDS);
		rc = MB_PII_ERR;
		goto fail;
	}
	if (!buf) {
		buf = malloc(len + 1);
		if (!buf)
			goto nomem;
		if (len)
			memcpy(buf, text, len);
		buf[len] = '\0';
		curlen = len;
	}
	res->text = buf;
	res->len = curlen;
	buf = NULL;
	goto done;
nomem:
	mb_seterr(err, errlen, "pii: out of memory sanitizing %zu bytes", len);
	rc = MB_PII_ENOMEM;
fail:
	mb_pii_result_free(res);
done:
	free(sp);
	free(buf);
	free(z.byval);
	free(z.bytok);
	sodium_memzero(&z.base, sizeof z.base);
	mb_pii_scratch_free(own);
	return rc;
}
