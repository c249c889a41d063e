// A small file of the fake sysfs tree that every user's processes rewrite (port state, counters): shared by
// the device tree (provider/device_tree.h) and the counters (provider/stats.h), which include this, not
// each other.
#pragma once
#include <string>

namespace urxe::provider {

// Replaces a small file's contents in place (created 0666 if missing): a reader sees the old or the new text
// when the new one is not shorter, and any user may update a file another user's process created (the
// directory need not be writable, as a rename's would).
bool write_shared_file(const std::string& path, const std::string& text, std::string& err);

}  // namespace urxe::provider
