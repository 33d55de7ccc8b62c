// Daemon-side ownership (service/rpc/ownership.h): the --shard-self/--shard-peers flags, their
// validation messages, and the owner of a model, which must be the clients' placement (the
// reference value below is the one tests/integration/test_sharding.py checks in Python). The
// refusals over gRPC, their trailer and the clients following them: test_sharding.py.
#include <string>

#include "gmock/gmock.h"
#include "grpcpp/server_context.h"
#include "gtest/gtest.h"
#include "service/flags.h"
#include "service/rpc/ownership.h"

namespace cmestream {
namespace {

using ::testing::HasSubstr;

constexpr char kPeers[] = "cmestreamd-0=h0:50051,cmestreamd-1=h1:50051,cmestreamd-2=h2:50051";

TEST(ShardFlagsTest, ParsedAndValidated) {
  auto f = service::ParseFlags({"--shard-self", "cmestreamd-1", std::string("--shard-peers=") + kPeers});
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->options.shard.peers.size(), 3u);
  EXPECT_EQ(f->options.shard.self, "cmestreamd-1");
  EXPECT_EQ(f->options.shard.peers[2].first, "cmestreamd-2");
  EXPECT_EQ(f->options.shard.peers[2].second, "h2:50051");
  EXPECT_FALSE(service::ParseFlags({}).value().options.shard.enabled());  // default: owns all

  const auto error = [](std::vector<std::string> args) {
    auto r = service::ParseFlags(args);
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  EXPECT_THAT(error({"--shard-self", "cmestreamd-9", "--shard-peers", kPeers}),
              HasSubstr("--shard-self is 'cmestreamd-9', which is not one of the IDs of --shard-peers"));
  EXPECT_THAT(error({"--shard-self", "a"}), HasSubstr("--shard-self needs --shard-peers"));
  EXPECT_THAT(error({"--shard-peers", kPeers}), HasSubstr("--shard-peers needs --shard-self"));
  EXPECT_THAT(error({"--shard-self", "a", "--shard-peers", "a=h:1,a=h:2"}), HasSubstr("ID 'a' appears twice"));
  EXPECT_THAT(error({"--shard-self", "a", "--shard-peers", "a=h:1,b"}), HasSubstr("got entry 'b'"));
  EXPECT_THAT(error({"--shard-self", "a", "--shard-peers", "a=h:1,,b=h:2"}), HasSubstr("got entry ''"));
}

TEST(OwnershipTest, OwnerIsTheClientsPlacement) {
  service::ShardOptions o;
  o.self = "cmestreamd-2";
  o.peers = {{"cmestreamd-0", "h0:1"}, {"cmestreamd-1", "h1:1"}, {"cmestreamd-2", "h2:1"}};
  const service::Ownership own(o);
  EXPECT_EQ(own.OwnerOf("duffing"), 2);  // = placement.owner("duffing", IDS) in Python
  // The peers' order does not matter, only their identities.
  service::ShardOptions reversed = o;
  std::swap(reversed.peers[0], reversed.peers[2]);
  EXPECT_EQ(reversed.peers[service::Ownership(reversed).OwnerOf("duffing")].first, "cmestreamd-2");

  grpc::ServerContext ctx;
  EXPECT_TRUE(own.Check("duffing", ctx).ok());
  int refused = 0;
  for (int k = 0; k < 300; ++k) {
    const std::string name = "m" + std::to_string(k);
    const int owner = own.OwnerOf(name);
    const absl::Status s = own.Check(name, ctx);
    if (owner == 2) {
      EXPECT_TRUE(s.ok()) << name;
      continue;
    }
    ++refused;
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(s.message()), HasSubstr("owned by pod " + o.peers[owner].first + " (" +
                                                    o.peers[owner].second + "), not by this pod (cmestreamd-2)"));
    // Without the header the override changes nothing.
    EXPECT_EQ(own.Check(name, ctx, /*allow_override=*/true).code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_GT(refused, 150);  // about 2/3 of 300 belong to the two other pods
  EXPECT_LT(refused, 250);

  service::Ownership off{service::ShardOptions{}};  // not sharded: every model is ours
  EXPECT_EQ(off.OwnerOf("duffing"), -1);
  EXPECT_TRUE(off.Check("anything", ctx).ok());
}

}  // namespace
}  // namespace cmestream
