// The operations thread of a soak tenant: checkpoints and events, and the
// check after each fault that nothing acknowledged was lost or leaked.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>

#include "soak_tenant.h"

namespace hz::soak {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

constexpr uint32_t kStream = 1;  // every tenant uses the same stream number
constexpr uint32_t kRetention = 3;
constexpr size_t kCkptBytes = 256 * 1024;
constexpr size_t kMaxList = 64;
// Acknowledged events older than this many seqs are not looked for: the log
// may discard them once it holds more than its retention (SPEC §8.4.1).
constexpr uint64_t kEventWindow = 4000;
constexpr int kEventWaitMs = 5000;  // only detects a log that stopped delivering
constexpr int kControlTimeoutMs = 5000;
constexpr int kOpsPauseMs = 50;  // between operations: a tenant, not a load generator

bool TransportLost(int rc) {
  return rc == HZ_ENODEV || rc == HZ_ETRANSPORT || rc == HZ_ESHUTDOWN;
}

uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Checkpoint contents: a function of the tenant and the step, so a restore
// proves both that the bytes survived and whose they are.
void Fill(uint8_t* p, size_t n, int tag, uint64_t step) {
  uint64_t x = (static_cast<uint64_t>(tag) + 1) * 0x9E3779B97F4A7C15ull ^ step;
  for (size_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = static_cast<uint8_t>(x >> 56);
  }
}

}  // namespace

struct Tenant::Ops {
  Tenant* t;
  std::mt19937_64 rng;
  hz_device_t* dev = nullptr;
  uint8_t* save_buf = nullptr;
  uint8_t* restore_buf = nullptr;
  uint64_t next_step;
  std::set<uint64_t> issued;           // every step this tenant asked to save
  std::set<uint64_t> pending;          // saved (STAGED), not yet seen durable
  std::set<uint64_t> acked;            // seen durable: must restore while retention keeps it
  std::set<uint64_t> injected;         // events the operator command acknowledged
  std::set<uint64_t> tenant_acked;     // events this tenant saw and acknowledged
  bool inject_uncertain = false;       // an injection whose answer was lost may exist
  std::set<uint64_t> suspect_corrupt;  // durable steps a restore called corrupt

  Ops(Tenant* tenant, uint64_t seed)
      : t(tenant),
        rng(seed),
        next_step((static_cast<uint64_t>(tenant->spec_.index) + 1) * 1000000000ull) {}

  std::string Who() const { return "tenant " + t->spec_.name + ": "; }
  void Violation(std::atomic<uint64_t>& c, const std::string& what) {
    t->totals_->Violation(c, Who() + what);
  }

  void Close() {
    if (dev != nullptr) hz_close(dev);
    dev = nullptr;
  }

  // `from_seq`: where the subscription starts (HZ_SEQ_CURSOR: resume).
  bool Connect(uint64_t from_seq = HZ_SEQ_CURSOR) {
    dev = t->OpenRetry(t->spec_.ops_sock);
    if (dev == nullptr) return false;
    hz_ckpt_policy p{0, kRetention, HZ_TIER_LOCAL_DISK, 2000, 0};
    void* a = nullptr;
    void* b = nullptr;
    if (hz_ckpt_set_policy(dev, kStream, &p) != HZ_OK ||
        hz_mem_alloc(dev, kCkptBytes, &a) != HZ_OK || hz_mem_alloc(dev, kCkptBytes, &b) != HZ_OK ||
        hz_event_subscribe(dev, HZ_TOPIC_ALL, from_seq) != HZ_OK) {
      Close();
      return false;
    }
    save_buf = static_cast<uint8_t*>(a);
    restore_buf = static_cast<uint8_t*>(b);
    return true;
  }

  int Save() {
    const uint64_t step = next_step++;
    issued.insert(step);
    Fill(save_buf, kCkptBytes, t->spec_.index, step);
    hz_buf slice{save_buf, kCkptBytes};
    hz_ckpt_info ci{};
    int rc = hz_ckpt_save(dev, kStream, step, &slice, 1, &step, sizeof(step), &ci);
    if (rc != HZ_OK) return rc;
    ++t->totals_->ckpt_save;
    pending.insert(step);
    if (ci.state == HZ_CKPT_DURABLE) Acknowledge(step);
    return rc;
  }

  void Acknowledge(uint64_t step) {
    if (pending.erase(step) == 0) return;
    acked.insert(step);
    ++t->totals_->ckpt_durable;
  }

  // Lists the stream; every entry must be one of this tenant's steps.
  int List(std::vector<hz_ckpt_info>* out) {
    std::vector<hz_ckpt_info> e(kMaxList);
    size_t n = 0;
    int rc = hz_ckpt_list(dev, kStream, e.data(), e.size(), &n);
    if (rc != HZ_OK) return rc;
    ++t->totals_->ckpt_list;
    out->assign(e.begin(), e.begin() + static_cast<long>(n));
    for (const hz_ckpt_info& i : *out) {
      if (issued.count(i.step) == 0) {
        Violation(t->totals_->isolation, "CKPT_LIST shows step " + std::to_string(i.step) +
                                             ", which this tenant never saved");
      }
      if (i.state == HZ_CKPT_DURABLE) Acknowledge(i.step);
    }
    return rc;
  }

