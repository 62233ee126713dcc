// The methods of ductile.Client and ductile.Handle.
#include <pybind11/stl.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <utility>

#include "python/py_bind.h"
#include "python/py_client.h"
#include "python/py_status.h"
#include "python/py_tables.h"

namespace py = pybind11;

namespace ductile::python {
namespace {

// A submitted call as Python sees it: a Handle (async), or its result
// once done (blocking; the GIL released while it waits).
py::object Finish(py::object self, bool async, DataCall call,
                  Submitted submitted) {
  if (async) {
    RaiseIfFailedAtOnce(submitted.handle);
    return py::cast(std::make_unique<PyHandle>(std::move(submitted),
                                               std::move(self), call));
  }
  Status status;
  {
    py::gil_scoped_release release;
    status = submitted.handle.Wait();
  }
  ThrowIfError(status);
  return submitted.result;
}

// A data call, blocking (its result) or not (a Handle).
py::object Run(py::object self, bool async, DataCall call, py::handle table,
               py::handle keys, py::handle values, py::handle out,
               py::handle lengths) {
  PyClient& client = self.cast<PyClient&>();
  Submitted submitted = client.Submit(call, table, keys, values, out, lengths);
  return Finish(std::move(self), async, call, std::move(submitted));
}

const char* kPushDoc = R"doc(
Applies `values` to `keys` with the table's update rule and waits.

keys: strictly increasing non-negative integers (any integer sequence; a
uint64 array is used as is). values: float32, C-contiguous, the widths of
the keys end to end (a numpy array or a CPU torch tensor, used in place).
lengths: floats per key, for variable-width tables.)doc";
const char* kPullDoc = R"doc(
Reads the values of `keys` and returns them: into `out` (float32,
C-contiguous, writeable: a numpy array or a CPU torch tensor, filled in place
and returned) or, without it, a new numpy array.)doc";
const char* kPushPullDoc = R"doc(
Pushes `values` to `keys`, then reads the updated values, in one round trip
per server; returns them (in `out` if given, as pull() does).)doc";
const char* kAsyncDoc = R"doc(
As the blocking call, but returns a Handle at once: handle.wait() waits and
returns what the blocking call would. The call borrows the arrays until it is
done; the Handle keeps them alive, so they may be dropped meanwhile (but not
changed). Bad arguments raise here, before anything is sent.)doc";
const char* kPushTensorDoc = R"doc(
Pushes `values` (the tensor's num_floats float32, used in place) to the
tensor and waits.)doc";
const char* kPullTensorDoc = R"doc(
Reads the tensor and returns it (in `out` if given, as pull() does).)doc";
const char* kPushPullTensorDoc = R"doc(
Pushes `values` to the tensor, then reads it back, in one round trip per
server; returns it (in `out` if given).)doc";

// A call on rows by id, blocking or not.
py::object RunRows(py::object self, bool async, DataCall call, py::handle table,
                   py::handle ids, py::handle grads, py::handle out) {
  PyClient& client = self.cast<PyClient&>();
  Submitted submitted = client.SubmitRows(call, table, ids, grads, out);
  return Finish(std::move(self), async, call, std::move(submitted));
}

const char* kPullRowsDoc = R"doc(
Reads the rows of `ids` of a fixed-width table, an embedding lookup: ids is an
integer array of any shape (numpy int64 or uint64 or a CPU torch int64 tensor,
used in place; other integer arrays are converted), in any order and with
repeats; returns an array of shape ids.shape + (table.width,), float32, row
after row as the ids are. The client sends each distinct id once, one request
per server, and copies its row to every place the id holds. With `out`
(float32, C-contiguous, writeable, ids.size * width floats) the rows go there
and it is returned.

    ids = numpy.array([[42, 7], [7, 9]])          # a batch of 2 bags of 2
    rows = client.pull_rows(table, ids)          # shape (2, 2, table.width)

Raises TypeError for ids that are not integers or grads / out that are not
float32, ValueError for a negative id, and InvalidArgument (a ValueError) for
a size that is not ids.size * width or a variable-width table; nothing is sent
then.)doc";
const char* kPushRowsDoc = R"doc(
Applies `grads` to the rows of `ids` with the table's update rule and waits:
grads is float32, C-contiguous, ids.size * width floats (shape ids.shape +
(width,)), row i for ids' i-th id (flat order). The gradients of an id that
repeats are summed and applied once, in one request per server.

    client.push_rows(table, ids, grads)          # grads.shape == rows.shape
)doc";

}  // namespace

