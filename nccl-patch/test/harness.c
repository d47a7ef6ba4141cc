/*
 * Plays NCCL's role for the commwatch profiler plugin: dlopen it, init several
 * communicators, drive collective, P2P and kernel-channel events from several
 * threads, finalize, then read the ring back the way the node agent does and
 * check what it holds. Every scenario runs in its own forked process so each
 * starts with a freshly loaded plugin.
 *
 * usage: harness PLUGIN.so
 * COMMWATCH_RING_DIR set: ring files are written there and kept (tests read
 * them, e.g. <dir>/harness-v5/3.ring); unset: a temporary directory is used
 * and removed.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/file.h>
#include <sys/wait.h>

#include "harness_util.h"
#include "ring_reader.h"

/* Set when built with -fsanitize=address: children leave with _exit, which
 * skips LeakSanitizer's atexit check, so each scenario runs it itself. */
void __lsan_do_leak_check(void) __attribute__((weak));

static const char* g_lib;
static char g_dir[512];
static int g_failures;

#define CHECK(cond, ...)                                               \
  do {                                                                 \
    if (!(cond)) {                                                     \
      fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                    \
      fprintf(stderr, "\n");                                           \
      g_failures++;                                                    \
    }                                                                  \
  } while (0)

static void nccl_log(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                     const char* fmt, ...) {
  (void)flags; (void)file; (void)line;
  if (getenv("HARNESS_VERBOSE") == NULL) return; /* warnings also reach stderr directly */
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "  [nccl log %d] ", (int)level);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

static void set_job(const char* job, const char* rank) {
  setenv("COMMWATCH_RING_DIR", g_dir, 1);
  setenv("COMMWATCH_JOB_ID", job, 1);
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("SLURM_PROCID");
  if (rank != NULL) setenv("RANK", rank, 1); else unsetenv("RANK");
}

static void ring_path(char* out, size_t n, const char* job, const char* file) {
  snprintf(out, n, "%s/%s/%s", g_dir, job, file);
}

/* Reads every record of a ring file (capacity must hold them all). */
static size_t read_ring(const char* path, struct cw_record* out, size_t max,
                        struct cw_ring_header* hdr) {
  size_t len = 0, n;
  struct cw_reader rd;
  const void* m = map_ring(path, &len);
  if (m == NULL) {
    fprintf(stderr, "  cannot map %s\n", path);
    return 0;
  }
  cw_reader_attach(&rd, m);
  n = cw_reader_poll(&rd, out, max);
  if (hdr != NULL) memcpy(hdr, m, sizeof(*hdr));
  munmap((void*)m, len);
  return n;
}

static void check_header(const struct cw_ring_header* h, const char* job, int rank, uint64_t cap) {
  CHECK(memcmp(h->magic, CW_RING_MAGIC, 8) == 0, "magic");
  CHECK(h->version == 1, "version %u", h->version);
  CHECK(h->record_size == 64, "record_size %u", h->record_size);
  CHECK(h->capacity == cap, "capacity %llu", (unsigned long long)h->capacity);
  CHECK(h->pid == (int32_t)getpid(), "pid %d", h->pid);
  CHECK(h->rank == rank, "rank %d", h->rank);
  CHECK(h->uid == (uint32_t)getuid(), "uid %u", h->uid);
  CHECK(strcmp(h->job_id, job) == 0, "job_id '%s'", h->job_id);
  CHECK(h->commit_index == h->write_index, "commit %llu write %llu",
        (unsigned long long)h->commit_index, (unsigned long long)h->write_index);
  CHECK(h->heartbeat_ns > 0, "heartbeat");
}

/* ------------------------------------------- scenario: semantics (v5, threads) */

#define SEM_ITERS 200
#define SEM_COMMS 3

struct sem_comm {
  struct plugin* p;
  void* ctx;
  uint64_t hash;
  int nranks, rank, nnodes;
  int use_proxy;
  /* proxy queue: single producer (comm thread), single consumer (proxy thread) */
  void* q_h[256];
  int q_nch[256];
  unsigned q_head, q_tail;
  int q_stop;
};

/* Collective pattern per iteration: op, func, count, dtype, size, nch. */
static const struct { uint8_t op; const char* func; size_t count; const char* dtype; uint64_t size; uint8_t nch; }
  sem_colls[4] = {
    {CW_OP_ALLREDUCE, "AllReduce", 1024, "ncclFloat32", 4, 2},
    {CW_OP_ALLGATHER, "AllGather", 256, "ncclBfloat16", 2, 0},
    {CW_OP_BROADCAST, "Broadcast", 100, "ncclInt64", 8, 1},
    {CW_OP_REDUCESCATTER, "ReduceScatter", 4096, "ncclFloat16", 2, 2},
  };

static void run_kernels(struct plugin* p, void* ctx, void* h, int nch) {
  void* k[4];
  for (int c = 0; c < nch; c++) k[c] = kch5(p, ctx, h, (uint8_t)c, gpu_ns());
  for (int c = nch - 1; c >= 0; c--) kch_end(p, k[c], gpu_ns());
}

