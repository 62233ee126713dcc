// A slot move's chunks encoded from the rows in place (server/move_stream.h):
// the same bytes as the records of copies of the rows, in the same chunks,
// in line and on a background thread; a cancel stops the reading.
#include "server/move_stream.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "env/env.h"
#include "gtest/gtest.h"
#include "server/slot_mover.h"
#include "util/mutex.h"

namespace ductile {
namespace {

TableOptions Options(UpdateRule rule, uint32_t width, RowPolicy rows = {}) {
  TableOptions o;
  o.name = "t";
  o.value_width = width;
  o.rule = rule;
  o.learning_rate = 0.01f;
  o.rows = rows;
  return o;
}

// Element i of the gradient pushed to `key` in `round`.
float Gradient(Key key, uint32_t i, int round) {
  return 0.001f * static_cast<float>((key * 7 + i + round) % 13) - 0.006f;
}

// Pushes a gradient of `width` floats, made from `key` and `round`, to each
// of `keys`.
void Push(ParameterTable& table, const std::vector<Key>& keys, uint32_t width,
          int round) {
  for (Key key : keys) {
    std::vector<float> g(width);
    for (uint32_t i = 0; i < width; ++i) g[i] = Gradient(key, i, round);
    ASSERT_TRUE(table.ApplyOne(key, g, round).ok());
  }
}

// Two tables: Adam over 5000 floats (its state split by the gap against
// 4K aliasing) and SGD with momentum over 3, whose rows track their use.
class MoveStreamTest : public ::testing::Test {
 protected:
  MoveStreamTest()
      : adam_(1, Options(UpdateRule::kAdam, 5000), nullptr),
        rows_(2, Options(UpdateRule::kMomentum, 3, RowPolicy{.max_rows = 100}),
              nullptr) {
    for (int round = 1; round <= 2; ++round) {
      Push(adam_, {10, 11, 12}, 5000, round);
      Push(rows_, {5, 4, 3, 2, 1}, 3, round);
    }
    Push(rows_, {3}, 3, 3);  // 3 is now the most recently used
    window_.client = 42;
    window_.done_below = 7;
    window_.applied = {9, 11};
    push_.first = 2;
    push_.second.key = 4;
    push_.second.clock = 3;
    push_.second.combined.values = {0.5f, -1.0f, 2.0f};
    push_.second.combined.pushes = 2;
    push_.second.combined.batches = 2;
    push_.second.combined.rate_sum = 2.0f;
  }

  static bool Even(Key key) { return key % 2 == 0; }

  // The stream of the even keys of both tables, the window and the push.
  std::shared_ptr<MoveStream> Stream(size_t chunk_bytes) {
    std::vector<MoveStream::Row> rows;
    for (const ParameterTable* table : {&adam_, &rows_}) {
      std::vector<ParameterTable::RowRef> refs;
      table->Rows(Even, &refs);
      for (ParameterTable::RowRef ref : refs) rows.push_back({table, ref});
    }
    std::vector<std::string> head(1);
    RecordCodec::AppendWindow(window_, &head[0]);
    return std::make_shared<MoveStream>(
        std::move(head), std::move(rows),
        std::vector<MoveStream::Buffered>{push_}, chunk_bytes);
  }

  // The records as copies of the rows give them (Export, AppendEntry), cut
  // after the record that reaches `chunk_bytes`.
  std::vector<std::string> Reference(size_t chunk_bytes) {
    std::vector<std::string> records(1);
    RecordCodec::AppendWindow(window_, &records[0]);
    std::vector<EntryRecord> copies;
    adam_.Export(Even, &copies);
    rows_.Export(Even, &copies);
    for (const EntryRecord& e : copies) {
      RecordCodec::AppendEntry(e, &records.emplace_back());
    }
    RecordCodec::AppendBuffered(push_, &records.emplace_back());
    std::vector<std::string> chunks(1);
    for (const std::string& r : records) {
      if (chunks.back().size() >= chunk_bytes) chunks.emplace_back();
      chunks.back() += r;
    }
    return chunks;
  }

  static std::vector<std::string> TakeAll(MoveStream& stream) {
    std::vector<std::string> chunks;
    while (auto chunk = stream.Take()) chunks.push_back(std::move(*chunk));
    return chunks;
  }

