// A communicator across hosts through a live upgrade of one of its hosts
// (the protocol is in cross_host_comm.h, above CrossHostComm): the upgrading
// host's hand-over, the next process's state, and every host's re-formation
// of the inter-host group.
#include <algorithm>
#include <cmath>
#include <set>

#include "command_args.h"
#include "cross_host_comm.h"
#include "spdlog/spdlog.h"

namespace hz::service {

using json = nlohmann::json;

namespace {

constexpr size_t kMaxHostNameBytes = 255;

json ModelJson(const cluster::LegCostModel& model) {
  json lines = json::array();
  for (const auto& line : model.lines) {
    lines.push_back({{"latency_s", line.latency_s}, {"per_byte_s", line.per_byte_s}});
  }
  return lines;
}

Status ParseModel(const json& in, cluster::LegCostModel* model) {
  if (!in.is_array() || in.size() != std::size(model->lines)) {
    return Status::InvalidArgument("leg_model must list one line per algorithm");
  }
  for (size_t a = 0; a < in.size(); ++a) {
    double* fields[] = {&model->lines[a].latency_s, &model->lines[a].per_byte_s};
    const char* names[] = {"latency_s", "per_byte_s"};
    for (size_t f = 0; f < 2; ++f) {
      const auto it = in[a].is_object() ? in[a].find(names[f]) : in[a].end();
      if (it == in[a].end() || !it->is_number() || !std::isfinite(it->get<double>()) ||
          it->get<double>() < 0) {
        return Status::InvalidArgument("leg_model lines are non-negative numbers");
      }
      *fields[f] = it->get<double>();
    }
  }
  return Status::Ok();
}

// [[peer, seq], ...]: each peer once, on another host than `host`.
Status ParsePairs(const json& in, const CrossHostLayout& layout,
                  std::map<uint32_t, uint64_t>* out) {
  if (!in.is_array() || in.size() > layout.nranks) {
    return Status::InvalidArgument("point-to-point counters must be a list of [peer, seq]");
  }
  for (const json& e : in) {
    uint64_t v[2];
    if (!GetUInts(e, v) || v[0] >= layout.nranks ||
        layout.host_of_rank[v[0]] == layout.host_index || !out->emplace(v[0], v[1]).second) {
      return Status::InvalidArgument("point-to-point counters name a peer on another host once");
    }
  }
  return Status::Ok();
}

// hosts and host_of_rank, as LayoutOf makes them: hosts in the order of
// their lowest rank, each holding a rank, this host among them.
Status ParseLayout(const json& x, const coll::MemberState& whole, const std::string& host_name,
                   CrossHostLayout* l) {
  const auto hosts = x.find("hosts");
  const auto of_rank = x.find("host_of_rank");
  if (hosts == x.end() || !hosts->is_array() || hosts->size() < 2 || hosts->size() > whole.nranks ||
      of_rank == x.end() || !of_rank->is_array() || of_rank->size() != whole.nranks) {
    return Status::InvalidArgument("a communicator across hosts names 2..nranks hosts");
  }
  std::set<std::string> seen;
  for (const json& h : *hosts) {
    if (!h.is_string() || h.get<std::string>().empty() ||
        h.get<std::string>().size() > kMaxHostNameBytes ||
        !seen.insert(h.get<std::string>()).second) {
      return Status::InvalidArgument("host names must be distinct non-empty strings");
    }
    l->hosts.push_back(h.get<std::string>());
  }
  uint32_t next_new = 0;  // hosts appear in order of their lowest rank
  for (uint32_t r = 0; r < whole.nranks; ++r) {
    const json& h = (*of_rank)[r];
    if (!h.is_number_unsigned() || h.get<uint64_t>() > next_new ||
        h.get<uint64_t>() >= l->hosts.size()) {
      return Status::InvalidArgument("host_of_rank must number hosts by their lowest rank");
    }
    const auto host = static_cast<uint32_t>(h.get<uint64_t>());
    if (host == next_new) ++next_new;
    l->host_of_rank.push_back(host);
  }
  if (next_new != l->hosts.size()) return Status::InvalidArgument("a host holds no rank");
  const auto self = std::find(l->hosts.begin(), l->hosts.end(), host_name);
  if (self == l->hosts.end()) {
    return Status::InvalidArgument("the communicator has no ranks on host " + host_name);
  }
  l->host_index = static_cast<uint32_t>(self - l->hosts.begin());
  for (uint32_t r = 0; r < whole.nranks; ++r) {
    if (l->host_of_rank[r] == l->host_index) l->local_ranks.push_back(r);
  }
  if (l->host_of_rank[whole.rank] != l->host_index) {
    return Status::InvalidArgument("the rank is not on this host");
  }
  l->nranks = whole.nranks;
  l->deterministic = whole.constraints.deterministic;
  l->allow_lossy = whole.constraints.allow_lossy && !whole.constraints.deterministic;
  return Status::Ok();
}

}  // namespace

StatusOr<CrossHostSaved> ParseCrossHostSaved(const SavedMember& saved,
                                             const std::string& host_name) {
  const json& x = saved.backend["cross_host"];
  if (!x.is_object()) return Status::InvalidArgument("cross_host must be an object");
  if (const auto aborted = x.find("aborted"); aborted != x.end()) {
    return Status::Aborted("the communicator across hosts was aborted before the upgrade: " +
                           (aborted->is_string() ? aborted->get<std::string>() : "?"));
  }
  CrossHostSaved out;
  const coll::MemberState& whole = saved.engine;
  if (Status s = ParseLayout(x, whole, host_name, &out.layout); !s.ok()) return s;
  const auto local = x.find("local");
  if (local == x.end() || !local->is_object()) return Status::InvalidArgument("local is missing");
  const auto uid = local->find("uid");
  if (uid == local->end() || !uid->is_string() ||
      !coll::ParseUidHex(uid->get<std::string>(), &out.local.uid)) {
    return Status::InvalidArgument("local.uid must be 64 lowercase hex digits");
  }
  uint64_t local_nranks = 0, local_rank = 0;
  Status s = GetUInt(*local, "nranks", whole.nranks, &local_nranks);
  if (s.ok()) s = GetUInt(*local, "rank", whole.nranks, &local_rank);
  if (s.ok()) s = GetUInt(*local, "next_seq", kU64Max, &out.local.next_seq);
  if (s.ok()) s = GetUInt(x, "generation", kU64Max, &out.resume.generation);
  if (s.ok()) s = GetUInt(x, "next_seq", kU64Max, &out.resume.next_seq);
  if (s.ok()) s = ParseModel(x.value("leg_model", json()), &out.resume.leg_model);
  if (s.ok()) s = ParsePairs(x.value("sends", json::array()), out.layout, &out.pairs.sends);
  if (s.ok()) s = ParsePairs(x.value("recvs", json::array()), out.layout, &out.pairs.recvs);
  if (!s.ok()) return s;
  if (local_nranks != out.layout.local_ranks.size() ||
      local_rank != out.layout.LocalIndex(whole.rank) || out.resume.generation == 0) {
    return Status::InvalidArgument("the local part does not match where the ranks are");
  }
  out.local.nranks = static_cast<uint32_t>(local_nranks);
  out.local.rank = static_cast<uint32_t>(local_rank);
  out.local.constraints = whole.constraints;
  out.resume.local_seq = out.local.next_seq;
  return out;
}

size_t CrossHostComm::Withdraw(uint32_t global_rank) {
  const uint32_t i = layout_.LocalIndex(global_rank);
  std::vector<coll::Done> withdrawn;
  bool announce = false;
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The leg thread takes an operation out of pending_ before it starts it.
    for (auto it = pending_.begin(); it != pending_.end();) {
      PendingOp& p = it->second;
      if (p.descs[i]) {
        withdrawn.push_back(std::move(p.dones[i]));
        p.dones[i] = nullptr;
        p.descs[i].reset();
        --p.posted;
      }
      it = p.posted == 0 ? pending_.erase(it) : std::next(it);
    }
    announce = aborted_.ok() && group_ != nullptr && announced_ <= generation_;
    generation = generation_ + 1;
  }
  if (announce) {
    // Kept while any host may still find its group failing for it: an
    // operation's timeout, and the other hosts' wait for the new group.
    const auto lifetime = 2 * group_options_.timeout + std::chrono::minutes(1);
    StatusOr<uint64_t> announced = [&] {
      std::lock_guard<std::mutex> lock(store_mu_);
      return directory_.AnnounceReform(uid_hex_, generation, lifetime);
    }();
    if (announced.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      announced_ = std::max(announced_, *announced);
    } else {
      spdlog::warn("event=cross_host_reform_unannounced host_index={} error=\"{}\"",
                   layout_.host_index, announced.status().ToString());
    }
  }
  for (coll::Done& d : withdrawn) d(Status::TryAgain("withdrawn before it started"));
  return withdrawn.size();
}

