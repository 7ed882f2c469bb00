// The ledger's Merkle tree, exactly as Certificate Transparency defines it
// (RFC 6962 section 2.1, RFC 9162 section 2.1): leaf hash SHA-256(0x00 ||
// entry), interior node SHA-256(0x01 || left || right), a tree of n leaves
// split at the largest power of two below n, the empty tree's root
// SHA-256(""). Any outsider holding a checkpoint (size, root) can check, with
// the verifiers below and nothing of ours, that an entry is in the log
// (inclusion proof) and that a later log extends an earlier one without
// changing or removing anything (consistency proof).
//
// MerkleTree keeps the hash of every complete, aligned subtree (about two
// hashes per leaf), so appending costs O(1) amortized hashes and the root at
// any earlier size, or any proof, costs O(log n). It holds hashes only; the
// entries themselves live in the store.
//
// Pure: no I/O, no clock. Not thread-safe: one owner.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace claw::ledger {

using Hash = std::array<unsigned char, 32>;

Hash Sha256(std::string_view data);
Hash LeafHash(std::string_view entry);
Hash NodeHash(const Hash& left, const Hash& right);
std::string_view AsBytes(const Hash& h);
// InvalidArgument unless `bytes` is exactly 32 bytes.
Result<Hash> HashFromBytes(std::string_view bytes);

class MerkleTree {
 public:
  // Appends the hash of one entry (LeafHash of it).
  void Append(const Hash& leaf_hash);
  uint64_t size() const { return levels_.empty() ? 0 : levels_[0].size(); }
  const Hash& leaf(uint64_t index) const { return levels_[0][index]; }

  Hash Root() const { return RootAt(size()); }
  // The root the tree had when it held `tree_size` leaves. InvalidArgument
  // past the current size.
  Result<Hash> Root(uint64_t tree_size) const;

  // The audit path of leaf `index` in the tree of `tree_size` leaves, leaf
  // side first (RFC 6962 PATH). InvalidArgument unless index < tree_size <=
  // size().
  Result<std::vector<Hash>> InclusionProof(uint64_t index, uint64_t tree_size) const;
  // The proof that the tree of `new_size` leaves extends the tree of
  // `old_size` (RFC 6962 PROOF); empty when old_size is 0 or equals
  // new_size. InvalidArgument unless old_size <= new_size <= size().
  Result<std::vector<Hash>> ConsistencyProof(uint64_t old_size, uint64_t new_size) const;

 private:
  Hash RootAt(uint64_t tree_size) const;
  Hash SubtreeHash(uint64_t begin, uint64_t end) const;
  void Path(uint64_t index, uint64_t begin, uint64_t end, std::vector<Hash>& out) const;
  void SubProof(uint64_t m, uint64_t begin, uint64_t end, bool whole,
                std::vector<Hash>& out) const;

  // levels_[k][i]: the hash of leaves [i * 2^k, (i + 1) * 2^k).
  std::vector<std::vector<Hash>> levels_;
};

// RFC 9162 section 2.1.3.2. OK when `proof` shows that the leaf with hash
// `leaf_hash` is at `index` in the tree of `tree_size` leaves whose root is
// `root`; otherwise PermissionDenied (or InvalidArgument for an index out of
// range) saying what failed.
Status VerifyInclusion(uint64_t index, uint64_t tree_size, const Hash& leaf_hash,
                       std::span<const Hash> proof, const Hash& root);

// RFC 9162 section 2.1.4.2. OK when `proof` shows that the tree of
// `new_size` leaves with root `new_root` extends the tree of `old_size`
// leaves with root `old_root`.
Status VerifyConsistency(uint64_t old_size, uint64_t new_size, const Hash& old_root,
                         const Hash& new_root, std::span<const Hash> proof);

}  // namespace claw::ledger
