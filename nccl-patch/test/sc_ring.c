/* Harness scenarios about the ring file, its lifecycle, settings and naming. */
#include <dirent.h>
#include <signal.h>

#include "harness.h"

/* No hidden temporary files left in a job directory. */
static int temp_files(const char* job) {
  char dir[1024];
  DIR* d;
  struct dirent* e;
  int n = 0;
  snprintf(dir, sizeof(dir), "%s/%s", g_dir, job);
  d = opendir(dir);
  if (d == NULL) return 0;
  while ((e = readdir(d)) != NULL) n += e->d_name[0] == '.' && strstr(e->d_name, ".tmp") != NULL;
  closedir(d);
  return n;
}

/* Blocks until a byte arrives (or the other end is closed); returns 1 for a byte. */
static int wait_byte(int fd) {
  char c;
  ssize_t r;
  do r = read(fd, &c, 1); while (r < 0 && errno == EINTR);
  return r == 1;
}

static void send_byte(int fd) {
  char c = 'x';
  CHECK(write(fd, &c, 1) == 1, "pipe write");
}

/* ------------------------------------------------------ abort at finalize */

void scenario_abort_at_finalize(void) {
  struct plugin p;
  void *x, *y, *a, *b, *c, *d, *k0, *kc;
  char path[1024];
  struct tail t;
  struct cw_record out[64];
  size_t n;
  int destroy_at = -1, lost_a = -1, lost_b = -1;
  const uint64_t X = 0xa0, Y = 0xb0;

  set_job("harness-abort", "0");
  if (plugin_load(&p, g_lib) != 0) { g_failures++; return; }
  x = init5(&p, X, 1, 2, 0);
  y = init5(&p, Y, 1, 2, 0);
  ring_path(path, sizeof(path), "harness-abort", "0.ring");
  if (x == NULL || y == NULL || tail_open(&t, path) != 0) { g_failures++; return; }
  tail_poll(&t, out, 64);

  a = coll5(&p, x, "AllReduce", 0, 1, "ncclInt8", 0, 2); /* a channel runs and never stops */
  k0 = kch5(&p, x, a, 0, gpu_ns());
  p.v5->stopEvent(a);
  b = coll5(&p, x, "AllReduce", 1, 1, "ncclInt8", 0, 1); /* NCCL never stopped the task */
  c = coll5(&p, x, "AllReduce", 2, 1, "ncclInt8", 0, 1); /* completes */
  kc = kch5(&p, x, c, 0, gpu_ns());
  p.v5->stopEvent(c);
  kch_end(&p, kc, gpu_ns());
  d = coll5(&p, y, "AllReduce", 0, 1, "ncclInt8", 0, 1); /* another comm's, open */
  p.v5->stopEvent(d);
  n = tail_poll(&t, out, 64);
  CHECK(n == 5, "entries a b c, c's completion, d's entry (%zu)", n);

  p.v5->finalize(x);
  n = tail_poll(&t, out, 64);
  for (size_t i = 0; i < n; i++) {
    if (out[i].kind == CW_KIND_COMM_DESTROY && out[i].comm == X) destroy_at = (int)i;
    if (out[i].kind == CW_KIND_CALL && out[i].flags == LOST && out[i].comm == X) {
      if (out[i].seq == 0) lost_a = (int)i;
      if (out[i].seq == 1) lost_b = (int)i;
    }
  }
  CHECK(n == 3 && lost_a >= 0 && lost_b >= 0 && destroy_at == 2,
        "open operations written off, then COMM_DESTROY (%zu records)", n);
  kch_end(&p, k0, gpu_ns()); /* late events of a finalized comm */
  p.v5->stopEvent(b);
  CHECK(coll5(&p, x, "AllReduce", 3, 1, "ncclInt8", 0, 1) == NULL, "no task on a finalized comm");
  n = tail_poll(&t, out, 64);
  CHECK(n == 0, "late events write nothing (%zu)", n);
  CHECK(file_exists(path) && lock_free(path) == 0 && tail_header(&t)->closed == 0,
        "another comm is live: file kept, locked, open");

  p.v5->finalize(y);
  n = tail_poll(&t, out, 64);
  CHECK(n == 2 && out[0].flags == LOST && out[0].comm == Y && out[1].kind == CW_KIND_COMM_DESTROY,
        "last comm: its open operation, then COMM_DESTROY");
  CHECK(!file_exists(path), "ring file removed after the last finalize");
  CHECK(tail_header(&t)->closed == 1 && tail_header(&t)->commit_index == tail_header(&t)->write_index,
        "closed and fully published");
  tail_close(&t);
  dlclose(p.dl);
}

