// Fault injection rules on RoCEv2 frames: the rule language (`urxe fault add DEV RULE`), the per-frame
// matcher, and the frame mutations. Pure like the rest of wire/: no I/O, no allocation on the per-frame path
// (match, apply), defined behaviour on any input. Whoever carries frames (a port, the same-host path, the
// simulator) asks a FaultTable about each frame and performs the scheduling actions itself.
//
// Grammar: one rule is a line of words separated by blanks, in any order; each word at most once.
//
//   rule      := { field | selector } action
//   field     := "dir" ("tx" | "rx")
//              | "qpn" NUM                      BTH DestQP (24 bits)
//              | "opcode" OPCODE                see below
//              | "class" CLASS                  see below
//              | "psn" ["+"] NUM ["-" NUM]      absolute PSN or range; "+": relative (below)
//   selector  := "skip" NUM | "every" NUM | "first" NUM | "prob" P ["seed" NUM] | "after" TIME | "for" TIME
//   action    := "drop" | "duplicate" [NUM] | "delay" TIME | "reorder" NUM
//              | "corrupt" ("icrc" | FIELD ["=" NUM]) | "ecn-ce" | "truncate" NUM
//   NUM       := decimal digits | "0x" hex digits         (no sign)
//   TIME      := NUM ("ns" | "us" | "ms" | "s")           e.g. 250us, 2ms
//   P         := a decimal from 0 to 1 with at most 9 decimals (0.05, .5, 1)
//
// Fields (all optional, ANDed; a frame that parse_frame did not read up to its opcode never matches):
//   dir       tx: frames the device sends; rx: frames it receives.
//   opcode    a name as in the opcode table (wire/opcode.h), lower case, '-' or '_': send_only,
//             rdma_write_first, rdma_read_request, rdma_read_response_middle, acknowledge,
//             atomic_acknowledge, compare_swap, fetch_add, atomic_write, send_only_with_immediate, cnp, ...
//             The op:: spellings are accepted too ("write_first", "read_request", "send_only_imm",
//             "send_last_inv"). With a transport prefix (rc_, uc_, ud_, xrc_) it names one opcode; without,
//             the operation on any transport that has it. Or a number 0..255 (one opcode). Formatted: the
//             table name with the prefix for one opcode (rc_send_only), bare for any transport, 0xNN for
//             opcodes not in the table.
//   class     request    every requester-to-responder opcode (SEND, WRITE, READ request, atomics, UD SENDs)
//             ack        ACKNOWLEDGE with an ACK syndrome (AETH bits 6:5 = 00)
//             nak        ACKNOWLEDGE with a NAK syndrome (11: PSN sequence error, invalid request, ...)
//             rnr-nak    ACKNOWLEDGE with an RNR NAK syndrome (01)
//             read-response  RDMA READ RESPONSE FIRST/MIDDLE/LAST/ONLY
//             atomic     COMPARE_SWAP, FETCH_ADD, ATOMIC_WRITE requests
//             atomic-ack ATOMIC ACKNOWLEDGE
//             cnp        the CNP (0x81)
//             cm[:TYPE]  a CM MAD on QP1 (wire/mad.h qp1_mad, management class 0x07); TYPE one of req mra
//                        rej rep rtu dreq drep lap apr sidr-req sidr-rep (the MAD's attribute ID)
//   psn       N or A-B (inclusive, modulo 2^24: 0xfffffe-1 spans the wrap) on the BTH PSN. With "+", offsets
//             from the first PSN the rule saw for the frame's (direction, DestQP): "saw" = the first frame
//             passing the rule's dir and qpn fields, whatever its opcode. A rule remembers kFaultPsnFlows
//             such flows; frames of further flows never match its relative PSN. Retransmissions of a
//             matching PSN match again (add "first N" to stop).
//
// Selectors pick which matching frames are hits, in this order: "skip N" ignores the first N matches;
// "every N" then takes the N-th, 2N-th, ... of the rest; "prob P" keeps each remaining one with
// probability P, drawn from a generator seeded with "seed" (default 1: the same seed and the same frames give
// the same hits); "first N" stops after N hits. So "skip 2 first 1" hits the third match only, "every 2
// first 3" the 2nd, 4th and 6th. Before all of these, a time window: "after T" leaves out the matches of the
// first T from the rule's first match (its clock starts with the traffic, not when it was added), "for D"
// those from D after that on; the others count from the window's first match. Time is the carrier's clock
// (the simulator's in tests), so a window is as deterministic as the clock. "after 300ms for 200ms every 4"
// marks a quarter of the matches between 300 and 500 ms into the flow.
//
// Actions (exactly one):
//   drop, duplicate N (1..16 extra copies, default 1), delay TIME (up to 60 s), reorder N (1..64: held
//   until N later frames passed in its direction): reported by match(); the carrier performs them.
//   corrupt icrc    the ICRC is made wrong (the complement of the right one).
//   corrupt FIELD   FIELD takes VALUE, or without "=VALUE" its lowest bit flips; then the ICRC is recomputed,
//                   so the peer gets a valid frame with a wrong field. A rule with such an action matches
//                   only frames that carry FIELD's header (payload: at least one payload byte, the first of
//                   which is the field). Fields: see kFaultFields.
//   ecn-ce          IP ECN = CE (11); the IPv4 header checksum is recomputed; the ICRC masks ECN.
//   truncate N      N bytes (at most all of them) are cut from what follows the BTH, just before the ICRC;
//                   IP and UDP lengths, the IPv4 checksum and the ICRC are fixed. Matches only frames with
//                   something after the BTH.
//   corrupt and truncate zero a non-zero UDP checksum (allowed for RoCEv2; what it covered changed); ECN is
//   outside it.
//
// Canonical text (format_fault_rule): fields, selectors, action, each in the order above; parse of it gives
// the same FaultRule.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "wire/packet.h"

