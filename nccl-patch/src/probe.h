/*
 * The probe's process-wide state: communicators, the fixed pool of operations
 * waiting for completion, and the handles given to NCCL.
 *
 * An operation (a Coll or P2p task event) lives in one pool slot from NCCL's
 * task start until its completion record is written. Its `ctl` word carries
 * everything the completion rules need and is changed only by compare-and-swap:
 *
 *   bits  0..7   kernel channels started (as NCCL reported them)
 *   bits  8..15  kernel channels stopped
 *   bit  16      LIVE: the slot is taken
 *   bit  17      READY: entry record written, fields valid (the sweeper may look)
 *   bit  18      TASK_STOPPED: NCCL stopped the task event (host enqueue done)
 *   bit  19      DONE: one thread claimed the completion; nobody else touches it
 *   bits 32..63  generation, incremented when the slot is freed
 *
 * Handles are values, never pointers NCCL could follow: (generation << 32) |
 * (slot << 2) | tag. A late event for a slot that was freed and reused carries
 * an old generation and is ignored.
 */
#ifndef COMMWATCH_PROBE_H_
#define COMMWATCH_PROBE_H_

#include <stdint.h>

#include "clock.h"
#include "commwatch_record.h"
#include "nccl_profiler_abi.h"
#include "ring.h"
#include "settings.h"

_Static_assert(sizeof(void*) == 8, "handles need 64-bit pointers");

#define CW_CTL_STARTED(v)   ((uint32_t)((v) & 0xffu))
#define CW_CTL_STOPPED(v)   ((uint32_t)(((v) >> 8) & 0xffu))
#define CW_CTL_ONE_STOP     ((uint64_t)1 << 8)
#define CW_CTL_LIVE         ((uint64_t)1 << 16)
#define CW_CTL_READY        ((uint64_t)1 << 17)
#define CW_CTL_TASK_STOPPED ((uint64_t)1 << 18)
#define CW_CTL_DONE         ((uint64_t)1 << 19)
#define CW_CTL_GEN(v)       ((uint32_t)((v) >> 32))

#define CW_TAG_OP      1u /* a task event (Coll or P2p) */
#define CW_TAG_CHANNEL 2u /* a kernel channel of a task */
#define CW_TAG_API     3u /* a CollApi/P2pApi event: a constant, nothing is allocated */
#define CW_HANDLE_API_EAGER ((void*)(uintptr_t)CW_TAG_API)
#define CW_HANDLE_API_GRAPH ((void*)(uintptr_t)(CW_TAG_API | 4u))

#define CW_NCH_UNKNOWN 0xffu /* NCCL's channel count is not trustworthy: always use the grace */

struct cw_ctx {
  /* written by the enqueue thread */
  uint64_t comm;              /* commHash */
  int32_t comm_rank;
  uint32_t nranks;
  uint32_t nnodes;
  uint32_t alloc_cursor;      /* (relaxed) next pool slot to try */
  uint64_t coll_seq;          /* (atomic) next collective seq */
  uint64_t* p2p_seq;          /* (atomic) [0, nranks): SEND per peer; [nranks, 2 nranks): RECV */
  int finalized;              /* (relaxed) NCCL finalized this communicator */
  struct cw_ctx* next;        /* every context of this load, retired ones included */
  /* written by the threads that report kernel channels */
  int64_t gpu_off __attribute__((aligned(64))); /* (atomic) CLOCK_REALTIME - GPU globaltimer */
  int64_t gpu_off_win;        /* (atomic) minimum over the current window */
  uint32_t gpu_samples;       /* (atomic) */
  int64_t gpu_done_tstart;    /* (atomic max) entry time of the latest op seen done on the GPU */
} __attribute__((aligned(64)));

struct cw_op {
  /* completion state: every event of the operation touches this line */
  uint64_t ctl;               /* (atomic) see above */
  uint64_t gpu_start;         /* (atomic min) earliest channel start, GPU ns */
  uint64_t gpu_stop;          /* (atomic max) latest channel stop, GPU ns */
  int64_t t_last_ch;          /* (relaxed) host time of the latest channel event */
  int64_t t_seen_stop;        /* sweeper only: host time it first saw the task stopped, */
  uint32_t seen_stop_gen;     /* sweeper only: ... in this generation of the slot */
  uint8_t nch;                /* channels NCCL announced, or CW_NCH_UNKNOWN */
  uint64_t dev_entry_tag;     /* sweeper only: (generation << 1) | 1 once its device entry is written */
  /* what the completion record repeats from the entry record */
  struct cw_ctx* ctx __attribute__((aligned(64)));
  uint64_t seq;
  int64_t t_start;            /* host enqueue time */
  uint64_t bytes;
  int32_t peer;
  uint32_t aux;
  uint8_t op;
  uint16_t flags;             /* CW_FLAG_GRAPH_CAPTURED or 0 */
} __attribute__((aligned(64)));

