// Blanks (spaces and tabs) off both ends of a piece of a flag's value or of
// a command's output.
#ifndef DUCTILE_LAUNCH_TRIM_H_
#define DUCTILE_LAUNCH_TRIM_H_

#include <string_view>

namespace ductile::launch {

inline std::string_view Trim(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  const size_t end = s.find_last_not_of(" \t");
  return s.substr(begin, end - begin + 1);
}

}  // namespace ductile::launch

#endif  // DUCTILE_LAUNCH_TRIM_H_
