/* test_pii_quality.c - precision and recall of the PII detector on the labelled corpus.
 *
 * Reads tests/pii/corpus.jsonl (or $MB_PII_CORPUS): one JSON object per line, {"text": ...,
 * "spans": [{"type": ..., "value": ...}]}, listing every piece of personal data in the text
 * (tests/pii/make_corpus.py writes it). Each line is scanned with the default detector; a
 * detected span counts as a true positive when an unmatched label of the same type has exactly
 * its value, otherwise as a false positive; labels left unmatched are false negatives. Prints
 * the table per type and every miss, and fails when any type has recall below 0.98 or precision
 * below 0.95, or fewer than 40 labelled values. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pii.h"
#include "unit.h"

#define MIN_RECALL 0.98
#define MIN_PRECISION 0.95
#define MIN_POSITIVES 40

typedef struct {
	size_t tp, fp, fn, labels;
} tally;

static const char *corpus_path(void)
{
	const char *p = getenv("MB_PII_CORPUS");
	return p && *p ? p : "tests/pii/corpus.jsonl";
}

TEST(corpus_quality)
{
	char err[512];
	mb_pii_detector *d = mb_pii_detector_new(NULL, err, sizeof err);
	CHECK(d != NULL);
	if (!d)
		return;
	FILE *f = fopen(corpus_path(), "r");
	CHECK(f != NULL);
	if (!f) {
		fprintf(stderr, "  cannot open %s (run from the repository root or set MB_PII_CORPUS)\n",
			corpus_path());
		mb_pii_detector_free(d);
		return;
	}
	mb_pii_scratch *scr = mb_pii_scratch_new(d);
	tally t[MB_PII_MAX_TYPES];
	memset(t, 0, sizeof t);
	char *line = NULL;
	size_t cap = 0;
	ssize_t got;
	int lineno = 0, nlines = 0, misses = 0;
	while ((got = getline(&line, &cap, f)) > 0) {
		lineno++;
		json_error_t je;
		json_t *o = json_loadb(line, (size_t)got, 0, &je);
		CHECK(o != NULL);
		if (!o) {
			fprintf(stderr, "  corpus line %d: %s\n", lineno, je.text);
			continue;
		}
		nlines++;
		const char *text = json_string_value(json_object_get(o, "text"));
		size_t tlen = json_string_length(json_object_get(o, "text"));
		json_t *labels = json_object_get(o, "spans");
		CHECK(text != NULL && json_is_array(labels));
		if (!text || !json_is_array(labels)) {
			json_decref(o);
			continue;
		}
		size_t nl = json_array_size(labels);
		int *used = calloc(nl + 1, sizeof *used);
		for (size_t k = 0; k < nl; k++) {
			int ty = mb_pii_type_find(d, json_string_value(json_object_get(json_array_get(labels, k),
											"type")));
			CHECK(ty >= 0);
			if (ty >= 0)
				t[ty].labels++;
		}
		mb_pii_span *sp = NULL;
		size_t n = 0;
		int rc = mb_pii_scan(d, text, tlen, MB_PII_ALL, scr, &sp, &n, err, sizeof err);
		CHECK(rc == 0);
		for (size_t i = 0; i < n; i++) {
			const char *v = text + sp[i].start;
			size_t vl = sp[i].stop - sp[i].start;
			const char *tn = mb_pii_type_name(d, sp[i].type);
			int hit = 0;
			for (size_t k = 0; k < nl && !hit; k++) {
				json_t *l = json_array_get(labels, k);
				json_t *lv = json_object_get(l, "value");
				if (used[k] || strcmp(json_string_value(json_object_get(l, "type")), tn) != 0 ||
				    json_string_length(lv) != vl || memcmp(json_string_value(lv), v, vl) != 0)
					continue;
				used[k] = hit = 1;
			}
			if (hit) {
				t[sp[i].type].tp++;
			} else {
				t[sp[i].type].fp++;
				if (misses++ < 200)
					printf("  FP line %d %s (%s): \"%.*s\"\n", lineno, tn, sp[i].rule,
					       (int)(vl > 120 ? 120 : vl), v);
			}
		}
		for (size_t k = 0; k < nl; k++) {
			if (used[k])
				continue;
			json_t *l = json_array_get(labels, k);
			const char *tn = json_string_value(json_object_get(l, "type"));
			int ty = mb_pii_type_find(d, tn);
			if (ty >= 0)
				t[ty].fn++;
			if (misses++ < 200)
				printf("  FN line %d %s: \"%.120s\" in \"%.160s\"\n", lineno, tn,
				       json_string_value(json_object_get(l, "value")), text);
		}
		free(sp);
		free(used);
		json_decref(o);
	}
	free(line);
	fclose(f);
	CHECK(nlines > 500);
	printf("  corpus %s: %d lines\n", corpus_path(), nlines);
	printf("  %-8s %6s %6s %6s %6s %9s %7s\n", "type", "labels", "tp", "fp", "fn", "precision",
	       "recall");
	for (int ty = 0; ty < mb_pii_type_count(d); ty++) {
		tally *x = &t[ty];
		double prec = x->tp + x->fp ? (double)x->tp / (double)(x->tp + x->fp) : 1.0;
		double rec = x->tp + x->fn ? (double)x->tp / (double)(x->tp + x->fn) : 1.0;
		printf("  %-8s %6zu %6zu %6zu %6zu %9.3f %7.3f\n", mb_pii_type_name(d, ty), x->labels,
		       x->tp, x->fp, x->fn, prec, rec);
		if (rec < MIN_RECALL || prec < MIN_PRECISION || x->labels < MIN_POSITIVES) {
			unit_failed_checks++;
			fprintf(stderr, "  FAIL %s: precision %.3f (min %.2f), recall %.3f (min %.2f), "
				"%zu labels (min %d)\n", mb_pii_type_name(d, ty), prec, MIN_PRECISION, rec,
				MIN_RECALL, x->labels, MIN_POSITIVES);
		}
	}
	mb_pii_scratch_free(scr);
	mb_pii_detector_free(d);
}

int main(void)
{
	RUN(corpus_quality);
	return UNIT_END();
}
