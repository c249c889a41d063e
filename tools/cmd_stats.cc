// `urxe stats [NAME] [--json] [--watch [SECS]]`: a device's counters (kernel rxe's hw_counters names, then
// urxe's own), summed over the processes that have it open and those that closed it (provider/stats.h).
// Each run also rewrites the sysfs mirror, ports/1/hw_counters/.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include "provider/device_tree.h"
#include "provider/fault_rules.h"
#include "provider/stats.h"
#include "tools/command.h"
#include "tools/json_writer.h"
#include "tools/stats_prometheus.h"

namespace urxe::tools {
namespace {

namespace prov = urxe::provider;

constexpr char kUsage[] =
    "usage: urxe stats [NAME] [--json | --prometheus [--output FILE]] [--watch [SECS]] [--count N]\n"
    "                  [-p|--processes]\n"
    "Counters of the urxe device NAME (default: every device of $URXE_RUN_DIR, default /run/urxe), named\n"
    "like kernel rxe's hw_counters (sent_pkts, rcvd_pkts, duplicate_request, out_of_seq_request,\n"
    "rcvd_rnr_err, send_rnr_err, rcvd_seq_err, ack_deferred, retry_exceeded_err, retry_rnr_exceeded_err,\n"
    "completer_retry_err, send_err, link_downed, rdma_sends, rdma_recvs; link_downed: carrier losses of\n"
    "the interface since 'urxe link add', also while no app runs), then urxe's own:\n"
    "  rx_drop_parse   received RoCE frame that does not parse (bad length, version, checksum, opcode)\n"
    "  rx_drop_icrc    received frame with a bad ICRC\n"
    "  rx_drop_qpn     no such destination QP, or its type/state does not take the packet\n"
    "  rx_drop_qkey    UD packet with the wrong Q_Key\n"
    "  rx_drop_pkey    P_Key other than the default full-membership key\n"
    "  rx_drop_opcode  an opcode the QP's type does not take (UC READ, UD WRITE, a response to UC/UD)\n"
    "  rx_drop_no_recv_wqe  UC or UD SEND with no receive WQE posted (only RC answers RNR NAK)\n"
    "  rx_drop_uc      UC packet refused (rkey, length): dropped with its message, UC has no NAK\n"
    "  rx_drop_dup_unmatched  duplicate READ/atomic whose original is no longer held\n"
    "  rx_drop_resp_busy  request dropped while the READ responses owed before it wait for the port\n"
    "  rx_drop_stale_response  ACK or response for PSNs already completed or never sent\n"
    "  rx_drop_bad_response  response that does not fit its request (kind, PSN range, length)\n"
    "  rx_ring_drops   frames the port's receive ring dropped: the progress thread did not drain it in time\n"
    "                  (packet socket tp_drops, DPDK imissed)\n"
    "  rx_nombuf       frames DPDK had no receive buffer for\n"
    "  rx_port_errors  frames received but not whole (truncated, multi-segment, DPDK ierrors)\n"
    "  np_ecn_marked_roce_packets  RoCE packets received marked CE by a congested hop (as mlx5)\n"
    "  np_cnp_sent     CNPs sent in answer to them, at most one per QP per 2 us (as mlx5)\n"
    "  rp_cnp_handled  CNPs received that cut a QP's rate (as mlx5)\n"
    "  rp_cnp_ignored  CNPs received and not acted on: no such QP, a UD QP (as mlx5)\n"
    "  rp_timeout_cuts retransmit timeouts that halved an RC QP's rate (frames lost to congestion)\n"
    "  np_rx_backlog_marked  packets treated as CE-marked (answered with a CNP) because they waited deep\n"
    "                  in the receive ring: the receiver is the congested hop\n"
    "  tail_loss_probes  RC QPs that heard nothing for about two round trips resent their last packet once\n"
    "                  (no retry spent): a loss at the tail of a window costs a round trip, not a timeout\n"
    "  resp_remote_access_errors  RDMA WRITE/READ/atomic refused: bad rkey, range or access rights\n"
    "  tx_no_buf       backpressure: the port had no buffer for a frame, or took none\n"
    "  cq_overflow     a completion arrived at a full CQ\n"
    "  sent_bytes      bytes of the frames sent_pkts counts (Ethernet header to ICRC)\n"
    "  rcvd_bytes      bytes of the frames rcvd_pkts counts\n"
    "  rx_drop_mcast   UD multicast frame to a group no QP of the process is attached to\n"
    "  retransmitted_pkts  request packets sent again: go-back-N after a NAK or a timeout, RNR retries,\n"
    "                  tail loss probes\n"
    "Counts include the processes that have the device open now and every one that had it open since\n"
    "'urxe link add' (also those that died). Each run also writes them to the sysfs tree, as the kernel has\n"
    "them: $URXE_RUN_DIR/sys/class/infiniband/NAME/ports/1/hw_counters/<counter>, and ports/1/counters/\n"
    "port_{xmit,rcv}_{data,packets} (data in 4-byte words) (applications update them too, at most once a\n"
    "second while their counters change, and when they close the device).\n"
    "\n"
    "Then each fault rule ('urxe fault') that has counters or is in force: its id, matched (frames its\n"
    "fields matched), hits (frames its selectors picked), applied (frames whose action it decided: the\n"
    "first rule that hits a frame), and its text ('(removed)' for a rule deleted since).\n"
    "\n"
    "  --json          one JSON object per device and line: {\"device\": NAME, \"counters\": {COUNTER: N,\n"
    "                  ...}, \"faults\": [{\"id\", \"rule\" (absent once removed), \"matched\", \"hits\",\n"
    "                  \"applied\"}, ...], \"processes\": [{\"pid\", \"comm\", \"alive\", \"qpn_base\",\n"
    "                  \"counters\": {...}, \"faults\": [...], \"qps\": [{\"qpn\", \"type\", \"state\",\n"
    "                  \"counters\": {...}}, ...]}, ...]}\n"
    "  -p, --processes also list the counters of each process that has the device open, and of each of its\n"
    "                  QPs (non-zero ones; an app publishes per-QP figures at most once a second while\n"
    "                  they change, and they go away with the QP); rate_mbps: the current rate of a QP\n"
    "                  that CNPs slowed down (DCQCN), absent while it runs unpaced\n"
    "  --prometheus    the counters in Prometheus' text format, for node_exporter's textfile collector:\n"
    "                  the port figures as its infiniband collector names them (node_infiniband_info,\n"
    "                  _state_id, _physical_state_id, _rate_bytes_per_second, _port_data_{received,\n"
    "                  transmitted}_bytes_total, _port_packets_{received,transmitted}_total,\n"
    "                  _link_downed_total), every counter above as urxe_<name>_total, the CM service's MADs\n"
    "                  as urxe_cm_{messages_sent,messages_received,retries,duplicates_received}_total\n"
    "                  {message=...}, and urxe_processes; labels device and port\n"
    "  --output FILE   with --prometheus: write FILE (through a temporary file renamed over it, mode 0644)\n"
    "                  instead of printing; with --watch, again every round\n"
    "  --watch [SECS]  print again every SECS seconds (default 1) with each counter's change per second\n"
    "                  and a line of rates per device (packets/s and Gbit/s each way, drops/s: every\n"
    "                  rx_drop_* and the port's losses, retransmits/s: retransmitted_pkts), until\n"
    "                  interrupted (Ctrl-C) or N times with --count N\n"
    "  --count N       with --watch (implied): stop after N rounds\n"
    "\n"
    "examples:\n"
    "  urxe stats urxe0                      # all counters of urxe0\n"
    "  urxe stats urxe0 --json | jq .counters.rcvd_pkts\n"
    "  urxe stats -p --watch 2               # every 2 s, with rates, per process and QP\n"
    "  cat $URXE_RUN_DIR/sys/class/infiniband/urxe0/ports/1/hw_counters/sent_pkts\n"
    "  urxe stats --prometheus --output /var/lib/prometheus/node-exporter/urxe.prom --watch 15\n"
    "\n"
    "exit status: 0, 1 no such device or its counters unreadable, 2 usage error\n";

struct Options {
  std::string name, output;
  bool json = false, prometheus = false, processes = false, watch = false;
  double interval = 1.0;
  uint64_t count = 0;  // 0 = until interrupted
};

volatile sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}

bool parse_number(std::string_view s, double& out) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

bool is_number(std::string_view s) {
  double v;
  return parse_number(s, v);
}

int usage_error(const std::string& msg) {
  return tools::usage_error("urxe stats", msg + " ('urxe stats --help' lists the options)");
}

void json_counters(JsonWriter& w, std::string_view key, const prov::CounterSet& s) {
  w.begin_object(key);
  for (const auto& [n, v] : s.values) w.num(n, v);
  w.end_object();
}

// The device's fault rules in force, and every id with counters: (id, rule text or "" once removed,
// counters).
struct FaultRow {
  uint32_t id;
  std::string rule;
  prov::FaultRuleCounters c;
};
std::vector<FaultRow> fault_rows(const prov::FaultRuleSet& rules,
                                 const std::vector<prov::FaultRuleCounters>& c) {
  std::vector<FaultRow> rows;
  for (const auto& [id, rule] : rules.rules)
    rows.push_back({id, wire::format_fault_rule(rule), prov::fault_counters_of(c, id)});
  for (const prov::FaultRuleCounters& f : c) {
    bool listed = false;
    for (const FaultRow& r : rows) listed = listed || r.id == f.id;
    if (!listed) rows.push_back({f.id, "", f});
  }
  std::sort(rows.begin(), rows.end(), [](const FaultRow& a, const FaultRow& b) { return a.id < b.id; });
  return rows;
}

void json_faults(JsonWriter& w, const std::vector<FaultRow>& rows) {
  w.begin_array("faults");
  for (const FaultRow& r : rows) {
    w.begin_object().num("id", r.id);
    if (!r.rule.empty()) w.str("rule", r.rule);
    w.num("matched", r.c.matched).num("hits", r.c.hits).num("applied", r.c.applied).end_object();
  }
  w.end_array();
}

void print_json(const std::string& dev, const prov::DeviceCounters& dc, const prov::CmCounterTable* cm,
                double elapsed, const prov::FaultRuleSet& rules) {
  JsonWriter w;
  w.begin_object().str("device", dev);
  if (elapsed > 0) w.num("interval_ms", static_cast<uint64_t>(elapsed * 1000 + 0.5));
  json_counters(w, "counters", dc.total);
  json_faults(w, fault_rows(rules, dc.faults));
  if (cm) {  // the CM service's MADs, in the kernel's per-port groups
    w.begin_object("cm");
    for (size_t g = 0; g < cm->size(); ++g) {
      w.begin_object(prov::kCmCounterGroups[g]);
      for (size_t m = 0; m < (*cm)[g].size(); ++m) w.num(prov::kCmCounterMessages[m], (*cm)[g][m]);
      w.end_object();
    }
    w.end_object();
  }
  w.begin_array("processes");
  for (const prov::ProcessCounters& p : dc.processes) {
    w.begin_object()
        .num("pid", static_cast<int64_t>(p.pid))
        .str("comm", p.comm)
        .boolean("alive", p.alive)
        .num("qpn_base", p.qpn_base);
    json_counters(w, "counters", p.counters);
    json_faults(w, fault_rows({}, p.faults));
    w.begin_array("qps");
    for (const prov::QpCounters& q : p.qps) {
      w.begin_object().num("qpn", q.qpn).str("type", q.type).str("state", q.state);
      json_counters(w, "counters", q.counters);
      w.end_object();
    }
    w.end_array();
    w.end_object();
  }
  w.end_array().end_object();
  std::printf("%s\n", w.text().c_str());
}

void print_cm(const prov::CmCounterTable& cm) {
  std::printf("  CM MADs (urxe cm)           sent   received    retries duplicates\n");
  for (size_t m = 0; m < cm[0].size(); ++m) {
    if (!cm[0][m] && !cm[1][m] && !cm[2][m] && !cm[3][m]) continue;
    std::string name = prov::kCmCounterMessages[m];
    for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    std::printf("    %-18s %11llu %10llu %10llu %10llu\n", name.c_str(),
                static_cast<unsigned long long>(cm[0][m]), static_cast<unsigned long long>(cm[1][m]),
                static_cast<unsigned long long>(cm[2][m]), static_cast<unsigned long long>(cm[3][m]));
  }
}

void print_faults(const std::vector<FaultRow>& rows) {
  if (rows.empty()) return;
  std::printf("  fault rules (urxe fault)     matched       hits    applied  rule\n");
  for (const FaultRow& r : rows)
    std::printf("    rule %-13u %12llu %10llu %10llu  %s\n", r.id,
                static_cast<unsigned long long>(r.c.matched), static_cast<unsigned long long>(r.c.hits),
                static_cast<unsigned long long>(r.c.applied), r.rule.empty() ? "(removed)" : r.rule.c_str());
}

void print_text(const std::string& dev, const prov::DeviceCounters& dc, const prov::CounterSet* prev,
                double elapsed, bool processes, const prov::FaultRuleSet& rules) {
  size_t live = 0;
  for (const auto& p : dc.processes) live += p.alive;
  std::printf("%s: %zu process%s with the device open\n", dev.c_str(), live, live == 1 ? "" : "es");
  for (const auto& [n, v] : dc.total.values) {
    if (prev && elapsed > 0) {
      const uint64_t before = prev->get(n);
      const double rate = static_cast<double>(v >= before ? v - before : 0) / elapsed;
      std::printf("  %-26s %20llu  %12.0f/s\n", n.c_str(), static_cast<unsigned long long>(v), rate);
    } else {
      std::printf("  %-26s %20llu\n", n.c_str(), static_cast<unsigned long long>(v));
    }
  }
  print_faults(fault_rows(rules, dc.faults));
  if (!processes) return;
  for (const prov::ProcessCounters& p : dc.processes) {
    std::printf("  pid %d (%s)%s, QPNs from 0x%x:", static_cast<int>(p.pid), p.comm.c_str(),
                p.alive ? "" : " [exited without closing]", p.qpn_base);
    bool any = false;
    for (const auto& [n, v] : p.counters.values) {
      if (!v) continue;
      std::printf(" %s=%llu", n.c_str(), static_cast<unsigned long long>(v));
      any = true;
    }
    std::printf("%s\n", any ? "" : " (all 0)");
    for (const prov::FaultRuleCounters& f : p.faults)
      std::printf("    fault rule %u: matched=%llu hits=%llu applied=%llu\n", f.id,
                  static_cast<unsigned long long>(f.matched), static_cast<unsigned long long>(f.hits),
                  static_cast<unsigned long long>(f.applied));
    for (const prov::QpCounters& q : p.qps) {
      std::printf("    QP 0x%06x %s %s:", q.qpn, q.type.c_str(), q.state.c_str());
      for (const auto& [n, v] : q.counters.values)
        std::printf(" %s=%llu", n.c_str(), static_cast<unsigned long long>(v));
      std::printf("%s\n", q.counters.values.empty() ? " (all 0)" : "");
    }
  }
}

// The --watch line of rates under a device's counters: what a traffic monitor shows for a NIC, from the
// change of the counters.
void print_rates(const prov::CounterSet& now, const prov::CounterSet& before, double elapsed) {
  const auto per_s = [&](const std::string& n) {
    const uint64_t a = now.get(n), b = before.get(n);
    return static_cast<double>(a >= b ? a - b : 0) / elapsed;
  };
  double drops = per_s("rx_ring_drops") + per_s("rx_nombuf") + per_s("rx_port_errors");
  for (const auto& [n, v] : now.values)
    if (n.rfind("rx_drop_", 0) == 0) drops += per_s(n);
  std::printf(
      "  rates: tx %.0f pkts/s %.3f Gbit/s, rx %.0f pkts/s %.3f Gbit/s, drops %.0f/s, retransmits %.0f/s\n",
      per_s("sent_pkts"), per_s("sent_bytes") * 8e-9, per_s("rcvd_pkts"), per_s("rcvd_bytes") * 8e-9, drops,
      per_s("retransmitted_pkts"));
}

double now_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

int stats_main(Args args) {
  static constexpr Option kOptions[] = {
      {"json"},
      {"prometheus"},
      {"output", Option::required},
      {"processes", Option::none, 'p'},
      {"watch", Option::optional, 0, is_number},  // SECS only when the next word is a number
      {"count", Option::required}};
  OptionParser opts(args, kOptions);
  if (opts.help()) return print_help(kUsage);
  Options o;
  for (Token t; (t = opts.next());) {
    // t.opt is set for an option, and for --count without its value (the only one that needs a value).
    const std::string_view k = t.opt ? t.opt->name : std::string_view();
    const std::string_view a = t.word;
    if (k == "json") {
      o.json = true;
    } else if (k == "prometheus") {
      o.prometheus = true;
    } else if (k == "output") {
      o.output = std::string(t.value.value_or(std::string_view()));
      if (o.output.empty()) return usage_error("--output needs a file name");
    } else if (k == "processes") {
      o.processes = true;
    } else if (k == "watch") {
      o.watch = true;
      double v;
      if (t.value) {
        if (!parse_number(*t.value, v) || !(v >= 0.05 && v <= 86400))
          return usage_error("--watch SECS must be 0.05 .. 86400");
        o.interval = v;
      }
    } else if (k == "count") {
      const std::string_view v = t.value.value_or(std::string_view());
      auto r = std::from_chars(v.data(), v.data() + v.size(), o.count);
      if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size() || o.count < 1)
        return usage_error("--count needs a whole number >= 1");
    } else if (t.kind != Token::operand || a == "-") {  // "-" names no device: an unknown option, as it looks
      return usage_error("unknown option '" + std::string(a) + "'");
    } else if (o.name.empty()) {
      o.name = a;
    } else {
      return usage_error("more than one device name ('" + o.name + "', '" + std::string(a) + "')");
    }
  }
  if (o.count && !o.watch) o.watch = true;
  if (o.json && o.prometheus) return usage_error("--json and --prometheus: one format at a time");
  if (!o.output.empty() && !o.prometheus) return usage_error("--output is for --prometheus");

