#include "common/files.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

namespace claw {

Status WriteFileAtomically(const std::string& path, const std::string& content, mode_t mode) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc | std::ios::binary);
    if (!f) return Unavailable("cannot write " + tmp);
    f << content;
    if (!f.flush()) return Unavailable("cannot write " + tmp);
  }
  if (chmod(tmp.c_str(), mode) != 0) return Unavailable("cannot set the mode of " + tmp);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Unavailable("cannot rename " + tmp + " to " + path + ": " + ec.message());
  return Status::Ok();
}

}  // namespace claw
