/* bench_pii.c - throughput of PII detection and sanitizing on one core.
 *
 * Builds MB megabytes (default 10) of mixed text from a fixed seed: a third log lines, a third
 * JSON records and a third English prose, with personal data (e-mail addresses, phone numbers,
 * cards, IPs, SSNs, IBANs, secrets) in about one line in eight. Then times mb_pii_scan and
 * mb_pii_sanitize over the whole buffer (median of REPS runs, one thread, a reused scratch) and
 * each kind of text alone. Figures, not a test.
 * Usage: bench_pii [MB [REPS]] */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pii.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

typedef struct {
	char *p;
	size_t n, cap;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...)
{
	char tmp[1024];
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	if (k < 0)
		return;
	if ((size_t)k >= sizeof tmp)
		k = sizeof tmp - 1;
	if (b->n + (size_t)k + 1 > b->cap) {
		b->cap = (b->cap + (size_t)k + 1) * 2;
		b->p = realloc(b->p, b->cap);
		if (!b->p)
			exit(1);
	}
	memcpy(b->p + b->n, tmp, (size_t)k);
	b->n += (size_t)k;
	b->p[b->n] = '\0';
}

static const char *words[] = {
	"the", "order", "was", "shipped", "to", "customer", "after", "payment", "cleared", "and",
	"we", "will", "follow", "up", "with", "an", "update", "on", "status", "of", "request",
	"team", "reviewed", "proposal", "for", "quarter", "budget", "meeting", "notes", "include",
	"action", "items", "deadline", "project", "release", "version", "feature", "customers",
	"reported", "issue", "when", "login", "page", "loads", "slowly", "during", "peak", "hours",
};
#define NWORDS (sizeof words / sizeof words[0])

static void pii(buf *b)
{
	switch (rnd(8)) {
	case 0: put(b, "user%u.name@example%u.com", rnd(100000), rnd(50)); break;
	case 1: put(b, "(%u) 555-%04u", 200 + rnd(700), rnd(10000)); break;
	case 2: put(b, "4111 1111 1111 1111"); break;
	case 3: put(b, "192.168.%u.%u", rnd(256), rnd(256)); break;
	case 4: put(b, "%03u-%02u-%04u", 100 + rnd(500), 10 + rnd(80), 1000 + rnd(8000)); break;
	case 5: put(b, "DE89 3704 0044 0532 0130 00"); break;
	case 6: put(b, "password=S3cr3t%uX!", rnd(1000)); break;
	default: put(b, "2001:db8::%x:%x", rnd(65536), rnd(65536)); break;
	}
}

static void log_line(buf *b, int with_pii)
{
	static const char *lv[] = { "INFO", "WARN", "DEBUG", "ERROR" };
	static const char *path[] = { "/api/v1/orders", "/api/v1/users", "/healthz", "/static/app.js" };
	put(b, "2024-03-%02uT%02u:%02u:%02u.%03uZ %s [http] GET %s/%u %u %ums req=%08x", 1 + rnd(28),
	    rnd(24), rnd(60), rnd(60), rnd(1000), lv[rnd(4)], path[rnd(4)], rnd(100000),
	    rnd(2) ? 200 : 404, rnd(900), rnd(0xffffffffu));
	if (with_pii) {
		put(b, " client=");
		pii(b);
	}
	put(b, "\n");
}

static void json_line(buf *b, int with_pii)
{
	put(b, "{\"id\":%u,\"sku\":\"SKU-%05u\",\"name\":\"%s %s\",\"price\":%u.%02u,\"qty\":%u,"
	    "\"tags\":[\"%s\",\"%s\"],\"updated\":\"2024-03-%02uT%02u:%02u:%02uZ\"", rnd(1000000),
	    rnd(100000), words[rnd(NWORDS)], words[rnd(NWORDS)], rnd(500), rnd(100), rnd(50),
	    words[rnd(NWORDS)], words[rnd(NWORDS)], 1 + rnd(28), rnd(24), rnd(60), rnd(60));
	if (with_pii) {
		put(b, ",\"contact\":\"");
		pii(b);
		put(b, "\"");
	}
	put(b, "}\n");
}

