// Completion channels. libibverbs makes them with a kernel command on cmd_fd and no provider hook, so
// when preloaded we interpose both verbs: a urxe context gets a pipe (read end = channel fd, the progress
// thread writes CQ pointers into the other end); any other context goes to libibverbs' own function.
// Exported (urxe.map), so built into liburxe-rdmav34.so itself, not urxe_provider_core.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "provider/internal.h"

using namespace urxe::provider;

namespace {
template <class Fn>
Fn next_symbol(const char* name) {
  return reinterpret_cast<Fn>(dlvsym(RTLD_NEXT, name, "IBVERBS_1.0"));
}
}  // namespace

extern "C" __attribute__((visibility("default"))) ibv_comp_channel* ibv_create_comp_channel(
    ibv_context* context) {
  if (!is_urxe_context(context)) {
    using Fn = ibv_comp_channel* (*)(ibv_context*);
    static Fn real = next_symbol<Fn>("ibv_create_comp_channel");
    if (!real) {
      errno = ENOSYS;
      return nullptr;
    }
    return real(context);
  }
  auto* ch = static_cast<UrxeChannel*>(std::calloc(1, sizeof(UrxeChannel)));
  if (!ch) {
    errno = ENOMEM;
    return nullptr;
  }
  int fds[2];
  if (!record_pair(fds[0], fds[1])) {
    std::free(ch);
    return nullptr;
  }
  ::fcntl(fds[1], F_SETFL, O_NONBLOCK);
  ch->channel.context = context;
  ch->channel.fd = fds[0];
  ch->channel.refcnt = 0;
  ch->write_fd = fds[1];
  ch->magic = kChannelMagic;
  URXE_DEBUG("ibv_create_comp_channel -> fd %d", fds[0]);
  return &ch->channel;
}

extern "C" __attribute__((visibility("default"))) int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  if (!is_our_channel(channel)) {
    using Fn = int (*)(ibv_comp_channel*);
    static Fn real = next_symbol<Fn>("ibv_destroy_comp_channel");
    return real ? real(channel) : ENOSYS;
  }
  auto* ch = reinterpret_cast<UrxeChannel*>(channel);
  pthread_mutex_lock(&channel->context->mutex);
  const bool busy = channel->refcnt != 0;  // CQs still use it (the core counts them in verbs_init_cq)
  pthread_mutex_unlock(&channel->context->mutex);
  if (busy) return EBUSY;
  ::close(ch->channel.fd);
  ::close(ch->write_fd);
  ch->magic = 0;
  std::free(ch);
  return 0;
}
