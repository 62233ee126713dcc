#include "server/shm_value_regions.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "ductile/limits.h"
#include "glog/logging.h"

namespace ductile {

Result<float*> ShmValueRegions::Region(const wire::ShmRef& ref, uint64_t bytes,
                                       int64_t timeout_ms, int32_t peer_pid) {
  if (!enabled_) {
    return FailedPreconditionError(
        "this server does not use shared memory (--shm_values)");
  }
  if (bytes == 0 || ref.bytes() != bytes ||
      ref.offset() % alignof(float) != 0) {
    return InvalidArgumentError(
        "a shared memory region of " + std::to_string(ref.bytes()) +
        " bytes at offset " + std::to_string(ref.offset()) + " for " +
        std::to_string(bytes) + " bytes of values");
  }
  // The worker reuses the region 2 x timeout_ms after sending: use it only
  // well within that (the clock is the host's, shared by both processes).
  const int64_t now_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now().time_since_epoch())
          .count();
  // A peer's timeout is not checked yet here: at most 30 days, as a
  // client's, so that the product cannot overflow.
  constexpr int64_t kMaxTimeoutMs = int64_t{30} * 24 * 3600 * 1000;
  const int64_t timeout_ns =
      std::min(timeout_ms > 0 ? timeout_ms : kDefaultTimeoutMs, kMaxTimeoutMs) *
      1000000;
  if (ref.sent_ns() > now_ns) {
    return InvalidArgumentError(
        "a request naming shared memory says it was sent in the future");
  }
  if (ref.sent_ns() <= 0 || now_ns - ref.sent_ns() > timeout_ns) {
    return DeadlineExceededError(
        "a request naming shared memory, sent more than its timeout ago");
  }
  // A worker names only its own segment, and only over ipc://, where the
  // kernel says which process sent the request: nothing else makes this
  // server open a /proc entry.
  if (ref.pid() != peer_pid) {
    return InvalidArgumentError(
        "a request names the shared memory of process " +
        std::to_string(ref.pid()) + " but " +
        (peer_pid > 0 ? "comes from process " + std::to_string(peer_pid)
                      : std::string("did not come over ipc://")));
  }
  // Checked before anything is remembered of the segment: the token is a
  // peer's bytes of any length, and only well-formed names are kept.
  if (ref.pid() <= 0 || ref.fd() < 0 ||
      ref.token().size() != ShmSegment::kTokenBytes) {
    return InvalidArgumentError(
        "a shared memory segment named by pid " + std::to_string(ref.pid()) +
        ", descriptor " + std::to_string(ref.fd()) + " and a token of " +
        std::to_string(ref.token().size()) + " bytes (" +
        std::to_string(ShmSegment::kTokenBytes) + " expected)");
  }
  ShmSegment* segment = Find({ref.pid(), ref.fd(), ref.token()});
  if (segment == nullptr) {
    return UnavailableError("the sender's shared memory cannot be opened");
  }
  if (!segment->Holds(ref.offset(), bytes)) {
    return InvalidArgumentError("a region outside the sender's segment");
  }
  return reinterpret_cast<float*>(segment->data() + ref.offset());
}

ShmSegment* ShmValueRegions::Find(const SegmentKey& key) {
  ++uses_;
  if (auto it = segments_.find(key); it != segments_.end()) {
    it->second.last_use = uses_;
    return it->second.segment.get();
  }
  if (refused_.count(key) != 0) return nullptr;
  const auto& [pid, fd, token] = key;
  Result<std::unique_ptr<ShmSegment>> opened = ShmSegment::Open(pid, fd, token);
  if (!opened.ok()) {
    // At most a few lines however many peers name segments it cannot use.
    ++refusals_;
    LOG_IF(WARNING, refusals_ <= 10 || refusals_ % 1000 == 0)
        << "a sender's shared memory cannot be used (refusal " << refusals_
        << "; its pulls' values go in frames, its pushes are refused and "
           "sent again in frames): "
        << opened.status();
    // Remembered only when trying again cannot help: not the segment
    // named, or not one this server may open. A lack of descriptors or
    // memory may pass, so such a segment is tried again next time.
    const StatusCode code = opened.status().code();
    if (code == StatusCode::kInvalidArgument ||
        code == StatusCode::kPermissionDenied ||
        code == StatusCode::kNotFound) {
      if (refused_.size() >= kMaxRefused) refused_.clear();
      refused_.insert(key);
    }
    return nullptr;
  }
  if (segments_.size() >= kMaxSegments) {
    auto oldest = segments_.begin();
    for (auto it = segments_.begin(); it != segments_.end(); ++it) {
      if (it->second.last_use < oldest->second.last_use) oldest = it;
    }
    segments_.erase(oldest);
  }
  ShmSegment* segment = opened->get();
  segments_.emplace(key, Mapped{std::move(*opened), uses_});
  return segment;
}

void ShmValueRegions::ForgetExited() {
  for (auto it = segments_.begin(); it != segments_.end();) {
    // Gone when /proc/PID/fd/FD no longer names the segment: the worker
    // (or its client) closed it, or exited.
    const auto& [pid, fd, token] = it->first;
    const std::string path =
        "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
    struct stat st {};
    const ShmSegment& segment = *it->second.segment;
    const bool gone = stat(path.c_str(), &st) != 0 ||
                      static_cast<uint64_t>(st.st_dev) != segment.device() ||
                      static_cast<uint64_t>(st.st_ino) != segment.inode();
    it = gone ? segments_.erase(it) : std::next(it);
  }
}

}  // namespace ductile
