// Exactly-once application of requests that may be resent.
//
// Every data request carries (client id, sequence number) and the client's
// "done below" mark: every request of that client with a smaller sequence
// has completed, so it will never be resent.
//
// Invariants, per client:
//   - done_below only grows;
//   - applied holds exactly the applied sequences >= done_below.
// A request is a duplicate iff its seq < done_below or seq is in applied.
// Memory per client is bounded by the client's requests in flight, and a
// client may hold at most `max_applied_per_client` applied sequences:
// Full() says when a client (one that lies about its mark) has reached it.
//
// Idle clients are forgotten. A client gives a request up (stops resending
// it) `timeout_ms` after it first sent it, the timeout its requests carry;
// Touch() records, when a request of it arrives, the time and that
// timeout. Every request it sent before then is given up by `heard +
// timeout`, so past that, plus a margin for messages still queued on the
// way (`expiry`), nothing of it can arrive that the window must recognise:
// Sweep(now, expiry) drops it, and whatever it sends next starts a new
// window at its done-below mark. A window created otherwise (Advance,
// MarkApplied, Merge without a Touch: one that came with moved slots) is
// kept for the longest timeout a request may carry until its client is
// heard from.
//
// The window moves with slots (docs/elasticity.md, "Exactly-once across a
// move"): a source's Snapshot() at the copy of its slots goes to the target,
// which Merge()s it, so a request the source applied is recognised there.
// Sequence numbers are unique per client across servers, so windows of
// different servers merge by union.
// Not thread-safe: owned by a server's request thread.
#ifndef DUCTILE_SERVER_REQUEST_DEDUP_H_
#define DUCTILE_SERVER_REQUEST_DEDUP_H_

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace ductile {

class RequestDedup {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  static constexpr size_t kDefaultMaxAppliedPerClient = size_t{1} << 22;
  // How long a window not Touch()ed is kept: the longest timeout a request
  // may carry (kMaxTimeoutMs, 30 days).
  static constexpr int64_t kUnknownTimeoutMs = int64_t{30} * 24 * 3600 * 1000;

  explicit RequestDedup(
      size_t max_applied_per_client = kDefaultMaxAppliedPerClient)
      : max_applied_per_client_(max_applied_per_client) {}

  // Moves the client's done-below mark (and forgets what lies under it).
  void Advance(int64_t client, uint64_t done_below);
  // True if (client, seq) was applied before (or lies below the mark).
  bool IsDuplicate(int64_t client, uint64_t seq) const;
  // Records (client, seq) as applied.
  void MarkApplied(int64_t client, uint64_t seq);

  // True if the client holds max_applied_per_client applied sequences
  // above its mark: a request of it that is no duplicate must be refused.
  bool Full(int64_t client) const;
  // The time now, for windows created without a Touch() (the owner calls
  // it at start and from its timers).
  void SetNow(TimePoint now) { now_ = std::max(now_, now); }
  TimePoint now() const { return now_; }
  // A request of `client` carrying `timeout_ms` arrived at `now`.
  void Touch(int64_t client, TimePoint now, int64_t timeout_ms);
  // Forgets the clients heard from last before now - (their timeout +
  // expiry); returns how many.
  size_t Sweep(TimePoint now, std::chrono::milliseconds expiry);

  size_t tracked() const;
  size_t clients() const { return clients_.size(); }

  // One client's window, as it travels with moved slots.
  struct Window {
    int64_t client = 0;
    uint64_t done_below = 0;
    std::vector<uint64_t> applied;
  };
  std::vector<Window> Snapshot() const;
  // Adds what `w` knows: the higher done-below mark, and the applied
  // sequences at or above it.
  void Merge(const Window& w);

 private:
  struct ClientWindow {
    uint64_t done_below = 0;
    std::unordered_set<uint64_t> applied;
    TimePoint heard{};  // when a request of it last arrived
    int64_t timeout_ms = kUnknownTimeoutMs;
  };
  // The window of `client`, created if absent (heard now_).
  ClientWindow& WindowOf(int64_t client);

  size_t max_applied_per_client_;
  TimePoint now_{};  // the latest time Touch() or Sweep() was given
  std::unordered_map<int64_t, ClientWindow> clients_;
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_REQUEST_DEDUP_H_
