/* http_metrics.c - the transport's counters as Prometheus text (format 0.0.4) for /metrics.
 *
 * Counters live in mb_http_stats_t and are bumped on the loop thread as requests are answered;
 * requests are counted per method (6 rows) and status (18 columns, the codes the transport
 * produces plus "other"), so recording one is two small lookups and no allocation. Rendering
 * happens only when /metrics is asked for: the transport's lines first, then whatever text the
 * host's metrics_extra callback returns (executions, sandbox memory).
 */
#include "http_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const method_names[MB_HTTP_NMETHODS] = { "GET", "POST", "DELETE", "OPTIONS",
							     "HEAD", "other" };
static const int status_codes[MB_HTTP_NSTATUS] = { 200, 202, 204, 400, 401, 403, 404, 405, 406,
						   408, 409, 413, 414, 415, 431, 500, 503, 0 };

const char *mb_http_method_name(int i)
{
	return i >= 0 && i < MB_HTTP_NMETHODS ? method_names[i] : "other";
}

int mb_http_status_code(int i)
{
	return i >= 0 && i < MB_HTTP_NSTATUS ? status_codes[i] : 0;
}

int mb_http_status_index(int status)
{
	for (int i = 0; i < MB_HTTP_NSTATUS - 1; i++)
		if (status_codes[i] == status)
			return i;
	return MB_HTTP_NSTATUS - 1;
}

typedef struct {
	char *s;
	size_t len, cap;
	int oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...)
{
	if (b->oom)
		return;
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = 1;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = b->cap * 2 + (size_t)n;
		char *ns = realloc(b->s, cap);
		if (!ns) {
			b->oom = 1;
			return;
		}
		b->s = ns;
		b->cap = cap;
	}
}

static void metric(sbuf *b, const char *name, const char *type, const char *help, uint64_t v)
{
	put(b, "# HELP %s %s\n# TYPE %s %s\n%s %" PRIu64 "\n", name, help, name, type, name, v);
}

char *mb_http_metrics_render(const mb_http_stats_t *st, const char *extra, size_t *len)
{
	sbuf b = { malloc(4096), 0, 4096, 0 };
	if (!b.s)
		return NULL;
	put(&b, "# HELP moonbox_http_requests_total HTTP requests answered, by method and status.\n"
		"# TYPE moonbox_http_requests_total counter\n");
	for (int m = 0; m < MB_HTTP_NMETHODS; m++)
		for (int s = 0; s < MB_HTTP_NSTATUS; s++)
			if (st->requests[m][s]) {
				if (status_codes[s])
					put(&b, "moonbox_http_requests_total{method=\"%s\",status=\"%d\"} %" PRIu64 "\n",
					    method_names[m], status_codes[s], st->requests[m][s]);
				else
					put(&b, "moonbox_http_requests_total{method=\"%s\",status=\"other\"} %" PRIu64 "\n",
					    method_names[m], st->requests[m][s]);
			}
	metric(&b, "moonbox_http_connections_active", "gauge", "Open HTTP connections.", st->connections_active);
	metric(&b, "moonbox_http_connections_total", "counter", "HTTP connections accepted.", st->connections_total);
	metric(&b, "moonbox_http_connections_rejected_total", "counter",
	       "HTTP connections refused beyond http_max_connections.", st->connections_rejected);
	metric(&b, "moonbox_http_sessions_active", "gauge", "Live MCP sessions.", st->sessions_active);
	metric(&b, "moonbox_http_sessions_created_total", "counter", "MCP sessions created.", st->sessions_created);
	metric(&b, "moonbox_http_sessions_expired_total", "counter", "MCP sessions ended by idle expiry.",
	       st->sessions_expired);
	metric(&b, "moonbox_http_sessions_deleted_total", "counter", "MCP sessions ended by DELETE.",
	       st->sessions_deleted);
	metric(&b, "moonbox_http_streams_active", "gauge", "Open GET SSE streams (server-to-client, or resumed).",
	       st->streams_active);
	metric(&b, "moonbox_http_exchanges_active", "gauge", "POSTs waiting for their final message.",
	       st->exchanges_active);
	metric(&b, "moonbox_http_exchanges_detached", "gauge",
	       "POSTs waiting for their final message whose connection closed (kept for a resume).",
	       st->exchanges_detached);
	metric(&b, "moonbox_http_streams_resumed_total", "counter",
	       "SSE streams resumed by a GET with Last-Event-ID.", st->streams_resumed);
	metric(&b, "moonbox_http_replay_bytes", "gauge", "Bytes of SSE events kept for resumption.",
	       st->replay_bytes);
	metric(&b, "moonbox_http_replay_dropped_total", "counter",
	       "SSE events dropped from a session's replay buffer over http_replay_bytes.", st->replay_dropped);
	metric(&b, "moonbox_http_messages_dropped_total", "counter",
	       "Server messages dropped because their client, exchange or session was gone.", st->messages_dropped);
	metric(&b, "moonbox_http_backlog_bytes", "gauge",
	       "Bytes of messages queued for HTTP clients that have not read them (max_backlog_bytes).",
	       st->backlog_bytes);
	metric(&b, "moonbox_http_backlog_peak_bytes", "gauge", "The most moonbox_http_backlog_bytes has been.",
	       st->backlog_peak);
	metric(&b, "moonbox_http_backlog_refused_total", "counter",
	       "Messages not sent because the backlog would pass max_backlog_bytes or max_backlog_tenant_bytes.",
	       st->backlog_refused);
	metric(&b, "moonbox_http_read_timeouts_total", "counter",
	       "Connections cut because a request was not read within http_read_timeout_ms.", st->read_timeouts);
	metric(&b, "moonbox_http_auth_failures_total", "counter", "Requests answered 401.", st->auth_failures);
	metric(&b, "moonbox_http_received_bytes_total", "counter", "Bytes read from HTTP clients.", st->bytes_in);
	metric(&b, "moonbox_http_sent_bytes_total", "counter", "Bytes written to HTTP clients.", st->bytes_out);
	if (extra && *extra) {
		put(&b, "%s", extra);
		if (!b.oom && b.s[b.len - 1] != '\n')
			put(&b, "\n");
	}
	if (b.oom) {
		free(b.s);
		return NULL;
	}
	*len = b.len;
	return b.s;
}
