#include "stream_copy.h"

#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace hz::coll::internal {

void StreamCopy(uint8_t* dst, const uint8_t* src, size_t n) {
  if (dst == src || n == 0) return;
#if defined(__x86_64__)
  // SSE2 is baseline on x86-64; at memory-bound sizes 16-byte streaming
  // stores reach the same bandwidth as wider ones.
  size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
  if (head > n) head = n;
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  for (; n >= 64; n -= 64, dst += 64, src += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i_u*>(src));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i_u*>(src + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i_u*>(src + 32));
    __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i_u*>(src + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
  }
#endif
  std::memcpy(dst, src, n);
}

void StreamFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

}  // namespace hz::coll::internal
