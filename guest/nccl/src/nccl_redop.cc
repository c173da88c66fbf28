// PreMulSum reduction operators. The device sums; the pre-multiplication by
// the operator's scalar happens here, on a scratch copy of each rank's input,
// before the sum is issued. Results match NCCL's: a product of two values is
// rounded once to the datatype (fp16/bf16 products are exact in float, so
// computing them there and rounding once is what a native multiply gives).
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "nccl_op.h"
#include "protocol/harmonaize.h"

namespace hz::nccl {
namespace {

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal
  } else if (exp == 31) {
    mag = mant == 0 ? INFINITY : NAN;
  } else {
    mag = std::ldexp(static_cast<float>(mant | 0x400u), exp - 25);
  }
  uint32_t bits;
  std::memcpy(&bits, &mag, 4);
  bits |= sign;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest, ties to even, with subnormals, overflow to infinity and NaN.
uint16_t FloatToHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00u;
  if (a >= 65520.0f) return sign | 0x7c00u;  // rounds past the largest half (65504)
  if (a < std::ldexp(1.0f, -14)) {
    // Subnormal: units of 2^-24, rounded to nearest even by nearbyint.
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24)));
  }
  int e;
  float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  // 11 significant bits: the mantissa with its implicit bit, rounded.
  uint32_t sig = static_cast<uint32_t>(std::nearbyint(std::ldexp(m, 11)));
  if (sig == 2048) {
    sig = 1024;
    ++e;
  }
  const uint32_t exp = static_cast<uint32_t>(e - 1 + 15);
  if (exp >= 31) return sign | 0x7c00u;
  return sign | static_cast<uint16_t>((exp << 10) | (sig & 0x3ffu));
}

float Bf16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // ties to even
  return static_cast<uint16_t>(bits >> 16);
}

// Integers wrap as the device's integer arithmetic does (no signed overflow).
template <typename T>
void ScaleInts(const void* in, void* out, size_t n, const unsigned char* scalar) {
  using U = std::make_unsigned_t<T>;
  U s;
  std::memcpy(&s, scalar, sizeof(T));
  for (size_t i = 0; i < n; ++i) {
    U v;
    std::memcpy(&v, static_cast<const char*>(in) + i * sizeof(T), sizeof(T));
    v = static_cast<U>(v * s);
    std::memcpy(static_cast<char*>(out) + i * sizeof(T), &v, sizeof(T));
  }
}

template <typename T>
void ScaleFloats(const void* in, void* out, size_t n, const unsigned char* scalar) {
  T s;
  std::memcpy(&s, scalar, sizeof(T));
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, static_cast<const char*>(in) + i * sizeof(T), sizeof(T));
    v *= s;
    std::memcpy(static_cast<char*>(out) + i * sizeof(T), &v, sizeof(T));
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void ScaleHalves(const void* in, void* out, size_t n, const unsigned char* scalar) {
  uint16_t s;
  std::memcpy(&s, scalar, 2);
  const float sf = ToFloat(s);
  for (size_t i = 0; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, static_cast<const char*>(in) + i * 2, 2);
    v = FromFloat(ToFloat(v) * sf);
    std::memcpy(static_cast<char*>(out) + i * 2, &v, 2);
  }
}

void Scale(ncclDataType_t dt, const void* in, void* out, size_t n, const unsigned char* scalar) {
  switch (dt) {
    case ncclInt8:
      return ScaleInts<int8_t>(in, out, n, scalar);
    case ncclUint8:
      return ScaleInts<uint8_t>(in, out, n, scalar);
    case ncclInt32:
      return ScaleInts<int32_t>(in, out, n, scalar);
    case ncclUint32:
      return ScaleInts<uint32_t>(in, out, n, scalar);
    case ncclInt64:
      return ScaleInts<int64_t>(in, out, n, scalar);
    case ncclUint64:
      return ScaleInts<uint64_t>(in, out, n, scalar);
    case ncclFloat16:
      return ScaleHalves<HalfToFloat, FloatToHalf>(in, out, n, scalar);
    case ncclBfloat16:
      return ScaleHalves<Bf16ToFloat, FloatToBf16>(in, out, n, scalar);
    case ncclFloat32:
      return ScaleFloats<float>(in, out, n, scalar);
    case ncclFloat64:
      return ScaleFloats<double>(in, out, n, scalar);
    default:
      return;  // fp8 never gets here: CheckType refused it
  }
}

}  // namespace

