// The service's clients: connections to its unix socket (cm/protocol.h). A shim's connection says Hello and
// gets a channel and the channel's eventfd (its count follows the channel's event queue), then sends one
// UCMA command at a time and reads its reply; a `urxe cm show` connection gets the status text and is
// closed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "cm/service.h"
#include "cm/service/common.h"

namespace urxe::cm {

class ClientSockets {
 public:
  // Client sockets join `ep` tagged (LoopTag::client, fd); `status_text` answers a status client.
  ClientSockets(CmService& service, LoopEpoll& ep, std::function<std::string()> status_text)
      : service_(service), ep_(ep), status_text_(std::move(status_text)) {}
  ClientSockets(const ClientSockets&) = delete;
  ClientSockets& operator=(const ClientSockets&) = delete;
  ~ClientSockets();

  // Every connection waiting on the listening socket.
  void accept_all(int listen_fd);
  // An event on a client's socket: writable (a status client's text goes out) or readable.
  void on_event(int fd, uint32_t epoll_events);
  // The channel's event queue grew by one / shrank by n: its eventfd's count follows.
  void event_queued(ChannelId ch);
  void events_dequeued(ChannelId ch, uint32_t n);

  bool empty() const { return clients_.empty(); }
  size_t channels() const;
  uint64_t last_drop_ns() const { return last_drop_ns_; }  // when a client last went (0 = never)

 private:
  struct Client {
    int fd = -1;
    int efd = -1;  // the channel's eventfd (the application's fd); -1 before Hello
    ChannelId ch = 0;
    ChannelOwner owner;
    bool status = false;  // a `urxe cm show` client: out is written, then the connection closed
    std::string out;
  };

  void readable(int fd);
  void writable(int fd);
  bool hello(Client& c, const uint8_t* msg, size_t n);
  bool send_channel(Client& c, int efd);
  bool request(Client& c, const uint8_t* msg, size_t n);
  void drop(int fd);

  CmService& service_;
  LoopEpoll& ep_;
  std::function<std::string()> status_text_;
  std::map<int, Client> clients_;
  std::map<ChannelId, int> channels_;  // channel -> client fd
  uint64_t last_drop_ns_ = 0;
};

}  // namespace urxe::cm
