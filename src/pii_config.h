/* pii_config.h - the PII detector and token key made from the configuration (pii_config.c). */
#ifndef MB_PII_CONFIG_H
#define MB_PII_CONFIG_H

#include "config.h"
#include "pii.h"

/// Builds the detector (pii_disabled_types, pii_custom_patterns, regex limits) and loads or
/// creates DATA_DIR/pii.key (key NULL: the detector only - a worker process holds no key).
/// @returns 0, or -1 with a message naming the option or the key file in err
int mb_pii_from_config(const mb_config *cfg, mb_pii_detector **out,
		       unsigned char key[MB_PII_KEY_BYTES], char *err, size_t errlen);

#endif
