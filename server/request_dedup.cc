#include "server/request_dedup.h"

#include <iterator>

namespace ductile {

void RequestDedup::Advance(int64_t client, uint64_t done_below) {
  ClientWindow& w = clients_[client];
  w.heard = true;
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
  ClientWindow& w = clients_[client];
  w.heard = true;
  w.applied.insert(seq);
}

bool RequestDedup::Full(int64_t client) const {
  auto it = clients_.find(client);
  return it != clients_.end() &&
         it->second.applied.size() >= max_applied_per_client_;
}

size_t RequestDedup::Sweep() {
  size_t dropped = 0;
  for (auto it = clients_.begin(); it != clients_.end();) {
    if (!it->second.heard) {
      it = clients_.erase(it);
      ++dropped;
    } else {
      it->second.heard = false;
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
