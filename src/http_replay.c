/* http_replay.c - the HTTP transport's replay buffer: what SSE resumption (Last-Event-ID) needs.
 *
 * Every SSE stream of a session - a POST answered with SSE, the GET stream - gets a record (an
 * rstream) with a number, and every event on it a sequence number: 0 for the priming event, 1, 2,
 * ... for the host's messages. The id the client sees is "<tag>-<stream>-<seq>", the tag being 8
 * hex digits drawn per session, so an id from another session is recognised as foreign rather
 * than taken for a stream of this one. Each message written on a stream is also kept here (a
 * copy), so a GET with Last-Event-ID can be answered with what came after it on that stream.
 *
 * Bounds, per session: at most REPLAY_STREAMS records (opening one more forgets the oldest that
 * has no connection, a finished one before a parked one); kept events at most http_replay_bytes
 * (and all sessions' together at most http_replay_total_bytes: a session over it loses its own
 * oldest events first, then keeps no new one until others' streams end),
 * counting sizeof(revent) with each message (beyond it the oldest events of the session are
 * dropped, whatever their stream; a message larger than the whole bound is not kept); a finished
 * stream without a connection is forgotten replay_keep ms after it finished or lost its
 * connection (the sweep); everything goes when the session ends. Within a stream, events are
 * dropped oldest first, so what is kept is always every event after dropped_to.
 *
 * Parking. An exchange whose POST connection closes before its final message is not dropped (a
 * disconnect is not a cancellation): its record goes into mb_http.parked, keyed by the exchange,
 * and the host's later messages for it are kept here (and written to a GET that resumed it,
 * http_session.c). The final message, or forgetting the record, ends the exchange.
 *
 * Bookkeeping only: no socket is touched here (http_session.c writes the events). It sits below
 * http_conn.c, which parks an exchange when its connection closes, and calls no other file of the
 * transport. Everything runs on the loop thread (http.h).
 */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_int.h"

#define REPLAY_STREAMS 64 /* stream records remembered per session */

void mb_http_replay_init(session *s)
{
	unsigned char t[4];
	randombytes_buf(t, sizeof t);
	sodium_bin2hex(s->rp.tag, sizeof s->rp.tag, t, sizeof t);
}

/* ---- events ---------------------------------------------------------------------------------- */

static void event_unlink(mb_http *h, revent *e)
{
	replay *rp = &e->rs->s->rp;
	if (e->sprev)
		e->sprev->snext = e->snext;
	else
		rp->ev_first = e->snext;
	if (e->snext)
		e->snext->sprev = e->sprev;
	else
		rp->ev_last = e->sprev;
	size_t n = sizeof *e + e->len;
	rp->bytes -= n;
	h->st.replay_bytes -= n;
}

/* Drops the oldest event of its stream (e == e->rs->head). */
static void event_drop(mb_http *h, revent *e)
{
	rstream *r = e->rs;
	r->head = e->next;
	if (!r->head)
		r->tail = NULL;
	r->dropped_to = e->seq;
	event_unlink(h, e);
	h->st.replay_dropped++;
	free(e);
}

/* ---- streams --------------------------------------------------------------------------------- */

rstream *mb_http_replay_open(mb_http *h, session *s, uint64_t exchange)
{
	replay *rp = &s->rp;
	if (!h->replay_max)
		return NULL;
	if (rp->n >= REPLAY_STREAMS) {
		rstream *victim = NULL;
		for (rstream *r = rp->first; r && !victim; r = r->next)
			if (!r->c && r->done)
				victim = r;
		for (rstream *r = rp->first; r && !victim; r = r->next)
			if (!r->c)
				victim = r;
		if (!victim)
			return NULL; /* every one is being written: this stream goes without ids */
		mb_http_replay_forget(h, victim);
	}
	rstream *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->s = s;
	r->num = ++rp->next_num;
	r->exchange = exchange;
	r->next_seq = 1; /* 0 is the priming event */
	r->idle_since = uv_now(h->loop);
	r->prev = rp->last;
	if (rp->last)
		rp->last->next = r;
	else
		rp->first = r;
	rp->last = r;
	rp->n++;
	if (!exchange) {
		if (rp->get && !rp->get->done) { /* superseded: resumable for what it has, no more */
			rp->get->done = 1;
			rp->get->idle_since = r->idle_since;
		}
		rp->get = r;
	}
	return r;
}

