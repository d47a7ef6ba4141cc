/*
 * commwatch call record: wire contract v1, section 1 (shared/spec/wire-v1.md).
 *
 * One 64-byte little-endian record. The numpy dtype commwatch.wire.RECORD_DTYPE
 * has the same layout; tests/unit/test_nccl_plugin.py proves it.
 */
#ifndef COMMWATCH_RECORD_H_
#define COMMWATCH_RECORD_H_

#include <stddef.h>
#include <stdint.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "commwatch records are little-endian; this target is not"
#endif

#define CW_RECORD_SIZE 64

/* kind */
#define CW_KIND_CALL         1
#define CW_KIND_COMM_INIT    2
#define CW_KIND_COMM_DESTROY 3

/* op */
#define CW_OP_UNKNOWN       0
#define CW_OP_ALLREDUCE     1
#define CW_OP_ALLGATHER     2
#define CW_OP_REDUCESCATTER 3
#define CW_OP_BROADCAST     4
#define CW_OP_REDUCE        5
#define CW_OP_SEND          6
#define CW_OP_RECV          7
#define CW_OP_ALLTOALL      8
#define CW_OP_BARRIER       9
#define CW_OP_GATHER        10
#define CW_OP_SCATTER       11

/* flags */
#define CW_FLAG_COMPLETED      (1u << 0) /* t_end_ns is valid */
#define CW_FLAG_GPU_TIMED      (1u << 1) /* times come from the GPU (without COMPLETED: it started on the device) */
#define CW_FLAG_GRAPH_CAPTURED (1u << 2)
#define CW_FLAG_ENQUEUED       (1u << 3) /* t_start_ns is a host enqueue, not arrival */
#define CW_FLAG_COMPLETION_LOST (1u << 4) /* the probe gave up on this call's completion */

struct cw_record {
  uint8_t  kind;       /* CW_KIND_* ; 0 in a ring slot = not published */
  uint8_t  op;         /* CW_OP_* ; 0 for non-CALL kinds */
  uint16_t flags;      /* CW_FLAG_* */
  int32_t  rank;       /* global rank of the process, -1 if unknown */
  uint64_t comm;       /* NCCL commHash */
  uint64_t seq;        /* collectives: per comm; SEND/RECV: per (comm, peer, op) */
  int64_t  t_start_ns; /* CLOCK_REALTIME ns */
  int64_t  t_end_ns;   /* 0 until completed */
  uint64_t bytes;      /* count x datatype size */
  int32_t  comm_rank;  /* rank inside comm */
  int32_t  peer;       /* SEND/RECV: peer comm rank; rooted collectives: root; else -1 */
  uint32_t nranks;     /* size of comm */
  uint32_t aux;        /* COMM_INIT: nodes; collective CALL: NCCL seqNumber (low 32 bits) */
};

_Static_assert(sizeof(struct cw_record) == CW_RECORD_SIZE, "record is 64 bytes");
_Static_assert(offsetof(struct cw_record, kind) == 0, "kind @0");
_Static_assert(offsetof(struct cw_record, op) == 1, "op @1");
_Static_assert(offsetof(struct cw_record, flags) == 2, "flags @2");
_Static_assert(offsetof(struct cw_record, rank) == 4, "rank @4");
_Static_assert(offsetof(struct cw_record, comm) == 8, "comm @8");
_Static_assert(offsetof(struct cw_record, seq) == 16, "seq @16");
_Static_assert(offsetof(struct cw_record, t_start_ns) == 24, "t_start_ns @24");
_Static_assert(offsetof(struct cw_record, t_end_ns) == 32, "t_end_ns @32");
_Static_assert(offsetof(struct cw_record, bytes) == 40, "bytes @40");
_Static_assert(offsetof(struct cw_record, comm_rank) == 48, "comm_rank @48");
_Static_assert(offsetof(struct cw_record, peer) == 52, "peer @52");
_Static_assert(offsetof(struct cw_record, nranks) == 56, "nranks @56");
_Static_assert(offsetof(struct cw_record, aux) == 60, "aux @60");

#endif /* COMMWATCH_RECORD_H_ */
