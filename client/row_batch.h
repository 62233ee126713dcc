// A batch of row ids as a worker's sparse calls see it (Client::PullRows,
// Client::PushRows): raw ids, unsorted and with repeats, made into the
// strictly increasing keys a push or pull sends, and the map back.
//
// Invariant: keys() is strictly increasing and holds each distinct id once;
// for every position i of the ids it was made from, keys()[row(i)] equals
// ids[i]. Rows are `width` floats laid out key after key.
//
//   RowBatch batch(ids);            // ids {7, 3, 7} -> keys {3, 7}
//   batch.Expand(unique_rows, w, out);   // out rows: row 7, row 3, row 7
//   batch.Sum(grads, w, sums);           // sums: g[1], g[0] + g[2]
//
// Thread-compatible: built on one thread, then only read.
#ifndef DUCTILE_CLIENT_ROW_BATCH_H_
#define DUCTILE_CLIENT_ROW_BATCH_H_

#include <cstdint>
#include <span>
#include <vector>

#include "client/operation.h"
#include "ductile/table.h"

namespace ductile {

class RowBatch {
 public:
  RowBatch() = default;
  explicit RowBatch(std::span<const Key> ids);

  // True when `ids` are strictly increasing (already unique and sorted:
  // sent as they are, with no copy).
  static bool IsStrictlyIncreasing(std::span<const Key> ids);

  std::span<const Key> keys() const { return keys_; }
  size_t num_ids() const { return rows_.size(); }
  size_t row(size_t i) const { return rows_[i]; }

  // out[i] = unique[row(i)], row by row; `unique` holds keys().size() rows
  // and `out` num_ids() rows of `width` floats.
  void Expand(std::span<const float> unique, uint32_t width,
              std::span<float> out) const;
  // sums[k] = the sum of the rows i of `rows` with row(i) == k, added in
  // the order of i; `rows` holds num_ids() rows, `sums` keys().size().
  void Sum(std::span<const float> rows, uint32_t width,
           std::span<float> sums) const;

 private:
  std::vector<Key> keys_;
  std::vector<uint32_t> rows_;  // per id: its key's index in keys_
};

// A sparse pull or push whose ids were not strictly increasing: the data
// operation on the batch's unique keys, owning the buffers it borrows
// (the keys, and the unique rows pulled or the summed gradients pushed)
// until it is done. A pull expands its rows into the caller's `expand_into`
// as it completes, so they are there when Wait() returns.
struct RowsOperation : DataOperation {
  RowBatch batch;
  std::vector<float> rows;       // unique rows: a pull's out, a push's values
  std::span<float> expand_into;  // a pull: the caller's out

 protected:
  void OnDone(bool ok) override;
};

}  // namespace ductile

#endif  // DUCTILE_CLIENT_ROW_BATCH_H_
