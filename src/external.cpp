#include "kprop/external.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <limits>

#include "kprop/errors.h"
#include "kprop/family.h"

namespace kprop::external {

// ---------------------------------------------------------------- tensors
const char* dtype_name(int32_t dtype) {
  switch (dtype) {
    case KPROP_F32:
      return "f32";
    case KPROP_F64:
      return "f64";
    case KPROP_F16:
      return "f16";
    case KPROP_BF16:
      return "bf16";
    case KPROP_I8:
      return "i8";
    case KPROP_U8:
      return "u8";
    case KPROP_I32:
      return "i32";
    case KPROP_I64:
      return "i64";
    default:
      return "?";
  }
}

int32_t dtype_from_name(const std::string& name) {
  for (int32_t d = KPROP_F32; d <= KPROP_I64; ++d)
    if (name == dtype_name(d)) return d;
  throw std::runtime_error(fmt::format("unknown dtype '{}'", name));
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

namespace {
template <typename T>
void store(std::vector<uint8_t>& bytes, size_t i, T value) {
  std::memcpy(bytes.data() + i * sizeof(T), &value, sizeof(T));
}
template <typename T>
T load(const std::vector<uint8_t>& bytes, size_t i) {
  T value;
  std::memcpy(&value, bytes.data() + i * sizeof(T), sizeof(T));
  return value;
}
[[noreturn]] void no_conversion(int32_t dtype) {
  throw std::logic_error(fmt::format("kprop: no host conversion for dtype {}", dtype_name(dtype)));
}
}  // namespace

Tensor Tensor::declare(std::string name, int32_t dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

namespace {
// Stores `values` converted to the tensor's dtype; `convert(bytes, i, value)`
// knows the dtypes of one value kind (floats or integers).
template <typename Value, typename Convert>
Tensor filled(std::string name, int32_t dtype, std::vector<int64_t> shape, std::span<const Value> values,
              Convert convert) {
  Tensor t = Tensor::declare(std::move(name), dtype, std::move(shape));
  if (static_cast<size_t>(t.numel()) != values.size())
    throw std::logic_error(
        fmt::format("kprop: tensor {} has {} values for {} elements", t.name, values.size(), t.numel()));
  t.bytes.resize(t.nbytes());
  for (size_t i = 0; i < values.size(); ++i) convert(t.bytes, i, values[i]);
  return t;
}
}  // namespace

Tensor Tensor::of(std::string name, int32_t dtype, std::vector<int64_t> shape,
                  std::span<const double> values) {
  return filled(std::move(name), dtype, std::move(shape), values,
                [dtype](std::vector<uint8_t>& bytes, size_t i, double v) {
                  if (dtype == KPROP_F32) return store(bytes, i, static_cast<float>(v));
                  if (dtype == KPROP_F64) return store(bytes, i, v);
                  no_conversion(dtype);
                });
}

Tensor Tensor::of_ints(std::string name, int32_t dtype, std::vector<int64_t> shape,
                       std::span<const int64_t> values) {
  return filled(std::move(name), dtype, std::move(shape), values,
                [dtype](std::vector<uint8_t>& bytes, size_t i, int64_t v) {
                  if (dtype == KPROP_I8) return store(bytes, i, static_cast<int8_t>(v));
                  if (dtype == KPROP_U8) return store(bytes, i, static_cast<uint8_t>(v));
                  if (dtype == KPROP_I32) return store(bytes, i, static_cast<int32_t>(v));
                  if (dtype == KPROP_I64) return store(bytes, i, v);
                  no_conversion(dtype);
                });
}

std::vector<double> Tensor::to_doubles() const {
  std::vector<double> out(static_cast<size_t>(numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (dtype) {
      case KPROP_F32:
        out[i] = load<float>(bytes, i);
        break;
      case KPROP_F64:
        out[i] = load<double>(bytes, i);
        break;
      default:
        out[i] = static_cast<double>(to_ints()[i]);
    }
  }
  return out;
}

std::vector<int64_t> Tensor::to_ints() const {
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (dtype) {
      case KPROP_I8:
        out[i] = load<int8_t>(bytes, i);
        break;
      case KPROP_U8:
        out[i] = load<uint8_t>(bytes, i);
        break;
      case KPROP_I32:
        out[i] = load<int32_t>(bytes, i);
        break;
      case KPROP_I64:
        out[i] = load<int64_t>(bytes, i);
        break;
      default:
        no_conversion(dtype);
    }
  }
  return out;
}

kprop_tensor Tensor::view() const {
  kprop_tensor v{};
  if (shape.size() > KPROP_MAX_DIMS)
    throw std::logic_error(fmt::format("kprop: tensor {} has more than {} dims", name, KPROP_MAX_DIMS));
  v.data = const_cast<uint8_t*>(bytes.data());
  v.dtype = dtype;
  v.device = KPROP_HOST;
  v.ndim = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.shape[d] = shape[static_cast<size_t>(d)];
    v.strides[d] = stride;
    stride *= shape[static_cast<size_t>(d)];
  }
  return v;
}

std::string Tensor::describe() const {
  return fmt::format("{} {}[{}]", name, dtype_name(dtype), fmt::join(shape, ","));
}

const Tensor* Message::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const Tensor& Message::tensor(const std::string& name) const {
  if (const Tensor* t = find(name)) return *t;
  throw TargetFailure("error", fmt::format("{}: no tensor '{}'", op, name));
}

Message allocate_reply(const Message& request) {
  Message reply;
  reply.op = request.op;
  for (const auto& declared : request.outputs) {
    Tensor t = declared;
    t.bytes.assign(t.nbytes(), 0xFF);  // poison: NaN for floats, -1 for ints
    reply.tensors.push_back(std::move(t));
  }
  return reply;
}

kprop_tensor out_view(Message& reply, const std::string& name) {
  return reply.tensor(name).view();
}

kprop_tensor in_view(const Message& request, const std::string& name, bool optional) {
  if (const Tensor* t = request.find(name)) return t->view();
  if (optional) return kprop_tensor{};
  return request.tensor(name).view();  // throws, naming it
}

void throw_entry_error(int rc, const char* error, const std::string& op) {
  const std::string why = error[0] ? error : "(the kernel gave no message)";
  if (rc == KPROP_UNSUPPORTED) throw Unsupported(fmt::format("{}: {}", op, why));
  throw TargetFailure("error", fmt::format("{} returned {}: {}", op, rc, why));
}

Message Transport::call(const Message& request) {
  Message reply = round_trip(request);
  reply.op = request.op;
  for (const auto& declared : request.outputs) {
    const Tensor* got = reply.find(declared.name);
    if (!got)
      throw TargetFailure("error",
                          fmt::format("{}: the reply has no output '{}'", request.op, declared.name));
    if (got->dtype != declared.dtype || got->shape != declared.shape)
      throw TargetFailure("error", fmt::format("{}: output {} in the reply, expected {}", request.op,
                                               got->describe(), declared.describe()));
  }
  return reply;
}

// ---------------------------------------------------------------- frames
// "KPRP", u32 LE header length, header JSON, then the tensors' bytes back to
// back in the order the header lists them.
namespace {
constexpr char kMagic[4] = {'K', 'P', 'R', 'P'};
constexpr uint32_t kMaxHeader = 64u << 20;

nlohmann::json describe_tensors(const std::vector<Tensor>& tensors) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& t : tensors)
    list.push_back({{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}});
  return list;
}
}  // namespace

