// `urxe conform`: running one stimulus (a Run) on both sides, bounded in time.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "provider/device_tree.h"
#include "provider/fault_rules.h"
#include "tools/conform_run.h"

namespace urxe::tools::conform {
namespace {

int64_t realtime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}
int64_t mono_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1000000;
}
void sleep_ms(int64_t ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

std::string expand(std::string_view tmpl, const Setup& s, int port) {
  std::string r;
  for (size_t i = 0; i < tmpl.size();) {
    if (tmpl[i] == '{') {
      const size_t e = tmpl.find('}', i);
      if (e != std::string_view::npos) {
        const std::string_view k = tmpl.substr(i + 1, e - i - 1);
        std::string v;
        bool known = true;
        if (k == "dev")
          v = s.dev;
        else if (k == "gid")
          v = std::to_string(s.gid);
        else if (k == "peer_dev")
          v = s.peer_dev;
        else if (k == "peer_gid")
          v = std::to_string(s.peer_gid);
        else if (k == "local_ip")
          v = s.local_ip;
        else if (k == "peer_ip")
          v = s.peer_ip;
        else if (k == "port")
          v = std::to_string(port);
        else
          known = false;
        if (known) {
          r += v;
          i = e + 1;
          continue;
        }
      }
    }
    r += tmpl[i++];
  }
  return r;
}

// Split at blanks; '...' is one word (a local command of several tools: sh -c '...').
std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> w;
  bool in_word = false, quoted = false;
  for (char c : s) {
    if (c == '\'') {
      quoted = !quoted;
      if (!in_word) w.emplace_back();
      in_word = true;
    } else if (!quoted && (c == ' ' || c == '\t')) {
      in_word = false;
    } else {
      if (!in_word) w.emplace_back();
      in_word = true;
      w.back() += c;
    }
  }
  return w;
}

// A child in its own process group, stdout and stderr to `log`.
struct Child {
  pid_t pid = -1;
  int status = -1;
  bool done = false, killed = false;
  std::string log;

  // Also starts it again (a client retried): the state is the new process's.
  bool start(const std::vector<std::string>& argv,
             const std::vector<std::pair<std::string, std::string>>& env, const std::string& log_path) {
    log = log_path;
    pid = -1;
    status = -1;
    done = killed = false;
    const pid_t p = ::fork();
    if (p < 0) return false;
    if (p == 0) {
      ::setpgid(0, 0);
      const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      const int nul = ::open("/dev/null", O_RDONLY);
      if (nul >= 0) ::dup2(nul, 0);
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> a;
      for (const std::string& x : argv) a.push_back(const_cast<char*>(x.c_str()));
      a.push_back(nullptr);
      ::execvp(a[0], a.data());
      std::fprintf(stderr, "cannot run %s: %s\n", a[0], std::strerror(errno));
      ::_exit(127);
    }
    ::setpgid(p, p);  // both sides, so a kill right after fork reaches the group
    pid = p;
    return true;
  }
  bool poll() {
    if (done || pid < 0) return true;
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == pid) {
      done = true;
      status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    }
    return done;
  }
  void kill_group() {
    if (pid < 0 || poll()) return;
    killed = true;
    ::kill(-pid, SIGTERM);
    for (int i = 0; i < 50 && !poll(); ++i) sleep_ms(10);
    if (!poll()) ::kill(-pid, SIGKILL);
    int st = 0;
    ::waitpid(pid, &st, 0);
    done = true;
    status = -1;
  }
  std::string output(size_t tail = 4000) const {
    std::ifstream in(log);
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return s.size() > tail ? s.substr(s.size() - tail) : s;
  }
};

// A client that could not reach its server yet: the TCP port (perftest, the pingpongs) or the CM listener
// (rping: a REJ with reason 8, invalid service ID, while a slow peer's server is still starting).
bool not_connected(const std::string& out) {
  for (const char* p : {"Couldn't connect to", "Unable to init the socket connection", "Connection refused",
                        "Failed to establish connection", "RDMA_CM_EVENT_REJECTED, error 8"})
    if (out.find(p) != std::string::npos) return true;
  return false;
}

bool set_rules(const std::string& ibdev_path, const Run& run, std::vector<uint32_t>& ids, std::string& err) {
  std::vector<wire::FaultRule> rules;
  for (std::string_view text : run.rules) {
    const wire::FaultParse p = wire::parse_fault_rule(text);
    if (!p) {
      err = "rule '" + std::string(text) + "': " + p.error;
      return false;
    }
    rules.push_back(*p.rule);
  }
  ids.clear();
  return provider::update_fault_rules(
      ibdev_path,
      [&](provider::FaultRuleSet& set, std::string&) {
        set.rules.clear();
        for (const wire::FaultRule& r : rules) {
          ids.push_back(set.next_id);
          set.rules.emplace_back(set.next_id++, r);
        }
        return true;
      },
      err);
}

}  // namespace

