/*
 * commwatch NCCL profiler plugin: one CALL record when a collective or P2P
 * operation starts and one when it completes, COMM_INIT / COMM_DESTROY per
 * communicator, all written to the per-rank shared-memory ring.
 *
 * Completion: NCCL's stopEvent on a Coll/P2p event only means "enqueued". When
 * kernel-channel events are enabled, an operation completes once it has been
 * stopped and all of its nChannels kernel channels have stopped (their GPU
 * globaltimer stamps give the GPU_TIMED times). Without kernel events it
 * completes at stopEvent.
 *
 * Event path: fixed pools, atomics, clock_gettime (vDSO); no malloc, lock or I/O.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nccl_profiler_abi.h"
#include "ring.h"
#include "settings.h"

#define CW_EXPORT __attribute__((visibility("default")))
#define CW_KCH_TAG ((uintptr_t)1) /* low bit of a handle: kernel channel of an op */
#define CW_OP_PROBES 8            /* pool slots tried before an op is dropped */
#define CW_GPU_WINDOW 256         /* clock-offset samples per estimation window */

struct cw_ctx {
  uint64_t comm;            /* commHash */
  int32_t comm_rank;
  uint32_t nranks;
  uint32_t nnodes;
  uint32_t id;              /* process-unique, tags this comm's ops in the pool */
  uint64_t coll_seq;        /* (atomic) next collective seq */
  uint64_t* p2p_seq;        /* (atomic) [0, nranks): SEND per peer; [nranks, 2 nranks): RECV */
  int64_t gpu_off;          /* (atomic) CLOCK_REALTIME - GPU globaltimer, ns */
  int64_t gpu_off_win;      /* (atomic) minimum over the current window */
  uint32_t gpu_samples;     /* (atomic) */
  uint32_t alloc_cursor;    /* next pool slot to try; NCCL starts a comm's ops on one thread */
  struct cw_ctx* next_retired;
};

struct cw_op {
  struct cw_record rec;     /* the entry record; completion is derived from it */
  struct cw_ctx* ctx;
  uint32_t state;           /* (atomic) 0 free, else (ctx id << 1) | 1 */
  int32_t refs;             /* (atomic) self + all-channels-done + one per live channel */
  uint32_t nch;             /* kernel channels to wait for, 0 = complete at stop */
  uint32_t kch_started;     /* (atomic) */
  uint32_t kch_stopped;     /* (atomic) */
  uint64_t gpu_start;       /* (atomic) earliest channel start, GPU ns */
  uint64_t gpu_stop;        /* (atomic) latest channel stop, GPU ns */
} __attribute__((aligned(64)));

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_ready;                 /* settings, ring and pool exist */
static ncclResult_t g_setup_error;  /* sticky result of a failed setup */
static struct cw_settings g_set;
static struct cw_ring g_ring;
static struct cw_op* g_ops;
static uint32_t g_ops_mask;
static uint32_t g_next_ctx_id;
static int g_event_mask;
static int g_nctx;
static struct cw_ctx* g_retired;    /* finalized comms, freed when the plugin unloads */
static ncclDebugLogger_t g_log;

/* ---------------------------------------------------------------- helpers */

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

static inline int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint8_t op_from_func(const char* f) {
  if (f == NULL) return CW_OP_UNKNOWN;
  switch (f[0]) {
  case 'A':
    if (strcmp(f, "AllReduce") == 0) return CW_OP_ALLREDUCE;
    if (strncmp(f, "AllGather", 9) == 0) return CW_OP_ALLGATHER; /* AllGather, AllGatherV */
    if (strcmp(f, "AlltoAll") == 0 || strcmp(f, "AllToAll") == 0) return CW_OP_ALLTOALL;
    break;
  case 'B':
    if (strcmp(f, "Broadcast") == 0) return CW_OP_BROADCAST;
    if (strcmp(f, "Barrier") == 0) return CW_OP_BARRIER;
    break;
  case 'G':
    if (strcmp(f, "Gather") == 0) return CW_OP_GATHER;
    break;
  case 'R':
    if (strcmp(f, "ReduceScatter") == 0) return CW_OP_REDUCESCATTER;
    if (strcmp(f, "Reduce") == 0) return CW_OP_REDUCE;
    if (strcmp(f, "Recv") == 0) return CW_OP_RECV;
    break;
  case 'S':
    if (strcmp(f, "Send") == 0) return CW_OP_SEND;
    if (strcmp(f, "Scatter") == 0) return CW_OP_SCATTER;
    break;
  default:
    break;
  }
  return CW_OP_UNKNOWN;
}

