#include "tools/sysfs_view.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace urxe::tools {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::string why(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// Covers the directory `target` with a tmpfs that holds what it held (each entry `keep` accepts: a
// directory or file bind-mounted from the original, a symlink copied) plus `extras` (name -> directory to
// bind there, replacing an entry of the same name). Read-only afterwards, so nothing is created in it by
// mistake; the bound entries stay as writable as they were. Returns "" or why not, with target as before.
std::string overlay_dir(const std::string& target,
                        const std::vector<std::pair<std::string, std::string>>& extras,
                        const std::function<bool(const std::string&)>& keep) {
  const int fd = ::open(target.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return why("cannot open", target);
  struct Entry {
    std::string name;
    unsigned char type;
    std::string link;
  };
  std::vector<Entry> entries;
  if (DIR* d = ::opendir(target.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == ".." || !keep(name)) continue;
      bool replaced = false;
      for (const auto& [x, src] : extras) replaced = replaced || x == name;
      if (replaced) continue;
      Entry en{name, e->d_type, {}};
      struct stat st {};
      if (en.type == DT_UNKNOWN && ::fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
        en.type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISLNK(st.st_mode) ? DT_LNK : DT_REG;
      if (en.type == DT_LNK) {
        char buf[4096];
        const ssize_t n = ::readlinkat(fd, name.c_str(), buf, sizeof buf);
        if (n <= 0 || n == sizeof buf) continue;
        en.link.assign(buf, static_cast<size_t>(n));
      }
      entries.push_back(std::move(en));
    }
    ::closedir(d);
  } else {
    const std::string err = why("cannot list", target);
    ::close(fd);
    return err;
  }
  // The original stays reachable through fd once the tmpfs hides it.
  const std::string orig = "/proc/self/fd/" + std::to_string(fd) + "/";
  constexpr unsigned long kFlags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
  if (::mount("urxe-sysfs", target.c_str(), "tmpfs", kFlags, "mode=755") != 0) {
    const std::string err = why("cannot mount a tmpfs on", target);
    ::close(fd);
    return err;
  }
  std::string err;
  auto bind = [&](const std::string& src, const std::string& name, bool dir) {
    const std::string at = target + "/" + name;
    const bool made = dir ? ::mkdir(at.c_str(), 0755) == 0
                          : ::close(::open(at.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644)) == 0;
    if (!made || ::mount(src.c_str(), at.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
      if (err.empty()) err = why("cannot bind " + src + " on", at);
  };
  for (const Entry& e : entries) {
    if (e.type == DT_LNK) {
      if (::symlink(e.link.c_str(), (target + "/" + e.name).c_str()) != 0 && err.empty())
        err = why("cannot link", target + "/" + e.name);
    } else {
      bind(orig + e.name, e.name, e.type == DT_DIR);
    }
  }
  for (const auto& [name, src] : extras) bind(src, name, true);
  if (err.empty() &&
      ::mount(nullptr, target.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | kFlags, nullptr) != 0)
    err = why("cannot make read-only", target);
  ::close(fd);
  if (!err.empty()) ::umount2(target.c_str(), MNT_DETACH);  // the binds go with it
  return err;
}

}  // namespace

std::string show_fake_sysfs(const provider::Paths& paths) {
  const std::string fake = paths.sysfs() + "/class";
  if (!exists(fake + "/infiniband")) return "no urxe device tree in " + paths.sysfs();
  if (::unshare(CLONE_NEWNS) != 0) return why("cannot make a private mount namespace:", "unshare");
  // Slaves of the caller's mounts: the host's later mounts still show here, nothing made here goes back.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) return why("cannot make", "/ rslave");

  const std::string sys = "/sys/class";
  std::vector<std::pair<std::string, std::string>> extras;
  const bool kernel_ib = exists(sys + "/infiniband");
  if (!kernel_ib) extras.emplace_back("infiniband", fake + "/infiniband");
  // With the kernel's own uverbs and rdma_cm, theirs stay (libibverbs reads only the kernel's then).
  if (!exists(sys + "/infiniband_verbs")) extras.emplace_back("infiniband_verbs", fake + "/infiniband_verbs");
  const bool fake_cm = exists(fake + "/misc/rdma_cm");
  const bool has_misc = exists(sys + "/misc");
  if (fake_cm && !has_misc) extras.emplace_back("misc", fake + "/misc");
  if (std::string err = overlay_dir(sys, extras, [](const std::string&) { return true; }); !err.empty())
    return err;

  // Only this network namespace's urxe devices (and the kernel's, if any).
  auto foreign = [&](const std::string& ibdev_path) {
    provider::DeviceConfig cfg;
    return provider::load_device_config(ibdev_path, cfg) && !provider::read_device_config(ibdev_path, cfg);
  };
  std::vector<std::pair<std::string, std::string>> devices;
  if (kernel_ib)
    if (DIR* d = ::opendir((fake + "/infiniband").c_str())) {
      while (dirent* e = ::readdir(d)) {
        const std::string name = e->d_name, path = fake + "/infiniband/" + name;
        if (name != "." && name != ".." && !foreign(path)) devices.emplace_back(name, path);
      }
      ::closedir(d);
    }
  std::string err = overlay_dir(sys + "/infiniband", devices, [&](const std::string& name) {
    return !foreign(sys + "/infiniband/" + name);
  });
  if (err.empty() && fake_cm && has_misc && !exists(sys + "/misc/rdma_cm"))
    err = overlay_dir(sys + "/misc", {{"rdma_cm", fake + "/misc/rdma_cm"}},
                      [](const std::string&) { return true; });
  if (!err.empty()) ::umount2(sys.c_str(), MNT_DETACH);
  return err;
}

}  // namespace urxe::tools