_Static_assert(sizeof(struct cw_op) == 128, "an operation is two cache lines");

struct cw_probe {
  struct cw_settings set;
  struct cw_ring ring;
  struct cw_op* ops;
  uint32_t ops_mask;          /* pool size - 1 */
  uint64_t* attention;        /* (atomic) bitmap: operations waiting out the channel grace */
  uint32_t attention_words;
  uint32_t attention_pending; /* (atomic) a bit may be set */
  int* nccl_mask;             /* NCCL's activation mask (one word per process in NCCL) */
  int64_t grace_ns;
  int64_t timeout_ns;
  int64_t device_entry_ns;
};

extern struct cw_probe cw;

/* ---------------------------------------------------------------- handles */

static inline void* cw_handle(uint32_t slot, uint32_t gen, unsigned tag) {
  return (void*)(uintptr_t)(((uint64_t)gen << 32) | ((uint64_t)slot << 2) | tag);
}

static inline unsigned cw_handle_tag(const void* h) { return (unsigned)((uintptr_t)h & 3u); }
static inline uint32_t cw_handle_gen(const void* h) { return (uint32_t)((uintptr_t)h >> 32); }

/* The slot a handle names, or NULL when it cannot be one of ours. */
static inline struct cw_op* cw_handle_op(const void* h, uint32_t* slot) {
  uint64_t i = ((uintptr_t)h >> 2) & 0x3fffffffu;
  if (i > cw.ops_mask || cw.ops == NULL) return NULL;
  *slot = (uint32_t)i;
  return &cw.ops[i];
}

/* -------------------------------------------------------- completion rules */

/* Every channel that started has stopped, NCCL's task stop has come, and as many
 * channels as NCCL announced have reported: nothing more can come. */
static inline int cw_completable(uint64_t v, uint8_t nch) {
  uint32_t started = CW_CTL_STARTED(v);
  return (v & CW_CTL_TASK_STOPPED) != 0 && started > 0 && started == CW_CTL_STOPPED(v) &&
         nch != CW_NCH_UNKNOWN && started >= nch;
}

/* Every reported channel stopped, but fewer than announced (or the count is not
 * trusted): complete once no channel event came for the grace period. */
static inline int cw_awaiting_grace(uint64_t v) {
  uint32_t started = CW_CTL_STARTED(v);
  return (v & CW_CTL_TASK_STOPPED) != 0 && started > 0 && started == CW_CTL_STOPPED(v);
}

static inline void cw_attention(uint32_t slot) {
  __atomic_fetch_or(&cw.attention[slot >> 6], (uint64_t)1 << (slot & 63), __ATOMIC_RELEASE);
  __atomic_store_n(&cw.attention_pending, 1, __ATOMIC_RELEASE);
}

enum { CW_FINISH_OBSERVED, CW_FINISH_LOST };

/* Writes the completion record of an operation whose ctl the caller moved to
 * DONE, then frees the slot. */
void cw_op_finish(struct cw_op* o, uint64_t ctl, int how, int64_t now);

/* Claims the completion of a live operation of generation `gen` as lost
 * (timeout, succession, abort); returns 1 if this call wrote the record. */
int cw_op_lose(struct cw_op* o, uint32_t gen, int64_t now);

/* Sweeper passes: operations waiting out the grace; a full scan for succession
 * and timeouts. */
void cw_sweep_attention(int64_t now);
void cw_sweep_scan(int64_t now);

/* Finalize of one communicator: its open operations get COMPLETION_LOST. Returns
 * how many. */
uint32_t cw_abort_ctx(const struct cw_ctx* ctx, int64_t now);

/* Process-wide teardown at exit with communicators still open: every open
 * operation gets COMPLETION_LOST. */
uint32_t cw_abort_all(int64_t now);

void cw_gpu_clock_sample(struct cw_ctx* ctx, uint64_t gpu_ns, int64_t now);

/* Background thread: grace completions, succession, timeouts, clock anchoring. */
int cw_sweeper_start(char* err, size_t err_len);
void cw_sweeper_stop(void);
void cw_sweeper_forget(void);

/* NCCL's event entry points (events.c). */
ncclResult_t cw_start_v4(void* context, void** eHandle, ncclProfilerEventDescr_v4_t* d);
ncclResult_t cw_start_v5(void* context, void** eHandle, ncclProfilerEventDescr_v5_t* d);
ncclResult_t cw_start_v6(void* context, void** eHandle, ncclProfilerEventDescr_v6_t* d);
ncclResult_t cw_stop(void* eHandle);
ncclResult_t cw_record_state(void* eHandle, ncclProfilerEventState_t eState,
                             ncclProfilerEventStateArgs_t* eStateArgs);

#endif /* COMMWATCH_PROBE_H_ */
