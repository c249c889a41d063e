// Engine internals shared by the engine's files (engine/README.md lists them). Not a public header: the
// provider and the tests use engine.h only.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/mr.h"
#include "engine/ring.h"
#include "engine/wr_table.h"
#include "wire/packet.h"
#include "wire/psn.h"

namespace urxe::engine {

struct Cq {
  uint32_t handle = 0;
  uint32_t cqe = 0;
  LockedRing<Wc> ring;
  // CqOptions::timestamps: the Clock's time each completion was written, by ring slot (empty: none kept)
  std::vector<uint64_t> ts;
  std::atomic<int> armed{0};  // 0 no, 1 solicited only, 2 any
  bool overflowed = false;
  uint32_t refs = 0;
};

struct RecvWqe {
  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
  uint32_t sge_base = 0;  // index of its first Sge in the owner's sge pool
};

// A receive queue (a QP's own RQ or an SRQ's).
struct RecvQueue {
  LockedRing<RecvWqe> ring;
  std::vector<Sge> sges;
  uint32_t max_sge = 0;
  void init(uint32_t cap, uint32_t max_sge_) {
    ring.init(cap);
    max_sge = max_sge_ < 1 ? 1 : max_sge_;
    sges.assign(size_t{ring.slots.size()} * max_sge, Sge{});
    for (uint32_t i = 0; i < ring.slots.size(); i++) ring.slots[i].sge_base = i * max_sge;
  }
};

struct Srq {
  uint32_t handle = 0;  // also its SRQ number (ibv_get_srq_num)
  uint32_t pd = 0;
  uint32_t xrcd = 0;  // an XRC SRQ: its XRC domain (0: an ordinary SRQ)
  Cq* cq = nullptr;   // an XRC or tag-matching SRQ's own CQ: where its receives (and TM operations) complete
  RecvQueue rq;
  std::atomic<uint32_t> limit{0};
  uint32_t refs = 0;
  std::unique_ptr<TmSrq> tm;  // a tag-matching SRQ's tag list (engine/tag_matching.cc); null otherwise
};

struct Ah {
  bool used = false;
  uint32_t pd = 0;
  AddressVector av;
  wire::Gid sgid{};  // gids[av.sgid_index] at create_ah: kept if that GID later goes away
  // Counts the slot's create_ahs (0: never). A WQE keeps the one it was posted with: an AH destroyed after
  // the post still addresses its sends, as a NIC that copied the address vector into the WQE does; its
  // data stays until the slot is created again (round robin: after every other slot).
  uint32_t gen = 0;
};

// One send WQE: the WR as posted plus the requester's per-WQE state.
struct SendWqe {
  uint64_t wr_id = 0;
  WrOpcode opcode = WR_SEND;
  uint32_t send_flags = 0;
  uint32_t imm = 0;          // wire value (load_be32 of the verbs bytes)
  uint32_t inv_rkey = 0;     // LOCAL_INV / SEND_WITH_INV: the key; BIND_MW: the window's current rkey
  uint64_t remote_addr = 0;  // BIND_MW: the window's address (rkey: the key it gets)
  uint32_t rkey = 0;
  uint64_t compare_add = 0, swap = 0;
  uint32_t ah = 0, remote_qpn = 0, remote_qkey = 0;
  uint32_t ah_gen = 0;    // the AH's Ah::gen when posted (0: it was not in use then)
  uint32_t xrc_srqn = 0;  // XRC_SEND: the responder's XRC SRQ, in every request's XRCETH
  uint32_t num_sge = 0;
  uint32_t sge_base = 0;     // first Sge in the QP's sge pool
  uint32_t inline_base = 0;  // offset of its inline bytes in the QP's inline pool
  bool is_inline = false;
  uint64_t length = 0;
  uint32_t bind_mr = 0, bind_access = 0;  // BIND_MW: the MR's lkey, the window's access
  uint64_t bind_length = 0;               // BIND_MW: the window's length
  // requester / completer state (progress thread only)
  bool started = false;   // PSNs assigned
  bool sent_all = false;  // every request packet sent at least once
  bool done = false;      // ready to complete (UC/UD sent, RC acked, LOCAL_INV executed)
  WcStatus status = WC_SUCCESS;
  uint32_t first_psn = 0, last_psn = 0, npkts = 0;
  uint32_t resp_psn = 0;     // READ: next response PSN expected; atomic: its PSN
  uint64_t resp_offset = 0;  // READ: bytes received
  uint64_t sent_ns = 0;      // when its last packet first left (a round trip sample when acknowledged)
};

// Responder resource (IBTA "responder resources"): one per READ / atomic, kept for duplicates.
struct RespRes {
  bool valid = false;
  bool is_read = false;       // READ, or ATOMIC WRITE (answered by a READ response without payload)
  bool atomic_write = false;  // ATOMIC WRITE: its duplicate is answered again, never executed again
  uint32_t first_psn = 0, last_psn = 0;
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint64_t length = 0;
  uint64_t orig = 0;  // atomic: the value before the operation (replayed for duplicates)
  uint32_t pd = 0;    // the PD its R_Key was checked in (an XRC target's PD changes with each request's SRQ)
  uint32_t msn = 0;   // MSN once this request executed: its responses carry it, however late they go out
  // output state: still owes response packets from cur_psn / cur_offset
  bool pending = false;
  uint32_t cur_psn = 0;
  uint32_t start_psn = 0;  // PSN of this (re)transmission's first response packet
  uint64_t cur_offset = 0;
  uint32_t batch_bytes = 0;  // Port::tx_batch_bytes_to for this (re)transmission (0: no batch frames)
};

// What a multi-packet message in progress at the responder is.
enum class InMsg : uint8_t { none, send, write };

struct Qp {
  uint32_t qpn = 0;
  uint32_t index = 0;                    // qpn - qpn_base: its bit in EngineImpl::active, its slot in qps
  uint64_t scheduled_wake = UINT64_MAX;  // the time of its entry in EngineImpl::wakes (MAX: none)
  bool wake_paced = false;               // that entry is the time its rate lets it send again
  QpType type = QPT_RC;
  bool reliable = false;  // qp_type_reliable(type)
  uint32_t pd = 0;        // XRC_RECV: the PD of the XRC SRQ the request being handled names (xrc_bind)
  Cq* scq = nullptr;
  Cq* rcq = nullptr;
  Srq* srq = nullptr;  // XRC_RECV: the XRC SRQ of the request being handled (no reference held)
  uint32_t xrcd = 0;   // XRC_RECV: its XRC domain
  uint32_t opens = 0;  // XRC_RECV: Engine::open_qp handles on it beside its creator's (destroy_qp drops one)
  bool sq_sig_all = false;
  std::atomic<QpState> state{QPS_RESET};
  QpAttr attr;  // last values set by modify_qp
  QpCap cap;
  uint32_t mtu = 1024;        // effective path MTU in bytes
  wire::FrameSpec spec;       // RC/UC: headers toward the peer (from the AV); BTH fields set per packet
  wire::HeaderPrefix prefix;  // spec's headers up to UDP, built once (wire::make_prefix) with spec
  // this QP's share of the counters; engine lock
  std::array<uint64_t, static_cast<size_t>(Counter::num_counters)> counters{};
  bool comm_est = false;
  uint64_t np_last_cnp_ns = 0;  // when this QP last sent a CNP (notification point rate limit)
  int32_t path = -1;            // RC/UC: its destination's entry in EngineImpl::paths
  struct Rate {                 // reaction point (engine/congestion.cc); unpaced while !limited
    bool limited = false;
    double rc = 0, rt = 0;  // current and target rate, Mb/s
    double alpha = 0;
    bool cnp_in_period = false;  // a CNP came in the α period that started at alpha_ns
    uint64_t alpha_ns = 0, increase_ns = 0, last_cut_ns = 0;
    uint32_t stage = 0;         // increase steps since the last cut
    uint64_t next_send_ns = 0;  // pacing: the next packet may leave at this time
    uint64_t stall_mark = 0;    // EngineImpl::stall_ns when the timers were last moved on
  } rate;

