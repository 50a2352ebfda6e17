// Processes a test started (a PostgreSQL cluster, nginx) are stopped when the test process ends,
// however it ends: at exit, and on SIGINT, SIGTERM and SIGHUP (then exiting with 128 + signal).
// An object registered with live.add(obj) has a synchronous obj._cleanupSync(); it removes
// itself (live.delete) once stopped.

export const live = new Set();

function cleanupAll() {
  for (const o of [...live]) o._cleanupSync();
}

let hooked = false;
/** Installs the exit and signal handlers (once). */
export function hookExit() {
  if (hooked) return;
  hooked = true;
  process.on("exit", cleanupAll);
  for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) {
    process.once(sig, () => {
      cleanupAll();
      process.exit(128 + ({ SIGINT: 2, SIGTERM: 15, SIGHUP: 1 })[sig]);
    });
  }
}
