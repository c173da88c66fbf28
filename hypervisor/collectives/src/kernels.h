// Reduction kernels: one block of n elements at a time, accumulating into a
// cache-resident scratch array of the accumulator type (the element type, or
// float for fp16 and bf16), or in one pass from the inputs to the outputs
// (reduce_into). Sources and destinations may be unaligned.
#ifndef HZ_COLLECTIVES_KERNELS_H_
#define HZ_COLLECTIVES_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace hz::coll::internal {

struct ReduceKernel {
  size_t elem_size;  // bytes per element in memory
  size_t acc_size;   // bytes per element of the accumulator
  // acc = src
  void (*load)(void* acc, const uint8_t* src, size_t n);
  // acc = acc (op) src, element-wise, acc on the left
  void (*accumulate)(void* acc, const uint8_t* src, size_t n);
  // acc = a (op) b: load then accumulate in one pass over the accumulator,
  // with the same result bit for bit
  void (*combine)(void* acc, const uint8_t* a, const uint8_t* b, size_t n);
  // acc = (((a (op) b) (op) c) (op) d), and acc = ((((acc (op) a) (op) b)
  // (op) c) (op) d): four ranks in one pass over the accumulator, element by
  // element in the same order as one rank at a time, so bit for bit the same
  void (*combine4)(void* acc, const uint8_t* a, const uint8_t* b, const uint8_t* c,
                   const uint8_t* d, size_t n);
  void (*accumulate4)(void* acc, const uint8_t* a, const uint8_t* b, const uint8_t* c,
                      const uint8_t* d, size_t n);
  // dst = acc, or acc / divisor for avg (divisor is ignored otherwise)
  void (*store)(uint8_t* dst, const void* acc, size_t n, uint32_t divisor);
  // store is a plain copy: the accumulator already holds the output bytes
  bool store_copies;
  // out[j] = in[0] (op) in[1] ... (op) in[nin - 1], finished as store
  // finishes it, for every j < nout: n elements, one 64-byte line at a time,
  // so that each input is read once and each output written once, with no
  // accumulator between them. Bit for bit the result of the passes above.
  // Each output element is written after every input of its line has been
  // read, so an output may be one of the inputs (in place). With stream,
  // the whole lines go out by non-temporal stores (each out[j] must then be
  // kReduceIntoStreamAlign-aligned; the caller fences) and the last partial
  // line, if any, by plain ones.
  void (*reduce_into)(uint8_t* const* out, uint32_t nout, const uint8_t* const* in, uint32_t nin,
                      size_t n, uint32_t divisor, bool stream);
};

// Alignment of the outputs of a streamed reduce_into: that of a 32-byte
// vector store.
inline constexpr size_t kReduceIntoStreamAlign = 32;

// nullptr for an out-of-range dtype or redop.
const ReduceKernel* GetReduceKernel(uint8_t dtype, uint8_t redop);

// Which instruction set the vectorised kernels run with ("avx2", "default").
const char* KernelIsa();

}  // namespace hz::coll::internal

#endif  // HZ_COLLECTIVES_KERNELS_H_
