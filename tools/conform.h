// `urxe conform`: drives a live RoCE peer through a catalogue of IBTA transport and CM scenarios while urxe's
// own port injects faults (wire/fault_rule.h), then judges the peer from urxe's capture of the run.
//
// Both sides run stock tools only (ibv_*_pingpong, perftest, rping): urxe's side under `urxe run` on the
// local device, the peer's through a command prefix the user gives (`ssh HOST`, `ip netns exec NS`, the QEMU
// guest's peer-exec.sh), so a peer that cannot run urxe's code (a ConnectX, kernel rxe) is tested as is.
//
// Flow per run (one stimulus; several scenarios may judge the same run): the device's fault rules are
// replaced by the run's, the server side starts, then the client; both are bounded by the run's timeout
// (process groups killed, never waited on past it); the rules are cleared; the frames the local
// processes captured (URXE_PCAP, one directory for the whole conform run) in the run's time window form the
// run's Trace, sorted by time; each scenario's judge reads the Trace and the tools' outcome and gives a
// Finding. The report (conform_report.cc) prints each scenario's clause, expectation, observation, verdict
// and evidence frames, and writes the run's frames as a pcapng slice.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tools/pcap_decode.h"
#include "tools/pcapng_file.h"

namespace urxe::tools::conform {

// One frame of a run, as urxe's port saw it.
struct Frame {
  uint64_t n = 0;    // 1-based in the run's slice (the pcapng written for the run)
  int64_t t_ns = 0;  // since the run started
  bool out = false;  // sent by urxe (urxe -> peer); false: received from the peer
  bool not_sent = false, not_delivered = false;  // a fault rule dropped it
  int fault_rule = -1;                           // the rule the capture comment names, or -1
  std::string fault_action;                      // "drop", "corrupt reth.rkey=0x1", ...
  const PcapngPacket* raw = nullptr;
  DecodedFrame d;

  // Whether the peer saw it (outgoing, not dropped before the wire) / sent it (incoming).
  bool to_peer() const { return out && !not_sent; }
  bool from_peer() const { return !out; }
  bool good() const { return d.good(); }
  bool cm() const { return d.mad && d.pkt.bth.dqpn == 1; }
  uint8_t opcode() const { return d.pkt.bth.opcode; }
  uint32_t psn() const { return d.pkt.bth.psn; }
  uint32_t dqpn() const { return d.pkt.bth.dqpn; }
  bool is_ack_opcode() const;  // ACKNOWLEDGE, on any connected transport
  uint8_t syndrome() const { return d.pkt.aeth.syndrome; }
  bool is_ack() const;               // ACKNOWLEDGE with an ACK syndrome
  bool is_nak(int code = -1) const;  // with a NAK syndrome (code: 0 sequence, 1 invalid, 2 access, 3 op)
  bool is_rnr_nak() const;
  bool is_request() const;  // requester-to-responder opcode
  bool is_read_response() const;
  bool is_atomic_ack() const;
  bool is_cnp() const { return d.bth_parsed && opcode() == 0x81; }
  const uint8_t* payload() const;  // the payload bytes in raw->data (nullptr when none)
};

// The frames of one run, and what the tools did.
struct Trace {
  std::vector<PcapngPacket> packets;        // owned; Frame::raw points here
  std::vector<Frame> frames;                // by time
  std::vector<uint32_t> rule_ids;           // the device's ids of the run's rules, in the run's order
  int local_status = -1, peer_status = -1;  // exit status, -1 when killed at the timeout
  bool local_timed_out = false, peer_timed_out = false;
  std::string local_output, peer_output;  // the tools' stdout+stderr (tails)
  int64_t duration_ns = 0;

  // Frames the run's k-th rule (0-based) hit, in order.
  std::vector<const Frame*> hits(size_t k) const;
  // The first frame after `after` (or from the start when null) for which pred holds.
  template <class P>
  const Frame* next(const Frame* after, P&& pred) const {
    size_t i = after ? static_cast<size_t>(after - frames.data()) + 1 : 0;
    for (; i < frames.size(); ++i)
      if (pred(frames[i])) return &frames[i];
    return nullptr;
  }
  template <class P>
  size_t count(P&& pred) const {
    size_t c = 0;
    for (const Frame& f : frames) c += pred(f) ? 1 : 0;
    return c;
  }
};

enum class Verdict : uint8_t {
  pass,          // the peer did what the spec says
  fail,          // the peer deviated (evidence frames name where)
  inconclusive,  // the stimulus did not happen as planned (no traffic, the rule never hit): no verdict
};
std::string_view verdict_name(Verdict v);

struct Finding {
  Verdict verdict = Verdict::inconclusive;
  std::string observed;            // what the peer did, one or two sentences
  std::vector<uint64_t> evidence;  // frame numbers (Frame::n) that show it
};

// Values the command templates and judges share.
struct Setup {
  std::string dev, peer_dev;  // local and peer device names
  int gid = 1, peer_gid = 1;  // GID indexes
  std::string local_ip, peer_ip;
  int tcp_port = 18600;  // the run's tools use tcp_port + the run's index
};

// One stimulus: the tools on both sides and the local device's fault rules while they run.
struct Run {
  std::string_view id;
  bool peer_is_server = true;  // false: urxe's side is the server, the peer connects to it
  std::string_view peer_cmd;   // templates: {dev} {gid} {peer_dev} {peer_gid} {local_ip} {peer_ip} {port}
  std::string_view local_cmd;
  std::vector<std::string_view> rules;
  int timeout_ms = 10000;
  int server_wait_ms = 0;       // extra wait after starting the server (CM listeners); 0: the setup's default
  bool tools_may_fail = false;  // the stimulus makes a tool fail or hang (an error NAK, a lost UD message)
  // After both tools ended, the rules stay and the capture window stays open this long: the CM services'
  // own retries outlive the tools (a DREQ resent after rping exited).
  int linger_ms = 0;
};

using Judge = Finding (*)(const Trace& t, const Setup& s);

// One catalogue row: what the IBTA (or RoCEv2 annex) asks, and how the run's capture shows it.
struct Scenario {
  std::string_view id;      // "A1.send": catalogue letter and number, then a variant
  std::string_view run;     // Run::id
  std::string_view clause;  // where the rule is (IBTA volume 1 chapter/section, compliance statement)
  std::string_view expect;  // what a compliant peer puts on the wire
  Judge judge;
  std::string_view rxe_note;  // a known kernel rxe deviation from it, or ""
};

std::span<const Run> runs();
std::span<const Scenario> scenarios();
const Run* find_run(std::string_view id);

// conform_trace.cc: the run's frames from the capture files in `dir` whose packets fall in [t0, t1] (ns,
// CLOCK_REALTIME), sorted by time, numbered, with the fault comments parsed.
bool load_trace(const std::string& dir, int64_t t0_ns, int64_t t1_ns, Trace& t, std::string& err);

// Helpers for judges.
std::string hex(uint64_t v);
std::string frame_list(const std::vector<const Frame*>& f, size_t max = 6);  // "#12, #15"
// The unwrapped distance b - a of two 24-bit PSNs.
int32_t psn_diff(uint32_t a, uint32_t b);

}  // namespace urxe::tools::conform