static void* sem_proxy(void* arg) {
  struct sem_comm* c = arg;
  for (;;) {
    unsigned tail = __atomic_load_n(&c->q_tail, __ATOMIC_ACQUIRE);
    if (c->q_head == tail) {
      if (__atomic_load_n(&c->q_stop, __ATOMIC_ACQUIRE)) break;
      sched_yield();
      continue;
    }
    run_kernels(c->p, c->ctx, c->q_h[c->q_head % 256], c->q_nch[c->q_head % 256]);
    __atomic_store_n(&c->q_head, c->q_head + 1, __ATOMIC_RELEASE);
  }
  return NULL;
}

/* Launch then stop, like NCCL's enqueue; kernels run on the proxy thread, or
 * inline before (even op) or after (odd op) the stop. */
static void sem_launch(struct sem_comm* c, void* h, int nch, int variant) {
  if (h == NULL) return;
  if (c->use_proxy && nch > 0) {
    while (c->q_tail - __atomic_load_n(&c->q_head, __ATOMIC_ACQUIRE) >= 256) sched_yield();
    c->q_h[c->q_tail % 256] = h;
    c->q_nch[c->q_tail % 256] = nch;
    __atomic_store_n(&c->q_tail, c->q_tail + 1, __ATOMIC_RELEASE);
    c->p->v5->stopEvent(h);
  } else if (variant & 1) {
    c->p->v5->stopEvent(h);
    run_kernels(c->p, c->ctx, h, nch);
  } else {
    run_kernels(c->p, c->ctx, h, nch);
    c->p->v5->stopEvent(h);
  }
}

static void* sem_thread(void* arg) {
  struct sem_comm* c = arg;
  pthread_t proxy;
  int R = c->nranks, r = c->rank;
  if (c->use_proxy) pthread_create(&proxy, NULL, sem_proxy, c);
  for (int i = 0; i < SEM_ITERS; i++) {
    for (int k = 0; k < 4; k++) {
      int root = sem_colls[k].op == CW_OP_BROADCAST ? i % R : 0;
      void* h = coll5(c->p, c->ctx, sem_colls[k].func, (uint64_t)i, sem_colls[k].count,
                      sem_colls[k].dtype, root, sem_colls[k].nch);
      sem_launch(c, h, sem_colls[k].nch, i + k);
      if (k == 1) { /* a send/recv pair in the middle of the collectives */
        void* s = p2p5(c->p, c->ctx, "Send", 64, "ncclInt8", (r + 1) % R, 1);
        void* v = p2p5(c->p, c->ctx, "Recv", 64, "ncclInt8", (r + R - 1) % R, 1);
        sem_launch(c, s, 1, i);
        sem_launch(c, v, 1, i + 1);
      }
    }
  }
  if (c->use_proxy) {
    __atomic_store_n(&c->q_stop, 1, __ATOMIC_RELEASE);
    pthread_join(proxy, NULL);
  }
  return NULL;
}

struct seen { int8_t entry, done; int64_t t_entry; };

