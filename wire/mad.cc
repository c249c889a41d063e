#include "wire/mad.h"

#include <algorithm>

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

void decode_path(const uint8_t* p, CmPath& m) {
  get(p, path::local_lid, m.local_lid);
  get(p, path::remote_lid, m.remote_lid);
  get_bytes(p, path::local_gid, m.local_gid);
  get_bytes(p, path::remote_gid, m.remote_gid);
  get(p, path::flow_label, m.flow_label);
  get(p, path::packet_rate, m.packet_rate);
  get(p, path::traffic_class, m.traffic_class);
  get(p, path::hop_limit, m.hop_limit);
  get(p, path::sl, m.sl);
  get(p, path::subnet_local, m.subnet_local);
  get(p, path::local_ack_timeout, m.local_ack_timeout);
}

void encode_path(uint8_t* p, const CmPath& m) {
  put_field(p, path::local_lid, m.local_lid);
  put_field(p, path::remote_lid, m.remote_lid);
  put_bytes(p, path::local_gid, m.local_gid);
  put_bytes(p, path::remote_gid, m.remote_gid);
  put_field(p, path::flow_label, m.flow_label);
  put_field(p, path::packet_rate, m.packet_rate);
  put_field(p, path::traffic_class, m.traffic_class);
  put_field(p, path::hop_limit, m.hop_limit);
  put_field(p, path::sl, m.sl);
  put_field(p, path::subnet_local, m.subnet_local);
  put_field(p, path::local_ack_timeout, m.local_ack_timeout);
}

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

void decode_cm(const uint8_t* d, CmReq& m) {
  using namespace req;
  get(d, req::local_comm_id, m.local_comm_id);
  get(d, vendor_id, m.vendor_id);
  get(d, service_id, m.service_id);
  get(d, local_ca_guid, m.local_ca_guid);
  get(d, local_qkey, m.local_qkey);
  get(d, local_qpn, m.local_qpn);
  get(d, responder_resources, m.responder_resources);
  get(d, local_eecn, m.local_eecn);
  get(d, initiator_depth, m.initiator_depth);
  get(d, remote_eecn, m.remote_eecn);
  get(d, remote_cm_response_timeout, m.remote_cm_response_timeout);
  get(d, transport_service_type, m.transport_service_type);
  get(d, end_to_end_flow_control, m.end_to_end_flow_control);
  get(d, starting_psn, m.starting_psn);
  get(d, local_cm_response_timeout, m.local_cm_response_timeout);
  get(d, retry_count, m.retry_count);
  get(d, partition_key, m.partition_key);
  get(d, path_mtu, m.path_mtu);
  get(d, rdc_exists, m.rdc_exists);
  get(d, rnr_retry_count, m.rnr_retry_count);
  get(d, max_cm_retries, m.max_cm_retries);
  get(d, srq, m.srq);
  get(d, extended_transport_type, m.extended_transport_type);
  decode_path(d + primary, m.primary);
  decode_path(d + alternate, m.alternate);
  get_bytes(d, req::private_data, m.private_data);
}

void encode_cm(uint8_t* d, const CmReq& m) {
  using namespace req;
  std::fill_n(d, kMadDataSize, uint8_t{0});
  put_field(d, req::local_comm_id, m.local_comm_id);
  put_field(d, vendor_id, m.vendor_id);
  put_field(d, service_id, m.service_id);
  put_field(d, local_ca_guid, m.local_ca_guid);
  put_field(d, local_qkey, m.local_qkey);
  put_field(d, local_qpn, m.local_qpn);
  put_field(d, responder_resources, m.responder_resources);
  put_field(d, local_eecn, m.local_eecn);
  put_field(d, initiator_depth, m.initiator_depth);
  put_field(d, remote_eecn, m.remote_eecn);
  put_field(d, remote_cm_response_timeout, m.remote_cm_response_timeout);
  put_field(d, transport_service_type, m.transport_service_type);
  put_field(d, end_to_end_flow_control, m.end_to_end_flow_control);
  put_field(d, starting_psn, m.starting_psn);
  put_field(d, local_cm_response_timeout, m.local_cm_response_timeout);
  put_field(d, retry_count, m.retry_count);
  put_field(d, partition_key, m.partition_key);
  put_field(d, path_mtu, m.path_mtu);
  put_field(d, rdc_exists, m.rdc_exists);
  put_field(d, rnr_retry_count, m.rnr_retry_count);
  put_field(d, max_cm_retries, m.max_cm_retries);
  put_field(d, srq, m.srq);
  put_field(d, extended_transport_type, m.extended_transport_type);
  encode_path(d + primary, m.primary);
  encode_path(d + alternate, m.alternate);
  put_bytes(d, req::private_data, m.private_data);
}