  // send queue (app produces, progress consumes)
  LockedRing<SendWqe> sq;
  std::vector<Sge> sq_sges;
  std::vector<uint8_t> sq_inline;
  // own receive queue (unused with an SRQ)
  RecvQueue rq;

  // State by the role that owns it, as rxe's qp->req / qp->comp / qp->resp. Every role runs under the engine
  // lock (progress thread or a control verb), so one role may still move another's state through that
  // role's functions (the completer rewinds the requester with go_back).
  struct Requester {
    uint32_t idx = 0;          // next WQE to (re)send
    uint64_t offset = 0;       // bytes of it already sent
    uint32_t next_psn = 0;     // PSN of the next packet to send
    uint32_t sent_end = 0;     // one past the highest PSN ever sent
    uint32_t noack_pkts = 0;   // request packets sent since the last one with AckReq
    uint32_t batch_bytes = 0;  // Port::tx_batch_bytes_to for the message being sent (0: no batch frames)
  } req;

  struct Completer {
    uint32_t una_psn = 0;         // oldest unacknowledged PSN
    uint64_t timer_deadline = 0;  // 0 = retransmit timer stopped
    uint8_t retry_left = 0, rnr_left = 0;
    uint64_t rnr_until = 0;     // RNR wait: no sending before this time (0 = not waiting)
    uint32_t rnr_psn = 0;       // the request the RNR NAK named: resent from there when the wait ends
    bool retry_marker = false;  // a go-back-N for a read-response gap was already issued at marker_psn
    uint32_t marker_psn = 0;
    bool nak_pending = false;  // an error NAK waits for answers to earlier READs/atomics
    uint32_t nak_psn = 0;
    WcStatus nak_status = WC_SUCCESS;
    bool sqd_notified = false;
    // Tail loss probe: when nothing is acknowledged for about two round trips, the last packet sent goes
    // again once (no retry spent): lost at the tail of a window, with nothing after it to provoke a NAK,
    // a loss would otherwise cost a whole retransmit timeout (67 ms at perftest's timeout 14).
    uint64_t srtt_ns = 0;    // smoothed round trip of unretransmitted packets (0: none measured yet)
    uint64_t rttvar_ns = 0;  // its mean deviation (RFC 6298)
    uint32_t karn_psn = 0;   // PSNs below were resent by a go-back: their acknowledgements give no sample
    uint64_t probe_deadline = 0;  // 0 = no probe armed
    bool probed = false;          // the probe for this stall went out
  } comp;

