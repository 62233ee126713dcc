#include "sim/mem_stores.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

namespace ductile::sim {

// One store's state: the live tables and entries, and frozen versions.
struct MemDisk::StoreData {
  struct State {
    int64_t clock = -1;
    uint64_t epoch = 0;
    std::string blob;
    std::map<TableId, std::string> tables;
    std::map<std::pair<TableId, Key>, EntryRecord> entries;
    std::map<std::pair<TableId, int32_t>, std::string> filters;
  };
  State live;
  std::map<int64_t, State> versions;
  bool open = false;
};

namespace {

using StoreData = MemDisk::StoreData;

LoadedCheckpoint ToLoaded(const StoreData::State& s) {
  LoadedCheckpoint out;
  out.clock = s.clock;
  out.epoch = s.epoch;
  out.blob = s.blob;
  for (const auto& [id, config] : s.tables) out.tables.push_back({id, config});
  for (const auto& [key, e] : s.entries) out.entries.push_back(e);
  for (const auto& [slot, counts] : s.filters) {
    out.filters.push_back({slot.first, slot.second, counts});
  }
  return out;
}

class MemCheckpointStore final : public CheckpointStore {
 public:
  MemCheckpointStore(const MemDisk* disk, std::string dir,
                     std::shared_ptr<StoreData> data, int keep_last)
      : disk_(disk),
        dir_(std::move(dir)),
        data_(std::move(data)),
        keep_last_(keep_last) {
    data_->open = true;
  }
  ~MemCheckpointStore() override { data_->open = false; }

  Status WriteCheckpoint(int64_t clock, uint64_t epoch,
                         const std::vector<TableRecord>& tables,
                         const std::vector<EntryRecord>& changed,
                         const std::vector<std::pair<TableId, Key>>& deleted,
                         const std::vector<FilterRecord>& filters,
                         const std::string& blob) override {
    DUCTILE_RETURN_IF_ERROR(disk_->WriteError(dir_));
    if (clock < 0) return InvalidArgumentError("negative clock");
    if (!data_->versions.empty() && clock <= data_->versions.rbegin()->first) {
      return InvalidArgumentError("clock " + std::to_string(clock) +
                                  " is not after the newest checkpoint");
    }
    std::set<std::pair<TableId, Key>> seen;
    for (const EntryRecord& e : changed) {
      if (!seen.insert({e.table, e.key}).second) {
        return InvalidArgumentError("a key listed twice");
      }
    }
    for (const auto& d : deleted) {
      if (!seen.insert(d).second) {
        return InvalidArgumentError("a key listed twice");
      }
    }
    StoreData::State& live = data_->live;
    for (const TableRecord& t : tables) live.tables[t.id] = t.config;
    for (const EntryRecord& e : changed) {
      if (live.tables.count(e.table) == 0) {
        return InvalidArgumentError("an entry of a table with no record");
      }
    }
    std::set<std::pair<TableId, int32_t>> slots;
    for (const FilterRecord& f : filters) {
      if (live.tables.count(f.table) == 0 || f.slot < 0 ||
          !slots.insert({f.table, f.slot}).second) {
        return InvalidArgumentError("filter counts of no table, or twice");
      }
    }
    for (const EntryRecord& e : changed) live.entries[{e.table, e.key}] = e;
    for (const auto& d : deleted) live.entries.erase(d);
    for (const FilterRecord& f : filters) {
      if (f.counts.empty()) {
        live.filters.erase({f.table, f.slot});
      } else {
        live.filters[{f.table, f.slot}] = f.counts;
      }
    }
    live.clock = clock;
    live.epoch = epoch;
    live.blob = blob;
    data_->versions[clock] = live;
    while (static_cast<int>(data_->versions.size()) > keep_last_) {
      data_->versions.erase(data_->versions.begin());
    }
    return Status::Ok();
  }

  Result<std::vector<int64_t>> ListCheckpoints() const override {
    std::vector<int64_t> out;
    for (const auto& [clock, v] : data_->versions) out.push_back(clock);
    return out;
  }

  Result<LoadedCheckpoint> LoadLatest() const override {
    if (data_->versions.empty()) return NotFoundError("no checkpoint");
    return ToLoaded(data_->versions.rbegin()->second);
  }

  Result<LoadedCheckpoint> Load(int64_t clock) const override {
    auto it = data_->versions.find(clock);
    if (it == data_->versions.end()) {
      return NotFoundError("no checkpoint at clock " + std::to_string(clock));
    }
    return ToLoaded(it->second);
  }

  Status RollBackTo(int64_t clock) override {
    DUCTILE_RETURN_IF_ERROR(disk_->WriteError(dir_));
    auto it = data_->versions.find(clock);
    if (it == data_->versions.end()) {
      return NotFoundError("no checkpoint at clock " + std::to_string(clock));
    }
    data_->live = it->second;
    data_->versions.erase(std::next(it), data_->versions.end());
    return Status::Ok();
  }

