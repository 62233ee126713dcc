#include "python/py_client.h"

#include <unistd.h>

#include <utility>
#include <vector>

#include "python/py_buffers.h"
#include "python/py_status.h"
#include "python/py_tables.h"

namespace py = pybind11;

namespace ductile::python {
namespace {

[[noreturn]] void RaiseForked(pid_t owner) {
  ThrowStatus(FailedPreconditionError(
      "this ductile client was connected in process " + std::to_string(owner) +
      " and cannot be used in process " + std::to_string(getpid()) +
      ", forked from it (a DataLoader worker, say): its connections belong "
      "to the parent. Use it in the parent only, or connect a new client in "
      "the child"));
}

}  // namespace

PyClient::PyClient(std::unique_ptr<Client> client, std::string address)
    : pid_(getpid()),
      address_(std::move(address)),
      client_(std::move(client)) {}

PyClient::~PyClient() {
  if (getpid() != pid_) {
    // A forked child: the client's thread and sockets are the parent's.
    // Leave them untouched (never destroyed here, on purpose).
    new std::shared_ptr<Client>(std::move(client_));
    for (Adopted& a : adopted_) new Handle(std::move(a.handle));
    return;
  }
  {
    py::gil_scoped_release release;
    client_.reset();  // joins its I/O thread; pending calls are cancelled
  }
  adopted_.clear();
}

std::shared_ptr<Client> PyClient::Get() const {
  if (getpid() != pid_) RaiseForked(pid_);
  if (client_ == nullptr) {
    ThrowStatus(FailedPreconditionError("the client is closed"));
  }
  return client_;
}

void PyClient::Close() {
  if (getpid() != pid_) RaiseForked(pid_);
  std::shared_ptr<Client> client = std::move(client_);
  {
    py::gil_scoped_release release;
    client.reset();
  }
  Sweep();
}

void PyClient::Adopt(Handle handle, py::object keepalive) {
  adopted_.push_back(Adopted{std::move(handle), std::move(keepalive)});
}

void PyClient::Sweep() {
  std::erase_if(adopted_, [](const Adopted& a) { return a.handle.done(); });
}

Submitted PyClient::Submit(DataCall call, py::handle target,
                           py::handle keys_obj, py::handle values_obj,
                           py::handle out_obj, py::handle lengths_obj) {
  std::shared_ptr<Client> client = Get();
  Sweep();
  py::list keep;
  TableId table = 0;
  std::span<const Key> keys;
  std::span<const uint32_t> lengths;
  uint64_t out_floats = 0;  // a new output's size
  bool sized = true;        // out_floats is known
  if (py::isinstance<PyTensor>(target)) {
    const PyTensor& t = target.cast<const PyTensor&>();
    table = t.tensor.table;
    keys = t.tensor.keys;
    lengths = t.tensor.lengths;
    out_floats = t.tensor.num_floats;
  } else if (py::isinstance<TableInfo>(target)) {
    const TableInfo& info = target.cast<const TableInfo&>();
    table = info.id;
    KeyView k = Keys(keys_obj);
    LengthView l = Lengths(lengths_obj);
    keep.append(k.owner);
    keep.append(l.owner);
    keys = k.keys;
    lengths = l.lengths;
    if (info.options.value_width != 0) {
      out_floats = keys.size() * uint64_t{info.options.value_width};
    } else {
      for (uint32_t n : lengths) out_floats += n;
      sized = !lengths.empty() || keys.empty();
    }
  } else {
    ThrowTypeError(
        "table must be a ductile.Table (Client.create_table, "
        "Client.get_table) or a ductile.Tensor "
        "(Client.register_tensor), not " +
        TypeName(target));
  }
  keep.append(target);

  std::span<const float> values;
  if (call != DataCall::kPull) {
    FloatView v = InputFloats(values_obj, "values");
    keep.append(v.owner);
    values = v.floats;
  }
  std::span<float> out;
  py::object result = py::none();
  if (call != DataCall::kPush) {
    FloatView o;
    if (out_obj.is_none()) {
      if (!sized) {
        ThrowValueError(
            "a pull from a variable-width table needs lengths "
            "(or out) to know the size of its result");
      }
      py::array_t<float> fresh = NewFloats(out_floats);
      o = FloatView{fresh, {fresh.mutable_data(), out_floats}};
      result = fresh;
    } else {
      o = OutputFloats(out_obj, "out");
      result = py::reinterpret_borrow<py::object>(out_obj);
    }
    keep.append(o.owner);
    out = o.floats;
  }

  Handle handle;
  switch (call) {
    case DataCall::kPush:
      handle = client->PushAsync(table, keys, values, lengths);
      break;
    case DataCall::kPull:
      handle = client->PullAsync(table, keys, out, lengths);
      break;
    case DataCall::kPushPull:
      handle = client->PushPullAsync(table, keys, values, out, lengths);
      break;
  }
  return Submitted{std::move(handle), py::tuple(keep), std::move(result)};
}

Submitted PyClient::SubmitRows(DataCall call, py::handle target,
                               py::handle ids_obj, py::handle grads_obj,
                               py::handle out_obj) {
  std::shared_ptr<Client> client = Get();
  Sweep();
  if (!py::isinstance<TableInfo>(target)) {
    ThrowTypeError(
        "table must be a ductile.Table (Client.create_table, "
        "Client.get_table), not " +
        TypeName(target));
  }
  const TableInfo& info = target.cast<const TableInfo&>();
  std::vector<py::ssize_t> shape;
  KeyView ids = Ids(ids_obj, &shape);
  py::list keep;
  keep.append(target);
  keep.append(ids.owner);
  Handle handle;
  py::object result = py::none();
  if (call == DataCall::kPush) {
    FloatView grads = InputFloats(grads_obj, "grads");
    keep.append(grads.owner);
    handle = client->PushRowsAsync(info.id, ids.keys, grads.floats);
  } else {
    FloatView o;
    if (out_obj.is_none()) {
      // A variable-width table gets an empty result, which the client
      // refuses naming the table's kind.
      shape.push_back(info.options.value_width);
      py::array_t<float> fresh = NewFloats(shape);
      o = FloatView{fresh,
                    {fresh.mutable_data(), static_cast<size_t>(fresh.size())}};
      result = fresh;
    } else {
      o = OutputFloats(out_obj, "out");
      result = py::reinterpret_borrow<py::object>(out_obj);
    }
    keep.append(o.owner);
    handle = client->PullRowsAsync(info.id, ids.keys, o.floats);
  }
  return Submitted{std::move(handle), py::tuple(keep), std::move(result)};
}

void RaiseIfFailedAtOnce(const Handle& handle) {
  // Only a refusal before sending: a server's quick answer is the
  // Handle's, for wait().
  if (handle.refused()) ThrowIfError(handle.Wait());
}

// ------------------------------------------------------------------ Handle

PyHandle::PyHandle(Submitted submitted, py::object client, DataCall call)
    : submitted_(std::move(submitted)),
      client_(std::move(client)),
      call_(call),
      pid_(getpid()) {}

PyHandle::~PyHandle() {
  if (getpid() != pid_) {
    new Handle(std::move(submitted_.handle));  // the parent's: left alone
    return;
  }
  if (!submitted_.handle.done() && submitted_.keepalive) {
    client_.cast<PyClient&>().Adopt(submitted_.handle,
                                    std::move(submitted_.keepalive));
  }
}

void PyHandle::CheckProcess() const {
  if (getpid() != pid_) RaiseForked(client_.cast<const PyClient&>().pid());
}

py::object PyHandle::Wait() {
  CheckProcess();
  Status status;
  {
    py::gil_scoped_release release;
    status = submitted_.handle.Wait();
  }
  // Done: nothing borrows the arrays any more.
  submitted_.keepalive = py::none();
  ThrowIfError(status);
  return submitted_.result;
}

bool PyHandle::done() const {
  CheckProcess();
  return submitted_.handle.done();
}

std::string PyHandle::Repr() const {
  const char* what = call_ == DataCall::kPush   ? "push"
                     : call_ == DataCall::kPull ? "pull"
                                                : "push_pull";
  return std::string("<ductile.Handle ") + what +
         (submitted_.handle.done() ? " done>" : " pending>");
}

}  // namespace ductile::python
