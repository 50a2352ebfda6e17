/* config.c - options from defaults, the config file, the environment and the command line.
 *
 * One table (`options` below) lists every option with its type, default and allowed range; the
 * four layers are applied in order (defaults, file, environment, flags), so a flag beats an
 * environment variable, which beats the file. Everything invalid is refused at start with a
 * message naming the option and the value: unknown flags, unknown file keys, non-numbers,
 * out-of-range values. docs/configuration.md mirrors this table.
 */
#include "config.h"
#include "protocol.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <lua.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef enum { OPT_INT, OPT_STR } opt_type;

typedef struct {
	const char *name;   /* snake_case; flag is --name-with-dashes, env MOONBOX_NAME */
	opt_type type;
	size_t offset;
	int64_t def, min, max;
	const char *sdef;
	size_t cap;         /* for strings */
	const char *help;
} option;

#define I(n, d, lo, hi, h) { #n, OPT_INT, offsetof(mb_config, n), d, lo, hi, NULL, 0, h }
#define S(n, d, h) { #n, OPT_STR, offsetof(mb_config, n), 0, 0, 0, d, sizeof(((mb_config *)0)->n), h }

static const option options[] = {
	S(data_dir, "", "data directory (default $XDG_DATA_HOME/moonbox or ~/.local/share/moonbox)"),
	S(config_file, "", "JSON config file (default DATA_DIR/config.json when present); flag --config"),
	S(log_level, "info", "stderr log level: debug info notice warning error critical alert emergency"),
	I(default_timeout_ms, 30000, 1, 3600000, "execute_code wall-clock limit when the call gives none"),
	I(max_timeout_ms, 300000, 1, 3600000, "largest timeout_ms a call may ask for"),
	I(default_memory_mb, 256, 1, 65536, "execute_code memory cap when the call gives none"),
	I(max_memory_mb, 1024, 1, 65536, "largest memory_mb a call may ask for"),
	I(default_instruction_limit, 100000000, 1000, INT64_MAX / 2, "VM instruction budget when the call gives none"),
	I(max_instruction_limit, 10000000000, 1000, INT64_MAX / 2, "largest instruction_limit a call may ask for"),
	I(max_output_bytes, 65536, 256, 1 << 30, "captured print output per execution (head and tail kept)"),
	I(max_code_bytes, 1048576, 64, 1 << 30, "size of code and of each load() chunk"),
	I(max_result_bytes, 16777216, 1024, 1 << 30, "JSON size of an execution's result"),
	I(max_result_nodes, 1000000, 1, (int64_t)1 << 40, "JSON values (objects, arrays, strings, numbers, true/false/null; keys not counted) in an execution's result, a shared table counted each time it is written"),
	I(max_notifications, 1000, 0, 1000000, "mcp.log / mcp.progress calls per execution"),
	I(max_code_jumps, 4096, 16, 32767, "goto/break statements and labels in one chunk of code or load() (the parser resolves them in quadratic time)"),
	I(max_c_stack_kb, 1024, 128, 65536, "C stack for calls nested through C in one execution (coroutine.close/resume, pcall, metamethods, callbacks); worker threads get this plus 6 MiB"),
	S(isolation, "auto", "where executions run: thread (worker threads of the server), process (pre-started worker processes confined by seccomp and Landlock, one per worker; docs/security.md) or auto (process when this machine can start a confined worker, else thread with a warning)"),
	I(workers, 0, 0, 256, "concurrent executions, each on its own thread (0 = number of CPUs)"),
	I(held_workers, 16, 0, 1024, "extra workers started while executions wait for a client's answer (input_required, elicitation, approvals): a held execution does not take one of the `workers` places"),
	I(max_queue, 1024, 0, 1000000, "executions waiting for a worker; more are refused"),
	I(max_queue_bytes, 268435456, 1024, (int64_t)1 << 40, "code and context bytes held by queued executions"),
	I(max_queue_per_tenant, 256, 1, 1000000, "executions one tenant may have running or waiting for a worker at once; more are refused as busy (its share of workers + max_queue)"),
	I(max_queue_bytes_per_tenant, 67108864, 1024, (int64_t)1 << 40, "code and context bytes held by one tenant's executions running or waiting; more are refused as busy"),
	I(timeout_grace_ms, 50, 1, 100, "answer a stuck execution this long after its deadline"),
	I(max_abandoned, 4, 0, 64, "stuck worker threads that get a replacement (at most workers + this many threads); more make new executions refused as busy"),
	I(max_result_checks, 2, 1, 64, "isolation = process: large results and host-call arguments (over 256 KiB) from worker processes checked at once on libuv's thread pool; more wait their turn"),
	I(max_workspace_ops_pending, 4, 1, 1024, "isolation = process: workspace operations one execution's worker process may have asked for and not had answered (its own code waits for each, so more mean a compromised worker: it is stopped)"),
	I(max_workspace_ops, 100000, 1, (int64_t)1 << 40, "isolation = process: workspace operations one execution's worker process may ask for in all; more are answered with an error naming this option"),
	I(workspace_ops_per_tenant, 2, 1, 64, "isolation = process: workspace operations of one tenant's worker processes run at once on libuv's thread pool; more wait their turn (round robin between tenants), and those of an execution that has ended are dropped unstarted"),
	I(max_message_bytes, 16777216, 1024, 1 << 30, "largest JSON-RPC message (one stdio line)"),
	I(max_backlog_bytes, 268435456, 65536, (int64_t)1 << 40, "bytes of answers and notifications queued for clients that have not read them yet, all clients together (HTTP or stdio); a message that would go beyond it is not sent (an answer becomes an error naming this option)"),
	I(max_backlog_tenant_bytes, 134217728, 65536, (int64_t)1 << 40, "the same for the HTTP clients of one tenant together"),
	I(max_call_nodes, 100000, 1, (int64_t)1 << 40, "JSON values in the arguments of one call from sandbox code to the server (skills, mcp.*, upstream tools; all calls of one mcp.parallel round together), a shared table counted each time it is written"),
	I(json_max_depth, 128, 8, 10000, "nesting depth of JSON in messages and in the sandbox"),
	I(tools_page_size, 50, 1, 10000, "tools per tools/list page"),
	I(cache_ttl_ms, 60000, 0, 86400000, "2026-07-28: how long clients may cache list and read results (ttlMs)"),
	I(task_max_timeout_ms, 3600000, 1, 86400000, "tasks extension: largest timeout_ms of an execution run as a task"),
	I(task_result_ttl_ms, 3600000, 1000, 604800000, "tasks extension: how long a finished task's result is kept for tasks/get"),
	I(task_max_per_tenant, 16, 1, 100000, "tasks extension: unfinished tasks (working or input_required) one tenant may have"),
	I(task_poll_interval_ms, 1000, 10, 3600000, "tasks extension: the pollIntervalMs suggested to clients"),
	I(mrtr_hold_ms, 300000, 1000, 86400000, "2026-07-28: how long an execution waits for the client's retry with its input (input_required)"),
	I(mrtr_max_held, 64, 1, 100000, "2026-07-28: executions held waiting for client input at once"),
	I(mrtr_max_held_per_tenant, 16, 1, 100000, "2026-07-28: executions of one tenant held waiting for client input at once"),
	I(max_client_requests_per_tenant, 64, 1, 1000000, "questions to clients (elicitation, sampling, roots) one tenant's requests wait for at once, both protocol eras"),
	I(max_resource_subscriptions, 1000, 1, 1000000, "2026-07-28: resource uris one subscriptions/listen may watch"),
	I(max_listeners, 1000, 1, 1000000, "2026-07-28: subscriptions/listen requests open at once"),
	I(max_listeners_per_tenant, 100, 1, 1000000, "2026-07-28: subscriptions/listen requests one tenant may have open at once"),
	I(regex_match_limit, 100000, 100, 100000000, "PCRE2 match limit per re.* call"),
	I(regex_heap_limit_kb, 8192, 64, 4194304, "PCRE2 backtracking heap per match, KiB"),
	I(regex_max_pattern_bytes, 4096, 16, 1048576, "longest re.* pattern"),
	I(regex_max_subject_bytes, 4194304, 1024, 1 << 30, "longest re.* subject"),
	S(skills_dir, "", "skills directory, the source of truth for skills (default DATA_DIR/skills)"),
	S(catalog_dir, "", "tool catalog directory of *.json files (default DATA_DIR/catalog)"),
	S(workflows_dir, "", "workflow directory of *.json, *.yaml and *.yml files (default DATA_DIR/workflows)"),
	S(share_dir, "", "examples: a skills_dir or catalog_dir that does not exist yet starts as a copy of SHARE_DIR/skills or SHARE_DIR/catalog (default ../share/moonbox beside the binary; \"none\" = start empty)"),
	I(store_busy_timeout_ms, 5000, 0, 600000, "how long a store write waits for a lock"),
	S(store_url, "", "the store: \"\" = the SQLite file DATA_DIR/moonbox.db; postgres://user@host/db (or any libpq connection string) = PostgreSQL, shared by replicas (docs/deploy.md)"),
	I(store_pg_connections, 4, 1, 256, "connections to PostgreSQL the server keeps open (statements of concurrent requests run on them in parallel)"),
	I(store_timeout_ms, 10000, 100, 3600000, "PostgreSQL: longest statement (statement_timeout) and connection attempt"),
	S(replica_id, "", "this replica's name, put in front of its HTTP session ids (\"r1.<64 hex>\") so a load balancer can route a session back: 1 to 32 letters, digits, - or _ (docs/deploy.md)"),
	S(workspace_dir, "", "workspace directory, one subdirectory per tenant (default DATA_DIR/workspaces; replicas share one)"),
	S(pii_key_file, "", "the PII token key (default DATA_DIR/pii.key; replicas point it at one shared file, created through a temporary file in its directory; docs/pii.md)"),
	I(max_skill_bytes, 262144, 64, 16777216, "size of one skill's source"),
	I(luacheck_timeout_ms, 5000, 0, 600000, "how long the save_skill tool waits for luacheck's warnings on the saved skill (0 = do not run luacheck; docs/skills.md)"),
	I(workspace_max_file_bytes, 10485760, 1, (int64_t)1 << 40, "largest workspace file"),
	I(workspace_max_bytes, 104857600, 1, (int64_t)1 << 50, "total workspace bytes per tenant"),
	I(workspace_max_files, 10000, 1, 100000000, "workspace files per tenant"),
	I(history_max_rows, 10000, 0, 100000000, "execution records kept in the store, all tenants together (oldest dropped; 0 = no journal)"),
	I(journal_max_rows, 1000, 1, 100000000, "execution records kept per tenant (oldest dropped)"),
	I(journal_max_age_s, 2592000, 0, 3153600000, "execution records older than this many seconds are dropped (0 = no age limit)"),
	I(journal_max_code_bytes, 65536, 0, 1 << 30, "code kept with an execution record; longer code keeps only its hash and size (and cannot be rerun)"),
	I(journal_search_bytes, 4194304, 1024, (int64_t)1 << 40, "code one list_executions search reads, newest executions first; the answer says where it stopped (search_cut) and how to go on (before)"),
	I(journal_head_bytes, 1024, 0, 1 << 20, "first bytes of an execution's result, output and error kept in its record"),
	I(max_host_calls, 10000, 0, 100000000, "skill, workspace-tool and upstream calls per execution"),
	I(pii_policy, 1, 0, 1, "1: personal data in what executions return is replaced by tokens"),
	I(pii_restore, 1, 0, 1, "1: restore_pii and detokenize_pii may turn tokens back into values"),
	S(pii_disabled_types, "", "comma-separated PII types not to detect (EMAIL,PHONE,SSN,CARD,IPV4,IPV6,SECRET,IBAN)"),
	S(pii_custom_patterns, "", "extra PII patterns as a JSON object {\"NAME\": \"pcre2 pattern\"}"),
	S(http_listen, "", "serve Streamable HTTP on [host:]port (host default 127.0.0.1; \"\" = off)"),
	S(http_tokens, "", "bearer tokens and their tenants: token1=tenantA,token2=tenantB (tokens >= 16 chars)"),
	I(http_trust_proxy, 0, 0, 1, "1: allow a non-loopback http_listen without http_tokens (an authenticating proxy is in front)"),
	S(http_allowed_origins, "", "comma-separated Origin values accepted besides loopback ones (\"*\" = any)"),
	S(http_allowed_hosts, "", "comma-separated Host values (name or name:port) accepted besides loopback ones (\"*\" = any)"),
	S(http_cors_origin, "", "CORS for browser clients: comma-separated origins, or \"*\" for every allowed origin (\"\" = off)"),
	I(http_session_idle_ms, 1800000, 100, (int64_t)1 << 40, "an HTTP session unused this long ends"),
	I(http_max_body_bytes, 0, 0, 1 << 30, "largest POST body (0 = max_message_bytes)"),
	I(http_max_header_bytes, 16384, 1024, 65536, "request line and headers of one HTTP request"),
	I(http_read_timeout_ms, 10000, 100, 3600000, "time to read one request's headers and body; also the idle keep-alive timeout"),
	I(http_max_connections, 1024, 1, 1000000, "open HTTP connections; more are answered 503 and closed"),
	I(http_max_sessions, 10000, 1, 10000000, "live HTTP sessions; more initialize requests are answered 503"),
	I(http_max_sessions_per_tenant, 1000, 1, 10000000, "live HTTP sessions of one tenant; more of its initialize requests are answered 503"),
	I(http_replay_bytes, 1048576, 0, 1 << 30, "SSE events kept per HTTP session for a client that resumes a broken stream with Last-Event-ID (0 = no event ids, no resumption)"),
	I(http_replay_total_bytes, 67108864, 0, (int64_t)1 << 40, "SSE events kept for resumption by all HTTP sessions together; an event that would go beyond it is not kept (after the session's own oldest), so resuming before it is refused"),
	S(oauth_issuer, "", "OAuth: the authorization server (issuer URL) whose JWT access tokens are accepted on HTTP (https://, or http:// on loopback; \"\" = off; docs/auth.md)"),
	S(oauth_resource, "", "OAuth: this server's canonical URL (e.g. https://mcp.example.com/mcp), the audience tokens must name; required with oauth_issuer"),
	S(oauth_tenant_claim, "sub", "OAuth: the token claim whose value is the tenant (A-Z a-z 0-9 _ . -, 1-64 characters)"),
	S(oauth_scopes, "moonbox:execute=execute,moonbox:skills=skills,moonbox:admin=admin", "OAuth: scope=right pairs; rights: execute (run code, the catalog), skills (change skills and workflows), admin (server-wide stats, /metrics)"),
	S(oauth_jwks_url, "", "OAuth: the JWKS URL (\"\" = jwks_uri of the issuer's RFC 8414 or OpenID discovery document)"),
	S(oauth_introspection_url, "", "OAuth: RFC 7662 introspection of opaque tokens (\"\" = the discovery document's introspection_endpoint when oauth_client_id is set; none: opaque tokens are refused)"),
	S(oauth_client_id, "", "OAuth: the client id moonbox introspects with (HTTP Basic)"),
	S(oauth_client_secret, "", "OAuth: the client secret moonbox introspects with (never logged)"),
	I(oauth_jwks_refresh_ms, 60000, 1000, 86400000, "OAuth: least time between two JWKS fetches (a token with an unknown kid fetches it again at most this often)"),
	I(oauth_jwks_max_age_ms, 3600000, 1000, 604800000, "OAuth: a JWKS older than this is fetched again in the background at the next request"),
	I(oauth_jwks_max_bytes, 262144, 1024, 16777216, "OAuth: largest discovery document or JWKS accepted"),
	I(oauth_fetch_timeout_ms, 5000, 100, 60000, "OAuth: one request to the authorization server; requests waiting for its keys wait at most this long per fetch"),
	I(oauth_clock_skew_s, 60, 0, 600, "OAuth: clock difference allowed when checking exp and nbf"),
	I(audit_max_age_s, 7776000, 0, 3153600000, "audit records older than this are dropped (0 = kept for ever); the chain then starts at the oldest kept"),
	I(audit_flush_ms, 1000, 10, 60000, "audit records are written in one transaction at most this long after they happen"),
	I(audit_max_queued, 10000, 0, 10000000, "audit records waiting to be written; beyond, they are counted in one \"dropped\" record (0 = no audit trail)"),
	I(audit_sign_in_records, 60, 0, 100000, "failed sign-ins recorded per minute; the rest of that minute are counted in one record"),
	I(oauth_backlog_tenants, 1024, 0, 65536, "OAuth: tenants that each get their own max_backlog_tenant_bytes counter at once (taken on a tenant's first request, freed when it has no request or unread answer); beyond, they share one"),
	I(oauth_token_cache, 4096, 0, 1000000, "OAuth: validated tokens remembered (by keyed hash) until their exp, so a token is verified once"),
	S(mcp_servers, "", "upstream MCP servers as a JSON object, the \"mcpServers\" block of the config file (docs/gateway.md)"),
	I(upstream_timeout_ms, 60000, 1, 3600000, "one upstream tool call (a server's timeoutMs overrides it)"),
	I(upstream_init_timeout_ms, 30000, 100, 3600000, "start and initialize of an upstream server"),
	I(upstream_max_calls, 1000, 0, 100000000, "upstream tool calls per execution, all servers together"),
	I(upstream_max_parallel, 128, 1, 10000, "calls of one mcp.parallel in flight at once (the rest wait their turn)"),
	I(upstream_ask_args_bytes, 2048, 64, 65536, "bytes of a call's arguments (as JSON, PII tokenized) shown in the question that asks the person to approve it (allowWrites \"ask\"); longer ones are cut"),
	I(upstream_restart_max_ms, 30000, 100, 3600000, "longest pause between restarts of a failing upstream"),
	I(upstream_idle_ms, 300000, 0, (int64_t)1 << 40, "an instance of a perTenant upstream server with no call for this long is stopped, and started again at its tenant's next call (0 = never stopped)"),
	I(upstream_max_instances, 32, 1, 100000, "running instances of one perTenant upstream server, all tenants together; at the bound the least recently used idle one is stopped, and when none is idle the call is refused"),
	S(tenant_secrets_dir, "", "per-tenant secrets of upstream servers: ${secret:NAME} in a server's env or headers reads the file TENANT_SECRETS_DIR/TENANT/NAME (default DATA_DIR/secrets; docs/tenants.md)"),
	I(upstream_shutdown_grace_ms, 2000, 0, 60000, "at shutdown, time an upstream child gets after SIGTERM before SIGKILL (and HTTP session DELETEs, at most 2 s; 0: none sent)"),
	I(inferred_shape_max_nodes, 200, 0, 10000, "types and field names kept of the results of one upstream tool without outputSchema, per tenant, for its inferred Lua result type (0: no shapes recorded)"),
	I(inferred_shape_total_nodes, 200000, 1, 100000000, "types and field names kept for the inferred result types of all tools and tenants together (the least recently updated shapes are dropped)"),
};
#define NOPTS (sizeof options / sizeof options[0])