  // A durable step must stay restorable until `retention` newer durable
  // checkpoints exist.
  static bool Required(uint64_t step, const std::vector<hz_ckpt_info>& list) {
    uint32_t newer = 0;
    for (const hz_ckpt_info& i : list) newer += i.state == HZ_CKPT_DURABLE && i.step > step;
    return newer < kRetention;
  }

  std::vector<uint64_t> RequiredSteps(const std::vector<hz_ckpt_info>& list) {
    std::vector<uint64_t> out;
    for (auto it = acked.begin(); it != acked.end();) {
      if (Required(*it, list)) {
        out.push_back(*it++);
      } else {
        it = acked.erase(it);  // retention may delete it now; it never becomes required again
      }
    }
    return out;
  }

  // Restores `step` and compares every byte. `final`: the check after a
  // fault, which decides; otherwise a failure only marks the step suspect.
  int RestoreExact(uint64_t step, bool final) {
    hz_buf slice{restore_buf, kCkptBytes};
    std::memset(restore_buf, 0, kCkptBytes);
    uint64_t meta = 0;
    size_t meta_len = sizeof(meta);
    hz_ckpt_info ci{};
    int rc = hz_ckpt_restore(dev, kStream, step, &slice, 1, &meta, &meta_len, &ci);
    if (TransportLost(rc)) return rc;
    if (rc == HZ_ENOENT) {
      // Retention may have deleted it for a save that became durable since
      // the list this choice was made from: ask again before calling it lost.
      std::vector<hz_ckpt_info> list;
      int lrc = List(&list);
      if (lrc != HZ_OK) return lrc;
      if (!Required(step, list)) return HZ_OK;
    }
    if (rc != HZ_OK && !final) {
      std::fprintf(stderr, "soak: %srestore of durable step %llu: %s\n", Who().c_str(),
                   static_cast<unsigned long long>(step), hz_strerror(rc));
      ++t->totals_->restore_errors;
      if (rc == HZ_ECORRUPT) suspect_corrupt.insert(step);
      return HZ_OK;
    }
    if (rc != HZ_OK) {
      Violation(t->totals_->acked_lost,
                "durable step " + std::to_string(step) + " does not restore: " + hz_strerror(rc));
      return rc;
    }
    if (final && suspect_corrupt.erase(step) != 0) {
      Violation(t->totals_->false_corrupt,
                "durable step " + std::to_string(step) + " was reported corrupt, then restored");
    }
    ++t->totals_->ckpt_restore;
    std::vector<uint8_t> want(kCkptBytes);
    Fill(want.data(), kCkptBytes, t->spec_.index, step);
    if (meta != step || std::memcmp(want.data(), restore_buf, kCkptBytes) != 0) {
      Violation(t->totals_->acked_lost,
                "durable step " + std::to_string(step) + " restored different bytes");
    }
    return HZ_OK;
  }

  int RestoreOne() {
    std::vector<hz_ckpt_info> list;
    int rc = List(&list);
    if (rc != HZ_OK) return rc;
    std::vector<uint64_t> steps = RequiredSteps(list);
    if (steps.empty()) return HZ_OK;
    return RestoreExact(steps[rng() % steps.size()], false);
  }

  // The operator publishes a maintenance notice to this tenant.
  void Inject() {
    json r = Control(
        t->svc_->dir(),
        {{"cmd", "event.inject"},
         {"tenant", t->spec_.name},
         {"event",
          {{"topic", "maintenance"}, {"kind", "scheduled"}, {"in_s", 3600}, {"duration_s", 60}}}},
        kControlTimeoutMs);
    if (r.value("ok", false)) {
      injected.insert(r["result"].value("seq", uint64_t{0}));
      ++t->totals_->event_inject;
    } else if (r.value("error", "") != "connect failed") {
      inject_uncertain = true;  // the command may have been carried out
    }
  }

  // Checks one record of this tenant's log; returns its seq.
  void Check(const hz_event& ev) {
    if (ev.topic == HZ_TOPIC_MAINTENANCE && injected.count(ev.seq) == 0 && !inject_uncertain) {
      Violation(t->totals_->isolation,
                "maintenance event " + std::to_string(ev.seq) + " was never injected for it");
    }
    if (ev.topic == HZ_TOPIC_CHECKPOINT) {
      const uint64_t step = Load64(ev.payload + 8);
      if (issued.count(step) == 0) {
        Violation(t->totals_->isolation,
                  "checkpoint event for step " + std::to_string(step) + " of another tenant");
      } else if (ev.kind == 0) {
        Acknowledge(step);
      }
    }
    if (ev.topic == HZ_TOPIC_LOST) {
      const uint64_t first = Load64(ev.payload + 8), last = Load64(ev.payload + 16);
      for (const auto* set : {&injected, &tenant_acked}) {
        auto it = set->lower_bound(first);
        if (it != set->end() && *it <= last) {
          Violation(t->totals_->acked_lost,
                    "LOST record covers acknowledged event " + std::to_string(*it));
        }
      }
    }
  }

