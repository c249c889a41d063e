#include "provider/shared_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace urxe::provider {

bool write_shared_file(const std::string& path, const std::string& text, std::string& err) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) {
    err = path + ": " + std::strerror(errno);
    return false;
  }
  ::fchmod(fd, 0666);  // whoever creates it: every user's apps update it
  bool ok = true;
  struct stat st {};
  if (::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    err = path + ": " + std::strerror(errno);
    ok = false;
  } else if (::fstat(fd, &st) == 0 && st.st_size > static_cast<off_t>(text.size())) {
    [[maybe_unused]] int r = ::ftruncate(fd, static_cast<off_t>(text.size()));
  }
  ::close(fd);
  return ok;
}

}  // namespace urxe::provider
