// The kernels are simple loops over restrict pointers that GCC vectorises;
// the hot ones are compiled twice (AVX2 and baseline) and picked at load time
// by target_clones. reduce_into is compiled twice by hand instead (its AVX2
// form streams with AVX2 stores) and picked per call.
//
// Integer sum and prod wrap (computed in the unsigned type); min and max keep
// the accumulator on ties and NaN in the accumulator, like the scalar
// reference `x < acc ? x : acc`.
#include "kernels.h"

#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "hz/collectives/types.h"
#include "hz/common/half.h"

// Whether the kernels have AVX2 forms beside the baseline ones: by
// target_clones, and for reduce_into by hand, picked per call (HasAvx2).
#if defined(__x86_64__) && !defined(HZ_SANITIZED)
#define HZ_AVX2_FORMS 1
#define HZ_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define HZ_AVX2_FORMS 0
#define HZ_CLONES
#endif
#define HZ_INLINE [[gnu::always_inline]] inline

namespace hz::coll::internal {
namespace {

// Element traits: memory type T, accumulator type A and the conversions.
template <class T>
struct Plain {
  using Mem = T;
  using Acc = T;
  HZ_INLINE static Acc Load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  }
  HZ_INLINE static void Store(uint8_t* p, Acc v) { std::memcpy(p, &v, sizeof(T)); }
};

struct Half {
  using Mem = uint16_t;
  using Acc = float;
  HZ_INLINE static Acc Load(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return HalfToFloat(v);
  }
  HZ_INLINE static void Store(uint8_t* p, Acc v) {
    uint16_t h = FloatToHalf(v);
    std::memcpy(p, &h, 2);
  }
};

struct Bf16 {
  using Mem = uint16_t;
  using Acc = float;
  HZ_INLINE static Acc Load(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return Bf16ToFloat(v);
  }
  HZ_INLINE static void Store(uint8_t* p, Acc v) {
    uint16_t h = FloatToBf16(v);
    std::memcpy(p, &h, 2);
  }
};

template <class A>
struct SumOp {
  HZ_INLINE static A Apply(A acc, A x) {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(static_cast<U>(static_cast<U>(acc) + static_cast<U>(x)));
    } else {
      return acc + x;
    }
  }
};

template <class A>
struct ProdOp {
  HZ_INLINE static A Apply(A acc, A x) {
    if constexpr (std::is_integral_v<A>) {
      // Promote to at least unsigned int so that narrow types cannot
      // overflow a signed int in the multiplication.
      using U = std::common_type_t<std::make_unsigned_t<A>, unsigned int>;
      return static_cast<A>(static_cast<U>(static_cast<U>(acc) * static_cast<U>(x)));
    } else {
      return acc * x;
    }
  }
};

template <class A>
struct MaxOp {
  HZ_INLINE static A Apply(A acc, A x) { return acc < x ? x : acc; }
};

template <class A>
struct MinOp {
  HZ_INLINE static A Apply(A acc, A x) { return x < acc ? x : acc; }
};

template <class Tr>
HZ_INLINE void LoadImpl(void* accv, const uint8_t* __restrict src, size_t n) {
  auto* __restrict acc = static_cast<typename Tr::Acc*>(accv);
  for (size_t i = 0; i < n; ++i) acc[i] = Tr::Load(src + i * sizeof(typename Tr::Mem));
}

template <class Tr, template <class> class OpT>
HZ_INLINE void AccumulateImpl(void* accv, const uint8_t* __restrict src, size_t n) {
  using A = typename Tr::Acc;
  auto* __restrict acc = static_cast<A*>(accv);
  for (size_t i = 0; i < n; ++i) {
    acc[i] = OpT<A>::Apply(acc[i], Tr::Load(src + i * sizeof(typename Tr::Mem)));
  }
}

template <class Tr, template <class> class OpT>
HZ_INLINE void CombineImpl(void* accv, const uint8_t* __restrict a, const uint8_t* __restrict b,
                           size_t n) {
  using A = typename Tr::Acc;
  constexpr size_t kSize = sizeof(typename Tr::Mem);
  auto* __restrict acc = static_cast<A*>(accv);
  for (size_t i = 0; i < n; ++i) {
    acc[i] = OpT<A>::Apply(Tr::Load(a + i * kSize), Tr::Load(b + i * kSize));
  }
}

