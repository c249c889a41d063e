// The transport engine: RC, UC and UD over a Port, in the time of a Clock. One Engine is one device
// context. Verbs map 1:1 onto its methods; every method returns 0 or a positive errno with the meaning
// rdma-core documents (EINVAL, ENOMEM, EBUSY, EOPNOTSUPP, ...), except poll_cq (count or -errno).
//
// Threads: progress() runs under the engine lock on one thread at a time (the progress thread, or an
// application thread through try_progress()). post_send, post_recv, post_srq_recv,
// poll_cq and req_notify_cq may run on any other threads at the same time: the queues between them are
// single-producer/single-consumer rings with acquire/release indices (a small per-queue lock serialises
// several application threads on one queue), preallocated at create time, so these calls never allocate,
// never block on the progress thread and never make a syscall. The control verbs (create/modify/destroy,
// reg/dereg) take the engine lock, which progress() also holds while it runs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include "engine/port.h"
#include "engine/tag_matching.h"
#include "engine/verbs.h"

namespace urxe::engine {

// Limits reported by query_device and enforced at create time (defaults follow kernel rxe's rxe_param.h
// where a verbs app can observe them).
struct DeviceAttr {
  uint64_t max_mr_size = ~0ull;
  uint32_t max_qp = 65536;  // as rxe; also the QPN range: qpn_base .. qpn_base + max_qp - 1
  uint32_t max_qp_wr = 16384;
  uint32_t max_sge = 32;
  uint32_t max_sge_rd = 32;
  uint32_t max_inline_data = 400;
  uint32_t max_cq = 4096;
  uint32_t max_cqe = 32767;
  uint32_t max_mr = 65536;
  uint32_t max_mw = 4096;  // memory windows, as rxe
  uint32_t max_pd = 4096;
  uint32_t max_qp_rd_atom = 128;       // max_rd_atomic a QP may ask for
  uint32_t max_qp_init_rd_atom = 128;  // max_dest_rd_atomic a QP may ask for
  uint32_t max_srq = 1024;
  uint32_t max_srq_wr = 16384;
  uint32_t max_srq_sge = 27;
  uint32_t max_xrcds = 1024;  // XRC domains (ibv_open_xrcd)
  uint32_t max_ah = 32768;
  uint32_t max_msg_sz = 0x80000000u;             // 2^31, as rxe
  uint32_t max_mcast_grp = 8192;                 // multicast groups with a member (as rxe)
  uint32_t max_mcast_qp_attach = 56;             // QPs attached to one group
  uint32_t max_total_mcast_qp_attach = 0x70000;  // attachments in all
};

// On-demand paging (ACCESS_ON_DEMAND MRs): the engine asks before it touches such an MR's memory. Faults
// the pages of [addr, addr + len) in, for writing when `write`; false when they are not mapped so (the
// access then fails as a NIC's does: a remote access NAK, an error completion, never a fault). Null: no ODP,
// ON_DEMAND registrations fail with EOPNOTSUPP. The provider's reaches the kernel (madvise); tests fake it.
using OdpFaultIn = bool (*)(uintptr_t addr, uint64_t len, bool write);

// ibv_advise_mr's advice (enum ibv_advise_mr_advice) and flags.
enum AdviseMr : uint32_t {
  ADVISE_MR_PREFETCH = 0,
  ADVISE_MR_PREFETCH_WRITE = 1,
  ADVISE_MR_PREFETCH_NO_FAULT = 2,
  ADVISE_MR_FLAG_FLUSH = 1u << 0,
};

// create_cq options. timestamps: each completion carries the Clock's time when the engine wrote it
// (poll_cq_ts reads it); CQs without it read no clock. single_threaded: the app polls it from one thread at
// a time (a thread domain), so polls take no lock; it must not resize the CQ, or move one of its QPs to
// RESET, while it polls.
struct CqOptions {
  bool timestamps = false;
  bool single_threaded = false;
};

// UD multicast: the destination QP of a SEND to a group (a multicast packet's BTH DestQP is 0xFFFFFF), and
// the group addresses RoCE has (an IPv6 multicast address, or an IPv4-mapped one in 224.0.0.0/4).
inline constexpr uint32_t kMulticastQpn = 0xffffff;
inline bool gid_is_multicast(const wire::Gid& g) {
  bool v4 = g[10] == 0xff && g[11] == 0xff;
  for (int i = 0; i < 10; i++) v4 = v4 && g[i] == 0;
  return g[0] == 0xff || (v4 && (g[12] & 0xf0) == 0xe0);
}
// The Ethernet address a multicast GID's frames go to: 01:00:5e + the low 23 bits of an IPv4 group
// (RFC 1112), 33:33 + the low 32 bits of an IPv6 one (RFC 2464).
inline wire::MacAddr multicast_mac(const wire::Gid& g) {
  if (g[0] == 0xff) return {0x33, 0x33, g[12], g[13], g[14], g[15]};
  return {0x01, 0x00, 0x5e, static_cast<uint8_t>(g[13] & 0x7f), g[14], g[15]};
}

struct EngineConfig {
  DeviceAttr device;
  OdpFaultIn odp_fault_in = nullptr;
  uint32_t qpn_base = 0x11;  // first QPN (rxe's first is 0x11); give processes disjoint ranges
  // QPNs are handed out cyclically from qpn_base + qpn_start (mod max_qp), as rxe's pool does, so a QPN comes
  // back only after the whole range: a peer's CM may still hold a recently closed QPN and rejects a new
  // connection that reuses it (REJ "stale connection"). The provider starts each process at random.
  uint32_t qpn_start = 0;
  uint32_t ack_every_n = 16;  // responder ACKs at least every N packets of a long message (≥ 1)
  // An application's round (try_progress with Round::app) whose only frames are ACKs and that completed
  // work keeps those ACKs back until the app answers (a later round that makes another frame sends them
  // after it), while that completion is unread, kAckHoldNs at most: the app's answer (the SEND it posts on
  // seeing the completion) then leaves first, not behind their transmit (engine/README.md).
  bool hold_acks = true;
  uint32_t max_unacked_psns = 128;  // requester's window of unacknowledged PSNs per QP (rxe: 128)
  uint32_t rx_burst = 32;           // frames taken from the port per progress() round
  uint32_t tx_budget = 64;          // packets the requester may send per QP per progress() round (fairness)
  bool verify_icrc = true;
  // ECN, as ConnectX with DCQCN on: every frame leaves ECN-capable (ECT(0)) unless the AV's traffic class
  // already sets ECN bits, so a congested hop marks it (CE) instead of dropping it.
  bool ecn = true;
  // DCQCN's parameters, with mlx5's cc_params names, units and firmware defaults (kCcParams lists them; the
  // provider reads a device's values from its cc_params/ directory). Notification point: CE on an RC/UC
  // packet is answered with a CNP to the sending QP, at most one per QP per np_min_time_between_cnps.
  // Reaction point: a CNP cuts the QP's rate RC to RC·(1 − α/2), at most once per
  // rp_rate_reduce_monitor_period and never below rp_min_dec_fac % of it; α moves toward 1 in every
  // rp_dce_tcp_rtt period with a CNP (g = 1 − rp_dce_tcp_g/1024) and decays in those without; every
  // rp_time_reset without a cut RC recovers toward the target RT: fast recovery (RC = (RT + RC)/2) for
  // rp_threshold steps, then RT += rp_ai_rate (additive), then RT += rp_hai_rate (hyper). A QP runs unpaced
  // until its first CNP, which starts it at rp_max_rate, and again once back at it.
  struct Dcqcn {
    uint32_t np_enable = 1;
    uint32_t np_min_time_between_cnps = 2;  // us
    uint32_t np_cnp_dscp = 48;
    uint32_t rp_enable = 1;
    uint32_t rp_max_rate = 0;      // Mb/s; 0: the link's speed (100 Gb/s where the engine cannot tell)
    uint32_t rp_min_rate = 1;      // Mb/s
    uint32_t rp_min_dec_fac = 50;  // %
    uint32_t rp_ai_rate = 5;       // Mb/s
    uint32_t rp_hai_rate = 50;     // Mb/s
    uint32_t rp_time_reset = 300;  // us
    uint32_t rp_threshold = 1;
    uint32_t rp_dce_tcp_g = 1019;                // /1024
    uint32_t rp_dce_tcp_rtt = 1;                 // us
    uint32_t rp_rate_reduce_monitor_period = 4;  // us
    uint32_t rp_initial_alpha_value = 1023;      // /1024
    uint32_t rp_clamp_tgt_rate = 0;
    // urxe's own (mlx5 has no such files): the receiver as a congestion point. A frame that waited at least
    // np_rx_ring_mark_frames deep in the port's receive ring (read after that many in one uninterrupted
    // drain) is answered as if CE-marked, so its senders slow down before the ring overflows
    // (np_rx_backlog_marked). 0 frames: three quarters of the ring (the packet-socket rings hold about 800
    // frames at MTU 9000, 4,096 at MTU 1500; 768 when the port does not say). Depth alone is a weak signal
    // on a busy host (a receiver off its CPU for a millisecond finds that millisecond's frames waiting):
    // at half the ring, ib_write_bw -q 16 lost ~20 % to CNPs while its ring never overflowed.
    uint32_t np_rx_ring_mark_enable = 1;
    uint32_t np_rx_ring_mark_frames = 0;
  } dcqcn;
  // Where the counters live (num_counters uint64 in Counter order, 8-aligned, zeroed by the caller), e.g. a
  // file another process reads; updated with relaxed atomic stores. nullptr: inside the engine.
  uint64_t* counter_storage = nullptr;
};

// Every DCQCN parameter by its mlx5 cc_params name (one table: the provider writes and reads them by it).
struct CcParam {
  const char* name;
  uint32_t EngineConfig::Dcqcn::*field;
};
inline constexpr CcParam kCcParams[] = {
    {"np_enable", &EngineConfig::Dcqcn::np_enable},
    {"np_min_time_between_cnps", &EngineConfig::Dcqcn::np_min_time_between_cnps},
    {"np_cnp_dscp", &EngineConfig::Dcqcn::np_cnp_dscp},
    {"rp_enable", &EngineConfig::Dcqcn::rp_enable},
    {"rp_max_rate", &EngineConfig::Dcqcn::rp_max_rate},
    {"rp_min_rate", &EngineConfig::Dcqcn::rp_min_rate},
    {"rp_min_dec_fac", &EngineConfig::Dcqcn::rp_min_dec_fac},
    {"rp_ai_rate", &EngineConfig::Dcqcn::rp_ai_rate},
    {"rp_hai_rate", &EngineConfig::Dcqcn::rp_hai_rate},
    {"rp_time_reset", &EngineConfig::Dcqcn::rp_time_reset},
    {"rp_threshold", &EngineConfig::Dcqcn::rp_threshold},
    {"rp_dce_tcp_g", &EngineConfig::Dcqcn::rp_dce_tcp_g},
    {"rp_dce_tcp_rtt", &EngineConfig::Dcqcn::rp_dce_tcp_rtt},
    {"rp_rate_reduce_monitor_period", &EngineConfig::Dcqcn::rp_rate_reduce_monitor_period},
    {"rp_initial_alpha_value", &EngineConfig::Dcqcn::rp_initial_alpha_value},
    {"rp_clamp_tgt_rate", &EngineConfig::Dcqcn::rp_clamp_tgt_rate},
    {"np_rx_ring_mark_enable", &EngineConfig::Dcqcn::np_rx_ring_mark_enable},
    {"np_rx_ring_mark_frames", &EngineConfig::Dcqcn::np_rx_ring_mark_frames},
};

struct MrInfo {
  uint32_t lkey = 0;
  uint32_t rkey = 0;
};

// Counters, named like rxe's hw_counters (rdma statistic / sysfs hw_counters), then urxe's own.
enum class Counter : uint32_t {
  sent_pkts,
  rcvd_pkts,
  duplicate_request,
  out_of_seq_request,
  rcvd_rnr_err,
  send_rnr_err,
  rcvd_seq_err,
  ack_deferred,
  retry_exceeded_err,
  retry_rnr_exceeded_err,
  completer_retry_err,
  send_err,
  link_downed,
  rdma_sends,
  rdma_recvs,
  // urxe
  rx_drop_parse,  // frame failed to parse (not RoCE, bad length, ...)
  rx_drop_icrc,   // bad ICRC
  rx_drop_qpn,    // no such QP, or the QP's type/state does not take this opcode
  rx_drop_qkey,   // UD Q_Key mismatch
  // what else a receiver drops without a NAK, each cause on its own (none is lumped together)
  rx_drop_pkey,            // P_Key other than the default full-membership key
  rx_drop_opcode,          // an opcode the QP's type does not take (UC READ, UD WRITE, a response to UC/UD)
  rx_drop_no_recv_wqe,     // UC or UD SEND with no receive WQE posted (only RC answers RNR NAK)
  rx_drop_uc,              // UC packet it cannot take (rkey, length): dropped with its message, UC has no NAK
  rx_drop_dup_unmatched,   // duplicate READ/atomic whose original is no longer held: nothing to replay
  rx_drop_resp_busy,       // request dropped while the READ responses owed before it cannot be sent yet
  rx_drop_stale_response,  // ACK or response for PSNs already completed or never sent
  rx_drop_bad_response,    // response that does not fit the request it answers (kind, PSN range, length)
  // lost in the port before the engine saw them: set from Port::rx_loss by the provider, not by the engine
  rx_ring_drops,   // the receive ring was full (the progress thread did not drain it in time)
  rx_nombuf,       // no receive buffer (DPDK mbufs)
  rx_port_errors,  // received but not whole (truncated, multi-segment, the NIC's receive errors)
  tx_no_buf,       // port had no tx buffer
  cq_overflow,
  resp_remote_access_errors,  // as mlx5: RDMA WRITE/READ/atomic refused for its rkey, range or rights
  // congestion notification, with mlx5's names
  np_ecn_marked_roce_packets,  // RoCE packets received with CE (ECN 11)
  np_cnp_sent,                 // CNPs sent in answer to them
  rp_cnp_handled,              // CNPs received that cut a QP's rate
  rp_cnp_ignored,              // CNPs received and not acted on (no QP, or no rate control)
  rp_timeout_cuts,             // retransmit timeouts that cut a QP's rate (lost frames as congestion)
  np_rx_backlog_marked,        // packets treated as CE-marked because they waited deep in the receive ring
  tail_loss_probes,  // last packets resent early (about two round trips without an ACK), no retry spent
  sent_bytes,        // Ethernet frame bytes (ICRC included, no FCS) of the frames sent_pkts counts
  rcvd_bytes,        // the same of the frames rcvd_pkts counts
  rx_drop_mcast,     // UD multicast frame for a group no QP of this engine is attached to
  retransmitted_pkts,  // request packets sent again (go-back-N after a NAK or a timeout, a tail loss probe)
  num_counters
};

// The counter table, one row per Counter at its index: the name `rdma statistic` and sysfs hw_counters
// show, and whether kernel rxe has it (rxe_hw_counters.c: every urxe device shows those, in rxe's order, so
// they come first; provider/stats.h reads them from here).
struct CounterInfo {
  Counter id = Counter::num_counters;
  const char* name = "?";
  bool rxe = false;
};
inline constexpr CounterInfo kCounterTable[] = {
    {.id = Counter::sent_pkts, .name = "sent_pkts", .rxe = true},
    {.id = Counter::rcvd_pkts, .name = "rcvd_pkts", .rxe = true},
    {.id = Counter::duplicate_request, .name = "duplicate_request", .rxe = true},
    {.id = Counter::out_of_seq_request, .name = "out_of_seq_request", .rxe = true},
    {.id = Counter::rcvd_rnr_err, .name = "rcvd_rnr_err", .rxe = true},
    {.id = Counter::send_rnr_err, .name = "send_rnr_err", .rxe = true},
    {.id = Counter::rcvd_seq_err, .name = "rcvd_seq_err", .rxe = true},
    {.id = Counter::ack_deferred, .name = "ack_deferred", .rxe = true},
    {.id = Counter::retry_exceeded_err, .name = "retry_exceeded_err", .rxe = true},
    {.id = Counter::retry_rnr_exceeded_err, .name = "retry_rnr_exceeded_err", .rxe = true},
    {.id = Counter::completer_retry_err, .name = "completer_retry_err", .rxe = true},
    {.id = Counter::send_err, .name = "send_err", .rxe = true},
    {.id = Counter::link_downed, .name = "link_downed", .rxe = true},
    {.id = Counter::rdma_sends, .name = "rdma_sends", .rxe = true},
    {.id = Counter::rdma_recvs, .name = "rdma_recvs", .rxe = true},
    {.id = Counter::rx_drop_parse, .name = "rx_drop_parse"},
    {.id = Counter::rx_drop_icrc, .name = "rx_drop_icrc"},
    {.id = Counter::rx_drop_qpn, .name = "rx_drop_qpn"},
    {.id = Counter::rx_drop_qkey, .name = "rx_drop_qkey"},
    {.id = Counter::rx_drop_pkey, .name = "rx_drop_pkey"},
    {.id = Counter::rx_drop_opcode, .name = "rx_drop_opcode"},
    {.id = Counter::rx_drop_no_recv_wqe, .name = "rx_drop_no_recv_wqe"},
    {.id = Counter::rx_drop_uc, .name = "rx_drop_uc"},
    {.id = Counter::rx_drop_dup_unmatched, .name = "rx_drop_dup_unmatched"},
    {.id = Counter::rx_drop_resp_busy, .name = "rx_drop_resp_busy"},
    {.id = Counter::rx_drop_stale_response, .name = "rx_drop_stale_response"},
    {.id = Counter::rx_drop_bad_response, .name = "rx_drop_bad_response"},
    {.id = Counter::rx_ring_drops, .name = "rx_ring_drops"},
    {.id = Counter::rx_nombuf, .name = "rx_nombuf"},
    {.id = Counter::rx_port_errors, .name = "rx_port_errors"},
    {.id = Counter::tx_no_buf, .name = "tx_no_buf"},
    {.id = Counter::cq_overflow, .name = "cq_overflow"},
    {.id = Counter::resp_remote_access_errors, .name = "resp_remote_access_errors"},
    {.id = Counter::np_ecn_marked_roce_packets, .name = "np_ecn_marked_roce_packets"},
    {.id = Counter::np_cnp_sent, .name = "np_cnp_sent"},
    {.id = Counter::rp_cnp_handled, .name = "rp_cnp_handled"},
    {.id = Counter::rp_cnp_ignored, .name = "rp_cnp_ignored"},
    {.id = Counter::rp_timeout_cuts, .name = "rp_timeout_cuts"},
    {.id = Counter::np_rx_backlog_marked, .name = "np_rx_backlog_marked"},
    {.id = Counter::tail_loss_probes, .name = "tail_loss_probes"},
    {.id = Counter::sent_bytes, .name = "sent_bytes"},
    {.id = Counter::rcvd_bytes, .name = "rcvd_bytes"},
    {.id = Counter::rx_drop_mcast, .name = "rx_drop_mcast"},
    {.id = Counter::retransmitted_pkts, .name = "retransmitted_pkts"},
};
static_assert(std::size(kCounterTable) == static_cast<size_t>(Counter::num_counters));
static_assert(
    [] {
      for (size_t i = 0; i < std::size(kCounterTable); i++) {
        if (static_cast<size_t>(kCounterTable[i].id) != i) return false;
        if (i > 0 && kCounterTable[i].rxe && !kCounterTable[i - 1].rxe) return false;
      }
      return true;
    }(),
    "kCounterTable: each row at its Counter, rxe's counters first");
inline constexpr size_t kNumRxeCounters = [] {
  size_t n = 0;
  for (const CounterInfo& c : kCounterTable) n += c.rxe;
  return n;
}();
const char* counter_name(Counter c);

// Log levels of EventSink::log, most severe first.
enum class LogLevel : uint8_t { error, warn, info, debug };
// Rare events a sink may count for rate-limited summaries (EventSink::note): received frames dropped as bad,
// and RNR NAKs. Frames that are simply not RoCE, or belong to another process's QPN block, are not noted.
enum class Note : uint8_t {
  drop_malformed,    // RoCE frame that fails to parse (bad length, checksum, opcode, pad, version)
  drop_bad_icrc,     // ICRC mismatch
  drop_unknown_qpn,  // DestQP in this engine's QPN block but no such QP (or the wrong QP type)
  drop_qp_state,     // the QP's state does not take this packet (e.g. a request before RTR)
  drop_bad_pkey,     // P_Key not the default
  drop_bad_qkey,     // UD Q_Key mismatch
  rnr_nak_sent,      // we answered a SEND with RNR NAK (no receive WQE posted)
  rnr_nak_received,  // the peer answered ours with RNR NAK
  num_notes
};
const char* note_name(Note n);

// Notifications from the engine. Called on the thread running progress() (or the one running a control
// verb), with the engine lock held: implementations must not call control verbs; post/poll are allowed.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void async_event(const AsyncEvent& ev) = 0;
  // An armed CQ (req_notify_cq) received a completion that matches the arming; it is now disarmed.
  virtual void comp_event(uint32_t cq) = 0;
  // Called on the posting thread after post_send/post_recv/post_srq_recv queued work, so a sleeping
  // progress thread can be woken (eventfd); `send` for post_send (work that makes frames). Default: nothing.
  virtual void doorbell(bool /*send*/) {}
  // One line worth logging (a QP going to the error state and why), never one per packet in normal
  // operation. No trailing newline. Default: nothing (the engine does no I/O).
  virtual void log(LogLevel /*level*/, const char* /*line*/) {}
  // A rare event for rate-limited summaries (see Note); qpn is the packet's BTH DestQP. Default: nothing.
  virtual void note(Note /*n*/, uint32_t /*qpn*/) {}
};