static void sem_check_comm(const struct sem_comm* c, const struct cw_record* recs, size_t n) {
  static struct seen coll[SEM_ITERS * 4], send[SEM_ITERS], recv[SEM_ITERS];
  int inits = 0, destroys = 0, after_destroy = 0;
  int64_t t_check = real_ns();
  memset(coll, 0, sizeof(coll));
  memset(send, 0, sizeof(send));
  memset(recv, 0, sizeof(recv));
  for (size_t i = 0; i < n; i++) {
    const struct cw_record* r = &recs[i];
    if (r->comm != c->hash) continue;
    CHECK(r->rank == 3, "rank %d", r->rank);
    CHECK(r->comm_rank == c->rank && r->nranks == (uint32_t)c->nranks, "comm_rank/nranks");
    if (destroys > 0) after_destroy++;
    if (r->kind == CW_KIND_COMM_INIT) {
      inits++;
      CHECK(i == 0 || inits == 1, "one COMM_INIT");
      CHECK(r->aux == (uint32_t)c->nnodes && r->seq == 0 && r->op == 0, "COMM_INIT fields");
      continue;
    }
    if (r->kind == CW_KIND_COMM_DESTROY) {
      destroys++;
      continue;
    }
    CHECK(r->kind == CW_KIND_CALL, "kind %u", r->kind);
    CHECK(inits == 1, "CALL before COMM_INIT");
    int done = (r->flags & CW_FLAG_COMPLETED) != 0;
    struct seen* s;
    int nch;
    if (r->op == CW_OP_SEND || r->op == CW_OP_RECV) {
      int peer = r->op == CW_OP_SEND ? (c->rank + 1) % c->nranks
                                     : (c->rank + c->nranks - 1) % c->nranks;
      CHECK(r->peer == peer, "p2p peer %d", r->peer);
      CHECK(r->seq < SEM_ITERS, "p2p seq %llu", (unsigned long long)r->seq);
      if (r->seq >= SEM_ITERS) continue;
      CHECK(r->bytes == 64 && r->aux == 0, "p2p bytes/aux");
      s = r->op == CW_OP_SEND ? &send[r->seq] : &recv[r->seq];
      nch = 1;
    } else {
      CHECK(r->seq < SEM_ITERS * 4, "coll seq %llu", (unsigned long long)r->seq);
      if (r->seq >= SEM_ITERS * 4) continue;
      int k = (int)(r->seq % 4), it = (int)(r->seq / 4);
      CHECK(r->op == sem_colls[k].op, "seq %llu op %u", (unsigned long long)r->seq, r->op);
      CHECK(r->aux == (uint32_t)it, "seq %llu aux %u", (unsigned long long)r->seq, r->aux);
      CHECK(r->bytes == sem_colls[k].count * sem_colls[k].size, "bytes %llu",
            (unsigned long long)r->bytes);
      CHECK(r->peer == (sem_colls[k].op == CW_OP_BROADCAST ? it % c->nranks : -1), "peer %d",
            r->peer);
      s = &coll[r->seq];
      nch = sem_colls[k].nch;
    }
    if (!done) {
      CHECK(s->entry == 0 && s->done == 0, "entry once, before completion");
      CHECK(r->flags == 0 && r->t_end_ns == 0, "entry flags %u", r->flags);
      s->entry = 1;
      s->t_entry = r->t_start_ns;
    } else {
      CHECK(s->entry == 1 && s->done == 0, "completion once, after entry");
      CHECK(((r->flags & CW_FLAG_GPU_TIMED) != 0) == (nch > 0), "GPU_TIMED %u nch %d", r->flags,
            nch);
      CHECK(r->t_end_ns >= r->t_start_ns, "t_end < t_start");
      CHECK(r->t_start_ns >= s->t_entry - 10000000 && r->t_end_ns <= t_check + 10000000,
            "times off: entry %lld start %lld end %lld", (long long)s->t_entry,
            (long long)r->t_start_ns, (long long)r->t_end_ns);
      s->done = 1;
    }
  }
  CHECK(inits == 1 && destroys == 1 && after_destroy == 0, "init %d destroy %d after %d", inits,
        destroys, after_destroy);
  for (int i = 0; i < SEM_ITERS * 4; i++)
    CHECK(coll[i].entry && coll[i].done, "coll seq %d entry %d done %d", i, coll[i].entry,
          coll[i].done);
  for (int i = 0; i < SEM_ITERS; i++)
    CHECK(send[i].entry && send[i].done && recv[i].entry && recv[i].done, "p2p seq %d", i);
}

static void scenario_semantics(void) {
  struct plugin p;
  struct sem_comm comms[SEM_COMMS] = {
    {.hash = 0xa1a1a1a1a1a1a1a1ull, .nranks = 4, .rank = 1, .nnodes = 1, .use_proxy = 1},
    {.hash = 0xb2b2b2b2b2b2b2b2ull, .nranks = 8, .rank = 2, .nnodes = 2},
    {.hash = 0xc3c3c3c3c3c3c3c3ull, .nranks = 2, .rank = 0, .nnodes = 1},
  };
  pthread_t th[SEM_COMMS];
  static struct cw_record recs[16384];
  struct cw_ring_header h;
  char path[1024];
  size_t n;

  set_job("harness-v5", "3");
  if (plugin_load(&p, g_lib) != 0 || p.v5 == NULL) { g_failures++; return; }
  for (int i = 0; i < SEM_COMMS; i++) {
    int mask = 0;
    comms[i].p = &p;
    CHECK(p.v5->init(&comms[i].ctx, comms[i].hash, &mask, "sem", comms[i].nnodes,
                     comms[i].nranks, comms[i].rank, nccl_log) == ncclSuccess, "init");
    CHECK(mask == (ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh), "mask %d", mask);
  }
  for (int i = 0; i < SEM_COMMS; i++) pthread_create(&th[i], NULL, sem_thread, &comms[i]);
  for (int i = 0; i < SEM_COMMS; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < SEM_COMMS; i++) p.v5->finalize(comms[i].ctx);

  ring_path(path, sizeof(path), "harness-v5", "3.ring");
  n = read_ring(path, recs, sizeof(recs) / sizeof(recs[0]), &h);
  check_header(&h, "harness-v5", 3, 65536);
  CHECK(n == SEM_COMMS * (2 + SEM_ITERS * 6 * 2), "records %zu", n);
  CHECK(h.write_index == n && h.dropped == 0, "write_index %llu dropped %llu",
        (unsigned long long)h.write_index, (unsigned long long)h.dropped);
  for (int i = 0; i < SEM_COMMS; i++) sem_check_comm(&comms[i], recs, n);
  dlclose(p.dl);
}

/* --------------------------- scenario: completion waits for every kernel channel */

static size_t poll_new(struct cw_reader* rd, struct cw_record* out) { return cw_reader_poll(rd, out, 64); }

