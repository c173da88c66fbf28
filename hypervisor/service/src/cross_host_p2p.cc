// Send and recv between ranks on different hosts (SPEC §7.4.5), through the
// communicator's InterHostGroup beside its collectives.
//
// Each pair's side runs on a thread of its own, so that no pair waits for
// another (a ring shift posted recv-first completes) nor for the leg thread;
// a communicator runs at most kMaxPointToPoint of them, each with one staging
// chunk, so a tenant bounds neither the daemon's threads nor its memory.
//
// The wire, per pair (src -> dst, seq): the sender offers (count, dtype), the
// receiver answers with its own, and only when they agree does the data move,
// in chunks; otherwise both sides complete with kMismatch and nothing moved.
// The offer waits for the partner until the side's deadline (its post time
// plus the communicator's timeout): kTimedOut then, which aborts the
// communicator as any timeout does (SPEC §7.3.6). Each message has its own
// tag from (kind, src, dst, seq), so pairs never mix.
#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "cross_host_comm.h"
#include "cross_host_copy.h"
#include "hz/common/thread_priority.h"
#include "protocol/harmonaize.h"
#include "spdlog/spdlog.h"

namespace hz::service {

namespace {

using Clock = std::chrono::steady_clock;

// Threads (and staging chunks) per communicator.
constexpr uint32_t kMaxPointToPoint = 64;
// The staging chunk: large enough for the link's rate, small enough that
// kMaxPointToPoint of them stay modest.
constexpr size_t kChunkBytes = 1 << 20;

enum class Kind : uint64_t { kOffer = 0, kAnswer = 1, kData = 2 };

// 2 bits of kind, 16 of each rank (max_comm_ranks is at most 2^16) and 22 of
// the pair's seq: a pair's seq wraps long after its earlier pairs completed.
uint64_t Tag(Kind kind, uint32_t src, uint32_t dst, uint64_t seq) {
  return static_cast<uint64_t>(kind) << 54 | uint64_t{src & 0xffffu} << 38 |
         uint64_t{dst & 0xffffu} << 22 | (seq & 0x3fffffu);
}

struct Header {
  uint64_t count = 0;
  uint64_t dtype = 0;
};

std::chrono::milliseconds Until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

size_t Bytes(const coll::OpDesc& op) {
  // The service checked count against the buffer (hz_coll_bytes) when posted.
  return op.count * hz_dtype_size(static_cast<enum hz_dtype>(op.dtype));
}

}  // namespace

void CrossHostComm::PostAcrossHosts(uint32_t global_rank, coll::OpDesc& op, coll::Done& done) {
  PointToPoint p;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!aborted_.ok()) {
      Status why = aborted_;
      lock.unlock();
      return done(why);
    }
    if (p2p_threads_ >= kMaxPointToPoint) {
      lock.unlock();
      return done(Status::Limit("too many sends and receives across hosts in flight"));
    }
    const bool send = op.op == coll::Op::kSend;
    const auto pair =
        send ? std::make_pair(global_rank, op.peer) : std::make_pair(op.peer, global_rank);
    p.seq = (send ? next_send_ : next_recv_)[pair]++;
    p.id = next_p2p_id_++;
    p2p_dones_.emplace(p.id, std::move(done));
    ++p2p_threads_;
  }
  p.me = global_rank;
  p.op = std::move(op);
  p.deadline = Clock::now() + group_options_.timeout;
  // The thread keeps the communicator (and its group) alive until it ends.
  NamedThread("hz-xhost-p2p", [self = shared_from_this(), p = std::move(p)]() mutable {
    self->RunPointToPoint(std::move(p));
  }).detach();
}

