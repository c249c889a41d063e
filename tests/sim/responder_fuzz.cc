// libFuzzer target: arbitrary packets, and packets built with wire::build_frame for the QPs under test and
// then mutated, fed into an engine whose RC, UC and UD QPs and XRC target are in RTS with registered memory
// (and a few requests of its own outstanding, so responses reach its completer too). The XRC target's
// requests name its domain's XRC SRQ, another domain's, or any number.
//
// Invariants checked after every input:
//  - nothing is written outside registered memory: the guard bytes around every region are intact;
//  - memory registered without remote write/atomic access (a REMOTE_READ-only MR, a local SEND source) is
//    unchanged;
//  - every frame the engine transmits parses as RoCEv2 with a good ICRC;
//  - nothing crashes (ASan/UBSan in the fuzz build).
//
// Input: a sequence of records, each [kind][16-bit length][body]: raw frame, structured frame (+ mutation),
// time advance, extra receive post; a frame may come flagged as a batch frame (PacketBuf::batch).
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "tests/sim/harness.h"
#include "wire/packet.h"

namespace {

using namespace urxe;
using namespace urxe::engine;

[[noreturn]] void violation(const char* what) {
  std::fprintf(stderr, "responder_fuzz: invariant violated: %s\n", what);
  std::abort();
}

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool empty() const { return n_ == 0; }
  uint8_t u8() {
    if (!n_) return 0;
    --n_;
    return *p_++;
  }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint32_t u32() { return u16() | (uint32_t{u16()} << 16); }
  uint64_t u64() { return u32() | (uint64_t{u32()} << 32); }
  size_t take(size_t want, const uint8_t*& out) {
    size_t k = want < n_ ? want : n_;
    out = p_;
    p_ += k;
    n_ -= k;
    return k;
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

class FuzzClock final : public Clock {
 public:
  uint64_t now_ns() const override { return t; }
  uint64_t t = 1'000'000;
};

// A port whose received frames come from the fuzzer and whose transmitted frames are checked and discarded.
class FuzzPort final : public Port {
 public:
  FuzzPort() {
    attr_.mac = sim::sim_mac(0);
    attr_.mtu = 4200;
    attr_.gids = {sim::sim_gid_v4(0)};
    for (auto& b : pool_) b.reset(new uint8_t[kBuf]);
    for (uint32_t i = 0; i < kBufs; ++i) free_.push_back(i);
  }
  const PortAttr& attr() const override { return attr_; }
  bool tx_alloc(uint32_t size, PacketBuf& buf) override {
    if (size > kBuf || free_.empty()) return false;
    uint32_t i = free_.back();
    free_.pop_back();
    buf.data = pool_[i].get();
    buf.len = size;
    buf.opaque = reinterpret_cast<void*>(uintptr_t{i});
    return true;
  }
  uint32_t tx_burst(PacketBuf* bufs, uint32_t n) override {
    for (uint32_t k = 0; k < n; ++k) {
      if (bufs[k].len > kBuf) violation("tx frame longer than its buffer");
      wire::Packet p;
      auto e = wire::parse_frame(wire::ByteSpan(bufs[k].data, bufs[k].len), p);
      if (e != wire::ParseError::ok) {
        std::fprintf(stderr, "engine sent a bad frame: %s (len %u)\n",
                     std::string(wire::to_string(e)).c_str(), bufs[k].len);
        violation("transmitted frame does not parse");
      }
      ++sent;
      tx_free(bufs[k]);
    }
    return n;
  }
  void tx_free(PacketBuf& buf) override {
    free_.push_back(static_cast<uint32_t>(reinterpret_cast<uintptr_t>(buf.opaque)));
  }
  uint32_t rx_burst(PacketBuf* bufs, uint32_t n) override {
    uint32_t k = 0;
    while (k < n && !rxq_.empty()) {
      // Each frame in its own exact-size allocation: ASan sees any read past its end.
      auto* f = new std::vector<uint8_t>(std::move(rxq_.front()));
      rxq_.pop_front();
      bufs[k].data = f->data();
      bufs[k].len = static_cast<uint32_t>(f->size());
      bufs[k].opaque = f;
      // as the same-host path hands out a batch frame: its packet count, no ICRC
      bufs[k].batch = rx_batch_.front();
      bufs[k].icrc_absent = rx_batch_.front() != 0;
      rx_batch_.pop_front();
      ++k;
    }
    return k;
  }
  void rx_free(PacketBuf* bufs, uint32_t n) override {
    for (uint32_t k = 0; k < n; ++k) delete static_cast<std::vector<uint8_t>*>(bufs[k].opaque);
  }
  void push(const uint8_t* p, size_t n, uint8_t batch = 0) {
    rxq_.emplace_back(p, p + n);
    rx_batch_.push_back(batch);
  }
  size_t pending() const { return rxq_.size(); }
  uint64_t sent = 0;

 private:
  static constexpr uint32_t kBufs = 64, kBuf = 4300;
  PortAttr attr_;
  std::unique_ptr<uint8_t[]> pool_[kBufs];
  std::vector<uint32_t> free_;
  std::deque<std::vector<uint8_t>> rxq_;
  std::deque<uint8_t> rx_batch_;  // PacketBuf::batch of each queued frame
};

constexpr uint32_t kPeerQpn = 0x77, kRqPsn = 0x100, kQkey = 0x1234, kRegionLen = 8192;

struct World {
  FuzzPort port;
  FuzzClock clock;
  std::unique_ptr<Engine> eng;
  sim::GuardedArena arena{6 * kRegionLen + 4096};
  sim::GuardedArena::Region rw, ro, src, sink, recv, zb;
  MrInfo rw_mr{}, ro_mr{}, src_mr{}, sink_mr{}, recv_mr{}, zb_mr{};
  uint32_t pd = 0, cq = 0, qpn[4] = {0, 0, 0, 0};   // RC, UC, UD, XRC_RECV
  uint32_t xrcd = 0, xrc_srq = 0, foreign_srq = 0;  // the target's domain and SRQ; an SRQ of another domain
  std::vector<uint8_t> ro_copy, src_copy;
  std::vector<uint8_t>
      before[4];  // writable regions at the start (rw, zero-based, sink, recv), for the stats
  uint32_t recv_posted = 0;
  // The PSNs the structured records aim at: each QP's expected request PSN, our requester's next response.
  uint32_t next_req_psn[4] = {kRqPsn, kRqPsn, kRqPsn, kRqPsn}, next_resp_psn = 0x200;

  World() {
    EngineConfig cfg;
    // Small object tables (the engine preallocates them): one input needs a few of each.
    cfg.device.max_mr = 64;
    cfg.device.max_ah = 8;
    cfg.device.max_pd = 4;
    cfg.device.max_qp = 8;
    cfg.device.max_cq = 8;
    cfg.device.max_srq = 4;
    cfg.device.max_xrcds = 4;
    eng = std::make_unique<Engine>(port, clock, cfg);
    sim::Rng rng(1);
    rw = arena.carve(kRegionLen, rng, 64);
    ro = arena.carve(kRegionLen, rng, 64);
    src = arena.carve(kRegionLen, rng, 64);
    sink = arena.carve(kRegionLen, rng, 64);
    recv = arena.carve(kRegionLen, rng, 64);
    zb = arena.carve(kRegionLen, rng, 64);
    ro_copy.assign(arena.at(ro), arena.at(ro) + ro.len);
    for (int i = 0; i < 4; ++i) {
      const sim::GuardedArena::Region& r = i == 0 ? rw : i == 1 ? zb : i == 2 ? sink : recv;
      before[i].assign(arena.at(r), arena.at(r) + r.len);
    }
    src_copy.assign(arena.at(src), arena.at(src) + src.len);
    must(eng->alloc_pd(pd), "alloc_pd");
    auto reg = [&](const sim::GuardedArena::Region& r, uint32_t acc, MrInfo& mr, bool zero) {
      uint8_t* p = arena.at(r);
      must(eng->reg_mr(pd, p, r.len, zero ? 0 : reinterpret_cast<uint64_t>(p),
                       acc | (zero ? uint32_t{ACCESS_ZERO_BASED} : 0u), mr),
           "reg_mr");
    };
    uint32_t all = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
    reg(rw, all, rw_mr, false);
    reg(ro, ACCESS_REMOTE_READ, ro_mr, false);
    reg(src, 0, src_mr, false);
    reg(sink, ACCESS_LOCAL_WRITE, sink_mr, false);
    reg(recv, ACCESS_LOCAL_WRITE, recv_mr, false);
    reg(zb, all, zb_mr, true);
    must(eng->create_cq(4096, cq), "create_cq");
    uint32_t other_xrcd = 0;
    must(eng->alloc_xrcd(xrcd), "alloc_xrcd");
    must(eng->alloc_xrcd(other_xrcd), "alloc_xrcd");
    must(eng->create_xrc_srq(xrcd, pd, cq, SrqAttr{16, 4, 0}, xrc_srq), "create_xrc_srq");
    must(eng->create_xrc_srq(other_xrcd, pd, cq, SrqAttr{16, 4, 0}, foreign_srq), "create_xrc_srq");
    const QpType types[4] = {QPT_RC, QPT_UC, QPT_UD, QPT_XRC_RECV};
    for (int i = 0; i < 4; ++i) {
      QpInitAttr ia;
      ia.send_cq = ia.recv_cq = cq;
      ia.qp_type = types[i];
      ia.cap = {64, 64, 4, 4, 64};
      ia.xrcd = xrcd;
      must(eng->create_qp(pd, ia, qpn[i]), "create_qp");
      QpAttr a;
      a.qp_state = QPS_INIT;
      a.port_num = 1;
      uint32_t mask = QP_STATE | QP_PKEY_INDEX | QP_PORT;
      if (types[i] == QPT_UD) {
        a.qkey = kQkey;
        mask |= QP_QKEY;
      } else {
        a.qp_access_flags = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
        mask |= QP_ACCESS_FLAGS;
      }
      must(eng->modify_qp(qpn[i], a, mask), "modify INIT");
      a = {};
      a.qp_state = QPS_RTR;
      mask = QP_STATE;
      if (types[i] != QPT_UD) {
        a.ah_attr.dgid = sim::sim_gid_v4(1);
        a.ah_attr.dmac = sim::sim_mac(1);
        a.path_mtu = MTU_1024;
        a.dest_qp_num = kPeerQpn;
        a.rq_psn = kRqPsn;
        mask |= QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN;
        if (types[i] == QPT_RC || types[i] == QPT_XRC_RECV) {
          a.max_dest_rd_atomic = 4;
          a.min_rnr_timer = 1;
          mask |= QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER;
        }
      }
      must(eng->modify_qp(qpn[i], a, mask), "modify RTR");
      a = {};
      a.qp_state = QPS_RTS;
      a.sq_psn = 0x200;
      mask = QP_STATE | QP_SQ_PSN | (types[i] == QPT_XRC_RECV ? uint32_t{QP_TIMEOUT} : 0u);
      if (types[i] == QPT_RC) {
        a.timeout = 8;
        a.retry_cnt = 2;
        a.rnr_retry = 2;
        a.max_rd_atomic = 4;
        mask |= QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC;
      }
      must(eng->modify_qp(qpn[i], a, mask), "modify RTS");
      for (int k = 0; k < 4; ++k) post_recv(i);
    }
    // Outstanding requests of our own on the RC QP, so fuzzed ACKs, READ responses and atomic ACKs have
    // something to complete: a SEND, a READ into the sink, an atomic into the sink.
    Sge s{reinterpret_cast<uint64_t>(arena.at(src)), 1500, src_mr.lkey};
    SendWr w;
    w.wr_id = 1;
    w.sg_list = &s;
    w.num_sge = 1;
    w.opcode = WR_SEND;
    w.send_flags = SEND_SIGNALED;
    const SendWr* bad;
    eng->post_send(qpn[0], &w, &bad);
    Sge r{reinterpret_cast<uint64_t>(arena.at(sink)), 3000, sink_mr.lkey};
    w.wr_id = 2;
    w.sg_list = &r;
    w.opcode = WR_RDMA_READ;
    w.rdma.remote_addr = 0x10000;
    w.rdma.rkey = 0x1234;
    eng->post_send(qpn[0], &w, &bad);
    Sge a8{reinterpret_cast<uint64_t>(arena.at(sink)) + 4096, 8, sink_mr.lkey};
    w.wr_id = 3;
    w.sg_list = &a8;
    w.opcode = WR_ATOMIC_FETCH_AND_ADD;
    w.atomic.remote_addr = 0x20000;
    w.atomic.rkey = 0x1234;
    w.atomic.compare_add = 1;
    eng->post_send(qpn[0], &w, &bad);
  }
  static void must(int rc, const char* what) {
    if (rc) {
      std::fprintf(stderr, "responder_fuzz setup: %s failed: %d\n", what, rc);
      std::abort();
    }
  }
  void post_recv(int qp) {
    if (recv_posted >= 32) return;
    // Receive buffers: 32 slices of 256 bytes; UD ones need room for the 40-byte GRH.
    uint32_t sz = kRegionLen / 32;
    Sge s{reinterpret_cast<uint64_t>(arena.at(recv)) + recv_posted * sz, sz, recv_mr.lkey};
    RecvWr w;
    w.wr_id = 100 + recv_posted;
    w.sg_list = &s;
    w.num_sge = 1;
    const RecvWr* bad;
    const int rc = qp == 3 ? eng->post_srq_recv(xrc_srq, &w, &bad) : eng->post_recv(qpn[qp], &w, &bad);
    if (rc == 0) ++recv_posted;
  }
  void pump() {
    for (int i = 0; i < 64 && (port.pending() || eng->next_deadline_ns() <= clock.t); ++i) eng->progress();
    eng->progress();
    Wc wc[32];
    while (eng->poll_cq(cq, 32, wc) > 0) {
    }
  }
  void advance(uint64_t ns) {
    uint64_t end = clock.t + ns;
    // Fire every timer due up to `end`, in order (bounded: retries are finite on these QPs).
    for (int i = 0; i < 256; ++i) {
      uint64_t d = eng->next_deadline_ns();
      if (d > end) break;
      clock.t = d > clock.t ? d : clock.t + 1;
      pump();
    }
    clock.t = end;
    pump();
  }
  void check() const {
    std::string g = arena.check_guards();
    if (!g.empty()) {
      std::fprintf(stderr, "%s\n", g.c_str());
      violation("write outside registered memory");
    }
    if (std::memcmp(ro_copy.data(), arena.at(ro), ro.len)) violation("REMOTE_READ-only MR was written");
    if (std::memcmp(src_copy.data(), arena.at(src), src.len))
      violation("MR without any write access was written");
  }
};

// Opcodes worth building, per transport: requests and responses, so both responder and completer are hit.
constexpr uint8_t kOps[] = {
    wire::op::send_first,         wire::op::send_middle,         wire::op::send_last,
    wire::op::send_last_imm,      wire::op::send_only,           wire::op::send_only_imm,
    wire::op::write_first,        wire::op::write_middle,        wire::op::write_last,
    wire::op::write_last_imm,     wire::op::write_only,          wire::op::write_only_imm,
    wire::op::read_request,       wire::op::read_response_first, wire::op::read_response_middle,
    wire::op::read_response_last, wire::op::read_response_only,  wire::op::acknowledge,
    wire::op::atomic_acknowledge, wire::op::compare_swap,        wire::op::fetch_add,
    wire::op::send_last_inv,      wire::op::send_only_inv};

void structured(World& w, Reader& in, uint8_t batch) {
  uint8_t sel = in.u8(), opsel = in.u8(), flags = in.u8(), mrsel = in.u8();
  // Rarer variations: an odd P_Key, a truncated frame, a mutation after the ICRC was computed.
  uint8_t x = in.u8();
  bool odd_pkey = (x & 7) == 0, truncate = (x & 0x38) == 0, mutate_sealed = (x >> 6) == 0;
  // Mostly near the expected PSN (in sequence, duplicate, small gap); sometimes anywhere.
  uint8_t pb = in.u8();
  int32_t psn_delta = (pb & 0x80)    ? static_cast<int8_t>(pb)
                      : (pb & 7) < 5 ? 0
                                     : static_cast<int32_t>(pb & 7) - 7;
  // Address and length: mostly inside the region and consistent with the payload (so writes, reads and
  // atomics are executed), otherwise anything.
  uint16_t vb = in.u16();
  uint8_t dmode = in.u8();
  int32_t va_off = (dmode & 0x40) ? static_cast<int16_t>(vb) : static_cast<int32_t>(vb % kRegionLen);
  // Payload: a full path MTU (1024, what first/middle packets carry), a short one, or anything up to 4200.
  uint16_t pl = in.u16();
  uint32_t payload_len = (pl >> 14) == 0 ? 1024u : (pl >> 14) == 3 ? pl % 4200u : pl % 1025u;
  uint32_t dma_len =
      (dmode & 3) == 0 ? in.u16()
      : (dmode & 3) == 1
          ? in.u32()
          : payload_len + ((dmode & 3) == 3 ? static_cast<uint32_t>((dmode >> 2) & 7) * 1024u : 0);
  if (dmode & 0x80) va_off &= ~7;  // atomics need 8-byte alignment
  wire::FrameSpec s;
  s.src_mac = sim::sim_mac(1);
  s.dst_mac = sim::sim_mac(0);
  s.src_ip = sim::sim_gid_v4(1);
  s.dst_ip = sim::sim_gid_v4(0);
  if (flags & 0x40) s.ip_version = 6;
  uint32_t qsel = sel % 5;
  static constexpr uint8_t kBase[4] = {wire::op::kRc, wire::op::kUc, wire::op::kUd, wire::op::kXrc};
  uint8_t base = qsel < 4 ? kBase[qsel] : static_cast<uint8_t>(sel & 0xe0);
  // An opcode of the QP's transport (UC: sends and writes; UD: SEND_ONLY[_IMM]), or of another transport, or
  // any byte at all.
  static constexpr size_t kUcOps = 12;  // the first 12 of kOps are the sends and writes
  static constexpr uint8_t kUdOps[2] = {wire::op::send_only, wire::op::send_only_imm};
  uint8_t low = qsel == 1 ? kOps[opsel % kUcOps] : qsel == 2 ? kUdOps[opsel & 1] : kOps[opsel % sizeof kOps];
  s.bth.opcode = static_cast<uint8_t>(base | low);
  if ((flags & 0x20) && (mrsel & 0x40)) s.bth.opcode = opsel;
  s.bth.dqpn = qsel < 4 ? w.qpn[qsel] : in.u32() & 0xffffff;
  // XRC: the target's SRQ, another domain's, or any number
  s.xrc_srqn = (flags & 0x10) ? ((mrsel & 0x20) ? w.foreign_srq : in.u32() & 0xffffff) : w.xrc_srq;
  bool response = wire::opcode_info(s.bth.opcode).is_response;
  // Requests around the responder's expected PSN; responses around our requester's PSNs.
  uint32_t& next = response ? w.next_resp_psn : w.next_req_psn[qsel < 4 ? qsel : 0];
  s.bth.psn = (next + static_cast<uint32_t>(psn_delta)) & 0xffffff;
  if (psn_delta == 0 && !truncate && !mutate_sealed) next = (next + 1) & 0xffffff;
  s.bth.ack_req = flags & 1;
  s.bth.se = flags & 2;
  s.bth.pkey = odd_pkey ? in.u16() : 0xffff;
  const MrInfo* mrs[4] = {&w.rw_mr, &w.ro_mr, &w.zb_mr, &w.sink_mr};
  const sim::GuardedArena::Region* regs[4] = {&w.rw, &w.ro, &w.zb, &w.sink};
  uint32_t m = mrsel % 5;
  uint64_t va;
  uint32_t rkey;
  if (m < 4) {
    rkey = mrs[m]->rkey;
    va = (m == 2 ? 0 : reinterpret_cast<uint64_t>(w.arena.at(*regs[m]))) +
         static_cast<uint64_t>(static_cast<int64_t>(va_off));
    if ((mrsel & 0xc0) == 0xc0) rkey ^= 1u << (mrsel & 31) % 32;  // near-miss key
  } else {
    rkey = in.u32();
    va = in.u64();
  }
  if (flags & 0x08) va += static_cast<uint64_t>(va_off) * 8;  // some far out of bounds
  s.reth = {va, rkey, dma_len};
  s.atomic_eth = {va, rkey, in.u64(), in.u64()};
  s.aeth.syndrome = in.u8();
  s.aeth.msn = in.u32() & 0xffffff;
  s.atomic_ack_eth.orig_data = in.u64();
  s.deth.qkey = (flags & 4) ? kQkey : in.u32();
  s.deth.src_qp = kPeerQpn;
  s.imm = in.u32();
  s.ieth_rkey = (flags & 0x80) ? w.rw_mr.rkey : in.u32();
  std::vector<uint8_t> frame(wire::frame_size(s, payload_len) + 64);
  wire::FrameLayout lay;
  if (!wire::build_headers(wire::MutByteSpan(frame.data(), frame.size()), s, payload_len, lay)) return;
  // The payload bytes are a pattern (not input bytes), so every record is a few dozen input bytes long.
  uint8_t pat = in.u8();
  for (uint32_t i = 0; i < payload_len; ++i)
    frame[lay.payload_offset + i] = static_cast<uint8_t>(pat + i * 7);
  // Mutations: before sealing (valid ICRC over odd content) or after (bad ICRC, must be dropped).
  uint8_t nmut = in.u8() % 8;
  nmut = nmut < 4 ? 0 : static_cast<uint8_t>(nmut - 4);  // half of the frames unmutated
  bool before = !mutate_sealed;
  auto mutate = [&] {
    for (uint8_t i = 0; i < nmut; ++i) {
      // Before sealing: in the transport headers and payload (a valid frame with odd content); after:
      // anywhere.
      uint16_t at = in.u16();
      uint8_t v = in.u8();
      uint32_t lo = before ? lay.l3_offset + lay.ip_hdr_len + wire::kUdpLen : 0;
      frame[lo + at % (lay.frame_len - lo)] ^= v;
    }
  };
  if (before) mutate();
  wire::seal_frame(wire::MutByteSpan(frame.data(), frame.size()), lay);
  if (!before) mutate();
  uint32_t len = lay.frame_len;
  if (truncate) len = static_cast<uint32_t>(in.u16() % (frame.size() + 1));  // truncations, Ethernet padding
  w.port.push(frame.data(), len, batch);
}

uint64_t g_counters[static_cast<uint32_t>(Counter::num_counters)];
uint64_t g_tx;
uint64_t g_written[4];  // inputs that changed the rw, zero-based, READ-sink and receive regions

}  // namespace

// Totals of the engine counters over every input so far (the replay driver prints them: a cheap check that
// the inputs reach the responder and completer, not only the parser).
void responder_fuzz_print_stats() {
  std::printf("engine counters over all inputs: tx_frames=%" PRIu64, g_tx);
  for (uint32_t c = 0; c < static_cast<uint32_t>(Counter::num_counters); ++c)
    if (g_counters[c]) std::printf(" %s=%" PRIu64, counter_name(static_cast<Counter>(c)), g_counters[c]);
  std::printf("\ninputs that wrote: remote-writable MR %" PRIu64 ", zero-based MR %" PRIu64
              ", READ/atomic sink %" PRIu64 ", receive buffers %" PRIu64 "\n",
              g_written[0], g_written[1], g_written[2], g_written[3]);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World w;
  Reader in(data, size);
  for (int rec = 0; rec < 64 && !in.empty(); ++rec) {
    // Each record is [kind][16-bit length][body]: a mutation stays inside its record, and a short body reads
    // as zeros.
    uint8_t kind = in.u8();
    // kinds 0xc0 and up: the frame comes flagged as a batch frame of 0-15 packets (the same-host path's)
    const uint8_t batch = kind >= 0xc0 ? (kind >> 2) & 0x0f : 0;
    const uint8_t* body;
    size_t n = in.take(in.u16(), body);
    Reader r(body, n);
    switch (kind % 4) {
      case 0:
        w.port.push(body, n < 4400 ? n : 4400, batch);
        break;
      case 1:
        structured(w, r, batch);
        break;
      case 2:
        w.advance(uint64_t{r.u16()} * 1000);
        break;
      case 3:
        w.post_recv(r.u8() % 4);
        break;
    }
    w.pump();
    w.check();
  }
  w.advance(100'000'000);  // let every timer run out
  w.check();
  for (uint32_t c = 0; c < static_cast<uint32_t>(Counter::num_counters); ++c)
    g_counters[c] += w.eng->counter(static_cast<Counter>(c));
  g_tx += w.port.sent;
  for (int i = 0; i < 4; ++i) {
    const sim::GuardedArena::Region& r = i == 0 ? w.rw : i == 1 ? w.zb : i == 2 ? w.sink : w.recv;
    g_written[i] += std::memcmp(w.before[i].data(), w.arena.at(r), r.len) != 0;
  }
  return 0;
}
