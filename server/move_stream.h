// The chunks of one slot move, encoded from the rows where the table keeps
// them (docs/elasticity.md, "Servers").
//
// At the copy the request thread takes references to the slots' rows
// (ParameterTable::RowRef), not their bytes, and lays out the chunks: the
// records that go first (the exactly-once windows and the admission
// counts, encoded then), then one record per row, then the BSP pushes the
// move carries, cut at about `chunk_bytes`. Each chunk is encoded when its
// turn comes, straight from the rows into the bytes sent: on a background
// thread, a few chunks ahead of the sender, or, where the Env has none (the
// simulation), in line when the sender takes it.
//
// The rows must stay as they were at the copy until Cancel() returns (or
// every chunk is taken): the slot mover bounces the slots' requests and
// holds evictions meanwhile, and cancels before a rollback clears them.
//
// Thread safety: every method is the request thread's; the encoding runs on
// the background thread and meets it in the chunks ready (mu_).
//
//   auto stream = std::make_shared<MoveStream>(std::move(head), rows,
//                                              std::move(pushes), 4 << 20);
//   stream->Start(thread, /*ahead=*/2, wakeup);
//   while (auto chunk = stream->Take()) Send(*chunk);  // more once woken
#ifndef DUCTILE_SERVER_MOVE_STREAM_H_
#define DUCTILE_SERVER_MOVE_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "consistency/bsp_buffer.h"
#include "env/env.h"
#include "server/parameter_table.h"
#include "util/mutex.h"

namespace ductile {

class MoveStream : public std::enable_shared_from_this<MoveStream> {
 public:
  // A BSP push moved with its key (its clock not combined yet).
  using Buffered = std::pair<TableId, BspBuffer::Entry>;
  // A row to send: its table and where the table keeps it.
  struct Row {
    const ParameterTable* table;
    ParameterTable::RowRef ref;
  };

  // `head`: records encoded already, sent first, in order; then a record per
  // row of `rows` and per push of `pushes`. A chunk ends after the record
  // that takes it to `chunk_bytes` or more; there is at least one chunk.
  MoveStream(std::vector<std::string> head, std::vector<Row> rows,
             std::vector<Buffered> pushes, size_t chunk_bytes);
  ~MoveStream();
  MoveStream(const MoveStream&) = delete;
  MoveStream& operator=(const MoveStream&) = delete;

  size_t chunks() const { return starts_.size() - 1; }
  uint64_t bytes() const { return bytes_; }
  size_t rows() const { return rows_.size(); }

  // Starts encoding on `thread` (null: in line, in Take), at most `ahead`
  // chunks ready and not taken; `ready` is called (from that thread) each
  // time one is. The stream must be owned by a shared_ptr.
  void Start(BackgroundThread* thread, size_t ahead,
             std::function<void()> ready);
  // The next chunk, in order, if it is encoded (in line: encoded now);
  // nothing if it is not ready yet or every chunk was taken.
  std::optional<std::string> Take();
  // Stops the encoding: once it returns, nothing reads the rows any more.
  void Cancel();
  // Cancels, and gives back the BSP pushes (the move failed or was
  // aborted: they are served here again).
  std::vector<Buffered> Release();

  // Whether Cancel (or Release) was called.
  bool cancelled() {
    MutexLock lock(&mu_);
    return cancelled_;
  }

  // Chunk `i`'s bytes (the format of SlotMover's chunks).
  std::string Encode(size_t i) const;

 private:
  // On the background thread: encodes chunks until `ahead_` are ready, every
  // one is encoded, or the stream is cancelled.
  void Fill();
  // Schedules Fill unless it runs or has nothing to do.
  void Kick() REQUIRES(mu_);

  const std::vector<std::string> head_;
  const std::vector<Row> rows_;
  std::vector<Buffered> pushes_;
  // Chunk i holds the records (head, then rows, then pushes)
  // [starts_[i], starts_[i + 1]), of chunk_bytes_[i] bytes.
  std::vector<size_t> starts_;
  std::vector<size_t> chunk_bytes_;
  uint64_t bytes_ = 0;

  BackgroundThread* thread_ = nullptr;
  size_t ahead_ = 1;
  std::function<void()> ready_fn_;
  size_t next_taken_ = 0;  // in line: the next chunk to encode
  Mutex mu_;
  CondVar idle_;
  std::deque<std::string> ready_ GUARDED_BY(mu_);
  size_t next_encoded_ GUARDED_BY(mu_) = 0;
  bool encoding_ GUARDED_BY(mu_) = false;
  bool cancelled_ GUARDED_BY(mu_) = false;
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_MOVE_STREAM_H_
