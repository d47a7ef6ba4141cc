/*
 * The parts of NCCL's profiler-plugin ABI that commwatch uses, declared from
 * the layout documented in NVIDIA/nccl plugins/profiler/README.md and the
 * example plugin's profiler_v4.h / profiler_v5.h / profiler_v6.h.
 *
 * Only field order and types matter for binary compatibility. The union
 * members this plugin reads are declared, plus the largest member of each
 * version so the union has its real size. The static asserts pin the offsets
 * this plugin reads (LP64).
 */
#ifndef COMMWATCH_NCCL_PROFILER_ABI_H_
#define COMMWATCH_NCCL_PROFILER_ABI_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;

typedef enum {
  NCCL_LOG_NONE = 0, NCCL_LOG_VERSION = 1, NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3, NCCL_LOG_ABORT = 4, NCCL_LOG_TRACE = 5,
} ncclDebugLogLevel;

#define NCCL_LOGSUB_INIT    1ul
#define NCCL_LOGSUB_DESTROY 65536ul

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags,
                                  const char* file, int line, const char* fmt, ...);

/* Event type bits (eActivationMask and descriptor `type`). */
enum {
  ncclProfileGroup        = 1 << 0,
  ncclProfileColl         = 1 << 1,  /* task event: host enqueue of a collective */
  ncclProfileP2p          = 1 << 2,  /* task event: host enqueue of a send or recv */
  ncclProfileProxyOp      = 1 << 3,  /* proxy thread, per channel with network work */
  ncclProfileProxyStep    = 1 << 4,  /* proxy thread, per network transfer */
  ncclProfileProxyCtrl    = 1 << 5,  /* proxy thread housekeeping */
  ncclProfileKernelCh     = 1 << 6,  /* device work of one channel, GPU timestamps */
  ncclProfileNetPlugin    = 1 << 7,  /* network plugin's own events */
  ncclProfileGroupApi     = 1 << 8,  /* v5+: API-level events, carry graphCaptured */
  ncclProfileCollApi      = 1 << 9,
  ncclProfileP2pApi       = 1 << 10,
  ncclProfileKernelLaunch = 1 << 11,
  ncclProfileCeColl       = 1 << 12, /* v6: copy-engine collectives */
  ncclProfileCeSync       = 1 << 13,
  ncclProfileCeBatch      = 1 << 14,
};

/* Event states: only the one this plugin acts on is named; the enum is int-sized. */
typedef enum {
  ncclProfilerKernelChStop = 22,
  ncclProfilerStateIntSized = 0x7fffffff,
} ncclProfilerEventState_t;

/* Task-event members. v4's coll and p2p end before parentGroup; the fields this
 * plugin reads sit at the same offsets in every version. */
struct cw_abi_coll {
  uint64_t seqNumber;
  const char* func;
  const void* sendBuff;
  void* recvBuff;
  size_t count;
  int root;
  const char* datatype;
  uint8_t nChannels;
  uint8_t nWarps;
  const char* algo;
  const char* proto;
  void* parentGroup; /* v5+ only */
};

struct cw_abi_coll_v4 {
  uint64_t seqNumber;
  const char* func;
  const void* sendBuff;
  void* recvBuff;
  size_t count;
  int root;
  const char* datatype;
  uint8_t nChannels;
  uint8_t nWarps;
  const char* algo;
  const char* proto;
};

struct cw_abi_p2p {
  const char* func;
  void* buff;
  const char* datatype;
  size_t count;
  int peer;
  uint8_t nChannels;
  void* parentGroup; /* v5+ only */
};

struct cw_abi_p2p_v4 {
  const char* func;
  void* buff;
  const char* datatype;
  size_t count;
  int peer;
  uint8_t nChannels; /* newer NCCL's v4 shim does not fill it in: not trusted */
};

struct cw_abi_proxy_op {
  pid_t pid; /* PXN: another process's op; its parentObj is not ours */
  uint8_t channelId;
  int peer;
  int nSteps;
  int chunkSize;
  int isSend;
};

struct cw_abi_kernel_ch {
  uint8_t channelId;
  uint64_t pTimer; /* GPU globaltimer at kernel-channel start */
};

struct cw_abi_net_plugin {
  int64_t id;
  void* data;
};

/* v5+ API events: emitted once per API call, at capture time for a CUDA graph. */
struct cw_abi_coll_api {
  const char* func;
  size_t count;
  const char* datatype;
  int root;
  void* stream;
  bool graphCaptured;
};

struct cw_abi_p2p_api {
  const char* func;
  size_t count;
  const char* datatype;
  void* stream;
  bool graphCaptured;
};

struct cw_abi_ce_coll { /* v6, the largest member: sizes the union */
  uint64_t seqNumber;
  const char* func;
  const void* sendBuff;
  void* recvBuff;
  size_t count;
  int root;
  const char* datatype;
  const char* syncStrategy;
  bool intraBatchSync;
  uint32_t batchSize;
  uint32_t numBatches;
  uint32_t ceSeqNum;
  void* stream;
};

