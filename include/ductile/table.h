// Tables: what a server stores and how it applies pushes.
//
// A table is a map from 64-bit keys to float vectors. Its options fix the
// vector width, the update rule applied to every push, and the initial value
// of a key never written. Tables are created through Client::CreateTable
// (any worker; creating the same name again with equal options returns the
// same id, with different options fails with kAlreadyExists).
#ifndef DUCTILE_TABLE_H_
#define DUCTILE_TABLE_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace ductile {

using Key = uint64_t;
using TableId = uint32_t;

// How a server combines a pushed vector `g` with the stored value `w`.
// Part of the wire format: never renumber.
enum class UpdateRule : int {
  kAssign = 0,    // w = g
  kAdd = 1,       // w += g
  kSgd = 2,       // w -= lr * g
  kMomentum = 3,  // v = momentum * v + g;  w -= lr * v
  kAdaGrad = 4,   // h += g^2;  w -= lr * g / (sqrt(h) + epsilon)
  kAdam = 5,      // bias-corrected Adam (Kingma & Ba), step count per key
  kCustom = 6,    // a function registered on every server (ServerOptions)
};

// Initial value of every element of a key never written.
enum class InitKind : int {
  kZeros = 0,
  kConstant = 1,  // `value`
  kUniform = 2,   // U[low, high)
  kNormal = 3,    // N(mean, stddev^2)
};

struct Initializer {
  InitKind kind = InitKind::kZeros;
  float value = 0.0f;
  float low = -0.05f;
  float high = 0.05f;
  float mean = 0.0f;
  float stddev = 0.01f;
  // Random initializers are deterministic functions of (seed, table, key,
  // element), so the value does not depend on which server holds the key.
  uint64_t seed = 1;
};

// How far workers' reads of a table may lag behind other workers' writes.
// Part of the wire format: never renumber.
enum class ConsistencyMode : int {
  kAsync = 0,  // no bound: updates applied on arrival, pulls never wait
  kSsp = 1,    // stale synchronous parallel with bound `staleness`
  kBsp = 2,    // bulk synchronous: every worker's pull at clock c sees the
               // same state, all updates with timestamp < c and none later
};

// How BSP combines the workers' pushes to one key within one clock before
// applying the table's rule once. Part of the wire format.
enum class BspCombine : int {
  // Average over the pushes (synchronous large-batch SGD), each weighted
  // by the worker batches it stands for (Client::SetPushWeight; 1 unless
  // a worker trains several batches a step): the mean over the batches.
  kMean = 0,
  kSum = 1,
};

// The contract (for a worker whose Clock() has been called c times):
//   kSsp(s): a pull returns a state containing every update with timestamp
//            <= c - s - 1 from every worker, and all of the puller's own
//            earlier updates; it waits (up to the request deadline) until
//            that holds. A worker can run at most s + 1 clocks ahead of the
//            slowest before its pulls block.
//   kBsp:    as kSsp(0), and the state is exactly "every update with
//            timestamp < c": pushes of clock c are held back and applied,
//            combined per key, once every worker has finished clock c.
//   kAsync:  no bound.
struct Consistency {
  ConsistencyMode mode = ConsistencyMode::kAsync;
  int32_t staleness = 0;  // kSsp's bound s, 0 - 1000000
  BspCombine combine = BspCombine::kMean;
};

// "async", "ssp(3)", "bsp(mean)" or "bsp(sum)".
std::string ToString(const Consistency& consistency);

// How a table's learning rate changes over the job: a push made at clock c
// (its client's Clock() count when it pushed: 0 for a client that never
// calls Clock()) is applied with learning_rate * LearningRateFactor(
// schedule, c).
// The factor is computed where the push is applied, on the servers, so
// workers need nothing but their clocks, and a BSP clock's combined push is
// applied with its clock's factor. Part of the table's options (and of the
// wire format): checkpoints, rollbacks and slot moves keep it.
struct LearningRateSchedule {
  enum class Decay : int {
    kNone = 0,    // the factor stays 1 after the warm-up
    kStep = 1,    // times `gamma` every `step_clocks` after the warm-up
    kCosine = 2,  // half a cosine from 1 down to `min_factor`, reached at
                  // `total_clocks` and kept after
  };
  // Linear warm-up: the factor is (c + 1) / warmup_clocks for c below it.
  int64_t warmup_clocks = 0;  // 0 - 2^40
  Decay decay = Decay::kNone;
  int64_t step_clocks = 0;   // kStep: >= 1
  float gamma = 0.1f;        // kStep: in (0, 1]
  int64_t total_clocks = 0;  // kCosine: > warmup_clocks, <= 2^40
  float min_factor = 0.0f;   // kCosine: in [0, 1]
};

