/* Compiled with -std=c11 -pedantic -Wpadded: the header is valid C11 with no
 * implicit padding. The functions are called from the C++ test so the C view
 * of the layout and of the helpers is checked at run time too. */
#include <stddef.h>

#include "protocol/harmonaize.h"

size_t hz_c11_sizeof_event(void);
size_t hz_c11_offsetof_coll_recv(void);
uint64_t hz_c11_allgather_recv_bytes(void);

size_t hz_c11_sizeof_event(void) {
  return sizeof(struct hz_event);
}
size_t hz_c11_offsetof_coll_recv(void) {
  return offsetof(struct hz_coll_args, recv);
}
/* The wire helpers (hz_coll_bytes and the predicates) as C11 compiles them. */
uint64_t hz_c11_allgather_recv_bytes(void) {
  hz_u64 send = 0, recv = 0;
  if (hz_coll_bytes(HZ_OP_ALLGATHER, 3, HZ_FP32, 5, false, &send, &recv) != HZ_S_OK) return 0;
  return hz_op_reduces(HZ_OP_ALLGATHER) ? 0 : recv;
}
