// `urxe conform` judges: RDMA READ (the peer resuming a READ whose responses urxe lost, the peer answering
// READs urxe resumes or repeats, the response and ATOMIC ACKNOWLEDGE layouts) and RNR NAKs both ways.
#include <algorithm>

#include "tools/conform_judges.h"
#include "wire/headers.h"
#include "wire/opcode.h"

namespace urxe::tools::conform {
namespace {

// perftest's QP attributes: local ACK timeout DEF_QP_TIME 14 (67.1 ms), min_rnr_timer MIN_RNR_TIMER 12.
constexpr uint8_t kPerftestTimeout = 14;
constexpr uint8_t kPerftestMinRnrTimer = 12;

bool is_read_request(const Frame& f) {
  return f.is_request() && f.d.pkt.info->kind == wire::OpKind::rdma_read_request;
}
const wire::OpcodeInfo& info(const Frame& f) {
  return *f.d.pkt.info;
}
bool valid_mtu(uint32_t m) {
  return m == 256 || m == 512 || m == 1024 || m == 2048 || m == 4096;
}
uint32_t npkts(uint32_t len, uint32_t pmtu) {
  return len ? (len + pmtu - 1) / pmtu : 1;
}

// The READ request (sent in the direction `to_peer`) before `before` whose PSNs cover `psn`: the newest.
const Frame* read_covering(const Trace& t, const Frame* before, bool to_peer, uint32_t psn, uint32_t pmtu) {
  const Frame* r = nullptr;
  for (const Frame& f : t.frames) {
    if (&f >= before) break;
    if ((to_peer ? f.to_peer() : f.from_peer()) && is_read_request(f)) {
      const int32_t k = psn_diff(f.psn(), psn);
      if (k >= 0 && static_cast<uint32_t>(k) < npkts(f.d.pkt.reth.dma_len, pmtu)) r = &f;
    }
  }
  return r;
}

// A READ RESPONSE that the run's rule 0 kept from its receiver (outgoing: not sent; incoming: not
// delivered), with the READ it answers.
struct LostResponse {
  const Frame* lost = nullptr;
  const Frame* read = nullptr;
  uint32_t pmtu = 0;
};
LostResponse lost_response(const Trace& t, bool outgoing, size_t rule) {
  LostResponse r;
  for (const Frame* f : t.hits(rule))
    if ((outgoing ? f->not_sent : f->not_delivered) && f->is_read_response()) {
      r.lost = f;
      break;
    }
  if (!r.lost) return r;
  r.pmtu = r.lost->d.pkt.payload_len;  // a FIRST or MIDDLE: exactly the path MTU
  r.read = read_covering(t, r.lost, !outgoing, r.lost->psn(), r.pmtu);
  return r;
}

// The peer's answer at PSN x to urxe's repeated READ `again`, given `orig`, the first answer at x: the next
// copy at x after both. The peer answers requests in order, so copies at a PSN pair with the requests
// covering it; the first answer may come after the repeat (a response reordered behind a later one, or an
// answer urxe had already given up on when the rule dropped it), so "the first copy after the repeat" can be
// the original.
const Frame* answer_again(const Trace& t, const Frame* orig, const Frame* again, uint32_t x) {
  return t.next(std::max(orig, again),
                [&](const Frame& f) { return f.from_peer() && f.is_read_response() && f.psn() == x; });
}

// B2: urxe lost the peer's response `l.lost` and asked again from its PSN (`again`, a duplicate READ to the
// peer): the peer must answer from there to the READ's end once more, each response with the data of the
// first one; for a whole READ asked again, starting with FIRST (or ONLY). (What opens the answer to a READ
// resumed in its middle is C3's question.)
Finding repeated_responses(const Trace& t, const LostResponse& l, const Frame* again, bool whole) {
  const uint32_t p = l.lost->psn();
  const uint32_t last = (l.read->psn() + npkts(l.read->d.pkt.reth.dma_len, l.pmtu) - 1) & 0xffffff;
  size_t n = 0;
  const Frame* first_again = nullptr;
  for (uint32_t x = p;; x = (x + 1) & 0xffffff) {
    const auto resp = [&](const Frame& f) { return f.from_peer() && f.is_read_response() && f.psn() == x; };
    const Frame* orig = x == p ? l.lost : t.next(l.read, resp);
    if (!orig) return no_stimulus(t, "no first response at " + hex(x) + " to compare with");
    const Frame* rep = answer_again(t, orig, again, x);
    if (!rep)
      return fail(
          "the peer did not answer the repeated READ from " + hex(p) + " to its end: nothing at " + hex(x),
          {l.lost, again});
    if (!first_again) {
      first_again = rep;
      if (whole && !info(*rep).is_first())
        return fail("the answer to the repeated READ starts with " + describe(*rep), {l.lost, again, rep});
    }
    if (!same_payload(*orig, *rep))
      return fail("the repeated response at " + hex(x) + " carries other data than the first one (" +
                      describe(*orig) + " and " + describe(*rep) + ")",
                  {orig, again, rep});
    ++n;
    if (x == last) break;
  }
  return pass("the peer answered the READ urxe asked again for at " + hex(p) + " (" +
                  std::to_string(again->d.pkt.reth.dma_len) + " bytes) with " + std::to_string(n) +
                  " responses from " + describe(*first_again) + ", each with the data of the first answer",
              {l.lost, again, first_again});
}
}  // namespace

// The READ run's rules: 0 drops a response of urxe's (C1, C2), 1 a MIDDLE response of the peer's (C3, B2
// from the middle), 2 a FIRST response of the peer's (B2 whole).
Finding judge_read_resume(const Trace& t, const Setup&) {
  const LostResponse l = lost_response(t, true, 0);
  if (!l.lost || !l.read) return no_stimulus(t, "the rule never dropped a READ response of urxe's");
  const uint32_t p = l.lost->psn(), q = l.read->psn();
  const uint64_t skip = uint64_t{static_cast<uint32_t>(psn_diff(q, p))} * l.pmtu;
  const Frame* again = t.next(l.lost, [&](const Frame& f) {
    return f.from_peer() && is_read_request(f) && psn_diff(q, f.psn()) >= 0 && psn_diff(f.psn(), p) >= 0;
  });
  if (!again)
    return fail(
        "the peer never asked again for the READ at " + hex(q) + " whose response " + hex(p) + " was lost",
        {l.read, l.lost});
  const wire::Reth& o = l.read->d.pkt.reth;
  const wire::Reth& n = again->d.pkt.reth;
  const uint64_t want_va = o.va + skip;
  const uint64_t want_len = o.dma_len - skip;
  if (again->psn() != p || n.va != want_va || n.dma_len != want_len || n.rkey != o.rkey)
    return fail("the peer asked again at PSN " + hex(again->psn()) + " for " + std::to_string(n.dma_len) +
                    " bytes at " + hex(n.va) + " (rkey " + hex(n.rkey) + "); the first missing response is " +
                    hex(p) + ": " + std::to_string(want_len) + " bytes at " + hex(want_va),
                {l.read, l.lost, again});
  return pass("READ response " + hex(p) + " (offset " + std::to_string(skip) + " of the READ at " + hex(q) +
                  ") lost; the peer asked again at " + hex(p) + " for the remaining " +
                  std::to_string(want_len) + " bytes at VA + " + std::to_string(skip),
              {l.read, l.lost, again});
}

Finding judge_read_implied_nak(const Trace& t, const Setup&) {
  const LostResponse l = lost_response(t, true, 0);
  if (!l.lost || !l.read) return no_stimulus(t, "the rule never dropped a READ response of urxe's");
  const uint32_t p = l.lost->psn();
  const uint32_t last = (l.read->psn() + npkts(l.read->d.pkt.reth.dma_len, l.pmtu) - 1) & 0xffffff;
  // A response of the same READ: one of a READ behind it shows a gap to a requester that checks only
  // whether a response belongs to the READ it waits for.
  const Frame* beyond = t.next(l.lost, [&](const Frame& f) {
    return f.to_peer() && f.is_read_response() && f.dqpn() == l.lost->dqpn() && psn_diff(p, f.psn()) > 0 &&
           psn_diff(f.psn(), last) >= 0;
  });
  if (!beyond) return no_stimulus(t, "urxe sent no response of the same READ after the lost one");
  const Frame* again = t.next(l.lost, [&](const Frame& f) {
    return f.from_peer() && is_read_request(f) && psn_diff(l.read->psn(), f.psn()) >= 0 &&
           psn_diff(f.psn(), p) >= 0;
  });
  const int64_t T = int64_t{4096} << kPerftestTimeout;
  if (!again)
    return fail("the peer never asked again for the lost READ response " + hex(p), {l.lost, beyond});
  const int64_t d = again->t_ns - beyond->t_ns;
  // Under half the timeout: a requester that waits for its timer asks no sooner than the whole of it after
  // the last response it got (a busy host delays an implied NAK by milliseconds, not by a timeout).
  if (d * 2 >= T)
    return fail(
        "the peer asked again " + ms_text(d) +
            " after urxe sent the first response beyond the gap: no implied NAK, it waited for a timer " +
            "(local ACK timeout " + ms_text(T) + ")",
        {l.lost, beyond, again});
  return pass("the peer asked again for " + hex(p) + " " + ms_text(d) +
                  " after urxe sent the first response beyond the gap (" + describe(*beyond) +
                  "), under half its local ACK timeout " + ms_text(T),
              {l.lost, beyond, again});
}

// C3/B2: rule 1 dropped a MIDDLE response of the peer's (`l`); urxe's READ resumed at its PSN, or null with
// `why` set to the inconclusive finding.
const Frame* resumed_read(const Trace& t, LostResponse& l, Finding& why) {
  l = lost_response(t, false, 1);
  if (!l.lost || !l.read) {
    why = no_stimulus(t, "the rule never dropped a READ response of the peer's");
    return nullptr;
  }
  // From the READ on, not from the lost response: urxe may have asked already when the rule dropped it.
  const uint32_t p = l.lost->psn();
  const Frame* again =
      t.next(l.read, [&](const Frame& f) { return f.to_peer() && is_read_request(f) && f.psn() == p; });
  if (!again) why = no_stimulus(t, "urxe did not resume the READ at " + hex(p));
  return again;
}

Finding judge_read_restart_first(const Trace& t, const Setup&) {
  LostResponse l;
  Finding why;
  const Frame* again = resumed_read(t, l, why);
  if (!again) return why;
  const uint32_t p = l.lost->psn();
  const Frame* ans = answer_again(t, l.lost, again, p);
  if (!ans)
    return fail("no READ response at " + hex(p) + " after urxe resumed the READ there", {l.lost, again});
  const bool only = again->d.pkt.reth.dma_len <= l.pmtu;
  if (!info(*ans).is_first() || info(*ans).is_last() != only)
    return fail("the resumed READ's first response is " + describe(*ans) + ", not READ RESPONSE " +
                    (only ? "ONLY" : "FIRST"),
                {l.lost, again, ans});
  return pass("urxe resumed the READ at " + hex(p) + " (" + std::to_string(again->d.pkt.reth.dma_len) +
                  " bytes); the peer answered with " + describe(*ans),
              {l.lost, again, ans});
}

Finding judge_dup_read_middle(const Trace& t, const Setup&) {
  LostResponse l;
  Finding why;
  const Frame* again = resumed_read(t, l, why);
  return again ? repeated_responses(t, l, again, false) : why;
}

Finding judge_dup_read_whole(const Trace& t, const Setup&) {
  // Rule 2 drops the FIRST response of a READ: urxe asks for the whole READ again.
  // The READ is the first request at the lost FIRST's PSN and the repeat the next one, before or after the
  // drop: a FIRST that arrives while urxe already goes back to its READ (behind another loss, or behind a
  // later response of its own READ) is lost all the same, and urxe's go-back repeats that READ whole.
  LostResponse l = lost_response(t, false, 2);
  if (!l.lost || !l.read) return no_stimulus(t, "the rule never dropped a READ response FIRST of the peer's");
  const uint32_t q = l.lost->psn();
  const auto at_q = [&](const Frame& f) { return f.to_peer() && is_read_request(f) && f.psn() == q; };
  l.read = t.next(nullptr, at_q);
  const Frame* again = t.next(l.read, at_q);
  if (!again || again->d.pkt.reth.va != l.read->d.pkt.reth.va ||
      again->d.pkt.reth.dma_len != l.read->d.pkt.reth.dma_len)
    return no_stimulus(t, "urxe did not ask again for the whole READ at " + hex(q));
  return repeated_responses(t, l, again, true);
}

Finding judge_read_layout(const Trace& t, const Setup&) {
  // The decoder lays each packet out by its opcode; a missing or extra AETH shows as a payload 4 bytes off.
  uint32_t pmtu = 0;
  size_t n = 0;
  const Frame* shown[4] = {};  // the first FIRST, MIDDLE, LAST, ONLY
  for (const Frame& f : t.frames) {
    if (!f.from_peer() || !f.is_read_response()) continue;
    const wire::OpcodeInfo& i = info(f);
    const Frame*& slot = shown[static_cast<int>(i.position) - 1];
    if (!slot) slot = &f;
    const uint32_t len = f.d.pkt.payload_len;
    if (!i.is_last() && !pmtu) {
      pmtu = len;
      if (!valid_mtu(pmtu))
        return fail("a READ RESPONSE " + std::string(i.is_first() ? "FIRST" : "MIDDLE") + " carries " +
                        std::to_string(len) + " bytes, not a path MTU: " + describe(f),
                    {&f});
    }
    if (!i.is_last() && len != pmtu)
      return fail(describe(f) + " carries " + std::to_string(len) + " bytes, not the path MTU " +
                      std::to_string(pmtu),
                  {&f});
    if ((i.headers & wire::kAeth) && (f.syndrome() & 0xe0) != 0)
      return fail(describe(f) + ": its AETH is not an ACK", {&f});
    if (i.is_last() && pmtu) {
      const Frame* r = read_covering(t, &f, true, f.psn(), pmtu);
      if (r) {
        const uint64_t k = static_cast<uint32_t>(psn_diff(r->psn(), f.psn()));
        const uint64_t want = r->d.pkt.reth.dma_len - k * pmtu;
        if (len != want)
          return fail(describe(f) + " carries " + std::to_string(len) + " bytes; the READ at " +
                          hex(r->psn()) + " has " + std::to_string(want) + " left there",
                      {r, &f});
      }
    }
    ++n;
  }
  if (!n || !pmtu) return no_stimulus(t, "the peer sent no multi-packet READ response");
  return pass(
      std::to_string(n) + " READ responses: FIRST and MIDDLE carry exactly " + std::to_string(pmtu) +
          " bytes, LAST and ONLY the rest of their READ, and FIRST/LAST/ONLY an AETH with an ACK syndrome",
      {shown[0], shown[1], shown[2], shown[3]});
}

Finding judge_atomic_ack_layout(const Trace& t, const Setup&) {
  size_t n = 0;
  const Frame *first = nullptr, *last = nullptr;
  for (const Frame& f : t.frames) {
    if (!f.from_peer() || !f.is_atomic_ack()) continue;
    if (!first) first = &f;
    last = &f;
    // UDP header, BTH, AETH, AtomicAckETH, ICRC: 8 + 12 + 4 + 8 + 4 bytes, no payload
    if (f.d.pkt.udp.length != 36 || f.d.pkt.payload_len != 0)
      return fail(describe(f) + ": UDP length " + std::to_string(f.d.pkt.udp.length) +
                      ", not 36 (BTH, AETH, AtomicAckETH, ICRC)",
                  {&f});
    if ((f.syndrome() & 0xe0) != 0) return fail(describe(f) + ": its AETH is not an ACK", {&f});
    ++n;
  }
  if (!n) return no_stimulus(t, "the peer sent no ATOMIC ACKNOWLEDGE");
  return pass(
      std::to_string(n) + " ATOMIC ACKNOWLEDGEs, each BTH + AETH (ACK) + AtomicAckETH and nothing else",
      {first, last});
}

Finding judge_rnr_nak(const Trace& t, const Setup&) {
  const Frame* rnr = t.next(nullptr, [](const Frame& f) { return f.from_peer() && f.is_rnr_nak(); });
  if (!rnr) return no_stimulus(t, "the peer never ran out of receive WQEs (no RNR NAK)");
  const uint32_t p = rnr->psn();
  const uint8_t want = 0x20 | kPerftestMinRnrTimer;
  if (rnr->syndrome() != want)
    return fail("RNR NAK syndrome " + hex(rnr->syndrome()) + ", not " + hex(want) + " (min_rnr_timer " +
                    std::to_string(kPerftestMinRnrTimer) + "): " + describe(*rnr),
                {rnr});
  const Frame* req = nullptr;
  for (const Frame& f : t.frames)
    if (&f < rnr && f.to_peer() && f.is_request() && f.psn() == p) req = &f;
  if (!req || info(*req).kind != wire::OpKind::send || !info(*req).is_first())
    return fail("the RNR NAK names PSN " + hex(p) + ", " +
                    (req ? "a " + describe(*req) : std::string("which urxe never sent")) +
                    ": it must name the SEND that found no receive WQE",
                {req, rnr});
  const Frame* resend =
      t.next(rnr, [&](const Frame& f) { return f.to_peer() && f.is_request() && f.psn() == p; });
  const Frame* ack = t.next(rnr, [&](const Frame& f) {
    return f.from_peer() && f.is_ack() && f.dqpn() == rnr->dqpn() && psn_diff(p, f.psn()) >= 0;
  });
  if (ack && (!resend || ack < resend))
    return fail("the peer acknowledged PSN " + hex(ack->psn()) + " after RNR NAKing " + hex(p) +
                    " and before urxe sent it again",
                {req, rnr, ack});
  return pass("the peer RNR NAKed the " + describe(*req) + " with syndrome " + hex(want) +
                  " and acknowledged nothing from there on until urxe resent it",
              {req, rnr, resend});
}

Finding judge_rnr_wait(const Trace& t, const Setup&) {
  size_t n = 0;
  int64_t least = INT64_MAX;
  const Frame *first = nullptr, *first_resend = nullptr;
  for (const Frame& nak : t.frames) {
    if (!nak.to_peer() || !nak.is_rnr_nak()) continue;
    const uint32_t p = nak.psn();
    const auto timer = static_cast<int64_t>(wire::rnr_timer_ns(nak.syndrome() & 0x1f));
    const Frame* resend =
        t.next(&nak, [&](const Frame& f) { return f.from_peer() && f.is_request() && f.psn() == p; });
    if (!resend) {
      if (t.peer_timed_out || t.local_timed_out) continue;  // cut off by the run's end
      return fail("the peer never sent PSN " + hex(p) + " again after urxe's RNR NAK", {&nak});
    }
    const int64_t d = resend->t_ns - nak.t_ns;
    if (d * 20 < timer * 19)
      return fail("the peer resent PSN " + hex(p) + " " + ms_text(d) + " after urxe's RNR NAK (" +
                      describe(nak) + "), before its RNR timer " + ms_text(timer),
                  {&nak, resend});
    if (!first) first = &nak, first_resend = resend;
    least = std::min(least, d);
    ++n;
  }
  if (!n) return no_stimulus(t, "urxe sent no RNR NAK that the peer answered");
  return pass(std::to_string(n) + " RNR NAKs from urxe (timer " +
                  ms_text(static_cast<int64_t>(wire::rnr_timer_ns(first->syndrome() & 0x1f))) +
                  "); the peer resent each NAKed PSN no sooner, the soonest after " + ms_text(least),
              {first, first_resend});
}

// D4: rule 0 turns urxe's first ACK into an RNR NAK (timer 0.01 ms) for a peer whose QP has rnr_retry 0 (the
// RNR Retry Count of urxe's REQ, which the passive side's QP takes): the peer must not send that PSN again;
// its QP fails with IBV_WC_RNR_RETRY_EXC_ERR. (Only 7 means "retry for ever"; ucmatose asks for 0.)
Finding judge_rnr_retry_zero(const Trace& t, const Setup&) {
  const Frame* nak = first_hit(t);
  if (!nak || !nak->to_peer() || !nak->is_rnr_nak() || !peer_spoke(t))
    return no_stimulus(t, "the rule turned no ACK of urxe's into an RNR NAK");
  const uint32_t p = nak->psn();
  const Frame* again =
      t.next(nak, [&](const Frame& f) { return f.from_peer() && !f.cm() && f.is_request() && f.psn() == p; });
  if (again)
    return fail("the peer sent PSN " + hex(p) + " again " + ms_text(again->t_ns - nak->t_ns) +
                    " after urxe's RNR NAK, with rnr_retry 0 (urxe's REQ asked for 0)",
                {nak, again});
  // A retry comes a timer (0.01 ms here) after the NAK: the run must have watched long past that.
  const int64_t watched = t.duration_ns - nak->t_ns;
  if (watched < 50'000'000) return no_stimulus(t, "the run ended " + ms_text(watched) + " after the RNR NAK");
  return pass("no PSN " + hex(p) + " from the peer in the " + ms_text(watched) + " after urxe's RNR NAK (" +
                  describe(*nak) + "): rnr_retry 0 honoured, no retry",
              {nak});
}

}  // namespace urxe::tools::conform
