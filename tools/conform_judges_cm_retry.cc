// `urxe conform` judges: CM retransmissions and duplicates (the research note's I1-I4, I9). The peer's
// timers are checked from below only (0.95 x the IBTA time: the kernel's cm_convert_to_ms runs 4.6 % short)
// and loosely from above; where the kernel's cm.c answers a duplicate differently by state, every answer it
// may give passes.
#include <variant>

#include "tools/conform_judges.h"
#include "wire/mad.h"

namespace urxe::tools::conform {
namespace {

using wire::CmAttr;

uint64_t tid(const Frame& f) {
  return f.d.cm.header.transaction_id;
}

// An IBTA CM time, 4.096 us x 2^x, in ns.
int64_t cm_time_ns(uint8_t x) {
  return int64_t{4096} << (x & 31);
}
// The least spacing a peer's CM timer of `formula` ns may give in the capture: 0.95 x the formula (research
// note 5.2: the kernel's timers run 4.6 % short of it), less the jitter of the capture's times, which are
// when urxe's CM service read the frames, not when they were on the wire.
int64_t timer_floor_ns(int64_t formula) {
  return formula * 95 / 100 - 100'000'000;
}
std::string ms(int64_t ns) {
  return std::to_string(ns / 1000000) + " ms";
}

// The frames of one kind the peer sent (from_peer) or received (to_peer) after `after` (null: from the
// start) for which pred holds.
template <class P>
std::vector<const Frame*> cm_frames(const Trace& t, const Frame* after, bool from_peer, CmAttr a, P&& pred) {
  std::vector<const Frame*> r;
  for (const Frame* f = after; (f = t.next(f, [&](const Frame& x) {
         return (from_peer ? x.from_peer() : x.to_peer()) && is_cm(x, a);
       }));)
    if (pred(*f)) r.push_back(f);
  return r;
}

// The first frame rule k hit that is a CM message of kind a (either direction), or null.
const Frame* hit_of(const Trace& t, size_t k, CmAttr a) {
  for (const Frame* f : t.hits(k))
    if (is_cm(*f, a)) return f;
  return nullptr;
}

std::string rej_text(const Frame& f) {
  return "REJ reason " + std::to_string(cm_msg<wire::CmRej>(f).reason) + " (#" + std::to_string(f.n) + ")";
}

bool completed(const Trace& t) {
  return t.local_status == 0 && t.peer_status == 0;
}
std::string not_completed(const Trace& t) {
  return "rping did not complete (urxe " + std::to_string(t.local_status) + ", peer " +
         std::to_string(t.peer_status) + ")";
}

}  // namespace

Finding judge_req_resent(const Trace& t, const Setup&) {
  const Frame* lost = hit_of(t, 0, CmAttr::req);
  if (!lost || !lost->from_peer()) return no_stimulus(t, "the rule never dropped a REQ from the peer");
  const auto& q = cm_msg<wire::CmReq>(*lost);
  const Frame* again = t.next(lost, [](const Frame& f) { return f.from_peer() && is_cm(f, CmAttr::req); });
  if (!again) return fail("the peer never sent its REQ again (comm ID " + hex(q.local_comm_id) + ")", {lost});
  const auto& q2 = cm_msg<wire::CmReq>(*again);
  if (q2.local_comm_id != q.local_comm_id || tid(*again) != tid(*lost))
    return fail("the next REQ is a new attempt, not the same one sent again: TID " + hex(tid(*lost)) +
                    " then " + hex(tid(*again)) + ", comm ID " + hex(q.local_comm_id) + " then " +
                    hex(q2.local_comm_id),
                {lost, again});
  // 2 x PacketLifeTime + Remote CM Response Timeout; the packet lifetime is not in the REQ, but its local
  // ACK timeout (the CA's ACK delay + 2 x PacketLifeTime) bounds it.
  const int64_t gap = again->t_ns - lost->t_ns;
  const int64_t rcrt = cm_time_ns(q.remote_cm_response_timeout),
                ack = cm_time_ns(q.primary.local_ack_timeout);
  const std::string timeouts = "Remote CM Response Timeout " + std::to_string(q.remote_cm_response_timeout) +
                               " (" + ms(rcrt) + "), local ACK timeout " +
                               std::to_string(q.primary.local_ack_timeout) + " (" + ms(ack) + ")";
  if (gap < timer_floor_ns(rcrt))
    return fail("the REQ was sent again after " + ms(gap) + ", sooner than its " + timeouts + " allow",
                {lost, again});
  if (gap > 2 * (rcrt + ack) + 1000000000)
    return fail("the REQ was sent again only after " + ms(gap) + " (" + timeouts + ")", {lost, again});
  return pass("REQ TID " + hex(tid(*lost)) + " comm ID " + hex(q.local_comm_id) +
                  " lost; the peer sent it again " + ms(gap) + " later, the same TID and comm ID (" +
                  timeouts + ")",
              {lost, again});
}

Finding judge_dup_rep(const Trace& t, const Setup&) {
  const Frame* h = hit_of(t, 1, CmAttr::rep);
  if (!h || !peer_spoke(t)) return no_stimulus(t, "the rule never duplicated a REP");
  const auto& r = cm_msg<wire::CmRep>(*h);
  const auto reps =
      cm_frames(t, nullptr, false, CmAttr::rep, [&](const Frame& f) { return tid(f) == tid(*h); });
  if (reps.size() < 2) return no_stimulus(t, "the REP did not reach the peer twice");
  const auto mine = [&](uint32_t remote_comm_id) { return remote_comm_id == r.local_comm_id; };
  const auto rejs = cm_frames(t, reps[0], true, CmAttr::rej,
                              [&](const Frame& f) { return mine(cm_msg<wire::CmRej>(f).remote_comm_id); });
  if (!rejs.empty())
    return fail("the REP sent twice drew " + rej_text(*rejs[0]), {reps[0], reps[1], rejs[0]});
  const auto rtus = cm_frames(t, reps[0], true, CmAttr::rtu,
                              [&](const Frame& f) { return mine(cm_msg<wire::CmRtu>(f).remote_comm_id); });
  const auto mras = cm_frames(t, reps[0], true, CmAttr::mra, [&](const Frame& f) {
    return mine(cm_msg<wire::CmMra>(f).remote_comm_id) && cm_msg<wire::CmMra>(f).message_mraed != 1;
  });
  if (!mras.empty())
    return fail("an MRA for message " + std::to_string(cm_msg<wire::CmMra>(*mras[0]).message_mraed) +
                    " (not the REP) answered the REP",
                {reps[0], reps[1], mras[0]});
  if (rtus.empty()) return fail("no RTU for the REP sent twice", {reps[0], reps[1]});
  if (rtus.size() > reps.size())
    return fail(
        std::to_string(rtus.size()) + " RTUs for a REP sent " + std::to_string(reps.size()) + " times",
        {reps[0], reps[1], rtus[0], rtus[1]});
  if (!completed(t)) return fail(not_completed(t), {reps[0], reps[1], rtus[0]});
  return pass("REP comm ID " + hex(r.local_comm_id) + " sent twice; the peer answered with " +
                  std::to_string(rtus.size()) + " RTU(s) (" + frame_list(rtus) + "), no REJ; rping completed",
              {reps[0], reps[1], rtus[0]});
}

Finding judge_dup_req(const Trace& t, const Setup&) {
  const Frame* h = hit_of(t, 0, CmAttr::req);
  if (!h || !peer_spoke(t)) return no_stimulus(t, "the rule never duplicated a REQ");
  const auto reqs =
      cm_frames(t, nullptr, false, CmAttr::req, [&](const Frame& f) { return tid(f) == tid(*h); });
  if (reqs.size() < 2) return no_stimulus(t, "the REQ did not reach the peer twice");
  const auto& q = cm_msg<wire::CmReq>(*reqs[0]);
  const auto mine = [&](uint32_t remote_comm_id) { return remote_comm_id == q.local_comm_id; };
  const auto rejs = cm_frames(t, reqs[0], true, CmAttr::rej,
                              [&](const Frame& f) { return mine(cm_msg<wire::CmRej>(f).remote_comm_id); });
  if (!rejs.empty())
    return fail("the REQ sent twice drew " + rej_text(*rejs[0]), {reqs[0], reqs[1], rejs[0]});
  const auto reps = cm_frames(t, reqs[0], true, CmAttr::rep,
                              [&](const Frame& f) { return mine(cm_msg<wire::CmRep>(f).remote_comm_id); });
  if (reps.empty()) return fail("no REP for the REQ sent twice", {reqs[0], reqs[1]});
  // A REP for the copy comes at once; one from the peer's REP timer (the REQ's Local CM Response Timeout)
  // seconds later.
  const int64_t rep_timeout = cm_time_ns(q.local_cm_response_timeout);
  for (size_t i = 1; i < reps.size(); ++i)
    if (reps[i]->t_ns - reps[0]->t_ns < rep_timeout / 2)
      return fail(
          "a second REP " + ms(reps[i]->t_ns - reps[0]->t_ns) +
              " after the first, long before the REP timeout: the duplicate REQ was answered with a REP",
          {reqs[0], reqs[1], reps[0], reps[i]});
  const auto mras = cm_frames(t, reqs[0], true, CmAttr::mra,
                              [&](const Frame& f) { return mine(cm_msg<wire::CmMra>(f).remote_comm_id); });
  for (const Frame* m : mras)
    if (cm_msg<wire::CmMra>(*m).message_mraed != 0)
      return fail("an MRA for message " + std::to_string(cm_msg<wire::CmMra>(*m).message_mraed) +
                      " (not the REQ) answered the REQ",
                  {reqs[0], reqs[1], m});
  if (!completed(t)) return fail(not_completed(t), {reqs[0], reqs[1], reps[0]});
  const std::string copy = mras.empty() ? "the copy ignored"
                                        : "an MRA (REQ, service timeout " +
                                              std::to_string(cm_msg<wire::CmMra>(*mras[0]).service_timeout) +
                                              ") for the copy (#" + std::to_string(mras[0]->n) + ")";
  std::vector<const Frame*> ev = {reqs[0], reqs[1]};
  if (!mras.empty() && mras[0]->n < reps[0]->n) ev.push_back(mras[0]);
  ev.push_back(reps[0]);
  if (!mras.empty() && mras[0]->n > reps[0]->n) ev.push_back(mras[0]);
  return pass("REQ TID " + hex(tid(*h)) + " sent twice; one REP (#" + std::to_string(reps[0]->n) + "), " +
                  copy + ", no REJ; rping completed",
              ev);
}

Finding judge_dup_dreq(const Trace& t, const Setup&) {
  const Frame* h = hit_of(t, 1, CmAttr::dreq);
  if (!h || !peer_spoke(t)) return no_stimulus(t, "the rule never duplicated a DREQ");
  const auto& d = cm_msg<wire::CmDreq>(*h);
  const auto dreqs = cm_frames(t, nullptr, false, CmAttr::dreq, [&](const Frame& f) {
    return cm_msg<wire::CmDreq>(f).local_comm_id == d.local_comm_id;
  });
  if (dreqs.size() < 2) return no_stimulus(t, "the DREQ did not reach the peer twice");
  const auto mine = [&](uint32_t remote_comm_id) { return remote_comm_id == d.local_comm_id; };
  const auto rejs = cm_frames(t, dreqs[0], true, CmAttr::rej,
                              [&](const Frame& f) { return mine(cm_msg<wire::CmRej>(f).remote_comm_id); });
  if (!rejs.empty())
    return fail("the DREQ sent twice drew " + rej_text(*rejs[0]), {dreqs[0], dreqs[1], rejs[0]});
  const auto dreps = cm_frames(t, dreqs[0], true, CmAttr::drep,
                               [&](const Frame& f) { return mine(cm_msg<wire::CmDrep>(f).remote_comm_id); });
  if (dreps.empty()) return fail("no DREP for the DREQ sent twice", {dreqs[0], dreqs[1]});
  if (dreps.size() > dreqs.size())
    return fail(std::to_string(dreps.size()) + " DREPs for " + std::to_string(dreqs.size()) + " DREQs",
                {dreqs[0], dreqs[1], dreps[0], dreps[1]});
  // A copy sent after the peer's first DREP arrived finds the peer in TimeWait (or gone): it must be
  // answered.
  size_t late = 0;
  for (const Frame* q : dreqs) late += q->t_ns > dreps[0]->t_ns;
  if (dreps.size() < 1 + late)
    return fail(std::to_string(late) + " DREQ copies reached the peer after its DREP; " +
                    std::to_string(dreps.size() - 1) + " of them answered",
                {dreqs[0], dreqs[1], dreps[0]});
  return pass(
      "DREQ comm ID " + hex(d.local_comm_id) + " sent " + std::to_string(dreqs.size()) + " times; " +
          std::to_string(dreps.size()) + " DREP(s) (" + frame_list(dreps) + ")" +
          (dreps.size() < dreqs.size() ? ", the copy that came while the first was handled ignored" : ""),
      {dreqs[0], dreqs[1], dreps[0]});
}

Finding judge_rep_resent(const Trace& t, const Setup&) {
  const Frame* lost = hit_of(t, 0, CmAttr::rep);
  if (!lost || !lost->from_peer()) return no_stimulus(t, "the rule never dropped a REP from the peer");
  const auto& r = cm_msg<wire::CmRep>(*lost);
  const auto reqs = cm_frames(t, nullptr, false, CmAttr::req, [&](const Frame& f) {
    return f.t_ns < lost->t_ns && cm_msg<wire::CmReq>(f).local_comm_id == r.remote_comm_id;
  });
  if (reqs.empty()) return no_stimulus(t, "the REQ the lost REP answers is not in the capture");
  const auto& q = cm_msg<wire::CmReq>(*reqs.back());
  const Frame* again = t.next(lost, [](const Frame& f) { return f.from_peer() && is_cm(f, CmAttr::rep); });
  if (!again) return fail("the peer never sent its REP again (comm ID " + hex(r.local_comm_id) + ")", {lost});
  const auto& r2 = cm_msg<wire::CmRep>(*again);
  if (tid(*again) != tid(*lost) || r2.local_comm_id != r.local_comm_id ||
      r2.remote_comm_id != r.remote_comm_id)
    return fail("the next REP is not the lost one again: TID " + hex(tid(*lost)) + " then " +
                    hex(tid(*again)) + ", comm ID " + hex(r.local_comm_id) + " then " + hex(r2.local_comm_id),
                {lost, again});
  const int64_t gap = again->t_ns - lost->t_ns, timeout = cm_time_ns(q.local_cm_response_timeout);
  const std::string what = "the REQ's Local CM Response Timeout " +
                           std::to_string(q.local_cm_response_timeout) + " (" + ms(timeout) + ")";
  if (gap < timer_floor_ns(timeout))
    return fail("the REP was sent again after " + ms(gap) + ", sooner than " + what + " allows",
                {lost, again});
  if (gap > 2 * timeout + 1000000000)
    return fail("the REP was sent again only after " + ms(gap) + " (" + what + ")", {lost, again});
  const auto rejs = cm_frames(t, lost, true, CmAttr::rej, [&](const Frame& f) {
    return cm_msg<wire::CmRej>(f).local_comm_id == r.local_comm_id;
  });
  if (!rejs.empty())
    return fail("the peer rejected the connection: " + rej_text(*rejs[0]), {lost, again, rejs[0]});
  if (!completed(t)) return fail(not_completed(t), {lost, again});
  return pass("REP comm ID " + hex(r.local_comm_id) + " lost; the peer sent it again " + ms(gap) +
                  " later (" + what + "), the same TID and comm IDs; rping completed",
              {lost, again});
}

Finding judge_dreq_resend_answered(const Trace& t, const Setup&) {
  const Frame* lost = hit_of(t, 1, CmAttr::drep);
  if (!lost || !lost->from_peer()) return no_stimulus(t, "the rule never dropped a DREP from the peer");
  const auto& dp = cm_msg<wire::CmDrep>(*lost);
  const Frame* again = t.next(lost, [&](const Frame& f) {
    return f.to_peer() && is_cm(f, CmAttr::dreq) &&
           cm_msg<wire::CmDreq>(f).local_comm_id == dp.remote_comm_id;
  });
  if (!again) return no_stimulus(t, "urxe did not send its DREQ again within the run");
  const Frame* answer = t.next(again, [&](const Frame& f) {
    return f.from_peer() && is_cm(f, CmAttr::drep) &&
           cm_msg<wire::CmDrep>(f).remote_comm_id == dp.remote_comm_id;
  });
  if (!answer)
    return fail("no DREP for urxe's DREQ sent again " + ms(again->t_ns - lost->t_ns) + " after the lost DREP",
                {lost, again});
  return pass("the peer's DREP (#" + std::to_string(lost->n) + ") lost; urxe's DREQ sent again " +
                  ms(again->t_ns - lost->t_ns) + " later drew a DREP (#" + std::to_string(answer->n) + ")",
              {lost, again, answer});
}

Finding judge_rej_destroyed_rep_sent(const Trace& t, const Setup&) {
  const Frame* rtu = hit_of(t, 0, CmAttr::rtu);
  const Frame* rep = t.next(nullptr, [](const Frame& f) { return f.from_peer() && is_cm(f, CmAttr::rep); });
  if (!rep || !rtu) return no_stimulus(t, "no REP from the peer, or urxe's RTU was not held back");
  const auto& r = cm_msg<wire::CmRep>(*rep);
  const Frame* rej = t.next(rep, [&](const Frame& f) {
    return f.from_peer() && is_cm(f, CmAttr::rej) && cm_msg<wire::CmRej>(f).local_comm_id == r.local_comm_id;
  });
  const Frame* dreq = t.next(rep, [&](const Frame& f) {
    return f.from_peer() && is_cm(f, CmAttr::dreq) &&
           cm_msg<wire::CmDreq>(f).local_comm_id == r.local_comm_id;
  });
  if (dreq && (!rej || dreq->n < rej->n))
    return fail("the peer sent a DREQ (#" + std::to_string(dreq->n) +
                    "): it took the connection as established without an RTU or any packet",
                {rep, rtu, dreq});
  if (!rej)
    return fail("no REJ from the peer after its rping was killed with its REP unanswered", {rep, rtu});
  const auto& j = cm_msg<wire::CmRej>(*rej);
  if (j.reason != 28 || j.message_rejected != 2 || j.remote_comm_id != r.remote_comm_id)
    return fail("REJ reason " + std::to_string(j.reason) + ", MessageRejected " +
                    std::to_string(j.message_rejected) + ", remote comm ID " + hex(j.remote_comm_id) +
                    " (expected 28, 2, " + hex(r.remote_comm_id) + ")",
                {rep, rtu, rej});
  return pass("REP comm ID " + hex(r.local_comm_id) +
                  " unanswered; the killed peer sent REJ reason 28, "
                  "MessageRejected 2 (#" +
                  std::to_string(rej->n) + ")",
              {rep, rtu, rej});
}

Finding judge_rej_destroyed_req_sent(const Trace& t, const Setup&) {
  const Frame* rep = hit_of(t, 0, CmAttr::rep);
  const Frame* req = t.next(nullptr, [](const Frame& f) { return f.from_peer() && is_cm(f, CmAttr::req); });
  if (!req || !rep) return no_stimulus(t, "no REQ from the peer, or urxe's REP was not held back");
  const auto& q = cm_msg<wire::CmReq>(*req);
  const Frame* rej = t.next(req, [&](const Frame& f) {
    return f.from_peer() && is_cm(f, CmAttr::rej) && cm_msg<wire::CmRej>(f).local_comm_id == q.local_comm_id;
  });
  if (!rej)
    return fail("no REJ from the peer after its rping was killed with its REQ unanswered", {req, rep});
  const auto& j = cm_msg<wire::CmRej>(*rej);
  uint64_t ari = 0;
  for (size_t i = 0; i < 8; ++i) ari = ari << 8 | j.additional_reject_information[i];
  if (j.reason != 4 || j.message_rejected != 2 || j.reject_info_length < 8 || ari != q.local_ca_guid)
    return fail("REJ reason " + std::to_string(j.reason) + ", MessageRejected " +
                    std::to_string(j.message_rejected) + ", ARI length " +
                    std::to_string(j.reject_info_length) + " GUID " + hex(ari) + " (expected 4, 2, 8 " +
                    hex(q.local_ca_guid) + ")",
                {req, rep, rej});
  return pass("REQ comm ID " + hex(q.local_comm_id) +
                  " unanswered; the killed peer sent REJ reason 4 (timeout), "
                  "MessageRejected 2, ARI its node GUID " +
                  hex(ari) + " (#" + std::to_string(rej->n) + ")",
              {req, rep, rej});
}

}  // namespace urxe::tools::conform