std::vector<uint8_t> encode_frame(const nlohmann::json& header, const std::vector<const Tensor*>& tensors) {
  const std::string text = header.dump();
  std::vector<uint8_t> out(kMagic, kMagic + 4);
  const uint32_t n = static_cast<uint32_t>(text.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), text.begin(), text.end());
  for (const Tensor* t : tensors) out.insert(out.end(), t->bytes.begin(), t->bytes.end());
  return out;
}

namespace {
using Clock = std::chrono::steady_clock;

// A child process with a request pipe and a reply pipe, in its own process
// group (killed as a whole) and killed if the runner dies.
class Child {
 public:
  Child(std::string describe, std::function<void(int in_fd, int out_fd)> child_main)
      : describe_(std::move(describe)), child_main_(std::move(child_main)) {}
  ~Child() { stop(); }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  bool running() const { return pid_ > 0; }

  void start() {
    signal(SIGPIPE, SIG_IGN);  // a dead worker is an EPIPE, not the runner's death
    int to_child[2], from_child[2];
    if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0)
      throw std::runtime_error(fmt::format("pipe: {}", strerror(errno)));
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error(fmt::format("fork: {}", strerror(errno)));
    if (pid == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      // The runner's crash guard must not run in the child: a crash here is
      // the target's, reported by the parent.
      for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGPIPE, SIGINT, SIGTERM})
        signal(sig, SIG_DFL);
      // Nothing may unwind out of the child into the runner's code.
      try {
        child_main_(to_child[0], from_child[1]);
      } catch (const std::exception& e) {
        fmt::print(stderr, "kprop: {}: {}\n", describe_, e.what());
        _exit(1);
      } catch (...) {
        _exit(1);
      }
      _exit(0);
    }
    setpgid(pid, pid);
    close(to_child[0]);
    close(from_child[1]);
    pid_ = pid;
    write_fd_ = to_child[1];
    read_fd_ = from_child[0];
    fcntl(write_fd_, F_SETFL, O_NONBLOCK);
    fcntl(read_fd_, F_SETFL, O_NONBLOCK);
  }

  // Closes the pipes (a worker exits on EOF), then kills the group.
  void stop() {
    if (pid_ <= 0) return;
    close_pipes();
    reap(20);
  }

  // Reaps the child after EOF or a write error and says how it ended.
  std::string death() {
    close_pipes();
    const int status = reap(200);
    if (WIFSIGNALED(status))
      return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
    if (WEXITSTATUS(status) == 127) return "exited with status 127 (command not found?)";
    return fmt::format("exited with status {}", WEXITSTATUS(status));
  }

  void kill_now() {
    if (pid_ <= 0) return;
    close_pipes();
    reap(0);
  }

  enum class Io { ok, eof, timeout };

  Io write_all(const std::vector<uint8_t>& data, Clock::time_point deadline) {
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::write(write_fd_, data.data() + done, data.size() - done);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EPIPE) return Io::eof;
      if (n < 0 && errno != EAGAIN && errno != EINTR) return Io::eof;
      const Io w = wait(write_fd_, POLLOUT, deadline);
      if (w != Io::ok) return w;
    }
    return Io::ok;
  }

  // `done` counts the bytes read so far, also when the read stops short.
  Io read_exact(uint8_t* out, size_t size, Clock::time_point deadline, size_t& done) {
    done = 0;
    while (done < size) {
      const ssize_t n = ::read(read_fd_, out + done, size - done);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n == 0) return Io::eof;
      if (errno != EAGAIN && errno != EINTR) return Io::eof;
      const Io w = wait(read_fd_, POLLIN, deadline);
      if (w != Io::ok) return w;
    }
    return Io::ok;
  }

 private:
  static Io wait(int fd, short events, Clock::time_point deadline) {
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return Io::timeout;
      pollfd p{fd, events, 0};
      const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
      if (r > 0) return Io::ok;  // readable, writable, or hung up: the next read/write tells
      if (r < 0 && errno != EINTR) return Io::eof;
    }
  }

  void close_pipes() {
    if (write_fd_ >= 0) close(write_fd_);
    if (read_fd_ >= 0) close(read_fd_);
    write_fd_ = read_fd_ = -1;
  }
  // Waits up to `polls` × 5 ms for the child to exit, then kills its whole
  // group (grandchildren included) and returns the wait status.
  int reap(int polls) {
    int status = 0;
    bool exited = false;
    for (int i = 0; i < polls && !exited; ++i) {
      exited = waitpid(pid_, &status, WNOHANG) == pid_;
      if (!exited) usleep(5000);
    }
    kill(-pid_, SIGKILL);
    if (!exited) waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

  std::string describe_;
  std::function<void(int, int)> child_main_;
  pid_t pid_ = -1;
  int write_fd_ = -1, read_fd_ = -1;
};

