#include "wire/mad.h"

#include <algorithm>
#include <type_traits>

#include "wire/packet.h"

namespace urxe::wire {

// Every field lies within 8 bytes (bit + width <= 64), so one 64-bit accumulator holds the bytes it touches.
uint64_t get_field(const uint8_t* base, MadField f) {
  const uint32_t nbytes = (f.bit + f.width + 7u) / 8u;
  uint64_t acc = 0;
  for (uint32_t i = 0; i < nbytes; ++i) acc = (acc << 8) | base[f.off + i];
  acc >>= nbytes * 8u - f.bit - f.width;
  return f.width >= 64 ? acc : acc & ((uint64_t{1} << f.width) - 1);
}

void put_field(uint8_t* base, MadField f, uint64_t v) {
  const uint32_t nbytes = (f.bit + f.width + 7u) / 8u;
  const uint32_t shift = nbytes * 8u - f.bit - f.width;
  const uint64_t mask = (f.width >= 64 ? ~uint64_t{0} : (uint64_t{1} << f.width) - 1) << shift;
  uint64_t acc = 0;
  for (uint32_t i = 0; i < nbytes; ++i) acc = (acc << 8) | base[f.off + i];
  acc = (acc & ~mask) | ((v << shift) & mask);
  for (uint32_t i = nbytes; i-- > 0;) {
    base[f.off + i] = static_cast<uint8_t>(acc);
    acc >>= 8;
  }
}

namespace {

// --- layouts: (byte offset, bit offset from the MSB, width in bits); REQ etc. relative to the MAD data ---

namespace hdr {
constexpr MadField base_version{0, 0, 8}, mgmt_class{1, 0, 8}, class_version{2, 0, 8}, method{3, 0, 8},
    status{4, 0, 16}, class_specific{6, 0, 16}, transaction_id{8, 0, 64}, attribute_id{16, 0, 16},
    reserved{18, 0, 16}, attribute_modifier{20, 0, 32};
}  // namespace hdr

// Relative to the start of a 44-byte path.
namespace path {
constexpr MadField local_lid{0, 0, 16}, remote_lid{2, 0, 16}, flow_label{36, 0, 20}, packet_rate{39, 2, 6},
    traffic_class{40, 0, 8}, hop_limit{41, 0, 8}, sl{42, 0, 4}, subnet_local{42, 4, 1},
    local_ack_timeout{43, 0, 5};
constexpr uint32_t local_gid = 4, remote_gid = 20, kSize = 44;
}  // namespace path

namespace req {
constexpr MadField local_comm_id{0, 0, 32}, vendor_id{5, 0, 24}, service_id{8, 0, 64},
    local_ca_guid{16, 0, 64}, local_qkey{28, 0, 32}, local_qpn{32, 0, 24}, responder_resources{35, 0, 8},
    local_eecn{36, 0, 24}, initiator_depth{39, 0, 8}, remote_eecn{40, 0, 24},
    remote_cm_response_timeout{43, 0, 5}, transport_service_type{43, 5, 2}, end_to_end_flow_control{43, 7, 1},
    starting_psn{44, 0, 24}, local_cm_response_timeout{47, 0, 5}, retry_count{47, 5, 3},
    partition_key{48, 0, 16}, path_mtu{50, 0, 4}, rdc_exists{50, 4, 1}, rnr_retry_count{50, 5, 3},
    max_cm_retries{51, 0, 4}, srq{51, 4, 1}, extended_transport_type{51, 5, 3};
constexpr uint32_t primary = 52, alternate = 96, private_data = 140;
}  // namespace req

namespace mra {
constexpr MadField local_comm_id{0, 0, 32}, remote_comm_id{4, 0, 32}, message_mraed{8, 0, 2},
    service_timeout{9, 0, 5};
constexpr uint32_t private_data = 10;
}  // namespace mra

namespace rej {
constexpr MadField local_comm_id{0, 0, 32}, remote_comm_id{4, 0, 32}, message_rejected{8, 0, 2},
    reject_info_length{9, 0, 7}, reason{10, 0, 16};
constexpr uint32_t ari = 12, private_data = 84;
}  // namespace rej

namespace rep {
constexpr MadField local_comm_id{0, 0, 32}, remote_comm_id{4, 0, 32}, local_qkey{8, 0, 32},
    local_qpn{12, 0, 24}, local_eecn{16, 0, 24}, starting_psn{20, 0, 24}, responder_resources{24, 0, 8},
    initiator_depth{25, 0, 8}, target_ack_delay{26, 0, 5}, failover_accepted{26, 5, 2},
    end_to_end_flow_control{26, 7, 1}, rnr_retry_count{27, 0, 3}, srq{27, 3, 1}, local_ca_guid{28, 0, 64};
constexpr uint32_t private_data = 36;
}  // namespace rep

// RTU, DREQ and DREP share the comm ID pair.
namespace ids {
constexpr MadField local_comm_id{0, 0, 32}, remote_comm_id{4, 0, 32};
constexpr uint32_t private_data = 8;
}  // namespace ids

namespace dreq {
constexpr MadField remote_qpn{8, 0, 24};
constexpr uint32_t private_data = 12;
}  // namespace dreq

namespace sidr_req {
constexpr MadField request_id{0, 0, 32}, partition_key{4, 0, 16}, service_id{8, 0, 64};
constexpr uint32_t private_data = 16;
}  // namespace sidr_req

namespace sidr_rep {
constexpr MadField request_id{0, 0, 32}, status{4, 0, 8}, additional_info_length{5, 0, 8}, qpn{8, 0, 24},
    service_id{12, 0, 64}, qkey{20, 0, 32};
constexpr uint32_t class_port_info = 24, private_data = 96;
}  // namespace sidr_rep

namespace ipcm {
constexpr MadField cm_version{0, 0, 8}, ip_version{1, 0, 4}, reserved{1, 4, 4}, source_port{2, 0, 16};
constexpr uint32_t source_ip = 4, destination_ip = 20;
}  // namespace ipcm

// Every private data block runs to the end of the MAD; a static check per message keeps the tables honest.
static_assert(req::private_data + 92 == kMadDataSize);
static_assert(mra::private_data + 222 == kMadDataSize);
static_assert(rej::private_data + 148 == kMadDataSize);
static_assert(rep::private_data + 196 == kMadDataSize);
static_assert(ids::private_data + 224 == kMadDataSize);
static_assert(dreq::private_data + 220 == kMadDataSize);
static_assert(sidr_req::private_data + 216 == kMadDataSize);
static_assert(sidr_rep::private_data + 136 == kMadDataSize);
static_assert(req::alternate + path::kSize == req::private_data &&
              req::primary + path::kSize == req::alternate);

template <typename T>
void get(const uint8_t* b, MadField f, T& v) {
  v = static_cast<T>(get_field(b, f));
}
template <size_t N>
void get_bytes(const uint8_t* b, uint32_t off, std::array<uint8_t, N>& a) {
  std::copy_n(b + off, N, a.begin());
}
template <size_t N>
void put_bytes(uint8_t* b, uint32_t off, const std::array<uint8_t, N>& a) {
  std::copy_n(a.begin(), N, b + off);
}

// Each message lists its fields once, in cm_fields(codec, message); the codec reads them (Reader, into a
// message) or writes them (Writer, from a const message).
template <typename C, typename M>
requires std::is_same_v<std::remove_const_t<M>, CmPath>
void cm_fields(C& c, M& m) {
  c(path::local_lid, m.local_lid);
  c(path::remote_lid, m.remote_lid);
  c(path::local_gid, m.local_gid);
  c(path::remote_gid, m.remote_gid);
  c(path::flow_label, m.flow_label);
  c(path::packet_rate, m.packet_rate);
  c(path::traffic_class, m.traffic_class);
  c(path::hop_limit, m.hop_limit);
  c(path::sl, m.sl);
  c(path::subnet_local, m.subnet_local);
  c(path::local_ack_timeout, m.local_ack_timeout);
}

struct Reader {
  const uint8_t* b;
  template <typename T>
  void operator()(MadField f, T& v) const {
    get(b, f, v);
  }
  template <size_t N>
  void operator()(uint32_t off, std::array<uint8_t, N>& a) const {
    get_bytes(b, off, a);
  }
  void operator()(uint32_t off, CmPath& p) const {
    Reader r{b + off};
    cm_fields(r, p);
  }
};

struct Writer {
  uint8_t* b;
  template <typename T>
  void operator()(MadField f, const T& v) const {
    put_field(b, f, static_cast<uint64_t>(v));
  }
  template <size_t N>
  void operator()(uint32_t off, const std::array<uint8_t, N>& a) const {
    put_bytes(b, off, a);
  }
  void operator()(uint32_t off, const CmPath& p) const {
    Writer w{b + off};
    cm_fields(w, p);
  }
};

}  // namespace

std::string_view cm_attr_name(uint16_t attr_id) {
  switch (static_cast<CmAttr>(attr_id)) {
    case CmAttr::class_port_info:
      return "ClassPortInfo";
    case CmAttr::req:
      return "REQ";
    case CmAttr::mra:
      return "MRA";
    case CmAttr::rej:
      return "REJ";
    case CmAttr::rep:
      return "REP";
    case CmAttr::rtu:
      return "RTU";
    case CmAttr::dreq:
      return "DREQ";
    case CmAttr::drep:
      return "DREP";
    case CmAttr::sidr_req:
      return "SIDR_REQ";
    case CmAttr::sidr_rep:
      return "SIDR_REP";
    case CmAttr::lap:
      return "LAP";
    case CmAttr::apr:
      return "APR";
  }
  return "?";
}

std::string_view to_string(MadError e) {
  switch (e) {
    case MadError::ok:
      return "ok";
    case MadError::truncated:
      return "truncated";
    case MadError::bad_base_version:
      return "bad_base_version";
    case MadError::not_cm:
      return "not_cm";
    case MadError::bad_class_version:
      return "bad_class_version";
    case MadError::unknown_attribute:
      return "unknown_attribute";
    case MadError::unsupported:
      return "unsupported";
  }
  return "?";
}

MadHeader parse_mad_header(const uint8_t* mad) {
  MadHeader h;
  get(mad, hdr::base_version, h.base_version);
  get(mad, hdr::mgmt_class, h.mgmt_class);
  get(mad, hdr::class_version, h.class_version);
  get(mad, hdr::method, h.method);
  get(mad, hdr::status, h.status);
  get(mad, hdr::class_specific, h.class_specific);
  get(mad, hdr::transaction_id, h.transaction_id);
  get(mad, hdr::attribute_id, h.attribute_id);
  get(mad, hdr::attribute_modifier, h.attribute_modifier);
  return h;
}

void write_mad_header(uint8_t* mad, const MadHeader& h) {
  put_field(mad, hdr::base_version, h.base_version);
  put_field(mad, hdr::mgmt_class, h.mgmt_class);
  put_field(mad, hdr::class_version, h.class_version);
  put_field(mad, hdr::method, h.method);
  put_field(mad, hdr::status, h.status);
  put_field(mad, hdr::class_specific, h.class_specific);
  put_field(mad, hdr::transaction_id, h.transaction_id);
  put_field(mad, hdr::attribute_id, h.attribute_id);
  put_field(mad, hdr::reserved, 0);
  put_field(mad, hdr::attribute_modifier, h.attribute_modifier);
}

template <typename C, typename M>
requires std::is_same_v<std::remove_const_t<M>, CmReq>
void cm_fields(C& c, M& m) {
  using namespace req;
  c(req::local_comm_id, m.local_comm_id);
  c(vendor_id, m.vendor_id);
  c(service_id, m.service_id);
  c(local_ca_guid, m.local_ca_guid);
  c(local_qkey, m.local_qkey);
  c(local_qpn, m.local_qpn);
  c(responder_resources, m.responder_resources);
  c(local_eecn, m.local_eecn);
  c(initiator_depth, m.initiator_depth);
  c(remote_eecn, m.remote_eecn);
  c(remote_cm_response_timeout, m.remote_cm_response_timeout);
  c(transport_service_type, m.transport_service_type);
  c(end_to_end_flow_control, m.end_to_end_flow_control);
  c(starting_psn, m.starting_psn);
  c(local_cm_response_timeout, m.local_cm_response_timeout);
  c(retry_count, m.retry_count);
  c(partition_key, m.partition_key);
  c(path_mtu, m.path_mtu);
  c(rdc_exists, m.rdc_exists);
  c(rnr_retry_count, m.rnr_retry_count);
  c(max_cm_retries, m.max_cm_retries);
  c(srq, m.srq);
  c(extended_transport_type, m.extended_transport_type);
  c(primary, m.primary);
  c(alternate, m.alternate);
  c(req::private_data, m.private_data);
}

template <typename C, typename M>
requires std::is_same_v<std::remove_const_t<M>, CmMra>
void cm_fields(C& c, M& m) {
  c(mra::local_comm_id, m.local_comm_id);
  c(mra::remote_comm_id, m.remote_comm_id);
  c(mra::message_mraed, m.message_mraed);
  c(mra::service_timeout, m.service_timeout);
  c(mra::private_data, m.private_data);
}

template <typename C, typename M>
requires std::is_same_v<std::remove_const_t<M>, CmRej>
void cm_fields(C& c, M& m) {
  c(rej::local_comm_id, m.local_comm_id);
  c(rej::remote_comm_id, m.remote_comm_id);
  c(rej::message_rejected, m.message_rejected);
  c(rej::reject_info_length, m.reject_info_length);
  c(rej::reason, m.reason);
  c(rej::ari, m.additional_reject_information);
  c(rej::private_data, m.private_data);
}

template <typename C, typename M>
requires std::is_same_v<std::remove_const_t<M>, CmRep>
void cm_fields(C& c, M& m) {
  using namespace rep;
  c(rep::local_comm_id, m.local_comm_id);
  c(rep::remote_comm_id, m.remote_comm_id);
  c(local_qkey, m.local_qkey);
  c(local_qpn, m.local_qpn);
  c(local_eecn, m.local_eecn);
  c(starting_psn, m.starting_psn);
  c(responder_resources, m.responder_resources);
  c(initiator_depth, m.initiator_depth);
  c(target_ack_delay, m.target_ack_delay);
  c(failover_accepted, m.failover_accepted);
  c(end_to_end_flow_control, m.end_to_end_flow_control);
  c(rnr_retry_count, m.rnr_retry_count);
  c(srq, m.srq);
  c(local_ca_guid, m.local_ca_guid);
  c(rep::private_data, m.private_data);
}

template <typename C, typename M>
requires std::is_same_v<std::remove_const_t<M>, CmRtu>
void cm_fields(C& c, M& m) {
  c(ids::local_comm_id, m.local_comm_id);
  c(ids::remote_comm_id, m.remote_comm_id);
  c(ids::private_data, m.private_data);
}

template <typename C, typename M>
requires std::is_same_v<std::remove_const_t<M>, CmDreq>
void cm_fields(C& c, M& m) {
  c(ids::local_comm_id, m.local_comm_id);
  c(ids::remote_comm_id, m.remote_comm_id);
  c(dreq::remote_qpn, m.remote_qpn);
  c(dreq::private_data, m.private_data);
}

template <typename C, typename M>
requires std::is_same_v<std::remove_const_t<M>, CmDrep>
void cm_fields(C& c, M& m) {
  c(ids::local_comm_id, m.local_comm_id);
  c(ids::remote_comm_id, m.remote_comm_id);
  c(ids::private_data, m.private_data);
}

template <typename C, typename M>
requires std::is_same_v<std::remove_const_t<M>, CmSidrReq>
void cm_fields(C& c, M& m) {
  c(sidr_req::request_id, m.request_id);
  c(sidr_req::partition_key, m.partition_key);
  c(sidr_req::service_id, m.service_id);
  c(sidr_req::private_data, m.private_data);
}

template <typename C, typename M>
requires std::is_same_v<std::remove_const_t<M>, CmSidrRep>
void cm_fields(C& c, M& m) {
  c(sidr_rep::request_id, m.request_id);
  c(sidr_rep::status, m.status);
  c(sidr_rep::additional_info_length, m.additional_info_length);
  c(sidr_rep::qpn, m.qpn);
  c(sidr_rep::service_id, m.service_id);
  c(sidr_rep::qkey, m.qkey);
  c(sidr_rep::class_port_info, m.class_port_info);
  c(sidr_rep::private_data, m.private_data);
}

namespace {
template <typename T>
MadError decode_as(const uint8_t* data, CmMessage& msg) {
  Reader r{data};
  cm_fields(r, msg.emplace<T>());
  return MadError::ok;
}
}  // namespace

MadError parse_cm_mad(ByteSpan mad, CmMad& out) {
  if (mad.size() < kMadHeaderSize) return MadError::truncated;
  out.header = parse_mad_header(mad.data());
  if (mad.size() < kMadSize) return MadError::truncated;
  const MadHeader& h = out.header;
  if (h.base_version != kMadBaseVersion) return MadError::bad_base_version;
  if (h.mgmt_class != kMgmtClassCm) return MadError::not_cm;
  if (h.class_version != kCmClassVersion) return MadError::bad_class_version;
  const uint8_t* d = mad.data() + kMadHeaderSize;
  switch (static_cast<CmAttr>(h.attribute_id)) {
    case CmAttr::req:
      return decode_as<CmReq>(d, out.msg);
    case CmAttr::mra:
      return decode_as<CmMra>(d, out.msg);
    case CmAttr::rej:
      return decode_as<CmRej>(d, out.msg);
    case CmAttr::rep:
      return decode_as<CmRep>(d, out.msg);
    case CmAttr::rtu:
      return decode_as<CmRtu>(d, out.msg);
    case CmAttr::dreq:
      return decode_as<CmDreq>(d, out.msg);
    case CmAttr::drep:
      return decode_as<CmDrep>(d, out.msg);
    case CmAttr::sidr_req:
      return decode_as<CmSidrReq>(d, out.msg);
    case CmAttr::sidr_rep:
      return decode_as<CmSidrRep>(d, out.msg);
    case CmAttr::class_port_info:
    case CmAttr::lap:
    case CmAttr::apr:
      return MadError::unsupported;
  }
  return MadError::unknown_attribute;
}

uint16_t cm_attr_id(const CmMessage& msg) {
  // Same order as the CmMessage alternatives.
  static constexpr CmAttr kIds[] = {CmAttr::req,  CmAttr::mra,      CmAttr::rej,
                                    CmAttr::rep,  CmAttr::rtu,      CmAttr::dreq,
                                    CmAttr::drep, CmAttr::sidr_req, CmAttr::sidr_rep};
  static_assert(std::size(kIds) == std::variant_size_v<CmMessage>);
  return static_cast<uint16_t>(kIds[msg.index()]);
}

bool build_cm_mad(MutByteSpan out, const CmMad& mad) {
  if (out.size() < kMadSize) return false;
  MadHeader h = mad.header;
  h.attribute_id = cm_attr_id(mad.msg);
  write_mad_header(out.data(), h);
  uint8_t* d = out.data() + kMadHeaderSize;
  std::fill_n(d, kMadDataSize, uint8_t{0});  // reserved bits and unused bytes are zero
  Writer w{d};
  std::visit([&](const auto& m) { cm_fields(w, m); }, mad.msg);
  return true;
}

bool parse_ip_cm_header(ByteSpan pd, IpCmHeader& out) {
  if (pd.size() < kIpCmHeaderSize) return false;
  const uint8_t* p = pd.data();
  get(p, ipcm::cm_version, out.cm_version);
  get(p, ipcm::ip_version, out.ip_version);
  get(p, ipcm::source_port, out.source_port);
  get_bytes(p, ipcm::source_ip, out.source_ip);
  get_bytes(p, ipcm::destination_ip, out.destination_ip);
  return out.ip_version == 4 || out.ip_version == 6;
}

bool write_ip_cm_header(MutByteSpan pd, const IpCmHeader& h) {
  if (pd.size() < kIpCmHeaderSize) return false;
  uint8_t* p = pd.data();
  put_field(p, ipcm::cm_version, h.cm_version);
  put_field(p, ipcm::ip_version, h.ip_version);
  put_field(p, ipcm::reserved, 0);
  put_field(p, ipcm::source_port, h.source_port);
  put_bytes(p, ipcm::source_ip, h.source_ip);
  put_bytes(p, ipcm::destination_ip, h.destination_ip);
  return true;
}

Gid ip_cm_addr_to_gid(const IpCmHeader& h, const std::array<uint8_t, 16>& addr) {
  if (h.ip_version != 4) return addr;
  return gid_from_ipv4({addr[12], addr[13], addr[14], addr[15]});
}

ByteSpan qp1_mad(const Packet& p) {
  if (p.info == nullptr || p.bth.opcode != make_opcode(op::kUd, op::send_only)) return {};
  if (p.bth.dqpn != kQp1 || p.deth.qkey != kQp1Qkey || p.payload.size() < kMadSize) return {};
  return p.payload.first(kMadSize);
}

}  // namespace urxe::wire