void decode_cm(const uint8_t* d, CmMra& m) {
  get(d, mra::local_comm_id, m.local_comm_id);
  get(d, mra::remote_comm_id, m.remote_comm_id);
  get(d, mra::message_mraed, m.message_mraed);
  get(d, mra::service_timeout, m.service_timeout);
  get_bytes(d, mra::private_data, m.private_data);
}
void encode_cm(uint8_t* d, const CmMra& m) {
  std::fill_n(d, kMadDataSize, uint8_t{0});
  put_field(d, mra::local_comm_id, m.local_comm_id);
  put_field(d, mra::remote_comm_id, m.remote_comm_id);
  put_field(d, mra::message_mraed, m.message_mraed);
  put_field(d, mra::service_timeout, m.service_timeout);
  put_bytes(d, mra::private_data, m.private_data);
}

void decode_cm(const uint8_t* d, CmRej& m) {
  get(d, rej::local_comm_id, m.local_comm_id);
  get(d, rej::remote_comm_id, m.remote_comm_id);
  get(d, rej::message_rejected, m.message_rejected);
  get(d, rej::reject_info_length, m.reject_info_length);
  get(d, rej::reason, m.reason);
  get_bytes(d, rej::ari, m.additional_reject_information);
  get_bytes(d, rej::private_data, m.private_data);
}
void encode_cm(uint8_t* d, const CmRej& m) {
  std::fill_n(d, kMadDataSize, uint8_t{0});
  put_field(d, rej::local_comm_id, m.local_comm_id);
  put_field(d, rej::remote_comm_id, m.remote_comm_id);
  put_field(d, rej::message_rejected, m.message_rejected);
  put_field(d, rej::reject_info_length, m.reject_info_length);
  put_field(d, rej::reason, m.reason);
  put_bytes(d, rej::ari, m.additional_reject_information);
  put_bytes(d, rej::private_data, m.private_data);
}

void decode_cm(const uint8_t* d, CmRep& m) {
  using namespace rep;
  get(d, rep::local_comm_id, m.local_comm_id);
  get(d, rep::remote_comm_id, m.remote_comm_id);
  get(d, local_qkey, m.local_qkey);
  get(d, local_qpn, m.local_qpn);
  get(d, local_eecn, m.local_eecn);
  get(d, starting_psn, m.starting_psn);
  get(d, responder_resources, m.responder_resources);
  get(d, initiator_depth, m.initiator_depth);
  get(d, target_ack_delay, m.target_ack_delay);
  get(d, failover_accepted, m.failover_accepted);
  get(d, end_to_end_flow_control, m.end_to_end_flow_control);
  get(d, rnr_retry_count, m.rnr_retry_count);
  get(d, srq, m.srq);
  get(d, local_ca_guid, m.local_ca_guid);
  get_bytes(d, rep::private_data, m.private_data);
}
void encode_cm(uint8_t* d, const CmRep& m) {
  using namespace rep;
  std::fill_n(d, kMadDataSize, uint8_t{0});
  put_field(d, rep::local_comm_id, m.local_comm_id);
  put_field(d, rep::remote_comm_id, m.remote_comm_id);
  put_field(d, local_qkey, m.local_qkey);
  put_field(d, local_qpn, m.local_qpn);
  put_field(d, local_eecn, m.local_eecn);
  put_field(d, starting_psn, m.starting_psn);
  put_field(d, responder_resources, m.responder_resources);
  put_field(d, initiator_depth, m.initiator_depth);
  put_field(d, target_ack_delay, m.target_ack_delay);
  put_field(d, failover_accepted, m.failover_accepted);
  put_field(d, end_to_end_flow_control, m.end_to_end_flow_control);
  put_field(d, rnr_retry_count, m.rnr_retry_count);
  put_field(d, srq, m.srq);
  put_field(d, local_ca_guid, m.local_ca_guid);
  put_bytes(d, rep::private_data, m.private_data);
}

