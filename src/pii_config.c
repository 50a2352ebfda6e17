/* pii_config.c - builds the PII detector and loads the token key from the configuration.
 *
 * pii_disabled_types is a comma-separated list of built-in type names; pii_custom_patterns a
 * JSON object {"NAME": "pattern"} (names upper-cased by the detector). Every mistake is refused
 * at start with a message that names the option.
 */
#include "pii_config.h"

#include "log.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mb_pii_from_config(const mb_config *cfg, mb_pii_detector **out, unsigned char key[MB_PII_KEY_BYTES],
		       char *err, size_t errlen)
{
	mb_pii_options opt;
	memset(&opt, 0, sizeof opt);
	opt.match_limit = (uint32_t)cfg->regex_match_limit;
	opt.max_pattern_bytes = (size_t)cfg->regex_max_pattern_bytes;

	/* disabled built-in types */
	char list[sizeof cfg->pii_disabled_types];
	snprintf(list, sizeof list, "%s", cfg->pii_disabled_types);
	for (char *save = NULL, *t = strtok_r(list, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
		int type = mb_pii_type_find(NULL, t);
		if (type < 0 || type >= MB_PII_NBUILTIN) {
			snprintf(err, errlen, "pii_disabled_types: unknown type \"%s\" (known: EMAIL, PHONE, "
				 "SSN, CARD, IPV4, IPV6, SECRET, IBAN)", t);
			return -1;
		}
		opt.disabled |= (uint64_t)1 << type;
	}

	/* custom patterns */
	json_t *root = NULL;
	mb_pii_custom *custom = NULL;
	size_t n = 0;
	if (cfg->pii_custom_patterns[0]) {
		json_error_t jerr;
		root = json_loads(cfg->pii_custom_patterns, 0, &jerr);
		if (!root || !json_is_object(root)) {
			snprintf(err, errlen, "pii_custom_patterns must be a JSON object {\"NAME\": \"pattern\"}%s%s",
				 root ? "" : ": ", root ? "" : jerr.text);
			json_decref(root);
			return -1;
		}
		custom = calloc(json_object_size(root) + 1, sizeof *custom);
		if (!custom) {
			json_decref(root);
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		const char *name;
		json_t *v;
		json_object_foreach(root, name, v) {
			if (!json_is_string(v)) {
				snprintf(err, errlen, "pii_custom_patterns: the pattern of %s must be a string", name);
				free(custom);
				json_decref(root);
				return -1;
			}
			custom[n].name = name;
			custom[n].pattern = json_string_value(v);
			n++;
		}
	}
	opt.custom = custom;
	opt.ncustom = n;
	char derr[MB_ERR_MAX];
	*out = mb_pii_detector_new(&opt, derr, sizeof derr);
	free(custom); /* the detector copied them */
	json_decref(root);
	if (!*out) {
		snprintf(err, errlen, "%s%s", cfg->pii_custom_patterns[0] ? "pii_custom_patterns: " : "", derr);
		return -1;
	}
	if (key && (cfg->pii_key_file[0] ? mb_pii_secret_load_file(cfg->pii_key_file, key, err, errlen)
				      : mb_pii_secret_load(cfg->data_dir, key, err, errlen)) != 0) {
		mb_pii_detector_free(*out);
		*out = NULL;
		return -1;
	}
	return 0;
}
