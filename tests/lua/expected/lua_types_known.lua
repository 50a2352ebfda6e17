---@class issue_tracker.create_issue.args
---@field assignee? string|json.null A user name, or null for nobody
---@field checklist? issue_tracker.create_issue.args.checklist_item[]
---@field estimate? integer|"unknown"
---@field fields? table<string, string|number|boolean>
---@field labels? string[]
---@field parent? issue_tracker.create_issue.IssueRef
---@field priority? issue_tracker.create_issue.args.priority
---@field project string Project key, e.g. CORE
---@field title string
---@field ["x-trace-id"] string|nil a header-like name

---@class issue_tracker.create_issue.args.checklist_item
---@field done? boolean
---@field subitems? issue_tracker.create_issue.Item[]
---@field text string

---@class issue_tracker.create_issue.Item
---@field children? issue_tracker.create_issue.Item[]
---@field text? string

--- Another issue, by key
---@class issue_tracker.create_issue.IssueRef
---@field key string

---@alias issue_tracker.create_issue.args.priority "low"|"normal"|"high"

---@class issue_tracker.create_issue.result
---@field created? issue_tracker.create_issue.result.created
---@field key string
---@field state issue_tracker.create_issue.result.state
---@field url string
---@field watchers? integer

---@class issue_tracker.create_issue.result.created
---@field at string
---@field by? string

---@alias issue_tracker.create_issue.result.state "open"|"closed"

--- issue-tracker.create-issue - Create an issue
--- Creates an issue in a project.
--- Returns the new issue.
--- Raises an error "issue-tracker.create-issue: <message>" when the call fails.
---@param args issue_tracker.create_issue.args
---@return issue_tracker.create_issue.result result its structuredContent (outputSchema)
function servers.issue_tracker.create_issue(args) end