// The factor above for a push at `clock` (negative clocks count as 0).
float LearningRateFactor(const LearningRateSchedule& schedule, int64_t clock);

// The most of the data plan's batches one worker's step may take
// (PolicyActions::SetBatchesPerStep), and the most worker batches one push
// may stand for (Client::SetPushWeight, the push's batch_weight).
inline constexpr int32_t kMaxBatchesPerStep = 64;
inline constexpr int32_t kMaxPushWeight = 1 << 16;
// The largest learning-rate factor a push may carry
// (Client::SetRateFactor).
inline constexpr float kMaxRateFactor = 1e6f;

// How a table's learning rate follows the job's global batch. A BSP clock
// combined by the mean (BspCombine::kMean) averages the pushes of every
// worker that pushed, so its global batch is `pushes` worker batches: a
// resize changes it. With kLinear that clock's rate is multiplied by
// pushes / base_pushes (the linear scaling rule), with kSqrt by its square
// root (often better for Adam). When the ratio changes, the factor moves
// from the one in force to the new one linearly over `ramp_clocks` clocks
// rather than at once. `pushes` is the most pushes any key of the table
// had in that clock on that server: the worker count for dense tables.
// Other clocks (async, SSP, BSP by the sum, whose sum grows with the
// workers already) get factor 1. Momentum needs no correction: kMomentum
// keeps v = momentum * v + g and steps by lr * v, so a new rate applies to
// the whole velocity at once (Goyal et al., 2017, section 2.1). A ramp
// under way when a server restarts ends at once on that server. Part of
// the table's options and of the wire format.
//
// kAdaScale follows the gradient noise instead (Johnson et al., "AdaScale
// SGD", 2020): with k = pushes / base_pushes and phi the noise scale in
// base global batches, the factor is the gain (phi + 1) / (phi / k + 1),
// between 1 (the gradient dominates: a larger batch adds little) and k (the
// noise dominates: linear). phi is the gradient noise scale each server
// estimates from the gradients it receives, in data-plan batches whatever
// batches a push stands for, divided by base_pushes: the job's, summed by
// the coordinator over the servers' shares (those that have folded
// kAdaScaleMinClocks clocks) and sent back to each server with the answer
// to its heartbeat, so that the whole model has one gain; until the
// coordinator has one, a server's own share's estimate once it has folded
// kAdaScaleMinClocks clocks. Before, and with no estimate anywhere
// (ServerOptions::noise_scale_sample = 0 everywhere) or none positive, the
// factor is 1. The gain moves every
// clock; with ramp_clocks each new target is approached from the factor in
// force, so the factor trails the gain. The schedule's clocks are not stretched
// by the gain (AdaScale's scale-invariant iterations are not kept).
struct BatchScaling {
  enum class Rule : int {
    kNone = 0,
    kLinear = 1,
    kSqrt = 2,
    kAdaScale = 3,
  };
  Rule rule = Rule::kNone;
  int32_t base_pushes = 1;  // 1 - 1000000: the pushes the rate is meant for
  int64_t ramp_clocks = 0;  // 0 - 2^40 (0: at once)
};

// The factor BatchScaling gives `pushes` pushes, ramp aside (1 for kNone or
// pushes < 1). `noise_scale`: the gradient noise scale in worker batches,
// for kAdaScale (0 or less: not known, factor 1).
float BatchScalingFactor(const BatchScaling& scaling, int32_t pushes,
                         double noise_scale = 0);

// Clocks a server's noise estimate must have folded before kAdaScale uses it.
inline constexpr uint64_t kAdaScaleMinClocks = 50;

