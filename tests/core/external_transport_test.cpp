// The external transport against hostile or stuck workers: reply headers are
// checked before any payload is sized, Ctrl-C stops a wait on a hung worker,
// a worker's whole process tree dies with it, and the handshake timeout says
// what it waited for.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "kprop/errors.h"
#include "kprop/external.h"

namespace {
namespace fs = std::filesystem;
using kprop::external::Message;
using kprop::external::TargetFailure;
using kprop::external::Tensor;
using kprop::external::TransportOptions;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/kprop_external_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

void write_bytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

TransportOptions toy_options(double timeout_s = 5) {
  TransportOptions o;
  o.family = "toy";
  o.ops = {{"toy.op", "kprop_toy_op", {}}};
  o.call_timeout_s = timeout_s;
  return o;
}

std::vector<uint8_t> hello_reply(const std::string& op) {
  return kprop::external::encode_frame({{"ok", true}, {"abi_version", KPROP_ABI_VERSION}, {"ops", {op}}}, {});
}

// A worker that does not parse its requests: it answers the handshake, waits
// for the first byte of a call, sends `reply` (whatever it asks), then
// `then` (a shell command; sleeps by default).
struct CannedWorker {
  TempDir dir;
  std::string target;
  std::vector<uint8_t> reply;
  explicit CannedWorker(const nlohmann::json& reply_header, std::vector<uint8_t> payload = {},
                        const std::string& then = "exec sleep 300") {
    reply = kprop::external::encode_frame(reply_header, {});
    reply.insert(reply.end(), payload.begin(), payload.end());
    write_bytes(dir.path / "hello", hello_reply("toy.op"));
    write_bytes(dir.path / "reply", reply);
    // The whole hello request is read first (its 8-byte head: magic, then the
    // JSON's length as a little-endian u32), so the one byte waited for is the
    // call's: a worker that read only one byte of the hello could answer the
    // call before it was made.
    target = fmt::format(
        "exec:cat {}; n=$(head -c 8 | od -An -tu4 -j4 -N4 | tr -d ' '); head -c \"$n\" > /dev/null; "
        "head -c 1 > /dev/null; cat {}; {}",
        (dir.path / "hello").string(), (dir.path / "reply").string(), then);
  }
};

Message toy_request() {
  Message m;
  m.op = "toy.op";
  const std::vector<double> x = {1, 2};
  m.input(Tensor::of("x", KPROP_F32, {2}, x));
  m.output("o", KPROP_F32, {2, 3});
  return m;
}

// What one call of `toy_request()` fails with (TargetFailure's message), or
// "" where the call was accepted.
std::string call_error(kprop::external::Transport& transport) {
  try {
    transport.call(toy_request());
  } catch (const TargetFailure& e) {
    return e.what();
  }
  return "";
}

// The reply is refused as an error of the case (never an allocation, never a
// hang); returns the message.
std::string refused(const nlohmann::json& reply_header) {
  CannedWorker worker(reply_header);
  auto transport = kprop::external::open_target(worker.target, toy_options());
  try {
    transport->call(toy_request());
  } catch (const TargetFailure& e) {
    EXPECT_EQ(e.kind(), "error") << e.what();
    return e.what();
  }
  ADD_FAILURE() << "the reply was accepted";
  return "";
}

nlohmann::json ok_with(nlohmann::json tensors) {
  return {{"ok", true}, {"tensors", std::move(tensors)}};
}

TEST(ExternalSizes, OverflowingShapesHaveNoSize) {
  const std::vector<int64_t> huge = {int64_t(1) << 62, 4};
  EXPECT_FALSE(kprop::external::checked_nbytes(huge, KPROP_F32));
  EXPECT_FALSE(kprop::external::checked_nbytes({-1, 4}, KPROP_F32));
  EXPECT_FALSE(kprop::external::checked_nbytes({2, 3}, 99));
  EXPECT_EQ(kprop::external::checked_nbytes({2, 3}, KPROP_F64), 48u);
  EXPECT_EQ(kprop::external::checked_nbytes({}, KPROP_I8), 1u);
  EXPECT_THROW(Tensor::declare("x", KPROP_F32, huge).numel(), std::length_error);
  EXPECT_THROW(Tensor::declare("x", KPROP_F32, huge).nbytes(), std::length_error);
}

// A boolean output reads 0 or 1 and nothing else: the poison of an entry
// the kernel did not write read as true (dflash's mask, beam's done). An
// integer output's poison is 0x5A bytes (90 in u8), not 0xFF (-1 in i32,
// which contracts ask for: an unwritten -1 entry read as right).
TEST(ExternalReply, ABooleanOutputIsZeroOrOne) {
  EXPECT_EQ(kprop::external::poison_byte(KPROP_U8), 0x5A);
  EXPECT_EQ(kprop::external::poison_byte(KPROP_I32), 0x5A);
  EXPECT_EQ(kprop::external::poison_byte(KPROP_F32), 0xFF);
  const std::vector<int64_t> flags = {0, 1, 1, 0};
  EXPECT_EQ(Tensor::of_ints("mask", KPROP_U8, {2, 2}, flags).to_flags("dflash.tree_inputs"), flags);
  try {
    Tensor::of_ints("mask", KPROP_U8, {2, 2}, std::vector<int64_t>{0, 1, 0x5A, 0})
        .to_flags("dflash.tree_inputs");
    ADD_FAILURE() << "90 read as a flag";
  } catch (const kprop::external::TargetFailure& e) {
    EXPECT_EQ(e.kind(), "error");
    EXPECT_STREQ(e.what(),
                 "dflash.tree_inputs: output mask holds 90 at element 2: a boolean output is 0 or 1 (the "
                 "poison: an entry the kernel did not write)");
  }
  // Another value is named as it is (the poison's words are for the poison).
  for (const int64_t other : {2, 255}) try {
      Tensor::of_ints("done", KPROP_U8, {2}, std::vector<int64_t>{1, other}).to_flags("beam.step");
      ADD_FAILURE() << other << " read as a flag";
    } catch (const kprop::external::TargetFailure& e) {
      EXPECT_EQ(
          std::string(e.what()),
          fmt::format("beam.step: output done holds {} at element 1: a boolean output is 0 or 1", other));
    }
}

TEST(ExternalReply, AHugeTensorIsRefusedBeforeAllocating) {
  // 3 GiB of f32 where the request declared o f32[2,3]: no 3 GB allocation, no wait for the bytes.
  const std::string why = refused(ok_with({{{"name", "o"}, {"dtype", "f32"}, {"shape", {805306368}}}}));
  EXPECT_NE(why.find("reply refused before reading its payload"), std::string::npos) << why;
  EXPECT_NE(why.find("o f32[805306368] (3221225472 bytes), the request declared o f32[2,3]"),
            std::string::npos)
      << why;
}

TEST(ExternalReply, AnOverflowingShapeIsRefused) {
  const std::string why =
      refused(ok_with({{{"name", "o"}, {"dtype", "f32"}, {"shape", {int64_t(1) << 62, 4}}}}));
  EXPECT_NE(why.find("o f32[4611686018427387904,4] (no valid size)"), std::string::npos) << why;
  const std::string negative = refused(ok_with({{{"name", "o"}, {"dtype", "f32"}, {"shape", {-2, -3}}}}));
  EXPECT_NE(negative.find("no valid size"), std::string::npos) << negative;
  const std::string past_int64 =
      refused(ok_with({{{"name", "o"}, {"dtype", "f32"}, {"shape", {uint64_t(1) << 63, 1}}}}));
  EXPECT_NE(past_int64.find("the request declared o f32[2,3]"), std::string::npos) << past_int64;
}

TEST(ExternalReply, EveryMismatchIsNamed) {
  const auto o = [](const char* name, const char* dtype, nlohmann::json shape) {
    return nlohmann::json{{"name", name}, {"dtype", dtype}, {"shape", std::move(shape)}};
  };
  EXPECT_NE(refused(ok_with(nlohmann::json::array({o("o", "f64", {2, 3})})))
                .find("o f64[2,3] (48 bytes), the request declared o f32[2,3]"),
            std::string::npos);
  EXPECT_NE(refused(ok_with(nlohmann::json::array({o("p", "f32", {2, 3})})))
                .find("tensor 'p' was not asked for (the request declared: o)"),
            std::string::npos);
  EXPECT_NE(refused(ok_with(nlohmann::json::array({o("o", "f32", {2, 3}), o("o", "f32", {2, 3})})))
                .find("tensor 'o' is listed twice"),
            std::string::npos);
  EXPECT_NE(refused(ok_with(nlohmann::json::array())).find("the reply has no output 'o'"), std::string::npos);
  EXPECT_NE(
      refused(ok_with(nlohmann::json::array({o("o", "float32", {2, 3})})))
          .find("tensor 'o' has unknown dtype 'float32' (the request declared o f32[2,3]; dtype names: f32, "
                "f64"),
      std::string::npos);
  EXPECT_NE(refused(ok_with(nlohmann::json::array({o("o", "f32", {2.5, 3})}))).find("not a list of integers"),
            std::string::npos);
  EXPECT_NE(refused(ok_with({{{"name", "o"}}})).find("lacks a name, dtype or shape"), std::string::npos);
  EXPECT_NE(refused(ok_with("o")).find("\"tensors\" is not a list"), std::string::npos);
  EXPECT_NE(
      refused(
          {{"ok", false}, {"error", "boom"}, {"tensors", nlohmann::json::array({o("o", "f32", {1 << 30})})}})
          .find("a reply that is not ok carries tensors"),
      std::string::npos);
  // ok together with an error (or a decline) is a contradiction, not a pass.
  for (const char* key : {"error", "unsupported", "unavailable"}) {
    nlohmann::json reply = ok_with(nlohmann::json::array({o("o", "f32", {2, 3})}));
    reply[key] = key == std::string("error") ? nlohmann::json("boom") : nlohmann::json(true);
    EXPECT_NE(
        refused(reply).find("a reply that is ok also has \"error\", \"unsupported\" or \"unavailable\""),
        std::string::npos)
        << key;
  }
  // Tensors without "ok": the missing key is named.
  EXPECT_NE(refused({{"tensors", nlohmann::json::array({o("o", "f32", {2, 3})})}})
                .find("the reply has tensors but no \"ok\": true"),
            std::string::npos);
}

// A handshake reply without abi_version names the key, not "version -1".
TEST(ExternalHandshake, AReplyWithoutAbiVersionSaysSo) {
  TempDir dir;
  write_bytes(dir.path / "hello", kprop::external::encode_frame({{"ok", true}, {"ops", {"toy.op"}}}, {}));
  try {
    auto transport = kprop::external::open_target(
        fmt::format("exec:cat {}; exec sleep 300", (dir.path / "hello").string()), toy_options());
    transport->call(toy_request());
    ADD_FAILURE() << "a handshake without abi_version was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("its handshake reply has no \"abi_version\""), std::string::npos)
        << e.what();
  }
}

