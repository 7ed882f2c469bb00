// `claw ledger verify`, `claw ledger checkpoint` and `claw credits`: an
// outsider's view of the open ledger, over the coordinator's HTTP API, with
// no trust in the coordinator beyond the ledger's public key (ADR 0010).
//
// verify: the checkpoint's signature; that the log extends the one seen
// last time (a consistency proof against the state file), so nothing seen
// was changed or removed; and that the entries served hash to the signed
// root (all of them, or one with its inclusion proof).
#include <cstdio>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "cli/command_parts.h"
#include "cli/http_client.h"
#include "cli/output.h"
#include "common/crypto.h"
#include "common/files.h"
#include "ledger/merkle.h"
#include "ledger/note.h"

namespace claw {
namespace {

using ledger::Hash;

constexpr uint64_t kPage = 1000;

// Credit for a table: whole numbers past 1,000, else 4 significant digits
// (a short task earns thousandths).
std::string CreditText(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, v >= 1000 || v == 0 ? "%.0f" : "%.4g", v);
  return buf;
}

struct Seen {
  std::string key;
  uint64_t size = 0;
  std::string root;  // base64
};

Seen ReadState(const std::string& path) {
  Seen s;
  auto text = ReadWholeFile(path);
  if (!text.ok()) return s;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object()) return s;
  s.key = j.value("key", "");
  s.size = j.value("size", uint64_t{0});
  s.root = j.value("root", "");
  return s;
}

std::string DefaultStatePath() {
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.claw/ledger-state.json";
}

// Fetches the entries [0, size) and checks that they hash to `root`. Sums
// the credit they record per owner into `credit`.
Status CheckAllEntries(HttpApiClient& api, uint64_t size, const Hash& root,
                       std::map<std::string, double>* credit, uint64_t* rounds) {
  ledger::MerkleTree tree;
  for (uint64_t start = 0; start < size; start += kPage) {
    const uint64_t end = std::min(size, start + kPage);
    auto page = api.GetJson("/ledger/entries?start=" + std::to_string(start) +
                            "&end=" + std::to_string(end));
    if (!page.ok()) return page.status();
    const auto& list = (*page)["entries"];
    if (!list.is_array()) return InvalidArgument("entries: not a list");
    for (const auto& e : list) {
      if (!e.is_object() || e.value("index", UINT64_MAX) != tree.size() || !e.contains("data") ||
          !e["data"].is_string()) {
        return PermissionDenied("entry " + std::to_string(tree.size()) +
                                " is missing or out of order in what the coordinator served");
      }
      const std::string data = e["data"].get<std::string>();
      tree.Append(ledger::LeafHash(data));
      auto d = nlohmann::json::parse(data, nullptr, false);
      if (d.is_object() && d.value("type", "") == "credit" && d["credit"].is_number()) {
        (*credit)[d.value("owner", "")] += d["credit"].get<double>();
      }
      if (d.is_object() && d.value("type", "") == "round") ++*rounds;
    }
    if (tree.size() != end) {
      return PermissionDenied("the coordinator served " + std::to_string(tree.size() - start) +
                              " entries of [" + std::to_string(start) + ", " +
                              std::to_string(end) + ")");
    }
  }
  if (tree.Root() != root) {
    return PermissionDenied("the " + std::to_string(size) +
                            " entries served do not hash to the signed root: an entry was "
                            "changed, removed or added after the checkpoint was signed");
  }
  return Status::Ok();
}

