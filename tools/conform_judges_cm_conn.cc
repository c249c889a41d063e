// `urxe conform` judges: the peer's CM state over a connection's life (the research note's I5, I6).
// I5: the peer's REQ reaches urxe's CM twice; the copy finds the REQ not yet accepted, and urxe answers it
// with an MRA as the kernel's cm_dup_req_handler does. From then on the peer may resend its REQ only after
// ServiceTimeout + PacketLifeTime (the kernel's cm_mra_handler), and must still take a REP that comes later
// than its own REQ timeout.
// I6: urxe's client connects, its DREQ is lost, and a new client offers the same QPN: the peer, still
// holding the first connection, rejects the REQ as stale and disconnects the old one (cm_match_req).
#include <variant>

#include "tools/conform_judges.h"
#include "wire/mad.h"

namespace urxe::tools::conform {
namespace {

using wire::CmAttr;

// An IBTA CM time, 4.096 us x 2^x, in ns.
int64_t cm_time_ns(uint8_t x) {
  return int64_t{4096} << (x & 31);
}
std::string ms(int64_t ns) {
  return std::to_string(ns / 1000000) + " ms";
}

}  // namespace

Finding judge_mra_honoured(const Trace& t, const Setup&) {
  const Frame* req = t.next(nullptr, [](const Frame& f) { return f.from_peer() && is_cm(f, CmAttr::req); });
  if (!req) return no_stimulus(t, "the peer sent no REQ");
  const uint32_t comm = cm_msg<wire::CmReq>(*req).local_comm_id;
  const Frame* mra = t.next(req, [&](const Frame& f) {
    return f.to_peer() && is_cm(f, CmAttr::mra) && cm_msg<wire::CmMra>(f).remote_comm_id == comm &&
           cm_msg<wire::CmMra>(f).message_mraed == 0;
  });
  if (!mra) return no_stimulus(t, "urxe's CM sent no MRA for the peer's REQ");
  const auto& m = cm_msg<wire::CmMra>(*mra);
  const auto& q = cm_msg<wire::CmReq>(*req);
  // The REP that reached the peer ends what the capture can show of its REQ timer.
  const Frame* rep = t.next(mra, [&](const Frame& f) {
    return f.to_peer() && is_cm(f, CmAttr::rep) && cm_msg<wire::CmRep>(f).remote_comm_id == comm;
  });
  // The peer's timer after the MRA: ServiceTimeout + PacketLifeTime, checked from below as the other CM
  // timers (0.95 x, less 100 ms of capture jitter), and without the packet lifetime the MRA cannot show.
  const int64_t wait = cm_time_ns(m.service_timeout) * 95 / 100 - 100'000'000;
  const int64_t end = std::min(mra->t_ns + wait, rep ? rep->t_ns : t.duration_ns);
  // Without the MRA the peer would have resent by 2 x PacketLifeTime + Remote CM Response Timeout; the
  // REQ's local ACK timeout (ACK delay + 2 x PacketLifeTime) bounds the first term.
  const int64_t own = cm_time_ns(q.remote_cm_response_timeout) + cm_time_ns(q.primary.local_ack_timeout);
  const std::string what = "MRA ServiceTimeout " + std::to_string(m.service_timeout) + " (" +
                           ms(cm_time_ns(m.service_timeout)) + ") for REQ comm ID " + hex(comm) +
                           ", whose own timeout is at most " + ms(own);
  const Frame* resent = t.next(mra, [&](const Frame& f) {
    return f.from_peer() && f.t_ns < end && is_cm(f, CmAttr::req) &&
           cm_msg<wire::CmReq>(f).local_comm_id == comm;
  });
  if (resent)
    return fail(what + ": the peer sent its REQ again " + ms(resent->t_ns - mra->t_ns) + " after the MRA",
                {req, mra, resent});
  const Frame* rej = t.next(mra, [&](const Frame& f) {
    return f.from_peer() && is_cm(f, CmAttr::rej) && cm_msg<wire::CmRej>(f).local_comm_id == comm;
  });
  if (rej && (!rep || rej->t_ns < rep->t_ns))
    return fail(what + ": the peer gave up with REJ reason " +
                    std::to_string(cm_msg<wire::CmRej>(*rej).reason) + " " + ms(rej->t_ns - mra->t_ns) +
                    " after the MRA",
                {req, mra, rej});
  if (end - req->t_ns < own + 500'000'000)
    return no_stimulus(t, "the window after the MRA (" + ms(end - mra->t_ns) +
                              ") ends before the peer's own REQ timeout would have (" + what + ")");
  if (!rep) return no_stimulus(t, "no REP reached the peer (" + what + ")");
  const Frame* rtu = t.next(rep, [&](const Frame& f) {
    return f.from_peer() && is_cm(f, CmAttr::rtu) && cm_msg<wire::CmRtu>(f).local_comm_id == comm;
  });
  if (!rtu)
    return fail(what + ": no RTU for the REP that came " + ms(rep->t_ns - req->t_ns) + " after the REQ",
                {req, mra, rep});
  return pass(what + ": no REQ again and no REJ in the " + ms(rep->t_ns - mra->t_ns) +
                  " after the MRA; the REP then was answered by RTU",
              {req, mra, rep, rtu});
}

Finding judge_stale_connection(const Trace& t, const Setup&) {
  const auto ours = [](const Frame& f) { return f.to_peer() && is_cm(f, CmAttr::req); };
  const Frame* req1 = t.next(nullptr, ours);
  const Frame* lost = nullptr;
  for (const Frame* f : t.hits(0))
    if (is_cm(*f, CmAttr::dreq)) lost = f;
  if (!req1 || !lost) return no_stimulus(t, "urxe's first connection did not lose its DREQ");
  const auto& q1 = cm_msg<wire::CmReq>(*req1);
  const Frame* rtu = t.next(req1, [&](const Frame& f) {
    return f.to_peer() && is_cm(f, CmAttr::rtu) && cm_msg<wire::CmRtu>(f).local_comm_id == q1.local_comm_id;
  });
  if (!rtu) return no_stimulus(t, "urxe's first connection never reached the peer's ESTABLISHED");
  const Frame* req2 = t.next(lost, ours);
  if (!req2) return no_stimulus(t, "urxe's second client sent no REQ");
  const auto& q2 = cm_msg<wire::CmReq>(*req2);
  if (q2.local_qpn != q1.local_qpn || q2.local_comm_id == q1.local_comm_id)
    return no_stimulus(t,
                       "the second REQ offers QPN " + hex(q2.local_qpn) + ", the first " + hex(q1.local_qpn));
  const std::string what = "the REQ (comm ID " + hex(q2.local_comm_id) + ") from QPN " + hex(q2.local_qpn) +
                           ", which the peer holds in the connection of comm ID " + hex(q1.local_comm_id);
  const Frame* answer = t.next(req2, [&](const Frame& f) {
    return f.from_peer() &&
           ((is_cm(f, CmAttr::rej) && cm_msg<wire::CmRej>(f).remote_comm_id == q2.local_comm_id) ||
            (is_cm(f, CmAttr::rep) && cm_msg<wire::CmRep>(f).remote_comm_id == q2.local_comm_id) ||
            (is_cm(f, CmAttr::mra) && cm_msg<wire::CmMra>(f).remote_comm_id == q2.local_comm_id));
  });
  if (!answer) return fail("no REJ for " + what, {req1, lost, req2});
  if (!is_cm(*answer, CmAttr::rej) || cm_msg<wire::CmRej>(*answer).reason != 10)
    return fail(
        what + " was answered by " +
            (is_cm(*answer, CmAttr::rej) ? "REJ reason " + std::to_string(cm_msg<wire::CmRej>(*answer).reason)
                                         : std::string(is_cm(*answer, CmAttr::rep) ? "a REP" : "an MRA")) +
            ", not REJ 10 (stale connection)",
        {req1, lost, req2, answer});
  const Frame* dreq = t.next(req2, [&](const Frame& f) {
    return f.from_peer() && is_cm(f, CmAttr::dreq) &&
           cm_msg<wire::CmDreq>(f).remote_comm_id == q1.local_comm_id;
  });
  if (!dreq) return fail(what + ": REJ 10, but no DREQ for the old connection", {req1, lost, req2, answer});
  return pass(what + ": REJ 10 (stale connection), then a DREQ for the old connection",
              {req1, lost, req2, answer, dreq});
}

}  // namespace urxe::tools::conform
