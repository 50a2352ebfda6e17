// pg_probe.mjs - exits 0 when $MOONBOX keeps its store in PostgreSQL for store_url (the store_pg
// backend is built in), 1 with the reason on stderr when it does not or no cluster can be
// started here, so `make test-pg` can run the PostgreSQL suite only where it means something.
//   cd tests && MOONBOX=../build/moonbox node lib/pg_probe.mjs
import { pgUnavailable, startPg } from "./pg.mjs";
import { pgStoreUnsupported } from "./moonbox.mjs";

const why = pgUnavailable();
if (why) {
  console.error(`pg_probe: ${why}`);
  process.exit(1);
}
const pg = await startPg();
let reason;
try {
  reason = await pgStoreUnsupported(pg);
} finally {
  await pg.destroy();
}
if (reason) {
  console.error(`pg_probe: ${reason}`);
  process.exit(1);
}
