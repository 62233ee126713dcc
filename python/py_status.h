// Status codes as Python exceptions: each non-OK StatusCode raises the
// class of its name defined in ductile/errors.py (ductile.NotFound,
// ductile.Unavailable, ...), all derived from ductile.DuctileError.
#ifndef DUCTILE_PYTHON_PY_STATUS_H_
#define DUCTILE_PYTHON_PY_STATUS_H_

#include <pybind11/pybind11.h>

#include <utility>

#include "ductile/status.h"

namespace ductile::python {

// Raises `status` (not OK) as its exception class. Needs the GIL.
[[noreturn]] void ThrowStatus(const Status& status);

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

template <typename T>
T ValueOrThrow(Result<T> result) {
  if (!result.ok()) ThrowStatus(result.status());
  return std::move(result).value();
}

// Raises a plain TypeError or ValueError (an argument the binding refuses
// before anything reaches the client).
[[noreturn]] void ThrowTypeError(const std::string& message);
[[noreturn]] void ThrowValueError(const std::string& message);

}  // namespace ductile::python

#endif  // DUCTILE_PYTHON_PY_STATUS_H_
