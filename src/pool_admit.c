/* pool_admit.c - the admission check both execution pools apply at submit (pool_admit.h): a job
 * waits in the queue only while the queue holds fewer than idle + max_queue jobs and fewer than
 * max_queue_bytes of code and context; otherwise the call is answered "server busy" at once,
 * naming the limit that refused it.
 */
#include "pool_admit.h"

#include <stdio.h>

int mb_pool_admit(const mb_config *cfg, size_t queued, size_t idle, size_t qbytes, size_t bytes,
		  char *err, size_t errlen)
{
	if (queued >= idle + (size_t)cfg->max_queue) {
		snprintf(err, errlen, "server busy: %zu executions already queued (max_queue=%lld)",
			 queued, (long long)cfg->max_queue);
		return -1;
	}
	if (qbytes + bytes > (size_t)cfg->max_queue_bytes) {
		snprintf(err, errlen, "server busy: queued executions already hold %zu bytes of code and "
			 "context (max_queue_bytes=%lld)", qbytes, (long long)cfg->max_queue_bytes);
		return -1;
	}
	return 0;
}
