/* What the harness's scenario files share: checks, ring readers, the plugin. */
#ifndef COMMWATCH_HARNESS_H_
#define COMMWATCH_HARNESS_H_

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/file.h>
#include <sys/wait.h>

#include "harness_util.h"
#include "ring_reader.h"

extern const char* g_lib;
extern char g_dir[512];
extern int g_failures;
extern int nccl_mask; /* NCCL's activation mask: one word per process */

#define CHECK(cond, ...)                                               \
  do {                                                                 \
    if (!(cond)) {                                                     \
      fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                    \
      fprintf(stderr, "\n");                                           \
      g_failures++;                                                    \
    }                                                                  \
  } while (0)

#define ENTRY   CW_FLAG_ENQUEUED
#define LOST    (CW_FLAG_ENQUEUED | CW_FLAG_COMPLETION_LOST)
#define GPU_OK  (CW_FLAG_COMPLETED | CW_FLAG_GPU_TIMED)
#define HOST_OK (CW_FLAG_COMPLETED | CW_FLAG_ENQUEUED)
#define GRAPH   CW_FLAG_GRAPH_CAPTURED

void nccl_log(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
              const char* fmt, ...);
/* Environment of a scenario: ring dir, job, RANK (NULL: unset); clears the rest. */
void set_job(const char* job, const char* rank);
void ring_path(char* out, size_t n, const char* job, const char* file);
/* Reads every record of a ring file (capacity must hold them all). */
size_t read_ring(const char* path, struct cw_record* out, size_t max, struct cw_ring_header* hdr);
/* init through v5 with the process-wide mask word; returns the context or NULL. */
void* init5(struct plugin* p, uint64_t comm, int nnodes, int nranks, int rank);

/* A reader that maps a ring file and follows it, the way the agent does. */
struct tail {
  struct cw_reader rd;
  const void* map;
  size_t len;
};
int tail_open(struct tail* t, const char* path);
size_t tail_poll(struct tail* t, struct cw_record* out, size_t max);
/* Polls into out[have..max) until `want` records are there in total or
 * timeout_ms passed; returns the new total. */
size_t tail_wait(struct tail* t, struct cw_record* out, size_t have, size_t max, size_t want,
                 int timeout_ms);
void tail_close(struct tail* t);
const struct cw_ring_header* tail_header(const struct tail* t);

/* 1: nobody holds path's lock (a live writer would); 0: somebody does; -1: no file. */
int lock_free(const char* path);
int file_exists(const char* path);

/* scenarios (sc_events.c) */
void scenario_interleaved(void);
void scenario_completion_rules(void);
void scenario_fewer_channels(void);
void scenario_zero_channels(void);
void scenario_proxy_events(void);
void scenario_graph_capture(void);
void scenario_timeout(void);
void scenario_abi_versions(void);
void scenario_device_entry(void);
/* scenarios (sc_ring.c) */
void scenario_abort_at_finalize(void);
void scenario_lifecycle(void);
void scenario_fork(void);
void scenario_wrap(void);
void scenario_pool(void);
void scenario_bad_env(void);
void scenario_rank_sources(void);
void scenario_reload(void);
void scenario_clock(void);
/* scenarios (sc_recorded.c) */
void scenario_recorded(void);

#endif /* COMMWATCH_HARNESS_H_ */
