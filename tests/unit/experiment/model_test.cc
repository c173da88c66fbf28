#include "hz/experiment/model.h"

#include <gtest/gtest.h>

namespace hz::experiment {
namespace {

TEST(Calibration, OverridesTheNamedFiguresAndSaysWhich) {
  Model m;
  std::vector<std::string> applied;
  ASSERT_TRUE(ApplyCalibration(R"({"tenant_write_fsync_gbps": 0.5,
                                   "provider_stall_speedup": {"value": 9.5, "source": "measured"}})",
                               &m, &applied)
                  .ok());
  EXPECT_EQ(m.tenant_write_fsync_gbps.value, 0.5);
  EXPECT_EQ(m.provider_stall_speedup.value, 9.5);
  EXPECT_EQ(m.provider_stall_speedup.source, "measured");
  EXPECT_EQ(applied,
            (std::vector<std::string>{"provider_stall_speedup", "tenant_write_fsync_gbps"}));
}

TEST(Calibration, BadInputChangesNothing) {
  for (const char* bad : {"[1]", "{\"nope\": 1}", "{\"restart_s\": -1}",
                          "{\"restart_s\": 5, \"gpu_busy_w\": \"hot\"}", "{not json"}) {
    Model m;
    const double before = m.restart_s.value;
    EXPECT_TRUE(ApplyCalibration(bad, &m).IsInvalidArgument()) << bad;
    EXPECT_EQ(m.restart_s.value, before) << bad;
  }
}

TEST(Model, EveryFigureHasAUnitAndASource) {
  Model m;
  for (const NamedFigure& f : m.Figures()) {
    EXPECT_FALSE(f.figure->unit.empty()) << f.key;
    EXPECT_FALSE(f.figure->source.empty()) << f.key;
    EXPECT_GT(f.figure->value, 0) << f.key;
  }
}

}  // namespace
}  // namespace hz::experiment
