#include "hz/experiment/comm_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "hz/scheduler/planner.h"
#include "protocol/harmonaize.h"

namespace hz::experiment {
namespace {

// Sizes from the Llama 3 family: 8B (arXiv 2407.21783, Table 3) and the
// Llama 3.2 1B and 3B model cards.
const std::vector<JobClass> kClasses = {
    {1, "Llama 3.2 1B", 1.24e9, 16, 2048},
    {2, "Llama 3.2 3B", 3.21e9, 28, 3072},
    {4, "Llama 3 8B", 8.03e9, 32, 4096},
    {8, "Llama 3 8B", 8.03e9, 32, 4096},
};

// nlohmann's number or 0 when the key is absent or not a number.
double Number(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0;
}

std::vector<nlohmann::json> Lines(const std::string& jsonl, const char* bench) {
  std::vector<nlohmann::json> out;
  std::istringstream in(jsonl);
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.value("bench", std::string()) == bench && !j.contains("error"))
      out.push_back(std::move(j));
  }
  return out;
}

// `v` with `decimals` decimals, for a source's text.
std::string Num(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

// Each configuration's points (bus bytes, seconds) of the measured engine
// and of its same-run reference.
struct Series {
  std::vector<std::pair<double, double>> subject, reference;
};

// The two engines fitted in each configuration where both fit.
struct ConfigFit {
  std::string config;
  AlphaBeta subject, reference;
};

std::vector<ConfigFit> FitConfigs(const std::map<std::string, Series>& configs) {
  std::vector<ConfigFit> out;
  for (const auto& [config, series] : configs) {
    ConfigFit f{config, {}, {}};
    if (FitAlphaBeta(series.subject, &f.subject).ok() &&
        FitAlphaBeta(series.reference, &f.reference).ok())
      out.push_back(f);
  }
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The median over configurations of what `get` takes from each, and the
// configurations' labels.
template <typename Get>
double MedianOf(const std::vector<ConfigFit>& fits, Get get) {
  std::vector<double> v;
  for (const ConfigFit& f : fits) v.push_back(get(f));
  return Median(v);
}

std::string Labels(const std::vector<ConfigFit>& fits) {
  std::string out;
  for (const ConfigFit& f : fits) out += (out.empty() ? "" : ", ") + f.config;
  return out;
}

}  // namespace

const std::vector<JobClass>& JobClasses() {
  return kClasses;
}

const JobClass& ClassFor(uint32_t gpus) {
  const JobClass* best = &kClasses.front();
  for (const JobClass& c : kClasses) {
    if (c.gpus <= gpus) best = &c;
  }
  return *best;
}

Engine StandardEngine(const Model& m) {
  return {m.nccl_alpha_s.value, m.nccl_bus_efficiency.value, m.net_alpha_s.value,
          std::min(1.0, m.standard_net_efficiency.value)};
}

// What was measured against the same-run references carries over to the
// tenant's library on the GPU links; no engine runs faster than the link.
Engine ProviderEngine(const Model& m) {
  return {m.nccl_alpha_s.value + m.provider_added_latency_s.value,
          std::min(1.0, m.nccl_bus_efficiency.value * m.provider_busbw_ratio.value),
          m.net_alpha_s.value * m.provider_net_alpha_ratio.value,
          std::min(1.0, m.provider_net_efficiency.value)};
}

double RingFactor(int ranks) {
  return ranks < 2 ? 0 : 2.0 * (ranks - 1) / ranks;
}

double AllReduceSeconds(double bytes, int ranks, int hosts, double intra_gbs, double net_gbs,
                        const Engine& e) {
  if (ranks < 2 || hosts < 1) return 0;
  const int per_host = std::max(1, ranks / hosts);
  double t = 0;
  if (per_host >= 2)
    t += e.alpha_s + RingFactor(per_host) * bytes / (intra_gbs * 1e9 * e.efficiency);
  if (hosts >= 2) {
    t +=
        e.net_alpha_s + RingFactor(hosts) * (bytes / per_host) / (net_gbs * 1e9 * e.net_efficiency);
  }
  return t;
}

Iteration IterationTime(const Model& m, uint32_t gpus, int group, double group_s_per_gb,
                        double gradient_gbs, int hosts, const Engine& e) {
  const JobClass& c = ClassFor(gpus);
  const int k = std::max(1, group);
  const double sequences = m.sequences_per_iteration.value;
  const double tokens = sequences * m.sequence_tokens.value;
  Iteration it;
  // 6 FLOPs per parameter and token (forward and backward), the group's
  // tokens shared by its k GPUs.
  it.compute_s = 6 * c.params * tokens / k / (m.gpu_bf16_tflops.value * 1e12 * m.mfu.value);
  if (k >= 2 && gpus >= 2) {
    // Megatron-LM (arXiv 1909.08053) 3: two all-reduces of the activations
    // forward and two backward per layer, each a sequence x hidden in BF16.
    const double calls = 4.0 * c.layers * sequences;
    const double bytes = m.sequence_tokens.value * c.hidden * 2;
    it.tensor_s = calls * (e.alpha_s + bytes / 1e9 * group_s_per_gb / e.efficiency);
  }
  const int replicas = static_cast<int>(gpus) / k;
  if (replicas >= 2) {
    // Gradients in BF16, each rank its 1/k shard, all-reduced bucket by
    // bucket across the replicas; not overlapped with the backward pass,
    // an upper bound on its cost.
    const double bytes = 2 * c.params / k;
    const double bucket = m.gradient_bucket_mb.value * 1e6;
    const double calls = std::ceil(bytes / bucket);
    it.gradient_s = calls * AllReduceSeconds(bytes / calls, replicas, hosts, gradient_gbs,
                                             m.net_gbs_per_gpu.value, e);
  }
  return it;
}

double SharedGBs(double gbs, double neighbours_comm) {
  if (gbs >= scheduler::NominalGBs(HZ_BW_ULTRA)) return gbs;
  return gbs / (1 + std::max(0.0, neighbours_comm));
}

Status FitAlphaBeta(const std::vector<std::pair<double, double>>& points, AlphaBeta* out) {
  std::map<double, std::vector<double>> by_size;
  for (const auto& [x, t] : points) {
    if (!(t > 0) || !(x > 0)) return Status::InvalidArgument("fit: a time or size is not positive");
    by_size[x].push_back(t);
  }
  if (by_size.size() < 2) return Status::InvalidArgument("fit: fewer than 2 sizes");
  // Latency where it dominates, bandwidth where it does: small buffers run
  // from the caches at a rate large ones never see. Each size counts with
  // its median time.
  auto small = by_size.begin();
  const double x0 = small->first, t0 = Median(small->second);
  ++small;
  const double x1 = small->first, t1 = Median(small->second);
  auto large = by_size.rbegin();
  const double xn = large->first, tn = Median(large->second);
  ++large;
  const double xm = large->first, tm = Median(large->second);
  const double per_byte = (tn - tm) / (xn - xm);
  double alpha = t0 - x0 * (t1 - t0) / (x1 - x0);
  // A latency far below the smallest call's time (Open MPI's shared memory
  // on two ranks) can come out negative from two noisy points: then it is
  // what the smallest call takes beyond its transfer at the streaming rate.
  if (!(alpha > 0)) alpha = t0 - x0 * per_byte;
  if (!(alpha > 0) || !(per_byte > 0))
    return Status::InvalidArgument("fit: no positive latency or rate");
  *out = {alpha, 1 / per_byte / 1e9};
  return Status::Ok();
}

void FitServiceAllReduce(const std::string& jsonl, FittedFigures* out,
                         std::vector<std::string>* skipped) {
  std::map<std::string, Series> configs;
  for (const nlohmann::json& j : Lines(jsonl, "service_allreduce")) {
    const int p = static_cast<int>(Number(j, "ranks"));
    const double bus = RingFactor(p) * Number(j, "bytes");
    if (bus <= 0) continue;
    Series& s = configs[std::to_string(p) + " ranks"];
    if (double t = Number(j, "time_us"); t > 0) s.subject.push_back({bus, t / 1e6});
    if (double bw = Number(j, "mpi_busbw_gbps"); bw > 0)
      s.reference.push_back({bus, bus / (bw * 1e9)});
  }
  const std::vector<ConfigFit> fits = FitConfigs(configs);
  if (fits.empty()) {
    skipped->insert(skipped->end(), {"provider_added_latency_s", "provider_busbw_ratio"});
    return;
  }
  const std::string where = "service_allreduce_bench here, median over " + Labels(fits) +
                            ": harmonaized's all-reduce over Open MPI's shared-memory one, ";
  const double sa = MedianOf(fits, [](const ConfigFit& f) { return f.subject.alpha_s; });
  const double ra = MedianOf(fits, [](const ConfigFit& f) { return f.reference.alpha_s; });
  const double sb = MedianOf(fits, [](const ConfigFit& f) { return f.subject.bus_gbs; });
  const double rb = MedianOf(fits, [](const ConfigFit& f) { return f.reference.bus_gbs; });
  // A service no slower than Open MPI adds nothing; a figure is positive.
  const double added =
      MedianOf(fits, [](const ConfigFit& f) { return f.subject.alpha_s - f.reference.alpha_s; });
  out->push_back({"provider_added_latency_s",
                  {std::max(added, 1e-9), "s",
                   where + "latency (" + Num(sa * 1e6, 1) + " against " + Num(ra * 1e6, 1) +
                       " us), the difference"}});
  out->push_back(
      {"provider_busbw_ratio",
       {MedianOf(fits, [](const ConfigFit& f) { return f.subject.bus_gbs / f.reference.bus_gbs; }),
        "x", where + "bus bandwidth (" + Num(sb, 2) + " against " + Num(rb, 2) + " GB/s)"}});
}

void FitClusterAllReduce(const std::string& jsonl, FittedFigures* out,
                         std::vector<std::string>* skipped) {
  std::map<std::string, Series> configs;
  double rate_mbit = 0;
  bool one_rate = true;
  for (const nlohmann::json& j : Lines(jsonl, "cluster_allreduce")) {
    const int hosts = static_cast<int>(Number(j, "hosts"));
    const double bus = RingFactor(hosts) * Number(j, "bytes");
    const double rate = Number(j, "rate_mbit");
    if (bus <= 0 || rate <= 0 || j.value("lossy_bf16", false)) continue;
    one_rate = one_rate && (rate_mbit == 0 || rate == rate_mbit);
    rate_mbit = rate;
    Series& s = configs[std::to_string(hosts) + "x" +
                        std::to_string(static_cast<int>(Number(j, "ranks_per_host")))];
    if (double t = Number(j, "device_us"); t > 0) s.subject.push_back({bus, t / 1e6});
    if (double t = Number(j, "gloo_us"); t > 0) s.reference.push_back({bus, t / 1e6});
  }
  const std::vector<ConfigFit> fits = FitConfigs(configs);
  if (!one_rate || fits.empty()) {
    skipped->insert(skipped->end(), {"provider_net_alpha_ratio", "provider_net_efficiency",
                                     "standard_net_efficiency"});
    return;
  }
  const double link_gbs = rate_mbit * 1e6 / 8 / 1e9;
  const std::string where = "cluster_allreduce_bench here, median over hosts x ranks " +
                            Labels(fits) + " on " + Num(rate_mbit, 0) + " Mb/s shaped links: ";
  const double da = MedianOf(fits, [](const ConfigFit& f) { return f.subject.alpha_s; });
  const double ga = MedianOf(fits, [](const ConfigFit& f) { return f.reference.alpha_s; });
  const double db = MedianOf(fits, [](const ConfigFit& f) { return f.subject.bus_gbs; });
  const double gb = MedianOf(fits, [](const ConfigFit& f) { return f.reference.bus_gbs; });
  out->push_back(
      {"provider_net_alpha_ratio",
       {MedianOf(fits, [](const ConfigFit& f) { return f.subject.alpha_s / f.reference.alpha_s; }),
        "x",
        where + "the device's latency over flat Gloo's (" + Num(da * 1e6, 0) + " against " +
            Num(ga * 1e6, 0) + " us)"}});
  out->push_back({"provider_net_efficiency",
                  {db / link_gbs, "share of the link",
                   where + "the device's bus bandwidth, " + Num(db, 3) + " of " + Num(link_gbs, 3) +
                       " GB/s"}});
  out->push_back({"standard_net_efficiency",
                  {gb / link_gbs, "share of the link",
                   where + "flat Gloo over TCP's bus bandwidth, " + Num(gb, 3) + " of " +
                       Num(link_gbs, 3) + " GB/s"}});
}

}  // namespace hz::experiment