static void scenario_ordering(void) {
  struct plugin p;
  void* ctx = NULL;
  int mask = 0;
  char path[1024];
  size_t len = 0, n;
  struct cw_reader rd;
  struct cw_record out[64];
  const uint64_t G0 = 5000000000ull;

  set_job("harness-order", "0");
  if (plugin_load(&p, g_lib) != 0) { g_failures++; return; }
  CHECK(p.v5->init(&ctx, 0x1234, &mask, NULL, 1, 2, 0, NULL) == ncclSuccess, "init");
  ring_path(path, sizeof(path), "harness-order", "0.ring");
  const void* m = map_ring(path, &len);
  if (m == NULL) { g_failures++; return; }
  cw_reader_attach(&rd, m);
  n = poll_new(&rd, out);
  CHECK(n == 1 && out[0].kind == CW_KIND_COMM_INIT, "init record");

  void* h = coll5(&p, ctx, "AllReduce", 7, 10, "ncclFloat32", 0, 2);
  void* k0 = kch5(&p, ctx, h, 0, G0);
  void* k1 = kch5(&p, ctx, h, 1, G0 + 500);
  void* k2 = kch5(&p, ctx, h, 2, G0 + 600);
  CHECK(h != NULL && k0 != NULL && k1 != NULL, "handles");
  CHECK(k2 == NULL, "a third channel of a 2-channel op is not tracked");
  p.v5->stopEvent(h);
  kch_end(&p, k0, G0 + 2000);
  n = poll_new(&rd, out);
  CHECK(n == 1 && out[0].kind == CW_KIND_CALL && out[0].flags == 0 && out[0].aux == 7,
        "only the entry before the last channel stops (n=%zu)", n);
  kch_end(&p, k1, G0 + 3000);
  n = poll_new(&rd, out);
  CHECK(n == 1 && out[0].flags == (CW_FLAG_COMPLETED | CW_FLAG_GPU_TIMED), "completion flags %u",
        n ? out[0].flags : 0);
  CHECK(n == 1 && out[0].t_end_ns - out[0].t_start_ns == 3000, "GPU duration %lld",
        n ? (long long)(out[0].t_end_ns - out[0].t_start_ns) : -1LL);
  CHECK(n == 1 && llabs(out[0].t_start_ns - real_ns()) < 1000000000LL, "GPU time mapped to now");

  h = coll5(&p, ctx, "AllGather", 0, 4, "ncclInt8", 0, 0); /* no channels: done at stop */
  p.v5->stopEvent(h);
  n = poll_new(&rd, out);
  CHECK(n == 2 && out[1].flags == CW_FLAG_COMPLETED && out[1].seq == 1, "nch 0 completes at stop");

  h = coll5(&p, ctx, "AllReduce", 8, 4, "ncclInt8", 0, 1); /* channel without GPU stamps */
  k0 = kch5(&p, ctx, h, 0, 0);
  p.v5->stopEvent(h);
  kch_end(&p, k0, 0);
  n = poll_new(&rd, out);
  CHECK(n == 2 && out[1].flags == CW_FLAG_COMPLETED && out[1].t_end_ns >= out[1].t_start_ns,
        "CPU-timed completion");

  /* Tolerated input: NULL handles, unknown event types, state on non-channel handles. */
  CHECK(p.v5->stopEvent(NULL) == ncclSuccess, "stop NULL");
  CHECK(p.v5->recordEventState(NULL, ncclProfilerKernelChStop, NULL) == ncclSuccess, "state NULL");
  {
    ncclProfilerEventDescr_v5_t d;
    void* x = (void*)1;
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileProxyCtrl;
    CHECK(p.v5->startEvent(ctx, &x, &d) == ncclSuccess && x == NULL, "unknown type -> NULL");
    x = (void*)1;
    CHECK(p.v5->startEvent(NULL, &x, &d) == ncclSuccess && x == NULL, "NULL context -> NULL");
  }
  CHECK(p2p5(&p, ctx, "Send", 1, "ncclInt8", 5, 1) == NULL, "peer out of range dropped");
  CHECK(p2p5(&p, ctx, "SendRecv", 1, "ncclInt8", 1, 1) == NULL, "non-p2p func dropped");
  CHECK(kch5(&p, ctx, NULL, 0, 1) == NULL, "channel without parent");

  h = coll5(&p, ctx, "AllReduce", 9, 4, "ncclInt8", 0, 1); /* never completes: aborted comm */
  p.v5->stopEvent(h);
  p.v5->finalize(ctx);
  n = poll_new(&rd, out);
  CHECK(n == 2 && out[0].seq == 3 && out[0].flags == 0 && out[1].kind == CW_KIND_COMM_DESTROY,
        "open op keeps its entry; destroy follows");
  CHECK(rd.h->dropped == 4, "dropped %llu", (unsigned long long)rd.h->dropped);
  CHECK(rd.lost == 0 && rd.torn == 0, "reader lost %llu torn %llu",
        (unsigned long long)rd.lost, (unsigned long long)rd.torn);
  munmap((void*)m, len);
  dlclose(p.dl);
}

/* -------------------------------------------------- scenario: v4 and v6 ABI */

