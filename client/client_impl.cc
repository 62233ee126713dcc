// ClientImpl: connecting, registration, tables, clocks, barriers, the
// data plan's batches, rollbacks and the job's end. Its data path (pushes
// and pulls) is in client_impl_data.cc.
#include "client/client_impl.h"

#include <algorithm>
#include <utility>

#include "glog/logging.h"
#include "proto/codec.h"
#include "proto/table_config.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;

// A positive id, unique with overwhelming probability.
int64_t NewClientId(Env* env) {
  return static_cast<int64_t>(env->RandomU64() >> 2) + 1;
}

}  // namespace

Status Validate(const ClientOptions& options) {
  DUCTILE_RETURN_IF_ERROR(ValidateConnectionLimits(options.security));
  if (options.connect_timeout_ms < 1 || options.request_timeout_ms < 1 ||
      options.connect_timeout_ms > kMaxTimeoutMs ||
      options.request_timeout_ms > kMaxTimeoutMs) {
    return InvalidArgumentError("timeouts must be in [1, " +
                                std::to_string(kMaxTimeoutMs) + "] ms");
  }
  if (options.heartbeat_interval_ms < 10 ||
      options.heartbeat_interval_ms > 60000) {
    return InvalidArgumentError("heartbeat_interval_ms must be in [10, 60000]");
  }
  if (options.io_threads < 0 || options.io_threads > 64) {
    return InvalidArgumentError("io_threads must be in [0, 64], not " +
                                std::to_string(options.io_threads));
  }
  if (options.shm_reply_bytes != 0 &&
      (options.shm_reply_bytes < (uint64_t{1} << 20) ||
       options.shm_reply_bytes > (uint64_t{64} << 30))) {
    return InvalidArgumentError(
        "shm_reply_bytes must be 0 (off) or in [1 MiB, 64 GiB], not " +
        std::to_string(options.shm_reply_bytes));
  }
  if (options.max_message_bytes < 1 ||
      options.max_message_bytes > (uint64_t{1} << 40)) {
    return InvalidArgumentError("max_message_bytes must be in [1, 2^40]");
  }
  return Status::Ok();
}

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  DUCTILE_RETURN_IF_ERROR(Validate(options));
  auto client =
      std::make_unique<ClientImpl>(options, SystemEnv(), /*own_thread=*/true);
  DUCTILE_RETURN_IF_ERROR(client->Init());
  return std::unique_ptr<Client>(std::move(client));
}

Handle Client::PushTensorAsync(const Tensor& t, std::span<const float> values) {
  return PushAsync(t.table, t.keys, values, t.lengths);
}

Handle Client::PullTensorAsync(const Tensor& t, std::span<float> out) {
  return PullAsync(t.table, t.keys, out, t.lengths);
}

ClientImpl::ClientImpl(const ClientOptions& options, Env* env, bool own_thread)
    : options_(options),
      client_id_(NewClientId(env)),
      env_(env),
      own_thread_(own_thread),
      engine_({&options_, env_, client_id_, &worker_id_, &clock_, &tables_,
               &cache_, &recovery_, &stats_,
               [this](int64_t clock, wire::Header* report) {
                 AddDataReports(clock, report);
               }}) {}

ClientImpl::~ClientImpl() {
  stop_.store(true);
  engine_.wakeup().Signal();
  if (thread_.joinable()) {
    thread_.join();
  } else {
    engine_.Shutdown(CancelledError("client closed"));
  }
}

