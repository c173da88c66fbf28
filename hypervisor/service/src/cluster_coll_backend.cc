#include "cluster_coll_backend.h"

#include <algorithm>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "hz/common/thread_priority.h"
#include "spdlog/spdlog.h"

namespace hz::service {

namespace {

using Clock = std::chrono::steady_clock;

// How often an init looks again for ranks that have not been placed yet.
constexpr auto kPollInterval = std::chrono::milliseconds(20);

const CrossHostMember* AsCrossHost(const MemberPtr& m) {
  return dynamic_cast<const CrossHostMember*>(m.get());
}

// The hosts in the order of their lowest rank, and where each rank is.
CrossHostLayout LayoutOf(const cluster::Placement& p, const std::string& self) {
  CrossHostLayout l;
  l.nranks = p.nranks;
  std::vector<std::string> hosts;  // in order of first appearance by rank
  for (const auto& [rank, host] : p.hosts) {
    auto it = std::find(hosts.begin(), hosts.end(), host);
    if (it == hosts.end()) it = hosts.insert(hosts.end(), host);
    l.host_of_rank.push_back(static_cast<uint32_t>(it - hosts.begin()));
    if (host == self) l.local_ranks.push_back(rank);
  }
  l.host_index = static_cast<uint32_t>(std::find(hosts.begin(), hosts.end(), self) - hosts.begin());
  l.hosts = std::move(hosts);
  return l;
}

}  // namespace

struct ClusterCollBackend::Joining {
  Joining(boost::asio::io_context& io) : timer(io) {}
  TenantId tenant;
  coll::Uid uid;
  std::string hex;
  uint32_t nranks = 0;
  uint32_t rank = 0;
  coll::Constraints constraints;
  InitDone done;
  Clock::time_point deadline;
  bool tenant_checked = false;
  boost::asio::steady_timer timer;
};

ClusterCollBackend::ClusterCollBackend(std::unique_ptr<CollBackend> local,
                                       ClusterCollOptions options)
    : local_(std::move(local)),
      options_(std::move(options)),
      directory_(options_.store, options_.key_prefix, options_.store_timeout),
      work_(io_.get_executor()),
      thread_(NamedThread("hz-cluster", [this] { io_.run(); })) {}

std::chrono::milliseconds ClusterCollBackend::TimeoutOf(const coll::Constraints& c) const {
  return std::chrono::milliseconds(c.timeout_ms ? c.timeout_ms : options_.default_timeout_ms);
}

ClusterCollBackend::~ClusterCollBackend() {
  Shutdown();
}

Status ClusterCollBackend::NewUid(const TenantId& tenant, coll::Uid* out) {
  if (Status s = local_->NewUid(tenant, out); !s.ok()) return s;
  // Published off the connection thread; an init elsewhere that comes first
  // waits for it (Step).
  boost::asio::post(io_, [this, hex = coll::UidHex(*out), name = tenant.name()] {
    if (Status s = directory_.PublishUid(hex, name, options_.uid_lifetime); !s.ok()) {
      spdlog::warn("event=cluster_uid_publish_failed error=\"{}\"", s.ToString());
    }
  });
  return Status::Ok();
}

void ClusterCollBackend::Init(const TenantId& tenant, const coll::Uid& uid, uint32_t nranks,
                              uint32_t rank, coll::Constraints c, InitDone done) {
  if (nranks == 0 || rank >= nranks) {
    return done(Status::InvalidArgument("rank must be below nranks"), nullptr);
  }
  auto j = std::make_shared<Joining>(io_);
  j->tenant = tenant;
  j->uid = uid;
  j->hex = coll::UidHex(uid);
  j->nranks = nranks;
  j->rank = rank;
  j->constraints = c;
  j->done = std::move(done);
  j->deadline = Clock::now() + TimeoutOf(c);
  boost::asio::post(io_, [this, j] { Step(j); });
}

void ClusterCollBackend::Step(const std::shared_ptr<Joining>& j) {
  if (!j->tenant_checked) {
    StatusOr<std::optional<std::string>> owner = directory_.UidTenant(j->hex);
    if (!owner.ok()) return j->done(owner.status(), nullptr);
    if (!*owner) return Retry(j);  // not published yet, or never
    if (**owner != j->tenant.name()) {
      return j->done(Status::Permission("the communicator belongs to another tenant"), nullptr);
    }
    j->tenant_checked = true;
  }
  const auto lifetime = std::chrono::duration_cast<std::chrono::milliseconds>(
      j->deadline - Clock::now() + options_.uid_lifetime);
  StatusOr<cluster::Placement> p =
      directory_.Claim(j->hex, j->nranks, j->rank, options_.host_name, lifetime);
  if (!p.ok()) return j->done(p.status(), nullptr);
  if (!p->complete()) return Retry(j);
  Placed(j, *p);
}

void ClusterCollBackend::Retry(const std::shared_ptr<Joining>& j) {
  if (Clock::now() >= j->deadline) {
    Status why = j->tenant_checked
                     ? Status::TimedOut("not every rank of the communicator joined in time")
                     : Status::NotFound("no host knows the communicator's uid");
    return j->done(why, nullptr);
  }
  j->timer.expires_after(kPollInterval);
  j->timer.async_wait([this, j](const boost::system::error_code& ec) {
    if (ec) return j->done(Status::Shutdown("the service is stopping"), nullptr);
    Step(j);
  });
}

StatusOr<ClusterCollBackend::LocalPart*> ClusterCollBackend::PartFor(
    const std::shared_ptr<Joining>& j, const CrossHostLayout& layout) {
  auto it = joining_.find(j->uid);
  if (it != joining_.end()) return &it->second;
  LocalPart part;
  if (Status s = local_->NewUid(j->tenant, &part.local_uid); !s.ok()) return s;
  part.remaining = static_cast<uint32_t>(layout.local_ranks.size());
  if (layout.nhosts() > 1) {
    part.comm = std::make_shared<CrossHostComm>(*local_, layout, KeysFor(j->uid),
                                                GroupFor(j->uid, layout, j->constraints), stats_);
    part.comm->Start();
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(comms_, [](const auto& w) { return w.expired(); });
    comms_.push_back(part.comm);
  }
  return &joining_.emplace(j->uid, std::move(part)).first->second;
}

CrossHostKeys ClusterCollBackend::KeysFor(const coll::Uid& uid) const {
  return {uid, options_.store, options_.key_prefix, options_.store_timeout};
}

cluster::GlooGroupOptions ClusterCollBackend::GroupFor(const coll::Uid& uid,
                                                       const CrossHostLayout& layout,
                                                       const coll::Constraints& c) const {
  return {options_.store,        options_.key_prefix + "gloo/" + coll::UidHex(uid) + "/",
          options_.data_address, layout.host_index,
          layout.nhosts(),       TimeoutOf(c)};
}

void ClusterCollBackend::Placed(const std::shared_ptr<Joining>& j, const cluster::Placement& p) {
  CrossHostLayout layout = LayoutOf(p, options_.host_name);
  layout.deterministic = j->constraints.deterministic;
  layout.allow_lossy = j->constraints.allow_lossy && !j->constraints.deterministic;
  layout.tenant = j->tenant.name();
  StatusOr<LocalPart*> part = PartFor(j, layout);
  if (!part.ok()) return j->done(part.status(), nullptr);
  std::shared_ptr<CrossHostComm> comm = (*part)->comm;
  const coll::Uid local_uid = (*part)->local_uid;
  if (--(*part)->remaining == 0) joining_.erase(j->uid);
  const uint32_t local_n = static_cast<uint32_t>(layout.local_ranks.size());
  local_->Init(j->tenant, local_uid, local_n, layout.LocalIndex(j->rank), j->constraints,
               [j, comm](Status st, MemberPtr m) {
                 if (!comm) return j->done(st, std::move(m));  // every rank is on this host
                 if (!st.ok()) {
                   comm->Abort(st);
                   return j->done(st, nullptr);
                 }
                 comm->AddLocal(j->rank, std::move(m), std::move(j->done));
               });
}

void ClusterCollBackend::Post(const MemberPtr& m, coll::OpDesc op, coll::Done done) {
  if (const CrossHostMember* x = AsCrossHost(m)) {
    return x->comm()->Post(x->rank(), std::move(op), std::move(done));
  }
  local_->Post(m, std::move(op), std::move(done));
}

void ClusterCollBackend::Destroy(const MemberPtr& m) {
  if (const CrossHostMember* x = AsCrossHost(m)) {
    x->comm()->Release(coll::AbortCause::kSessionEnded);
    return local_->Destroy(x->local());
  }
  local_->Destroy(m);
}

void ClusterCollBackend::Leave(const MemberPtr& m) {
  if (const CrossHostMember* x = AsCrossHost(m)) {
    x->comm()->Release(coll::AbortCause::kDestroyed);
    return local_->Leave(x->local());
  }
  local_->Leave(m);
}

void ClusterCollBackend::HandOver(const MemberPtr& m) {
  if (const CrossHostMember* x = AsCrossHost(m)) {
    x->comm()->HandOver();
    return local_->HandOver(x->local());
  }
  local_->HandOver(m);
}

void ClusterCollBackend::DestroyAsync(MemberPtr m) {
  if (const CrossHostMember* x = AsCrossHost(m)) {
    x->comm()->Abort(Status::Aborted("a rank's session ended"), coll::AbortCause::kSessionEnded);
    return local_->DestroyAsync(x->local());
  }
  local_->DestroyAsync(std::move(m));
}

size_t ClusterCollBackend::Withdraw(const MemberPtr& m) {
  const CrossHostMember* x = AsCrossHost(m);
  if (x == nullptr) return local_->Withdraw(m);
  // Sends and receives between this host's ranks are the engine's.
  return x->comm()->Withdraw(x->rank()) + local_->Withdraw(x->local());
}

Status ClusterCollBackend::SaveMember(const MemberPtr& m, SavedMember* out) const {
  const CrossHostMember* x = AsCrossHost(m);
  if (x == nullptr) return local_->SaveMember(m, out);
  SavedMember local;
  if (Status s = local_->SaveMember(x->local(), &local); !s.ok()) return s;
  StatusOr<SavedMember> saved = x->comm()->Save(x->rank(), local.engine);
  if (!saved.ok()) return saved.status();
  *out = std::move(*saved);
  return Status::Ok();
}

StatusOr<std::shared_ptr<CrossHostComm>> ClusterCollBackend::RejoinedComm(
    const coll::Uid& uid, const CrossHostSaved& saved, const coll::Constraints& c) {
  std::lock_guard<std::mutex> lock(mu_);
  Rejoining& r = rejoining_[uid];
  if (r.comm == nullptr) {
    r.comm = std::make_shared<CrossHostComm>(*local_, saved.layout, KeysFor(uid),
                                             GroupFor(uid, saved.layout, c), stats_, saved.resume);
    r.comm->Start();
    r.remaining = static_cast<uint32_t>(saved.layout.local_ranks.size());
    std::erase_if(comms_, [](const auto& w) { return w.expired(); });
    comms_.push_back(r.comm);
    ReformNotice notice{coll::UidHex(uid), {}};
    for (uint32_t h = 0; h < saved.layout.nhosts(); ++h) {
      if (h != saved.layout.host_index) notice.hosts.push_back(saved.layout.hosts[h]);
    }
    if (host_caller_) {
      boost::asio::post(io_, [this, notice = std::move(notice)] { Notify(notice); });
    } else {
      unsent_.push_back(std::move(notice));
    }
  } else if (r.comm->layout().hosts != saved.layout.hosts ||
             r.comm->layout().host_of_rank != saved.layout.host_of_rank) {
    return Status::InvalidArgument("the ranks of a communicator disagree on where they are");
  }
  std::shared_ptr<CrossHostComm> comm = r.comm;
  if (--r.remaining == 0) rejoining_.erase(uid);
  return comm;
}

void ClusterCollBackend::SetHostCaller(HostCaller call) {
  std::lock_guard<std::mutex> lock(mu_);
  host_caller_ = std::move(call);
  for (ReformNotice& n : unsent_) {
    boost::asio::post(io_, [this, n = std::move(n)] { Notify(n); });
  }
  unsent_.clear();
}

void ClusterCollBackend::Notify(ReformNotice notice) {
  HostCaller call;
  {
    std::lock_guard<std::mutex> lock(mu_);
    call = host_caller_;
  }
  for (const std::string& host : notice.hosts) {
    StatusOr<nlohmann::json> r = call(host, {{"cmd", kReformCommand}, {"uid", notice.uid_hex}});
    if (!r.ok()) {
      // That host re-forms when its next operation fails instead.
      spdlog::warn("event=cross_host_reform_notice_failed host={} error=\"{}\"", host,
                   r.status().ToString());
    }
  }
}

nlohmann::json ClusterCollBackend::ReformRequested(const nlohmann::json& req) {
  coll::Uid uid;
  const auto hex = req.find("uid");
  if (hex == req.end() || !hex->is_string() || !coll::ParseUidHex(hex->get<std::string>(), &uid)) {
    return {{"ok", false},
            {"error", "uid must be 64 lowercase hex digits"},
            {"status", static_cast<int>(StatusCode::kInvalidArgument)}};
  }
  std::vector<std::shared_ptr<CrossHostComm>> matching;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& w : comms_) {
      if (auto c = w.lock(); c && c->keys().uid == uid) matching.push_back(std::move(c));
    }
  }
  for (const auto& c : matching) c->CheckForReform();
  return {{"ok", true}, {"result", {{"communicators", matching.size()}}}};
}

