// The kinds of packet port a device can ask for (urxe.conf `port=`, `urxe link add --port`, $URXE_PORT) and
// their one spelling. Header-only: the device tree and the urxe command name kinds without linking DPDK.
#pragma once
#include <string>
#include <string_view>
#include <utility>

namespace urxe::dpdk {

enum class PortKind { automatic, dpdk, socket, loop, null };

inline constexpr std::pair<std::string_view, PortKind> kPortKinds[] = {{"auto", PortKind::automatic},
                                                                       {"dpdk", PortKind::dpdk},
                                                                       {"socket", PortKind::socket},
                                                                       {"loop", PortKind::loop},
                                                                       {"null", PortKind::null}};

constexpr std::string_view port_kind_name(PortKind kind) {
  for (const auto& [name, k] : kPortKinds)
    if (k == kind) return name;
  return "?";
}

// False for anything but one of the names above.
constexpr bool parse_port_kind(std::string_view text, PortKind& kind) {
  for (const auto& [name, k] : kPortKinds) {
    if (text == name) {
      kind = k;
      return true;
    }
  }
  return false;
}

// "auto, dpdk, socket, loop, null", for messages.
inline std::string port_kind_list() {
  std::string s;
  for (const auto& [name, k] : kPortKinds) s += (s.empty() ? "" : ", ") + std::string(name);
  return s;
}

// Whether a help text names every kind (as a word: "auto", not "automatic"): help texts that list the kinds
// static_assert it, so a new kind cannot go undocumented.
constexpr bool names_every_port_kind(std::string_view text) {
  const auto word_char = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; };
  for (const auto& [name, k] : kPortKinds) {
    bool found = false;
    for (size_t at = text.find(name); at != std::string_view::npos && !found; at = text.find(name, at + 1)) {
      const size_t end = at + name.size();
      found = (at == 0 || !word_char(text[at - 1])) && (end == text.size() || !word_char(text[end]));
    }
    if (!found) return false;
  }
  return true;
}

// Whether `text` names `kind` (an unknown name is no kind).
constexpr bool port_kind_is(std::string_view text, PortKind kind) {
  PortKind k{};
  return parse_port_kind(text, k) && k == kind;
}

// Whether `text` names an in-process port (loop, null): no interface, no frames on the wire.
constexpr bool in_memory_port(std::string_view text) {
  return port_kind_is(text, PortKind::loop) || port_kind_is(text, PortKind::null);
}

}  // namespace urxe::dpdk
