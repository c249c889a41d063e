// `urxe conform` judges: the peer as requester — what a NAK acknowledges, go-back-N, the local ACK timeout
// and the retry counter. urxe's side is the responder; its rules drop what the peer sends or urxe's answers.
#include <cstdio>
#include <cstring>

#include "tools/conform_judges.h"
#include "wire/opcode.h"

namespace urxe::tools::conform {

std::string ms_text(int64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f ms", static_cast<double>(ns) / 1e6);
  return b;
}

bool same_payload(const Frame& a, const Frame& b) {
  if (a.d.pkt.payload_len != b.d.pkt.payload_len) return false;
  if (!a.d.pkt.payload_len) return true;
  const uint8_t *x = a.payload(), *y = b.payload();
  return x && y && std::memcmp(x, y, a.d.pkt.payload_len) == 0;
}

namespace {

// The stock tools' QP attributes (rdma-core rc_pingpong.c, perftest's DEF_QP_TIME): local ACK timeout 14
// (4.096 µs × 2^14 = 67.1 ms), retry_cnt 7.
constexpr uint8_t kToolTimeout = 14;
constexpr uint32_t kToolRetryCnt = 7;

uint64_t ack_timeout_ns(uint8_t t) {
  return uint64_t{4096} << t;
}

// The first request of the peer that the run's rule k dropped on its way in.
const Frame* lost_peer_request(const Trace& t, size_t k) {
  for (const Frame* f : t.hits(k))
    if (f->from_peer() && f->not_delivered && f->is_request()) return f;
  return nullptr;
}

// A request of the peer to urxe's QP `qpn`.
auto peer_request_to(uint32_t qpn) {
  return [qpn](const Frame& f) { return f.from_peer() && f.is_request() && f.dqpn() == qpn; };
}

// The stimulus of A3/A4: the peer's request at PSN p dropped, urxe's sequence NAK naming p.
struct NakedGap {
  const Frame* lost = nullptr;
  const Frame* nak = nullptr;
  std::string missing;  // why there is no stimulus
};
NakedGap find_naked_gap(const Trace& t) {
  NakedGap g;
  g.lost = lost_peer_request(t, 0);
  if (!g.lost) {
    g.missing = "the drop rule never hit a request from the peer";
    return g;
  }
  const uint32_t p = g.lost->psn();
  g.nak = t.next(g.lost, [&](const Frame& f) { return f.to_peer() && f.is_nak(0) && f.psn() == p; });
  if (!g.nak) g.missing = "urxe sent no sequence NAK for the dropped PSN " + hex(p);
  return g;
}

}  // namespace

Finding judge_nak_acks_below(const Trace& t, const Setup&) {
  const NakedGap g = find_naked_gap(t);
  if (!g.nak) return no_stimulus(t, g.missing);
  const uint32_t p = g.lost->psn();
  const auto req = peer_request_to(g.lost->dqpn());
  const size_t after = t.count([&](const Frame& f) { return &f > g.nak && req(f); });
  if (!after) return no_stimulus(t, "the peer sent no request after urxe's NAK");
  const Frame* below = t.next(g.nak, [&](const Frame& f) { return req(f) && psn_diff(p, f.psn()) < 0; });
  if (below)
    return fail("the peer sent PSN " + hex(below->psn()) + " again after the NAK at " + hex(p) +
                    ", which acknowledged it: " + describe(*below),
                {g.lost, g.nak, below});
  return pass("PSN " + hex(p) + " dropped on its way in, urxe NAKed it (" + describe(*g.nak) +
                  "); the peer's " + std::to_string(after) + " requests after the NAK are all at or above " +
                  hex(p),
              {g.lost, g.nak});
}

Finding judge_go_back_n(const Trace& t, const Setup&) {
  const NakedGap g = find_naked_gap(t);
  if (!g.nak) return no_stimulus(t, g.missing);
  const uint32_t p = g.lost->psn();
  const auto req = peer_request_to(g.lost->dqpn());
  const Frame* resend = t.next(g.nak, [&](const Frame& f) { return req(f) && f.psn() == p; });
  if (!resend) return fail("the peer never sent PSN " + hex(p) + " again after urxe's NAK", {g.lost, g.nak});
  // What the peer had sent before it went back: the resend round must cover it all, in order.
  uint32_t high = p;
  for (const Frame& f : t.frames)
    if (&f < resend && req(f) && psn_diff(high, f.psn()) > 0) high = f.psn();
  if (resend->opcode() != g.lost->opcode())
    return fail(
        "the resent PSN " + hex(p) + " is " + describe(*resend) + ", the lost one was " + describe(*g.lost),
        {g.lost, resend});
  if (!same_payload(*resend, *g.lost))
    return fail("the resent PSN " + hex(p) + " carries other data than the lost one (" +
                    std::to_string(resend->d.pkt.payload_len) + " bytes against " +
                    std::to_string(g.lost->d.pkt.payload_len) + ")",
                {g.lost, resend});
  uint32_t prev = p;
  const Frame* last = resend;
  size_t n = 1, rounds = 0;
  while (psn_diff(prev, high) > 0) {
    const Frame* f = t.next(last, req);
    if (!f)
      return fail("the peer's resend round stopped at " + hex(prev) + "; it had sent up to " + hex(high),
                  {g.lost, resend, last});
    const int32_t d = psn_diff(prev, f->psn());
    if (d > 1)
      return fail("the resend round skipped from " + hex(prev) + " to " + hex(f->psn()) + " (" +
                      describe(*f) + "): not go-back-N",
                  {g.lost, resend, last, f});
    if (d <= 0) {
      // Another round: legal after another NAK from urxe at that PSN, or after a pause (a timer).
      const uint32_t r = f->psn();
      const Frame* nak2 =
          t.next(last, [&](const Frame& x) { return x.to_peer() && x.is_nak(0) && x.psn() == r; });
      if (psn_diff(p, r) < 0 || ((!nak2 || nak2 > f) && f->t_ns - last->t_ns < 1000000))
        return fail("the resend round went back from " + hex(prev) + " to " + hex(r) +
                        " without a NAK or a timeout: " + describe(*f),
                    {g.lost, resend, last, f});
      ++rounds;
    }
    prev = f->psn();
    last = f;
    ++n;
  }
  return pass("the peer went back to the NAKed PSN " + hex(p) + " with " + describe(*resend) +
                  ", the lost packet's opcode and data, then sent every PSN up to " + hex(high) +
                  " in order (" + std::to_string(n) + " packets" +
                  (rounds ? ", " + std::to_string(rounds) + " later rounds" : std::string()) + ")",
              {g.lost, g.nak, resend, last});
}

Finding judge_ack_timeout(const Trace& t, const Setup&) {
  // urxe's ACK dropped before the wire: the peer hears nothing for what it covered and must time out.
  const Frame* ack = nullptr;
  for (const Frame* f : t.hits(0))
    if (f->not_sent && f->is_ack()) {
      ack = f;
      break;
    }
  if (!ack) return no_stimulus(t, "the rule never dropped an ACK of urxe's");
  const uint32_t a = ack->psn();
  const Frame* orig = nullptr;  // the peer's request the lost ACK answered
  for (const Frame& f : t.frames)
    if (&f < ack && f.from_peer() && f.is_request() && f.psn() == a) orig = &f;
  if (!orig) return no_stimulus(t, "no request of the peer at the dropped ACK's PSN " + hex(a));
  const auto req = peer_request_to(orig->dqpn());
  // The oldest PSN no ACK that reached the peer covers: one past the newest delivered ACK before, or the
  // peer's first PSN.
  const Frame* first = t.next(nullptr, req);
  uint32_t una = first->psn();
  for (const Frame& f : t.frames)
    if (&f < ack && f.to_peer() && f.is_ack() && f.dqpn() == ack->dqpn() && psn_diff(una, f.psn()) >= 0)
      una = (f.psn() + 1) & 0xffffff;
  const Frame* sent_una = t.next(nullptr, [&](const Frame& f) { return req(f) && f.psn() == una; });
  const Frame* resend = t.next(ack, [&](const Frame& f) { return req(f) && psn_diff(f.psn(), a) >= 0; });
  const uint64_t T = ack_timeout_ns(kToolTimeout);
  if (!resend)
    return fail("the peer never resent anything up to PSN " + hex(a) + " after urxe's ACK of it was lost",
                {orig, ack});
  if (resend->psn() != una)
    return fail("the peer's first resend is PSN " + hex(resend->psn()) + ", not the oldest unacknowledged " +
                    hex(una) + ": " + describe(*resend),
                {orig, ack, resend});
  // The original's time is when urxe read it: on a busy host that comes milliseconds after it arrived, so
  // the bound is 3/4 of the timeout (an early resend, a probe or a timer set off by one exponent, still
  // shows).
  const int64_t gap = resend->t_ns - sent_una->t_ns;
  if (gap * 4 < static_cast<int64_t>(T) * 3)
    return fail("the peer resent PSN " + hex(una) + " " + ms_text(gap) +
                    " after urxe received it, under 3/4 of its local ACK timeout (" +
                    ms_text(static_cast<int64_t>(T)) + ")",
                {sent_una, ack, resend});
  return pass("urxe's ACK of PSN " + hex(a) + " lost; the peer resent the oldest unacknowledged PSN " +
                  hex(una) + " " + ms_text(gap) + " after urxe received it (timeout " +
                  std::to_string(kToolTimeout) + ": " + ms_text(static_cast<int64_t>(T)) + ")",
              {sent_una, ack, resend});
}

Finding judge_retry_count(const Trace& t, const Setup&) {
  // Rule 1 drops every transmission of one PSN of the peer's.
  std::vector<const Frame*> sends;
  for (const Frame* f : t.hits(1))
    if (f->from_peer() && f->not_delivered && f->is_request()) sends.push_back(f);
  if (sends.empty()) return no_stimulus(t, "the rule never dropped a request of the peer");
  const uint32_t p = sends[0]->psn();
  const size_t want = kToolRetryCnt + 1;
  std::string spacing;
  for (size_t i = 1; i < sends.size() && i < 10; ++i)
    spacing += (i > 1 ? ", " : "") + ms_text(sends[i]->t_ns - sends[i - 1]->t_ns);
  if (sends.size() > want)
    return fail("the peer sent PSN " + hex(p) + " " + std::to_string(sends.size()) + " times (retry_cnt " +
                    std::to_string(kToolRetryCnt) + " allows " + std::to_string(want) + "; gaps " + spacing +
                    (t.peer_timed_out ? ", still sending when the run ended)" : ")"),
                {sends[0], sends[want], sends.back()});
  if (sends.size() < want) {
    if (t.peer_timed_out)
      return no_stimulus(t, "the run ended after " + std::to_string(sends.size()) + " sends of PSN " +
                                hex(p) + ", before the peer's retries could run out");
    return fail("the peer gave up on PSN " + hex(p) + " after " + std::to_string(sends.size()) +
                    " sends (retry_cnt " + std::to_string(kToolRetryCnt) + ": " + std::to_string(want) + ")",
                {sends[0], sends.back()});
  }
  if (t.peer_timed_out || t.peer_status == 0)
    return fail("the peer sent PSN " + hex(p) + " " + std::to_string(want) +
                    " times but its tool did not fail (" +
                    (t.peer_timed_out ? std::string("still running") : "exit 0") + ")",
                {sends[0], sends.back()});
  return pass("the peer sent PSN " + hex(p) + " " + std::to_string(want) + " times (gaps " + spacing +
                  "), then stopped and its tool failed (exit " + std::to_string(t.peer_status) + ")",
              {sends[0], sends.back()});
}

Finding judge_retry_reset(const Trace& t, const Setup&) {
  std::vector<const Frame*> lost;
  for (const Frame* f : t.hits(0))
    if (f->from_peer() && f->not_delivered && f->is_request()) lost.push_back(f);
  if (lost.size() <= kToolRetryCnt)
    return no_stimulus(t, "the rule dropped only " + std::to_string(lost.size()) +
                              " requests of the peer, not more than its retry_cnt");
  // Each dropped PSN must reach urxe in another copy: mostly a later resend, but a dropped spurious resend
  // (a timer firing for a PSN already delivered, as rxe's does) was delivered before it.
  for (const Frame* l : lost) {
    const Frame* again = t.next(nullptr, [&](const Frame& f) {
      return f.from_peer() && f.is_request() && !f.not_delivered && f.psn() == l->psn() &&
             f.dqpn() == l->dqpn();
    });
    if (!again) return fail("PSN " + hex(l->psn()) + " dropped and never delivered in another copy", {l});
  }
  if (t.peer_status != 0 || t.local_status != 0)
    return fail("the tools did not both complete (peer " + std::to_string(t.peer_status) + ", urxe " +
                    std::to_string(t.local_status) + ") after " + std::to_string(lost.size()) +
                    " dropped transmissions",
                {lost.front(), lost.back()});
  return pass(
      std::to_string(lost.size()) + " transmissions of the peer dropped in all, more than its retry_cnt " +
          std::to_string(kToolRetryCnt) + ", each PSN delivered in another copy; both tools completed",
      {lost.front(), lost.back()});
}

}  // namespace urxe::tools::conform
