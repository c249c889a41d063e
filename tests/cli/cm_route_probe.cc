// What `urxe cm` answers the CM for a destination (cm/service/route.h lookup_cm_route), for
// cm_service_test.sh: the devices are the interfaces named (device i on the i-th), the answer one line,
// "STATE device N src ADDR dmac MAC". With --wait MS the lookup repeats (triggering resolution every
// 200 ms) while the answer is pending, up to MS milliseconds.
//   usage: cm_route_probe IFACE[,IFACE...] DST [SRC [IFINDEX]] [--wait MS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cm/service/route.h"
#include "hostnet/gid.h"
#include "hostnet/interface.h"

using namespace urxe;

int main(int argc, char** argv) {
  std::vector<std::string> args;
  int wait_ms = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--wait") == 0 && i + 1 < argc)
      wait_ms = std::atoi(argv[++i]);
    else
      args.push_back(argv[i]);
  }
  if (args.size() < 2) {
    std::fprintf(stderr, "usage: cm_route_probe IFACE[,IFACE...] DST [SRC [IFINDEX]] [--wait MS]\n");
    return 2;
  }
  std::vector<cm::CmDevice> devs;
  std::stringstream names(args[0]);
  for (std::string n; std::getline(names, n, ',');) {
    hostnet::Interface info;
    std::string err;
    if (!hostnet::query_interface(n, info, &err, false)) {
      std::fprintf(stderr, "%s\n", err.c_str());
      return 2;
    }
    cm::CmDevice d;
    d.index = static_cast<uint32_t>(devs.size());
    d.name = n;
    d.mac = info.mac;
    d.ifindex = info.ifindex;
    devs.push_back(d);
  }
  wire::Gid dst{}, src{};
  if (!hostnet::gid_from_string(args[1], dst) ||
      (args.size() > 2 && !hostnet::gid_from_string(args[2], src))) {
    std::fprintf(stderr, "bad address\n");
    return 2;
  }
  const int ifindex = args.size() > 3 ? std::atoi(args[3].c_str()) : 0;
  const auto start = std::chrono::steady_clock::now();
  auto last_trigger = start;
  cm::RouteResult r = cm::lookup_cm_route(devs, dst, src, ifindex, true);
  while (r.state == cm::RouteResult::State::pending &&
         std::chrono::steady_clock::now() - start < std::chrono::milliseconds(wait_ms)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const bool trigger = std::chrono::steady_clock::now() - last_trigger >= std::chrono::milliseconds(200);
    if (trigger) last_trigger = std::chrono::steady_clock::now();
    r = cm::lookup_cm_route(devs, dst, src, ifindex, trigger);
  }
  static const char* const kState[] = {"resolved", "pending", "unreachable", "not_urxe"};
  const auto& m = r.dmac;
  std::printf("%s device %u src %s dmac %02x:%02x:%02x:%02x:%02x:%02x\n", kState[static_cast<int>(r.state)],
              r.device, hostnet::gid_to_string(r.src).c_str(), m[0], m[1], m[2], m[3], m[4], m[5]);
  return 0;
}
