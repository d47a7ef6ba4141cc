/* Creation and teardown of the per-rank ring file (init path only). */
#include "ring.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir -p; every missing component gets mode 0755. */
static int make_dirs(const char* path, char* err, size_t err_len) {
  char buf[CW_RING_DIR_MAX + 128];
  size_t n = strlen(path);
  if (n >= sizeof(buf)) {
    snprintf(err, err_len, "ring directory path too long: %s", path);
    return -1;
  }
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    char saved = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
      snprintf(err, err_len, "cannot create ring directory %s: %s", buf, strerror(errno));
      return -1;
    }
    buf[i] = saved;
  }
  return 0;
}

/* Opens path and takes an exclusive flock. Returns the fd, -1 on error, or
 * -2 when another live process holds the file. */
static int open_locked(const char* path, char* err, size_t err_len) {
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    snprintf(err, err_len, "cannot open ring file %s: %s", path, strerror(errno));
    return -1;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    close(fd);
    if (e == EWOULDBLOCK) return -2;
    snprintf(err, err_len, "cannot lock ring file %s: %s", path, strerror(e));
    return -1;
  }
  return fd;
}

/* Maps the file if it already is this process's ring of the same capacity
 * (NCCL unloaded and reloaded the plugin); MAP_FAILED otherwise. */
static void* map_existing(int fd, size_t len, uint64_t capacity) {
  struct stat st;
  if (fstat(fd, &st) != 0 || (size_t)st.st_size != len) return MAP_FAILED;
  void* map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return MAP_FAILED;
  const struct cw_ring_header* h = (const struct cw_ring_header*)map;
  if (memcmp(h->magic, CW_RING_MAGIC, CW_RING_MAGIC_LEN) == 0 && h->version == CW_RING_VERSION &&
      h->record_size == CW_RECORD_SIZE && h->capacity == capacity && h->pid == (int32_t)getpid())
    return map;
  munmap(map, len);
  return MAP_FAILED;
}

int cw_ring_open(struct cw_ring* r, const struct cw_settings* s, char* err, size_t err_len) {
  char dir[CW_RING_DIR_MAX + 72];
  int fd = -1;
  void* map = MAP_FAILED;
  uint64_t* done = NULL;
  size_t len = CW_RING_SLOT_OFFSET(s->ring_capacity);
  struct cw_ring_header* h;

  memset(r, 0, sizeof(*r));
  r->fd = -1;
  snprintf(dir, sizeof(dir), "%s/%s", s->ring_dir, s->job_id);
  if (make_dirs(dir, err, err_len) != 0) goto fail;

  if (s->rank >= 0)
    snprintf(r->path, sizeof(r->path), "%s/%d.ring", dir, (int)s->rank);
  else
    snprintf(r->path, sizeof(r->path), "%s/pid-%d.ring", dir, (int)getpid());
  fd = open_locked(r->path, err, err_len);
  if (fd == -2) { /* same job and rank already live on this host: keep both */
    snprintf(r->path, sizeof(r->path), "%s/%d.%d.ring", dir, (int)s->rank, (int)getpid());
    fd = open_locked(r->path, err, err_len);
    if (fd == -2) snprintf(err, err_len, "ring file %s is locked by another process", r->path);
  }
  if (fd < 0) goto fail;

  done = calloc((size_t)s->ring_capacity, sizeof(*done));
  if (done == NULL) {
    snprintf(err, err_len, "out of memory for %llu ring slots",
             (unsigned long long)s->ring_capacity);
    goto fail;
  }
  map = map_existing(fd, len, s->ring_capacity);
  if (map != MAP_FAILED) { /* this process reloaded the plugin: keep its records */
    h = (struct cw_ring_header*)map;
    uint64_t w = __atomic_load_n(&h->write_index, __ATOMIC_ACQUIRE);
    for (uint64_t i = w > s->ring_capacity ? w - s->ring_capacity : 0; i < w; i++)
      done[i & (s->ring_capacity - 1)] = i + 1;
    __atomic_store_n(&h->commit_index, w, __ATOMIC_RELEASE);
  } else {
    /* Truncate to zero first so a file left by an earlier run starts out empty. */
    if (ftruncate(fd, 0) != 0 || ftruncate(fd, (off_t)len) != 0) {
      snprintf(err, err_len, "cannot size ring file %s to %zu bytes: %s", r->path, len,
               strerror(errno));
      goto fail;
    }
    map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
      snprintf(err, err_len, "cannot map ring file %s: %s", r->path, strerror(errno));
      goto fail;
    }
    /* Touch every page now so the event path never takes a page fault. */
    memset(map, 0, len);
    h = (struct cw_ring_header*)map;
    h->version = CW_RING_VERSION;
    h->record_size = CW_RECORD_SIZE;
    h->capacity = s->ring_capacity;
    h->pid = (int32_t)getpid();
    h->rank = s->rank;
    h->uid = (uint32_t)getuid();
    memcpy(h->job_id, s->job_id, strnlen(s->job_id, sizeof(h->job_id) - 1));
    __atomic_thread_fence(__ATOMIC_RELEASE);
    memcpy(h->magic, CW_RING_MAGIC, CW_RING_MAGIC_LEN); /* magic last: header complete */
  }

  r->hdr = h;
  r->slots = (struct cw_record*)(void*)((char*)map + CW_RING_HEADER_SIZE);
  r->mask = s->ring_capacity - 1;
  r->done = done;
  r->map_len = len;
  r->fd = fd;
  return 0;

fail:
  free(done);
  if (map != MAP_FAILED) munmap(map, len);
  if (fd >= 0) close(fd);
  r->fd = -1;
  return -1;
}

void cw_ring_close(struct cw_ring* r) {
  if (r->hdr != NULL) munmap(r->hdr, r->map_len);
  free(r->done);
  if (r->fd >= 0) close(r->fd);
  memset(r, 0, sizeof(*r));
  r->fd = -1;
}
