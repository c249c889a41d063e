// The fault rule fuzz target's replay (tests/fuzz/replay.h): generated seeds (each rule of a list with each
// of a set of frames built by the wire builders: every header a rule can corrupt, IPv4 and IPv6, with and
// without 802.1Q, a CM MAD, Ethernet padding, a UDP checksum), each also cut at every length and with every
// byte's bit 0 and bit 7 flipped.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/fuzz/replay.h"
#include "wire/mad.h"
#include "wire/packet.h"

namespace {

using namespace urxe::wire;
using urxe::fuzz::Bytes;

const char* const kRules[] = {
    "drop",
    "dir rx qpn 0x11 opcode send_only first 1 drop",
    "dir tx opcode rc_rdma_write_middle psn +2 duplicate 3",
    "class nak skip 1 every 2 delay 250us",
    "class rnr-nak prob 0.5 seed 9 reorder 4",
    "class cm:req first 2 drop",
    "class cm delay 2s",
    "after 100ms for 50ms drop",
    "dir tx for 1ns every 2 ecn-ce",
    "class read-response psn 0xfffffe-1 ecn-ce",
    "class atomic corrupt atomiceth.va=0x1001",
    "class atomic-ack corrupt atomicacketh.orig",
    "class request corrupt icrc",
    "corrupt bth.opcode",
    "corrupt bth.opcode=0x0a",
    "corrupt bth.se",
    "corrupt bth.migreq=1",
    "corrupt bth.pad=3",
    "corrupt bth.tver",
    "corrupt bth.pkey=0x7fff",
    "corrupt bth.destqp=0xffffff",
    "corrupt bth.ackreq",
    "corrupt bth.psn=0",
    "corrupt reth.va",
    "corrupt reth.rkey=0xdeadbeef",
    "corrupt reth.len=0",
    "corrupt aeth.syndrome=0x62",
    "corrupt aeth.msn",
    "corrupt atomiceth.rkey",
    "corrupt atomiceth.swap=0xffffffffffffffff",
    "corrupt atomiceth.compare",
    "corrupt deth.qkey=0x80010001",
    "corrupt deth.srcqp",
    "corrupt xrceth.srqn=7",
    "corrupt immdt",
    "corrupt ieth.rkey=1",
    "corrupt payload=0xff",
    "ecn-ce",
    "truncate 1",
    "truncate 4",
    "truncate 65535",
    "opcode cnp every 3 first 2 truncate 8",
    "psn +0-3 prob 0.25 seed 123 corrupt payload",
};

Bytes build(FrameSpec s, size_t payload_len) {
  if (!opcode_info(s.bth.opcode).has_payload) payload_len = 0;
  Bytes payload(payload_len);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(0x30 + i * 5);
  Bytes f(frame_size(s, static_cast<uint32_t>(payload_len)));
  f.resize(build_frame(f, s, payload));
  return f;
}

std::vector<Bytes> frames() {
  FrameSpec s;
  s.src_ip = gid_from_ipv4({10, 77, 0, 11});
  s.dst_ip = gid_from_ipv4({10, 77, 0, 12});
  s.traffic_class = 0x02;
  s.bth.dqpn = 0x11;
  s.bth.psn = 0xfffffe;
  s.reth = Reth{0x1000, 0x1234, 64};
  s.aeth = Aeth{0x60, 5};
  s.atomic_eth = AtomicEth{0x2000, 0x99, 1, 2};
  s.deth = Deth{0x1111, 0x22};
  s.xrc_srqn = 0x33;
  std::vector<Bytes> out;
  const uint8_t opcodes[] = {op::kRc | op::send_only,
                             op::kRc | op::write_first,
                             op::kRc | op::read_request,
                             op::kRc | op::acknowledge,
                             op::kRc | op::read_response_middle,
                             op::kRc | op::compare_swap,
                             op::kRc | op::atomic_acknowledge,
                             op::kUd | op::send_only_imm,
                             op::kXrc | op::write_only_imm,
                             op::kRc | op::send_only_inv,
                             op::cnp};
  for (uint8_t code : opcodes) {
    s.bth.opcode = code;
    out.push_back(build(s, 13));
  }
  FrameSpec v6 = s;  // IPv6 behind 802.1Q, with a UDP checksum
  v6.ip_version = 6;
  v6.has_vlan = true;
  v6.vlan_tci = 100;
  v6.src_ip = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  v6.dst_ip = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  v6.udp_checksum = true;
  v6.bth.opcode = op::kRc | op::write_only;
  out.push_back(build(v6, 32));
  s.bth.opcode = op::kRc | op::acknowledge;  // padded to Ethernet's 60 bytes and more
  Bytes padded = build(s, 0);
  padded.resize(padded.size() + 8, 0);
  out.push_back(padded);
  // A CM REQ on QP1.
  std::array<uint8_t, kMadSize> mad{};
  build_cm_mad(mad, CmMad{.header = {}, .msg = CmReq{}});
  FrameSpec cm = s;
  cm.bth.opcode = op::kUd | op::send_only;
  cm.bth.dqpn = kQp1;
  cm.deth = Deth{kQp1Qkey, kQp1};
  Bytes f(frame_size(cm, kMadSize));
  f.resize(build_frame(f, cm, mad));
  out.push_back(f);
  return out;
}

Bytes seed(const char* rule, const Bytes& frame) {
  Bytes s(rule, rule + std::char_traits<char>::length(rule));
  s.push_back('\n');
  s.insert(s.end(), frame.begin(), frame.end());
  return s;
}

std::vector<Bytes> seeds() {
  std::vector<Bytes> out;
  for (const char* r : kRules)
    for (const Bytes& f : frames()) out.push_back(seed(r, f));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  return urxe::fuzz::seed_replay_main(argc, argv, seeds(), {});
}