// Blocking frame I/O on plain fds, for the plugin host side.
bool read_fd_exact(int fd, uint8_t* out, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, out + done, size - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0 || errno != EINTR) {
      return false;
    }
  }
  return true;
}
bool write_fd_all(int fd, const std::vector<uint8_t>& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      return false;
    }
  }
  return true;
}

// Parses a header's tensor list and slices the payload that follows.
std::vector<Tensor> tensors_from(const nlohmann::json& list, const std::vector<uint8_t>& payload,
                                 size_t& offset) {
  std::vector<Tensor> out;
  if (list.is_null()) return out;
  for (const auto& item : list) {
    Tensor t = Tensor::declare(item.at("name").get<std::string>(), dtype_from_name(item.at("dtype")),
                               item.at("shape").get<std::vector<int64_t>>());
    for (int64_t s : t.shape)
      if (s < 0) throw std::runtime_error(fmt::format("tensor '{}' has a negative dimension", t.name));
    const size_t n = t.nbytes();
    if (offset + n > payload.size())
      throw std::runtime_error(fmt::format("tensor '{}' runs past the end of the frame", t.name));
    t.bytes.assign(payload.begin() + static_cast<ptrdiff_t>(offset),
                   payload.begin() + static_cast<ptrdiff_t>(offset + n));
    offset += n;
    out.push_back(std::move(t));
  }
  return out;
}

