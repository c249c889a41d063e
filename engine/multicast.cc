// UD multicast: attaching QPs to groups (ibv_attach_mcast), the port's multicast filter, and the copies of
// our own frames to a group for our own members. Receiving is rx.cc's (rx_mcast).
#include <algorithm>

#include "engine/internal.h"

namespace urxe::engine {

namespace {

// The largest frame the engine builds for UD: an MTU of 4096 bytes of payload, the headers around it.
constexpr uint32_t kMaxUdFrame = 4096 + 256;

bool gid_less(const McGroup& g, const wire::Gid& mgid) {
  return g.mgid < mgid;
}

}  // namespace

McGroup* EngineImpl::mc_find(const wire::Gid& mgid) {
  auto it = std::lower_bound(mc_groups.begin(), mc_groups.end(), mgid, gid_less);
  return it != mc_groups.end() && it->mgid == mgid ? &*it : nullptr;
}

int EngineImpl::attach_mcast(uint32_t qpn, const wire::Gid& mgid) {
  Qp* q = qp_get(qpn);
  if (!q || q->type != QPT_UD || !gid_is_multicast(mgid)) return EINVAL;
  const DeviceAttr& d = config.device;
  auto it = std::lower_bound(mc_groups.begin(), mc_groups.end(), mgid, gid_less);
  const bool found = it != mc_groups.end() && it->mgid == mgid;
  if (found && std::find(it->qpns.begin(), it->qpns.end(), qpn) != it->qpns.end()) return 0;
  if ((!found && mc_groups.size() >= d.max_mcast_grp) ||
      (found && it->qpns.size() >= d.max_mcast_qp_attach) || mc_attached >= d.max_total_mcast_qp_attach)
    return ENOMEM;
  if (!found) {
    const wire::MacAddr mac = multicast_mac(mgid);
    auto m = std::find_if(mc_macs.begin(), mc_macs.end(), [&](const auto& e) { return e.first == mac; });
    if (m == mc_macs.end()) {
      if (!port.set_multicast_mac(mac, true)) return EIO;
      mc_macs.emplace_back(mac, 1);
    } else {
      m->second++;
    }
    if (mc_loop_buf.empty()) mc_loop_buf.resize(kMaxUdFrame);
    it = mc_groups.insert(it, McGroup{mgid, {}});
  }
  it->qpns.push_back(qpn);
  q->mcast_groups++;
  mc_attached++;
  return 0;
}

int EngineImpl::detach_mcast(uint32_t qpn, const wire::Gid& mgid) {
  Qp* q = qp_get(qpn);
  McGroup* g = q && gid_is_multicast(mgid) ? mc_find(mgid) : nullptr;
  if (!g) return EINVAL;
  auto m = std::find(g->qpns.begin(), g->qpns.end(), qpn);
  if (m == g->qpns.end()) return EINVAL;
  g->qpns.erase(m);
  q->mcast_groups--;
  mc_attached--;
  if (!g->qpns.empty()) return 0;
  mc_groups.erase(mc_groups.begin() + (g - mc_groups.data()));
  const wire::MacAddr mac = multicast_mac(mgid);
  auto e = std::find_if(mc_macs.begin(), mc_macs.end(), [&](const auto& x) { return x.first == mac; });
  if (e != mc_macs.end() && --e->second == 0) {
    port.set_multicast_mac(mac, false);  // (a port that cannot drop it only passes more frames)
    mc_macs.erase(e);
  }
  return 0;
}

// A NIC delivers a multicast frame to its own attached QPs too (ConnectX's loopback; kernel rxe gets the
// IP stack's multicast loopback copy), the sending QP included. The frame just queued is copied whole (its
// payload may still be in the application's memory) and received as if from the wire, before the round
// goes on.
void EngineImpl::mc_loopback() {
  const PacketBuf& f = tx.back();
  if (f.len > mc_loop_buf.size()) return;
  std::memcpy(mc_loop_buf.data(), f.data, f.len);
  if (f.gather) std::memcpy(mc_loop_buf.data() + f.gather_offset, f.gather, f.gather_len);
  wire::Packet pkt;
  wire::ParseOptions opt;
  opt.verify_icrc = opt.verify_checksums = false;  // made here, not received
  if (wire::parse_frame(wire::ByteSpan(mc_loop_buf.data(), f.len), pkt, opt) != wire::ParseError::ok) return;
  PacketBuf copy{};
  copy.data = mc_loop_buf.data();
  copy.len = f.len;
  copy.icrc_absent = true;
  Qp* const sender = cur_qp;
  rx_mcast(pkt, copy, true);
  cur_qp = sender;
}

}  // namespace urxe::engine
