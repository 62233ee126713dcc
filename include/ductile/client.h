// The worker's side of ductile: push gradients, pull parameters.
//
// A Client connects to the coordinator, learns the routing table (which
// server owns which key), and talks to every server directly. It is
// thread-safe: any number of threads may call it at once. Its replies are
// handled on one background I/O thread that the Client owns; no user code
// runs there.
//
// Example (a worker's training loop):
//
//   ductile::ClientOptions options;
//   options.coordinator_address = "tcp://127.0.0.1:7000";
//   auto client = ductile::Client::Connect(options);
//   if (!client.ok()) { std::cerr << client.status() << "\n"; return 1; }
//   ductile::TableOptions table;
//   table.name = "weights"; table.value_width = 4;
//   table.rule = ductile::UpdateRule::kSgd; table.learning_rate = 0.1f;
//   auto id = (*client)->CreateTable(table);
//   std::vector<ductile::Key> keys = {1, 7, 42};   // strictly increasing
//   std::vector<float> grad(keys.size() * 4, 0.5f), weights(keys.size() * 4);
//   DUCTILE_RETURN_IF_ERROR((*client)->Push(*id, keys, grad));
//   DUCTILE_RETURN_IF_ERROR((*client)->Pull(*id, keys, weights));
//   (*client)->Clock();
//
// Keys in one call must be strictly increasing (PullRows and PushRows take a
// batch's ids in any order, with repeats). Values are laid out key after
// key: key i's vector starts at the sum of the widths of keys 0..i-1.
// Asynchronous calls borrow the caller's spans: they must stay valid, and
// `out` untouched, until the Handle is done.
#ifndef DUCTILE_CLIENT_H_
#define DUCTILE_CLIENT_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ductile/limits.h"
#include "ductile/security.h"
#include "ductile/status.h"
#include "ductile/table.h"

namespace ductile {

namespace internal {
class Operation;
}  // namespace internal

// Completion of an asynchronous call. Copyable; all copies see the same
// operation. Wait() may be called from any thread, any number of times.
class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<internal::Operation> op);

  // Blocks until the operation finishes; returns its status.
  Status Wait() const;
  // True once the operation finished (Wait() would not block).
  bool done() const;
  // True if the call was refused before anything was sent (bad arguments,
  // an unknown table, a rollback under way): it is done, and Wait() gives
  // the reason. A server's refusal, however quick, is not one.
  bool refused() const;

 private:
  std::shared_ptr<internal::Operation> op_;
};

struct ClientOptions {
  // Coordinator's address, "tcp://host:port" or "ipc:///path".
  std::string coordinator_address = "tcp://127.0.0.1:7000";
  // How long Connect() waits for the coordinator and a complete routing
  // table (all servers registered). 1 ms to 30 days.
  int64_t connect_timeout_ms = kDefaultTimeoutMs;
  // How long one call waits for all of its replies before it fails with
  // kDeadlineExceeded naming the servers that did not answer. 1 ms to 30
  // days.
  int64_t request_timeout_ms = kDefaultTimeoutMs;
  // Talk to servers on the same host over ipc:// (faster than tcp loopback).
  bool prefer_ipc = true;
  // Threads that move its bytes to and from the servers (ZeroMQ's I/O
  // threads), 1 - 64; each server's connection is served by one, so more
  // may help a client of several servers with large values on a machine
  // with cores to spare. 0: with keys (CURVE, whose encryption runs on
  // these threads) a quarter of the machine's cores, 1 to 4; in plain mode
  // 1 (docs/benchmarks.md).
  int io_threads = 0;
  // Shared memory for values exchanged with servers on this host (reached
  // over ipc://), in bytes: such a server writes a pull's values into a
  // region of it and replies with the header alone, and reads a push's
  // values from one, instead of their going through the socket
  // (docs/wire.md, "Values in shared memory"; ServerOptions::shm_values).
  // Pages are taken as first written. Values of less than 32 KB per
  // server, or that find no free region, go in frames as usual. 0: off;
  // else 1 MiB - 64 GiB.
  uint64_t shm_reply_bytes = uint64_t{256} << 20;
  // Largest request this client builds, in bytes; larger calls are rejected
  // with kInvalidArgument before anything is sent. Servers enforce their own
  // limit too.
  uint64_t max_message_bytes = 1ull << 30;
  // Keep a local copy of pulled values of SSP tables and answer a pull from
  // it when it is fresh enough for the bound (see ClientStats cache_hits).
  // The worker's own pushes are applied to the copy (add, assign and SGD
  // tables) or drop it (other rules), so it reads its own writes.
  bool enable_cache = false;
  // A worker's heartbeat interval; keep it well under the coordinator's
  // heartbeat_timeout_ms. 10 ms - 60 s.
  int64_t heartbeat_interval_ms = 1000;
  // When true the client registers as a worker (gets a worker id, counts in
  // barriers and cluster shutdown). Tools such as `ductile status` use false.
  bool register_as_worker = true;
  // Ask the coordinator for this worker id (-1: let it choose). Refused
  // (kAlreadyExists) if a live worker holds it.
  int32_t requested_worker_id = -1;
  // The cluster's keys (ductile/security.h), needed to reach a cluster
  // that uses them. SetConsistency needs the admin key there.
  Security security;
};