  struct Responder {
    uint32_t epsn = 0;  // expected request PSN
    uint32_t msn = 0;
    bool nak_sent = false;  // a PSN-seq or RNR NAK is outstanding: drop silently until epsn arrives
    InMsg in_msg = InMsg::none;
    bool uc_dropping = false;  // UC: rest of a message with a lost packet is being dropped
    uint64_t msg_offset = 0;
    // current receive WQE (copied out of the RQ/SRQ at the first packet of a SEND)
    bool have_recv = false;
    uint64_t recv_wr_id = 0;
    uint32_t recv_num_sge = 0;
    std::vector<Sge> recv_sges;
    TmRecv tm;  // on a TM SRQ: what the SEND being received is (engine/tag_matching.cc)
    // current WRITE target
    uint64_t write_va = 0;
    uint32_t write_rkey = 0;
    uint64_t write_len = 0;
    // responses owed (ACK coalescing): the newest ACK/NAK not yet sent
    bool ack_pending = false;
    uint8_t ack_syndrome = 0;
    uint32_t ack_psn = 0, ack_msn = 0;
    uint32_t pkts_since_ack = 0;
    std::vector<RespRes> res;
    uint32_t res_next = 0;  // allocation counter; slot = res_next % res.size()
  } resp;

  uint32_t bound_mws = 0;     // type-2 windows this QP bound (destroy_qp frees them)
  uint32_t mcast_groups = 0;  // multicast groups it is attached to (destroy_qp: EBUSY while any)
  bool flush_needed = false;  // in ERR/SQE: complete what remains with WR_FLUSH_ERR
  bool flushing = false;      // the failed WQE was reported: every later one is flushed
  bool flush_gap = false;     // a WQE was flushed unfinished: later finished ones are flushed too
  bool error_event_sent = false;
};

// The QPs of this engine toward one destination GID share one more DCQCN rate beside their own: the CNPs of
// all of them drive it, so it gets feedback often enough for DCQCN's microsecond timers even when each of
// many QPs hears a CNP only every few milliseconds (then each QP's own rate recovers between its CNPs and
// never holds the aggregate down). A QP sends only when both its own and its path's rate allow.
struct PathRate {
  wire::Gid dgid{};
  uint32_t refs = 0;  // QPs using it; 0 = free slot
  Qp::Rate rate;
};

// A multicast group with a member in this engine: its attached QPs (multicast.cc).
struct McGroup {
  wire::Gid mgid{};
  std::vector<uint32_t> qpns;
};

struct EngineImpl {
  EngineImpl(Port& p, Clock& c, const EngineConfig& cfg);

  Port& port;
  Clock& clock;
  EngineConfig config;
  const bool port_icrc_offload;     // Port::tx_icrc_offload: frames leave without their ICRC
  const bool port_gather;           // Port::tx_gather (and the ICRC offload it needs): payloads by reference
  const uint32_t port_batch_bytes;  // Port::tx_batch_bytes (with port_gather), else 0: no batch frames
  EventSink* sink = nullptr;
  mutable std::mutex mu;  // control verbs and progress()