size_t payload_size(const nlohmann::json& list) {
  size_t n = 0;
  if (list.is_null()) return 0;
  for (const auto& item : list) {
    size_t count = 1;
    for (int64_t s : item.at("shape").get<std::vector<int64_t>>()) {
      if (s < 0) throw std::runtime_error("negative dimension in the header");
      count *= static_cast<size_t>(s);
    }
    n += count * kprop_dtype_size(dtype_from_name(item.at("dtype")));
  }
  return n;
}

nlohmann::json request_header(const Message& m) {
  return {{"op", m.op},
          {"attrs", m.attrs},
          {"tensors", describe_tensors(m.tensors)},
          {"outputs", describe_tensors(m.outputs)}};
}

std::vector<const Tensor*> pointers(const std::vector<Tensor>& tensors) {
  std::vector<const Tensor*> out;
  for (const auto& t : tensors) out.push_back(&t);
  return out;
}

// ---------------------------------------------------------------- the plugin host
// Runs in the forked child: serves frames by calling the plugin's entry points.
void serve_plugin(int in_fd, int out_fd, const std::vector<PluginOp>& ops,
                  const std::vector<void*>& symbols) {
  dup2(2, 1);  // a chatty plugin's printf must not corrupt the runner's stdout
  for (;;) {
    uint8_t head[8];
    if (!read_fd_exact(in_fd, head, 8)) return;
    const uint32_t n =
        uint32_t(head[4]) | uint32_t(head[5]) << 8 | uint32_t(head[6]) << 16 | uint32_t(head[7]) << 24;
    std::string text(n, '\0');
    if (!read_fd_exact(in_fd, reinterpret_cast<uint8_t*>(text.data()), n)) return;
    const auto header = nlohmann::json::parse(text);
    std::vector<uint8_t> payload(payload_size(header.value("tensors", nlohmann::json())));
    if (!read_fd_exact(in_fd, payload.data(), payload.size())) return;
    if (header.value("op", "") == "hello") {
      nlohmann::json served = nlohmann::json::array();
      for (const auto& op : ops) served.push_back(op.op);
      if (!write_fd_all(
              out_fd, encode_frame({{"ok", true}, {"abi_version", KPROP_ABI_VERSION}, {"ops", served}}, {})))
        return;
      continue;
    }
    nlohmann::json reply_header;
    Message reply;
    try {
      Message request;
      request.op = header.at("op").get<std::string>();
      request.attrs = header.value("attrs", nlohmann::json::object());
      size_t offset = 0;
      request.tensors = tensors_from(header.value("tensors", nlohmann::json()), payload, offset);
      for (const auto& item : header.value("outputs", nlohmann::json::array()))
        request.outputs.push_back(Tensor::declare(item.at("name").get<std::string>(),
                                                  dtype_from_name(item.at("dtype").get<std::string>()),
                                                  item.at("shape").get<std::vector<int64_t>>()));
      size_t k = 0;
      while (k < ops.size() && ops[k].op != request.op) ++k;
      if (k == ops.size()) throw std::runtime_error(fmt::format("no op '{}'", request.op));
      reply = allocate_reply(request);
      ops[k].invoke(symbols[k], request, reply);
      reply_header = {{"ok", true}, {"tensors", describe_tensors(reply.tensors)}};
    } catch (const Unsupported& e) {
      reply = {};
      reply_header = {{"ok", false}, {"unsupported", true}, {"error", e.what()}};
    } catch (const std::exception& e) {
      reply = {};
      reply_header = {{"ok", false}, {"error", e.what()}};
    }
    if (!write_fd_all(out_fd, encode_frame(reply_header, pointers(reply.tensors)))) return;
  }
}

