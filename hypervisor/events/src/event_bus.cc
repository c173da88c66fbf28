#include "hz/events/event_bus.h"

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <future>

#include "hz/common/file.h"
#include "tenant_log.h"

namespace hz::events {

// --- Delivery -------------------------------------------------------------

Delivery::Delivery(std::shared_ptr<TenantLog> log, std::shared_ptr<SubscriberState> state)
    : log_(std::move(log)), state_(std::move(state)) {}

Delivery::~Delivery() {
  log_->Disconnect(*state_, /*save=*/!abandoned_);
}

Status Delivery::Subscribe(const hz_event_subscribe_args& args, hz_event_subscribe_result* result) {
  return log_->Subscribe(*state_, args, result);
}

bool Delivery::Next(hz_event* out) {
  return log_->Next(*state_, out);
}

bool Delivery::Pending() {
  return log_->Pending(*state_);
}

DeliveryPosition Delivery::Position() const {
  return log_->Position(*state_);
}

Status Delivery::Resume(const DeliveryPosition& position) {
  return log_->Resume(*state_, position);
}

Status Delivery::Ack(const hz_event_ack_args& args) {
  std::promise<Status> answered;
  std::future<Status> answer = answered.get_future();
  AckAsync(args, [&answered](Status s) { answered.set_value(std::move(s)); });
  return answer.get();
}

void Delivery::AckAsync(const hz_event_ack_args& args, AckDone done) {
  log_->AckAsync(state_, args, std::move(done));
}

void Delivery::SetNotify(std::function<void()> notify) {
  std::lock_guard<std::mutex> lock(state_->notify_mu);
  state_->notify = std::move(notify);
}

const TenantId& Delivery::tenant() const {
  return log_->tenant();
}
const std::string& Delivery::subscriber() const {
  return state_->name;
}

// --- EventBus -------------------------------------------------------------

EventBus::EventBus(BusOptions options)
    : options_(std::move(options)),
      approval_(std::make_shared<ApprovalHolder>()),
      writer_(std::make_shared<StateWriter>()) {}

EventBus::~EventBus() {
  // Every ack queued is written and answered before the bus goes.
  writer_->Stop();
}

Status EventBus::Open(BusOptions options, std::unique_ptr<EventBus>* bus) {
  if (options.dir.empty()) return Status::InvalidArgument("event bus directory not set");
  if (options.retention == 0) return Status::InvalidArgument("retention must be at least 1");
  if (!options.write_state) {
    options.write_state = [](const std::string& path, const std::string& contents, bool sync) {
      return WriteFileAtomic(path, contents, sync);
    };
  }
  if (!options.clock) {
    options.clock = [] {
      return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count());
    };
  }
  Status s = MakeDir(options.dir);
  if (!s.ok()) return s;
  bus->reset(new EventBus(std::move(options)));
  return Status::Ok();
}

namespace {

// What identifies the contents of a file without reading it: a damaged log
// is read again only once the operator changed or moved it.
std::string FileIdentity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "absent";
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" +
         std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

}  // namespace

Status EventBus::Tenant(const TenantId& tenant, std::shared_ptr<TenantLog>* log) {
  if (!ValidName(tenant.name())) return Status::InvalidArgument("bad tenant name");
  const std::string dir = options_.dir + "/" + tenant.name();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tenants_.find(tenant);
  if (it != tenants_.end()) {
    *log = it->second;
    return Status::Ok();
  }
  // A guest retrying cannot make the service read the whole damaged log, or
  // keep another copy of it, for every request.
  auto damaged = damaged_.find(tenant);
  if (damaged != damaged_.end()) {
    if (damaged->second.identity == FileIdentity(dir + "/events.log"))
      return damaged->second.status;
    damaged_.erase(damaged);
  }
  auto created = std::make_shared<TenantLog>(tenant, dir, options_, approval_, writer_);
  Status s = created->Open();
  if (!s.ok() && created->log_damaged()) {
    damaged_[tenant] = {s, FileIdentity(dir + "/events.log")};
  }
  if (!s.ok()) return s;
  tenants_[tenant] = created;
  *log = created;
  return Status::Ok();
}

Status EventBus::Publish(const TenantId& tenant, const EventSpec& spec, uint64_t* seq) {
  std::shared_ptr<TenantLog> log;
  Status s = Tenant(tenant, &log);
  if (!s.ok()) return s;
  return log->Publish(spec, seq);
}

Status EventBus::Connect(const TenantId& tenant, const std::string& subscriber,
                         std::unique_ptr<Delivery>* delivery) {
  if (!ValidName(subscriber)) return Status::InvalidArgument("bad subscriber name");
  std::shared_ptr<TenantLog> log;
  Status s = Tenant(tenant, &log);
  if (!s.ok()) return s;
  std::shared_ptr<SubscriberState> state;
  s = log->Connect(subscriber, &state);
  if (!s.ok()) return s;
  delivery->reset(new Delivery(log, state));
  return Status::Ok();
}

void EventBus::SetApprovalCallback(ApprovalCallback callback) {
  std::lock_guard<std::mutex> lock(approval_->mu);
  approval_->callback = std::move(callback);
}

Status EventBus::Summary(const TenantId& tenant, TenantSummary* summary) {
  std::shared_ptr<TenantLog> log;
  Status s = Tenant(tenant, &log);
  if (!s.ok()) return s;
  log->Summary(summary);
  return Status::Ok();
}

StatusOr<bool> EventBus::HoldsEvents(const TenantId& tenant) {
  if (!ValidName(tenant.name())) return Status::InvalidArgument("bad tenant name");
  struct stat st {};
  if (stat((options_.dir + "/" + tenant.name()).c_str(), &st) != 0) return false;
  TenantSummary summary;
  if (Status s = Summary(tenant, &summary); !s.ok()) return s;
  return summary.next_seq > 1;
}

Status EventBus::Forget(const TenantId& tenant) {
  if (!ValidName(tenant.name())) return Status::InvalidArgument("bad tenant name");
  const std::string dir = options_.dir + "/" + tenant.name();
  std::shared_ptr<TenantLog> log;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tenants_.find(tenant);
    if (it != tenants_.end()) log = it->second;
  }
  // A write still queued (the last delivery's REPLAY marks) holds the log too.
  if (log) log->WaitWritten();
  log.reset();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tenants_.find(tenant);
  if (it != tenants_.end()) {
    // Deliveries share the log; one still connected would write its cursor
    // into the directory of a tenant created later under the same name.
    if (it->second.use_count() > 1) return Status::Busy("a delivery of the tenant is connected");
    tenants_.erase(it);
  }
  damaged_.erase(tenant);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec) return Status::IoError(dir + ": " + ec.message());
  return SyncDir(options_.dir);
}

Status EventBus::Get(const TenantId& tenant, uint64_t seq, hz_event* event) {
  std::shared_ptr<TenantLog> log;
  Status s = Tenant(tenant, &log);
  if (!s.ok()) return s;
  return log->Get(seq, event);
}

}  // namespace hz::events
