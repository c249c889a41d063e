// RoCE GIDs of an interface as the kernel makes them (drivers/infiniband/core/roce_gid_mgmt.c), and their
// text forms: the default GID from the MAC's modified EUI-64, the table built from the addresses, the
// sysfs form and the inet_ntop form.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "hostnet/interface.h"
#include "wire/headers.h"

namespace urxe::hostnet {

// The modified EUI-64 of a MAC (universal/local bit flipped, ff:fe in the middle), as rxe derives its node
// GUID and the default GID's interface identifier.
uint64_t eui64(const wire::MacAddr& mac);

// The default GID the kernel gives every RoCE port: fe80::/64 with the EUI-64 of the MAC.
wire::Gid default_gid(const wire::MacAddr& mac);

// The RoCE v2 GID table of a port on `info` (index = sgid_index), in the kernel's order: the default
// link-local GID from the MAC first, then one IPv4-mapped GID per IPv4 address, then every IPv6 address not
// already present. One entry per address: urxe speaks RoCE v2 only (the kernel would add a v1 twin).
std::vector<wire::Gid> build_gid_table(const Interface& info);
// The same for the interface `name` of the caller's network namespace (query_interface with its
// addresses); empty when it is not there.
std::vector<wire::Gid> query_gid_table(const std::string& name);

std::string gid_to_string(const wire::Gid& gid);             // "::ffff:10.0.0.1", "fe80::1" (inet_ntop)
bool gid_from_string(const std::string& s, wire::Gid& out);  // accepts IPv4 dotted quad or IPv6

// sysfs forms: a GID as 8 groups of 4 hex digits, a GUID as 4 ("0211:22ff:fe33:4455").
std::string format_gid(const wire::Gid& gid);
bool parse_gid(const std::string& text, wire::Gid& gid);
std::string format_guid(uint64_t guid);

}  // namespace urxe::hostnet