/* NCCL passes ncclDatatypeToString() names: ncclInt8 .. ncclFloat64, ncclBfloat16,
 * ncclFloat8e4m3/e5m2. Some versions name ncclUint8 "Unknown": counted as 1 byte. */
static uint64_t dtype_size(const char* t) {
  size_t n;
  if (t == NULL) return 0;
  if (strncmp(t, "ncclFloat8", 10) == 0) return 1;
  n = strlen(t);
  if (n >= 2) {
    const char* e = t + n - 2;
    if (e[0] == '1' && e[1] == '6') return 2;
    if (e[0] == '3' && e[1] == '2') return 4;
    if (e[0] == '6' && e[1] == '4') return 8;
  }
  return 1;
}

static inline void atomic_min_u64(uint64_t* p, uint64_t v) {
  uint64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (v < cur && !__atomic_compare_exchange_n(p, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

static inline void atomic_max_u64(uint64_t* p, uint64_t v) {
  uint64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (v > cur && !__atomic_compare_exchange_n(p, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

/* GPU globaltimer -> CLOCK_REALTIME. The host sees a GPU stamp only after it was
 * taken, so (host now - stamp) >= true offset; the minimum over a window of
 * samples estimates the offset, and each new window follows clock drift. */
static void gpu_clock_sample(struct cw_ctx* ctx, uint64_t gpu_ns) {
  int64_t d = now_ns() - (int64_t)gpu_ns;
  uint32_t n = __atomic_fetch_add(&ctx->gpu_samples, 1, __ATOMIC_RELAXED);
  if (d < __atomic_load_n(&ctx->gpu_off_win, __ATOMIC_RELAXED))
    __atomic_store_n(&ctx->gpu_off_win, d, __ATOMIC_RELAXED);
  if (n < CW_GPU_WINDOW && d < __atomic_load_n(&ctx->gpu_off, __ATOMIC_RELAXED))
    __atomic_store_n(&ctx->gpu_off, d, __ATOMIC_RELAXED);
  if ((n + 1) % CW_GPU_WINDOW == 0) {
    __atomic_store_n(&ctx->gpu_off, __atomic_load_n(&ctx->gpu_off_win, __ATOMIC_RELAXED),
                     __ATOMIC_RELAXED);
    __atomic_store_n(&ctx->gpu_off_win, INT64_MAX, __ATOMIC_RELAXED);
  }
}

/* ------------------------------------------------------------------ ops */

/* Claims a free pool slot near this comm's cursor; the CAS settles races with
 * other comms (or a misbehaving caller) probing the same slots. */
static struct cw_op* op_alloc(struct cw_ctx* ctx) {
  uint32_t first = __atomic_load_n(&ctx->alloc_cursor, __ATOMIC_RELAXED);
  uint32_t tag = (ctx->id << 1) | 1u;
  for (uint32_t k = 0; k < CW_OP_PROBES; k++) {
    struct cw_op* o = &g_ops[(first + k) & g_ops_mask];
    uint32_t expect = 0;
    if (__atomic_load_n(&o->state, __ATOMIC_RELAXED) == 0 &&
        __atomic_compare_exchange_n(&o->state, &expect, tag, 0, __ATOMIC_ACQUIRE,
                                    __ATOMIC_RELAXED)) {
      __atomic_store_n(&ctx->alloc_cursor, first + k + 1, __ATOMIC_RELAXED);
      o->ctx = ctx;
      return o;
    }
  }
  __atomic_store_n(&ctx->alloc_cursor, first + CW_OP_PROBES, __ATOMIC_RELAXED);
  return NULL;
}

/* Fills the entry record and the completion bookkeeping, then publishes the entry. */
static void op_begin(struct cw_op* o, uint8_t op, uint64_t seq, int64_t now, uint64_t bytes,
                     int32_t peer, uint32_t aux, uint8_t nch) {
  struct cw_ctx* ctx = o->ctx;
  struct cw_record* r = &o->rec;
  r->kind = CW_KIND_CALL;
  r->op = op;
  r->flags = 0;
  r->rank = g_set.rank;
  r->comm = ctx->comm;
  r->seq = seq;
  r->t_start_ns = now;
  r->t_end_ns = 0;
  r->bytes = bytes;
  r->comm_rank = ctx->comm_rank;
  r->peer = peer;
  r->nranks = ctx->nranks;
  r->aux = aux;
  o->nch = g_set.gpu_timing ? nch : 0;
  o->kch_started = 0;
  o->kch_stopped = 0;
  o->gpu_start = UINT64_MAX;
  o->gpu_stop = 0;
  __atomic_store_n(&o->refs, o->nch > 0 ? 2 : 1, __ATOMIC_RELEASE);
  cw_ring_put(&g_ring, r, now);
}

static void op_complete(struct cw_op* o) {
  struct cw_ctx* ctx = o->ctx;
  struct cw_record rec = o->rec;
  int64_t now = now_ns();
  uint64_t g0 = __atomic_load_n(&o->gpu_start, __ATOMIC_RELAXED);
  uint64_t g1 = __atomic_load_n(&o->gpu_stop, __ATOMIC_RELAXED);
  int64_t off = __atomic_load_n(&ctx->gpu_off, __ATOMIC_RELAXED);

  rec.flags |= CW_FLAG_COMPLETED;
  rec.t_end_ns = now;
  if (g0 != 0 && g0 != UINT64_MAX && g1 >= g0 && off != INT64_MAX) {
    rec.t_start_ns = (int64_t)g0 + off;
    rec.t_end_ns = (int64_t)g1 + off;
    rec.flags |= CW_FLAG_GPU_TIMED;
  }
  cw_ring_put(&g_ring, &rec, now);
  __atomic_store_n(&o->state, 0, __ATOMIC_RELEASE);
}

static inline void op_release(struct cw_op* o) {
  /* Without kernel channels nobody else holds a reference: skip the atomic. */
  if (o->nch == 0 || __atomic_sub_fetch(&o->refs, 1, __ATOMIC_ACQ_REL) == 0) op_complete(o);
}

/* --------------------------------------------------------------- events */

static void start_coll(struct cw_ctx* ctx, void** eHandle, uint64_t nccl_seq, const char* func,
                       size_t count, int root, const char* dtype, uint8_t nch) {
  int64_t now = now_ns();
  /* Taken even when the op is dropped, so seq stays aligned across ranks. */
  uint64_t seq = __atomic_fetch_add(&ctx->coll_seq, 1, __ATOMIC_RELAXED);
  uint8_t op = op_from_func(func);
  int rooted = op == CW_OP_BROADCAST || op == CW_OP_REDUCE || op == CW_OP_GATHER ||
               op == CW_OP_SCATTER;
  struct cw_op* o = op_alloc(ctx);
  if (o == NULL) {
    cw_ring_count_dropped(&g_ring, 2);
    return;
  }
  op_begin(o, op, seq, now, (uint64_t)count * dtype_size(dtype), rooted ? root : -1,
           (uint32_t)nccl_seq, nch);
  *eHandle = o;
}

static void start_p2p(struct cw_ctx* ctx, void** eHandle, const char* func, size_t count,
                      const char* dtype, int peer, uint8_t nch) {
  int64_t now = now_ns();
  uint8_t op = op_from_func(func);
  uint64_t seq;
  struct cw_op* o;
  if ((op != CW_OP_SEND && op != CW_OP_RECV) || peer < 0 || (uint32_t)peer >= ctx->nranks) {
    cw_ring_count_dropped(&g_ring, 2); /* invalid input */
    return;
  }
  seq = __atomic_fetch_add(&ctx->p2p_seq[(op == CW_OP_RECV ? ctx->nranks : 0) + (uint32_t)peer],
                           1, __ATOMIC_RELAXED);
  o = op_alloc(ctx);
  if (o == NULL) {
    cw_ring_count_dropped(&g_ring, 2);
    return;
  }
  op_begin(o, op, seq, now, (uint64_t)count * dtype_size(dtype), peer, 0, nch);
  *eHandle = o;
}

static void start_kernel_ch(void** eHandle, void* parentObj, uint64_t ptimer) {
  uintptr_t p = (uintptr_t)parentObj;
  struct cw_op* o = (struct cw_op*)parentObj;
  if (p == 0 || (p & CW_KCH_TAG) != 0) return;
  if (__atomic_fetch_add(&o->kch_started, 1, __ATOMIC_ACQ_REL) >= o->nch) return;
  __atomic_fetch_add(&o->refs, 1, __ATOMIC_ACQ_REL);
  if (ptimer != 0) {
    atomic_min_u64(&o->gpu_start, ptimer);
    gpu_clock_sample(o->ctx, ptimer);
  }
  *eHandle = (void*)(p | CW_KCH_TAG);
}

#define CW_DEFINE_START(fn, descr_t)                                                         \
  static ncclResult_t fn(void* context, void** eHandle, descr_t* d) {                        \
    struct cw_ctx* ctx = (struct cw_ctx*)context;                                            \
    if (eHandle == NULL) return ncclSuccess;                                                 \
    *eHandle = NULL;                                                                         \
    if (ctx == NULL || d == NULL) return ncclSuccess;                                        \
    switch (d->type) {                                                                       \
    case ncclProfileColl:                                                                    \
      start_coll(ctx, eHandle, d->coll.seqNumber, d->coll.func, d->coll.count, d->coll.root, \
                 d->coll.datatype, d->coll.nChannels);                                       \
      break;                                                                                 \
    case ncclProfileP2p:                                                                     \
      start_p2p(ctx, eHandle, d->p2p.func, d->p2p.count, d->p2p.datatype, d->p2p.peer,       \
                d->p2p.nChannels);                                                           \
      break;                                                                                 \
    case ncclProfileKernelCh:                                                                \
      start_kernel_ch(eHandle, d->parentObj, d->kernelCh.pTimer);                            \
      break;                                                                                 \
    default:                                                                                 \
      break;                                                                                 \
    }                                                                                        \
    return ncclSuccess;                                                                      \
  }

CW_DEFINE_START(cw_start_v4, ncclProfilerEventDescr_v4_t)
CW_DEFINE_START(cw_start_v5, ncclProfilerEventDescr_v5_t)
CW_DEFINE_START(cw_start_v6, ncclProfilerEventDescr_v6_t)

static ncclResult_t cw_stop(void* eHandle) {
  uintptr_t p = (uintptr_t)eHandle;
  struct cw_op* o = (struct cw_op*)(p & ~CW_KCH_TAG);
  if (p == 0) return ncclSuccess;
  if ((p & CW_KCH_TAG) != 0 &&
      __atomic_add_fetch(&o->kch_stopped, 1, __ATOMIC_ACQ_REL) == o->nch)
    op_release(o); /* every expected channel is done */
  op_release(o);
  return ncclSuccess;
}

static ncclResult_t cw_record_state(void* eHandle, ncclProfilerEventState_t eState,
                                    ncclProfilerEventStateArgs_t* eStateArgs) {
  uintptr_t p = (uintptr_t)eHandle;
  struct cw_op* o = (struct cw_op*)(p & ~CW_KCH_TAG);
  if ((p & CW_KCH_TAG) == 0 || eState != ncclProfilerKernelChStop || eStateArgs == NULL)
    return ncclSuccess;
  if (eStateArgs->kernelCh.pTimer != 0) {
    atomic_max_u64(&o->gpu_stop, eStateArgs->kernelCh.pTimer);
    gpu_clock_sample(o->ctx, eStateArgs->kernelCh.pTimer);
  }
  return ncclSuccess;
}

/* ------------------------------------------------------- init / finalize */

static ncclResult_t setup_locked(void) {
  char err[768];
  char warn[256];
  if (g_ready) return ncclSuccess;
  if (g_setup_error != ncclSuccess) return g_setup_error; /* reported once already */

  if (cw_settings_load(&g_set, err, sizeof(err), warn, sizeof(warn)) != 0) {
    g_setup_error = ncclInvalidUsage;
    goto fail;
  }
  if (warn[0] != '\0') cw_log(NCCL_LOG_WARN, "%s", warn);
  g_ops = aligned_alloc(64, sizeof(struct cw_op) * g_set.max_inflight);
  if (g_ops == NULL) {
    snprintf(err, sizeof(err), "out of memory for %u in-flight operations", g_set.max_inflight);
    g_setup_error = ncclSystemError;
    goto fail;
  }
  memset(g_ops, 0, sizeof(struct cw_op) * g_set.max_inflight);
  g_ops_mask = g_set.max_inflight - 1;
  if (cw_ring_open(&g_ring, &g_set, err, sizeof(err)) != 0) {
    g_setup_error = ncclSystemError;
    goto fail;
  }
  g_event_mask = ncclProfileColl | ncclProfileP2p | (g_set.gpu_timing ? ncclProfileKernelCh : 0);
  g_ready = 1;
  cw_log(NCCL_LOG_INFO, "ring %s (%llu records), rank %d from %s, gpu timing %s", g_ring.path,
         (unsigned long long)g_set.ring_capacity, (int)g_set.rank, g_set.rank_source,
         g_set.gpu_timing ? "on" : "off");
  return ncclSuccess;

fail:
  free(g_ops);
  g_ops = NULL;
  cw_log(NCCL_LOG_WARN, "%s; profiler plugin disabled", err);
  return g_setup_error;
}


static void put_comm_record(struct cw_ctx* ctx, uint8_t kind, uint32_t aux) {
  int64_t now = now_ns();
  struct cw_record r;
  memset(&r, 0, sizeof(r));
  r.kind = kind;
  r.flags = CW_FLAG_COMPLETED;
  r.rank = g_set.rank;
  r.comm = ctx->comm;
  r.t_start_ns = now;
  r.t_end_ns = now;
  r.comm_rank = ctx->comm_rank;
  r.peer = -1;
  r.nranks = ctx->nranks;
  r.aux = aux;
  cw_ring_put(&g_ring, &r, now);
}

static ncclResult_t cw_init(void** context, uint64_t comm, int* eActivationMask,
                            const char* commName, int nNodes, int nranks, int rank,
                            ncclDebugLogger_t logfn) {
  ncclResult_t res = ncclSuccess;
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
  ctx = calloc(1, sizeof(*ctx));
  if (ctx == NULL) {
    res = ncclSystemError;
    goto fail;
  }
  ctx->p2p_seq = calloc(2 * (size_t)nranks, sizeof(uint64_t));
  if (ctx->p2p_seq == NULL) {
    res = ncclSystemError;
    goto fail;
  }
  ctx->comm = comm;
  ctx->comm_rank = rank;
  ctx->nranks = (uint32_t)nranks;
  ctx->nnodes = nNodes > 0 ? (uint32_t)nNodes : 0;
  ctx->id = ++g_next_ctx_id & 0x7fffffffu;
  ctx->alloc_cursor = ctx->id * 97u; /* spread comms over the pool */
  ctx->gpu_off = INT64_MAX;
  ctx->gpu_off_win = INT64_MAX;
  g_nctx++;
  pthread_mutex_unlock(&g_lock);

  put_comm_record(ctx, CW_KIND_COMM_INIT, ctx->nnodes);
  __atomic_store_n(eActivationMask, g_event_mask, __ATOMIC_RELAXED);
  *context = ctx;
  cw_log(NCCL_LOG_INFO, "init comm %016llx (%s) rank %d of %d, %d nodes",
         (unsigned long long)comm, commName != NULL ? commName : "", rank, nranks, nNodes);
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
  uint32_t tag;
  uint32_t orphans = 0;
  if (ctx == NULL) return ncclSuccess;

  put_comm_record(ctx, CW_KIND_COMM_DESTROY, 0);
  /* NCCL sends no more events for this comm: operations still open never completed
   * (aborted comm). Their entry records stay in the ring; free their pool slots. */
  tag = (ctx->id << 1) | 1u;
  for (uint32_t i = 0; i <= g_ops_mask; i++) {
    uint32_t expect = tag;
    if (__atomic_compare_exchange_n(&g_ops[i].state, &expect, 0, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED))
      orphans++;
  }
  cw_log(NCCL_LOG_INFO, "finalize comm %016llx: %llu collectives, %u operations left open",
         (unsigned long long)ctx->comm,
         (unsigned long long)__atomic_load_n(&ctx->coll_seq, __ATOMIC_RELAXED), orphans);

  /* The small context stays allocated until unload in case a late event still
   * names one of its (now freed) ops; the per-peer counters go now. */
  pthread_mutex_lock(&g_lock);
  free(ctx->p2p_seq);
  ctx->p2p_seq = NULL;
  ctx->next_retired = g_retired;
  g_retired = ctx;
  g_nctx--;
  pthread_mutex_unlock(&g_lock);
  return ncclSuccess;
}

/* Runs at dlclose. If a communicator is still open (process exit with live NCCL
 * threads), leave everything mapped: the OS reclaims it, and no thread can fault. */
__attribute__((destructor)) static void cw_unload(void) {
  pthread_mutex_lock(&g_lock);
  if (g_ready && g_nctx == 0) {
    while (g_retired != NULL) {
      struct cw_ctx* c = g_retired;
      g_retired = c->next_retired;
      free(c);
    }
    cw_ring_close(&g_ring);
    free(g_ops);
    g_ops = NULL;
    g_ready = 0;
  }
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
