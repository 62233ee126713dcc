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

}  // namespace ductile::launch
