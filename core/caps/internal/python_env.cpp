#include "core/caps/internal/python_env.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "daskcaps/caps/probe.h"
#include "core/caps/internal/probe_json.h"

extern char** environ;

namespace daskcaps {

namespace {

// Runs in the probed interpreter. Everything it imports may print: stdout is
// pointed at stderr until the one JSON line is written to the real stdout.
// Keep it Python 3.6-compatible and free of side effects (no cluster, no
// socket, no file).
constexpr std::string_view kScript = R"PY(
import sys, json
_out = sys.stdout
sys.stdout = sys.stderr
r = {"dask-caps-probe": 1}

def emit():
    _out.write(json.dumps(r))
    _out.write("\n")
    _out.flush()

def why(e):
    return " ".join(("%s: %s" % (type(e).__name__, e)).split())

def config_value(v):
    if v is None or v is False or isinstance(v, str):
        return v
    return repr(v)

r["executable"] = sys.executable
r["version"] = ".".join(str(x) for x in sys.version_info[:3])
import pickle
r["pickle-protocol"] = pickle.HIGHEST_PROTOCOL
try:
    import dask
    r["dask"] = str(dask.__version__)
except Exception as e:
    r["error"] = "cannot import dask: " + why(e)
    emit()
    sys.exit(0)
try:
    import distributed
    r["distributed"] = str(distributed.__version__)
except Exception as e:
    r["error"] = "cannot import distributed: " + why(e)
    emit()
    sys.exit(0)
import dask.config
r["compression-config"] = config_value(dask.config.get("distributed.comm.compression", None))
try:
    from distributed.protocol import compression as _c
    # Codecs only: since 2023.5 the table also holds "auto", an alias whose
    # entry names the codec it stands for.
    r["compressions"] = sorted(k for k, v in _c.compressions.items()
                               if isinstance(k, str) and getattr(v, "name", k) == k)
    if hasattr(_c, "get_default_compression"):
        r["compression"] = config_value(_c.get_default_compression())
    else:
        r["compression"] = config_value(_c.get_compression_settings("distributed.comm.compression"))
except Exception as e:
    r["compression-error"] = why(e)
try:
    from distributed.comm.core import Comm
    try:
        _h = Comm.handshake_info()
    except TypeError:
        # 2023.5 and later: a method of the comm, which sends None to a peer
        # on its own host; ask what it sends to another host.
        class _ToAnotherHost(object):
            same_host = False
        _h = Comm.handshake_info(_ToAnotherHost())
    r["handshake"] = {
        "compression": config_value(_h["compression"]),
        "python": [int(x) for x in _h["python"]],
        "pickle-protocol": int(_h["pickle-protocol"]),
    }
    # A client here preloads the Dask plugin (distributed.client.preload):
    # its handshake also carries the plugin's "capabilities" key. (Importing
    # the plugin patches this process only, which exits after the probe.)
    _preload = dask.config.get("distributed.client.preload", None) or []
    if isinstance(_preload, str):
        _preload = [_preload]
    if "dask_caps.plugin" in list(_preload):
        try:
            import dask_caps.plugin as _plugin
            r["handshake"]["capabilities"] = _plugin.published(_h["compression"])
        except Exception as e:
            del r["handshake"]
            r["handshake-error"] = ("distributed.client.preload names dask_caps.plugin, "
                                    "which a client here cannot load: " + why(e))
except Exception as e:
    r["handshake-error"] = why(e)

def version_of(module, dist):
    try:
        m = __import__(module)
    except Exception:
        return None
    v = getattr(m, "__version__", None)
    if v is None:
        try:
            from importlib.metadata import version
            v = version(dist)
        except Exception:
            v = "unknown"
    return str(v)

r["packages"] = {}
for _m, _d in (("numpy", "numpy"), ("cupy", "cupy"), ("lz4", "lz4"),
               ("zstandard", "zstandard"), ("snappy", "python-snappy"),
               ("msgpack", "msgpack"), ("cloudpickle", "cloudpickle")):
    r["packages"][_m] = version_of(_m, _d)
emit()
)PY";

struct ProcessResult {
  std::string out;
  std::string err;
  int status = 0;  // from waitpid
};

// Closes a file descriptor on scope exit.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

using Clock = std::chrono::steady_clock;

int millis_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  return left.count() > INT32_MAX ? INT32_MAX : static_cast<int>(left.count());
}

void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

