/* lpattern.c - Lua 5.4 string patterns (find, match, gmatch, gsub) that obey the execution budget.
 *
 * Why: the stock matcher is a backtracking interpreter that runs entirely in C, where the Lua
 * count hook never fires, so `("a"):rep(2000):find("a*a*b")` runs for ~20 s and longer patterns
 * for hours. This file is an independent implementation with the observable behaviour of Lua
 * 5.4's lstrlib (same results, same capture rules, same lazily raised error messages, same
 * "pattern too complex" depth limit of 200 nested matcher frames), plus one difference: every
 * matcher step decrements a tick counter and every LP_POLL_STEPS steps the budget of the running
 * state is checked (mb_budget_check); a tripped budget raises its sticky limit error.
 *
 * Pieces, bottom up:
 *   - item scanning: lp_item_end (length of one pattern item: char, %x or [set]), lp_class
 *     (%a, %d, ...), lp_in_set ([...] membership) and lp_one (does one subject char match an
 *     item);
 *   - the matcher: lp_do interprets the pattern from a subject position, iterating for simple
 *     items and recursing (one frame per capture boundary or quantifier attempt, bounded by
 *     LP_MAXDEPTH) where backtracking needs a return point; lp_greedy / lp_lazy handle `*`, `+`
 *     and `-`, lp_open / lp_close captures, lp_balance `%b`, lp_backref `%1`..`%9`;
 *   - results: lp_cap_get / lp_push_cap / lp_push_caps turn captures into Lua values;
 *   - the library functions lp_find, lp_match, lp_gmatch (+ its iterator) and lp_gsub, and
 *     mb_lpattern_register which installs them into a string table.
 * The matcher never calls back into Lua and holds no memory outside the Lua stack, so raising
 * the budget error (a longjmp) at any poll point is safe. gsub builds its result in a
 * luaL_Buffer, i.e. through the state's (budgeted) allocator.
 */
#include "lpattern.h"

#include <ctype.h>
#include <stddef.h>
#include <string.h>

#include <lauxlib.h>

#include "budget.h"

enum {
	LP_MAXCAPTURES = 32,  /* as LUA_MAXCAPTURES */
	LP_MAXDEPTH = 200,    /* nested matcher frames, as MAXCCALLS */
	LP_POLL_STEPS = 2000, /* matcher steps between budget checks */
};

#define LP_ESC '%'
#define LP_CAP_OPEN ((ptrdiff_t)-1)     /* capture started, not closed yet */
#define LP_CAP_POS ((ptrdiff_t)-2)      /* position capture "()" */

typedef struct lp_cap {
	const char *start;
	ptrdiff_t len; /* >= 0, LP_CAP_OPEN or LP_CAP_POS */
} lp_cap;

typedef struct lp_match {
	lua_State *L;
	mb_budget *budget;   /* NULL in host states: never stops */
	const char *s_begin; /* subject [s_begin, s_end) */
	const char *s_end;
	const char *p_end;   /* end of the pattern */
	int depth;           /* matcher frames still allowed */
	int ncap;            /* captures opened so far */
	int ticks;           /* steps left until the next budget check */
	lp_cap cap[LP_MAXCAPTURES];
} lp_match;

/* ---- budget ------------------------------------------------------------------------------ */

__attribute__((noinline, cold)) static void lp_poll(lp_match *m)
{
	m->ticks = LP_POLL_STEPS;
	if (m->budget && mb_budget_check(m->budget) != MB_STOP_NONE)
		mb_budget_raise(m->L, m->budget);
}

/* One matcher step. */
#define LP_TICK(m) do { if (--(m)->ticks <= 0) lp_poll(m); } while (0)

/* Charges n steps at once (bulk work such as memcmp or copying). */
static void lp_charge(lp_match *m, size_t n)
{
	if (n >= (size_t)m->ticks)
		lp_poll(m);
	else
		m->ticks -= (int)n;
}

