/*
 * Reference reader of the commwatch ring, following RING.md step by step.
 * Used by the harness; the Python node agent implements the same steps.
 */
#ifndef COMMWATCH_RING_READER_H_
#define COMMWATCH_RING_READER_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "commwatch_ring.h"

struct cw_reader {
  const struct cw_ring_header* h;
  const struct cw_record* slots;
  uint64_t capacity;
  uint64_t next;  /* next index to read */
  uint64_t lost;  /* overwritten before they were read */
  uint64_t torn;  /* committed slots whose kind was not 1..3 */
};

static inline void cw_reader_attach(struct cw_reader* rd, const void* map) {
  memset(rd, 0, sizeof(*rd));
  rd->h = (const struct cw_ring_header*)map;
  rd->slots = (const struct cw_record*)(const void*)((const char*)map + CW_RING_HEADER_SIZE);
  rd->capacity = rd->h->capacity;
}

/* Copies the records committed since the last call into out[0..max) and
 * returns how many are valid. */
static inline size_t cw_reader_poll(struct cw_reader* rd, struct cw_record* out, size_t max) {
  uint64_t cap = rd->capacity;
  uint64_t c = __atomic_load_n(&rd->h->commit_index, __ATOMIC_ACQUIRE);   /* 1 */
  uint64_t first, end, w2;
  size_t n = 0;
  if (c - rd->next > cap) {                                                /* 2 */
    rd->lost += c - cap - rd->next;
    rd->next = c - cap;
  }
  first = rd->next;
  end = c - first > max ? first + max : c;
  for (uint64_t i = first; i < end; i++)                                   /* 3 */
    memcpy(&out[i - first], &rd->slots[i & (cap - 1)], sizeof(struct cw_record));
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  w2 = __atomic_load_n(&rd->h->write_index, __ATOMIC_ACQUIRE);             /* 4 */
  for (uint64_t i = first; i < end; i++) {
    const struct cw_record* r = &out[i - first];
    if (w2 > cap && i < w2 - cap) {                                        /* 5 */
      rd->lost++;
    } else if (r->kind < CW_KIND_CALL || r->kind > CW_KIND_COMM_DESTROY) { /* 6 */
      rd->torn++;
    } else {
      if (&out[n] != r) out[n] = *r;
      n++;
    }
  }
  rd->next = end;                                                          /* 7 */
  return n;
}

#endif /* COMMWATCH_RING_READER_H_ */
