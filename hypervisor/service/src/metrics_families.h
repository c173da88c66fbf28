// Helpers that put the service's metrics into a prometheus-cpp Registry.
//
// Every scrape builds a fresh Registry from the counters the service keeps
// anyway (lock-free atomics on the request path, engine statistics), and
// serialises it with prometheus-cpp's TextSerializer; the registry owns the
// exposition format (HELP/TYPE lines, escaping, histogram buckets) so no
// component hand-writes it. The endpoint stays on Boost.Beast
// (metrics_server.h): prometheus-cpp's own exposer would bring CivetWeb, a
// second HTTP stack and thread pool beside the service's Asio loop, without
// the connection cap and accept back-off the Beast listener already has.
#ifndef HZ_SERVICE_SRC_METRICS_FAMILIES_H_
#define HZ_SERVICE_SRC_METRICS_FAMILIES_H_

#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace hz::service {

prometheus::Family<prometheus::Counter>& CounterFamily(prometheus::Registry* r,
                                                       const std::string& name,
                                                       const std::string& help);
prometheus::Family<prometheus::Gauge>& GaugeFamily(prometheus::Registry* r, const std::string& name,
                                                   const std::string& help);

// A series of a counter family with the value a counter of the service holds.
void SetCounter(prometheus::Family<prometheus::Counter>& f, const prometheus::Labels& labels,
                double value);
void SetGauge(prometheus::Family<prometheus::Gauge>& f, const prometheus::Labels& labels,
              double value);

// One unlabelled series.
void AddCounter(prometheus::Registry* r, const std::string& name, const std::string& help,
                double value);
void AddGauge(prometheus::Registry* r, const std::string& name, const std::string& help,
              double value);

// The registry in the Prometheus text format 0.0.4.
std::string SerializeMetrics(const prometheus::Registry& r);

}  // namespace hz::service

#endif  // HZ_SERVICE_SRC_METRICS_FAMILIES_H_
