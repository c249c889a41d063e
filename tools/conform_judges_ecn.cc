// `urxe conform` judges: ECN marks and CNPs (RoCEv2 annex A17).
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

}  // namespace urxe::tools::conform
