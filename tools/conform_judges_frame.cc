// `urxe conform` judges: what the peer's own frames carry — RoCEv2 UDP ports, pad, payload lengths, AETH
// syndromes — judged over every frame it sent in a run, and the CNPs it owes for CE-marked READ responses.
#include <map>
#include <set>
#include <tuple>

#include "tools/conform_judges.h"
#include "wire/opcode.h"

namespace urxe::tools::conform {
namespace {

// A frame of the peer on a transport QP (not QP1's CM MADs, not a CNP), decoded whole.
bool peer_data(const Frame& f) {
  return f.from_peer() && f.good() && !f.cm() && !f.is_cnp() && f.d.pkt.info;
}
bool carries_payload(const Frame& f) {
  return f.d.pkt.info->has_payload && f.d.pkt.info->position != wire::Position::none;
}

}  // namespace

Finding judge_udp_ports(const Trace& t, const Setup&) {
  // One source port per flow: (source address, destination address, DestQP).
  std::map<std::tuple<wire::Gid, wire::Gid, uint32_t>, const Frame*> flows;
  std::set<uint16_t> ports;
  size_t n = 0;
  for (const Frame& f : t.frames) {
    if (!peer_data(f)) continue;
    ++n;
    const uint16_t sport = f.d.pkt.udp.sport;
    ports.insert(sport);
    const auto [it, fresh] = flows.try_emplace({f.d.pkt.src_gid(), f.d.pkt.dst_gid(), f.dqpn()}, &f);
    if (!fresh && it->second->d.pkt.udp.sport != sport)
      return fail("the peer's frames to QP " + hex(f.dqpn()) + " changed UDP source port from " +
                      hex(it->second->d.pkt.udp.sport) + " to " + hex(sport),
                  {it->second, &f});
  }
  if (!n) return no_stimulus(t, "the peer sent no frame on a transport QP");
  std::string list;
  bool linux_range = true;
  for (const uint16_t p : ports) {
    list += (list.empty() ? "" : ", ") + hex(p);
    linux_range = linux_range && p >= 0xc000;
  }
  // urxe's port takes only destination port 4791: a frame to another port never reaches the capture.
  return pass(std::to_string(n) + " frames to port 4791 in " + std::to_string(flows.size()) +
                  " flow(s), one source port each (" + list + (linux_range ? ", in" : ", not all in") +
                  " 0xC000-0xFFFF)",
              {flows.begin()->second});
}

Finding judge_pad(const Trace& t, const Setup&) {
  size_t checked = 0;
  const Frame* padded = nullptr;
  for (const Frame& f : t.frames) {
    if (!peer_data(f) || !carries_payload(f)) continue;
    ++checked;
    const uint8_t pad = f.d.pkt.bth.pad;
    if (!f.d.pkt.info->is_last() && pad != 0)
      return fail(
          "PadCnt " + std::to_string(pad) + " on a packet that does not end its message: " + describe(f),
          {&f});
    const size_t end = f.d.pkt.payload_offset + f.d.pkt.payload_len;
    for (uint8_t i = 0; i < pad; ++i)
      if (end + i >= f.raw->data.size() || f.raw->data[end + i] != 0)
        return fail("pad byte " + std::to_string(i) + " of " + describe(f) + " is not zero", {&f});
    if (pad && !padded) padded = &f;
  }
  if (!checked) return no_stimulus(t, "the peer sent no packet with a payload");
  if (!padded) return no_stimulus(t, "the peer sent no message whose length needed pad");
  return pass(std::to_string(checked) +
                  " payload packets from the peer: PadCnt 0 on FIRST/MIDDLE, pad bytes "
                  "zero (first padded: " +
                  describe(*padded) + ", PadCnt " + std::to_string(padded->d.pkt.bth.pad) + ")",
              {padded});
}

Finding judge_payload_lengths(const Trace& t, const Setup&) {
  // The path MTU of each of the peer's QPs (by the QP its frames go to): its first FIRST/MIDDLE's payload.
  std::map<uint32_t, const Frame*> mtu;
  size_t checked = 0;
  for (const Frame& f : t.frames) {
    if (!peer_data(f) || !carries_payload(f) || f.d.pkt.info->is_last()) continue;
    const uint32_t len = f.d.pkt.payload_len;
    const auto [it, fresh] = mtu.try_emplace(f.dqpn(), &f);
    if (fresh && (len < 256 || len > 4096 || (len & (len - 1)) != 0))
      return fail("a FIRST/MIDDLE payload of " + std::to_string(len) + " bytes, no IB MTU: " + describe(f),
                  {&f});
    if (len != it->second->d.pkt.payload_len)
      return fail("FIRST/MIDDLE payloads of " + std::to_string(it->second->d.pkt.payload_len) + " and " +
                      std::to_string(len) + " bytes on one QP",
                  {it->second, &f});
    ++checked;
  }
  if (mtu.empty()) return no_stimulus(t, "the peer sent no multi-packet message");
  for (const Frame& f : t.frames) {
    if (!peer_data(f) || !carries_payload(f) || !f.d.pkt.info->is_last()) continue;
    const auto it = mtu.find(f.dqpn());
    const uint32_t len = f.d.pkt.payload_len, max = it == mtu.end() ? 4096 : it->second->d.pkt.payload_len;
    if (len > max)
      return fail(std::to_string(len) + " bytes of payload, more than the path MTU " + std::to_string(max) +
                      ": " + describe(f),
                  {&f});
    if (len == 0 && f.d.pkt.info->position == wire::Position::last)
      return fail("a LAST packet without payload: " + describe(f), {&f});
    ++checked;
  }
  const Frame* first = mtu.begin()->second;
  return pass(std::to_string(checked) + " payload packets from the peer: FIRST/MIDDLE exactly " +
                  std::to_string(first->d.pkt.payload_len) + " bytes, LAST/ONLY no longer",
              {first});
}

Finding judge_credit_codes(const Trace& t, const Setup&) {
  std::set<uint8_t> codes;
  const Frame* first = nullptr;
  for (const Frame& f : t.frames) {
    if (!f.from_peer() || !f.d.bth_parsed || !f.d.pkt.info || !(f.d.pkt.info->headers & wire::kAeth))
      continue;
    const uint8_t s = f.syndrome();
    if (s & 0x80)
      return fail("AETH syndrome " + hex(s) + " has the reserved bit 7 set: " + describe(f), {&f});
    const auto type = f.d.pkt.aeth.type();
    if (static_cast<int>(type) == 2)
      return fail("AETH syndrome " + hex(s) + " has the reserved type 010: " + describe(f), {&f});
    if (type == wire::AethType::nak && f.d.pkt.aeth.value() > 4)
      return fail("AETH NAK code " + std::to_string(f.d.pkt.aeth.value()) + " is reserved: " + describe(f),
                  {&f});
    if (type == wire::AethType::ack) {
      codes.insert(f.d.pkt.aeth.value());
      if (!first) first = &f;
    }
  }
  if (!first) return no_stimulus(t, "the peer sent no ACK");
  std::string list;
  for (const uint8_t c : codes) list += (list.empty() ? "" : ", ") + hex(c);
  const bool none = codes.size() == 1 && *codes.begin() == wire::kCreditInvalid;
  return pass(
      "every AETH syndrome defined; ACK credit codes " + list +
          (none ? " (no credit count: legal, the requester then sends without end-to-end credits)" : ""),
      {first});
}

Finding judge_cnp_for_read_ce(const Trace& t, const Setup&) {
  const auto marked = t.hits(0);
  if (marked.empty() || !peer_spoke(t)) return no_stimulus(t, "the rule marked no READ response");
  // The CNP goes to the QP that sent the marked responses: the QP the peer's READ requests go to.
  const Frame* req = t.next(nullptr, [](const Frame& f) { return f.from_peer() && f.is_request(); });
  const Frame* cnp = t.next(marked[0], [](const Frame& f) { return f.from_peer() && f.is_cnp(); });
  if (!cnp)
    return fail("no CNP for " + std::to_string(marked.size()) + " CE-marked READ responses", {marked[0]});
  if (req && cnp->dqpn() != req->dqpn())
    return fail("the CNP goes to QP " + hex(cnp->dqpn()) + ", not the responder's QP " + hex(req->dqpn()),
                {marked[0], cnp});
  const size_t n = t.count([](const Frame& f) { return f.from_peer() && f.is_cnp(); });
  return pass(std::to_string(n) + " CNPs for " + std::to_string(marked.size()) +
                  " CE-marked READ responses, the first to QP " + hex(cnp->dqpn()),
              {marked[0], cnp});
}

}  // namespace urxe::tools::conform
