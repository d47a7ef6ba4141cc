/*
 * Recorder: an NCCL profiler plugin that writes down every call NCCL makes into
 * the profiler ABI, then passes it on to the commwatch plugin. Used on a GPU
 * machine to record what a real NCCL sends (test/recorded/, replayed by the
 * harness's `recorded` scenario); never shipped.
 *
 *   COMMWATCH_RECORD_PLUGIN  path of the plugin to forward to (required)
 *   COMMWATCH_RECORD_FILE    trace file to write (required; appended to)
 *
 * Every call is forwarded and written under one lock, so the file's order is
 * the order the plugin saw the calls in. The lock costs time on NCCL's threads:
 * figures of overhead come from the plain plugin, never from this one.
 *
 * Trace format (text, one call per line, fields separated by one space; a
 * NULL string is "-", pointers and handles are hex, t is CLOCK_MONOTONIC ns
 * since the first call, tid is a small number per thread in first-call order):
 *   V <version>                                       entry points NCCL used (first call)
 *   I t tid ctx comm nNodes nranks rank mask result name
 *   S t tid ctx handle type parent rank <type fields>
 *   E t tid handle                                    stopEvent
 *   R t tid handle state arg                          recordEventState (arg: the args' first 8 bytes)
 *   F t tid ctx                                       finalize
 * Type fields: Coll seq func count root datatype nChannels nWarps algo proto
 * parentGroup; P2p func datatype count peer nChannels parentGroup; KernelCh
 * channelId pTimer; CollApi func count datatype root graphCaptured; P2pApi
 * func count datatype graphCaptured; GroupApi graphCaptured groupDepth; ProxyOp
 * pid channelId peer nSteps chunkSize isSend; ProxyStep step; others none.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nccl_profiler_abi.h"

#define EXPORT __attribute__((visibility("default")))

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE* g_out;
static void* g_dl;
static ncclProfiler_v4_t* g_v4;
static ncclProfiler_v5_t* g_v5;
static ncclProfiler_v6_t* g_v6;
static int g_version;
static int64_t g_t0 = -1;
static int g_threads;
static __thread int t_tid = -1;

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static const char* s(const char* v) { return v != NULL && v[0] != '\0' ? v : "-"; }

/* Under g_lock: the line's common head. */
static void head(char kind) {
  int64_t now = mono_ns();
  if (g_t0 < 0) g_t0 = now;
  if (t_tid < 0) t_tid = g_threads++;
  fprintf(g_out, "%c %" PRId64 " %d", kind, now - g_t0, t_tid);
}

/* Under g_lock: loads the forwarded plugin and opens the trace (first init). */
static int setup(int version) {
  const char* lib = getenv("COMMWATCH_RECORD_PLUGIN");
  const char* file = getenv("COMMWATCH_RECORD_FILE");
  if (g_out != NULL) return 0;
  if (lib == NULL || file == NULL) {
    fprintf(stderr, "recorder: COMMWATCH_RECORD_PLUGIN and COMMWATCH_RECORD_FILE must be set\n");
    return -1;
  }
  g_dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (g_dl == NULL) {
    fprintf(stderr, "recorder: dlopen %s: %s\n", lib, dlerror());
    return -1;
  }
  g_v4 = (ncclProfiler_v4_t*)dlsym(g_dl, "ncclProfiler_v4");
  g_v5 = (ncclProfiler_v5_t*)dlsym(g_dl, "ncclProfiler_v5");
  g_v6 = (ncclProfiler_v6_t*)dlsym(g_dl, "ncclProfiler_v6");
  g_out = fopen(file, "a");
  if (g_out == NULL) {
    fprintf(stderr, "recorder: cannot open %s\n", file);
    return -1;
  }
  setvbuf(g_out, NULL, _IOFBF, 1 << 20);
  g_version = version;
  fprintf(g_out, "V %d\n", version);
  return 0;
}

static void put_init(void* ctx, uint64_t comm, int nNodes, int nranks, int rank, const int* mask,
                     ncclResult_t res, const char* name) {
  head('I');
  fprintf(g_out, " %p %" PRIx64 " %d %d %d %d %d %s\n", ctx, comm, nNodes, nranks, rank,
          mask != NULL ? *mask : 0, (int)res, s(name));
}

