/* test_sandbox_pii.c - the PII policy on numbers an execution returns (src/sandbox_pii.c,
 * replace_number), in-process with the built-in detector.
 *
 * Found by tests/fuzz/fuzz_sandbox.c: the policy converted every number to a float and back to
 * long long, which is undefined behaviour for floats beyond the integer range (UBSan: "1e+308 is
 * outside the range of representable values of type 'long long'"; `return 1e308` with the policy
 * on), and scanned integers above 2^53 through a float, so it read other digits than the ones
 * returned (a 19-digit card number was not found). */
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "config.h"
#include "pii.h"
#include "sandbox.h"
#include "sandbox_int.h"
#include "sandbox_setup.h"
#include "unit.h"

static mb_config cfg;

/* The result JSON of code run with the PII policy on (static buffer), or "ERR: ...". */
static const char *run(const char *code)
{
	static char out[512];
	mb_budget b;
	mb_budget_init(&b, 32u << 20, 10000000, 2000);
	mb_exec_request req = { .code = code, .code_len = strlen(code), .timeout_ms = 2000,
				.memory_bytes = 32u << 20, .instruction_limit = 10000000, .cfg = &cfg,
				.pii_policy = 1 };
	mb_exec_result r;
	mb_sandbox_run(&req, &b, &r);
	snprintf(out, sizeof out, "%s%s", r.success ? "" : "ERR: ", r.success ? r.result_json : r.error);
	mb_exec_result_free(&r);
	return out;
}

TEST(floats_beyond_the_integer_range_stay_numbers)
{
	CHECK_STR(run("return 1e308"), "1e308");
	CHECK_STR(run("return -1e300"), "-1e300");
	CHECK_STR(run("return 2^63"), "9.223372036854776e18");
	CHECK_STR(run("return 1/0 == math.huge"), "true");
}

TEST(integers_are_scanned_with_their_own_digits)
{
	CHECK_STR(run("return math.maxinteger"), "9223372036854775807");
	CHECK_STR(run("return math.mininteger"), "-9223372036854775808");
	/* a 19-digit card number (Luhn) above 2^53: a float would read 4111111111111111168 */
	const char *r = run("return 4111111111111111110");
	CHECK(strncmp(r, "\"[CARD_", 7) == 0);
	r = run("return 4111111111111111.0"); /* an integral float in range is scanned too */
	CHECK(strncmp(r, "\"[CARD_", 7) == 0);
	CHECK_STR(run("return 12345678"), "12345678"); /* under 9 digits: left alone */
}

/* The policy walks the lazy globals whole (sandbox_env.c): a value stored in them is scanned,
 * and the globals' own cycle (_G) ends in the encoder's depth error, as it did. */
TEST(the_lazy_globals_are_walked_whole)
{
	const char *r = run("secret = 'mail me at jane.doe@example.com' return {env = _ENV}");
	CHECK(strstr(r, "ERR: ") == r && strstr(r, "json_max_depth"));
	CHECK_STR(run("secret = 'jane.doe@example.com' local n = 0 for k in pairs(_ENV) do n = n + 1 end"
		      " return {n, type(math)}"), "[57,\"table\"]");
	r = run("result = {who = 'jane.doe@example.com', n = #tostring(_ENV)}");
	CHECK(strstr(r, "[EMAIL_") != NULL && strstr(r, "jane.doe") == NULL);
}

static char logged[512]; /* the last notification's JSON */
static void on_notify(void *ud, mb_notify_kind kind, int level, const char *json, size_t len)
{
	(void)ud, (void)kind, (void)level;
	snprintf(logged, sizeof logged, "%.*s", (int)len, json);
}

/* mcp.log of a table goes out tokenized, but the code's own table keeps its values and keys: it
 * may go on using them (the walk used to replace them in place, mid-run). Shared tables and
 * json.array's marker survive the copy. */
TEST(a_logged_table_is_tokenized_as_a_copy)
{
	static char out[512];
	const char *code =
		"local t = {who = 'jane.doe@example.com', ['bob@example.org'] = 1, list = json.array({})}"
		" t.twice = {t.list, t.list}"
		" mcp.log('info', t)"
		" return {t.who, t['bob@example.org'], rawequal(t.twice[1], t.list), #t.twice}";
	mb_budget b;
	mb_budget_init(&b, 32u << 20, 10000000, 2000);
	mb_exec_request req = { .code = code, .code_len = strlen(code), .timeout_ms = 2000,
				.memory_bytes = 32u << 20, .instruction_limit = 10000000, .cfg = &cfg,
				.pii_policy = 1, .notify = on_notify };
	mb_exec_result r;
	logged[0] = 0;
	mb_sandbox_run(&req, &b, &r);
	CHECK(r.success);
	snprintf(out, sizeof out, "%s", r.success ? r.result_json : r.error);
	mb_exec_result_free(&r);
	/* the result is tokenized at the end as always; what matters is that the values were still
	 * there to return (a token in place of the key made t['bob@example.org'] nil) */
	CHECK(strstr(out, "[EMAIL_") != NULL && strstr(out, "jane.doe") == NULL);
	CHECK(strstr(out, ",1,true,2]") != NULL);
	CHECK(strstr(logged, "[EMAIL_") != NULL);
	CHECK(strstr(logged, "jane.doe") == NULL && strstr(logged, "bob@") == NULL);
	CHECK(strstr(logged, "\"list\":[]") != NULL);
}

/* The copy is the code's memory: a table that fits under memory_mb but whose copy does not ends
 * the execution with the memory limit, cleanly - nothing of the table reaches the log. */
TEST(a_logged_table_whose_copy_does_not_fit_meets_the_memory_limit)
{
	const char *build = "local t = {} for i = 1, 40000 do t[i] = 'jane.doe' .. i .. '@example.com' end ";
	char code[256];
	for (int log = 0; log < 2; log++) {
		snprintf(code, sizeof code, "%s%s return #t", build, log ? "mcp.log('info', t)" : "");
		mb_budget b;
		mb_budget_init(&b, 4u << 20, 100000000, 5000);
		mb_exec_request req = { .code = code, .code_len = strlen(code), .timeout_ms = 5000,
					.memory_bytes = 4u << 20, .instruction_limit = 100000000,
					.cfg = &cfg, .pii_policy = 1, .notify = on_notify };
		mb_exec_result r;
		logged[0] = 0;
		mb_sandbox_run(&req, &b, &r);
		if (!log) { /* the table itself fits */
			CHECK(r.success && strcmp(r.result_json, "40000") == 0);
		} else {
			CHECK(!r.success && strcmp(r.error_type, "memory") == 0);
			CHECK(r.error && strstr(r.error, "memory_mb=4"));
			CHECK(logged[0] == 0);
		}
		mb_exec_result_free(&r);
	}
}

int main(void)
{
	if (sandbox_setup(&cfg) != 0)
		return 1;
	char err[256];
	static unsigned char key[MB_PII_KEY_BYTES] = "test key for the sandbox policy";
	mb_pii_detector *d = mb_pii_detector_new(NULL, err, sizeof err);
	if (!d) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	mb_sandbox_pii_set(d, key);
	RUN(floats_beyond_the_integer_range_stay_numbers);
	RUN(integers_are_scanned_with_their_own_digits);
	RUN(the_lazy_globals_are_walked_whole);
	RUN(a_logged_table_is_tokenized_as_a_copy);
	RUN(a_logged_table_whose_copy_does_not_fit_meets_the_memory_limit);
	mb_sandbox_thread_exit();
	mb_sandbox_pii_set(NULL, NULL);
	mb_pii_detector_free(d);
	return UNIT_END();
}