  Status DiscardAll() override {
    DUCTILE_RETURN_IF_ERROR(disk_->WriteError(dir_));
    data_->versions.clear();
    data_->live = StoreData::State();
    return Status::Ok();
  }

  Status StartOver(const std::vector<int64_t>& keep) override {
    DUCTILE_RETURN_IF_ERROR(disk_->WriteError(dir_));
    std::erase_if(data_->versions, [&](const auto& v) {
      return std::find(keep.begin(), keep.end(), v.first) == keep.end();
    });
    data_->live = StoreData::State();
    return Status::Ok();
  }

  Status DropCheckpoint(int64_t clock) override {
    DUCTILE_RETURN_IF_ERROR(disk_->WriteError(dir_));
    data_->versions.erase(clock);
    return Status::Ok();
  }

 private:
  const MemDisk* const disk_;
  const std::string dir_;
  std::shared_ptr<StoreData> data_;
  const int keep_last_;
};

class MemCoordinatorStore final : public CoordinatorStore {
 public:
  MemCoordinatorStore(const MemDisk* disk, std::string dir,
                      std::optional<wire::CoordinatorState>* state,
                      std::optional<wire::DataPlanState>* plan, bool* open)
      : disk_(disk),
        dir_(std::move(dir)),
        state_(state),
        plan_(plan),
        open_(open) {
    *open_ = true;
  }
  ~MemCoordinatorStore() override { *open_ = false; }

  Result<std::optional<wire::CoordinatorState>> Load() const override {
    return *state_;
  }
  Status Save(const wire::CoordinatorState& state) override {
    DUCTILE_RETURN_IF_ERROR(disk_->WriteError(dir_));
    *state_ = state;
    return Status::Ok();
  }
  Result<std::optional<wire::DataPlanState>> LoadDataPlan() const override {
    return *plan_;
  }
  Status SaveDataPlan(const wire::DataPlanState& plan) override {
    DUCTILE_RETURN_IF_ERROR(disk_->WriteError(dir_));
    *plan_ = plan;
    return Status::Ok();
  }

 private:
  const MemDisk* const disk_;
  const std::string dir_;
  std::optional<wire::CoordinatorState>* state_;
  std::optional<wire::DataPlanState>* plan_;
  bool* open_;
};

}  // namespace

MemDisk::MemDisk() = default;
MemDisk::~MemDisk() = default;

void MemDisk::SetFault(const std::string& dir, DiskFault fault) {
  if (fault == DiskFault::kNone) {
    faults_.erase(dir);
  } else {
    faults_[dir] = fault;
  }
}

Status MemDisk::WriteError(const std::string& dir) const {
  for (const auto& [under, fault] : faults_) {
    if (dir != under && !dir.starts_with(under + "/")) continue;
    if (fault == DiskFault::kReadOnly) {
      return FailedPreconditionError("cannot write to " + dir +
                                     ": Read-only file system");
    }
    return ResourceExhaustedError("cannot write to " + dir +
                                  ": No space left on device");
  }
  return Status::Ok();
}

Result<std::unique_ptr<CheckpointStore>> MemDisk::OpenCheckpointStore(
    const CheckpointStoreOptions& options) {
  if (options.dir.empty()) return InvalidArgumentError("no directory");
  if (options.keep_last < 1) return InvalidArgumentError("keep_last < 1");
  std::shared_ptr<StoreData>& data = stores_[options.dir];
  if (!data) data = std::make_shared<StoreData>();
  if (data->open) {
    return FailedPreconditionError(options.dir + " is held by another store");
  }
  return std::unique_ptr<CheckpointStore>(
      new MemCheckpointStore(this, options.dir, data, options.keep_last));
}

Result<LoadedCheckpoint> MemDisk::LoadCheckpointFrom(const std::string& dir,
                                                     int64_t clock) {
  auto it = stores_.find(dir);
  if (it == stores_.end()) return NotFoundError("no store in " + dir);
  auto v = it->second->versions.find(clock);
  if (v == it->second->versions.end()) {
    return NotFoundError("no checkpoint at clock " + std::to_string(clock) +
                         " in " + dir);
  }
  return ToLoaded(v->second);
}

Result<std::unique_ptr<CoordinatorStore>> MemDisk::OpenCoordinatorStore(
    const std::string& dir) {
  bool& open = coordinator_open_[dir];
  if (open) return FailedPreconditionError(dir + " is held by another store");
  return std::unique_ptr<CoordinatorStore>(new MemCoordinatorStore(
      this, dir, &coordinators_[dir], &data_plans_[dir], &open));
}

}  // namespace ductile::sim