// Four ranks in one pass, left to right: acc = a op b op c op d, or with
// kOntoAcc, acc = acc op a op b op c op d.
template <class Tr, template <class> class OpT, bool kOntoAcc>
HZ_INLINE void Reduce4Impl(void* accv, const uint8_t* __restrict a, const uint8_t* __restrict b,
                           const uint8_t* __restrict c, const uint8_t* __restrict d, size_t n) {
  using A = typename Tr::Acc;
  using Op = OpT<A>;
  constexpr size_t kSize = sizeof(typename Tr::Mem);
  auto* __restrict acc = static_cast<A*>(accv);
  for (size_t i = 0; i < n; ++i) {
    A x = Tr::Load(a + i * kSize);
    if constexpr (kOntoAcc) x = Op::Apply(acc[i], x);
    x = Op::Apply(Op::Apply(x, Tr::Load(b + i * kSize)), Tr::Load(c + i * kSize));
    acc[i] = Op::Apply(x, Tr::Load(d + i * kSize));
  }
}

template <class Tr>
HZ_INLINE void StoreImpl(uint8_t* __restrict dst, const void* accv, size_t n) {
  const auto* __restrict acc = static_cast<const typename Tr::Acc*>(accv);
  for (size_t i = 0; i < n; ++i) Tr::Store(dst + i * sizeof(typename Tr::Mem), acc[i]);
}

template <class Tr>
HZ_INLINE void StoreAvgImpl(uint8_t* __restrict dst, const void* accv, size_t n, uint32_t divisor) {
  using A = typename Tr::Acc;
  const auto* __restrict acc = static_cast<const A*>(accv);
  if constexpr (std::is_floating_point_v<A>) {
    const A d = static_cast<A>(divisor);
    for (size_t i = 0; i < n; ++i) Tr::Store(dst + i * sizeof(typename Tr::Mem), acc[i] / d);
  } else if constexpr (std::is_signed_v<A>) {
    // Division in int64 truncates toward zero and cannot overflow: d >= 1.
    const int64_t d = divisor;
    for (size_t i = 0; i < n; ++i) {
      Tr::Store(dst + i * sizeof(A), static_cast<A>(static_cast<int64_t>(acc[i]) / d));
    }
  } else {
    const uint64_t d = divisor;
    for (size_t i = 0; i < n; ++i) {
      Tr::Store(dst + i * sizeof(A), static_cast<A>(static_cast<uint64_t>(acc[i]) / d));
    }
  }
}

template <class Tr, bool kAvg>
HZ_INLINE void FinishImpl(uint8_t* __restrict dst, const void* accv, size_t n, uint32_t divisor) {
  if constexpr (kAvg) {
    StoreAvgImpl<Tr>(dst, accv, n, divisor);
  } else {
    StoreImpl<Tr>(dst, accv, n);
  }
}

// How reduce_into writes a finished 64-byte line around the caches.
// The baseline form: dst 16-byte aligned (SSE2 is baseline on x86-64);
// elsewhere plain stores.
struct BaselineLines {
  HZ_INLINE static void Stream(uint8_t* dst, const uint8_t* line) {
#if defined(__x86_64__)
    for (int k = 0; k < 4; ++k) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst) + k,
                       _mm_load_si128(reinterpret_cast<const __m128i*>(line) + k));
    }
#else
    std::memcpy(dst, line, 64);
#endif
  }
};
#if HZ_AVX2_FORMS
// dst 32-byte aligned. On an AMD EPYC host, a one-pass 2-rank 16 MiB
// all-reduce with 16-byte stores took 60-90% longer than with these.
struct Avx2Lines {
  [[gnu::target("avx2")]] static inline void Stream(uint8_t* dst, const uint8_t* line) {
    for (int k = 0; k < 2; ++k) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst) + k,
                          _mm256_load_si256(reinterpret_cast<const __m256i*>(line) + k));
    }
  }
};

bool HasAvx2() {
  static const bool has = (__builtin_cpu_init(), __builtin_cpu_supports("avx2"));
  return has;
}
#endif

// acc[0, n) = in[0] op in[1] ... op in[nin - 1], from byte `at` of each.
template <class Tr, template <class> class OpT>
HZ_INLINE void ReduceLine(typename Tr::Acc* __restrict acc, const uint8_t* const* in, uint32_t nin,
                          size_t at, size_t n) {
  using A = typename Tr::Acc;
  constexpr size_t kSize = sizeof(typename Tr::Mem);
  for (size_t k = 0; k < n; ++k) acc[k] = Tr::Load(in[0] + at + k * kSize);
  for (uint32_t r = 1; r < nin; ++r) {
    const uint8_t* __restrict src = in[r] + at;
    for (size_t k = 0; k < n; ++k) acc[k] = OpT<A>::Apply(acc[k], Tr::Load(src + k * kSize));
  }
}