void decode_cm(const uint8_t* d, CmRtu& m) {
  get(d, ids::local_comm_id, m.local_comm_id);
  get(d, ids::remote_comm_id, m.remote_comm_id);
  get_bytes(d, ids::private_data, m.private_data);
}
void encode_cm(uint8_t* d, const CmRtu& m) {
  std::fill_n(d, kMadDataSize, uint8_t{0});
  put_field(d, ids::local_comm_id, m.local_comm_id);
  put_field(d, ids::remote_comm_id, m.remote_comm_id);
  put_bytes(d, ids::private_data, m.private_data);
}

void decode_cm(const uint8_t* d, CmDreq& m) {
  get(d, ids::local_comm_id, m.local_comm_id);
  get(d, ids::remote_comm_id, m.remote_comm_id);
  get(d, dreq::remote_qpn, m.remote_qpn);
  get_bytes(d, dreq::private_data, m.private_data);
}
void encode_cm(uint8_t* d, const CmDreq& m) {
  std::fill_n(d, kMadDataSize, uint8_t{0});
  put_field(d, ids::local_comm_id, m.local_comm_id);
  put_field(d, ids::remote_comm_id, m.remote_comm_id);
  put_field(d, dreq::remote_qpn, m.remote_qpn);
  put_bytes(d, dreq::private_data, m.private_data);
}

void decode_cm(const uint8_t* d, CmDrep& m) {
  get(d, ids::local_comm_id, m.local_comm_id);
  get(d, ids::remote_comm_id, m.remote_comm_id);
  get_bytes(d, ids::private_data, m.private_data);
}
void encode_cm(uint8_t* d, const CmDrep& m) {
  std::fill_n(d, kMadDataSize, uint8_t{0});
  put_field(d, ids::local_comm_id, m.local_comm_id);
  put_field(d, ids::remote_comm_id, m.remote_comm_id);
  put_bytes(d, ids::private_data, m.private_data);
}

void decode_cm(const uint8_t* d, CmSidrReq& m) {
  get(d, sidr_req::request_id, m.request_id);
  get(d, sidr_req::partition_key, m.partition_key);
  get(d, sidr_req::service_id, m.service_id);
  get_bytes(d, sidr_req::private_data, m.private_data);
}
void encode_cm(uint8_t* d, const CmSidrReq& m) {
  std::fill_n(d, kMadDataSize, uint8_t{0});
  put_field(d, sidr_req::request_id, m.request_id);
  put_field(d, sidr_req::partition_key, m.partition_key);
  put_field(d, sidr_req::service_id, m.service_id);
  put_bytes(d, sidr_req::private_data, m.private_data);
}

void decode_cm(const uint8_t* d, CmSidrRep& m) {
  get(d, sidr_rep::request_id, m.request_id);
  get(d, sidr_rep::status, m.status);
  get(d, sidr_rep::additional_info_length, m.additional_info_length);
  get(d, sidr_rep::qpn, m.qpn);
  get(d, sidr_rep::service_id, m.service_id);
  get(d, sidr_rep::qkey, m.qkey);
  get_bytes(d, sidr_rep::class_port_info, m.class_port_info);
  get_bytes(d, sidr_rep::private_data, m.private_data);
}
void encode_cm(uint8_t* d, const CmSidrRep& m) {
  std::fill_n(d, kMadDataSize, uint8_t{0});
  put_field(d, sidr_rep::request_id, m.request_id);
  put_field(d, sidr_rep::status, m.status);
  put_field(d, sidr_rep::additional_info_length, m.additional_info_length);
  put_field(d, sidr_rep::qpn, m.qpn);
  put_field(d, sidr_rep::service_id, m.service_id);
  put_field(d, sidr_rep::qkey, m.qkey);
  put_bytes(d, sidr_rep::class_port_info, m.class_port_info);
  put_bytes(d, sidr_rep::private_data, m.private_data);
}

namespace {
template <typename T>
MadError decode_as(const uint8_t* data, CmMessage& msg) {
  decode_cm(data, msg.emplace<T>());
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
  std::visit([&](const auto& m) { encode_cm(out.data() + kMadHeaderSize, m); }, mad.msg);
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
