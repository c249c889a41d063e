// `urxe conform`: options, the run loop and the report (tools/conform.h has the design).
#include <arpa/inet.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "cm/protocol.h"
#include "hostnet/netns.h"
#include "provider/device_tree.h"
#include "tools/command.h"
#include "tools/conform.h"
#include "tools/conform_report.h"
#include "tools/conform_run.h"
#include "tools/json_writer.h"
#include "tools/pcap_plot.h"

namespace urxe::tools {
namespace {

namespace cf = conform;

constexpr char kUsage[] =
    "usage: urxe conform --dev DEV --peer IP --peer-dev PEERDEV [options]\n"
    "       urxe conform --list [--json]\n"
    "Drive a live RoCE peer through a catalogue of IBTA transport and CM scenarios while urxe's port\n"
    "injects faults, and judge the peer from urxe's capture. Both sides run stock tools (perftest,\n"
    "ibv_rc_pingpong, rping): urxe's under 'urxe run' on DEV, the peer's through --peer-exec, so the peer\n"
    "needs nothing of urxe (a ConnectX, an E810, kernel rxe, another urxe): only perftest, ibverbs-utils,\n"
    "rdma-core's rping and timeout(1) installed, its RDMA device PEERDEV up, and IP reachable at IP.\n"
    "Each run replaces DEV's fault rules ('urxe fault') for its duration and clears them after.\n"
    "Per scenario the report gives the clause, what the spec expects, what the peer did, the verdict\n"
    "(pass, FAIL, inconclusive: the stimulus did not happen) and the frames that show it; each run's frames\n"
    "are written to DIR/RUN.pcapng (Wireshark shows the fault rules in the packet comments) and, for a run\n"
    "with a failing scenario, its connection as DIR/RUN.svg ('urxe pcap plot'). DIR/report.html is the\n"
    "report as one page with those plots embedded; DIR/report.txt and DIR/report.json the other forms.\n"
    "  --dev DEV         the local urxe device (its port's capture is turned on for the runs)\n"
    "  --peer IP         the peer's address, as the peer's tools listen on it\n"
    "  --peer-dev NAME   the peer's RDMA device (mlx5_0, rxe0, urxe0, ...)\n"
    "  --peer-exec CMD   the command prefix that runs a shell command on the peer, e.g. 'ssh root@host',\n"
    "                    'ip netns exec peerns urxe run --' (default: none, the peer's tools run here)\n"
    "  --gid N           local GID index (default 1: the IPv4 address on a Linux netdev)\n"
    "  --peer-gid N      the peer's GID index (default 1; 3 on a ConnectX with RoCE v1 and v2 GIDs)\n"
    "  --local-ip IP     urxe's address, for runs in which the peer connects (default: DEV's GID)\n"
    "  --only REGEX      only scenarios whose id matches (extended regex: 'A1|E', '^I')\n"
    "  --out DIR         where logs, slices and the reports go (default ./conform-YYYYmmdd-HHMMSS)\n"
    "  --tcp-port N      the first TCP port the tools' side channels use (default 18600; one per run)\n"
    "  --server-wait MS  wait after starting a server before its client (default 500)\n"
    "  --json            print the report as JSON (also written to DIR/report.json)\n"
    "  --list            print the catalogue (id, run, clause, expectation) and exit; with --json also\n"
    "                    each run's roles, commands and timeout and the known kernel rxe deviation\n"
    "\n"
    "examples:\n"
    "  urxe conform --dev urxe0 --peer 10.0.0.2 --peer-dev mlx5_0 --peer-gid 3 --peer-exec 'ssh root@host2'\n"
    "  urxe conform --dev urxe0 --peer 10.0.0.2 --peer-dev rxe0 --peer-exec 'ssh root@host2' --only '^E'\n"
    "  urxe conform --list\n"
    "\n"
    "exit status: 0 every scenario passed, 1 a scenario failed or was inconclusive, 2 usage or setup error\n";

const Option kOptions[] = {
    {"dev", Option::required},       {"peer", Option::required},        {"peer-dev", Option::required},
    {"peer-exec", Option::required}, {"gid", Option::required},         {"peer-gid", Option::required},
    {"local-ip", Option::required},  {"only", Option::required},        {"out", Option::required},
    {"tcp-port", Option::required},  {"server-wait", Option::required}, {"json", Option::none},
    {"list", Option::none},
};

bool to_int(std::string_view s, int lo, int hi, int& out) {
  char* end = nullptr;
  const std::string w(s);
  const long v = std::strtol(w.c_str(), &end, 10);
  if (w.empty() || *end || v < lo || v > hi) return false;
  out = static_cast<int>(v);
  return true;
}

std::string self_path() {
  char b[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", b, sizeof b - 1);
  return n > 0 ? std::string(b, static_cast<size_t>(n)) : std::string("urxe");
}

std::string now_stamp() {
  const time_t t = ::time(nullptr);
  tm tmv{};
  ::localtime_r(&t, &tmv);
  char b[32];
  std::strftime(b, sizeof b, "%Y%m%d-%H%M%S", &tmv);
  return b;
}

// The catalogue; with --json one object per scenario, with its run's roles and commands and the known kernel
// rxe deviation (tests/interop derives the verdicts rxe must get from it).
int list_catalogue(bool json) {
  if (json) {
    JsonWriter w;
    w.begin_object().begin_array("scenarios");
    for (const cf::Scenario& s : cf::scenarios()) {
      const cf::Run* run = cf::find_run(s.run);
      w.begin_object().str("id", s.id).str("run", s.run).str("clause", s.clause).str("expect", s.expect);
      w.str("rxe_note", s.rxe_note);
      if (run)
        w.boolean("peer_is_server", run->peer_is_server)
            .str("peer_cmd", run->peer_cmd)
            .str("local_cmd", run->local_cmd)
            .num("timeout_ms", int64_t{run->timeout_ms});
      w.end_object();
    }
    w.end_array().end_object();
    std::printf("%s\n", w.text().c_str());
    return 0;
  }
  for (const cf::Scenario& s : cf::scenarios())
    std::printf("%-18s %-16s %s\n%18s %16s expect: %s\n", std::string(s.id).c_str(),
                std::string(s.run).c_str(), std::string(s.clause).c_str(), "", "",
                std::string(s.expect).c_str());
  std::printf("%zu scenarios in %zu runs\n", cf::scenarios().size(), cf::runs().size());
  return 0;
}

// The data connection of a run: the DestQP of urxe's first RC request or the peer's first response.
int64_t run_qpn(const cf::Trace& t) {
  for (const cf::Frame& f : t.frames)
    if (f.d.bth_parsed && !f.cm() && f.from_peer() && f.d.pkt.info &&
        f.d.pkt.info->transport == wire::Transport::rc)
      return f.dqpn();
  return -1;
}

// A CM service (urxe cm) of this namespace that runs already captures the CM MADs where $URXE_PCAP pointed
// when it started, not in this run's pcap directory: the CM scenarios (family I) then see no MAD.
void warn_running_cm_service(const provider::Paths& paths, const std::vector<cf::ScenarioResult>& results) {
  bool cm = false;
  for (const cf::ScenarioResult& r : results) cm |= r.s->id.starts_with("I");
  const std::string ns = hostnet::current_netns().to_string();
  if (!cm || ns.empty()) return;
  std::ifstream in(cm::cm_pid_path(paths.run_dir, ns));
  long pid = 0;
  if (!(in >> pid) || pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM)) return;
  std::fprintf(stderr,
               "urxe conform: the CM service of this namespace (pid %ld) runs already: it records the CM "
               "MADs where it was told when it started, so the CM scenarios may find none (inconclusive); "
               "stop it first (kill %ld) or let it exit when idle\n",
               pid, pid);
}

}  // namespace

int conform_main(Args args) {
  OptionParser opts(args, kOptions);
  if (opts.help()) return print_help(kUsage);
  cf::RunContext cx;
  std::string only, out_dir;
  bool json = false, list = false;
  for (Token t; (t = opts.next());) {
    if (t.kind == Token::unknown)
      return usage_error("urxe conform",
                         "unknown option '" + std::string(t.word) + "' (valid: " + opts.valid() + ")",
                         kUsage);
    if (t.kind == Token::missing_value)
      return usage_error("urxe conform", "option '" + std::string(t.word) + "' needs a value", kUsage);
    if (t.kind == Token::operand)
      return usage_error("urxe conform", "unexpected word '" + std::string(t.word) + "'", kUsage);
    const std::string_view n = t.opt->name;
    const std::string v(t.value.value_or(""));
    if (n == "dev")
      cx.setup.dev = v;
    else if (n == "peer")
      cx.setup.peer_ip = v;
    else if (n == "peer-dev")
      cx.setup.peer_dev = v;
    else if (n == "peer-exec")
      cx.peer_exec = v;
    else if (n == "local-ip")
      cx.setup.local_ip = v;
    else if (n == "only")
      only = v;
    else if (n == "out")
      out_dir = v;
    else if (n == "json")
      json = true;
    else if (n == "list")
      list = true;
    else if (n == "gid" || n == "peer-gid" || n == "tcp-port" || n == "server-wait") {
      int x = 0;
      const bool port = n == "tcp-port", wait = n == "server-wait";
      if (!to_int(v, port ? 1024 : 0, port ? 65000 : wait ? 60000 : 255, x))
        return usage_error("urxe conform", "bad value '" + v + "' for --" + std::string(n), kUsage);
      (n == "gid"        ? cx.setup.gid
       : n == "peer-gid" ? cx.setup.peer_gid
       : port            ? cx.setup.tcp_port
                         : cx.server_wait_ms) = x;
    }
  }
  if (list) return list_catalogue(json);
  if (cx.setup.dev.empty() || cx.setup.peer_ip.empty() || cx.setup.peer_dev.empty())
    return usage_error("urxe conform", "--dev, --peer and --peer-dev are needed", kUsage);
  std::regex re;
  try {
    re = std::regex(only.empty() ? std::string(".") : only, std::regex::extended);
  } catch (const std::regex_error&) {
    return usage_error("urxe conform", "bad --only regex '" + only + "'", kUsage);
  }
  if (!provider_library_ok("urxe conform")) return 2;
  const provider::Paths paths = provider::Paths::from_env();
  const provider::DeviceInfo* dev = nullptr;
  const auto devices = provider::list_devices(paths);
  for (const provider::DeviceInfo& d : devices)
    if (d.config.name == cx.setup.dev) dev = &d;
  if (!dev) {
    std::fprintf(stderr, "urxe conform: no urxe device '%s' in %s ('urxe link show' lists them)\n",
                 cx.setup.dev.c_str(), paths.sysfs().c_str());
    return 2;
  }
  cx.ibdev_path = dev->ibdev_path;
  if (cx.setup.local_ip.empty()) {
    const size_t i = static_cast<size_t>(cx.setup.gid);
    if (i < dev->gids.size()) {
      const auto& g = dev->gids[i].gid;
      char b[INET6_ADDRSTRLEN];
      const bool v4 = std::all_of(g.begin(), g.begin() + 10, [](uint8_t x) { return x == 0; }) &&
                      g[10] == 0xff && g[11] == 0xff;
      if (v4 ? ::inet_ntop(AF_INET, g.data() + 12, b, sizeof b)
             : ::inet_ntop(AF_INET6, g.data(), b, sizeof b))
        cx.setup.local_ip = b;
    }
    if (cx.setup.local_ip.empty()) {
      std::fprintf(stderr, "urxe conform: %s has no GID %d: give --local-ip\n", cx.setup.dev.c_str(),
                   cx.setup.gid);
      return 2;
    }
  }
  cx.urxe = self_path();
  cx.out_dir = out_dir.empty() ? "conform-" + now_stamp() : out_dir;
  cx.pcap_dir = cx.out_dir + "/pcap";
  ::mkdir(cx.out_dir.c_str(), 0755);
  ::mkdir(cx.pcap_dir.c_str(), 0755);
  struct stat st {};
  if (::stat(cx.pcap_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "urxe conform: cannot make %s\n", cx.pcap_dir.c_str());
    return 2;
  }

  // The selected scenarios, by run in catalogue order.
  std::vector<cf::ScenarioResult> results;
  std::map<std::string_view, std::vector<size_t>> by_run;
  for (const cf::Scenario& s : cf::scenarios())
    if (std::regex_search(std::string(s.id), re)) {
      by_run[s.run].push_back(results.size());
      results.push_back({&s, {}, {}, {}});
    }
  if (results.empty())
    return usage_error("urxe conform", "no scenario matches --only '" + only + "'", kUsage);
  warn_running_cm_service(paths, results);
  std::vector<cf::RunRecord> run_records;
  int index = 0;
  for (const cf::Run& run : cf::runs()) {
    ++index;
    const auto it = by_run.find(run.id);
    if (it == by_run.end()) continue;
    if (!json)
      std::fprintf(stderr, "urxe conform: run %s (%zu scenarios)\n", std::string(run.id).c_str(),
                   it->second.size());
    cf::Trace trace;
    std::string err;
    if (!cf::execute_run(cx, run, index, trace, err)) {
      std::fprintf(stderr, "urxe conform: run %s: %s\n", std::string(run.id).c_str(), err.c_str());
      return 2;
    }
    run_records.push_back({run.id, run.peer_is_server, trace.duration_ns / 1000000, trace.local_status,
                           trace.peer_status, trace.local_timed_out, trace.peer_timed_out});
    const std::string slice = cx.out_dir + "/" + std::string(run.id) + ".pcapng";
    std::vector<const PcapngPacket*> pk;
    for (const PcapngPacket& p : trace.packets) pk.push_back(&p);
    if (!write_pcapng(slice, pk, "urxe conform run " + std::string(run.id), err))
      std::fprintf(stderr, "urxe conform: %s\n", err.c_str());
    bool failed = false;
    for (size_t i : it->second) {
      results[i].f = results[i].s->judge(trace, cx.setup);
      results[i].slice = slice;
      failed |= results[i].f.verdict != cf::Verdict::pass;
    }
    if (const int64_t qpn = run_qpn(trace); failed && qpn >= 0) {
      PlotResult pr;
      std::ostringstream perr;
      if (collect_plot(slice, static_cast<uint32_t>(qpn), pr, perr) == kPlotExitOk) {
        const std::string svg = cx.out_dir + "/" + std::string(run.id) + ".svg";
        std::ofstream(svg) << render_svg(pr, "urxe conform run " + std::string(run.id));
        for (size_t i : it->second) results[i].plot = svg;
      }
    }
  }

  // The report.
  const cf::Report rep = cf::make_report(cx.setup, results, run_records, cx.out_dir);
  std::ofstream(cx.out_dir + "/report.json") << rep.json;
  std::ofstream(cx.out_dir + "/report.txt") << rep.text;
  std::ofstream(cx.out_dir + "/report.html") << rep.html;
  std::cout << (json ? rep.json : rep.text);
  return rep.fail || rep.inconclusive ? 1 : 0;
}

}  // namespace urxe::tools
