/* test_yaml.c - src/yaml.c: YAML documents become the Lua values a JSON decode would give
 * (checked by encoding them back to JSON), scalars resolve as YAML 1.2's core schema, and
 * aliases, second documents, excessive nesting, duplicate keys and syntax errors are refused
 * with their line and column. */
#include "unit.h"
#include "budget.h"
#include "json.h"
#include "yaml.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdlib.h>

static lua_State *L;

/* The JSON of the decoded value, or "ERR: message". */
static const char *as_json(const char *yaml)
{
	static char out[2048];
	char err[300];
	if (mb_yaml_decode(L, yaml, strlen(yaml), 8, err, sizeof err) != 0) {
		snprintf(out, sizeof out, "ERR: %s", err);
		return out;
	}
	size_t n;
	char jerr[200];
	char *j = mb_json_encode(L, -1, NULL, 0, &n, jerr, sizeof jerr);
	lua_pop(L, 1);
	snprintf(out, sizeof out, "%s", j ? j : jerr);
	free(j);
	return out;
}

TEST(documents)
{
	/* (one key per object: Lua tables have no order) */
	CHECK_STR(as_json("b: [x, \"y\", 2.5]\n"), "{\"b\":[\"x\",\"y\",2.5]}");
	CHECK_STR(as_json("c:\n  - k: v\n  - [1, {d: null}]\n"), "{\"c\":[{\"k\":\"v\"},[1,{\"d\":null}]]}");
	CHECK_STR(as_json("- 1\n- -7\n- 0x10\n- 1e3\n- .5\n"), "[1,-7,\"0x10\",1000.0,0.5]");
	CHECK_STR(as_json("[]"), "[]");
	CHECK_STR(as_json("{}"), "{}");
	CHECK_STR(as_json(""), "null");
	CHECK_STR(as_json("text"), "\"text\"");
	/* multi-line strings */
	CHECK_STR(as_json("s: |\n  line 1\n  line 2\n"), "{\"s\":\"line 1\\nline 2\\n\"}");
	CHECK_STR(as_json("f: >\n  folded\n  text\n"), "{\"f\":\"folded text\\n\"}");
}

TEST(scalars)
{
	CHECK_STR(as_json("[~, null, Null, true, False, 'true', \"1\", !!str 2, 12abc, 1.2.3, 08]"),
		  "[null,null,null,true,false,\"true\",\"1\",\"2\",\"12abc\",\"1.2.3\",8]");
	/* keys are strings: 1: x -> "1" */
	CHECK_STR(as_json("1: a\n"), "{\"1\":\"a\"}");
	CHECK_STR(as_json("true: b\n"), "{\"true\":\"b\"}");
	CHECK_STR(as_json("n: 9007199254740993\n"), "{\"n\":9007199254740993}");
}

TEST(refusals)
{
	CHECK_STR(as_json("a: &x [1]\nb: *x\n"), "ERR: line 2 column 4: aliases (*name) are not supported");
	CHECK_STR(as_json("a: 1\n---\nb: 2\n"), "ERR: line 2 column 1: one YAML document per file");
	CHECK_STR(as_json("a: 1\na: 2\n"), "ERR: line 2 column 1: duplicate key \"a\"");
	CHECK_STR(as_json("[[[[[[[[[1]]]]]]]]]"), "ERR: line 1 column 9: nesting deeper than 8");
	CHECK_STR(as_json("? [1]\n: x\n"), "ERR: line 1 column 5: a mapping key must be a scalar");
	const char *e = as_json("a: [1, 2\nb: 3\n");
	CHECK(strncmp(e, "ERR: line ", 10) == 0);
	CHECK_STR(as_json("a: b: c\n"), "ERR: line 1 column 5: mapping values are not allowed in this context");
	CHECK(lua_gettop(L) == 0);
}

int main(void)
{
	mb_json_global_init();
	L = luaL_newstate();
	*(mb_budget **)lua_getextraspace(L) = NULL; /* no budget: json.c reads it from here */
	luaL_openlibs(L);
	RUN(documents);
	RUN(scalars);
	RUN(refusals);
	lua_close(L);
	return UNIT_END();
}