static void lp_init(lp_match *m, lua_State *L, const char *s, size_t sl, const char *p, size_t pl)
{
	m->L = L;
	m->budget = mb_budget_of(L);
	m->s_begin = s;
	m->s_end = s + sl;
	m->p_end = p + pl;
	m->ticks = LP_POLL_STEPS;
	m->depth = LP_MAXDEPTH;
	m->ncap = 0;
}

/* Before each match attempt at a new subject position. */
static void lp_reset(lp_match *m)
{
	m->depth = LP_MAXDEPTH;
	m->ncap = 0;
}

/* ---- single items ------------------------------------------------------------------------ */

/* Does c belong to class letter cl (%a, %d, ..., %z for NUL)? Upper-case letters negate; any
 * other cl stands for itself. */
static int lp_class(int c, int cl)
{
	int r;
	switch (tolower(cl)) {
	case 'a': r = isalpha(c); break;
	case 'c': r = iscntrl(c); break;
	case 'd': r = isdigit(c); break;
	case 'g': r = isgraph(c); break;
	case 'l': r = islower(c); break;
	case 'p': r = ispunct(c); break;
	case 's': r = isspace(c); break;
	case 'u': r = isupper(c); break;
	case 'w': r = isalnum(c); break;
	case 'x': r = isxdigit(c); break;
	case 'z': r = c == 0; break; /* deprecated in 5.2, still accepted by 5.4 */
	default: return cl == c;
	}
	r = r != 0;
	return isupper(cl) ? !r : r;
}

#define LP_MAX_SET 4096

/* Is c in the set whose '[' is at p and whose closing ']' is at close? */
static int lp_in_set(int c, const char *p, const char *close)
{
	int yes = 1;
	p++;
	if (*p == '^') {
		yes = 0;
		p++;
	}
	for (; p < close; p++) {
		if (*p == LP_ESC) {
			p++;
			if (lp_class(c, (unsigned char)*p))
				return yes;
		} else if (p[1] == '-' && p + 2 < close) {
			if ((unsigned char)p[0] <= c && c <= (unsigned char)p[2])
				return yes;
			p += 2;
		} else if ((unsigned char)*p == c) {
			return yes;
		}
	}
	return !yes;
}

/* lp_item_end for '%x' and '[set]' items. */
static const char *lp_item_end_slow(lp_match *m, const char *p)
{
	const char *pe = m->p_end;
	char c = *p++;
	if (c == LP_ESC) {
		if (p >= pe)
			luaL_error(m->L, "malformed pattern (ends with '%%')");
		return p + 1;
	}
	if (c == '[') {
		const char *open = p;
		if (p < pe && *p == '^')
			p++;
		/* the first member is taken literally, so "[]]" is a set holding ']' */
		do {
			if (p >= pe)
				luaL_error(m->L, "malformed pattern (missing ']')");
			/* A set is tested once per subject character and its end found by scanning, so
			 * its length multiplies the cost of every step between budget polls. No useful
			 * set is this long (256 byte values); stock Lua has no limit. */
			if (p - open > LP_MAX_SET)
				luaL_error(m->L, "pattern set too long (more than %d bytes, not allowed in "
					   "the sandbox)", LP_MAX_SET);
			c = *p++;
			if (c == LP_ESC && p < pe)
				p++;
		} while (p >= pe || *p != ']');
		return p + 1;
	}
	return p;
}

/* Returns one past the single-character item starting at p (a char, %x or a [set]). Raises the
 * malformed-pattern errors. p < m->p_end. */
static inline const char *lp_item_end(lp_match *m, const char *p)
{
	if (*p != LP_ESC && *p != '[')
		return p + 1;
	return lp_item_end_slow(m, p);
}

