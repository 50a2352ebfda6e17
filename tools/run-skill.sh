#!/bin/sh
# run-skill.sh - try a skill locally: runs Lua code against a skills directory in a throwaway
# moonbox and prints the execute_code response (its structuredContent has success, result,
# output, error and the counters).
#
#   tools/run-skill.sh 'return require("skills.text_stats")({text = "a b a"})'
#   SKILLS_DIR=~/my-skills tools/run-skill.sh 'return skills.csv.parse("a,b\n1,2\n")'
#
# Uses ./build/moonbox (or $MOONBOX), the skills in $SKILLS_DIR (default ./skills) and a
# temporary data directory, so nothing you do here touches your real store or workspace.
set -eu
code=${1:?usage: tools/run-skill.sh LUA_CODE}
bin=${MOONBOX:-./build/moonbox}
skills=${SKILLS_DIR:-./skills}
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
# the code as a JSON string: escape backslashes, quotes, tabs and newlines
esc=$(printf '%s' "$code" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/\t/\\t/g' | awk 'BEGIN{ORS="\\n"} {print}' | sed 's/\\n$//')
{
  printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"run-skill","version":"1"}}}'
  printf '%s\n' '{"jsonrpc":"2.0","method":"notifications/initialized"}'
  printf '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"execute_code","arguments":{"code":"%s"}}}\n' "$esc"
} | "$bin" --data-dir "$data" --skills-dir "$skills" --log-level warning | grep '"id":2'
