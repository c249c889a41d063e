// In-process tests of `urxe pcap decode` (tools/pcap_decode.h) on the captures in pcap-fixtures/: every
// RoCEv2 frame decodes with a good ICRC, every single-bit corruption that RoCEv2 can detect is detected,
// and other link types decode like Ethernet.
#include <gtest/gtest.h>
#include <pcap/pcap.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tools/json_writer.h"
#include "tools/pcap_decode.h"

namespace fs = std::filesystem;
using namespace urxe;
using tools::DecodedFrame;
using tools::PcapReader;
using wire::ParseError;

namespace {

struct RawFrame {
  std::vector<uint8_t> bytes;
  uint32_t wirelen = 0;
  int64_t ts_sec = 0;
  uint32_t ts_nsec = 0;
};

std::vector<std::string> fixture_files() {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(URXE_PCAP_FIXTURES)) {
    const std::string ext = e.path().extension();
    if (ext == ".pcap" || ext == ".pcapng") v.push_back(e.path());
  }
  std::sort(v.begin(), v.end());
  return v;
}

std::string fixture(const std::string& name) {
  return std::string(URXE_PCAP_FIXTURES) + "/" + name;
}

std::vector<RawFrame> read_frames(const std::string& path) {
  PcapReader r;
  std::string err;
  EXPECT_TRUE(r.open(path, err)) << path << ": " << err;
  std::vector<RawFrame> v;
  PcapReader::Frame f;
  int rc;
  while ((rc = r.next(f, err)) == 1) {
    v.push_back({std::vector<uint8_t>(f.eth.begin(), f.eth.end()), f.wirelen, f.ts_sec, f.ts_nsec});
  }
  EXPECT_EQ(rc, 0) << path << ": " << err;
  return v;
}

// Writes `frames` as a pcap file of link type `dlt`.
void write_pcap(const std::string& path, int dlt, const std::vector<RawFrame>& frames) {
  pcap_t* dead = pcap_open_dead_with_tstamp_precision(dlt, 65535, PCAP_TSTAMP_PRECISION_NANO);
  ASSERT_NE(dead, nullptr);
  pcap_dumper_t* d = pcap_dump_open(dead, path.c_str());
  ASSERT_NE(d, nullptr) << pcap_geterr(dead);
  for (const RawFrame& f : frames) {
    pcap_pkthdr h{};
    h.ts.tv_sec = f.ts_sec;
    h.ts.tv_usec = static_cast<suseconds_t>(f.ts_nsec);
    h.caplen = static_cast<uint32_t>(f.bytes.size());
    h.len = f.wirelen ? f.wirelen : h.caplen;
    pcap_dump(reinterpret_cast<u_char*>(d), &h, f.bytes.data());
  }
  pcap_dump_close(d);
  pcap_close(dead);
}

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/urxe-pcap-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

// ---------------------------------------------------------------------------------------------------------

TEST(Fixtures, EveryRoceFrameDecodesWithGoodIcrcAndStrictPasses) {
  const auto files = fixture_files();
  ASSERT_GE(files.size(), 30u) << "pcap-fixtures/ is missing captures";
  uint64_t roce = 0;
  for (const std::string& path : files) {
    std::ostringstream out, err;
    tools::DecodeSummary sum;
    EXPECT_EQ(tools::decode_file(path, {.json = true, .strict = true}, out, err, &sum), tools::kExitOk)
        << path << "\n"
        << err.str();
    EXPECT_GT(sum.roce, 0u) << path;
    EXPECT_EQ(sum.bad, 0u) << path;
    EXPECT_EQ(sum.roce + sum.skipped, sum.frames) << path;
    uint64_t n = 0, file_roce = 0;
    for (const RawFrame& f : read_frames(path)) {
      const DecodedFrame d = tools::decode_frame(f.bytes, ++n, f.wirelen);
      if (!d.roce) continue;
      ++file_roce;
      EXPECT_EQ(d.error, ParseError::ok) << path << " frame " << n << ": " << wire::to_string(d.error);
      EXPECT_TRUE(d.pkt.icrc_checked && d.pkt.icrc_ok) << path << " frame " << n;
    }
    EXPECT_EQ(file_roce, sum.roce) << path;
    roce += file_roce;
  }
  std::printf("decoded %llu RoCEv2 frames in %zu fixtures\n", static_cast<unsigned long long>(roce),
              files.size());
}

