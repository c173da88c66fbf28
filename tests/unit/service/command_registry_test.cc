// The operator commands of the engines: declared once per component and
// routed by name.
#include "hz/service/command_registry.h"

#include <gtest/gtest.h>

namespace hz::service {
namespace {

using json = nlohmann::json;

struct Component {
  CommandResult Echo(const json& req) { return req; }
  CommandResult Refuse(const json&) { return Status::Permission("refused"); }
  static std::span<const CommandSpec<Component>> Commands() {
    static const CommandSpec<Component> kCommands[] = {
        {"c.echo", false, &Component::Echo},
        {"c.refuse", true, &Component::Refuse},
    };
    return kCommands;
  }
};

TEST(CommandRegistryTest, RoutesEachCommandToItsComponent) {
  Component c;
  CommandRegistry r;
  r.Add(&c, Component::Commands());
  const CommandRegistry::Command* echo = r.Find("c.echo");
  ASSERT_NE(echo, nullptr);
  EXPECT_FALSE(echo->names_tenant);
  CommandResult out = echo->run({{"x", 1}});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)["x"], 1);
  const CommandRegistry::Command* refuse = r.Find("c.refuse");
  ASSERT_NE(refuse, nullptr);
  EXPECT_TRUE(refuse->names_tenant);
  CommandResult refused = refuse->run(json::object());
  EXPECT_TRUE(refused.status().IsPermission());
  EXPECT_EQ(refused.status().message(), "refused");
  EXPECT_EQ(r.Find("c.other"), nullptr);
}

TEST(CommandRegistryTest, CommandsOfAComponentNotRunningSayWhy) {
  CommandRegistry r;
  r.AddUnavailable(Component::Commands(), "the component is disabled");
  for (const char* name : {"c.echo", "c.refuse"}) {
    const CommandRegistry::Command* c = r.Find(name);
    ASSERT_NE(c, nullptr) << name;
    CommandResult out = c->run(json::object());
    EXPECT_FALSE(out.ok());
    EXPECT_EQ(out.status().message(), "the component is disabled");
    EXPECT_EQ(c->names_tenant, std::string(name) == "c.refuse") << "declared as it is";
  }
}

}  // namespace
}  // namespace hz::service
