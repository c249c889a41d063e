// Between the UCMA shim (in liburxe-rdmav34.so, preloaded into the application) and the CM service
// (`urxe cm`, one per run directory and network namespace). The shim turns each open() of
// /dev/infiniband/rdma_cm into one connection on a SOCK_SEQPACKET unix socket and each write() of a UCMA
// command into one request and one reply on it; the service owns every id, event and connection.
//
//   socket  <run_dir>/cm/<netns>.sock   (<netns>: hostnet::NetnsId text "DEV:INO" of the caller's namespace)
//   lock    <run_dir>/cm/<netns>.lock   (flock'ed by the running service; the shim starts one under it)
//   pid     <run_dir>/cm/<netns>.pid
//
// Connection start: the shim sends Hello; the service answers HelloReply with an eventfd attached
// (SCM_RIGHTS, EFD_SEMAPHORE). That eventfd is the fd the application gets: the service keeps its count
// equal to the number of events queued on the channel, so poll()/epoll readiness is exactly the kernel's
// "an event is queued". The channel (and every id on it) is destroyed when the connection closes.
//
// Then, per write(): Request + the write()'s bytes (header and body, as the app wrote them) + `extra`
// bytes (SET_OPTION: the option value read from optval; MIGRATE_ID: the u64 channel token of the channel
// that cmd.fd names), answered by Reply + `out_len` bytes, which the shim copies to the command's response
// pointer. err != 0: write() fails with that errno. GET_EVENT never blocks in the service: with nothing
// queued it answers EAGAIN and the shim, unless the fd is O_NONBLOCK, waits for the eventfd and asks again.
// One request at a time per connection (the shim serialises threads on a channel).
//
// Status (`urxe cm show`): a Hello with kStatusMagic instead of kProtoMagic opens no channel; the service
// answers with the status as text (live ids, device list, MAD counters), in messages of at most
// kMaxMessage bytes that split only at line ends, then closes the connection.
#pragma once
#include <cstdint>
#include <string>

namespace urxe::cm {

inline constexpr uint32_t kProtoMagic = 0x4d435255;  // "URCM"
inline constexpr uint32_t kStatusMagic = 0x53435255;  // "URCS"
inline constexpr uint32_t kProtoVersion = 1;
inline constexpr uint32_t kMaxMessage = 4096;  // any Request or Reply with its bytes fits

struct Hello {
  uint32_t magic = kProtoMagic;
  uint32_t version = kProtoVersion;
};

struct HelloReply {
  uint32_t magic = kProtoMagic;
  uint32_t version = kProtoVersion;
  int32_t err = 0;  // != 0: refused (the eventfd is not attached)
  uint32_t reserved = 0;
  uint64_t channel_token = 0;  // random; names this channel in another channel's MIGRATE_ID
};

struct Request {
  uint32_t seq = 0;
  uint32_t cmd_len = 0;    // bytes of the write() that follow (header + body)
  uint32_t extra_len = 0;  // bytes after them
  uint32_t reserved = 0;
};

struct Reply {
  uint32_t seq = 0;
  int32_t err = 0;
  uint32_t out_len = 0;  // bytes that follow, at most the command header's `out`
  uint32_t reserved = 0;
};

// Where the service of the namespace `netns` (NetnsId text) listens, etc., under run_dir.
inline std::string cm_dir(const std::string& run_dir) {
  return run_dir + "/cm";
}
inline std::string cm_socket_path(const std::string& run_dir, const std::string& netns) {
  return cm_dir(run_dir) + "/" + netns + ".sock";
}
inline std::string cm_lock_path(const std::string& run_dir, const std::string& netns) {
  return cm_dir(run_dir) + "/" + netns + ".lock";
}
inline std::string cm_pid_path(const std::string& run_dir, const std::string& netns) {
  return cm_dir(run_dir) + "/" + netns + ".pid";
}

}  // namespace urxe::cm