/* Does the subject char at s match the item [p, ep)? False at the end of the subject. */
static inline int lp_one(const lp_match *m, const char *s, const char *p, const char *ep)
{
	if (s >= m->s_end)
		return 0;
	int c = (unsigned char)*s;
	switch (*p) {
	case '.': return 1;
	case LP_ESC: return lp_class(c, (unsigned char)p[1]);
	case '[': return lp_in_set(c, p, ep - 1);
	default: return (unsigned char)*p == c;
	}
}

/* ---- the matcher ------------------------------------------------------------------------- */

static const char *lp_do(lp_match *m, const char *s, const char *p);

/* item* / item+ : take as many as possible, then give back one at a time. */
static const char *lp_greedy(lp_match *m, const char *s, const char *p, const char *ep)
{
	size_t n = 0;
	if (*p == '.') {
		n = (size_t)(m->s_end - s);
		lp_charge(m, n >> 3);
	} else {
		while (lp_one(m, s + n, p, ep)) {
			n++;
			LP_TICK(m);
		}
	}
	for (;;) {
		const char *r = lp_do(m, s + n, ep + 1);
		if (r)
			return r;
		if (n == 0)
			return NULL;
		n--;
	}
}

/* item- : take as few as possible. */
static const char *lp_lazy(lp_match *m, const char *s, const char *p, const char *ep)
{
	for (;;) {
		const char *r = lp_do(m, s, ep + 1);
		if (r)
			return r;
		if (!lp_one(m, s, p, ep))
			return NULL;
		s++;
	}
}

static const char *lp_open(lp_match *m, const char *s, const char *p, ptrdiff_t kind)
{
	int i = m->ncap;
	if (i >= LP_MAXCAPTURES)
		luaL_error(m->L, "too many captures");
	m->cap[i].start = s;
	m->cap[i].len = kind;
	m->ncap = i + 1;
	const char *r = lp_do(m, s, p);
	if (!r)
		m->ncap--;
	return r;
}

static const char *lp_close(lp_match *m, const char *s, const char *p)
{
	int i = m->ncap - 1;
	while (i >= 0 && m->cap[i].len != LP_CAP_OPEN)
		i--;
	if (i < 0)
		luaL_error(m->L, "invalid pattern capture");
	m->cap[i].len = s - m->cap[i].start;
	const char *r = lp_do(m, s, p);
	if (!r)
		m->cap[i].len = LP_CAP_OPEN;
	return r;
}

/* %bxy at p (p points at x). */
static const char *lp_balance(lp_match *m, const char *s, const char *p)
{
	if (p + 1 >= m->p_end)
		luaL_error(m->L, "malformed pattern (missing arguments to '%%b')");
	if (s >= m->s_end || *s != p[0])
		return NULL;
	char open = p[0], close = p[1];
	size_t depth = 1;
	while (++s < m->s_end) {
		LP_TICK(m);
		if (*s == close) {
			if (--depth == 0)
				return s + 1;
		} else if (*s == open) {
			depth++;
		}
	}
	return NULL;
}

/* %1 .. %9 (k is the digit char): the subject must repeat capture k here. */
static const char *lp_backref(lp_match *m, const char *s, int k)
{
	int i = k - '1';
	if (i < 0 || i >= m->ncap || m->cap[i].len == LP_CAP_OPEN)
		luaL_error(m->L, "invalid capture index %%%d", i + 1);
	size_t len = (size_t)m->cap[i].len; /* a position capture becomes huge: no match */
	if ((size_t)(m->s_end - s) < len)
		return NULL;
	lp_charge(m, len >> 4);
	if (memcmp(m->cap[i].start, s, len) != 0)
		return NULL;
	return s + len;
}

/* Matches the pattern [p, p_end) at subject position s; returns the end of the match or NULL.
 * Simple items advance in the loop; anything that needs a backtracking point recurses. */