/* ------------------------------------------------------------- lifecycle */

void scenario_lifecycle(void) {
  struct plugin p;
  void *ctx, *h;
  char path[1024];
  struct tail t, old;
  struct cw_record out[64];
  size_t n;
  int to_child[2], to_parent[2], st = 0;
  pid_t pid;

  /* A live writer holds the lock; at its last finalize the file goes. */
  set_job("harness-life", "4");
  if (plugin_load(&p, g_lib) != 0) { g_failures++; return; }
  ctx = init5(&p, 0x44, 1, 2, 0);
  ring_path(path, sizeof(path), "harness-life", "4.ring");
  if (ctx == NULL || tail_open(&t, path) != 0) { g_failures++; return; }
  CHECK(lock_free(path) == 0, "live writer holds the lock");
  CHECK(tail_header(&t)->closed == 0 && tail_header(&t)->pid == (int32_t)getpid() &&
        tail_header(&t)->uid == (uint32_t)getuid(), "header of a live writer");
  CHECK(temp_files("harness-life") == 0, "no temporary file left");
  p.v5->finalize(ctx);
  CHECK(!file_exists(path) && tail_header(&t)->closed == 1, "removed and closed at finalize");
  tail_close(&t);
  dlclose(p.dl);

  /* A killed writer cannot clean up: its file stays, its lock is gone. */
  CHECK(pipe(to_parent) == 0, "pipe");
  pid = fork();
  if (pid == 0) {
    set_job("harness-life", "5");
    if (plugin_load(&p, g_lib) != 0 || (ctx = init5(&p, 0x55, 1, 2, 0)) == NULL) _exit(1);
    p.v5->stopEvent(coll5(&p, ctx, "AllReduce", 0, 1, "ncclInt8", 0, 1)); /* open */
    send_byte(to_parent[1]);
    for (;;) pause(); /* until SIGKILL */
  }
  close(to_parent[1]);
  CHECK(wait_byte(to_parent[0]), "writer ready");
  close(to_parent[0]);
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  ring_path(path, sizeof(path), "harness-life", "5.ring");
  CHECK(file_exists(path) && lock_free(path) == 1, "killed writer: file kept, lock free");
  if (tail_open(&old, path) != 0) { g_failures++; return; }
  n = tail_poll(&old, out, 64);
  CHECK(n == 2 && out[1].flags == ENTRY && tail_header(&old)->closed == 0 &&
        tail_header(&old)->pid == pid, "killed writer's records, not closed");

  /* A new writer of that rank replaces the leftover; a reader of the old file
   * keeps reading it intact. */
  if (plugin_load(&p, g_lib) != 0) { g_failures++; return; }
  setenv("RANK", "5", 1);
  ctx = init5(&p, 0x56, 1, 2, 0);
  CHECK(ctx != NULL && lock_free(path) == 0, "new writer under the same name");
  CHECK(tail_open(&t, path) == 0 && tail_header(&t)->pid == (int32_t)getpid(), "new file");
  CHECK(tail_header(&old)->pid == pid && tail_header(&old)->write_index == 2 &&
        old.rd.h->magic[0] == 'C', "old file still readable");
  p.v5->finalize(ctx);
  CHECK(!file_exists(path), "new writer removed its own file");
  tail_close(&t);
  tail_close(&old);
  dlclose(p.dl);

  /* Exit without finalize (no ncclCommDestroy): the destructor writes off what
   * is open, closes, removes the file and releases the lock. */
  CHECK(pipe(to_child) == 0 && pipe(to_parent) == 0, "pipes");
  pid = fork();
  if (pid == 0) {
    close(to_child[1]);
    close(to_parent[0]);
    set_job("harness-life", "6");
    if (plugin_load(&p, g_lib) != 0 || (ctx = init5(&p, 0x66, 1, 2, 0)) == NULL) _exit(1);
    h = coll5(&p, ctx, "AllReduce", 0, 1, "ncclInt8", 0, 2);
    kch5(&p, ctx, h, 0, gpu_ns());
    p.v5->stopEvent(h);
    send_byte(to_parent[1]);
    wait_byte(to_child[0]);
    exit(0); /* destructors run */
  }
  close(to_child[0]);
  close(to_parent[1]);
  CHECK(wait_byte(to_parent[0]), "writer ready");
  ring_path(path, sizeof(path), "harness-life", "6.ring");
  if (tail_open(&t, path) != 0) { g_failures++; return; }
  send_byte(to_child[1]);
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "writer exited");
  n = tail_poll(&t, out, 64);
  CHECK(n == 3 && out[1].flags == ENTRY && out[2].flags == LOST && out[2].seq == 0,
        "open operation written off at exit (%zu)", n);
  CHECK(!file_exists(path) && tail_header(&t)->closed == 1, "removed and closed at exit");
  CHECK(temp_files("harness-life") == 0, "no temporary file left");
  tail_close(&t);
  close(to_child[1]);
  close(to_parent[0]);
}

