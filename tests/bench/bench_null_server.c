/* bench_null_server.c - the client floor for issue 22: a stdio "MCP server" that does nothing
 * useful but answer. For every request line (a line with an "id") it writes one fixed
 * JSON-RPC result carrying that id; notifications get nothing. bench_client's sequential round
 * trip against it is what the client, the pipes and the scheduler cost on their own.
 *
 * It reads with one read() into a 256 KiB buffer and answers every complete line in that
 * buffer with one write(), like bench_client. The id is the first "id": member in the line,
 * which for bench_client's requests is the top-level one (their params hold no "id" key); it is
 * copied as written, number or string. No JSON is parsed beyond that. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RESULT_TAIL ",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"2\"}],\"isError\":false}}\n"

static int write_all(const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(1, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Appends the answer to one line (if it is a request) to out; returns the new length. */
static size_t answer(const char *line, size_t len, char *out, size_t olen)
{
	const char *id = memmem(line, len, "\"id\":", 5);
	if (!id)
		return olen;
	id += 5;
	const char *end = id;
	const char *stop = line + len;
	if (end < stop && *end == '"') {
		end++;
		while (end < stop && *end != '"')
			end += *end == '\\' ? 2 : 1;
		end++;
	} else {
		while (end < stop && *end != ',' && *end != '}')
			end++;
	}
	if (end > stop || end - id > 64)
		return olen;
	static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":";
	memcpy(out + olen, head, sizeof head - 1);
	olen += sizeof head - 1;
	memcpy(out + olen, id, (size_t)(end - id));
	olen += (size_t)(end - id);
	memcpy(out + olen, RESULT_TAIL, sizeof RESULT_TAIL - 1);
	return olen + sizeof RESULT_TAIL - 1;
}

int main(void)
{
	enum { CAP = 256 * 1024, ANSWER_MAX = 192 };
	char *in = malloc(CAP);
	/* A line is at least ~10 bytes, so CAP / 8 answers at most per buffer. */
	char *out = malloc((size_t)(CAP / 8 + 1) * ANSWER_MAX);
	if (!in || !out)
		return 1;
	size_t have = 0;
	for (;;) {
		if (have == CAP)
			have = 0; /* a line longer than the buffer: drop it, it is not a bench request */
		ssize_t r = read(0, in + have, CAP - have);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return 0;
		have += (size_t)r;
		size_t off = 0, olen = 0;
		char *nl;
		while ((nl = memchr(in + off, '\n', have - off)) != NULL) {
			olen = answer(in + off, (size_t)(nl - (in + off)), out, olen);
			off = (size_t)(nl - in) + 1;
		}
		memmove(in, in + off, have - off);
		have -= off;
		if (olen && write_all(out, olen) != 0)
			return 0;
	}
}
