// Nodes taken out of a node-based map (its extract()), to be freed when
// their holder is destroyed, wherever that is: a thread of its own frees
// many rows of many MB without holding up the thread that took them out.
#ifndef DUCTILE_UTIL_TAKEN_NODES_H_
#define DUCTILE_UTIL_TAKEN_NODES_H_

#include <cstddef>
#include <iterator>
#include <utility>
#include <vector>

namespace ductile {

template <typename Map>
class TakenNodes {
 public:
  size_t size() const { return nodes_.size(); }
  // Takes `it`'s node out of `map`; returns the iterator after it.
  typename Map::iterator Take(Map& map, typename Map::iterator it) {
    const auto next = std::next(it);
    nodes_.push_back(map.extract(it));
    return next;
  }

 private:
  std::vector<typename Map::node_type> nodes_;
};

}  // namespace ductile

#endif  // DUCTILE_UTIL_TAKEN_NODES_H_