// ---------------------------------------------------------------- process transports
// Both plugins (forked host) and exec workers speak frames to a child.
class ChildTransport : public Transport {
 public:
  ChildTransport(std::string target, const TransportOptions& options,
                 std::function<void(int, int)> child_main)
      : target_(std::move(target)), options_(options), child_(target_, std::move(child_main)) {}

  // Starts the child and shakes hands; setup errors are the user's (exit 2).
  void open() {
    try {
      start();
    } catch (const TargetFailure& e) {
      throw InputError({}, fmt::format("{}: {}", target_, e.what()));
    }
  }

 protected:
  Message round_trip(const Message& request) override {
    if (!child_.running()) start();  // restarted after a crash or hang
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(options_.call_timeout_s));
    const auto frame = encode_frame(request_header(request), pointers(request.tensors));
    nlohmann::json header;
    std::vector<uint8_t> payload;
    exchange(frame, deadline, request.op, header, payload);
    if (!header.value("ok", false)) {
      std::string error = header.value("error", std::string("(no error message)"));
      // The plugin host's messages already name the op.
      if (error.rfind(request.op + ":", 0) == 0) error = error.substr(request.op.size() + 1);
      if (!error.empty() && error[0] == ' ') error.erase(0, 1);
      if (header.value("unsupported", false)) throw Unsupported(fmt::format("{}: {}", request.op, error));
      throw TargetFailure("error", fmt::format("{}: target reported an error: {}", request.op, error));
    }
    Message reply;
    try {
      size_t offset = 0;
      reply.tensors = tensors_from(header.value("tensors", nlohmann::json()), payload, offset);
    } catch (const std::exception& e) {
      throw TargetFailure("error", fmt::format("{}: malformed reply: {}", request.op, e.what()));
    }
    return reply;
  }

 private:
  void start() {
    child_.start();
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& op : options_.ops) ops.push_back(op.op);
    const nlohmann::json hello = {
        {"op", "hello"}, {"abi_version", KPROP_ABI_VERSION}, {"family", options_.family}, {"ops", ops}};
    nlohmann::json header;
    std::vector<uint8_t> payload;
    // A worker may take a while to import its libraries.
    const auto deadline =
        Clock::now() + std::chrono::seconds(60) +
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.call_timeout_s));
    exchange(encode_frame(hello, {}), deadline, "hello", header, payload);
    if (!header.value("ok", false))
      throw TargetFailure("error",
                          fmt::format("refused the handshake: {}", header.value("error", std::string("?"))));
    const int version = header.value("abi_version", -1);
    if (version != KPROP_ABI_VERSION) {
      child_.kill_now();
      throw TargetFailure("error", fmt::format("speaks kprop ABI version {}, this kprop speaks {}", version,
                                               KPROP_ABI_VERSION));
    }
    std::vector<std::string> served;
    if (header.contains("ops")) served = header["ops"].get<std::vector<std::string>>();
    for (const auto& op : options_.ops) {
      if (std::find(served.begin(), served.end(), op.op) == served.end()) {
        child_.kill_now();
        throw TargetFailure("error",
                            fmt::format("does not serve op '{}' that family {} needs (it serves: {})", op.op,
                                        options_.family, served.empty() ? "none" : join(served)));
      }
    }
  }

  void exchange(const std::vector<uint8_t>& frame, Clock::time_point deadline, const std::string& op,
                nlohmann::json& header, std::vector<uint8_t>& payload) {
    auto fail = [&](Child::Io io) -> TargetFailure {
      if (io == Child::Io::timeout) {
        child_.kill_now();
        return TargetFailure("hang", fmt::format("{}: hung (no reply within case_timeout_s = {:g} s); killed",
                                                 op, options_.call_timeout_s));
      }
      return TargetFailure("crash", fmt::format("{}: the target {} during the call", op, child_.death()));
    };
    const Child::Io wrote = child_.write_all(frame, deadline);
    if (wrote == Child::Io::timeout) throw fail(wrote);
    // Read even when the write failed (the child exited): what it printed
    // before dying explains more than its exit status.
    uint8_t head[8];
    size_t got = 0;
    Child::Io io = child_.read_exact(head, 8, deadline, got);
    // Anything but our magic (even cut short by EOF) is a stray print.
    const bool stray = std::memcmp(head, kMagic, std::min<size_t>(got, 4)) != 0;
    if (!stray && wrote != Child::Io::ok) throw fail(wrote);
    if (io != Child::Io::ok && !stray) throw fail(io);
    if (stray) {
      child_.kill_now();
      throw TargetFailure("error", fmt::format("{}: the reply does not start with \"KPRP\" (is something "
                                               "printing to the protocol's stdout?)",
                                               op));
    }
    const uint32_t n =
        uint32_t(head[4]) | uint32_t(head[5]) << 8 | uint32_t(head[6]) << 16 | uint32_t(head[7]) << 24;
    if (n > kMaxHeader) {
      child_.kill_now();
      throw TargetFailure("error", fmt::format("{}: reply header of {} bytes", op, n));
    }
    std::string text(n, '\0');
    if ((io = child_.read_exact(reinterpret_cast<uint8_t*>(text.data()), n, deadline, got)) != Child::Io::ok)
      throw fail(io);
    try {
      header = nlohmann::json::parse(text);
      payload.resize(payload_size(header.value("tensors", nlohmann::json())));
    } catch (const std::exception& e) {
      child_.kill_now();
      throw TargetFailure("error", fmt::format("{}: malformed reply header: {}", op, e.what()));
    }
    if ((io = child_.read_exact(payload.data(), payload.size(), deadline, got)) != Child::Io::ok)
      throw fail(io);
  }

  std::string target_;
  TransportOptions options_;
  Child child_;
};