  const prov::Paths paths = prov::Paths::from_env();
  std::vector<prov::DeviceInfo> devs;
  for (prov::DeviceInfo& d : prov::list_devices(paths))
    if (o.name.empty() || d.config.name == o.name) devs.push_back(std::move(d));
  if (devs.empty()) {
    if (o.name.empty())
      std::fprintf(stderr,
                   "urxe stats: no urxe devices in %s (create one: urxe link add urxe0 netdev IFACE)\n",
                   paths.sysfs().c_str());
    else
      std::fprintf(stderr, "urxe stats: no urxe device '%s' in %s ('urxe link show' lists them)\n",
                   o.name.c_str(), paths.sysfs().c_str());
    return 1;
  }

  if (o.watch) {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
  }
  std::map<std::string, prov::CounterSet> prev;
  double last = 0;
  int rc = 0;
  for (uint64_t round = 0; !g_stop; ++round) {
    const double t = now_s();
    const double elapsed = round ? t - last : 0;
    last = t;
    if (o.watch && !o.json && !o.prometheus) {
      char stamp[32];
      const time_t wall = ::time(nullptr);
      std::strftime(stamp, sizeof stamp, "%H:%M:%S", std::localtime(&wall));
      std::printf("%s%s\n", round ? "\n" : "", stamp);
    }
    // --prometheus: every device's figures in one exposition (a family's samples together)
    std::vector<prov::DeviceCounters> all(devs.size());
    std::vector<prov::CmCounterTable> all_cm(devs.size());
    std::vector<PrometheusDevice> prom;
    for (size_t i = 0; i < devs.size(); ++i) {
      const prov::DeviceInfo& d = devs[i];
      prov::DeviceCounters& dc = all[i];
      std::string err;
      if (!prov::read_device_counters(d.ibdev_path, true, dc, err)) {
        std::fprintf(stderr, "urxe stats: %s: %s\n", d.config.name.c_str(), err.c_str());
        rc = 1;
        continue;
      }
      prov::mirror_hw_counters(d.ibdev_path, dc.total, err);  // best effort: may be read-only for us
      prov::refresh_port_state(d.ibdev_path, d.config, err);
      prov::CmCounterTable& cm = all_cm[i];
      const bool have_cm = prov::read_cm_counters(d.ibdev_path, cm);
      if (o.prometheus) {
        prom.push_back({d.config.name, d.ibdev_path, &dc, have_cm ? &cm : nullptr});
        continue;
      }
      prov::FaultRuleSet rules;
      if (!prov::read_fault_rules(d.ibdev_path, rules, err))  // the counters still show, without rule texts
        std::fprintf(stderr, "urxe stats: %s: %s\n", d.config.name.c_str(), err.c_str());
      if (o.json) {
        print_json(d.config.name, dc, have_cm ? &cm : nullptr, elapsed, rules);
      } else {
        print_text(d.config.name, dc, round ? &prev[d.config.name] : nullptr, elapsed, o.processes, rules);
        if (have_cm) print_cm(cm);
        if (round && elapsed > 0) print_rates(dc.total, prev[d.config.name], elapsed);
      }
      prev[d.config.name] = dc.total;
    }
    if (o.prometheus && !prom.empty()) {
      const std::string text = prometheus_text(prom);
      std::string err;
      if (o.output.empty()) {
        std::fputs(text.c_str(), stdout);
      } else if (!write_textfile(o.output, text, err)) {
        std::fprintf(stderr, "urxe stats: %s\n", err.c_str());
        return 1;
      }
    }
    std::fflush(stdout);
    if (!o.watch || (o.count && round + 1 >= o.count)) break;
    // Sleep in small steps so Ctrl-C ends it at once.
    const double until = t + o.interval;
    while (!g_stop) {
      const double left = until - now_s();
      if (left <= 0) break;
      ::poll(nullptr, 0, static_cast<int>(std::min(left, 0.2) * 1000) + 1);
    }
  }
  return rc;
}

}  // namespace urxe::tools