/* ------------------------------------------------------------------ fork */

void scenario_fork(void) {
  struct plugin p;
  void* ctx;
  char path[1024];
  struct cw_record out[16];
  struct cw_ring_header hd;
  int ready[2], release[2], gone[2], st = 0;
  pid_t writer;

  /* The writer forks a worker (like a data loader), then dies without
   * cleaning up. The worker must hold no lock and must remove nothing. */
  CHECK(pipe(ready) == 0 && pipe(release) == 0 && pipe(gone) == 0, "pipes");
  writer = fork();
  if (writer == 0) {
    set_job("harness-fork", "7");
    if (plugin_load(&p, g_lib) != 0 || (ctx = init5(&p, 0x77, 1, 2, 0)) == NULL) _exit(1);
    p.v5->stopEvent(coll5(&p, ctx, "AllReduce", 0, 1, "ncclInt8", 0, 1));
    if (fork() == 0) { /* worker */
      close(ready[0]);
      close(release[1]);
      close(gone[0]);
      /* An event in the child lands in private memory, not in the parent's ring. */
      p.v5->stopEvent(coll5(&p, ctx, "AllReduce", 1, 1, "ncclInt8", 0, 0));
      send_byte(ready[1]);
      wait_byte(release[0]);
      dlclose(p.dl); /* the plugin's destructor runs in the worker: it must not touch the file */
      _exit(0);
    }
    _exit(0); /* the writer vanishes like a killed process */
  }
  close(ready[1]);
  close(release[0]);
  close(gone[1]);
  waitpid(writer, &st, 0);
  CHECK(wait_byte(ready[0]), "worker ready");
  ring_path(path, sizeof(path), "harness-fork", "7.ring");
  CHECK(file_exists(path) && lock_free(path) == 1, "worker alive, writer gone: lock free");
  send_byte(release[1]);
  CHECK(!wait_byte(gone[0]), "worker exited"); /* EOF once its end closes at exit */
  CHECK(file_exists(path), "the worker's exit removed nothing");
  CHECK(read_ring(path, out, 16, &hd) == 2 && hd.closed == 0 && out[1].flags == ENTRY,
        "only the writer's records");
  close(ready[0]);
  close(release[1]);
  close(gone[0]);

  /* After the plugin is unloaded, fork still works (its fork handler is gone). */
  set_job("harness-fork", "8");
  if (plugin_load(&p, g_lib) != 0 || (ctx = init5(&p, 0x88, 1, 2, 0)) == NULL) { g_failures++; return; }
  p.v5->finalize(ctx);
  dlclose(p.dl);
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork after unload");
}

/* ------------------------- ring wraps under concurrent writers and a reader */

#define WRAP_THREADS 4
#define WRAP_CALLS 500

struct wrap_arg { struct plugin* p; void* ctx; };

static void* wrap_thread(void* arg) {
  struct wrap_arg* a = arg;
  for (int i = 0; i < WRAP_CALLS; i++) {
    void* h = coll5(a->p, a->ctx, "AllReduce", (uint64_t)i, 1, "ncclInt8", 0, 1);
    void* k = kch5(a->p, a->ctx, h, 0, gpu_ns());
    a->p->v5->stopEvent(h);
    kch_end(a->p, k, gpu_ns());
  }
  return NULL;
}

