#include "transport/connection_ledger.h"

namespace ductile {

ConnectionLedger::ConnectionLedger(int64_t reserved_descriptors,
                                   int64_t max_per_source)
    : reserved_descriptors_(reserved_descriptors),
      max_per_source_(max_per_source) {}

ConnectionLedger::Verdict ConnectionLedger::Accepted(int fd, bool tcp,
                                                     const std::string& source,
                                                     int64_t limit) {
  // A record left for this descriptor belongs to a connection that closed
  // unheard of (none is expected); this one replaces it.
  Closed(fd);
  const int64_t free_below =
      limit - (tcp ? reserved_descriptors_ : reserved_descriptors_ / 2);
  if (fd >= free_below) return Verdict::kRefuseDescriptors;
  if (!tcp) {
    by_fd_.emplace(fd, std::string());
    return Verdict::kKeep;
  }
  if (max_per_source_ > 0 &&
      open_from(source) >= static_cast<size_t>(max_per_source_)) {
    return Verdict::kRefuseSource;
  }
  ++per_source_[source];
  by_fd_.emplace(fd, source);
  return Verdict::kKeep;
}

void ConnectionLedger::Closed(int fd) {
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return;
  if (!it->second.empty()) {
    auto source = per_source_.find(it->second);
    if (source != per_source_.end() && --source->second == 0) {
      per_source_.erase(source);
    }
  }
  by_fd_.erase(it);
}

size_t ConnectionLedger::open_from(const std::string& source) const {
  auto it = per_source_.find(source);
  return it == per_source_.end() ? 0 : it->second;
}

}  // namespace ductile
