// Network namespaces as the kernel names them: the device and inode numbers of an nsfs file
// (/proc/self/ns/net), and whether an interface still exists in one that is not the caller's.
#pragma once
#include <cstdint>
#include <string>

namespace urxe::hostnet {

struct NetnsId {
  uint64_t dev = 0;
  uint64_t ino = 0;
  bool known() const { return ino != 0; }
  bool operator==(const NetnsId&) const = default;
  std::string to_string() const;                          // "DEV:INO", "" when unknown
  static bool parse(const std::string& s, NetnsId& out);  // the form to_string writes
};

// The calling thread's network namespace (unknown when /proc is not mounted).
NetnsId current_netns();
// Whether `recorded` (NetnsId::to_string's form) is the caller's namespace; also true when either side is
// unknown (nothing recorded, no /proc): what cannot be told counts as here.
bool in_current_netns(const std::string& recorded);

enum class Presence { present, gone, unknown };

struct Interface;

// Whether interface `ifname` exists in namespace `ns`: asked directly in the caller's own namespace; for
// another one, gone when no bind mount under /run/netns and no process holds `ns` any more (the kernel has
// destroyed it, and its interfaces with it), else asked inside it (setns on a short-lived thread, which
// needs CAP_SYS_ADMIN). unknown when that cannot be told (no /proc, or, not being root, no right to look at
// some process).
Presence interface_presence(const NetnsId& ns, const std::string& ifname);
// The same, filling `out` (without addresses) when present.
Presence query_interface_in(const NetnsId& ns, const std::string& ifname, Interface& out);

}  // namespace urxe::hostnet