/* ---- v4 (NCCL 2.26 / 2.27) ---- */
typedef struct {
  uint8_t type;
  void* parentObj;
  int rank;
  union {
    struct cw_abi_coll_v4 coll;
    struct cw_abi_p2p_v4 p2p;
    struct cw_abi_proxy_op proxyOp;
    struct { int step; } proxyStep;
    struct cw_abi_kernel_ch kernelCh;
    struct cw_abi_net_plugin netPlugin;
  };
} ncclProfilerEventDescr_v4_t;

/* ---- v5 (NCCL 2.28) ---- */
typedef struct {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    struct { bool graphCaptured; int groupDepth; } groupApi;
    struct cw_abi_coll_api collApi;
    struct cw_abi_p2p_api p2pApi;
    struct { void* stream; } kernelLaunch;
    struct cw_abi_coll coll;
    struct cw_abi_p2p p2p;
    struct cw_abi_proxy_op proxyOp;
    struct { int step; } proxyStep;
    struct cw_abi_kernel_ch kernelCh;
    struct cw_abi_net_plugin netPlugin;
  };
} ncclProfilerEventDescr_v5_t;

/* ---- v6 (NCCL 2.29): v5 plus copy-engine members ---- */
typedef struct {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    struct { bool graphCaptured; int groupDepth; } groupApi;
    struct cw_abi_coll_api collApi;
    struct cw_abi_p2p_api p2pApi;
    struct { void* stream; } kernelLaunch;
    struct cw_abi_coll coll;
    struct cw_abi_p2p p2p;
    struct cw_abi_proxy_op proxyOp;
    struct { int step; } proxyStep;
    struct cw_abi_kernel_ch kernelCh;
    struct cw_abi_net_plugin netPlugin;
    struct cw_abi_ce_coll ceColl;
  };
} ncclProfilerEventDescr_v6_t;

/* State arguments: a union of 8-byte members in v4..v6; kernelCh.pTimer at 0. */
typedef union {
  struct { size_t transSize; } proxyStep;
  struct { int appendedProxyOps; } proxyCtrl;
  struct { void* data; } netPlugin;
  struct { uint64_t pTimer; } kernelCh;
} ncclProfilerEventStateArgs_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, int* eActivationMask, const char* commName,
                       uint64_t commHash, int nNodes, int nranks, int rank,
                       ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v4_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_t eState,
                                   ncclProfilerEventStateArgs_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v4_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask,
                       const char* commName, int nNodes, int nranks, int rank,
                       ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v5_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_t eState,
                                   ncclProfilerEventStateArgs_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v5_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask,
                       const char* commName, int nNodes, int nranks, int rank,
                       ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v6_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_t eState,
                                   ncclProfilerEventStateArgs_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v6_t;

#if defined(__LP64__)
_Static_assert(sizeof(ncclProfilerEventState_t) == sizeof(int), "state enum is int-sized");
_Static_assert(sizeof(ncclProfilerEventStateArgs_t) == 8, "state args union is 8 bytes");
_Static_assert(offsetof(ncclProfilerEventDescr_v4_t, parentObj) == 8, "v4 parentObj");
_Static_assert(offsetof(ncclProfilerEventDescr_v4_t, rank) == 16, "v4 rank");
_Static_assert(offsetof(ncclProfilerEventDescr_v4_t, coll) == 24, "v4 union");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll) == 24, "v5 union");
_Static_assert(offsetof(ncclProfilerEventDescr_v6_t, coll) == 24, "v6 union");
_Static_assert(sizeof(ncclProfilerEventDescr_v6_t) == 24 + 88, "v6 union is ceColl-sized");
_Static_assert(offsetof(struct cw_abi_coll, count) == 32, "coll.count");
_Static_assert(offsetof(struct cw_abi_coll, root) == 40, "coll.root");
_Static_assert(offsetof(struct cw_abi_coll, datatype) == 48, "coll.datatype");
_Static_assert(offsetof(struct cw_abi_coll, nChannels) == 56, "coll.nChannels");
_Static_assert(offsetof(struct cw_abi_p2p, count) == 24, "p2p.count");
_Static_assert(offsetof(struct cw_abi_p2p, peer) == 32, "p2p.peer");
_Static_assert(offsetof(struct cw_abi_p2p, nChannels) == 36, "p2p.nChannels");
_Static_assert(offsetof(struct cw_abi_kernel_ch, pTimer) == 8, "kernelCh.pTimer");
_Static_assert(offsetof(struct cw_abi_coll_api, graphCaptured) == 40, "collApi.graphCaptured");
_Static_assert(offsetof(struct cw_abi_p2p_api, graphCaptured) == 32, "p2pApi.graphCaptured");
_Static_assert(offsetof(struct cw_abi_coll_v4, nChannels) == offsetof(struct cw_abi_coll, nChannels), "v4 coll");
_Static_assert(offsetof(struct cw_abi_p2p_v4, nChannels) == offsetof(struct cw_abi_p2p, nChannels), "v4 p2p");
#endif

#endif /* COMMWATCH_NCCL_PROFILER_ABI_H_ */
