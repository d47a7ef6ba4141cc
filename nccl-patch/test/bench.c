/*
 * Cost of one start+stop pair on the event path: a collective without kernel
 * channels, so each pair writes its entry and its completion record.
 * usage: bench PLUGIN.so [pairs]
 */
#include <pthread.h>

#include "harness_util.h"

#define BENCH_THREADS 4

struct bench_arg { struct plugin* p; void* ctx; long pairs; };

static void* run(void* arg) {
  struct bench_arg* a = arg;
  for (long i = 0; i < a->pairs; i++) {
    void* h = coll5(a->p, a->ctx, "AllReduce", (uint64_t)i, 1024, "ncclFloat32", 0, 0);
    a->p->v5->stopEvent(h);
  }
  return NULL;
}

static double timed(struct bench_arg* args, int nthreads) {
  pthread_t th[BENCH_THREADS];
  int64_t t0 = real_ns();
  for (int i = 0; i < nthreads; i++) pthread_create(&th[i], NULL, run, &args[i]);
  for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
  return (double)(real_ns() - t0);
}

int main(int argc, char** argv) {
  struct plugin p;
  struct bench_arg args[BENCH_THREADS];
  char dir[256];
  long pairs = argc > 2 ? atol(argv[2]) : 2000000;
  int mask = 0;

  if (argc < 2) {
    fprintf(stderr, "usage: %s PLUGIN.so [pairs]\n", argv[0]);
    return 2;
  }
  snprintf(dir, sizeof(dir), "%s/cw-bench-%d",
           access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
  setenv("COMMWATCH_RING_DIR", dir, 1);
  setenv("COMMWATCH_JOB_ID", "bench", 1);
  setenv("RANK", "0", 1);
  if (plugin_load(&p, argv[1]) != 0 || p.v5 == NULL) return 1;
  for (int i = 0; i < BENCH_THREADS; i++) {
    args[i].p = &p;
    args[i].pairs = pairs;
    if (p.v5->init(&args[i].ctx, 0xbe00 + (uint64_t)i, &mask, NULL, 1, 8, 0, NULL) != ncclSuccess)
      return 1;
  }
  args[0].pairs = pairs / 10; /* warm up */
  timed(args, 1);
  args[0].pairs = pairs;
  double one = timed(args, 1) / (double)pairs;
  double four = timed(args, BENCH_THREADS) / (double)pairs; /* wall time per pair per thread */
  printf("bench: %.0f ns per start+stop pair (%ld pairs, 1 thread)\n", one, pairs);
  printf("bench: %.0f ns wall per start+stop pair per thread (%ld pairs each, %d threads)\n",
         four, pairs, BENCH_THREADS);
  for (int i = 0; i < BENCH_THREADS; i++) p.v5->finalize(args[i].ctx);
  dlclose(p.dl);

  char path[512];
  snprintf(path, sizeof(path), "%s/bench/0.ring", dir);
  unlink(path);
  snprintf(path, sizeof(path), "%s/bench", dir);
  rmdir(path);
  rmdir(dir);
  return 0;
}
