/*
 * Life of the per-rank ring file (init and finalize paths only; RING.md,
 * "Liveness and restarts").
 *
 * The file is built under a hidden temporary name, locked, sized, zeroed and
 * given its header, then installed under its real name with link(2), which
 * fails rather than replace a file that exists. An existing file whose lock can
 * be taken belongs to a writer that is gone: it is replaced with rename(2), so
 * a reader that still maps the old file keeps reading it intact. A file whose
 * lock is held belongs to a live writer (or to the agent draining it): this
 * writer then uses `<rank>.<pid>.ring`.
 */
#include "ring.h"

#include "clock.h"

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

/* 1: a live process holds path's lock; 0: nobody does (the caller now holds it
 * on *fd_out); -1: path does not exist; -2: error. */
static int probe_lock(const char* path, int* fd_out) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? -1 : -2;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    close(fd);
    return e == EWOULDBLOCK ? 1 : -2;
  }
  *fd_out = fd;
  return 0;
}

/* Puts the finished temporary file under `<name>.ring`, or `<name>.<pid>.ring`
 * when a live writer holds the first. Leaves the final name in r->path. */
static int install(struct cw_ring* r, const char* tmp, const char* dir, const char* name,
                   char* err, size_t err_len) {
  for (int candidate = 0; candidate < 2; candidate++) {
    if (candidate == 0)
      snprintf(r->path, sizeof(r->path), "%s/%s.ring", dir, name);
    else
      snprintf(r->path, sizeof(r->path), "%s/%s.%d.ring", dir, name, (int)getpid());
    for (int attempt = 0; attempt < 4; attempt++) {
      int old_fd = -1;
      int held;
      if (link(tmp, r->path) == 0) return 0;
      if (errno != EEXIST) goto fail;
      held = probe_lock(r->path, &old_fd);
      if (held == 0) { /* left by a writer that is gone: replace it; the old inode stays readable */
        int ok = rename(tmp, r->path) == 0;
        close(old_fd);
        if (ok) return 0;
        goto fail;
      }
      if (held == 1) break; /* a live writer (or the agent draining it): next name */
      if (held == -2) goto fail;
      /* held == -1: it vanished between link and open; try again */
    }
  }
  errno = EEXIST;
fail:
  snprintf(err, err_len, "cannot install ring file %s: %s", r->path, strerror(errno));
  return -1;
}

int cw_ring_open(struct cw_ring* r, const struct cw_settings* s, char* err, size_t err_len) {
  char dir[CW_RING_DIR_MAX + 72];
  char name[32];
  char tmp[CW_RING_DIR_MAX + 128];
  int fd = -1;
  void* map = MAP_FAILED;
  uint64_t* done = NULL;
  size_t len = CW_RING_SLOT_OFFSET(s->ring_capacity);
  struct cw_ring_header* h;
  struct stat st;

  memset(r, 0, sizeof(*r));
  r->fd = -1;
  snprintf(dir, sizeof(dir), "%s/%s", s->ring_dir, s->job_id);
  if (make_dirs(dir, err, err_len) != 0) return -1;
  if (s->rank >= 0)
    snprintf(name, sizeof(name), "%d", (int)s->rank);
  else
    snprintf(name, sizeof(name), "pid-%d", (int)getpid());
  /* Unique even across PID namespaces that share the directory. */
  snprintf(tmp, sizeof(tmp), "%s/.%s.%d.%lld.tmp", dir, name, (int)getpid(),
           (long long)cw_realtime_ns());
  fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    snprintf(err, err_len, "cannot create ring file %s: %s", tmp, strerror(errno));
    goto fail;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    snprintf(err, err_len, "cannot lock ring file %s: %s", tmp, strerror(errno));
    goto fail;
  }
  done = calloc((size_t)s->ring_capacity, sizeof(*done));
  if (done == NULL) {
    snprintf(err, err_len, "out of memory for %llu ring slots", (unsigned long long)s->ring_capacity);
    goto fail;
  }
  if (ftruncate(fd, (off_t)len) != 0) {
    snprintf(err, err_len, "cannot size ring file %s to %zu bytes: %s", tmp, len, strerror(errno));
    goto fail;
  }
  map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    snprintf(err, err_len, "cannot map ring file %s: %s", tmp, strerror(errno));
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

  if (install(r, tmp, dir, name, err, err_len) < 0) goto fail;
  unlink(tmp); /* after link(2) the real name remains; after rename(2) it is gone already */
  if (fstat(fd, &st) != 0) {
    snprintf(err, err_len, "cannot stat ring file %s: %s", r->path, strerror(errno));
    unlink(r->path);
    goto fail_installed;
  }
  r->hdr = h;
  r->slots = (struct cw_record*)(void*)((char*)map + CW_RING_HEADER_SIZE);
  r->mask = s->ring_capacity - 1;
  r->done = done;
  r->map_len = len;
  r->fd = fd;
  r->owner = getpid();
  r->dev = st.st_dev;
  r->ino = st.st_ino;
  return 0;

fail:
  if (fd >= 0) unlink(tmp);
fail_installed:
  free(done);
  if (map != MAP_FAILED) munmap(map, len);
  if (fd >= 0) close(fd);
  r->fd = -1;
  return -1;
}

void cw_ring_close(struct cw_ring* r, int64_t now) {
  struct stat st;
  if (r->hdr == NULL || r->fd < 0) return;
  if (r->owner == getpid()) {
    cw_ring_advance(r);
    __atomic_store_n(&r->hdr->heartbeat_ns, now, __ATOMIC_RELAXED);
    __atomic_store_n(&r->hdr->closed, 1, __ATOMIC_RELEASE);
    /* Only the file this writer created: never a successor's under the same name. */
    if (stat(r->path, &st) == 0 && st.st_dev == r->dev && st.st_ino == r->ino) unlink(r->path);
  }
  close(r->fd); /* releases the lock: the writer is gone */
  r->fd = -1;
}

void cw_ring_unmap(struct cw_ring* r) {
  if (r->hdr == NULL) return; /* never opened (a zeroed struct's fd 0 is not ours) */
  if (r->fd >= 0) close(r->fd);
  munmap(r->hdr, r->map_len);
  free(r->done);
  memset(r, 0, sizeof(*r));
  r->fd = -1;
}

void cw_ring_detach_child(struct cw_ring* r) {
  if (r->hdr == NULL) return;
  if (r->fd >= 0) close(r->fd); /* the parent's descriptor keeps the lock */
  r->fd = -1;
  /* Same addresses, private memory: nothing written here reaches the parent's ring. */
  (void)mmap(r->hdr, r->map_len, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS,
             -1, 0);
}