class InProcessTransport : public Transport {
 public:
  InProcessTransport(std::vector<PluginOp> ops, std::vector<void*> symbols)
      : ops_(std::move(ops)), symbols_(std::move(symbols)) {}

 protected:
  Message round_trip(const Message& request) override {
    for (size_t k = 0; k < ops_.size(); ++k) {
      if (ops_[k].op != request.op) continue;
      Message reply = allocate_reply(request);
      ops_[k].invoke(symbols_[k], request, reply);
      return reply;
    }
    throw TargetFailure("error", fmt::format("no op '{}'", request.op));
  }

 private:
  std::vector<PluginOp> ops_;
  std::vector<void*> symbols_;
};

std::vector<void*> resolve_symbols(const std::string& where, const TransportOptions& options,
                                   const std::function<void*(const std::string&)>& lookup) {
  std::vector<void*> symbols;
  for (const auto& op : options.ops) {
    void* fn = lookup(op.symbol);
    if (!fn)
      throw InputError({}, fmt::format("{}: missing symbol {} (op {} of family {}); see include/kprop/abi.h",
                                       where, op.symbol, op.op, options.family));
    symbols.push_back(fn);
  }
  return symbols;
}

}  // namespace

bool is_external_target(const std::string& target) {
  return target.rfind("plugin:", 0) == 0 || target.rfind("exec:", 0) == 0;
}

