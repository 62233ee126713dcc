// The client library (implements ductile::Client): the caller's side.
//
// Caller threads validate a call (shapes, finiteness, known widths), let
// the cache answer what it can, and hand an operation to the
// RequestEngine; the I/O thread steps the engine. The client's parts:
//   TableRegistry   tables, the cache gate, known widths;
//   ParamCache      the worker cache of SSP tables;
//   RecoveryState   rollbacks and resume states;
//   StatsRecorder   what the client observed;
//   RequestEngine   sockets and requests in flight (routing view inside).
//
// A client made without its own thread (own_thread false) has none: its
// owner steps it (Step(), NextWakeup()), as the simulation does; the
// blocking calls then must not be used, the Start*() ones instead.
#ifndef DUCTILE_CLIENT_CLIENT_IMPL_H_
#define DUCTILE_CLIENT_CLIENT_IMPL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "client/batch_queue.h"
#include "client/operation.h"
#include "client/param_cache.h"
#include "client/recovery_state.h"
#include "client/request_engine.h"
#include "client/stats_recorder.h"
#include "client/table_registry.h"
#include "ductile/client.h"
#include "env/env.h"
#include "util/mutex.h"

namespace ductile {

class ClientImpl final : public Client {
 public:
  // `env` must outlive the client. Without `own_thread` the owner steps
  // the client.
  ClientImpl(const ClientOptions& options, Env* env, bool own_thread);
  ~ClientImpl() override;

  // Connects to the coordinator (and starts the I/O thread if it has one).
  Status Start();
  // Start(), then registers and waits for the routing table.
  Status Init();

  Result<TableId> CreateTable(const TableOptions& options) override;
  Result<TableInfo> GetTable(const std::string& name) override;
  Handle PushAsync(TableId table, std::span<const Key> keys,
                   std::span<const float> values,
                   std::span<const uint32_t> lengths) override;
  Handle PullAsync(TableId table, std::span<const Key> keys,
                   std::span<float> out,
                   std::span<const uint32_t> lengths) override;
  Handle PushPullAsync(TableId table, std::span<const Key> keys,
                       std::span<const float> values, std::span<float> out,
                       std::span<const uint32_t> lengths) override;
  Handle PullRowsAsync(TableId table, std::span<const Key> ids,
                       std::span<float> out) override;
  Handle PushRowsAsync(TableId table, std::span<const Key> ids,
                       std::span<const float> grads) override;
  Result<Tensor> RegisterTensor(const TableOptions& options,
                                uint64_t num_floats,
                                uint32_t chunk_floats) override;
  int64_t Clock() override;
  Result<int64_t> SetConsistency(TableId table,
                                 const Consistency& consistency) override;
  ClientStats stats() const override { return stats_.Snapshot(); }
  void RecordLoss(double loss) override { stats_.RecordLoss(loss); }
  Status SetPushWeight(int32_t batches) override;
  Status SetRateFactor(TableId table, float factor) override;
  void RecordSamples(uint64_t samples) override {
    stats_.RecordSamples(samples);
  }
  int64_t clock() const override { return clock_.load(); }
  // The job's generation this client is in (its registration's, then its
  // last rollback's).
  uint64_t generation() const { return recovery_.generation(); }
  Status Barrier(int64_t timeout_ms) override;
  Status Finish() override;
  Status Leave() override;
  bool leave_requested() const override { return recovery_.leave_requested(); }
  bool shutting_down() const override { return recovery_.shut_down(); }
  Result<Batch> NextBatch(int64_t batches_per_epoch, int64_t epochs,
                          const Batch* trained, bool take_next) override;
  Result<Recovery> AwaitRecovery(int64_t timeout_ms) override;
  void SetResumeState(std::string state) override;
  std::vector<int32_t> live_workers() const override {
    return recovery_.live_workers();
  }
  int32_t worker_id() const override { return worker_id_.load(); }
  int32_t num_workers() const override { return num_workers_.load(); }

  // ---- Non-blocking control calls: each returns at once, done when its
  // operation is (its reply in `reply`).
  std::shared_ptr<ControlOperation> StartRegister();
  std::shared_ptr<ControlOperation> StartCreateTable(
      const TableOptions& options);
  std::shared_ptr<ControlOperation> StartBarrier(int64_t timeout_ms);
  std::shared_ptr<ControlOperation> StartFinish();
  std::shared_ptr<ControlOperation> StartLeave();

