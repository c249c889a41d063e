// The replay's pieces (replay.h is its interface): the frames, the port and clock the engine runs on, the
// messages and connections rebuilt from a capture, and the Replayer, whose steps live in replay.cc (engine),
// replay_capture.cc (what the capture says) and replay_compare.cc (what must agree). See README.md.
#pragma once

#include <arpa/inet.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tests/replay/replay.h"
#include "tools/pcap_decode.h"
#include "wire/packet.h"
#include "wire/psn.h"

namespace urxe::replay::detail {

using namespace urxe::engine;
namespace w = urxe::wire;
using Bytes = std::vector<uint8_t>;

inline std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
inline std::string fmt(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

inline std::string mac_str(const w::MacAddr& m) {
  return fmt("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
}

// One RoCE frame, from the capture or emitted by the engine.
struct Frame {
  size_t no = 0;        // capture: 1-based frame number; emitted: 1-based emission order
  uint64_t t = 0;       // capture: ns since the first frame; emitted: engine clock
  bool played = false;  // sent by the played side (capture) / by the engine (emitted)
  Bytes bytes;
  w::Packet pkt;
  Bytes data;  // payload without pad
  const w::OpcodeInfo& info() const { return *pkt.info; }
};

inline bool parse(Frame& f) {
  w::ParseError e = w::parse_frame(w::ByteSpan(f.bytes.data(), f.bytes.size()), f.pkt);
  if (e != w::ParseError::ok) return false;
  f.data.assign(f.pkt.payload.begin(), f.pkt.payload.end());
  f.pkt.payload = {};
  return true;
}

// ---- the engine's world: a port fed from the capture, a manual clock ----

struct ManualClock : Clock {
  uint64_t t = 1'000'000'000;
  uint64_t now_ns() const override { return t; }
};

class ReplayPort : public Port {
 public:
  ReplayPort(PortAttr a, const ManualClock& c) : attr_(std::move(a)), clock_(c) {}
  const PortAttr& attr() const override { return attr_; }
  bool tx_alloc(uint32_t size, PacketBuf& buf) override {
    auto* v = new Bytes(size);
    buf = PacketBuf{.data = v->data(), .len = size, .opaque = v};
    return true;
  }
  uint32_t tx_burst(PacketBuf* bufs, uint32_t n) override {
    for (uint32_t i = 0; i < n; i++) {
      auto* v = static_cast<Bytes*>(bufs[i].opaque);
      v->resize(bufs[i].len);
      sent.push_back(Frame{sent.size() + 1, clock_.t, true, std::move(*v), {}, {}});
      delete v;
    }
    return n;
  }
  void tx_free(PacketBuf& buf) override { delete static_cast<Bytes*>(buf.opaque); }
  uint32_t rx_burst(PacketBuf* bufs, uint32_t n) override {
    uint32_t k = 0;
    for (; k < n && !inbox.empty(); k++) {
      auto* v = new Bytes(std::move(inbox.front()));
      inbox.pop_front();
      bufs[k] = PacketBuf{.data = v->data(), .len = static_cast<uint32_t>(v->size()), .opaque = v};
    }
    return k;
  }
  void rx_free(PacketBuf* bufs, uint32_t n) override {
    for (uint32_t i = 0; i < n; i++) delete static_cast<Bytes*>(bufs[i].opaque);
  }
  std::deque<Bytes> inbox;
  std::vector<Frame> sent;

 private:
  PortAttr attr_;
  const ManualClock& clock_;
};

// ---- what the capture says ----

// One message of one requester, rebuilt from the distinct PSNs of its packets (first copy of each).
struct Msg {
  uint32_t psn = 0;   // first PSN
  uint32_t npsn = 1;  // PSNs it occupies (READ: one per response packet)
  uint32_t last = 0;  // psn + npsn - 1
  w::OpKind kind = w::OpKind::none;
  const Frame* head = nullptr;  // the first packet (RETH, AtomicETH, DETH, ...)
  const Frame* tail = nullptr;  // the last packet (ImmDt, IETH, SE)
  Bytes data;                   // SEND/WRITE payload
  size_t trigger = ~size_t{0};  // capture index of the earliest frame of the message
  uint32_t len() const {
    return kind == w::OpKind::rdma_read_request ? head->pkt.reth.dma_len : static_cast<uint32_t>(data.size());
  }
  bool takes_recv() const {
    return kind == w::OpKind::send || (kind == w::OpKind::rdma_write && tail->info().with_imm);
  }
};

// One connection (RC/UC: a QP pair; UD: one of the played side's QPs).
struct Conn {
  QpType type = QPT_RC;
  uint32_t lqpn = 0;            // the played side's QPN (0: never on the wire; the engine picks one)
  uint32_t rqpn = 0;            // the fed side's QPN (RC/UC)
  std::vector<size_t> in, out;  // capture indices: fed → played, played → fed
  uint32_t mtu = 0;
  std::vector<Msg> in_msgs, out_msgs;  // requests of the fed side / of the played side
  uint32_t qpn = 0;                    // as created in the engine
  uint32_t rq_psn = 0, sq_psn = 0;
  // requester side: local buffer and where each message's data or result lives
  Bytes lbuf;
  std::vector<uint64_t> loff;
  uint32_t lkey = 0;
  // receive side
  Bytes rbuf;
  uint32_t rslot = 0, rkey_recv = 0;
};

inline uint32_t transport_of(const w::Packet& p) {
  switch (p.info->transport) {
    case w::Transport::rc:
      return QPT_RC;
    case w::Transport::uc:
      return QPT_UC;
    case w::Transport::ud:
      return QPT_UD;
    default:
      return 0;
  }
}

inline uint32_t round_mtu(uint32_t n) {
  uint32_t m = 256;
  while (m < n && m < 4096) m <<= 1;
  return m;
}

inline Mtu mtu_enum(uint32_t bytes) {
  return bytes <= 256    ? MTU_256
         : bytes <= 512  ? MTU_512
         : bytes <= 1024 ? MTU_1024
         : bytes <= 2048 ? MTU_2048
                         : MTU_4096;
}

// Memory of one rkey as the fed side's requests see it, byte by byte.
struct Region {
  uint32_t rkey = 0;
  uint64_t lo = ~0ull, hi = 0;
  Bytes init, cur;
  std::vector<uint8_t> st;  // 0 untouched, 1 defined (cur), 2 undefined (data the capture does not show)
  Bytes mem;                // the engine's memory
};

class Replayer {
 public:
  Replayer(const std::string& path, const Options& opt) : path_(path), opt_(opt) {}
  Result run();

 private:
  bool load();
  bool build_conns();
  bool build_msgs(Conn& c, const std::vector<size_t>& frames, std::vector<Msg>& out, const char* who);
  bool build_memory();
  bool setup_engine();
  void post_msg(Conn& c, size_t k);
  void drain();
  void advance_to(uint64_t t);
  void compare();
  void compare_requests(Conn& c, const std::vector<const Frame*>& ours);
  void compare_responses(Conn& c, const std::vector<const Frame*>& ours);
  void check_completions();
  void check_memory();
  void write_pcap();
  void fail(std::string s) { r_.failures.push_back(std::move(s)); }
  void diff(std::string s) { r_.differences.push_back(std::move(s)); }
  bool cannot(std::string s) {
    r_.replayable = false;
    r_.why = std::move(s);
    return false;
  }
  Region* region_of(uint32_t rkey, uint64_t va, uint64_t len) {
    auto it = regions_.find(rkey);
    if (it == regions_.end() || va < it->second.lo || va + len > it->second.hi) return nullptr;
    return &it->second;
  }

  std::string path_;
  Options opt_;
  Result r_;
  std::vector<Frame> cap_;
  w::MacAddr play_mac_{}, peer_mac_{};
  w::Gid play_gid_{}, peer_gid_{};
  std::vector<Conn> conns_;
  std::map<uint32_t, Region> regions_;
  struct Patch {  // a byte the application wrote locally, seen only in a later READ response or atomic ACK
    size_t at;    // applied before capture frame index `at` is fed
    Region* r;
    size_t off;
    uint8_t v;
  };
  std::vector<Patch> patches_;
  std::unique_ptr<ManualClock> clock_;
  std::unique_ptr<ReplayPort> port_;
  std::unique_ptr<Engine> eng_;
  uint32_t pd_ = 0, cq_ = 0, srq_ = 0;
  std::map<std::pair<w::MacAddr, w::Gid>, uint32_t> ahs_;
  std::vector<std::pair<size_t, size_t>> posted_;  // (conn, msg) in post order
  std::vector<size_t> next_post_;
  std::vector<Wc> wcs_;
};

}  // namespace urxe::replay::detail