static const char *levels[] = { "debug", "info", "notice", "warning", "error", "critical",
				"alert", "emergency", NULL };

static void usage(FILE *f)
{
	fprintf(f,
		"moonbox %s - a code-execution MCP server: runs Lua 5.4 in a restricted sandbox.\n\n"
		"usage: moonbox [--data-dir DIR] [--config FILE] [--log-level L] [--OPTION VALUE]...\n"
		"       moonbox run [OPTIONS] FILE.lua | -e CODE | --skill NAME [--args JSON] [--context-vars JSON]\n"
		"       moonbox types DIR   (the sandbox API's LuaLS types and a .luarc.json for editors)\n"
		"       moonbox check FILE.lua|DIR...   (luacheck with the sandbox's globals)\n"
		"       moonbox --verify-audit [OPTIONS]   (checks the audit trail's hash chain: exit 0 holds, 1 broken)\n"
		"       moonbox --help | --version\n\n",
		MB_VERSION);
	/* The revisions come from protocol.h, the list initialize and server/discover use. */
	fprintf(f, "Serves MCP ");
	for (int i = 0; mb_protocol_served[i]; i++)
		fprintf(f, "%s%s", i ? ", " : "", mb_protocol_served[i]);
	fprintf(f, " (with initialize) and ");
	for (int i = 0; mb_protocol_modern[i]; i++)
		fprintf(f, "%s%s", i ? ", " : "", mb_protocol_modern[i]);
	fprintf(f, " (stateless)\n"
		"on stdin/stdout, or Streamable HTTP with --http. Options (flag, MOONBOX_* variable,\n"
		"or key in the JSON config file; flags win over the environment, which wins over the\n"
		"file):\n\n");
	for (size_t i = 0; i < NOPTS; i++) {
		const option *o = &options[i];
		char flag[64];
		snprintf(flag, sizeof flag, "--%s", strcmp(o->name, "config_file") == 0 ? "config" : o->name);
		for (char *p = flag + 2; *p; p++)
			if (*p == '_')
				*p = '-';
		if (strcmp(o->name, "http_listen") == 0)
			snprintf(flag, sizeof flag, "--http-listen, --http");
		if (o->type == OPT_INT)
			fprintf(f, "  %-28s %s (default %lld)\n", flag, o->help, (long long)o->def);
		else
			fprintf(f, "  %-28s %s\n", flag, o->help);
	}
}

