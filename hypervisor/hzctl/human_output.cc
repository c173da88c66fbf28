#include "human_output.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "libvirt_cli.h"
#include "maintenance_cli.h"

namespace hzctl {

using json = nlohmann::json;

namespace {

std::string Human(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char out[32];
  std::snprintf(out, sizeof(out), "%.*f %s", u == 0 ? 0 : 1, v, units[u]);
  return out;
}

unsigned long long U(const json& j, const char* k) {
  return j.value(k, 0ull);
}

void PrintCluster(const json& r) {
  if (r.value("mode", std::string()) != "cluster") {
    std::printf("single host: no [cluster] section in the configuration\n");
    return;
  }
  std::printf("host %s (data %s), store %s: %s, lease %llu ms, store answered %lld ms ago\n",
              r.value("host", std::string()).c_str(),
              r.value("data_address", std::string()).c_str(),
              r.value("store", std::string()).c_str(), r.value("state", std::string()).c_str(),
              U(r, "lease_ms"), static_cast<long long>(r.value("ms_since_store_contact", -1ll)));
  if (r.contains("detail")) std::printf("  %s\n", r.value("detail", std::string()).c_str());
  std::printf("%-24s %-40s %14s\n", "HOST", "DATA_ADDRESS", "LEASE_LEFT_MS");
  for (const json& h : r.value("hosts", json::array())) {
    std::printf("%-24s %-40s %14lld%s\n", h.value("name", std::string()).c_str(),
                h.value("data_address", std::string()).c_str(),
                static_cast<long long>(h.value("lease_remaining_ms", 0ll)),
                h.value("self", false) ? "  (this host)" : "");
  }
  const json comms = r.value("communicators", json::array());
  std::printf("communicators across hosts: %zu\n", comms.size());
  for (const json& c : comms) {
    std::string hosts;
    for (const json& h : c.value("hosts", json::array())) {
      hosts += (hosts.empty() ? "" : ",") + h.get<std::string>();
    }
    std::printf("  tenant=%s nranks=%llu hosts=%s local_ranks=%zu state=%s next_seq=%llu %s\n",
                c.value("tenant", std::string()).c_str(), U(c, "nranks"), hosts.c_str(),
                c.value("local_ranks", json::array()).size(),
                c.value("state", std::string()).c_str(), U(c, "next_seq"),
                c.value("abort_reason", std::string()).c_str());
  }
}

// One table cell or "key: value" value: strings bare, booleans yes/no,
// arrays of scalars joined by commas, anything deeper as compact JSON.
std::string Cell(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_null()) return "-";
  if (v.is_array()) {
    std::string out;
    for (const json& e : v) {
      if (e.is_structured()) return v.dump();
      out += (out.empty() ? "" : ",") + Cell(e);
    }
    return out.empty() ? "none" : out;
  }
  return v.dump();
}

bool IsTable(const json& v) {
  if (!v.is_array() || v.empty()) return false;
  for (const json& e : v) {
    if (!e.is_object()) return false;
  }
  return true;
}

std::string Upper(std::string s) {
  for (char& c : s) c = (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c;
  return s;
}

// Rows of objects as aligned columns, one per key in the order first seen.
void PrintTable(const json& rows, const std::string& indent) {
  std::vector<std::string> keys;
  for (const json& row : rows) {
    for (auto it = row.begin(); it != row.end(); ++it) {
      bool known = false;
      for (const std::string& k : keys) known = known || k == it.key();
      if (!known) keys.push_back(it.key());
    }
  }
  std::vector<std::vector<std::string>> cells(1);
  for (const std::string& k : keys) cells[0].push_back(Upper(k));
  for (const json& row : rows) {
    cells.emplace_back();
    for (const std::string& k : keys) cells.back().push_back(row.contains(k) ? Cell(row[k]) : "-");
  }
  std::vector<size_t> width(keys.size(), 0);
  for (const auto& line : cells) {
    for (size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], line[i].size());
  }
  for (const auto& line : cells) {
    std::string out = indent;
    for (size_t i = 0; i < line.size(); ++i) {
      out += line[i];
      if (i + 1 < line.size()) out += std::string(width[i] - line[i].size() + 2, ' ');
    }
    std::printf("%s\n", out.c_str());
  }
}

void PrintIndented(const json& r, const std::string& indent) {
  if (IsTable(r)) {
    PrintTable(r, indent);
    return;
  }
  if (!r.is_object()) {
    std::printf("%s%s\n", indent.c_str(), r.is_array() && r.empty() ? "(none)" : Cell(r).c_str());
    return;
  }
  size_t width = 0;
  for (auto it = r.begin(); it != r.end(); ++it) width = std::max(width, it.key().size());
  // Scalars first, aligned, then each nested object or table under its key.
  for (auto it = r.begin(); it != r.end(); ++it) {
    if (it->is_object() || IsTable(*it)) continue;
    std::printf("%s%-*s  %s\n", indent.c_str(), static_cast<int>(width + 1),
                (it.key() + ":").c_str(),
                it->is_array() && it->empty() ? "none" : Cell(*it).c_str());
  }
  for (auto it = r.begin(); it != r.end(); ++it) {
    if (!it->is_object() && !IsTable(*it)) continue;
    std::printf("%s%s:\n", indent.c_str(), it.key().c_str());
    if (it->empty()) {
      std::printf("%s  (none)\n", indent.c_str());
    } else {
      PrintIndented(*it, indent + "  ");
    }
  }
}

}  // namespace