/* The union's fields by type; v5 and v6 lay out every member read here alike,
 * v4 differs only in the width of `type` and the missing parentGroup. */
static void put_fields(uint64_t type, const void* u, int v4) {
  if (type == ncclProfileColl) {
    const struct cw_abi_coll* c = u;
    fprintf(g_out, " %" PRIu64 " %s %zu %d %s %u %u %s %s %p", c->seqNumber, s(c->func), c->count,
            c->root, s(c->datatype), c->nChannels, c->nWarps, s(c->algo), s(c->proto),
            v4 ? NULL : c->parentGroup);
  } else if (type == ncclProfileP2p) {
    const struct cw_abi_p2p* p = u;
    fprintf(g_out, " %s %s %zu %d %u %p", s(p->func), s(p->datatype), p->count, p->peer,
            p->nChannels, v4 ? NULL : p->parentGroup);
  } else if (type == ncclProfileKernelCh) {
    const struct cw_abi_kernel_ch* k = u;
    fprintf(g_out, " %u %" PRIu64, k->channelId, k->pTimer);
  } else if (type == ncclProfileCollApi && !v4) {
    const struct cw_abi_coll_api* a = u;
    fprintf(g_out, " %s %zu %s %d %d", s(a->func), a->count, s(a->datatype), a->root,
            (int)a->graphCaptured);
  } else if (type == ncclProfileP2pApi && !v4) {
    const struct cw_abi_p2p_api* a = u;
    fprintf(g_out, " %s %zu %s %d", s(a->func), a->count, s(a->datatype), (int)a->graphCaptured);
  } else if (type == ncclProfileGroupApi && !v4) {
    const struct { bool graphCaptured; int groupDepth; }* g = u;
    fprintf(g_out, " %d %d", (int)g->graphCaptured, g->groupDepth);
  } else if (type == ncclProfileProxyOp) {
    const struct cw_abi_proxy_op* o = u;
    fprintf(g_out, " %d %u %d %d %d %d", (int)o->pid, o->channelId, o->peer, o->nSteps,
            o->chunkSize, o->isSend);
  } else if (type == ncclProfileProxyStep) {
    fprintf(g_out, " %d", *(const int*)u);
  }
}

static void put_start(void* ctx, void* h, uint64_t type, void* parent, int rank, const void* u,
                      int v4) {
  head('S');
  fprintf(g_out, " %p %p %" PRIu64 " %p %d", ctx, h, type, parent, rank);
  put_fields(type, u, v4);
  fputc('\n', g_out);
}

/* ------------------------------------------------------------ entry points */

static ncclResult_t rec_init(void** context, uint64_t comm, int* mask, const char* name,
                             int nNodes, int nranks, int rank, ncclDebugLogger_t logfn) {
  ncclResult_t res = ncclInternalError;
  pthread_mutex_lock(&g_lock);
  if (setup(g_version != 0 ? g_version : 5) == 0) {
    if (g_version == 4)
      res = g_v4->init(context, mask, name, comm, nNodes, nranks, rank, logfn);
    else if (g_version == 5)
      res = g_v5->init(context, comm, mask, name, nNodes, nranks, rank, logfn);
    else
      res = g_v6->init(context, comm, mask, name, nNodes, nranks, rank, logfn);
    put_init(context != NULL ? *context : NULL, comm, nNodes, nranks, rank, mask, res, name);
    fflush(g_out);
  }
  pthread_mutex_unlock(&g_lock);
  return res;
}

static ncclResult_t rec_init_v6(void** c, uint64_t comm, int* m, const char* n, int nn, int nr,
                                int r, ncclDebugLogger_t l) {
  if (__atomic_load_n(&g_version, __ATOMIC_RELAXED) == 0) g_version = 6;
  return rec_init(c, comm, m, n, nn, nr, r, l);
}

static ncclResult_t rec_init_v5(void** c, uint64_t comm, int* m, const char* n, int nn, int nr,
                                int r, ncclDebugLogger_t l) {
  if (__atomic_load_n(&g_version, __ATOMIC_RELAXED) == 0) g_version = 5;
  return rec_init(c, comm, m, n, nn, nr, r, l);
}

