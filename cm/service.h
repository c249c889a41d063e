// The CM service's core: the kernel's ucma (channels, ids, events), rdma_cm (addresses, port spaces,
// listeners, QP attributes) and ib_cm (the CM MAD exchange on QP1, its timers and duplicate rules) for the
// urxe devices of one network namespace. No I/O of its own: the loop (cm/service/service_loop.h) feeds it
// commands, received MADs and the time, and does what it asks through CmHost, so it also runs between two
// instances in a test without sockets.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "wire/headers.h"

namespace urxe::cm {

using ChannelId = uint64_t;  // the service's handle of one shim connection (its channel token)

// A urxe device as the CM sees it. index: position in the daemon's list (stable while the device exists).
struct CmDevice {
  uint32_t index = 0;
  std::string name;        // "urxe0"
  uint64_t node_guid = 0;  // the EUI-64 as a number; QUERY_ROUTE and the MADs put its bytes in network order
  wire::MacAddr mac{};
  int ifindex = 0;
  uint32_t mtu = 1500;          // the interface's; the RoCE path MTU follows from it
  std::vector<wire::Gid> gids;  // the device's GID table (index = sgid_index), as the provider has it
  bool up = true;
};

// What an address lookup found (RTM_GETROUTE + the neighbour table).
struct RouteResult {
  enum class State : uint8_t { resolved, pending, unreachable, not_urxe } state = State::unreachable;
  uint32_t device = 0;   // index of the urxe device the route leaves through (resolved/pending)
  wire::Gid src{};       // source address the kernel picks (IPv4-mapped for IPv4)
  wire::MacAddr dmac{};  // next hop's MAC (resolved)
  uint8_t hop_limit = 64;
};

// One MAD on QP1 as received: addressing from the frame, the 256 MAD bytes.
struct MadIn {
  uint32_t device = 0;
  wire::Gid sgid{}, dgid{};  // IP source (the peer) and destination (us), IPv4-mapped for IPv4
  wire::MacAddr smac{};
  uint8_t traffic_class = 0, hop_limit = 64;
  uint32_t src_qp = 1;  // DETH source QP
  uint16_t pkey = 0xffff;
  std::span<const uint8_t> mad;
};

// One MAD to send from QP1 to QP1 of the peer.
struct MadOut {
  uint32_t device = 0;
  wire::Gid sgid{}, dgid{};
  wire::MacAddr dmac{};
  uint8_t traffic_class = 0, hop_limit = 64;
  uint32_t flow_label = 0;
  uint32_t dest_qp = 1;
  std::array<uint8_t, 256> mad{};
};

class CmHost {
 public:
  virtual ~CmHost() = default;
  virtual uint64_t now_ns() = 0;
  // The channel's queue grew by one / shrank by n (the daemon moves its eventfd's count).
  virtual void event_queued(ChannelId ch) = 0;
  virtual void events_dequeued(ChannelId ch, uint32_t n) = 0;
  virtual void send_mad(const MadOut& m) = 0;
  // Route from `src` (zero = any) to `dst`; `ifindex` scopes link-local addresses (0 = any). With
  // `trigger`, provokes neighbour resolution when the next hop is unknown (non-blocking).
  virtual RouteResult lookup_route(const wire::Gid& dst, const wire::Gid& src, int ifindex, bool trigger) = 0;
  // Whether `addr` is an address of this namespace, and on which interface (0 = not local).
  virtual int local_address_ifindex(const wire::Gid& addr) = 0;
  // Randomness for channel tokens, comm IDs, PSNs and ephemeral ports (unpredictable by default; a test
  // host may make it a known sequence).
  virtual uint64_t random_u64();
  // A line for the service's log: a rare event an operator (or a test) may need to tell apart.
  virtual void note(const std::string& /*line*/) {}
  // The IP-level membership of an IPv4 multicast group on interface `ifindex` (the kernel CM's
  // ip_mc_inc_group / ip_mc_dec_group for a RoCEv2 full-member join): one more or one fewer holder; the host
  // sends the IGMP reports. 0 or an errno.
  virtual int ip_multicast(int /*ifindex*/, const wire::Gid& /*group*/, bool /*join*/) { return 0; }
};

// Who is on the other end of a channel (SO_PEERCRED): a process may only migrate ids between channels of
// the same user.
struct ChannelOwner {
  int32_t pid = 0;
  uint32_t uid = 0;
};

struct CommandResult {
  int err = 0;               // errno for write(); 0 = success
  std::vector<uint8_t> out;  // response bytes (at most the header's `out`)
};

class CmService {
 public:
  static std::unique_ptr<CmService> create(CmHost& host);
  virtual ~CmService() = default;

  virtual void set_devices(std::vector<CmDevice> devices) = 0;
  virtual ChannelId open_channel(const ChannelOwner& owner) = 0;  // returns a random non-zero token
  virtual void close_channel(ChannelId ch) = 0;  // as the kernel's ucma_close: destroys the channel's ids
  // One write(): `cmd` = header + body as the app wrote it, `extra` as protocol.h says.
  virtual CommandResult command(ChannelId ch, std::span<const uint8_t> cmd,
                                std::span<const uint8_t> extra) = 0;
  virtual void on_mad(const MadIn& m) = 0;
  // Earliest time on_timer wants to run (UINT64_MAX: none); on_timer runs everything due.
  virtual uint64_t next_deadline_ns() const = 0;
  virtual void on_timer() = 0;

  // As the kernel counts per port (ports/N/cm_tx_msgs/, cm_rx_msgs/, cm_tx_retries/, cm_rx_duplicates/),
  // by CM attribute id - 0x10 (REQ .. APR).
  struct Counters {
    uint64_t tx[16] = {}, rx[16] = {}, tx_retries[16] = {}, rx_duplicates[16] = {};
    uint64_t rx_dropped = 0;  // malformed or unusable MADs
    uint64_t retries() const;
    uint64_t duplicates() const;
  };
  virtual const Counters& counters() const = 0;  // every device
  virtual Counters device_counters(uint32_t device) const = 0;
  // One line per live id, for `urxe cm show` ("rdma resource show cm_id").
  virtual std::vector<std::string> describe_ids() const = 0;
};

}  // namespace urxe::cm
