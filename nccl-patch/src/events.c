/*
 * NCCL's event entry points: the event path. Fixed pool, atomics, the clock;
 * no allocation, lock, I/O or system call. Every entry point returns ncclSuccess.
 *
 *   Coll / P2p start    entry record (ENQUEUED); the operation waits for its
 *                       kernel channels, or is written off at once when none
 *                       can be reported (COMPLETION_LOST)
 *   Coll / P2p stop     NCCL finished enqueueing: no record
 *   KernelCh start/stop counted per operation; the last one completes it
 *   CollApi / P2pApi    a constant handle saying whether a CUDA graph captured
 *                       the call; the task events name it as their parent
 *   everything else     (Group, ProxyOp, ProxyStep, ProxyCtrl, NetPlugin,
 *                       KernelLaunch, copy-engine events) no handle, no effect
 */
#include <string.h>

#include "probe.h"

#define CW_OP_PROBES 8      /* pool slots tried in a row from one place */
#define CW_OP_JUMPS 16      /* places tried before an operation goes untracked (128 slots:
                             * a run of 8 is all taken about as often as the pool is full, so
                             * a pool 30 % full loses one operation in 10^8, 50 % in 10^5) */
#define CW_NAME_CACHE 16    /* entries per name cache, a power of two */

/* ------------------------------------------------------------ names */

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
static uint8_t dtype_size(const char* t) {
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

/* NCCL names functions and datatypes with static strings, so the answer for a
 * pointer never changes: a direct-mapped cache of (pointer << 8 | answer). */
static uint64_t func_cache[CW_NAME_CACHE];
static uint64_t dtype_cache[CW_NAME_CACHE];

static inline uint8_t cached(uint64_t* cache, const char* s, uint8_t (*slow)(const char*)) {
  uintptr_t p = (uintptr_t)s;
  uint64_t* e = &cache[(p ^ (p >> 5)) & (CW_NAME_CACHE - 1)];
  uint64_t v = __atomic_load_n(e, __ATOMIC_RELAXED);
  uint8_t answer;
  if (__builtin_expect(p != 0 && (v >> 8) == p, 1)) return (uint8_t)v;
  answer = slow(s);
  if (p != 0 && (p >> 56) == 0) __atomic_store_n(e, ((uint64_t)p << 8) | answer, __ATOMIC_RELAXED);
  return answer;
}

/* ------------------------------------------------------------ task events */

static inline int channels_reported(void) {
  return cw.set.gpu_timing &&
         (__atomic_load_n(cw.nccl_mask, __ATOMIC_RELAXED) & ncclProfileKernelCh) != 0;
}

/* Claims a free pool slot: the next one after this communicator's previous
 * operation (they usually complete in order, so it is free), else a run of
 * slots there, else runs at a few other places (another communicator's
 * operations may fill this stretch while the pool is mostly free). */
static inline struct cw_op* op_alloc(struct cw_ctx* ctx, uint32_t* slot, uint32_t* gen) {
  uint32_t first = __atomic_load_n(&ctx->alloc_cursor, __ATOMIC_RELAXED);
  for (uint32_t jump = 0; jump < CW_OP_JUMPS; jump++) {
    for (uint32_t k = 0; k < CW_OP_PROBES; k++) {
      uint32_t i = (first + k) & cw.ops_mask;
      struct cw_op* o = &cw.ops[i];
      uint64_t v = __atomic_load_n(&o->ctl, __ATOMIC_RELAXED);
      if ((v & CW_CTL_LIVE) == 0 &&
          __atomic_compare_exchange_n(&o->ctl, &v, v | CW_CTL_LIVE, 0, __ATOMIC_ACQUIRE,
                                      __ATOMIC_RELAXED)) {
        __atomic_store_n(&ctx->alloc_cursor, i + 1, __ATOMIC_RELAXED);
        *slot = i;
        *gen = CW_CTL_GEN(v);
        return o;
      }
    }
    first = (first + CW_OP_PROBES) * 2654435761u; /* somewhere else (Fibonacci hashing) */
  }
  __atomic_store_n(&ctx->alloc_cursor, first, __ATOMIC_RELAXED);
  return NULL;
}

/* Writes the entry record; returns the operation's handle, or NULL when its
 * completion cannot be observed (then the entry says so: COMPLETION_LOST). */
static void* start_task(struct cw_ctx* ctx, uint8_t op, uint64_t seq, uint64_t bytes, int32_t peer,
                        uint32_t aux, unsigned nch, uint16_t flags, int64_t now) {
  struct cw_record r;
  struct cw_op* o;
  uint32_t slot, gen;
  r.kind = CW_KIND_CALL;
  r.op = op;
  r.flags = (uint16_t)(flags | CW_FLAG_ENQUEUED);
  r.rank = cw.set.rank;
  r.comm = ctx->comm;
  r.seq = seq;
  r.t_start_ns = now;
  r.t_end_ns = 0;
  r.bytes = bytes;
  r.comm_rank = ctx->comm_rank;
  r.peer = peer;
  r.nranks = ctx->nranks;
  r.aux = aux;
  if (nch == 0 || !channels_reported()) { /* NCCL will report no device work for it */
    r.flags |= CW_FLAG_COMPLETION_LOST;
    cw_ring_put(&cw.ring, &r, now);
    return NULL;
  }
  o = op_alloc(ctx, &slot, &gen);
  if (__builtin_expect(o == NULL, 0)) { /* pool full: the entry still counts */
    r.flags |= CW_FLAG_COMPLETION_LOST;
    cw_ring_put(&cw.ring, &r, now);
    cw_ring_count_dropped(&cw.ring, 1);
    return NULL;
  }
  /* Atomic (plain stores on x86): a late event of the slot's previous
   * operation, or the sweeper, may touch them while the slot changes hands. */
  __atomic_store_n(&o->gpu_start, UINT64_MAX, __ATOMIC_RELAXED);
  __atomic_store_n(&o->gpu_stop, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&o->t_last_ch, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&o->ctx, ctx, __ATOMIC_RELAXED);
  __atomic_store_n(&o->t_start, now, __ATOMIC_RELAXED);
  o->nch = (uint8_t)nch;
  o->seq = seq;
  o->bytes = bytes;
  o->peer = peer;
  o->aux = aux;
  o->op = op;
  o->flags = flags;
  cw_ring_put(&cw.ring, &r, now); /* the entry precedes anything the sweeper may write */
  __atomic_store_n(&o->ctl, ((uint64_t)gen << 32) | CW_CTL_LIVE | CW_CTL_READY, __ATOMIC_RELEASE);
  return cw_handle(slot, gen, CW_TAG_OP);
}

static inline uint16_t graph_flag(const void* parent) {
  return parent == CW_HANDLE_API_GRAPH ? CW_FLAG_GRAPH_CAPTURED : 0;
}

static void* start_coll(struct cw_ctx* ctx, const void* parent, uint64_t nccl_seq, const char* func,
                        size_t count, int root, const char* dtype, unsigned nch) {
  int64_t now = cw_now();
  /* Counted even when the op goes untracked, so seq stays aligned across ranks. */
  uint64_t seq = __atomic_fetch_add(&ctx->coll_seq, 1, __ATOMIC_RELAXED);
  uint8_t op = cached(func_cache, func, op_from_func);
  int rooted = op == CW_OP_BROADCAST || op == CW_OP_REDUCE || op == CW_OP_GATHER ||
               op == CW_OP_SCATTER;
  return start_task(ctx, op, seq, (uint64_t)count * cached(dtype_cache, dtype, dtype_size),
                    rooted ? root : -1, (uint32_t)nccl_seq, nch, graph_flag(parent), now);
}

static void* start_p2p(struct cw_ctx* ctx, const void* parent, const char* func, size_t count,
                       const char* dtype, int peer, unsigned nch) {
  int64_t now = cw_now();
  uint8_t op = cached(func_cache, func, op_from_func);
  uint64_t seq;
  if ((op != CW_OP_SEND && op != CW_OP_RECV) || peer < 0 || (uint32_t)peer >= ctx->nranks) {
    cw_ring_count_dropped(&cw.ring, 2); /* invalid input: neither record is written */
    return NULL;
  }
  seq = __atomic_fetch_add(&ctx->p2p_seq[(op == CW_OP_RECV ? ctx->nranks : 0) + (uint32_t)peer], 1,
                           __ATOMIC_RELAXED);
  return start_task(ctx, op, seq, (uint64_t)count * cached(dtype_cache, dtype, dtype_size), peer, 0,
                    nch, graph_flag(parent), now);
}

static void stop_task(struct cw_op* o, uint32_t slot, uint32_t gen) {
  uint64_t v = __atomic_load_n(&o->ctl, __ATOMIC_RELAXED);
  uint64_t nv;
  do {
    if (CW_CTL_GEN(v) != gen || (v & (CW_CTL_LIVE | CW_CTL_DONE | CW_CTL_TASK_STOPPED)) != CW_CTL_LIVE)
      return;
    nv = v | CW_CTL_TASK_STOPPED;
    if (cw_completable(nv, o->nch)) nv |= CW_CTL_DONE;
  } while (!__atomic_compare_exchange_n(&o->ctl, &v, nv, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
  if (nv & CW_CTL_DONE)
    cw_op_finish(o, nv, CW_FINISH_OBSERVED, cw_now()); /* its channels all ran before the stop */
  else if (cw_awaiting_grace(nv))
    cw_attention(slot);
}

/* --------------------------------------------------------- kernel channels */

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

static void* start_channel(const void* parent, uint64_t ptimer) {
  uint32_t slot, gen = cw_handle_gen(parent);
  struct cw_op* o;
  uint64_t v;
  int64_t now;
  if (cw_handle_tag(parent) != CW_TAG_OP || (o = cw_handle_op(parent, &slot)) == NULL) return NULL;
  v = __atomic_load_n(&o->ctl, __ATOMIC_RELAXED);
  do {
    if (CW_CTL_GEN(v) != gen || (v & (CW_CTL_LIVE | CW_CTL_DONE)) != CW_CTL_LIVE ||
        CW_CTL_STARTED(v) == 0xffu)
      return NULL;
  } while (!__atomic_compare_exchange_n(&o->ctl, &v, v + 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
  /* A started channel holds the operation open until it stops. */
  now = cw_now();
  __atomic_store_n(&o->t_last_ch, now, __ATOMIC_RELAXED);
  if (ptimer != 0) {
    atomic_min_u64(&o->gpu_start, ptimer);
    cw_gpu_clock_sample(o->ctx, ptimer, now);
  }
  return cw_handle(slot, gen, CW_TAG_CHANNEL);
}

static void stop_channel(struct cw_op* o, uint32_t slot, uint32_t gen) {
  uint64_t v = __atomic_load_n(&o->ctl, __ATOMIC_RELAXED);
  uint64_t nv;
  int64_t now;
  if (CW_CTL_GEN(v) != gen) return;
  now = cw_now();
  __atomic_store_n(&o->t_last_ch, now, __ATOMIC_RELAXED); /* before the count: the grace runs from here */
  do {
    if (CW_CTL_GEN(v) != gen || (v & (CW_CTL_LIVE | CW_CTL_DONE)) != CW_CTL_LIVE ||
        CW_CTL_STOPPED(v) >= CW_CTL_STARTED(v))
      return;
    nv = v + CW_CTL_ONE_STOP;
    if (cw_completable(nv, o->nch)) nv |= CW_CTL_DONE;
  } while (!__atomic_compare_exchange_n(&o->ctl, &v, nv, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
  if (nv & CW_CTL_DONE)
    cw_op_finish(o, nv, CW_FINISH_OBSERVED, now);
  else if (cw_awaiting_grace(nv))
    cw_attention(slot);
}

/* -------------------------------------------------------------- entry points */

#define CW_START_TASKS(d, nch_p2p)                                                              \
  case ncclProfileColl:                                                                         \
    *eHandle = start_coll(ctx, d->parentObj, d->coll.seqNumber, d->coll.func, d->coll.count,    \
                          d->coll.root, d->coll.datatype, d->coll.nChannels);                   \
    break;                                                                                      \
  case ncclProfileP2p:                                                                          \
    *eHandle = start_p2p(ctx, d->parentObj, d->p2p.func, d->p2p.count, d->p2p.datatype,         \
                         d->p2p.peer, nch_p2p);                                                 \
    break;                                                                                      \
  case ncclProfileKernelCh:                                                                     \
    *eHandle = start_channel(d->parentObj, d->kernelCh.pTimer);                                 \
    break;

#define CW_START_API(d)                                                                         \
  case ncclProfileCollApi:                                                                      \
    *eHandle = d->collApi.graphCaptured ? CW_HANDLE_API_GRAPH : CW_HANDLE_API_EAGER;            \
    break;                                                                                      \
  case ncclProfileP2pApi:                                                                       \
    *eHandle = d->p2pApi.graphCaptured ? CW_HANDLE_API_GRAPH : CW_HANDLE_API_EAGER;             \
    break;

#define CW_START_PROLOGUE                                                                       \
  struct cw_ctx* ctx = (struct cw_ctx*)context;                                                 \
  if (eHandle == NULL) return ncclSuccess;                                                      \
  *eHandle = NULL;                                                                              \
  if (ctx == NULL || d == NULL || __atomic_load_n(&ctx->finalized, __ATOMIC_RELAXED))           \
    return ncclSuccess;

/* v4: no API events; newer NCCL's v4 shim leaves p2p.nChannels unset. */
ncclResult_t cw_start_v4(void* context, void** eHandle, ncclProfilerEventDescr_v4_t* d) {
  CW_START_PROLOGUE
  switch (d->type) {
    CW_START_TASKS(d, CW_NCH_UNKNOWN)
  default:
    break;
  }
  return ncclSuccess;
}

ncclResult_t cw_start_v5(void* context, void** eHandle, ncclProfilerEventDescr_v5_t* d) {
  CW_START_PROLOGUE
  switch (d->type) {
    CW_START_TASKS(d, d->p2p.nChannels)
    CW_START_API(d)
  default:
    break;
  }
  return ncclSuccess;
}

ncclResult_t cw_start_v6(void* context, void** eHandle, ncclProfilerEventDescr_v6_t* d) {
  CW_START_PROLOGUE
  switch (d->type) {
    CW_START_TASKS(d, d->p2p.nChannels)
    CW_START_API(d)
  default:
    break;
  }
  return ncclSuccess;
}

ncclResult_t cw_stop(void* eHandle) {
  uint32_t slot;
  struct cw_op* o;
  unsigned tag = cw_handle_tag(eHandle);
  if ((tag != CW_TAG_OP && tag != CW_TAG_CHANNEL) || (o = cw_handle_op(eHandle, &slot)) == NULL)
    return ncclSuccess; /* NULL, an API handle, or not ours */
  if (tag == CW_TAG_OP)
    stop_task(o, slot, cw_handle_gen(eHandle));
  else
    stop_channel(o, slot, cw_handle_gen(eHandle));
  return ncclSuccess;
}

ncclResult_t cw_record_state(void* eHandle, ncclProfilerEventState_t eState,
                             ncclProfilerEventStateArgs_t* eStateArgs) {
  uint32_t slot;
  struct cw_op* o;
  uint64_t v;
  if (cw_handle_tag(eHandle) != CW_TAG_CHANNEL || eState != ncclProfilerKernelChStop ||
      eStateArgs == NULL || eStateArgs->kernelCh.pTimer == 0 ||
      (o = cw_handle_op(eHandle, &slot)) == NULL)
    return ncclSuccess;
  v = __atomic_load_n(&o->ctl, __ATOMIC_ACQUIRE);
  if (CW_CTL_GEN(v) != cw_handle_gen(eHandle) || (v & (CW_CTL_LIVE | CW_CTL_DONE)) != CW_CTL_LIVE)
    return ncclSuccess;
  atomic_max_u64(&o->gpu_stop, eStateArgs->kernelCh.pTimer);
  cw_gpu_clock_sample(o->ctx, eStateArgs->kernelCh.pTimer, cw_now());
  return ncclSuccess;
}
