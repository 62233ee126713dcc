#include "python/py_buffers.h"

#include <limits>
#include <string>

#include "python/py_status.h"

namespace py = pybind11;

namespace ductile::python {
namespace {

constexpr int kCContiguous = py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_;
constexpr int kAligned = py::detail::npy_api::NPY_ARRAY_ALIGNED_;
constexpr int kWriteable = py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
constexpr int kOwnData = py::detail::npy_api::NPY_ARRAY_OWNDATA_;

// Whether `array` holds `T`s in native byte order, whatever dtype object
// says so (one from a pickle is equal to numpy's own, not the same object).
template <typename T>
bool HoldsNative(const py::array& array) {
  return py::detail::npy_api::get().PyArray_EquivTypes_(
      array.dtype().ptr(), py::dtype::of<T>().ptr());
}

// `array` as a C-contiguous array of T (itself if it is one, else a copy
// in its own element order).
template <typename T>
py::array CContiguous(const py::array& array) {
  auto copy =
      py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(array);
  if (!copy) throw py::error_already_set();
  return copy;
}

// numpy's view of `obj`: itself if it is an array, else numpy.asarray(obj)
// (which shares the memory of a buffer or of a CPU tensor). A TypeError
// when numpy cannot make an array of it.
py::array AsArray(py::handle obj, const char* what) {
  if (py::isinstance<py::array>(obj))
    return py::reinterpret_borrow<py::array>(obj);
  if (obj.is_none()) {
    ThrowTypeError(std::string(what) + " is None; an array is needed");
  }
  py::object asarray = py::module_::import("numpy").attr("asarray");
  return py::reinterpret_borrow<py::array>(asarray(obj));
}

FloatView Floats(py::handle obj, const char* what, bool output) {
  py::array array = AsArray(obj, what);
  if (!HoldsNative<float>(array)) {
    ThrowTypeError(std::string(what) + " must be float32 (numpy.float32, " +
                   "torch.float32) in native byte order, not " +
                   std::string(py::str(array.dtype())) + " (" + TypeName(obj) +
                   ")");
  }
  const int flags = array.flags();
  if (!(flags & kCContiguous)) {
    ThrowValueError(std::string(what) +
                    " must be C-contiguous to be used in place (numpy." +
                    "ascontiguousarray(), torch's .contiguous())");
  }
  if (!(flags & kAligned)) {
    ThrowValueError(std::string(what) + " is not aligned to 4 bytes");
  }
  if (output) {
    if (!(flags & kWriteable)) {
      ThrowValueError(std::string(what) + " is read-only; the result cannot " +
                      "be written into it");
    }
    // numpy made a copy of it: results written there would be lost.
    if (!py::isinstance<py::array>(obj) && (flags & kOwnData) &&
        array.base().is_none()) {
      ThrowTypeError(std::string(what) + " must be an array the result can " +
                     "be written into (numpy array, CPU torch tensor), not " +
                     TypeName(obj));
    }
  }
  float* data = static_cast<float*>(const_cast<void*>(array.data()));
  return FloatView{array, {data, static_cast<size_t>(array.size())}};
}

// `obj` as a 1-D C-contiguous array of T, converted from any integer
// array when it is not one already; negative or too large values refused.
template <typename T>
py::array_t<T> Integers(py::handle obj, const char* what) {
  py::array array = AsArray(obj, what);
  if (array.ndim() != 1) {
    ThrowValueError(std::string(what) + " must be 1-D, not of " +
                    std::to_string(array.ndim()) + " dimensions");
  }
  const char kind = array.dtype().kind();
  if (kind != 'i' && kind != 'u') {
    if (array.size() == 0) return py::array_t<T>(0);  // [] reads as float64
    ThrowTypeError(std::string(what) + " must be integers, not " +
                   std::string(py::str(array.dtype())));
  }
  if (HoldsNative<T>(array) && (array.flags() & kCContiguous) &&
      (array.flags() & kAligned)) {
    return py::reinterpret_borrow<py::array_t<T>>(array);
  }
  // Range checks on a wide C-contiguous copy (a strided or reversed view is
  // read in its own order), then the narrow one.
  const bool is_signed = kind == 'i';
  py::array wide =
      is_signed ? CContiguous<int64_t>(array) : CContiguous<uint64_t>(array);
  py::array_t<T> result(array.size());
  T* out = result.mutable_data();
  for (py::ssize_t i = 0; i < array.size(); ++i) {
    const uint64_t v =
        is_signed
            ? static_cast<uint64_t>(static_cast<const int64_t*>(wide.data())[i])
            : static_cast<const uint64_t*>(wide.data())[i];
    const bool negative =
        is_signed && static_cast<const int64_t*>(wide.data())[i] < 0;
    if (negative || v > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      ThrowValueError(std::string(what) + "[" + std::to_string(i) +
                      "] is out of range (0 to " +
                      std::to_string(std::numeric_limits<T>::max()) + ")");
    }
    out[i] = static_cast<T>(v);
  }
  return result;
}

}  // namespace

std::string TypeName(py::handle obj) {
  return py::str(py::type::handle_of(obj).attr("__name__"));
}

FloatView InputFloats(py::handle obj, const char* what) {
  return Floats(obj, what, /*output=*/false);
}

FloatView OutputFloats(py::handle obj, const char* what) {
  return Floats(obj, what, /*output=*/true);
}

KeyView Keys(py::handle obj) {
  py::array_t<Key> keys = Integers<Key>(obj, "keys");
  return KeyView{keys, {keys.data(), static_cast<size_t>(keys.size())}};
}

KeyView Ids(py::handle obj, std::vector<py::ssize_t>* shape) {
  py::array array = AsArray(obj, "ids");
  shape->assign(array.shape(), array.shape() + array.ndim());
  const int flags = array.flags();
  if (array.dtype().kind() == 'i' && HoldsNative<int64_t>(array) &&
      (flags & kCContiguous) && (flags & kAligned)) {
    // torch's and numpy's default: the same bits as uint64 when none is
    // negative.
    const auto* ids = static_cast<const int64_t*>(array.data());
    const size_t n = static_cast<size_t>(array.size());
    for (size_t i = 0; i < n; ++i) {
      if (ids[i] < 0) {
        ThrowValueError("ids has a negative id (" + std::to_string(ids[i]) +
                        " at flat index " + std::to_string(i) +
                        "); ids are 0 to 2**64 - 1");
      }
    }
    return KeyView{array, {reinterpret_cast<const Key*>(ids), n}};
  }
  py::array flat = array.attr("reshape")(-1);
  py::array_t<Key> keys = Integers<Key>(flat, "ids");
  return KeyView{keys, {keys.data(), static_cast<size_t>(keys.size())}};
}

LengthView Lengths(py::handle obj) {
  if (obj.is_none()) return LengthView{py::none(), {}};
  py::array_t<uint32_t> lengths = Integers<uint32_t>(obj, "lengths");
  return LengthView{lengths,
                    {lengths.data(), static_cast<size_t>(lengths.size())}};
}

py::array_t<float> NewFloats(uint64_t n) {
  return py::array_t<float>(static_cast<py::ssize_t>(n));
}

py::array_t<float> NewFloats(const std::vector<py::ssize_t>& shape) {
  return py::array_t<float>(shape);
}

}  // namespace ductile::python