static void scenario_v4_v6(void) {
  struct plugin p;
  void* c4 = NULL;
  void* c6 = NULL;
  int mask = 0;
  char path[1024];
  static struct cw_record recs[256];
  size_t n;
  static const struct { const char* func; const char* dtype; size_t count; uint8_t op; uint64_t bytes; int rooted; }
    cases[] = {
      {"AllReduce", "ncclFloat64", 3, CW_OP_ALLREDUCE, 24, 0},
      {"AllGather", "ncclBfloat16", 3, CW_OP_ALLGATHER, 6, 0},
      {"ReduceScatter", "ncclUint32", 3, CW_OP_REDUCESCATTER, 12, 0},
      {"Broadcast", "ncclFloat8e4m3", 3, CW_OP_BROADCAST, 3, 1},
      {"Reduce", "ncclInt64", 3, CW_OP_REDUCE, 24, 1},
      {"AlltoAll", "ncclFloat16", 3, CW_OP_ALLTOALL, 6, 0},
      {"Gather", "ncclInt32", 3, CW_OP_GATHER, 12, 1},
      {"Scatter", "Unknown", 3, CW_OP_SCATTER, 3, 1},
      {"Frobnicate", "ncclInt8", 3, CW_OP_UNKNOWN, 3, 0},
    };
  const int ncases = (int)(sizeof(cases) / sizeof(cases[0]));

  set_job("harness-abi", "5");
  if (plugin_load(&p, g_lib) != 0 || p.v4 == NULL || p.v6 == NULL) { g_failures++; return; }
  CHECK(strcmp(p.v4->name, "commwatch") == 0 && strcmp(p.v6->name, "commwatch") == 0, "names");

  /* v4: init argument order differs, descriptor type is one byte. */
  CHECK(p.v4->init(&c4, &mask, "v4", 0x4444, 3, 4, 2, nccl_log) == ncclSuccess, "v4 init");
  for (int i = 0; i < 3; i++) {
    ncclProfilerEventDescr_v4_t d;
    void* h = NULL;
    void* k = NULL;
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileColl;
    d.coll.seqNumber = 10 + (uint64_t)i;
    d.coll.func = "AllReduce";
    d.coll.count = 8;
    d.coll.datatype = "ncclFloat32";
    d.coll.nChannels = 1;
    p.v4->startEvent(c4, &h, &d);
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileKernelCh;
    d.parentObj = h;
    d.kernelCh.pTimer = gpu_ns();
    p.v4->startEvent(c4, &k, &d);
    p.v4->stopEvent(h);
    ncclProfilerEventStateArgs_t a = {.kernelCh = {.pTimer = gpu_ns()}};
    p.v4->recordEventState(k, ncclProfilerKernelChStop, &a);
    p.v4->stopEvent(k);
  }
  {
    ncclProfilerEventDescr_v4_t d;
    void* h = NULL;
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileP2p;
    d.p2p.func = "Recv";
    d.p2p.count = 5;
    d.p2p.datatype = "ncclInt32";
    d.p2p.peer = 3;
    p.v4->startEvent(c4, &h, &d);
    p.v4->stopEvent(h);
  }
  p.v4->finalize(c4);

  /* v6: same events as v5 through the wider descriptor; op and size mapping. */
  CHECK(p.v6->init(&c6, 0x6666, &mask, "v6", 1, 8, 0, nccl_log) == ncclSuccess, "v6 init");
  for (int i = 0; i < ncases; i++) {
    ncclProfilerEventDescr_v6_t d;
    void* h = NULL;
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileColl;
    d.coll.func = cases[i].func;
    d.coll.count = cases[i].count;
    d.coll.datatype = cases[i].dtype;
    d.coll.root = 6;
    p.v6->startEvent(c6, &h, &d);
    p.v6->stopEvent(h);
  }
  p.v6->finalize(c6);

  ring_path(path, sizeof(path), "harness-abi", "5.ring");
  n = read_ring(path, recs, 256, NULL);
  CHECK(n == 2 + 3 * 2 + 2 + 2 + (size_t)ncases * 2, "records %zu", n);
  if (n < 12) { dlclose(p.dl); return; }
  CHECK(recs[0].kind == CW_KIND_COMM_INIT && recs[0].comm == 0x4444 && recs[0].aux == 3 &&
        recs[0].comm_rank == 2 && recs[0].nranks == 4 && recs[0].rank == 5, "v4 COMM_INIT");
  for (int i = 0; i < 3; i++) {
    const struct cw_record* e = &recs[1 + 2 * i];
    const struct cw_record* d = &recs[2 + 2 * i];
    CHECK(e->seq == (uint64_t)i && e->aux == 10u + (uint32_t)i && e->op == CW_OP_ALLREDUCE &&
          e->bytes == 32 && e->flags == 0, "v4 entry %d", i);
    CHECK(d->seq == (uint64_t)i && d->flags == (CW_FLAG_COMPLETED | CW_FLAG_GPU_TIMED),
          "v4 completion %d flags %u", i, d->flags);
  }
  CHECK(recs[7].op == CW_OP_RECV && recs[7].peer == 3 && recs[7].seq == 0 && recs[7].bytes == 20,
        "v4 recv");
  CHECK(recs[8].op == CW_OP_RECV && recs[8].flags == CW_FLAG_COMPLETED, "v4 recv done");
  CHECK(recs[9].kind == CW_KIND_COMM_DESTROY && recs[9].comm == 0x4444, "v4 destroy");
  CHECK(recs[10].kind == CW_KIND_COMM_INIT && recs[10].comm == 0x6666 && recs[10].aux == 1,
        "v6 init");
  for (int i = 0; i < ncases && 12 + 2 * i < (int)n; i++) {
    const struct cw_record* e = &recs[11 + 2 * i];
    CHECK(e->op == cases[i].op && e->bytes == cases[i].bytes &&
          e->peer == (cases[i].rooted ? 6 : -1) && e->seq == (uint64_t)i,
          "%s/%s: op %u bytes %llu peer %d", cases[i].func, cases[i].dtype, e->op,
          (unsigned long long)e->bytes, e->peer);
  }
  dlclose(p.dl);
}

