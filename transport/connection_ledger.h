// What a router's connection guard (transport/connection_guard.h) knows of
// the connections its router accepted, and the rule that refuses one.
//
// A process has a soft limit of open files; each accepted connection takes
// one descriptor from the moment it is accepted, before any handshake, so
// a peer holding no key can take them all. libzmq aborts the process when
// accepting on an ipc:// socket finds none left, and a process with none
// cannot open its own files or sockets either. The rule:
//
//   1. A tcp:// connection accepted on a descriptor numbered at or above
//      limit - reserved_descriptors is refused. Descriptors are handed out
//      lowest first, so every lower number was taken: the top
//      `reserved_descriptors` numbers stay free for the process's own files
//      and sockets and for ipc:// peers (on the same host), whatever the
//      network sends. This caps the tcp:// connections of the whole
//      process, over all its routers, at limit - reserved_descriptors.
//   2. An ipc:// connection is refused at or above limit - reserved / 2: a
//      flood of local peers still leaves the process half its reserve.
//   3. A tcp:// connection from a source address that already has
//      `max_per_source` connections kept by this router is refused
//      (0: no cap), so one address cannot take all that rule 1 allows.
//
// Refused connections are not recorded (the guard closes them); Closed()
// of a descriptor not recorded is ignored. The guard hears of a
// connection's close before a later connection can be accepted on the same
// descriptor, so the record stays exact.
//
// Pure bookkeeping, no sockets: thread-compatible (the guard's thread
// alone uses it).
#ifndef DUCTILE_TRANSPORT_CONNECTION_LEDGER_H_
#define DUCTILE_TRANSPORT_CONNECTION_LEDGER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>

namespace ductile {

class ConnectionLedger {
 public:
  enum class Verdict {
    kKeep,
    kRefuseDescriptors,  // rules 1 and 2
    kRefuseSource,       // rule 3
  };

  // `reserved_descriptors` >= 2; `max_per_source` >= 0 (0: no cap).
  ConnectionLedger(int64_t reserved_descriptors, int64_t max_per_source);

  // A connection accepted on descriptor `fd`, over tcp:// from address
  // `source` (`tcp`), or over ipc:// (`source` unused), when the soft
  // limit of open files is `limit`. Records it unless refused.
  Verdict Accepted(int fd, bool tcp, const std::string& source, int64_t limit);
  // The connection on `fd` closed.
  void Closed(int fd);

  // Connections kept, all and from `source`.
  size_t open() const { return by_fd_.size(); }
  size_t open_from(const std::string& source) const;

 private:
  const int64_t reserved_descriptors_;
  const int64_t max_per_source_;
  std::unordered_map<int, std::string> by_fd_;  // kept: fd -> source
  std::map<std::string, size_t> per_source_;    // tcp sources with > 0
};

}  // namespace ductile

#endif  // DUCTILE_TRANSPORT_CONNECTION_LEDGER_H_
