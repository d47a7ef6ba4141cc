/*
 * Recorded NCCL: replays event sequences that a real NCCL sent to the plugin on
 * a GPU (test/recorded/<name>.<rank>.trace, written by test/recorder.c; how
 * they were made: test/recorded/README.md) into a freshly loaded plugin, then
 * compares what the plugin wrote with what the ring held on the GPU machine
 * (<name>.<rank>.calls, 64-byte records as a reader saw them there).
 *
 * Calls are replayed in the recorded order on one thread; gaps between calls
 * over 250 ms are kept, up to 300 ms each (the sweeper scans every 250 ms;
 * shorter gaps do not change what the plugin writes: replays without any
 * sleep gave the same records). Handles and
 * contexts are mapped from the recorded values to this run's. Compared: every
 * record's kind, op, flags, rank, comm, seq, bytes, comm_rank, peer, nranks
 * and aux (as multisets), and the duration of each GPU-timed completion
 * (within 2 us: the GPU stamps are replayed as recorded). Host times differ.
 * Device entries (GPU_TIMED, COMPLETED clear: a kernel that ran 100 ms without
 * completing) are newer than the recordings: they are checked apart, against the
 * completion of the same call and against what each run did (a rank waiting on
 * its peer's hang gets them; the rank that hangs, host or GPU, does not).
 * HARNESS_RECORDED names the directory (default test/recorded);
 * HARNESS_RECORDED_DUMP, a directory, receives what each replay wrote.
 */
#include <dirent.h>
#include <inttypes.h>

#include "harness.h"

#define MAX_MAP 8192
#define MAX_RECS 65536
#define GAP_MIN_NS 250000000LL
#define GAP_CAP_NS 300000000LL

struct map { uint64_t from[MAX_MAP]; void* to[MAX_MAP]; int n; };

static void* map_get(struct map* m, uint64_t from) {
  for (int i = m->n - 1; i >= 0; i--)
    if (m->from[i] == from) return m->to[i];
  return (void*)(uintptr_t)from; /* not ours (or never seen): passed on as NCCL passed it */
}

static void map_put(struct map* m, uint64_t from, void* to) {
  for (int i = 0; i < m->n; i++)
    if (m->from[i] == from) { m->to[i] = to; return; }
  if (m->n < MAX_MAP) { m->from[m->n] = from; m->to[m->n] = to; m->n++; }
}

/* NCCL passes static strings; the plugin caches names by address: intern them. */
static const char* intern(const char* s) {
  static char* names[256];
  static int n;
  if (strcmp(s, "-") == 0) return NULL;
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], s) == 0) return names[i];
  if (n == 256) return "overflow";
  names[n] = strdup(s);
  return names[n++];
}

static uint64_t hex(const char* s) {
  if (strcmp(s, "(nil)") == 0) return 0;
  return strtoull(s, NULL, 16);
}

struct key { uint8_t kind, op; uint16_t flags; int32_t rank; uint64_t comm, seq, bytes;
             int32_t comm_rank, peer; uint32_t nranks, aux; int64_t dur; };

static struct key key_of(const struct cw_record* r) {
  struct key k;
  memset(&k, 0, sizeof(k));
  k.kind = r->kind; k.op = r->op; k.flags = r->flags; k.rank = r->rank; k.comm = r->comm;
  k.seq = r->seq; k.bytes = r->bytes; k.comm_rank = r->comm_rank; k.peer = r->peer;
  k.nranks = r->nranks; k.aux = r->aux;
  k.dur = (r->flags & CW_FLAG_GPU_TIMED) ? r->t_end_ns - r->t_start_ns : 0;
  return k;
}

static int key_cmp(const void* a, const void* b) {
  const struct key *x = a, *y = b;
#define CMP(f) if (x->f != y->f) return x->f < y->f ? -1 : 1
  CMP(comm); CMP(kind); CMP(op); CMP(seq); CMP(peer); CMP(flags); CMP(rank); CMP(bytes);
  CMP(comm_rank); CMP(nranks); CMP(aux);
#undef CMP
  return 0;
}

static void print_key(const char* tag, const struct key* k) {
  fprintf(stderr, "    %s kind %u op %u flags 0x%x comm %016" PRIx64 " seq %" PRIu64
          " peer %d bytes %" PRIu64 " aux %u dur %" PRId64 "\n",
          tag, k->kind, k->op, k->flags, k->comm, k->seq, k->peer, k->bytes, k->aux, k->dur);
}