  // Reads what is waiting and acknowledges it.
  int DrainEvents() {
    hz_event ev{};
    std::vector<uint64_t> seen;
    int rc;
    while ((rc = hz_event_next(dev, &ev, seen.empty() ? 100 : 0)) == HZ_OK) {
      Check(ev);
      seen.push_back(ev.seq);
    }
    if (rc != HZ_ETIMEDOUT) return rc;
    if (seen.empty()) return HZ_OK;
    rc = hz_event_ack(dev, seen.back(), 0);
    if (rc != HZ_OK) return rc;
    ++t->totals_->event_ack;
    tenant_acked.insert(seen.begin(), seen.end());
    return HZ_OK;
  }

  int Step() {
    const unsigned pick = static_cast<unsigned>(rng() % 100);
    if (pick < 35) return Save();
    if (pick < 55) {
      std::vector<hz_ckpt_info> list;
      return List(&list);
    }
    if (pick < 75) return RestoreOne();
    Inject();
    return DrainEvents();
  }

  int VerifyCheckpoints() {
    std::vector<hz_ckpt_info> list;
    int rc = List(&list);
    if (rc != HZ_OK) return rc;
    for (uint64_t step : RequiredSteps(list)) {
      rc = RestoreExact(step, true);
      if (TransportLost(rc)) return rc;
    }
    return HZ_OK;
  }

  // Where the read-back of the log starts: acknowledged events older than
  // the window are not looked for. 0 when the daemon does not answer.
  uint64_t LogWindow(uint64_t* next) {
    json st = Control(t->svc_->dir(), {{"cmd", "event.status"}, {"tenant", t->spec_.name}},
                      kControlTimeoutMs);
    if (!st.value("ok", false)) return 0;
    *next = st["result"].value("next_seq", uint64_t{0});
    return *next > kEventWindow ? *next - kEventWindow : 1;
  }

  // Reads the log back from `from` (the subscription of a fresh session):
  // every acknowledged event must be there.
  int VerifyEvents(uint64_t from, uint64_t next) {
    std::set<uint64_t> must;
    for (const auto* set : {&injected, &tenant_acked}) {
      for (uint64_t s : *set) {
        if (s >= from && s < next) must.insert(s);
      }
    }
    std::set<uint64_t> seen;
    hz_event ev{};
    int rc = HZ_OK;
    while (seen.size() < (next > from ? next - from : 0)) {
      rc = hz_event_next(dev, &ev, kEventWaitMs);
      if (rc != HZ_OK) break;
      Check(ev);
      if (ev.topic == HZ_TOPIC_LOST) {
        for (uint64_t s = Load64(ev.payload + 8); s <= Load64(ev.payload + 16); ++s) seen.insert(s);
      } else if (ev.seq >= from && ev.seq < next) {
        seen.insert(ev.seq);
      }
    }
    if (TransportLost(rc)) return rc;
    for (uint64_t s : must) {
      if (seen.count(s) == 0) {
        Violation(t->totals_->acked_lost, "acknowledged event " + std::to_string(s) +
                                              " is not in the log (read back from " +
                                              std::to_string(from) + ", " + hz_strerror(rc) + ")");
      }
    }
    return hz_event_subscribe(dev, HZ_TOPIC_ALL, HZ_SEQ_CURSOR);
  }

  // After a fault: a fresh connection, then every acknowledged item.
  bool Verify() {
    Close();
    uint64_t next = 0;
    const uint64_t from = LogWindow(&next);
    if (from == 0 || !Connect(from)) return false;
    int rc = VerifyEvents(from, next);
    if (rc == HZ_OK) rc = VerifyCheckpoints();
    if (TransportLost(rc)) {
      Close();
      return false;
    }
    ++t->totals_->verify;
    return true;
  }
};

void Tenant::OpsLoop() {
  Ops o(this, seed_);
  while (!*stop_) {
    if (o.dev == nullptr && !o.Connect()) continue;
    bool verify;
    {
      std::lock_guard<std::mutex> l(verify_mu_);
      verify = verify_done_ < verify_requested_;
    }
    if (verify) {
      // Retried until it runs on a connection that stays up.
      if (o.Verify()) {
        std::lock_guard<std::mutex> l(verify_mu_);
        verify_done_ = verify_requested_;
        verify_cv_.notify_all();
      } else {
        std::this_thread::sleep_for(milliseconds(kOpsPauseMs));
      }
      continue;
    }
    int rc = o.Step();
    if (TransportLost(rc)) {
      o.Close();
      ++totals_->reconnect;
    }
    std::this_thread::sleep_for(milliseconds(kOpsPauseMs));
  }
  o.Close();
}

}  // namespace hz::soak