static const char *lp_do(lp_match *m, const char *s, const char *p)
{
	const char *pe = m->p_end;
	if (m->depth-- == 0)
		luaL_error(m->L, "pattern too complex");
	for (;;) {
		LP_TICK(m);
		if (p == pe)
			break;
		switch (*p) {
		case '(':
			if (p + 1 < pe && p[1] == ')')
				s = lp_open(m, s, p + 2, LP_CAP_POS);
			else
				s = lp_open(m, s, p + 1, LP_CAP_OPEN);
			goto out;
		case ')':
			s = lp_close(m, s, p + 1);
			goto out;
		case '$':
			if (p + 1 == pe) {
				if (s != m->s_end)
					s = NULL;
				goto out;
			}
			break; /* a '$' elsewhere is a literal */
		case LP_ESC:
			if (p + 1 >= pe)
				break; /* lp_item_end reports it */
			if (p[1] == 'b') {
				s = lp_balance(m, s, p + 2);
				if (!s)
					goto out;
				p += 4;
				continue;
			}
			if (p[1] == 'f') {
				p += 2;
				if (p >= pe || *p != '[')
					luaL_error(m->L, "missing '[' after '%%f' in pattern");
				const char *ep = lp_item_end(m, p);
				int before = s == m->s_begin ? 0 : (unsigned char)s[-1];
				int here = s < m->s_end ? (unsigned char)*s : 0;
				if (!lp_in_set(before, p, ep - 1) && lp_in_set(here, p, ep - 1)) {
					p = ep;
					continue;
				}
				s = NULL;
				goto out;
			}
			if (p[1] >= '0' && p[1] <= '9') {
				s = lp_backref(m, s, (unsigned char)p[1]);
				if (!s)
					goto out;
				p += 2;
				continue;
			}
			break;
		default:
			break;
		}
		/* a single item, maybe followed by a quantifier */
		const char *ep = lp_item_end(m, p);
		int q = ep < pe ? *ep : 0;
		if (!lp_one(m, s, p, ep)) {
			if (q == '*' || q == '?' || q == '-') {
				p = ep + 1; /* zero repetitions are fine */
				continue;
			}
			s = NULL;
			goto out;
		}
		switch (q) {
		case '?': {
			const char *r = lp_do(m, s + 1, ep + 1);
			if (r) {
				s = r;
				goto out;
			}
			p = ep + 1;
			continue;
		}
		case '+':
			s = lp_greedy(m, s + 1, p, ep);
			goto out;
		case '*':
			s = lp_greedy(m, s, p, ep);
			goto out;
		case '-':
			s = lp_lazy(m, s, p, ep);
			goto out;
		default:
			s++;
			p = ep;
			continue;
		}
	}
out:
	m->depth++;
	return s;
}

/* ---- captures to Lua values -------------------------------------------------------------- */

/* Capture i of the match [s, e): returns its length and start, or LP_CAP_POS after pushing the
 * position onto the stack. With no captures, "capture 0" is the whole match. */
static ptrdiff_t lp_cap_get(lp_match *m, int i, const char *s, const char *e, const char **start)
{
	if (i >= m->ncap) {
		if (i != 0)
			luaL_error(m->L, "invalid capture index %%%d", i + 1);
		*start = s;
		return e - s;
	}
	ptrdiff_t len = m->cap[i].len;
	*start = m->cap[i].start;
	if (len == LP_CAP_OPEN)
		luaL_error(m->L, "unfinished capture");
	else if (len == LP_CAP_POS)
		lua_pushinteger(m->L, (lua_Integer)(m->cap[i].start - m->s_begin) + 1);
	return len;
}

static void lp_push_cap(lp_match *m, int i, const char *s, const char *e)
{
	const char *start;
	ptrdiff_t len = lp_cap_get(m, i, s, e, &start);
	if (len != LP_CAP_POS)
		lua_pushlstring(m->L, start, (size_t)len);
}

/* Pushes all captures (or the whole match [s, e) when there are none and s is not NULL);
 * returns how many values were pushed. */
static int lp_push_caps(lp_match *m, const char *s, const char *e)
{
	int n = (m->ncap == 0 && s) ? 1 : m->ncap;
	luaL_checkstack(m->L, n, "too many captures");
	for (int i = 0; i < n; i++)
		lp_push_cap(m, i, s, e);
	return n;
}

