// The CM service fuzz target's replay (tests/fuzz/replay.h): scripted seeds (a passive RC connection with
// its RTU and DREQ, an active one answered by REP and DREQ, a SIDR exchange, retransmissions and hostile
// variants), each also cut at every 7th length and with each byte's bits 0 and 7 flipped together.
#include <arpa/inet.h>

#include <cstdint>
#include <vector>

#include "hostnet/gid.h"
#include "tests/fuzz/replay.h"
#include "wire/mad.h"

uint64_t cm_fuzz_random(uint64_t i);

namespace {

using namespace urxe;
using Script = std::vector<uint8_t>;

wire::Gid v4(const char* s) {  // "10.0.0.1" as its IPv4-mapped GID
  wire::Gid g{};
  hostnet::gid_from_string(s, g);
  return g;
}

// Ops as the target reads them.
void mad(Script& s, const wire::CmMessage& msg, uint64_t tid = 0x1234) {
  wire::CmMad m;
  m.header.transaction_id = tid;
  m.msg = msg;
  uint8_t b[wire::kMadSize];
  wire::build_cm_mad(b, m);
  s.push_back(0);
  s.insert(s.end(), b, b + sizeof b);
}
void step(Script& s, uint8_t action, uint8_t flag = 0) {
  s.push_back(static_cast<uint8_t>(1 | action << 2 | flag << 5));
}
void wait(Script& s, uint8_t units) {
  s.push_back(static_cast<uint8_t>(2 | units << 2));
}
enum : uint8_t {
  kGetEvent = 0,
  kAccept = 1,
  kDisconnect = 2,
  kDestroy = 3,
  kReject = 4,
  kConnect = 5,
  kQpAttr = 6
};

// The peer's REQ to the listener on 10.77.0.11:7174.
wire::CmReq req_from_peer(uint32_t comm_id) {
  wire::CmReq r;
  r.local_comm_id = comm_id;
  r.service_id = wire::make_ip_cm_service_id(wire::kPortSpaceTcp, 7174);
  r.local_ca_guid = 0x5254'00ff'fe77'0002ull;
  r.local_qpn = 0x29;
  r.starting_psn = 1000;
  r.remote_cm_response_timeout = r.local_cm_response_timeout = 20;
  r.max_cm_retries = 15;
  r.path_mtu = 3;
  r.primary.local_gid = v4("10.77.0.12");
  r.primary.remote_gid = v4("10.77.0.11");
  r.primary.hop_limit = 64;
  r.primary.local_ack_timeout = 17;
  wire::IpCmHeader h;
  h.source_port = 40000;
  inet_pton(AF_INET, "10.77.0.12", &h.source_ip[12]);
  inet_pton(AF_INET, "10.77.0.11", &h.destination_ip[12]);
  wire::write_ip_cm_header(r.private_data, h);
  return r;
}

std::vector<Script> seeds() {
  // Draw 1 is the channel token; a REQ's comm ID is the next draw, an outgoing connect's the one after its
  // ephemeral port.
  const auto ours_after = [](uint64_t draw) { return static_cast<uint32_t>(cm_fuzz_random(draw)); };
  std::vector<Script> out;
  {  // passive: REQ, the app accepts, RTU, the peer disconnects
    Script s;
    mad(s, req_from_peer(0xabc));
    step(s, kGetEvent);
    step(s, kAccept, 1);
    mad(s, wire::CmRtu{0xabc, ours_after(2), {}});
    step(s, kGetEvent);
    mad(s, wire::CmDreq{0xabc, ours_after(2), 0x42, {}});
    step(s, kGetEvent);
    wait(s, 10);
    out.push_back(s);
  }
  {  // passive: the REQ comes twice before the app looks (MRA), then the app rejects
    Script s;
    mad(s, req_from_peer(0xdef));
    wait(s, 16);
    mad(s, req_from_peer(0xdef));
    step(s, kGetEvent);
    step(s, kReject);
    out.push_back(s);
  }
  {  // active: connect, REP, RTU by the app's ACCEPT, then our DREQ is answered
    Script s;
    step(s, kConnect);
    step(s, kGetEvent);
    step(s, kGetEvent);
    wire::CmRep rep;
    rep.local_comm_id = 0x777;
    rep.remote_comm_id = ours_after(3);
    rep.local_qpn = 0x30;
    rep.starting_psn = 5;
    mad(s, rep);
    step(s, kGetEvent);
    step(s, kQpAttr, 2);
    step(s, kAccept, 0);
    step(s, kDisconnect);
    mad(s, wire::CmDrep{0x777, ours_after(3), {}});
    step(s, kGetEvent);
    out.push_back(s);
  }
  {  // active UD: SIDR_REQ, SIDR_REP
    Script s;
    step(s, kConnect, 1);
    wire::CmSidrRep rep;
    rep.request_id = ours_after(3);
    rep.qpn = 0x31;
    rep.qkey = 0x01234567;
    mad(s, rep);
    step(s, kGetEvent);
    step(s, kGetEvent);
    step(s, kGetEvent);
    out.push_back(s);
  }
  {  // passive UD: SIDR_REQ to the UDP listener, accepted
    Script s;
    wire::CmSidrReq sreq;
    sreq.request_id = 0x55;
    sreq.service_id = wire::make_ip_cm_service_id(wire::kPortSpaceUdp, 7174);
    wire::IpCmHeader h;
    inet_pton(AF_INET, "10.77.0.12", &h.source_ip[12]);
    inet_pton(AF_INET, "10.77.0.11", &h.destination_ip[12]);
    wire::write_ip_cm_header(sreq.private_data, h);
    mad(s, sreq);
    step(s, kGetEvent);
    step(s, kAccept, 1);
    out.push_back(s);
  }
  {  // an established connection whose app vanishes while the peer keeps quiet: DREQ retries, timewait
    Script s;
    mad(s, req_from_peer(0x999));
    step(s, kGetEvent);
    step(s, kAccept, 1);
    mad(s, wire::CmRtu{0x999, ours_after(2), {}});
    step(s, kDestroy);
    wait(s, 63);
    out.push_back(s);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  return urxe::fuzz::seed_replay_main(argc, argv, seeds(), {.cut_step = 7, .flips = {0x81}});
}