// A payload shorter than its header's tensors (f16 bytes under an f32
// header) is said as that, not only as a slow call.
TEST(ExternalReply, APayloadShortOfItsHeaderIsSaid) {
  CannedWorker worker(ok_with({{{"name", "o"}, {"dtype", "f32"}, {"shape", {2, 3}}}}),
                      std::vector<uint8_t>(12, 0), "exit 0");
  auto transport = kprop::external::open_target(worker.target, toy_options());
  const std::string e = call_error(*transport);
  EXPECT_NE(e.find("its reply header came, then 12 of the 24 payload bytes it announces"), std::string::npos)
      << (e.empty() ? "a short payload was accepted" : e);
}

// A worker that answers one request twice: the second reply is never read
// as the answer to the next call (it would be judged against that case).
// A header is refused unless it is one: nested no deeper than 16 levels (a
// worker's 3-million-level array crashed prop_runner while printing it) and
// with the fields kprop reads of their types (a number as `error`, a string
// as `ops`, were exceptions of kprop's: "crashed", "internal error").
TEST(ExternalReply, AHeaderTooDeepOrOfTheWrongTypesIsRefused) {
  nlohmann::json deep = 1;
  for (int i = 0; i < 100; ++i) deep = nlohmann::json::array({deep});
  EXPECT_NE(refused({{"ok", true}, {"tensors", deep}}).find("nested deeper than 16 levels"),
            std::string::npos);
  EXPECT_NE(refused({{"ok", false}, {"error", 5}}).find("'error' must be a string"), std::string::npos);
  EXPECT_NE(refused({{"ok", "yes"}}).find("'ok' must be true or false"), std::string::npos);
  CannedWorker worker(ok_with(nlohmann::json::array()));
  write_bytes(worker.dir.path / "hello",
              kprop::external::encode_frame(
                  {{"ok", true}, {"abi_version", KPROP_ABI_VERSION}, {"ops", "toy.op"}}, {}));
  try {
    kprop::external::open_target(worker.target, toy_options());
    ADD_FAILURE() << "a handshake with ops as a string was accepted";
  } catch (const kprop::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'ops' must be a list of op names"), std::string::npos) << e.what();
  }
}

