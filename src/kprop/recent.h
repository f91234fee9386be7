// A few most recently used values of a pure function, by key, shared across
// threads. For data a case determines that several readers of one trial
// would otherwise rebuild: the dflash model's weights, a kvcache sequence's
// Q/K/V (the reference, the same-precision baseline, the engines, the
// metamorphic derivations and the invariants each read them).
// Hand-rolled: a handful of entries searched linearly beats a hash map here,
// and no library we use offers a small thread-safe LRU.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace kprop {

template <typename Key, typename Value, size_t N>
class Recent {
 public:
  // The value for `key`, made by make() (a std::shared_ptr<const Value>,
  // called outside the lock) when none of the last N keys matches.
  template <typename Make>
  std::shared_ptr<const Value> get(const Key& key, Make&& make) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (auto hit = find(key)) return hit;
    }
    std::shared_ptr<const Value> value = make();
    const std::lock_guard<std::mutex> lock(mutex_);
    if (auto hit = find(key)) return hit;  // another thread made it meanwhile: keep one entry
    entries_.insert(entries_.begin(), {key, value});
    if (entries_.size() > N) entries_.pop_back();
    return value;
  }

 private:
  // The entry for `key`, moved to the front (most recently used first); the
  // caller holds the lock.
  std::shared_ptr<const Value> find(const Key& key) {
    for (size_t i = 0; i < entries_.size(); ++i)
      if (entries_[i].first == key) {
        const auto at = entries_.begin() + static_cast<std::ptrdiff_t>(i);
        std::rotate(entries_.begin(), at, at + 1);
        return entries_.front().second;
      }
    return nullptr;
  }
  std::mutex mutex_;
  std::vector<std::pair<Key, std::shared_ptr<const Value>>> entries_;
};

}  // namespace kprop
