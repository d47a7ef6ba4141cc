/* Harness scenarios about NCCL's events and the completion rules. */
#include "harness.h"

static const uint64_t G0 = 5000000000ull; /* an arbitrary GPU globaltimer value */

static int is_coll(const struct cw_record* r, uint64_t comm, uint64_t seq, uint16_t flags) {
  return r->kind == CW_KIND_CALL && r->op != CW_OP_SEND && r->op != CW_OP_RECV && r->comm == comm &&
         r->seq == seq && r->flags == flags;
}

/* Number of collective records of `comm` with this seq and exactly these flags. */
static int count(const struct cw_record* r, size_t n, uint64_t comm, uint64_t seq, uint16_t flags) {
  int c = 0;
  for (size_t i = 0; i < n; i++) c += is_coll(&r[i], comm, seq, flags);
  return c;
}

static const struct cw_record* find(const struct cw_record* r, size_t n, uint64_t comm, uint64_t seq,
                                    uint16_t flags) {
  for (size_t i = 0; i < n; i++)
    if (is_coll(&r[i], comm, seq, flags)) return &r[i];
  return NULL;
}

/* ------------------------------------------------------------ interleaved */

#define SEM_ITERS 200
#define SEM_COMMS 3
enum { MODE_INLINE, MODE_PROXY, MODE_FEWER };

struct sem_comm {
  struct plugin* p;
  void* ctx;
  uint64_t hash;
  int nranks, rank, nnodes, mode;
  /* proxy queue: single producer (comm thread), single consumer (proxy thread) */
  void* q_h[256];
  int q_nch[256];
  unsigned q_head, q_tail;
  int q_stop;
};

/* Collective pattern per iteration: op, func, count, dtype, size, channels reported. */
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

/* Start (announcing `announced` channels), then kernels and stop the way the
 * comm's mode says: on the proxy thread, or inline before (even) / after (odd)
 * the task stop. */