  // ---- A client without its own I/O thread.
  void Step() { engine_.Step(); }
  RequestEngine::TimePoint NextWakeup() const { return engine_.NextWakeup(); }
  const std::vector<Socket*>& sockets() const { return engine_.sockets(); }

 private:
  // Leave() but for a shutdown that comes while it is under way.
  Status LeaveJob();
  // Checks and sends `op`, its type, table, keys, values, out and lengths
  // set.
  Handle SubmitData(std::shared_ptr<DataOperation> op);
  // PullRowsAsync (`grads` empty) and PushRowsAsync (`out` empty).
  Handle SubmitRows(wire::MessageType type, TableId table,
                    std::span<const Key> ids, std::span<const float> grads,
                    std::span<float> out);
  // What can be refused before any part is sent (widths that differ from
  // the servers'; values NaN or infinite), so a request split over several
  // servers is never half applied, nor a refused one mirrored in the
  // cache. `cached`: the cache will mirror this push.
  Status CheckPushValues(DataOperation& op, const TableRegistry::View& table,
                         bool cached) const;
  // The cache's part of a call to an SSP table: records a push, answers a
  // pull that it can (true: op done).
  bool UseCache(DataOperation& op, const TableRegistry::View& table);
  // Hands a control request to the I/O thread; `on_reply` does its
  // bookkeeping there; `resend`: sent again while unanswered (Barrier,
  // Finish).
  std::shared_ptr<ControlOperation> StartControl(
      wire::Header request, int64_t timeout_ms,
      std::function<Status(const wire::Header&)> on_reply = {},
      bool resend = false);
  // Sends this worker's resume state at `clock` to the coordinator, with
  // the data-plan reports of batches pushed before it not acknowledged yet.
  void ReportResumeState(int64_t clock);
  // Adds to a checkpoint report at `clock` the data-plan reports of
  // batches pushed before it that no claim has had answered.
  void AddDataReports(int64_t clock, wire::Header* report) EXCLUDES(data_mu_);
  // The data plan: a claim (DATA_CLAIM) to hold `want` batches, in flight
  // as claim_; its answer taken into batches_ (its error, if any).
  void StartClaim(int want) REQUIRES(data_mu_);
  Status TakeClaim() REQUIRES(data_mu_);
  // NextBatch's body on the shape given last.
  Result<Batch> Claim(bool take_next);
  // Tells every server this worker is at `clock` (CLOCK).
  void SendClock(int64_t clock);
  void Run();

  // Constant after construction.
  const ClientOptions options_;
  const int64_t client_id_;
  Env* const env_;
  const bool own_thread_;

  // Set once registered.
  std::atomic<int32_t> worker_id_{-1};
  std::atomic<int32_t> num_workers_{0};
  std::atomic<int64_t> clock_{0};
  std::atomic<int32_t> push_weight_{1};  // SetPushWeight
  // SetRateFactor's factors other than 1, per table.
  float RateFactor(TableId table) const EXCLUDES(rate_mu_);
  mutable Mutex rate_mu_;
  std::unordered_map<TableId, float> rate_factors_ GUARDED_BY(rate_mu_);
  std::atomic<bool> any_rate_factor_{false};
  // The next barrier round this worker waits at (from its registration).
  std::atomic<int64_t> barrier_round_{0};
  std::atomic<bool> stop_{false};

  TableRegistry tables_;
  ParamCache cache_;
  RecoveryState recovery_;
  // Shared with the data operations: a thread still waiting on one when
  // the client is destroyed records its wait there.
  const std::shared_ptr<StatsRecorder> stats_owner_ =
      std::make_shared<StatsRecorder>();
  StatsRecorder& stats_ = *stats_owner_;
  RequestEngine engine_;
  std::thread thread_;

  // The shared data plan (NextBatch): the batches held, and the claim in
  // flight with the reports it carries and the generation it left in.
  Mutex data_mu_;
  BatchQueue batches_ GUARDED_BY(data_mu_);
  std::shared_ptr<ControlOperation> claim_ GUARDED_BY(data_mu_);
  size_t claim_reports_ GUARDED_BY(data_mu_) = 0;
  uint64_t claim_generation_ GUARDED_BY(data_mu_) = 0;
};

}  // namespace ductile

#endif  // DUCTILE_CLIENT_CLIENT_IMPL_H_