static const option *find_option(const char *name)
{
	for (size_t i = 0; i < NOPTS; i++)
		if (strcmp(options[i].name, name) == 0)
			return &options[i];
	return NULL;
}

static int set_value(mb_config *cfg, const option *o, const char *value, const char *source)
{
	if (o->type == OPT_STR) {
		size_t n = strlen(value);
		if (n >= o->cap) {
			fprintf(stderr, "moonbox: %s: value for %s is too long (%zu bytes, at most %zu)\n",
				source, o->name, n, o->cap - 1);
			return -1;
		}
		if (strcmp(o->name, "log_level") == 0) {
			int ok = 0;
			for (int i = 0; levels[i]; i++)
				ok |= strcmp(levels[i], value) == 0;
			if (!ok) {
				fprintf(stderr, "moonbox: %s: log_level \"%s\" is not one of debug, info, notice, "
					"warning, error, critical, alert, emergency\n", source, value);
				return -1;
			}
		}
		if (strcmp(o->name, "isolation") == 0 && strcmp(value, "thread") != 0 &&
		    strcmp(value, "process") != 0 && strcmp(value, "auto") != 0) {
			fprintf(stderr, "moonbox: %s: isolation \"%s\" is not one of auto, thread, "
				"process\n", source, value);
			return -1;
		}
		if (strcmp(o->name, "replica_id") == 0 && n > 0 &&
		    (n > MB_REPLICA_ID_MAX || strspn(value, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
						      "0123456789-_") != n)) {
			fprintf(stderr, "moonbox: %s: replica_id \"%s\" must be 1 to %d letters, digits, - or _ "
				"(it starts this replica's HTTP session ids, docs/deploy.md)\n", source, value,
				MB_REPLICA_ID_MAX);
			return -1;
		}
		memcpy((char *)cfg + o->offset, value, n + 1);
		return 0;
	}
	char *end;
	errno = 0;
	long long v = strtoll(value, &end, 10);
	if (errno || end == value || *end) {
		fprintf(stderr, "moonbox: %s: %s must be an integer, got \"%s\"\n", source, o->name, value);
		return -1;
	}
	if (v < o->min || v > o->max) {
		fprintf(stderr, "moonbox: %s: %s=%lld is out of range [%lld, %lld]\n", source, o->name, v,
			(long long)o->min, (long long)o->max);
		return -1;
	}
	*(int64_t *)((char *)cfg + o->offset) = v;
	return 0;
}

