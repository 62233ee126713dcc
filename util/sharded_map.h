// A hash map of many rows that never stalls its thread to grow: the keys
// are spread over kShards std::unordered_maps by a hash of their own, so
// that each growth rehashes one shard, 1/kShards of the rows. One
// std::unordered_map of 24 million rows held its server's request thread
// for over 5 s when it rehashed (every node relinked, each a cache miss),
// long enough for the coordinator to declare the server dead.
//
// The shards fill evenly, so with one load factor they would all grow at
// once, which is the one large rehash again in 256 pieces back to back
// (measured: pushes of 262,144 new rows took 0.6-1 s and 4 s at each
// doubling). Shard i's maximum load factor is 0.7 * 2^(i / kShards)
// instead: the shards' points of growth are spread evenly over each
// doubling of the map, a few shards per push of that size.
//
// The subset of std::unordered_map's interface the tables use, with its
// semantics: find, count, at, operator[], try_emplace, erase (by iterator,
// returning the next one, or by key), extract (a node to free elsewhere,
// util/taken_nodes.h), clear, size, forward iteration over pairs
// <const K, V>. Iterators and references stay valid as std::unordered_map's
// do (a node never moves: rehashing a shard relinks its nodes); the order
// of iteration is unspecified. Not thread-safe.
#ifndef DUCTILE_UTIL_SHARDED_MAP_H_
#define DUCTILE_UTIL_SHARDED_MAP_H_

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <unordered_map>
#include <utility>

namespace ductile {

template <typename K, typename V, size_t kShards = 256>
class ShardedMap {
  static_assert(kShards > 0 && (kShards & (kShards - 1)) == 0,
                "a power of two");
  using Shard = std::unordered_map<K, V>;

  template <bool kConst>
  class Iter {
    using Map = std::conditional_t<kConst, const ShardedMap, ShardedMap>;
    using Inner = std::conditional_t<kConst, typename Shard::const_iterator,
                                     typename Shard::iterator>;

   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = typename Shard::value_type;
    using difference_type = std::ptrdiff_t;
    using reference =
        std::conditional_t<kConst, const value_type&, value_type&>;
    using pointer = std::conditional_t<kConst, const value_type*, value_type*>;

    Iter() = default;
    // A mutable iterator converts to a const one.
    template <bool kOther, typename = std::enable_if_t<kConst && !kOther>>
    Iter(const Iter<kOther>& other)  // NOLINT(runtime/explicit)
        : map_(other.map_), shard_(other.shard_), it_(other.it_) {}

    reference operator*() const { return *it_; }
    pointer operator->() const { return &*it_; }
    Iter& operator++() {
      ++it_;
      SkipEmpty();
      return *this;
    }
    Iter operator++(int) {
      Iter before = *this;
      ++*this;
      return before;
    }
    friend bool operator==(const Iter& a, const Iter& b) {
      return a.shard_ == b.shard_ && (a.shard_ == kShards || a.it_ == b.it_);
    }

   private:
    friend class ShardedMap;
    template <bool>
    friend class Iter;
    // At `it` of shard `shard`, or at the first element from there on.
    Iter(Map* map, size_t shard, Inner it) : map_(map), shard_(shard), it_(it) {
      SkipEmpty();
    }
    void SkipEmpty() {
      while (shard_ < kShards && it_ == map_->shards_[shard_].end()) {
        if (++shard_ < kShards) it_ = map_->shards_[shard_].begin();
      }
    }

    Map* map_ = nullptr;
    size_t shard_ = kShards;  // kShards: the end
    Inner it_{};
  };

 public:
  using key_type = K;
  using mapped_type = V;
  using value_type = typename Shard::value_type;
  using node_type = typename Shard::node_type;
  using iterator = Iter<false>;
  using const_iterator = Iter<true>;
  static constexpr size_t shards() { return kShards; }