Status ClientImpl::Start() {
  DUCTILE_RETURN_IF_ERROR(engine_.Start());
  if (own_thread_) thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void ClientImpl::Run() {
  while (!stop_.load()) {
    Status s = engine_.transport()->Wait(
        engine_.sockets(), engine_.wakeup().fd(), engine_.NextWakeup());
    if (!s.ok()) {
      LOG(ERROR) << "client I/O thread: " << s;
      break;
    }
    engine_.wakeup().Drain();
    engine_.Step();
  }
  engine_.Shutdown(CancelledError("client closed"));
}

Status ClientImpl::Init() {
  DUCTILE_RETURN_IF_ERROR(Start());
  std::shared_ptr<ControlOperation> reg = StartRegister();
  Status s = reg->Wait();
  if (s.code() == StatusCode::kDeadlineExceeded) {
    return DeadlineExceededError(
        "coordinator at " + options_.coordinator_address +
        " did not admit this client within " +
        std::to_string(options_.connect_timeout_ms) +
        " ms (is it running, and have all its servers registered?)");
  }
  return s;
}

// --------------------------------------------------------- control calls

std::shared_ptr<ControlOperation> ClientImpl::StartControl(
    wire::Header request, int64_t timeout_ms,
    std::function<Status(const wire::Header&)> on_reply, bool resend) {
  auto op = std::make_shared<ControlOperation>();
  op->request = std::move(request);
  op->deadline = env_->Now() + milliseconds(timeout_ms);
  op->on_reply = std::move(on_reply);
  op->resend = resend;
  op->Hold();
  engine_.Submit(op);
  return op;
}

std::shared_ptr<ControlOperation> ClientImpl::StartRegister() {
  wire::Header reg;
  reg.set_type(wire::REGISTER);
  reg.set_role(options_.register_as_worker ? wire::ROLE_WORKER
                                           : wire::ROLE_OBSERVER);
  reg.set_pid(env_->ProcessId());
  if (options_.register_as_worker && options_.requested_worker_id >= 0) {
    reg.set_worker_id(options_.requested_worker_id);
  }
  return StartControl(
      reg, options_.connect_timeout_ms,
      [this](const wire::Header& reply) {
        if (options_.register_as_worker) {
          worker_id_.store(reply.member_id());
          // A worker joining a running job starts at its
          // clock, in its generation.
          clock_.store(reply.clock());
          recovery_.Join(reply.generation());
          // Every server learns where it starts (some
          // installed it at a lower server clock); queued
          // before anything the caller sends.
          if (reply.clock() > 0) SendClock(reply.clock());
        }
        num_workers_.store(reply.num_workers());
        barrier_round_.store(reply.barrier_round());
        for (const auto& table : reply.tables()) {
          tables_.Remember(table);
        }
        return Status::Ok();
      },
      // Sent again while unanswered: a coordinator that
      // died with it never answers.
      /*resend=*/true);
}

std::shared_ptr<ControlOperation> ClientImpl::StartCreateTable(
    const TableOptions& options) {
  Status s = ValidateTableOptions(options);
  if (!s.ok()) {
    auto op = std::make_shared<ControlOperation>();
    op->Hold();
    op->Refuse(s);
    return op;
  }
  wire::Header request;
  request.set_type(wire::CREATE_TABLE);
  *request.mutable_table() = ToWire(options, 0);
  return StartControl(
      request, options_.request_timeout_ms,
      [this](const wire::Header& reply) {
        tables_.Remember(reply.table());
        return Status::Ok();
      },
      // Sent again while unanswered (creating is idempotent): a
      // coordinator that restarted meanwhile never answers.
      /*resend=*/true);
}

Result<TableId> ClientImpl::CreateTable(const TableOptions& options) {
  std::shared_ptr<ControlOperation> op = StartCreateTable(options);
  DUCTILE_RETURN_IF_ERROR(op->Wait());
  return op->reply.table().id();
}

Result<TableInfo> ClientImpl::GetTable(const std::string& name) {
  wire::Header request;
  request.set_type(wire::GET_TABLE);
  request.set_name(name);
  std::shared_ptr<ControlOperation> op = StartControl(
      request, options_.request_timeout_ms, [this](const wire::Header& reply) {
        tables_.Remember(reply.table());
        return Status::Ok();
      });
  DUCTILE_RETURN_IF_ERROR(op->Wait());
  return TableInfo{op->reply.table().id(), FromWire(op->reply.table())};
}

Result<Tensor> ClientImpl::RegisterTensor(const TableOptions& options,
                                          uint64_t num_floats,
                                          uint32_t chunk_floats) {
  if (num_floats == 0) return InvalidArgumentError("tensor has no floats");
  if (chunk_floats == 0) return InvalidArgumentError("chunk_floats is 0");
  TableOptions table = options;
  table.value_width = 0;
  DUCTILE_ASSIGN_OR_RETURN(const TableId id, CreateTable(table));
  Tensor t;
  t.table = id;
  t.num_floats = num_floats;
  t.chunk_floats = chunk_floats;
  for (uint64_t offset = 0, k = 0; offset < num_floats;
       offset += chunk_floats, ++k) {
    t.keys.push_back(k);
    t.lengths.push_back(static_cast<uint32_t>(
        std::min<uint64_t>(chunk_floats, num_floats - offset)));
  }
  return t;
}

Result<int64_t> ClientImpl::SetConsistency(TableId table,
                                           const Consistency& consistency) {
  DUCTILE_RETURN_IF_ERROR(ValidateConsistency(consistency));
  wire::Header request;
  request.set_type(wire::SET_CONSISTENCY);
  request.set_table_id(table);
  *request.mutable_consistency() = ToWire(consistency);
  std::shared_ptr<ControlOperation> op =
      StartControl(request, options_.request_timeout_ms);
  DUCTILE_RETURN_IF_ERROR(op->Wait());
  tables_.SetConsistency(table, ToWire(consistency));
  return op->reply.clock();
}

std::shared_ptr<ControlOperation> ClientImpl::StartBarrier(int64_t timeout_ms) {
  auto refused = [](const Status& s) {
    auto op = std::make_shared<ControlOperation>();
    op->Hold();
    op->Refuse(s);
    return op;
  };
  if (worker_id_.load() < 0) {
    return refused(FailedPreconditionError(
        "Barrier() needs a client registered as a worker"));
  }
  if (Status s = recovery_.RefuseIfPending(); !s.ok()) return refused(s);
  if (timeout_ms < 0) timeout_ms = options_.request_timeout_ms;
  wire::Header request;
  request.set_type(wire::BARRIER);
  request.set_member_id(worker_id_.load());
  request.set_generation(recovery_.generation());
  const int64_t round = barrier_round_.load();
  request.set_barrier_round(round);
  return StartControl(
      request, timeout_ms,
      [this, round](const wire::Header&) {
        // Passed: the next call waits at the next round.
        int64_t expected = round;
        barrier_round_.compare_exchange_strong(expected, round + 1);
        // Reads after a global barrier see every update made before it: no
        // copy from before may answer them.
        cache_.Clear();
        return Status::Ok();
      },
      /*resend=*/true);
}

Status ClientImpl::Barrier(int64_t timeout_ms) {
  if (timeout_ms < 0) timeout_ms = options_.request_timeout_ms;
  Status s = StartBarrier(timeout_ms)->Wait();
  if (s.code() == StatusCode::kDeadlineExceeded) {
    return DeadlineExceededError("barrier not reached by every worker within " +
                                 std::to_string(timeout_ms) + " ms");
  }
  return s;
}

std::shared_ptr<ControlOperation> ClientImpl::StartFinish() {
  wire::Header request;
  request.set_type(wire::FINISH);
  request.set_member_id(worker_id_.load());
  request.set_generation(recovery_.generation());
  return StartControl(request, options_.request_timeout_ms, {},
                      /*resend=*/true);
}

Status ClientImpl::Finish() {
  if (worker_id_.load() < 0) return Status::Ok();
  Status s = recovery_.shut_down() ? Status::Ok() : StartFinish()->Wait();
  // A job shutting down (before or while this was asked) has nothing left
  // to finish.
  return recovery_.shut_down() ? Status::Ok() : s;
}

std::shared_ptr<ControlOperation> ClientImpl::StartLeave() {
  Status refused = worker_id_.load() < 0
                       ? FailedPreconditionError(
                             "Leave() needs a client registered as a worker")
                       : recovery_.RefuseIfPending();
  if (!refused.ok()) {
    auto op = std::make_shared<ControlOperation>();
    op->Hold();
    op->Refuse(refused);
    return op;
  }
  wire::Header request;
  request.set_type(wire::LEAVE);
  request.set_member_id(worker_id_.load());
  request.set_clock(clock_.load());
  request.set_generation(recovery_.generation());
  return StartControl(request, options_.request_timeout_ms, {},
                      /*resend=*/true);
}

Status ClientImpl::Leave() {
  Status s = LeaveJob();
  // A job shutting down (before or while this was asked) has nothing left
  // to leave.
  return recovery_.shut_down() ? Status::Ok() : s;
}

Status ClientImpl::LeaveJob() {
  if (recovery_.shut_down()) return Status::Ok();
  bool planned = false;
  {
    MutexLock lock(&data_mu_);
    planned = batches_.has_shape();
  }
  if (planned && worker_id_.load() >= 0) {
    // The batches trained are reported, those held given back, before the
    // worker is out (a worker gone holds nothing).
    Result<Batch> end = Claim(/*take_next=*/false);
    if (!end.ok()) return end.status();
  }
  Status s = StartLeave()->Wait();
  if (s.ok()) {
    LOG(INFO) << "worker " << worker_id_.load() << ": left the job at clock "
              << clock_.load();
  }
  return s;
}

Result<Client::Batch> ClientImpl::NextBatch(int64_t batches_per_epoch,
                                            int64_t epochs,
                                            const Batch* trained,
                                            bool take_next) {
  if (worker_id_.load() < 0) {
    return FailedPreconditionError(
        "NextBatch() needs a client registered as a worker");
  }
  if (batches_per_epoch < 1 || epochs < 1) {
    return InvalidArgumentError(
        "NextBatch() needs at least one batch per epoch and one epoch");
  }
  DUCTILE_RETURN_IF_ERROR(recovery_.RefuseIfPending());
  {
    MutexLock lock(&data_mu_);
    batches_.SetShape(batches_per_epoch, epochs);
    if (trained != nullptr && trained->kind == Batch::kTrain) {
      batches_.Trained(*trained, clock_.load());
    }
  }
  return Claim(take_next);
}

Result<Client::Batch> ClientImpl::Claim(bool take_next) {
  // A batch held is handed out at once, even while a claim is under way
  // (its answer leaves out the batches in hand); the queue is topped up by
  // a claim in the background when it runs low. Only an empty queue waits.
  // A claim asks to hold the batches in hand and ahead() more.
  bool asked = false;
  while (true) {
    std::shared_ptr<ControlOperation> wait;
    {
      MutexLock lock(&data_mu_);
      if (claim_ != nullptr && claim_->done()) {
        DUCTILE_RETURN_IF_ERROR(TakeClaim());
      }
      if (take_next) {
        if (std::optional<Batch> b = batches_.Pop()) {
          const int ahead = batches_.ahead();
          if (claim_ == nullptr &&
              batches_.queued() < static_cast<size_t>(ahead / 2)) {
            StartClaim(ahead + static_cast<int>(batches_.in_hand()));
          }
          return *b;
        }
      }
      if (claim_ == nullptr) {
        Batch idle;
        idle.kind = take_next ? batches_.idle_kind() : Batch::kEnd;
        idle.epochs_done = batches_.epochs_done();
        if (!take_next) {
          if (asked) return idle;
          StartClaim(0);  // reports, and gives back what is held
          asked = true;
        } else if (asked) {
          return idle;
        } else {
          StartClaim(batches_.ahead() + static_cast<int>(batches_.in_hand()));
          asked = true;
        }
      }
      wait = claim_;
    }
    wait->Wait().IgnoreError();  // its status is taken above
  }
}

void ClientImpl::AddDataReports(int64_t clock, wire::Header* report) {
  MutexLock lock(&data_mu_);
  for (const wire::DataBatch& b : batches_.UnackedBefore(clock)) {
    *report->add_data_done() = b;
  }
}

void ClientImpl::StartClaim(int want) {
  wire::Header request;
  request.set_type(wire::DATA_CLAIM);
  request.set_member_id(worker_id_.load());
  request.set_generation(recovery_.generation());
  claim_reports_ = batches_.FillClaim(want, request.mutable_data_claim());
  claim_generation_ = recovery_.generation();
  claim_ = StartControl(request, options_.request_timeout_ms, {},
                        /*resend=*/true);
}

Status ClientImpl::TakeClaim() {
  std::shared_ptr<ControlOperation> op = std::move(claim_);
  claim_.reset();
  DUCTILE_RETURN_IF_ERROR(op->Wait());
  if (claim_generation_ != recovery_.generation()) {
    return AbortedError("the job rolled back while a data claim was answered");
  }
  batches_.OnGrant(op->reply.data_grant(), claim_reports_);
  return Status::Ok();
}

// ---------------------------------------------------------------- clocks

int64_t ClientImpl::Clock() {
  const int64_t clock = clock_.fetch_add(1) + 1;
  stats_.RecordStep(env_->Now());
  if (worker_id_.load() < 0) return clock;
  bool pending = false;
  const std::optional<int64_t> report = recovery_.OnClock(clock, &pending);
  if (pending) return clock;  // nothing to tell the servers
  if (report) ReportResumeState(*report);
  SendClock(clock);
  return clock;
}

Status ClientImpl::SetRateFactor(TableId table, float factor) {
  if (!(factor > 0.0f && factor <= kMaxRateFactor)) {  // NaN too
    return InvalidArgumentError(
        "a learning-rate factor must be finite and in (0, " +
        std::to_string(kMaxRateFactor) + "], not " + std::to_string(factor));
  }
  MutexLock lock(&rate_mu_);
  if (factor == 1.0f) {
    rate_factors_.erase(table);
  } else {
    rate_factors_[table] = factor;
  }
  any_rate_factor_.store(!rate_factors_.empty());
  return Status::Ok();
}

float ClientImpl::RateFactor(TableId table) const {
  if (!any_rate_factor_.load()) return 1.0f;
  MutexLock lock(&rate_mu_);
  auto it = rate_factors_.find(table);
  return it == rate_factors_.end() ? 1.0f : it->second;
}

Status ClientImpl::SetPushWeight(int32_t batches) {
  if (batches < 1 || batches > kMaxPushWeight) {
    return InvalidArgumentError("a push weight must be 1 - " +
                                std::to_string(kMaxPushWeight) +
                                " batches, not " + std::to_string(batches));
  }
  push_weight_.store(batches);
  MutexLock lock(&data_mu_);
  batches_.SetStepHint(batches);  // claims hold enough for such steps
  return Status::Ok();
}

void ClientImpl::SendClock(int64_t clock) {
  auto op = std::make_shared<ClockOperation>();
  op->clock = clock;
  op->generation = recovery_.generation();
  op->Hold();
  engine_.Submit(op);
}

Result<Client::Recovery> ClientImpl::AwaitRecovery(int64_t timeout_ms) {
  DUCTILE_ASSIGN_OR_RETURN(Recovery r, recovery_.Await(timeout_ms));
  clock_.store(r.clock);
  cache_.Clear();
  {
    // The data plan went back with the model: nothing held or trained of
    // the abandoned timeline is this worker's.
    MutexLock lock(&data_mu_);
    batches_.Clear();
    claim_.reset();
  }
  LOG(INFO) << "worker " << worker_id_.load() << ": resuming at clock "
            << r.clock << " (generation " << r.generation << ")";
  return r;
}

void ClientImpl::SetResumeState(std::string state) {
  const std::optional<int64_t> report =
      recovery_.Record(clock_.load(), std::move(state));
  if (report) ReportResumeState(*report);
}

void ClientImpl::ReportResumeState(int64_t clock) {
  auto op = std::make_shared<NoticeOperation>();
  op->message.set_type(wire::CHECKPOINT_DONE);
  op->message.set_role(wire::ROLE_WORKER);
  op->message.set_member_id(worker_id_.load());
  op->message.set_clock(clock);
  op->message.set_generation(recovery_.generation());
  op->message.set_resume_state(recovery_.StateAt(clock));
  AddDataReports(clock, &op->message);
  op->Hold();
  engine_.Submit(op);
}

}  // namespace ductile