static void prose_line(buf *b, int with_pii)
{
	int n = 12 + (int)rnd(20);
	for (int i = 0; i < n; i++) {
		put(b, "%s%s", i ? " " : "", words[rnd(NWORDS)]);
		if (with_pii && i == n / 2) {
			put(b, " ");
			pii(b);
		}
	}
	put(b, ".\n");
}

static void fill(buf *b, size_t bytes, int kind)
{
	while (b->n < bytes) {
		int k = kind >= 0 ? kind : (int)rnd(3);
		int p = rnd(8) == 0;
		if (k == 0)
			log_line(b, p);
		else if (k == 1)
			json_line(b, p);
		else
			prose_line(b, p);
	}
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static const unsigned char key[MB_PII_KEY_BYTES] = "bench-key-bench-key-bench-key-!!";

/* Returns the median seconds of reps runs; op 0 = scan, 1 = sanitize. */
static double measure(mb_pii_detector *d, mb_pii_scratch *s, const buf *b, int reps, int op,
		      size_t *found)
{
	double t[64];
	char err[256];
	if (reps > 64)
		reps = 64;
	for (int r = 0; r < reps; r++) {
		double t0 = now_s();
		if (op == 0) {
			mb_pii_span *sp;
			size_t n;
			if (mb_pii_scan(d, b->p, b->n, MB_PII_ALL, s, &sp, &n, err, sizeof err) != 0) {
				fprintf(stderr, "scan: %s\n", err);
				exit(1);
			}
			free(sp);
			*found = n;
		} else {
			mb_pii_result res;
			if (mb_pii_sanitize(d, key, b->p, b->n, MB_PII_ALL, NULL, NULL, s, &res, err,
					    sizeof err) != 0) {
				fprintf(stderr, "sanitize: %s\n", err);
				exit(1);
			}
			*found = res.total;
			mb_pii_result_free(&res);
		}
		t[r] = now_s() - t0;
	}
	qsort(t, (size_t)reps, sizeof t[0], cmpd);
	return t[reps / 2];
}

int main(int argc, char **argv)
{
	size_t mb = argc > 1 ? (size_t)atoi(argv[1]) : 10;
	int reps = argc > 2 ? atoi(argv[2]) : 7;
	if (mb < 1)
		mb = 1;
	if (reps < 1)
		reps = 1;
	char err[256];
	mb_pii_detector *d = mb_pii_detector_new(NULL, err, sizeof err);
	if (!d) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	mb_pii_scratch *s = mb_pii_scratch_new(d);
	static const char *kinds[] = { "log lines", "JSON records", "prose" };
	buf all = { 0 };
	fill(&all, mb << 20, -1);
	size_t found;
	double ts = measure(d, s, &all, reps, 0, &found);
	size_t spans = found;
	double tz = measure(d, s, &all, reps, 1, &found);
	double mbs = (double)all.n / 1e6;
	printf("pii: mixed text %.1f MB, %zu spans: scan %.0f MB/s, sanitize %.0f MB/s "
	       "(one core, median of %d)\n", mbs, spans, mbs / ts, mbs / tz, reps);
	for (int k = 0; k < 3; k++) {
		buf b = { 0 };
		rng = 0x243f6a8885a308d3ull + (uint64_t)k;
		fill(&b, 4u << 20, k);
		double a = measure(d, s, &b, reps, 0, &found);
		double z = measure(d, s, &b, reps, 1, &found);
		double m = (double)b.n / 1e6;
		printf("pii:   %-12s scan %.0f MB/s, sanitize %.0f MB/s\n", kinds[k], m / a, m / z);
		free(b.p);
	}
	free(all.p);
	mb_pii_scratch_free(s);
	mb_pii_detector_free(d);
	return 0;
}