void scenario_wrap(void) {
  struct plugin p;
  struct wrap_arg args[WRAP_THREADS];
  pthread_t th[WRAP_THREADS];
  static uint8_t seen[WRAP_THREADS][WRAP_CALLS][2];
  struct cw_record out[256];
  struct tail t;
  char path[1024];
  uint64_t accepted = 0, dups = 0, bad = 0;
  const uint64_t total = (uint64_t)WRAP_THREADS * (2 * WRAP_CALLS + 2);

  set_job("harness-wrap", "0");
  setenv("COMMWATCH_RING_CAPACITY", "64", 1);
  if (plugin_load(&p, g_lib) != 0) { g_failures++; return; }
  for (int i = 0; i < WRAP_THREADS; i++) {
    args[i].p = &p;
    args[i].ctx = init5(&p, 100 + (uint64_t)i, 1, 2, 0);
    CHECK(args[i].ctx != NULL, "init");
  }
  ring_path(path, sizeof(path), "harness-wrap", "0.ring");
  if (tail_open(&t, path) != 0) { g_failures++; return; }
  CHECK(t.len == 256 + 64 * 64, "file size %zu", t.len);
  for (int i = 0; i < WRAP_THREADS; i++) pthread_create(&th[i], NULL, wrap_thread, &args[i]);

  for (int round = 0;; round++) {
    int finished = round > 0 && __atomic_load_n(&t.rd.h->commit_index, __ATOMIC_ACQUIRE) ==
                                    (uint64_t)WRAP_THREADS * (2 * WRAP_CALLS + 1);
    size_t n = tail_poll(&t, out, 256);
    for (size_t j = 0; j < n; j++) {
      const struct cw_record* r = &out[j];
      accepted++;
      if (r->kind != CW_KIND_CALL) continue;
      uint64_t w = r->comm - 100;
      if (w >= WRAP_THREADS || r->seq >= WRAP_CALLS || r->aux != r->seq) { bad++; continue; }
      int done = (r->flags & CW_FLAG_COMPLETED) != 0;
      if (r->flags != (done ? GPU_OK : ENTRY) || (done && r->t_end_ns < r->t_start_ns)) bad++;
      if (seen[w][r->seq][done]++) dups++;
    }
    if (finished) break;
  }
  for (int i = 0; i < WRAP_THREADS; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < WRAP_THREADS; i++) p.v5->finalize(args[i].ctx);
  {
    size_t n;
    while ((n = tail_poll(&t, out, 256)) > 0) accepted += n;
  }
  CHECK(t.rd.h->write_index == total && t.rd.h->commit_index == total, "write %llu commit %llu",
        (unsigned long long)t.rd.h->write_index, (unsigned long long)t.rd.h->commit_index);
  CHECK(accepted + t.rd.lost + t.rd.torn == total, "accepted %llu lost %llu torn %llu",
        (unsigned long long)accepted, (unsigned long long)t.rd.lost, (unsigned long long)t.rd.torn);
  CHECK(accepted >= 64, "accepted %llu", (unsigned long long)accepted);
  CHECK(bad == 0, "bad records %llu", (unsigned long long)bad);
  /* A busy slot (a writer stalled for a full lap) may leave one stale record. */
  if (t.rd.h->dropped == 0) CHECK(dups == 0 && t.rd.torn == 0, "duplicates %llu", (unsigned long long)dups);
  for (int s = 0; s < 64; s++) { /* the last lap is intact */
    const struct cw_record* r = &t.rd.slots[s];
    CHECK(r->kind >= 1 && r->kind <= 3, "slot %d kind %u", s, r->kind);
  }
  printf("  wrap: %llu records, %llu read, %llu overrun, %llu dropped\n", (unsigned long long)total,
         (unsigned long long)accepted, (unsigned long long)t.rd.lost,
         (unsigned long long)t.rd.h->dropped);
  tail_close(&t);
  dlclose(p.dl);
}

/* --------------------------------------- fixed op pool: untracked operations */

