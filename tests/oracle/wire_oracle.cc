// wire_oracle: the urxe side of the oracle tests (tests/oracle/*.py drive it; Scapy and tshark are the
// judges). It never decides what is right on its own: it only turns random field values into frames with
// wire/ and frames back into field values with wire/, so that an independent tool can compare.
//
//   wire_oracle opcodes
//       One JSON line per opcode in wire's table: code, name, extension headers (wire order), payload flag.
//   wire_oracle gen SEED COUNT OUT.jsonl [OUT.pcap] [--tshark-safe]
//       COUNT random FrameSpecs + payloads built with wire::build_frame; one JSON line per frame with every
//       field value it was given and the frame bytes. --tshark-safe keeps UDP source ports above 4791 and
//       QPNs away from 0 and 1 (Wireshark dissects those as other protocols / management datagrams) and
//       source MACs unicast.
//   wire_oracle check IN.txt
//       Each line "key=value ..." holds a frame (built elsewhere, e.g. by Scapy) and the field values it was
//       built from; parses the frame with wire::parse_frame and reports every field that differs.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "wire/packet.h"

using namespace urxe::wire;

namespace {

// ExtHeader bits in wire order, with the names the Python side uses.
struct HdrName {
  uint16_t bit;
  const char* name;
};
constexpr HdrName kHdrNames[] = {{kRdeth, "rdeth"},
                                 {kDeth, "deth"},
                                 {kXrceth, "xrceth"},
                                 {kReth, "reth"},
                                 {kAtomicEth, "atomiceth"},
                                 {kAeth, "aeth"},
                                 {kAtomicAckEth, "atomicacketh"},
                                 {kImmDt, "immdt"},
                                 {kIeth, "ieth"}};

std::string hdr_list(uint16_t bits) {
  std::string s;
  for (const HdrName& h : kHdrNames) {
    if (!(bits & h.bit)) continue;
    if (!s.empty()) s += ',';
    s += h.name;
  }
  return s.empty() ? "-" : s;
}

std::string hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  s.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

bool unhex(const std::string& s, std::vector<uint8_t>& out) {
  out.clear();
  if (s == "-") return true;
  if (s.size() % 2) return false;
  for (size_t i = 0; i < s.size(); i += 2) {
    auto nib = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    int hi = nib(s[i]), lo = nib(s[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out.push_back(static_cast<uint8_t>(hi << 4 | lo));
  }
  return true;
}

int cmd_opcodes() {
  const auto& t = opcode_table();
  for (unsigned code = 0; code < t.size(); ++code) {
    const OpcodeInfo& i = t[code];
    if (!i.valid()) continue;
    std::printf("{\"op\":%u,\"name\":\"%.*s\",\"hdrs\":\"%s\",\"payload\":%s,\"ext_len\":%u}\n", code,
                static_cast<int>(i.name.size()), i.name.data(), hdr_list(i.headers).c_str(),
                i.has_payload ? "true" : "false", unsigned{i.ext_len});
  }
  return 0;
}

// Random values biased towards the edges of each field, where encoders go wrong.
class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed) {}
  uint64_t bits(unsigned n) {
    const uint64_t mask = n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
    switch (g_() % 8) {
      case 0:
        return 0;
      case 1:
        return mask;
      case 2:
        return uint64_t{1} << (g_() % n);  // one bit set
      default:
        return g_() & mask;
    }
  }
  uint64_t below(uint64_t n) { return g_() % n; }
  bool coin(unsigned one_in = 2) { return g_() % one_in == 0; }

 private:
  std::mt19937_64 g_;
};

uint32_t random_payload_len(Rng& r) {
  switch (r.below(10)) {
    case 0:
      return 0;
    case 1:
      return static_cast<uint32_t>(1 + r.below(8));
    case 2:
    case 3:
    case 4:
      return static_cast<uint32_t>(1 + r.below(64));
    case 9:
      return static_cast<uint32_t>(1501 + r.below(4096 - 1500));
    default:
      return static_cast<uint32_t>(65 + r.below(1500 - 64));
  }
}

struct PcapWriter {
  FILE* f = nullptr;
  explicit PcapWriter(const char* path) {
    f = std::fopen(path, "wb");
    if (!f) return;
    const uint32_t hdr[6] = {0xa1b2c3d4u, 0x00040002u, 0, 0, 65535, 1};  // v2.4, LINKTYPE_ETHERNET
    std::fwrite(hdr, sizeof hdr, 1, f);
  }
  void add(const uint8_t* p, uint32_t n, uint32_t idx) {
    const uint32_t rec[4] = {1700000000u + idx / 1000000u, idx % 1000000u, n, n};
    std::fwrite(rec, sizeof rec, 1, f);
    std::fwrite(p, 1, n, f);
  }
  ~PcapWriter() {
    if (f) std::fclose(f);
  }
};

int cmd_gen(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: wire_oracle gen SEED COUNT OUT.jsonl [OUT.pcap] [--tshark-safe]\n");
    return 2;
  }
  const uint64_t seed = std::strtoull(argv[1], nullptr, 0);
  const uint32_t count = static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 0));
  const char* pcap_path = nullptr;
  bool tshark_safe = false;
  for (int i = 4; i < argc; ++i) {
    if (std::strcmp(argv[i], "--tshark-safe") == 0)
      tshark_safe = true;
    else
      pcap_path = argv[i];
  }
  FILE* out = std::fopen(argv[3], "w");
  if (!out) {
    std::perror(argv[3]);
    return 2;
  }
  std::unique_ptr<PcapWriter> pcap;
  if (pcap_path) {
    pcap = std::make_unique<PcapWriter>(pcap_path);
    if (!pcap->f) {
      std::perror(pcap_path);
      return 2;
    }
  }
  std::vector<uint8_t> opcodes;
  for (unsigned code = 0; code < 256; ++code)
    if (opcode_info(static_cast<uint8_t>(code)).valid()) opcodes.push_back(static_cast<uint8_t>(code));

  Rng r(seed);
  std::vector<uint8_t> frame(16384), payload;
  for (uint32_t idx = 0; idx < count; ++idx) {
    FrameSpec s;
    // The first 4 × |opcodes| frames walk every opcode in all four Ethernet/IP combinations; the rest are
    // random.
    const uint32_t n = static_cast<uint32_t>(opcodes.size());
    const bool sweep = idx < 4 * n;
    s.bth.opcode = sweep ? opcodes[idx % n] : opcodes[r.below(n)];
    const OpcodeInfo& info = opcode_info(s.bth.opcode);
    s.has_vlan = sweep ? ((idx / n) & 1) != 0 : r.coin();
    s.ip_version = (sweep ? ((idx / n) & 2) != 0 : r.coin()) ? 6 : 4;
    for (auto& b : s.dst_mac) b = static_cast<uint8_t>(r.bits(8));
    for (auto& b : s.src_mac) b = static_cast<uint8_t>(r.bits(8));
    s.vlan_tci = static_cast<uint16_t>(r.bits(16));
    if (s.ip_version == 4) {
      s.src_ip = gid_from_ipv4({});
      s.dst_ip = gid_from_ipv4({});
      for (int i = 12; i < 16; ++i) s.src_ip[i] = static_cast<uint8_t>(r.bits(8));
      for (int i = 12; i < 16; ++i) s.dst_ip[i] = static_cast<uint8_t>(r.bits(8));
    } else {
      for (auto& b : s.src_ip) b = static_cast<uint8_t>(r.bits(8));
      for (auto& b : s.dst_ip) b = static_cast<uint8_t>(r.bits(8));
    }
    s.traffic_class = static_cast<uint8_t>(r.bits(8));
    s.ttl = static_cast<uint8_t>(r.bits(8));
    s.ip_id = static_cast<uint16_t>(r.bits(16));
    s.df = r.coin();
    s.flow_label = static_cast<uint32_t>(r.bits(20));
    s.udp_sport = static_cast<uint16_t>(r.bits(16));
    if (tshark_safe) s.udp_sport = static_cast<uint16_t>(s.udp_sport | 0xc000);
    s.udp_checksum = r.coin();
    s.bth.se = r.coin();
    s.bth.migreq = r.coin();
    s.bth.pkey = static_cast<uint16_t>(r.bits(16));
    s.bth.fecn = r.coin();
    s.bth.becn = r.coin();
    s.bth.resv6 = r.coin(8) ? static_cast<uint8_t>(r.bits(6)) : 0;  // reserved: mostly 0, as senders send
    s.bth.dqpn = static_cast<uint32_t>(r.bits(24));
    s.bth.ack_req = r.coin();
    s.bth.resv7 = r.coin(8) ? static_cast<uint8_t>(r.bits(7)) : 0;
    s.bth.psn = static_cast<uint32_t>(r.bits(24));
    s.reth = {r.bits(64), static_cast<uint32_t>(r.bits(32)), static_cast<uint32_t>(r.bits(32))};
    s.aeth = {static_cast<uint8_t>(r.bits(8)), static_cast<uint32_t>(r.bits(24))};
    s.atomic_eth = {r.bits(64), static_cast<uint32_t>(r.bits(32)), r.bits(64), r.bits(64)};
    s.atomic_ack_eth = {r.bits(64)};
    s.deth = {static_cast<uint32_t>(r.bits(32)), static_cast<uint32_t>(r.bits(24))};
    s.imm = static_cast<uint32_t>(r.bits(32));
    s.ieth_rkey = static_cast<uint32_t>(r.bits(32));
    s.xrc_srqn = static_cast<uint32_t>(r.bits(24));
    if (tshark_safe) {
      s.src_mac[0] &= 0xfe;  // a group source address is a dissector warning; NICs never send one
      if (s.bth.dqpn < 2) s.bth.dqpn += 2;
      if (s.deth.src_qp < 2) s.deth.src_qp += 2;
    }
    payload.resize(info.has_payload ? random_payload_len(r) : 0);
    for (auto& b : payload) b = static_cast<uint8_t>(r.bits(8));

    const uint32_t len = build_frame(frame, s, payload);
    if (len == 0 || len != frame_size(s, static_cast<uint32_t>(payload.size()))) {
      std::fprintf(stderr, "seed %" PRIu64 " index %u: build_frame failed (opcode 0x%02x)\n", seed, idx,
                   s.bth.opcode);
      return 1;
    }
    if (pcap) pcap->add(frame.data(), len, idx);
    std::fprintf(
        out,
        "{\"idx\":%u,\"op\":%u,\"name\":\"%.*s\",\"hdrs\":\"%s\",\"dst_mac\":\"%s\",\"src_mac\":\"%s\","
        "\"vlan\":%u,\"vlan_tci\":%u,\"ipv\":%u,\"src_ip\":\"%s\",\"dst_ip\":\"%s\",\"tc\":%u,"
        "\"ttl\":%u,\"ip_id\":%u,\"df\":%u,\"flow\":%u,\"sport\":%u,\"dport\":%u,\"udp_csum\":%u,",
        idx, unsigned{s.bth.opcode}, static_cast<int>(info.name.size()), info.name.data(),
        hdr_list(info.headers).c_str(), hex(s.dst_mac.data(), 6).c_str(), hex(s.src_mac.data(), 6).c_str(),
        unsigned{s.has_vlan}, unsigned{s.vlan_tci}, unsigned{s.ip_version},
        (s.ip_version == 4 ? hex(s.src_ip.data() + 12, 4) : hex(s.src_ip.data(), 16)).c_str(),
        (s.ip_version == 4 ? hex(s.dst_ip.data() + 12, 4) : hex(s.dst_ip.data(), 16)).c_str(),
        unsigned{s.traffic_class}, unsigned{s.ttl}, unsigned{s.ip_id}, unsigned{s.df}, s.flow_label,
        unsigned{s.udp_sport}, unsigned{s.udp_dport}, unsigned{s.udp_checksum});
    std::fprintf(out,
                 "\"se\":%u,\"m\":%u,\"pkey\":%u,\"fecn\":%u,\"becn\":%u,\"resv6\":%u,\"dqpn\":%u,"
                 "\"ackreq\":%u,\"resv7\":%u,\"psn\":%u,\"reth_va\":%" PRIu64
                 ",\"reth_rkey\":%u,\"reth_len\":%u,"
                 "\"aeth_syn\":%u,\"aeth_msn\":%u,\"at_va\":%" PRIu64 ",\"at_rkey\":%u,\"at_swap\":%" PRIu64
                 ",\"at_cmp\":%" PRIu64 ",\"ack_orig\":%" PRIu64
                 ",\"imm\":%u,\"ieth\":%u,\"qkey\":%u,\"srcqp\":%u,\"xrc_srqn\":%u,"
                 "\"payload\":\"%s\",\"frame\":\"%s\"}\n",
                 unsigned{s.bth.se}, unsigned{s.bth.migreq}, unsigned{s.bth.pkey}, unsigned{s.bth.fecn},
                 unsigned{s.bth.becn}, unsigned{s.bth.resv6}, s.bth.dqpn, unsigned{s.bth.ack_req},
                 unsigned{s.bth.resv7}, s.bth.psn, s.reth.va, s.reth.rkey, s.reth.dma_len,
                 unsigned{s.aeth.syndrome}, s.aeth.msn, s.atomic_eth.va, s.atomic_eth.rkey,
                 s.atomic_eth.swap_add, s.atomic_eth.compare, s.atomic_ack_eth.orig_data, s.imm, s.ieth_rkey,
                 s.deth.qkey, s.deth.src_qp, s.xrc_srqn, hex(payload.data(), payload.size()).c_str(),
                 hex(frame.data(), len).c_str());
  }
  if (std::fclose(out) != 0) return 2;
  std::printf("wire_oracle gen: seed %" PRIu64 ", %u frames, %zu opcodes\n", seed, count, opcodes.size());
  return 0;
}

