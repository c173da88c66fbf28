// The kernels are simple loops over restrict pointers that GCC vectorises;
// the hot ones are compiled twice (AVX2 and baseline) and picked at load time
// by target_clones. Integer sum and prod wrap (computed in the unsigned type);
// min and max keep the accumulator on ties and NaN in the accumulator, like
// the scalar reference `x < acc ? x : acc`.
#include "kernels.h"

#include <cstring>
#include <type_traits>

#include "hz/collectives/types.h"
#include "hz/common/half.h"

#if defined(__x86_64__) && !defined(HZ_SANITIZED)
#define HZ_CLONES __attribute__((target_clones("avx2", "default")))
#else
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
  }

// One table entry: the operation's kernels and a store (plain or avg);
// STORE_COPIES says whether that store is a plain copy of the accumulator.
#define HZ_KERNEL(NAME, TR, OP, STORE, STORE_COPIES)                            \
  {                                                                             \
    sizeof(TR::Mem), sizeof(TR::Acc), NAME##_load, NAME##_##OP, NAME##_##OP##2, \
        NAME##_##OP##_combine4, NAME##_##OP##_accumulate4, NAME##_##STORE,      \
        (STORE_COPIES) && std::is_same_v<TR::Mem, TR::Acc>                      \
  }

#define HZ_DEFINE_TYPE(NAME, TR)                                                          \
  HZ_CLONES void NAME##_load(void* a, const uint8_t* s, size_t n) {                       \
    LoadImpl<TR>(a, s, n);                                                                \
  }                                                                                       \
  HZ_CLONES void NAME##_store(uint8_t* d, const void* a, size_t n, uint32_t) {            \
    StoreImpl<TR>(d, a, n);                                                               \
  }                                                                                       \
  HZ_CLONES void NAME##_store_avg(uint8_t* d, const void* a, size_t n, uint32_t k) {      \
    StoreAvgImpl<TR>(d, a, n, k);                                                         \
  }                                                                                       \
  HZ_DEFINE_OP(NAME, TR, sum, SumOp)                                                      \
  HZ_DEFINE_OP(NAME, TR, prod, ProdOp)                                                    \
  HZ_DEFINE_OP(NAME, TR, max, MaxOp)                                                      \
  HZ_DEFINE_OP(NAME, TR, min, MinOp)                                                      \
  constexpr ReduceKernel NAME##_kernels[kRedOpCount] = {                                  \
      HZ_KERNEL(NAME, TR, sum, store, true),      HZ_KERNEL(NAME, TR, prod, store, true), \
      HZ_KERNEL(NAME, TR, max, store, true),      HZ_KERNEL(NAME, TR, min, store, true),  \
      HZ_KERNEL(NAME, TR, sum, store_avg, false),                                         \
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
#if defined(__x86_64__) && !defined(HZ_SANITIZED)
  return __builtin_cpu_supports("avx2") ? "avx2" : "default";
#else
  return "default";
#endif
}

}  // namespace hz::coll::internal