static int load_file(mb_config *cfg, const char *path, int required)
{
	json_error_t jerr;
	if (access(path, F_OK) != 0) {
		if (!required)
			return 0;
		fprintf(stderr, "moonbox: config file %s: %s\n", path, strerror(errno));
		return -1;
	}
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		fprintf(stderr, "moonbox: config file %s:%d:%d: %s\n", path, jerr.line, jerr.column, jerr.text);
		return -1;
	}
	int rc = 0;
	if (!json_is_object(root)) {
		fprintf(stderr, "moonbox: config file %s: the top level must be a JSON object\n", path);
		rc = -1;
		goto done;
	}
	const char *key;
	json_t *val;
	json_object_foreach(root, key, val) {
		/* "mcpServers", as in desktop agent configs, is the file's name for mcp_servers */
		const option *o = find_option(strcmp(key, "mcpServers") == 0 ? "mcp_servers" : key);
		char source[4200];
		snprintf(source, sizeof source, "config file %s", path);
		if (!o || strcmp(key, "config_file") == 0) {
			fprintf(stderr, "moonbox: %s: unknown option \"%s\" (see moonbox --help)\n", source, key);
			rc = -1;
			continue;
		}
		char buf[64];
		if (json_is_integer(val)) {
			snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(val));
			rc |= set_value(cfg, o, buf, source);
		} else if (json_is_string(val)) {
			rc |= set_value(cfg, o, json_string_value(val), source);
		} else if (json_is_object(val) && o->type == OPT_STR) {
			/* an option whose value is JSON text (pii_custom_patterns) may be given as JSON;
			 * the text is jansson's to free (mb_json_global_init gives it another allocator) */
			char *text = json_dumps(val, JSON_COMPACT);
			rc |= text ? set_value(cfg, o, text, source) : -1;
			json_free_t jfree;
			json_get_alloc_funcs(NULL, &jfree);
			if (text)
				jfree(text);
		} else {
			int json_valued = strcmp(o->name, "mcp_servers") == 0 ||
					  strcmp(o->name, "pii_custom_patterns") == 0;
			fprintf(stderr, "moonbox: %s: %s must be %s\n", source, key,
				o->type == OPT_INT ? "an integer" : json_valued ? "a JSON object" : "a string");
			rc = -1;
		}
	}
