// Kernel rxe's own CM MADs in pcap-fixtures/ (REQ, REP, RTU, DREQ, DREP of rdma_cm connections): each
// decodes, re-encodes to the same 256 bytes, and its fields agree with the rest of the capture: comm IDs and
// transaction IDs pair up, the QPNs are the BTH destination QPs and the starting PSNs the first PSNs of the
// peer's RC requests that follow, the CA GUIDs the senders' MACs, the GIDs and the IP CM header are the IP
// header's addresses.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "tools/pcap_decode.h"
#include "wire/mad.h"
#include "wire/packet.h"

using namespace urxe;
using namespace urxe::wire;

namespace {

struct Frame {
  std::vector<uint8_t> bytes;
  Packet pkt;  // its spans point into `bytes`, which is never resized after parsing
};

std::vector<Frame> read_capture(const std::string& name) {
  tools::PcapReader r;
  std::string err;
  const std::string path = std::string(URXE_PCAP_FIXTURES) + "/" + name;
  EXPECT_TRUE(r.open(path, err)) << path << ": " << err;
  std::vector<Frame> v;
  tools::PcapReader::Frame f;
  while (r.next(f, err) == 1) v.push_back({std::vector<uint8_t>(f.eth.begin(), f.eth.end()), {}});
  for (Frame& fr : v) EXPECT_EQ(parse_frame(fr.bytes, fr.pkt), ParseError::ok);
  return v;
}

struct Cm {
  size_t index;  // frame index in the capture
  CmMad mad;
};

std::vector<Cm> cm_mads(const std::vector<Frame>& frames) {
  std::vector<Cm> v;
  for (size_t i = 0; i < frames.size(); ++i) {
    const Packet& p = frames[i].pkt;
    if (p.info == nullptr || p.bth.dqpn != kQp1) continue;
    ByteSpan mad = qp1_mad(p);
    EXPECT_EQ(mad.size(), kMadSize) << "frame " << i + 1 << " to QP1 is no MAD";
    Cm c{i, {}};
    EXPECT_EQ(parse_cm_mad(mad, c.mad), MadError::ok) << "frame " << i + 1;
    // Decode → encode is the identity on what the kernel sent (it zeroes every reserved bit).
    std::array<uint8_t, kMadSize> again{};
    EXPECT_TRUE(build_cm_mad(again, c.mad));
    EXPECT_TRUE(std::equal(again.begin(), again.end(), mad.begin())) << "frame " << i + 1;
    v.push_back(std::move(c));
  }
  return v;
}

// rxe's node GUID: the modified EUI-64 of its MAC (U/L bit flipped, ff:fe in the middle).
uint64_t eui64(const MacAddr& m) {
  const uint8_t b[8] = {static_cast<uint8_t>(m[0] ^ 2), m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]};
  return load_be64(b);
}

template <typename T>
const T* as(const Cm& c) {
  return std::get_if<T>(&c.mad.msg);
}

// The first RC request after frame `after` from `src` to QP `dqpn`.
const Packet* first_request(const std::vector<Frame>& frames, size_t after, const Gid& src, uint32_t dqpn) {
  for (size_t i = after + 1; i < frames.size(); ++i) {
    const Packet& p = frames[i].pkt;
    if (p.info && p.info->transport == Transport::rc && p.info->is_request && p.bth.dqpn == dqpn &&
        p.src_gid() == src)
      return &p;
  }
  return nullptr;
}

struct Expect {
  const char* file;
  size_t connections;  // REQ/REP/RTU triples
  uint16_t port;       // the listener's port (rping 7174, perftest 18515; tshark's cm.req.serviceid.dport)
};

void PrintTo(const Expect& e, std::ostream* os) {
  *os << e.file;
}

class CmCapture : public ::testing::TestWithParam<Expect> {};