void BindClient(py::module_& m) {
  using py::arg;
  const py::none none;

  py::class_<PyHandle>(m, "Handle", R"doc(
An asynchronous push, pull or push-pull (Client.push_async() and the like).
wait() blocks (without the GIL) until it is done and returns its result (the
output array of a pull) or raises its error; `done` tells whether wait() would
block. It keeps the call's arrays alive until the call is done.)doc")
      .def("wait", &PyHandle::Wait,
           "Waits until the call is done; returns its output (None for a "
           "push) or raises its error.")
      .def_property_readonly("done", &PyHandle::done)
      .def("__repr__", &PyHandle::Repr);

  py::class_<PyClient> c(m, "Client", R"doc(
A worker's connection to a ductile cluster (ductile.connect()). Thread-safe:
any number of Python threads may call it; blocking calls release the GIL.

    client = ductile.connect("tcp://127.0.0.1:7000")
    table = client.create_table("weights", width=4, rule="sgd",
                                learning_rate=0.1)
    keys = [1, 7, 42]
    grad = numpy.full(12, 0.5, dtype=numpy.float32)
    client.push(table, keys, grad)
    weights = client.pull(table, keys)
    client.clock()

A client belongs to the process that connected it: in a forked child every
call raises FailedPrecondition. Errors raise ductile.DuctileError subclasses
named after the status codes.)doc");

  c.def_property_readonly("address", &PyClient::address)
      .def_property_readonly("closed", &PyClient::closed)
      .def("close", &PyClient::Close, R"doc(
Closes the connection (once calls on other threads are done); calls pending
fail with ductile.Cancelled. A closed client raises FailedPrecondition.)doc")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](PyClient& c, py::handle, py::handle, py::handle) { c.Close(); })
      .def("__repr__", [](const PyClient& c) {
        if (c.pid() != getpid()) {
          return "<ductile.Client " + c.address() + " of process " +
                 std::to_string(c.pid()) + ">";
        }
        if (c.closed()) return "<ductile.Client " + c.address() + " closed>";
        return "<ductile.Client " + c.address() + " worker " +
               std::to_string(c.Get()->worker_id()) + ">";
      });

  // ---- Tables.
  c.def(
       "create_table",
       [](const PyClient& c, const std::string& name, const py::kwargs& kw) {
         TableOptions options = TableOptionsFromKwargs(name, kw);
         Result<TableId> id = Unlocked(
             c, [&](Client& client) { return client.CreateTable(options); });
         return TableInfo{ValueOrThrow(std::move(id)), options};
       },
       arg("name"), R"doc(
Creates a table on every server, or returns the existing one when a table of
this name has equal options (AlreadyExists when they differ). Options, by
keyword (ductile::TableOptions):
  width=1             floats per key (0: variable width)
  rule="add"          assign, add, sgd, momentum, adagrad, adam, custom
  learning_rate=0.01, momentum=0.9, beta1=0.9, beta2=0.999, epsilon=1e-8
  init=None           "zeros", a number (constant), or a dict such as
                      {"kind": "normal", "mean": 0, "stddev": 0.01, "seed": 1}
                      or {"kind": "uniform", "low": -0.05, "high": 0.05}
  consistency="async" "async", "ssp:K", "bsp" (mean of a clock's pushes),
                      "bsp(sum)"
  reject_non_finite=True, custom_rule=""
  lr_schedule         dict: warmup_clocks, decay ("none", "step", "cosine"),
                      step_clocks, gamma, total_clocks, min_factor
  batch_scaling       dict: rule ("none", "linear", "sqrt", "adascale"),
                      base_pushes, ramp_clocks
  rows                dict, for tables of rows by id (ductile::RowPolicy):
                      admit_after_pushes (store a row at its N-th push;
                      0-65535, 0: at once), admission_counters (the
                      filter's counters: 0 for 2^20, or 1024 - 2^24),
                      evict_idle_clocks (remove rows not updated for this
                      many clocks; 0: never), max_rows (per server, the
                      rows beyond it removed; 0: no limit), each a
                      non-negative integer; and eviction, which rows the
                      budget removes: "least_recent" (the default) or
                      "least_used" (those pushed the fewest times, counted
                      in a sketch that remembers evicted ids and ages:
                      popular rows stay).)doc")
      .def(
          "get_table",
          [](const PyClient& c, const std::string& name) {
            return ValueOrThrow(Unlocked(
                c, [&](Client& client) { return client.GetTable(name); }));
          },
          arg("name"), "The table of this name (ductile.NotFound if none).")
      .def(
          "register_tensor",
          [](const PyClient& c, const std::string& name, uint64_t num_floats,
             uint32_t chunk_floats, const py::kwargs& kw) {
            TableOptions options = TableOptionsFromKwargs(name, kw);
            Result<Tensor> t = Unlocked(c, [&](Client& client) {
              return client.RegisterTensor(options, num_floats, chunk_floats);
            });
            return PyTensor{ValueOrThrow(std::move(t)), name};
          },
          arg("name"), arg("num_floats"), py::kw_only(),
          arg("chunk_floats") = 32768, R"doc(
A dense tensor of `num_floats` floats, stored as a variable-width table
`name` in chunks of `chunk_floats` floats; all workers registering the same
name share it. Table options as for create_table() (width is ignored).)doc");

  // ---- Data calls, on tables and on dense tensors (whose keys and
  // lengths are their own); each blocking, and asynchronous (`_async`).
  for (const bool async : {false, true}) {
    const auto doc = [async](const char* blocking) {
      return async ? kAsyncDoc : blocking;
    };
    c.def(
        async ? "push_async" : "push",
        [async](py::object self, py::handle t, py::handle k, py::handle v,
                py::handle l) {
          return Run(std::move(self), async, DataCall::kPush, t, k, v,
                     py::none(), l);
        },
        arg("table"), arg("keys"), arg("values"), arg("lengths") = none,
        doc(kPushDoc));
    c.def(
        async ? "pull_async" : "pull",
        [async](py::object self, py::handle t, py::handle k, py::handle o,
                py::handle l) {
          return Run(std::move(self), async, DataCall::kPull, t, k, py::none(),
                     o, l);
        },
        arg("table"), arg("keys"), arg("out") = none, arg("lengths") = none,
        doc(kPullDoc));
    c.def(
        async ? "push_pull_async" : "push_pull",
        [async](py::object self, py::handle t, py::handle k, py::handle v,
                py::handle o, py::handle l) {
          return Run(std::move(self), async, DataCall::kPushPull, t, k, v, o,
                     l);
        },
        arg("table"), arg("keys"), arg("values"), arg("out") = none,
        arg("lengths") = none, doc(kPushPullDoc));
    c.def(
        async ? "pull_rows_async" : "pull_rows",
        [async](py::object self, py::handle t, py::handle ids, py::handle o) {
          return RunRows(std::move(self), async, DataCall::kPull, t, ids,
                         py::none(), o);
        },
        arg("table"), arg("ids"), arg("out") = none, doc(kPullRowsDoc));
    c.def(
        async ? "push_rows_async" : "push_rows",
        [async](py::object self, py::handle t, py::handle ids, py::handle g) {
          return RunRows(std::move(self), async, DataCall::kPush, t, ids, g,
                         py::none());
        },
        arg("table"), arg("ids"), arg("grads"), doc(kPushRowsDoc));
    c.def(
        async ? "push_tensor_async" : "push_tensor",
        [async](py::object self, py::handle t, py::handle v) {
          return Run(std::move(self), async, DataCall::kPush, t, py::none(), v,
                     py::none(), py::none());
        },
        arg("tensor"), arg("values"), doc(kPushTensorDoc));
    c.def(
        async ? "pull_tensor_async" : "pull_tensor",
        [async](py::object self, py::handle t, py::handle o) {
          return Run(std::move(self), async, DataCall::kPull, t, py::none(),
                     py::none(), o, py::none());
        },
        arg("tensor"), arg("out") = none, doc(kPullTensorDoc));
    c.def(
        async ? "push_pull_tensor_async" : "push_pull_tensor",
        [async](py::object self, py::handle t, py::handle v, py::handle o) {
          return Run(std::move(self), async, DataCall::kPushPull, t, py::none(),
                     v, o, py::none());
        },
        arg("tensor"), arg("values"), arg("out") = none,
        doc(kPushPullTensorDoc));
  }

  BindClientControl(c);
}

}  // namespace ductile::python