  std::vector<Pd> pds;
  std::vector<Mr> mrs;  // MRs (1..max_mr), then memory windows (mw_base..); index 0 unused
  std::vector<Mw> mws;  // windows, by mrs index less mw_base
  uint32_t mw_base = 0;
  Mw& mw_of(const Mr& m) { return mws[static_cast<size_t>(&m - mrs.data()) - mw_base]; }
  const Mw& mw_of(const Mr& m) const { return mws[static_cast<size_t>(&m - mrs.data()) - mw_base]; }
  std::vector<Ah> ahs;
  uint32_t ah_next = 1;         // where create_ah looks first (round robin)
  std::vector<wire::Gid> gids;  // GID table (Engine::set_gid), index = sgid_index; zero = unused
  std::vector<std::atomic<Cq*>> cqs;
  std::vector<std::atomic<Srq*>> srqs;
  std::vector<uint32_t> xrcds;        // XRC domains by handle - 1: 0 free, else 1 + the SRQs and QPs in it
  std::vector<std::atomic<Qp*>> qps;  // index = qpn - qpn_base
  uint32_t next_qp_index = 0;         // where the cyclic QPN search starts (EngineConfig::qpn_start)
  std::vector<Qp*> qp_list;           // every live QP
  std::vector<PathRate> paths;        // Qp::path indexes it
  // Which QPs progress() must visit: a bit per QP index, set by whatever may give a QP work (a post, a frame
  // for it, a verb, its timer), taken by the round that visits it. Idle QPs cost nothing per round. The
  // application's posts set bits without the engine lock, hence atomics.
  // A second level says which words of `active` may have bits (set after the word's bit, taken before the
  // word), so a round and next_deadline_ns() read 16 words for 65,536 QPs, not 1,024: poll_cq runs a round
  // each time an app busy-polls.
  // A third, one word, says which groups of second-level words may have bits (set after them, taken before
  // them): a round of an app polling an idle device reads one word, where walking the 16 took ~60 % of the
  // round's own time in ib_send_lat's poll loop.
  std::vector<std::atomic<uint64_t>> active;
  std::vector<std::atomic<uint64_t>> active_words;
  std::atomic<uint64_t> active_top{0};
  uint32_t active_top_shift = 0;  // second-level word s is in group s >> active_top_shift (64 groups at most)
  void activate(const Qp& q) {
    const uint32_t w = q.index >> 6;
    active[w].fetch_or(uint64_t{1} << (q.index & 63), std::memory_order_release);
    active_words[w >> 6].fetch_or(uint64_t{1} << (w & 63), std::memory_order_seq_cst);
    // A round takes the group's bit before the word's (all four sequentially consistent), so a set one either
    // is still there for the word just set or was set again by a writer after that round took the word. In
    // practice each post's own inline round takes the bit, so most posts write it: one atomic more (~20
    // cycles) against the walk of the 16 words a round no longer does.
    set_active_group(w >> 6, std::memory_order_seq_cst);
  }
  // The same under the engine lock, which orders it with the rounds: no atomic write when the bits are set
  // already (a burst of frames for one QP sets them once).
  void activate_locked(const Qp& q) {
    const uint32_t w = q.index >> 6;
    const uint64_t bit = uint64_t{1} << (q.index & 63), wbit = uint64_t{1} << (w & 63);
    if (!(active[w].load(std::memory_order_relaxed) & bit))
      active[w].fetch_or(bit, std::memory_order_relaxed);
    if (!(active_words[w >> 6].load(std::memory_order_relaxed) & wbit)) {
      active_words[w >> 6].fetch_or(wbit, std::memory_order_relaxed);
      // (where the word's bit was set, so was this, or activate() is about to set it)
      set_active_group(w >> 6, std::memory_order_relaxed);
    }
  }
  // Sets the third level's bit for second-level word `s`, with no write when it is set already.
  void set_active_group(uint32_t s, std::memory_order order) {
    const uint64_t tbit = uint64_t{1} << (s >> active_top_shift);
    if (!(active_top.load(order) & tbit)) active_top.fetch_or(tbit, order);
  }
  // Timers (retransmit, tail probe, RNR wait, pacing): a min-heap of (time, QP index). A QP has at most one
  // live entry (Qp::scheduled_wake); an entry whose time is not its QP's scheduled_wake is stale and
  // skipped. A timer pushed later (each ACK restarts the retransmit timer) moves nothing: the earlier entry
  // wakes the QP, whose visit schedules the later time.
  struct Wake {
    uint64_t t;
    uint32_t index;
    bool operator>(const Wake& o) const { return t > o.t; }
  };
  std::vector<Wake> wakes;
  // When qp next needs a visit: 0 now, a time, or UINT64_MAX (only a post, a frame or a verb can give it
  // work); `paced`: that time is when its rate lets it send again. schedule() makes it so after a visit.
  uint64_t qp_wake(const Qp& qp, bool& paced) const;
  void schedule(Qp& qp);
  struct Taken {
    uint32_t word;
    uint64_t bits;
  };
  std::vector<Taken> taken;  // the words of `active` a round took (preallocated)
  uint32_t walk_start = 0;   // the QP index progress() starts its walk at (fairness, see progress_round)
  uint64_t jitter_state = 0x9e3779b97f4a7c15ull;  // retransmit-timer jitter (xorshift; deterministic)
  // The round trip seen by any QP (smoothed over all samples): a QP that lost everything it sent before
  // measuring its own round trip still gets a tail loss probe, timed from its neighbours' round trips.
  uint64_t srtt_any_ns = 0, rttvar_any_ns = 0;
  // How long, in all, the engine ran late for a paced sender's wake (its threads were off the CPU while
  // frames were due), past kStallGraceNs each time: DCQCN's timers stop for that time (engine/congestion.cc).
  uint64_t stall_ns = 0;
  static constexpr uint64_t kStallGraceNs = 200'000;
  void note_late_wake(const Qp& q, uint64_t due);
  alignas(8) std::array<uint64_t, static_cast<size_t>(Counter::num_counters)> own_counters{};
  uint64_t* counters = own_counters.data();  // or EngineConfig::counter_storage