TEST_P(CmCapture, MessagesAgreeWithTheTraffic) {
  const Expect e = GetParam();
  const std::vector<Frame> frames = read_capture(e.file);
  const std::vector<Cm> cms = cm_mads(frames);
  ASSERT_FALSE(cms.empty());
  size_t connections = 0, psn_checks = 0, dreqs = 0, dreps = 0;
  for (const Cm& c : cms) {
    EXPECT_EQ(c.mad.header.method, kMadMethodSend);
    EXPECT_EQ(c.mad.header.status, 0);
    const Packet& reqp = frames[c.index].pkt;
    const CmReq* req = as<CmReq>(c);
    if (!req) continue;
    SCOPED_TRACE("REQ in frame " + std::to_string(c.index + 1));
    // Addressing: IP CM service ID for an RC connection; the path GIDs and the IP CM header are the IP
    // header's addresses.
    EXPECT_TRUE(is_ip_cm_service_id(req->service_id));
    EXPECT_EQ(ip_cm_port_space(req->service_id), kPortSpaceTcp);
    EXPECT_EQ(ip_cm_port(req->service_id), e.port);
    EXPECT_EQ(req->transport_service_type, static_cast<uint8_t>(CmTransport::rc));
    EXPECT_EQ(req->primary.local_gid, reqp.src_gid());
    EXPECT_EQ(req->primary.remote_gid, reqp.dst_gid());
    EXPECT_EQ(req->alternate, CmPath{});
    EXPECT_EQ(req->primary.hop_limit, reqp.ip_version == 4 ? reqp.ip4.ttl : reqp.ip6.hop_limit);
    EXPECT_EQ(req->partition_key, reqp.bth.pkey);
    EXPECT_EQ(req->local_ca_guid, eui64(reqp.eth.src));
    IpCmHeader ip;
    ASSERT_TRUE(parse_ip_cm_header(req->private_data, ip));
    EXPECT_EQ(ip.cm_version, 0);
    EXPECT_EQ(ip.ip_version, reqp.ip_version);
    EXPECT_EQ(ip_cm_addr_to_gid(ip, ip.source_ip), reqp.src_gid());
    EXPECT_EQ(ip_cm_addr_to_gid(ip, ip.destination_ip), reqp.dst_gid());
    EXPECT_NE(ip.source_port, 0);
    // Kernel rdma_cm derives the path's flow label from the port pair, (sport * 31 + dport) mod 2^20: a check
    // on the 20-bit field that Wireshark 4.0 cannot make (it reads only 16 bits).
    EXPECT_EQ(req->primary.flow_label,
              (uint32_t{ip.source_port} * 31 + ip_cm_port(req->service_id)) & 0xfffff);

    // The REP answers with the REQ's transaction ID and names the REQ's comm ID; the RTU names both.
    const Cm* repc = nullptr;
    for (const Cm& d : cms)
      if (const CmRep* r = as<CmRep>(d); r && r->remote_comm_id == req->local_comm_id) repc = &d;
    ASSERT_NE(repc, nullptr);
    const CmRep& rep = *as<CmRep>(*repc);
    const Packet& repp = frames[repc->index].pkt;
    EXPECT_GT(repc->index, c.index);
    EXPECT_EQ(repc->mad.header.transaction_id, c.mad.header.transaction_id);
    EXPECT_NE(rep.local_comm_id, req->local_comm_id);
    EXPECT_EQ(repp.src_gid(), reqp.dst_gid());
    EXPECT_EQ(repp.dst_gid(), reqp.src_gid());
    EXPECT_EQ(rep.local_ca_guid, eui64(repp.eth.src));
    const Cm* rtuc = nullptr;
    for (const Cm& d : cms)
      if (const CmRtu* r = as<CmRtu>(d); r && r->local_comm_id == req->local_comm_id) rtuc = &d;
    ASSERT_NE(rtuc, nullptr);
    EXPECT_EQ(as<CmRtu>(*rtuc)->remote_comm_id, rep.local_comm_id);
    EXPECT_EQ(rtuc->mad.header.transaction_id, c.mad.header.transaction_id);
    EXPECT_GT(rtuc->index, repc->index);
    ++connections;

    // Each side's QPN is where the other side's RC packets go. A starting PSN is the one the *sender's*
    // receive queue expects (the kernel sets the active side's rq_psn and the passive side's sq_psn from
    // the REQ's), so the REQ's is the PSN of the passive side's first request and the REP's the active's.
    const Packet* from_active = first_request(frames, repc->index, reqp.src_gid(), rep.local_qpn);
    ASSERT_NE(from_active, nullptr) << "no RC request to the REP's QPN " << rep.local_qpn;
    EXPECT_EQ(from_active->bth.psn, rep.starting_psn);
    ++psn_checks;
    if (const Packet* from_passive = first_request(frames, repc->index, repp.src_gid(), req->local_qpn)) {
      EXPECT_EQ(from_passive->bth.psn, req->starting_psn);
      ++psn_checks;
    }

    // DREQs name the peer's QP; a DREP echoes its DREQ's transaction ID with the comm IDs swapped.
    for (const Cm& d : cms) {
      const CmDreq* dq = as<CmDreq>(d);
      if (!dq) continue;
      const bool from_active_side = dq->local_comm_id == req->local_comm_id;
      const bool from_passive_side = dq->local_comm_id == rep.local_comm_id;
      if (!from_active_side && !from_passive_side) continue;
      ++dreqs;
      EXPECT_EQ(dq->remote_comm_id, from_active_side ? rep.local_comm_id : req->local_comm_id);
      EXPECT_EQ(dq->remote_qpn, from_active_side ? rep.local_qpn : req->local_qpn);
      for (const Cm& p : cms)
        if (const CmDrep* dp = as<CmDrep>(p);
            dp && p.mad.header.transaction_id == d.mad.header.transaction_id) {
          EXPECT_EQ(dp->local_comm_id, dq->remote_comm_id);
          EXPECT_EQ(dp->remote_comm_id, dq->local_comm_id);
          ++dreps;
        }
    }
  }
  EXPECT_EQ(connections, e.connections);
  EXPECT_GE(psn_checks, e.connections);
  EXPECT_GE(dreqs, e.connections);
  EXPECT_GE(dreps, e.connections);
  // Every MAD is accounted for by the message types kernel rdma_cm sends on a clean run.
  for (const Cm& c : cms)
    EXPECT_TRUE(as<CmReq>(c) || as<CmRep>(c) || as<CmRtu>(c) || as<CmDreq>(c) || as<CmDrep>(c));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CmCapture,
                         ::testing::Values(Expect{"rxe-linlinw5-rdma_cm.pcap", 2, 18515},
                                           Expect{"rxe-qemu-rdma_cm_rping.pcap", 1, 7174},
                                           Expect{"rxe-qemu-rdma_cm_send_bw.pcap", 2, 18515}),
                         [](const auto& param_info) {
                           std::string n = param_info.param.file;
                           n = n.substr(0, n.find('.'));
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
