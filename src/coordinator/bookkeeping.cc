// The coordinator's books: credit accounts (core/credits.h) and the open
// ledger (ledger/ledger.h), both written in the transaction of the change
// they record (ADR 0010).
#include <algorithm>

#include "common/crypto.h"
#include "coordinator/coordinator.h"

namespace claw {
namespace {

constexpr uint64_t kMaxLedgerPage = 1000;

Result<ledger::NoteSigner> LedgerSigner(const std::string& key) {
  if (!key.empty()) {
    auto signer = ledger::ParseSignerKey(key);
    if (!signer.ok()) return InvalidArgument("ledger key: " + signer.status().message());
    return signer;
  }
  return ledger::NoteSigner{"openclaw.local/ledger-" + RandomHex(4), GenerateSigningKey().secret_key};
}

// One ledger entry per job and agent in a batch: what its results earned.
std::vector<std::string> CreditEntries(const std::vector<CreditGrant>& grants, Time now) {
  struct Sum {
    std::string owner;
    double credit = 0;
    int64_t results = 0;
  };
  std::map<std::pair<JobId, AgentId>, Sum> sums;
  for (const CreditGrant& g : grants) {
    Sum& s = sums[{g.job, g.agent}];
    s.owner = g.owner;
    s.credit += g.credit;
    s.results += g.credit < 0 ? -g.results : g.results;
  }
  std::vector<std::string> out;
  out.reserve(sums.size());
  for (const auto& [key, s] : sums) {
    out.push_back(nlohmann::json{{"type", "credit"},
                                 {"time_unix_ms", now.unix_ms()},
                                 {"job", key.first},
                                 {"device", key.second},
                                 {"owner", s.owner},
                                 {"results", s.results},
                                 {"credit", s.credit}}
                      .dump());
  }
  return out;
}

}  // namespace

Status Coordinator::LoadBookkeeping() {
  auto signer = LedgerSigner(options_.ledger_key);
  if (!signer.ok()) return signer.status();
  // Each new checkpoint is remembered (not while holding mu_: the store
  // has its own lock), so that the next start can check the entries.
  ledger_ = std::make_unique<ledger::Ledger>(std::move(signer).value(), [store = store_, log = log_](const std::string& text) {
    if (Status st = store->PutLedgerCheckpoint(text); !st.ok()) {
      log->warn("ledger: cannot keep the checkpoint signed: {}", st.message());
    }
  });
  auto accounts = store_->CreditAccounts();
  if (!accounts.ok()) return accounts.status();
  credits_.Load(std::move(accounts).value());
  for (uint64_t begin = 0;; begin += kMaxLedgerPage) {
    auto page = store_->LedgerEntries(begin, begin + kMaxLedgerPage);
    if (!page.ok()) return page.status();
    CLAW_RETURN_IF_ERROR(ledger_->Load(*page));
    for (const LedgerEntry& e : *page) {
      if (e.data.find("\"type\":\"round\"") == std::string::npos) continue;
      auto j = nlohmann::json::parse(e.data, nullptr, false);
      if (j.is_object() && j.value("type", "") == "round") {
        rounds_logged_.insert({j.value("job", ""), j.value("round", 0u)});
      }
    }
    if (page->size() < kMaxLedgerPage) break;
  }
  auto last = store_->LedgerCheckpoint();
  if (!last.ok()) return last.status();
  if (!last->empty()) {
    Status st = ledger_->CheckAgainst(*last);
    if (!st.ok()) {
      return FailedPrecondition(st.message() +
                                " since it was signed. The coordinator does not serve a history "
                                "that contradicts one it published; restore the database from a "
                                "backup (docs/operations.md)");
    }
  }
  log_->info("ledger origin={} entries={} key={}", ledger_->origin(), ledger_->size(),
             ledger_->verifier_key());

  auto users = store_->ListUsers();
  if (!users.ok()) return users.status();
  std::map<std::string, std::string> tiers;
  for (const UserRecord& u : *users) tiers[u.name] = u.tier;
  const int32_t month = UtcMonth(clock_->Now());
  auto used = store_->MonthUsage(month);
  if (!used.ok()) return used.status();
  quota_.Load(month, std::move(used).value(), std::move(tiers));
  for (const UserUsage& u : quota_.Usage()) {
    sched_.SetOwnerWeight(u.user, quota_.Weight(u.user));
    if (auto why = quota_.HeldReason(u.user)) sched_.HoldOwner(u.user, *why);
  }
  return Status::Ok();
}

void Coordinator::ApplyQuotaEvents(const std::vector<QuotaEvent>& events) {
  for (const QuotaEvent& e : events) {
    switch (e.kind) {
      case QuotaEvent::kWarned:
        log_->warn("quota warning user={}: {}", e.user, e.reason);
        Tell(e.user, "quota.warning", "80% of your quota is used: " + e.reason,
             {{"user", e.user}, {"reason", e.reason}});
        break;
      case QuotaEvent::kHeld:
        log_->warn("quota reached user={}: {}", e.user, e.reason);
        sched_.HoldOwner(e.user, e.reason);
        Tell(e.user, "quota.held", "Your jobs are held: " + e.reason,
             {{"user", e.user}, {"reason", e.reason}});
        break;
      case QuotaEvent::kReleased:
        log_->info("quota released user={}: {}", e.user, e.reason);
        sched_.HoldOwner(e.user, "");
        break;
    }
  }
}

std::vector<UserUsage> Coordinator::Usage(const UserRecord& caller) {
  MutexLock lock(mu_);
  // A new month may have begun since the last tick: release whom it frees.
  if (auto released = quota_.Roll(clock_->Now()); !released.empty()) {
    ApplyQuotaEvents(released);
    CommitAndNotify(clock_->Now());
  }
  std::vector<UserUsage> all = quota_.Usage();
  if (caller.tier == kAdminTier) return all;
  std::erase_if(all, [&](const UserUsage& u) { return u.user != caller.name; });
  return all;
}

int32_t Coordinator::UsageMonth() {
  MutexLock lock(mu_);
  return UtcMonth(clock_->Now());
}

Status Coordinator::SetTier(const std::string& user, const std::string& tier,
                            const UserRecord& caller) {
  if (caller.tier != kAdminTier) {
    return PermissionDenied("only an admin changes a user's tier (" + caller.name + " is " +
                            caller.tier + ")");
  }
  if (!options_.quota.tiers.count(tier)) {
    std::string known;
    for (const auto& [name, policy] : options_.quota.tiers) known += (known.empty() ? "" : ", ") + name;
    return InvalidArgument("tier: one of " + known + "; got '" + tier.substr(0, 40) + "'");
  }
  CLAW_RETURN_IF_ERROR(store_->SetTier(user, tier));
  MutexLock lock(mu_);
  for (auto& [hash, u] : users_by_hash_) {
    if (u.name == user) u.tier = tier;
  }
  ApplyQuotaEvents(quota_.SetTier(user, tier));
  sched_.SetOwnerWeight(user, quota_.Weight(user));
  CommitAndNotify(clock_->Now());
  log_->info("tier changed user={} tier={} by={}", user, tier, caller.name);
  return Status::Ok();
}

void Coordinator::Bookkeep(StoreBatch& batch, Time now) {
  if (!batch.usage.empty()) {
    ApplyQuotaEvents(quota_.Charge(batch.usage, now));  // folded by user already, mostly
    batch.usage_month = quota_.month();
  }
  if (batch.credits.empty()) return;
  for (const CreditGrant& g : batch.credits) metrics_.credits_granted += g.credit;
  batch.credit_changes = credits_.Apply(batch.credits, now);
  batch.ledger = ledger_->Stage(CreditEntries(batch.credits, now));
}

bool Coordinator::ApplyBatch(StoreBatch& batch, Time now) {
  Bookkeep(batch, now);
  Status st = store_->Apply(batch);
  if (st.ok()) st = ledger_->Commit(batch.ledger);
  if (!st.ok()) {
    ledger_->Abandon();
    options_.on_store_failure(st);
    return false;
  }
  if (!options_.task_timeline) return true;
  for (const LeaseRecord& l : batch.leases_granted) timeline_.Granted(l.id, l.job, l.index, l.agent, now);
  for (LeaseId l : batch.leases_ended) timeline_.Ended(l, now);
  for (const VerdictUpdate& v : batch.verdicts) {
    if (v.verdict == Verdict::kValid || v.verdict == Verdict::kInvalid) {
      timeline_.Judged(v.job, v.index, v.agent, v.verdict == Verdict::kValid);
    }
  }
  return true;
}

Status Coordinator::SaveRound(const RoundRecord& round) {
  MutexLock lock(mu_);
  std::vector<LedgerEntry> entries;
  if (round.round > 0 && !rounds_logged_.count({round.job, round.round})) {
    auto info = nlohmann::json::parse(round.info_json, nullptr, false);
    auto count = [&](const char* key) -> size_t {
      return info.is_object() && info.contains(key) && info[key].is_array() ? info[key].size() : 0;
    };
    entries = ledger_->Stage({nlohmann::json{{"type", "round"},
                                             {"time_unix_ms", round.finished.unix_ms()},
                                             {"job", round.job},
                                             {"round", round.round},
                                             {"model", round.model},
                                             {"update", round.update},
                                             {"reporters", count("reporters")},
                                             {"rejected", count("rejected")}}
                                  .dump()});
  }
  Status st = store_->PutRound(round, entries);
  if (st.ok()) st = ledger_->Commit(entries);
  if (!st.ok()) {
    ledger_->Abandon();
    return st;
  }
  if (!entries.empty()) rounds_logged_.insert({round.job, round.round});
  NotifyWatchers(round.job, clock_->Now(), true);
  return Status::Ok();
}

Result<std::vector<LedgerEntry>> Coordinator::LedgerEntries(uint64_t begin, uint64_t end) {
  const uint64_t size = ledger_->size();
  if (begin >= end || end > size) {
    return InvalidArgument("entries [" + std::to_string(begin) + ", " + std::to_string(end) +
                           "): the log holds [0, " + std::to_string(size) + ")");
  }
  return store_->LedgerEntries(begin, std::min(end, begin + kMaxLedgerPage));
}

std::map<AgentId, CreditAccount> Coordinator::CreditAccounts() {
  MutexLock lock(mu_);
  std::map<AgentId, CreditAccount> out = credits_.accounts();
  const double now_s = static_cast<double>(clock_->Now().unix_ms()) / 1000;
  for (auto& [id, a] : out) {
    a.recent.average = DecayedAverage(a.recent, now_s);
    a.recent.updated_s = now_s;
  }
  return out;
}

Result<std::vector<CreditDay>> Coordinator::CreditHistory(int days) {
  if (days < 1 || days > 366) return InvalidArgument("days: from 1 to 366");
  const int64_t today = UtcDay(clock_->Now());
  return store_->CreditDays(today - days + 1, today);
}

}  // namespace claw