std::shared_ptr<Transport> open_target(const std::string& target, const TransportOptions& options) {
  if (options.ops.empty())
    throw InputError({}, fmt::format("family {} has no external interface yet, so '{}' cannot be tested",
                                     options.family, target));
  if (target.rfind("plugin:", 0) == 0) {
    const std::string path = target.substr(7);
    if (path.empty()) throw InputError({}, "plugin: needs a path, e.g. plugin:./libmykernel.so");
    if (!std::filesystem::exists(path)) throw InputError({}, fmt::format("{}: no such file", target));
    // RTLD_NOW: an unresolved symbol inside the plugin is reported here, not mid-run.
    const std::string dlpath = path.find('/') == std::string::npos ? "./" + path : path;
    void* handle = dlopen(dlpath.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) throw InputError({}, fmt::format("{}: cannot load: {}", target, dlerror()));
    using VersionFn = uint32_t (*)();
    auto version = reinterpret_cast<VersionFn>(dlsym(handle, "kprop_abi_version"));
    if (!version)
      throw InputError({}, fmt::format("{}: missing symbol kprop_abi_version (add KPROP_PLUGIN(); from "
                                       "kprop/abi.h)",
                                       target));
    if (version() != KPROP_ABI_VERSION)
      throw InputError({},
                       fmt::format("{}: built against kprop ABI version {}, this kprop speaks {}; rebuild "
                                   "it against this kprop's include/kprop/abi.h",
                                   target, version(), KPROP_ABI_VERSION));
    auto symbols =
        resolve_symbols(target, options, [&](const std::string& s) { return dlsym(handle, s.c_str()); });
    auto transport = std::make_shared<ChildTransport>(
        target, options,
        [ops = options.ops, symbols](int in_fd, int out_fd) { serve_plugin(in_fd, out_fd, ops, symbols); });
    transport->open();
    return transport;
  }
  if (target.rfind("exec:", 0) == 0) {
    const std::string command = target.substr(5);
    if (command.find_first_not_of(" \t") == std::string::npos)
      throw InputError({}, "exec: needs a command, e.g. exec:python3 my_worker.py");
    auto transport = std::make_shared<ChildTransport>(target, options, [command](int in_fd, int out_fd) {
      dup2(in_fd, 0);
      dup2(out_fd, 1);
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    });
    transport->open();
    return transport;
  }
  throw InputError({}, fmt::format("'{}' is not an external target (plugin:PATH or exec:COMMAND)", target));
}

std::shared_ptr<Transport> in_process(std::map<std::string, void*> symbols, const TransportOptions& options) {
  auto resolved = resolve_symbols("in-process target", options, [&](const std::string& s) -> void* {
    auto it = symbols.find(s);
    return it == symbols.end() ? nullptr : it->second;
  });
  return std::make_shared<InProcessTransport>(options.ops, std::move(resolved));
}

}  // namespace kprop::external