// ---------------------------------------------------------------------------------------------------------
// Flipped bits. RoCEv2 protects a frame with the IPv4 header checksum, the UDP checksum when non-zero, the
// length fields and the ICRC (CRC-32, which catches every single-bit error in what it covers). The ICRC masks
// the fields routers may change in flight. What no receiver can detect, by design:
//  - the Ethernet header (destination/source MAC, EtherType, VLAN tag): protected only by the FCS, which
//    captures do not contain. Not flipped here.
//  - IPv6 traffic class (8 bits), flow label (20 bits), hop limit (8 bits): masked in the ICRC and IPv6 has
//    no header checksum. (IPv4's masked TOS and TTL are covered by the IPv4 header checksum.)
//  - BTH byte 4 (FECN, BECN and 6 reserved bits): masked in the ICRC so switches can mark congestion. Only
//    when the UDP checksum is 0, as RoCEv2 NICs send it; a non-zero UDP checksum (the scapy vector) covers
//    it.
//  - bytes after the IP datagram (Ethernet padding of short frames): outside everything.
// And a flip of the UDP destination port makes the frame "not RoCE" (the port is what makes it RoCE).
// Those bits must decode as a good frame (or not RoCE for the port); every other bit must not.

enum class Outcome { error, not_roce, good };

struct FlipStats {
  uint64_t frames = 0, bits = 0, error = 0, not_roce = 0, exempt = 0;
  std::map<std::string, uint64_t> errors;  // by wire's ParseError text
};

bool undetectable_by_design(const DecodedFrame& orig, uint32_t byte, uint32_t bit) {
  const wire::Packet& p = orig.pkt;
  if (byte >= p.frame_len) return true;                              // Ethernet padding after the IP datagram
  if (byte == p.bth_offset + 4 && p.udp.checksum == 0) return true;  // FECN, BECN, resv6
  if (p.ip_version == 6) {
    const uint32_t o = byte - p.l3_offset;
    if (o == 0 && bit < 4) return true;           // traffic class, high nibble (bit numbers: 0 = LSB)
    if (o == 1 || o == 2 || o == 3) return true;  // traffic class low nibble + flow label
    if (o == 7) return true;                      // hop limit
  }
  return false;
}

bool is_udp_dport(const DecodedFrame& orig, uint32_t byte) {
  return byte == orig.pkt.l4_offset + 2 || byte == orig.pkt.l4_offset + 3;
}

// Flips every bit from the IP header to the end of the frame, one at a time.
void flip_every_bit(const std::string& what, std::vector<uint8_t> frame, FlipStats& st) {
  const DecodedFrame orig = tools::decode_frame(frame, 1);
  ASSERT_TRUE(orig.good()) << what;
  ++st.frames;
  const uint32_t n = static_cast<uint32_t>(frame.size());
  for (uint32_t byte = orig.pkt.l3_offset; byte < n; ++byte) {
    for (uint32_t bit = 0; bit < 8; ++bit) {
      frame[byte] ^= static_cast<uint8_t>(1u << bit);
      const DecodedFrame d = tools::decode_frame(frame, 1);
      frame[byte] ^= static_cast<uint8_t>(1u << bit);
      ++st.bits;
      const Outcome o = !d.roce ? Outcome::not_roce : d.good() ? Outcome::good : Outcome::error;
      if (undetectable_by_design(orig, byte, bit)) {
        ++st.exempt;
        EXPECT_EQ(o, Outcome::good) << what << ": byte " << byte << " bit " << bit
                                    << " is listed as undetectable but was caught: "
                                    << (d.roce ? wire::to_string(d.error) : d.skip_reason);
        continue;
      }
      if (is_udp_dport(orig, byte)) {
        EXPECT_EQ(o, Outcome::not_roce) << what << ": UDP destination port byte " << byte << " bit " << bit;
      }
      if (o == Outcome::good) {
        ADD_FAILURE() << what << ": flipping byte " << byte << " bit " << bit << " still decodes as a good "
                      << d.pkt.info->name << " frame";
      } else if (o == Outcome::error) {
        ++st.error;
        ++st.errors[std::string(wire::to_string(d.error))];
      } else {
        ++st.not_roce;
      }
    }
  }
}