static ncclResult_t rec_init_v4(void** c, int* m, const char* n, uint64_t comm, int nn, int nr,
                                int r, ncclDebugLogger_t l) {
  if (__atomic_load_n(&g_version, __ATOMIC_RELAXED) == 0) g_version = 4;
  return rec_init(c, comm, m, n, nn, nr, r, l);
}

static ncclResult_t rec_start_v6(void* ctx, void** h, ncclProfilerEventDescr_v6_t* d) {
  pthread_mutex_lock(&g_lock);
  ncclResult_t res = g_v6->startEvent(ctx, h, d);
  put_start(ctx, h != NULL ? *h : NULL, d->type, d->parentObj, d->rank, &d->coll, 0);
  pthread_mutex_unlock(&g_lock);
  return res;
}

static ncclResult_t rec_start_v5(void* ctx, void** h, ncclProfilerEventDescr_v5_t* d) {
  pthread_mutex_lock(&g_lock);
  ncclResult_t res = g_v5->startEvent(ctx, h, d);
  put_start(ctx, h != NULL ? *h : NULL, d->type, d->parentObj, d->rank, &d->coll, 0);
  pthread_mutex_unlock(&g_lock);
  return res;
}

static ncclResult_t rec_start_v4(void* ctx, void** h, ncclProfilerEventDescr_v4_t* d) {
  pthread_mutex_lock(&g_lock);
  ncclResult_t res = g_v4->startEvent(ctx, h, d);
  put_start(ctx, h != NULL ? *h : NULL, d->type, d->parentObj, d->rank, &d->coll, 1);
  pthread_mutex_unlock(&g_lock);
  return res;
}

static ncclResult_t forward_stop(void* h) {
  if (g_version == 4) return g_v4->stopEvent(h);
  if (g_version == 5) return g_v5->stopEvent(h);
  return g_v6->stopEvent(h);
}

static ncclResult_t rec_stop(void* h) {
  pthread_mutex_lock(&g_lock);
  ncclResult_t res = forward_stop(h);
  head('E');
  fprintf(g_out, " %p\n", h);
  pthread_mutex_unlock(&g_lock);
  return res;
}

static ncclResult_t rec_state(void* h, ncclProfilerEventState_t st, ncclProfilerEventStateArgs_t* a) {
  uint64_t arg = 0;
  ncclResult_t res;
  pthread_mutex_lock(&g_lock);
  if (a != NULL) memcpy(&arg, a, sizeof(arg));
  if (g_version == 4)
    res = g_v4->recordEventState(h, st, a);
  else if (g_version == 5)
    res = g_v5->recordEventState(h, st, a);
  else
    res = g_v6->recordEventState(h, st, a);
  head('R');
  fprintf(g_out, " %p %d %" PRIu64 "\n", h, (int)st, arg);
  pthread_mutex_unlock(&g_lock);
  return res;
}

static ncclResult_t rec_finalize(void* ctx) {
  ncclResult_t res;
  pthread_mutex_lock(&g_lock);
  if (g_version == 4)
    res = g_v4->finalize(ctx);
  else if (g_version == 5)
    res = g_v5->finalize(ctx);
  else
    res = g_v6->finalize(ctx);
  head('F');
  fprintf(g_out, " %p\n", ctx);
  fflush(g_out);
  pthread_mutex_unlock(&g_lock);
  return res;
}

__attribute__((destructor)) static void rec_unload(void) {
  pthread_mutex_lock(&g_lock);
  if (g_out != NULL) fflush(g_out);
  pthread_mutex_unlock(&g_lock);
}

EXPORT ncclProfiler_v6_t ncclProfiler_v6 = {"commwatch-recorder", rec_init_v6, rec_start_v6,
                                            rec_stop, rec_state, rec_finalize};
EXPORT ncclProfiler_v5_t ncclProfiler_v5 = {"commwatch-recorder", rec_init_v5, rec_start_v5,
                                            rec_stop, rec_state, rec_finalize};
EXPORT ncclProfiler_v4_t ncclProfiler_v4 = {"commwatch-recorder", rec_init_v4, rec_start_v4,
                                            rec_stop, rec_state, rec_finalize};
