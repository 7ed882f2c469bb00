// The HTTP API's open part: the ledger (checkpoint, entries, proofs) and the
// credit statistics, for anyone, with no token (ADR 0010). What it serves is
// what the ledger already makes public: who contributed what.
#include <algorithm>
#include <charconv>
#include <cstdio>

#include "coordinator/http_api.h"
#include "coordinator/http_json.h"
#include "core/credit_stats.h"

namespace claw {
namespace {

Result<uint64_t> QueryNumber(const HttpRequest& req, const char* name) {
  const std::string v = req.Query(name);
  uint64_t n = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || ec != std::errc() || ptr != v.data() + v.size()) {
    return InvalidArgument(std::string(name) + ": a non-negative integer is required");
  }
  return n;
}

nlohmann::json Hashes(const std::vector<ledger::Hash>& hashes) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& h : hashes) out.push_back(ledger::Base64(ledger::AsBytes(h)));
  return out;
}

HttpResponse Text(std::string body, const char* type = "text/plain; charset=utf-8") {
  return HttpResponse{200, type, std::move(body)};
}

}  // namespace

HttpResponse HttpApi::Ledger(const HttpRequest& req, const std::vector<std::string>& seg) {
  const ledger::Ledger& log = coordinator_->ledger();
  if (seg.size() == 2 && seg[1] == "checkpoint") return Text(log.SignedCheckpoint());
  if (seg.size() == 2 && seg[1] == "key") return Text(log.verifier_key() + "\n");
  if (seg.size() == 2 && seg[1] == "entries") {
    auto start = QueryNumber(req, "start");
    auto end = QueryNumber(req, "end");
    if (!start.ok()) return Error(start.status());
    if (!end.ok()) return Error(end.status());
    auto entries = coordinator_->LedgerEntries(*start, *end);
    if (!entries.ok()) return Error(entries.status());
    nlohmann::json list = nlohmann::json::array();
    for (const LedgerEntry& e : *entries) list.push_back({{"index", e.index}, {"data", e.data}});
    return Json(200, {{"entries", list}});
  }
  if (seg.size() == 3 && seg[1] == "proof" && seg[2] == "inclusion") {
    auto index = QueryNumber(req, "index");
    auto size = QueryNumber(req, "size");
    if (!index.ok()) return Error(index.status());
    if (!size.ok()) return Error(size.status());
    auto proof = log.InclusionProof(*index, *size);
    if (!proof.ok()) return Error(proof.status());
    return Json(200, {{"index", *index}, {"size", *size}, {"hashes", Hashes(*proof)}});
  }
  if (seg.size() == 3 && seg[1] == "proof" && seg[2] == "consistency") {
    auto from = QueryNumber(req, "from");
    auto to = QueryNumber(req, "to");
    if (!from.ok()) return Error(from.status());
    if (!to.ok()) return Error(to.status());
    auto proof = log.ConsistencyProof(*from, *to);
    if (!proof.ok()) return Error(proof.status());
    return Json(200, {{"from", *from}, {"to", *to}, {"hashes", Hashes(*proof)}});
  }
  return Error(NotFound("no route " + req.method + " " + req.path.substr(0, 200)));
}

HttpResponse HttpApi::Stats(const HttpRequest& req, const std::vector<std::string>& seg) {
  if (seg.size() != 2) return Error(NotFound("no route " + req.path.substr(0, 200)));
  const CreditStats stats =
      BuildCreditStats(coordinator_->CreditAccounts(), coordinator_->ledger().size());
  if (seg[1] == "credits.json") return Json(200, CreditStatsJson(stats));
  if (seg[1] == "users.xml") return Text(UsersXml(stats), "application/xml");
  if (seg[1] == "hosts.xml") return Text(HostsXml(stats), "application/xml");
  return Error(NotFound("no statistics " + seg[1].substr(0, 100) +
                        " (credits.json, users.xml, hosts.xml)"));
}

HttpResponse HttpApi::Users(const HttpRequest& req, const std::vector<std::string>& seg,
                            const UserRecord& caller) {
  auto usage_json = [&](const std::vector<UserUsage>& rows) {
    nlohmann::json list = nlohmann::json::array();
    for (const UserUsage& u : rows) {
      nlohmann::json row = {{"user", u.user}, {"tier", u.tier}, {"used_node_hours", u.used_hours},
                            {"held", u.held}};
      row["quota_node_hours"] = u.limit_hours < 0 ? nlohmann::json(nullptr) : nlohmann::json(u.limit_hours);
      list.push_back(std::move(row));
    }
    return nlohmann::json{{"month", MonthText(coordinator_->UsageMonth())}, {"users", list}};
  };
  if (req.method == "GET" && seg.size() == 2 && seg[1] == "usage") {
    return Json(200, usage_json(coordinator_->Usage(caller)));
  }
  if (req.method == "POST" && seg.size() == 4 && seg[1] == "users" && seg[3] == "tier") {
    auto body = nlohmann::json::parse(req.body, nullptr, false);
    if (!body.is_object() || !body.contains("tier") || !body["tier"].is_string()) {
      return Error(InvalidArgument("body: {\"tier\": \"free|researcher|professional|enterprise\"}"));
    }
    Status st = coordinator_->SetTier(seg[2], body["tier"].get<std::string>(), caller);
    if (!st.ok()) return Error(st);
    auto rows = coordinator_->Usage(caller);
    std::erase_if(rows, [&](const UserUsage& u) { return u.user != seg[2]; });
    return Json(200, usage_json(rows));
  }
  return Error(NotFound("no route " + req.method + " " + req.path.substr(0, 200)));
}

HttpResponse HttpApi::Notifications(const HttpRequest& req, const std::vector<std::string>& seg,
                                    const UserRecord& caller) {
  auto target_json = [](const NotifyTarget& t, bool with_secret) {
    nlohmann::json j = {{"id", t.id}, {"kind", t.kind}, {"url", t.url},
                        {"created_unix_ms", t.created.unix_ms()}};
    if (with_secret && !t.secret.empty()) j["secret"] = t.secret;
    return j;
  };
  if (seg.size() == 2 && req.method == "POST") {
    auto body = nlohmann::json::parse(req.body, nullptr, false);
    if (!body.is_object() || !body.contains("kind") || !body["kind"].is_string() ||
        !body.contains("url") || !body["url"].is_string()) {
      return Error(InvalidArgument(
          "body: {\"kind\": \"webhook\", \"slack\" or \"email\", \"url\": \"https://...\" or \"mailto:...\"}"));
    }
    auto t = coordinator_->AddNotifyTarget(body["kind"], body["url"], caller);
    if (!t.ok()) return Error(t.status());
    return Json(201, target_json(*t, true));
  }
  if (seg.size() == 2 && req.method == "GET") {
    nlohmann::json list = nlohmann::json::array();
    for (const NotifyTarget& t : coordinator_->NotifyTargets(caller)) list.push_back(target_json(t, false));
    return Json(200, {{"targets", list}});
  }
  if (seg.size() == 3 && req.method == "DELETE") {
    char* end = nullptr;
    const long long id = std::strtoll(seg[2].c_str(), &end, 10);
    if (seg[2].empty() || *end != '\0') return Error(InvalidArgument("a target id is a number"));
    Status st = coordinator_->RemoveNotifyTarget(id, caller);
    if (!st.ok()) return Error(st);
    return Json(200, {{"removed", id}});
  }
  return Error(NotFound("no route " + req.method + " " + req.path.substr(0, 200)));
}

}  // namespace claw
