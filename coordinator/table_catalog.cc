#include "coordinator/table_catalog.h"

#include <algorithm>
#include <iterator>

#include "glog/logging.h"
#include "proto/codec.h"
#include "proto/table_config.h"

namespace ductile {
namespace {

// How long servers get to acknowledge a new table or a change.
constexpr std::chrono::milliseconds kAckTimeout{10000};

}  // namespace

void TableCatalog::HandleCreate(const std::string& identity,
                                const wire::Header& h) {
  const TableOptions options = FromWire(h.table());
  Status s = ValidateTableOptions(options);
  if (!s.ok()) return ctx_.out.Reply(identity, h.seq(), s);
  auto existing = ctx_.state.tables.find(options.name);
  if (existing != ctx_.state.tables.end()) {
    if (!SameTable(existing->second, h.table())) {
      return ctx_.out.Reply(identity, h.seq(),
                            AlreadyExistsError("table '" + options.name +
                                               "' exists with other options"));
    }
    wire::Header reply;
    reply.set_type(wire::CONTROL_REPLY);
    reply.set_seq(h.seq());
    *reply.mutable_table() = existing->second;
    return ctx_.out.Send(identity, reply);
  }
  for (auto& [round, p] : pending_tables_) {
    if (p.config.name() != options.name) continue;
    if (!SameTable(p.config, h.table())) {
      return ctx_.out.Reply(identity, h.seq(),
                            AlreadyExistsError("table '" + options.name +
                                               "' is being created with other "
                                               "options"));
    }
    p.waiters.push_back({identity, h.seq()});
    return;
  }
  if (ctx_.state.servers.empty()) {
    return ctx_.out.Reply(identity, h.seq(),
                          UnavailableError("no server has registered yet"));
  }
  PendingTable p;
  p.config = h.table();
  p.config.set_id(ctx_.state.next_table_id++);
  p.waiters.push_back({identity, h.seq()});
  const uint64_t round = next_round_++;
  wire::Header create;
  create.set_type(wire::TABLE_CREATE);
  create.set_seq(round);
  *create.mutable_table() = p.config;
  // Every server that may answer: a dead or drained one gets the tables
  // when it registers again (a rejoining one takes part).
  std::set<int32_t> servers;
  for (const auto& [id, m] : ctx_.state.servers) {
    if (!m.dead && !m.left()) servers.insert(id);
  }
  p.round = AckRound(create, servers, ctx_.Now() + kAckTimeout);
  ctx_.SendTo(ctx_.state.servers, servers, create);
  pending_tables_[round] = std::move(p);
}

void TableCatalog::HandleCreateAck(const wire::Header& h) {
  auto it = pending_tables_.find(h.seq());
  if (it == pending_tables_.end()) return;
  PendingTable& p = it->second;
  if (!p.round.Awaits(h.member_id())) return;
  Status s = StatusFromWire(h);
  if (!s.ok()) {
    for (const Waiter& w : p.waiters) {
      ctx_.out.Reply(
          w.identity, w.seq,
          Status(s.code(), "server " + std::to_string(h.member_id()) +
                               " cannot create table '" + p.config.name() +
                               "': " + s.message()));
    }
    pending_tables_.erase(it);
    return;
  }
  p.round.Ack(h.member_id());
  if (p.round.complete()) Created(it);
}

void TableCatalog::Created(std::map<uint64_t, PendingTable>::iterator it) {
  PendingTable& p = it->second;
  ctx_.state.tables[p.config.name()] = p.config;
  LOG(INFO) << "coordinator: table '" << p.config.name() << "' created, id "
            << p.config.id();
  wire::Header reply;
  reply.set_type(wire::CONTROL_REPLY);
  *reply.mutable_table() = p.config;
  for (const Waiter& w : p.waiters) {
    reply.set_seq(w.seq);
    ctx_.out.Send(w.identity, reply);
  }
  pending_tables_.erase(it);
}

void TableCatalog::OnServerUp(const Member& server) {
  for (auto& [round, p] : pending_tables_) SendCreation(p, server);
}

void TableCatalog::SendCreation(PendingTable& p, const Member& server) {
  if (server.identity.empty()) return;  // not connected: it registers first
  LOG(INFO) << "coordinator: table '" << p.config.name()
            << "' is being created: sent to server " << server.id
            << ", which is awaited too";
  p.round.Await(server.id);
  // It gets as long to answer as the others had.
  p.round.set_deadline(std::max(p.round.deadline(), ctx_.Now() + kAckTimeout));
  ctx_.out.Send(server.identity, p.round.message());
}

void TableCatalog::ForgetGoneServers() {
  for (auto it = pending_tables_.begin(); it != pending_tables_.end();) {
    auto next = std::next(it);
    AckRound& round = it->second.round;
    const std::set<int32_t> awaited = round.awaiting();
    for (int32_t id : awaited) {
      auto m = ctx_.state.servers.find(id);
      if (m != ctx_.state.servers.end() && !m->second.dead &&
          !m->second.left()) {
        continue;
      }
      LOG(INFO) << "coordinator: table '" << it->second.config.name()
                << "' no longer waits for server " << id
                << ", which is gone; it gets the table if it registers again";
      round.Forget(id);
    }
    if (round.complete()) Created(it);
    it = next;
  }
}

void TableCatalog::HandleGet(const std::string& identity,
                             const wire::Header& h) {
  auto it = ctx_.state.tables.find(h.name());
  if (it == ctx_.state.tables.end()) {
    return ctx_.out.Reply(identity, h.seq(),
                          NotFoundError("no table named '" + h.name() + "'"));
  }
  wire::Header reply;
  reply.set_type(wire::CONTROL_REPLY);
  reply.set_seq(h.seq());
  *reply.mutable_table() = it->second;
  ctx_.out.Send(identity, reply);
}

void TableCatalog::HandleSetConsistency(const std::string& identity,
                                        const wire::Header& h) {
  const wire::TableConfig* table = ctx_.state.TableById(h.table_id());
  if (table == nullptr) {
    return ctx_.out.Reply(
        identity, h.seq(),
        NotFoundError("no table with id " + std::to_string(h.table_id())));
  }
  Status s = StartChange(*table, h.consistency(), {identity, h.seq()});
  if (!s.ok()) ctx_.out.Reply(identity, h.seq(), s);
}

Status TableCatalog::ChangeConsistency(
    const std::string& table, const wire::ConsistencyConfig& consistency) {
  auto it = ctx_.state.tables.find(table);
  if (it == ctx_.state.tables.end()) {
    return NotFoundError("no table named '" + table + "'");
  }
  return StartChange(it->second, consistency, Waiter{});
}

Status TableCatalog::StartChange(const wire::TableConfig& table,
                                 const wire::ConsistencyConfig& consistency,
                                 const Waiter& waiter) {
  DUCTILE_RETURN_IF_ERROR(ValidateConsistency(FromWire(consistency)));
  for (const auto& [id, change] : changes_) {
    if (change.table == table.name()) {
      return UnavailableError("another consistency change of '" + table.name() +
                              "' is in progress; retry");
    }
  }
  const uint64_t round = next_round_++;
  wire::Header prepare;
  prepare.set_type(wire::CONSISTENCY_PREPARE);
  prepare.set_table_id(table.id());
  prepare.set_change_id(round);
  const auto deadline = ctx_.Now() + kAckTimeout;
  // Every server that may answer: a dead or drained one gets the tables
  // when it registers again (a rejoining one takes part).
  std::set<int32_t> servers;
  for (const auto& [id, m] : ctx_.state.servers) {
    if (!m.dead && !m.left()) servers.insert(id);
  }
  // Workers too: a worker's cache must not answer from the old model past
  // the boundary, so it stops reading cached copies until the commit.
  const std::set<int32_t> workers = ctx_.state.LiveWorkers();
  PendingChange change;
  change.table = table.name();
  change.consistency = consistency;
  change.servers = AckRound(prepare, servers, deadline);
  change.workers = AckRound(prepare, workers, deadline);
  change.waiter = waiter;
  ctx_.SendTo(ctx_.state.servers, servers, prepare);
  ctx_.SendTo(ctx_.state.workers, workers, prepare);
  changes_[round] = std::move(change);
  return Status::Ok();
}

void TableCatalog::Answer(const PendingChange& change, const Status& s) {
  if (!change.waiter.identity.empty()) {
    ctx_.out.Reply(change.waiter.identity, change.waiter.seq, s);
  } else if (!s.ok()) {
    LOG(WARNING) << "coordinator: the change of table '" << change.table
                 << "' to " << ToString(FromWire(change.consistency))
                 << " failed: " << s.ToString();
  }
}

void TableCatalog::HandleConsistencyAck(const wire::Header& h) {
  auto it = changes_.find(h.change_id());
  if (it == changes_.end()) return;
  PendingChange& change = it->second;
  Status s = StatusFromWire(h);
  if (!s.ok()) {
    // Release the holds with the model in force, and give up.
    Commit(change, ctx_.state.tables[change.table].consistency());
    Answer(change, s);
    changes_.erase(it);
    return;
  }
  AckRound& round =
      h.role() == wire::ROLE_WORKER ? change.workers : change.servers;
  if (!round.Ack(h.member_id())) return;  // not awaited (a duplicate)
  change.max_clock = std::max(change.max_clock, h.clock());
  if (!change.servers.complete() || !change.workers.complete()) return;
  change.consistency.set_from_clock(change.max_clock + 1);
  Commit(change, change.consistency);
  ctx_.state.tables[change.table].mutable_consistency()->CopyFrom(
      change.consistency);
  LOG(INFO) << "coordinator: table '" << change.table << "' is "
            << ToString(FromWire(change.consistency)) << " from clock "
            << change.max_clock + 1;
  if (!change.waiter.identity.empty()) {
    wire::Header reply;
    reply.set_type(wire::CONTROL_REPLY);
    reply.set_seq(change.waiter.seq);
    reply.set_clock(change.max_clock + 1);
    ctx_.out.Send(change.waiter.identity, reply);
  }
  changes_.erase(it);
}

void TableCatalog::Commit(const PendingChange& change,
                          const wire::ConsistencyConfig& c) {
  wire::Header commit;
  commit.set_type(wire::CONSISTENCY_COMMIT);
  commit.set_table_id(ctx_.state.tables[change.table].id());
  *commit.mutable_consistency() = c;
  // No server has let through a request beyond max_clock since it was
  // prepared, so from max_clock + 1 on every request sees the new model.
  commit.set_clock(change.max_clock + 1);
  for (const auto& [id, m] : ctx_.state.servers) {
    ctx_.out.Send(m.identity, commit);
  }
  ctx_.SendTo(ctx_.state.workers, ctx_.state.LiveWorkers(), commit);
}

void TableCatalog::Postpone(std::chrono::steady_clock::duration pause) {
  for (auto& [round, p] : pending_tables_) p.round.Postpone(pause);
  for (auto& [round, change] : changes_) {
    change.servers.Postpone(pause);
    change.workers.Postpone(pause);
  }
}

void TableCatalog::CheckDeadlines() {
  for (auto it = changes_.begin(); it != changes_.end();) {
    if (!ctx_.RoundExpired(it->second.servers)) {
      ++it;
      continue;
    }
    Commit(it->second, ctx_.state.tables[it->second.table].consistency());
    Answer(it->second, DeadlineExceededError("servers did not confirm the "
                                             "consistency change in time"));
    it = changes_.erase(it);
  }
  ForgetGoneServers();
  for (auto it = pending_tables_.begin(); it != pending_tables_.end();) {
    if (!ctx_.RoundExpired(it->second.round)) {
      ++it;
      continue;
    }
    for (const Waiter& w : it->second.waiters) {
      ctx_.out.Reply(
          w.identity, w.seq,
          DeadlineExceededError("servers " + it->second.round.Missing() +
                                " did not confirm table '" +
                                it->second.config.name() + "'"));
    }
    it = pending_tables_.erase(it);
  }
}

}  // namespace ductile
