// `urxe conform` judges: error NAKs for requests urxe's tools sent unchanged (no fault rule): a WRITE to a
// region without remote write access, a SEND longer than the receive buffer.
#include "tools/conform_judges.h"
#include "wire/opcode.h"

namespace urxe::tools::conform {
namespace {

// urxe's first message to the peer: its first and last packet as first sent.
struct Message {
  const Frame* first = nullptr;
  const Frame* last = nullptr;
};
Message first_message(const Trace& t) {
  Message m;
  m.first = t.next(nullptr, [](const Frame& f) { return f.to_peer() && f.is_request(); });
  if (m.first)
    m.last = m.first->d.pkt.info->is_last() ? m.first : t.next(m.first, [&](const Frame& f) {
      return f.to_peer() && f.is_request() && f.dqpn() == m.first->dqpn() && f.d.pkt.info->is_last();
    });
  return m;
}

// The message draws a NAK with `code`, at one of its PSNs, and is never acknowledged whole.
Finding expect_message_nak(const Trace& t, int code, std::string_view what) {
  const Message m = first_message(t);
  if (!m.first || !m.last || !peer_spoke(t)) return no_stimulus(t, "urxe sent no whole message");
  const uint32_t p0 = m.first->psn(), p1 = m.last->psn();
  const Frame* cover = t.next(
      m.first, [&](const Frame& f) { return f.from_peer() && f.is_ack() && psn_diff(p1, f.psn()) >= 0; });
  const Frame* nak = t.next(m.first, [&](const Frame& f) { return f.from_peer() && f.is_nak(); });
  const std::string range = p0 == p1 ? "PSN " + hex(p0) : "PSNs " + hex(p0) + "-" + hex(p1);
  if (cover && (!nak || cover < nak))
    return fail("the peer acknowledged the whole message (" + range + "): " + describe(*cover),
                {m.first, cover});
  if (!nak) return fail("no NAK for the message at " + range, {m.first, m.last});
  if (!nak->is_nak(code))
    return fail("answered with " + describe(*nak) + ", not " + std::string(what), {m.first, nak});
  if (psn_diff(p0, nak->psn()) < 0 || psn_diff(nak->psn(), p1) < 0)
    return fail("the NAK names PSN " + hex(nak->psn()) + ", outside the message's " + range, {m.first, nak});
  return pass(std::string(what) + " for the message at " + range + " (" + describe(*nak) + ")",
              {m.first, nak});
}

}  // namespace

Finding judge_rights_nak(const Trace& t, const Setup&) {
  return expect_message_nak(t, 2, "NAK remote access error (0x62)");
}

Finding judge_overflow_nak(const Trace& t, const Setup&) {
  return expect_message_nak(t, 1, "NAK invalid request (0x61)");
}

}  // namespace urxe::tools::conform
