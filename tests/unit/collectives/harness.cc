#include "harness.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <type_traits>

#include "protocol/harmonaize.h"

namespace hz::coll::testing {

std::vector<std::shared_ptr<Member>> MakeComm(Engine& e, TenantId tenant, uint32_t nranks,
                                              Constraints c) {
  Uid uid;
  EXPECT_EQ(e.NewUid(tenant, &uid).code(), StatusCode::kOk);
  std::vector<std::shared_ptr<Member>> members(nranks);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      std::promise<std::pair<Status, std::shared_ptr<Member>>> p;
      auto f = p.get_future();
      e.Init(tenant, uid, nranks, r, c, [&p](Status s, std::shared_ptr<Member> m) {
        p.set_value({s, std::move(m)});
      });
      if (f.wait_for(kHang) != std::future_status::ready) {
        ADD_FAILURE() << "Init of rank " << r << " hangs";
        std::abort();  // the callback would outlive p
      }
      auto [s, m] = f.get();
      EXPECT_EQ(s.code(), StatusCode::kOk) << "rank " << r;
      members[r] = std::move(m);
    });
  }
  for (auto& t : threads) t.join();
  return members;
}

Done Waiter::Callback() {
  auto p = p_;
  return [p](Status s) { p->set_value(s); };
}

Status Waiter::Wait() {
  if (got_) return *got_;
  if (f_.wait_for(kHang) != std::future_status::ready) {
    ADD_FAILURE() << "operation did not complete";
    return Status::Aborted();
  }
  got_ = f_.get();
  return *got_;
}

bool Waiter::Ready() const {
  return f_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

std::vector<Status> RunAll(Engine& e, const std::vector<std::shared_ptr<Member>>& members,
                           const std::vector<OpDesc>& descs) {
  std::vector<Status> st(members.size(), Status::Aborted());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < members.size(); ++r) {
    threads.emplace_back([&, r] {
      Waiter w;
      e.Post(members[r], descs[r], w.Callback());
      st[r] = w.Wait();
    });
  }
  for (auto& t : threads) t.join();
  return st;
}

std::vector<Status> PostAll(Engine& e, const std::vector<std::shared_ptr<Member>>& members,
                            const std::vector<OpDesc>& descs) {
  std::vector<Waiter> w(members.size());
  for (size_t r = 0; r < members.size(); ++r) e.Post(members[r], descs[r], w[r].Callback());
  std::vector<Status> st;
  for (auto& x : w) st.push_back(x.Wait());
  return st;
}

Buffer::Buffer(size_t len, Layout layout, uint32_t seed) : len_(len) {
  constexpr size_t kPad = 64;
  if (layout != Layout::kSplit || len < 2) {
    size_t shift = layout == Layout::kContiguous ? 0 : 3;
    arena_.assign(len + 2 * kPad + shift, kGuard);
    iov_.push_back(IoSpan{arena_.data() + kPad + shift, len});
    return;
  }
  std::mt19937 rng(seed);
  std::vector<size_t> pieces;
  size_t left = len;
  while (left > 0) {
    size_t max_piece = std::max<size_t>(1, len / 3);
    size_t n = std::min(left, std::uniform_int_distribution<size_t>(1, max_piece)(rng) |
                                  (rng() & 1));  // odd lengths, usually
    n = std::max<size_t>(1, std::min(n, left));
    pieces.push_back(n);
    left -= n;
    if (rng() % 4 == 0) pieces.push_back(0);  // empty extents are legal
  }
  // Place the pieces in shuffled order with guard gaps between them.
  std::vector<size_t> order(pieces.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<size_t> at(pieces.size());
  size_t pos = kPad + 1;
  for (size_t i : order) {
    at[i] = pos;
    pos += pieces[i] + 5 + rng() % 9;
  }
  arena_.assign(pos + kPad, kGuard);
  for (size_t i = 0; i < pieces.size(); ++i)
    iov_.push_back(IoSpan{arena_.data() + at[i], pieces[i]});
}

std::vector<uint8_t> Buffer::Get() const {
  std::vector<uint8_t> out;
  out.reserve(len_);
  for (const IoSpan& s : iov_) out.insert(out.end(), s.data, s.data + s.len);
  return out;
}

void Buffer::Set(const std::vector<uint8_t>& bytes) {
  size_t off = 0;
  for (const IoSpan& s : iov_) {
    if (s.len) std::memcpy(s.data, bytes.data() + off, s.len);
    off += s.len;
  }
}

bool Buffer::GuardsIntact() const {
  // Walk the arena in address order: every byte between extents is a guard.
  IoVec sorted = iov_;
  std::sort(sorted.begin(), sorted.end(),
            [](const IoSpan& a, const IoSpan& b) { return a.data < b.data; });
  const uint8_t* pos = arena_.data();
  auto guards = [](const uint8_t* from, const uint8_t* to) {
    return std::all_of(from, to, [](uint8_t x) { return x == kGuard; });
  };
  for (const IoSpan& s : sorted) {
    if (!guards(pos, s.data)) return false;
    pos = s.data + s.len;
  }
  return guards(pos, arena_.data() + arena_.size());
}

float RefHalfToFloat(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}

uint16_t RefFloatToHalf(float f) {
  _Float16 v = static_cast<_Float16>(f);  // IEEE conversion, round to nearest even
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}

float RefBf16ToFloat(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  return std::bit_cast<float>(u);
}

uint16_t RefFloatToBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  uint32_t upper = u >> 16, lower = u & 0xffff;
  if (lower > 0x8000 || (lower == 0x8000 && (upper & 1))) ++upper;
  return static_cast<uint16_t>(upper);
}