/* ---- library functions ------------------------------------------------------------------- */

/* Converts a 1-based, possibly negative start position to a 1-based one (may exceed len+1). */
static size_t lp_start_pos(lua_Integer pos, size_t len)
{
	if (pos > 0)
		return (size_t)pos;
	if (pos == 0)
		return 1;
	if (pos < -(lua_Integer)len)
		return 1;
	return len + (size_t)pos + 1;
}

/* True when the pattern has none of the characters that make find() use the matcher. */
static int lp_is_literal(const char *p, size_t pl)
{
	for (size_t i = 0; i < pl; i++) {
		switch (p[i]) {
		case '^': case '$': case '*': case '+': case '?':
		case '.': case '(': case '[': case '%': case '-':
			return 0;
		default:
			break;
		}
	}
	return 1;
}

/* If every match must begin with one particular byte (the pattern opens with a plain character
 * that is not made optional by '*', '?' or '-'), returns that byte, else -1. At a position
 * holding another byte the matcher fails at once and cannot raise an error, so the search
 * loops may skip such positions with memchr without changing any result. */
static int lp_first_byte(const char *p, const char *pe)
{
	if (p >= pe)
		return -1;
	switch (*p) {
	case '(': case ')': case LP_ESC: case '[': case '.':
		return -1;
	case '$':
		if (p + 1 == pe)
			return -1;
		break;
	default:
		break;
	}
	if (p + 1 < pe && (p[1] == '*' || p[1] == '?' || p[1] == '-'))
		return -1;
	return (unsigned char)*p;
}

/* glibc memmem is linear (two-way), but one call over a 100 MB subject still takes tens of
 * milliseconds: search windows of FIND_WINDOW starting positions (each window overlaps the next
 * by pl - 1 bytes, so no match is missed) with a budget poll between windows. A needle longer
 * than the window widens it, which keeps the total work linear. */
#define FIND_WINDOW ((size_t)1 << 20)

static const char *lp_memmem_polled(lua_State *L, const char *hay, size_t left, const char *p,
				    size_t pl)
{
	size_t step = pl > FIND_WINDOW ? pl : FIND_WINDOW;
	if (pl > left)
		return NULL;
	for (;;) {
		size_t starts = left - pl + 1; /* positions where a match could begin */
		size_t span = starts > step ? step + pl - 1 : left;
		const char *hit = memmem(hay, span, p, pl);
		if (hit || span == left)
			return hit;
		hay += step;
		left -= step;
		mb_budget_poll(L);
	}
}

static int lp_find_or_match(lua_State *L, int find)
{
	size_t sl, pl;
	const char *s = luaL_checklstring(L, 1, &sl);
	const char *p = luaL_checklstring(L, 2, &pl);
	size_t init = lp_start_pos(luaL_optinteger(L, 3, 1), sl) - 1;
	if (init > sl) {
		luaL_pushfail(L);
		return 1;
	}
	if (find && (lua_toboolean(L, 4) || lp_is_literal(p, pl))) {
		const char *hit = lp_memmem_polled(L, s + init, sl - init, p, pl);
		if (hit) {
			lua_pushinteger(L, (lua_Integer)(hit - s) + 1);
			lua_pushinteger(L, (lua_Integer)(hit - s + pl));
			return 2;
		}
		luaL_pushfail(L);
		return 1;
	}
	int anchored = pl > 0 && *p == '^';
	if (anchored) {
		p++;
		pl--;
	}
	lp_match m;
	lp_init(&m, L, s, sl, p, pl);
	const char *at = s + init;
	int first = anchored ? -1 : lp_first_byte(p, p + pl);
	for (;;) {
		if (first >= 0) {
			at = memchr(at, first, (size_t)(m.s_end - at));
			if (!at)
				break;
		}
		lp_reset(&m);
		const char *e = lp_do(&m, at, p);
		if (e) {
			if (!find)
				return lp_push_caps(&m, at, e);
			lua_pushinteger(L, (lua_Integer)(at - s) + 1);
			lua_pushinteger(L, (lua_Integer)(e - s));
			return lp_push_caps(&m, NULL, NULL) + 2;
		}
		if (anchored || at >= m.s_end)
			break;
		at++;
	}
	luaL_pushfail(L);
	return 1;
}

