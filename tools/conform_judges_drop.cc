// `urxe conform` judges: silent drops the peer owes for packets it must not take (a wrong Q_Key, an unknown
// transport header version) and for the rest of a UC message after a lost packet.
#include "tools/conform_judges.h"
#include "wire/opcode.h"

namespace urxe::tools::conform {

Finding judge_qkey_dropped(const Trace& t, const Setup&) {
  const Frame* m = first_request_hit(t);
  if (!m || !peer_spoke(t)) return no_stimulus(t, "the rule never changed a UD SEND");
  // The peer's replies go to urxe's UD QP, the datagrams' source QP.
  const uint32_t me = m->d.pkt.deth.src_qp;
  const auto to_me = [&](const Frame& f) {
    return f.from_peer() && f.d.bth_parsed && !f.cm() && f.dqpn() == me;
  };
  const Frame* earlier = nullptr;
  for (const Frame& f : t.frames) {
    if (&f >= m) break;
    if (to_me(f)) earlier = &f;
  }
  if (!earlier) return no_stimulus(t, "the peer answered none of the datagrams before the changed one");
  const Frame* good = t.next(nullptr, [&](const Frame& f) {
    return f.to_peer() && f.is_request() && f.fault_rule < 0 && f.d.pkt.deth.src_qp == me;
  });
  const std::string want = good ? " (the QP's is " + hex(good->d.pkt.deth.qkey) + ")" : "";
  if (const Frame* reply = t.next(m, to_me))
    return fail("the peer answered the datagram with Q_Key " + hex(m->d.pkt.deth.qkey) + want + ": " +
                    describe(*reply),
                {m, reply});
  return pass("no reply to the UD SEND with Q_Key " + hex(m->d.pkt.deth.qkey) + want + " in the " +
                  std::to_string((t.duration_ns - m->t_ns) / 1000000) +
                  " ms the run went on; the peer had answered the datagrams before it",
              {earlier, m});
}

Finding judge_tver_dropped(const Trace& t, const Setup&) {
  // The decoder reads a frame with TVer 1 only up to its BTH (no header version it knows): the rule's hit is
  // the stimulus, its BTH PSN the request's.
  const Frame* m = nullptr;
  for (const Frame* f : t.hits(0))
    if (f->to_peer() && f->d.bth_parsed && f->d.pkt.bth.tver != 0) {
      m = f;
      break;
    }
  if (!m || !peer_spoke(t)) return no_stimulus(t, "the rule never changed a request's TVer");
  return silent_drop_of(t, m, "TVer " + std::to_string(m->d.pkt.bth.tver));
}

Finding judge_uc_gap(const Trace& t, const Setup&) {
  const Frame* lost = nullptr;
  for (const Frame* f : t.hits(0))
    if (f->not_sent && f->is_request()) {
      lost = f;
      break;
    }
  if (!lost) return no_stimulus(t, "the rule never dropped a UC packet");
  const auto starts = [&](const Frame& f) {
    return f.to_peer() && f.is_request() && f.dqpn() == lost->dqpn() && f.d.pkt.info->is_first();
  };
  // By PSN, not by time: a dropped frame's capture may precede the batch it left in.
  const Frame* next_msg =
      t.next(nullptr, [&](const Frame& f) { return starts(f) && psn_diff(lost->psn(), f.psn()) > 0; });
  if (!next_msg) return no_stimulus(t, "urxe sent no message after the broken one");
  const size_t sent = t.count(starts);
  // UC has no response of any kind: whatever the peer sent on a RoCE QP is a deviation.
  if (const Frame* f =
          t.next(nullptr, [](const Frame& x) { return x.from_peer() && x.d.bth_parsed && !x.cm(); }))
    return fail("the peer sent a frame on a UC connection: " + describe(*f), {lost, f});
  if (t.peer_status != 0)
    return fail("the peer's ib_send_bw did not receive the messages it waited for (" +
                    (t.peer_timed_out ? std::string("killed at the run's timeout")
                                      : "exit status " + std::to_string(t.peer_status)) +
                    "): the messages after the broken one were not delivered",
                {lost, next_msg});
  return pass("PSN " + hex(lost->psn()) + " of a UC SEND lost; no frame from the peer, and its ib_send_bw " +
                  "received the messages it waited for out of the " + std::to_string(sent) + " urxe sent",
              {lost, next_msg});
}

}  // namespace urxe::tools::conform