namespace urxe::wire {

enum class FaultDir : uint8_t { tx = 0, rx = 1 };

enum class FaultClass : uint8_t {
  any = 0,
  request,
  ack,
  nak,
  rnr_nak,
  read_response,
  atomic,
  atomic_ack,
  cnp,
  cm
};

enum class FaultAction : uint8_t { none = 0, drop, duplicate, delay, reorder, corrupt, ecn_ce, truncate };

// What `corrupt` writes: a header field, the first payload byte, or the ICRC.
enum class FaultField : uint8_t {
  icrc = 0,
  bth_opcode,
  bth_se,
  bth_migreq,
  bth_pad,
  bth_tver,
  bth_pkey,
  bth_destqp,
  bth_ackreq,
  bth_psn,
  reth_va,
  reth_rkey,
  reth_len,
  aeth_syndrome,
  aeth_msn,
  atomiceth_va,
  atomiceth_rkey,
  atomiceth_swap,
  atomiceth_compare,
  atomicacketh_orig,
  deth_qkey,
  deth_srcqp,
  xrceth_srqn,
  immdt,
  ieth_rkey,
  payload,
  count
};

// A field's place: `width` bits, `shift` bits above the least significant bit of the big-endian number in
// `bytes` bytes at `off` in its header (`header`: an ExtHeader bit, 0 for the BTH, kFaultPayload for the
// payload).
inline constexpr uint16_t kFaultPayload = 0x8000;
struct FaultFieldInfo {
  std::string_view name;
  uint16_t header;
  uint8_t off, bytes, shift, width;
};
// Indexed by FaultField (icrc's row has width 0).
extern const std::array<FaultFieldInfo, static_cast<size_t>(FaultField::count)> kFaultFields;

enum class FaultOpcode : uint8_t {
  none = 0,
  exact,
  any_transport
};  // any_transport: `opcode` is the low 5 bits
enum class FaultPsn : uint8_t { none = 0, absolute, relative };

inline constexpr uint32_t kFaultProbOne = 1000000000;  // prob in parts per 10^9
inline constexpr uint32_t kFaultMaxDuplicate = 16, kFaultMaxReorder = 64;
inline constexpr uint64_t kFaultMaxDelayNs = 60'000'000'000ull;
inline constexpr uint64_t kFaultMaxWindowNs = 3'600'000'000'000ull;  // after, for: up to an hour
inline constexpr size_t kFaultPsnFlows = 64;  // (direction, DestQP) pairs a relative-PSN rule remembers

// A parsed rule: what the text says, nothing of its state (FaultMatcher holds that).
struct FaultRule {
  bool has_dir = false;
  FaultDir dir = FaultDir::tx;
  bool has_qpn = false;
  uint32_t qpn = 0;
  FaultOpcode opcode_match = FaultOpcode::none;
  uint8_t opcode = 0;
  FaultClass cls = FaultClass::any;
  uint16_t cm_attr = 0;  // with FaultClass::cm: the attribute ID, 0 for any CM MAD
  FaultPsn psn_match = FaultPsn::none;
  uint32_t psn_lo = 0, psn_hi = 0;          // inclusive; equal for one PSN
  uint32_t skip = 0, every = 0, first = 0;  // 0: not given
  bool has_prob = false;
  uint32_t prob = kFaultProbOne;  // parts per 10^9
  uint64_t seed = 1;
  uint64_t after_ns = 0, for_ns = 0;  // the time window; 0: not given
  FaultAction action = FaultAction::none;
  uint32_t count = 0;     // duplicate, reorder, truncate
  uint64_t delay_ns = 0;  // delay
  FaultField field = FaultField::icrc;
  bool has_value = false;
  uint64_t value = 0;  // corrupt FIELD=VALUE
  bool operator==(const FaultRule&) const = default;
};

struct FaultParse {
  std::optional<FaultRule> rule;
  std::string error;  // when !rule: names the bad word and why
  explicit operator bool() const { return rule.has_value(); }
};
// The whole line or nothing.
FaultParse parse_fault_rule(std::string_view text);
std::string format_fault_rule(const FaultRule& rule);

// The action's word in the language ("drop", "ecn-ce", ...; "" for none).
std::string_view fault_action_name(FaultAction a);

// Whether the rule's action rewrites the frame (corrupt, ecn-ce, truncate): then apply_fault_mutation.
constexpr bool fault_mutates(FaultAction a) {
  return a == FaultAction::corrupt || a == FaultAction::ecn_ce || a == FaultAction::truncate;
}

// One rule and its state: counters, the relative-PSN flows, the generator. Not thread-safe.
class FaultMatcher {
 public:
  FaultMatcher() = default;
  explicit FaultMatcher(const FaultRule& rule);
  const FaultRule& rule() const { return rule_; }
  // `p` as parse_frame filled it for `frame` (ok; ICRC and checksums verified or not), at `now_ns` on the
  // carrier's clock (read only by a rule with a time window: see timed()). Counts a match when the fields
  // agree and a hit when the selectors pick it; returns whether it is a hit.
  bool match(FaultDir dir, const Packet& p, uint64_t now_ns);
  bool timed() const { return rule_.after_ns != 0 || rule_.for_ns != 0; }
  uint64_t matched() const { return matched_; }
  uint64_t hits() const { return hits_; }
  void reset();  // as just made from the rule

