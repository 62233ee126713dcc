// Multipart messages as the rest of ductile sees them: frames of bytes,
// with no transport types in sight.
//
// OutMessage collects frames to send. Large frames can be owned (handed
// over without a copy) or borrowed (AddBorrowed): the transport reads them
// in place and calls `on_release` once it no longer needs the bytes,
// possibly on one of its own threads. InMessage holds a received message:
// its frames are views into storage the message keeps alive, so readers
// parse them in place.
//
// Not thread-safe: a message belongs to one thread at a time.
#ifndef DUCTILE_TRANSPORT_MESSAGE_H_
#define DUCTILE_TRANSPORT_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ductile {

using ByteSpan = std::span<const uint8_t>;

// Keeps the bytes of a message's frames alive; what it is depends on the
// transport (received ZeroMQ messages, copies made by a simulated network).
class FrameStorage {
 public:
  virtual ~FrameStorage() = default;
};

class InMessage {
 public:
  InMessage() = default;
  InMessage(InMessage&&) = default;
  InMessage& operator=(InMessage&&) = default;

  // A message holding copies of `frames` (tests, simulation).
  static InMessage Copy(const std::vector<std::string>& frames);

  size_t size() const { return frames_.size(); }
  bool empty() const { return frames_.empty(); }
  ByteSpan frame(size_t i) const { return frames_[i]; }
  std::string_view frame_view(size_t i) const {
    return {reinterpret_cast<const char*>(frames_[i].data()),
            frames_[i].size()};
  }
  uint64_t bytes() const;

  // The sending process's id as the kernel gave it for the connection (a
  // Unix-domain socket's peer credentials: ipc:// only, read from a
  // router's messages); 0 where it is not known (tcp://, inproc://, a
  // dealer's messages, a simulation). A peer cannot choose it.
  int32_t peer_pid() const { return peer_pid_; }
  void set_peer_pid(int32_t pid) { peer_pid_ = pid; }

  // Whether the sender has admin rights, as the transport authenticated
  // it: with CURVE keys, a peer that connected with the admin key; in plain
  // mode (and in a simulation) every sender, since nobody is authenticated
  // and nobody can be refused.
  bool from_admin() const { return from_admin_; }
  // The member key the sender's connection proved (Z85), if it used a key
  // of its own (Security::member_public); "" for the cluster's shared key,
  // the admin's, plain mode and a simulation.
  const std::string& member_key() const { return member_key_; }
  // The name that key has in the members directory (its NAME.pub), which
  // may bind it to a role and id (MemberKeyRole); "" without a member key.
  const std::string& member_key_name() const { return member_key_name_; }

  // Transports: replaces the frames with views into `storage`.
  void Reset(std::unique_ptr<FrameStorage> storage,
             std::vector<ByteSpan> frames);
  // Transports: the storage of the frames now held (may be reused).
  FrameStorage* storage() const { return storage_.get(); }
  // Takes the storage out: the frames stay views into it, valid while it
  // lives (to rebuild a message around some of its frames with Reset).
  std::unique_ptr<FrameStorage> TakeStorage() { return std::move(storage_); }
  std::vector<ByteSpan>& mutable_frames() { return frames_; }
  void set_from_admin(bool from_admin) { from_admin_ = from_admin; }
  void set_member_key(std::string_view key, std::string_view name = {}) {
    member_key_.assign(key);
    member_key_name_.assign(name);
  }

 private:
  std::unique_ptr<FrameStorage> storage_;
  std::vector<ByteSpan> frames_;
  bool from_admin_ = true;
  int32_t peer_pid_ = 0;
  std::string member_key_;
  std::string member_key_name_;
};

class OutMessage {
 public:
  // Who releases an out-of-line frame's bytes: its destructor runs once the
  // transport is done with them (on any thread).
  class Holder {
   public:
    virtual ~Holder() = default;
  };
  struct Frame {
    // Bytes held inline (copies); `data` is then unused.
    std::string inline_bytes;
    const void* data = nullptr;
    size_t size = 0;
    std::unique_ptr<Holder> holder;  // null for inline bytes
    ByteSpan bytes() const {
      return holder ? ByteSpan(static_cast<const uint8_t*>(data), size)
                    : ByteSpan(
                          reinterpret_cast<const uint8_t*>(inline_bytes.data()),
                          inline_bytes.size());
    }
  };

  OutMessage() = default;
  OutMessage(OutMessage&&) = default;
  OutMessage& operator=(OutMessage&&) = default;

  // Copies `size` bytes.
  void AddCopy(const void* data, size_t size);
  void AddCopy(ByteSpan bytes) { AddCopy(bytes.data(), bytes.size()); }
  // Takes the string's bytes.
  void AddString(std::string s);
  // Takes ownership of a buffer (no copy).
  template <typename T>
  void AddOwned(std::vector<T>&& items);
  // Sends `data` in place; `on_release` runs (on any thread) once the
  // transport is done with it. The bytes must stay valid and unchanged
  // until then.
  void AddBorrowed(const void* data, size_t size,
                   std::function<void()> on_release);

  size_t frames() const { return frames_.size(); }
  uint64_t bytes() const { return bytes_; }
  // Transports: the frames, to send or copy.
  std::vector<Frame>& mutable_frames() { return frames_; }

 private:
  template <typename T>
  struct OwnedVector final : Holder {
    explicit OwnedVector(std::vector<T>&& v) : items(std::move(v)) {}
    std::vector<T> items;
  };

  std::vector<Frame> frames_;
  uint64_t bytes_ = 0;
};

template <typename T>
void OutMessage::AddOwned(std::vector<T>&& items) {
  auto owned = std::make_unique<OwnedVector<T>>(std::move(items));
  Frame& f = frames_.emplace_back();
  f.data = owned->items.data();
  f.size = owned->items.size() * sizeof(T);
  f.holder = std::move(owned);
  bytes_ += f.size;
}

}  // namespace ductile

#endif  // DUCTILE_TRANSPORT_MESSAGE_H_
