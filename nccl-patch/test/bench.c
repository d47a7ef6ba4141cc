/*
 * Cost of the event path, in the shapes NCCL produces. Prints figures; asserts
 * nothing.
 *
 *   pair     what the enqueueing (training) thread pays per operation: task
 *            start (entry record) + task stop of a collective whose two kernel
 *            channels a second thread reports afterwards, as NCCL's profiler
 *            thread does. The enqueue thread's CPU time, handing the handle to
 *            the channel thread (one store) included; it runs at most 1024
 *            operations ahead and sleeps (no CPU time) when it gets there.
 *   full     one whole operation on one thread: start, stop, two channels
 *            (start, GPU stop stamp, stop) and the completion record.
 *   nochan   start + stop of a collective without kernel channels: one record.
 *   threads  whole operations, 4 threads on 4 communicators: wall time per
 *            operation per thread.
 *
 * The machine may be shared: single-thread figures count the thread's CPU
 * time (CLOCK_THREAD_CPUTIME_ID), and each figure is the median of ROUNDS
 * rounds, printed with the best round.
 *
 * usage: bench PLUGIN.so [operations per round]
 */
#include <pthread.h>
#include <sched.h>

#include "harness_util.h"

#define BENCH_THREADS 4
#define ROUNDS 7

static int g_mask; /* NCCL keeps its activation mask in one process-wide word */

static int64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

struct bench_arg { struct plugin* p; void* ctx; long ops; };

static void* run_full(void* arg) {
  struct bench_arg* a = arg;
  for (long i = 0; i < a->ops; i++) {
    void* h = coll5(a->p, a->ctx, "AllReduce", (uint64_t)i, 1024, "ncclFloat32", 0, 2);
    void* k0 = kch5(a->p, a->ctx, h, 0, 1000 + (uint64_t)i);
    void* k1 = kch5(a->p, a->ctx, h, 1, 1001 + (uint64_t)i);
    a->p->v5->stopEvent(h);
    kch_end(a->p, k0, 2000 + (uint64_t)i);
    kch_end(a->p, k1, 2001 + (uint64_t)i);
  }
  return NULL;
}

static void* run_nochan(void* arg) {
  struct bench_arg* a = arg;
  for (long i = 0; i < a->ops; i++) {
    void* h = coll5(a->p, a->ctx, "AllReduce", (uint64_t)i, 1024, "ncclFloat32", 0, 0);
    a->p->v5->stopEvent(h);
  }
  return NULL;
}

struct pair_run {
  struct plugin* p;
  void* ctx;
  long ops;
  void** handles;
  long published; /* (atomic) */
  long consumed;  /* (atomic) */
};

#define PAIR_AHEAD 1024 /* operations the enqueue thread may run ahead (a GPU's queue) */

/* Plays NCCL's profiler thread: reports the two kernel channels of each operation. */
static void* channel_thread(void* arg) {
  struct pair_run* r = arg;
  for (long i = 0; i < r->ops; i++) {
    void* h;
    void* k0;
    void* k1;
    while (__atomic_load_n(&r->published, __ATOMIC_ACQUIRE) <= i) sched_yield();
    h = r->handles[i];
    k0 = kch5(r->p, r->ctx, h, 0, 1000 + (uint64_t)i);
    k1 = kch5(r->p, r->ctx, h, 1, 1001 + (uint64_t)i);
    kch_end(r->p, k0, 2000 + (uint64_t)i);
    kch_end(r->p, k1, 2001 + (uint64_t)i);
    __atomic_store_n(&r->consumed, i + 1, __ATOMIC_RELEASE);
  }
  return NULL;
}

static double pair_ns(struct plugin* p, void* ctx, long ops, void** handles, long* untracked) {
  struct pair_run r = {p, ctx, ops, handles, 0, 0};
  struct timespec pause = {0, 20000};
  pthread_t th;
  int64_t t0;
  double per;
  pthread_create(&th, NULL, channel_thread, &r);
  t0 = cpu_ns();
  for (long i = 0; i < ops; i++) {
    void* h;
    if (i - __atomic_load_n(&r.consumed, __ATOMIC_ACQUIRE) >= PAIR_AHEAD) /* sleep: no CPU time */
      while (i - __atomic_load_n(&r.consumed, __ATOMIC_ACQUIRE) >= PAIR_AHEAD / 2) nanosleep(&pause, NULL);
    h = coll5(p, ctx, "AllReduce", (uint64_t)i, 1024, "ncclFloat32", 0, 2);
    p->v5->stopEvent(h);
    handles[i] = h;
    __atomic_store_n(&r.published, i + 1, __ATOMIC_RELEASE);
  }
  per = (double)(cpu_ns() - t0) / (double)ops;
  pthread_join(th, NULL);
  for (long i = 0; i < ops; i++) *untracked += handles[i] == NULL;
  return per;
}