// Each line of the inputs is reduced in registers and written to every
// output: reads and writes of memory overlap, where the passes above read
// the inputs into the accumulator and then write the outputs from it, one
// kind of stream at a time (job.cc says when each is used, and what it
// measured). Not always_inline: the AVX2 form inlines it by flatten, which
// also inlines the AVX2 stores into it; always_inline would try them in the
// baseline form too, which cannot take them.
template <class Tr, template <class> class OpT, bool kAvg, class Lines>
inline void ReduceIntoImpl(uint8_t* const* out, uint32_t nout, const uint8_t* const* in,
                           uint32_t nin, size_t n, uint32_t divisor, bool stream) {
  using A = typename Tr::Acc;
  constexpr size_t kSize = sizeof(typename Tr::Mem);
  constexpr size_t kPerLine = 64 / kSize;
  alignas(64) A acc[kPerLine];
  alignas(64) uint8_t line[64];
  size_t i = 0;
  for (; i + kPerLine <= n; i += kPerLine) {
    const size_t at = i * kSize;
    ReduceLine<Tr, OpT>(acc, in, nin, at, kPerLine);
    FinishImpl<Tr, kAvg>(line, acc, kPerLine, divisor);
    for (uint32_t j = 0; j < nout; ++j) {
      if (stream) {
        Lines::Stream(out[j] + at, line);
      } else {
        std::memcpy(out[j] + at, line, 64);
      }
    }
  }
  if (i == n) return;
  // The last partial line: plain stores.
  const size_t at = i * kSize, rest = n - i;
  ReduceLine<Tr, OpT>(acc, in, nin, at, rest);
  FinishImpl<Tr, kAvg>(line, acc, rest, divisor);
  for (uint32_t j = 0; j < nout; ++j) std::memcpy(out[j] + at, line, rest * kSize);
}

#define HZ_INTO_PARAMS                                                                  \
  uint8_t *const *out, uint32_t nout, const uint8_t *const *in, uint32_t nin, size_t n, \
      uint32_t divisor, bool stream
#define HZ_INTO_ARGS out, nout, in, nin, n, divisor, stream

#if HZ_AVX2_FORMS
#define HZ_DEFINE_INTO(NAME, TR, OP, OPT, AVG)                                         \
  [[gnu::target("avx2"), gnu::flatten]] void NAME##_##OP##_into_avx2(HZ_INTO_PARAMS) { \
    ReduceIntoImpl<TR, OPT, AVG, Avx2Lines>(HZ_INTO_ARGS);                             \
  }                                                                                    \
  [[gnu::flatten]] void NAME##_##OP##_into(HZ_INTO_PARAMS) {                           \
    if (HasAvx2()) return NAME##_##OP##_into_avx2(HZ_INTO_ARGS);                       \
    ReduceIntoImpl<TR, OPT, AVG, BaselineLines>(HZ_INTO_ARGS);                         \
  }
#else
#define HZ_DEFINE_INTO(NAME, TR, OP, OPT, AVG)                 \
  [[gnu::flatten]] void NAME##_##OP##_into(HZ_INTO_PARAMS) {   \
    ReduceIntoImpl<TR, OPT, AVG, BaselineLines>(HZ_INTO_ARGS); \
  }
#endif

// Non-template entry points, one set per element type and operation, so that
// target_clones can multiversion each of them.

// The kernels of one reduction: one rank onto the accumulator, two ranks into
// it, four ranks into it and four onto it.
#define HZ_DEFINE_OP(NAME, TR, OP, OPT)                                                    \
  HZ_CLONES void NAME##_##OP(void* acc, const uint8_t* s, size_t n) {                      \
    AccumulateImpl<TR, OPT>(acc, s, n);                                                    \
  }                                                                                        \
  HZ_CLONES void NAME##_##OP##2(void* acc, const uint8_t* a, const uint8_t* b, size_t n) { \
    CombineImpl<TR, OPT>(acc, a, b, n);                                                    \
  }                                                                                        \
  HZ_CLONES void NAME##_##OP##_combine4(void* acc, const uint8_t* a, const uint8_t* b,     \
                                        const uint8_t* c, const uint8_t* d, size_t n) {    \
    Reduce4Impl<TR, OPT, false>(acc, a, b, c, d, n);                                       \
  }                                                                                        \
  HZ_CLONES void NAME##_##OP##_accumulate4(void* acc, const uint8_t* a, const uint8_t* b,  \
                                           const uint8_t* c, const uint8_t* d, size_t n) { \
    Reduce4Impl<TR, OPT, true>(acc, a, b, c, d, n);                                        \
  }                                                                                        \
  HZ_DEFINE_INTO(NAME, TR, OP, OPT, false)