// Which rows a table stores, for tables of rows by id (embedding tables
// indexed by hashed feature ids): any 64-bit key is a row id, and a row is
// created at its first push from the table's initializer; a pull of an id
// not stored reads the initializer's value and stores nothing. The
// defaults (all 0) store every pushed row for ever. Part of the table's
// options and of the wire format.
struct RowPolicy {
  // Admission: a row is stored only at the admit_after_pushes-th push of
  // its id (0 and 1: at the first). The pushes before are dropped (their
  // gradients are lost, counted in RowCounts::dropped_pushes) and pulls of
  // the id read the initializer's value. A push is one request of a worker
  // (under BSP each push combined into a clock counts). Range 0 - 65535.
  uint32_t admit_after_pushes = 0;
  // The counters of the admission filter, a count-min sketch of 4 rows
  // holding the push counts of ids not stored yet in 2 bytes each: its
  // memory is fixed, whatever the number of ids. An id whose counters all
  // collide with those of others may be admitted before its
  // admit_after_pushes-th push (false admission; never after it); more
  // counters make that rarer. Every counter is halved after as many pushes
  // of unadmitted ids as there are counters (aging), so that old counts
  // fade. The counters are kept per slot, so that they move with the
  // slot's rows: each slot that sees an unadmitted id gets a sketch of
  // max(64, admission_counters / num_slots) counters, so a table's
  // counters over all its servers stay within max(admission_counters,
  // 64 x num_slots), and a server holds its slots' share (counted in its
  // stored memory, --max_stored_mb). Checkpoints store the counts of each
  // slot, a rollback restores them as at the cut, and a slot move carries
  // them to the slot's new server. 0: 2^20 (2 MiB); else 1024 - 2^24.
  uint64_t admission_counters = 0;
  // Eviction by age: a row last updated at server clock L (the minimum
  // clock over live workers when the update was applied) is removed, its
  // optimizer state too, when the server clock reaches L + this; its id is
  // then new again. Checked when the server clock moves. After a rollback
  // or a slot move, L is the clock the row arrived at. 0: never; else
  // 1 - 2^40 (with 1, under BSP a row pushed at every clock is removed
  // as its clock's update is about to land: use 2 or more).
  int64_t evict_idle_clocks = 0;
  // Eviction by budget: after each push, the rows beyond this many (per
  // table per server) are removed, chosen by `eviction`. Pulls do not
  // count as use. Evicted rows are deleted from the next checkpoint.
  // 0: unbounded; else 1 - 2^40.
  uint64_t max_rows = 0;
  // Which rows the budget removes.
  enum class Eviction : uint8_t {
    // The least recently updated.
    kLeastRecent = 0,
    // With E rows over the budget after a push: of the 2 E +
    // kLeastUsedWindow least recently updated rows, the E pushed the fewest
    // times (ties: the least recently updated). Pushes are counted for
    // every id, stored or not (under BSP each push combined into a clock
    // counts, as for admission), in a sketch of 16 two-byte counters per
    // row of the budget (at most 2^24 counters, 32 MiB; counted in the
    // server's stored memory) that halves its counts after as many pushes,
    // so they follow what is popular now (TinyLFU's frequency sketch), and
    // an id evicted keeps its count. A push that brings about
    // max_rows - kLeastUsedWindow rows or more (a step touching more rows
    // than the budget) has its own rows compared too, so the rows in
    // frequent use stay and the rarely pushed go; a smaller push's rows
    // are the most recent and stay, and the least pushed of the oldest
    // rows go. The counts are not in checkpoints: a row restored (a
    // rollback) or moved in counts its update steps (under BSP, its
    // clocks) as its pushes.
    kLeastUsed = 1,
  };
  Eviction eviction = Eviction::kLeastRecent;
};

// kLeastUsed compares this many least recently updated rows beyond twice
// those over the budget.
inline constexpr int kLeastUsedWindow = 64;

struct TableOptions {
  // Unique name, 1-128 characters of [A-Za-z0-9_.-].
  std::string name;
  // Floats per key. 0 makes a variable-width table: each key's width is set
  // by its first push (with explicit lengths) and never changes; until
  // then, a pull of any length reads the initial value.
  uint32_t value_width = 1;
  UpdateRule rule = UpdateRule::kAdd;
  // Optimizer hyper-parameters (used by the rules named).
  float learning_rate = 0.01f;  // kSgd, kMomentum, kAdaGrad, kAdam
  float momentum = 0.9f;        // kMomentum
  float beta1 = 0.9f;           // kAdam
  float beta2 = 0.999f;         // kAdam
  float epsilon = 1e-8f;        // kAdaGrad, kAdam
  // Of learning_rate (kSgd, kMomentum, kAdaGrad, kAdam): constant unless
  // set. Custom rules get no learning rate.
  LearningRateSchedule lr_schedule;
  // Of learning_rate, for BSP clocks combined by the mean: follows the
  // global batch when the workers change (kSgd, kMomentum, kAdaGrad,
  // kAdam).
  BatchScaling batch_scaling;
  // kCustom: name of a rule registered in ServerOptions::custom_rules.
  std::string custom_rule;
  Initializer init;
  // Reject pushes containing NaN or infinity with kInvalidArgument, leaving
  // the table unchanged.
  bool reject_non_finite = true;
  // The consistency model of this table (and so of the job that uses it).
  // Client::SetConsistency changes it while the job runs.
  Consistency consistency;
  // Admission and eviction of rows (tables of rows by id).
  RowPolicy rows;
};

// A user update rule. Called on the server's request thread with the
// stored value, the pushed vector (same length) and the key's optimizer
// state (state_floats_per_value * value.size() floats, zero-initialised).
// It must not block and must not throw.
using UpdateFunction =
    std::function<void(std::span<float> value, std::span<const float> pushed,
                       std::span<float> state)>;

struct CustomRule {
  UpdateFunction apply;
  uint32_t state_floats_per_value = 0;  // 0-4
};

}  // namespace ductile

#endif  // DUCTILE_TABLE_H_
