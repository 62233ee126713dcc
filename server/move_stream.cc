#include "server/move_stream.h"

#include <algorithm>
#include <utility>

#include "server/record_codec.h"

namespace ductile {

MoveStream::MoveStream(std::vector<std::string> head, std::vector<Row> rows,
                       std::vector<Buffered> pushes, size_t chunk_bytes)
    : head_(std::move(head)),
      rows_(std::move(rows)),
      pushes_(std::move(pushes)) {
  std::vector<size_t> record_bytes;  // head, then rows, then pushes
  record_bytes.reserve(head_.size() + rows_.size() + pushes_.size());
  for (const std::string& r : head_) record_bytes.push_back(r.size());
  for (const Row& r : rows_) {
    record_bytes.push_back(RecordCodec::RowRecordBytes(*r.table, r.ref));
  }
  for (const Buffered& b : pushes_) {
    record_bytes.push_back(RecordCodec::BufferedRecordBytes(b));
  }
  starts_.push_back(0);
  size_t chunk = 0;
  for (size_t i = 0; i < record_bytes.size(); ++i) {
    chunk += record_bytes[i];
    if (chunk >= chunk_bytes) {
      starts_.push_back(i + 1);
      chunk_bytes_.push_back(chunk);
      bytes_ += chunk;
      chunk = 0;
    }
  }
  // The last chunk (at least one: the target acknowledges it even empty).
  if (chunk > 0 || chunk_bytes_.empty()) {
    starts_.push_back(record_bytes.size());
    chunk_bytes_.push_back(chunk);
    bytes_ += chunk;
  }
}

MoveStream::~MoveStream() { Cancel(); }

void MoveStream::Start(BackgroundThread* thread, size_t ahead,
                       std::function<void()> ready) {
  thread_ = thread;
  ahead_ = std::max<size_t>(ahead, 1);
  ready_fn_ = std::move(ready);
  if (thread_ == nullptr) return;
  MutexLock lock(&mu_);
  Kick();
}

std::optional<std::string> MoveStream::Take() {
  MutexLock lock(&mu_);
  if (thread_ == nullptr) {
    if (cancelled_ || next_taken_ >= chunks()) return std::nullopt;
    return Encode(next_taken_++);
  }
  std::optional<std::string> chunk;
  if (!ready_.empty()) {
    chunk = std::move(ready_.front());
    ready_.pop_front();
  }
  Kick();
  return chunk;
}

void MoveStream::Kick() {
  if (encoding_ || cancelled_ || next_encoded_ >= chunks() ||
      ready_.size() >= ahead_) {
    return;
  }
  encoding_ = true;
  thread_->Schedule([self = shared_from_this()] { self->Fill(); });
}

void MoveStream::Fill() {
  mu_.Lock();
  while (!cancelled_ && next_encoded_ < chunks() && ready_.size() < ahead_) {
    const size_t i = next_encoded_++;
    mu_.Unlock();
    std::string chunk = Encode(i);
    mu_.Lock();
    ready_.push_back(std::move(chunk));
    // Still encoding_: Cancel() waits for this call to return.
    if (ready_fn_) ready_fn_();
  }
  encoding_ = false;
  idle_.SignalAll();
  mu_.Unlock();
}

void MoveStream::Cancel() {
  MutexLock lock(&mu_);
  cancelled_ = true;
  while (encoding_) idle_.Wait(&mu_);
}

std::vector<MoveStream::Buffered> MoveStream::Release() {
  Cancel();
  return std::move(pushes_);
}

std::string MoveStream::Encode(size_t i) const {
  std::string chunk;
  chunk.reserve(chunk_bytes_[i]);
  const size_t rows_at = head_.size();
  const size_t pushes_at = rows_at + rows_.size();
  for (size_t r = starts_[i]; r < starts_[i + 1]; ++r) {
    if (r < rows_at) {
      chunk.append(head_[r]);
    } else if (r < pushes_at) {
      const Row& row = rows_[r - rows_at];
      RecordCodec::AppendRow(*row.table, row.ref, &chunk);
    } else {
      RecordCodec::AppendBuffered(pushes_[r - pushes_at], &chunk);
    }
  }
  return chunk;
}

}  // namespace ductile
