// hz events: the events waiting now, or --follow to keep printing them.
#include <csignal>
#include <memory>
#include <sstream>

#include "cli.h"

namespace hz::cli {
namespace {

const char* kTopicNames[] = {"failure",    "maintenance", "preemption", "capacity", "congestion",
                             "checkpoint", "negotiation", "hint",       "energy"};

volatile std::sig_atomic_t stop = 0;

std::string TopicName(unsigned t) {
  if (t < std::size(kTopicNames)) return kTopicNames[t];
  if (t == HZ_TOPIC_LOST) return "lost";
  return "topic" + std::to_string(t);
}

// "failure,checkpoint" -> mask; false on an unknown name.
bool ParseTopics(const std::string& list, uint64_t* mask, std::string* bad) {
  if (list.empty() || list == "all") {
    *mask = HZ_TOPIC_ALL;
    return true;
  }
  *mask = 0;
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ',')) {
    bool found = false;
    for (unsigned t = 0; t < std::size(kTopicNames); ++t) {
      if (name == kTopicNames[t]) {
        *mask |= HZ_TOPIC_MASK(t);
        found = true;
      }
    }
    if (!found) {
      *bad = name;
      return false;
    }
  }
  return true;
}

}  // namespace

int Events(const Options& o, bool follow, const std::string& topics, int wait_ms, bool approve) {
  uint64_t mask = 0;
  std::string bad;
  if (!ParseTopics(topics, &mask, &bad)) {
    std::fprintf(stderr,
                 "hz: unknown topic '%s' (topics: failure, maintenance, preemption, "
                 "capacity, congestion, checkpoint, negotiation, hint, energy, all)\n",
                 bad.c_str());
    return kUsage;
  }
  int code = kOk;
  std::unique_ptr<hz_device_t, decltype(&hz_close)> dev(Open(o, &code), &hz_close);
  if (!dev) return code;
  if (int err = hz_event_subscribe(dev.get(), mask, HZ_SEQ_CURSOR); err != HZ_OK)
    return Error(o, "subscribe to events", err);
  std::signal(SIGINT, [](int) { stop = 1; });
  std::signal(SIGTERM, [](int) { stop = 1; });
  while (!stop) {
    hz_event ev{};
    // Following: short waits, so that a signal ends the loop promptly.
    int err = hz_event_next(dev.get(), &ev, follow ? 500 : wait_ms);
    if (err == HZ_ETIMEDOUT) {
      if (follow) continue;
      break;
    }
    if (err != HZ_OK) return Error(o, "next event", err);
    nlohmann::json j = {{"seq", ev.seq},       {"topic", TopicName(ev.topic)},
                        {"kind", ev.kind},     {"flags", ev.flags},
                        {"time_s", ev.time_s}, {"deadline_s", ev.deadline_s}};
    // The topic's payload (SPEC.md §8.3) as it came, in hex.
    static const char kHex[] = "0123456789abcdef";
    std::string payload;
    for (uint8_t b : ev.payload) payload += {kHex[b >> 4], kHex[b & 15]};
    j["payload"] = payload;
    std::ostringstream h;
    h << "#" << ev.seq << " " << TopicName(ev.topic) << " kind " << ev.kind << " at " << ev.time_s;
    if (ev.deadline_s) h << " deadline " << ev.deadline_s;
    h << "\n";
    Print(o, j, h.str());
    // The tenant is ready: it acknowledges the notice and approves it.
    if (approve && (ev.flags & HZ_EVENT_F_APPROVABLE) != 0) {
      if (int e = hz_event_ack(dev.get(), ev.seq, HZ_ACK_F_APPROVE); e != HZ_OK) {
        return Error(o, "approve event", e);
      }
    }
  }
  return kOk;
}

}  // namespace hz::cli
