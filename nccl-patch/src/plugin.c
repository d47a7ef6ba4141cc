/*
 * commwatch NCCL profiler plugin: communicators, setup and teardown, exports.
 *
 * One CALL record when a collective or P2P operation is enqueued and one when
 * its completion is observed on the GPU (or given up), COMM_INIT / COMM_DESTROY
 * per communicator, all in the per-rank shared-memory ring. The event path is
 * in events.c, the completion rules in ops.c and probe.h, the background work
 * in sweeper.c.
 *
 * Lifecycle of the ring file: created at the first communicator's init, locked
 * for as long as the process writes it; at the last communicator's finalize,
 * at unload, or at process exit (destructor) the probe writes off what is still
 * open, publishes, marks the header closed, unlinks the file and releases the
 * lock. A killed process cannot; the agent removes its file once drained.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "probe.h"

#define CW_EXPORT __attribute__((visibility("default")))

struct cw_probe cw;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_ready;                 /* settings, ring file and sweeper are live */
static int g_exited;                /* the destructor closed the files with comms still open */
static int g_memory;                /* pool and mapping exist (they outlive the file) */
static ncclResult_t g_setup_error;  /* sticky result of a failed setup */
static int g_event_mask;
static int g_nctx;                  /* communicators not yet finalized */
static uint32_t g_ctx_count;        /* communicators ever initialized: spreads pool cursors */
static struct cw_ctx* g_ctxs;       /* every context since the pool was made */
static ncclDebugLogger_t g_log;
static int g_atfork;

__attribute__((format(printf, 2, 3)))
static void cw_log(ncclDebugLogLevel level, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (g_log != NULL) g_log(level, NCCL_LOGSUB_INIT, __FILE__, __LINE__, "commwatch: %s", buf);
  /* NCCL hides WARN unless NCCL_DEBUG is set: configuration errors always reach stderr. */
  if (level == NCCL_LOG_WARN) fprintf(stderr, "commwatch: %s\n", buf);
}

/* ------------------------------------------------------- setup / teardown */

/* Pool, bitmap, mapping and contexts. Only with no communicator open: NCCL
 * sends no events then. */
static void free_memory_locked(void) {
  while (g_ctxs != NULL) {
    struct cw_ctx* c = g_ctxs;
    g_ctxs = c->next;
    free(c->p2p_seq);
    free(c);
  }
  cw_ring_unmap(&cw.ring);
  free(cw.ops);
  free(cw.attention);
  cw.ops = NULL;
  cw.attention = NULL;
  g_memory = 0;
}

/* The ring file goes; the memory stays for events that are still on their way. */
static void close_files_locked(int64_t now) {
  cw_sweeper_stop();
  cw_ring_close(&cw.ring, now);
  g_ready = 0;
}

/* After fork: the child neither holds the parent's lock nor writes its ring;
 * its own first communicator would make it a ring of its own. */
static void atfork_child(void) {
  pthread_mutex_init(&g_lock, NULL);
  cw_ring_detach_child(&cw.ring);
  cw_sweeper_forget();
  g_ready = 0;
  g_exited = 0;
  g_nctx = 0;
}