static size_t read_calls(const char* path, struct cw_record* out, size_t max) {
  FILE* f = fopen(path, "rb");
  size_t n;
  if (f == NULL) return 0;
  n = fread(out, sizeof(*out), max, f);
  fclose(f);
  return n;
}

/* Replays one trace; returns the number of records the plugin wrote into out. */
static size_t replay(const char* trace, const char* job, const char* rank, struct cw_record* out,
                     size_t max) {
  static struct map ctxs, handles;
  struct plugin p;
  struct tail t;
  char path[1024], line[1024];
  int version = 5, tail_ok = 0;
  int64_t last_t = -1;
  size_t n = 0;
  FILE* f = fopen(trace, "r");
  memset(&ctxs, 0, sizeof(ctxs));
  memset(&handles, 0, sizeof(handles));
  CHECK(f != NULL, "cannot open %s", trace);
  if (f == NULL) return 0;
  set_job(job, rank);
  setenv("COMMWATCH_DEVICE_ENTRY_MS", "100", 1); /* the replay keeps at most 300 ms of a gap */
  if (plugin_load(&p, g_lib) != 0) { fclose(f); g_failures++; return 0; }
  ring_path(path, sizeof(path), job, "");
  snprintf(path + strlen(path), sizeof(path) - strlen(path), "%s.ring", rank);

  while (fgets(line, sizeof(line), f) != NULL) {
    char* tok[32];
    int nt = 0;
    for (char* s = strtok(line, " \n"); s != NULL && nt < 32; s = strtok(NULL, " \n")) tok[nt++] = s;
    if (nt == 0) continue;
    if (tok[0][0] == 'V') { version = atoi(tok[1]); continue; }
    if (nt < 3) continue;
    int64_t ts = strtoll(tok[1], NULL, 10);
    if (last_t >= 0 && ts - last_t > GAP_MIN_NS) {
      int64_t gap = ts - last_t > GAP_CAP_NS ? GAP_CAP_NS : ts - last_t;
      struct timespec sl = {0, (long)gap};
      nanosleep(&sl, NULL);
    }
    last_t = ts;
    switch (tok[0][0]) {
      case 'I': { /* I t tid ctx comm nNodes nranks rank mask result name */
        void* ctx = NULL;
        int res, want_mask = atoi(tok[8]);
        uint64_t comm = hex(tok[4]);
        if (version == 4)
          res = p.v4->init(&ctx, &nccl_mask, "replay", comm, atoi(tok[5]), atoi(tok[6]), atoi(tok[7]), nccl_log);
        else if (version == 5)
          res = p.v5->init(&ctx, comm, &nccl_mask, "replay", atoi(tok[5]), atoi(tok[6]), atoi(tok[7]), nccl_log);
        else
          res = p.v6->init(&ctx, comm, &nccl_mask, "replay", atoi(tok[5]), atoi(tok[6]), atoi(tok[7]), nccl_log);
        CHECK(res == atoi(tok[9]), "init result %d, recorded %s", res, tok[9]);
        CHECK(res != ncclSuccess || nccl_mask == want_mask, "mask %d, recorded %d", nccl_mask, want_mask);
        map_put(&ctxs, hex(tok[3]), ctx);
        if (!tail_ok && res == ncclSuccess) tail_ok = tail_open(&t, path) == 0;
        break;
      }
      case 'S': { /* S t tid ctx handle type parent rank fields... */
        ncclProfilerEventDescr_v6_t d;
        void* h = NULL;
        uint64_t type = strtoull(tok[5], NULL, 10);
        char** v = tok + 8;
        int nv = nt - 8;
        memset(&d, 0, sizeof(d));
        d.type = type;
        d.parentObj = map_get(&handles, hex(tok[6]));
        d.rank = atoi(tok[7]);
        if (type == ncclProfileColl && nv >= 10) {
          d.coll.seqNumber = strtoull(v[0], NULL, 10); d.coll.func = intern(v[1]);
          d.coll.count = strtoull(v[2], NULL, 10); d.coll.root = atoi(v[3]);
          d.coll.datatype = intern(v[4]); d.coll.nChannels = (uint8_t)atoi(v[5]);
          d.coll.nWarps = (uint8_t)atoi(v[6]); d.coll.algo = intern(v[7]); d.coll.proto = intern(v[8]);
          d.coll.parentGroup = map_get(&handles, hex(v[9]));
        } else if (type == ncclProfileP2p && nv >= 6) {
          d.p2p.func = intern(v[0]); d.p2p.datatype = intern(v[1]);
          d.p2p.count = strtoull(v[2], NULL, 10); d.p2p.peer = atoi(v[3]);
          d.p2p.nChannels = (uint8_t)atoi(v[4]); d.p2p.parentGroup = map_get(&handles, hex(v[5]));
        } else if (type == ncclProfileKernelCh && nv >= 2) {
          d.kernelCh.channelId = (uint8_t)atoi(v[0]); d.kernelCh.pTimer = strtoull(v[1], NULL, 10);
        } else if (type == ncclProfileCollApi && nv >= 5) {
          d.collApi.func = intern(v[0]); d.collApi.count = strtoull(v[1], NULL, 10);
          d.collApi.datatype = intern(v[2]); d.collApi.root = atoi(v[3]);
          d.collApi.graphCaptured = atoi(v[4]) != 0;
        } else if (type == ncclProfileP2pApi && nv >= 4) {
          d.p2pApi.func = intern(v[0]); d.p2pApi.count = strtoull(v[1], NULL, 10);
          d.p2pApi.datatype = intern(v[2]); d.p2pApi.graphCaptured = atoi(v[3]) != 0;
        } else if (type == ncclProfileGroupApi && nv >= 2) {
          d.groupApi.graphCaptured = atoi(v[0]) != 0; d.groupApi.groupDepth = atoi(v[1]);
        } else if (type == ncclProfileProxyOp && nv >= 6) {
          d.proxyOp.pid = atoi(v[0]); d.proxyOp.channelId = (uint8_t)atoi(v[1]);
          d.proxyOp.peer = atoi(v[2]); d.proxyOp.nSteps = atoi(v[3]);
          d.proxyOp.chunkSize = atoi(v[4]); d.proxyOp.isSend = atoi(v[5]);
        } else if (type == ncclProfileProxyStep && nv >= 1) {
          d.proxyStep.step = atoi(v[0]);
        }
        void* ctx = map_get(&ctxs, hex(tok[3]));
        if (version == 4) {
          ncclProfilerEventDescr_v4_t d4;
          memset(&d4, 0, sizeof(d4));
          d4.type = (uint8_t)type;
          d4.parentObj = d.parentObj;
          d4.rank = d.rank;
          memcpy(&d4.coll, &d.coll, sizeof(d4.coll) < sizeof(d.coll) ? sizeof(d4.coll) : sizeof(d.coll));
          p.v4->startEvent(ctx, &h, &d4);
        } else if (version == 5) {
          p.v5->startEvent(ctx, &h, (ncclProfilerEventDescr_v5_t*)&d);
        } else {
          p.v6->startEvent(ctx, &h, &d);
        }
        if (hex(tok[4]) != 0) map_put(&handles, hex(tok[4]), h);
        break;
      }
      case 'E':
        p.v5->stopEvent(map_get(&handles, hex(tok[3])));
        break;
      case 'R': {
        ncclProfilerEventStateArgs_t a;
        uint64_t arg = strtoull(tok[5], NULL, 10);
        memcpy(&a, &arg, sizeof(arg));
        p.v5->recordEventState(map_get(&handles, hex(tok[3])), (ncclProfilerEventState_t)atoi(tok[4]), &a);
        break;
      }
      case 'F':
        p.v5->finalize(map_get(&ctxs, hex(tok[3])));
        break;
      default:
        break;
    }
    if (tail_ok) n += tail_poll(&t, out + n, max - n);
  }
  fclose(f);
  sleep_ms(60); /* the sweeper's grace (rule 2) for the last operations */
  dlclose(p.dl); /* what was never finalized is closed as at process exit */
  if (tail_ok) {
    n += tail_poll(&t, out + n, max - n);
    tail_close(&t);
  }
  return n;
}

