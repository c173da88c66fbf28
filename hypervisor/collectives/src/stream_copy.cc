#include "stream_copy.h"

#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace hz::coll::internal {
namespace {

#if defined(__x86_64__)
// One 8-byte non-temporal store (movnti), at any alignment.
void StreamWord(uint8_t* dst, const uint8_t* src) {
  long long v;
  std::memcpy(&v, src, sizeof(v));
  _mm_stream_si64(reinterpret_cast<long long*>(dst), v);
}
#endif

}  // namespace

void StreamCopy(uint8_t* dst, const uint8_t* src, size_t n) {
  if (dst == src || n == 0) return;
#if defined(__x86_64__)
  if (n >= 16) {
    // Every byte goes through non-temporal stores. A plain store into a
    // line that is also being streamed makes the CPU write the partial line
    // out and read it back. With 12-byte heads and 4-byte tails copied
    // plainly, all-reduces over 2 and 4 ranks into outputs 4 bytes past a
    // 16-byte boundary (collectives_bench --offset 4, 2 KiB pieces) took two
    // to three times as long as with them streamed (AMD EPYC). So each end
    // is one or two 8-byte stores, which may overlap the 16-byte ones: they
    // write the same source bytes again.
    const size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
    if (head != 0) {
      StreamWord(dst, src);
      if (head > 8) StreamWord(dst + head - 8, src + head - 8);
    }
    // SSE2 is baseline on x86-64; 32-byte stores measured no faster in
    // collectives_bench over 2, 4 and 8 ranks.
    size_t done = head;
    for (; n - done >= 64; done += 64) {
      const auto* s = reinterpret_cast<const __m128i_u*>(src + done);
      auto* d = reinterpret_cast<__m128i*>(dst + done);
      const __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1);
      const __m128i c = _mm_loadu_si128(s + 2), e = _mm_loadu_si128(s + 3);
      _mm_stream_si128(d, a);
      _mm_stream_si128(d + 1, b);
      _mm_stream_si128(d + 2, c);
      _mm_stream_si128(d + 3, e);
    }
    for (; n - done >= 16; done += 16) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + done),
                       _mm_loadu_si128(reinterpret_cast<const __m128i_u*>(src + done)));
    }
    // The last n - done < 16 bytes, by stores ending at n (n >= 16, so
    // they start inside the output).
    const size_t tail = n - done;
    if (tail != 0) {
      StreamWord(dst + n - 8, src + n - 8);
      if (tail > 8) StreamWord(dst + n - 16, src + n - 16);
    }
    return;
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