void print_stats(const char* what, const FlipStats& st) {
  std::printf("%s: %llu frames, %llu bits flipped: %llu errors, %llu not RoCE, %llu undetectable by design\n",
              what, static_cast<unsigned long long>(st.frames), static_cast<unsigned long long>(st.bits),
              static_cast<unsigned long long>(st.error), static_cast<unsigned long long>(st.not_roce),
              static_cast<unsigned long long>(st.exempt));
  for (const auto& [e, c] : st.errors)
    std::printf("  %-14s %llu\n", e.c_str(), static_cast<unsigned long long>(c));
}

// Every fixture: all opcodes present (SEND/WRITE/READ/atomic/ACK/NAK, UC, UD, CNP, immediate data), pad
// counts 0..3, a non-zero UDP checksum (the scapy vector), hardware (the CNP). About 1 s per million bits.
TEST(FlipBits, EveryBitOfEveryRoceFrameOfEveryFixture) {
  FlipStats st;
  for (const std::string& path : fixture_files()) {
    const std::string name = fs::path(path).filename();
    uint64_t n = 0;
    for (const RawFrame& f : read_frames(path)) {
      ++n;
      if (!tools::decode_frame(f.bytes, n).roce) continue;
      flip_every_bit(name + " frame " + std::to_string(n), f.bytes, st);
      if (HasFailure()) return;  // one corrupt-frame report is enough
    }
  }
  print_stats("fixtures", st);
  EXPECT_GT(st.error, 0u);
}

