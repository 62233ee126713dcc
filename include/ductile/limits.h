// Limits and defaults that every role shares, named once.
#ifndef DUCTILE_LIMITS_H_
#define DUCTILE_LIMITS_H_

#include <cstdint>

namespace ductile {

// A server's or a worker's id is in [0, kMaxMemberId] (a launcher's rank
// too, which becomes the id).
inline constexpr int32_t kMaxMemberId = (1 << 20) - 1;

// How long a connection, a request or a reply is waited for when nothing
// else is said (ClientOptions, ServerOptions, a request that names no
// timeout), in milliseconds.
inline constexpr int64_t kDefaultTimeoutMs = 60000;

}  // namespace ductile

#endif  // DUCTILE_LIMITS_H_
