// `urxe pcap ...`: capture-file tools. `decode` prints every frame of a capture with its RoCEv2 fields and
// ICRC verdict.
#include <cstdio>
#include <iostream>
#include <string>

#include "tools/command.h"
#include "tools/pcap_decode.h"

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

constexpr Command kPcapCommands[] = {
    {"decode", "decode every frame of a capture: RoCEv2 headers and ICRC verdict (--json, --strict)",
     decode_main},
};

}  // namespace

int pcap_main(Args args) {
  return dispatch("urxe pcap", "Capture-file tools.", kPcapCommands, args);
}

}  // namespace urxe::tools
