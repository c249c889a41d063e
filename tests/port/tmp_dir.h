// A fresh directory under /tmp for one test, removed with everything in it when the test ends.
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace urxe::test {

struct TmpDir {
  std::string path;
  explicit TmpDir(const char* name) {
    std::string t = std::string("/tmp/") + name + ".XXXXXX";
    path = ::mkdtemp(t.data());
  }
  ~TmpDir() { std::filesystem::remove_all(path); }
  TmpDir(const TmpDir&) = delete;
  TmpDir& operator=(const TmpDir&) = delete;
};

}  // namespace urxe::test