/* ------------------------- scenario: ring wraps under concurrent writers and a reader */

#define WRAP_THREADS 4
#define WRAP_CALLS 500

struct wrap_arg { struct plugin* p; void* ctx; };

static void* wrap_thread(void* arg) {
  struct wrap_arg* a = arg;
  for (int i = 0; i < WRAP_CALLS; i++) {
    void* h = coll5(a->p, a->ctx, "AllReduce", (uint64_t)i, 1, "ncclInt8", 0, 0);
    a->p->v5->stopEvent(h);
  }
  return NULL;
}

static void scenario_wrap(void) {
  struct plugin p;
  struct wrap_arg args[WRAP_THREADS];
  pthread_t th[WRAP_THREADS];
  static uint8_t seen[WRAP_THREADS][WRAP_CALLS][2];
  struct cw_record out[256];
  struct cw_reader rd;
  char path[1024];
  size_t len = 0;
  uint64_t accepted = 0, dups = 0, bad = 0;
  int mask;

  set_job("harness-wrap", "0");
  setenv("COMMWATCH_RING_CAPACITY", "64", 1);
  if (plugin_load(&p, g_lib) != 0) { g_failures++; return; }
  for (int i = 0; i < WRAP_THREADS; i++) {
    args[i].p = &p;
    CHECK(p.v5->init(&args[i].ctx, 100 + (uint64_t)i, &mask, NULL, 1, 2, 0, NULL) == ncclSuccess,
          "init");
  }
  ring_path(path, sizeof(path), "harness-wrap", "0.ring");
  const void* m = map_ring(path, &len);
  if (m == NULL) { g_failures++; return; }
  CHECK(len == 256 + 64 * 64, "file size %zu", len);
  cw_reader_attach(&rd, m);
  for (int i = 0; i < WRAP_THREADS; i++) pthread_create(&th[i], NULL, wrap_thread, &args[i]);

  for (int round = 0;; round++) {
    int finished = round > 0 && __atomic_load_n(&rd.h->commit_index, __ATOMIC_ACQUIRE) ==
                                    (uint64_t)WRAP_THREADS * (2 * WRAP_CALLS + 1);
    size_t n = cw_reader_poll(&rd, out, 256);
    for (size_t j = 0; j < n; j++) {
      const struct cw_record* r = &out[j];
      accepted++;
      if (r->kind != CW_KIND_CALL) continue;
      uint64_t t = r->comm - 100;
      if (t >= WRAP_THREADS || r->seq >= WRAP_CALLS || r->aux != r->seq) { bad++; continue; }
      int done = (r->flags & CW_FLAG_COMPLETED) != 0;
      if (done && r->t_end_ns < r->t_start_ns) bad++;
      if (seen[t][r->seq][done]++) dups++;
    }
    if (finished) break;
  }
  for (int i = 0; i < WRAP_THREADS; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < WRAP_THREADS; i++) p.v5->finalize(args[i].ctx);
  {
    size_t n;
    while ((n = cw_reader_poll(&rd, out, 256)) > 0) accepted += n;
  }
  uint64_t total = (uint64_t)WRAP_THREADS * (2 * WRAP_CALLS + 2);
  CHECK(rd.h->write_index == total && rd.h->commit_index == total, "write %llu commit %llu",
        (unsigned long long)rd.h->write_index, (unsigned long long)rd.h->commit_index);
  CHECK(accepted + rd.lost + rd.torn == total, "accepted %llu lost %llu torn %llu",
        (unsigned long long)accepted, (unsigned long long)rd.lost, (unsigned long long)rd.torn);
  CHECK(accepted >= 64, "accepted %llu", (unsigned long long)accepted);
  CHECK(bad == 0, "bad records %llu", (unsigned long long)bad);
  /* A busy slot (a writer stalled for a full lap) may leave one stale record. */
  if (rd.h->dropped == 0) CHECK(dups == 0 && rd.torn == 0, "duplicates %llu", (unsigned long long)dups);
  /* The last lap is intact: every slot holds one of the final 64 indices. */
  for (int s = 0; s < 64; s++) {
    const struct cw_record* r = &rd.slots[s];
    CHECK(r->kind >= 1 && r->kind <= 3, "slot %d kind %u", s, r->kind);
  }
  printf("  wrap: %llu records, %llu read, %llu overrun, %llu dropped\n",
         (unsigned long long)total, (unsigned long long)accepted, (unsigned long long)rd.lost,
         (unsigned long long)rd.h->dropped);
  munmap((void*)m, len);
  dlclose(p.dl);
}

