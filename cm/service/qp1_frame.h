// QP1 on the wire, as kernel rxe sends and takes it (tests/cli/cm_frame_test.cc compares with rxe's
// captures in pcap-fixtures/): the CM MADs in UD SEND_ONLY frames with a DETH, QP1 to QP1.
#pragma once
#include <cstdint>

#include "cm/service.h"
#include "wire/packet.h"

namespace urxe::cm {

// What a received frame is to the CM: a MAD (`m` filled in, but for m.device; m.mad points into the
// frame), or the reason it is dropped.
enum class Qp1Rx : uint8_t {
  mad,
  parse,   // not a RoCEv2 frame (length, checksum, version, opcode)
  icrc,    // bad ICRC
  opcode,  // not a UD SEND_ONLY with a DETH to QP 1
  qkey,    // Q_Key is not the GSI's
  length,  // payload is not one 256-byte MAD
};
Qp1Rx parse_qp1_frame(wire::ByteSpan frame, MadIn& m);

// The whole frame carrying `m` from QP1 of the device with MAC `src_mac`: UD SEND_ONLY, BTH PSN `psn`,
// IPv4 identification `ip_id` (IPv4 when m.dgid is IPv4-mapped, else IPv6). Returns its length, 0 when
// `out` is too small.
uint32_t build_qp1_frame(const MadOut& m, const wire::MacAddr& src_mac, uint32_t psn, uint16_t ip_id,
                         wire::MutByteSpan out);

inline constexpr uint32_t kQp1FrameMax = 14 + 4 + 40 + 8 + 12 + 8 + 256 + 4;  // Ethernet+VLAN .. ICRC

}  // namespace urxe::cm