  // tx batch: frames built this round (and any the port refused last time)
  static constexpr size_t kTxBatch = 64;
  std::vector<PacketBuf> tx;
  uint32_t tx_not_ack = 0;  // frames in tx that are not ACK/NAK-only (0: an ACK-only batch)
  // ACK-only frames an application round kept back (EngineConfig::hold_acks); a later round sends them
  // after its own frames (progress_round says which), Engine::kAckHoldNs later at the latest.
  std::vector<PacketBuf> held;
  uint64_t held_since = 0;
  std::atomic<bool> held_any{false};
  uint64_t cq_posts = 0;     // completions written (a round that wrote none holds no ACK)
  uint64_t comp_events = 0;  // completion events raised (a round that raised one holds no ACK)
  // WRITE messages placed without a completion (an app may poll that memory); written under the engine
  // lock, read without it (Engine::writes_placed)
  alignas(8) uint64_t writes_placed = 0;
  bool held_for_write = false;    // the held ACKs wait for the answer to a WRITE, not to a completion
  uint32_t write_hold_skip = 0;   // rounds placing WRITEs still to go unheld since a hold went unanswered
  uint32_t write_hold_fails = 0;  // WRITE holds unanswered in a row: the skip is 1, 2, 4 ... rounds
  static constexpr uint32_t kWriteHoldBackoff = 64;                                  // the longest skip
  static constexpr uint32_t kWriteHoldMaxFails = std::bit_width(kWriteHoldBackoff);  // 1 << (7 - 1) = 64
  // The CQs written since the held ACKs were taken (or since this round began), with their producer index
  // after the last one: while the app has not read one of those completions, it has not answered yet.
  struct CqMark {
    uint32_t handle, prod;
  };
  static constexpr uint32_t kCqMarks = 4;
  std::array<CqMark, kCqMarks> cq_marks{};
  uint32_t n_cq_marks = 0;
  bool mark_cqes = false;  // this round can hold ACKs or ACKs are held: cq_post keeps cq_marks
  bool cqe_unread() const;
  std::vector<PacketBuf> rx;
  // The received frame being handled (rx_frame). parse_frame sets every field of it for each frame; kept
  // here so that a frame's parse does not first construct one on the stack (272 bytes, twice per frame).
  wire::Packet rx_pkt;
  // Frames a QP may send in its turn of this round (progress_round: config.tx_budget, less when many QPs
  // are active, so that a turn of all of them stays near kRoundFrames).
  static constexpr uint32_t kRoundFrames = 8192;
  uint32_t visit_budget = 64;
  uint64_t now = 0;

  Qp* cur_qp = nullptr;  // the QP being worked on (a received packet's, or progress()'s), for its counters
  void count(Counter c, uint64_t n = 1) {
    std::atomic_ref<uint64_t> a(counters[static_cast<size_t>(c)]);  // writers hold the engine lock
    a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    if (cur_qp) cur_qp->counters[static_cast<size_t>(c)] += n;
  }
  struct CurQp {  // sets cur_qp for a scope
    EngineImpl& e;
    CurQp(EngineImpl& engine, Qp* qp) : e(engine) { e.cur_qp = qp; }
    ~CurQp() { e.cur_qp = nullptr; }
  };
  uint32_t active_mtu_bytes() const;
  Mtu active_mtu() const;

  // pd_mr.cc
  int alloc_pd(uint32_t& pd);
  int dealloc_pd(uint32_t pd);
  Pd* pd_get(uint32_t pd);
  int reg_mr(uint32_t pd, void* addr, uint64_t length, uint64_t iova, uint32_t access, MrInfo& out);
  int dereg_mr(uint32_t lkey);
  int advise_mr(uint32_t pd, uint32_t advice, uint32_t flags, const Sge* sges, uint32_t num_sge);
  // The memory at [va, va+len) of the MR named by lkey `key` if it belongs to `pd` and allows `access` (an
  // lkey never names a window: err = window).
  uint8_t* mr_resolve(uint32_t key, uint32_t pd, uint32_t access, uint64_t va, uint64_t len, MrError& err);
  // An ON_DEMAND MR's bytes at `at`: faulted in (for writing when `access` writes) through
  // EngineConfig::odp_fault_in; nullptr (err = not_mapped) when they cannot be.
  uint8_t* odp_fault_in(uintptr_t at, uint64_t len, uint32_t access, MrError& err) const;
  // The same for an rkey a request brought to q: an MR of q's PD, or a window (mw.cc). Inline, the window
  // only where mr_resolve failed: the MR path is mr_resolve's, unchanged.
  // `pd`: the PD the request was checked in (q.pd, or a READ's RespRes::pd when its responses are built).
  uint8_t* rkey_resolve(uint32_t key, const Qp& q, uint32_t pd, uint32_t access, uint64_t va, uint64_t len,
                        MrError& err);
  uint8_t* rkey_resolve(uint32_t key, const Qp& q, uint32_t access, uint64_t va, uint64_t len, MrError& err) {
    return rkey_resolve(key, q, q.pd, access, va, len, err);
  }
  Mr* mr_slot(uint32_t key);  // the used slot `key` names (index and key byte), MR or window; else nullptr

  // mw.cc: memory windows
  int alloc_mw(uint32_t pd, MwType type, uint32_t& rkey);
  int dealloc_mw(uint32_t handle);
  // rkey_resolve's slow path, for the window m: its own checks, then an MR's (and its MR's ODP fault).
  uint8_t* mw_resolve(const Mr& mw, const Qp& q, uint32_t pd, uint32_t access, uint64_t va, uint64_t len,
                      MrError& err) const;
  // BIND_MW, executed by the requester of q in queue order: WC_SUCCESS or WC_MW_BIND_ERR.
  WcStatus bind_mw(Qp& q, const SendWqe& w);
  void unbind_mw(Mr& m);
  void free_qp_windows(const Qp& q);  // destroy_qp: the type-2 windows q bound become FREE
  // LOCAL_INV / SEND_WITH_INV: only a bound type-2 window of `pd` named by its current key (IBTA
  // o10-37.2.26; an ibv_reg_mr MR cannot be invalidated). 0 or EINVAL.
  int invalidate_mw(uint32_t rkey, uint32_t pd);
  int create_ah(uint32_t pd, const AddressVector& av, uint32_t& ah);
  int destroy_ah(uint32_t ah);