uint64_t mb_http_replay_add(mb_http *h, rstream *r, const char *data, size_t len, int last)
{
	replay *rp = &r->s->rp;
	uint64_t seq = r->next_seq++;
	if (last) {
		r->done = 1;
		r->idle_since = uv_now(h->loop);
	}
	size_t need = sizeof(revent) + len;
	/* the server-wide bound: this session's own oldest events go first, then the event itself
	 * is not kept when the other sessions hold the rest (theirs go as their streams end) */
	while (rp->ev_first && need <= h->replay_max && h->st.replay_bytes + need > h->replay_total_max)
		event_drop(h, rp->ev_first);
	revent *e = need <= h->replay_max && h->st.replay_bytes + need <= h->replay_total_max
		? malloc(need) : NULL;
	if (!e) { /* too large, over the server's bound (or no memory): no resume from before it */
		while (r->head)
			event_drop(h, r->head);
		r->dropped_to = seq;
		h->st.replay_dropped++;
		return seq;
	}
	e->rs = r;
	e->seq = seq;
	e->len = len;
	memcpy(e->data, data, len);
	e->next = NULL;
	if (r->tail)
		r->tail->next = e;
	else
		r->head = e;
	r->tail = e;
	e->snext = NULL;
	e->sprev = rp->ev_last;
	if (rp->ev_last)
		rp->ev_last->snext = e;
	else
		rp->ev_first = e;
	rp->ev_last = e;
	rp->bytes += sizeof *e + len;
	h->st.replay_bytes += sizeof *e + len;
	while (rp->bytes > h->replay_max) /* never e itself: it fits alone */
		event_drop(h, rp->ev_first);
	return seq;
}

void mb_http_replay_id(const rstream *r, uint64_t seq, char *id)
{
	snprintf(id, MB_HTTP_EVENT_ID_MAX, "%s-%llu-%llu", r->s->rp.tag, (unsigned long long)r->num,
		 (unsigned long long)seq);
}

/* Reads 1-20 decimal digits without a leading zero (0 itself allowed). @returns the end or NULL */
static const char *read_num(const char *p, const char *end, uint64_t *v)
{
	const char *q = p;
	uint64_t x = 0;
	while (q < end && *q >= '0' && *q <= '9') {
		if (q - p == 19 || (q - p == 1 && *p == '0'))
			return NULL;
		x = x * 10 + (uint64_t)(*q - '0');
		q++;
	}
	*v = x;
	return q > p ? q : NULL;
}

int mb_http_replay_find(session *s, const char *id, size_t len, rstream **out, uint64_t *seq)
{
	const char *end = id + len, *p = id;
	uint64_t num, n;
	if (len < 12)
		return -EINVAL;
	for (int i = 0; i < 8; i++)
		if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
			return -EINVAL;
	p += 8;
	if (*p++ != '-' || !(p = read_num(p, end, &num)) || p == end || *p++ != '-' ||
	    !(p = read_num(p, end, &n)) || p != end || num == 0)
		return -EINVAL;
	if (memcmp(id, s->rp.tag, 8) != 0)
		return -ENOENT;
	rstream *r = s->rp.first;
	while (r && r->num != num)
		r = r->next;
	if (!r || n >= r->next_seq)
		return -ENOENT;
	if (n < r->dropped_to)
		return -ERANGE;
	*out = r;
	*seq = n;
	return 0;
}

void mb_http_replay_release(mb_http *h, rstream *r)
{
	if (r->c)
		r->c->rs = NULL;
	r->c = NULL;
	r->idle_since = uv_now(h->loop);
}

void mb_http_replay_park(mb_http *h, rstream *r)
{
	r->parked = 1;
	r->xnode.key = r->exchange;
	htab_put(&h->parked, &r->xnode);
	h->st.exchanges_detached++;
}

void mb_http_replay_unpark(mb_http *h, rstream *r)
{
	if (!r->parked)
		return;
	r->parked = 0;
	htab_del(&h->parked, &r->xnode);
	h->st.exchanges_detached--;
	h->st.exchanges_active--;
}

rstream *mb_http_replay_parked(mb_http *h, uint64_t exchange)
{
	hnode *x = htab_get(&h->parked, exchange);
	return x ? container_of(x, rstream, xnode) : NULL;
}

void mb_http_replay_forget(mb_http *h, rstream *r)
{
	replay *rp = &r->s->rp;
	mb_http_replay_unpark(h, r);
	if (r->c)
		r->c->rs = NULL;
	while (r->head) {
		revent *e = r->head;
		r->head = e->next;
		event_unlink(h, e);
		free(e);
	}
	if (r->prev)
		r->prev->next = r->next;
	else
		rp->first = r->next;
	if (r->next)
		r->next->prev = r->prev;
	else
		rp->last = r->prev;
	rp->n--;
	if (rp->get == r)
		rp->get = NULL;
	free(r);
}

void mb_http_replay_sweep(mb_http *h, session *s, uint64_t now)
{
	for (rstream *r = s->rp.first, *next; r; r = next) {
		next = r->next;
		if (r->done && !r->c && now - r->idle_since >= h->replay_keep)
			mb_http_replay_forget(h, r);
	}
}

void mb_http_replay_free(mb_http *h, session *s)
{
	while (s->rp.first)
		mb_http_replay_forget(h, s->rp.first);
}
