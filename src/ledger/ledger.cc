#include "ledger/ledger.h"

namespace claw::ledger {

Ledger::Ledger(NoteSigner signer, std::function<void(const std::string&)> on_signed)
    : signer_(std::move(signer)), on_signed_(std::move(on_signed)) {
  auto vkey = FormatVerifierKey(signer_.name, std::string_view(signer_.secret_key).substr(32));
  verifier_key_ = vkey.ok() ? *vkey : "";
}

Status Ledger::Load(std::span<const LedgerEntry> entries) {
  MutexLock lock(mu_);
  for (const LedgerEntry& e : entries) {
    if (e.index != tree_.size()) {
      return FailedPrecondition("ledger: entry " + std::to_string(e.index) + " follows entry " +
                                std::to_string(tree_.size()) +
                                " - 1: the stored log has a gap");
    }
    tree_.Append(LeafHash(e.data));
  }
  staged_ = tree_.size();
  return Status::Ok();
}

std::vector<LedgerEntry> Ledger::Stage(std::vector<std::string> data) {
  MutexLock lock(mu_);
  std::vector<LedgerEntry> out;
  out.reserve(data.size());
  for (std::string& d : data) out.push_back(LedgerEntry{staged_++, std::move(d)});
  return out;
}

Status Ledger::Commit(std::span<const LedgerEntry> entries) {
  MutexLock lock(mu_);
  for (const LedgerEntry& e : entries) {
    if (e.index != tree_.size()) {
      return Internal("ledger: entry " + std::to_string(e.index) + " committed out of order");
    }
    tree_.Append(LeafHash(e.data));
  }
  return Status::Ok();
}

void Ledger::Abandon() {
  MutexLock lock(mu_);
  staged_ = tree_.size();
}

uint64_t Ledger::size() const {
  MutexLock lock(mu_);
  return tree_.size();
}

std::string Ledger::SignedCheckpoint() const {
  MutexLock lock(mu_);
  if (signed_size_ != tree_.size()) {
    const std::string text = FormatCheckpoint(Checkpoint{signer_.name, tree_.size(), tree_.Root()});
    auto note = SignNote(text, signer_.name, signer_.secret_key);
    signed_ = note.ok() ? *note : "";
    signed_size_ = tree_.size();
    if (on_signed_) on_signed_(text);
  }
  return signed_;
}

Status Ledger::CheckAgainst(const std::string& checkpoint_text) const {
  auto cp = ParseCheckpoint(checkpoint_text);
  if (!cp.ok()) return FailedPrecondition("ledger: the last checkpoint stored is unreadable: " + cp.status().message());
  MutexLock lock(mu_);
  if (cp->size > tree_.size()) {
    return FailedPrecondition("ledger: the store holds " + std::to_string(tree_.size()) +
                              " entries, but a checkpoint of " + std::to_string(cp->size) +
                              " was signed: entries were removed");
  }
  if (tree_.Root(cp->size).value() != cp->root) {
    return FailedPrecondition("ledger: the first " + std::to_string(cp->size) +
                              " stored entries do not make the root of the checkpoint signed at "
                              "that size: an entry was changed");
  }
  return Status::Ok();
}

Result<std::vector<Hash>> Ledger::InclusionProof(uint64_t index, uint64_t tree_size) const {
  MutexLock lock(mu_);
  return tree_.InclusionProof(index, tree_size);
}

Result<std::vector<Hash>> Ledger::ConsistencyProof(uint64_t old_size, uint64_t new_size) const {
  MutexLock lock(mu_);
  return tree_.ConsistencyProof(old_size, new_size);
}

}  // namespace claw::ledger
