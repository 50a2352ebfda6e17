// Journal rows written straight into a server's store (the sqlite3 shell, or psql under
// MOONBOX_TEST_STORE=pg), as many and as large as a full journal holds: for the search bound's
// test (integration/journal.test.mjs) and its benchmark (bench/journal_search.mjs).
import path from "node:path";
import { pgDbOf, sqlite3Cli, testPg } from "./moonbox.mjs";

export const PAD = 65520; // code of about 65,530 bytes: within journal_max_code_bytes (65536)

/** SQL that inserts rows executions of tenant, each "return <i> --000...", started an hour ago. */
export function fillSql(pg, rows, tenant = "default") {
  const at = Date.now() - 3600000; // within journal_max_age_s, or the writer drops them
  if (pg) {
    return "INSERT INTO executions (tenant, started_at, duration_ms, outcome, tool, ref, code, code_bytes) "
      + `SELECT '${tenant}', ${at} + i, 1, 'ok', 'execute_code', lpad(to_hex(i), 16, '0'), `
      + `'return ' || i || ' --' || repeat('0', ${PAD}), length('return ' || i || ' --') + ${PAD} `
      + `FROM generate_series(1, ${rows}) AS i`;
  }
  const zeros = `replace(hex(zeroblob(${PAD / 2})), '00', '0')`;
  return `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${rows}) `
    + "INSERT INTO executions (tenant, started_at, duration_ms, outcome, tool, ref, code, code_bytes) "
    + `SELECT '${tenant}', ${at} + i, 1, 'ok', 'execute_code', printf('%016x', i), `
    + `'return ' || i || ' --' || ${zeros} || ${zeros}, length('return ' || i || ' --') + ${PAD} FROM n`;
}

/** Writes rows large rows of tenant into the store of the server on dataDir. */
export function fillJournal(dataDir, rows = 1000, tenant = "default") {
  const pgdb = pgDbOf(dataDir);
  if (pgdb) return testPg.psqlSync(fillSql(true, rows, tenant), pgdb);
  const x = sqlite3Cli(path.join(dataDir, "moonbox.db"), fillSql(false, rows, tenant), { timeout: 60000 });
  if (x.status !== 0) throw new Error(`sqlite3: ${x.stderr}`);
  return x.stdout;
}