namespace {

template <class T>
T LoadAt(const uint8_t* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

template <class T>
void StoreAt(std::vector<uint8_t>& out, size_t i, T v) {
  std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
}

template <class A>
A Apply(uint8_t redop, A acc, A x) {
  switch (static_cast<RedOp>(redop)) {
    case RedOp::kSum:
    case RedOp::kAvg:
      if constexpr (std::is_integral_v<A>) {
        return static_cast<A>(static_cast<uint64_t>(acc) + static_cast<uint64_t>(x));
      } else {
        return acc + x;
      }
    case RedOp::kProd:
      if constexpr (std::is_integral_v<A>) {
        return static_cast<A>(static_cast<uint64_t>(acc) * static_cast<uint64_t>(x));
      } else {
        return acc * x;
      }
    case RedOp::kMax:
      return acc < x ? x : acc;
    case RedOp::kMin:
      return x < acc ? x : acc;
  }
  return acc;
}

template <class A>
A Finish(uint8_t redop, A acc, size_t nranks) {
  if (static_cast<RedOp>(redop) != RedOp::kAvg) return acc;
  if constexpr (std::is_floating_point_v<A>) {
    return acc / static_cast<A>(nranks);
  } else if constexpr (std::is_signed_v<A>) {
    return static_cast<A>(static_cast<int64_t>(acc) / static_cast<int64_t>(nranks));
  } else {
    return static_cast<A>(static_cast<uint64_t>(acc) / nranks);
  }
}

template <class T>
std::vector<uint8_t> ReducePlain(uint8_t redop, const std::vector<const uint8_t*>& in, size_t n) {
  std::vector<uint8_t> out(n * sizeof(T));
  for (size_t i = 0; i < n; ++i) {
    T acc = LoadAt<T>(in[0], i);
    for (size_t r = 1; r < in.size(); ++r) acc = Apply<T>(redop, acc, LoadAt<T>(in[r], i));
    StoreAt<T>(out, i, Finish<T>(redop, acc, in.size()));
  }
  return out;
}

std::vector<uint8_t> ReduceHalfLike(uint8_t redop, const std::vector<const uint8_t*>& in, size_t n,
                                    float (*to_float)(uint16_t), uint16_t (*from_float)(float)) {
  std::vector<uint8_t> out(n * 2);
  for (size_t i = 0; i < n; ++i) {
    float acc = to_float(LoadAt<uint16_t>(in[0], i));
    for (size_t r = 1; r < in.size(); ++r) {
      acc = Apply<float>(redop, acc, to_float(LoadAt<uint16_t>(in[r], i)));
    }
    StoreAt<uint16_t>(out, i, from_float(Finish<float>(redop, acc, in.size())));
  }
  return out;
}

}  // namespace

std::vector<uint8_t> ReferenceReduce(uint8_t dtype, uint8_t redop,
                                     const std::vector<const uint8_t*>& in, size_t n) {
  switch (static_cast<DType>(dtype)) {
    case DType::kInt8:
      return ReducePlain<int8_t>(redop, in, n);
    case DType::kUint8:
      return ReducePlain<uint8_t>(redop, in, n);
    case DType::kInt32:
      return ReducePlain<int32_t>(redop, in, n);
    case DType::kUint32:
      return ReducePlain<uint32_t>(redop, in, n);
    case DType::kInt64:
      return ReducePlain<int64_t>(redop, in, n);
    case DType::kUint64:
      return ReducePlain<uint64_t>(redop, in, n);
    case DType::kFp16:
      return ReduceHalfLike(redop, in, n, RefHalfToFloat, RefFloatToHalf);
    case DType::kFp32:
      return ReducePlain<float>(redop, in, n);
    case DType::kFp64:
      return ReducePlain<double>(redop, in, n);
    case DType::kBf16:
      return ReduceHalfLike(redop, in, n, RefBf16ToFloat, RefFloatToBf16);
  }
  return {};
}

std::vector<uint8_t> RandomElements(uint8_t dtype, size_t n, std::mt19937& rng) {
  const size_t es = hz_dtype_size(dtype);
  std::vector<uint8_t> out(n * es);
  // splitmix64 seeded from rng: cheap enough for megabytes of test data.
  uint64_t state = (static_cast<uint64_t>(rng()) << 32) | rng();
  auto next = [&state] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  // Reals in [-8, 8) on a 1/4096 grid: sums and products stay meaningful.
  auto real = [&] {
    return static_cast<double>(static_cast<int64_t>(next() % 65536) - 32768) / 4096;
  };
  for (size_t i = 0; i < n; ++i) {
    switch (static_cast<DType>(dtype)) {
      case DType::kFp16:
        StoreAt<uint16_t>(out, i, RefFloatToHalf(static_cast<float>(real())));
        break;
      case DType::kBf16:
        StoreAt<uint16_t>(out, i, RefFloatToBf16(static_cast<float>(real())));
        break;
      case DType::kFp32:
        StoreAt<float>(out, i, static_cast<float>(real() * 1.0001));
        break;
      case DType::kFp64:
        StoreAt<double>(out, i, real() * 1.0000001);
        break;
      default: {
        uint64_t bits = next();
        std::memcpy(out.data() + i * es, &bits, es);
      }
    }
  }
  return out;
}

OpDesc AllReduce(uint64_t seq, std::vector<float>& send, std::vector<float>& recv) {
  OpDesc d;
  d.op = Op::kAllReduce;
  d.seq = seq;
  d.count = send.size();
  d.dtype = static_cast<uint8_t>(DType::kFp32);
  d.redop = static_cast<uint8_t>(RedOp::kSum);
  d.send = {IoSpan{reinterpret_cast<uint8_t*>(send.data()), send.size() * 4}};
  d.recv = {IoSpan{reinterpret_cast<uint8_t*>(recv.data()), recv.size() * 4}};
  return d;
}

namespace {

// A callback for Init or Rejoin that fulfils *future.
std::function<void(Status, std::shared_ptr<Member>)> Fulfil(std::future<InitResult>* future) {
  auto p = std::make_shared<std::promise<InitResult>>();
  *future = p->get_future();
  return [p](Status s, std::shared_ptr<Member> m) { p->set_value(InitResult{s, std::move(m)}); };
}

}  // namespace

std::future<InitResult> InitAsync(Engine& e, TenantId t, const Uid& uid, uint32_t n, uint32_t r,
                                  Constraints c) {
  std::future<InitResult> f;
  e.Init(t, uid, n, r, c, Fulfil(&f));
  return f;
}

std::future<InitResult> RejoinAsync(Engine& e, TenantId t, const MemberState& state) {
  std::future<InitResult> f;
  e.Rejoin(t, state, Fulfil(&f));
  return f;
}

InitResult Get(std::future<InitResult>& f) {
  if (f.wait_for(kHang) != std::future_status::ready) {
    ADD_FAILURE() << "a rank's join hangs";
    return {};
  }
  return f.get();
}

}  // namespace hz::coll::testing