static int lp_find(lua_State *L)
{
	return lp_find_or_match(L, 1);
}

static int lp_match_fn(lua_State *L)
{
	return lp_find_or_match(L, 0);
}

/* gmatch iterator state, kept in a userdata upvalue. Subject and pattern are upvalues 1 and 2,
 * which keeps the strings alive (Lua strings never move, so the pointers stay valid). */
typedef struct lp_gmatch_state {
	const char *s, *p;
	size_t sl, pl;
	size_t next;      /* offset where the next search starts (may be len + 1) */
	ptrdiff_t last;   /* end offset of the previous match, -1 before the first */
} lp_gmatch_state;

static int lp_gmatch_next(lua_State *L)
{
	lp_gmatch_state *g = lua_touserdata(L, lua_upvalueindex(3));
	const char *s = g->s, *p = g->p;
	size_t sl = g->sl, pl = g->pl;
	lp_match m;
	lp_init(&m, L, s, sl, p, pl);
	int first = lp_first_byte(p, p + pl);
	for (size_t at = g->next; at <= sl; at++) {
		if (first >= 0) {
			const char *q = memchr(s + at, first, sl - at);
			if (!q)
				break;
			at = (size_t)(q - s);
		}
		lp_reset(&m);
		const char *e = lp_do(&m, s + at, p);
		if (e && e - s != g->last) {
			g->next = (size_t)(e - s);
			g->last = e - s;
			return lp_push_caps(&m, s + at, e);
		}
	}
	g->next = sl + 1; /* exhausted: later calls return nothing at once */
	return 0;
}

static int lp_gmatch(lua_State *L)
{
	size_t sl, pl;
	const char *s = luaL_checklstring(L, 1, &sl);
	const char *p = luaL_checklstring(L, 2, &pl);
	size_t init = lp_start_pos(luaL_optinteger(L, 3, 1), sl) - 1;
	if (init > sl)
		init = sl + 1;
	lua_settop(L, 2);
	lp_gmatch_state *g = lua_newuserdatauv(L, sizeof *g, 0);
	g->s = s;
	g->sl = sl;
	g->p = p;
	g->pl = pl;
	g->next = init;
	g->last = -1;
	lua_pushcclosure(L, lp_gmatch_next, 3);
	return 1;
}

/* Appends the replacement string r (with %0-%9 and %%) for the match [s, e). */
static void lp_add_string(lp_match *m, luaL_Buffer *b, const char *s, const char *e,
			  const char *r, size_t rl)
{
	const char *end = r + rl;
	lp_charge(m, rl >> 5);
	for (;;) {
		const char *pct = memchr(r, LP_ESC, (size_t)(end - r));
		if (!pct)
			break;
		luaL_addlstring(b, r, (size_t)(pct - r));
		int k = pct + 1 < end ? (unsigned char)pct[1] : 0;
		if (k == LP_ESC) {
			luaL_addchar(b, LP_ESC);
		} else if (k == '0') {
			luaL_addlstring(b, s, (size_t)(e - s));
			lp_charge(m, (size_t)(e - s) >> 5);
		} else if (isdigit(k)) {
			const char *start;
			ptrdiff_t len = lp_cap_get(m, k - '1', s, e, &start);
			if (len == LP_CAP_POS) {
				luaL_addvalue(b);
			} else {
				luaL_addlstring(b, start, (size_t)len);
				lp_charge(m, (size_t)len >> 5);
			}
		} else {
			luaL_error(m->L, "invalid use of '%c' in replacement string", LP_ESC);
		}
		r = pct + 2;
	}
	luaL_addlstring(b, r, (size_t)(end - r));
}