void ClusterCollBackend::Rejoin(const TenantId& tenant, const SavedMember& saved,
                                std::function<void(Status, MemberPtr)> done) {
  if (!saved.backend.is_object() || !saved.backend.contains("cross_host")) {
    return local_->Rejoin(tenant, saved, std::move(done));
  }
  StatusOr<CrossHostSaved> parsed = ParseCrossHostSaved(saved, options_.host_name);
  if (!parsed.ok()) return done(parsed.status(), nullptr);
  parsed->layout.tenant = tenant.name();
  StatusOr<std::shared_ptr<CrossHostComm>> comm =
      RejoinedComm(saved.engine.uid, *parsed, saved.engine.constraints);
  if (!comm.ok()) return done(comm.status(), nullptr);
  const uint32_t rank = saved.engine.rank;
  (*comm)->RestorePairs(rank, parsed->pairs);
  SavedMember local;
  local.engine = parsed->local;
  local_->Rejoin(tenant, local,
                 [comm = *comm, rank, done = std::move(done)](Status st, MemberPtr m) mutable {
                   if (!st.ok()) {
                     comm->Abort(st);
                     return done(st, nullptr);
                   }
                   comm->AddLocal(rank, std::move(m), std::move(done));
                 });
}

void ClusterCollBackend::Abort(const MemberPtr& m) {
  if (const CrossHostMember* x = AsCrossHost(m)) {
    x->comm()->Abort(Status::Aborted("a rank aborted the communicator"),
                     coll::AbortCause::kAbortCalled);
    return local_->Abort(x->local());
  }
  local_->Abort(m);
}