// The fixtures hold neither IPv6 nor VLAN frames: build one frame of every opcode in the table in each
// encapsulation and flip every bit of those too. This is where the IPv6 exemptions are exercised.
TEST(FlipBits, EveryOpcodeOverIpv4Ipv6AndVlan) {
  FlipStats st;
  std::vector<uint8_t> buf(2048);
  const std::vector<uint8_t> payload = {1, 2, 3, 4, 5, 6, 7};  // pad 1
  for (int op = 0; op < 256; ++op) {
    if (!wire::opcode_info(static_cast<uint8_t>(op)).valid()) continue;
    for (int variant = 0; variant < 3; ++variant) {
      wire::FrameSpec s;
      s.src_mac = {2, 0, 0, 0, 0, 1};
      s.dst_mac = {2, 0, 0, 0, 0, 2};
      s.has_vlan = variant == 2;
      s.vlan_tci = 0x6123;
      s.ip_version = variant == 0 ? 4 : 6;
      s.src_ip = variant == 0 ? wire::gid_from_ipv4({10, 0, 0, 1})
                              : wire::Gid{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
      s.dst_ip = variant == 0 ? wire::gid_from_ipv4({10, 0, 0, 2})
                              : wire::Gid{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
      s.traffic_class = 0x68;
      s.flow_label = 0x12345;
      s.udp_sport = 0xc123;
      s.bth.opcode = static_cast<uint8_t>(op);
      s.bth.dqpn = 0x123456;
      s.bth.psn = 0xabcdef;
      s.bth.ack_req = true;
      s.reth = {0x1122334455667788ull, 0xdeadbeef, 7};
      s.aeth = {wire::make_syndrome(wire::AethType::rnr_nak, 12), 0x345678};
      s.atomic_eth = {0x1000, 0x4321, 5, 6};
      s.atomic_ack_eth = {0x0102030405060708ull};
      s.deth = {0x11111111, 0x000018};
      s.imm = 0xcafef00d;
      s.ieth_rkey = 0x8765;
      s.xrc_srqn = 0x00abcd;
      const auto& info = wire::opcode_info(static_cast<uint8_t>(op));
      const uint32_t len =
          wire::build_frame(buf, s, info.has_payload ? wire::ByteSpan(payload) : wire::ByteSpan());
      ASSERT_GT(len, 0u) << info.name;
      flip_every_bit(std::string(info.name) + (variant == 0   ? " ipv4"
                                               : variant == 1 ? " ipv6"
                                                              : " vlan+ipv6"),
                     std::vector<uint8_t>(buf.begin(), buf.begin() + len), st);
      if (HasFailure()) return;
    }
  }
  print_stats("built frames", st);
  EXPECT_GT(st.exempt, 0u);
}

// A RoCE frame cut anywhere inside its IP datagram (a short snaplen, a short read) is never a good frame.
TEST(Truncation, EveryPrefixOfEveryRoceFrameIsNotGood) {
  uint64_t prefixes = 0;
  for (const std::string& path : fixture_files()) {
    uint64_t n = 0;
    for (const RawFrame& f : read_frames(path)) {
      const DecodedFrame full = tools::decode_frame(f.bytes, ++n);
      if (!full.roce) continue;
      for (uint32_t len = 0; len < full.pkt.frame_len; ++len) {
        const DecodedFrame d = tools::decode_frame(wire::ByteSpan(f.bytes.data(), len), n);
        ++prefixes;
        ASSERT_FALSE(d.good()) << path << " frame " << n << " cut to " << len << " bytes";
        // Once the UDP header is there, it is still recognised as a (broken) RoCE frame.
        if (len >= full.pkt.l4_offset + wire::kUdpLen) {
          ASSERT_TRUE(d.roce) << path << " frame " << n << " cut to " << len;
        }
      }
    }
  }
  std::printf("%llu truncated frames, none good\n", static_cast<unsigned long long>(prefixes));
}

// A whole capture with one RoCE frame corrupted: --strict must fail, the frame must show its error.
TEST(FlipBits, FlippedCaptureFailsStrict) {
  TempDir tmp;
  auto frames = read_frames(fixture("rxe-qemu-rc_send_s64.pcap"));
  ASSERT_GT(frames.size(), 3u);
  const DecodedFrame d = tools::decode_frame(frames[2].bytes, 3);
  ASSERT_TRUE(d.good());
  frames[2].bytes[d.pkt.payload_offset] ^= 0x10;  // one payload bit of frame 3
  const std::string path = tmp.path / "flipped.pcap";
  write_pcap(path, DLT_EN10MB, frames);
  std::ostringstream out, err;
  tools::DecodeSummary sum;
  EXPECT_EQ(tools::decode_file(path, {.json = false, .strict = true}, out, err, &sum), tools::kExitBadFrames);
  EXPECT_EQ(sum.bad, 1u);
  EXPECT_EQ(sum.good, frames.size() - 1);
  std::istringstream lines(out.str());
  std::string line;
  for (int i = 1; std::getline(lines, line); ++i) {
    EXPECT_EQ(line.find("bad ICRC") != std::string::npos, i == 3) << line;
  }
  std::ostringstream out2, err2;
  EXPECT_EQ(tools::decode_file(path, {.json = false, .strict = false}, out2, err2), tools::kExitOk);
}

// ---------------------------------------------------------------------------------------------------------

TEST(LinkTypes, SllSll2AndRawIpDecodeLikeEthernet) {
  TempDir tmp;
  const auto eth = read_frames(fixture("rxe-linlinw5-rdma_atomic_bw.pcap"));  // RoCE and TCP frames
  ASSERT_FALSE(eth.empty());
  std::vector<RawFrame> sll, sll2, raw;
  for (const RawFrame& f : eth) {
    const uint8_t* b = f.bytes.data();
    const uint16_t type = wire::load_be16(b + 12);
    RawFrame s = f, s2 = f, r = f;
    // SLL: pkttype(2) hatype(2)=1 halen(2)=6 addr(8)=source MAC protocol(2)
    s.bytes.assign(16, 0);
    wire::store_be16(s.bytes.data() + 2, 1);
    wire::store_be16(s.bytes.data() + 4, 6);
    std::copy(b + 6, b + 12, s.bytes.begin() + 6);
    wire::store_be16(s.bytes.data() + 14, type);
    s.bytes.insert(s.bytes.end(), f.bytes.begin() + 14, f.bytes.end());
    s.wirelen = f.wirelen + 2;
    // SLL2: protocol(2) reserved(2) ifindex(4) hatype(2) pkttype(1) halen(1) addr(8)
    s2.bytes.assign(20, 0);
    wire::store_be16(s2.bytes.data(), type);
    wire::store_be16(s2.bytes.data() + 8, 1);
    s2.bytes[11] = 6;
    std::copy(b + 6, b + 12, s2.bytes.begin() + 12);
    s2.bytes.insert(s2.bytes.end(), f.bytes.begin() + 14, f.bytes.end());
    s2.wirelen = f.wirelen + 6;
    r.bytes.assign(f.bytes.begin() + 14, f.bytes.end());
    r.wirelen = f.wirelen - 14;
    sll.push_back(s), sll2.push_back(s2), raw.push_back(r);
  }
  write_pcap(tmp.path / "sll.pcap", DLT_LINUX_SLL, sll);
  write_pcap(tmp.path / "sll2.pcap", DLT_LINUX_SLL2, sll2);
  write_pcap(tmp.path / "raw.pcap", DLT_RAW, raw);
  for (const char* name : {"sll.pcap", "sll2.pcap", "raw.pcap"}) {
    const std::string path = tmp.path / name;
    PcapReader r;
    std::string err;
    ASSERT_TRUE(r.open(path, err)) << err;
    PcapReader::Frame f;
    size_t i = 0;
    while (r.next(f, err) == 1) {
      ASSERT_LT(i, eth.size());
      const DecodedFrame a = tools::decode_frame(eth[i].bytes, i + 1, eth[i].wirelen);
      const DecodedFrame b = tools::decode_frame(f.eth, i + 1, f.wirelen);
      EXPECT_EQ(a.roce, b.roce) << name << " frame " << i + 1;
      EXPECT_EQ(a.good(), b.good()) << name << " frame " << i + 1;
      EXPECT_EQ(a.skip_reason, b.skip_reason) << name << " frame " << i + 1;
      EXPECT_EQ(a.pkt.bth.psn, b.pkt.bth.psn);
      EXPECT_EQ(a.pkt.payload_len, b.pkt.payload_len);
      EXPECT_EQ(a.wirelen, b.wirelen) << name;
      EXPECT_FALSE(f.has_dst_mac);
      EXPECT_EQ(f.has_src_mac, std::string(name) != "raw.pcap");
      if (f.has_src_mac) {
        EXPECT_TRUE(std::equal(b.pkt.eth.src.begin(), b.pkt.eth.src.end(), eth[i].bytes.begin() + 6));
      }
      ++i;
    }
    EXPECT_EQ(i, eth.size()) << name;
  }
}

TEST(LinkTypes, UnsupportedLinkTypeIsAClearError) {
  TempDir tmp;
  const std::string path = tmp.path / "ppp.pcap";
  write_pcap(path, DLT_PPP, {RawFrame{{0xff, 0x03, 0x00, 0x21}, 0, 0, 0}});
  std::ostringstream out, err;
  EXPECT_EQ(tools::decode_file(path, {}, out, err), tools::kExitError);
  EXPECT_NE(err.str().find("unsupported link type 9"), std::string::npos) << err.str();
}

TEST(Decode, SnaplenTruncatedRoceFrameIsAnError) {
  const auto frames = read_frames(fixture("rxe-qemu-rc_send_s64.pcap"));
  ASSERT_FALSE(frames.empty());
  const RawFrame& f = frames[0];
  const DecodedFrame d = tools::decode_frame(wire::ByteSpan(f.bytes.data(), 70), 1, f.wirelen);
  EXPECT_TRUE(d.roce);
  EXPECT_EQ(d.error, ParseError::truncated);
  EXPECT_FALSE(d.good());
  const std::string line = tools::format_text(d, 0, 0);
  EXPECT_NE(line.find("captured 70 of " + std::to_string(f.wirelen) + " bytes"), std::string::npos) << line;
  const std::string json = tools::format_json(d);
  EXPECT_NE(json.find("\"error\":\"truncated\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"icrc_ok\":false"), std::string::npos) << json;
}

TEST(Decode, IpChecksumErrorStillCountsAsRoce) {
  auto frames = read_frames(fixture("rxe-qemu-rc_send_s64.pcap"));
  ASSERT_FALSE(frames.empty());
  std::vector<uint8_t> b = frames[0].bytes;
  b[14 + 8] ^= 1;  // TTL: masked by the ICRC, caught by the IPv4 header checksum
  const DecodedFrame d = tools::decode_frame(b, 1);
  EXPECT_TRUE(d.roce);
  EXPECT_EQ(d.error, ParseError::bad_checksum);
  EXPECT_TRUE(d.udp_parsed);
  EXPECT_EQ(d.pkt.udp.dport, wire::kRoceV2Port);
}

// A QP1 frame shows its CM message in both forms; the values are tshark's for the same frames.
TEST(Decode, CmMadsOfRping) {
  const std::vector<RawFrame> frames = read_frames(fixture("rxe-qemu-rdma_cm_rping.pcap"));
  ASSERT_GE(frames.size(), 41u);
  const DecodedFrame req = tools::decode_frame(frames[0].bytes, 1);
  ASSERT_TRUE(req.mad);
  EXPECT_EQ(req.mad_error, wire::MadError::ok);
  const std::string text = tools::format_text(req, 0, 0);
  EXPECT_NE(text.find(" CM REQ tid=0x00000002fb1295c1 comm_id=0xc19512fb qpn=0x000029 psn=16333753 "
                      "service_id=0x0000000001061c06 icrc=ok"),
            std::string::npos)
      << text;
  const std::string json = tools::format_json(tools::decode_frame(frames[1].bytes, 2));
  EXPECT_NE(json.find("\"cm\":{\"type\":\"REP\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"remote_comm_id\":3247772411"), std::string::npos) << json;  // 0xc19512fb
  const std::string drep = tools::format_text(tools::decode_frame(frames[40].bytes, 41), 0, 0);
  EXPECT_NE(drep.find(" CM DREP tid=0x00000002fb1295c1 comm_id=0x6365af16 remote_comm_id=0xc19512fb"),
            std::string::npos)
      << drep;
  // Data frames carry no MAD.
  EXPECT_FALSE(tools::decode_frame(frames[3].bytes, 4).mad);
}

// XRC (IBTA Annex A14), built by Scapy with the XRCETH laid out from the spec: a request shows its XRC SRQ
// number and a response has none; both say where tshark 4.0 stops (it dissects nothing after the BTH).
TEST(Decode, XrcRequestShowsItsXrcSrqNumber) {
  auto bytes = [](std::string_view h) {
    std::vector<uint8_t> v;
    for (size_t i = 0; i + 1 < h.size(); i += 2)
      v.push_back(static_cast<uint8_t>(std::stoi(std::string(h.substr(i, 2)), nullptr, 16)));
    return v;
  };
  // XRC RDMA WRITE ONLY: BTH, XRCETH (reserved 0, SRQ 0x123456), RETH, 8 bytes, ICRC
  const auto write = bytes(
      "02000000000202000000000108004500004800014000401126a20a0000010a000002c00012b700340000aa00ffff00000012"
      "800000050012345600007f000000100000001234000000084142434445464748ad36eff6");
  const DecodedFrame w = tools::decode_frame(write, 1);
  ASSERT_TRUE(w.good());
  const std::string text = tools::format_text(w, 0, 0);
  EXPECT_NE(
      text.find(" XRC RDMA_WRITE_ONLY (0xaa) dqpn=0x000012 psn=5 ack_req=1 se=0 pad=0 (Annex A14; tshark "
                "4.0: no XRCETH or later headers) xrceth[srqn=0x123456] reth[va=0x00007f0000001000 "
                "rkey=0x00001234 dma_len=8] payload=8 icrc=ok"),
      std::string::npos)
      << text;
  const std::string json = tools::format_json(w);
  EXPECT_NE(json.find("\"xrceth\":{\"srqn\":1193046},\"reth\":"), std::string::npos) << json;
  // XRC ACKNOWLEDGE: BTH, AETH, ICRC
  const auto ack = bytes(
      "02000000000202000000000108004500003000014000401126ba0a0000010a000002c00012b7001c0000b100ffff00000012"
      "800000050000000724455a76");
  const DecodedFrame a = tools::decode_frame(ack, 2);
  ASSERT_TRUE(a.good());
  const std::string ack_text = tools::format_text(a, 0, 0);
  EXPECT_NE(ack_text.find(" XRC ACKNOWLEDGE (0xb1) "), std::string::npos) << ack_text;
  EXPECT_NE(ack_text.find("(Annex A14; tshark 4.0: no XRCETH or later headers) aeth[ACK credit=0"),
            std::string::npos)
      << ack_text;
  EXPECT_EQ(ack_text.find("xrceth"), std::string::npos) << ack_text;
  EXPECT_EQ(tools::format_json(a).find("xrceth"), std::string::npos);
}

TEST(JsonWriter, EscapesStringsAndNests) {
  tools::JsonWriter j;
  j.begin_object().str("a\"b", "x\\y\n\t\x01\x7f é").num("n", uint64_t{18446744073709551615ull});
  j.begin_array("l").num(uint64_t{1}).str("s").end_array().begin_object("o").boolean("t", true).null("z");
  j.end_object().end_object();
  EXPECT_EQ(j.text(),
            "{\"a\\\"b\":\"x\\\\y\\n\\t\\u0001\\u007f é\",\"n\":18446744073709551615,\"l\":[1,\"s\"],"
            "\"o\":{\"t\":true,\"z\":null}}");
}

}  // namespace
