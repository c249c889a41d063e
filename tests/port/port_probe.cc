// port_probe: drives one urxe port (DPDK or kernel socket) for tests/port/port_test.py and port_bench.py.
//
//   port_probe [--port auto|dpdk|socket] [--dpdk-args '...'] --if IFACE COMMAND ...
//   port_probe --port local --ring-dir DIR blast|sink ...   the same-host path's shared-memory ring alone
//     (dpdk/local_ring.h) between two processes: blast pushes frames (a copy from a buffer into the slot,
//     without the ICRC, as the path sends them) and sink copies each payload out into a 64 KiB buffer (as
//     the engine delivers into an MR): the most a ring with a copy at each end carries, no transport
//     info                      port kind, MAC, MTU, GID table (one "gid N ADDR" line each)
//     neigh --dst-ip IP         resolve the destination MAC of IP from the kernel's neighbour table
//     send --dst-ip IP --count N --sizes a,b,..   N RoCEv2 SEND-only frames (payload sizes cycling), paced
//                               (--frames K: K frames a transmit call; --flow: all with one UDP source port,
//                               as one QP's are, so equal-size runs leave as UDP GSO datagrams on a veth;
//                               --wait-go: once the port is open, print "ready" and wait for a line on stdin)
//     recv --count N --sizes a,b,.. --timeout-ms T   receive, verify each frame (parse, ICRC, payload) and
//                               exit 0 only when all N arrived intact exactly once; sleeps on rx_wait_fd.
//                               With --dst-ip (an own address) it sends them itself, one at a time: loopback
//     blast --dst-ip IP --size S --seconds T       send as fast as the port takes frames; prints pps
//     sink --seconds T          count received RoCE frames (busy polling); prints pps
//     stall --seconds T         read nothing for T seconds, then drain; prints the frames received and what
//                               the port counts as lost (rx_loss: ring_full, no_buffer, errors)
//     pong --dst-ip IP --seconds T   answer every RoCE frame with one of the same size to IP
//     ping --dst-ip IP --count N --size S   N round trips one at a time; prints RTT p50/p99 in us
//       (--frames K, both sides: K frames a turn in one transmit call, answered once all K are in: an RC
//       request and its ACK make 2, the least a signaled SEND costs each way)
//       (--sleep: both wait on rx_wait_fd between frames, as an idle progress thread does)
//     guard-install | guard-remove   the nftables ingress drop of UDP/4791 on IFACE (hostnet/kernel_guard.h)
//   --qpn-range FIRST:END: deliver only RoCE frames to QPNs in [FIRST, END) (the frames here go to 0x123)
//   --no-guard: do not hold UDP port 4791 (to measure what the kernel does without it)
// Prints "ready" on stdout once the port is open (receivers), and one "key=value ..." result line.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dpdk/dpdk_port.h"
#include "dpdk/local_ring.h"
#include "dpdk/port_factory.h"
#include "dpdk/socket_port.h"
#include "hostnet/gid.h"
#include "hostnet/interface.h"
#include "hostnet/kernel_guard.h"
#include "hostnet/neighbour.h"
#include "wire/packet.h"

using namespace urxe;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kDqpn = 0x000123;
constexpr uint8_t kSendOnly = 0x04;  // RC SEND Only

[[noreturn]] void die(const std::string& m) {
  fprintf(stderr, "port_probe: %s\n", m.c_str());
  exit(2);
}

std::vector<uint32_t> parse_sizes(const std::string& s) {
  std::vector<uint32_t> v;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t c = s.find(',', pos);
    v.push_back(static_cast<uint32_t>(std::stoul(s.substr(pos, c - pos))));
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  if (v.empty()) die("empty --sizes");
  return v;
}

uint8_t pattern(uint32_t seq, uint32_t i) {
  return static_cast<uint8_t>(seq * 31u + i * 7u + (i >> 8));
}

