/* Prints the layout of struct cw_record as "name offset size" lines, then
 * "flag NAME value" lines and "sizeof N", for tests/unit/test_nccl_plugin.py to compare with the numpy dtype. */
#include <stdio.h>

#include "commwatch_record.h"

#define FIELD(f) printf("%s %zu %zu\n", #f, offsetof(struct cw_record, f), sizeof(((struct cw_record*)0)->f))

int main(void) {
  FIELD(kind);
  FIELD(op);
  FIELD(flags);
  FIELD(rank);
  FIELD(comm);
  FIELD(seq);
  FIELD(t_start_ns);
  FIELD(t_end_ns);
  FIELD(bytes);
  FIELD(comm_rank);
  FIELD(peer);
  FIELD(nranks);
  FIELD(aux);
  printf("flag COMPLETED %u\n", CW_FLAG_COMPLETED);
  printf("flag GPU_TIMED %u\n", CW_FLAG_GPU_TIMED);
  printf("flag GRAPH_CAPTURED %u\n", CW_FLAG_GRAPH_CAPTURED);
  printf("flag ENQUEUED %u\n", CW_FLAG_ENQUEUED);
  printf("flag COMPLETION_LOST %u\n", CW_FLAG_COMPLETION_LOST);
  printf("sizeof %zu\n", sizeof(struct cw_record));
  return 0;
}
