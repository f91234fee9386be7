// kprop::Recent (src/kprop/recent.h): the small shared cache of values a case
// determines (the dflash model, a kvcache sequence's data).
#include "kprop/recent.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

namespace {

TEST(Recent, MakesOncePerKeyAndReturnsTheSameValue) {
  kprop::Recent<int, int, 4> recent;
  int made = 0;
  auto make = [&](int v) {
    return [&made, v] {
      ++made;
      return std::make_shared<const int>(v);
    };
  };
  const auto a = recent.get(1, make(10));
  const auto b = recent.get(1, make(99));
  EXPECT_EQ(made, 1);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(*b, 10);
}

TEST(Recent, EvictsTheLeastRecentlyUsed) {
  kprop::Recent<int, int, 2> recent;
  int made = 0;
  auto get = [&](int key) {
    return *recent.get(key, [&] {
      ++made;
      return std::make_shared<const int>(key);
    });
  };
  get(1), get(2);
  get(1);  // 1 is now the most recent: adding 3 drops 2
  get(3);
  EXPECT_EQ(made, 3);
  EXPECT_EQ(get(1), 1);
  EXPECT_EQ(made, 3);
  EXPECT_EQ(get(2), 2);  // made again
  EXPECT_EQ(made, 4);
}

TEST(Recent, ConcurrentMissesKeepOneEntry) {
  kprop::Recent<int, int, 4> recent;
  std::atomic<int> made = 0;
  std::vector<std::shared_ptr<const int>> got(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i)
    threads.emplace_back([&, i] {
      got[i] = recent.get(7, [&] {
        ++made;
        return std::make_shared<const int>(7);
      });
    });
  for (auto& t : threads) t.join();
  // Several threads may make the value, but every later lookup sees one entry.
  const auto after = recent.get(7, [] { return std::make_shared<const int>(-1); });
  EXPECT_EQ(*after, 7);
  int same = 0;
  for (const auto& g : got) same += g.get() == after.get();
  EXPECT_GE(same, 1);
  EXPECT_LE(made.load(), 8);
  // 7 stays cached while three other keys come in (N = 4).
  for (int k = 0; k < 3; ++k) recent.get(k, [k] { return std::make_shared<const int>(k); });
  EXPECT_EQ(recent.get(7, [] { return std::make_shared<const int>(-1); }).get(), after.get());
}

}  // namespace
