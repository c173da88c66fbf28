#include "metrics_families.h"

#include <prometheus/text_serializer.h>

namespace hz::service {

prometheus::Family<prometheus::Counter>& CounterFamily(prometheus::Registry* r,
                                                       const std::string& name,
                                                       const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(*r);
}

prometheus::Family<prometheus::Gauge>& GaugeFamily(prometheus::Registry* r, const std::string& name,
                                                   const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(*r);
}

void SetCounter(prometheus::Family<prometheus::Counter>& f, const prometheus::Labels& labels,
                double value) {
  // The registry is fresh for each scrape, so the series starts at zero.
  f.Add(labels).Increment(value);
}

void SetGauge(prometheus::Family<prometheus::Gauge>& f, const prometheus::Labels& labels,
              double value) {
  f.Add(labels).Set(value);
}

void AddCounter(prometheus::Registry* r, const std::string& name, const std::string& help,
                double value) {
  SetCounter(CounterFamily(r, name, help), {}, value);
}

void AddGauge(prometheus::Registry* r, const std::string& name, const std::string& help,
              double value) {
  SetGauge(GaugeFamily(r, name, help), {}, value);
}

std::string SerializeMetrics(const prometheus::Registry& r) {
  return prometheus::TextSerializer().Serialize(r.Collect());
}

}  // namespace hz::service
