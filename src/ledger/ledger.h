// Ledger: the coordinator's open, append-only log (ADR 0010). Every credit
// grant and every training round's aggregate is an entry; the entries form
// a Merkle tree as Certificate Transparency defines it (merkle.h), and the
// coordinator signs checkpoints of it (note.h) with a key of the ledger's
// own, so that anyone can check from outside, with no trust in the
// coordinator beyond its public key, that an entry is in the log and that
// the log only ever grew.
//
// The entries themselves are kept by the store, written in the same
// transaction as the change they record; the ledger holds their hashes.
// Writing is two steps, so that a hash joins the tree only once its entry
// is stored: Stage gives the next entries their indices, and Commit (after
// the store's transaction) appends them. One writer at a time (the
// coordinator, under its mutex) stages and commits; readers (checkpoints,
// proofs) may call from any thread.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "core/types.h"
#include "ledger/merkle.h"
#include "ledger/note.h"

namespace claw::ledger {

class Ledger {
 public:
  // `signer`: the ledger's key; its name is the log's origin.
  // `on_signed`, if set, is told each new checkpoint signed (its text),
  // before it is served: the coordinator keeps the last one to check the
  // stored entries against at its next start.
  explicit Ledger(NoteSigner signer, std::function<void(const std::string&)> on_signed = {});

  // FailedPrecondition, saying what happened, unless the loaded entries
  // make `checkpoint_text` (a checkpoint this ledger signed earlier): an
  // entry changed, or the log shrank.
  Status CheckAgainst(const std::string& checkpoint_text) const;

  // Rebuilds the tree from the stored entries, given in order from index
  // 0, in as many calls as it takes. FailedPrecondition for a gap.
  Status Load(std::span<const LedgerEntry> entries);

  // Gives `data` (one entry each) the next indices, after everything
  // staged and not yet committed.
  std::vector<LedgerEntry> Stage(std::vector<std::string> data);
  // Appends entries that Stage returned, once they are stored. Staged
  // entries must be committed in order (an entry out of order is a bug:
  // Internal).
  Status Commit(std::span<const LedgerEntry> entries);
  // Forgets what was staged and not committed (the store refused it).
  void Abandon();

  uint64_t size() const;
  // The signed checkpoint of the log as it stands: a C2SP signed note
  // whose text is origin, size and root.
  std::string SignedCheckpoint() const;
  const std::string& origin() const { return signer_.name; }
  // "name+hash+key": what a verifier needs, and all it needs.
  const std::string& verifier_key() const { return verifier_key_; }

  Result<std::vector<Hash>> InclusionProof(uint64_t index, uint64_t tree_size) const;
  Result<std::vector<Hash>> ConsistencyProof(uint64_t old_size, uint64_t new_size) const;

 private:
  const NoteSigner signer_;
  std::function<void(const std::string&)> on_signed_;
  std::string verifier_key_;
  mutable Mutex mu_;
  MerkleTree tree_ CLAW_GUARDED_BY(mu_);
  uint64_t staged_ CLAW_GUARDED_BY(mu_) = 0;  // the next index to give
  mutable uint64_t signed_size_ CLAW_GUARDED_BY(mu_) = UINT64_MAX;
  mutable std::string signed_ CLAW_GUARDED_BY(mu_);  // the last checkpoint signed
};

}  // namespace claw::ledger