void CrossHostComm::RunPointToPoint(PointToPoint p) {
  Status s;
  for (;;) {
    auto [group, generation] = CurrentGroup();
    s = AgreeAcrossHosts(p, *group);
    if (s.ok()) {
      s = p.op.op == coll::Op::kSend ? SendAcrossHosts(p, *group) : RecvAcrossHosts(p, *group);
    }
    if (s.ok() || s.code() == StatusCode::kMismatch) break;
    // A host handed the communicator to its next process: the pair starts
    // over on the re-formed group, under the same seq (the partner's side
    // failed too, or is posted again there), with the whole timeout to meet
    // its partner again. Should the partner's side have completed in the
    // instant the old group closed, this side finds no partner and fails
    // by its timeout, which aborts the communicator: never a wrong match,
    // since each message's tag carries its pair seq.
    if (!AwaitReform(s, generation)) break;
    p.deadline = Clock::now() + group_options_.timeout;
  }
  coll::Done done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = p2p_dones_.find(p.id);
    if (it != p2p_dones_.end()) {  // else an abort answered it
      done = std::move(it->second);
      p2p_dones_.erase(it);
    }
  }
  // A mismatch leaves the communicator usable; any other failure of the
  // group (a timeout, a lost host) leaves the group unusable.
  if (!s.ok() && s.code() != StatusCode::kMismatch) {
    stats_->failed.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("event=cross_host_p2p_failed op={} rank={} peer={} error=\"{}\"",
                 p.op.op == coll::Op::kSend ? "send" : "recv", p.me, p.op.peer, s.ToString());
    Abort(s, s.code() == StatusCode::kTimedOut ? coll::AbortCause::kTimedOut
                                               : coll::AbortCause::kProvider);
  }
  if (done) done(s);
  std::lock_guard<std::mutex> lock(mu_);
  --p2p_threads_;
  wake_.notify_all();
}

Status CrossHostComm::AgreeAcrossHosts(const PointToPoint& p, cluster::InterHostGroup& group) {
  const bool send = p.op.op == coll::Op::kSend;
  const uint32_t host = layout_.host_of_rank[p.op.peer];
  const uint32_t src = send ? p.me : p.op.peer;
  const uint32_t dst = send ? p.op.peer : p.me;
  const Header mine{p.op.count, p.op.dtype};
  Header theirs;
  // The offer waits for the partner; the answer follows it at once.
  const uint64_t offer = Tag(Kind::kOffer, src, dst, p.seq);
  const uint64_t answer = Tag(Kind::kAnswer, src, dst, p.seq);
  Status s = send ? group.Send(host, offer, &mine, sizeof(mine), Until(p.deadline))
                  : group.Recv(host, offer, &theirs, sizeof(theirs), Until(p.deadline));
  if (s.ok()) {
    s = send ? group.Recv(host, answer, &theirs, sizeof(theirs), group_options_.timeout)
             : group.Send(host, answer, &mine, sizeof(mine), group_options_.timeout);
  }
  if (!s.ok()) return s;
  if (theirs.count != mine.count || theirs.dtype != mine.dtype) {
    return Status::Mismatch("send and recv disagree on count or dtype");
  }
  return Status::Ok();
}

Status CrossHostComm::SendAcrossHosts(const PointToPoint& p, cluster::InterHostGroup& group) {
  const size_t bytes = Bytes(p.op);
  const uint32_t host = layout_.host_of_rank[p.op.peer];
  const uint64_t tag = Tag(Kind::kData, p.me, p.op.peer, p.seq);
  std::vector<uint8_t> chunk(std::min(bytes, kChunkBytes));
  for (size_t off = 0; off < bytes; off += chunk.size()) {
    const size_t n = std::min(chunk.size(), bytes - off);
    if (Status s = Touching([&] { Gather(p.op.send, off, n, chunk.data()); }); !s.ok()) return s;
    if (Status s = group.Send(host, tag, chunk.data(), n, group_options_.timeout); !s.ok()) {
      return s;
    }
  }
  return Status::Ok();
}

Status CrossHostComm::RecvAcrossHosts(const PointToPoint& p, cluster::InterHostGroup& group) {
  const size_t bytes = Bytes(p.op);
  const uint32_t host = layout_.host_of_rank[p.op.peer];
  const uint64_t tag = Tag(Kind::kData, p.op.peer, p.me, p.seq);
  std::vector<uint8_t> chunk(std::min(bytes, kChunkBytes));
  for (size_t off = 0; off < bytes; off += chunk.size()) {
    const size_t n = std::min(chunk.size(), bytes - off);
    if (Status s = group.Recv(host, tag, chunk.data(), n, group_options_.timeout); !s.ok()) {
      return s;
    }
    if (Status s = Touching([&] { Scatter(chunk.data(), n, p.op.recv, off); }); !s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace hz::service