/* A pool mostly taken by one communicator's open operations (a run of 160 of
 * 256 slots): another communicator running 2000 operations one at a time keeps
 * walking into that run, and still finds a free slot every time. With 4 places
 * tried instead of 16, 22 of them went untracked. */
static void pool_mostly_full(void) {
  struct plugin p;
  void *a, *b, *h, *k;
  void* held[160];
  int untracked = 0;

  set_job("harness-pool-crowded", "0");
  setenv("COMMWATCH_MAX_INFLIGHT", "256", 1);
  if (plugin_load(&p, g_lib) != 0) { g_failures++; return; }
  a = init5(&p, 0x78, 1, 2, 0);
  b = init5(&p, 0x79, 1, 2, 0);
  CHECK(a != NULL && b != NULL, "init");
  for (int i = 0; i < 160; i++) {
    held[i] = coll5(&p, a, "AllReduce", (uint64_t)i, 1, "ncclInt8", 0, 1);
    CHECK(held[i] != NULL, "held op %d tracked", i);
  }
  for (int i = 0; i < 2000; i++) {
    h = coll5(&p, b, "AllReduce", (uint64_t)i, 1, "ncclInt8", 0, 1);
    if (h == NULL) {
      untracked++;
      continue;
    }
    k = kch5(&p, b, h, 0, gpu_ns());
    p.v5->stopEvent(h);
    kch_end(&p, k, gpu_ns());
  }
  CHECK(untracked == 0, "%d of 2000 operations untracked with 96 of 256 slots free", untracked);
  p.v5->finalize(a);
  p.v5->finalize(b);
  dlclose(p.dl);
}

void scenario_pool(void) {
  struct plugin p;
  void *ctx, *again, *k;
  void* h[100];
  void* kk[100];
  int got = 0, lost_entries = 0, completions = 0;
  char path[1024];
  static struct cw_record recs[512];
  struct cw_ring_header hd;
  size_t n;

  set_job("harness-pool", "0");
  setenv("COMMWATCH_MAX_INFLIGHT", "64", 1);
  if (plugin_load(&p, g_lib) != 0) { g_failures++; return; }
  ctx = init5(&p, 0x77, 1, 2, 0);
  CHECK(ctx != NULL, "init");
  for (int i = 0; i < 100; i++) {
    h[i] = coll5(&p, ctx, "AllReduce", (uint64_t)i, 1, "ncclInt8", 0, 1);
    got += h[i] != NULL;
  }
  CHECK(got == 64, "%d of 100 ops tracked with a pool of 64", got);
  for (int i = 0; i < 100; i++) {
    if (h[i] == NULL) continue;
    kk[i] = kch5(&p, ctx, h[i], 0, gpu_ns());
    p.v5->stopEvent(h[i]);
    kch_end(&p, kk[i], gpu_ns());
  }
  again = coll5(&p, ctx, "AllReduce", 100, 1, "ncclInt8", 0, 1);
  CHECK(again != NULL, "pool slots come back after completion");
  k = kch5(&p, ctx, again, 0, gpu_ns());
  p.v5->stopEvent(again);
  kch_end(&p, k, gpu_ns());
  ring_path(path, sizeof(path), "harness-pool", "0.ring");
  n = read_ring(path, recs, 512, &hd);
  p.v5->finalize(ctx);
  for (size_t i = 0; i < n; i++) {
    lost_entries += recs[i].kind == CW_KIND_CALL && recs[i].flags == LOST;
    completions += recs[i].kind == CW_KIND_CALL && recs[i].flags == GPU_OK;
  }
  CHECK(hd.dropped == 36, "dropped %llu (36 completions that cannot be written)",
        (unsigned long long)hd.dropped);
  CHECK(n == 1 + 100 + 64 + 2, "records %zu", n);
  CHECK(lost_entries == 36 && completions == 65, "untracked %d completed %d", lost_entries,
        completions);
  CHECK(n >= 2 && recs[n - 2].seq == 100 && recs[n - 1].seq == 100, "seq keeps counting");
  dlclose(p.dl);
  pool_mostly_full();
}

/* ------------------------------------------- settings and rank sources */