bool execute_run(const RunContext& cx, const Run& run, int index, Trace& t, std::string& err) {
  const int port = cx.setup.tcp_port + index;
  const std::string base = cx.out_dir + "/" + std::string(run.id);
  if (!set_rules(cx.ibdev_path, run, t.rule_ids, err)) return false;
  // The rules reach running contexts within the watcher's period; the run's processes start after the
  // write and read the file when they open the device.
  const int64_t t0 = realtime_ns(), start = mono_ms();
  const int64_t deadline = start + run.timeout_ms;

  const std::vector<std::pair<std::string, std::string>> local_env = {
      {"URXE_PCAP", cx.pcap_dir}, {"URXE_PCAP_FILES", "0"}, {"URXE_PCAP_SIZE", "0"}};
  const auto local_argv = [&] {
    std::vector<std::string> a = {cx.urxe, "run", "--"};
    for (std::string& w : words(expand(run.local_cmd, cx.setup, port))) a.push_back(std::move(w));
    return a;
  };
  const int peer_secs = (run.timeout_ms + 999) / 1000 + 1;  // the bound the peer's own timeout(1) sets
  const auto peer_argv = [&] {
    // The peer's tool is bounded on the peer too: a prefix such as ssh does not pass our signals on.
    const std::string cmd = cx.peer_exec + " timeout -k 2 " + std::to_string(peer_secs) + " " +
                            expand(run.peer_cmd, cx.setup, port);
    return std::vector<std::string>{"/bin/sh", "-c", cmd};
  };
  Child server, client;
  const bool peer_server = run.peer_is_server;
  bool ok = peer_server ? server.start(peer_argv(), {}, base + ".peer.log")
                        : server.start(local_argv(), local_env, base + ".local.log");
  if (!ok) {
    err = "cannot start the server";
    return false;
  }
  sleep_ms(run.server_wait_ms ? run.server_wait_ms : cx.server_wait_ms);
  const std::string client_log = base + (peer_server ? ".local.log" : ".peer.log");
  for (;;) {
    ok = peer_server ? client.start(local_argv(), local_env, client_log)
                     : client.start(peer_argv(), {}, client_log);
    if (!ok) break;
    while (!client.poll() && mono_ms() < deadline) sleep_ms(5);
    // A client that found no server yet is started again while the server lives (its TCP exchange made no
    // RoCE frame; a REJ for a REQ the judges tell apart by comm ID).
    if (client.done && client.status != 0 && !server.poll() && mono_ms() + 200 < deadline &&
        mono_ms() - start < 5000 && not_connected(client.output())) {
      sleep_ms(100);
      continue;
    }
    break;
  }
  // The server ends by itself after its client (or fails after a stimulus that breaks the connection).
  while (!server.poll() && mono_ms() < deadline) sleep_ms(5);
  // Local tools write their capture every 250 ms (dpdk/capture_port.cc) and at exit; one killed at the
  // deadline has its frames up to then on disk after that period.
  if (!server.done || !client.done) sleep_ms(300);
  client.kill_group();
  server.kill_group();
  sleep_ms(run.linger_ms);
  std::string e2;
  std::vector<uint32_t> none;
  Run clear = run;
  clear.rules.clear();
  if (!set_rules(cx.ibdev_path, clear, none, e2)) std::fprintf(stderr, "urxe conform: %s\n", e2.c_str());
  sleep_ms(300);  // the CM service's capture (a long-lived process) is written every 250 ms
  const int64_t t1 = realtime_ns();
  Child& local = peer_server ? client : server;
  Child& peer = peer_server ? server : client;
  t.local_status = local.status;
  t.peer_status = peer.status;
  t.local_timed_out = local.killed;
  t.peer_timed_out = peer.killed;
  t.local_output = local.output();
  t.peer_output = peer.output();
  // A peer tool killed here at the deadline may live on at the peer (a prefix such as ssh or the guest's
  // agent does not pass the kill on) until its own `timeout -k 2` ends it, its QP still sending: the next
  // run waits for that, so no frame of this run's connection lands in the next one's window (after t1).
  if (peer.killed) {
    const int64_t bound = start + int64_t{peer_secs} * 1000 + 2000 + 200;
    if (mono_ms() < bound) sleep_ms(static_cast<int>(bound - mono_ms()));
  }
  t.duration_ns = (mono_ms() - start) * 1000000;
  return load_trace(cx.pcap_dir, t0, t1, t, err);
}

}  // namespace urxe::tools::conform
