// `urxe conform` judges: ECN marks and CNPs (RoCEv2 annex A17).
#include <algorithm>
#include <cstdio>
#include <vector>

#include "tools/conform_judges.h"

namespace urxe::tools::conform {

Finding judge_ce_no_loss(const Trace& t, const Setup&) {
  const auto marked = t.hits(0);
  if (marked.empty() || !peer_spoke(t)) return no_stimulus(t, "the rule marked no frame");
  const Frame* nak = t.next(nullptr, [](const Frame& f) { return f.from_peer() && f.is_nak(); });
  if (nak) return fail("a CE mark cost a packet: " + describe(*nak), {marked[0], nak});
  if (t.local_status != 0 || t.peer_status != 0)
    return fail("the tools did not both complete (urxe " + std::to_string(t.local_status) + ", peer " +
                    std::to_string(t.peer_status) + ")",
                {marked[0]});
  // A marked request sent again with no NAK before it went again by urxe's own timer (retransmit timeout,
  // tail loss probe): the peer's ACK came late (a slow peer, a guest without CPU), which says nothing of a
  // loss. A peer that dropped a marked packet would NAK the next packet of the stream, as above.
  size_t resent = 0;
  for (const Frame* m : marked)
    resent += t.next(m, [&](const Frame& f) {
      return f.to_peer() && f.is_request() && f.dqpn() == m->dqpn() && f.psn() == m->psn();
    }) != nullptr;
  return pass(
      std::to_string(marked.size()) + " requests marked CE, none NAKed, both tools completed" +
          (resent ? " (" + std::to_string(resent) + " resent by urxe's timer with no NAK: late ACKs)" : ""),
      {marked[0]});
}

Finding judge_cnp_for_ce(const Trace& t, const Setup&) {
  const auto marked = t.hits(0);
  if (marked.empty() || !peer_spoke(t)) return no_stimulus(t, "the rule marked no frame");
  // The CNP goes to the QP that sent the marked packets: the QP the peer's ACKs are addressed to.
  const Frame* ack = t.next(nullptr, [](const Frame& f) { return f.from_peer() && f.is_ack_opcode(); });
  const Frame* cnp = t.next(marked[0], [&](const Frame& f) { return f.from_peer() && f.is_cnp(); });
  if (!cnp) return fail("no CNP for " + std::to_string(marked.size()) + " CE-marked packets", {marked[0]});
  if (ack && cnp->dqpn() != ack->dqpn())
    return fail(
        "the CNP goes to QP " + hex(cnp->dqpn()) + ", not the marked packets' sender " + hex(ack->dqpn()),
        {marked[0], cnp});
  const size_t n = t.count([](const Frame& f) { return f.from_peer() && f.is_cnp(); });
  return pass(std::to_string(n) + " CNPs for " + std::to_string(marked.size()) +
                  " CE-marked packets, the first to QP " + hex(cnp->dqpn()),
              {marked[0], cnp});
}

namespace {

// How fast the peer sends while it sends: its requests to QP `qpn` received in [from, to) (whole frames) over
// the time of the 2 ms bins they fall in, in MB/s (10^6 bytes); `busy` the share of bins with any. A paced
// source's bursts come at the NIC's rate (a few busy bins, a high rate) or, under a rate limit below the
// pacer's, stretched into a trickle (every bin busy, a low rate): unlike an average, this sees the limit
// whatever the pacer's rhythm, and unlike a median of bins it is not zero for a bursty source.
struct ActiveRate {
  double mbs = 0, busy = 0;
};
ActiveRate active_rate(const Trace& t, uint32_t qpn, int64_t from, int64_t to) {
  constexpr int64_t kBinNs = 2'000'000;
  const size_t n = to > from ? static_cast<size_t>((to - from) / kBinNs) : 0;
  if (n == 0) return {};
  std::vector<uint64_t> bins(n);
  uint64_t bytes = 0;
  for (const Frame& f : t.frames)
    if (f.from_peer() && f.is_request() && f.dqpn() == qpn && f.t_ns >= from && f.raw) {
      const auto b = static_cast<size_t>((f.t_ns - from) / kBinNs);
      if (b < n) bins[b] += f.raw->wirelen, bytes += f.raw->wirelen;
    }
  const auto used =
      static_cast<size_t>(std::count_if(bins.begin(), bins.end(), [](uint64_t b) { return b != 0; }));
  if (used == 0) return {};
  return {static_cast<double>(bytes) * 1e3 / static_cast<double>(used * kBinNs),
          static_cast<double>(used) / static_cast<double>(n)};
}

std::string rate_text(const ActiveRate& r) {
  char b[64];
  std::snprintf(b, sizeof b, "%.2f MB/s (%.0f %% busy)", r.mbs, r.busy * 100);
  return b;
}

}  // namespace

// H3: rule 0 takes every request of the peer as CE-marked for a while (a time window in its data); urxe, the
// notification point, answers with CNPs. A reaction point (DCQCN: RC·(1 − α/2) per CNP) comes down while they
// come and recovers (fast recovery, then additive and hyper increase every rp_time_reset) once they stop; a
// peer that ignores CNPs sends as before, give or take its host's noise. Its sending rate (active_rate):
// before, over the 500 ms before the first mark; during, over the second half of the marks, where a reaction
// has settled (a QP unpaced until its first CNP starts at line rate, and α decays between the pacer's bursts,
// so the first tens of ms cut little); after, from 300 ms after the last mark to the data's end.
Finding judge_cnp_reaction(const Trace& t, const Setup&) {
  constexpr int64_t ms = 1000000;
  const auto marked = t.hits(0);
  if (marked.empty() || !peer_spoke(t)) return no_stimulus(t, "the rule marked no frame");
  const uint32_t qpn = marked.front()->dqpn();
  const int64_t ws = marked.front()->t_ns, we = marked.back()->t_ns;
  const Frame* cnp = t.next(marked.front(), [](const Frame& f) { return f.to_peer() && f.is_cnp(); });
  if (!cnp || cnp->t_ns > we)
    return no_stimulus(t, "urxe sent no CNP for the marks (its notification point is off: np_enable)");
  const size_t cnps = t.count([&](const Frame& f) { return f.to_peer() && f.is_cnp() && f.t_ns <= we; });
  int64_t start = -1, end = 0;
  const Frame* resumed = nullptr;  // the peer's first request after the marks
  for (const Frame& f : t.frames)
    if (f.from_peer() && f.is_request() && f.dqpn() == qpn) {
      if (start < 0) start = f.t_ns;
      end = f.t_ns;
      if (!resumed && f.t_ns > we) resumed = &f;
    }
  const int64_t after_from = we + 300 * ms;
  if (ws - start < 500 * ms || end - after_from < 200 * ms || we - ws < 200 * ms)
    return no_stimulus(t, "the peer's data did not last around the marks (" + ms_text(ws - start) +
                              " of data before them, " + ms_text(we - ws) + " of marks, " +
                              ms_text(end - we) + " of data after)");
  const ActiveRate before = active_rate(t, qpn, ws - 500 * ms, ws);
  const ActiveRate during = active_rate(t, qpn, ws + (we - ws) / 2, we);
  const ActiveRate after = active_rate(t, qpn, after_from, end);
  if (before.mbs <= 0) return no_stimulus(t, "the peer sent nothing in the 500 ms before the marks");
  const std::string figures = "sending at " + rate_text(before) + " before the marks, " + rate_text(during) +
                              " under " + std::to_string(marked.size()) + " marks and " +
                              std::to_string(cnps) + " CNPs, " + rate_text(after) + " after them";
  if (during.mbs > before.mbs / 3)
    return fail("the peer's rate did not come down under the CNPs: " + figures, {marked.front(), cnp});
  if (after.mbs < before.mbs / 2)
    return fail("the peer's rate did not recover after the CNPs stopped: " + figures,
                {marked.front(), cnp, marked.back()});
  return pass(figures, {marked.front(), cnp, resumed ? resumed : marked.back()});
}

}  // namespace urxe::tools::conform