double secs_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Args {
  std::string port = "auto", dpdk_args, ifname, cmd, dst_ip, sizes = "64";
  uint32_t count = 0, size = 64, timeout_ms = 5000, gap_us = 200;
  double seconds = 3;
  bool guard = true;
  bool sleep = false;                   // ping/pong: sleep on rx_wait_fd when idle instead of busy polling
  bool flow = false;                    // send: one UDP source port for every frame
  bool wait_go = false;                 // send: once the port is open, print "ready" and wait for a line
  uint32_t frames = 1;                  // ping/pong: frames per turn
  uint32_t qpn_first = 0, qpn_end = 0;  // --qpn-range FIRST:END (0:0 = not set)
  std::string ring_dir;                 // --port local: where the sink publishes its ring
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value for " + k);
      return argv[++i];
    };
    if (k == "--port")
      a.port = val();
    else if (k == "--dpdk-args")
      a.dpdk_args = val();
    else if (k == "--if")
      a.ifname = val();
    else if (k == "--dst-ip")
      a.dst_ip = val();
    else if (k == "--ring-dir")
      a.ring_dir = val();
    else if (k == "--count")
      a.count = static_cast<uint32_t>(std::stoul(val()));
    else if (k == "--sizes")
      a.sizes = val();
    else if (k == "--size")
      a.size = static_cast<uint32_t>(std::stoul(val()));
    else if (k == "--timeout-ms")
      a.timeout_ms = static_cast<uint32_t>(std::stoul(val()));
    else if (k == "--gap-us")
      a.gap_us = static_cast<uint32_t>(std::stoul(val()));
    else if (k == "--seconds")
      a.seconds = std::stod(val());
    else if (k == "--no-guard")
      a.guard = false;
    else if (k == "--sleep")
      a.sleep = true;
    else if (k == "--flow")
      a.flow = true;
    else if (k == "--wait-go")
      a.wait_go = true;
    else if (k == "--frames")
      a.frames = std::max(1u, std::min(16u, static_cast<uint32_t>(std::stoul(val()))));
    else if (k == "--qpn-range") {
      std::string v = val();
      a.qpn_first = static_cast<uint32_t>(std::stoul(v.substr(0, v.find(':')), nullptr, 0));
      a.qpn_end = static_cast<uint32_t>(std::stoul(v.substr(v.find(':') + 1), nullptr, 0));
    } else if (k[0] != '-' && a.cmd.empty())
      a.cmd = k;
    else
      die("unknown argument " + k);
  }
  if (a.cmd.empty() || (a.port == "local" ? a.ring_dir.empty() : a.ifname.empty()))
    die("usage: port_probe [--port auto|dpdk|socket] --if IFACE COMMAND | --port local --ring-dir DIR "
        "blast|sink");
  return a;
}

// The frame template for one destination: addresses resolved like the engine will resolve them.
wire::FrameSpec make_spec(engine::Port& port, const hostnet::Interface& info, const std::string& dst_ip) {
  wire::FrameSpec spec;
  wire::Gid dst{};
  if (!hostnet::gid_from_string(dst_ip, dst)) die("bad --dst-ip " + dst_ip);
  auto nr = hostnet::resolve_neighbor(dst, info.ifindex, 3000);
  if (nr.state != hostnet::NeighState::resolved) die("cannot resolve the MAC of " + dst_ip);
  spec.dst_mac = nr.mac;
  spec.src_mac = port.attr().mac;
  spec.ip_version = wire::gid_is_ipv4_mapped(dst) ? 4 : 6;
  spec.dst_ip = dst;
  bool found = false;
  for (const auto& a : info.addrs) {
    bool ll = a.addr[0] == 0xfe && (a.addr[1] & 0xc0) == 0x80;
    bool dst_ll = dst[0] == 0xfe && (dst[1] & 0xc0) == 0x80;
    if (a.ipv4 == (spec.ip_version == 4) && ll == dst_ll) {
      spec.src_ip = a.addr;
      found = true;
      break;
    }
  }
  if (!found) die("no source address of the right family on " + info.name);
  spec.bth.opcode = kSendOnly;
  spec.bth.dqpn = kDqpn;
  spec.bth.ack_req = true;
  return spec;
}

bool g_flow = false;  // --flow