// Decoded value of `key` from a parsed packet, as the Python side writes it (numbers; byte strings as hex).
bool decoded(const Packet& p, ByteSpan frame, const std::string& key, std::string& out) {
  auto num = [&](uint64_t v) {
    out = std::to_string(v);
    return true;
  };
  const bool v4 = p.ip_version == 4;
  if (key == "frame_len") return num(p.frame_len);
  if (key == "dst_mac") return out = hex(p.eth.dst.data(), 6), true;
  if (key == "src_mac") return out = hex(p.eth.src.data(), 6), true;
  if (key == "vlan") return num(p.eth.has_vlan);
  if (key == "vlan_tci") return num(p.eth.vlan_tci);
  if (key == "ipv") return num(p.ip_version);
  if (key == "src_ip") return out = v4 ? hex(p.ip4.src.data(), 4) : hex(p.ip6.src.data(), 16), true;
  if (key == "dst_ip") return out = v4 ? hex(p.ip4.dst.data(), 4) : hex(p.ip6.dst.data(), 16), true;
  if (key == "src_gid") return out = hex(p.src_gid().data(), 16), true;
  if (key == "dst_gid") return out = hex(p.dst_gid().data(), 16), true;
  if (key == "ihl") return num(p.ip4.ihl);
  if (key == "tc") return num(v4 ? p.ip4.tos : p.ip6.traffic_class);
  if (key == "ttl") return num(v4 ? p.ip4.ttl : p.ip6.hop_limit);
  if (key == "ip_id") return num(p.ip4.id);
  if (key == "ip_frag") return num(p.ip4.frag);
  if (key == "flow") return num(p.ip6.flow_label);
  if (key == "sport") return num(p.udp.sport);
  if (key == "dport") return num(p.udp.dport);
  if (key == "udp_len") return num(p.udp.length);
  if (key == "udp_csum_val") return num(p.udp.checksum);
  if (key == "op") return num(p.bth.opcode);
  if (key == "se") return num(p.bth.se);
  if (key == "m") return num(p.bth.migreq);
  if (key == "pad") return num(p.bth.pad);
  if (key == "tver") return num(p.bth.tver);
  if (key == "pkey") return num(p.bth.pkey);
  if (key == "fecn") return num(p.bth.fecn);
  if (key == "becn") return num(p.bth.becn);
  if (key == "resv6") return num(p.bth.resv6);
  if (key == "dqpn") return num(p.bth.dqpn);
  if (key == "ackreq") return num(p.bth.ack_req);
  if (key == "resv7") return num(p.bth.resv7);
  if (key == "psn") return num(p.bth.psn);
  if (key == "hdrs") return out = hdr_list(p.present), true;
  if (key == "reth_va") return num(p.reth.va);
  if (key == "reth_rkey") return num(p.reth.rkey);
  if (key == "reth_len") return num(p.reth.dma_len);
  if (key == "aeth_syn") return num(p.aeth.syndrome);
  if (key == "aeth_msn") return num(p.aeth.msn);
  if (key == "at_va") return num(p.atomic_eth.va);
  if (key == "at_rkey") return num(p.atomic_eth.rkey);
  if (key == "at_swap") return num(p.atomic_eth.swap_add);
  if (key == "at_cmp") return num(p.atomic_eth.compare);
  if (key == "ack_orig") return num(p.atomic_ack_eth.orig_data);
  if (key == "imm") return num(p.imm);
  if (key == "ieth") return num(p.ieth_rkey);
  if (key == "qkey") return num(p.deth.qkey);
  if (key == "srcqp") return num(p.deth.src_qp);
  if (key == "xrc_srqn") return num(p.xrc_srqn);
  if (key == "payload_len") return num(p.payload_len);
  if (key == "payload") return out = p.payload.empty() ? "-" : hex(p.payload.data(), p.payload.size()), true;
  if (key == "payload_offset") return num(p.payload_offset);
  if (key == "icrc") return num(p.icrc);
  if (key == "icrc_ok") return num(p.icrc_checked && p.icrc_ok);
  (void)frame;
  return false;
}

