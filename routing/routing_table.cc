#include "routing/routing_table.h"

#include <algorithm>
#include <string>
#include <utility>

#include "google/protobuf/util/message_differencer.h"

namespace ductile {

namespace {

void SortById(std::vector<wire::ServerEndpoint>* servers) {
  std::sort(servers->begin(), servers->end(),
            [](const auto& a, const auto& b) { return a.id() < b.id(); });
}

}  // namespace

RoutingTable RoutingTable::Initial(int32_t num_slots,
                                   std::vector<wire::ServerEndpoint> servers) {
  SortById(&servers);
  std::vector<int32_t> server_ids;
  for (const auto& e : servers) server_ids.push_back(e.id());
  RoutingTable t;
  t.epoch_ = 1;
  t.servers_ = std::move(servers);
  t.slots_.resize(num_slots);
  const std::vector<int32_t> owners = AssignSlotsEvenly(num_slots, server_ids);
  for (int32_t s = 0; s < num_slots; ++s) t.slots_[s].owner = owners[s];
  return t;
}

Result<RoutingTable> RoutingTable::FromWire(const wire::RoutingTable& wire) {
  RoutingTable t;
  t.epoch_ = wire.epoch();
  if (t.epoch_ == 0) {
    if (wire.num_slots() != 0 || wire.slot_owner_size() != 0 ||
        wire.slot_backup_size() != 0) {
      return InvalidArgumentError("routing table of epoch 0 with slots");
    }
    return t;
  }
  if (wire.num_slots() < 1 || wire.num_slots() > kMaxSlots) {
    return InvalidArgumentError("routing table with " +
                                std::to_string(wire.num_slots()) + " slots");
  }
  if (wire.slot_owner_size() != wire.num_slots() ||
      (wire.slot_state_size() != 0 &&
       wire.slot_state_size() != wire.num_slots())) {
    return InvalidArgumentError(
        "routing table of " + std::to_string(wire.num_slots()) +
        " slots lists " + std::to_string(wire.slot_owner_size()) +
        " owners and " + std::to_string(wire.slot_state_size()) + " states");
  }
  if (wire.slot_backup_size() != 0 &&
      wire.slot_backup_size() != wire.num_slots()) {
    return InvalidArgumentError(
        "routing table of " + std::to_string(wire.num_slots()) +
        " slots lists " + std::to_string(wire.slot_backup_size()) +
        " backups (0: none, or one per slot)");
  }
  if (wire.slot_backup_from_size() != 0 &&
      wire.slot_backup_from_size() != wire.slot_backup_size()) {
    return InvalidArgumentError(
        "routing table lists " + std::to_string(wire.slot_backup_size()) +
        " backups and " + std::to_string(wire.slot_backup_from_size()) +
        " epochs they hold their copies from (one per backup)");
  }
  t.slots_.resize(wire.num_slots());
  for (int32_t s = 0; s < wire.num_slots(); ++s) {
    t.slots_[s].owner = wire.slot_owner(s);
    if (wire.slot_backup_size() != 0) {
      const int32_t backup = wire.slot_backup(s);
      if (backup < -1) {
        return InvalidArgumentError(
            "slot " + std::to_string(s) + " has backup server " +
            std::to_string(backup) + " (a server id, or -1 for none)");
      }
      if (backup >= 0 && backup == t.slots_[s].owner) {
        return InvalidArgumentError("slot " + std::to_string(s) +
                                    " names server " + std::to_string(backup) +
                                    " as both its owner and its backup");
      }
      t.slots_[s].backup = backup;
      if (wire.slot_backup_from_size() != 0) {
        const uint64_t from = wire.slot_backup_from(s);
        if (from > t.epoch_) {
          return InvalidArgumentError(
              "slot " + std::to_string(s) + "'s backup pair is from epoch " +
              std::to_string(from) + ", after the table's " +
              std::to_string(t.epoch_));
        }
        t.slots_[s].backup_from = backup >= 0 ? from : 0;
      }
    }
    if (wire.slot_state_size() == 0) continue;
    const int32_t state = wire.slot_state(s);
    if (state < 0 || state > static_cast<int32_t>(SlotState::kArriving)) {
      return InvalidArgumentError("slot " + std::to_string(s) +
                                  " has unknown state " +
                                  std::to_string(state));
    }
    t.slots_[s].state = static_cast<SlotState>(state);
  }
  t.servers_.assign(wire.servers().begin(), wire.servers().end());
  SortById(&t.servers_);
  return t;
}

void RoutingTable::ToWire(wire::RoutingTable* wire) const {
  wire->Clear();
  wire->set_epoch(epoch_);
  wire->set_num_slots(num_slots());
  wire->mutable_slot_owner()->Reserve(num_slots());
  bool all_owned = true;
  for (const Slot& slot : slots_) {
    wire->add_slot_owner(slot.owner);
    all_owned = all_owned && slot.state == SlotState::kOwned;
  }
  if (!all_owned) {
    for (const Slot& slot : slots_) {
      wire->add_slot_state(static_cast<int32_t>(slot.state));
    }
  }
  if (HasBackups()) {
    wire->mutable_slot_backup()->Reserve(num_slots());
    for (const Slot& slot : slots_) wire->add_slot_backup(slot.backup);
    const bool all_first =
        std::all_of(slots_.begin(), slots_.end(),
                    [](const Slot& slot) { return slot.backup_from == 0; });
    if (!all_first) {
      wire->mutable_slot_backup_from()->Reserve(num_slots());
      for (const Slot& slot : slots_) {
        wire->add_slot_backup_from(slot.backup_from);
      }
    }
  }
  for (const auto& server : servers_) *wire->add_servers() = server;
}

bool RoutingTable::HasBackups() const {
  return std::any_of(slots_.begin(), slots_.end(),
                     [](const Slot& s) { return s.backup >= 0; });
}

namespace {

// Whether `slot`'s backup is live and its copy known whole.
bool HasWholeCopy(const RoutingTable::Slot& slot, const std::set<int32_t>& live,
                  const std::map<int32_t, uint64_t>& synced) {
  if (live.count(slot.backup) == 0) return false;
  if (slot.backup_from == 0) return true;
  const auto reported = synced.find(slot.owner);
  return reported != synced.end() && reported->second >= slot.backup_from;
}

}  // namespace

int32_t RoutingTable::SlotsWithoutLiveBackup(
    const std::set<int32_t>& owners, const std::set<int32_t>& live,
    const std::map<int32_t, uint64_t>& synced) const {
  int32_t count = 0;
  for (const Slot& slot : slots_) {
    if (owners.count(slot.owner) == 0) continue;
    if (owners.count(slot.backup) > 0 || !HasWholeCopy(slot, live, synced)) {
      ++count;
    }
  }
  return count;
}

int32_t RoutingTable::SlotsWithoutCopy(
    const std::set<int32_t>& live,
    const std::map<int32_t, uint64_t>& synced) const {
  int32_t count = 0;
  for (const Slot& slot : slots_) {
    if (!HasWholeCopy(slot, live, synced)) ++count;
  }
  return count;
}

bool RoutingTable::OwnsAny(int32_t server) const {
  return std::any_of(slots_.begin(), slots_.end(),
                     [server](const Slot& s) { return s.owner == server; });
}

std::map<int32_t, int32_t> RoutingTable::SlotsPerServer() const {
  std::map<int32_t, int32_t> count;
  for (const Slot& slot : slots_) ++count[slot.owner];
  return count;
}

std::vector<int32_t> RoutingTable::SlotsOf(int32_t server) const {
  std::vector<int32_t> out;
  for (int32_t s = 0; s < num_slots(); ++s) {
    if (slots_[s].owner == server) out.push_back(s);
  }
  return out;
}

std::set<int32_t> RoutingTable::Owners() const {
  std::set<int32_t> owners;
  for (const Slot& slot : slots_) owners.insert(slot.owner);
  return owners;
}

const wire::ServerEndpoint* RoutingTable::endpoint(int32_t server) const {
  for (const auto& e : servers_) {
    if (e.id() == server) return &e;
  }
  return nullptr;
}

void RoutingTable::Move(int32_t s, int32_t server) {
  Slot& slot = slots_[s];
  slot.owner = server;
  slot.state = SlotState::kOwned;
  if (slot.backup == server) slot.backup = -1;
  ++epoch_;
  slot.backup_from = slot.backup >= 0 ? epoch_ : 0;
}

int32_t RoutingTable::Reassign(const std::set<int32_t>& live) {
  if (live.empty()) return 0;
  std::map<int32_t, int32_t> load;
  for (int32_t id : live) load[id] = 0;
  for (const Slot& slot : slots_) {
    auto it = load.find(slot.owner);
    if (it != load.end()) ++it->second;
  }
  int32_t moved = 0;
  for (Slot& slot : slots_) {
    if (live.count(slot.owner)) continue;
    auto target = std::min_element(
        load.begin(), load.end(),
        [](const auto& a, const auto& b) { return a.second < b.second; });
    slot.owner = target->first;
    slot.state = SlotState::kOwned;
    if (slot.backup == slot.owner) slot.backup = -1;
    slot.backup_from = slot.backup >= 0 ? epoch_ + 1 : 0;
    ++target->second;
    ++moved;
  }
  ++epoch_;
  return moved;
}

void RoutingTable::SetBackup(int32_t s, int32_t server) {
  Slot& slot = slots_[s];
  slot.backup = server == slot.owner ? -1 : server;
  ++epoch_;
  slot.backup_from = slot.backup >= 0 ? epoch_ : 0;
}

void RoutingTable::AssignBackups(const std::set<int32_t>& live) {
  bool changed = false;
  for (Slot& slot : slots_) {
    int32_t backup = -1;
    if (!live.empty()) {
      auto next = live.upper_bound(slot.owner);
      if (next == live.end()) next = live.begin();
      if (*next != slot.owner) backup = *next;
    }
    changed = changed || slot.backup != backup;
    slot.backup = backup;
    slot.backup_from = 0;
  }
  if (changed) ++epoch_;
}

int32_t RoutingTable::FillBackups(const std::set<int32_t>& candidates) {
  std::map<int32_t, int32_t> backing;
  for (int32_t id : candidates) backing[id] = 0;
  for (const Slot& slot : slots_) {
    auto it = backing.find(slot.backup);
    if (it != backing.end()) ++it->second;
  }
  int32_t filled = 0;
  for (Slot& slot : slots_) {
    if (slot.backup >= 0) continue;
    // The next candidate after the owner, wrapping around, unless another
    // backs fewer slots.
    auto start = backing.upper_bound(slot.owner);
    if (start == backing.end()) start = backing.begin();
    auto best = backing.end();
    for (size_t i = 0; i < backing.size(); ++i) {
      if (start->first != slot.owner &&
          (best == backing.end() || start->second < best->second)) {
        best = start;
      }
      if (++start == backing.end()) start = backing.begin();
    }
    if (best == backing.end()) continue;
    slot.backup = best->first;
    slot.backup_from = epoch_ + 1;
    ++best->second;
    ++filled;
  }
  if (filled > 0) ++epoch_;
  return filled;
}

void RoutingTable::ClearBackups() {
  if (!HasBackups()) return;
  for (Slot& slot : slots_) {
    slot.backup = -1;
    slot.backup_from = 0;
  }
  ++epoch_;
}

int32_t RoutingTable::Promote(const std::set<int32_t>& dead) {
  int32_t promoted = 0;
  bool changed = false;
  for (Slot& slot : slots_) {
    if (dead.count(slot.owner) > 0 && slot.backup >= 0 &&
        dead.count(slot.backup) == 0) {
      slot.owner = slot.backup;
      slot.state = SlotState::kOwned;
      slot.backup = -1;
      slot.backup_from = 0;
      ++promoted;
      changed = true;
    } else if (dead.count(slot.backup) > 0) {
      slot.backup = -1;
      slot.backup_from = 0;
      changed = true;
    }
  }
  if (changed) ++epoch_;
  return promoted;
}

void RoutingTable::SetServers(std::vector<wire::ServerEndpoint> servers) {
  SortById(&servers);
  bool same = servers.size() == servers_.size();
  for (size_t i = 0; same && i < servers.size(); ++i) {
    same = google::protobuf::util::MessageDifferencer::Equals(servers[i],
                                                              servers_[i]);
  }
  if (same) return;
  servers_ = std::move(servers);
  if (epoch_ > 0) ++epoch_;
}

}  // namespace ductile