StatusOr<SavedMember> CrossHostComm::Save(uint32_t global_rank,
                                          const coll::MemberState& local) const {
  std::lock_guard<std::mutex> lock(mu_);
  // Numbered in the whole communicator (what a process that knows nothing
  // of hosts would try, and fail, to rejoin); the local part in `backend`.
  SavedMember saved;
  saved.engine = local;
  saved.engine.uid = keys_.uid;
  saved.engine.nranks = layout_.nranks;
  saved.engine.rank = global_rank;
  saved.engine.next_seq = next_seq_;
  if (!aborted_.ok()) {
    saved.backend = {{"cross_host", {{"aborted", aborted_.message()}}}};
    return saved;
  }
  if (announced_ <= generation_ || !leg_model_) {
    return Status::State("the re-formation of the communicator across hosts was not announced");
  }
  // Each rank saves the counters only it advances (the next process
  // gathers them from every rank of this host).
  json sends = json::array(), recvs = json::array();
  for (const auto& [pair, seq] : next_send_) {
    if (pair.first == global_rank) sends.push_back({pair.second, seq});
  }
  for (const auto& [pair, seq] : next_recv_) {
    if (pair.second == global_rank) recvs.push_back({pair.first, seq});
  }
  json x = {{"hosts", layout_.hosts},
            {"host_of_rank", layout_.host_of_rank},
            {"generation", announced_},
            {"next_seq", next_seq_},
            {"local",
             {{"uid", coll::UidHex(local.uid)},
              {"nranks", local.nranks},
              {"rank", local.rank},
              {"next_seq", local.next_seq}}},
            {"leg_model", ModelJson(*leg_model_)},
            {"sends", std::move(sends)},
            {"recvs", std::move(recvs)}};
  saved.backend = {{"cross_host", std::move(x)}};
  return saved;
}

