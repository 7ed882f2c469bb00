// A file's first bytes and its whole size: what a format's header parser
// needs to check a file without reading it all (tensors/npy.h, tokens.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>

#include "common/status.h"

namespace claw::tensors {

struct FileHead {
  std::string bytes;  // at most the `max` first bytes
  uint64_t size = 0;  // the whole file's
};

inline Result<FileHead> ReadFileHead(const std::string& path, uint64_t max) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return NotFound("cannot open " + path);
  FileHead h;
  h.size = static_cast<uint64_t>(f.tellg());
  h.bytes.assign(static_cast<size_t>(std::min(h.size, max)), '\0');
  f.seekg(0);
  f.read(h.bytes.data(), static_cast<std::streamsize>(h.bytes.size()));
  if (!f) return Unavailable("cannot read " + path);
  return h;
}

}  // namespace claw::tensors
