// Finiteness of float vectors, checked the same way by the client (before
// anything is sent) and by the servers (as a second line).
#ifndef DUCTILE_UTIL_FINITE_H_
#define DUCTILE_UTIL_FINITE_H_

#include <cstddef>
#include <span>

namespace ductile {

// True when no element is NaN or infinite. Vectorised: about the cost of
// reading the values once.
bool AllFinite(std::span<const float> values);

// The index of the first NaN or infinite element, or values.size().
size_t FirstNonFinite(std::span<const float> values);

}  // namespace ductile

#endif  // DUCTILE_UTIL_FINITE_H_