Status Verify(HttpApiClient& api, std::string key, const std::string& state_path, int64_t entry) {
  Seen seen = ReadState(state_path);
  if (key.empty()) key = seen.key;
  auto served_key = api.Get("/ledger/key");
  if (!served_key.ok()) return served_key.status();
  std::string served = *served_key;
  while (!served.empty() && (served.back() == '\n' || served.back() == '\r')) served.pop_back();
  if (key.empty()) {
    key = served;
    std::printf("trusting the ledger key %s on first use (pin it with --key)\n", key.c_str());
  } else if (key != served) {
    std::printf("warning: the coordinator now serves the ledger key %s; checking against %s\n",
                served.c_str(), key.c_str());
  }
  auto verifier = ledger::ParseVerifierKey(key);
  if (!verifier.ok()) return InvalidArgument("--key: " + verifier.status().message());

  auto note = api.Get("/ledger/checkpoint");
  if (!note.ok()) return note.status();
  auto text = ledger::OpenNote(*note, *verifier);
  if (!text.ok()) return PermissionDenied("checkpoint: " + text.status().message());
  auto cp = ledger::ParseCheckpoint(*text);
  if (!cp.ok()) return cp.status();
  if (cp->origin != verifier->name) {
    return PermissionDenied("checkpoint: origin " + cp->origin + " is not the key's, " + verifier->name);
  }
  const std::string root64 = ledger::Base64(ledger::AsBytes(cp->root));
  std::printf("checkpoint: %s, %llu entries, root %s; signature OK\n", cp->origin.c_str(),
              static_cast<unsigned long long>(cp->size), root64.c_str());

  if (seen.key == key && seen.size > 0) {
    if (cp->size < seen.size) {
      return PermissionDenied("the log shrank: " + std::to_string(seen.size) +
                              " entries were seen, the checkpoint holds " + std::to_string(cp->size));
    }
    auto old_root = ledger::FromBase64(seen.root);
    auto old_hash = old_root.ok() ? ledger::HashFromBytes(*old_root) : Result<Hash>(old_root.status());
    if (!old_hash.ok()) return InvalidArgument(state_path + ": the root seen is not a hash");
    auto proof = api.GetHashes("/ledger/proof/consistency?from=" + std::to_string(seen.size) +
                               "&to=" + std::to_string(cp->size));
    if (!proof.ok()) return proof.status();
    Status st = ledger::VerifyConsistency(seen.size, cp->size, *old_hash, cp->root, *proof);
    if (!st.ok()) {
      return PermissionDenied("the log does not extend the one seen before (" +
                              std::to_string(seen.size) + " entries): " + st.message() +
                              "; an entry seen then was changed or removed");
    }
    std::printf("consistent with the checkpoint seen before (%llu entries): OK\n",
                static_cast<unsigned long long>(seen.size));
  }

  if (entry >= 0) {
    const uint64_t i = static_cast<uint64_t>(entry);
    if (i >= cp->size) {
      return InvalidArgument("--entry " + std::to_string(i) + ": the log holds " +
                             std::to_string(cp->size) + " entries");
    }
    auto page = api.GetJson("/ledger/entries?start=" + std::to_string(i) + "&end=" + std::to_string(i + 1));
    if (!page.ok()) return page.status();
    const auto& list = (*page)["entries"];
    if (!list.is_array() || list.size() != 1 || !list[0].contains("data") || !list[0]["data"].is_string()) {
      return PermissionDenied("entry " + std::to_string(i) + " was not served");
    }
    const std::string data = list[0]["data"].get<std::string>();
    auto proof = api.GetHashes("/ledger/proof/inclusion?index=" + std::to_string(i) +
                               "&size=" + std::to_string(cp->size));
    if (!proof.ok()) return proof.status();
    Status st = ledger::VerifyInclusion(i, cp->size, ledger::LeafHash(data), *proof, cp->root);
    if (!st.ok()) return PermissionDenied("entry " + std::to_string(i) + ": " + st.message());
    std::printf("entry %llu: %s\nincluded in the signed log: OK\n", static_cast<unsigned long long>(i),
                OneLine(data).c_str());
  } else {
    std::map<std::string, double> credit;
    uint64_t rounds = 0;
    CLAW_RETURN_IF_ERROR(CheckAllEntries(api, cp->size, cp->root, &credit, &rounds));
    std::printf("entries: all %llu fetched and hashed; they make the signed root: OK\n",
                static_cast<unsigned long long>(cp->size));
    std::printf("recorded: %llu training rounds; credit by owner:\n",
                static_cast<unsigned long long>(rounds));
    for (const auto& [owner, c] : credit) {
      std::printf("  %-24s %14s\n", owner.empty() ? "(unknown)" : OneLine(owner).c_str(),
                  CreditText(c).c_str());
    }
  }

  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(state_path).parent_path(), ec);
  nlohmann::json state = {{"key", key}, {"size", cp->size}, {"root", root64}};
  CLAW_RETURN_IF_ERROR(WriteFileAtomically(state_path, state.dump(2) + "\n", 0600));
  return Status::Ok();
}

