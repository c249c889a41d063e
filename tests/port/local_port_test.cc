// The same-host path's routing (dpdk/local_port.h): between two devices (two MACs) of one run directory, a
// frame to the other device's MAC and to a QPN block with a ring arrives through that ring, not through
// the port; a frame to a MAC that is no device there, to a block without a ring or to a device that has
// closed goes through the port (here a loop port, which hands a frame back to its own sender, so the
// sender's rx_burst sees what went the wire's way).
#include "dpdk/local_port.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "dpdk/memory_port.h"
#include "tests/port/tmp_dir.h"
#include "wire/opcode.h"
#include "wire/packet.h"
#include "wire/psn.h"

namespace urxe::dpdk {
namespace {

using TmpDir = urxe::test::TmpDir;

namespace fs = std::filesystem;

constexpr uint32_t kBlock = 65536, kBase0 = 0x11;

struct Device {
  std::unique_ptr<LocalPathPort> port;
  wire::MacAddr mac{};
  Device(const std::string& dir, uint8_t last, uint32_t block, uint32_t mtu = 1500) {
    engine::PortAttr attr;
    attr.mac = {0x02, 0, 0, 0, 0, last};
    attr.mtu = mtu;
    mac = attr.mac;
    // A bus of its own per device: what goes out through the port comes back to the same device only.
    auto inner = open_memory_port(attr, "local_port_test-" + std::to_string(::getpid()) + "-" +
                                            std::to_string(last) + "-" + std::to_string(block));
    LocalPathConfig cfg;
    cfg.dir = dir;
    cfg.block = block;
    cfg.qpn_base0 = kBase0;
    cfg.block_size = kBlock;
    cfg.blocks = 255;
    std::string err;
    port = LocalPathPort::open(inner, cfg, err);
    EXPECT_TRUE(port) << err;
  }
  // A SEND ONLY from this device to dst_mac, QP dqpn, `tag` in its PSN.
  wire::FrameSpec spec_to(const wire::MacAddr& dst_mac, uint32_t dqpn, uint32_t tag) const {
    wire::FrameSpec spec;
    spec.dst_mac = dst_mac;
    spec.src_mac = mac;
    spec.src_ip[10] = spec.src_ip[11] = spec.dst_ip[10] = spec.dst_ip[11] = 0xff;
    spec.bth.opcode = wire::op::kRc | wire::op::send_only;
    spec.bth.dqpn = dqpn;
    spec.bth.psn = tag;
    return spec;
  }
  // Sends that frame with 64 B of payload; true when the port took it. no_icrc: as the engine builds it
  // for this port (tx_icrc_offload), the ICRC's bytes left zero.
  bool send(const wire::MacAddr& dst_mac, uint32_t dqpn, uint32_t tag, bool no_icrc = false) {
    const uint8_t payload[64] = {};
    engine::PacketBuf buf{};
    if (!port->tx_alloc(2048, buf)) return false;
    buf.len = wire::build_frame(wire::MutByteSpan(buf.data, 2048), spec_to(dst_mac, dqpn, tag),
                                wire::ByteSpan(payload, 64));
    if (no_icrc && buf.len) {
      std::memset(buf.data + buf.len - wire::kIcrcLen, 0, wire::kIcrcLen);
      buf.icrc_absent = true;
    }
    return buf.len > 0 && port->tx_burst(&buf, 1) == 1;
  }
  // The frames received now: {PSN, whether it came without an ICRC, whether its ICRC checks}.
  struct Got {
    uint32_t psn;
    bool icrc_absent, icrc_ok;
    bool operator==(const Got&) const = default;
  };
  std::vector<Got> receive_icrc() {
    std::vector<Got> out;
    engine::PacketBuf bufs[16];
    const uint32_t n = port->rx_burst(bufs, 16);
    for (uint32_t i = 0; i < n; i++) {
      wire::Packet pkt;
      wire::ParseOptions unchecked;
      unchecked.verify_icrc = false;
      const wire::ByteSpan f(bufs[i].data, bufs[i].len);
      if (wire::parse_frame(f, pkt, unchecked) == wire::ParseError::ok)
        out.push_back({pkt.bth.psn, bufs[i].icrc_absent, wire::parse_frame(f, pkt) == wire::ParseError::ok});
    }
    port->rx_free(bufs, n);
    return out;
  }
  // PSNs of the frames received now; `local` counts those that came through the ring.
  std::vector<uint32_t> receive(uint64_t* local = nullptr) {
    std::vector<uint32_t> psns;
    const uint64_t before = port->stats().rx_local;
    engine::PacketBuf bufs[16];
    const uint32_t n = port->rx_burst(bufs, 16);
    for (uint32_t i = 0; i < n; i++) {
      wire::Packet pkt;
      if (wire::parse_frame(wire::ByteSpan(bufs[i].data, bufs[i].len), pkt) == wire::ParseError::ok)
        psns.push_back(pkt.bth.psn);
    }
    port->rx_free(bufs, n);
    if (local) *local = port->stats().rx_local - before;
    return psns;
  }
};

TEST(LocalPath, RoutesByDestinationMacAndBlock) {
  TmpDir dir("urxe-local-port");
  Device a(dir.path, 0xa, 0), b(dir.path, 0xb, 3);
  ASSERT_TRUE(a.port && b.port);
  EXPECT_TRUE(fs::exists(local_mac_dir(dir.path, b.mac.data()) + "/b3.seg"));

  // To B's MAC and B's block: through B's ring; A's port carried nothing.
  ASSERT_TRUE(a.send(b.mac, kBase0 + 3 * kBlock + 5, 101));
  uint64_t local = 0;
  EXPECT_EQ(b.receive(&local), std::vector<uint32_t>{101});
  EXPECT_EQ(local, 1u);
  EXPECT_TRUE(a.receive().empty());
  EXPECT_EQ(a.port->stats().tx_local, 1u);

  // To B's MAC but a block nobody has a ring for: the port's way (back to A on its own bus), not to B.
  ASSERT_TRUE(a.send(b.mac, kBase0 + 4 * kBlock, 102));
  EXPECT_EQ(a.receive(&local), std::vector<uint32_t>{102});
  EXPECT_EQ(local, 0u);
  EXPECT_TRUE(b.receive().empty());

  // To a MAC that is no device of this run directory: the port's way.
  ASSERT_TRUE(a.send(wire::MacAddr{0x02, 0, 0, 0, 0, 0xc}, kBase0 + 3 * kBlock, 103));
  EXPECT_EQ(a.receive(&local), std::vector<uint32_t>{103});
  EXPECT_EQ(local, 0u);
  // QP1 (CM MADs, below the first block): the port's way, even to B.
  ASSERT_TRUE(a.send(b.mac, 1, 104));
  EXPECT_EQ(a.receive(), std::vector<uint32_t>{104});

  // B answers A (its own block 0): through A's ring.
  ASSERT_TRUE(b.send(a.mac, kBase0 + 7, 201));
  EXPECT_EQ(a.receive(&local), std::vector<uint32_t>{201});
  EXPECT_EQ(local, 1u);

  // Another context of A's device (block 1): A reaches it through its ring, by A's own MAC.
  Device a2(dir.path, 0xa, 1);
  ASSERT_TRUE(a2.port);
  ASSERT_TRUE(a.send(a.mac, kBase0 + kBlock + 9, 301));
  EXPECT_EQ(a2.receive(&local), std::vector<uint32_t>{301});
  EXPECT_EQ(local, 1u);

  // B closes: its ring is gone, and A's next frame to it goes the port's way at once.
  b.port.reset();
  EXPECT_FALSE(fs::exists(local_mac_dir(dir.path, b.mac.data()) + "/b3.seg"));
  ASSERT_TRUE(a.send(b.mac, kBase0 + 3 * kBlock + 5, 105));
  EXPECT_EQ(a.receive(&local), std::vector<uint32_t>{105});
  EXPECT_EQ(local, 0u);
}

// The engine leaves the ICRC out for this port (tx_icrc_offload): a frame that crosses a ring arrives
// without it and says so (the receiving engine then does not check it), and one that goes the port's way
// gets it first, as the wire needs; a frame that has one keeps it either way.
TEST(LocalPath, IcrcLeftOutOnlyOnTheRing) {
  TmpDir dir("urxe-local-port");
  Device a(dir.path, 0xa, 0), b(dir.path, 0xb, 3);
  ASSERT_TRUE(a.port && b.port);
  EXPECT_TRUE(a.port->tx_icrc_offload());
  using Got = Device::Got;
  // through B's ring: as sent, without an ICRC, and flagged so
  ASSERT_TRUE(a.send(b.mac, kBase0 + 3 * kBlock + 5, 11, true));
  EXPECT_EQ(b.receive_icrc(), (std::vector<Got>{{11, true, false}}));
  ASSERT_TRUE(a.send(b.mac, kBase0 + 3 * kBlock + 5, 12, false));
  EXPECT_EQ(b.receive_icrc(), (std::vector<Got>{{12, false, true}}));
  // the port's way (a MAC that is no device here; back to A on its own bus): with its ICRC
  ASSERT_TRUE(a.send(wire::MacAddr{0x02, 0, 0, 0, 0, 0xc}, kBase0 + 3 * kBlock, 13, true));
  EXPECT_EQ(a.receive_icrc(), (std::vector<Got>{{13, false, true}}));
  // a frame from the ring and one from the port in one burst: each flagged as it came
  ASSERT_TRUE(b.send(a.mac, kBase0 + 7, 14, true));
  ASSERT_TRUE(a.send(wire::MacAddr{0x02, 0, 0, 0, 0, 0xc}, kBase0 + 3 * kBlock, 15, true));
  std::vector<Got> got = a.receive_icrc();
  std::sort(got.begin(), got.end(), [](const Got& x, const Got& y) { return x.psn < y.psn; });
  EXPECT_EQ(got, (std::vector<Got>{{14, true, false}, {15, false, true}}));
}

// A frame whose payload the engine left in the application's memory (tx_gather): the ring's copy takes it
// from there, and a frame that goes the port's way is made whole and gets its ICRC first.
TEST(LocalPath, GatheredPayloadArrivesWholeEitherWay) {
  TmpDir dir("urxe-local-port");
  Device a(dir.path, 0xa, 0), b(dir.path, 0xb, 3);
  ASSERT_TRUE(a.port && b.port);
  EXPECT_TRUE(a.port->tx_gather());
  std::vector<uint8_t> payload(600);
  for (size_t i = 0; i < payload.size(); i++) payload[i] = static_cast<uint8_t>(i * 7 + 1);
  auto send = [&](const wire::MacAddr& dst, uint32_t dqpn, uint32_t psn) {
    engine::PacketBuf buf{};
    if (!a.port->tx_alloc(2048, buf)) return false;
    buf.len = wire::build_frame(wire::MutByteSpan(buf.data, 2048), a.spec_to(dst, dqpn, psn),
                                wire::ByteSpan(payload));
    if (!buf.len) return false;
    // as the engine leaves it: no payload and no ICRC in the buffer
    buf.gather_offset = static_cast<uint16_t>(buf.len - wire::kIcrcLen - payload.size());
    buf.gather_len = static_cast<uint16_t>(payload.size());
    buf.gather = payload.data();
    std::memset(buf.data + buf.gather_offset, 0, buf.len - buf.gather_offset);
    buf.icrc_absent = true;
    return a.port->tx_burst(&buf, 1) == 1;
  };
  auto received = [](Device& d) {
    std::vector<std::vector<uint8_t>> out;
    engine::PacketBuf bufs[16];
    const uint32_t n = d.port->rx_burst(bufs, 16);
    for (uint32_t i = 0; i < n; i++) {
      wire::Packet pkt;
      wire::ParseOptions o;
      o.verify_icrc = !bufs[i].icrc_absent;
      if (wire::parse_frame(wire::ByteSpan(bufs[i].data, bufs[i].len), pkt, o) == wire::ParseError::ok)
        out.emplace_back(pkt.payload.begin(), pkt.payload.end());
    }
    d.port->rx_free(bufs, n);
    return out;
  };
  ASSERT_TRUE(send(b.mac, kBase0 + 3 * kBlock + 5, 21));  // through B's ring
  EXPECT_EQ(received(b), std::vector<std::vector<uint8_t>>{payload});
  ASSERT_TRUE(send(wire::MacAddr{0x02, 0, 0, 0, 0, 0xc}, kBase0 + 3 * kBlock, 22));  // the port's way
  EXPECT_EQ(received(a), std::vector<std::vector<uint8_t>>{payload});                // (its ICRC checked)
}

// More destination MACs than the table remembers (16): frames to each still go the right way, the ones
// that are devices through their rings.
TEST(LocalPath, ManyDestinationMacs) {
  TmpDir dir("urxe-local-port");
  Device a(dir.path, 0xa, 0), b(dir.path, 0xb, 0);
  ASSERT_TRUE(a.port && b.port);
  for (uint32_t round = 0; round < 3; round++) {
    for (uint8_t m = 0x20; m < 0x40; m++) {
      ASSERT_TRUE(a.send(wire::MacAddr{0x02, 0, 0, 0, 1, m}, kBase0, m));
      EXPECT_EQ(a.receive(), std::vector<uint32_t>{m});
    }
    ASSERT_TRUE(a.send(b.mac, kBase0 + 1, 1000 + round));
    uint64_t local = 0;
    EXPECT_EQ(b.receive(&local), std::vector<uint32_t>{1000 + round});
    EXPECT_EQ(local, 1u);
  }
}

// A batch frame (a run of a message's middle packets under one header, engine/port.h) crosses a ring whole,
// flagged with its packet count; one to a MAC that is no device there goes to the port cut into its
// packets, each a whole frame with its ICRC and its own PSN, in order. At MTU 1500 a batch is larger than
// the port's frames (its buffer is the path's own); at 9000 it fits the port's buffer, and must be cut all
// the same.
TEST(LocalPath, BatchFramesCrossRingsWholeAndAreCutForThePort) {
  for (const uint32_t mtu : {1500u, 9000u}) {
    SCOPED_TRACE(mtu);
    TmpDir dir("urxe-local-port");
    Device a(dir.path, 0xa, 0, mtu), b(dir.path, 0xb, 3, mtu);
    ASSERT_TRUE(a.port && b.port);
    ASSERT_GE(a.port->tx_batch_bytes(), LocalPathPort::kMinBatchBytes);
    // batches whole to B's ring; none to a MAC that is no device here, nor to a block without a ring
    EXPECT_EQ(a.port->tx_batch_bytes_to(b.mac.data(), kBase0 + 3 * kBlock + 5), a.port->tx_batch_bytes());
    EXPECT_EQ(a.port->tx_batch_bytes_to(wire::MacAddr{0x02, 0, 0, 0, 0, 0xc}.data(), kBase0 + 3 * kBlock),
              0u);
    EXPECT_EQ(a.port->tx_batch_bytes_to(b.mac.data(), kBase0 + 4 * kBlock), 0u);
    constexpr uint32_t k = 4, seg = 1024;
    std::vector<uint8_t> payload(k * seg);
    for (size_t i = 0; i < payload.size(); i++) payload[i] = static_cast<uint8_t>(i * 13 + (i >> 10));
    auto send_batch = [&](const wire::MacAddr& dst, uint32_t dqpn, uint32_t psn) {
      wire::FrameSpec spec = a.spec_to(dst, dqpn, psn);
      spec.bth.opcode = wire::op::kRc | wire::op::write_middle;
      const uint32_t size = wire::frame_size(spec, k * seg);
      engine::PacketBuf buf{};
      if (!a.port->tx_alloc(size, buf)) return false;
      buf.len = wire::build_frame(wire::MutByteSpan(buf.data, size), spec, wire::ByteSpan(payload));
      std::memset(buf.data + buf.len - wire::kIcrcLen, 0, wire::kIcrcLen);  // as the engine leaves it
      buf.icrc_absent = true;
      buf.batch = k;
      return buf.len > 0 && a.port->tx_burst(&buf, 1) == 1;
    };
    ASSERT_TRUE(send_batch(b.mac, kBase0 + 3 * kBlock + 5, 500));
    engine::PacketBuf got[16];
    uint32_t n = b.port->rx_burst(got, 16);
    ASSERT_EQ(n, 1u);
    EXPECT_EQ(got[0].batch, k);
    EXPECT_TRUE(got[0].icrc_absent);
    wire::Packet pkt;
    wire::ParseOptions unchecked;
    unchecked.verify_icrc = false;
    ASSERT_EQ(wire::parse_frame(wire::ByteSpan(got[0].data, got[0].len), pkt, unchecked),
              wire::ParseError::ok);
    EXPECT_EQ(pkt.bth.psn, 500u);
    EXPECT_TRUE(std::equal(payload.begin(), payload.end(), pkt.payload.begin()));
    b.port->rx_free(got, n);
    EXPECT_EQ(a.port->stats().tx_batches, 1u);

    // to a MAC that is no device here: the port's way (back to A on its own bus), as k frames
    ASSERT_TRUE(send_batch(wire::MacAddr{0x02, 0, 0, 0, 0, 0xc}, kBase0 + 3 * kBlock, 0xfffffe));
    n = a.port->rx_burst(got, 16);
    ASSERT_EQ(n, k);
    for (uint32_t i = 0; i < n; i++) {
      EXPECT_EQ(got[i].batch, 0u);
      EXPECT_FALSE(got[i].icrc_absent);
      ASSERT_EQ(wire::parse_frame(wire::ByteSpan(got[i].data, got[i].len), pkt), wire::ParseError::ok) << i;
      EXPECT_EQ(pkt.bth.psn, wire::psn_add(0xfffffe, i));
      EXPECT_TRUE(std::equal(pkt.payload.begin(), pkt.payload.end(), payload.begin() + i * seg)) << i;
    }
    a.port->rx_free(got, n);
    EXPECT_EQ(a.port->stats().tx_batch_cut, 1u);
    EXPECT_EQ(b.port->rx_burst(got, 16), 0u);  // and B's ring saw nothing more
  }
}

}  // namespace
}  // namespace urxe::dpdk
