// Engines on a SimNet: hosts (port + engine + PD), QP pairs brought to RTS, and memory arenas whose
// registered regions are surrounded by guard bytes, so any write outside a region is caught.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tests/sim/sim_net.h"

namespace urxe::sim {

// One buffer carved into regions, each with kGuard bytes of a known pattern before and after it.
class GuardedArena {
 public:
  static constexpr uint32_t kGuard = 64;
  struct Region {
    uint64_t off = 0;  // offset of the first usable byte in the arena
    uint64_t len = 0;
  };
  explicit GuardedArena(uint64_t capacity);
  // A region of len bytes aligned to `align` (power of two); its content is `fill` bytes from rng.
  Region carve(uint64_t len, Rng& rng, uint64_t align = 8);
  uint8_t* at(const Region& r) { return buf_.get() + r.off; }
  const uint8_t* at(const Region& r) const { return buf_.get() + r.off; }
  uint8_t* base() { return buf_.get(); }
  uint64_t used() const { return used_; }
  // The first damaged guard byte, described; empty when all guards are intact.
  std::string check_guards() const;

 private:
  static uint8_t guard_byte(uint64_t i) { return static_cast<uint8_t>(0xa5 ^ (i * 31)); }
  std::unique_ptr<uint8_t[]> buf_;
  uint64_t cap_, used_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> guards_;  // [off, off+len)
};

struct Host {
  SimPort* port = nullptr;
  std::unique_ptr<engine::Engine> eng;
  uint32_t pd = 0;
  uint32_t index = 0;
};

struct QpEnds {
  uint32_t qpn[2] = {0, 0};
  uint32_t send_cq[2] = {0, 0};
  uint32_t recv_cq[2] = {0, 0};
  uint32_t ah[2] = {0, 0};  // UD: each side's AH to the other
};

struct QpParams {
  engine::QpType type = engine::QPT_RC;
  engine::Mtu path_mtu = engine::MTU_1024;
  uint32_t psn[2] = {0, 0};  // each side's initial send PSN (the peer's rq_psn)
  uint32_t max_send_wr = 128, max_recv_wr = 128, max_sge = 4, max_inline = 64;
  uint32_t cqe = 512;
  uint8_t timeout = 10;  // 4.096 µs × 2^10 ≈ 4.2 ms
  uint8_t retry_cnt = 7, rnr_retry = 7, min_rnr_timer = 1;
  uint8_t max_rd_atomic = 16, max_dest_rd_atomic = 16;
  uint32_t access = engine::ACCESS_REMOTE_WRITE | engine::ACCESS_REMOTE_READ | engine::ACCESS_REMOTE_ATOMIC;
  uint32_t qkey = 0x11111111;
  bool sq_sig_all = false;
  uint32_t srq[2] = {0, 0};      // an SRQ handle per side (0: the QP has its own receive queue)
  bool single_threaded = false;  // QPs and CQs without app-side locks (a thread domain)
};

// Two hosts (ports 0 and 1) joined by one link.
class Testbed {
 public:
  // ipv6: the hosts' GIDs are IPv6 addresses (frames IPv6), else IPv4-mapped.
  Testbed(uint64_t seed, const LinkConfig& link, const engine::EngineConfig& ecfg = {},
          uint32_t port_mtu = 4200, uint32_t pool_bufs = 512, bool ipv6 = false);
  wire::Gid gid(uint32_t h) const { return ipv6_ ? sim_gid_v6(h) : sim_gid_v4(h); }
  SimNet net;
  Host host[2];
  // Creates a QP (own send and recv CQ) on each host and brings both to RTS (RC/UC connected to each
  // other; UD with an AH each way). Returns an empty string or what failed.
  std::string connect(const QpParams& p, QpEnds& out);
  // XRC (IBTA Annex A14): an XRC_SEND initiator (its own send CQ) on host `ini` and an XRC_RECV target in
  // the other host's XRC domain `xrcd`, both brought to RTS with the kernel's masks for their types. The
  // target has no CQ (out.send_cq/recv_cq 0 on its side): its receives complete on the CQ of the XRC SRQ each
  // request names. p.srq is ignored.
  std::string connect_xrc(const QpParams& p, uint32_t ini, uint32_t xrcd, QpEnds& out);
  std::string describe_counters() const;

 private:
  bool ipv6_ = false;
};

std::string hexdump_diff(const uint8_t* got, const uint8_t* want, uint64_t len, uint64_t base = 0);

}  // namespace urxe::sim
