#include "tools/json_writer.h"

#include <cstdio>

namespace urxe::tools {

void JsonWriter::escape(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (u < 0x20 || u == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", u);
          out += buf;
        } else {
          out += c;  // UTF-8 passes through unchanged
        }
    }
  }
  out += '"';
}

void JsonWriter::prefix(std::string_view k) {
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
  if (!k.empty()) {
    escape(out_, k);
    out_ += ':';
  }
}

JsonWriter& JsonWriter::begin_object(std::string_view k) {
  prefix(k);
  out_ += '{';
  first_.push_back(true);
  return *this;
}
JsonWriter& JsonWriter::end_object() {
  out_ += '}';
  first_.pop_back();
  return *this;
}
JsonWriter& JsonWriter::begin_array(std::string_view k) {
  prefix(k);
  out_ += '[';
  first_.push_back(true);
  return *this;
}
JsonWriter& JsonWriter::end_array() {
  out_ += ']';
  first_.pop_back();
  return *this;
}
JsonWriter& JsonWriter::str(std::string_view k, std::string_view v) {
  prefix(k);
  escape(out_, v);
  return *this;
}
JsonWriter& JsonWriter::num(std::string_view k, uint64_t v) {
  prefix(k);
  out_ += std::to_string(v);
  return *this;
}
JsonWriter& JsonWriter::num(std::string_view k, int64_t v) {
  prefix(k);
  out_ += std::to_string(v);
  return *this;
}
JsonWriter& JsonWriter::boolean(std::string_view k, bool v) {
  prefix(k);
  out_ += v ? "true" : "false";
  return *this;
}
JsonWriter& JsonWriter::null(std::string_view k) {
  prefix(k);
  out_ += "null";
  return *this;
}

}  // namespace urxe::tools
