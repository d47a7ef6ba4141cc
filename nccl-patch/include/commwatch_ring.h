/*
 * commwatch per-rank shared-memory ring: file layout (see nccl-patch/RING.md).
 *
 * A 256-byte header followed by `capacity` 64-byte struct cw_record slots.
 * Fields marked (atomic) are accessed with __atomic builtins by writers.
 * The writer holds an exclusive flock on the file for as long as it lives.
 */
#ifndef COMMWATCH_RING_H_
#define COMMWATCH_RING_H_

#include <stddef.h>
#include <stdint.h>

#include "commwatch_record.h"

#define CW_RING_MAGIC       "CWRING01"
#define CW_RING_MAGIC_LEN   8
#define CW_RING_VERSION     1
#define CW_RING_HEADER_SIZE 256
#define CW_RING_JOB_ID_LEN  64

struct cw_ring_header {
  char     magic[CW_RING_MAGIC_LEN];    /*   0: "CWRING01", written last at creation */
  uint32_t version;                     /*   8: CW_RING_VERSION */
  uint32_t record_size;                 /*  12: 64 */
  uint64_t capacity;                    /*  16: slots, a power of two */
  uint64_t write_index;                 /*  24: (atomic) records ever reserved */
  uint64_t dropped;                     /*  32: (atomic) records the writer could not write */
  int64_t  heartbeat_ns;                /*  40: (relaxed) CLOCK_REALTIME of the last event */
  int32_t  pid;                         /*  48: writer pid */
  int32_t  rank;                        /*  52: global rank, -1 if unknown */
  uint32_t uid;                         /*  56: writer uid */
  uint32_t closed;                      /*  60: (atomic) 1 once the writer finalized: no more records */
  char     job_id[CW_RING_JOB_ID_LEN];  /*  64: NUL-padded */
  uint64_t commit_index;                /* 128: (atomic) every index below it is published */
  uint8_t  reserved1[120];              /* 136..255: zero */
};

_Static_assert(sizeof(struct cw_ring_header) == CW_RING_HEADER_SIZE, "header is 256 bytes");
_Static_assert(offsetof(struct cw_ring_header, magic) == 0, "magic @0");
_Static_assert(offsetof(struct cw_ring_header, version) == 8, "version @8");
_Static_assert(offsetof(struct cw_ring_header, record_size) == 12, "record_size @12");
_Static_assert(offsetof(struct cw_ring_header, capacity) == 16, "capacity @16");
_Static_assert(offsetof(struct cw_ring_header, write_index) == 24, "write_index @24");
_Static_assert(offsetof(struct cw_ring_header, dropped) == 32, "dropped @32");
_Static_assert(offsetof(struct cw_ring_header, heartbeat_ns) == 40, "heartbeat_ns @40");
_Static_assert(offsetof(struct cw_ring_header, pid) == 48, "pid @48");
_Static_assert(offsetof(struct cw_ring_header, rank) == 52, "rank @52");
_Static_assert(offsetof(struct cw_ring_header, uid) == 56, "uid @56");
_Static_assert(offsetof(struct cw_ring_header, closed) == 60, "closed @60");
_Static_assert(offsetof(struct cw_ring_header, job_id) == 64, "job_id @64");
_Static_assert(offsetof(struct cw_ring_header, commit_index) == 128, "commit_index @128");
_Static_assert(offsetof(struct cw_ring_header, reserved1) == 136, "reserved1 @136");

/* Byte offset of slot i (0 <= i < capacity) from the start of the file. */
#define CW_RING_SLOT_OFFSET(i) ((size_t)CW_RING_HEADER_SIZE + (size_t)(i) * CW_RECORD_SIZE)

#endif /* COMMWATCH_RING_H_ */
