#include "launch/launch_env.h"

#include <charconv>
#include <cstdlib>
#include <cstring>

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
        rank > (1 << 20) - 1) {
      return InvalidArgumentError(std::string(name) + "='" + value +
                                  "' is not a rank in [0, 1048575]");
    }
    return rank;
  }
  source->clear();
  return -1;
}

}  // namespace ductile::launch