uint32_t ClusterCollBackend::AbortDetail(const MemberPtr& m) const {
  if (const CrossHostMember* x = AsCrossHost(m)) {
    // Why the whole communicator was aborted; the local part only follows.
    const coll::AbortCause cause = x->comm()->abort_cause();
    if (cause != coll::AbortCause::kNone) return static_cast<uint32_t>(cause);
    return local_->AbortDetail(x->local());
  }
  return local_->AbortDetail(m);
}

void ClusterCollBackend::HostLeft(const std::string& host, const std::string& why) {
  std::vector<std::shared_ptr<CrossHostComm>> affected;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& w : comms_) {
      auto c = w.lock();
      if (!c) continue;
      const auto& hosts = c->layout().hosts;
      if (std::find(hosts.begin(), hosts.end(), host) != hosts.end()) affected.push_back(c);
    }
  }
  for (auto& c : affected) {
    c->Abort(Status::Aborted("host " + host + " of the communicator left the cluster: " + why));
  }
}

std::vector<CrossHostCommInfo> ClusterCollBackend::CrossHostComms() const {
  std::vector<CrossHostCommInfo> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& w : comms_) {
    if (auto c = w.lock()) out.push_back(c->Info());
  }
  return out;
}

WaitingTime ClusterCollBackend::FabricWaiting(std::set<std::string>* tenants) const {
  for (const CrossHostCommInfo& c : CrossHostComms()) tenants->insert(c.tenant);
  return stats_->fabric.Measure();
}

