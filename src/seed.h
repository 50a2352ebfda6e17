/* seed.h - copies of the shipped example skills and catalog files on first run (seed.c).
 *
 * Called once from main() after the data directory exists and before the server starts; main
 * thread, no other thread running yet.
 */
#ifndef MB_SEED_H
#define MB_SEED_H

#include "config.h"

/// Creates skills_dir, catalog_dir and workflows_dir from SHARE_DIR/skills, /catalog and /workflows when they do
/// not exist yet and the shipped directory does (share_dir "none" turns this off). Failures
/// are logged as warnings and leave the directory absent.
/// @param cfg  the loaded configuration
/// @returns the number of directories created (0 to 3)
int mb_seed_examples(const mb_config *cfg);

#endif