static void sem_op(struct sem_comm* c, void* h, int nch, int variant) {
  if (h == NULL) return;
  if (c->mode == MODE_PROXY) {
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
  int extra = c->mode == MODE_FEWER ? 2 : 0; /* announced but never reported */
  if (c->mode == MODE_PROXY) pthread_create(&proxy, NULL, sem_proxy, c);
  for (int i = 0; i < SEM_ITERS; i++) {
    for (int k = 0; k < 4; k++) {
      int nch = sem_colls[k].nch;
      int root = sem_colls[k].op == CW_OP_BROADCAST ? i % R : 0;
      void* h = coll5(c->p, c->ctx, sem_colls[k].func, (uint64_t)i, sem_colls[k].count,
                      sem_colls[k].dtype, root, (uint8_t)(nch > 0 ? nch + extra : 0));
      sem_op(c, h, nch, i + k);
      if (k == 1) { /* a send/recv pair in the middle of the collectives */
        void* s = p2p5(c->p, c->ctx, "Send", 64, "ncclInt8", (r + 1) % R, (uint8_t)(1 + extra));
        void* v = p2p5(c->p, c->ctx, "Recv", 64, "ncclInt8", (r + R - 1) % R, (uint8_t)(1 + extra));
        sem_op(c, s, 1, i);
        sem_op(c, v, 1, i + 1);
      }
    }
  }
  if (c->mode == MODE_PROXY) {
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
    struct seen* s;
    int nch;
    if (r->comm != c->hash) continue;
    CHECK(r->rank == 3, "rank %d", r->rank);
    CHECK(r->comm_rank == c->rank && r->nranks == (uint32_t)c->nranks, "comm_rank/nranks");
    if (destroys > 0) after_destroy++;
    if (r->kind == CW_KIND_COMM_INIT) {
      inits++;
      CHECK(r->aux == (uint32_t)c->nnodes && r->seq == 0 && r->op == 0, "COMM_INIT fields");
      continue;
    }
    if (r->kind == CW_KIND_COMM_DESTROY) {
      destroys++;
      continue;
    }
    CHECK(r->kind == CW_KIND_CALL, "kind %u", r->kind);
    CHECK(inits == 1, "CALL before COMM_INIT");
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
    if (r->flags == LOST) { /* no channels: entry and write-off in one record */
      CHECK(nch == 0 && s->entry == 0 && s->done == 0 && r->t_end_ns == 0,
            "seq %llu: LOST entry, nch %d", (unsigned long long)r->seq, nch);
      s->entry = s->done = 1;
    } else if ((r->flags & CW_FLAG_COMPLETED) == 0) {
      CHECK(s->entry == 0 && s->done == 0, "entry once, before completion");
      CHECK(r->flags == ENTRY && r->t_end_ns == 0, "entry flags %u", r->flags);
      s->entry = 1;
      s->t_entry = r->t_start_ns;
    } else {
      CHECK(s->entry == 1 && s->done == 0, "completion once, after entry");
      CHECK(r->flags == GPU_OK && nch > 0, "completion flags %u nch %d", r->flags, nch);
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
    CHECK(coll[i].entry && coll[i].done, "comm %llx coll seq %d entry %d done %d",
          (unsigned long long)c->hash, i, coll[i].entry, coll[i].done);
  for (int i = 0; i < SEM_ITERS; i++)
    CHECK(send[i].entry && send[i].done && recv[i].entry && recv[i].done, "p2p seq %d", i);
}

/* Keeps what a reader saw of the closed ring (the writer unlinked the file). */
static void save_copy(const struct tail* t, const char* job, const char* name) {
  char path[1024];
  FILE* f;
  ring_path(path, sizeof(path), job, name);
  f = fopen(path, "wb");
  CHECK(f != NULL && fwrite(t->map, 1, t->len, f) == t->len, "write %s", path);
  if (f != NULL) fclose(f);
}

void scenario_interleaved(void) {
  struct plugin p;
  struct sem_comm comms[SEM_COMMS] = {
    {.hash = 0xa1a1a1a1a1a1a1a1ull, .nranks = 4, .rank = 1, .nnodes = 1, .mode = MODE_PROXY},
    {.hash = 0xb2b2b2b2b2b2b2b2ull, .nranks = 8, .rank = 2, .nnodes = 2, .mode = MODE_INLINE},
    {.hash = 0xc3c3c3c3c3c3c3c3ull, .nranks = 2, .rank = 0, .nnodes = 1, .mode = MODE_FEWER},
  };
  pthread_t th[SEM_COMMS];
  static struct cw_record recs[16384];
  const size_t per_comm = 2 + SEM_ITERS * 11; /* 5 operations x 2 records + 1 without channels */
  struct tail t;
  char path[1024];
  size_t n;

  set_job("harness-v5", "3");
  if (plugin_load(&p, g_lib) != 0 || p.v5 == NULL) { g_failures++; return; }
  for (int i = 0; i < SEM_COMMS; i++) {
    comms[i].p = &p;
    comms[i].ctx = init5(&p, comms[i].hash, comms[i].nnodes, comms[i].nranks, comms[i].rank);
    CHECK(comms[i].ctx != NULL, "init");
  }
  CHECK(nccl_mask == (ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh | ncclProfileCollApi |
                      ncclProfileP2pApi), "mask %#x", nccl_mask);
  ring_path(path, sizeof(path), "harness-v5", "3.ring");
  if (tail_open(&t, path) != 0) { g_failures++; return; }
  for (int i = 0; i < SEM_COMMS; i++) pthread_create(&th[i], NULL, sem_thread, &comms[i]);
  for (int i = 0; i < SEM_COMMS; i++) pthread_join(th[i], NULL);
  /* The fewer-channel comm's completions come from the sweeper after the grace. */
  n = tail_wait(&t, recs, 0, 16384, SEM_COMMS * (per_comm - 1), 20000);
  CHECK(n == SEM_COMMS * (per_comm - 1), "records before finalize %zu", n);
  for (int i = 0; i < SEM_COMMS; i++) p.v5->finalize(comms[i].ctx);
  n += tail_poll(&t, recs + n, 16384 - n);

  CHECK(n == SEM_COMMS * per_comm, "records %zu", n);
  CHECK(tail_header(&t)->write_index == n && tail_header(&t)->commit_index == n &&
        tail_header(&t)->dropped == 0, "write_index %llu dropped %llu",
        (unsigned long long)tail_header(&t)->write_index,
        (unsigned long long)tail_header(&t)->dropped);
  CHECK(tail_header(&t)->closed == 1, "closed %u", tail_header(&t)->closed);
  CHECK(!file_exists(path), "ring file removed at the last finalize");
  for (int i = 0; i < SEM_COMMS; i++) sem_check_comm(&comms[i], recs, n);
  save_copy(&t, "harness-v5", "3.ring.closed");
  tail_close(&t);
  dlclose(p.dl);
}

/* ------------------------------------------------------- completion rules */

void scenario_completion_rules(void) {
  struct plugin p;
  void *ctx, *h, *h1, *k0, *k1, *k2;
  char path[1024];
  struct tail t;
  struct cw_record out[64];
  size_t n;
  int64_t before, after;
  const uint64_t C = 0x1234;

  set_job("harness-rules", "0");
  if (plugin_load(&p, g_lib) != 0) { g_failures++; return; }
  ctx = init5(&p, C, 1, 2, 0);
  ring_path(path, sizeof(path), "harness-rules", "0.ring");
  if (ctx == NULL || tail_open(&t, path) != 0) { g_failures++; return; }
  n = tail_poll(&t, out, 64);
  CHECK(n == 1 && out[0].kind == CW_KIND_COMM_INIT, "init record");

  /* Every announced channel reports: complete when the last one stops. */
  h1 = coll5(&p, ctx, "AllReduce", 7, 10, "ncclFloat32", 0, 2);
  k0 = kch5(&p, ctx, h1, 0, G0);
  k1 = kch5(&p, ctx, h1, 1, G0 + 500);
  CHECK(h1 != NULL && k0 != NULL && k1 != NULL && k0 != h1, "handles");
  p.v5->stopEvent(h1);
  kch_end(&p, k0, G0 + 2000);
  n = tail_poll(&t, out, 64);
  CHECK(n == 1 && out[0].flags == ENTRY && out[0].aux == 7 && out[0].seq == 0 &&
        out[0].bytes == 40 && out[0].t_end_ns == 0, "only the entry before the last channel stops");
  kch_end(&p, k1, G0 + 3000);
  n = tail_poll(&t, out, 64);
  CHECK(n == 1 && out[0].flags == GPU_OK && out[0].seq == 0, "completion flags %u",
        n ? out[0].flags : 0);
  CHECK(n == 1 && out[0].t_end_ns - out[0].t_start_ns == 3000, "GPU duration %lld",
        n ? (long long)(out[0].t_end_ns - out[0].t_start_ns) : -1LL);
  CHECK(n == 1 && llabs(out[0].t_start_ns - real_ns()) < 1000000000LL, "GPU time mapped to now");

  /* More channels than announced: complete when the last one that started stops. */
  h = coll5(&p, ctx, "AllReduce", 8, 10, "ncclFloat32", 0, 1);
  k0 = kch5(&p, ctx, h, 0, G0 + 10000);
  k1 = kch5(&p, ctx, h, 1, G0 + 10000);
  k2 = kch5(&p, ctx, h, 2, G0 + 10100);
  CHECK(k2 != NULL, "a channel beyond nChannels is counted");
  p.v5->stopEvent(h);
  kch_end(&p, k0, G0 + 11000);
  kch_end(&p, k1, G0 + 11000);
  n = tail_poll(&t, out, 64);
  CHECK(n == 1 && out[0].flags == ENTRY && out[0].seq == 1, "open while a channel runs");
  kch_end(&p, k2, G0 + 12000);
  n = tail_poll(&t, out, 64);
  CHECK(n == 1 && out[0].flags == GPU_OK && out[0].t_end_ns - out[0].t_start_ns == 2000,
        "complete at the third stop");

  /* The channels finish before NCCL's task stop (a short kernel): complete at the stop. */
  h = coll5(&p, ctx, "AllReduce", 9, 10, "ncclFloat32", 0, 1);
  k0 = kch5(&p, ctx, h, 0, G0 + 20000);
  kch_end(&p, k0, G0 + 21000);
  n = tail_poll(&t, out, 64);
  CHECK(n == 1 && out[0].flags == ENTRY, "no completion before the task stop");
  p.v5->stopEvent(h);
  n = tail_poll(&t, out, 64);
  CHECK(n == 1 && out[0].flags == GPU_OK && out[0].seq == 2, "complete at the task stop");

  /* Channels without GPU stamps: completion observed, host times. */
  before = real_ns();
  h = coll5(&p, ctx, "AllReduce", 10, 4, "ncclInt8", 0, 1);
  k0 = kch5(&p, ctx, h, 0, 0);
  p.v5->stopEvent(h);
  kch_end(&p, k0, 0);
  after = real_ns();
  n = tail_poll(&t, out, 64);
  CHECK(n == 2 && out[1].flags == HOST_OK && out[1].t_start_ns == out[0].t_start_ns &&
        out[1].t_end_ns >= before - 1000000 && out[1].t_end_ns <= after + 1000000,
        "host-timed completion");

  /* No channels announced: one record that says the completion will not come. */
  h = coll5(&p, ctx, "AllGather", 0, 4, "ncclInt8", 0, 0);
  CHECK(h == NULL, "no handle without channels");
  p.v5->stopEvent(h);
  n = tail_poll(&t, out, 64);
  CHECK(n == 1 && out[0].flags == LOST && out[0].seq == 4 && out[0].t_end_ns == 0 &&
        out[0].op == CW_OP_ALLGATHER, "entry written off");

  /* Tolerated input: NULL handles, unknown event types, garbage and stale handles. */
  CHECK(p.v5->stopEvent(NULL) == ncclSuccess, "stop NULL");
  CHECK(p.v5->recordEventState(NULL, ncclProfilerKernelChStop, NULL) == ncclSuccess, "state NULL");
  {
    ncclProfilerEventDescr_v5_t d;
    void* x = (void*)1;
    ncclProfilerEventStateArgs_t a = {.kernelCh = {.pTimer = G0}};
    memset(&d, 0, sizeof(d));
    d.type = 1u << 20; /* a type from a future NCCL */
    CHECK(p.v5->startEvent(ctx, &x, &d) == ncclSuccess && x == NULL, "unknown type -> NULL");
    x = (void*)1;
    CHECK(p.v5->startEvent(NULL, &x, &d) == ncclSuccess && x == NULL, "NULL context -> NULL");
    x = (void*)1;
    CHECK(p.v5->startEvent(ctx, &x, NULL) == ncclSuccess && x == NULL, "NULL descriptor -> NULL");
    CHECK(p.v5->startEvent(ctx, NULL, &d) == ncclSuccess, "NULL handle pointer");
    CHECK(p.v5->recordEventState(h1, ncclProfilerKernelChStop, &a) == ncclSuccess, "op handle state");
  }
  CHECK(p2p5(&p, ctx, "Send", 1, "ncclInt8", 5, 1) == NULL, "peer out of range dropped");
  CHECK(p2p5(&p, ctx, "SendRecv", 1, "ncclInt8", 1, 1) == NULL, "non-p2p func dropped");
  CHECK(kch5(&p, ctx, NULL, 0, 1) == NULL, "channel without parent");
  CHECK(kch5(&p, ctx, (void*)(uintptr_t)0x5, 0, 1) == NULL, "channel of a free slot");
  CHECK(kch5(&p, ctx, (void*)(uintptr_t)0xfffffffdu, 0, 1) == NULL, "slot out of range");
  CHECK(kch5(&p, ctx, (void*)~(uintptr_t)0, 0, 1) == NULL, "not an operation handle");
  CHECK(kch5(&p, ctx, h1, 0, 1) == NULL, "channel of a completed operation");
  p.v5->stopEvent(h1);                                   /* stale: already completed */
  p.v5->stopEvent((void*)(uintptr_t)0x1234567890abcdefull); /* not ours */
  kch_end(&p, k1, G0);                                   /* stale channel */
  n = tail_poll(&t, out, 64);
  CHECK(n == 0, "stale and invalid events write nothing (%zu)", n);
  CHECK(tail_header(&t)->dropped == 4, "dropped %llu (2 invalid p2p x 2 records)",
        (unsigned long long)tail_header(&t)->dropped);

  p.v5->finalize(ctx);
  n = tail_poll(&t, out, 64);
  CHECK(n == 1 && out[0].kind == CW_KIND_COMM_DESTROY, "destroy");
  CHECK(t.rd.lost == 0 && t.rd.torn == 0, "reader lost %llu torn %llu",
        (unsigned long long)t.rd.lost, (unsigned long long)t.rd.torn);
  tail_close(&t);
  dlclose(p.dl);
}

/* --------------------------------------------------- fewer channels: grace */

void scenario_fewer_channels(void) {
  struct plugin p;
  void *ctx, *c4 = NULL, *h, *k0, *k1;
  char path[1024];
  struct tail t;
  struct cw_record out[64];
  size_t n;
  int64_t t_stop, waited;

  set_job("harness-fewer", "0");
  /* A long grace: "not yet" is checked only while the clock proves it is early. */
  setenv("COMMWATCH_CHANNEL_GRACE_MS", "1000", 1);
  if (plugin_load(&p, g_lib) != 0) { g_failures++; return; }
  ctx = init5(&p, 0xfe, 1, 2, 0);
  ring_path(path, sizeof(path), "harness-fewer", "0.ring");
  if (ctx == NULL || tail_open(&t, path) != 0) { g_failures++; return; }
  tail_poll(&t, out, 64);

  /* 4 announced, 2 report (channels without work report nothing). */
  h = coll5(&p, ctx, "AllReduce", 0, 8, "ncclFloat32", 0, 4);
  k0 = kch5(&p, ctx, h, 0, G0);
  k1 = kch5(&p, ctx, h, 1, G0 + 100);
  kch_end(&p, k0, G0 + 1000);
  kch_end(&p, k1, G0 + 1500);
  p.v5->stopEvent(h);
  t_stop = real_ns();
  sleep_ms(100);
  n = tail_poll(&t, out, 64);
  if (real_ns() - t_stop < 800000000)
    CHECK(n == 1 && out[0].flags == ENTRY, "only the entry within the grace (%zu)", n);
  n = tail_wait(&t, out, n, 64, 2, 10000);
  waited = real_ns() - t_stop;
  CHECK(n == 2 && out[0].flags == ENTRY && out[1].flags == GPU_OK &&
        out[1].t_end_ns - out[1].t_start_ns == 1500,
        "completion after the grace with the reported channels' times");
  CHECK(waited >= 980000000, "completed %lld ms after the last channel", (long long)(waited / 1000000));

  /* A late channel within the grace keeps the operation open and counts. */
  h = coll5(&p, ctx, "AllReduce", 1, 8, "ncclFloat32", 0, 3);
  k0 = kch5(&p, ctx, h, 0, G0 + 10000);
  kch_end(&p, k0, G0 + 11000);
  p.v5->stopEvent(h);
  t_stop = real_ns();
  sleep_ms(100);
  k1 = kch5(&p, ctx, h, 1, G0 + 10500);
  if (real_ns() - t_stop < 800000000) { /* else the grace may have passed: nothing to check */
    CHECK(k1 != NULL, "late channel accepted");
    kch_end(&p, k1, G0 + 14000);
    t_stop = real_ns();
    n = tail_wait(&t, out, 0, 64, 2, 10000);
    waited = real_ns() - t_stop;
    CHECK(n == 2 && out[0].flags == ENTRY && out[1].flags == GPU_OK &&
          out[1].t_end_ns - out[1].t_start_ns == 4000, "late channel's stop is the end");
    CHECK(waited >= 980000000, "grace restarted by the late channel (%lld ms)",
          (long long)(waited / 1000000));
  } else {
    kch_end(&p, k1, G0 + 14000);
    tail_wait(&t, out, 0, 64, 2, 10000);
  }

  /* v4 p2p: nChannels is not trusted (newer NCCL leaves it unset): always the grace. */
  CHECK(p.v4->init(&c4, &nccl_mask, "v4", 0xf4, 1, 2, 0, nccl_log) == ncclSuccess, "v4 init");
  tail_poll(&t, out, 64);
  {
    ncclProfilerEventDescr_v4_t d;
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileP2p;
    d.p2p.func = "Send";
    d.p2p.count = 4;
    d.p2p.datatype = "ncclInt32";
    d.p2p.peer = 1;
    d.p2p.nChannels = 1; /* what it says does not matter */
    h = NULL;
    p.v4->startEvent(c4, &h, &d);
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileKernelCh;
    d.parentObj = h;
    d.kernelCh.pTimer = G0 + 20000;
    k0 = NULL;
    p.v4->startEvent(c4, &k0, &d);
    p.v4->stopEvent(h);
    ncclProfilerEventStateArgs_t a = {.kernelCh = {.pTimer = G0 + 21000}};
    p.v4->recordEventState(k0, ncclProfilerKernelChStop, &a);
    p.v4->stopEvent(k0);
    t_stop = real_ns();
  }
  n = tail_poll(&t, out, 64);
  CHECK(n == 1 && out[0].flags == ENTRY && out[0].op == CW_OP_SEND, "v4 send entry");
  n = tail_wait(&t, out, 0, 64, 1, 10000);
  waited = real_ns() - t_stop;
  CHECK(n == 1 && out[0].flags == GPU_OK && out[0].op == CW_OP_SEND && waited >= 980000000,
        "v4 send completes after the grace (%lld ms)", (long long)(waited / 1000000));
  p.v4->finalize(c4);
  p.v5->finalize(ctx);
  tail_close(&t);
  dlclose(p.dl);
}

/* ----------------------------------------- zero channels and succession */

void scenario_zero_channels(void) {
  struct plugin p;
  void *x, *y, *a, *c, *d, *e, *f, *g, *k0, *k1;
  char path[1024];
  struct tail t;
  static struct cw_record recs[256];
  size_t n = 0;
  const uint64_t X = 0x10, Y = 0x20;

  set_job("harness-zero", "0");
  if (plugin_load(&p, g_lib) != 0) { g_failures++; return; }
  x = init5(&p, X, 1, 2, 0);
  y = init5(&p, Y, 1, 2, 0);
  ring_path(path, sizeof(path), "harness-zero", "0.ring");
  if (x == NULL || y == NULL || tail_open(&t, path) != 0) { g_failures++; return; }
  n = tail_poll(&t, recs, 256);

  /* Channels announced, none ever reported (a kernel that reports nothing). */
  a = coll5(&p, x, "AllReduce", 0, 1, "ncclInt8", 0, 2);
  p.v5->stopEvent(a);
  c = coll5(&p, y, "AllReduce", 0, 1, "ncclInt8", 0, 2);
  p.v5->stopEvent(c);
  sleep_ms(1000); /* the sweeper's scans (every 250 ms) see both stopped */
  n += tail_poll(&t, recs + n, 256 - n);
  CHECK(n == 4 && count(recs, n, X, 0, ENTRY) == 1 && count(recs, n, Y, 0, ENTRY) == 1,
        "both open, nothing decided yet (%zu)", n);

  /* D and E in one launch (both started before either stopped); E completes,
   * D reports nothing. E ran on the GPU after A (a later launch): A is over. */
  d = coll5(&p, x, "AllReduce", 1, 1, "ncclInt8", 0, 2);
  e = coll5(&p, x, "AllReduce", 2, 1, "ncclInt8", 0, 2);
  p.v5->stopEvent(d);
  p.v5->stopEvent(e);
  k0 = kch5(&p, x, e, 0, gpu_ns());
  k1 = kch5(&p, x, e, 1, gpu_ns());
  kch_end(&p, k0, gpu_ns());
  kch_end(&p, k1, gpu_ns());
  n = tail_wait(&t, recs, n, 256, n + 4, 10000);
  sleep_ms(1000); /* scans that must not resolve D: E started before D stopped */
  n += tail_poll(&t, recs + n, 256 - n);
  CHECK(count(recs, n, X, 2, GPU_OK) == 1, "E completed");
  CHECK(count(recs, n, X, 0, LOST) == 1, "A written off after a later launch completed");
  CHECK(count(recs, n, X, 1, LOST) == 0, "D (same launch as E) still open");
  CHECK(count(recs, n, Y, 0, LOST) == 0, "C (another comm) still open");
  {
    const struct cw_record* ra = find(recs, n, X, 0, LOST);
    const struct cw_record* re = find(recs, n, X, 2, GPU_OK);
    CHECK(ra != NULL && re != NULL && ra > re, "A's write-off follows E's completion");
  }

  /* F: a later launch completes: now D is over too. */
  f = coll5(&p, x, "AllReduce", 3, 1, "ncclInt8", 0, 1);
  p.v5->stopEvent(f);
  k0 = kch5(&p, x, f, 0, gpu_ns());
  kch_end(&p, k0, gpu_ns());
  n = tail_wait(&t, recs, n, 256, n + 3, 10000);
  CHECK(count(recs, n, X, 3, GPU_OK) == 1 && count(recs, n, X, 1, LOST) == 1,
        "D written off after F");
  CHECK(count(recs, n, Y, 0, LOST) == 0, "C still open");

  /* NCCL's mask without KernelCh (changed out of band): nothing can be observed. */
  nccl_mask &= ~ncclProfileKernelCh;
  g = coll5(&p, x, "AllReduce", 4, 1, "ncclInt8", 0, 2);
  nccl_mask |= ncclProfileKernelCh;
  n += tail_poll(&t, recs + n, 256 - n);
  CHECK(g == NULL && count(recs, n, X, 4, LOST) == 1, "written off at start without KernelCh");

  p.v5->finalize(x);
  p.v5->finalize(y);
  n += tail_poll(&t, recs + n, 256 - n);
  CHECK(count(recs, n, Y, 0, LOST) == 1, "C written off at finalize");
  for (size_t i = 0; i < n; i++)
    CHECK(recs[i].kind != CW_KIND_CALL || (recs[i].flags & CW_FLAG_COMPLETED) == 0 ||
              recs[i].seq == 2 || recs[i].seq == 3,
          "only E and F completed (seq %llu flags %u)", (unsigned long long)recs[i].seq,
          recs[i].flags);
  tail_close(&t);
  dlclose(p.dl);

  /* COMMWATCH_GPU_TIMING=0: no kernel events asked for, every entry written off. */
  pid_t pid = fork();
  if (pid == 0) {
    struct cw_record one[8];
    set_job("harness-zero-off", "0");
    setenv("COMMWATCH_GPU_TIMING", "0", 1);
    if (plugin_load(&p, g_lib) != 0) _exit(1);
    x = init5(&p, X, 1, 2, 0);
    if (x == NULL || (nccl_mask & ncclProfileKernelCh) != 0) _exit(2);
    if (coll5(&p, x, "AllReduce", 0, 1, "ncclInt8", 0, 2) != NULL) _exit(3);
    ring_path(path, sizeof(path), "harness-zero-off", "0.ring");
    n = read_ring(path, one, 8, NULL);
    _exit(n == 2 && one[1].flags == LOST ? 0 : 4);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "GPU timing off: status %d", WEXITSTATUS(st));
}

/* ------------------------------------------------- proxy and network events */

void scenario_proxy_events(void) {
  struct plugin p;
  void *ctx, *h, *k0, *k1, *po, *ps, *np;
  char path[1024];
  struct tail t;
  struct cw_record out[64];
  size_t n;
  ncclProfilerEventStateArgs_t args = {.proxyStep = {.transSize = 4096}};
  static const uint64_t others[] = {ncclProfileGroup, ncclProfileProxyCtrl, ncclProfileKernelLaunch,
                                    ncclProfileGroupApi, ncclProfileCeColl, ncclProfileCeSync,
                                    ncclProfileCeBatch};

  set_job("harness-proxy", "0");
  if (plugin_load(&p, g_lib) != 0) { g_failures++; return; }
  ctx = init5(&p, 0xcafe, 2, 16, 3);
  ring_path(path, sizeof(path), "harness-proxy", "0.ring");
  if (ctx == NULL || tail_open(&t, path) != 0) { g_failures++; return; }
  tail_poll(&t, out, 64);

  h = coll5(&p, ctx, "AllReduce", 0, 1 << 20, "ncclFloat32", 0, 2);
  k0 = kch5(&p, ctx, h, 0, G0);
  po = other5(&p, ctx, ncclProfileProxyOp, h); /* child of the collective, not a channel */
  k1 = kch5(&p, ctx, h, 1, G0 + 50);
  ps = other5(&p, ctx, ncclProfileProxyStep, po);
  np = other5(&p, ctx, ncclProfileNetPlugin, ps);
  CHECK(po == NULL && ps == NULL && np == NULL, "proxy and network events get no handle");
  for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++)
    CHECK(other5(&p, ctx, others[i], h) == NULL, "type %#llx gets no handle",
          (unsigned long long)others[i]);
  {
    /* PXN: another process's proxy op, its parent a pointer in that process. */
    ncclProfilerEventDescr_v5_t d;
    void* x = (void*)1;
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileProxyOp;
    d.parentObj = (void*)(uintptr_t)0x7fff12345679ull;
    d.proxyOp.pid = getpid() + 1;
    CHECK(p.v5->startEvent(ctx, &x, &d) == ncclSuccess && x == NULL, "PXN proxy op");
  }
  CHECK(kch5(&p, ctx, k0, 5, G0) == NULL, "a channel's child is not a channel of the op");
  CHECK(kch5(&p, ctx, api5(&p, ctx, 0, 0), 5, G0) == NULL, "an API event is no task");
  p.v5->stopEvent(h);
  p.v5->recordEventState(po, (ncclProfilerEventState_t)9, &args);  /* ProxyStepSendWait */
  p.v5->recordEventState(np, (ncclProfilerEventState_t)21, &args); /* NetPluginUpdate */
  p.v5->recordEventState(k0, (ncclProfilerEventState_t)9, &args);  /* a proxy state on a channel */
  kch_end(&p, k0, G0 + 5000);
  p.v5->stopEvent(np);
  p.v5->stopEvent(ps);
  p.v5->stopEvent(po);
  n = tail_poll(&t, out, 64);
  CHECK(n == 1 && out[0].flags == ENTRY && out[0].bytes == 4u << 20, "entry only: a channel runs");
  kch_end(&p, k1, G0 + 6000);
  n = tail_poll(&t, out, 64);
  CHECK(n == 1 && out[0].flags == GPU_OK && out[0].t_end_ns - out[0].t_start_ns == 6000,
        "complete at the second channel's stop, proxy events ignored");

  /* The same through v4, whose descriptor has a one-byte type. */
  {
    void* c4 = NULL;
    ncclProfilerEventDescr_v4_t d;
    void* x;
    CHECK(p.v4->init(&c4, &nccl_mask, "v4", 0xcaf4, 1, 2, 0, nccl_log) == ncclSuccess, "v4 init");
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileProxyOp;
    d.proxyOp.pid = getpid();
    x = (void*)1;
    p.v4->startEvent(c4, &x, &d);
    CHECK(x == NULL, "v4 proxy op");
    d.type = ncclProfileNetPlugin;
    x = (void*)1;
    p.v4->startEvent(c4, &x, &d);
    CHECK(x == NULL, "v4 net plugin");
    p.v4->finalize(c4);
  }
  p.v5->finalize(ctx);
  tail_close(&t);
  dlclose(p.dl);
}

/* ---------------------------------------------------------- graph capture */

static void run_channels(struct plugin* p, void* ctx, void* h, int nch) {
  void* k[4];
  for (int c = 0; c < nch; c++) k[c] = kch5(p, ctx, h, (uint8_t)c, gpu_ns());
  for (int c = 0; c < nch; c++) kch_end(p, k[c], gpu_ns());
}

void scenario_graph_capture(void) {
  struct plugin p;
  void *ctx, *graph, *eager, *pgraph, *h, *lost;
  char path[1024];
  struct tail t;
  static struct cw_record recs[256];
  size_t n = 0;
  const uint64_t C = 0x6a;

  set_job("harness-graph", "0");
  if (plugin_load(&p, g_lib) != 0) { g_failures++; return; }
  ctx = init5(&p, C, 1, 2, 0);
  ring_path(path, sizeof(path), "harness-graph", "0.ring");
  if (ctx == NULL || tail_open(&t, path) != 0) { g_failures++; return; }
  n = tail_poll(&t, recs, 256);

  /* Capture: NCCL emits the API event once, graphCaptured set, and stops it at the
   * API's end. Every replay's task events name it as their parent. */
  graph = api5(&p, ctx, 0, 1);
  eager = api5(&p, ctx, 0, 0);
  CHECK(graph != NULL && eager != NULL && graph != eager, "API handles");
  p.v5->stopEvent(graph);
  p.v5->stopEvent(eager);
  for (int replay = 0; replay < 3; replay++) {
    h = coll5p(&p, ctx, graph, "AllReduce", (uint64_t)replay, 16, "ncclFloat32", 0, 2);
    p.v5->stopEvent(h);
    run_channels(&p, ctx, h, 2);
  }
  h = coll5p(&p, ctx, eager, "AllReduce", 3, 16, "ncclFloat32", 0, 2);
  p.v5->stopEvent(h);
  run_channels(&p, ctx, h, 2);
  pgraph = api5(&p, ctx, 1, 1);
  h = p2p5p(&p, ctx, pgraph, "Send", 16, "ncclFloat32", 1, 1);
  p.v5->stopEvent(h);
  run_channels(&p, ctx, h, 1);
  n += tail_poll(&t, recs + n, 256 - n);
  for (uint64_t s = 0; s < 3; s++)
    CHECK(count(recs, n, C, s, ENTRY | GRAPH) == 1 && count(recs, n, C, s, GPU_OK | GRAPH) == 1,
          "replay %llu: entry and completion carry GRAPH_CAPTURED", (unsigned long long)s);
  CHECK(count(recs, n, C, 3, ENTRY) == 1 && count(recs, n, C, 3, GPU_OK) == 1, "eager: no flag");
  {
    const struct cw_record* s0 = find(recs, n, C, 0, ENTRY | GRAPH);
    const struct cw_record* s2 = find(recs, n, C, 2, ENTRY | GRAPH);
    CHECK(s0 != NULL && s2 != NULL && s0->aux == 0 && s2->aux == 2, "NCCL seq in aux per replay");
  }
  {
    int sends = 0;
    for (size_t i = 0; i < n; i++)
      if (recs[i].op == CW_OP_SEND)
        sends += recs[i].flags == (ENTRY | GRAPH) || recs[i].flags == (GPU_OK | GRAPH);
    CHECK(sends == 2, "graph-captured send: %d records with the flag", sends);
  }

  /* A replay whose kernel reports no channels; a later replay completes. */
  lost = coll5p(&p, ctx, graph, "AllReduce", 4, 16, "ncclFloat32", 0, 2);
  p.v5->stopEvent(lost);
  sleep_ms(1000); /* the sweeper's scans see it stopped */
  h = coll5p(&p, ctx, graph, "AllReduce", 5, 16, "ncclFloat32", 0, 2);
  p.v5->stopEvent(h);
  run_channels(&p, ctx, h, 2);
  n = tail_wait(&t, recs, n, 256, n + 4, 10000);
  CHECK(count(recs, n, C, 5, GPU_OK | GRAPH) == 1, "later replay completed");
  CHECK(count(recs, n, C, 4, LOST | GRAPH) == 1, "silent replay written off, still GRAPH_CAPTURED");

  /* v6: the same hierarchy through the wider descriptor. */
  {
    ncclProfilerEventDescr_v6_t d;
    void *api = NULL, *task = NULL;
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileCollApi;
    d.collApi.func = "AllReduce";
    d.collApi.graphCaptured = true;
    p.v6->startEvent(ctx, &api, &d);
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileColl;
    d.parentObj = api;
    d.coll.func = "AllReduce";
    d.coll.count = 2;
    d.coll.datatype = "ncclFloat64";
    d.coll.nChannels = 0;
    p.v6->startEvent(ctx, &task, &d);
    n += tail_poll(&t, recs + n, 256 - n);
    CHECK(api == graph && task == NULL && count(recs, n, C, 6, LOST | GRAPH) == 1,
          "v6 graph-captured collective");
  }
  p.v5->finalize(ctx);
  tail_close(&t);
  dlclose(p.dl);
}

/* --------------------------------------------------------------- timeout */

void scenario_timeout(void) {
  struct plugin p;
  void *ctx, *a, *b, *c, *k0, *k1, *kb;
  char path[1024];
  struct tail t;
  struct cw_record out[64];
  size_t n;
  int64_t t_start, waited;
  const uint64_t C = 0x7e;

  set_job("harness-timeout", "0");
  setenv("COMMWATCH_COMPLETION_TIMEOUT_MS", "300", 1);
  if (plugin_load(&p, g_lib) != 0) { g_failures++; return; }
  ctx = init5(&p, C, 1, 2, 0);
  ring_path(path, sizeof(path), "harness-timeout", "0.ring");
  if (ctx == NULL || tail_open(&t, path) != 0) { g_failures++; return; }
  tail_poll(&t, out, 64);

  t_start = real_ns();
  a = coll5(&p, ctx, "AllReduce", 0, 1, "ncclInt8", 0, 2);
  k0 = kch5(&p, ctx, a, 0, G0);
  k1 = kch5(&p, ctx, a, 1, G0);
  p.v5->stopEvent(a);
  n = tail_wait(&t, out, 0, 64, 2, 10000);
  waited = real_ns() - t_start;
  CHECK(n == 2 && out[0].flags == ENTRY && out[1].flags == LOST && out[1].seq == 0 &&
        out[1].t_end_ns == 0 && out[1].op == CW_OP_ALLREDUCE, "entry, then written off");
  CHECK(waited >= 290000000, "after %lld ms", (long long)(waited / 1000000));

  /* The channels stop at last: too late, nothing more is written. */
  kch_end(&p, k0, G0 + 10);
  kch_end(&p, k1, G0 + 20);
  CHECK(kch5(&p, ctx, a, 2, G0) == NULL, "no new channel on a written-off operation");

  /* Business as usual afterwards; a task NCCL never stops times out too. */
  b = coll5(&p, ctx, "AllReduce", 1, 1, "ncclInt8", 0, 1);
  kb = kch5(&p, ctx, b, 0, G0 + 100);
  p.v5->stopEvent(b);
  kch_end(&p, kb, G0 + 200);
  c = coll5(&p, ctx, "AllReduce", 2, 1, "ncclInt8", 0, 1);
  CHECK(c != NULL, "c tracked");
  n = tail_wait(&t, out, 0, 64, 4, 10000);
  CHECK(n == 4 && out[0].seq == 1 && out[0].flags == ENTRY && out[1].seq == 1 &&
        out[1].flags == GPU_OK && out[2].seq == 2 && out[2].flags == ENTRY && out[3].seq == 2 &&
        out[3].flags == LOST, "normal completion after a timeout; unstopped task written off (%zu)",
        n);
  p.v5->finalize(ctx);
  n = tail_poll(&t, out, 64);
  CHECK(n == 1 && out[0].kind == CW_KIND_COMM_DESTROY, "nothing left to write off");
  tail_close(&t);
  dlclose(p.dl);
}

/* ---------------------------------------------------------- device entry */

/* A kernel that runs without completing for COMMWATCH_DEVICE_ENTRY_MS gets one
 * entry record with its GPU start (GPU_TIMED, COMPLETED clear); one that
 * completes sooner gets none, and a task whose kernel never started gets none. */
void scenario_device_entry(void) {
  struct plugin p;
  void *ctx, *a, *b, *c, *ka, *kb;
  char path[1024];
  struct tail t;
  struct cw_record out[64];
  const struct cw_record* r;
  size_t n;
  int64_t t_gpu;
  const uint64_t C = 0x7f;

  set_job("harness-devent", "0");
  setenv("COMMWATCH_DEVICE_ENTRY_MS", "100", 1);
  if (plugin_load(&p, g_lib) != 0) { g_failures++; return; }
  ctx = init5(&p, C, 1, 2, 0);
  ring_path(path, sizeof(path), "harness-devent", "0.ring");
  if (ctx == NULL || tail_open(&t, path) != 0) { g_failures++; return; }
  tail_poll(&t, out, 64);

  /* b: on the device and done at once; a: on the device, waiting; c: queued behind a */
  b = coll5(&p, ctx, "AllReduce", 0, 1, "ncclInt8", 0, 1);
  kb = kch5(&p, ctx, b, 0, gpu_ns());
  p.v5->stopEvent(b);
  kch_end(&p, kb, gpu_ns());
  a = coll5(&p, ctx, "AllReduce", 1, 1, "ncclInt8", 0, 1);
  t_gpu = real_ns();
  ka = kch5(&p, ctx, a, 0, gpu_ns());
  p.v5->stopEvent(a);
  c = coll5(&p, ctx, "AllReduce", 2, 1, "ncclInt8", 0, 1);
  p.v5->stopEvent(c);
  n = tail_wait(&t, out, 0, 64, 5, 3000);
  CHECK(count(out, n, C, 0, GPU_OK) == 1, "b completed");
  CHECK(count(out, n, C, 1, CW_FLAG_GPU_TIMED) == 1, "a: one device entry (%zu records)", n);
  CHECK(count(out, n, C, 2, CW_FLAG_GPU_TIMED) == 0 && count(out, n, C, 0, CW_FLAG_GPU_TIMED) == 0,
        "no device entry for a call done at once, or one whose kernel never started");
  r = find(out, n, C, 1, CW_FLAG_GPU_TIMED);
  CHECK(r != NULL && r->t_end_ns == 0 && llabs(r->t_start_ns - t_gpu) < 20000000 && r->op == CW_OP_ALLREDUCE &&
        r->nranks == 2, "device entry: the GPU start, no end");
  usleep(600000); /* more scans: still one */
  n = tail_wait(&t, out, n, 64, n + 1, 100);
  CHECK(count(out, n, C, 1, CW_FLAG_GPU_TIMED) == 1, "written once");
  kch_end(&p, ka, gpu_ns());
  n = tail_wait(&t, out, n, 64, n + 1, 3000);
  CHECK(count(out, n, C, 1, GPU_OK) == 1, "a completes after its device entry");
  p.v5->finalize(ctx);
  tail_close(&t);
  dlclose(p.dl);
}

/* ------------------------------------------------- v4 and v6 ABI mapping */

void scenario_abi_versions(void) {
  struct plugin p;
  void* c4 = NULL;
  void* c6 = NULL;
  char path[1024];
  struct tail t;
  static struct cw_record recs[256];
  size_t n = 0;
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
  CHECK(p.v4->init(&c4, &nccl_mask, "v4", 0x4444, 3, 4, 2, nccl_log) == ncclSuccess, "v4 init");
  CHECK((nccl_mask & ncclProfileKernelCh) != 0, "v4 mask %#x", nccl_mask);
  ring_path(path, sizeof(path), "harness-abi", "5.ring");
  if (tail_open(&t, path) != 0) { g_failures++; return; }
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
    void* k = NULL;
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileP2p;
    d.p2p.func = "Recv";
    d.p2p.count = 5;
    d.p2p.datatype = "ncclInt32";
    d.p2p.peer = 3;
    p.v4->startEvent(c4, &h, &d);
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileKernelCh;
    d.parentObj = h;
    d.kernelCh.pTimer = gpu_ns();
    p.v4->startEvent(c4, &k, &d);
    p.v4->stopEvent(h);
    p.v4->stopEvent(k); /* no GPU stop stamp */
  }
  n = tail_wait(&t, recs, 0, 256, 9, 5000); /* the recv completes after the grace */

  /* v6: the same events through the wider descriptor; op and size mapping. The
   * v4 comm stays open meanwhile: its finalize would be the last, closing the ring. */
  CHECK(p.v6->init(&c6, 0x6666, &nccl_mask, "v6", 1, 8, 0, nccl_log) == ncclSuccess, "v6 init");
  for (int i = 0; i < ncases; i++) {
    ncclProfilerEventDescr_v6_t d;
    void* h = (void*)1;
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileColl;
    d.coll.func = cases[i].func;
    d.coll.count = cases[i].count;
    d.coll.datatype = cases[i].dtype;
    d.coll.root = 6;
    p.v6->startEvent(c6, &h, &d); /* nChannels 0: one record */
    CHECK(h == NULL, "no channels, no handle");
    p.v6->stopEvent(h);
  }
  p.v4->finalize(c4);
  p.v6->finalize(c6);
  n += tail_poll(&t, recs + n, 256 - n);

  CHECK(n == 10 + 2 + (size_t)ncases, "records %zu", n);
  if (n < 12) { tail_close(&t); dlclose(p.dl); return; }
  CHECK(recs[0].kind == CW_KIND_COMM_INIT && recs[0].comm == 0x4444 && recs[0].aux == 3 &&
        recs[0].comm_rank == 2 && recs[0].nranks == 4 && recs[0].rank == 5, "v4 COMM_INIT");
  for (int i = 0; i < 3; i++) {
    const struct cw_record* e = &recs[1 + 2 * i];
    const struct cw_record* d = &recs[2 + 2 * i];
    CHECK(e->seq == (uint64_t)i && e->aux == 10u + (uint32_t)i && e->op == CW_OP_ALLREDUCE &&
          e->bytes == 32 && e->flags == ENTRY, "v4 entry %d", i);
    CHECK(d->seq == (uint64_t)i && d->flags == GPU_OK, "v4 completion %d flags %u", i, d->flags);
  }
  CHECK(recs[7].op == CW_OP_RECV && recs[7].peer == 3 && recs[7].seq == 0 && recs[7].bytes == 20 &&
        recs[7].flags == ENTRY, "v4 recv");
  CHECK(recs[8].op == CW_OP_RECV && recs[8].flags == HOST_OK, "v4 recv done (no GPU stop stamp)");
  CHECK(recs[9].kind == CW_KIND_COMM_INIT && recs[9].comm == 0x6666 && recs[9].aux == 1,
        "v6 init");
  CHECK(recs[n - 2].kind == CW_KIND_COMM_DESTROY && recs[n - 2].comm == 0x4444 &&
        recs[n - 1].kind == CW_KIND_COMM_DESTROY && recs[n - 1].comm == 0x6666, "destroys");
  for (int i = 0; i < ncases && 10 + i < (int)n; i++) {
    const struct cw_record* e = &recs[10 + i];
    CHECK(e->op == cases[i].op && e->bytes == cases[i].bytes && e->flags == LOST &&
          e->peer == (cases[i].rooted ? 6 : -1) && e->seq == (uint64_t)i,
          "%s/%s: op %u bytes %llu peer %d", cases[i].func, cases[i].dtype, e->op,
          (unsigned long long)e->bytes, e->peer);
  }
  tail_close(&t);
  dlclose(p.dl);
}
