#include "toy_family.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <stdexcept>
#include <thread>

#include "kprop/case_yaml.h"
#include "kprop/rng.h"

namespace kprop::toy {

int& interrupting_mutant_calls() {
  static int calls = 0;
  return calls;
}

Schema Traits::domain_schema() {
  return {field::int_range("length", {0, 8}, 0, 1000, "list length"),
          field::int_range("value", {-5, 20}, -1000, 1000, "element values"),
          field::choices("mode", {"plain"}, {"plain", "wide"}, "a choices field for loader tests")};
}

Case Traits::build(Draw& draw, const Values& d) {
  Case c;
  const auto n = draw.sized(d.int_range("length"));
  for (int64_t i = 0; i < n; ++i) c.xs.push_back(static_cast<int>(draw.any(d.int_range("value"))));
  return c;
}

rc::Seq<Case> Traits::shrinks(const Case& c, const Values&) {
  std::vector<Case> out;
  for (size_t i = 0; i < c.xs.size(); ++i) {
    Case s = c;
    s.xs.erase(s.xs.begin() + static_cast<long>(i));
    out.push_back(s);
  }
  for (size_t i = 0; i < c.xs.size(); ++i)
    if (c.xs[i] != 0) {
      Case s = c;
      s.xs[i] = c.xs[i] / 2;
      out.push_back(s);
    }
  return rc::seq::fromContainer(out);
}

std::string Traits::in_domain(const Case& c, const Values& d) {
  if (std::string why = outside_int_range(d, "length", static_cast<int64_t>(c.xs.size())); !why.empty())
    return why;
  for (int x : c.xs)
    if (std::string why = outside_int_range(d, "value", x); !why.empty()) return why;
  return "";
}

double Traits::case_bytes(const Case& c) {
  return static_cast<double>(c.xs.size() * sizeof(int) + sizeof(Case) + sizeof(Result));
}

CaseSize Traits::max_case_bytes(const Values& d) {
  const int64_t n = d.int_range("length").hi;
  return {static_cast<double>(n) * sizeof(int) + sizeof(Case) + sizeof(Result), fmt::format("length {}", n),
          "length"};
}

YAML::Node Traits::to_yaml(const Case& c) {
  YAML::Node n(YAML::NodeType::Map);
  n["xs"] = case_yaml::list(c.xs);
  return n;
}

Case Traits::from_yaml(const YAML::Node& n) {
  case_yaml::expect_keys(n, {"xs"}, "toy case");
  return {case_yaml::read_list<int>(n, "xs")};
}

CaseStats Traits::stats(const Case& c) {
  return {static_cast<int64_t>(c.xs.size()), fmt::format("{} elements", c.xs.size())};
}

namespace {
long sum(const Case& c) {
  long s = 0;
  for (int x : c.xs) s += x;
  return s;
}
uint64_t list_hash(const Case& c) {
  uint64_t h = c.xs.size();
  for (size_t i = 0; i < c.xs.size(); ++i) h = rng::hash(h, uint64_t(int64_t(c.xs[i])), i);
  return h;
}
}  // namespace

KPROP_REGISTER_FAMILY(Traits, [](FamilyDef<Traits>& f) {
  f.implementation({"reference", ImplKind::reference, "plain sum"},
                   [](const Case& c) { return Result{sum(c)}; });
  f.mutant("drops_last", "ignores the last element of lists of 3 or more", [](const Case& c) {
    Case d = c;
    if (d.xs.size() >= 3) d.xs.pop_back();
    return Result{sum(d)};
  });
  f.mutant("throws_on_13", "throws when an element is 13", [](const Case& c) {
    for (int x : c.xs)
      if (x == 13) throw std::runtime_error("unlucky");
    return Result{sum(c)};
  });
  f.mutant("segfaults", "dereferences null when an element is 7", [](const Case& c) {
    for (int x : c.xs)
      if (x == 7) {
        volatile int* null = nullptr;
        return Result{*null};
      }
    return Result{sum(c)};
  });
  f.mutant("hangs", "loops forever when an element is 7", [](const Case& c) {
    for (int x : c.xs)
      while (x == 7) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return Result{sum(c)};
  });
  f.implementation({"no_device", ImplKind::optimized, "needs hardware this machine lacks", "cuda"},
                   [](const Case&) -> Result { throw TargetUnavailable("no CUDA device"); });
  // A device lost mid-run: sizes ramp up, so lists of 7+ come after shorter ones.
  f.implementation(
      {"loses_device", ImplKind::optimized, "right, until a list of 7+ elements: then unavailable", "cuda"},
      [](const Case& c) {
        if (c.xs.size() >= 7) throw TargetUnavailable("device lost");
        return Result{sum(c)};
      });
  // Unavailable on a one-element list: with lists of 2, a metamorphic
  // invariant's derived case (a half) finds it lost after the target ran.
  f.implementation(
      {"loses_device_on_one", ImplKind::optimized, "right, but unavailable on a one-element list", "cuda"},
      [](const Case& c) {
        if (c.xs.size() == 1) throw TargetUnavailable("device lost");
        return Result{sum(c)};
      });
  f.implementation({"wrong_then_lost", ImplKind::optimized,
                    "drops the last element of lists of 3 to 6; unavailable from 7 elements on", "cuda"},
                   [](const Case& c) {
                     if (c.xs.size() >= 7) throw TargetUnavailable("device lost");
                     Case d = c;
                     if (d.xs.size() >= 3) d.xs.pop_back();
                     return Result{sum(d)};
                   });
  // A built-in CUDA target on a pretend device (one): it starts "CUDA" in
  // the process it runs in (kprop/target_call.h), and is right.
  f.implementation(
      {"pretend_cuda", ImplKind::optimized, "right, as a CUDA target on a pretend device", "cuda"},
      FamilyDef<Traits>::on_cuda_device([] { return 1; }, [](const Case& c) { return Result{sum(c)}; }));
  // Tells where a case ran: declines it in any process but the one that
  // registered the family (a --jobs worker forked from it).
  f.implementation({"declines_in_forked_workers", ImplKind::optimized,
                    "right in the process that loaded it; declines every case in a forked worker"},
                   [loader = getpid()](const Case& c) {
                     if (getpid() != loader) throw Unsupported("run in a forked worker");
                     return Result{sum(c)};
                   });
  f.implementation({"declines_short", ImplKind::optimized, "supports only lists of 7 or more elements"},
                   [](const Case& c) {
                     if (c.xs.size() < 7)
                       throw Unsupported(fmt::format("needs 7+ elements, got {}", c.xs.size()));
                     return Result{sum(c)};
                   });
  // Half and two thirds of the domain declined, the shares of a kernel that
  // takes 2 of 4 dtypes and of one that takes 1 of 3: by a hash of the list
  // (its sum is no fair coin: the values drawn lean to 0 and the ends).
  f.implementation({"takes_half", ImplKind::optimized, "declines lists whose hash is odd"},
                   [](const Case& c) {
                     if (list_hash(c) % 2 != 0) throw Unsupported("odd hash");
                     return Result{sum(c)};
                   });
  f.implementation({"takes_a_third", ImplKind::optimized, "declines lists whose hash is not a multiple of 3"},
                   [](const Case& c) {
                     if (list_hash(c) % 3 != 0) throw Unsupported("hash not a multiple of 3");
                     return Result{sum(c)};
                   });
  f.mutant("interrupts_while_shrinking",
           "drops the last element of lists of 3+, and sends itself SIGINT the second time it does "
           "when a SIGINT handler is installed (a Ctrl-C while the failure is being shrunk)",
           [](const Case& c) {
             int& failing_calls = interrupting_mutant_calls();
             Case d = c;
             if (d.xs.size() >= 3 && d.xs.back() != 0) {
               d.xs.pop_back();
               struct sigaction current {};
               sigaction(SIGINT, nullptr, &current);
               if (++failing_calls == 2 && current.sa_handler != SIG_DFL) std::raise(SIGINT);
             }
             return Result{sum(d)};
           });
  f.invariant({"matches_reference",
               "sum equals the reference",
               {field::integer("slack", 0, 0, 100, "allowed difference")}},
              [](Trial<Traits>& t, const Values& p) {
                const long diff = t.target().sum - t.reference().sum;
                if (std::labs(diff) <= p.integer("slack")) return Verdict::pass();
                return Verdict::fail(
                    fmt::format("sum {} != {}", t.target().sum, t.reference().sum),
                    {{"target", double(t.target().sum)}, {"reference", double(t.reference().sum)}});
              });
  f.invariant({"sum_parity", "the sum's parity equals the reference's", {}}, [](Trial<Traits>& t,
                                                                                const Values&) {
    if ((t.target().sum - t.reference().sum) % 2 == 0) return Verdict::pass();
    return Verdict::fail(fmt::format("sum {} and {} differ in parity", t.target().sum, t.reference().sum));
  });
  f.invariant({"only_long_lists", "discards everything shorter than 100", {}},
              [](Trial<Traits>& t, const Values&) {
                if (t.input().xs.size() < 100) return Verdict::discard("list too short");
                return Verdict::pass();
              });
  f.invariant(
      {"reference_sums_its_list", "the reference's sum is the list's (reads no output of the target)", {}},
      [](Trial<Traits>& t, const Values&) {
        long s = 0;
        for (int x : t.input().xs) s += x;
        if (t.reference().sum == s) return Verdict::pass();
        return Verdict::fail(fmt::format("reference sum {} != {}", t.reference().sum, s));
      });
  // A metamorphic relation: the target on the list's two halves (derived
  // cases) adds up to the target on the list.
  f.invariant({"halves_add_up", "the sums of the two halves add up to the sum", {}},
              [](Trial<Traits>& t, const Values&) {
                const size_t half = t.input().xs.size() / 2;
                Case a, b;
                a.xs.assign(t.input().xs.begin(), t.input().xs.begin() + long(half));
                b.xs.assign(t.input().xs.begin() + long(half), t.input().xs.end());
                const long parts = t.run_target(a).sum + t.run_target(b).sum;
                if (parts == t.target().sum) return Verdict::pass();
                return Verdict::fail(fmt::format("halves sum to {}, the list to {}", parts, t.target().sum));
              });
  // A check slower than the case timeout whose target is fast: the
  // timeout limits target calls, so this is no hang.
  f.invariant({"slow_check",
               "waits `seconds` after the target's run, then holds",
               {field::real("seconds", 0, 0, 10, "how long the check itself takes")}},
              [](Trial<Traits>& t, const Values& p) {
                (void)t.target();
                std::this_thread::sleep_for(std::chrono::duration<double>(p.real("seconds")));
                return Verdict::pass();
              });
  f.reads({{"matches_reference", {"*"}},
           {"sum_parity", {"*"}},
           {"only_long_lists", {}},
           {"reference_sums_its_list", {}},
           {"halves_add_up", {"*"}},
           {"slow_check", {"*"}}});
});

}  // namespace kprop::toy
