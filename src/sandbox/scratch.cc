#include "sandbox/scratch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string_view>
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

bool HeldDeletedBytes(const std::vector<pid_t>& pids, dev_t dev, size_t max_entries,
                      uint64_t* bytes) {
  *bytes = 0;
#ifdef __linux__
  size_t entries = 0;
  bool whole = true;
  std::map<ino_t, uint64_t> files;  // inode -> bytes
  auto count = [&files](ino_t ino, uint64_t bytes) {
    uint64_t& b = files[ino];
    b = std::max(b, bytes);
  };
  constexpr std::string_view kDeleted = " (deleted)";
  for (pid_t pid : pids) {
    if (!whole) break;
    const std::string proc = "/proc/" + std::to_string(pid);
    std::error_code ec;
    for (fs::directory_iterator it(proc + "/fd", ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
      if (++entries > max_entries) {
        whole = false;
        break;
      }
      std::error_code lec;
      fs::path target = fs::read_symlink(it->path(), lec);
      const std::string& t = target.native();
      if (lec || !std::string_view(t).ends_with(kDeleted)) continue;
      struct stat st;
      if (stat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 0 &&
          st.st_dev == dev) {
        count(st.st_ino, static_cast<uint64_t>(st.st_blocks) * 512);
      }
    }
    // Mapped, with every descriptor closed: "start-end perms offset maj:min inode path".
    std::ifstream maps(proc + "/maps");
    for (std::string line; whole && std::getline(maps, line);) {
      if (++entries > max_entries) {
        whole = false;
        break;
      }
      if (!std::string_view(line).ends_with(kDeleted)) continue;
      unsigned long long start = 0, end = 0, offset = 0, inode = 0;
      unsigned maj = 0, min = 0;
      if (std::sscanf(line.c_str(), "%llx-%llx %*s %llx %x:%x %llu", &start, &end, &offset, &maj,
                      &min, &inode) != 6 ||
          inode == 0 || makedev(maj, min) != dev || end < start) {
        continue;
      }
      count(static_cast<ino_t>(inode), offset + (end - start));
    }
  }
  for (const auto& [ino, b] : files) *bytes += b;
  return whole;
#else
  (void)pids;
  (void)dev;
  (void)max_entries;
  return true;
#endif
}

}  // namespace claw
