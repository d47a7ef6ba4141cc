/*
 * Plays NCCL's role for the commwatch profiler plugin: dlopen it, init several
 * communicators, drive task, kernel-channel, proxy, network and API events in
 * the shapes real NCCL produces, from several threads, finalize, then read the
 * ring back the way the node agent does and check what it holds. Every
 * scenario runs in its own forked process, with a freshly loaded plugin.
 *
 * usage: harness PLUGIN.so [SCENARIO-SUBSTRING]
 * COMMWATCH_RING_DIR set: ring files are written there and kept (tests read
 * e.g. <dir>/harness-v5/3.ring.closed, the semantics ring as a reader saw it
 * after the writer closed it); unset: a temporary directory, removed at the end.
 */
#include <dirent.h>

#include "harness.h"

/* Set when built with -fsanitize=address: children leave with _exit, which
 * skips LeakSanitizer's atexit check, so each scenario runs it itself. */
void __lsan_do_leak_check(void) __attribute__((weak));

const char* g_lib;
char g_dir[512];
int g_failures;
int nccl_mask;

void nccl_log(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
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

void set_job(const char* job, const char* rank) {
  static const char* const settings[] = {
    "COMMWATCH_RING_CAPACITY", "COMMWATCH_MAX_INFLIGHT", "COMMWATCH_GPU_TIMING", "COMMWATCH_CLOCK",
    "COMMWATCH_COMPLETION_TIMEOUT_MS", "COMMWATCH_CHANNEL_GRACE_MS", "COMMWATCH_DEVICE_ENTRY_MS",
  };
  for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++) unsetenv(settings[i]);
  setenv("COMMWATCH_RING_DIR", g_dir, 1);
  setenv("COMMWATCH_JOB_ID", job, 1);
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("SLURM_PROCID");
  if (rank != NULL) setenv("RANK", rank, 1); else unsetenv("RANK");
}

void ring_path(char* out, size_t n, const char* job, const char* file) {
  snprintf(out, n, "%s/%s/%s", g_dir, job, file);
}

size_t read_ring(const char* path, struct cw_record* out, size_t max, struct cw_ring_header* hdr) {
  struct tail t;
  size_t n;
  if (tail_open(&t, path) != 0) {
    fprintf(stderr, "  cannot map %s\n", path);
    return 0;
  }
  n = tail_poll(&t, out, max);
  if (hdr != NULL) memcpy(hdr, t.map, sizeof(*hdr));
  tail_close(&t);
  return n;
}

void* init5(struct plugin* p, uint64_t comm, int nnodes, int nranks, int rank) {
  void* ctx = NULL;
  if (p->v5->init(&ctx, comm, &nccl_mask, "harness", nnodes, nranks, rank, nccl_log) != ncclSuccess)
    return NULL;
  return ctx;
}

int tail_open(struct tail* t, const char* path) {
  memset(t, 0, sizeof(*t));
  t->map = map_ring(path, &t->len);
  if (t->map == NULL) return -1;
  cw_reader_attach(&t->rd, t->map);
  return 0;
}

size_t tail_poll(struct tail* t, struct cw_record* out, size_t max) {
  return cw_reader_poll(&t->rd, out, max);
}

size_t tail_wait(struct tail* t, struct cw_record* out, size_t have, size_t max, size_t want,
                 int timeout_ms) {
  size_t n = have;
  int64_t deadline = real_ns() + (int64_t)timeout_ms * 1000000;
  for (;;) {
    n += cw_reader_poll(&t->rd, out + n, max - n);
    if (n >= want || real_ns() > deadline) return n;
    sleep_ms(2);
  }
}

void tail_close(struct tail* t) {
  if (t->map != NULL) munmap((void*)t->map, t->len);
  t->map = NULL;
}

const struct cw_ring_header* tail_header(const struct tail* t) { return t->rd.h; }

int lock_free(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  int ok;
  if (fd < 0) return -1;
  ok = flock(fd, LOCK_EX | LOCK_NB) == 0;
  close(fd);
  return ok;
}

int file_exists(const char* path) { return access(path, F_OK) == 0; }

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
    {"interleaved: 3 comms on 3 threads, channels inline, from a proxy thread, fewer than announced",
     scenario_interleaved},
    {"completion rules: channel counts, GPU stamps, tolerated input", scenario_completion_rules},
    {"fewer channel events than nChannels: complete after the grace", scenario_fewer_channels},
    {"zero channels: written off at start, or by a later operation of the comm",
     scenario_zero_channels},
    {"proxy and network events interleaved with kernel channels", scenario_proxy_events},
    {"graph-captured operations (v5 and v6)", scenario_graph_capture},
    {"channels that never stop: COMPLETION_LOST after the timeout", scenario_timeout},
    {"v4 and v6 entry points, op and size mapping", scenario_abi_versions},
    {"device entry: a kernel waiting on the GPU is written as entered there", scenario_device_entry},
    {"abort at finalize: open operations written off, then COMM_DESTROY", scenario_abort_at_finalize},
    {"ring lifecycle: lock, close, unlink, killed writer, exit, replacement", scenario_lifecycle},
    {"fork: a child holds no lock and removes nothing", scenario_fork},
    {"ring wrap with 4 writers and a live reader", scenario_wrap},
    {"fixed op pool: untracked operations keep their entry, a crowded pool tracks all",
     scenario_pool},
    {"settings validation", scenario_bad_env},
    {"rank sources and file naming", scenario_rank_sources},
    {"plugin reload: a new ring per load", scenario_reload},
    {"clock: record times agree with CLOCK_REALTIME (tsc and realtime)", scenario_clock},
    {"recorded: event sequences of a real NCCL replayed, records as on the GPU", scenario_recorded},
  };
  const int n = (int)(sizeof(scenarios) / sizeof(scenarios[0]));
  const char* keep = getenv("COMMWATCH_RING_DIR");
  const char* only = argc > 2 ? argv[2] : NULL;
  int failed = 0, ran = 0;

  if (argc < 2) {
    fprintf(stderr, "usage: %s PLUGIN.so [SCENARIO-SUBSTRING]\n", argv[0]);
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
    if (only != NULL && strstr(scenarios[i].name, only) == NULL) continue;
    fflush(stdout);
    ran++;
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
  printf("harness: %d of %d scenarios passed\n", ran - failed, ran);
  return failed == 0 && ran > 0 ? 0 : 1;
}