ncclResult_t ResolvePreMul(Op& op) {
  const int v = static_cast<int>(op.redop);
  if (v < ncclNumOps) return ncclSuccess;
  std::lock_guard<std::mutex> lock(op.comm->redop_mu);
  auto it = op.comm->redops.find(v);
  if (it == op.comm->redops.end())
    return Fail(ncclInvalidArgument, std::string(op.name) + ": reduction operator " +
                                         std::to_string(v) + " is not one of this communicator's");
  if (it->second.dtype != op.dtype)
    return Fail(ncclInvalidArgument, std::string(op.name) +
                                         ": the PreMulSum operator was created for datatype " +
                                         std::to_string(it->second.dtype) + ", the call uses " +
                                         std::to_string(op.dtype));
  op.premul = it->second;
  op.has_premul = true;
  return ncclSuccess;
}

ncclResult_t PreMultiply(Op& op) {
  if (!op.has_premul || op.send_bytes == 0) return ncclSuccess;
  const size_t size = hz_dtype_size(static_cast<unsigned>(op.dtype));
  unsigned char scalar[sizeof(op.premul.value)] = {};
  if (op.premul.residence == ncclScalarHostImmediate) {
    std::memcpy(scalar, op.premul.value, size);
  } else if (!ReadScalar(op.premul.where, scalar, size)) {
    return Fail(ncclUnhandledCudaError,
                std::string(op.name) + ": cannot read the PreMulSum scalar from device memory");
  }
  op.scratch = std::make_shared<std::vector<unsigned char>>(op.send_bytes);
  Scale(op.dtype, op.send, op.scratch->data(), op.send_bytes / size, scalar);
  op.send = op.scratch->data();
  op.redop = ncclSum;  // what remains for the device is a plain sum
  return ncclSuccess;
}

}  // namespace hz::nccl

using hz::nccl::Fail;

extern "C" {

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  if (op == nullptr || scalar == nullptr || comm == nullptr)
    return Fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: op, scalar or comm is NULL");
  if (ncclResult_t r = hz::nccl::CheckType(datatype); r != ncclSuccess)
    return Fail(r, "ncclRedOpCreatePreMulSum: " + hz::nccl::LastError());
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
    return Fail(ncclInvalidArgument,
                "ncclRedOpCreatePreMulSum: invalid scalar residence " + std::to_string(residence));
  hz::nccl::PreMul pm;
  pm.dtype = datatype;
  pm.residence = residence;
  if (residence == ncclScalarHostImmediate) {
    std::memcpy(pm.value, scalar, hz_dtype_size(static_cast<unsigned>(datatype)));
  } else {
    pm.where = scalar;  // read each time a collective uses the operator
  }
  std::lock_guard<std::mutex> lock(comm->redop_mu);
  if (comm->next_redop == ncclMaxRedOp)
    return Fail(ncclInvalidUsage, "ncclRedOpCreatePreMulSum: no operator values left");
  const int v = comm->next_redop++;
  comm->redops[v] = pm;
  *op = static_cast<ncclRedOp_t>(v);
  return ncclSuccess;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  if (comm == nullptr) return Fail(ncclInvalidArgument, "ncclRedOpDestroy: comm is NULL");
  const int v = static_cast<int>(op);
  if (v >= 0 && v < ncclNumOps)
    return Fail(ncclInvalidArgument, "ncclRedOpDestroy: operator " + std::to_string(v) +
                                         " is built in and cannot be destroyed");
  std::lock_guard<std::mutex> lock(comm->redop_mu);
  if (comm->redops.erase(v) == 0)
    return Fail(ncclInvalidArgument, "ncclRedOpDestroy: operator " + std::to_string(v) +
                                         " was not created on this communicator");
  return ncclSuccess;
}

}  // extern "C"

HZ_NCCL_ALIAS(ncclRedOpCreatePreMulSum)
HZ_NCCL_ALIAS(ncclRedOpDestroy)
