// The caller's arrays as the spans the client borrows.
//
// Values and outputs are used in place, never copied: a float32,
// C-contiguous, aligned array in native byte order (a numpy array, or
// anything numpy sees through the buffer protocol or __array__, such as a
// CPU torch tensor, whose .numpy() shares its memory). Anything else is
// refused with a TypeError (the dtype) or a ValueError (the layout, a
// read-only output) before the client sees it. Keys and lengths are small
// and may be any sequence of non-negative integers: they are converted
// when they are not already uint64 (keys) or uint32 (lengths) arrays.
//
// Each view holds a reference to the array it points into (`owner`), so a
// call that keeps the view keeps the memory alive. All functions need the
// GIL.
#ifndef DUCTILE_PYTHON_PY_BUFFERS_H_
#define DUCTILE_PYTHON_PY_BUFFERS_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ductile/table.h"

namespace ductile::python {

struct FloatView {
  pybind11::array owner;
  std::span<float> floats;
};

// `obj` as floats read in place (push values). `what` names the argument
// in errors.
FloatView InputFloats(pybind11::handle obj, const char* what);
// `obj` as floats written in place (pull results): it must also be
// writeable and be the caller's own memory (a list, which numpy would
// copy, is refused).
FloatView OutputFloats(pybind11::handle obj, const char* what);

struct KeyView {
  pybind11::array owner;
  std::span<const Key> keys;
};
KeyView Keys(pybind11::handle obj);

// Row ids (Client.pull_rows): an integer array of any shape, read in place
// when it is a C-contiguous int64 (none negative) or uint64 array, else
// converted; `shape` gets its shape.
KeyView Ids(pybind11::handle obj, std::vector<pybind11::ssize_t>* shape);

struct LengthView {
  pybind11::object owner;  // None when no lengths were given
  std::span<const uint32_t> lengths;
};
// None gives no lengths.
LengthView Lengths(pybind11::handle obj);

// The name of `obj`'s type, for error messages ("got a list").
std::string TypeName(pybind11::handle obj);

// A new float32 array of `n` floats (a pull's result when no `out` is
// given).
pybind11::array_t<float> NewFloats(uint64_t n);
// A new float32 array of this shape.
pybind11::array_t<float> NewFloats(const std::vector<pybind11::ssize_t>& shape);

}  // namespace ductile::python

#endif  // DUCTILE_PYTHON_PY_BUFFERS_H_