int cmd_check(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: wire_oracle check IN.txt\n");
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::perror(argv[1]);
    return 2;
  }
  std::string line;
  uint32_t lines = 0, bad_frames = 0, fields = 0;
  std::vector<uint8_t> frame;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++lines;
    std::istringstream ss(line);
    std::string tok, idx = "?";
    std::vector<std::pair<std::string, std::string>> expect;
    frame.clear();
    bool have_frame = false;
    while (ss >> tok) {
      const size_t eq = tok.find('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "line %u: token without '=': %s\n", lines, tok.c_str());
        return 2;
      }
      std::string k = tok.substr(0, eq), v = tok.substr(eq + 1);
      if (k == "idx")
        idx = v;
      else if (k == "frame")
        have_frame = unhex(v, frame);
      else
        expect.emplace_back(std::move(k), std::move(v));
    }
    if (!have_frame) {
      std::fprintf(stderr, "line %u: no frame=HEX\n", lines);
      return 2;
    }
    Packet p;
    const ParseError e = parse_frame(ByteSpan(frame.data(), frame.size()), p);
    std::string problems;
    if (e != ParseError::ok) problems += " parse_frame=" + std::string(to_string(e));
    for (const auto& [k, v] : expect) {
      std::string got;
      if (!decoded(p, frame, k, got)) {
        std::fprintf(stderr, "line %u: unknown key %s\n", lines, k.c_str());
        return 2;
      }
      ++fields;
      if (got != v) problems += " " + k + ": expected " + v + " got " + got;
    }
    if (!problems.empty()) {
      if (++bad_frames <= 20) std::printf("MISMATCH idx %s:%s\n", idx.c_str(), problems.c_str());
    }
  }
  std::printf("wire_oracle check: %u frames, %u field comparisons, %u frames differ\n", lines, fields,
              bad_frames);
  return bad_frames == 0 && lines > 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "opcodes") == 0) return cmd_opcodes();
  if (argc >= 2 && std::strcmp(argv[1], "gen") == 0) return cmd_gen(argc - 1, argv + 1);
  if (argc >= 2 && std::strcmp(argv[1], "check") == 0) return cmd_check(argc - 1, argv + 1);
  std::fprintf(stderr, "usage: wire_oracle opcodes | gen SEED COUNT OUT.jsonl [OUT.pcap] | check IN.txt\n");
  return 2;
}
