// fp16 and bf16 conversions, branch-free so that loops over them vectorise.
// Both round to nearest even; NaN stays NaN (quiet), overflow becomes inf.
// The one definition: the engine's kernels and the inter-host leg (which
// must round exactly as the engine does) both use these.
#ifndef HZ_COMMON_HALF_H_
#define HZ_COMMON_HALF_H_

#include <bit>
#include <cstdint>

namespace hz {

inline float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;
  uint32_t normal = (em << 13) + 0x38000000u;  // rebias exponent 15 -> 127
  uint32_t infnan = (em << 13) + 0x70000000u;  // exponent 31 -> 255
  // Subnormal halves are em * 2^-24, exact in float.
  uint32_t sub = std::bit_cast<uint32_t>(static_cast<float>(em) * 5.9604644775390625e-08f);
  uint32_t r = em >= 0x7c00u ? infnan : normal;
  r = em < 0x0400u ? sub : r;
  return std::bit_cast<float>(r | sign);
}

inline uint16_t FloatToHalf(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  // Normal result: rebias, round the 13 dropped bits to nearest even.
  uint32_t odd = (a >> 13) & 1u;
  uint32_t normal = (a + 0xc8000fffu + odd) >> 13;
  // Subnormal result: let the float adder round by aligning to 2^-14 units.
  float aligned = std::bit_cast<float>(a) + 0.5f;
  uint32_t sub = std::bit_cast<uint32_t>(aligned) - 0x3f000000u;
  uint32_t r = a < 0x38800000u ? sub : normal;
  r = a >= 0x47800000u ? 0x7c00u : r;  // >= 65536: inf (65520..65535 round up in `normal`)
  r = a > 0x7f800000u ? 0x7e00u : r;   // NaN
  return static_cast<uint16_t>(r | sign);
}

inline float Bf16ToFloat(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

inline uint16_t FloatToBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t nan = (u >> 16) | 0x40u;
  uint32_t r = (u & 0x7fffffffu) > 0x7f800000u ? nan : rounded;
  return static_cast<uint16_t>(r);
}

}  // namespace hz

#endif  // HZ_COMMON_HALF_H_
