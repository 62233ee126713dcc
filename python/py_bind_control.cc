// ductile.Client's methods beyond data calls.
#include <pybind11/stl.h>

#include <string>
#include <utility>

#include "python/py_bind.h"
#include "python/py_status.h"
#include "python/py_tables.h"

namespace py = pybind11;

namespace ductile::python {
namespace {

TableId TableIdOf(py::handle table) {
  if (py::isinstance<TableInfo>(table)) {
    return table.cast<const TableInfo&>().id;
  }
  if (py::isinstance<PyTensor>(table)) {
    return table.cast<const PyTensor&>().tensor.table;
  }
  ThrowTypeError(
      "table must be a ductile.Table or a ductile.Tensor, not " +
      std::string(py::str(py::type::handle_of(table).attr("__name__"))));
}

}  // namespace

void BindClientControl(py::class_<PyClient>& c) {
  using py::arg;
  using Batch = Client::Batch;

  // ---- Clocks and barriers.
  c.def(
       "clock", [](const PyClient& c) { return c.Get()->Clock(); },
       R"doc(
Ends this worker's step: advances its clock by one and returns the new
value. Pushes made after the c-th call carry timestamp c. Does not wait.)doc")
      .def_property_readonly(
          "current_clock", [](const PyClient& c) { return c.Get()->clock(); },
          "This worker's clock: how many times clock() was called (or the "
          "job's clock it joined or rolled back at).")
      .def(
          "barrier",
          [](const PyClient& c, std::optional<int64_t> timeout_ms) {
            ThrowIfError(Unlocked(c, [&](Client& client) {
              return client.Barrier(timeout_ms.value_or(-1));
            }));
          },
          arg("timeout_ms") = py::none(), R"doc(
Waits until every live worker has called barrier() as many times, or
`timeout_ms` passes (ductile.DeadlineExceeded); None: the request timeout.)doc");

  // ---- Membership.
  c.def(
       "finish",
       [](const PyClient& c) {
         ThrowIfError(
             Unlocked(c, [](Client& client) { return client.Finish(); }));
       },
       "Tells the coordinator this worker is finished; when every worker has, "
       "the cluster shuts down.")
      .def(
          "leave",
          [](const PyClient& c) {
            ThrowIfError(
                Unlocked(c, [](Client& client) { return client.Leave(); }));
          },
          R"doc(
Takes this worker out of the job at its current clock; its pushes so far are
kept and the job goes on without it. Wait for every asynchronous call first.)doc")
      .def_property_readonly(
          "leave_requested",
          [](const PyClient& c) { return c.Get()->leave_requested(); },
          "True once the coordinator asked this worker to leave (`ductile "
          "drain worker:N`): leave() at the next step.")
      .def_property_readonly(
          "shutting_down",
          [](const PyClient& c) { return c.Get()->shutting_down(); },
          "True once the coordinator said the job is shutting down (every "
          "worker finished, or `ductile shutdown`): every call then raises "
          "ductile.Unavailable at once; finish() and leave() return.")
      .def_property_readonly(
          "worker_id", [](const PyClient& c) { return c.Get()->worker_id(); },
          "The id the coordinator gave this worker (-1 when not a worker).")
      .def_property_readonly(
          "num_workers",
          [](const PyClient& c) { return c.Get()->num_workers(); },
          "Workers registered when this client connected.")
      .def_property_readonly(
          "live_workers",
          [](const PyClient& c) { return c.Get()->live_workers(); },
          "Ids of the workers alive and not finished, ascending.");

  // ---- The data plan.
  c.def(
      "next_batch",
      [](const PyClient& c, int64_t batches_per_epoch, int64_t epochs,
         std::optional<Batch> trained, bool take_next) {
        const Batch* done = trained ? &*trained : nullptr;
        return ValueOrThrow(Unlocked(c, [&](Client& client) {
          return client.NextBatch(batches_per_epoch, epochs, done, take_next);
        }));
      },
      arg("batches_per_epoch"), arg("epochs"), py::kw_only(),
      arg("trained") = py::none(), arg("take_next") = true, R"doc(
The next batch of the job's data plan: every batch of every epoch is trained
once across the workers, however they join, leave or die. Report the batch
trained (its gradient pushed at this clock, before clock()) as `trained`.
Returns a Batch: kind TRAIN (train on `index` of `epoch`), WAIT (ask again
soon) or END. take_next=False stops taking data. Raises ductile.Aborted
after a rollback (see await_recovery()).

    batch = client.next_batch(600, 10)
    while batch.kind != ductile.BatchKind.END:
        if batch.kind == ductile.BatchKind.TRAIN:
            train_on(batch.epoch, batch.index)
            done = batch
        ...
        batch = client.next_batch(600, 10, trained=done))doc");

  // ---- Consistency, statistics and reports.
  c.def(
       "set_consistency",
       [](const PyClient& c, py::handle table, py::handle consistency) {
         const TableId id = TableIdOf(table);
         const Consistency parsed = ParseConsistency(consistency);
         return ValueOrThrow(Unlocked(c, [&](Client& client) {
           return client.SetConsistency(id, parsed);
         }));
       },
       arg("table"), arg("consistency"), R"doc(
Changes a table's consistency model ("async", "ssp:K", "bsp", "bsp(sum)")
while the job runs; returns the clock from which it holds on every server.)doc")
      .def(
          "stats", [](const PyClient& c) { return c.Get()->stats(); },
          "What this client has observed so far (a ductile.Stats).")
      .def(
          "record_samples",
          [](const PyClient& c, uint64_t samples) {
            c.Get()->RecordSamples(samples);
          },
          arg("samples"), "Counts samples toward this step (samples/s).")
      .def(
          "record_loss",
          [](const PyClient& c, double loss) { c.Get()->RecordLoss(loss); },
          arg("loss"), "Reports the loss of this step's batch.")
      .def(
          "set_push_weight",
          [](const PyClient& c, int32_t batches) {
            ThrowIfError(c.Get()->SetPushWeight(batches));
          },
          arg("batches"),
          "How many data-plan batches the gradients pushed from now on "
          "stand for (1 - 65536).")
      .def(
          "set_rate_factor",
          [](const PyClient& c, py::handle table, double factor) {
            const TableId id = TableIdOf(table);
            ThrowIfError(
                c.Get()->SetRateFactor(id, static_cast<float>(factor)));
          },
          arg("table"), arg("factor"), R"doc(
Multiplies the learning rate of `table` (a ductile.Table or Tensor) by
`factor` for the gradients this client pushes to it from now on (1 at the
start), whatever its update rule: a schedule kept by the worker reaches
Adam and AdaGrad on the servers too. Under BSP a clock's factor is the mean
of its pushes'. Raises ductile.InvalidArgument unless finite and in
(0, 1e6].)doc");

  // ---- Fault tolerance.
  c.def(
       "await_recovery",
       [](const PyClient& c, int64_t timeout_ms) {
         return ValueOrThrow(Unlocked(c, [&](Client& client) {
           return client.AwaitRecovery(timeout_ms);
         }));
       },
       arg("timeout_ms") = 30000, R"doc(
Waits up to `timeout_ms` for a rollback announced by the coordinator and
takes it: the clock goes back to the checkpoint's, and the Recovery returned
holds the resume state recorded there. ductile.DeadlineExceeded if none
comes. After a server failure, data calls raise ductile.Aborted until this is
called:

    try:
        step()
    except ductile.Aborted:
        recovery = client.await_recovery()
        position = restore(recovery.resume_state))doc")
      .def(
          "set_resume_state",
          [](const PyClient& c, py::handle state) {
            std::string bytes;
            if (py::isinstance<py::bytes>(state)) {
              bytes = state.cast<std::string>();
            } else if (py::isinstance<py::str>(state)) {
              bytes = state.cast<std::string>();
            } else {
              ThrowTypeError("the resume state must be bytes or str");
            }
            c.Get()->SetResumeState(std::move(bytes));
          },
          arg("state"), R"doc(
Records what this worker needs to resume at its current clock (its data
position, say), before the work of that clock; kept with every checkpoint
taken at this clock and given back by await_recovery().)doc");
}

}  // namespace ductile::python
