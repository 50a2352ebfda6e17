/* sandbox_seen.c - the PII tokens that reached an execution from outside it.
 *
 * A token that sandbox code is given - in its code, its context_vars, the reply of a host call
 * (an upstream tool's answer, a skill, the client's answer) or a workspace file - stands for
 * what the tenant's vault binds it to. When the execution mints the same token text for a value
 * of its own (tokenize_pii, the policy) and the vault binds that text to another value, the
 * answer would hold one token for two people, and the host's collision rewrite
 * (lua/mcp/pii.lua) would rename both. So sandbox_pii.c asks the vault before it hands out a
 * token that is in this set (host call "pii_token"). Only those: a token nobody gave the code
 * appears in the answer only where the execution minted it, and the host's rewrite is exact.
 *
 * The set is per execution and bounded (MAX_SEEN tokens); when it is full, or memory ran out,
 * every token counts as seen (each mint then asks: correct, slower). Texts are walked once, where
 * they arrive (beside the context-saved count), for '[' followed by a capital letter.
 * sandbox_pii.c also uses a set for the tokens one sanitize call hands out.
 */
#include <stdlib.h>
#include <string.h>

#include "pii.h"
#include "sandbox_int.h"

#define MAX_SEEN 65536

typedef struct mb_sandbox_seen {
	char (*slots)[MB_PII_TOKEN_MAX]; /* "" = empty */
	size_t n, nslots;
	int full;                        /* over MAX_SEEN or out of memory: everything counts */
} seen_set;

static size_t hash_of(const char *t, size_t len)
{
	size_t h = 1469598103934665603ull;
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)t[i]) * 1099511628211ull;
	return h;
}

/* The slot of token t (len bytes): where it is, or the empty slot where it would go. */
static char *slot_of(const seen_set *s, const char *t, size_t len)
{
	for (size_t i = hash_of(t, len) & (s->nslots - 1);; i = (i + 1) & (s->nslots - 1)) {
		char *e = s->slots[i];
		if (!e[0] || (strlen(e) == len && memcmp(e, t, len) == 0))
			return e;
	}
}

static int grow(seen_set *s)
{
	size_t ns = s->nslots ? s->nslots * 2 : 64;
	char (*slots)[MB_PII_TOKEN_MAX] = calloc(ns, sizeof *slots);
	if (!slots)
		return -1;
	seen_set old = *s;
	s->slots = slots;
	s->nslots = ns;
	for (size_t i = 0; i < old.nslots; i++)
		if (old.slots[i][0])
			memcpy(slot_of(s, old.slots[i], strlen(old.slots[i])), old.slots[i], MB_PII_TOKEN_MAX);
	free(old.slots);
	return 0;
}

/* The next token at or after *pos (its length, 0 when none): mb_pii_token_next, but JSON has a
 * '[' every few bytes in arrays of arrays, so a '[' that cannot open a token (the next byte is
 * not a capital letter) costs a byte test here rather than a call, and memchr takes over when
 * none is near. */
static size_t next_token(const char *s, size_t len, size_t *pos)
{
	size_t p = *pos;
	while (p < len) {
		size_t near = p + 32 < len ? p + 32 : len;
		while (p < near && s[p] != '[')
			p++;
		if (p == near) {
			const char *b = memchr(s + p, '[', len - p);
			if (!b)
				return 0;
			p = (size_t)(b - s);
		}
		if (p + 1 < len && (unsigned char)(s[p + 1] - 'A') < 26) {
			size_t t = mb_pii_token_check(s + p, len - p, NULL);
			if (t) {
				*pos = p;
				return t;
			}
		}
		p++;
	}
	return 0;
}

/* what a set is when memory ran out making it: full, so every token counts as seen */
static seen_set no_memory = { .full = 1 };

void mb_sandbox_seen_add(struct mb_sandbox_seen **set, const char *text, size_t len)
{
	if (!text || !len || !memchr(text, '[', len))
		return;
	seen_set *s = *set;
	if (!s && !(s = *set = calloc(1, sizeof *s)))
		s = *set = &no_memory;
	size_t pos = 0, tlen;
	while (!s->full && (tlen = next_token(text, len, &pos)) != 0) {
		if (tlen < MB_PII_TOKEN_MAX) {
			if ((s->n + 1) * 2 > s->nslots && (s->n >= MAX_SEEN || grow(s) != 0)) {
				s->full = 1;
				break;
			}
			char *e = slot_of(s, text + pos, tlen);
			if (!e[0]) {
				memcpy(e, text + pos, tlen);
				e[tlen] = 0;
				s->n++;
			}
		}
		pos += tlen;
	}
}

int mb_sandbox_seen_has(const struct mb_sandbox_seen *s, const char *token, int if_full)
{
	if (!s)
		return 0;
	if (s->full)
		return if_full;
	return s->nslots && slot_of(s, token, strlen(token))[0] != 0;
}

void mb_sandbox_seen_free(struct mb_sandbox_seen **set)
{
	seen_set *s = *set;
	*set = NULL;
	if (!s || s == &no_memory)
		return;
	free(s->slots);
	free(s);
}