static int init_result(void) {
  struct plugin p;
  void* ctx = (void*)1;
  ncclResult_t r1, r2;
  if (plugin_load(&p, g_lib) != 0) return -1;
  r1 = p.v5->init(&ctx, 1, &nccl_mask, NULL, 1, 2, 0, nccl_log);
  if (r1 != ncclSuccess) {
    CHECK(ctx == NULL, "context cleared on failure");
    r2 = p.v5->init(&ctx, 2, &nccl_mask, NULL, 1, 2, 0, nccl_log);
    CHECK(r2 == r1, "failure is sticky");
  } else {
    p.v5->finalize(ctx);
  }
  dlclose(p.dl); /* the next load starts from the environment again */
  return (int)r1;
}

void scenario_bad_env(void) {
  static const char* const bad[][2] = {
    {"COMMWATCH_RING_CAPACITY", "1000"}, {"COMMWATCH_RING_CAPACITY", "16"},
    {"COMMWATCH_RING_CAPACITY", "0x100"}, {"COMMWATCH_JOB_ID", "a/b"},
    {"COMMWATCH_JOB_ID", ".."}, {"COMMWATCH_GPU_TIMING", "yes"},
    {"COMMWATCH_RING_DIR", "relative/dir"}, {"COMMWATCH_MAX_INFLIGHT", "100"},
    {"COMMWATCH_COMPLETION_TIMEOUT_MS", "5"}, {"COMMWATCH_COMPLETION_TIMEOUT_MS", "1e3"},
    {"COMMWATCH_CHANNEL_GRACE_MS", "0"}, {"COMMWATCH_CHANNEL_GRACE_MS", "-1"},
    {"COMMWATCH_DEVICE_ENTRY_MS", "5"}, {"COMMWATCH_DEVICE_ENTRY_MS", "1s"},
    {"COMMWATCH_CLOCK", "tsc"},
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
  /* Valid non-defaults are accepted. */
  set_job("harness-env", "0");
  setenv("COMMWATCH_COMPLETION_TIMEOUT_MS", "86400000", 1);
  setenv("COMMWATCH_CHANNEL_GRACE_MS", "1", 1);
  setenv("COMMWATCH_CLOCK", "realtime", 1);
  CHECK(init_result() == ncclSuccess, "valid settings");
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

/* Loads the plugin, inits one comm and returns with it live (file and lock held). */
static int hold_ring(struct plugin* p, void** ctx) {
  if (plugin_load(p, g_lib) != 0) return -1;
  *ctx = init5(p, 1, 1, 2, 0);
  return *ctx != NULL ? 0 : -1;
}

void scenario_rank_sources(void) {
  struct plugin p;
  void* ctx;
  struct cw_ring_header hd;
  struct cw_record one[8];
  char path[1024], name[64];
  int st = 0;

  set_job("harness-rank", NULL);
  setenv("OMPI_COMM_WORLD_RANK", "7", 1);
  if (hold_ring(&p, &ctx) != 0) { g_failures++; return; }
  ring_path(path, sizeof(path), "harness-rank", "7.ring");
  read_ring(path, one, 8, &hd);
  CHECK(hd.rank == 7, "OMPI_COMM_WORLD_RANK -> rank %d", hd.rank);
  p.v5->finalize(ctx);
  dlclose(p.dl);

  /* RANK wins; an unparsable one is skipped with a warning; SLURM_PROCID is last. */
  pid_t pid = fork();
  if (pid == 0) {
    set_job("harness-rank", "abc");
    setenv("SLURM_PROCID", "9", 1);
    if (hold_ring(&p, &ctx) != 0) _exit(1);
    ring_path(path, sizeof(path), "harness-rank", "9.ring");
    read_ring(path, one, 8, &hd);
    _exit(hd.rank == 9 && one[0].rank == 9 ? 0 : 1);
  }
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "RANK=abc SLURM_PROCID=9 -> 9");

  pid = fork();
  if (pid == 0) {
    set_job("harness-rank", NULL);
    if (hold_ring(&p, &ctx) != 0) _exit(1);
    snprintf(name, sizeof(name), "pid-%d.ring", (int)getpid());
    ring_path(path, sizeof(path), "harness-rank", name);
    read_ring(path, one, 8, &hd);
    _exit(hd.rank == -1 && one[0].rank == -1 ? 0 : 1);
  }
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "no rank variable -> pid-<pid>.ring, rank -1");

  /* A live writer already holds <job>/1.ring: the second one gets 1.<pid>.ring. */
  set_job("harness-rank", "1");
  ring_path(path, sizeof(path), "harness-rank", "1.ring");
  int fd = open(path, O_RDWR | O_CREAT, 0644);
  CHECK(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0, "hold lock");
  if (hold_ring(&p, &ctx) != 0) { g_failures++; return; }
  snprintf(name, sizeof(name), "1.%d.ring", (int)getpid());
  ring_path(path, sizeof(path), "harness-rank", name);
  CHECK(file_exists(path) && lock_free(path) == 0, "%s exists, locked", path);
  ring_path(path, sizeof(path), "harness-rank", "1.ring");
  CHECK(file_exists(path), "the live writer's file is untouched");
  p.v5->finalize(ctx);
  dlclose(p.dl);
  if (fd >= 0) close(fd);
}

