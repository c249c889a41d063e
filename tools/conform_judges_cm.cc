// `urxe conform` judges: communication management (CM MADs on QP1).
#include <variant>

#include "tools/conform_judges.h"
#include "wire/mad.h"

namespace urxe::tools::conform {
bool is_cm(const Frame& f, wire::CmAttr a) {
  return f.cm() && f.d.mad_error == wire::MadError::ok &&
         f.d.cm.header.attribute_id == static_cast<uint16_t>(a);
}

Finding judge_rej_no_listener(const Trace& t, const Setup&) {
  const Frame* req =
      t.next(nullptr, [](const Frame& f) { return f.to_peer() && is_cm(f, wire::CmAttr::req); });
  if (!req) return no_stimulus(t, "urxe sent no REQ");
  const Frame* rej = t.next(req, [](const Frame& f) { return f.from_peer() && is_cm(f, wire::CmAttr::rej); });
  const Frame* rep = t.next(req, [](const Frame& f) { return f.from_peer() && is_cm(f, wire::CmAttr::rep); });
  if (rep)
    return fail("the peer accepted a REQ nobody listens for (REP #" + std::to_string(rep->n) + ")",
                {req, rep});
  if (!rej) return fail("no REJ for a REQ to a service with no listener (the peer stayed silent)", {req});
  const auto& m = std::get<wire::CmRej>(rej->d.cm.msg);
  const auto& q = std::get<wire::CmReq>(req->d.cm.msg);
  if (m.reason != 8 || m.message_rejected != 0)
    return fail("REJ reason " + std::to_string(m.reason) + ", MessageRejected " +
                    std::to_string(m.message_rejected) + " (expected 8, 0)",
                {req, rej});
  if (m.remote_comm_id != q.local_comm_id)
    return fail(
        "the REJ's remote comm ID " + hex(m.remote_comm_id) + " is not the REQ's " + hex(q.local_comm_id),
        {req, rej});
  return pass("REJ reason 8 (invalid service ID), MessageRejected REQ, for comm ID " + hex(q.local_comm_id),
              {req, rej});
}

}  // namespace urxe::tools::conform
