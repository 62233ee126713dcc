// A server's or worker's id from its launcher's rank (launch/launch_env.h).
#include "launch/launch_env.h"

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

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

// The value of `name` among `env`'s "NAME=VALUE" entries; "<unset>" if
// none, "<twice>" if more than one.
std::string ValueOf(const std::vector<std::string>& env,
                    const std::string& name) {
  std::string value = "<unset>";
  int found = 0;
  for (const std::string& e : env) {
    if (e.rfind(name + "=", 0) != 0) continue;
    value = e.substr(name.size() + 1);
    ++found;
  }
  return found > 1 ? "<twice>" : value;
}

TEST(LaunchEnv, AWorkerCommandGetsEveryConnectionSettingOnce) {
  WorkerConnection c;
  c.coordinator = "tcp://127.0.0.1:4000";
  c.rank = 3;
  c.keys_dir = "/k";
  c.member_key = "/k/members/worker-3.key";
  c.require_member_keys = true;
  c.timeout_ms = 40000;
  c.io_threads = 2;
  c.shm_values = false;
  c.cache = true;
  c.workers = 4;
  const std::vector<std::string> env = WorkerEnvironment(c);
  EXPECT_EQ(env.size(), 10u);
  EXPECT_EQ(ValueOf(env, "DUCTILE_COORDINATOR"), "tcp://127.0.0.1:4000");
  EXPECT_EQ(ValueOf(env, "DUCTILE_RANK"), "3");
  EXPECT_EQ(ValueOf(env, "DUCTILE_KEYS"), "/k");
  EXPECT_EQ(ValueOf(env, "DUCTILE_MEMBER_KEY"), "/k/members/worker-3.key");
  EXPECT_EQ(ValueOf(env, "DUCTILE_REQUIRE_MEMBER_KEYS"), "1");
  EXPECT_EQ(ValueOf(env, "DUCTILE_TIMEOUT_MS"), "40000");
  EXPECT_EQ(ValueOf(env, "DUCTILE_IO_THREADS"), "2");
  EXPECT_EQ(ValueOf(env, "DUCTILE_SHM_VALUES"), "0");
  EXPECT_EQ(ValueOf(env, "DUCTILE_CACHE"), "1");
  EXPECT_EQ(ValueOf(env, "DUCTILE_WORKERS"), "4");
}

TEST(LaunchEnv, PlainModeLeavesTheKeysEmptyAndNoRankLetsTheCoordinatorChoose) {
  WorkerConnection c;
  c.coordinator = "tcp://127.0.0.1:4000";
  const std::vector<std::string> env = WorkerEnvironment(c);
  EXPECT_EQ(ValueOf(env, "DUCTILE_KEYS"), "");
  EXPECT_EQ(ValueOf(env, "DUCTILE_MEMBER_KEY"), "");
  EXPECT_EQ(ValueOf(env, "DUCTILE_REQUIRE_MEMBER_KEYS"), "0");
  EXPECT_EQ(ValueOf(env, "DUCTILE_RANK"), "<unset>");
}

// python/ductile/_env.py documents every variable the launcher sets.
TEST(LaunchEnv, ThePythonPackageDocumentsEveryVariableALauncherSets) {
  std::ifstream in(DUCTILE_ENV_PY);
  ASSERT_TRUE(in) << DUCTILE_ENV_PY;
  std::stringstream source;
  source << in.rdbuf();
  WorkerConnection c;
  c.rank = 0;
  for (const std::string& e : WorkerEnvironment(c)) {
    const std::string name = e.substr(0, e.find('='));
    // A line of the module's table of variables.
    EXPECT_NE(source.str().find("\n  " + name + " "), std::string::npos)
        << name;
  }
}

}  // namespace
}  // namespace ductile::launch
