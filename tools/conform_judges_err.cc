// `urxe conform` judges: error NAKs (the responder's class C/D errors) and what follows them.
#include "tools/conform_judges.h"

namespace urxe::tools::conform {
namespace {

// The request a mutating rule changed, and the peer's first ACK/NAK at or after its PSN.
struct Answer {
  const Frame* req = nullptr;
  const Frame* reply = nullptr;
};
Answer answer_to_mutated(const Trace& t) {
  Answer a;
  a.req = first_request_hit(t);
  if (a.req)
    a.reply = t.next(a.req, [&](const Frame& f) {
      return f.from_peer() && f.is_ack_opcode() && psn_diff(a.req->psn(), f.psn()) >= 0;
    });
  return a;
}

Finding expect_nak(const Trace& t, int code, std::string_view what) {
  const Answer a = answer_to_mutated(t);
  if (!a.req || !peer_spoke(t)) return no_stimulus(t, "the rule never changed a request");
  if (!a.reply) return fail("no NAK (nor ACK) for the changed request at PSN " + hex(a.req->psn()), {a.req});
  if (!a.reply->is_nak(code))
    return fail("answered with " + describe(*a.reply) + ", not " + std::string(what), {a.req, a.reply});
  if (a.reply->psn() != a.req->psn())
    return fail("the NAK names PSN " + hex(a.reply->psn()) + ", not the request's " + hex(a.req->psn()),
                {a.req, a.reply});
  return pass(std::string(what) + " at PSN " + hex(a.req->psn()) + " (" + describe(*a.reply) + ")",
              {a.req, a.reply});
}

}  // namespace

Finding judge_access_nak(const Trace& t, const Setup&) {
  return expect_nak(t, 2, "NAK remote access error (0x62)");
}

Finding judge_range_nak(const Trace& t, const Setup&) {
  return expect_nak(t, 2, "NAK remote access error (0x62)");
}

Finding judge_invalid_request_nak(const Trace& t, const Setup&) {
  return expect_nak(t, 1, "NAK invalid request (0x61)");
}

Finding judge_silence_after_error_nak(const Trace& t, const Setup&) {
  const Frame* nak = t.next(nullptr, [](const Frame& f) {
    return f.from_peer() && f.is_ack_opcode() && f.is_nak() && !f.is_nak(0);
  });
  if (!nak) return no_stimulus(t, "the peer sent no error NAK");
  const Frame* later = t.next(nak, [&](const Frame& f) {
    return f.from_peer() && (f.is_ack() || f.is_read_response() || f.is_atomic_ack()) &&
           psn_diff(nak->psn(), f.psn()) > 0;
  });
  if (later)
    return fail("after " + describe(*nak) + " the peer still acknowledged " + describe(*later), {nak, later});
  // The requests beyond the NAKed PSN that reached the peer, in flight when it NAKed or sent later.
  const size_t sent = t.count(
      [&](const Frame& f) { return f.to_peer() && f.is_request() && psn_diff(nak->psn(), f.psn()) > 0; });
  return pass("nothing acknowledged after " + describe(*nak) + " (" + std::to_string(sent) +
                  " requests beyond its PSN reached the peer)",
              {nak});
}

}  // namespace urxe::tools::conform