// A dense tensor stored as fixed-size chunks (one key each) spread over the
// servers. Made by Client::RegisterTensor.
struct Tensor {
  TableId table = 0;
  uint64_t num_floats = 0;
  uint32_t chunk_floats = 0;
  std::vector<Key> keys;          // 0 .. number of chunks - 1
  std::vector<uint32_t> lengths;  // floats per chunk; the last may be short
};

// What this client has observed of the consistency models. Staleness of a
// pull = the puller's clock minus the server clock of the data returned
// (every update older than that clock is in it).
// Buckets of a staleness histogram: [i] counts reads of staleness i, and
// the last, [kStalenessBuckets - 1], those of that staleness or more.
inline constexpr size_t kStalenessBuckets = 64;

struct ClientStats {
  uint64_t pulls = 0;  // pull replies (one per server asked)
  // Time pull calls waited at servers for the bound: per call, its longest
  // wait (a call's parts wait side by side); summed over calls.
  uint64_t blocked_us = 0;
  // staleness[i]: pulls with staleness i (the last of kStalenessBuckets:
  // that or more).
  std::vector<uint64_t> staleness;
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  // Steps: from the first Clock() on, the wall time between consecutive
  // Clock() calls, and of it the time callers waited for pushes and for
  // pulls (in Wait() or a blocking call; push-pulls count as pulls; a pull
  // served by the cache waits for nothing). The rest of a step is its
  // compute (what the training loop did meanwhile). Samples: what the
  // loop reported with RecordSamples().
  uint64_t steps = 0;
  uint64_t step_us = 0;
  uint64_t push_wait_us = 0;
  uint64_t pull_wait_us = 0;
  uint64_t samples = 0;
  // The same per step, smoothed over about the last ten steps (0 before
  // the first step).
  double recent_step_us = 0;
  double recent_push_wait_us = 0;
  double recent_pull_wait_us = 0;
  // Samples per second of wall time over about the last second (each
  // step weighted by its length, with a time constant of 1 s), so that a
  // worker that stalls between fast steps reads as slow.
  double recent_samples_per_s = 0;
  // The training loss the loop reported with RecordLoss(), smoothed over
  // about the last ten reports, and how many it reported (0: none, and
  // recent_loss means nothing).
  double recent_loss = 0;
  uint64_t losses = 0;
  int64_t max_staleness() const {
    for (size_t i = staleness.size(); i > 0; --i) {
      if (staleness[i - 1] > 0) return static_cast<int64_t>(i - 1);
    }
    return -1;
  }
};

struct TableInfo {
  TableId id = 0;
  TableOptions options;
};

// Checks every field of `options` against the range its comment gives;
// an InvalidArgument error names the field. Client::Connect calls it
// first.
[[nodiscard]] Status Validate(const ClientOptions& options);

class Client {
 public:
  // Validate(options), then connects, registers and waits for the routing
  // table.
  static Result<std::unique_ptr<Client>> Connect(const ClientOptions& options);

