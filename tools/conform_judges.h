// `urxe conform`: the judges, one function per catalogue row (conform_catalog.cc names them). Each reads a
// run's Trace and says what the peer did; none looks at urxe's own behaviour except to find the stimulus.
#pragma once
#include <variant>

#include "tools/conform.h"

namespace urxe::tools::conform {

// Sequence errors, ACKs (conform_judges_seq.cc).
Finding judge_seq_nak(const Trace& t, const Setup& s);
Finding judge_one_nak_per_gap(const Trace& t, const Setup& s);
Finding judge_ackreq_covered(const Trace& t, const Setup& s);
Finding judge_msn(const Trace& t, const Setup& s);
Finding judge_no_rnr(const Trace& t, const Setup& s);
Finding judge_no_seq_nak(const Trace& t, const Setup& s);
Finding judge_silent_drop(const Trace& t, const Setup& s);  // F3/F5: dropped without a NAK, then resent
Finding judge_ce_no_loss(const Trace& t, const Setup& s);
Finding judge_cnp_for_ce(const Trace& t, const Setup& s);
Finding judge_cnp_reaction(const Trace& t, const Setup& s);  // H3: rate down under CNPs, back after

// Duplicates (conform_judges_dup.cc).
Finding judge_dup_request_acked(const Trace& t, const Setup& s);
Finding judge_dup_atomic_replayed(const Trace& t, const Setup& s);

// Error NAKs (conform_judges_err.cc).
Finding judge_access_nak(const Trace& t, const Setup& s);
Finding judge_silence_after_error_nak(const Trace& t, const Setup& s);
Finding judge_range_nak(const Trace& t, const Setup& s);
Finding judge_invalid_request_nak(const Trace& t, const Setup& s);

// The peer as requester: NAKs, go-back-N, local ACK timeout, retry count (conform_judges_gbn.cc).
Finding judge_nak_acks_below(const Trace& t, const Setup& s);
Finding judge_go_back_n(const Trace& t, const Setup& s);
Finding judge_ack_timeout(const Trace& t, const Setup& s);
Finding judge_retry_count(const Trace& t, const Setup& s);
Finding judge_retry_reset(const Trace& t, const Setup& s);
std::string ms_text(int64_t ns);                    // "67.11 ms"
bool same_payload(const Frame& a, const Frame& b);  // the same payload bytes

// RDMA READ and RNR (conform_judges_read.cc).
Finding judge_read_resume(const Trace& t, const Setup& s);
Finding judge_read_implied_nak(const Trace& t, const Setup& s);
Finding judge_rnr_retry_zero(const Trace& t, const Setup& s);  // D4
Finding judge_read_restart_first(const Trace& t, const Setup& s);
Finding judge_dup_read_middle(const Trace& t, const Setup& s);
Finding judge_dup_read_whole(const Trace& t, const Setup& s);
Finding judge_read_layout(const Trace& t, const Setup& s);
Finding judge_atomic_ack_layout(const Trace& t, const Setup& s);
Finding judge_rnr_nak(const Trace& t, const Setup& s);
Finding judge_rnr_wait(const Trace& t, const Setup& s);

// Communication management (conform_judges_cm.cc).
Finding judge_rej_no_listener(const Trace& t, const Setup& s);

// The peer after urxe's MRA, a stale connection (conform_judges_cm_conn.cc).
Finding judge_mra_honoured(const Trace& t, const Setup& s);
Finding judge_stale_connection(const Trace& t, const Setup& s);

// CM retransmissions and duplicates (conform_judges_cm_retry.cc).
Finding judge_req_resent(const Trace& t, const Setup& s);
Finding judge_dup_rep(const Trace& t, const Setup& s);
Finding judge_dup_req(const Trace& t, const Setup& s);
Finding judge_dup_dreq(const Trace& t, const Setup& s);
Finding judge_rep_resent(const Trace& t, const Setup& s);
Finding judge_dreq_resend_answered(const Trace& t, const Setup& s);
Finding judge_rej_destroyed_rep_sent(const Trace& t, const Setup& s);
Finding judge_rej_destroyed_req_sent(const Trace& t, const Setup& s);
// Rights and length NAKs, silent drops, framing, READ CNPs (conform_judges_nak.cc, conform_judges_drop.cc,
// conform_judges_frame.cc).
Finding judge_rights_nak(const Trace& t, const Setup& s);    // E3: 0x62 for urxe's first message
Finding judge_overflow_nak(const Trace& t, const Setup& s);  // E6: 0x61 within urxe's first message
Finding judge_qkey_dropped(const Trace& t, const Setup& s);
Finding judge_tver_dropped(const Trace& t, const Setup& s);
Finding judge_uc_gap(const Trace& t, const Setup& s);
Finding judge_udp_ports(const Trace& t, const Setup& s);
Finding judge_pad(const Trace& t, const Setup& s);
Finding judge_payload_lengths(const Trace& t, const Setup& s);
Finding judge_credit_codes(const Trace& t, const Setup& s);
Finding judge_cnp_for_read_ce(const Trace& t, const Setup& s);

// Shared pieces.
// The first frame the run's rule k hit (k 0-based), or null.
const Frame* first_hit(const Trace& t, size_t k = 0);
// The first request urxe sent to the peer that rule 0 hit (changed or duplicated), or null.
const Frame* first_request_hit(const Trace& t);
// F3/F5: the peer did not answer the request `m` a rule changed (`change` says how), and acknowledged
// urxe's unchanged resend of it.
Finding silent_drop_of(const Trace& t, const Frame* m, const std::string& change);
// A CM MAD that decoded, of attribute `a` (conform_judges_cm.cc); its message as M.
bool is_cm(const Frame& f, wire::CmAttr a);
template <class M>
const M& cm_msg(const Frame& f) {
  return std::get<M>(f.d.cm.msg);
}
// A finding saying the stimulus did not happen.
Finding no_stimulus(const Trace& t, std::string_view what);
// Whether the peer put any RoCE frame on the wire (a silent or absent peer gives inconclusive verdicts).
bool peer_spoke(const Trace& t);
// "frame #N" evidence helpers.
Finding pass(std::string observed, std::vector<const Frame*> ev);
Finding fail(std::string observed, std::vector<const Frame*> ev);
std::string describe(const Frame& f);  // "#12 ACK PSN 0x1f MSN 3 syndrome 0x60 (NAK PSN sequence error)"

}  // namespace urxe::tools::conform