// One table entry: the operation's kernels and a store (plain or avg);
// STORE_COPIES says whether that store is a plain copy of the accumulator.
#define HZ_KERNEL(NAME, TR, OP, STORE, STORE_COPIES, INTO)                      \
  {                                                                             \
    sizeof(TR::Mem), sizeof(TR::Acc), NAME##_load, NAME##_##OP, NAME##_##OP##2, \
        NAME##_##OP##_combine4, NAME##_##OP##_accumulate4, NAME##_##STORE,      \
        (STORE_COPIES) && std::is_same_v<TR::Mem, TR::Acc>, NAME##_##INTO       \
  }

#define HZ_DEFINE_TYPE(NAME, TR)                                                     \
  HZ_CLONES void NAME##_load(void* a, const uint8_t* s, size_t n) {                  \
    LoadImpl<TR>(a, s, n);                                                           \
  }                                                                                  \
  HZ_CLONES void NAME##_store(uint8_t* d, const void* a, size_t n, uint32_t) {       \
    StoreImpl<TR>(d, a, n);                                                          \
  }                                                                                  \
  HZ_CLONES void NAME##_store_avg(uint8_t* d, const void* a, size_t n, uint32_t k) { \
    StoreAvgImpl<TR>(d, a, n, k);                                                    \
  }                                                                                  \
  HZ_DEFINE_OP(NAME, TR, sum, SumOp)                                                 \
  HZ_DEFINE_OP(NAME, TR, prod, ProdOp)                                               \
  HZ_DEFINE_OP(NAME, TR, max, MaxOp)                                                 \
  HZ_DEFINE_OP(NAME, TR, min, MinOp)                                                 \
  HZ_DEFINE_INTO(NAME, TR, avg, SumOp, true)                                         \
  constexpr ReduceKernel NAME##_kernels[kRedOpCount] = {                             \
      HZ_KERNEL(NAME, TR, sum, store, true, sum_into),                               \
      HZ_KERNEL(NAME, TR, prod, store, true, prod_into),                             \
      HZ_KERNEL(NAME, TR, max, store, true, max_into),                               \
      HZ_KERNEL(NAME, TR, min, store, true, min_into),                               \
      HZ_KERNEL(NAME, TR, sum, store_avg, false, avg_into),                          \
  };

HZ_DEFINE_TYPE(i8, Plain<int8_t>)
HZ_DEFINE_TYPE(u8, Plain<uint8_t>)
HZ_DEFINE_TYPE(i32, Plain<int32_t>)
HZ_DEFINE_TYPE(u32, Plain<uint32_t>)
HZ_DEFINE_TYPE(i64, Plain<int64_t>)
HZ_DEFINE_TYPE(u64, Plain<uint64_t>)
HZ_DEFINE_TYPE(f16, Half)
HZ_DEFINE_TYPE(f32, Plain<float>)
HZ_DEFINE_TYPE(f64, Plain<double>)
HZ_DEFINE_TYPE(bf16, Bf16)

// Indexed by hz_dtype.
constexpr const ReduceKernel* kTable[kDTypeCount] = {
    i8_kernels,  u8_kernels,  i32_kernels, u32_kernels, i64_kernels,
    u64_kernels, f16_kernels, f32_kernels, f64_kernels, bf16_kernels,
};

}  // namespace

const ReduceKernel* GetReduceKernel(uint8_t dtype, uint8_t redop) {
  if (dtype >= kDTypeCount || redop >= kRedOpCount) return nullptr;
  return &kTable[dtype][redop];
}

const char* KernelIsa() {
#if HZ_AVX2_FORMS
  return HasAvx2() ? "avx2" : "default";
#else
  return "default";
#endif
}

}  // namespace hz::coll::internal