static ncclResult_t setup_locked(void) {
  char err[768];
  char warn[256];
  size_t pool;
  if (g_ready) return ncclSuccess;
  if (g_setup_error != ncclSuccess) return g_setup_error; /* reported once already */
  if (g_exited) return ncclInternalError; /* the process is exiting: no new ring */
  if (g_memory) free_memory_locked(); /* a previous round of communicators is over */

  if (cw_settings_load(&cw.set, err, sizeof(err), warn, sizeof(warn)) != 0) {
    g_setup_error = ncclInvalidUsage;
    goto fail;
  }
  if (warn[0] != '\0') cw_log(NCCL_LOG_WARN, "%s", warn);
  pool = (size_t)cw.set.max_inflight;
  cw.ops = aligned_alloc(64, sizeof(struct cw_op) * pool);
  cw.attention_words = (uint32_t)((pool + 63) / 64);
  cw.attention = calloc(cw.attention_words, sizeof(uint64_t));
  if (cw.ops == NULL || cw.attention == NULL) {
    snprintf(err, sizeof(err), "out of memory for %zu in-flight operations", pool);
    g_setup_error = ncclSystemError;
    goto fail;
  }
  memset(cw.ops, 0, sizeof(struct cw_op) * pool);
  cw.ops_mask = (uint32_t)pool - 1;
  cw.attention_pending = 0;
  cw.grace_ns = (int64_t)cw.set.grace_ms * 1000000;
  cw.timeout_ns = (int64_t)cw.set.timeout_ms * 1000000;
  cw.device_entry_ns = (int64_t)cw.set.device_entry_ms * 1000000;
  cw_clock_setup(cw.set.use_tsc);
  /* Before the file exists: a fork from another thread must never copy the lock. */
  if (!g_atfork) g_atfork = pthread_atfork(NULL, NULL, atfork_child) == 0;
  if (cw_ring_open(&cw.ring, &cw.set, err, sizeof(err)) != 0) {
    g_setup_error = ncclSystemError;
    goto fail;
  }
  g_memory = 1;
  if (cw_sweeper_start(err, sizeof(err)) != 0) {
    cw_ring_close(&cw.ring, cw_now());
    g_setup_error = ncclSystemError;
    goto fail;
  }
  g_event_mask = ncclProfileColl | ncclProfileP2p | ncclProfileCollApi | ncclProfileP2pApi |
                 (cw.set.gpu_timing ? ncclProfileKernelCh : 0);
  g_ready = 1;
  cw_log(NCCL_LOG_INFO,
         "ring %s (%llu records), rank %d from %s, gpu timing %s, clock %s, grace %u ms, "
         "completion timeout %u ms, device entry after %u ms",
         cw.ring.path, (unsigned long long)cw.set.ring_capacity, (int)cw.set.rank,
         cw.set.rank_source, cw.set.gpu_timing ? "on" : "off", cw_clock_name(), cw.set.grace_ms,
         cw.set.timeout_ms, cw.set.device_entry_ms);
  return ncclSuccess;

fail:
  free_memory_locked();
  cw_log(NCCL_LOG_WARN, "%s; profiler plugin disabled", err);
  return g_setup_error;
}

static void put_comm_record(struct cw_ctx* ctx, uint8_t kind, uint32_t aux) {
  int64_t now = cw_now();
  struct cw_record r;
  memset(&r, 0, sizeof(r));
  r.kind = kind;
  r.flags = CW_FLAG_COMPLETED;
  r.rank = cw.set.rank;
  r.comm = ctx->comm;
  r.t_start_ns = now;
  r.t_end_ns = now;
  r.comm_rank = ctx->comm_rank;
  r.peer = -1;
  r.nranks = ctx->nranks;
  r.aux = aux;
  cw_ring_put(&cw.ring, &r, now);
}

/* --------------------------------------------------------- init / finalize */

static ncclResult_t cw_init(void** context, uint64_t comm, int* eActivationMask,
                            const char* commName, int nNodes, int nranks, int rank,
                            ncclDebugLogger_t logfn) {
  ncclResult_t res;
  struct cw_ctx* ctx = NULL;

  pthread_mutex_lock(&g_lock);
  if (logfn != NULL) g_log = logfn;
  res = setup_locked();
  if (res != ncclSuccess) goto fail;
  if (context == NULL || eActivationMask == NULL || nranks <= 0 || rank < 0 || rank >= nranks) {
    cw_log(NCCL_LOG_WARN, "init called with invalid arguments (nranks %d, rank %d)", nranks, rank);
    res = ncclInvalidArgument;
    goto fail;
  }
  ctx = aligned_alloc(64, sizeof(*ctx));
  if (ctx == NULL) {
    res = ncclSystemError;
    goto fail;
  }
  memset(ctx, 0, sizeof(*ctx));
  ctx->p2p_seq = calloc(2 * (size_t)nranks, sizeof(uint64_t));
  if (ctx->p2p_seq == NULL) {
    res = ncclSystemError;
    goto fail;
  }
  ctx->comm = comm;
  ctx->comm_rank = rank;
  ctx->nranks = (uint32_t)nranks;
  ctx->nnodes = nNodes > 0 ? (uint32_t)nNodes : 0;
  ctx->alloc_cursor = g_ctx_count++ * 97u; /* spread communicators over the pool */
  ctx->gpu_off = INT64_MAX;
  ctx->gpu_off_win = INT64_MAX;
  ctx->next = g_ctxs;
  g_ctxs = ctx;
  g_nctx++;
  cw.nccl_mask = eActivationMask;
  pthread_mutex_unlock(&g_lock);

  put_comm_record(ctx, CW_KIND_COMM_INIT, ctx->nnodes);
  __atomic_store_n(eActivationMask, g_event_mask, __ATOMIC_RELAXED);
  *context = ctx;
  cw_log(NCCL_LOG_INFO, "init comm %016llx (%s) rank %d of %d, %d nodes", (unsigned long long)comm,
         commName != NULL ? commName : "", rank, nranks, nNodes);
  return ncclSuccess;

fail:
  pthread_mutex_unlock(&g_lock);
  if (ctx != NULL) free(ctx->p2p_seq);
  free(ctx);
  if (context != NULL) *context = NULL;
  return res;
}

