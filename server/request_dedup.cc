#include "server/request_dedup.h"

#include <algorithm>
#include <iterator>

namespace ductile {

RequestDedup::ClientWindow& RequestDedup::WindowOf(int64_t client) {
  auto [it, inserted] = clients_.try_emplace(client);
  if (inserted) it->second.heard = now_;
  return it->second;
}

void RequestDedup::Advance(int64_t client, uint64_t done_below) {
  ClientWindow& w = WindowOf(client);
  if (done_below <= w.done_below) return;
  w.done_below = done_below;
  for (auto it = w.applied.begin(); it != w.applied.end();) {
    it = *it < done_below ? w.applied.erase(it) : std::next(it);
  }
}

bool RequestDedup::IsDuplicate(int64_t client, uint64_t seq) const {
  auto it = clients_.find(client);
  if (it == clients_.end()) return false;
  return seq < it->second.done_below || it->second.applied.count(seq) > 0;
}

void RequestDedup::MarkApplied(int64_t client, uint64_t seq) {
  WindowOf(client).applied.insert(seq);
}

bool RequestDedup::Full(int64_t client) const {
  auto it = clients_.find(client);
  return it != clients_.end() &&
         it->second.applied.size() >= max_applied_per_client_;
}

void RequestDedup::Touch(int64_t client, TimePoint now, int64_t timeout_ms) {
  now_ = std::max(now_, now);
  ClientWindow& w = WindowOf(client);
  w.heard = std::max(w.heard, now);
  w.timeout_ms = std::max<int64_t>(timeout_ms, 0);
}

size_t RequestDedup::Sweep(TimePoint now, std::chrono::milliseconds expiry) {
  now_ = std::max(now_, now);
  size_t dropped = 0;
  for (auto it = clients_.begin(); it != clients_.end();) {
    const ClientWindow& w = it->second;
    if (now - w.heard > std::chrono::milliseconds(w.timeout_ms) + expiry) {
      it = clients_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  return dropped;
}

std::vector<RequestDedup::Window> RequestDedup::Snapshot() const {
  std::vector<Window> out;
  out.reserve(clients_.size());
  for (const auto& [client, w] : clients_) {
    Window& o = out.emplace_back();
    o.client = client;
    o.done_below = w.done_below;
    o.applied.assign(w.applied.begin(), w.applied.end());
  }
  return out;
}

void RequestDedup::Merge(const Window& w) {
  for (uint64_t seq : w.applied) {
    if (seq >= w.done_below && !IsDuplicate(w.client, seq)) {
      MarkApplied(w.client, seq);
    }
  }
  Advance(w.client, w.done_below);
}

size_t RequestDedup::tracked() const {
  size_t n = 0;
  for (const auto& [client, w] : clients_) n += w.applied.size();
  return n;
}

}  // namespace ductile
