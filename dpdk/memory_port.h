// In-process ports that need no network, for tests and for devices that must not touch the wire:
//   loop — every frame sent is received by every loop port on the same bus in this process (the sender's
//          own included): contexts of one process talk to each other and to themselves;
//   null — frames sent are dropped, nothing is received (open/query/PD/MR/CQ work, traffic does not).
// Frames live in a fixed pool per port: the data path allocates nothing.
#pragma once
#include <memory>
#include <string>

#include "engine/port.h"

namespace urxe::dpdk {

// A loop port on `bus` (ports with the same bus name hear each other), or a null port when bus is "".
std::unique_ptr<engine::Port> open_memory_port(const engine::PortAttr& attr, const std::string& bus);

}  // namespace urxe::dpdk
