#include "sandbox/scratch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <utility>
#include <vector>

namespace claw {
namespace {

namespace fs = std::filesystem;

void MakeWritable(const fs::path& dir) {
  struct stat st;
  if (lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0700) != 0700) {
    chmod(dir.c_str(), (st.st_mode & 07777) | 0700);
  }
}

}  // namespace

bool RemoveTree(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return true;
  // Open every directory first (a task may have made some unreadable).
  MakeWritable(path);
  for (auto it = fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec)) MakeWritable(it->path());
  }
  fs::remove_all(path, ec);
  return !fs::exists(fs::symlink_status(path, ec));
}

bool EmptyDirectory(const std::string& dir) {
  std::error_code ec;
  bool ok = true;
  for (const auto& e : fs::directory_iterator(dir, ec)) ok = RemoveTree(e.path().string()) && ok;
  return ok;
}

uint64_t DiskUsage(const std::string& dir, uint64_t stop_above, bool* unreadable) {
  uint64_t bytes = 0;
  std::set<std::pair<dev_t, ino_t>> linked;
  std::vector<fs::path> stack = {dir};
  while (!stack.empty()) {
    fs::path d = std::move(stack.back());
    stack.pop_back();
    // Nothing is changed here: the task may still run and swap names for
    // links. A directory it made unreadable (to an agent not running as
    // root) makes the count unknowable, and says so.
    std::error_code ec;
    fs::directory_iterator it(d, ec);
    if (ec) {
      if (unreadable && ec != std::errc::no_such_file_or_directory) *unreadable = true;
      continue;
    }
    for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
      struct stat st;
      if (lstat(it->path().c_str(), &st) != 0) continue;
      if (S_ISDIR(st.st_mode)) {
        stack.push_back(it->path());
      } else if (st.st_nlink > 1 && !linked.emplace(st.st_dev, st.st_ino).second) {
        continue;
      }
      bytes += static_cast<uint64_t>(st.st_blocks) * 512;
      if (stop_above && bytes > stop_above) return bytes;
    }
  }
  return bytes;
}

}  // namespace claw
