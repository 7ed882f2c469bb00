// Content-addressed blobs: files named by the SHA-256 of their content (64
// lowercase hex digits, the same as `sha256sum` prints), so that anyone can
// check what they received against the name they asked for.
//
// BlobDir keeps blobs under <root>/<first two digits>/<hash>. Every way in
// verifies: a Writer publishes only when what was written hashes to the name
// it promised, Import hashes the file it copies, and Export re-hashes on the
// way out. Writes go through a temporary file and a rename, so a blob that
// exists under its name is complete; a crash leaves at most a temporary file,
// which the next Init() removes.
//
// Thread-safe: several threads (and processes) may write the same blob at
// once; the last rename wins with identical content.
#pragma once

#include <cstdint>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace claw {

inline constexpr size_t kBlobChunkBytes = 1 << 20;

// True for 64 lowercase hex digits.
bool IsBlobHash(std::string_view s);

// An incremental SHA-256 (libsodium).
class Sha256 {
 public:
  Sha256();
  void Update(std::string_view data);
  std::string FinishHex();  // 64 lowercase hex digits

 private:
  alignas(16) unsigned char state_[128];  // crypto_hash_sha256_state
};

std::string Sha256Hex(std::string_view data);

class BlobDir {
 public:
  explicit BlobDir(std::string root) : root_(std::move(root)) {}

  // Creates the directory and removes temporary files left by a crash.
  Status Init();
  const std::string& root() const { return root_; }

  std::string PathOf(std::string_view hash) const;
  bool Has(std::string_view hash) const;
  // NotFound if absent.
  Result<uint64_t> Size(std::string_view hash) const;

  // Receives one blob in pieces.
  class Writer {
   public:
    ~Writer();  // removes the temporary file unless committed
    // ResourceExhausted past the size limit; Unavailable on a disk error.
    Status Write(std::string_view data);
    // Publishes the blob if what was written hashes to the promised name;
    // InvalidArgument naming both hashes if not (nothing is published).
    Result<uint64_t> Commit();

   private:
    friend class BlobDir;
    Writer(const BlobDir* dir, std::string hash, uint64_t max_bytes, int fd, std::string tmp);
    const BlobDir* dir_;
    std::string hash_;
    uint64_t max_bytes_;
    int fd_;
    std::string tmp_;
    uint64_t written_ = 0;
    Sha256 sha_;
    bool committed_ = false;
  };
  // InvalidArgument for a malformed hash.
  Result<std::unique_ptr<Writer>> Begin(std::string_view hash, uint64_t max_bytes) const;

  // Stores `data` as a blob and returns its hash.
  Result<std::string> Put(std::string_view data) const;
  // Copies the regular file at `path` in and returns its hash. Symbolic
  // links are refused (InvalidArgument), never followed.
  Result<std::string> Import(const std::string& path, uint64_t max_bytes) const;
  // Copies the blob to `dest` (created with `mode`), checking its hash on
  // the way: Internal if the stored copy no longer matches its name (it is
  // then removed, so it can be fetched again).
  Status Export(std::string_view hash, const std::string& dest, unsigned mode = 0644) const;
  // Streams the blob in chunks of at most kBlobChunkBytes; stops early when
  // `sink` returns false. NotFound if absent.
  Status Read(std::string_view hash, const std::function<bool(std::string_view)>& sink) const;
  // The whole blob; ResourceExhausted if it is larger than `max_bytes`.
  Result<std::string> Load(std::string_view hash, uint64_t max_bytes) const;

  // A cache's upkeep. Touch marks a blob used now (Trim keeps the most
  // recently used); Remove deletes one (absent is fine). Trim removes the
  // least recently used blobs until all of them together take at most
  // `max_bytes`, never one that `keep` holds on to nor one used within
  // `spare` of now (a file a task has just written, not yet pinned), and
  // returns the bytes it removed.
  void Touch(std::string_view hash) const;
  void Remove(std::string_view hash) const;
  uint64_t Trim(uint64_t max_bytes, const std::function<bool(std::string_view)>& keep,
                std::chrono::seconds spare = std::chrono::seconds(0)) const;

 private:
  std::string root_;
};

}  // namespace claw
