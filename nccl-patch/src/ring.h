/*
 * Writer side of the per-rank shared-memory ring (layout: include/commwatch_ring.h,
 * protocol: RING.md). cw_ring_put never blocks, allocates, locks or calls the kernel.
 */
#ifndef COMMWATCH_RING_WRITER_H_
#define COMMWATCH_RING_WRITER_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "commwatch_ring.h"
#include "settings.h"

struct cw_ring {
  struct cw_ring_header* hdr;
  struct cw_record* slots;
  uint64_t mask;     /* capacity - 1 */
  uint64_t* done;    /* process-local: 1 + highest index marked published in slot s */
  size_t map_len;
  int fd;            /* open while the ring is live: holds the flock that says so */
  pid_t owner;       /* the process that created the file (a forked child is not) */
  dev_t dev;         /* the file this writer created, to unlink nothing else */
  ino_t ino;
  char path[CW_RING_DIR_MAX + 128];
};

/* Creates a fresh ring file, locked, and maps it. Returns 0, or -1 with err. */
int cw_ring_open(struct cw_ring* r, const struct cw_settings* s, char* err, size_t err_len);
/* Finalize: publishes everything, sets `closed`, unlinks the file, releases the
 * lock. The mapping stays until cw_ring_unmap (late events write harmlessly). */
void cw_ring_close(struct cw_ring* r, int64_t now);
void cw_ring_unmap(struct cw_ring* r);
/* In a forked child: drop the inherited lock and detach from the parent's file. */
void cw_ring_detach_child(struct cw_ring* r);

/* Moves commit_index over every contiguously published index (helping). */
static inline void cw_ring_advance(struct cw_ring* r) {
  struct cw_ring_header* h = r->hdr;
  uint64_t c = __atomic_load_n(&h->commit_index, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(&r->done[c & r->mask], __ATOMIC_SEQ_CST) > c) {
    if (__atomic_compare_exchange_n(&h->commit_index, &c, c + 1, 0, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST))
      c++;
  }
}

/* Publishes one record. The writer that finds commit_index at its own index
 * (no older record in flight: the usual case) moves it with one compare-and-swap;
 * one that finishes out of order marks its index in `done` and leaves the move
 * to the writer in front, which looks for such marks after its own move. */
static inline void cw_ring_put(struct cw_ring* r, const struct cw_record* rec, int64_t now_ns) {
  struct cw_ring_header* h = r->hdr;
  uint64_t idx = __atomic_fetch_add(&h->write_index, 1, __ATOMIC_RELAXED);
  uint64_t c = __atomic_load_n(&h->commit_index, __ATOMIC_ACQUIRE);
  uint64_t* dst = (uint64_t*)(void*)&r->slots[idx & r->mask];
  uint64_t src[8];

  /* The slot's previous lap (idx - capacity) must be published before reuse. */
  if (__builtin_expect(idx - c <= r->mask, 1)) {
    memcpy(src, rec, sizeof(src));
    __atomic_store_n(&dst[0], src[0] & ~(uint64_t)0xff, __ATOMIC_RELAXED); /* kind = 0 */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    for (int i = 1; i < 8; i++) __atomic_store_n(&dst[i], src[i], __ATOMIC_RELAXED);
    __atomic_store_n(&dst[0], src[0], __ATOMIC_RELEASE); /* publish the kind */
  } else {
    __atomic_fetch_add(&h->dropped, 1, __ATOMIC_RELAXED);
  }

  if (c == idx && __atomic_compare_exchange_n(&h->commit_index, &c, idx + 1, 0, __ATOMIC_SEQ_CST,
                                              __ATOMIC_RELAXED)) {
    if (__builtin_expect(__atomic_load_n(&r->done[(idx + 1) & r->mask], __ATOMIC_SEQ_CST) > idx + 1, 0))
      cw_ring_advance(r);
  } else {
    uint64_t* d = &r->done[idx & r->mask];
    uint64_t old = __atomic_load_n(d, __ATOMIC_RELAXED);
    while (old < idx + 1 &&
           !__atomic_compare_exchange_n(d, &old, idx + 1, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
    }
    cw_ring_advance(r);
  }
  __atomic_store_n(&h->heartbeat_ns, now_ns, __ATOMIC_RELAXED);
}

static inline void cw_ring_count_dropped(struct cw_ring* r, uint64_t n) {
  __atomic_fetch_add(&r->hdr->dropped, n, __ATOMIC_RELAXED);
}

#endif /* COMMWATCH_RING_WRITER_H_ */