  // cq.cc
  int create_cq(uint32_t cqe, uint32_t& cq, uint32_t* actual, const CqOptions& options);
  int destroy_cq(uint32_t cq);
  Cq* cq_get(uint32_t cq) const;
  bool cq_post(Cq& cq, const Wc& wc, bool solicited);
  void cq_clean(const Qp& qp);  // drops qp's completions still waiting in its CQs (modify_qp to RESET)

  // srq.cc
  int create_srq(uint32_t pd, const SrqAttr& attr, uint32_t& srq, SrqAttr* actual);
  int modify_srq(uint32_t srq, const SrqAttr& attr, uint32_t mask);
  int query_srq(uint32_t srq, SrqAttr& attr);
  int destroy_srq(uint32_t srq);
  Srq* srq_get(uint32_t srq) const;
  void srq_check_limit(Srq& s);
  int srq_resize(Srq& s, uint32_t max_wr);
  // tag_matching.cc
  int create_srq_tm(uint32_t pd, const SrqAttr& attr, const TmSrqAttr& tm, uint32_t& srq, SrqAttr* actual);
  int post_srq_op(uint32_t srq, OpsWr& op);
  void tm_srq_release(Srq& s);
  void tm_qp_init(Qp& q);
  int tm_recv_first(Qp& q, const wire::Packet& pkt);
  void tm_complete_recv(Qp& q, uint32_t byte_len, uint32_t flags, uint32_t imm, bool solicited);
  void tm_send_retired(Qp& q, const SendWqe& w, WcStatus status);

  // xrc.cc: XRC domains, XRC SRQs, shared target QPs
  int alloc_xrcd(uint32_t& xrcd);
  int dealloc_xrcd(uint32_t xrcd);
  bool xrcd_valid(uint32_t xrcd) const { return xrcd && xrcd <= xrcds.size() && xrcds[xrcd - 1]; }
  int create_xrc_srq(uint32_t xrcd, uint32_t pd, uint32_t cq, const SrqAttr& attr, uint32_t& srq,
                     SrqAttr* actual);
  int open_qp(uint32_t xrcd, uint32_t qpn);
  // An XRC_RECV QP's request names its XRC SRQ (pkt.xrc_srqn): q takes that SRQ's receive queue, PD and CQ
  // for it. False when that SRQ does not exist or is not of q's XRC domain, or changes inside a message.
  bool xrc_bind(Qp& q, const wire::Packet& pkt);
  void xrc_srq_gone(const Srq& s);  // destroy_srq: target QPs bound to it forget it

  // qp.cc
  int create_qp(uint32_t pd, const QpInitAttr& init, uint32_t& qpn, QpCap* actual);
  int modify_qp(uint32_t qpn, const QpAttr& attr, uint32_t mask);
  int query_qp(uint32_t qpn, QpAttr& attr, QpInitAttr* init);
  int destroy_qp(uint32_t qpn);
  Qp* qp_get(uint32_t qpn) const;
  void qp_reset(Qp& qp);
  void qp_set_error(Qp& qp, bool event, EventType type);
  void qp_flush(Qp& qp);
  // post_recv / post_srq_recv (application thread): queues the WRs on rq under its lock, rings the doorbell.
  int post_recv_wrs(RecvQueue& rq, const RecvWr* wr, const RecvWr** bad_wr);
  bool pop_recv(Qp& qp);  // copies the next receive WQE into qp's current-recv slot; false if none
  void async_event(EventType t, uint32_t element);
  // log.cc: EventSink::log lines and notes (rare events only; nothing without a sink)
  void log_qp_error(const Qp& q, WcStatus cause, uint32_t psn);
  void log_responder_error(const Qp& q, uint8_t nak_code, const wire::Packet& pkt);
  void log_qp_line(LogLevel level, const Qp& q, const char* what);
  void note(Note n, uint32_t qpn) {
    if (sink) sink->note(n, qpn);
  }

  // requester.cc
  bool requester_run(Qp& qp);
  bool requester_blocked(const Qp& qp) const;
  void go_back(Qp& qp, uint32_t psn);
  void arm_probe(Qp& qp);  // (re)arms the tail loss probe after a new packet or an acknowledgement

  // completer.cc
  bool completer_run(Qp& qp);             // in-order completions + timers
  void restart_retransmit_timer(Qp& qp);  // from now, with the backoff and jitter of the retries spent
  void completer_rx(Qp& qp, const wire::Packet& pkt);
  // The completion a finished send WQE reports; false when it is unsignaled and successful.
  bool send_completion(const Qp& qp, const SendWqe& w, Wc& wc) const;
  // Frees the finished WQE w at index `cons` of qp's send queue (cons moves on) and posts its completion.
  void retire_send(Qp& qp, SendWqe& w, uint32_t& cons);

  // responder.cc
  void responder_rx(Qp& qp, const wire::Packet& pkt, const uint8_t* frame);
  // `paced`: READ responses wait for the QP's rate (false: a later request needs them out first)
  bool responder_tx(Qp& qp, uint32_t budget, bool paced = true);

