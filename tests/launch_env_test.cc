// A server's or worker's id from its launcher's rank (launch/launch_env.h).
#include "launch/launch_env.h"

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace ductile::launch {
namespace {

Result<int32_t> RankWith(const std::map<std::string, std::string>& env,
                         std::string* source) {
  return RankFromEnvironment(source, [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(LaunchEnv, TheFirstRankVariableSetGivesTheId) {
  std::string source;
  Result<int32_t> rank = RankWith({}, &source);
  ASSERT_TRUE(rank.ok());
  EXPECT_EQ(*rank, -1);
  EXPECT_EQ(source, "");

  rank = RankWith({{"SLURM_PROCID", "3"}}, &source);
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_EQ(*rank, 3);
  EXPECT_EQ(source, "SLURM_PROCID");

  rank = RankWith({{"JOB_COMPLETION_INDEX", "7"}}, &source);
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_EQ(*rank, 7);
  EXPECT_EQ(source, "JOB_COMPLETION_INDEX");

  // DUCTILE_RANK first, then Slurm's, then Kubernetes'.
  rank = RankWith({{"JOB_COMPLETION_INDEX", "7"},
                   {"SLURM_PROCID", "3"},
                   {"DUCTILE_RANK", "0"}},
                  &source);
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_EQ(*rank, 0);
  EXPECT_EQ(source, "DUCTILE_RANK");
}

TEST(LaunchEnv, AValueThatIsNoRankIsAnErrorNamingTheVariable) {
  for (const char* bad :
       {"", "x", "-1", "3x", " 3", "1048576", "99999999999"}) {
    std::string source;
    Result<int32_t> rank = RankWith({{"SLURM_PROCID", bad}}, &source);
    ASSERT_FALSE(rank.ok()) << "'" << bad << "'";
    EXPECT_EQ(rank.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(
        rank.status().message().find("SLURM_PROCID='" + std::string(bad) + "'"),
        std::string::npos)
        << rank.status();
  }
}

}  // namespace
}  // namespace ductile::launch