/* --------------------------------------- scenario: fixed op pool, drop and count */

static void scenario_pool(void) {
  struct plugin p;
  void* ctx = NULL;
  void* h[100];
  void* k[100];
  int mask, got = 0;
  char path[1024];
  static struct cw_record recs[512];
  struct cw_ring_header hd;

  set_job("harness-pool", "0");
  setenv("COMMWATCH_MAX_INFLIGHT", "64", 1);
  if (plugin_load(&p, g_lib) != 0) { g_failures++; return; }
  CHECK(p.v5->init(&ctx, 0x77, &mask, NULL, 1, 2, 0, NULL) == ncclSuccess, "init");
  for (int i = 0; i < 100; i++) {
    h[i] = coll5(&p, ctx, "AllReduce", (uint64_t)i, 1, "ncclInt8", 0, 1);
    got += h[i] != NULL;
  }
  CHECK(got == 64, "%d of 100 ops tracked with a pool of 64", got);
  for (int i = 0; i < 100; i++) {
    if (h[i] == NULL) continue;
    k[i] = kch5(&p, ctx, h[i], 0, gpu_ns());
    p.v5->stopEvent(h[i]);
    kch_end(&p, k[i], gpu_ns());
  }
  void* again = coll5(&p, ctx, "AllReduce", 100, 1, "ncclInt8", 0, 0);
  CHECK(again != NULL, "pool slots come back after completion");
  p.v5->stopEvent(again);
  p.v5->finalize(ctx);
  ring_path(path, sizeof(path), "harness-pool", "0.ring");
  size_t n = read_ring(path, recs, 512, &hd);
  CHECK(hd.dropped == 72, "dropped %llu (36 ops x 2 records)", (unsigned long long)hd.dropped);
  CHECK(n == 1 + 64 * 2 + 2 + 1, "records %zu", n);
  CHECK(n >= 3 && recs[n - 3].seq == 100 && recs[n - 2].seq == 100, "seq keeps counting dropped ops");
  dlclose(p.dl);
}

/* ------------------------------------------- scenario: settings and rank sources */

static int init_result(void) {
  struct plugin p;
  void* ctx = (void*)1;
  int mask = 0;
  ncclResult_t r1, r2;
  if (plugin_load(&p, g_lib) != 0) return -1;
  r1 = p.v5->init(&ctx, 1, &mask, NULL, 1, 2, 0, nccl_log);
  if (r1 != ncclSuccess) {
    CHECK(ctx == NULL, "context cleared on failure");
    r2 = p.v5->init(&ctx, 2, &mask, NULL, 1, 2, 0, nccl_log);
    CHECK(r2 == r1, "failure is sticky");
  } else {
    p.v5->finalize(ctx);
  }
  dlclose(p.dl); /* the next load starts from the environment again */
  return (int)r1;
}