 private:
  bool fields_match(FaultDir dir, const Packet& p);
  bool relative_psn_base(FaultDir dir, const Packet& p, uint32_t& base);
  struct Flow {
    uint32_t key = 0;  // (DestQP << 1 | dir) + 1; 0 empty
    uint32_t first_psn = 0;
  };
  FaultRule rule_;
  uint64_t matched_ = 0, hits_ = 0, rng_ = 0;
  uint64_t windowed_ = 0;  // matches inside the time window (all of them without one)
  uint64_t start_ns_ = 0;  // the first match's time
  bool started_ = false;
  std::array<Flow, kFaultPsnFlows> flows_{};
};

// Applies a mutating rule's action to the frame in frame[0, len) (Ethernet through ICRC; Ethernet padding
// after the ICRC is dropped); `frame` is the buffer. Returns false, changing nothing, when the action does
// not mutate or the frame is not a RoCEv2 frame parse_frame reads to its payload, or lacks the field. `len`
// shrinks on truncate.
bool apply_fault_mutation(const FaultRule& rule, MutByteSpan frame, size_t& len);

inline constexpr size_t kFaultTableSize = 32;

// A device's rules, in the order added, each with an id (1, 2, ...; never reused by one table). Every rule
// sees every frame, so each one's counters, relative PSNs and draws are those of the whole traffic; the
// first rule that hits decides the action, the others' hits are counted (and spend their "first N") too.
class FaultTable {
 public:
  struct Entry {
    uint32_t id = 0;
    FaultMatcher matcher;
    uint64_t applied = 0;  // frames whose action this rule decided
  };
  // The new rule's id, 0 when the table is full.
  uint32_t add(const FaultRule& rule);
  bool del(uint32_t id);
  void clear();
  bool empty() const { return count_ == 0; }
  size_t size() const { return count_; }
  std::span<const Entry> entries() const { return {entries_.data(), count_}; }
  // The entry whose action applies to this frame, or nullptr. `now_ns`: as for FaultMatcher::match; a
  // carrier may pass 0 when !timed().
  const Entry* match(FaultDir dir, const Packet& p, uint64_t now_ns);
  bool timed() const { return timed_ != 0; }  // some rule has a time window

 private:
  std::array<Entry, kFaultTableSize> entries_{};
  size_t count_ = 0;
  size_t timed_ = 0;
  uint32_t next_id_ = 1;
};

}  // namespace urxe::wire