// Starts argv[0] (searched on PATH when it has no slash) without a shell and
// collects its output until it exits or the deadline passes.
Result<ProcessResult> run_process(const std::vector<std::string>& args,
                                  std::chrono::milliseconds timeout, std::uint64_t max_out) {
  int out_pipe[2];
  int err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0)
    return make_error(Errc::io, std::string("pipe: ") + std::strerror(errno));
  Fd out_r(out_pipe[0]), out_w(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0)
    return make_error(Errc::io, std::string("pipe: ") + std::strerror(errno));
  Fd err_r(err_pipe[0]), err_w(err_pipe[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_w.fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err_w.fd, 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  // The interpreter inherits nothing else the caller holds open (sockets of
  // a survey in progress, say), CLOEXEC or not.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The child starts with default signal dispositions and an empty mask,
  // whatever the caller ignores or blocks (e.g. SIGPIPE).
  sigset_t all;
  sigset_t none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    return make_error(rc == ENOENT || rc == EACCES || rc == ENOTDIR ? Errc::not_found : Errc::io,
                      std::string("cannot run: ") + std::strerror(rc));
  out_w.reset();
  err_w.reset();

  const auto deadline = Clock::now() + timeout;
  ProcessResult result;
  constexpr std::size_t kStderrKept = 64 * 1024;
  bool out_open = true;
  bool err_open = true;
  char buf[65536];
  while (out_open || err_open) {
    pollfd fds[2];
    nfds_t n = 0;
    if (out_open) fds[n++] = {out_r.fd, POLLIN, 0};
    if (err_open) fds[n++] = {err_r.fd, POLLIN, 0};
    const int ready = ::poll(fds, n, millis_left(deadline));
    if (ready < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      kill_and_reap(pid);
      return make_error(Errc::io, std::string("poll: ") + std::strerror(err));
    }
    if (ready == 0) {
      kill_and_reap(pid);
      return make_error(Errc::timeout, "did not finish within " +
                                           std::to_string(timeout.count()) + " ms; killed");
    }
    for (nfds_t i = 0; i < n; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      const bool is_out = fds[i].fd == out_r.fd;
      if (got <= 0) {
        (is_out ? out_open : err_open) = false;
        continue;
      }
      if (is_out) {
        result.out.append(buf, static_cast<std::size_t>(got));
        if (result.out.size() > max_out) {
          kill_and_reap(pid);
          return make_error(Errc::limit_exceeded,
                            "printed more than " + std::to_string(max_out) + " bytes; killed");
        }
      } else {
        result.err.append(buf, static_cast<std::size_t>(got));
        if (result.err.size() > 2 * kStderrKept) result.err.erase(0, result.err.size() - kStderrKept);
      }
    }
  }

  // Both pipes are closed; the process is about to exit (or has closed them
  // and lingers: the deadline still holds).
  for (;;) {
    const pid_t w = ::waitpid(pid, &result.status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      return make_error(Errc::io, std::string("waitpid: ") + std::strerror(errno));
    }
    if (millis_left(deadline) == 0) {
      kill_and_reap(pid);
      return make_error(Errc::timeout, "did not exit within " +
                                           std::to_string(timeout.count()) + " ms; killed");
    }
    ::poll(nullptr, 0, 10);
  }
  return result;
}

// The last non-empty line of a process's stderr, for error messages.
std::string last_line(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' '))
    text.remove_suffix(1);
  const auto nl = text.find_last_of('\n');
  if (nl != std::string_view::npos) text.remove_prefix(nl + 1);
  constexpr std::size_t kMax = 300;
  if (text.size() > kMax) return std::string(text.substr(0, kMax)) + "...";
  return std::string(text);
}

std::string excerpt(std::string_view text) {
  constexpr std::size_t kMax = 60;
  std::string out;
  for (char c : text.substr(0, kMax)) out += (c >= 0x20 && c < 0x7f) ? c : '.';
  if (text.size() > kMax) out += "...";
  return out;
}

Error not_python(std::string_view why) {
  return make_error(Errc::bad_value, "not a Python interpreter with the probe's JSON output (" +
                                         std::string(why) + ")");
}

}  // namespace

std::string_view python_probe_script() { return kScript; }

Result<PythonEnv> parse_python_probe(std::string_view output) {
  OrderedJson doc;
  try {
    doc = OrderedJson::parse(output.begin(), output.end());
  } catch (const nlohmann::json::exception&) {
    if (output.empty()) return not_python("it printed nothing");
    return not_python("it printed \"" + excerpt(output) + "\"");
  }
  if (!doc.is_object() || !doc.contains("dask-caps-probe"))
    return not_python("it printed \"" + excerpt(output) + "\"");
  if (auto e = doc.find("error"); e != doc.end() && e->is_string())
    return make_error(Errc::not_found, e->get<std::string>());

  auto env = python_from_json(doc, "");
  if (!env) return std::move(env).error();
  if (auto h = doc.find("handshake"); h != doc.end() && h->is_object()) {
    auto hs = handshake_from_json(*h, "/handshake");
    if (!hs) return std::move(hs).error();
    env->dask_handshake = std::move(*hs);
  } else if (auto e = doc.find("handshake-error"); e != doc.end() && e->is_string()) {
    env->handshake_error = e->get<std::string>();
  }
  return env;
}

Result<PythonEnv> probe_python(const std::string& executable, const PythonRunOptions& options) {
  auto with_context = [&executable](Error e) { return std::move(e.add_context(executable)); };
  if (executable.empty())
    return make_error(Errc::usage, "no Python interpreter named");
  auto run = run_process({executable, "-c", std::string(kScript)}, options.timeout,
                         options.max_output_bytes);
  if (!run) return with_context(std::move(run).error());
  const int status = run->status;
  if (WIFSIGNALED(status))
    return with_context(make_error(Errc::bad_value, "killed by signal " +
                                                        std::to_string(WTERMSIG(status))));
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
    std::string what = "exited with status " + std::to_string(WEXITSTATUS(status));
    if (const std::string line = last_line(run->err); !line.empty()) what += ": " + line;
    return with_context(make_error(Errc::bad_value, std::move(what)));
  }
  auto env = parse_python_probe(run->out);
  if (!env) return with_context(std::move(env).error());
  // The interpreter as named, not sys.executable: a wrapper script (one that
  // puts another Dask on the path) reports the interpreter it runs.
  if (executable.find('/') != std::string::npos) env->executable = executable;
  return env;
}

}  // namespace daskcaps
