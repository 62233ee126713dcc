#include "server/checkpoint_writer.h"

#include <chrono>

#include "glog/logging.h"

namespace ductile {

CheckpointWriter::CheckpointWriter(Env* env,
                                   std::unique_ptr<CheckpointStore> store,
                                   std::function<void()> wakeup)
    : env_(env),
      store_(std::move(store)),
      wakeup_(std::move(wakeup)),
      thread_(env->NewBackgroundThread("ckpt-writer",
                                       BackgroundThread::Priority::kLower)) {}

CheckpointWriter::~CheckpointWriter() {
  thread_.reset();  // the job in flight runs to its end
}

void CheckpointWriter::Start(std::unique_ptr<CheckpointJob> job) {
  CHECK(!busy_) << "a checkpoint write is already in flight";
  busy_ = true;
  if (thread_ == nullptr) {
    CheckpointOutcome outcome = Run(std::move(job));
    MutexLock lock(&mu_);
    outcome_ = std::move(outcome);
    return;
  }
  // A shared_ptr: std::function needs a copyable task.
  auto shared =
      std::make_shared<std::unique_ptr<CheckpointJob>>(std::move(job));
  thread_->Schedule([this, shared] {
    CheckpointOutcome outcome = Run(std::move(*shared));
    {
      MutexLock lock(&mu_);
      outcome_ = std::move(outcome);
    }
    done_.SignalAll();
    if (wakeup_) wakeup_();
  });
}

std::optional<CheckpointOutcome> CheckpointWriter::TakeDone() {
  if (!busy_) return std::nullopt;
  std::optional<CheckpointOutcome> out;
  {
    MutexLock lock(&mu_);
    out.swap(outcome_);
  }
  if (out) busy_ = false;
  return out;
}

CheckpointOutcome CheckpointWriter::Wait() {
  CHECK(busy_) << "no checkpoint write to wait for";
  std::optional<CheckpointOutcome> out;
  {
    MutexLock lock(&mu_);
    while (!outcome_) done_.Wait(&mu_);
    out.swap(outcome_);
  }
  busy_ = false;
  return std::move(*out);
}

CheckpointStore* CheckpointWriter::store() {
  CHECK(!busy_) << "the checkpoint store is being written";
  return store_.get();
}

CheckpointOutcome CheckpointWriter::Run(std::unique_ptr<CheckpointJob> job) {
  CheckpointOutcome out;
  const auto start = env_->Now();
  if (job->start_over) {
    // What the store holds belongs to the time before this server
    // rejoined: the changes would be written on top of it.
    out.status = store_->StartOver(*job->start_over);
    if (!out.status.ok()) {
      out.status = Status(out.status.code(),
                          "the store cannot drop the state it kept from "
                          "before this server rejoined the job: " +
                              out.status.message());
    }
    out.started_over = out.status.ok();
  }
  if (out.status.ok()) {
    // Versions of rounds that failed will never be restored: drop them, or
    // they would push complete ones out of the newest keep_last.
    Result<std::vector<int64_t>> versions = store_->ListCheckpoints();
    if (versions.ok()) {
      for (int64_t v : *versions) {
        if (v > job->last_complete && v < job->clock) {
          Status dropped = store_->DropCheckpoint(v);
          if (!dropped.ok()) LOG(WARNING) << dropped;
        }
      }
    }
    out.status = store_->WriteCheckpoint(job->clock, job->epoch, job->tables,
                                         job->changed, job->deleted,
                                         job->counts, job->blob);
  }
  if (out.status.ok()) {
    // Freed here rather than on the request thread.
    std::vector<EntryRecord>().swap(job->changed);
  }
  out.write_ms =
      std::chrono::duration<double, std::milli>(env_->Now() - start).count();
  out.job = std::move(job);
  return out;
}

}  // namespace ductile