static ncclResult_t cw_init_v4(void** context, int* eActivationMask, const char* commName,
                               uint64_t commHash, int nNodes, int nranks, int rank,
                               ncclDebugLogger_t logfn) {
  return cw_init(context, commHash, eActivationMask, commName, nNodes, nranks, rank, logfn);
}

static ncclResult_t cw_finalize(void* context) {
  struct cw_ctx* ctx = (struct cw_ctx*)context;
  int64_t now;
  uint32_t open_ops;
  if (ctx == NULL) return ncclSuccess;

  pthread_mutex_lock(&g_lock);
  if (ctx->finalized || !g_ready) { /* twice, or after the files were closed at exit */
    pthread_mutex_unlock(&g_lock);
    return ncclSuccess;
  }
  /* NCCL sends no more events for this communicator: what is still open will
   * never be observed (an aborted communicator). Say so, then close it. */
  __atomic_store_n(&ctx->finalized, 1, __ATOMIC_RELAXED);
  now = cw_now();
  open_ops = cw_abort_ctx(ctx, now);
  put_comm_record(ctx, CW_KIND_COMM_DESTROY, 0);
  cw_log(NCCL_LOG_INFO, "finalize comm %016llx: %llu collectives, %u operations left open",
         (unsigned long long)ctx->comm,
         (unsigned long long)__atomic_load_n(&ctx->coll_seq, __ATOMIC_RELAXED), open_ops);
  if (--g_nctx == 0) close_files_locked(now);
  pthread_mutex_unlock(&g_lock);
  return ncclSuccess;
}

/* Runs at dlclose and at process exit. With communicators still open (exit
 * without ncclCommDestroy) NCCL's threads may still call in: the files are
 * closed but the memory stays mapped. In a forked child nothing is ours. */
__attribute__((destructor)) static void cw_unload(void) {
  pthread_mutex_lock(&g_lock);
  if (g_ready) {
    int64_t now = cw_now();
    uint32_t open_ops = cw_abort_all(now);
    if (open_ops > 0) cw_log(NCCL_LOG_INFO, "exit: %u operations left open", open_ops);
    close_files_locked(now);
    g_exited = g_nctx > 0;
  }
  if (g_memory && g_nctx == 0) free_memory_locked();
  pthread_mutex_unlock(&g_lock);
}

/* ------------------------------------------------------------- exports */

CW_EXPORT ncclProfiler_v6_t ncclProfiler_v6 = {
  "commwatch", cw_init, cw_start_v6, cw_stop, cw_record_state, cw_finalize,
};

CW_EXPORT ncclProfiler_v5_t ncclProfiler_v5 = {
  "commwatch", cw_init, cw_start_v5, cw_stop, cw_record_state, cw_finalize,
};

CW_EXPORT ncclProfiler_v4_t ncclProfiler_v4 = {
  "commwatch", cw_init_v4, cw_start_v4, cw_stop, cw_record_state, cw_finalize,
};