struct EngineImpl;

class Engine {
 public:
  Engine(Port& port, Clock& clock, const EngineConfig& config = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const DeviceAttr& device_attr() const;
  // The largest path MTU the port's link MTU allows (what query_port reports as active_mtu).
  Mtu active_mtu() const;
  void set_event_sink(EventSink* sink);

  // PD. dealloc_pd: EBUSY while MRs, MWs, QPs, SRQs or AHs use it.
  int alloc_pd(uint32_t& pd);
  int dealloc_pd(uint32_t pd);

  // MR over caller memory [addr, addr+length) seen by peers and SGEs as [iova, iova+length) (iova 0 with
  // ACCESS_ZERO_BASED). lkey = rkey = 24-bit index << 8 | 8-bit key. REMOTE_WRITE/ATOMIC without
  // LOCAL_WRITE → EINVAL (IBTA).
  int reg_mr(uint32_t pd, void* addr, uint64_t length, uint64_t iova, uint32_t access, MrInfo& out);
  // EBUSY while memory windows are bound to it (IBA 10.6.7.2.6: deregistration fails then).
  int dereg_mr(uint32_t lkey);
  // ibv_advise_mr over ON_DEMAND MRs of `pd`: PREFETCH(_WRITE) faults the SGEs' pages in (for writing),
  // PREFETCH_NO_FAULT only checks them. Errors as ibv_advise_mr(3): EINVAL (flags, no SGE), EOPNOTSUPP
  // (advice), EFAULT (a key that is not an ON_DEMAND MR of pd, a range outside it or not mapped), EPERM
  // (PREFETCH_WRITE on an MR without local write). Synchronous either way (an async prefetch may be).
  int advise_mr(uint32_t pd, uint32_t advice, uint32_t flags, const Sge* sges, uint32_t num_sge);
  // Memory windows (IBTA 10.6.7; engine/mw.cc). An MW shares the MRs' key space (index << 8 | key) but is
  // never an lkey; its rkey is valid for remote access while bound (type 2: only through the QP that bound
  // it). Type 1 is created VALID and unbound, type 2 FREE. The window's key is in `rkey` (its low byte
  // changes with each bind: BIND_MW, SendWr::bind_mw). alloc_mw: EINVAL for a bad PD or type, ENOMEM
  // beyond max_mw. dealloc_mw unbinds and destroys the window of index `handle` (rkey >> 8: its key may
  // have changed since) (EINVAL: no such window).
  int alloc_mw(uint32_t pd, MwType type, uint32_t& rkey);
  int dealloc_mw(uint32_t handle);
  // ibv_rereg_mr, in place: flags REREG_MR_CHANGE_TRANSLATION (addr/length; iova = addr, 0 with
  // ACCESS_ZERO_BASED), _CHANGE_PD, _CHANGE_ACCESS (checked as in reg_mr). lkey and rkey stay the same, as in
  // kernel rxe. Atomic for traffic: MRs are resolved per packet under the engine lock, so once it returns no
  // packet reaches the old memory, PD or rights through this MR. EINVAL: unknown MR or PD, no or unknown
  // flag, bad range or access; EOPNOTSUPP: ON_DEMAND; EBUSY while windows are bound to it. On error nothing
  // changes.
  int rereg_mr(uint32_t lkey, uint32_t flags, uint32_t pd, void* addr, uint64_t length, uint32_t access);

  // CQ with at least `cqe` entries (actual count in *actual_cqe). destroy_cq: EBUSY while QPs use it.
  int create_cq(uint32_t cqe, uint32_t& cq, uint32_t* actual_cqe = nullptr, const CqOptions& options = {});
  int destroy_cq(uint32_t cq);
  // ibv_resize_cq: at least `cqe` entries (actual count in *actual_cqe); completions not yet polled stay, in
  // order. EINVAL when cqe is 0 or above max_cqe, or fewer than the completions waiting. Safe while other
  // threads poll the CQ and progress() runs (it takes the engine lock, then the CQ's poll lock).
  int resize_cq(uint32_t cq, uint32_t cqe, uint32_t* actual_cqe = nullptr);
  // Up to `num` completions into wc; returns how many (≥ 0) or -errno.
  int poll_cq(uint32_t cq, int num, Wc* wc);
  // The same, with each completion's time (Clock ns when the engine wrote it) in ts[i]; -EINVAL for a CQ
  // created without CqOptions::timestamps.
  int poll_cq_ts(uint32_t cq, int num, Wc* wc, uint64_t* ts);
  int req_notify_cq(uint32_t cq, bool solicited_only);

  // QP in RESET. Capacities may be rounded up; the actual ones are returned in *actual.
  int create_qp(uint32_t pd, const QpInitAttr& init, uint32_t& qpn, QpCap* actual = nullptr);
  // attr_mask validated per transition and QP type as the IBTA / rdma-core require (invalid → EINVAL).
  int modify_qp(uint32_t qpn, const QpAttr& attr, uint32_t attr_mask);
  int query_qp(uint32_t qpn, QpAttr& attr, QpInitAttr* init = nullptr);
  int destroy_qp(uint32_t qpn);

  int create_srq(uint32_t pd, const SrqAttr& attr, uint32_t& srq, SrqAttr* actual = nullptr);
  int modify_srq(uint32_t srq, const SrqAttr& attr, uint32_t attr_mask);
  int query_srq(uint32_t srq, SrqAttr& attr);
  int destroy_srq(uint32_t srq);  // EBUSY while QPs use it
  // A tag-matching SRQ (engine/tag_matching.h): EINVAL for a bad CQ or tm limits beyond kTmCaps.
  int create_srq_tm(uint32_t pd, const SrqAttr& attr, const TmSrqAttr& tm, uint32_t& srq,
                    SrqAttr* actual = nullptr);
  // One ibv_post_srq_ops operation: EINVAL on a non-TM SRQ, a bad opcode, handle or SGE count; ENOMEM
  // when the tag list is full. TAG_ADD sets op.handle.
  int post_srq_op(uint32_t srq, OpsWr& op);

  // XRC (IBTA Annex A14). An XRC domain holds XRC SRQs and XRC target QPs (QpInitAttr::xrcd); dealloc_xrcd:
  // EBUSY while any. An XRC SRQ's number (ibv_get_srq_num) is its handle; its receives complete on `cq`.
  // open_qp: one more handle on the XRC target `qpn` of `xrcd` (ibv_open_qp); each destroy_qp drops one,
  // the last destroys it.
  int alloc_xrcd(uint32_t& xrcd);
  int dealloc_xrcd(uint32_t xrcd);
  int create_xrc_srq(uint32_t xrcd, uint32_t pd, uint32_t cq, const SrqAttr& attr, uint32_t& srq,
                     SrqAttr* actual = nullptr);
  int open_qp(uint32_t xrcd, uint32_t qpn);

  int create_ah(uint32_t pd, const AddressVector& av, uint32_t& ah);
  int destroy_ah(uint32_t ah);

  // UD multicast (ibv_attach_mcast / ibv_detach_mcast). An attached QP in RTR or later receives the UD
  // SENDs to DestQP kMulticastQpn whose IP destination is `mgid` (IPv4 as IPv4-mapped), each with its own
  // Q_Key check, including those this engine's own QPs send (a NIC's multicast loopback). attach: EINVAL
  // for a non-UD QP or a GID that is not multicast; 0 if already attached; ENOMEM beyond max_mcast_grp,
  // max_mcast_qp_attach or max_total_mcast_qp_attach; EIO if the port refuses the group's MAC (asked at a
  // MAC's first group: Port::set_multicast_mac). detach: EINVAL when not attached. destroy_qp: EBUSY while
  // the QP is attached (as the kernel's uverbs).
  int attach_mcast(uint32_t qpn, const wire::Gid& mgid);
  int detach_mcast(uint32_t qpn, const wire::Gid& mgid);

  // The GID table (index = sgid_index; an all-zero entry is unused): the port's at creation, then what
  // set_gid puts there when the interface's addresses change. QPs and AHs keep the source address they
  // resolved (like the kernel's cached GID attributes); modify_qp (QP_AV) and create_ah with an unused
  // index fail with EINVAL. set_gid: EINVAL beyond the table.
  int set_gid(uint32_t index, const wire::Gid& gid);
  std::vector<wire::Gid> gid_table() const;

  // Data path. On error *bad_wr points at the first WR not posted (those before it are posted).
  // post_send: EINVAL in RESET/INIT/RTR (and bad opcode/flags/SGE count/inline size for the QP type),
  // ENOMEM when the send queue is full, EOPNOTSUPP for TSO. BIND_MW and LOCAL_INV (RC, UC) execute in
  // queue order without a packet; a bind that breaks a rule completes with WC_MW_BIND_ERR, a LOCAL_INV of
  // anything but a bound type-2 window of the QP's PD with WC_LOC_QP_OP_ERR (an MR is never invalidated).
  // post_recv: EINVAL in RESET or on a QP with an SRQ, ENOMEM when full.
  int post_send(uint32_t qpn, const SendWr* wr, const SendWr** bad_wr);
  int post_recv(uint32_t qpn, const RecvWr* wr, const RecvWr** bad_wr);
  int post_srq_recv(uint32_t srq, const RecvWr* wr, const RecvWr** bad_wr);

  // One round of work: received frames, expired timers, send queues. True when anything was done.
  bool progress();
  // The same round, run only if no other thread holds the engine lock (false then): lets an application
  // thread that busy-polls its CQ do the NIC's work itself instead of waiting for the progress thread.
  // `ran` (optional): whether the round ran, i.e. the lock was free.
  // `round`: who runs it. Round::app, an application thread (poll_cq), which comes back within
  // microseconds: its round may hold ACKs back for the app's answer (EngineConfig::hold_acks), unless it
  // raised a completion event (the app then answers from its channel, and event order must stay a NIC's).
  // Round::thread, the progress thread, which runs again by next_deadline_ns: its round may hold the ACK of
  // a WRITE it placed (no completion: an app polling memory answers with a post). Round::other (a post's,
  // a control verb's) sends them.
  enum class Round : uint8_t { other, app, thread };
  bool try_progress(bool* ran = nullptr, Round round = Round::other);
  // Whether a round holds ACKs back (a post that would answer them should run a round now).
  // Held ACKs wait at most kAckHoldNs for a round (next_deadline_ns says when).
  bool acks_held() const;
  static constexpr uint64_t kAckHoldNs = 20000;
  // Clock time (ns) by which progress() must run again if nothing else happens: 0 when work is pending
  // now, UINT64_MAX when only new packets or posts can create work. wait_for_lock false: 0 when another
  // thread holds the engine lock (it is working), instead of waiting for it; `lock_busy` (optional) then
  // says which of the two a 0 means.
  uint64_t next_deadline_ns(bool wait_for_lock = true, bool* lock_busy = nullptr) const;

  uint64_t counter(Counter c) const;
  // WRITE messages placed in memory without a completion so far (an app may poll that memory, not its CQ):
  // read by the provider's thread without the lock.
  uint64_t writes_placed() const;
  // One QP's share of the counters (num_counters values into out: what happened while the engine worked on
  // that QP; frames dropped before a QP was found count only in counter()) and its state. EINVAL: no such QP.
  int qp_counters(uint32_t qpn, QpState& state, uint64_t* out) const;
  // The reaction point's current rate of a QP in Mb/s, or 0 while it is not paced (no CNP yet, or back at
  // line rate) or does not exist.
  uint32_t qp_rate_mbps(uint32_t qpn) const;

 private:
  std::unique_ptr<EngineImpl> impl_;
};

}  // namespace urxe::engine
