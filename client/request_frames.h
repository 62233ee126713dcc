// The frames of one data request (docs/wire.md): a header, the keys, the
// values and the lengths of a part of a call.
//
// Where a part's keys are one contiguous range of the caller's arrays, its
// keys, values and lengths go out in place, without a copy: each borrowed
// frame holds the operation until the transport releases it (the call is
// not done, and the caller may not reuse its buffers, before). Otherwise
// the keys and lengths are gathered, and the values too, unless each key's
// vector is large: then each goes in place as a frame of its own.
#ifndef DUCTILE_CLIENT_REQUEST_FRAMES_H_
#define DUCTILE_CLIENT_REQUEST_FRAMES_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "client/operation.h"
#include "proto/ductile.pb.h"
#include "transport/message.h"

namespace ductile {

// The part: keys [begin, begin + count) of `op`, or those at `indices`
// when it is not empty. Sets header.values_frames for a push. A push with
// `shm_values` (a region of shared memory holding exactly the part's
// values, named in header.push_shm) copies its values there and sends no
// values frame.
OutMessage BuildDataRequest(wire::Header& header,
                            const std::shared_ptr<DataOperation>& op,
                            size_t begin, size_t count,
                            std::span<const uint32_t> indices, bool push,
                            std::span<float> shm_values = {});

}  // namespace ductile

#endif  // DUCTILE_CLIENT_REQUEST_FRAMES_H_
