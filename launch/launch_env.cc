#include "launch/launch_env.h"

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "ductile/limits.h"

namespace ductile::launch {

Result<int32_t> RankFromEnvironment(
    std::string* source, const std::function<const char*(const char*)>& get) {
  for (const char* name : kRankVariables) {
    const char* value = get ? get(name) : std::getenv(name);
    if (value == nullptr) continue;
    *source = name;
    const char* end = value + std::strlen(value);
    int32_t rank = -1;
    const auto [at, error] = std::from_chars(value, end, rank);
    if (error != std::errc() || at != end || value == end || rank < 0 ||
        rank > kMaxMemberId) {
      return InvalidArgumentError(std::string(name) + "='" + value +
                                  "' is not a rank in [0, " +
                                  std::to_string(kMaxMemberId) + "]");
    }
    return rank;
  }
  source->clear();
  return -1;
}

std::vector<std::string> WorkerEnvironment(const WorkerConnection& c) {
  const auto entry = [](const char* name, const std::string& value) {
    return std::string(name) + "=" + value;
  };
  const auto flag = [](bool value) { return std::string(value ? "1" : "0"); };
  std::vector<std::string> env = {
      entry(kCoordinatorVariable, c.coordinator),
      entry(kKeysVariable, c.keys_dir),
      entry(kMemberKeyVariable, c.member_key),
      entry(kRequireMemberKeysVariable, flag(c.require_member_keys)),
      entry(kTimeoutVariable, std::to_string(c.timeout_ms)),
      entry(kIoThreadsVariable, std::to_string(c.io_threads)),
      entry(kShmValuesVariable, flag(c.shm_values)),
      entry(kCacheVariable, flag(c.cache)),
      entry(kWorkersVariable, std::to_string(c.workers))};
  if (c.rank >= 0) env.push_back(entry(kRankVariable, std::to_string(c.rank)));
  return env;
}

}  // namespace ductile::launch
