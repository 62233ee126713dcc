// The bytes of messages a router has queued for each peer and not yet
// handed to the kernel, bounded per peer.
//
// ZeroMQ's send high-water mark counts messages, not bytes: 10000 replies
// of 100 KB each wait for a peer that does not read them as readily as
// 10000 of 100 bytes. A router asks Charge() before it queues a message
// for a peer; the message's frames then hold the returned Ticket's share
// (OutMessage::Holder), and give it back when the transport releases them:
// once written to the connection, or dropped with it when the peer goes.
//
//   QueuedBytesPerPeer queued(/*max_bytes_per_peer=*/64 << 20);
//   Result<QueuedBytesPerPeer::Ticket> t = queued.Charge("peer-a", 1 << 20);
//   if (!t.ok()) ...;           // kResourceExhausted: the peer's queue is full
//   ... the frames hold *t until the transport releases them ...
//
// Invariants: every peer's count is the bytes of its messages charged and
// not yet released; total() is their sum. A message is refused only when
// it is larger than kSmallBytes, its peer's count is above zero, and it
// would take that count past the limit: one message larger than the limit
// still goes to a peer with nothing queued, and small ones (error
// replies) always go, bounded in number by the high-water mark. A peer's
// queue is then at most the limit plus one message plus the small ones.
//
// Thread-safety: Charge(), Sweep() and TakeTrimDue() on one thread (the
// socket's); a Ticket may be destroyed on any thread (ZeroMQ's I/O
// threads release frames).
#ifndef DUCTILE_TRANSPORT_QUEUED_BYTES_H_
#define DUCTILE_TRANSPORT_QUEUED_BYTES_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "ductile/status.h"

namespace ductile {

class QueuedBytesPerPeer {
 public:
  // Messages of at most this many bytes are counted but never refused.
  static constexpr uint64_t kSmallBytes = 4096;

  // One charged message's bytes, given back when it is destroyed.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept
        : peer_(std::move(other.peer_)),
          all_(std::move(other.all_)),
          bytes_(std::exchange(other.bytes_, 0)) {}
    Ticket& operator=(Ticket&& other) noexcept {
      if (this != &other) {
        Release();
        peer_ = std::move(other.peer_);
        all_ = std::move(other.all_);
        bytes_ = std::exchange(other.bytes_, 0);
      }
      return *this;
    }
    ~Ticket() { Release(); }

   private:
    friend class QueuedBytesPerPeer;
    struct Counts;
    Ticket(std::shared_ptr<Counts> peer, std::shared_ptr<Counts> all,
           uint64_t bytes)
        : peer_(std::move(peer)), all_(std::move(all)), bytes_(bytes) {}
    void Release();

    std::shared_ptr<Counts> peer_;
    std::shared_ptr<Counts> all_;
    uint64_t bytes_ = 0;
  };

  // 0: no limit (counted all the same).
  explicit QueuedBytesPerPeer(uint64_t max_bytes_per_peer);

  // Charges `bytes` to `peer`; kResourceExhausted when its queue would
  // pass the limit (nothing charged then).
  Result<Ticket> Charge(std::string_view peer, uint64_t bytes);

  uint64_t of(std::string_view peer) const;
  uint64_t total() const;
  // Peers known (some with nothing queued, until swept).
  size_t peers() const { return peers_.size(); }
  uint64_t max_bytes_per_peer() const { return max_bytes_per_peer_; }
  // Messages refused so far.
  uint64_t refused() const { return refused_; }

  // A message to a peer was dropped, its queue full in messages (the
  // router's count limit, which this does not see): what it queued is to
  // go back to the system once gone (TakeTrimDue).
  void NoteDropped();

  // True once after a refusal when the bytes queued for all peers have
  // come down to half the per-peer limit or less, or after a drop when
  // they have come down to half what they were then: the memory a peer
  // that did not read made this process take is free again, and should
  // go back to the system (malloc_trim) rather than stay for reuse. While
  // that peer keeps its queue full nothing is due, so a flood costs no
  // trim per message.
  bool TakeTrimDue();

 private:
  // Forgets peers with nothing queued, when there are many.
  void Sweep();
  // A trim is due once total() is at or below `below` (or the largest
  // such mark since the last trim).
  void ArmTrim(uint64_t below);

  const uint64_t max_bytes_per_peer_;
  std::shared_ptr<Ticket::Counts> all_;
  std::map<std::string, std::shared_ptr<Ticket::Counts>, std::less<>> peers_;
  size_t sweep_at_ = 64;
  uint64_t refused_ = 0;
  bool trim_pending_ = false;
  uint64_t trim_below_ = 0;
};

// The range checks of a process's per-peer queue limits (the options
// max_queued_replies, max_queued_reply_mb and max_queued_requests of
// servers and the coordinator): each in [1, 10^7], the MiB in [1, 2^20].
Status ValidatePeerQueueLimits(int64_t max_queued_replies,
                               int64_t max_queued_reply_mb,
                               int64_t max_queued_requests);

struct QueuedBytesPerPeer::Ticket::Counts {
  std::atomic<uint64_t> bytes{0};
};

}  // namespace ductile

#endif  // DUCTILE_TRANSPORT_QUEUED_BYTES_H_
