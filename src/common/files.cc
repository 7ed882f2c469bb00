#include "common/files.h"

#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace claw {

Result<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return Unavailable("cannot read " + path);
  return ss.str();
}

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

void CloseFrom(int first) noexcept {
#if defined(__linux__) && defined(SYS_close_range)
  if (syscall(SYS_close_range, first, ~0U, 0) == 0) return;
#endif
  long max = sysconf(_SC_OPEN_MAX);
  for (long fd = first; fd < (max > 0 ? max : 65536); ++fd) close(static_cast<int>(fd));
}

}  // namespace claw
