#include "transport/message.h"

#include <utility>

namespace ductile {
namespace {

// Copies of frames, for messages built by hand or by a simulated network.
struct CopiedFrames final : FrameStorage {
  std::vector<std::string> frames;
};

// Runs a borrowed frame's release callback when the transport drops it.
struct Borrowed final : OutMessage::Holder {
  explicit Borrowed(std::function<void()> f) : on_release(std::move(f)) {}
  ~Borrowed() override {
    if (on_release) on_release();
  }
  std::function<void()> on_release;
};

}  // namespace

InMessage InMessage::Copy(const std::vector<std::string>& frames) {
  auto storage = std::make_unique<CopiedFrames>();
  storage->frames = frames;
  std::vector<ByteSpan> views;
  views.reserve(frames.size());
  for (const std::string& f : storage->frames) {
    views.emplace_back(reinterpret_cast<const uint8_t*>(f.data()), f.size());
  }
  InMessage m;
  m.Reset(std::move(storage), std::move(views));
  return m;
}

uint64_t InMessage::bytes() const {
  uint64_t total = 0;
  for (ByteSpan f : frames_) total += f.size();
  return total;
}

void InMessage::Reset(std::unique_ptr<FrameStorage> storage,
                      std::vector<ByteSpan> frames) {
  storage_ = std::move(storage);
  frames_ = std::move(frames);
}

void OutMessage::AddCopy(const void* data, size_t size) {
  Frame& f = frames_.emplace_back();
  f.inline_bytes.assign(static_cast<const char*>(data), size);
  bytes_ += size;
}

void OutMessage::AddString(std::string s) {
  Frame& f = frames_.emplace_back();
  bytes_ += s.size();
  f.inline_bytes = std::move(s);
}

void OutMessage::AddBorrowed(const void* data, size_t size,
                             std::function<void()> on_release) {
  Frame& f = frames_.emplace_back();
  f.data = data;
  f.size = size;
  f.holder = std::make_unique<Borrowed>(std::move(on_release));
  bytes_ += size;
}

}  // namespace ductile
