// Runs a libFuzzer-style target over files without libFuzzer, so every build (Release, ASan) exercises the
// fuzz invariants on the seed corpus. With --mutate it also feeds every prefix of each input and every
// input with one byte changed (bit 0 and bit 7 flipped), deterministically.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// Each call gets its own exactly sized heap copy, so ASan sees any read past the end.
void feed(const std::vector<uint8_t>& bytes, size_t len) {
  std::vector<uint8_t> copy(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(len));
  LLVMFuzzerTestOneInput(copy.data(), copy.size());
}

size_t replay(const std::vector<uint8_t>& in, bool mutate) {
  feed(in, in.size());
  if (!mutate) return 1;
  size_t runs = 1;
  for (size_t len = 0; len < in.size(); ++len, ++runs) feed(in, len);
  std::vector<uint8_t> m = in;
  for (size_t i = 0; i < m.size(); ++i) {
    for (uint8_t bit : {uint8_t{0x01}, uint8_t{0x80}}) {
      m[i] ^= bit;
      feed(m, m.size());
      m[i] ^= bit;
      ++runs;
    }
  }
  return runs;
}

}  // namespace

int main(int argc, char** argv) {
  bool mutate = false;
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--mutate") == 0) {
      mutate = true;
      continue;
    }
    std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
    } else {
      files.push_back(p);
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: %s [--mutate] FILE|DIR...  (no input files found)\n", argv[0]);
    return 2;
  }
  size_t runs = 0;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    runs += replay(bytes, mutate);
  }
  std::printf("%zu inputs, %zu runs, all invariants held\n", files.size(), runs);
  return 0;
}
