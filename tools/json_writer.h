// A minimal streaming JSON writer: one object per line for `urxe ... --json`. It tracks only whether a
// comma is needed, so callers must pair begin/end themselves; strings are escaped per RFC 8259.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace urxe::tools {

class JsonWriter {
 public:
  JsonWriter& begin_object(std::string_view key = {});
  JsonWriter& end_object();
  JsonWriter& begin_array(std::string_view key = {});
  JsonWriter& end_array();
  JsonWriter& str(std::string_view key, std::string_view v);
  JsonWriter& num(std::string_view key, uint64_t v);
  JsonWriter& num(std::string_view key, int64_t v);
  JsonWriter& num(std::string_view key, uint32_t v) { return num(key, uint64_t{v}); }
  JsonWriter& num(std::string_view key, uint16_t v) { return num(key, uint64_t{v}); }
  JsonWriter& num(std::string_view key, uint8_t v) { return num(key, uint64_t{v}); }
  JsonWriter& boolean(std::string_view key, bool v);
  JsonWriter& null(std::string_view key);
  // Array elements (no key).
  JsonWriter& str(std::string_view v) { return str({}, v); }
  JsonWriter& num(uint64_t v) { return num({}, v); }

  const std::string& text() const { return out_; }
  std::string take() { return std::move(out_); }

  static void escape(std::string& out, std::string_view s);

 private:
  void prefix(std::string_view key);  // comma if needed, then "key": when inside an object
  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
};

}  // namespace urxe::tools
