// Saves checkpoints of one stream in a loop, printing "D <step>" on stdout
// (one write per line) each time the engine reports a checkpoint durable.
// It continues after the newest checkpoint already on disk. Usage:
//   checkpoint_persist_loop ROOT
#include <unistd.h>

#include <cstdio>
#include <string>

#include "crash_state.h"

namespace {

using namespace hz::checkpoint;
using hz::Status;

class StdoutSink : public EventSink {
 public:
  void Publish(const hz::TenantId&, EventKind kind, StreamId, uint64_t step) override {
    if (kind != EventKind::kDurable) return;
    char line[48];
    int n = snprintf(line, sizeof line, "D %llu\n", static_cast<unsigned long long>(step));
    if (write(1, line, static_cast<size_t>(n)) != n) _exit(3);
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s ROOT\n", argv[0]);
    return 2;
  }
  StdoutSink sink;
  EngineConfig cfg = crash::LoopConfig(argv[1]);
  cfg.sink = &sink;
  std::unique_ptr<Engine> eng;
  if (Status err = Engine::Open(cfg, &eng); !err.ok()) {
    fprintf(stderr, "open: %s\n", err.ToString().c_str());
    return 1;
  }
  Policy p;
  p.retention = crash::kRetention;
  p.stall_budget_ms = 60000;
  if (!eng->SetPolicy(crash::kTenant, crash::kStream, p).ok()) return 1;
  uint64_t step = 0;
  std::vector<ListEntry> entries;
  bool more = false;
  uint64_t after = 0;
  do {
    if (!eng->List(crash::kTenant, crash::kStream, after, 100, &entries, &more).ok()) {
      return 1;
    }
    if (!entries.empty()) after = step = entries.back().step;
  } while (more);
  // Runs until killed (or a step cap, so a stray loop ends by itself).
  for (uint64_t n = 0; n < 100000; ++n) {
    ++step;
    auto state = crash::StateFor(step);
    std::vector<IoSpan> spans;
    for (auto& s : state) spans.push_back({s.data(), s.size()});
    auto meta = crash::MetaFor(step);
    SaveResult r;
    Status st = eng->Save({crash::kTenant, crash::kStream, step, spans, meta}, &r);
    if (!st.ok()) {
      fprintf(stderr, "save %llu: %s\n", static_cast<unsigned long long>(step),
              st.ToString().c_str());
      return 1;
    }
  }
  return 0;
}