  ParameterTable adam_;
  ParameterTable rows_;
  RequestDedup::Window window_;
  MoveStream::Buffered push_;
};

TEST_F(MoveStreamTest, InLineTheChunksAreTheRecordsOfCopiesOfTheRows) {
  for (size_t chunk_bytes : {size_t{1}, size_t{30000}, size_t{1} << 20}) {
    auto stream = Stream(chunk_bytes);
    stream->Start(nullptr, 2, {});
    const std::vector<std::string> want = Reference(chunk_bytes);
    EXPECT_EQ(stream->chunks(), want.size()) << chunk_bytes;
    uint64_t bytes = 0;
    for (const std::string& c : want) bytes += c.size();
    EXPECT_EQ(stream->bytes(), bytes);
    EXPECT_EQ(TakeAll(*stream), want) << chunk_bytes;
  }
}

TEST_F(MoveStreamTest, TheChunksParseBackIntoTheRowsInTheirOrderOfUse) {
  auto stream = Stream(size_t{1} << 20);
  stream->Start(nullptr, 2, {});
  const std::vector<std::string> chunks = TakeAll(*stream);
  ASSERT_EQ(chunks.size(), 1u);
  std::vector<EntryRecord> entries;
  std::vector<MoveStream::Buffered> pushes;
  std::vector<RequestDedup::Window> windows;
  ASSERT_TRUE(SlotMover::ParseChunk(InMessage::Copy({"s", "h", chunks[0]}),
                                    &entries, &pushes, &windows)
                  .ok());
  std::vector<Key> keys;
  for (const EntryRecord& e : entries) keys.push_back(e.key);
  // Adam's even keys (in the table's order), then the rows' even keys
  // least recently used first.
  ASSERT_EQ(keys.size(), 4u);
  EXPECT_EQ(std::set<Key>(keys.begin(), keys.begin() + 2),
            (std::set<Key>{10, 12}));
  EXPECT_EQ(std::vector<Key>(keys.begin() + 2, keys.end()),
            (std::vector<Key>{4, 2}));
  std::vector<EntryRecord> copies;
  adam_.Export(Even, &copies);
  ASSERT_EQ(copies.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(entries[i].state.size(), 2u * 5000);  // m then v, no gap
    EXPECT_EQ(entries[i].key, copies[i].key);
    EXPECT_EQ(entries[i].state, copies[i].state);
    EXPECT_EQ(entries[i].value, copies[i].value);
    EXPECT_EQ(entries[i].steps, 2);
    // Adam's moments after the two rounds, from the gradients themselves:
    // m in the first half, v in the second, in order (the table keeps v
    // past a gap; the record does not).
    const Key key = entries[i].key;
    for (uint32_t j = 0; j < 5000; j += 499) {
      const double g1 = Gradient(key, j, 1), g2 = Gradient(key, j, 2);
      const double m = 0.9 * (0.1 * g1) + 0.1 * g2;
      const double v = 0.999 * (0.001 * g1 * g1) + 0.001 * g2 * g2;
      EXPECT_NEAR(entries[i].state[j], m, 1e-7) << key << " " << j;
      EXPECT_NEAR(entries[i].state[5000 + j], v, 1e-9) << key << " " << j;
    }
  }
  ASSERT_EQ(pushes.size(), 1u);
  EXPECT_EQ(pushes[0].second.combined.values, push_.second.combined.values);
  ASSERT_EQ(windows.size(), 1u);
  EXPECT_EQ(windows[0].applied, window_.applied);
}

TEST_F(MoveStreamTest, OnABackgroundThreadTheChunksAreTheSame) {
  auto thread = SystemEnv()->NewBackgroundThread(
      "test-move", BackgroundThread::Priority::kSame);
  ASSERT_NE(thread, nullptr);
  Mutex mu;
  CondVar woken;
  int wakeups = 0;
  auto stream = Stream(30000);
  stream->Start(thread.get(), 2, [&] {
    MutexLock lock(&mu);
    ++wakeups;
    woken.SignalAll();
  });
  std::vector<std::string> chunks;
  int seen = 0;
  while (chunks.size() < stream->chunks()) {
    if (auto chunk = stream->Take()) {
      chunks.push_back(std::move(*chunk));
      continue;
    }
    // Not encoded yet: wait for the next chunk's wakeup.
    MutexLock lock(&mu);
    while (wakeups == seen) {
      ASSERT_TRUE(woken.WaitFor(&mu, std::chrono::seconds(30)))
          << "no chunk encoded after " << chunks.size();
    }
    seen = wakeups;
  }
  EXPECT_FALSE(stream->Take().has_value());
  EXPECT_EQ(chunks, Reference(30000));
  EXPECT_EQ(wakeups, static_cast<int>(stream->chunks()));
}

TEST_F(MoveStreamTest, ACancelStopsTheEncodingAndGivesThePushesBack) {
  auto thread = SystemEnv()->NewBackgroundThread(
      "test-move", BackgroundThread::Priority::kSame);
  // The thread is held until the gate opens, so the stream's encoding is
  // queued behind it when the cancel comes.
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  bool open = false;
  thread->Schedule([&] {
    std::unique_lock<std::mutex> lock(gate_mu);
    gate_cv.wait(lock, [&] { return open; });
  });
  std::atomic<int> ready{0};
  auto stream = Stream(1);  // a chunk per record: 6 to encode
  stream->Start(thread.get(), 1, [&] { ++ready; });
  std::vector<MoveStream::Buffered> pushes;
  std::thread releaser([&] { pushes = stream->Release(); });
  // Release cancels, then waits for the queued encoding to end.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!stream->cancelled() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(stream->cancelled());
  {
    std::lock_guard<std::mutex> lock(gate_mu);
    open = true;
  }
  gate_cv.notify_all();
  releaser.join();
  // The encoding ran after the cancel: it read no row and made no chunk.
  EXPECT_EQ(ready.load(), 0);
  EXPECT_FALSE(stream->Take().has_value());
  // Nothing reads the rows now: they may change.
  Push(adam_, {10, 12}, 5000, 9);
  ASSERT_EQ(pushes.size(), 1u);
  EXPECT_EQ(pushes[0].second.combined.values, push_.second.combined.values);
}

TEST_F(MoveStreamTest, InLineACancelledStreamGivesNoMoreChunks) {
  auto stream = Stream(1);
  stream->Start(nullptr, 2, {});
  ASSERT_TRUE(stream->Take().has_value());
  stream->Cancel();
  EXPECT_FALSE(stream->Take().has_value());
}

}  // namespace
}  // namespace ductile
