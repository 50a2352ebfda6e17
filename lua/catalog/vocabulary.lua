-- catalog/vocabulary.lua - the words people use for what tools do: synonyms that search_tools
-- adds to a query (data only; mcp/catalog_text.lua compiles it, docs/catalog.md explains it).
--
-- A user who wants re.gsub asks for "substitute", "swap" or "rewrite"; a tool that creates an
-- issue is asked to "open a ticket" or "file a bug". Tool descriptions use one word for each
-- thing; this file lists the others. Two kinds of entries:
--  * groups: words that stand for one another. Any word of a group, in a query, also finds the
--    other words of the group (each as an exact word, stemmed by the index: "removes" finds
--    "remove"). A word may be in several groups.
--  * also: one-way meanings. The word on the left also finds the words on the right, not the
--    other way round: "open a ticket" means create one, but "create" does not mean "open".
-- Entries are lower case; a phrase is written with spaces ("pull request"): a query that has
-- those words next to each other finds its group as one, and an alternative that is a phrase
-- must be found as that phrase. Keep groups to real synonyms of the words tools use in their
-- names and descriptions (a wrong synonym costs precision everywhere); check a change with
-- tests/bench/search_eval.mjs, which reports recall on a held-out part of the query set.

return {
  groups = {
    -- verbs: creating, reading, changing, removing
    { "create", "add", "make", "insert", "generate", "register", "build" },
    { "get", "fetch", "retrieve", "obtain", "read", "view", "show", "display", "look up", "lookup" },
    { "list", "enumerate", "browse" },
    { "update", "edit", "modify", "change", "alter", "amend", "patch" },
    { "delete", "remove", "erase", "drop", "destroy", "purge", "discard", "trash", "rm",
      "get rid of" },
    { "search", "find", "query", "look for", "look up", "locate", "seek", "lookup", "grep" },
    { "replace", "substitute", "swap", "rewrite", "sub", "substitution", "find and replace" },
    { "send", "post", "deliver", "submit", "dispatch", "transmit" },
    { "write", "save", "store", "persist", "put", "record" },
    { "read", "load", "open" },
    { "download", "export", "pull down" },
    { "upload", "push", "put", "import" },
    { "copy", "duplicate", "clone", "fork" },
    { "move", "rename", "relocate", "transfer" },
    { "merge", "combine", "join" },
    { "split", "divide", "separate", "chop", "explode" },
    { "match", "test", "check", "verify", "validate", "detect" },
    { "extract", "capture", "pluck", "pull out" },
    { "decode", "parse", "deserialize", "deserialise", "unmarshal" },
    { "encode", "serialize", "serialise", "stringify", "marshal" },
    { "sort", "order", "rank", "arrange" },
    { "filter", "select", "narrow" },
    { "count", "tally", "number of", "how many", "histogram" },
    { "sum", "total", "aggregate", "average", "mean", "median", "statistics", "stats" },
    { "group", "bucket", "categorize", "categorise", "partition", "cluster" },
    { "unique", "distinct", "dedupe", "deduplicate", "duplicates" },
    { "take", "first", "head", "top" },
    { "format", "render", "pretty print", "pretty" },
    { "log", "trace" },
    { "progress", "percentage", "percent", "completion status" },
    { "parallel", "concurrent", "concurrently", "simultaneous", "simultaneously", "at once",
      "same time", "fan out" },
    { "ask", "prompt", "elicit", "elicitation" },
    { "sample", "sampling", "llm", "language model", "completion" },
    { "call", "invoke", "execute", "run", "trigger" },
    { "compress", "zip", "gzip", "archive" },
    { "comment", "reply", "respond", "answer", "remark" },
    { "reaction", "react", "emoji" },
    { "schedule", "book", "plan", "agenda" },
    { "share", "grant", "permission", "access" },
    { "summarize", "summarise", "summary", "overview", "describe", "inspect" },
    { "anonymize", "anonymise", "mask", "redact", "hide", "obfuscate", "scrub",
      "pseudonymize", "censor" },
    { "detokenize", "unmask", "reveal", "restore", "deanonymize", "unredact" },
    { "toggle", "enable", "disable", "turn on", "turn off", "switch" },

    -- nouns: the things tools act on
    { "issue", "ticket", "bug", "defect", "task", "problem" },
    { "pull request", "pr", "merge request", "mr", "change request" },
    { "repository", "repo", "project" },
    { "directory", "folder", "dir" },
    { "file", "document", "doc" },
    { "email", "mail", "e mail" },
    { "message", "msg", "note", "post" },
    { "channel", "room", "chat" },
    { "user", "member", "person", "people", "profile", "account" },
    { "event", "meeting", "appointment", "call" },
    { "free", "available", "availability" },
    { "record", "row", "entry", "item", "element" },
    { "field", "column", "attribute", "property" },
    { "database", "db" },
    { "sql", "query" },
    { "observation", "fact", "note" },
    { "entity", "node" },
    { "relation", "relationship", "link", "connection", "edge" },
    { "knowledge graph", "memory", "graph" },
    { "label", "tag" },
    { "image", "picture", "photo", "icon", "logo" },
    { "environment", "env" },
    { "regular expression", "regex", "regexp", "pattern" },
    { "personal data", "pii", "personal information", "sensitive data", "personally identifiable" },
    { "workflow", "pipeline" },
    { "skill", "helper", "snippet", "module", "library", "script" },
    { "metadata", "info", "information", "details", "stat" },
    { "state", "status" },
    { "commit", "revision" },
    { "null", "nil", "none" },
    { "array", "list" },
  },

  -- Words that are in most tool descriptions ("Create a new ...", a "limit" parameter) find
  -- others but are not alternatives themselves: they would match nearly every entry.
  also = {
    new = { "create", "add" },
    set = { "update", "change" },
    limit = { "take", "first", "top" },
    open = { "create", "get", "read", "view" },
    close = { "update", "state", "status" },
    reopen = { "update", "state", "status" },
    resolve = { "update", "transition", "status" },
    mark = { "update", "transition", "status", "set" },
    transition = { "status", "state", "move" },
    move = { "transition" },
    assign = { "update", "assignee" },
    accept = { "merge", "approve" },
    forget = { "delete", "remove" },
    link = { "relation" },
    unlink = { "delete relation", "remove relation" },
    show = { "list" },
    see = { "get", "list", "view", "show" },
    look = { "get", "search", "view" },
    tell = { "send", "post", "message" },
    notify = { "send", "post", "message", "notification" },
    ping = { "send", "message" },
    dm = { "direct message", "send message" },
    mkdir = { "create directory", "create folder" },
    ls = { "list directory", "list files" },
    cat = { "read file" },
    wiki = { "confluence", "page" },
    crm = { "salesforce", "lead", "contact", "account", "opportunity" },
    deal = { "opportunity" },
    customer = { "contact", "account", "client" },
    email = { "message", "inbox" },
    mail = { "message", "inbox" },
  },
}