void PrintCredits(const nlohmann::json& stats, bool devices) {
  const char* list = devices ? "devices" : "users";
  if (!stats.contains(list) || !stats[list].is_array() || stats[list].empty()) {
    std::printf("no credit granted yet (a validated result earns it)\n");
    return;
  }
  if (devices) {
    std::printf("%5s  %-18s %-16s %14s %12s %8s\n", "RANK", "DEVICE", "OWNER", "TOTAL", "RAC/DAY",
                "RESULTS");
  } else {
    std::printf("%5s  %-20s %14s %12s %8s %8s %11s\n", "RANK", "USER", "TOTAL", "RAC/DAY",
                "RESULTS", "DEVICES", "PERCENTILE");
  }
  for (const auto& r : stats[list]) {
    if (devices) {
      std::printf("%5llu  %-18.18s %-16.16s %14s %12s %8llu\n",
                  static_cast<unsigned long long>(r.value("rank", 0)),
                  OneLine(r.value("id", "")).c_str(),
                  r.value("owner", "").empty() ? "-" : OneLine(r.value("owner", "")).c_str(),
                  CreditText(r.value("total_credit", 0.0)).c_str(),
                  CreditText(r.value("recent_average_credit", 0.0)).c_str(),
                  static_cast<unsigned long long>(r.value("results", 0)));
    } else {
      std::printf("%5llu  %-20.20s %14s %12s %8llu %8llu %10.1f%%\n",
                  static_cast<unsigned long long>(r.value("rank", 0)),
                  r.value("name", "").empty() ? "(unknown)" : OneLine(r.value("name", "")).c_str(),
                  CreditText(r.value("total_credit", 0.0)).c_str(),
                  CreditText(r.value("recent_average_credit", 0.0)).c_str(),
                  static_cast<unsigned long long>(r.value("results", 0)),
                  static_cast<unsigned long long>(r.value("devices", 0)),
                  r.value("percentile", 0.0));
    }
  }
  std::printf("credit in cobblestones (1/200 day of a 1 GFLOPS device); the ledger holds %llu "
              "entries (claw ledger verify checks them)\n",
              static_cast<unsigned long long>(stats.value("ledger_size", 0)));
}

}  // namespace

void AddLedger(CLI::App& cli, std::shared_ptr<ClientConfig> target) {
  cli.add_option("--http", target->http_url,
                 "The coordinator's HTTP API for the ledger and statistics (default: its host, "
                 "port 7451; https with --ca)");
  auto* cmd = cli.add_subcommand("ledger", "The open ledger of credit and training rounds");
  cmd->require_subcommand(1);

  auto key = std::make_shared<std::string>();
  auto state = std::make_shared<std::string>(DefaultStatePath());
  auto entry = std::make_shared<int64_t>(-1);
  auto* verify = cmd->add_subcommand(
      "verify", "Check the signed checkpoint, that the log only grew since the last check, "
                "and that its entries make the signed root");
  verify->add_option("--key", *key,
                     "The ledger's verifier key (name+hash+key, <data>/ledger.pub); default: "
                     "the one seen before, or the one served (trust on first use)");
  verify->add_option("--state", *state, "Where the last checkpoint seen is kept")
      ->capture_default_str();
  verify->add_option("--entry", *entry, "Check one entry's inclusion proof instead of every entry");
  verify->callback([=] {
    HttpApiClient api(*target);
    Status st = Verify(api, *key, *state, *entry);
    if (!st.ok()) throw CLI::RuntimeError(Fail(st));
  });

  auto* checkpoint = cmd->add_subcommand("checkpoint", "Print the signed checkpoint as served");
  checkpoint->callback([=] {
    HttpApiClient api(*target);
    auto note = api.Get("/ledger/checkpoint");
    if (!note.ok()) throw CLI::RuntimeError(Fail(note.status()));
    std::fwrite(note->data(), 1, note->size(), stdout);
  });

  auto json = std::make_shared<bool>(false);
  auto devices = std::make_shared<bool>(false);
  auto* credits = cli.add_subcommand("credits", "Credit per user (or per device): the leaderboard");
  credits->add_flag("--devices", *devices, "Per device instead of per user");
  credits->add_flag("--json", *json, "Print the statistics as JSON");
  credits->callback([=] {
    HttpApiClient api(*target);
    auto stats = api.GetJson("/stats/credits.json");
    if (!stats.ok()) throw CLI::RuntimeError(Fail(stats.status()));
    if (*json) {
      std::printf("%s\n", stats->dump(2).c_str());
      return;
    }
    PrintCredits(*stats, *devices);
  });
}

}  // namespace claw
