/* Shared helpers of the harness and the benchmark: load the plugin the way NCCL
 * does, build event descriptors, simulate the GPU clock, map a ring file. */
#ifndef COMMWATCH_HARNESS_UTIL_H_
#define COMMWATCH_HARNESS_UTIL_H_

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "commwatch_ring.h"
#include "nccl_profiler_abi.h"

/* Simulated GPU globaltimer: a different epoch than CLOCK_REALTIME. */
#define GPU_EPOCH_SHIFT 1000000000000000LL

struct plugin {
  void* dl;
  ncclProfiler_v4_t* v4;
  ncclProfiler_v5_t* v5;
  ncclProfiler_v6_t* v6;
};

static inline int64_t real_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline uint64_t gpu_ns(void) { return (uint64_t)(real_ns() - GPU_EPOCH_SHIFT); }

static inline void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static inline int plugin_load(struct plugin* p, const char* path) {
  memset(p, 0, sizeof(*p));
  p->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (p->dl == NULL) {
    fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    return -1;
  }
  p->v4 = (ncclProfiler_v4_t*)dlsym(p->dl, "ncclProfiler_v4");
  p->v5 = (ncclProfiler_v5_t*)dlsym(p->dl, "ncclProfiler_v5");
  p->v6 = (ncclProfiler_v6_t*)dlsym(p->dl, "ncclProfiler_v6");
  return 0;
}

/* A Coll task event whose parent is `parent` (the CollApi handle in v5+). */
static inline void* coll5p(struct plugin* p, void* ctx, void* parent, const char* func,
                           uint64_t nccl_seq, size_t count, const char* dtype, int root,
                           uint8_t nch) {
  ncclProfilerEventDescr_v5_t d;
  void* h = NULL;
  memset(&d, 0, sizeof(d));
  d.type = ncclProfileColl;
  d.parentObj = parent;
  d.coll.seqNumber = nccl_seq;
  d.coll.func = func;
  d.coll.count = count;
  d.coll.root = root;
  d.coll.datatype = dtype;
  d.coll.nChannels = nch;
  d.coll.algo = "RING";
  d.coll.proto = "Simple";
  p->v5->startEvent(ctx, &h, &d);
  return h;
}

static inline void* coll5(struct plugin* p, void* ctx, const char* func, uint64_t nccl_seq,
                          size_t count, const char* dtype, int root, uint8_t nch) {
  return coll5p(p, ctx, NULL, func, nccl_seq, count, dtype, root, nch);
}

static inline void* p2p5p(struct plugin* p, void* ctx, void* parent, const char* func,
                          size_t count, const char* dtype, int peer, uint8_t nch) {
  ncclProfilerEventDescr_v5_t d;
  void* h = NULL;
  memset(&d, 0, sizeof(d));
  d.type = ncclProfileP2p;
  d.parentObj = parent;
  d.p2p.func = func;
  d.p2p.count = count;
  d.p2p.datatype = dtype;
  d.p2p.peer = peer;
  d.p2p.nChannels = nch;
  p->v5->startEvent(ctx, &h, &d);
  return h;
}

static inline void* p2p5(struct plugin* p, void* ctx, const char* func, size_t count,
                         const char* dtype, int peer, uint8_t nch) {
  return p2p5p(p, ctx, NULL, func, count, dtype, peer, nch);
}

/* A CollApi (is_p2p 0) or P2pApi event, as NCCL emits at the API call. */
static inline void* api5(struct plugin* p, void* ctx, int is_p2p, int graph_captured) {
  ncclProfilerEventDescr_v5_t d;
  void* h = NULL;
  memset(&d, 0, sizeof(d));
  if (is_p2p) {
    d.type = ncclProfileP2pApi;
    d.p2pApi.func = "Send";
    d.p2pApi.graphCaptured = graph_captured != 0;
  } else {
    d.type = ncclProfileCollApi;
    d.collApi.func = "AllReduce";
    d.collApi.graphCaptured = graph_captured != 0;
  }
  p->v5->startEvent(ctx, &h, &d);
  return h;
}

/* Any other event type with a parent (ProxyOp, ProxyStep, NetPlugin, ...). */
static inline void* other5(struct plugin* p, void* ctx, uint64_t type, void* parent) {
  ncclProfilerEventDescr_v5_t d;
  void* h = (void*)0x1; /* must be overwritten */
  memset(&d, 0, sizeof(d));
  d.type = type;
  d.parentObj = parent;
  if (type == ncclProfileProxyOp) {
    d.proxyOp.pid = getpid();
    d.proxyOp.channelId = 1;
    d.proxyOp.nSteps = 4;
  }
  p->v5->startEvent(ctx, &h, &d);
  return h;
}

static inline void* kch5(struct plugin* p, void* ctx, void* parent, uint8_t ch, uint64_t ptimer) {
  ncclProfilerEventDescr_v5_t d;
  void* h = NULL;
  memset(&d, 0, sizeof(d));
  d.type = ncclProfileKernelCh;
  d.parentObj = parent;
  d.kernelCh.channelId = ch;
  d.kernelCh.pTimer = ptimer;
  p->v5->startEvent(ctx, &h, &d);
  return h;
}

/* What NCCL's profiler thread does when it sees a channel finish: stamp, then stop. */
static inline void kch_end(struct plugin* p, void* h, uint64_t ptimer) {
  ncclProfilerEventStateArgs_t a;
  memset(&a, 0, sizeof(a));
  a.kernelCh.pTimer = ptimer;
  p->v5->recordEventState(h, ncclProfilerKernelChStop, &a);
  p->v5->stopEvent(h);
}

/* Maps a ring file read-only; *len receives the mapping size. */
static inline const void* map_ring(const char* path, size_t* len) {
  struct stat st;
  void* m;
  int fd = open(path, O_RDONLY);
  if (fd < 0) return NULL;
  if (fstat(fd, &st) != 0 || st.st_size < CW_RING_HEADER_SIZE) {
    close(fd);
    return NULL;
  }
  m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return NULL;
  *len = (size_t)st.st_size;
  return m;
}

#endif /* COMMWATCH_HARNESS_UTIL_H_ */
