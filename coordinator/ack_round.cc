#include "coordinator/ack_round.h"

namespace ductile {

std::string AckRound::Missing() const {
  std::string out;
  for (int32_t id : awaiting_) {
    if (!out.empty()) out += ", ";
    out += std::to_string(id);
  }
  return out;
}

}  // namespace ductile