static void scenario_bad_env(void) {
  static const char* const bad[][2] = {
    {"COMMWATCH_RING_CAPACITY", "1000"}, {"COMMWATCH_RING_CAPACITY", "16"},
    {"COMMWATCH_RING_CAPACITY", "0x100"}, {"COMMWATCH_JOB_ID", "a/b"},
    {"COMMWATCH_JOB_ID", ".."}, {"COMMWATCH_GPU_TIMING", "yes"},
    {"COMMWATCH_RING_DIR", "relative/dir"}, {"COMMWATCH_MAX_INFLIGHT", "100"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    pid_t pid = fork();
    if (pid == 0) {
      set_job("harness-env", "0");
      setenv(bad[i][0], bad[i][1], 1);
      int r = init_result();
      _exit(r == ncclInvalidUsage && g_failures == 0 ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s='%s' must fail init with ncclInvalidUsage",
          bad[i][0], bad[i][1]);
  }
  /* An unwritable ring directory: a system error, plugin disabled, no crash. */
  pid_t pid = fork();
  if (pid == 0) {
    set_job("harness-env", "0");
    setenv("COMMWATCH_RING_DIR", "/proc/commwatch-cannot-exist", 1);
    _exit(init_result() == ncclSystemError ? 0 : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "unwritable ring dir -> ncclSystemError");
}

static void scenario_rank_sources(void) {
  struct cw_ring_header hd;
  struct cw_record one[8];
  char path[1024], name[64];

  set_job("harness-rank", NULL);
  setenv("OMPI_COMM_WORLD_RANK", "7", 1);
  CHECK(init_result() == ncclSuccess, "init");
  ring_path(path, sizeof(path), "harness-rank", "7.ring");
  read_ring(path, one, 8, &hd);
  CHECK(hd.rank == 7, "OMPI_COMM_WORLD_RANK -> rank %d", hd.rank);

  /* RANK wins; an unparsable one is skipped with a warning; SLURM_PROCID is last. */
  pid_t pid = fork();
  if (pid == 0) {
    set_job("harness-rank", "abc");
    setenv("SLURM_PROCID", "9", 1);
    if (init_result() != ncclSuccess) _exit(1);
    ring_path(path, sizeof(path), "harness-rank", "9.ring");
    read_ring(path, one, 8, &hd);
    _exit(hd.rank == 9 && one[0].rank == 9 ? 0 : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "RANK=abc SLURM_PROCID=9 -> 9");

  pid = fork();
  if (pid == 0) {
    set_job("harness-rank", NULL);
    if (init_result() != ncclSuccess) _exit(1);
    snprintf(name, sizeof(name), "pid-%d.ring", (int)getpid());
    ring_path(path, sizeof(path), "harness-rank", name);
    read_ring(path, one, 8, &hd);
    _exit(hd.rank == -1 && one[0].rank == -1 ? 0 : 1);
  }
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "no rank variable -> pid-<pid>.ring, rank -1");

  /* A live writer already holds <job>/1.ring: the second one gets 1.<pid>.ring. */
  set_job("harness-rank", "1");
  unsetenv("OMPI_COMM_WORLD_RANK");
  ring_path(path, sizeof(path), "harness-rank", "1.ring");
  mkdir(g_dir, 0755);
  {
    char sub[1024];
    snprintf(sub, sizeof(sub), "%s/harness-rank", g_dir);
    mkdir(sub, 0755);
  }
  int fd = open(path, O_RDWR | O_CREAT, 0644);
  CHECK(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0, "hold lock");
  CHECK(init_result() == ncclSuccess, "init beside a live writer");
  snprintf(name, sizeof(name), "1.%d.ring", (int)getpid());
  ring_path(path, sizeof(path), "harness-rank", name);
  CHECK(access(path, F_OK) == 0, "%s exists", path);
  if (fd >= 0) close(fd);
}

/* ---------------------------------- scenario: NCCL unloads and reloads the plugin */

static void scenario_reload(void) {
  char path[1024];
  struct cw_record recs[16];
  struct cw_ring_header hd;
  set_job("harness-reload", "0");
  for (int round = 0; round < 2; round++) {
    struct plugin p;
    void* ctx = NULL;
    int mask;
    if (plugin_load(&p, g_lib) != 0) { g_failures++; return; }
    CHECK(p.v5->init(&ctx, 0x99, &mask, NULL, 1, 2, 1, NULL) == ncclSuccess, "init");
    p.v5->stopEvent(coll5(&p, ctx, "AllReduce", 0, 1, "ncclInt8", 0, 0));
    p.v5->finalize(ctx);
    dlclose(p.dl);
  }
  ring_path(path, sizeof(path), "harness-reload", "0.ring");
  size_t n = read_ring(path, recs, 16, &hd);
  CHECK(n == 8 && hd.write_index == 8, "records %zu: the second load appends", n);
  CHECK(n == 8 && recs[4].kind == CW_KIND_COMM_INIT && recs[7].kind == CW_KIND_COMM_DESTROY,
        "order");
}

/* ------------------------------------------------------------------- driver */

static void remove_tree(const char* dir) {
  DIR* d = opendir(dir);
  struct dirent* e;
  char sub[1024];
  if (d == NULL) return;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
    if (e->d_type == DT_DIR) remove_tree(sub);
    else unlink(sub);
  }
  closedir(d);
  rmdir(dir);
}

int main(int argc, char** argv) {
  static const struct { const char* name; void (*fn)(void); } scenarios[] = {
    {"semantics (v5, 3 comms, 3 threads + proxy thread)", scenario_semantics},
    {"completion waits for every kernel channel", scenario_ordering},
    {"v4 and v6 entry points, op and size mapping", scenario_v4_v6},
    {"ring wrap with 4 writers and a live reader", scenario_wrap},
    {"fixed op pool: drop and count", scenario_pool},
    {"settings validation", scenario_bad_env},
    {"rank sources and file naming", scenario_rank_sources},
    {"plugin reload keeps the ring", scenario_reload},
  };
  const int n = (int)(sizeof(scenarios) / sizeof(scenarios[0]));
  const char* keep = getenv("COMMWATCH_RING_DIR");
  int failed = 0;

  if (argc != 2) {
    fprintf(stderr, "usage: %s PLUGIN.so\n", argv[0]);
    return 2;
  }
  g_lib = argv[1];
  if (keep != NULL && keep[0] != '\0') {
    snprintf(g_dir, sizeof(g_dir), "%s", keep);
  } else {
    snprintf(g_dir, sizeof(g_dir), "/tmp/cw-harness-XXXXXX");
    if (mkdtemp(g_dir) == NULL) {
      perror("mkdtemp");
      return 2;
    }
  }
  for (int i = 0; i < n; i++) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      scenarios[i].fn();
      fflush(stdout);
      if (__lsan_do_leak_check != NULL) __lsan_do_leak_check();
      _exit(g_failures == 0 ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    printf("%s %s\n", ok ? "PASS" : "FAIL", scenarios[i].name);
    if (!ok && WIFSIGNALED(st)) printf("  killed by signal %d\n", WTERMSIG(st));
    failed += !ok;
  }
  if (keep == NULL || keep[0] == '\0') remove_tree(g_dir);
  printf("harness: %d of %d scenarios passed\n", n - failed, n);
  return failed == 0 ? 0 : 1;
}
