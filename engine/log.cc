// Log lines and notes for the EventSink: why a QP went to the error state, in words a user can act on.
// Formatted on the stack (no allocation); called only on rare events, never per packet in normal operation.
#include <cinttypes>
#include <cstdio>

#include "engine/internal.h"
#include "wire/opcode.h"

namespace urxe::engine {

namespace {
const char* type_name(QpType t) {
  return t == QPT_RC         ? "RC"
         : t == QPT_UC       ? "UC"
         : t == QPT_UD       ? "UD"
         : t == QPT_XRC_SEND ? "XRC_SEND"
         : t == QPT_XRC_RECV ? "XRC_RECV"
                             : "?";
}
}  // namespace

const char* note_name(Note n) {
  static const char* const names[] = {"malformed", "bad ICRC",  "unknown QPN",   "QP state",
                                      "bad P_Key", "bad Q_Key", "RNR NAKs sent", "RNR NAKs received"};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(Note::num_notes));
  const auto i = static_cast<size_t>(n);
  return i < sizeof(names) / sizeof(names[0]) ? names[i] : "?";
}

void EngineImpl::log_qp_line(LogLevel level, const Qp& q, const char* what) {
  if (!sink) return;
  char line[320];
  std::snprintf(line, sizeof line, "QP 0x%06x (%s) %s", q.qpn, type_name(q.type), what);
  sink->log(level, line);
}

// The requester side failed a WQE with `cause` (the completer's verdict): the QP goes to ERR (RC) or SQE.
void EngineImpl::log_qp_error(const Qp& q, WcStatus cause, uint32_t psn) {
  if (!sink) return;
  char why[240];
  switch (cause) {
    case WC_RETRY_EXC_ERR:
      std::snprintf(why, sizeof why,
                    "retry exhausted: no answer from QP 0x%06x after retry_cnt %u retransmissions (timeout "
                    "%u); is the peer process still running and reachable?",
                    q.attr.dest_qp_num, q.attr.retry_cnt, q.attr.timeout);
      break;
    case WC_RNR_RETRY_EXC_ERR:
      std::snprintf(why, sizeof why,
                    "RNR retry exhausted: QP 0x%06x kept answering RNR NAK (no receive posted) after "
                    "rnr_retry %u",
                    q.attr.dest_qp_num, q.attr.rnr_retry);
      break;
    case WC_REM_ACCESS_ERR:
      std::snprintf(why, sizeof why,
                    "remote access error NAK from QP 0x%06x (rkey, address range or access rights refused)",
                    q.attr.dest_qp_num);
      break;
    case WC_REM_INV_REQ_ERR:
      std::snprintf(why, sizeof why,
                    "remote invalid request NAK from QP 0x%06x (opcode, length or message size refused)",
                    q.attr.dest_qp_num);
      break;
    case WC_REM_OP_ERR:
      std::snprintf(why, sizeof why, "remote operational error NAK from QP 0x%06x", q.attr.dest_qp_num);
      break;
    case WC_LOC_PROT_ERR:
      std::snprintf(why, sizeof why,
                    "local protection error (an SGE's lkey, address range or access rights do not match a "
                    "registered MR)");
      break;
    default:
      std::snprintf(why, sizeof why, "%s", wc_status_str(cause));
      break;
  }
  char line[400];
  const bool rc = q.reliable;
  if (psn != UINT32_MAX)
    std::snprintf(line, sizeof line, "QP 0x%06x (%s) to %s at PSN 0x%06x: %s", q.qpn, type_name(q.type),
                  rc ? "error" : "SQE", psn, why);
  else
    std::snprintf(line, sizeof line, "QP 0x%06x (%s) to %s: %s", q.qpn, type_name(q.type),
                  rc ? "error" : "SQE", why);
  sink->log(LogLevel::error, line);
}

// The responder NAKed a request it cannot take and moved the QP to ERR (IBTA 9.9.3 class C/D errors).
void EngineImpl::log_responder_error(const Qp& q, uint8_t nak_code, const wire::Packet& pkt) {
  if (!sink) return;
  const bool xrc_srq_bad = q.type == QPT_XRC_RECV && !q.srq;  // xrc_bind refused the XRCETH's SRQ
  const char* what = xrc_srq_bad ? "invalid request (the XRCETH names no XRC SRQ of the target's XRC domain)"
                     : nak_code == static_cast<uint8_t>(wire::NakCode::invalid_request)
                         ? "invalid request (opcode out of sequence, bad length, or a message larger than "
                           "the receive buffer)"
                     : nak_code == static_cast<uint8_t>(wire::NakCode::remote_access_error)
                         ? "remote access error (rkey, address range or access rights of the request refused)"
                     : nak_code == static_cast<uint8_t>(wire::NakCode::remote_operational_error)
                         ? "remote operational error (the receive buffer's lkey failed)"
                         : "error";
  const std::string_view op = pkt.info ? pkt.info->name : std::string_view("?");
  char line[400];
  std::snprintf(
      line, sizeof line, "QP 0x%06x (%s) to error: sent NAK %s for %.*s at PSN 0x%06x from QP 0x%06x", q.qpn,
      type_name(q.type), what, static_cast<int>(op.size()), op.data(), pkt.bth.psn, q.attr.dest_qp_num);
  sink->log(LogLevel::error, line);
}

}  // namespace urxe::engine