/* ---------------------------------- NCCL unloads and reloads the plugin */

void scenario_reload(void) {
  char path[1024];
  struct cw_record recs[16];
  struct tail first;
  set_job("harness-reload", "0");
  ring_path(path, sizeof(path), "harness-reload", "0.ring");
  for (int round = 0; round < 2; round++) {
    struct plugin p;
    void* ctx;
    if (plugin_load(&p, g_lib) != 0 || (ctx = init5(&p, 0x99, 1, 2, 1)) == NULL) {
      g_failures++;
      return;
    }
    if (round == 0) CHECK(tail_open(&first, path) == 0, "map the first ring");
    else CHECK(read_ring(path, recs, 16, NULL) == 1, "second load: a fresh ring");
    p.v5->stopEvent(coll5(&p, ctx, "AllReduce", 0, 1, "ncclInt8", 0, 0));
    p.v5->finalize(ctx);
    dlclose(p.dl);
    CHECK(!file_exists(path), "round %d: removed at finalize", round);
  }
  CHECK(tail_poll(&first, recs, 16) == 3 && tail_header(&first)->closed == 1 && recs[1].seq == 0,
        "the first ring: init, one operation, destroy; closed");
  tail_close(&first);
}

/* -------------------------------------------------------------- clock */

static void clock_run(const char* clock, int* bad, int64_t* worst) {
  struct plugin p;
  void* ctx;
  char path[1024];
  struct tail t;
  struct cw_record out[4];
  set_job("harness-clock", "0");
  setenv("COMMWATCH_CLOCK", clock, 1);
  if (plugin_load(&p, g_lib) != 0 || (ctx = init5(&p, 0xc1, 1, 2, 0)) == NULL) {
    g_failures++;
    return;
  }
  ring_path(path, sizeof(path), "harness-clock", "0.ring");
  if (tail_open(&t, path) != 0) { g_failures++; return; }
  tail_poll(&t, out, 4);
  for (int i = 0; i < 300; i++) { /* across a few re-anchorings of the TSC clock */
    int64_t before = real_ns();
    p.v5->stopEvent(coll5(&p, ctx, "AllReduce", (uint64_t)i, 1, "ncclInt8", 0, 0));
    int64_t after = real_ns();
    if (tail_poll(&t, out, 4) != 1) { (*bad)++; continue; }
    int64_t off = out[0].t_start_ns < before ? before - out[0].t_start_ns
                : out[0].t_start_ns > after ? out[0].t_start_ns - after : 0;
    if (off > *worst) *worst = off;
    *bad += off > 1000000; /* 1 ms */
    sleep_ms(3);
  }
  p.v5->finalize(ctx);
  tail_close(&t);
  dlclose(p.dl);
}

void scenario_clock(void) {
  static const char* const clocks[] = {"auto", "realtime"};
  for (int c = 0; c < 2; c++) {
    int bad = 0;
    int64_t worst = 0;
    clock_run(clocks[c], &bad, &worst);
    CHECK(bad == 0, "COMMWATCH_CLOCK=%s: %d entry times off by more than 1 ms", clocks[c], bad);
    printf("  clock %s: entry times within %lld ns of CLOCK_REALTIME around the call\n", clocks[c],
           (long long)worst);
  }
}