// A worker's error text with a NUL in it is said whole (a C string ended
// there: "before" alone, and what came after was lost).
TEST(ExternalReply, AnErrorWithANulInItIsSaidWhole) {
  const std::string e = refused({{"ok", false}, {"error", std::string("before\0after", 12)}});
  EXPECT_NE(e.find("before\\x00after"), std::string::npos) << e;
}

TEST(ExternalReply, ASecondReplyToOneCallIsAnError) {
  const nlohmann::json header = ok_with({{{"name", "o"}, {"dtype", "f32"}, {"shape", {2, 3}}}});
  const std::vector<uint8_t> payload(24, 7);
  {  // Both replies there when the first is read: this call fails.
    CannedWorker worker(header, payload, "exec sleep 300");
    write_bytes(worker.dir.path / "reply", [&] {
      auto twice = worker.reply;
      twice.insert(twice.end(), worker.reply.begin(), worker.reply.end());
      return twice;
    }());
    auto transport = kprop::external::open_target(worker.target, toy_options());
    const std::string e = call_error(*transport);
    EXPECT_NE(e.find(fmt::format("the reply was followed by {} more", worker.reply.size())),
              std::string::npos)
        << (e.empty() ? "a reply followed by a second one was accepted" : e);
  }
  {  // The second reply comes a second later: the next call fails, saying why.
    TempDir late;
    CannedWorker worker(header, payload,
                        "sleep 1; cat " + (late.path / "reply").string() + "; exec sleep 300");
    write_bytes(late.path / "reply", worker.reply);
    auto transport = kprop::external::open_target(worker.target, toy_options());
    const std::string first_error = call_error(*transport);
    if (!first_error.empty()) {  // a machine slow enough to see both at once
      EXPECT_NE(first_error.find("the reply was followed by"), std::string::npos) << first_error;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      const std::string e = call_error(*transport);
      EXPECT_NE(e.find("came after the reply to the previous call"), std::string::npos)
          << (e.empty() ? "the late second reply was read as the next call's" : e);
    }
  }
}