/* Appends the replacement for the match [s, e) from the table or function at index 3. Returns
 * whether the text changed (a false/nil result keeps the original). */
static int lp_add_call(lp_match *m, luaL_Buffer *b, const char *s, const char *e, int tr)
{
	lua_State *L = m->L;
	if (tr == LUA_TFUNCTION) {
		lua_pushvalue(L, 3);
		int n = lp_push_caps(m, s, e);
		lua_call(L, n, 1);
	} else {
		lp_push_cap(m, 0, s, e);
		lua_gettable(L, 3);
	}
	if (!lua_toboolean(L, -1)) {
		lua_pop(L, 1);
		luaL_addlstring(b, s, (size_t)(e - s));
		return 0;
	}
	if (!lua_isstring(L, -1))
		return luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
	luaL_addvalue(b);
	return 1;
}

static int lp_gsub(lua_State *L)
{
	size_t sl, pl, rl = 0;
	mb_budget_cstack_check(L); /* the replacement function or table's __index runs Lua */
	const char *src = luaL_checklstring(L, 1, &sl);
	const char *p = luaL_checklstring(L, 2, &pl);
	int tr = lua_type(L, 3);
	lua_Integer max = luaL_optinteger(L, 4, (lua_Integer)sl + 1);
	luaL_argexpected(L, tr == LUA_TNUMBER || tr == LUA_TSTRING || tr == LUA_TFUNCTION ||
			 tr == LUA_TTABLE, 3, "string/function/table");
	const char *repl = NULL;
	if (tr == LUA_TNUMBER || tr == LUA_TSTRING)
		repl = lua_tolstring(L, 3, &rl);
	int anchored = pl > 0 && *p == '^';
	if (anchored) {
		p++;
		pl--;
	}
	luaL_Buffer b;
	luaL_buffinit(L, &b);
	lp_match m;
	lp_init(&m, L, src, sl, p, pl);
	const char *last = NULL;
	lua_Integer n = 0;
	int changed = 0;
	int first = anchored ? -1 : lp_first_byte(p, p + pl);
	while (n < max) {
		if (first >= 0) {
			const char *q = memchr(src, first, (size_t)(m.s_end - src));
			if (!q)
				q = m.s_end;
			luaL_addlstring(&b, src, (size_t)(q - src));
			src = q;
		}
		lp_reset(&m);
		const char *e = lp_do(&m, src, p);
		if (e && e != last) {
			n++;
			if (repl) {
				lp_add_string(&m, &b, src, e, repl, rl);
				changed = 1;
			} else {
				changed |= lp_add_call(&m, &b, src, e, tr);
			}
			src = last = e;
		} else if (src < m.s_end) {
			luaL_addchar(&b, *src++);
		} else {
			break;
		}
		if (anchored)
			break;
	}
	if (!changed) {
		lua_pushvalue(L, 1);
	} else {
		luaL_addlstring(&b, src, (size_t)(m.s_end - src));
		luaL_pushresult(&b);
	}
	lua_pushinteger(L, n);
	return 2;
}

static const luaL_Reg fns[] = {
	{"find", lp_find},
	{"match", lp_match_fn},
	{"gmatch", lp_gmatch},
	{"gsub", lp_gsub},
	{NULL, NULL},
};

lua_CFunction mb_lpattern_function(const char *name)
{
	for (const luaL_Reg *r = fns; r->name; r++)
		if (strcmp(r->name, name) == 0)
			return r->func;
	return NULL;
}

void mb_lpattern_register(lua_State *L, int idx)
{
	idx = lua_absindex(L, idx);
	lua_pushvalue(L, idx);
	luaL_setfuncs(L, fns, 0);
	lua_pop(L, 1);
}
