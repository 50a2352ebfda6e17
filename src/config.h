/* config.h - every option and limit of moonbox, with its default.
 *
 * Options come from four layers, later ones winning: built-in defaults, the config file (JSON,
 * `--config FILE`, default DATA_DIR/config.json when it exists), the environment (`MOONBOX_<NAME>`
 * with the option name upper-cased), and command-line flags (`--<name-with-dashes> VALUE`).
 * The table in config.c is the single list of options; docs/configuration.md mirrors it.
 *
 * Ownership: an mb_config is filled once at start and then read-only; threads may read it freely.
 */
#ifndef MB_CONFIG_H
#define MB_CONFIG_H

#include <stddef.h>
#include <stdint.h>

/// The release, printed by --version, in the man page and as the Debian package's version.
#ifndef MB_VERSION
#define MB_VERSION "0.1.0"
#define MB_REPLICA_ID_MAX 32 /* replica_id: letters, digits, - and _ (it starts HTTP session ids) */
#endif

typedef struct mb_config {
	/* paths */
	char data_dir[4096];
	char config_file[4096];
	/* logging: debug, info, notice, warning, error, critical, alert, emergency */
	char log_level[16];

	/* execute_code limits: the default used when the call does not say, and the maximum a
	 * call may ask for */
	int64_t default_timeout_ms, max_timeout_ms;
	int64_t default_memory_mb, max_memory_mb;
	int64_t default_instruction_limit, max_instruction_limit;
	int64_t max_output_bytes;   /* captured print output; head and tail kept */
	int64_t max_code_bytes;     /* source size of code and of each load() */
	int64_t max_result_bytes;   /* JSON size of the returned result */
	int64_t max_result_nodes;   /* JSON values in the returned result */
	int64_t max_notifications;  /* mcp.log / mcp.progress per execution */
	int64_t max_code_jumps;     /* goto/break/labels per chunk (sandbox.c) */
	int64_t max_c_stack_kb;     /* C stack of calls nested through C (budget.h) */

	/* execution pool */
	char isolation[16];         /* "thread" or "process" (worker processes, docs/security.md) */
	int64_t workers;            /* concurrent executions (0 = number of CPUs) */
	int64_t held_workers;       /* workers beyond `workers` while executions wait for a client */
	int64_t max_queue;          /* queued executions beyond that; more are refused */
	int64_t max_queue_bytes;    /* code + context bytes held by queued executions */
	int64_t max_queue_per_tenant;       /* one tenant's executions running or queued */
	int64_t max_queue_bytes_per_tenant; /* and their code + context bytes */
	int64_t timeout_grace_ms;   /* answer a stuck execution this long after its deadline */
	int64_t max_abandoned;      /* stuck worker threads tolerated before refusing work */
	int64_t max_result_checks;  /* large frames of worker processes checked at once */
	int64_t max_workspace_ops_pending; /* a worker's workspace operations unanswered, per job */
	int64_t max_workspace_ops;  /* a worker's workspace operations per job in all */
	int64_t workspace_ops_per_tenant; /* one tenant's workspace operations on the thread pool */

	/* protocol */
	int64_t max_message_bytes;  /* one JSON-RPC line on stdio */
	int64_t max_backlog_bytes;  /* bytes queued for clients that do not read, all together */
	int64_t max_backlog_tenant_bytes; /* the same per HTTP tenant */
	int64_t max_call_nodes;     /* JSON values in one host call's arguments */
	int64_t json_max_depth;     /* nesting of JSON in and out, protocol and sandbox */
	int64_t tools_page_size;    /* tools/list page size */
	int64_t cache_ttl_ms;       /* 2026-07-28 ttlMs of list and read results */
	int64_t task_max_timeout_ms, task_result_ttl_ms, task_max_per_tenant, task_poll_interval_ms;
	int64_t mrtr_hold_ms;       /* an execution held for client input waits this long */
	int64_t mrtr_max_held;
	int64_t mrtr_max_held_per_tenant;
	int64_t max_client_requests_per_tenant; /* questions to clients waiting, per tenant */
	int64_t max_resource_subscriptions;
	int64_t max_listeners;
	int64_t max_listeners_per_tenant;

	/* re.* (PCRE2) */
	int64_t regex_match_limit;
	int64_t regex_heap_limit_kb;
	int64_t regex_max_pattern_bytes;
	int64_t regex_max_subject_bytes;

	/* store, skills, workspace, history */
	char skills_dir[4096];          /* default DATA_DIR/skills */
	char catalog_dir[4096];         /* default DATA_DIR/catalog */
	char workflows_dir[4096];       /* default DATA_DIR/workflows */
	char share_dir[4096];           /* examples copied into a new skills_dir/catalog_dir; "none" = off */
	int64_t store_busy_timeout_ms;
	char store_url[1024];           /* "" = SQLite in DATA_DIR; postgres://... = PostgreSQL (docs/deploy.md) */
	int64_t store_pg_connections;   /* connections the loop keeps open to PostgreSQL */
	int64_t store_timeout_ms;       /* one PostgreSQL statement (statement_timeout) and connect */
	char replica_id[MB_REPLICA_ID_MAX + 1]; /* names this replica in HTTP session ids ("" = none) */
	char workspace_dir[4096];       /* default DATA_DIR/workspaces; shared by replicas */
	char pii_key_file[4096];        /* default DATA_DIR/pii.key; one file for every replica */
	int64_t max_skill_bytes;        /* one skill's source */
	int64_t luacheck_timeout_ms;    /* save_skill's luacheck run (0 = none) */
	int64_t workspace_max_file_bytes;
	int64_t workspace_max_bytes;    /* per tenant */
	int64_t workspace_max_files;    /* per tenant */
	int64_t history_max_rows;       /* execution records kept */
	int64_t journal_max_rows;       /* execution records kept per tenant */
	int64_t journal_max_age_s;      /* records older than this are dropped (0 = no age limit) */
	int64_t journal_max_code_bytes; /* code kept with a record (longer: hash and size only) */
	int64_t journal_search_bytes; /* code one list_executions search reads */
	int64_t journal_head_bytes;     /* first bytes of result, output and error kept */
	int64_t max_host_calls;         /* skills/workspace/upstream calls per execution */

	/* PII */
	int64_t pii_policy;             /* 1: tokenize what executions return toward the model */
	int64_t pii_restore;            /* 1: restore_pii and detokenize_pii may reveal values */
	char pii_disabled_types[512];   /* comma-separated built-in types not to detect */
	char pii_custom_patterns[16384];/* JSON object {"NAME": "pcre2 pattern", ...} */

	/* Streamable HTTP (src/http.h) */
	char http_listen[256];          /* "" = off; "[host:]port", host default 127.0.0.1 */
	char http_tokens[16384];        /* "token1=tenantA,token2=tenantB" */
	int64_t http_trust_proxy;       /* 1: an authenticating proxy is in front */
	char http_allowed_origins[4096];/* comma-separated Origin values besides loopback */
	char http_allowed_hosts[4096];  /* comma-separated Host values besides loopback */
	char http_cors_origin[4096];    /* "" = no CORS; comma-separated origins or "*" */
	int64_t http_session_idle_ms;
	int64_t http_max_body_bytes;    /* 0 = max_message_bytes */
	int64_t http_max_header_bytes;
	int64_t http_read_timeout_ms;
	int64_t http_max_connections;
	int64_t http_max_sessions;
	int64_t http_max_sessions_per_tenant;
	int64_t http_replay_bytes;      /* 0 = no SSE event ids, no resumption */
	int64_t http_replay_total_bytes; /* all sessions together */

	/* the HTTP endpoint as an OAuth 2.1 resource server (src/auth_oauth.c, docs/auth.md) */
	char oauth_issuer[1024];        /* "" = off; the authorization server's issuer URL */
	char oauth_resource[1024];      /* this server's canonical URL: the audience tokens must name */
	char oauth_tenant_claim[128];   /* the claim whose value is the tenant (default sub) */
	char oauth_scopes[1024];        /* "scope=right,...": rights execute, skills, admin */
	char oauth_jwks_url[1024];      /* "" = jwks_uri of the discovery document */
	char oauth_introspection_url[1024]; /* RFC 7662 introspection of opaque tokens */
	char oauth_client_id[256];      /* the client moonbox introspects as */
	char oauth_client_secret[512];  /* never logged */
	int64_t oauth_jwks_refresh_ms;  /* least time between two fetches of the JWKS */
	int64_t oauth_jwks_max_age_ms;  /* a key set older than this is fetched again (in the background) */
	int64_t oauth_jwks_max_bytes;   /* a larger discovery document or JWKS is refused */
	int64_t oauth_fetch_timeout_ms; /* one request to the authorization server */
	int64_t oauth_clock_skew_s;     /* allowed clock difference for exp and nbf */
	int64_t oauth_token_cache;      /* validated tokens remembered until their exp; 0 = none */
	int64_t oauth_backlog_tenants;  /* OAuth tenants with a backlog counter of their own at once */
	int64_t audit_max_age_s;        /* audit records kept this long (0 = for ever) */
	int64_t audit_flush_ms;         /* audit records are written within this */
	int64_t audit_max_queued;       /* audit records waiting to be written (0 = no audit trail) */
	int64_t audit_sign_in_records;  /* failed sign-ins recorded per minute */

	/* upstream MCP servers (lua/mcp/upstream.lua, docs/gateway.md) */
	char mcp_servers[65536];        /* JSON object: the "mcpServers" block of the config file */
	int64_t upstream_timeout_ms;    /* one upstream call, unless the server sets timeoutMs */
	int64_t upstream_init_timeout_ms;
	int64_t upstream_max_calls;     /* upstream calls per execution, all servers together */
	int64_t upstream_max_parallel;  /* calls of one mcp.parallel in flight at once */
	int64_t upstream_ask_args_bytes;/* arguments shown in an approval question (allowWrites "ask") */
	int64_t upstream_restart_max_ms;/* longest pause between restarts of a failing upstream */
	int64_t upstream_shutdown_grace_ms;
	int64_t upstream_idle_ms;       /* a perTenant instance idle this long is stopped */
	int64_t upstream_max_instances; /* running instances of one perTenant server */
	char tenant_secrets_dir[4096];  /* ${secret:NAME} files; default DATA_DIR/secrets */
	int64_t inferred_shape_max_nodes;   /* result shape of one tool per tenant; 0 = none kept */
	int64_t inferred_shape_total_nodes; /* all result shapes together */
} mb_config;

/* Fills cfg from defaults, config file, environment and argv. Returns 0, 1 when the program
 * should exit successfully (--help, --version, text already printed), or -1 after printing an
 * error that names the bad option or value to stderr. */
int mb_config_load(mb_config *cfg, int argc, char **argv);

/* Writes the effective configuration as JSON-ish "name = value" lines to a FILE* (for --log-level
 * debug start-up logs). */
void mb_config_dump(const mb_config *cfg, void *file);

/// One row of the option table, read by the generated documentation (src/config_doc.c: the man
/// page and the list that tests compare with docs/configuration.md). Points into static data.
typedef struct mb_option_doc {
	const char *name;       ///< snake_case name: flag --name-with-dashes, variable MOONBOX_NAME
	int is_int;             ///< 1: an integer option with def/min/max; 0: a string option
	int64_t def, min, max;  ///< integer options only
	const char *sdef;       ///< string options only: the built-in default ("" = none or derived)
	const char *help;       ///< one line, as --help prints it
} mb_option_doc;

/// Reads row `i` of the option table.
/// @param i    index from 0
/// @param out  filled when the row exists
/// @returns 0, or -1 when `i` is past the last option
int mb_config_option(size_t i, mb_option_doc *out);

#endif