TEST(ExternalReply, AMatchingReplyIsRead) {
  std::vector<uint8_t> payload(24);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i);
  CannedWorker worker(ok_with({{{"name", "o"}, {"dtype", "f32"}, {"shape", {2, 3}}}}), payload);
  auto transport = kprop::external::open_target(worker.target, toy_options());
  const Message reply = transport->call(toy_request());
  EXPECT_EQ(reply.tensor("o").bytes, payload);
}

TEST(ExternalHandshake, TheTimeoutSaysWhatItWaitedFor) {
  TransportOptions o = toy_options(0.5);
  o.startup_timeout_s = 0.5;
  try {
    kprop::external::open_target("exec:exec sleep 300", o);
    FAIL() << "a silent worker was accepted";
  } catch (const kprop::InputError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "no reply to the handshake within 1 s (start-up allowance 0.5 s + case_timeout_s = 0.5 s)"),
              std::string::npos)
        << e.what();
  }
}

// Alive: exists and is not a zombie.
bool alive(pid_t pid) {
  const std::string stat = read_text(fmt::format("/proc/{}/stat", pid));
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

bool gone_within(pid_t pid, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (alive(pid) && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return !alive(pid);
}

pid_t wait_for_pid_file(const fs::path& path) {
  for (int i = 0; i < 3000; ++i) {  // the worker writes it at start-up; 60 s at most
    const std::string text = read_text(path);
    if (!text.empty() && text.back() == '\n') return static_cast<pid_t>(std::stol(text));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

TEST(ExternalProcesses, ASetsidGrandchildDiesWithTheWorker) {
  TempDir dir;
  write_bytes(dir.path / "hello", hello_reply("toy.op"));
  const fs::path pid_file = dir.path / "grandchild.pid";
  // The grandchild leaves the worker's process group and session, and its
  // parent (the subshell) exits at once: it is nobody's child but the runner's.
  const std::string target = fmt::format(
      "exec:(setsid sh -c 'echo $$ > {}.tmp && mv {}.tmp {}; exec sleep 300' &); cat {}; exec sleep 300",
      pid_file.string(), pid_file.string(), pid_file.string(), (dir.path / "hello").string());
  auto transport = kprop::external::open_target(target, toy_options());
  const pid_t grandchild = wait_for_pid_file(pid_file);
  ASSERT_GT(grandchild, 0);
  ASSERT_TRUE(alive(grandchild));
  transport.reset();  // shuts the worker down
  const bool gone = gone_within(grandchild, std::chrono::seconds(10));
  if (!gone) kill(grandchild, SIGKILL);
  EXPECT_TRUE(gone) << "the worker's setsid grandchild " << grandchild << " outlived it";
}

// Ctrl-C while prop_runner waits on a hung worker: it stops at once with
// exit 130, says so, and the worker is killed.
TEST(ExternalInterrupt, CtrlCStopsAWaitOnAHungWorker) {
  TempDir dir;
  write_bytes(dir.path / "hello", hello_reply("attention.fwd"));
  const fs::path ready = dir.path / "worker.pid";
  // Answers the handshake, reads the first request's first bytes (so the
  // runner is now waiting for the reply), then hangs.
  const std::string target =
      fmt::format("exec:cat {}; head -c 8 > /dev/null; echo $$ > {}.tmp && mv {}.tmp {}; exec sleep 300",
                  (dir.path / "hello").string(), ready.string(), ready.string(), ready.string());
  const std::string log = (dir.path / "runner.log").string();
  const std::string spec = std::string(KPROP_SOURCE_DIR) + "/specs/attention_fwd.yaml";
  const pid_t runner = fork();
  ASSERT_GE(runner, 0);
  if (runner == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(KPROP_RUNNER, KPROP_RUNNER, "--spec", spec.c_str(), "--no-corpus", "--seed", "1", "--case-timeout",
          "300", "--target", target.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const pid_t worker = wait_for_pid_file(ready);
  ASSERT_GT(worker, 0) << read_text(log);
  kill(runner, SIGINT);
  // Far less than the case timeout (300 s): the wait must not run to its deadline.
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 1500 && !exited; ++i) {
    exited = waitpid(runner, &status, WNOHANG) == runner;
    if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!exited) {
    kill(runner, SIGKILL);
    waitpid(runner, &status, 0);
    kill(worker, SIGKILL);
    FAIL() << "prop_runner did not stop within 30 s of Ctrl-C\n" << read_text(log);
  }
  ASSERT_TRUE(WIFEXITED(status)) << read_text(log);
  EXPECT_EQ(WEXITSTATUS(status), 130) << read_text(log);
  EXPECT_NE(read_text(log).find("interrupted"), std::string::npos) << read_text(log);
  const bool gone = gone_within(worker, std::chrono::seconds(10));
  if (!gone) kill(worker, SIGKILL);
  EXPECT_TRUE(gone) << "the hung worker outlived the runner";
}

}  // namespace
