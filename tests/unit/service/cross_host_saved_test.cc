// What a process hands its successor for a rank of a communicator across
// hosts (cross_host_reform.cc): the successor reads it back as saved, and
// refuses, whole and with a reason, anything that does not describe the
// rank, its hosts and this host consistently.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cross_host_comm.h"

namespace hz::service {
namespace {

using json = nlohmann::json;

// Rank 1 of [h0, h0, h1, h2] as h0 saves it (Save's format), as the
// successor reads it: from the snapshot's text.
SavedMember Saved() {
  SavedMember s;
  s.engine.uid.bytes[0] = 0xab;
  s.engine.nranks = 4;
  s.engine.rank = 1;
  s.engine.constraints.deterministic = false;
  s.engine.constraints.allow_lossy = true;
  s.engine.next_seq = 32;
  s.backend = {
      {"cross_host",
       {{"hosts", {"h0", "h1", "h2"}},
        {"host_of_rank", {0, 0, 1, 2}},
        {"generation", 3},
        {"next_seq", 32},
        {"local", {{"uid", std::string(64, 'c')}, {"nranks", 2}, {"rank", 1}, {"next_seq", 40}}},
        {"leg_model",
         {{{"latency_s", 1e-3}, {"per_byte_s", 1e-9}},
          {{"latency_s", 2e-3}, {"per_byte_s", 2e-9}},
          {{"latency_s", 3e-3}, {"per_byte_s", 3e-9}}}},
        {"sends", {{2, 7}, {3, 0}}},
        {"recvs", {{3, 5}}}}}};
  s.backend = json::parse(s.backend.dump());
  return s;
}

TEST(CrossHostSavedTest, ARankComesBackAsItWasSaved) {
  StatusOr<CrossHostSaved> p = ParseCrossHostSaved(Saved(), "h0");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->layout.nranks, 4u);
  EXPECT_EQ(p->layout.hosts, (std::vector<std::string>{"h0", "h1", "h2"}));
  EXPECT_EQ(p->layout.host_index, 0u);
  EXPECT_EQ(p->layout.local_ranks, (std::vector<uint32_t>{0, 1}));
  EXPECT_FALSE(p->layout.deterministic);
  EXPECT_TRUE(p->layout.allow_lossy);
  EXPECT_EQ(p->resume.generation, 3u);
  EXPECT_EQ(p->resume.next_seq, 32u);
  EXPECT_EQ(p->resume.local_seq, 40u);
  EXPECT_DOUBLE_EQ(p->resume.leg_model.lines[2].per_byte_s, 3e-9);
  EXPECT_EQ(p->local.nranks, 2u);
  EXPECT_EQ(p->local.rank, 1u);
  EXPECT_EQ(p->local.next_seq, 40u);
  EXPECT_EQ(p->local.uid.bytes[0], 0xcc);
  EXPECT_EQ(p->pairs.sends, (std::map<uint32_t, uint64_t>{{2, 7}, {3, 0}}));
  EXPECT_EQ(p->pairs.recvs, (std::map<uint32_t, uint64_t>{{3, 5}}));
}

TEST(CrossHostSavedTest, AnInconsistentRankIsRefused) {
  struct Case {
    const char* what;
    std::function<void(SavedMember&)> spoil;
  };
  auto x = [](SavedMember& s) -> json& { return s.backend["cross_host"]; };
  const Case cases[] = {
      {"not an object", [&](SavedMember& s) { x(s) = 1; }},
      {"one host", [&](SavedMember& s) { x(s)["hosts"] = {"h0"}; }},
      {"a host twice",
       [&](SavedMember& s) {
         x(s)["hosts"] = {"h0", "h1", "h1"};
       }},
      {"hosts out of rank order",
       [&](SavedMember& s) {
         x(s)["host_of_rank"] = {0, 0, 2, 1};
       }},
      {"a host without ranks",
       [&](SavedMember& s) {
         x(s)["host_of_rank"] = {0, 0, 1, 1};
       }},
      {"too few ranks placed",
       [&](SavedMember& s) {
         x(s)["host_of_rank"] = {0, 0, 1};
       }},
      {"the rank elsewhere", [&](SavedMember& s) { s.engine.rank = 2; }},
      {"the local part's size", [&](SavedMember& s) { x(s)["local"]["nranks"] = 3; }},
      {"the local rank", [&](SavedMember& s) { x(s)["local"]["rank"] = 0; }},
      {"a bad local uid", [&](SavedMember& s) { x(s)["local"]["uid"] = "xyz"; }},
      {"generation 0", [&](SavedMember& s) { x(s)["generation"] = 0; }},
      {"a negative model", [&](SavedMember& s) { x(s)["leg_model"][1]["latency_s"] = -1; }},
      {"a short model", [&](SavedMember& s) { x(s)["leg_model"].erase(0); }},
      {"a send to this host",
       [&](SavedMember& s) {
         x(s)["sends"] = {{0, 1}};
       }},
      {"a peer twice",
       [&](SavedMember& s) {
         x(s)["recvs"] = {{3, 1}, {3, 2}};
       }},
      {"a peer out of range",
       [&](SavedMember& s) {
         x(s)["recvs"] = {{9, 1}};
       }},
  };
  for (const Case& c : cases) {
    SavedMember s = Saved();
    c.spoil(s);
    s.backend = json::parse(s.backend.dump());  // as the successor reads it
    EXPECT_EQ(ParseCrossHostSaved(s, "h0").status().code(), StatusCode::kInvalidArgument) << c.what;
  }
  // Another host's process cannot take this host's rank.
  EXPECT_EQ(ParseCrossHostSaved(Saved(), "h9").status().code(), StatusCode::kInvalidArgument);
}

TEST(CrossHostSavedTest, ACommunicatorAbortedBeforeTheUpgradeStaysAborted) {
  SavedMember s = Saved();
  s.backend = {{"cross_host", {{"aborted", "host h2 left the cluster"}}}};
  Status st = ParseCrossHostSaved(s, "h0").status();
  EXPECT_EQ(st.code(), StatusCode::kAborted);
  EXPECT_NE(st.message().find("host h2 left the cluster"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace hz::service