  ShardedMap() {
    for (size_t i = 0; i < kShards; ++i) Stagger(i);
  }
  ShardedMap(const ShardedMap&) = default;
  ShardedMap& operator=(const ShardedMap&) = default;
  // A map moved from is empty (its shards' nodes went with the move).
  ShardedMap(ShardedMap&& other) noexcept
      : shards_(std::move(other.shards_)),
        size_(std::exchange(other.size_, 0)) {}
  ShardedMap& operator=(ShardedMap&& other) noexcept {
    shards_ = std::move(other.shards_);
    size_ = std::exchange(other.size_, 0);
    return *this;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  iterator begin() { return iterator(this, 0, shards_[0].begin()); }
  iterator end() { return iterator(this, kShards, {}); }
  const_iterator begin() const {
    return const_iterator(this, 0, shards_[0].begin());
  }
  const_iterator end() const { return const_iterator(this, kShards, {}); }

  iterator find(const K& key) {
    const size_t s = ShardOf(key);
    auto it = shards_[s].find(key);
    return it == shards_[s].end() ? end() : iterator(this, s, it);
  }
  const_iterator find(const K& key) const {
    const size_t s = ShardOf(key);
    auto it = shards_[s].find(key);
    return it == shards_[s].end() ? end() : const_iterator(this, s, it);
  }
  size_t count(const K& key) const { return shards_[ShardOf(key)].count(key); }
  V& at(const K& key) { return shards_[ShardOf(key)].at(key); }
  const V& at(const K& key) const { return shards_[ShardOf(key)].at(key); }

  template <typename... Args>
  std::pair<iterator, bool> try_emplace(const K& key, Args&&... args) {
    const size_t s = ShardOf(key);
    auto [it, added] = shards_[s].try_emplace(key, std::forward<Args>(args)...);
    size_ += added;
    return {iterator(this, s, it), added};
  }
  V& operator[](const K& key) { return try_emplace(key).first->second; }

  // Returns the iterator after `it`.
  iterator erase(const_iterator it) {
    const size_t s = it.shard_;
    --size_;
    return iterator(this, s, shards_[s].erase(it.it_));
  }
  iterator erase(iterator it) { return erase(const_iterator(it)); }
  size_t erase(const K& key) {
    const size_t n = shards_[ShardOf(key)].erase(key);
    size_ -= n;
    return n;
  }
  node_type extract(const_iterator it) {
    --size_;
    return shards_[it.shard_].extract(it.it_);
  }
  void clear() {
    for (size_t i = 0; i < kShards; ++i) {
      Shard().swap(shards_[i]);  // its buckets freed too
      Stagger(i);
    }
    size_ = 0;
  }
  // Shard i's buckets (how far it has grown; tests and diagnostics).
  size_t bucket_count(size_t i) const { return shards_[i].bucket_count(); }
  // Shard i's maximum load factor (above).
  static float MaxLoadFactor(size_t i) {
    return 0.7f * std::exp2(static_cast<float>(i) / kShards);
  }

  // Which shard holds `key`: the top bits of a multiplicative hash, so that
  // keys in any pattern (consecutive ids, one slot's keys) spread evenly,
  // and independently of the shards' own buckets (the key modulo a prime).
  static size_t ShardOf(const K& key) {
    if constexpr (kShards == 1) {
      return 0;
    } else {
      const uint64_t h =
          static_cast<uint64_t>(std::hash<K>()(key)) * 0x9E3779B97F4A7C15ull;
      return static_cast<size_t>(h >> (64 - Log2(kShards)));
    }
  }

 private:
  static constexpr int Log2(size_t n) { return n <= 1 ? 0 : 1 + Log2(n / 2); }
  void Stagger(size_t i) { shards_[i].max_load_factor(MaxLoadFactor(i)); }

  std::array<Shard, kShards> shards_;
  size_t size_ = 0;
};

}  // namespace ductile

#endif  // DUCTILE_UTIL_SHARDED_MAP_H_