void CrossHostComm::RestorePairs(uint32_t global_rank, const CrossHostPairs& pairs) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [dst, seq] : pairs.sends) next_send_[{global_rank, dst}] = seq;
  for (const auto& [src, seq] : pairs.recvs) next_recv_[{src, global_rank}] = seq;
}

std::string CrossHostComm::GroupKey(uint64_t generation) const {
  // Generation 0 keeps the key it always had.
  if (generation == 0) return group_options_.key;
  return group_options_.key + "g" + std::to_string(generation) + "/";
}

std::pair<std::shared_ptr<cluster::InterHostGroup>, uint64_t> CrossHostComm::CurrentGroup() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {group_, generation_};
}

std::optional<uint64_t> CrossHostComm::NewerGeneration(const Status& failure, uint64_t used) {
  const StatusCode c = failure.code();
  if (c != StatusCode::kIoError && c != StatusCode::kAborted && c != StatusCode::kTimedOut) {
    return std::nullopt;
  }
  uint64_t own = 0;  // a generation this process announced is its successor's
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_.ok() || stop_) return std::nullopt;
    if (generation_ > used) return generation_;
    own = announced_;
  }
  StatusOr<uint64_t> announced = [&] {
    std::lock_guard<std::mutex> lock(store_mu_);
    return directory_.ReformGeneration(uid_hex_);
  }();
  if (!announced.ok()) {
    spdlog::warn("event=cross_host_reform_unknown host_index={} error=\"{}\"", layout_.host_index,
                 announced.status().ToString());
    return std::nullopt;
  }
  if (*announced <= used || *announced <= own) return std::nullopt;
  return *announced;
}

void CrossHostComm::CheckForReform() {
  const uint64_t used = CurrentGroup().second;
  std::optional<uint64_t> next =
      NewerGeneration(Status::Aborted("a host re-forms the group"), used);
  if (!next) return;
  std::lock_guard<std::mutex> lock(mu_);
  reform_wanted_ = std::max(reform_wanted_, *next);
  wake_.notify_all();
}

StatusOr<std::unique_ptr<cluster::InterHostGroup>> CrossHostComm::ConnectAt(uint64_t generation,
                                                                            uint64_t seq) {
  cluster::GlooGroupOptions o = group_options_;
  o.key = GroupKey(generation);
  StatusOr<std::unique_ptr<cluster::InterHostGroup>> g = cluster::ConnectGlooGroup(o);
  if (!g.ok()) {
    return Status(g.status().code(), "re-forming the group at generation " +
                                         std::to_string(generation) + ": " +
                                         std::string(g.status().message()));
  }
  std::vector<uint64_t> at((*g)->size());
  if (Status s = (*g)->AllGather(&seq, at.data(), sizeof(seq)); !s.ok()) return s;
  for (size_t h = 0; h < at.size(); ++h) {
    if (at[h] != seq) {
      return Status::Aborted("across the upgrade, host " + layout_.hosts[h] +
                             " stood at collective " + std::to_string(at[h]) +
                             " and this host at " + std::to_string(seq));
    }
  }
  spdlog::info("event=cross_host_comm_reformed generation={} host_index={} next_seq={}", generation,
               layout_.host_index, seq);
  return g;
}

Status CrossHostComm::Reform(uint64_t generation, uint64_t seq) {
  // Closing the old group fails every other host's operation with this one
  // at once, so that each of them re-forms too, even one that does not
  // exchange with the upgraded host in the operation it is in.
  if (group_) group_->Close();
  StatusOr<std::unique_ptr<cluster::InterHostGroup>> g = Status::Aborted("not formed");
  if (Status s = InGroup([&] {
        g = ConnectAt(generation, seq);
        return g.status();
      });
      !s.ok()) {
    return s;
  }
  std::lock_guard<std::mutex> lock(mu_);
  group_ = std::move(*g);
  generation_ = generation;
  wake_.notify_all();
  return Status::Ok();
}

bool CrossHostComm::AwaitReform(const Status& failure, uint64_t used) {
  std::optional<uint64_t> next = NewerGeneration(failure, used);
  if (!next) return false;
  std::unique_lock<std::mutex> lock(mu_);
  reform_wanted_ = std::max(reform_wanted_, *next);
  wake_.notify_all();
  // The leg thread re-forms between operations; an operation it runs now
  // fails soon, as every host closes its old group.
  wake_.wait(lock, [&] { return !aborted_.ok() || stop_ || generation_ >= *next; });
  return aborted_.ok() && !stop_;
}

}  // namespace hz::service
