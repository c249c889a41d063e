// `urxe conform` judges: duplicate requests and responder resources.
#include "tools/conform_judges.h"
#include "wire/opcode.h"

namespace urxe::tools::conform {

Finding judge_dup_request_acked(const Trace& t, const Setup&) {
  const Frame* h = first_hit(t);
  if (!h || !peer_spoke(t)) return no_stimulus(t, "the duplicate rule never hit");
  const uint32_t p = h->psn();
  std::vector<const Frame*> acks;
  for (const Frame& f : t.frames)
    if (f.from_peer() && f.is_ack_opcode() && f.psn() == p) acks.push_back(&f);
  for (const Frame* a : acks)
    if (!a->is_ack()) return fail("the duplicate drew a NAK: " + describe(*a), {h, a});
  // The copy reached the peer right after the original: one ACK after both covers both (coalescing).
  const std::vector<const Frame*> copies = t.hits(0);
  const Frame* last_copy = copies.back();
  const Frame* cover = t.next(
      last_copy, [&](const Frame& f) { return f.from_peer() && f.is_ack() && psn_diff(p, f.psn()) >= 0; });
  if (!cover) return fail("no ACK at or beyond PSN " + hex(p) + " after its duplicate", {h, last_copy});
  if (t.local_status != 0 || t.peer_status != 0)
    return fail("the tools did not both complete (urxe " + std::to_string(t.local_status) + ", peer " +
                    std::to_string(t.peer_status) + "): the duplicate was executed or lost the connection",
                {h, cover});
  return pass(describe(*h) + " sent twice; the peer acknowledged it after the copy (" + describe(*cover) +
                  ") and both tools completed every iteration",
              {h, last_copy, cover});
}

}  // namespace urxe::tools::conform

namespace urxe::tools::conform {

Finding judge_dup_atomic_replayed(const Trace& t, const Setup&) {
  // The peer's answer lost on the way in makes urxe send the atomic again: a duplicate the peer must answer
  // from the result it saved, with the same original data.
  const Frame* lost = nullptr;
  for (const Frame* f : t.hits(0))
    if (f->not_delivered && f->is_atomic_ack()) {
      lost = f;
      break;
    }
  if (!lost || !peer_spoke(t)) return no_stimulus(t, "the rule never dropped an ATOMIC ACKNOWLEDGE");
  const uint32_t p = lost->psn();
  const uint64_t orig = lost->d.pkt.atomic_ack_eth.orig_data;
  const Frame* again =
      t.next(lost, [&](const Frame& f) { return f.to_peer() && f.is_request() && f.psn() == p; });
  if (!again) return no_stimulus(t, "urxe did not send the atomic again");
  const Frame* answer = t.next(again, [&](const Frame& f) {
    return f.from_peer() && (f.is_ack_opcode() || f.is_atomic_ack()) && f.psn() == p;
  });
  if (!answer) return fail("no answer to the duplicate atomic at PSN " + hex(p), {lost, again});
  if (!answer->is_atomic_ack())
    return fail("the duplicate atomic drew " + describe(*answer), {lost, again, answer});
  const uint64_t got = answer->d.pkt.atomic_ack_eth.orig_data;
  if (got != orig)
    return fail("the duplicate was executed again: original data " + hex(orig) + " first, " + hex(got) +
                    " for the duplicate",
                {lost, again, answer});
  return pass("ATOMIC ACKNOWLEDGE PSN " + hex(p) +
                  " lost; urxe sent the atomic again and the peer answered with the "
                  "saved original data " +
                  hex(orig),
              {lost, again, answer});
}

}  // namespace urxe::tools::conform