static int starts_with(const char* s, const char* prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* Moves the device entries out of recs (keeping the order of the rest) and checks
 * them: each names a call that completed GPU-timed (its start time is not compared:
 * a replay runs faster than the GPU stamps it replays, which skews the offset
 * estimate; the scripted scenario checks it), and in the hang runs
 * rank 0, which waits, has some, and rank 1, which hangs, has none. */
static size_t device_entries(const char* base, struct cw_record* recs, size_t* n) {
  static struct cw_record dev[MAX_RECS];
  size_t nd = 0, k = 0;
  for (size_t i = 0; i < *n; i++) {
    if ((recs[i].flags & (CW_FLAG_GPU_TIMED | CW_FLAG_COMPLETED)) == CW_FLAG_GPU_TIMED) dev[nd++] = recs[i];
    else recs[k++] = recs[i];
  }
  *n = k;
  for (size_t i = 0; i < nd; i++) {
    int matched = 0;
    for (size_t j = 0; j < k && !matched; j++)
      matched = recs[j].comm == dev[i].comm && recs[j].seq == dev[i].seq && recs[j].op == dev[i].op &&
                recs[j].peer == dev[i].peer && (recs[j].flags & GPU_OK) == GPU_OK && dev[i].t_end_ns == 0;
    CHECK(matched, "%s: device entry of seq %" PRIu64 " has no GPU-timed completion", base, dev[i].seq);
  }
  if (starts_with(base, "hang-nccl.") || starts_with(base, "gpuhang-nccl.")) {
    int waiter = base[strlen(base) - 1] == '0';
    CHECK(waiter ? nd > 0 : nd == 0, "%s: %zu device entries (rank %s)", base, nd, waiter ? "0 waits" : "1 hangs");
  }
  return nd;
}

static int ends_with(const char* s, const char* suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

void scenario_recorded(void) {
  static struct cw_record got[MAX_RECS], want[MAX_RECS];
  static struct key kg[MAX_RECS], kw[MAX_RECS];
  const char* dir = getenv("HARNESS_RECORDED");
  char base[512], trace[1024], calls[1024], job[256], rank[32];
  struct dirent* e;
  int traces = 0;
  DIR* d;
  if (dir == NULL || dir[0] == '\0') dir = "test/recorded";
  d = opendir(dir);
  CHECK(d != NULL, "no directory %s", dir);
  if (d == NULL) return;
  while ((e = readdir(d)) != NULL) {
    char* dot;
    if (!ends_with(e->d_name, ".trace")) continue;
    snprintf(base, sizeof(base), "%.*s", (int)(strlen(e->d_name) - strlen(".trace")), e->d_name);
    dot = strrchr(base, '.'); /* <name>.<rank> */
    if (dot == NULL) continue;
    snprintf(job, sizeof(job), "replay-%.*s", (int)(dot - base), base);
    snprintf(rank, sizeof(rank), "%s", dot + 1);
    snprintf(trace, sizeof(trace), "%s/%s", dir, e->d_name);
    snprintf(calls, sizeof(calls), "%s/%s.calls", dir, base);
    size_t nw = read_calls(calls, want, MAX_RECS);
    size_t ng = replay(trace, job, rank, got, MAX_RECS);
    int before = g_failures;
    const char* dump = getenv("HARNESS_RECORDED_DUMP"); /* a directory: what this replay wrote */
    traces++;
    if (dump != NULL && dump[0] != '\0') {
      char out[1024];
      snprintf(out, sizeof(out), "%s/%s.replayed", dump, base);
      FILE* fo = fopen(out, "wb");
      if (fo != NULL) { fwrite(got, sizeof(got[0]), ng, fo); fclose(fo); }
    }
    CHECK(nw > 0, "%s: no recorded records", calls);
    size_t ndev = device_entries(base, got, &ng);
    for (size_t i = 0; i < ng; i++) kg[i] = key_of(&got[i]);
    for (size_t i = 0; i < nw; i++) kw[i] = key_of(&want[i]);
    qsort(kg, ng, sizeof(kg[0]), key_cmp);
    qsort(kw, nw, sizeof(kw[0]), key_cmp);
    CHECK(ng == nw, "%s: %zu records replayed, %zu recorded on the GPU", base, ng, nw);
    for (size_t i = 0; i < ng && i < nw; i++) {
      int64_t dd = kg[i].dur - kw[i].dur;
      if (key_cmp(&kg[i], &kw[i]) != 0 || dd > 2000 || dd < -2000) {
        CHECK(0, "%s: record %zu differs", base, i);
        print_key("replayed", &kg[i]);
        print_key("recorded", &kw[i]);
        break;
      }
    }
    printf("  recorded %s: %zu records, %s; %zu device entries\n", base, ng,
           g_failures == before ? "same" : "DIFFERENT", ndev);
  }
  closedir(d);
  CHECK(traces > 0, "no traces in %s", dir);
}