  virtual ~Client() = default;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Creates a table on every server (or returns the existing one's id when
  // a table of this name exists with equal options).
  virtual Result<TableId> CreateTable(const TableOptions& options) = 0;
  // Looks a table up by name (kNotFound if none).
  virtual Result<TableInfo> GetTable(const std::string& name) = 0;

  // Applies `values` to `keys` with the table's update rule. `lengths`
  // (floats per key) is required for variable-width tables and optional
  // (must equal the width) for fixed-width ones.
  virtual Handle PushAsync(TableId table, std::span<const Key> keys,
                           std::span<const float> values,
                           std::span<const uint32_t> lengths = {}) = 0;
  // Reads the current values of `keys` into `out`. A key never written reads
  // as the table's initializer (for variable-width tables, `lengths` gives
  // the width a new key is created with).
  virtual Handle PullAsync(TableId table, std::span<const Key> keys,
                           std::span<float> out,
                           std::span<const uint32_t> lengths = {}) = 0;
  // Push, then pull the updated values, in one round trip per server.
  virtual Handle PushPullAsync(TableId table, std::span<const Key> keys,
                               std::span<const float> values,
                               std::span<float> out,
                               std::span<const uint32_t> lengths = {}) = 0;

  Status Push(TableId table, std::span<const Key> keys,
              std::span<const float> values,
              std::span<const uint32_t> lengths = {}) {
    return PushAsync(table, keys, values, lengths).Wait();
  }
  Status Pull(TableId table, std::span<const Key> keys, std::span<float> out,
              std::span<const uint32_t> lengths = {}) {
    return PullAsync(table, keys, out, lengths).Wait();
  }
  Status PushPull(TableId table, std::span<const Key> keys,
                  std::span<const float> values, std::span<float> out,
                  std::span<const uint32_t> lengths = {}) {
    return PushPullAsync(table, keys, values, out, lengths).Wait();
  }

  // ---- Rows by id (embedding tables): a batch's raw ids, in any order and
  // with repeats, on a fixed-width table; row i of `out` / `grads` is the
  // table's width floats of ids[i].
  //
  //   std::vector<ductile::Key> ids = {42, 7, 42, 9};  // as the batch has them
  //   std::vector<float> rows(ids.size() * width);
  //   DUCTILE_RETURN_IF_ERROR(client->PullRows(table, ids, rows));
  //   ...                                       // d(loss)/d(rows) into grads
  //   DUCTILE_RETURN_IF_ERROR(client->PushRows(table, ids, grads));
  //
  // The client sorts the ids and drops repeats, sends one request per
  // server with the unique ids, and copies each pulled row to every place
  // its id holds in `out` before the call is done; a push sends, per unique
  // id, the sum of its rows of `grads` (a repeated id is updated once, by
  // the sum). Ids already strictly increasing go out as they are (no copy,
  // exactly Pull / Push). Refused with kInvalidArgument before anything is
  // sent: a variable-width table, or `out` / `grads` not ids.size() times
  // the width; an unknown table is kNotFound, as for Pull. Apart from
  // these, each call behaves as Pull / Push on the unique ids (consistency,
  // cache, errors).
  virtual Handle PullRowsAsync(TableId table, std::span<const Key> ids,
                               std::span<float> out) = 0;
  virtual Handle PushRowsAsync(TableId table, std::span<const Key> ids,
                               std::span<const float> grads) = 0;
  Status PullRows(TableId table, std::span<const Key> ids,
                  std::span<float> out) {
    return PullRowsAsync(table, ids, out).Wait();
  }
  Status PushRows(TableId table, std::span<const Key> ids,
                  std::span<const float> grads) {
    return PushRowsAsync(table, ids, grads).Wait();
  }

  // Dense tensors: a variable-width table named `options.name` holding
  // `num_floats` floats in chunks of `chunk_floats` (one key per chunk).
  // options.value_width is ignored. All workers registering the same name
  // share the tensor.
  virtual Result<Tensor> RegisterTensor(const TableOptions& options,
                                        uint64_t num_floats,
                                        uint32_t chunk_floats = 32768) = 0;
  Handle PushTensorAsync(const Tensor& t, std::span<const float> values);
  Handle PullTensorAsync(const Tensor& t, std::span<float> out);
  Status PushTensor(const Tensor& t, std::span<const float> values) {
    return PushTensorAsync(t, values).Wait();
  }
  Status PullTensor(const Tensor& t, std::span<float> out) {
    return PullTensorAsync(t, out).Wait();
  }

  // Advances this worker's clock by one and returns the new value. Pushes
  // made after the c-th call carry timestamp c. Tells every server (after
  // this worker's earlier pushes), without waiting.
  virtual int64_t Clock() = 0;
  virtual int64_t clock() const = 0;

  // Blocks until every live worker has called Barrier() the same number of
  // times, or `timeout_ms` passes (kDeadlineExceeded); -1 = the request
  // timeout.
  virtual Status Barrier(int64_t timeout_ms = -1) = 0;

  // Tells the coordinator this worker is finished. When every worker has
  // finished, the coordinator shuts the cluster down.
  virtual Status Finish() = 0;

  // ---- Elasticity (docs/elasticity.md).
  //
  // Workers may join a running job at any time: Connect() then returns at
  // the job's current clock (clock() tells it), with every table known,
  // and the first push counts at once. Leave() takes this worker out of
  // the job at its current clock: its pushes so far are kept (call it
  // once every asynchronous call has been waited for), and once it
  // returns no server, barrier or checkpoint waits for it. The job goes on
  // without it. A worker's calls after Leave() are not part of the job.
  virtual Status Leave() = 0;
  // True once the coordinator has asked this worker to leave (`ductile
  // drain worker:N`): a training loop should Leave() at its next step.
  virtual bool leave_requested() const = 0;
  // True once the coordinator has said the job is shutting down: every
  // worker finished, or `ductile shutdown` asked it to end. Every call
  // then fails at once with kUnavailable ("cluster is shutting down"),
  // calls in flight included (the servers stop too: a push in flight may
  // or may not have been applied); Finish() and Leave() return Ok. A
  // training loop should stop.
  virtual bool shutting_down() const = 0;

  // The job's shared data plan. An epoch is `batches_per_epoch` batches
  // (what a batch holds is the caller's: say, batch b of epoch e is the
  // b-th slice of e's shuffle); the coordinator hands them out one at a
  // time, so that every batch of an epoch is trained on exactly once
  // however workers join, leave or die: what a leaving or dead worker held
  // goes to the next worker that asks, within the epoch, and a joiner
  // takes its share of what remains. The plan rolls back with the model.
  struct Batch {
    enum Kind {
      kTrain,  // train on `index` of `epoch`
      kWait,   // none free now; others hold the last ones: ask again soon
      kEnd,    // every batch of every epoch is done
    };
    Kind kind = kEnd;
    int64_t epoch = -1;
    int64_t index = -1;
    // Epochs done in full so far, job-wide: 0, ..., epochs_done - 1.
    int64_t epochs_done = 0;
    // How many batches the job asks each worker to train in one step, as
    // of the plan's latest answer (PolicyActions::SetBatchesPerStep; 1
    // unless a policy changed it): a loop that follows it takes that many
    // (calling NextBatch with nullptr for those beyond the first), trains
    // them as one batch, says so with SetPushWeight, and reports each.
    int32_t batches_per_step = 1;
  };
  // Reports `trained` (a batch NextBatch gave this worker, its gradient
  // pushed at the current clock: call this before Clock(); null: none) and
  // returns the next, unless `take_next` is false (the worker
  // stops taking data: kEnd comes back, and what it holds is freed). The
  // client holds a few batches ahead, taken from the coordinator in the
  // background, so a call rarely waits; reports travel with the next claim
  // or with this worker's report at the next checkpoint, whichever is
  // first. Every worker of a job must give the same `batches_per_epoch`
  // and `epochs` (kInvalidArgument otherwise). kAborted after a rollback
  // (see AwaitRecovery): the batches held and trained since the
  // checkpoint are no longer this worker's. Leave() reports and gives back
  // first.
  virtual Result<Batch> NextBatch(int64_t batches_per_epoch, int64_t epochs,
                                  const Batch* trained, bool take_next) = 0;

  // Changes a table's consistency model while the job runs. Every server
  // switches at the same clock boundary B, returned: requests of timestamp
  // >= B follow the new model, earlier ones the old. On a cluster with
  // keys, only a client holding the admin key may (else
  // kPermissionDenied).
  virtual Result<int64_t> SetConsistency(TableId table,
                                         const Consistency& consistency) = 0;

  // Consistency metrics observed so far (thread-safe).
  virtual ClientStats stats() const = 0;
  // Counts `samples` toward this step (the one the next Clock() ends), for
  // the samples per second in stats(), `ductile status` and /metrics.
  virtual void RecordSamples(uint64_t samples) = 0;
  // Reports the training loss of this step's batch, for the smoothed loss
  // in stats() and the status (the `staleness` policy reads the job's).
  // A loss that is not a finite number is ignored.
  virtual void RecordLoss(double loss) = 0;
  // How many worker batches the gradients this client pushes from now on
  // stand for (1 at the start): a worker that trains several of the data
  // plan's batches in one step (Batch::batches_per_step) says so, and under
  // BSP (mean) the servers' batch scaling (TableOptions::batch_scaling)
  // counts the batches rather than the pushes, and a clock's mean weighs
  // each push by its batches (BspCombine::kMean). Takes effect for pushes
  // submitted after it returns. kInvalidArgument outside 1 - 65536.
  virtual Status SetPushWeight(int32_t batches) = 0;
  // Multiplies `table`'s learning rate by `factor` for the gradients this
  // client pushes to it from now on (1 at the start), on top of the
  // table's own schedule and batch scaling: a learning-rate schedule kept
  // by the worker (torch's LR schedulers) reaches every update rule, Adam
  // and AdaGrad included, without changing the table. Each push carries
  // its factor; under BSP a clock's factor is its pushes' mean, weighted
  // by their batches, so workers that agree give exactly theirs. Assign
  // tables ignore it. Takes effect for pushes submitted after it returns.
  // kInvalidArgument unless finite and in (0, kMaxRateFactor].
  virtual Status SetRateFactor(TableId table, float factor) = 0;

  // ---- Fault tolerance (docs/fault_tolerance.md).
  //
  // When a server fails, the job rolls back to its latest checkpoint at
  // clock C. This worker's calls in flight then fail with kAborted, and so
  // does every data call and Barrier() until the caller takes the
  // recovery with AwaitRecovery(), which sets clock() to C and returns the
  // resume state this worker recorded at C (see SetResumeState). A typical
  // loop:
  //
  //   Status s = Step(client);
  //   if (!s.ok()) {
  //     Result<Recovery> r = client.AwaitRecovery(30000);
  //     if (!r.ok()) return s;           // a real error, not a rollback
  //     cursor = RestoreFrom(r->resume_state);
  //     continue;                        // at clock r->clock
  //   }
  struct Recovery {
    int64_t clock = 0;        // resume at this clock
    uint64_t generation = 0;  // the job's generation from now on
    // What SetResumeState recorded at `clock` ("" if nothing was, e.g. at
    // clock 0 when there was no checkpoint yet).
    std::string resume_state;
  };
  // Waits up to `timeout_ms` for a rollback announced by the coordinator
  // and takes it. kDeadlineExceeded if none comes.
  virtual Result<Recovery> AwaitRecovery(int64_t timeout_ms) = 0;
  // Records what this worker needs to resume at the current clock (its
  // data position, say), before the work of that clock. The coordinator
  // keeps it with every checkpoint taken at this clock.
  virtual void SetResumeState(std::string state) = 0;
  // The workers that are alive and not finished, ascending (as last
  // published by the coordinator; this worker included).
  virtual std::vector<int32_t> live_workers() const = 0;

  // Worker id assigned by the coordinator (-1 when not registered as one).
  virtual int32_t worker_id() const = 0;
  // Number of workers registered when this client connected.
  virtual int32_t num_workers() const = 0;

 protected:
  Client() = default;
};

}  // namespace ductile

#endif  // DUCTILE_CLIENT_H_