void PrintHuman(const std::string& cmd, const json& r) {
  if (MaintenanceCli::Print(cmd, r) || LibvirtCli::Print(cmd, r)) return;
  if (cmd == "tenant.list") {
    std::printf("%-20s %6s %-8s %8s %12s %12s %12s %9s %10s %10s %s\n", "TENANT", "WEIGHT",
                "PRIORITY", "REGIONS", "MAX_REGIONS", "BYTES", "MAX_BYTES", "MAX_NEGS", "DISK",
                "STAGING", "FEATURES");
    for (const json& t : r) {
      const unsigned long long negs = U(t, "max_open_negotiations");
      auto own = [](unsigned long long v) { return v == 0 ? std::string("default") : Human(v); };
      std::string features;
      for (const json& f : t.value("features", json::array())) {
        features += (features.empty() ? "" : ",") + f.get<std::string>();
      }
      std::printf("%-20s %6llu %-8s %8llu %12llu %12s %12s %9s %10s %10s %s\n",
                  t.value("name", std::string()).c_str(), U(t, "weight"),
                  t.value("priority", std::string()).c_str(), U(t, "regions"), U(t, "max_regions"),
                  Human(U(t, "region_bytes")).c_str(), Human(U(t, "max_region_bytes")).c_str(),
                  negs == 0 ? "default" : std::to_string(negs).c_str(),
                  own(U(t, "disk_bytes")).c_str(), own(U(t, "staging_bytes")).c_str(),
                  features.empty() ? "none" : features.c_str());
    }
  } else if (cmd == "event.status") {
    std::printf("tenant %s: next seq %llu, oldest retained %llu\n",
                r.value("tenant", std::string()).c_str(), U(r, "next_seq"), U(r, "oldest_seq"));
    std::printf("%-28s %10s %10s %s\n", "BINDING", "CURSOR", "DELIVERED", "CONNECTED");
    for (const json& b : r.value("bindings", json::array())) {
      std::printf("%-28s %10llu %10llu %s\n", b.value("binding", std::string()).c_str(),
                  U(b, "cursor"), U(b, "delivered"), b.value("connected", false) ? "yes" : "no");
    }
    std::string approved;
    for (const json& a : r.value("approved", json::array())) {
      approved += (approved.empty() ? "" : " ") + std::to_string(a.get<uint64_t>());
    }
    std::printf("approved early: %s\n", approved.empty() ? "none" : approved.c_str());
  } else if (cmd == "checkpoint.list") {
    std::printf("%-8s %-20s %12s %-8s %-11s %s\n", "STREAM", "STEP", "BYTES", "STATE", "TIER",
                "TIME_S");
    for (const json& s : r.value("streams", json::array())) {
      for (const json& c : s.value("checkpoints", json::array())) {
        std::printf("%-8llu %-20llu %12s %-8s %-11s %llu\n", U(s, "stream"), U(c, "step"),
                    Human(U(c, "bytes")).c_str(), c.value("state", std::string()).c_str(),
                    c.value("tier", std::string()).c_str(), U(c, "time_s"));
      }
    }
    for (const json& d : r.value("decisions", json::array())) {
      std::printf("decision %s stream=%llu step=%llu value=%llu\n",
                  d.value("kind", std::string()).c_str(), U(d, "stream"), U(d, "step"),
                  U(d, "value"));
    }
  } else if (cmd == "vm.list") {
    for (const json& v : r) {
      std::printf("%s  tenant=%s domain=%s listening=%s thread=%llu\n",
                  v.value("socket", std::string()).c_str(),
                  v.value("tenant", std::string()).c_str(),
                  v.value("domain", std::string()).c_str(),
                  v.value("listening", false) ? "yes" : "no", U(v, "thread"));
      for (const json& d : v.value("devices", json::array())) {
        std::printf(
            "  connected=%s hello=%s queues=%zu regions=%llu (%s) communicators=%zu "
            "requests=%llu errors=%llu in_flight=%llu events_held=%llu\n",
            d.value("connected", false) ? "yes" : "no", d.value("hello", false) ? "yes" : "no",
            d.value("queues", json::array()).size(), U(d, "regions"),
            Human(U(d, "region_bytes")).c_str(), d.value("communicators", json::array()).size(),
            U(d, "requests"), U(d, "errors"), U(d, "in_flight"), U(d, "events_held"));
        for (const json& c : d.value("communicators", json::array())) {
          std::printf("    comm handle=%llu id=%llu rank=%llu/%llu\n", U(c, "handle"),
                      U(c, "comm_id"), U(c, "rank"), U(c, "nranks"));
        }
      }
    }
  } else if (cmd == "comm.list") {
    std::printf("%-8s %-8s %-7s %-7s %-9s %-8s %-9s\n", "ID", "TENANT", "NRANKS", "JOINED",
                "NEXT_SEQ", "PENDING", "STATE");
    for (const json& c : r) {
      std::printf("%-8llu %-8s %-7llu %-7llu %-9llu %-8llu %-9s\n", U(c, "id"),
                  c.value("tenant", std::string()).c_str(), U(c, "nranks"), U(c, "joined"),
                  U(c, "next_seq"), U(c, "pending"), c.value("state", std::string()).c_str());
    }
  } else if (cmd == "cluster.status") {
    PrintCluster(r);
  } else if (r.is_object() && r.empty()) {
    std::printf("ok\n");
  } else {
    PrintGeneric(r);
  }
}

void PrintGeneric(const json& r) {
  PrintIndented(r, "");
}

}  // namespace hzctl