uint32_t build_into(uint8_t* out, uint32_t cap, wire::FrameSpec& spec, uint32_t seq, uint32_t payload_len,
                    std::vector<uint8_t>& payload) {
  payload.resize(payload_len);
  for (uint32_t i = 0; i < payload_len; ++i) payload[i] = pattern(seq, i);
  spec.bth.psn = seq & 0xffffff;
  spec.udp_sport = static_cast<uint16_t>(0xc000 | (g_flow ? 0x123 : seq & 0x3fff));
  return wire::build_frame(wire::MutByteSpan(out, cap), spec, wire::ByteSpan(payload.data(), payload.size()));
}

// Sends one frame, retrying while the port pushes back (bounded).
// `frames` frames (PSNs seq, seq+1, ...) in one transmit call.
bool send_one(engine::Port& port, wire::FrameSpec& spec, uint32_t seq, uint32_t plen,
              std::vector<uint8_t>& pl, uint32_t frames = 1) {
  uint32_t need = wire::frame_size(spec, plen);
  auto t0 = Clock::now();
  engine::PacketBuf b[16];
  frames = std::min<uint32_t>(frames, 16);
  for (uint32_t i = 0; i < frames; i++) {
    while (!port.tx_alloc(need, b[i])) {
      if (secs_since(t0) > 2) {
        for (uint32_t j = 0; j < i; j++) port.tx_free(b[j]);
        return false;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    b[i].len = build_into(b[i].data, need, spec, seq + i, plen, pl);
    if (b[i].len == 0) die("build_frame failed");
  }
  uint32_t done = 0;
  while ((done += port.tx_burst(b + done, frames - done)) < frames) {
    if (secs_since(t0) > 2) {
      for (uint32_t j = done; j < frames; j++) port.tx_free(b[j]);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

// Waits for the next RoCE frame (busy polling, or the idle protocol with --sleep); false on timeout.
bool wait_frame(engine::Port& port, bool sleep, double timeout_s, engine::PacketBuf& out) {
  auto t0 = Clock::now();
  while (secs_since(t0) < timeout_s) {
    uint32_t n = port.rx_burst(&out, 1);
    if (n == 0 && sleep) {
      port.rx_wait_arm(true);
      n = port.rx_burst(&out, 1);
      if (n == 0 && port.rx_wait_fd() >= 0) {
        pollfd p{port.rx_wait_fd(), POLLIN, 0};
        poll(&p, 1, 100);
      }
      port.rx_wait_arm(false);
    }
    if (n == 0) continue;
    const uint8_t* d = out.data;
    bool roce =
        (out.len > 42 && d[12] == 0x08 && d[13] == 0x00 && d[23] == 17 && d[36] == 0x12 && d[37] == 0xb7) ||
        (out.len > 62 && d[12] == 0x86 && d[13] == 0xdd && d[20] == 17 && d[56] == 0x12 && d[57] == 0xb7);
    if (roce && out.len > 64) return true;  // (the empty neighbour-trigger datagram is 42/62 bytes)
    port.rx_free(&out, 1);
  }
  return false;
}

// --port local: blast or sink on a bare ring (see the top). The frames are RoCEv2 SEND-only frames between
// made-up addresses: nothing routes them, the ring is addressed by its directory.
int run_local(const Args& a) {
  constexpr uint32_t kBurst = 32;
  const std::string name = "probe";
  if (a.cmd == "sink") {
    dpdk::LocalReceiver rx;
    std::string err;
    dpdk::LocalRingParams rp;
    rp.slot_bytes = 16384;  // any frame blast sends (the path sizes its slots to the device's MTU)
    if (!rx.create(a.ring_dir, name, static_cast<uint64_t>(getpid()), rp, err)) die("ring: " + err);
    printf("ready\n");
    fflush(stdout);
    std::vector<uint8_t> mr(65536);
    engine::PacketBuf bufs[kBurst];
    uint64_t frames = 0, bytes = 0;
    size_t at = 0;
    auto t0 = Clock::now();
    Clock::time_point first{};
    while (secs_since(t0) < a.seconds + 5 && (frames == 0 || secs_since(first) < a.seconds)) {
      const uint32_t n = rx.rx_burst(bufs, kBurst);
      for (uint32_t i = 0; i < n; ++i) {
        // The payload: after Ethernet, IPv4, UDP and BTH (the ICRC is not on the ring).
        constexpr uint32_t kHdr = wire::kEthLen + wire::kIpv4MinLen + wire::kUdpLen + wire::kBthLen;
        if (bufs[i].len <= kHdr) continue;
        const uint32_t plen = bufs[i].len - kHdr;
        if (at + plen > mr.size()) at = 0;
        std::memcpy(mr.data() + at, bufs[i].data + kHdr, plen);
        at += plen;
        if (frames == 0) first = Clock::now();
        ++frames;
        bytes += plen;
      }
      if (n) rx.rx_free(bufs, n);
    }
    const double el = frames ? secs_since(first) : 1;
    // (check=: a byte of the copies, printed so that they cannot be left out as unused)
    printf("kind=local frames=%llu pps=%.0f gbit=%.2f check=%u\n", static_cast<unsigned long long>(frames),
           static_cast<double>(frames) / el, static_cast<double>(bytes) * 8 / el / 1e9, mr[at / 2]);
    return frames ? 0 : 1;
  }
  if (a.cmd == "blast") {
    wire::FrameSpec spec;
    spec.src_mac = {0x02, 0, 0, 0, 0, 1};
    spec.dst_mac = {0x02, 0, 0, 0, 0, 2};
    spec.ip_version = 4;
    spec.src_ip = wire::gid_from_ipv4({10, 0, 0, 1});
    spec.dst_ip = wire::gid_from_ipv4({10, 0, 0, 2});
    spec.bth.opcode = kSendOnly;
    spec.bth.dqpn = kDqpn;
    std::vector<uint8_t> pl, tmpl(16384);
    const uint32_t flen = build_into(tmpl.data(), static_cast<uint32_t>(tmpl.size()), spec, 0, a.size, pl);
    if (!flen) die("frame too large");
    dpdk::LocalSender tx;
    std::string err;
    auto t0 = Clock::now();
    while (!tx.attach(a.ring_dir, name, static_cast<uint64_t>(getpid()), err)) {
      if (secs_since(t0) > 5) die("ring: " + err);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    uint64_t sent = 0, full = 0;
    t0 = Clock::now();
    while (secs_since(t0) < a.seconds) {
      uint32_t n = 0;
      while (n < kBurst && tx.push(tmpl.data(), flen - wire::kIcrcLen, true)) ++n;  // (without the ICRC)
      tx.kick();
      sent += n;
      if (n < kBurst) ++full;
      if (tx.closed()) break;
    }
    const double el = secs_since(t0);
    printf("kind=local frame=%u sent=%llu pps=%.0f full=%llu\n", flen - wire::kIcrcLen,
           static_cast<unsigned long long>(sent), static_cast<double>(sent) / el,
           static_cast<unsigned long long>(full));
    return 0;
  }
  die("--port local runs blast or sink, not " + a.cmd);
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse_args(argc, argv);
  if (a.port == "local") return run_local(a);
  if (a.cmd == "guard-install" || a.cmd == "guard-remove") {
    std::string gerr;
    bool ok = a.cmd == "guard-install" ? hostnet::install_ingress_drop(a.ifname, &gerr)
                                       : hostnet::remove_ingress_drop(a.ifname, &gerr);
    if (!ok) die(a.cmd + ": " + gerr);
    return 0;
  }
  dpdk::PortOptions opt;
  opt.ifname = a.ifname;
  opt.dpdk_args = a.dpdk_args;
  opt.guard_udp_port = a.guard;
  opt.kind = a.port == "dpdk"     ? dpdk::PortKind::dpdk
             : a.port == "socket" ? dpdk::PortKind::socket
                                  : dpdk::PortKind::automatic;
  std::string notice, err;
  std::unique_ptr<engine::Port> port = dpdk::open_port(opt, &notice, &err);
  if (!port) die("open_port: " + err);
  fprintf(stderr, "%s\n", notice.c_str());
  if (a.qpn_end && !port->set_rx_qpn_range(a.qpn_first, a.qpn_end)) die("set_rx_qpn_range failed");
  hostnet::Interface info;
  if (!hostnet::query_interface(a.ifname, info, &err)) die(err);
  const char* kind = dynamic_cast<dpdk::DpdkPort*>(port.get()) ? "dpdk" : "socket";

  if (a.cmd == "info") {
    printf("kind=%s mac=%02x:%02x:%02x:%02x:%02x:%02x mtu=%u ifindex=%d\n", kind, port->attr().mac[0],
           port->attr().mac[1], port->attr().mac[2], port->attr().mac[3], port->attr().mac[4],
           port->attr().mac[5], port->attr().mtu, info.ifindex);
    for (size_t i = 0; i < port->attr().gids.size(); ++i)
      printf("gid %zu %s\n", i, hostnet::gid_to_string(port->attr().gids[i]).c_str());
    return 0;
  }
  if (a.cmd == "neigh") {
    wire::Gid dst{};
    if (!hostnet::gid_from_string(a.dst_ip, dst)) die("bad --dst-ip");
    auto r = hostnet::resolve_neighbor(dst, info.ifindex, 3000);
    printf("state=%d local=%d mac=%02x:%02x:%02x:%02x:%02x:%02x\n", static_cast<int>(r.state),
           r.local ? 1 : 0, r.mac[0], r.mac[1], r.mac[2], r.mac[3], r.mac[4], r.mac[5]);
    return r.state == hostnet::NeighState::resolved ? 0 : 1;
  }
  auto* sock = dynamic_cast<dpdk::SocketPort*>(port.get());
  if (a.cmd == "send") {
    auto sizes = parse_sizes(a.sizes);
    wire::FrameSpec spec = make_spec(*port, info, a.dst_ip);
    std::vector<uint8_t> pl;
    uint32_t sent = 0;
    g_flow = a.flow;
    if (a.wait_go) {  // (the caller changes the interface under the open port, then says go)
      printf("ready\n");
      fflush(stdout);
      char line[16];
      if (!fgets(line, sizeof line, stdin)) die("no go");
    }
    // --frames K: K frames (one size, the first of the turn's) per transmit call.
    for (uint32_t seq = 0; seq < a.count; seq += a.frames) {
      const uint32_t k = std::min(a.frames, a.count - seq);
      if (!send_one(*port, spec, seq, sizes[seq % sizes.size()], pl, k)) break;
      sent += k;
      std::this_thread::sleep_for(std::chrono::microseconds(a.gap_us));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the ring drain before closing
    const dpdk::PortStats st = sock ? sock->stats() : dpdk::PortStats{};
    printf("kind=%s sent=%u gso_batches=%llu gso_frames=%llu\n", kind, sent,
           static_cast<unsigned long long>(st.tx_gso_batches),
           static_cast<unsigned long long>(st.tx_gso_frames));
    return sent == a.count ? 0 : 1;
  }
  if (a.cmd == "recv") {
    auto sizes = parse_sizes(a.sizes);
    std::vector<uint8_t> seen(a.count, 0);
    uint32_t ok = 0, dup = 0, bad = 0, other = 0, wakeups = 0, timeouts = 0;
    // With --dst-ip (one of our own addresses) the same port also sends: loopback within one process.
    const bool self_send = !a.dst_ip.empty();
    wire::FrameSpec spec;
    if (self_send) spec = make_spec(*port, info, a.dst_ip);
    std::vector<uint8_t> pl;
    uint32_t next_seq = 0;
    printf("ready\n");
    fflush(stdout);
    auto t0 = Clock::now();
    engine::PacketBuf bufs[32];
    while (ok < a.count && secs_since(t0) * 1000 < a.timeout_ms) {
      if (self_send && next_seq < a.count && next_seq <= ok + dup + bad) {
        if (send_one(*port, spec, next_seq, sizes[next_seq % sizes.size()], pl)) ++next_seq;
      }
      uint32_t n = port->rx_burst(bufs, 32);
      if (n == 0) {
        // The idle protocol a progress thread uses: arm, look once more, sleep on the fd, disarm.
        port->rx_wait_arm(true);
        n = port->rx_burst(bufs, 32);
        if (n == 0) {
          int fd = port->rx_wait_fd();
          if (fd >= 0) {
            pollfd p{fd, POLLIN, 0};
            if (poll(&p, 1, 20) > 0)
              ++wakeups;
            else
              ++timeouts;
          } else {
            std::this_thread::sleep_for(std::chrono::microseconds(50));
          }
        }
        port->rx_wait_arm(false);
        if (n == 0) continue;
      }
      for (uint32_t i = 0; i < n; ++i) {
        wire::Packet pkt;
        auto e = wire::parse_frame(wire::ByteSpan(bufs[i].data, bufs[i].len), pkt);
        // not RoCE, or an empty UDP/4791 datagram (how hostnet/neighbour.cc makes the kernel resolve a
        // neighbour)
        if (e == wire::ParseError::not_roce || (pkt.l4_offset && pkt.udp.length == 8)) {
          ++other;
          continue;
        }
        uint32_t seq = pkt.bth.psn;
        // (--frames K on the sender: a turn's frames have its first frame's size)
        const uint32_t want = sizes[(seq - seq % a.frames) % sizes.size()];
        bool good = e == wire::ParseError::ok && pkt.icrc_ok && pkt.bth.opcode == kSendOnly &&
                    pkt.bth.dqpn == kDqpn && seq < a.count && pkt.payload_len == want;
        for (uint32_t j = 0; good && j < pkt.payload_len; ++j)
          good = pkt.payload.data()[j] == pattern(seq, j);
        if (!good) {
          ++bad;
          fprintf(stderr, "bad frame: len=%u parse=%s psn=%u payload_len=%u\n", bufs[i].len,
                  std::string(wire::to_string(e)).c_str(), seq, pkt.payload_len);
        } else if (seen[seq]) {
          ++dup;
        } else {
          seen[seq] = 1;
          ++ok;
        }
      }
      port->rx_free(bufs, n);
    }
    const dpdk::PortStats st = sock ? sock->stats() : dpdk::PortStats{};
    printf(
        "kind=%s expected=%u ok=%u dup=%u bad=%u other=%u wakeups=%u timeouts=%u gso_batches=%llu "
        "gso_frames=%llu\n",
        kind, a.count, ok, dup, bad, other, wakeups, timeouts,
        static_cast<unsigned long long>(st.rx_gso_batches),
        static_cast<unsigned long long>(st.rx_gso_frames));
    return ok == a.count && dup == 0 && bad == 0 ? 0 : 1;
  }
  if (a.cmd == "pong" || a.cmd == "ping") {
    wire::FrameSpec spec = make_spec(*port, info, a.dst_ip);
    std::vector<uint8_t> pl;
    engine::PacketBuf in;
    if (a.cmd == "pong") {
      printf("ready\n");
      fflush(stdout);
      uint64_t n = 0;
      auto t0 = Clock::now();
      uint32_t got = 0;
      while (secs_since(t0) < a.seconds) {
        if (!wait_frame(*port, a.sleep, 0.2, in)) continue;
        wire::Packet pkt;
        wire::parse_frame(wire::ByteSpan(in.data, in.len), pkt, {false, false});
        uint32_t psn = pkt.bth.psn, plen = pkt.payload_len;
        port->rx_free(&in, 1);
        if (++got < a.frames) continue;  // the turn's last frame: answer with as many
        got = 0;
        if (send_one(*port, spec, psn, plen, pl, a.frames)) ++n;
      }
      printf("kind=%s answered=%llu\n", kind, static_cast<unsigned long long>(n));
      return 0;
    }
    std::vector<double> rtt;
    for (uint32_t seq = 0; seq < a.count; ++seq) {
      auto t0 = Clock::now();
      if (!send_one(*port, spec, seq, a.size, pl, a.frames)) break;
      uint32_t got = 0;
      while (got < a.frames && wait_frame(*port, a.sleep, 1.0, in)) {
        port->rx_free(&in, 1);
        got++;
      }
      if (got == a.frames) rtt.push_back(secs_since(t0) * 1e6);
    }
    std::sort(rtt.begin(), rtt.end());
    auto pct = [&](double q) {
      return rtt.empty() ? 0.0 : rtt[static_cast<size_t>(q * static_cast<double>(rtt.size() - 1))];
    };
    printf("kind=%s sleep=%d frames=%u rounds=%zu p50_us=%.1f p99_us=%.1f\n", kind, a.sleep ? 1 : 0, a.frames,
           rtt.size(), pct(0.5), pct(0.99));
    return rtt.size() == a.count ? 0 : 1;
  }
  if (a.cmd == "blast") {
    wire::FrameSpec spec = make_spec(*port, info, a.dst_ip);
    std::vector<uint8_t> pl, tmpl(16384);
    uint32_t flen = build_into(tmpl.data(), static_cast<uint32_t>(tmpl.size()), spec, 0, a.size, pl);
    if (!flen) die("frame too large");
    constexpr uint32_t kBurst = 32;
    engine::PacketBuf bufs[kBurst];
    uint64_t sent = 0, full = 0;
    auto t0 = Clock::now();
    while (secs_since(t0) < a.seconds) {
      uint32_t n = 0;
      while (n < kBurst && port->tx_alloc(flen, bufs[n])) {
        std::memcpy(bufs[n].data, tmpl.data(), flen);
        bufs[n].len = flen;
        ++n;
      }
      uint32_t s = port->tx_burst(bufs, n);
      for (uint32_t i = s; i < n; ++i) port->tx_free(bufs[i]);
      sent += s;
      if (s < n) ++full;
    }
    double el = secs_since(t0);
    printf("kind=%s frame=%u sent=%llu pps=%.0f full=%llu\n", kind, flen,
           static_cast<unsigned long long>(sent), static_cast<double>(sent) / el,
           static_cast<unsigned long long>(full));
    return 0;
  }
  if (a.cmd == "stall") {
    // A progress thread that does not run for a while: nothing drains the receive ring for --seconds, then
    // everything is drained. What the ring could not hold must show in rx_loss().ring_full.
    printf("ready\n");
    fflush(stdout);
    std::this_thread::sleep_for(std::chrono::duration<double>(a.seconds));
    engine::PacketBuf bufs[32];
    uint64_t frames = 0;
    auto t0 = Clock::now(), last = Clock::now();
    while (secs_since(t0) * 1000 < a.timeout_ms && secs_since(last) < 0.5) {
      const uint32_t n = port->rx_burst(bufs, 32);
      for (uint32_t i = 0; i < n; ++i) {
        wire::Packet pkt;
        if (wire::parse_frame(wire::ByteSpan(bufs[i].data, bufs[i].len), pkt) == wire::ParseError::ok &&
            pkt.bth.dqpn == kDqpn)
          ++frames;
      }
      if (n) {
        port->rx_free(bufs, n);
        last = Clock::now();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
    const engine::PortRxLoss l = port->rx_loss();
    printf("kind=%s received=%llu ring_full=%llu no_buffer=%llu errors=%llu\n", kind,
           static_cast<unsigned long long>(frames), static_cast<unsigned long long>(l.ring_full),
           static_cast<unsigned long long>(l.no_buffer), static_cast<unsigned long long>(l.errors));
    return 0;
  }
  if (a.cmd == "sink") {
    printf("ready\n");
    fflush(stdout);
    engine::PacketBuf bufs[32];
    uint64_t frames = 0, bytes = 0;
    auto t0 = Clock::now();
    Clock::time_point first{};
    // Count from the first frame so the sender's start-up does not dilute the rate.
    while (secs_since(t0) < a.seconds + 5 && (frames == 0 || secs_since(first) < a.seconds)) {
      uint32_t n = port->rx_burst(bufs, 32);
      for (uint32_t i = 0; i < n; ++i) {
        const uint8_t* d = bufs[i].data;
        if (bufs[i].len > 42 && d[12] == 0x08 && d[13] == 0x00 && d[23] == 17 && d[36] == 0x12 &&
            d[37] == 0xb7) {
          if (frames == 0) first = Clock::now();
          ++frames;
          bytes += bufs[i].len;
        } else if (bufs[i].len > 62 && d[12] == 0x86 && d[13] == 0xdd && d[20] == 17 && d[56] == 0x12 &&
                   d[57] == 0xb7) {
          if (frames == 0) first = Clock::now();
          ++frames;
          bytes += bufs[i].len;
        }
      }
      if (n) port->rx_free(bufs, n);
    }
    double el = frames ? secs_since(first) : 1;
    printf("kind=%s frames=%llu pps=%.0f gbit=%.2f\n", kind, static_cast<unsigned long long>(frames),
           static_cast<double>(frames) / el, static_cast<double>(bytes) * 8 / el / 1e9);
    return frames ? 0 : 1;
  }
  die("unknown command " + a.cmd);
}
