#include "transport/shm_value_area.h"

#include <iterator>
#include <utility>

#include "ductile/limits.h"

namespace ductile {

Result<std::unique_ptr<ShmValueArea>> ShmValueArea::Create(uint64_t bytes) {
  DUCTILE_ASSIGN_OR_RETURN(
      std::unique_ptr<ShmSegment> segment,
      ShmSegment::Create(bytes + ShmSegment::kHeaderBytes));
  return std::unique_ptr<ShmValueArea>(new ShmValueArea(std::move(segment)));
}

ShmValueArea::ShmValueArea(std::unique_ptr<ShmSegment> segment)
    : segment_(std::move(segment)) {
  const uint64_t begin = ShmSegment::kHeaderBytes;
  const uint64_t usable =
      (segment_->size() - begin) / kAlignBytes * kAlignBytes;
  if (usable > 0) free_.emplace(begin, usable);
}

bool ShmValueArea::Lend(uint64_t ticket, int32_t server, uint64_t bytes,
                        int64_t timeout_ms, wire::ShmRef* ref) {
  if (bytes == 0 || lent_.count(ticket) != 0) return false;
  const uint64_t rounded =
      (bytes + kAlignBytes - 1) / kAlignBytes * kAlignBytes;
  const auto first_fit = [&] {
    auto it = free_.begin();
    while (it != free_.end() && it->second < rounded) ++it;
    return it;
  };
  auto it = first_fit();
  if (it == free_.end()) {
    Expire();
    it = first_fit();
    if (it == free_.end()) return false;
  }
  const uint64_t offset = it->first;
  const uint64_t left = it->second - rounded;
  free_.erase(it);
  if (left > 0) free_.emplace(offset + rounded, left);

  const Clock::time_point now = Clock::now();
  const auto timeout = std::chrono::milliseconds(
      timeout_ms > 0 ? timeout_ms : kDefaultTimeoutMs);
  lent_.emplace(ticket, Region{offset, rounded, bytes, server,
                               now + 2 * timeout + kSlack});
  ref->set_pid(segment_->pid());
  ref->set_fd(segment_->fd());
  ref->set_token(segment_->token());
  ref->set_offset(offset);
  ref->set_bytes(bytes);
  ref->set_sent_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
                       now.time_since_epoch())
                       .count());
  return true;
}

bool ShmValueArea::Keep(uint64_t ticket) {
  auto it = lent_.find(ticket);
  if (it == lent_.end()) return false;
  it->second.kept = true;
  return true;
}

float* ShmValueArea::Data(uint64_t ticket, int32_t server,
                          uint64_t bytes) const {
  auto it = lent_.find(ticket);
  if (it == lent_.end() || it->second.server != server ||
      bytes != it->second.value_bytes) {
    return nullptr;
  }
  return reinterpret_cast<float*>(segment_->data() + it->second.offset);
}

void ShmValueArea::Return(uint64_t ticket, int32_t server) {
  auto it = lent_.find(ticket);
  if (it == lent_.end() || it->second.server != server || it->second.kept) {
    return;
  }
  Free(it->second.offset, it->second.bytes);
  lent_.erase(it);
}

void ShmValueArea::Expire(Clock::time_point now) {
  if (lent_.empty()) return;
  for (auto it = lent_.begin(); it != lent_.end();) {
    if (now < it->second.expires) {
      ++it;
      continue;
    }
    Free(it->second.offset, it->second.bytes);
    it = lent_.erase(it);
  }
}

uint64_t ShmValueArea::free_bytes() const {
  uint64_t bytes = 0;
  for (const auto& [offset, size] : free_) bytes += size;
  return bytes;
}

void ShmValueArea::Free(uint64_t offset, uint64_t bytes) {
  auto next = free_.lower_bound(offset);
  // Joins the free neighbour after, then the one before.
  if (next != free_.end() && offset + bytes == next->first) {
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += bytes;
      return;
    }
  }
  free_.emplace(offset, bytes);
}

}  // namespace ductile