BackendStats ClusterCollBackend::Stats() const {
  BackendStats s = local_->Stats();
  for (cluster::InterHostAlgorithm a : cluster::kInterHostAlgorithms) {
    s.algorithms.push_back({std::string("cross_host_") + cluster::InterHostAlgorithmName(a),
                            stats_->by_algorithm[static_cast<size_t>(a)].load()});
  }
  s.algorithms.push_back({"cross_host_lossy_bf16", stats_->lossy.load()});
  s.cross_host = {{"local_ns", stats_->local_ns.load()},
                  {"leg_ns", stats_->leg_ns.load()},
                  {"output_ns", stats_->output_ns.load()},
                  {"failed", stats_->failed.load()}};
  return s;
}

void ClusterCollBackend::Shutdown() {
  if (shut_down_.exchange(true)) return;
  if (thread_.joinable()) {
    work_.reset();
    io_.stop();
    thread_.join();
  }
  std::vector<std::shared_ptr<CrossHostComm>> comms;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& w : comms_) {
      if (auto c = w.lock()) comms.push_back(std::move(c));
    }
    comms_.clear();
  }
  // A leg thread inside a group operation ends when the operation's timeout
  // passes; the shutdown does not wait for that.
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  for (auto& c : comms) {
    if (!c->Stop(deadline)) {
      spdlog::warn("event=cross_host_comm_left_running reason=in_group_operation");
    }
  }
  local_->Shutdown();
}

}  // namespace hz::service