  // congestion.cc. Notification point: a congested (CE-marked) packet reached `qp`; answers with a CNP when
  // the QP's limit allows. Reaction point: a CNP for `qp`; rp_update applies the timers that ran out by
  // `now`; rp_sent paces the QP after it sent `bytes`.
  void np_ce_received(Qp& qp);
  static bool ce_marked(const wire::Packet& p) {
    return ((p.ip_version == 4 ? p.ip4.tos : p.ip6.traffic_class) & 3) == 3;
  }
  // CE on the wire, or the frame waited deep in the receive ring (rx_backlogged, set by rx_drain).
  bool congested(const wire::Packet& p) {
    if (ce_marked(p)) {
      count(Counter::np_ecn_marked_roce_packets);
      return true;
    }
    if (!rx_backlogged) return false;
    count(Counter::np_rx_backlog_marked);
    return true;
  }
  bool rx_backlogged = false;
  uint32_t rx_mark_frames = 0;  // the ring depth from which frames count as marked (0: never)
  void rp_cnp_received(Qp& qp);
  // A retransmit timeout on a path that loses frames: the QP's rate is cut as by a CNP with α = 1.
  void rp_timeout(Qp& qp);
  void rp_update(Qp& qp);
  Qp::Rate* path_rate(Qp& qp) { return qp.path >= 0 ? &paths[static_cast<size_t>(qp.path)].rate : nullptr; }
  const Qp::Rate* path_rate(const Qp& qp) const {
    return qp.path >= 0 ? &paths[static_cast<size_t>(qp.path)].rate : nullptr;
  }
  // The time before which qp may not send (its own or its path's pacing); 0 when it may now.
  uint64_t paced_until(const Qp& qp) const {
    uint64_t t = qp.rate.limited && qp.rate.next_send_ns > now ? qp.rate.next_send_ns : 0;
    if (const Qp::Rate* p = path_rate(qp); p && p->limited && p->next_send_ns > now)
      t = std::max(t, p->next_send_ns);
    return t;
  }
  // Whether qp is paced, asked again with the clock read now if the round's `now` says so. A round over many
  // QPs lasts long and its `now` falls behind: one QP's frame moved the shared path's next_send_ns a
  // microsecond past that `now`, and every later QP of the round then looked paced. With 1,000 QPs on a
  // path limited far above what the veth carried, each round sent a frame or two, a QP's next frame waited
  // past the retransmit timeout, and the timeouts cut the rates further (QPs failed with RETRY_EXC_ERR).
  bool paced_now(const Qp& qp) {
    if (!paced_until(qp)) return false;
    now = clock.now_ns();
    return paced_until(qp) != 0;
  }
  void rate_sent(Qp::Rate& r, uint32_t bytes) {
    if (!r.limited) return;
    const uint64_t start = r.next_send_ns > now ? r.next_send_ns : now;
    r.next_send_ns = start + static_cast<uint64_t>(bytes * 8000.0 / std::max(r.rc, 1.0));  // Mb/s
  }
  void rp_sent(Qp& qp, uint32_t bytes) {
    rate_sent(qp.rate, bytes);
    if (Qp::Rate* p = path_rate(qp)) rate_sent(*p, bytes);
  }
  void qp_set_path(Qp& qp, const wire::Gid* dgid);  // nullptr: leaves its path

  // multicast.cc: the groups with a member, sorted by MGID; their Ethernet addresses asked of the port,
  // with the number of groups on each; a whole-frame buffer (made at the first attach) where a frame this
  // engine sends to one of its own groups is copied for its members.
  std::vector<McGroup> mc_groups;
  uint32_t mc_attached = 0;  // attachments in all
  std::vector<std::pair<wire::MacAddr, uint32_t>> mc_macs;
  std::vector<uint8_t> mc_loop_buf;
  int attach_mcast(uint32_t qpn, const wire::Gid& mgid);
  int detach_mcast(uint32_t qpn, const wire::Gid& mgid);
  McGroup* mc_find(const wire::Gid& mgid);
  // A frame to DestQP kMulticastQpn (rx_frame's pkt): to every attached QP of its group. `own`: a copy of
  // one this engine sent (mc_loopback), not to be taken for its echo from the host.
  void rx_mcast(wire::Packet& pkt, const PacketBuf& buf, bool own);
  // After finish_frame of a UD frame to kMulticastQpn: this engine's own members of the group get it too.
  void mc_loopback();

  // rx.cc: frames in
  void rx_frame(PacketBuf& buf);
  // Takes up to `limit` frames from the port (whole bursts, until one comes back short); returns how many.
  uint32_t rx_drain(uint32_t limit);

