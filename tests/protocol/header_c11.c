/* Compiled with -std=c11 -pedantic -Wpadded: the header is valid C11 with no
 * implicit padding. The function is called from the C++ test so the C view
 * of the layout is checked at run time too. */
#include <stddef.h>

#include "protocol/harmonaize.h"

size_t hz_c11_sizeof_event(void);
size_t hz_c11_offsetof_coll_recv(void);

size_t hz_c11_sizeof_event(void) {
  return sizeof(struct hz_event);
}
size_t hz_c11_offsetof_coll_recv(void) {
  return offsetof(struct hz_coll_args, recv);
}
