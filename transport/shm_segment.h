// Shared memory between processes on one host, for large values: a
// worker creates one segment and names regions of it in its requests to
// the servers it reaches over ipc://; a server reads a push's values from
// it and writes a pull's into it, and the messages carry only headers
// (docs/wire.md, "Values in shared memory").
//
// A segment is an anonymous memory file (memfd) sealed against shrinking.
// Another process of the same user opens it by the creator's pid and file
// descriptor (/proc/PID/fd/FD), only if that names a ductile memfd on
// tmpfs (so a request cannot make a server open another kind of file,
// hugetlb memory included), and proves it is the segment meant by a random
// token written at its start: a pid reused by another process, or
// a process in another pid namespace, does not have it. The seal means
// the creator cannot cut the file under a peer's mapping (which would
// fault the peer). The memory is freed once the creator has exited and
// every peer has unmapped it; nothing is left behind in a file system.
//
// Not thread-safe for writes to the same bytes; the object itself is
// immutable after Create/Open.
#ifndef DUCTILE_TRANSPORT_SHM_SEGMENT_H_
#define DUCTILE_TRANSPORT_SHM_SEGMENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "ductile/status.h"

namespace ductile {

class ShmSegment {
 public:
  // Bytes at the segment's start that hold its magic and token; the
  // usable region begins here.
  static constexpr uint64_t kHeaderBytes = 64;
  static constexpr size_t kTokenBytes = 16;

  // A new segment of `bytes` (the header included; pages are allocated
  // as they are first written). kInvalidArgument for fewer than
  // kHeaderBytes + 1 or more than 64 GiB; kUnavailable if the system
  // refuses (no memfd, no memory).
  static Result<std::unique_ptr<ShmSegment>> Create(uint64_t bytes);
  // Maps the segment that process `pid` holds as descriptor `fd`.
  // kPermissionDenied/kNotFound if it cannot be opened (another user, the
  // process is gone, another pid namespace); kUnavailable if this process
  // is short of descriptors or memory for it (it may be tried again);
  // kInvalidArgument if it is not a sealed ductile memfd (then it is not
  // opened at all) or its token differs.
  static Result<std::unique_ptr<ShmSegment>> Open(int32_t pid, int32_t fd,
                                                  std::string_view token);

  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  // The creator's pid and descriptor, as a peer opens it (Create only:
  // -1 after Open).
  int32_t pid() const { return pid_; }
  int32_t fd() const { return fd_; }
  const std::string& token() const { return token_; }
  // The memory file's device and inode (Open only: 0 after Create), to
  // tell whether /proc/PID/fd/FD still names it.
  uint64_t device() const { return device_; }
  uint64_t inode() const { return inode_; }
  // Whether [offset, offset + bytes) lies in the usable region.
  bool Holds(uint64_t offset, uint64_t bytes) const {
    return offset >= kHeaderBytes && offset <= size_ && bytes <= size_ - offset;
  }

 private:
  ShmSegment() = default;

  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  int32_t pid_ = -1;
  int32_t fd_ = -1;  // owned by the creator; closed after mapping by a peer
  std::string token_;
  uint64_t device_ = 0;
  uint64_t inode_ = 0;
};

}  // namespace ductile

#endif  // DUCTILE_TRANSPORT_SHM_SEGMENT_H_
