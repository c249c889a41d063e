// `urxe conform` judges: sequence errors, ACK generation, the shared helpers.
#include <cstdio>
#include <set>

#include "tools/conform_judges.h"
#include "wire/headers.h"
#include "wire/opcode.h"

namespace urxe::tools::conform {

const Frame* first_hit(const Trace& t, size_t k) {
  const auto h = t.hits(k);
  return h.empty() ? nullptr : h[0];
}

const Frame* first_request_hit(const Trace& t) {
  for (const Frame* f : t.hits(0))
    if (f->to_peer() && f->is_request()) return f;
  return nullptr;
}

bool peer_spoke(const Trace& t) {
  for (const Frame& f : t.frames)
    if (f.from_peer() && f.d.bth_parsed) return true;
  return false;
}

Finding no_stimulus(const Trace& t, std::string_view what) {
  Finding r;
  r.verdict = Verdict::inconclusive;
  if (t.frames.empty())
    r.observed = "nothing was captured: the tools did not connect (see the run's logs)";
  else if (!peer_spoke(t))
    r.observed = "the peer sent no RoCE frame (unreachable, silent or not running)";
  else
    r.observed = std::string(what);
  return r;
}

Finding pass(std::string observed, std::vector<const Frame*> ev) {
  Finding r{Verdict::pass, std::move(observed), {}};
  for (const Frame* f : ev)
    if (f) r.evidence.push_back(f->n);
  return r;
}
Finding fail(std::string observed, std::vector<const Frame*> ev) {
  Finding r = pass(std::move(observed), std::move(ev));
  r.verdict = Verdict::fail;
  return r;
}

std::string describe(const Frame& f) {
  char b[200];
  const auto* info = f.d.pkt.info;
  std::string name = info && info->valid() ? std::string(info->name) : hex(f.opcode());
  int n = std::snprintf(b, sizeof b, "#%llu %s PSN %s", static_cast<unsigned long long>(f.n), name.c_str(),
                        hex(f.psn()).c_str());
  if (f.is_ack_opcode() || f.is_atomic_ack() ||
      (f.is_read_response() && info && (info->headers & wire::kAeth)))
    n += std::snprintf(b + n, sizeof b - static_cast<size_t>(n), " syndrome 0x%02x MSN %u", f.syndrome(),
                       f.d.pkt.aeth.msn);
  (void)n;
  return b;
}

namespace {

// The lost request of a drop rule, and the first time urxe sent that PSN again.
struct Gap {
  const Frame* lost = nullptr;
  const Frame* resend = nullptr;
};
Gap find_gap(const Trace& t) {
  Gap g;
  // A request the rule dropped before the wire, or changed so the peer must discard it (a bad ICRC).
  for (const Frame* f : t.hits(0))
    if ((f->not_sent || (f->to_peer() && !f->d.pkt.icrc_ok)) && f->is_request()) {
      g.lost = f;
      break;
    }
  if (g.lost)
    g.resend = t.next(g.lost, [&](const Frame& f) {
      return f.to_peer() && f.fault_rule < 0 && f.is_request() && f.dqpn() == g.lost->dqpn() &&
             f.psn() == g.lost->psn();
    });
  return g;
}

// Whether `f` lies before `end` (null: the end of the trace).
bool before(const Frame* f, const Frame* end) {
  return f && (!end || f < end);
}

}  // namespace

Finding judge_seq_nak(const Trace& t, const Setup&) {
  const Gap g = find_gap(t);
  if (!g.lost || !peer_spoke(t)) return no_stimulus(t, "the drop rule never hit a request");
  const uint32_t p = g.lost->psn();
  const Frame* beyond = t.next(
      g.lost, [&](const Frame& f) { return f.from_peer() && f.is_ack() && psn_diff(p, f.psn()) >= 0; });
  if (before(beyond, g.resend))
    return fail("the peer acknowledged PSN " + hex(beyond->psn()) + " although PSN " + hex(p) +
                    " never reached it: " + describe(*beyond),
                {g.lost, beyond});
  const Frame* nak = t.next(g.lost, [&](const Frame& f) { return f.from_peer() && f.is_nak(); });
  if (!nak)
    return fail("no NAK from the peer after PSN " + hex(p) + " was lost" +
                    (g.resend ? "; urxe resent it after its own timeout" : ""),
                {g.lost, g.resend});
  if (!nak->is_nak(0)) return fail("the peer's NAK has the wrong code: " + describe(*nak), {g.lost, nak});
  if (nak->psn() != p)
    return fail(
        "the sequence NAK names PSN " + hex(nak->psn()) + ", not the lost " + hex(p) + ": " + describe(*nak),
        {g.lost, nak});
  // A NAK behind urxe's resend is still this hole's: urxe's timer went first (a slow peer; legal redundancy),
  // and once the resent PSN arrived the peer had no hole at it to NAK.
  const bool late = !before(nak, g.resend);
  return pass("PSN " + hex(p) + " lost; the peer NAKed the next packet with PSN sequence error at " + hex(p) +
                  " (" + describe(*nak) + ")" +
                  (late ? "; the NAK came after urxe's timer had resent the PSN" : ""),
              {g.lost, nak});
}

Finding judge_one_nak_per_gap(const Trace& t, const Setup&) {
  const Gap g = find_gap(t);
  if (!g.lost || !peer_spoke(t)) return no_stimulus(t, "the drop rule never hit a request");
  // The hole's NAKs name its PSN, also one behind urxe's resend (urxe's timer went first, a slow peer); once
  // the resent PSN arrived the peer had no hole there, so each names the same gap.
  std::vector<const Frame*> naks;
  for (const Frame* f = g.lost; (f = t.next(f, [&](const Frame& x) {
         return x.from_peer() && x.is_nak(0) && x.psn() == g.lost->psn();
       }));)
    naks.push_back(f);
  const size_t ahead = t.count([&](const Frame& f) {
    return f.to_peer() && f.is_request() && f.dqpn() == g.lost->dqpn() && &f > g.lost &&
           (!g.resend || &f < g.resend);
  });
  if (naks.empty()) return fail("no PSN sequence error NAK for the hole at " + hex(g.lost->psn()), {g.lost});
  if (naks.size() > 1)
    return fail(std::to_string(naks.size()) + " sequence NAKs for one hole (" + frame_list(naks) + ")",
                {g.lost, naks[0], naks[1]});
  return pass("one sequence NAK for the hole at " + hex(g.lost->psn()) + " although " +
                  std::to_string(ahead) + " later packets reached the peer before urxe resent it",
              {g.lost, naks[0]});
}

Finding judge_ackreq_covered(const Trace& t, const Setup&) {
  std::vector<const Frame*> acks;
  for (const Frame& f : t.frames)
    if (f.from_peer() && f.is_ack()) acks.push_back(&f);
  if (acks.empty()) return no_stimulus(t, "the peer sent no ACK");
  // An ACK naming a PSN below an earlier ACK's is a regression unless it answers a duplicate: a request
  // urxe resent at or below what was already acknowledged (a timer resend crossing the ACK) may be ACKed
  // again with its own or the last acknowledged PSN (legal redundancy).
  const Frame* prev = nullptr;
  bool dup_since = false;
  for (const Frame& f : t.frames) {
    if (prev && f.to_peer() && f.is_request() && psn_diff(prev->psn(), f.psn()) <= 0) dup_since = true;
    if (!f.from_peer() || !f.is_ack()) continue;
    if (prev && f.dqpn() == prev->dqpn() && psn_diff(prev->psn(), f.psn()) < 0 && !dup_since)
      return fail("ACK PSN went back from " + hex(prev->psn()) + " to " + hex(f.psn()) +
                      " with no duplicate request between them",
                  {prev, &f});
    if (!prev || psn_diff(prev->psn(), f.psn()) >= 0) prev = &f, dup_since = false;
  }
  size_t asked = 0;
  for (const Frame& f : t.frames) {
    if (!f.to_peer() || !f.is_request() || !f.d.pkt.bth.ack_req || f.fault_rule >= 0) continue;
    ++asked;
    const Frame* cover = t.next(&f, [&](const Frame& a) {
      return a.from_peer() && (a.is_ack_opcode() || a.is_read_response() || a.is_atomic_ack()) &&
             psn_diff(f.psn(), a.psn()) >= 0;
    });
    if (!cover) return fail("no response at or beyond PSN " + hex(f.psn()) + ", which asked for one", {&f});
  }
  if (!asked) return no_stimulus(t, "urxe sent no request with AckReq");
  return pass(std::to_string(asked) + " requests with AckReq each covered by a later response; " +
                  std::to_string(acks.size()) + " ACKs, PSNs non-decreasing but for duplicates",
              {acks.front(), acks.back()});
}

Finding judge_msn(const Trace& t, const Setup&) {
  // The PSNs (unwrapped from urxe's first request) of each message's last packet, as sent.
  const Frame* first = t.next(nullptr, [](const Frame& f) { return f.to_peer() && f.is_request(); });
  if (!first) return no_stimulus(t, "urxe sent no request");
  std::set<int64_t> lasts;
  for (const Frame& f : t.frames)
    if (f.out && f.is_request() && f.dqpn() == first->dqpn() && f.d.pkt.info->is_last())
      lasts.insert(psn_diff(first->psn(), f.psn()));
  size_t checked = 0;
  for (const Frame& a : t.frames) {
    if (!a.from_peer() || !a.is_ack()) continue;
    const int64_t at = psn_diff(first->psn(), a.psn());
    const auto want = static_cast<uint32_t>(std::distance(lasts.begin(), lasts.upper_bound(at))) & 0xffffff;
    if (a.d.pkt.aeth.msn != want)
      return fail("ACK at PSN " + hex(a.psn()) + " carries MSN " + std::to_string(a.d.pkt.aeth.msn) + ", " +
                      std::to_string(want) + " messages had ended by then",
                  {&a});
    ++checked;
  }
  if (!checked) return no_stimulus(t, "the peer sent no ACK");
  return pass(std::to_string(checked) + " ACKs, each MSN the count of messages ended at its PSN", {});
}

Finding judge_no_rnr(const Trace& t, const Setup&) {
  if (!t.count([](const Frame& f) { return f.from_peer() && f.is_ack(); }))
    return no_stimulus(t, "the peer sent no ACK");
  const Frame* rnr = t.next(nullptr, [](const Frame& f) { return f.from_peer() && f.is_rnr_nak(); });
  if (rnr) return fail("RNR NAK for a request that consumes no receive WQE: " + describe(*rnr), {rnr});
  return pass("no RNR NAK", {});
}

Finding silent_drop_of(const Trace& t, const Frame* m, const std::string& change) {
  const uint32_t p = m->psn();
  const Frame* resend = t.next(
      m, [&](const Frame& f) { return f.to_peer() && f.fault_rule < 0 && f.is_request() && f.psn() == p; });
  const Frame* answer = t.next(
      m, [&](const Frame& f) { return f.from_peer() && f.is_ack_opcode() && psn_diff(p, f.psn()) >= 0; });
  if (!resend) return no_stimulus(t, "urxe never resent the changed request");
  if (answer && answer < resend)
    return fail("the peer answered the changed request (" + change + "): " + describe(*answer), {m, answer});
  if (!answer || !answer->is_ack())
    return fail("the request resent unchanged was not acknowledged" +
                    (answer ? ": " + describe(*answer) : std::string()),
                {m, resend, answer});
  return pass("no answer to the changed PSN " + hex(p) + " (" + change + "); urxe resent it after " +
                  std::to_string((resend->t_ns - m->t_ns) / 1000000) +
                  " ms and the peer acknowledged that (" + describe(*answer) + ")",
              {m, resend, answer});
}

Finding judge_silent_drop(const Trace& t, const Setup&) {
  const Frame* m = first_request_hit(t);
  if (!m || !peer_spoke(t)) return no_stimulus(t, "the rule never changed a request");
  return silent_drop_of(t, m, m->fault_action);
}

Finding judge_no_seq_nak(const Trace& t, const Setup&) {
  const Frame* h = first_hit(t);
  if (!h || !peer_spoke(t)) return no_stimulus(t, "the duplicate rule never hit");
  const Frame* nak = t.next(nullptr, [](const Frame& f) { return f.from_peer() && f.is_nak(0); });
  if (nak) return fail("sequence NAK after a duplicate: " + describe(*nak), {h, nak});
  return pass("no sequence NAK for the duplicate of PSN " + hex(h->psn()), {h});
}

}  // namespace urxe::tools::conform
