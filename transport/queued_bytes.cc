#include "transport/queued_bytes.h"

#include <algorithm>
#include <string>
#include <utility>

namespace ductile {

Status ValidatePeerQueueLimits(int64_t max_queued_replies,
                               int64_t max_queued_reply_mb,
                               int64_t max_queued_requests) {
  if (max_queued_replies < 1 || max_queued_replies > 10'000'000) {
    return InvalidArgumentError(
        "max_queued_replies must be in [1, 10000000], not " +
        std::to_string(max_queued_replies));
  }
  if (max_queued_reply_mb < 1 || max_queued_reply_mb > (int64_t{1} << 20)) {
    return InvalidArgumentError(
        "max_queued_reply_mb must be in [1, 1048576], not " +
        std::to_string(max_queued_reply_mb));
  }
  if (max_queued_requests < 1 || max_queued_requests > 10'000'000) {
    return InvalidArgumentError(
        "max_queued_requests must be in [1, 10000000], not " +
        std::to_string(max_queued_requests));
  }
  return Status::Ok();
}

void QueuedBytesPerPeer::Ticket::Release() {
  if (bytes_ == 0) return;
  peer_->bytes.fetch_sub(bytes_, std::memory_order_relaxed);
  all_->bytes.fetch_sub(bytes_, std::memory_order_release);
  bytes_ = 0;
}

QueuedBytesPerPeer::QueuedBytesPerPeer(uint64_t max_bytes_per_peer)
    : max_bytes_per_peer_(max_bytes_per_peer),
      all_(std::make_shared<Ticket::Counts>()) {}

Result<QueuedBytesPerPeer::Ticket> QueuedBytesPerPeer::Charge(
    std::string_view peer, uint64_t bytes) {
  auto it = peers_.find(peer);
  if (it == peers_.end()) {
    Sweep();
    it = peers_.emplace(std::string(peer), std::make_shared<Ticket::Counts>())
             .first;
  }
  const uint64_t queued = it->second->bytes.load(std::memory_order_relaxed);
  if (max_bytes_per_peer_ > 0 && bytes > kSmallBytes && queued > 0 &&
      queued + bytes > max_bytes_per_peer_) {
    ++refused_;
    ArmTrim(max_bytes_per_peer_ / 2);
    return ResourceExhaustedError(
        "the peer has " + std::to_string(queued) +
        " bytes of replies queued that it has not read; one of " +
        std::to_string(bytes) + " more would pass the limit of " +
        std::to_string(max_bytes_per_peer_) + " (--max_queued_reply_mb)");
  }
  it->second->bytes.fetch_add(bytes, std::memory_order_relaxed);
  all_->bytes.fetch_add(bytes, std::memory_order_relaxed);
  return Ticket(it->second, all_, bytes);
}

uint64_t QueuedBytesPerPeer::of(std::string_view peer) const {
  auto it = peers_.find(peer);
  return it == peers_.end() ? 0
                            : it->second->bytes.load(std::memory_order_relaxed);
}

uint64_t QueuedBytesPerPeer::total() const {
  return all_->bytes.load(std::memory_order_acquire);
}

void QueuedBytesPerPeer::NoteDropped() { ArmTrim(total() / 2); }

void QueuedBytesPerPeer::ArmTrim(uint64_t below) {
  trim_below_ = trim_pending_ ? std::max(trim_below_, below) : below;
  trim_pending_ = true;
}

bool QueuedBytesPerPeer::TakeTrimDue() {
  if (!trim_pending_ || total() > trim_below_) return false;
  trim_pending_ = false;
  return true;
}

void QueuedBytesPerPeer::Sweep() {
  if (peers_.size() < sweep_at_) return;
  for (auto it = peers_.begin(); it != peers_.end();) {
    if (it->second->bytes.load(std::memory_order_relaxed) == 0) {
      it = peers_.erase(it);
    } else {
      ++it;
    }
  }
  // Amortised: the next sweep once as many peers again have been added.
  sweep_at_ = std::max<size_t>(64, peers_.size() * 2);
}

}  // namespace ductile
