-- catalog/sandbox_api.lua - moonbox's own sandbox API as catalog entries (category form).
--
-- Compiled into the binary and imported by mcp/catalog.lua as the source "moonbox", so an agent
-- finds what it can call inside execute_code with search_tools, the same way it finds upstream
-- tools. Every entry has kind "function": a description, the Lua signature, its parameters, what
-- it returns and a Lua example. Categories are per area and all start with "sandbox." so the
-- query "sandbox" (or category = "sandbox.regex" etc.) narrows a search to them.
-- Keep this in step with docs/sandbox.md, docs/sandbox-helpers.md and docs/sandbox-regex.md when
-- an API changes: the catalog is what agents read.

local function P(name, type, description, optional)
  return { name = name, type = type, description = description, optional = optional or nil }
end

local FIELD = "a key, a dotted path such as \"user.address.city\", an integer column, or a "
  .. "function(item) returning the value"

return {
  categories = {
    ["sandbox.json"] = {
      kind = "function",
      description = "JSON inside execute_code: encode and decode values with exact 64-bit integers, "
        .. "json.null and json.array for the values Lua tables cannot express.",
      tools = {
        ["json.encode"] = {
          signature = "json.encode(value)",
          description = "Encode a Lua value as compact JSON text. Tables with keys 1..n become "
            .. "arrays, other tables objects; integers stay exact; raises an error naming the path "
            .. "of a value JSON cannot hold (function, NaN, cycle, nesting over json_max_depth).",
          parameters = { P("value", "any", "the value to encode") },
          returns = "string: JSON text",
          use_cases = { "serialize a table to a JSON string", "stringify data before writing it to a file" },
          example = 'local text = json.encode({ name = "ann", tags = json.array({}) })\n'
            .. '--> {"name":"ann","tags":[]}',
        },
        ["json.decode"] = {
          signature = "json.decode(text)",
          description = "Parse JSON text into Lua values: objects become tables, arrays become "
            .. "tables marked as arrays, null becomes json.null. Raises an error with line, column "
            .. "and position on invalid JSON.",
          parameters = { P("text", "string", "JSON text") },
          returns = "the decoded value",
          use_cases = { "parse a JSON string returned by a tool", "read structured data from text" },
          example = 'local data = json.decode(\'{"items": [1, 2, 3]}\')\nreturn #data.items  --> 3',
        },
        ["json.null"] = {
          signature = "json.null",
          description = "The JSON null value. Decoded nulls are json.null (not nil) so that they "
            .. "keep their place in arrays and objects; put it in a table to produce null.",
          returns = "a sentinel value",
          use_cases = { "check whether a decoded field is null", "return an explicit null" },
          example = 'if row.email == json.null then row.email = nil end\n'
            .. 'return { deleted_at = json.null }  --> {"deleted_at": null}',
        },
        ["json.array"] = {
          signature = "json.array(t)",
          description = "Mark a table as a JSON array, so that an empty table encodes as [] "
            .. "instead of {}. Returns the table.",
          parameters = { P("t", "table", "the table to mark") },
          returns = "t",
          use_cases = { "return an empty list as [] not {}" },
          example = "local found = json.array({})\nreturn { matches = found }  --> {\"matches\":[]}",
        },
      },
    },

    ["sandbox.regex"] = {
      kind = "function",
      description = "re: PCRE2 regular expressions (Perl syntax, JIT) inside execute_code, for "
        .. "what Lua patterns cannot do: alternation, counted repeats, lookaround, named groups, "
        .. "Unicode classes, case-insensitive matching. Flags: i m s x u.",
      tools = {
        ["re.match"] = {
          signature = "re.match(s, pattern [, init [, flags]])",
          description = "Match a regular expression against a string and return the captures, or "
            .. "the whole match when the pattern has no groups; nil when it does not match.",
          parameters = {
            P("s", "string", "the subject text"),
            P("pattern", "string", "PCRE2 pattern; use a long string [[...]] to avoid doubling backslashes"),
            P("init", "integer", "1-based start position (negative counts from the end)", true),
            P("flags", "string", "letters i (caseless), m (multiline), s (dotall), x (extended), u (UTF-8)", true),
          },
          returns = "captures (a group that did not take part gives false), or nil",
          use_cases = { "extract a number or date from text with a regex", "validate a string format",
                        "parse key=value pairs" },
          example = 'local user, domain = re.match("ann@example.com", [[^([^@]+)@(.+)$]])\n'
            .. 're.match("Order 66", [[order (\\d+)]], 1, "i")  --> "66"',
        },
        ["re.find"] = {
          signature = "re.find(s, pattern [, init [, flags]])",
          description = "Find the first match of a regular expression and return its start and end "
            .. "positions (1-based, inclusive) followed by the captures; nil when there is none.",
          parameters = {
            P("s", "string", "the subject text"),
            P("pattern", "string", "PCRE2 pattern"),
            P("init", "integer", "1-based start position", true),
            P("flags", "string", "i m s x u", true),
          },
          returns = "start, end, captures... or nil",
          use_cases = { "locate the position of a regex match in a string" },
          example = 're.find("a=1", [[(\\w)=(\\d)]])  --> 1, 3, "a", "1"',
        },
        ["re.gmatch"] = {
          signature = "re.gmatch(s, pattern [, flags])",
          description = "Iterate over all matches of a regular expression; each step gives the "
            .. "captures or the whole match. Empty matches advance by one character.",
          parameters = {
            P("s", "string", "the subject text"),
            P("pattern", "string", "PCRE2 pattern"),
            P("flags", "string", "i m s x u", true),
          },
          returns = "an iterator function",
          use_cases = { "extract all email addresses or URLs from text", "loop over every regex match",
                        "tokenize text into words" },
          example = 'local words = {}\nfor w in re.gmatch(text, [[\\w+]]) do words[#words + 1] = w end',
        },
        ["re.gsub"] = {
          signature = "re.gsub(s, pattern, repl [, max [, flags]])",
          description = "Replace matches of a regular expression (search and replace). repl is a "
            .. "string with $0..$9, ${name} and $$ references, a table indexed by the first capture, "
            .. "or a function called with the captures. Returns the new string and the count.",
          parameters = {
            P("s", "string", "the subject text"),
            P("pattern", "string", "PCRE2 pattern"),
            P("repl", "string|table|function", "the replacement"),
            P("max", "integer", "at most this many replacements", true),
            P("flags", "string", "i m s x u", true),
          },
          returns = "string, number of replacements",
          use_cases = { "regex search and replace in text", "redact or mask parts of a string",
                        "reformat dates" },
          example = 're.gsub("2024-01-15", [[(?<y>\\d+)-(?<m>\\d+)-(?<d>\\d+)]], "${d}/${m}/${y}")\n'
            .. '--> "15/01/2024", 1',
        },
        ["re.split"] = {
          signature = "re.split(s, pattern [, max [, flags]])",
          description = "Split a string at every match of a regular expression; returns the pieces "
            .. "between matches, including empty ones.",
          parameters = {
            P("s", "string", "the subject text"),
            P("pattern", "string", "PCRE2 pattern of the separator"),
            P("max", "integer", "at most this many splits", true),
            P("flags", "string", "i m s x u", true),
          },
          returns = "array of strings",
          use_cases = { "split a line on commas with optional spaces", "split text on a regex separator" },
          example = 're.split("a, b ,c", [[\\s*,\\s*]])  --> {"a", "b", "c"}',
        },
      },
    },

    ["sandbox.workspace"] = {
      kind = "function",
      description = "Workspace files inside execute_code: a directory per tenant that keeps files "
        .. "between calls (paths are relative to the workspace; quotas on file size, total bytes "
        .. "and file count).",
      tools = {
        read_file = {
          signature = "read_file(path)",
          description = "Read a workspace file and return its content as a string; nil and a "
            .. "message when the file does not exist.",
          parameters = { P("path", "string", "path relative to the workspace, e.g. \"reports/q1.csv\"") },
          returns = "string (the file's bytes), or nil, message",
          use_cases = { "load a file saved by an earlier call", "read a CSV or text file from the workspace" },
          example = 'local csv = read_file("data/orders.csv")\nreturn #csv',
        },
        write_file = {
          signature = "write_file(path, data)",
          description = "Write a workspace file: create or replace it with the given content "
            .. "(written atomically); parent directories are created.",
          parameters = {
            P("path", "string", "path relative to the workspace"),
            P("data", "string", "the bytes to write"),
          },
          returns = "true",
          use_cases = { "save results to a file for a later call", "persist intermediate data",
                        "write a report or CSV export" },
          example = 'write_file("out/summary.md", format_output(rows, "markdown"))',
        },
        list_files = {
          signature = "list_files([dir])",
          description = "List the files in the workspace, or under a directory of it.",
          parameters = { P("dir", "string", "directory relative to the workspace (default: all)", true) },
          returns = "array of {path, size, modified}, sorted by path",
          use_cases = { "see which files the workspace holds", "find saved files" },
          example = 'for _, f in ipairs(list_files("out")) do print(f.path, f.size) end',
        },
        delete_file = {
          signature = "delete_file(path)",
          description = "Delete a workspace file.",
          parameters = { P("path", "string", "path relative to the workspace") },
          returns = "true when a file was deleted, false when there was none",
          use_cases = { "remove a temporary or outdated workspace file" },
          example = 'delete_file("tmp/scratch.json")',
        },
        file_exists = {
          signature = "file_exists(path)",
          description = "Tell whether a workspace file exists (false for a directory).",
          parameters = { P("path", "string", "path relative to the workspace") },
          returns = "boolean",
          use_cases = { "check for a cached result before recomputing it" },
          example = 'if not file_exists("cache/users.json") then\n'
            .. '  json.write_file("cache/users.json", fetch_users())\nend',
        },
        ["json.read_file"] = {
          signature = "json.read_file(path)",
          description = "Read a workspace file and decode it as JSON; nil and a message when the "
            .. "file does not exist.",
          parameters = { P("path", "string", "path relative to the workspace") },
          returns = "the decoded value, or nil, message",
          use_cases = { "load JSON data saved by an earlier call" },
          example = 'local state = json.read_file("state.json")\nreturn state.last_id',
        },
        ["json.write_file"] = {
          signature = "json.write_file(path, value [, pretty])",
          description = "Encode a value as JSON and write it to a workspace file.",
          parameters = {
            P("path", "string", "path relative to the workspace"),
            P("value", "any", "the value to encode"),
            P("pretty", "boolean", "indent the JSON (two spaces) for people to read", true),
          },
          returns = "true",
          use_cases = { "save a table as a JSON file", "keep state between executions" },
          example = 'json.write_file("state.json", { last_id = 42, seen = json.array({}) })',
        },
      },
    },

    ["sandbox.skills"] = {
      kind = "function",
      description = "Skills inside execute_code: reusable Lua modules kept in skills/ (edited by "
        .. "people, saved by agents) that any execution can load.",
      tools = {
        require = {
          signature = 'require("skills.<name>")',
          description = "Load a skill module by name and return what it returns (usually a table "
            .. "of functions); skills.<name> does the same, and is nil when no skill has that name "
            .. "(require raises). It runs in the same sandbox under the same limits; skills may "
            .. "require other skills; cycles are an error.",
          parameters = { P("name", "string", '"skills." followed by the skill\'s name') },
          returns = "the skill module's value",
          use_cases = { "reuse a saved skill", "call a helper library from the skills directory" },
          example = 'local invoices = require("skills.invoices")\nreturn invoices.overdue(rows)',
        },
        save_skill = {
          signature = "save_skill(name, code, description [, params]) or save_skill{name=, code=, ...}",
          description = "Save Lua code as a skill (skills/<name>.lua) so later executions can "
            .. "require it. The name must match ^[A-Za-z_][A-Za-z0-9_]*$ and the code must compile.",
          parameters = {
            P("name", "string", "skill name"),
            P("code", "string", "Lua source of the module; it should return a table of functions"),
            P("description", "string", "what the skill does"),
            P("params", "array", "documented parameters: {name, type, description, optional}", true),
          },
          returns = "the saved skill's metadata",
          use_cases = { "turn working code into a reusable function", "build a library of helpers" },
          example = 'save_skill("totals", [[\nlocal M = {}\nfunction M.sum(rows, f)\n'
            .. '  local s = 0\n  for _, r in ipairs(rows) do s = s + r[f] end\n  return s\nend\n'
            .. 'return M]], "Sum a numeric field over rows")',
        },
        load_skill = {
          signature = "load_skill(name)",
          description = "Return a skill's source code and metadata (description, parameters, "
            .. "version) without running it.",
          parameters = { P("name", "string", "skill name") },
          returns = "{name, code, description, params, ...}",
          use_cases = { "read a skill's code before changing it" },
          example = 'local s = load_skill("totals")\nprint(s.description)',
        },
        list_skills = {
          signature = "list_skills([query])",
          description = "List the saved skills with their descriptions, optionally filtered by a "
            .. "search text.",
          parameters = { P("query", "string", "words to filter by", true) },
          returns = "array of {name, description, ...}",
          use_cases = { "find an existing skill before writing new code" },
          example = 'for _, s in ipairs(list_skills("invoice")) do print(s.name, s.description) end',
        },
      },
    },

    ["sandbox.pii"] = {
      kind = "function",
      description = "PII inside execute_code: replace personal data (emails, phone numbers, card "
        .. "numbers, SSNs, IBANs, IP addresses, secrets) by stable tokens such as [EMAIL_3f9a0c1b], "
        .. "and restore them where allowed.",
      tools = {
        tokenize_pii = {
          signature = "tokenize_pii(text)",
          description = "Replace the personal data found in a text by tokens; the same value always "
            .. "gets the same token. Returns the sanitized text and the map of tokens.",
          parameters = { P("text", "string", "the text to sanitize") },
          returns = "sanitized text, {token = type}",
          use_cases = { "anonymize or mask emails and phone numbers before returning data",
                        "redact personal information", "hide sensitive data from the model" },
          example = 'local safe = tokenize_pii("Mail ann@example.com")\n--> "Mail [EMAIL_3f9a0c1b]"',
        },
        detokenize_pii = {
          signature = "detokenize_pii(text)",
          description = "Restore the original values of PII tokens in a text (for example before "
            .. "passing it to an upstream tool that needs the real address).",
          parameters = { P("text", "string", "text containing tokens") },
          returns = "string",
          use_cases = { "send the real email address to a tool", "restore tokenized personal data" },
          example = 'local to = detokenize_pii(args.recipient)  -- "[EMAIL_3f9a0c1b]" -> real address',
        },
        ["pii.scan"] = {
          signature = "pii.scan(text)",
          description = "Find personal data in a text without changing it: a list of the matches "
            .. "with their type and byte positions.",
          parameters = { P("text", "string", "the text to scan") },
          returns = "array of {type, start, stop}",
          use_cases = { "detect whether a document contains personal data", "count emails in text" },
          example = 'for _, m in ipairs(pii.scan(text)) do print(m.type, m.start, m.stop) end',
        },
      },
    },

    ["sandbox.mcp"] = {
      kind = "function",
      description = "Talking to MCP from inside execute_code: log messages and progress "
        .. "notifications to the client, sampling and elicitation, and calls to the tools of "
        .. "upstream MCP servers (servers.<server>.<tool>(args), mcp.call, mcp.parallel).",
      tools = {
        ["mcp.log"] = {
          signature = "mcp.log(level, data)",
          description = "Send a log message notification (notifications/message) to the client "
            .. "while the code runs, at or above the level the client set (default info).",
          parameters = {
            P("level", "string", "debug, info, notice, warning, error, critical, alert or emergency"),
            P("data", "any", "a string or any JSON value"),
          },
          returns = "nothing",
          use_cases = { "report what long-running code is doing", "send a warning to the client" },
          example = 'mcp.log("info", { step = "fetched", rows = #rows })',
        },
        ["mcp.progress"] = {
          signature = "mcp.progress(progress [, total [, message]])",
          description = "Send a progress notification when the request carried a progressToken; "
            .. "progress must increase.",
          parameters = {
            P("progress", "number", "work done so far"),
            P("total", "number", "total work, when known", true),
            P("message", "string", "a short status text", true),
          },
          returns = "nothing",
          use_cases = { "report progress of a loop over many items" },
          example = 'for i, item in ipairs(items) do\n  process(item)\n'
            .. '  if i % 100 == 0 then mcp.progress(i, #items, "processing") end\nend',
        },
        ["mcp.sample"] = {
          signature = "mcp.sample(params)",
          description = "Ask the client's model for a completion (sampling/createMessage) and wait "
            .. "for it; only when the client declared the sampling capability.",
          parameters = {
            P("params", "table", "messages (array of {role, content}), maxTokens, and optionally "
              .. "systemPrompt, temperature, modelPreferences"),
          },
          returns = "the client's result: {role, content, model, stopReason}",
          use_cases = { "classify or summarise text with the client's model from inside code" },
          example = 'local r = mcp.sample({ messages = { { role = "user", content = { type = "text", '
            .. 'text = "Label: " .. line } } }, maxTokens = 20 })\nreturn r.content.text',
        },
        ["mcp.call"] = {
          signature = "mcp.call(server, tool, args)",
          description = "Call a tool of an upstream MCP server configured in mcpServers (the same "
            .. "as servers.<server>.<tool>(args), for names that are not Lua identifiers). Returns "
            .. "the tool's structuredContent, else its text decoded as JSON when it is JSON, else "
            .. "the text, else the content blocks. A tool error raises a Lua error with the tool's "
            .. "message (catch it with pcall). Upstream tools are listed by search_tools under "
            .. "the server's name.",
          parameters = {
            P("server", "string", "the server name from mcpServers"),
            P("tool", "string", "the exact tool name"),
            P("args", "table", "the tool's arguments", true),
          },
          returns = "the tool's value (see description)",
          use_cases = { "call a tool of another MCP server and filter its result in Lua",
                        "chain tools of several servers without sending the data to the model" },
          example = 'local files = mcp.call("filesystem", "list_directory", { path = "/data" })\n'
            .. 'return #files',
        },
        ["mcp.tools"] = {
          signature = "mcp.tools([server])",
          description = "What upstream servers code may call. Without a server: the servers "
            .. "configured in mcpServers, each {name, lua_name, state, tools}. With one: its "
            .. "callable tools, each {name, lua_name, summary, read_only, ask} (ask: each call "
            .. "waits for the person's approval, allowWrites \"ask\"); a server still starting "
            .. "is waited for, one that is not ready raises why. pairs(servers) walks "
            .. "the servers the same way. search_tools finds tools by what they do.",
          parameters = {
            P("server", "string", "a server name (or its Lua name)", true),
          },
          returns = "array of servers, or of one server's tools",
          use_cases = { "list the tools of a server from code", "check which servers are ready" },
          example = 'local out = {}\nfor _, t in ipairs(mcp.tools("github")) do\n'
            .. '  if t.read_only then out[#out + 1] = t.name end\nend\nreturn out',
        },
        run_workflow = {
          signature = "run_workflow(def, inputs)",
          description = "Run a declarative workflow definition (the table form of a workflow file: "
            .. "inputs, steps of kind call, builtin, skill, lua or form, output) with these inputs; "
            .. "errors name the step. Workflow files are listed by the list_workflows tool.",
          parameters = {
            P("def", "table", "{name, inputs, steps = {...}, output}"),
            P("inputs", "table", "the named inputs", true),
          },
          returns = "the output (or the last step's value)",
          use_cases = { "run a few tool calls and a check as data", "ask the user for a form and validate it" },
          example = 'return run_workflow({ name = "demo", steps = {\n'
            .. '  { id = "n", lua = "#inputs.items" },\n'
            .. '} , output = { count = "${steps.n}" } }, { items = { 1, 2, 3 } })',
        },
        ["mcp.parallel"] = {
          signature = "mcp.parallel(list)",
          description = "Run several upstream calls at once and return their results in order. "
            .. "Items are {server, tool, args} tables or functions that make calls (each function "
            .. "runs as its own task; its calls overlap with the others'). The first failure "
            .. "raises; wrap calls in pcall inside a function to keep going.",
          parameters = {
            P("list", "table", "array of {server, tool, args} and/or functions"),
          },
          returns = "array of results (a function's first return value)",
          use_cases = { "fetch many items concurrently", "fan out one query to several servers" },
          example = 'local r = mcp.parallel({\n  { "weather", "get_forecast", { city = "Oslo" } },\n'
            .. '  function() return servers.weather.get_forecast({ city = "Lima" }).temp end,\n})\n'
            .. 'return { oslo = r[1], lima = r[2] }',
        },
        ["mcp.elicit"] = {
          signature = "mcp.elicit(params)",
          description = "Ask the user for input through the client (elicitation/create) and wait "
            .. "for the answer; only when the client declared the elicitation capability.",
          parameters = {
            P("params", "table", "message and requestedSchema (a flat JSON Schema object)"),
          },
          returns = "{action = accept|decline|cancel, content = {...}}",
          use_cases = { "confirm a destructive step", "ask for a missing parameter" },
          example = 'local r = mcp.elicit({ message = "Delete 40 files?", requestedSchema = '
            .. '{ type = "object", properties = { ok = { type = "boolean" } } } })\n'
            .. 'if r.action ~= "accept" then return "cancelled" end',
        },
        ["mcp.roots"] = {
          signature = "mcp.roots()",
          description = "Ask the client for its roots (roots/list): the directories or files it "
            .. "exposes; only when the client declared the roots capability.",
          parameters = {},
          returns = "{roots = {{uri = ..., name = ...}, ...}}",
          use_cases = { "find the user's project directory" },
          example = 'local r = mcp.roots()\nreturn r.roots[1] and r.roots[1].uri',
        },
        ["mcp.ask"] = {
          signature = "mcp.ask(questions)",
          description = "Ask the client several things at once (elicitation/create, "
            .. "sampling/createMessage, roots/list), by key, and wait for every answer. With a "
            .. "2026-07-28 client this is one input_required round trip.",
          parameters = {
            P("questions", "table", "{key = {method = ..., params = {...}}, ...}; keys are names of "
              .. "letters, digits, '_', '.', '-'; at most 16"),
          },
          returns = "{key = the client's answer, ...}",
          use_cases = { "ask for a confirmation and a model summary together" },
          example = 'local a = mcp.ask({\n  ok = { method = "elicitation/create", params = { message = "Go?", '
            .. 'requestedSchema = { type = "object", properties = { ok = { type = "boolean" } } } } },\n'
            .. '  where = { method = "roots/list" },\n})\nreturn { a.ok.action, #a.where.roots }',
        },
        ["mcp.task"] = {
          signature = "mcp.task([message])",
          description = "Go on as a task of the MCP tasks extension: the request is answered now "
            .. "with a task id the client polls (tasks/get) while the code keeps running; message "
            .. "becomes its statusMessage. Returns false when the client did not declare "
            .. "io.modelcontextprotocol/tasks (the code then runs on as an ordinary call).",
          parameters = { P("message", "string", "the task's statusMessage (at most 1024 bytes)", true) },
          returns = "true when the execution runs as a task, false otherwise",
          use_cases = { "turn a long crawl into a task after asking the user what to crawl",
                        "report a long job's phase" },
          example = 'mcp.task("fetching page 1 of 200")\nfor i = 1, 200 do\n  mcp.task("page " .. i)\nend',
        },
        ["mcp.sleep"] = {
          signature = "mcp.sleep(ms)",
          description = "Wait ms milliseconds without using the CPU (a timer on the server), at most "
            .. "until the execution's own deadline (timeout_ms).",
          parameters = { P("ms", "integer", "milliseconds to wait, >= 0") },
          returns = "true",
          use_cases = { "poll an upstream job every few seconds", "back off before a retry" },
          example = 'for i = 1, 10 do\n  if servers.jobs.status{ id = 1 }.done then break end\n  mcp.sleep(2000)\nend',
        },
        ["mcp.client_capabilities"] = {
          signature = "mcp.client_capabilities()",
          description = "The capabilities the client declared (sampling, elicitation, roots, ...), "
            .. "to choose what to ask it before asking.",
          parameters = {},
          returns = "table of the client's capabilities ({} when none)",
          use_cases = { "fall back to sampling when elicitation is not supported" },
          example = 'if mcp.client_capabilities().elicitation then\n  return mcp.elicit({ message = "Name?", '
            .. 'requestedSchema = { type = "object", properties = { n = { type = "string" } } } })\nend',
        },
      },
    },

    ["sandbox.data"] = {
      kind = "function",
      description = "Data helpers inside execute_code: filter, group, count, sort, aggregate and "
        .. "format lists of records next to the data, so only a small result goes back.",
      tools = {
        filter_by_field = {
          signature = "filter_by_field(list, field, value_or_predicate [, op])",
          description = "Keep the items of a list whose field matches a value: op is == (default), "
            .. "~=, <, <=, >, >=, contains, matches (Lua pattern) or in; or pass a predicate "
            .. "function(value, item).",
          parameters = {
            P("list", "array", "the items"),
            P("field", "string|integer|function", FIELD),
            P("value_or_predicate", "any", "the value to compare with, or a function(value, item)"),
            P("op", "string", "== ~= < <= > >= contains matches in", true),
          },
          returns = "a new list of the matching items",
          use_cases = { "filter rows where status is open", "select records above a threshold",
                        "find items whose tags contain a value" },
          example = 'local open = filter_by_field(issues, "state", "open")\n'
            .. 'local big = filter_by_field(orders, "total", 100, ">=")',
        },
        summarize_list = {
          signature = "summarize_list(list [, opts or n])",
          description = "Describe a list compactly: item count, types, each field's count, types "
            .. "and numeric range, and a few trimmed samples. Good to look at unknown data.",
          parameters = {
            P("list", "array", "the items"),
            P("opts", "table|integer", "{samples = 3, max_fields = 50, max_string = 80}, or n samples", true),
          },
          returns = "{count, types, fields, samples}",
          use_cases = { "inspect the shape of data returned by a tool", "see which fields records have" },
          example = "return summarize_list(rows, { samples = 2 })",
        },
        aggregate_stats = {
          signature = "aggregate_stats(list [, field [, group_by]])",
          description = "Statistics of a numeric field: count, sum, mean, min, max, median, standard "
            .. "deviation; optionally one set per group. Records with no field: the statistics of "
            .. "every numeric field, {field = stats}.",
          parameters = {
            P("list", "array", "the items"),
            P("field", "string|integer|function", FIELD, true),
            P("group_by", "string|integer|function", "a field to group by", true),
          },
          returns = "{count, sum, mean, min, max, median, stddev, missing, skipped} (per group key with group_by)",
          use_cases = { "compute average and total of a column", "sum sales per region",
                        "statistics of numbers" },
          example = 'aggregate_stats(orders, "total", "country")\n--> {NO = {count = 12, sum = 340, mean = 28.3, ...}, ...}',
        },
        format_output = {
          signature = "format_output(data [, format] [, max_chars])",
          description = "Render data as text: json (default), table (aligned plain text), csv, "
            .. "markdown or summary, cut to max_chars characters when given "
            .. "(format_output(data, 60) is JSON cut to 60).",
          parameters = {
            P("data", "any", "a list of records, a record, or any value for json"),
            P("format", "string", "json, table, csv, markdown or summary", true),
            P("max_chars", "integer", "cut the text to this many characters, ... at the end", true),
          },
          returns = "string",
          use_cases = { "make a markdown table of results", "export rows as CSV", "pretty print records" },
          example = 'return format_output(take(sort_by(rows, "score", true), 10), "markdown")',
        },
        group_by = {
          signature = "group_by(list [, field])",
          description = "Group the items of a list by the value of a field: {[value] = {items}}.",
          parameters = { P("list", "array", "the items"), P("field", "string|integer|function", FIELD, true) },
          returns = "{[key] = list of items}",
          use_cases = { "group records by category or owner", "bucket rows by a field" },
          example = 'local by_city = group_by(users, "address.city")',
        },
        sort_by = {
          signature = "sort_by(list [, field [, descending]])",
          description = "Sort a list by a field (stable); missing values last.",
          parameters = {
            P("list", "array", "the items"),
            P("field", "string|integer|function", FIELD, true),
            P("descending", "boolean", "true for largest first", true),
          },
          returns = "a new sorted list",
          use_cases = { "order rows by date or score", "top N by a field" },
          example = 'local newest = sort_by(events, "created_at", true)',
        },
        pluck = {
          signature = "pluck(list, field)",
          description = "Take one field from every item: the list of its values (missing ones skipped).",
          parameters = { P("list", "array", "the items"), P("field", "string|integer|function", FIELD) },
          returns = "a list of values",
          use_cases = { "get all ids or emails from records", "extract a column" },
          example = 'local ids = pluck(issues, "id")',
        },
        count_by = {
          signature = "count_by(list [, field])",
          description = "Count the items of a list per value of a field: {[value] = count}.",
          parameters = { P("list", "array", "the items"), P("field", "string|integer|function", FIELD, true) },
          returns = "{[key] = count}",
          use_cases = { "count items per status", "histogram of values", "how many records per category" },
          example = 'count_by(tickets, "priority")  --> {high = 3, low = 12}',
        },
        unique = {
          signature = "unique(list [, field])",
          description = "Remove duplicates from a list, keeping the first item for each distinct "
            .. "value of a field (or of the item).",
          parameters = { P("list", "array", "the items"), P("field", "string|integer|function", FIELD, true) },
          returns = "a new list without duplicates",
          use_cases = { "deduplicate records", "distinct values of a field" },
          example = 'local domains = unique(pluck(users, "domain"))',
        },
        take = {
          signature = "take(list, n)",
          description = "The first n items of a list.",
          parameters = { P("list", "array", "the items"), P("n", "integer", "how many") },
          returns = "a new list",
          use_cases = { "limit results to the first 10", "head of a list" },
          example = 'return take(sort_by(rows, "score", true), 5)',
        },
      },
    },
  },
}