done:
	json_decref(root);
	return rc ? -1 : 0;
}

/* Maps a flag like "--max-timeout-ms" to its option; "--config" is config_file. */
static const option *flag_option(const char *flag)
{
	char name[64];
	if (strncmp(flag, "--", 2) != 0 || strlen(flag) >= sizeof name + 2)
		return NULL;
	snprintf(name, sizeof name, "%s", flag + 2);
	char *eq = strchr(name, '=');
	if (eq)
		*eq = 0;
	for (char *p = name; *p; p++)
		if (*p == '-')
			*p = '_';
	if (strcmp(name, "config") == 0)
		return find_option("config_file");
	if (strcmp(name, "http") == 0) /* moonbox --http [host:]port */
		return find_option("http_listen");
	if (strcmp(name, "config_file") == 0)
		return NULL;
	return find_option(name);
}

int mb_config_load(mb_config *cfg, int argc, char **argv)
{
	memset(cfg, 0, sizeof *cfg);
	for (size_t i = 0; i < NOPTS; i++) {
		const option *o = &options[i];
		if (o->type == OPT_INT)
			*(int64_t *)((char *)cfg + o->offset) = o->def;
		else
			snprintf((char *)cfg + o->offset, o->cap, "%s", o->sdef);
	}

	/* First pass over argv: --help, --version, and validate every flag. */
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			usage(stdout);
			return 1;
		}
		if (strcmp(a, "--version") == 0) {
			printf("moonbox %s (%s)\n", MB_VERSION, LUA_RELEASE);
			return 1;
		}
		const option *o = flag_option(a);
		if (!o) {
			fprintf(stderr, "moonbox: unknown option \"%s\" (see moonbox --help)\n", a);
			return -1;
		}
		if (!strchr(a, '=')) {
			if (i + 1 >= argc) {
				fprintf(stderr, "moonbox: option %s needs a value\n", a);
				return -1;
			}
			i++;
		}
	}

	/* Environment and flags can name the data dir and config file, so resolve those first. */
	char envname[96];
	const char *v;
	for (int pass = 0; pass < 2; pass++) {
		const char *name = pass == 0 ? "data_dir" : "config_file";
		snprintf(envname, sizeof envname, "MOONBOX_%s", pass == 0 ? "DATA_DIR" : "CONFIG");
		if ((v = getenv(envname)) && *v && set_value(cfg, find_option(name), v, envname))
			return -1;
	}
	for (int i = 1; i < argc; i++) {
		const option *o = flag_option(argv[i]);
		const char *eq = strchr(argv[i], '=');
		const char *val = eq ? eq + 1 : argv[++i];
		if ((strcmp(o->name, "data_dir") == 0 || strcmp(o->name, "config_file") == 0) &&
		    set_value(cfg, o, val, argv[eq ? i : i - 1]))
			return -1;
	}
	if (!cfg->data_dir[0]) {
		const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
		if (!home || !*home) { /* a client that starts servers with an empty environment */
			const struct passwd *pw = getpwuid(getuid());
			home = pw && pw->pw_dir ? pw->pw_dir : NULL;
		}
		int n;
		if (xdg && *xdg)
			n = snprintf(cfg->data_dir, sizeof cfg->data_dir, "%s/moonbox", xdg);
		else
			n = snprintf(cfg->data_dir, sizeof cfg->data_dir, "%s/.local/share/moonbox",
				     home && *home ? home : ".");
		if (n >= (int)sizeof cfg->data_dir) {
			fprintf(stderr, "moonbox: data directory path is too long\n");
			return -1;
		}
	}
	if (cfg->config_file[0]) {
		if (load_file(cfg, cfg->config_file, 1))
			return -1;
	} else {
		char path[4200];
		snprintf(path, sizeof path, "%s/config.json", cfg->data_dir);
		if (load_file(cfg, path, 0))
			return -1;
	}

	/* Environment: MOONBOX_<NAME> for every option. */
	for (size_t i = 0; i < NOPTS; i++) {
		const option *o = &options[i];
		if (strcmp(o->name, "data_dir") == 0 || strcmp(o->name, "config_file") == 0)
			continue;
		int n = snprintf(envname, sizeof envname, "MOONBOX_");
		for (const char *p = o->name; *p && n < (int)sizeof envname - 1; p++)
			envname[n++] = (char)toupper((unsigned char)*p);
		envname[n] = 0;
		if ((v = getenv(envname)) && set_value(cfg, o, v, envname))
			return -1;
	}
	/* Flags win. */
	for (int i = 1; i < argc; i++) {
		const option *o = flag_option(argv[i]);
		const char *flag = argv[i];
		const char *eq = strchr(argv[i], '=');
		const char *val = eq ? eq + 1 : argv[++i];
		if (set_value(cfg, o, val, flag))
			return -1;
	}

	/* Cross-checks. */
	if (cfg->default_timeout_ms > cfg->max_timeout_ms) {
		fprintf(stderr, "moonbox: default_timeout_ms=%lld is above max_timeout_ms=%lld\n",
			(long long)cfg->default_timeout_ms, (long long)cfg->max_timeout_ms);
		return -1;
	}
	if (cfg->default_memory_mb > cfg->max_memory_mb) {
		fprintf(stderr, "moonbox: default_memory_mb=%lld is above max_memory_mb=%lld\n",
			(long long)cfg->default_memory_mb, (long long)cfg->max_memory_mb);
		return -1;
	}
	if (cfg->default_instruction_limit > cfg->max_instruction_limit) {
		fprintf(stderr, "moonbox: default_instruction_limit=%lld is above max_instruction_limit=%lld\n",
			(long long)cfg->default_instruction_limit, (long long)cfg->max_instruction_limit);
		return -1;
	}
	for (int k = 0; k < 3; k++) {
		char *dir = k == 0 ? cfg->skills_dir : k == 1 ? cfg->catalog_dir : cfg->workflows_dir;
		if (!dir[0] && snprintf(dir, sizeof cfg->skills_dir, "%s/%s", cfg->data_dir,
					k == 0 ? "skills" : k == 1 ? "catalog" : "workflows") >= (int)sizeof cfg->skills_dir) {
			fprintf(stderr, "moonbox: data directory path is too long\n");
			return -1;
		}
	}
	/* share_dir: PREFIX/share/moonbox found from the binary's own path (PREFIX/bin/moonbox), so
	 * an installed tree works wherever it is put (a DESTDIR, /opt) without a compiled-in prefix */
	if (!cfg->share_dir[0]) {
		char exe[4096];
		ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
		if (n > 0 && (size_t)n < sizeof exe - 1) {
			exe[n] = 0;
			char *slash = strrchr(exe, '/');     /* PREFIX/bin/moonbox -> PREFIX/bin */
			if (slash)
				*slash = 0;
			slash = strrchr(exe, '/');           /* PREFIX/bin -> PREFIX */
			if (slash) {
				*slash = 0;
				if (snprintf(cfg->share_dir, sizeof cfg->share_dir, "%s/share/moonbox", exe) >=
				    (int)sizeof cfg->share_dir)
					cfg->share_dir[0] = 0;
			}
		}
		if (!cfg->share_dir[0])
			snprintf(cfg->share_dir, sizeof cfg->share_dir, "none");
	}
	if (cfg->workers == 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		cfg->workers = n > 0 ? n : 2;
	}
	return 0;
}

