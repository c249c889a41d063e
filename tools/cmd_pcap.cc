// `urxe pcap ...`: capture-file tools. `decode` prints every frame of a capture with its RoCEv2 fields and
// ICRC verdict; `plot` draws one RC connection's PSNs against time as an SVG.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "tools/command.h"
#include "tools/pcap_decode.h"
#include "tools/pcap_plot.h"

namespace urxe::tools {
namespace {

constexpr char kDecodeUsage[] =
    "usage: urxe pcap decode FILE [--json] [--strict]\n"
    "Decode every frame of a pcap or pcapng capture (Ethernet, Linux cooked SLL/SLL2, or raw IP).\n"
    "One line per frame: frame number (1-based, as in Wireshark), time, MAC, IP addresses and UDP ports,\n"
    "BTH (opcode, dqpn, psn, ack_req, se, pad, ...), extension headers (DETH, XRCETH, RETH, AtomicETH,\n"
    "AETH, AtomicAckETH, ImmDt, IETH), payload length and ICRC verdict. RoCEv2 = UDP destination port 4791;\n"
    "other frames are listed as 'skipped' with a one-word reason. A summary goes to stderr.\n"
    "\n"
    "  --json    one JSON object per line instead (keys: frame, roce, opcode, opcode_name, dqpn, psn,\n"
    "            ack_req, payload_len, icrc_ok, error, ip, udp, reth, aeth, ... ; see tools/pcap_decode.h)\n"
    "  --strict  exit 1 if any RoCEv2 frame is malformed or has a bad ICRC\n"
    "\n"
    "examples:\n"
    "  urxe pcap decode capture.pcapng\n"
    "  urxe pcap decode --json --strict capture.pcap | jq -c 'select(.icrc_ok == false)'\n"
    "\n"
    "exit status: 0 ok, 1 bad RoCEv2 frames (--strict), 2 usage or file error\n";

int decode_main(Args args) {
  static constexpr Option kOptions[] = {{"json"}, {"strict"}};
  OptionParser opts(args, kOptions);
  if (opts.help()) return print_help(kDecodeUsage);
  DecodeOptions opt;
  std::string path;
  bool have_path = false;
  for (Token t; (t = opts.next());) {
    if (t.kind == Token::option) {
      (t.opt->name == "json" ? opt.json : opt.strict) = true;
    } else if (t.kind != Token::operand) {
      return usage_error("urxe pcap decode", "unknown option '" + std::string(t.word) + "'", kDecodeUsage);
    } else if (have_path) {
      return usage_error("urxe pcap decode", "one FILE only", kDecodeUsage);
    } else {
      path = t.word;
      have_path = true;
    }
  }
  if (!have_path) {
    std::fputs(kDecodeUsage, stderr);
    return kExitUsage;
  }
  std::ios::sync_with_stdio(false);
  return decode_file(path, opt, std::cout, std::cerr);
}

constexpr char kPlotUsage[] =
    "usage: urxe pcap plot FILE --qp QPN [-o OUT.svg] [--json]\n"
    "Draw one RC connection of a pcap or pcapng capture as PSN against time, a self-contained SVG (no\n"
    "script; hover a mark for its frame, time, opcode, PSN and capture comment), like a TCP stream graph.\n"
    "The connection: frames whose BTH DestQP is QPN, and frames to its peer QP between the same two\n"
    "addresses. The peer is the QP a capture comment names ('from QP 0x..', urxe's captures), else the\n"
    "DestQP of the frames flowing the other way that answer QPN's frames (an ACK or response carries its\n"
    "request's PSN), else the only DestQP flowing the other way. One panel per PSN space: QPN's requests\n"
    "with the responses to them, and the peer's requests with theirs. Time on x (seconds from the\n"
    "connection's first frame), PSN on y, unwrapped across the 24-bit wrap from the space's first PSN.\n"
    "Marks: requests by operation (SEND, WRITE, READ, atomic; hollow for first/middle packets),\n"
    "retransmissions (a request PSN seen again), ACKs, NAKs by kind (PSN sequence error, RNR, invalid\n"
    "request, remote access, remote operational), READ responses, atomic ACKs, CNPs, and frames a fault\n"
    "rule made or changed (comment 'fault rule N: ...'), with a cross where it dropped one ('(not sent)').\n"
    "A frame with a bad ICRC is drawn too when its BTH reads (its tooltip says so).\n"
    "\n"
    "  --qp QPN       the QP number, decimal or 0x hex (required)\n"
    "  -o, --output OUT.svg\n"
    "                 write the SVG here ('-' for stdout); required unless --json\n"
    "  --json         print the plotted points, one JSON object per line (keys: frame, t_ns, space, dqpn,\n"
    "                 psn, y, opcode, kind, op, position, comment, fault_rule, dropped, bad)\n"
    "\n"
    "examples:\n"
    "  urxe pcap plot capture.pcapng --qp 0x11 -o qp11.svg\n"
    "  urxe pcap plot capture.pcapng --qp 17 --json | jq -c 'select(.kind | startswith(\"nak\"))'\n"
    "\n"
    "exit status: 0 ok, 1 no frame of that QP in the capture, 2 usage or file error\n";

std::string hex_qpn(uint32_t q) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%06x", q);
  return b;
}

int plot_main(Args args) {
  static constexpr Option kOptions[] = {
      {"qp", Option::required}, {"output", Option::required, 'o'}, {"json"}};
  OptionParser opts(args, kOptions);
  if (opts.help()) return print_help(kPlotUsage);
  constexpr std::string_view kProg = "urxe pcap plot";
  std::string path, out;
  bool have_path = false, have_qp = false, json = false;
  uint32_t qpn = 0;
  for (Token t; (t = opts.next());) {
    if (t.kind == Token::missing_value)
      return usage_error(kProg, std::string(t.word) + " needs a value", kPlotUsage);
    if (t.kind == Token::unknown)
      return usage_error(kProg, "unknown option '" + std::string(t.word) + "' (valid: " + opts.valid() + ")",
                         kPlotUsage);
    if (t.kind == Token::operand) {
      if (have_path) return usage_error(kProg, "one FILE only", kPlotUsage);
      path = t.word;
      have_path = true;
    } else if (t.opt->name == "json") {
      json = true;
    } else if (t.opt->name == "output") {
      out = *t.value;
    } else {
      const std::string v(*t.value);
      char* end = nullptr;
      const unsigned long n = std::strtoul(v.c_str(), &end, 0);
      if (v.empty() || *end || v[0] == '-' || n > 0xffffff)
        return usage_error(kProg, "--qp '" + v + "' is not a QP number (24 bits, decimal or 0x hex)",
                           kPlotUsage);
      qpn = static_cast<uint32_t>(n);
      have_qp = true;
    }
  }
  if (!have_path) return usage_error(kProg, "no FILE given", kPlotUsage);
  if (!have_qp) return usage_error(kProg, "--qp QPN is required", kPlotUsage);
  if (out.empty() && !json) return usage_error(kProg, "-o OUT.svg (or --json) is required", kPlotUsage);
  PlotResult r;
  if (const int rc = collect_plot(path, qpn, r, std::cerr); rc != kPlotExitOk) return rc;
  if (json) std::cout << render_json(r) << std::flush;
  if (!out.empty()) {
    const std::string svg =
        render_svg(r, "urxe pcap plot: " + path + ", QP " + hex_qpn(qpn) + " (" + std::to_string(qpn) + ")");
    if (out == "-") {
      std::cout << svg << std::flush;
    } else {
      std::ofstream f(out, std::ios::binary | std::ios::trunc);
      if (!(f << svg) || !f.flush()) {
        std::fprintf(stderr, "urxe pcap plot: %s: cannot write\n", out.c_str());
        return kPlotExitError;
      }
    }
  }
  char peer[64] = "not found";
  if (r.have_peer) std::snprintf(peer, sizeof peer, "QP 0x%06x (by %s)", r.peer, r.peer_from.c_str());
  std::fprintf(stderr, "# QP 0x%06x, peer %s: %zu frames plotted\n", qpn, peer, r.points.size());
  return kPlotExitOk;
}

constexpr Command kPcapCommands[] = {
    {"decode", "decode every frame of a capture: RoCEv2 headers and ICRC verdict (--json, --strict)",
     decode_main},
    {"plot", "draw one RC connection's PSNs against time as an SVG: requests, ACKs, NAKs, retransmissions",
     plot_main},
};

}  // namespace

int pcap_main(Args args) {
  return dispatch("urxe pcap", "Capture-file tools.", kPcapCommands, args);
}

}  // namespace urxe::tools
