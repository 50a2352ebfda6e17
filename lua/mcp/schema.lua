-- mcp/schema.lua - the store's schema as an ordered list of migrations.
--
-- Entry i moves the database from user_version i-1 to i. The host applies the missing ones at
-- start (mb.db.migrate), each in its own transaction; a database whose user_version is above
-- #migrations comes from a newer moonbox and is refused rather than touched. Append only: never
-- edit a migration that has shipped, add a new one.

return {
  -- 1: skills and their versions, execution history
  [[
  CREATE TABLE skills (
    tenant       TEXT NOT NULL,
    name         TEXT NOT NULL,
    path         TEXT,               -- file the skill lives in, relative to the skills dir
    form         TEXT,               -- 'file' (name.lua) or 'dir' (name/SKILL.md + init.lua)
    description  TEXT,
    params       TEXT,               -- JSON array of {name, type, description, optional}
    returns      TEXT,
    tool         TEXT,               -- JSON {inputSchema, outputSchema?, title?} when published
    hash         TEXT,               -- BLAKE2b of the current source
    mtime        INTEGER,
    size         INTEGER,
    status       TEXT NOT NULL,      -- 'ok', 'error' (current source does not compile), 'deleted'
    error        TEXT,
    error_line   INTEGER,
    good_version INTEGER,            -- the last version that compiled: the one in use
    updated_at   INTEGER NOT NULL,   -- ms since the epoch
    PRIMARY KEY (tenant, name)
  );
  CREATE TABLE skill_versions (
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    version     INTEGER NOT NULL,
    code        TEXT NOT NULL,       -- the Lua source (init.lua for directory skills)
    skill_md    TEXT,                -- SKILL.md of a directory skill
    hash        TEXT NOT NULL,
    description TEXT,
    params      TEXT,
    tool        TEXT,
    source      TEXT NOT NULL,       -- 'save', 'file' (picked up from disk), 'restore'
    compiled    INTEGER NOT NULL,    -- 1 when this source compiled
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant, name, version)
  );
  CREATE TABLE executions (
    id           INTEGER PRIMARY KEY,
    tenant       TEXT NOT NULL,
    started_at   INTEGER NOT NULL,   -- ms since the epoch
    duration_ms  REAL NOT NULL,
    outcome      TEXT NOT NULL,      -- 'ok' or the error_type
    instructions INTEGER,
    memory_peak  INTEGER,
    code_hash    TEXT,
    tool         TEXT                -- execute_code or the published skill's name
  );
  CREATE INDEX executions_by_tenant ON executions (tenant, id);
  ]],

  -- 2: the tool catalog (mcp/catalog.lua): sources, categories, entries and their FTS5 index
  [[
  CREATE TABLE catalog_sources (
    source     TEXT PRIMARY KEY,   -- 'moonbox' (built in), 'file:<name>.json', or an importer's name
    origin     TEXT,               -- the file's path, or what the importer gave
    content    TEXT,               -- JSON text of the last good import (re-imported after clashes)
    status     TEXT NOT NULL,      -- 'ok', or 'error': the last attempt failed, the last good
                                   -- content stays indexed
    error      TEXT,
    tools      INTEGER NOT NULL,   -- entries indexed from this source
    skipped    INTEGER NOT NULL,   -- entries hidden by a source that takes precedence
    updated_at INTEGER NOT NULL    -- ms since the epoch
  );
  CREATE TABLE catalog_categories (
    category    TEXT NOT NULL,
    source      TEXT NOT NULL,
    description TEXT,
    PRIMARY KEY (category, source)
  );
  CREATE TABLE catalog_tools (
    id         INTEGER PRIMARY KEY,  -- also the rowid in catalog_fts
    category   TEXT NOT NULL,
    name       TEXT NOT NULL,
    source     TEXT NOT NULL,
    summary    TEXT NOT NULL,        -- one-line description
    definition TEXT NOT NULL,        -- the full definition as JSON, with its Lua example
    UNIQUE (category, name)
  );
  CREATE INDEX catalog_tools_by_name ON catalog_tools (name);
  CREATE INDEX catalog_tools_by_source ON catalog_tools (source);
  -- The tokenizer splits snake_case, dotted and kebab names at their separators; the parts of
  -- camelCase names are added in Lua before indexing. Prefix indexes serve short "term"*.
  CREATE VIRTUAL TABLE catalog_fts USING fts5(
    name, category, description, params, use_cases,
    tokenize = "porter unicode61", prefix = '2 3'
  );
  ]],

  -- 3: the PII vault: which value a token stands for, per tenant
  [[
  CREATE TABLE pii_vault (
    tenant     TEXT NOT NULL,
    token      TEXT NOT NULL,       -- "[EMAIL_3f9a0c1b]"
    type       TEXT NOT NULL,
    value      BLOB NOT NULL,
    first_seen INTEGER NOT NULL,    -- ms since the epoch
    last_seen  INTEGER NOT NULL,
    PRIMARY KEY (tenant, token)
  ) WITHOUT ROWID;
  ]],

  -- 4: skills published as MCP prompts and resources (JSON {prompt = {...}, resource = {...}})
  [[
  ALTER TABLE skills ADD COLUMN publish TEXT;
  ALTER TABLE skill_versions ADD COLUMN publish TEXT;
  ]],

  -- 5: the journal (mcp/history.lua, docs/journal.md): what an execution was and what the model
  -- saw of it, to find it again and rerun it. ref is the id tools show (random, per row; rows
  -- recorded before this migration get one too).
  [[
  ALTER TABLE executions ADD COLUMN ref TEXT;           -- 16 hex digits, random
  ALTER TABLE executions ADD COLUMN code TEXT;          -- NULL when over journal_max_code_bytes
  ALTER TABLE executions ADD COLUMN code_bytes INTEGER;
  ALTER TABLE executions ADD COLUMN context_bytes INTEGER; -- size of the context_vars JSON
  ALTER TABLE executions ADD COLUMN result_head TEXT;   -- first journal_head_bytes of the result JSON
  ALTER TABLE executions ADD COLUMN result_bytes INTEGER;
  ALTER TABLE executions ADD COLUMN output_head TEXT;   -- ... of the print output
  ALTER TABLE executions ADD COLUMN output_bytes INTEGER;
  ALTER TABLE executions ADD COLUMN error TEXT;         -- ... of the error message
  ALTER TABLE executions ADD COLUMN tools_called TEXT;  -- upstream "server.tool" lines
  ALTER TABLE executions ADD COLUMN rerun_of TEXT;      -- ref of the execution this one reran
  UPDATE executions SET ref = lower(hex(randomblob(8))) WHERE ref IS NULL;
  CREATE INDEX executions_by_ref ON executions (tenant, ref);
  ]],

  -- 6: list_executions' search budget (journal_search_bytes) sums code_bytes newest first; from
  -- this index, not the rows, where code_bytes sits after the code (its overflow pages)
  [[
  CREATE INDEX executions_code_bytes ON executions (tenant, id, code_bytes);
  ]],

  -- 7: who ran it: the OAuth principal (the token's sub) beside the tenant; NULL for stdio,
  -- static http_tokens and rows recorded before
  [[
  ALTER TABLE executions ADD COLUMN principal TEXT;
  ]],

  -- 8: the audit trail (mcp/audit.lua): append-only, each record chained to the one before by a
  -- keyed hash (src/audit.c; moonbox --verify-audit)
  [[
  CREATE TABLE audit (
    id        INTEGER PRIMARY KEY,  -- the chain's order
    at        INTEGER NOT NULL,     -- wall clock, ms since the epoch
    tenant    TEXT NOT NULL,        -- "(none)": a failed sign-in; "(server)": the server's own
    principal TEXT,                 -- an OAuth token's sub
    client    TEXT,                 -- the session's clientInfo name/version
    kind      TEXT NOT NULL,
    subject   TEXT,                 -- an execution id, "server.tool", a skill's name
    detail    TEXT,                 -- JSON object
    prev      TEXT,                 -- the hash of the record before (NULL: the first)
    hash      TEXT NOT NULL
  );
  CREATE INDEX audit_by_tenant ON audit (tenant, id);
  CREATE INDEX audit_by_at ON audit (at);
  ]],

  -- 9: tasks of the tasks extension (mcp/tasks.lua, docs/tasks.md): one row per task, written
  -- before its CreateTaskResult is sent; deleted once expires_at has passed
  [[
  CREATE TABLE tasks (
    id               TEXT PRIMARY KEY,  -- unguessable (mcp/tasks.lua)
    tenant           TEXT NOT NULL,
    principal        TEXT NOT NULL,     -- the OAuth token's sub; '' without one
    status           TEXT NOT NULL,     -- working, input_required, completed, failed, cancelled
    status_message   TEXT,
    input_requests   TEXT,              -- JSON object: the inputRequests while input_required
    result           TEXT,              -- JSON: the tool result (completed)
    error            TEXT,              -- JSON {code, message, data} (failed)
    created_at       INTEGER NOT NULL,  -- ms since the epoch
    updated_at       INTEGER NOT NULL,
    expires_at       INTEGER NOT NULL,
    poll_ms          INTEGER NOT NULL,
    heartbeat_at     INTEGER NOT NULL,  -- the running process refreshes it (a dead one stops)
    cancel_requested INTEGER NOT NULL DEFAULT 0
  );
  CREATE INDEX tasks_by_tenant ON tasks (tenant, status);
  CREATE INDEX tasks_by_expiry ON tasks (expires_at);
  ]],
}