void mb_config_dump(const mb_config *cfg, void *file)
{
	FILE *f = file;
	for (size_t i = 0; i < NOPTS; i++) {
		const option *o = &options[i];
		if (o->type == OPT_INT)
			fprintf(f, "moonbox: config %s = %lld\n", o->name,
				(long long)*(const int64_t *)((const char *)cfg + o->offset));
		else if (strcmp(o->name, "http_tokens") == 0 || strcmp(o->name, "mcp_servers") == 0 ||
			 strcmp(o->name, "store_url") == 0 || strcmp(o->name, "oauth_client_secret") == 0)
			/* secrets (tokens, upstream headers and env, a password in store_url) stay out
			 * of logs */
			fprintf(f, "moonbox: config %s = %s\n", o->name,
				((const char *)cfg + o->offset)[0] ? "(set, not shown)" : "");
		else
			fprintf(f, "moonbox: config %s = %s\n", o->name, (const char *)cfg + o->offset);
	}
}

int mb_config_option(size_t i, mb_option_doc *out)
{
	if (i >= NOPTS)
		return -1;
	const option *o = &options[i];
	*out = (mb_option_doc){ .name = o->name, .is_int = o->type == OPT_INT, .def = o->def,
				.min = o->min, .max = o->max, .sdef = o->sdef, .help = o->help };
	return 0;
}
