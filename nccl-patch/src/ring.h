/*
 * Writer side of the per-rank shared-memory ring (layout: include/commwatch_ring.h,
 * protocol: RING.md). cw_ring_put never blocks, allocates, locks or calls the kernel.
 */
#ifndef COMMWATCH_RING_WRITER_H_
#define COMMWATCH_RING_WRITER_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "commwatch_ring.h"
#include "settings.h"

struct cw_ring {
  struct cw_ring_header* hdr;
  struct cw_record* slots;
  uint64_t mask;     /* capacity - 1 */
  uint64_t* done;    /* process-local: done[s] = 1 + highest index published in slot s */
  size_t map_len;
  int fd;            /* kept open: holds the flock that marks the file as in use */
  char path[CW_RING_DIR_MAX + 128];
};

/* Creates (or takes over) the ring file and maps it. Returns 0, or -1 with err. */
int cw_ring_open(struct cw_ring* r, const struct cw_settings* s, char* err, size_t err_len);
void cw_ring_close(struct cw_ring* r);

/* Publishes one record: reserve, write with kind = 0, publish kind, then move
 * commit_index over every contiguously published index (lock-free helping). */
static inline void cw_ring_put(struct cw_ring* r, const struct cw_record* rec, int64_t now_ns) {
  struct cw_ring_header* h = r->hdr;
  uint64_t idx = __atomic_fetch_add(&h->write_index, 1, __ATOMIC_RELAXED);
  uint64_t s = idx & r->mask;
  uint64_t* dst = (uint64_t*)(void*)&r->slots[s];
  uint64_t src[8];
  uint64_t want = idx + 1;

  /* The slot's previous lap (idx - capacity) must be published before we reuse it. */
  if (idx > r->mask && __atomic_load_n(&r->done[s], __ATOMIC_ACQUIRE) < idx - r->mask) {
    __atomic_fetch_add(&h->dropped, 1, __ATOMIC_RELAXED);
  } else {
    memcpy(src, rec, sizeof(src));
    __atomic_store_n(&dst[0], src[0] & ~(uint64_t)0xff, __ATOMIC_RELAXED); /* kind = 0 */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    for (int i = 1; i < 8; i++) __atomic_store_n(&dst[i], src[i], __ATOMIC_RELAXED);
    __atomic_store_n((uint8_t*)dst, rec->kind, __ATOMIC_RELEASE); /* publish */
  }

  uint64_t d = __atomic_load_n(&r->done[s], __ATOMIC_RELAXED);
  while (d < want &&
         !__atomic_compare_exchange_n(&r->done[s], &d, want, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
  }
  uint64_t c = __atomic_load_n(&h->commit_index, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(&r->done[c & r->mask], __ATOMIC_SEQ_CST) > c) {
    if (__atomic_compare_exchange_n(&h->commit_index, &c, c + 1, 0, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST))
      c++;
  }
  __atomic_store_n(&h->heartbeat_ns, now_ns, __ATOMIC_RELAXED);
}

static inline void cw_ring_count_dropped(struct cw_ring* r, uint64_t n) {
  __atomic_fetch_add(&r->hdr->dropped, n, __ATOMIC_RELAXED);
}

#endif /* COMMWATCH_RING_WRITER_H_ */
