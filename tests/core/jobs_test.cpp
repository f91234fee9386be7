// The --jobs process pool (kprop/jobs.h) on its own: items come back in
// order whichever worker claimed them, a slow item does not hold the other
// workers back, a worker that dies leaves its items to the caller, and the
// binary case-outcome codec round-trips and rejects what is malformed.
#include "kprop/jobs.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <limits>
#include <new>
#include <string>
#include <vector>

namespace kprop {
namespace {

std::string item(int64_t n, const std::string& note) {
  return "item " + std::to_string(n) + " " + note;
}

// --jobs's default: the cores, fewer where the machine's memory holds
// fewer of the run's largest case (each job holds its own), said why.
TEST(DefaultJobs, NoMoreJobsThanTheMemoryHoldsCases) {
  const int cores = default_jobs();
  std::string note;
  EXPECT_EQ(default_jobs(1024.0, &note), cores);
  EXPECT_EQ(note, "");
  EXPECT_EQ(default_jobs(1e18, &note), 1);  // an exabyte a case: one job, which may not fit
  EXPECT_EQ(note.rfind("--jobs 1: the largest case of this run needs ~", 0), 0u) << note;
  EXPECT_NE(note.find("may run out of memory"), std::string::npos) << note;
  // A case that fits once but not twice: one job of the cores.
  std::ifstream meminfo("/proc/meminfo");
  double available_kb = 0;
  for (std::string key; meminfo >> key >> available_kb && key != "MemAvailable:";)
    meminfo.ignore(1 << 10, '\n');
  note.clear();
  if (cores > 1 && available_kb > 0) {
    EXPECT_EQ(default_jobs(available_kb * 1024 / 1.5, &note), 1);
    EXPECT_EQ(
        note.rfind(fmt::format("--jobs 1 (of {} cores): each job holds its own case, the largest ~", cores),
                   0),
        0u)
        << note;
    EXPECT_NE(note.find("--jobs N overrides"), std::string::npos) << note;
  }
}

TEST(WorkerPool, ItemsComeBackInOrderFromEveryWorker) {
  for (const int jobs : {2, 3, 5}) {
    const int64_t count = 200;
    WorkerPool pool(
        jobs, count, 8,
        [] {
          return [](int64_t n, const std::string& note) {
            if (n % 7 == 0) usleep(2000);  // slow items: the others go on meanwhile
            return item(n, note);
          };
        },
        "a");
    int64_t computed_here = 0;
    for (int64_t n = 0; n < count; ++n) {
      if (n == 100) pool.broadcast("b");  // later items may still carry the older note
      const auto got = pool.take(n);
      if (!got) {
        ++computed_here;
        continue;
      }
      const bool a = *got == item(n, "a"), b = *got == item(n, "b");
      EXPECT_TRUE(a || b) << *got;
      if (n >= 100 + 2 * 8 + 2) {
        EXPECT_TRUE(b) << *got;  // past every item allowed before the note
      }
    }
    // Every item came from a worker: none died.
    EXPECT_EQ(computed_here, 0) << jobs << " jobs";
  }
}

TEST(WorkerPool, ADeadWorkersItemsAreTheCallers) {
  const int64_t count = 60;
  WorkerPool pool(2, count, 8, [] {
    return [](int64_t n, const std::string&) -> std::string {
      if (n == 13) _exit(1);  // dies on this item, whoever claimed it
      return item(n, "");
    };
  });
  int64_t computed_here = 0;
  for (int64_t n = 0; n < count; ++n) {
    const auto got = pool.take(n);
    if (got) {
      EXPECT_EQ(*got, item(n, ""));
    } else {
      ++computed_here;
    }
    if (n == 13) {
      EXPECT_FALSE(got);  // never a result from a worker that died on it
    }
  }
  EXPECT_GE(computed_here, 1);
}

TEST(WorkerPool, PausedWorkersClaimNothingNew) {
  // Counts the items computed, across the forked workers.
  void* map =
      mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  auto* computed = new (map) std::atomic<int>(0);
  const int64_t count = 400;
  {
    WorkerPool pool(2, count, 1000, [computed] {
      return [computed](int64_t n, const std::string&) {
        usleep(500);
        computed->fetch_add(1);
        return item(n, "");
      };
    });
    ASSERT_EQ(pool.take(0), item(0, ""));
    {
      const WorkerPool::Pause hold(&pool);
      usleep(20000);  // the items they were on finish
      const int before = computed->load();
      usleep(50000);  // 200 items' worth of time
      // A worker may still finish the one item it had claimed as the pause
      // began, if a loaded machine kept it from finishing above: at most one
      // per worker, never a stream of them.
      EXPECT_LE(computed->load() - before, 2);
      EXPECT_LT(before, count);
    }
    for (int64_t n = 1; n < count; ++n) EXPECT_EQ(pool.take(n), item(n, ""));
  }
  munmap(map, sizeof(std::atomic<int>));
}

// A worker stopped while its item waits on a child of its own in its
// process group (what an --isolate check is) leaves nothing behind: the
// worker reaps that child before it exits. It was orphaned to init, which
// some containers never reap (24 zombies after a session of --mutants
// runs). This test is the orphans' subreaper, so an orphan would be its.
TEST(WorkerPool, AStoppedWorkersChildIsReapedWithIt) {
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int pids[2];
  ASSERT_EQ(pipe(pids), 0);
  std::vector<pid_t> children;
  {
    WorkerPool pool(2, 100, 4, [&pids] {
      return [&pids](int64_t n, const std::string&) -> std::string {
        if (n > 0) {
          const pid_t child = fork();  // in the worker's group, as in_child's
          if (child == 0) {
            pause();  // until a signal ends it
            _exit(0);
          }
          (void)!write(pids[1], &child, sizeof child);
          waitpid(child, nullptr, 0);
        }
        return item(n, "");
      };
    });
    ASSERT_EQ(pool.take(0), item(0, ""));
    pid_t child = 0;
    ASSERT_EQ(read(pids[0], &child, sizeof child), ssize_t(sizeof child));
    ASSERT_EQ(kill(child, 0), 0);
    children.push_back(child);
    close(pids[1]);
  }  // stops both workers mid-item
  for (pid_t child = 0; read(pids[0], &child, sizeof child) == ssize_t(sizeof child);)
    children.push_back(child);
  close(pids[0]);
  for (const pid_t child : children) {
    EXPECT_EQ(waitpid(child, nullptr, WNOHANG), -1) << "pid " << child << " was orphaned";
    EXPECT_EQ(errno, ECHILD);
  }
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST(WorkerPool, OneJobForksNothing) {
  WorkerPool pool(1, 10, 4, [] { return [](int64_t n, const std::string&) { return item(n, ""); }; });
  for (int64_t n = 0; n < 10; ++n) EXPECT_FALSE(pool.take(n));
}

CaseOutcome sample_outcome() {
  CaseOutcome o;
  o.stats.size = 42;
  o.stats.summary = "B2 H3 Nq5, mask causal";
  o.stats.dim("nq", 5).kind("mask", "causal");
  o.generation_seconds = 1.5e-4;
  o.uses = {0, 3};
  CheckResult pass;
  pass.verdict = Verdict::pass({{kErrorRatio, 0.25},
                                {"nan", std::numeric_limits<double>::quiet_NaN()},
                                {"inf", -std::numeric_limits<double>::infinity()}});
  pass.seconds = 1, pass.target_seconds = 2, pass.reference_seconds = 3;
  pass.outputs_differ = 1;
  CheckResult declined;
  declined.kind = CheckResult::Kind::declined;
  declined.reason = "f16 with D = 7";
  declined.unavailable = true;
  o.results = {pass, declined};
  return o;
}

TEST(CaseOutcomeCodec, RoundTripsEveryField) {
  const CaseOutcome o = sample_outcome();
  CaseOutcome back;
  ASSERT_TRUE(decode_case_outcome(encode_case_outcome(o), back));
  EXPECT_EQ(back.stats.size, 42);
  EXPECT_EQ(back.stats.summary, o.stats.summary);
  ASSERT_EQ(back.stats.dims.size(), 2u);
  EXPECT_EQ(back.stats.dims[1].name, "mask");
  EXPECT_EQ(back.stats.dims[1].kind, "causal");
  EXPECT_EQ(back.stats.dims[0].value, 5);
  EXPECT_EQ(back.generation_seconds, 1.5e-4);
  EXPECT_EQ(back.uses, o.uses);
  ASSERT_EQ(back.results.size(), 2u);
  const auto& m = back.results[0].verdict.measured;
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].value, 0.25);
  EXPECT_TRUE(std::isnan(m[1].value));
  EXPECT_EQ(m[2].value, -std::numeric_limits<double>::infinity());
  EXPECT_EQ(back.results[0].reference_seconds, 3);
  EXPECT_EQ(back.results[0].outputs_differ, 1);
  EXPECT_EQ(back.results[1].outputs_differ, -1);
  EXPECT_EQ(back.results[1].kind, CheckResult::Kind::declined);
  EXPECT_EQ(back.results[1].reason, "f16 with D = 7");
  EXPECT_TRUE(back.results[1].unavailable);
  EXPECT_FALSE(back.input_error);
  // The spec's error a job ran into travels whole: the caller raises it as is.
  CaseOutcome failed = sample_outcome();
  failed.input_error.emplace(Mark{"op.yaml", 14, 11}, "the mutant gone exec:x: cannot start");
  ASSERT_TRUE(decode_case_outcome(encode_case_outcome(failed), back));
  ASSERT_TRUE(back.input_error);
  EXPECT_EQ(std::string(back.input_error->what()), "op.yaml:14:11: the mutant gone exec:x: cannot start");
  EXPECT_EQ(back.input_error->mark().line, 14);
}

TEST(CaseOutcomeCodec, RejectsTruncatedAndTrailingBytes) {
  const std::string bytes = encode_case_outcome(sample_outcome());
  CaseOutcome back;
  for (size_t n = 0; n < bytes.size(); ++n) EXPECT_FALSE(decode_case_outcome(bytes.substr(0, n), back)) << n;
  EXPECT_FALSE(decode_case_outcome(bytes + "x", back));
  std::string huge_count = bytes;
  huge_count.replace(8, 8, std::string(8, '\xff'));  // the summary's length
  EXPECT_FALSE(decode_case_outcome(huge_count, back));
}

}  // namespace
}  // namespace kprop
