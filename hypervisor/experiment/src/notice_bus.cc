#include "notice_bus.h"

#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <system_error>

namespace hz::experiment {

TenantId TenantOf(size_t job) {
  return TenantId("job-" + std::to_string(job));
}

uint64_t SimSeconds(double t) {
  return static_cast<uint64_t>(std::ceil(t));
}

namespace {

// The bus syncs each tenant directory it makes or removes, whatever its
// fsync policy; a run makes thousands. In memory, when the host has
// /dev/shm, those syncs cost nothing, and nothing here outlives the run.
std::filesystem::path ScratchBase() {
  std::error_code ec;
  if (access("/dev/shm", W_OK) == 0) return "/dev/shm";
  std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
  return ec ? std::filesystem::path("/tmp") : tmp;
}

}  // namespace

Status NoticeBus::Open(std::function<uint64_t()> clock, std::unique_ptr<NoticeBus>* out) {
  std::string dir = (ScratchBase() / "hz-experiment-bus.XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) {
    return Status::IoError("no scratch directory for the event bus under " + dir);
  }
  std::unique_ptr<NoticeBus> bus(new NoticeBus(dir));
  events::BusOptions o;
  o.dir = dir;
  o.retention = 64;
  // Nothing here outlives the run: the log need not survive a power loss.
  o.fsync = events::FsyncPolicy::kNone;
  o.clock = std::move(clock);
  Status s = events::EventBus::Open(std::move(o), &bus->bus_);
  if (!s.ok()) return s;
  *out = std::move(bus);
  return Status::Ok();
}

NoticeBus::~NoticeBus() {
  readers_.clear();
  bus_.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

Status NoticeBus::Publish(const TenantId& tenant, const events::EventSpec& spec, uint64_t* seq) {
  published_.insert(tenant);
  return bus_->Publish(tenant, spec, seq);
}

Status NoticeBus::Approve(const TenantId& tenant, uint64_t seq) {
  auto it = readers_.find(tenant);
  if (it == readers_.end() || !it->second) return Status::State("the tenant has read nothing");
  hz_event_ack_args args{};
  args.seq = seq;
  args.flags = HZ_ACK_F_APPROVE;
  return it->second->Ack(args);
}

void NoticeBus::SetApprovalCallback(events::EventBus::ApprovalCallback callback) {
  bus_->SetApprovalCallback(std::move(callback));
}

void NoticeBus::Forget(const TenantId& tenant) {
  readers_.erase(tenant);
  if (published_.erase(tenant) == 0) return;  // it has no log
  // Only a connected delivery (none now) keeps a tenant: nothing can fail
  // that the run depends on, and what is left goes with the directory.
  (void)bus_->Forget(tenant);
}

std::vector<hz_event> NoticeBus::Read(const TenantId& tenant) {
  // Connecting opens a log: most tenants are never told anything.
  if (published_.count(tenant) == 0) return {};
  std::unique_ptr<events::Delivery>& reader = readers_[tenant];
  if (!reader) {
    hz_event_subscribe_args args{};
    args.topics = HZ_TOPIC_ALL;
    args.from_seq = 1;  // from its first event
    hz_event_subscribe_result result{};
    if (!bus_->Connect(tenant, "guest", &reader).ok() || !reader->Subscribe(args, &result).ok()) {
      reader.reset();
      return {};
    }
  }
  std::vector<hz_event> out;
  hz_event e{};
  while (reader->Next(&e)) out.push_back(e);
  return out;
}

}  // namespace hz::experiment
