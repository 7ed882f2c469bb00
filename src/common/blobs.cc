#include "common/blobs.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <algorithm>
#include <filesystem>
#include <vector>

#include "common/crypto.h"

namespace claw {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTmpDir = "tmp";

// A file descriptor closed on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

Status WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Unavailable(std::string("write failed: ") + strerror(errno));
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

// Reads `fd` to its end in chunks, handing each to `sink`; false from the
// sink stops early (not an error).
Status ReadAll(int fd, const std::function<bool(std::string_view)>& sink) {
  std::string buf(kBlobChunkBytes, '\0');
  for (;;) {
    ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Unavailable(std::string("read failed: ") + strerror(errno));
    if (n == 0) return Status::Ok();
    if (!sink(std::string_view(buf.data(), static_cast<size_t>(n)))) return Status::Ok();
  }
}

}  // namespace

bool IsBlobHash(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Sha256::Sha256() {
  static_assert(sizeof(state_) >= sizeof(crypto_hash_sha256_state));
  InitCrypto();
  crypto_hash_sha256_init(reinterpret_cast<crypto_hash_sha256_state*>(state_));
}

void Sha256::Update(std::string_view data) {
  crypto_hash_sha256_update(reinterpret_cast<crypto_hash_sha256_state*>(state_),
                            reinterpret_cast<const unsigned char*>(data.data()), data.size());
}

std::string Sha256::FinishHex() {
  unsigned char h[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(reinterpret_cast<crypto_hash_sha256_state*>(state_), h);
  return ToHex(std::string_view(reinterpret_cast<const char*>(h), sizeof h));
}

std::string Sha256Hex(std::string_view data) {
  Sha256 s;
  s.Update(data);
  return s.FinishHex();
}

// ---- BlobDir ----------------------------------------------------------------

Status BlobDir::Init() {
  std::error_code ec;
  fs::create_directories(fs::path(root_) / kTmpDir, ec);
  if (ec) return Unavailable("cannot create blob dir " + root_ + ": " + ec.message());
  for (const auto& e : fs::directory_iterator(fs::path(root_) / kTmpDir, ec)) {
    fs::remove(e.path(), ec);
  }
  return Status::Ok();
}

std::string BlobDir::PathOf(std::string_view hash) const {
  std::string h(hash);
  return root_ + "/" + h.substr(0, 2) + "/" + h;
}

bool BlobDir::Has(std::string_view hash) const {
  struct stat st;
  return IsBlobHash(hash) && stat(PathOf(hash).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

void BlobDir::Touch(std::string_view hash) const {
  if (IsBlobHash(hash)) utimensat(AT_FDCWD, PathOf(hash).c_str(), nullptr, 0);
}

void BlobDir::Remove(std::string_view hash) const {
  if (IsBlobHash(hash)) unlink(PathOf(hash).c_str());
}

uint64_t BlobDir::Trim(uint64_t max_bytes, const std::function<bool(std::string_view)>& keep,
                       std::chrono::seconds spare) const {
  // File times are the wall clock's.
  const int64_t spare_after_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          (std::chrono::system_clock::now() - spare).time_since_epoch())
          .count();
  struct Entry {
    int64_t used_ns;
    uint64_t bytes;
    std::string hash;
  };
  std::vector<Entry> blobs;
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& sub : fs::directory_iterator(root_, ec)) {
    std::string prefix = sub.path().filename().string();
    if (prefix.size() != 2) continue;  // the temporary directory, or strays
    std::error_code sec;
    for (const auto& e : fs::directory_iterator(sub.path(), sec)) {
      std::string hash = e.path().filename().string();
      struct stat st;
      if (!IsBlobHash(hash) || stat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
#ifdef __APPLE__
      const timespec& used = st.st_mtimespec;
#else
      const timespec& used = st.st_mtim;
#endif
      int64_t ns = static_cast<int64_t>(used.tv_sec) * 1'000'000'000 + used.tv_nsec;
      blobs.push_back(Entry{ns, static_cast<uint64_t>(st.st_size), std::move(hash)});
      total += static_cast<uint64_t>(st.st_size);
    }
  }
  if (total <= max_bytes) return 0;
  std::sort(blobs.begin(), blobs.end(),
            [](const Entry& a, const Entry& b) { return a.used_ns < b.used_ns; });
  uint64_t removed = 0;
  for (const Entry& b : blobs) {
    if (total - removed <= max_bytes) break;
    if (spare.count() > 0 && b.used_ns >= spare_after_ns) continue;
    if (keep && keep(b.hash)) continue;
    if (unlink(PathOf(b.hash).c_str()) == 0) removed += b.bytes;
  }
  return removed;
}

Result<uint64_t> BlobDir::Size(std::string_view hash) const {
  struct stat st;
  if (!IsBlobHash(hash) || stat(PathOf(hash).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return NotFound("no blob " + std::string(hash));
  }
  return static_cast<uint64_t>(st.st_size);
}

BlobDir::Writer::Writer(const BlobDir* dir, std::string hash, uint64_t max_bytes, int fd,
                        std::string tmp)
    : dir_(dir), hash_(std::move(hash)), max_bytes_(max_bytes), fd_(fd), tmp_(std::move(tmp)) {}

BlobDir::Writer::~Writer() {
  if (fd_ >= 0) close(fd_);
  if (!committed_) unlink(tmp_.c_str());
}

Status BlobDir::Writer::Write(std::string_view data) {
  if (committed_ || fd_ < 0) return FailedPrecondition("blob writer already closed");
  if (written_ + data.size() > max_bytes_) {
    return ResourceExhausted("blob " + hash_ + " is larger than the limit of " +
                             std::to_string(max_bytes_) + " bytes");
  }
  CLAW_RETURN_IF_ERROR(WriteAll(fd_, data));
  sha_.Update(data);
  written_ += data.size();
  return Status::Ok();
}

Result<uint64_t> BlobDir::Writer::Commit() {
  if (committed_ || fd_ < 0) return FailedPrecondition("blob writer already closed");
  std::string got = sha_.FinishHex();
  if (got != hash_) {
    return InvalidArgument("blob content does not match its name: expected sha256 " + hash_ +
                           ", received " + std::to_string(written_) + " bytes hashing to " + got);
  }
  if (fsync(fd_) != 0) return Unavailable(std::string("fsync failed: ") + strerror(errno));
  close(fd_);
  fd_ = -1;
  std::string dest = dir_->PathOf(hash_);
  std::error_code ec;
  fs::create_directories(fs::path(dest).parent_path(), ec);
  if (rename(tmp_.c_str(), dest.c_str()) != 0) {
    return Unavailable("cannot publish blob " + hash_ + ": " + strerror(errno));
  }
  committed_ = true;
  return written_;
}

Result<std::unique_ptr<BlobDir::Writer>> BlobDir::Begin(std::string_view hash,
                                                        uint64_t max_bytes) const {
  if (!IsBlobHash(hash)) {
    return InvalidArgument("'" + std::string(hash.substr(0, 80)) +
                           "' is not a blob name (64 lowercase hex digits of SHA-256)");
  }
  std::string tmp = root_ + "/" + kTmpDir + "/" + std::string(hash.substr(0, 16)) + "-" +
                    RandomHex(8);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Unavailable("cannot create " + tmp + ": " + strerror(errno));
  return std::unique_ptr<Writer>(new Writer(this, std::string(hash), max_bytes, fd, tmp));
}

Result<std::string> BlobDir::Put(std::string_view data) const {
  std::string hash = Sha256Hex(data);
  if (Has(hash)) return hash;
  auto w = Begin(hash, data.size());
  if (!w.ok()) return w.status();
  CLAW_RETURN_IF_ERROR((*w)->Write(data));
  auto committed = (*w)->Commit();
  if (!committed.ok()) return committed.status();
  return hash;
}

Result<std::string> BlobDir::Import(const std::string& path, uint64_t max_bytes) const {
  Fd in(open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (in.fd < 0) {
    return errno == ELOOP ? InvalidArgument(path + " is a symbolic link; not followed")
                          : NotFound("cannot open " + path + ": " + strerror(errno));
  }
  struct stat st;
  if (fstat(in.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return InvalidArgument(path + " is not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return ResourceExhausted(path + " is larger than the limit of " + std::to_string(max_bytes) +
                             " bytes");
  }
  // Hash first (the name must be known before a Writer), then copy while
  // hashing again: the Writer's check catches a file that changed between.
  Sha256 sha;
  CLAW_RETURN_IF_ERROR(ReadAll(in.fd, [&](std::string_view d) {
    sha.Update(d);
    return true;
  }));
  std::string hash = sha.FinishHex();
  if (Has(hash)) {
    Touch(hash);  // just made again: the most recently used
    return hash;
  }
  if (lseek(in.fd, 0, SEEK_SET) != 0) return Unavailable("cannot rewind " + path);
  auto w = Begin(hash, max_bytes);
  if (!w.ok()) return w.status();
  Status copy = Status::Ok();
  CLAW_RETURN_IF_ERROR(ReadAll(in.fd, [&](std::string_view d) {
    copy = (*w)->Write(d);
    return copy.ok();
  }));
  CLAW_RETURN_IF_ERROR(copy);
  auto committed = (*w)->Commit();
  if (!committed.ok()) return committed.status();
  return hash;
}

Status BlobDir::Read(std::string_view hash,
                     const std::function<bool(std::string_view)>& sink) const {
  if (!IsBlobHash(hash)) return InvalidArgument("not a blob name: " + std::string(hash.substr(0, 80)));
  Fd in(open(PathOf(hash).c_str(), O_RDONLY | O_CLOEXEC));
  if (in.fd < 0) return NotFound("no blob " + std::string(hash));
  return ReadAll(in.fd, sink);
}

Result<std::string> BlobDir::Load(std::string_view hash, uint64_t max_bytes) const {
  auto size = Size(hash);
  if (!size.ok()) return size.status();
  if (*size > max_bytes) {
    return ResourceExhausted("blob " + std::string(hash) + ": " + std::to_string(*size) +
                             " bytes is more than the limit of " + std::to_string(max_bytes));
  }
  std::string out;
  out.reserve(*size);
  Status st = Read(hash, [&](std::string_view chunk) {
    out.append(chunk);
    return out.size() <= max_bytes;
  });
  if (!st.ok()) return st;
  if (out.size() > max_bytes) return ResourceExhausted("blob " + std::string(hash) + ": grew while read");
  return out;
}

Status BlobDir::Export(std::string_view hash, const std::string& dest, unsigned mode) const {
  std::string tmp = dest + ".claw-" + RandomHex(4);
  Fd out(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
  if (out.fd < 0) return Unavailable("cannot create " + tmp + ": " + strerror(errno));
  Sha256 sha;
  Status copy = Status::Ok();
  Status read = Read(hash, [&](std::string_view d) {
    sha.Update(d);
    copy = WriteAll(out.fd, d);
    return copy.ok();
  });
  if (read.ok()) read = copy;
  if (read.ok() && sha.FinishHex() != hash) {
    unlink(PathOf(hash).c_str());  // corrupt: let it be fetched again
    read = Internal("stored blob " + std::string(hash) + " no longer matches its hash; removed");
  }
  if (read.ok() && rename(tmp.c_str(), dest.c_str()) != 0) {
    read = Unavailable("cannot create " + dest + ": " + strerror(errno));
  }
  if (!read.ok()) unlink(tmp.c_str());
  return read;
}

}  // namespace claw
