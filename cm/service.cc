// Skeleton: channels, CREATE_ID, DESTROY_ID, GET_EVENT (nothing is ever queued yet). Being filled in.
#include "cm/service.h"

#include <cerrno>
#include <cstring>
#include <map>
#include <random>

#include "cm/ucma_abi.h"

namespace urxe::cm {
namespace {

struct Id {
  uint32_t handle = 0;
  uint64_t uid = 0;
  ChannelId channel = 0;
  uint32_t events_reported = 0;
};

class Service final : public CmService {
 public:
  explicit Service(CmHost& host) : host_(host), rng_(std::random_device{}()) {}
  void set_devices(std::vector<CmDevice> devices) override { devices_ = std::move(devices); }
  ChannelId open_channel(const ChannelOwner& owner) override {
    ChannelId t = 0;
    while (t == 0 || channels_.count(t)) t = rng_();
    channels_[t] = owner;
    return t;
  }
  void close_channel(ChannelId ch) override {
    for (auto it = ids_.begin(); it != ids_.end();) it = it->second.channel == ch ? ids_.erase(it) : ++it;
    channels_.erase(ch);
  }
  CommandResult command(ChannelId ch, std::span<const uint8_t> cmd, std::span<const uint8_t>) override {
    CommandResult r;
    rdma_ucm_cmd_hdr hdr{};
    if (cmd.size() < sizeof hdr || !channels_.count(ch)) return {EINVAL, {}};
    std::memcpy(&hdr, cmd.data(), sizeof hdr);
    if (hdr.cmd >= kUcmaCommandCount || hdr.in + sizeof hdr > cmd.size()) return {EINVAL, {}};
    const UcmaCommandInfo& info = kUcmaCommands[hdr.cmd];
    if (info.resp_size && hdr.out < info.resp_size) return {ENOSPC, {}};
    uint8_t body[512] = {};
    std::memcpy(body, cmd.data() + sizeof hdr, std::min<size_t>(hdr.in, sizeof body));
    switch (hdr.cmd) {
      case RDMA_USER_CM_CMD_CREATE_ID: {
        rdma_ucm_create_id c;
        std::memcpy(&c, body, sizeof c);
        Id id;
        id.handle = next_handle_++;
        id.uid = c.uid;
        id.channel = ch;
        ids_[id.handle] = id;
        rdma_ucm_create_id_resp resp{id.handle};
        r.out.assign(reinterpret_cast<uint8_t*>(&resp), reinterpret_cast<uint8_t*>(&resp) + sizeof resp);
        return r;
      }
      case RDMA_USER_CM_CMD_DESTROY_ID: {
        rdma_ucm_destroy_id c;
        std::memcpy(&c, body, sizeof c);
        auto it = ids_.find(c.id);
        if (it == ids_.end() || it->second.channel != ch) return {EINVAL, {}};
        rdma_ucm_destroy_id_resp resp{it->second.events_reported};
        ids_.erase(it);
        r.out.assign(reinterpret_cast<uint8_t*>(&resp), reinterpret_cast<uint8_t*>(&resp) + sizeof resp);
        return r;
      }
      case RDMA_USER_CM_CMD_GET_EVENT:
        return {EAGAIN, {}};
      default:
        return {ENOSYS, {}};
    }
  }
  void on_mad(const MadIn&) override {}
  uint64_t next_deadline_ns() const override { return UINT64_MAX; }
  void on_timer() override {}
  const Counters& counters() const override { return counters_; }
  std::vector<std::string> describe_ids() const override { return {}; }

 private:
  CmHost& host_;
  std::mt19937_64 rng_;
  std::vector<CmDevice> devices_;
  std::map<ChannelId, ChannelOwner> channels_;
  std::map<uint32_t, Id> ids_;
  uint32_t next_handle_ = 1;
  Counters counters_;
};

}  // namespace

std::unique_ptr<CmService> CmService::create(CmHost& host) { return std::make_unique<Service>(host); }

}  // namespace urxe::cm