  // tx.cc: frames out
  // Allocates a frame for `spec` with `payload_len` bytes, writes the headers; returns the payload
  // pointer (or nullptr when the port has no buffer). Then finish_frame() seals and queues it.
  // `prefix`: spec's headers up to UDP, made already (a QP's frames toward its peer).
  uint8_t* begin_frame(const wire::FrameSpec& spec, uint32_t payload_len,
                       const wire::HeaderPrefix* prefix = nullptr);
  void finish_frame(bool ack_only = false);
  uint32_t wire_bytes() const;  // of the frame being built, as on a wire (a batch frame: its packets')
  void abort_frame();
  // The IP traffic class of an AV as sent: ECT(0) added (keeping the DSCP) unless ECN is off or the AV
  // sets ECN bits itself. Applied where a frame template is made, not per frame.
  uint8_t wire_traffic_class(uint8_t tc) const {
    return config.ecn && (tc & 3) == 0 ? static_cast<uint8_t>(tc | 2) : tc;
  }
  // How many packets from `psn` (`rest` bytes of the WQE left) the requester sends as one batch frame; < 2:
  // one packet alone (requester.cc).
  uint32_t batch_run(const Qp& q, uint32_t psn, uint64_t rest, uint32_t every, uint32_t budget) const;
  // Port::tx_batch_bytes_to for a message of `npkts` packets to q's peer, asked once as it starts: 0 (no
  // batch frames) for one with fewer than two middles, or a port that takes none.
  uint32_t batch_bytes_for(const Qp& q, uint32_t npkts);
  // Packets of a batch from a message's middle, `rest` bytes of it left: full ones only, never its last.
  static uint32_t batch_packets(uint32_t batch_bytes, uint32_t mtu, uint64_t rest);
  // Whether the current frame's payload of `len` bytes is better left where it is (a port that gathers,
  // Port::tx_gather, and no checksum to compute over it); then gather_payload(src, len) says where.
  bool gathers(uint32_t len) const {
    return port_gather && len >= Port::kGatherMin && !cur_layout.udp_checksum;
  }
  void gather_payload(const uint8_t* src, uint32_t len) {
    cur_buf.gather = src;  // valid while the round runs: tx_send makes what stays queued whole
    cur_buf.gather_offset = static_cast<uint16_t>(cur_layout.payload_offset);
    cur_buf.gather_len = static_cast<uint16_t>(len);
  }
  void tx_flush();                          // tx, then the held ACKs
  void tx_send(std::vector<PacketBuf>& q);  // what the port takes of q, in order

  // progress.cc
  bool progress_round(Engine::Round round = Engine::Round::other);  // one progress() round; engine lock held
  PacketBuf cur_buf{};
  wire::FrameLayout cur_layout{};
};

inline uint8_t* EngineImpl::rkey_resolve(uint32_t key, const Qp& q, uint32_t pd, uint32_t access, uint64_t va,
                                         uint64_t len, MrError& err) {
  uint8_t* p = mr_resolve(key, pd, access, va, len, err);
  if (!p && err == MrError::window) [[unlikely]]
    p = mw_resolve(mrs[key >> 8], q, pd, access, va, len, err);
  return p;
}

// READ responses or atomic ACKs the responder still owes.
inline bool res_pending(const Qp& q) {
  for (const RespRes& r : q.resp.res)
    if (r.pending) return true;
  return false;
}

// The packet of a message that byte `offset` falls in, at path MTU `mtu`: a power of two (mtu_to_bytes), so
// a shift instead of two 64-bit divisions per packet (engine_bench BM_Send64).
inline uint32_t packet_at(uint64_t offset, uint32_t mtu) {
  return static_cast<uint32_t>(offset >> std::countr_zero(mtu));
}

// Packets a message of `len` bytes takes at path MTU `mtu` (a zero-length message is one packet): the
// requester's segmentation and the responder's READ responses.
inline uint32_t packets_for(uint64_t len, uint32_t mtu) {
  return len == 0 ? 1 : packet_at(len + mtu - 1, mtu);
}

// The local ACK timeout of QP attribute `timeout` (IBTA 9.7.6.1.3: 4.096 µs × 2^timeout; 0 = infinite,
// returned as 0).
inline uint64_t retransmit_timeout_ns(uint8_t timeout) {
  return timeout ? (uint64_t{4096} << timeout) : 0;
}

inline uint8_t transport_base(QpType t) {
  return t == QPT_RC   ? wire::op::kRc
         : t == QPT_UC ? wire::op::kUc
         : t == QPT_UD ? wire::op::kUd
                       : wire::op::kXrc;
}
// RoCEv2 UDP source port as rxe chooses it (entropy for ECMP): RC/UC from the QPN pair's flow label, UD
// from a hash of the QPN (tx.cc).
uint16_t udp_sport_connected(uint32_t flow_label, uint32_t lqpn, uint32_t rqpn);
uint16_t udp_sport_ud(uint32_t qpn);

// Copies between a message offset and a scatter/gather list, resolving each SGE's lkey (per packet, so a
// deregistered MR cannot be touched; pd_mr.cc). Returns false on a key/bounds/access failure.
bool sge_copy(EngineImpl& e, uint32_t pd, const Sge* sges, uint32_t num_sge, uint64_t offset, uint8_t* data,
              uint32_t len, bool to_sges);
// For a port that gathers (Port::tx_gather): the source bytes [offset, offset + len) of a gather list
// when they lie in one SGE whose lkey resolves, else nullptr (then sge_copy copies them, or reports the
// error).
const uint8_t* sge_span(EngineImpl& e, uint32_t pd, const Sge* sges, uint32_t num_sge, uint64_t offset,
                        uint32_t len);

}  // namespace urxe::engine
