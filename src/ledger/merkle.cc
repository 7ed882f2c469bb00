#include "ledger/merkle.h"

#include <sodium.h>

#include <bit>
#include <cstring>

#include "common/crypto.h"

namespace claw::ledger {
namespace {

// The largest power of two strictly below n (n >= 2).
uint64_t SplitPoint(uint64_t n) { return std::bit_floor(n - 1); }

bool IsPowerOfTwo(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

}  // namespace

Hash Sha256(std::string_view data) {
  InitCrypto();
  Hash out;
  crypto_hash_sha256(out.data(), reinterpret_cast<const unsigned char*>(data.data()),
                     data.size());
  return out;
}

Hash LeafHash(std::string_view entry) {
  InitCrypto();
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  const unsigned char prefix = 0x00;
  crypto_hash_sha256_update(&st, &prefix, 1);
  crypto_hash_sha256_update(&st, reinterpret_cast<const unsigned char*>(entry.data()),
                            entry.size());
  Hash out;
  crypto_hash_sha256_final(&st, out.data());
  return out;
}

Hash NodeHash(const Hash& left, const Hash& right) {
  unsigned char buf[65];
  buf[0] = 0x01;
  std::memcpy(buf + 1, left.data(), 32);
  std::memcpy(buf + 33, right.data(), 32);
  Hash out;
  crypto_hash_sha256(out.data(), buf, sizeof buf);
  return out;
}

std::string_view AsBytes(const Hash& h) {
  return {reinterpret_cast<const char*>(h.data()), h.size()};
}

Result<Hash> HashFromBytes(std::string_view bytes) {
  if (bytes.size() != 32) {
    return InvalidArgument("a hash is 32 bytes, got " + std::to_string(bytes.size()));
  }
  Hash h;
  std::memcpy(h.data(), bytes.data(), 32);
  return h;
}

// ---- the tree --------------------------------------------------------------

void MerkleTree::Append(const Hash& leaf_hash) {
  if (levels_.empty()) levels_.emplace_back();
  levels_[0].push_back(leaf_hash);
  // Each level whose count just became even completes a node one level up.
  for (size_t k = 0; levels_[k].size() % 2 == 0; ++k) {
    if (k + 1 == levels_.size()) levels_.emplace_back();
    const auto& level = levels_[k];
    levels_[k + 1].push_back(NodeHash(level[level.size() - 2], level.back()));
  }
}

Hash MerkleTree::SubtreeHash(uint64_t begin, uint64_t end) const {
  const uint64_t n = end - begin;
  if (IsPowerOfTwo(n) && begin % n == 0) {
    return levels_[std::countr_zero(n)][begin / n];
  }
  // RFC 6962's recursion: only ranges whose left part is aligned reach here.
  const uint64_t k = SplitPoint(n);
  return NodeHash(SubtreeHash(begin, begin + k), SubtreeHash(begin + k, end));
}

Hash MerkleTree::RootAt(uint64_t tree_size) const {
  if (tree_size == 0) return Sha256("");
  return SubtreeHash(0, tree_size);
}

Result<Hash> MerkleTree::Root(uint64_t tree_size) const {
  if (tree_size > size()) {
    return InvalidArgument("tree size " + std::to_string(tree_size) + " is past the log's " +
                           std::to_string(size()));
  }
  return RootAt(tree_size);
}

void MerkleTree::Path(uint64_t index, uint64_t begin, uint64_t end,
                      std::vector<Hash>& out) const {
  const uint64_t n = end - begin;
  if (n <= 1) return;
  const uint64_t k = SplitPoint(n);
  if (index < k) {
    Path(index, begin, begin + k, out);
    out.push_back(SubtreeHash(begin + k, end));
  } else {
    Path(index - k, begin + k, end, out);
    out.push_back(SubtreeHash(begin, begin + k));
  }
}

Result<std::vector<Hash>> MerkleTree::InclusionProof(uint64_t index, uint64_t tree_size) const {
  if (tree_size > size()) {
    return InvalidArgument("tree size " + std::to_string(tree_size) + " is past the log's " +
                           std::to_string(size()));
  }
  if (index >= tree_size) {
    return InvalidArgument("entry " + std::to_string(index) + " is not in a tree of " +
                           std::to_string(tree_size));
  }
  std::vector<Hash> out;
  Path(index, 0, tree_size, out);
  return out;
}

void MerkleTree::SubProof(uint64_t m, uint64_t begin, uint64_t end, bool whole,
                          std::vector<Hash>& out) const {
  const uint64_t n = end - begin;
  if (m == n) {
    if (!whole) out.push_back(SubtreeHash(begin, end));
    return;
  }
  const uint64_t k = SplitPoint(n);
  if (m <= k) {
    SubProof(m, begin, begin + k, whole, out);
    out.push_back(SubtreeHash(begin + k, end));
  } else {
    SubProof(m - k, begin + k, end, false, out);
    out.push_back(SubtreeHash(begin, begin + k));
  }
}

Result<std::vector<Hash>> MerkleTree::ConsistencyProof(uint64_t old_size,
                                                       uint64_t new_size) const {
  if (old_size > new_size || new_size > size()) {
    return InvalidArgument("no consistency proof from size " + std::to_string(old_size) +
                           " to " + std::to_string(new_size) + " in a log of " +
                           std::to_string(size()));
  }
  std::vector<Hash> out;
  if (old_size == 0 || old_size == new_size) return out;
  SubProof(old_size, 0, new_size, true, out);
  return out;
}

// ---- verifiers -------------------------------------------------------------

Status VerifyInclusion(uint64_t index, uint64_t tree_size, const Hash& leaf_hash,
                       std::span<const Hash> proof, const Hash& root) {
  if (index >= tree_size) {
    return InvalidArgument("entry " + std::to_string(index) + " is not in a tree of " +
                           std::to_string(tree_size));
  }
  uint64_t fn = index;
  uint64_t sn = tree_size - 1;
  Hash r = leaf_hash;
  for (const Hash& p : proof) {
    if (sn == 0) return PermissionDenied("inclusion proof is longer than the tree is deep");
    if ((fn & 1) != 0 || fn == sn) {
      r = NodeHash(p, r);
      while ((fn & 1) == 0 && fn != 0) {
        fn >>= 1;
        sn >>= 1;
      }
    } else {
      r = NodeHash(r, p);
    }
    fn >>= 1;
    sn >>= 1;
  }
  if (sn != 0) return PermissionDenied("inclusion proof is shorter than the tree is deep");
  if (r != root) return PermissionDenied("inclusion proof does not lead to the root");
  return Status::Ok();
}

Status VerifyConsistency(uint64_t old_size, uint64_t new_size, const Hash& old_root,
                         const Hash& new_root, std::span<const Hash> proof) {
  if (old_size > new_size) {
    return InvalidArgument("the old size " + std::to_string(old_size) + " is past the new " +
                           std::to_string(new_size));
  }
  if (old_size == new_size) {
    if (!proof.empty()) return PermissionDenied("consistency proof between equal sizes is not empty");
    if (old_root != new_root) return PermissionDenied("two different roots for one tree size");
    return Status::Ok();
  }
  if (old_size == 0) {
    if (!proof.empty()) return PermissionDenied("consistency proof from the empty tree is not empty");
    return Status::Ok();
  }
  if (proof.empty()) return PermissionDenied("consistency proof is empty");

  std::vector<Hash> path;
  path.reserve(proof.size() + 1);
  if (IsPowerOfTwo(old_size)) path.push_back(old_root);
  path.insert(path.end(), proof.begin(), proof.end());

  uint64_t fn = old_size - 1;
  uint64_t sn = new_size - 1;
  while ((fn & 1) != 0) {
    fn >>= 1;
    sn >>= 1;
  }
  Hash fr = path[0];
  Hash sr = path[0];
  for (size_t i = 1; i < path.size(); ++i) {
    const Hash& c = path[i];
    if (sn == 0) return PermissionDenied("consistency proof is longer than the tree is deep");
    if ((fn & 1) != 0 || fn == sn) {
      fr = NodeHash(c, fr);
      sr = NodeHash(c, sr);
      while ((fn & 1) == 0 && fn != 0) {
        fn >>= 1;
        sn >>= 1;
      }
    } else {
      sr = NodeHash(sr, c);
    }
    fn >>= 1;
    sn >>= 1;
  }
  if (sn != 0) return PermissionDenied("consistency proof is shorter than the tree is deep");
  if (fr != old_root) return PermissionDenied("consistency proof does not lead to the old root");
  if (sr != new_root) return PermissionDenied("consistency proof does not lead to the new root");
  return Status::Ok();
}

}  // namespace claw::ledger
