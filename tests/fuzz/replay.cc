#include "tests/fuzz/replay.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace urxe::fuzz {
namespace {

void feed(const Bytes& bytes, size_t len) {
  Bytes copy(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(len));
  LLVMFuzzerTestOneInput(copy.data(), copy.size());
}

}  // namespace

size_t replay(const Bytes& in, const Variations* v) {
  feed(in, in.size());
  if (!v) return 1;
  size_t runs = 1;
  for (size_t len = 0; len < in.size(); len += v->cut_step, ++runs) feed(in, len);
  Bytes m = in;
  for (size_t i = 0; i < m.size(); ++i) {
    for (uint8_t flip : v->flips) {
      m[i] ^= flip;
      feed(m, m.size());
      m[i] ^= flip;
      ++runs;
    }
  }
  return runs;
}

std::vector<Bytes> read_inputs(const std::vector<std::string>& paths) {
  std::vector<std::filesystem::path> files;
  for (const auto& s : paths) {
    const std::filesystem::path p(s);
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
    } else {
      files.push_back(p);
    }
  }
  std::vector<Bytes> out;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

int seed_replay_main(int argc, char** argv, const std::vector<Bytes>& seeds, const Variations& v) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 2 && args[0] == "--write-seeds") {
    for (size_t i = 0; i < seeds.size(); ++i) {
      std::ofstream f(args[1] + "/seed" + std::to_string(i), std::ios::binary);
      f.write(reinterpret_cast<const char*>(seeds[i].data()), static_cast<std::streamsize>(seeds[i].size()));
    }
    return 0;
  }
  if (!args.empty()) {
    for (const Bytes& in : read_inputs(args)) replay(in, nullptr);
    return 0;
  }
  size_t runs = 0;
  for (const Bytes& s : seeds) runs += replay(s, &v);
  std::printf("%s: %zu seeds, %zu runs, invariants held\n", std::filesystem::path(argv[0]).filename().c_str(),
              seeds.size(), runs);
  return 0;
}

}  // namespace urxe::fuzz