static double timed(struct bench_arg* args, int nthreads, void* (*fn)(void*)) {
  pthread_t th[BENCH_THREADS];
  int64_t t0 = real_ns();
  for (int i = 0; i < nthreads; i++) pthread_create(&th[i], NULL, fn, &args[i]);
  for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
  return (double)(real_ns() - t0);
}

static double cpu_timed(struct bench_arg* a, void* (*fn)(void*)) {
  int64_t t0 = cpu_ns();
  fn(a);
  return (double)(cpu_ns() - t0);
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

struct figure { double median, best; };

static struct figure summarize(double* v) {
  struct figure f;
  qsort(v, ROUNDS, sizeof(double), cmp_double);
  f.median = v[ROUNDS / 2];
  f.best = v[0];
  return f;
}

int main(int argc, char** argv) {
  struct plugin p;
  struct bench_arg args[BENCH_THREADS];
  char dir[256], job[300];
  long ops = argc > 2 ? atol(argv[2]) : 300000;
  double pair[ROUNDS], full[ROUNDS], nochan[ROUNDS], four[ROUNDS];
  struct figure fp, ff, fn, f4;
  void** handles;
  long untracked = 0;

  if (argc < 2 || ops <= 0) {
    fprintf(stderr, "usage: %s PLUGIN.so [operations per round]\n", argv[0]);
    return 2;
  }
  snprintf(dir, sizeof(dir), "%s/cw-bench-%d",
           access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
  setenv("COMMWATCH_RING_DIR", dir, 1);
  setenv("COMMWATCH_JOB_ID", "bench", 1);
  setenv("RANK", "0", 1);
  handles = malloc(sizeof(void*) * (size_t)ops);
  if (handles == NULL || plugin_load(&p, argv[1]) != 0 || p.v5 == NULL) return 1;
  for (int i = 0; i < BENCH_THREADS; i++) {
    args[i].p = &p;
    args[i].ops = ops;
    if (p.v5->init(&args[i].ctx, 0xbe00 + (uint64_t)i, &g_mask, NULL, 1, 8, 0, NULL) != ncclSuccess)
      return 1;
  }
  pair_ns(&p, args[0].ctx, ops / 10, handles, &untracked); /* warm up */
  untracked = 0;
  for (int r = 0; r < ROUNDS; r++) {
    pair[r] = pair_ns(&p, args[0].ctx, ops, handles, &untracked);
    full[r] = cpu_timed(&args[0], run_full) / (double)ops;
    nochan[r] = cpu_timed(&args[0], run_nochan) / (double)ops;
    four[r] = timed(args, BENCH_THREADS, run_full) / (double)ops;
  }
  fp = summarize(pair);
  ff = summarize(full);
  fn = summarize(nochan);
  f4 = summarize(four);
  printf("bench: %.0f ns per start+stop pair on the enqueue thread (best %.0f; collective, 2 kernel "
         "channels reported by another thread; %d rounds of %ld operations)\n",
         fp.median, fp.best, ROUNDS, ops);
  printf("bench: %.0f ns per whole operation on one thread (best %.0f; start, stop, 2 channels, "
         "completion record)\n", ff.median, ff.best);
  printf("bench: %.0f ns per start+stop pair without kernel channels (best %.0f; one record)\n",
         fn.median, fn.best);
  printf("bench: %.0f ns wall per whole operation per thread (best %.0f; %d threads, one "
         "communicator each)\n", f4.median, f4.best, BENCH_THREADS);
  printf("bench: clock %s; %ld operations went untracked (pool full: one record each)\n",
         getenv("COMMWATCH_CLOCK") != NULL ? getenv("COMMWATCH_CLOCK") : "auto", untracked);
  for (int i = 0; i < BENCH_THREADS; i++) p.v5->finalize(args[i].ctx);
  dlclose(p.dl);
  free(handles);
  snprintf(job, sizeof(job), "%s/bench", dir); /* the plugin removed its ring file */
  rmdir(job);
  rmdir(dir);
  return 0;
}
