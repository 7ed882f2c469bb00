// The HTTP API as the CLI's commands for the ledger, statistics and usage
// see it (ledger_commands.cc, usage_commands.cc). Not thread-safe.
#pragma once

#include <httplib.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command_parts.h"
#include "common/status.h"
#include "ledger/merkle.h"
#include "ledger/note.h"

namespace claw {

inline std::string HttpUrlOf(const ClientConfig& c) {
  if (!c.http_url.empty()) return c.http_url;
  const std::string host = c.coordinator.substr(0, c.coordinator.rfind(':'));
  return (c.ca_file.empty() ? "http://" : "https://") + host + ":7451";
}

// A small client of the HTTP API for the commands that use it: the CA
// pinned for HTTPS, the API token sent where there is one.
class HttpApiClient {
 public:
  explicit HttpApiClient(const ClientConfig& c) : url_(HttpUrlOf(c)), http_(url_) {
    if (!c.api_token.empty()) http_.set_bearer_token_auth(c.api_token.c_str());
    http_.set_connection_timeout(10);
    http_.set_read_timeout(30);
    if (!c.ca_file.empty()) {
      http_.set_ca_cert_path(c.ca_file.c_str());
      http_.enable_server_certificate_verification(true);
    }
  }
  const std::string& url() const { return url_; }

  Result<std::string> Get(const std::string& path) { return Answer(path, http_.Get(path)); }
  Result<std::string> Delete(const std::string& path) { return Answer(path, http_.Delete(path)); }
  Result<std::string> Post(const std::string& path, const std::string& json) {
    return Answer(path, http_.Post(path, json, "application/json"));
  }
  Result<std::string> Answer(const std::string& path, const httplib::Result& res) {
    if (!res) {
      return Unavailable("cannot reach " + url_ + path + ": " + httplib::to_string(res.error()));
    }
    if (res->status != 200 && res->status != 201) {
      auto body = nlohmann::json::parse(res->body, nullptr, false);
      std::string why = body.is_object() && body.contains("error")
                            ? body["error"].value("message", "")
                            : res->body.substr(0, 200);
      const std::string text = url_ + path + ": HTTP " + std::to_string(res->status) + ": " + why;
      switch (res->status) {
        case 400: return InvalidArgument(text);
        case 401: return Unauthenticated(text);
        case 403: return PermissionDenied(text);
        case 404: return NotFound(text);
        default: return FailedPrecondition(text);
      }
    }
    return res->body;
  }
  Result<nlohmann::json> GetJson(const std::string& path) {
    auto body = Get(path);
    if (!body.ok()) return body.status();
    auto j = nlohmann::json::parse(*body, nullptr, false);
    if (!j.is_object()) return InvalidArgument(url_ + path + ": not a JSON object");
    return j;
  }
  Result<std::vector<ledger::Hash>> GetHashes(const std::string& path) {
    auto j = GetJson(path);
    if (!j.ok()) return j.status();
    if (!j->contains("hashes") || !(*j)["hashes"].is_array()) {
      return InvalidArgument(url_ + path + ": no \"hashes\" list");
    }
    std::vector<ledger::Hash> out;
    for (const auto& h : (*j)["hashes"]) {
      auto bytes = h.is_string() ? ledger::FromBase64(h.get<std::string>())
                                 : Result<std::string>(InvalidArgument("not a string"));
      auto hash = bytes.ok() ? ledger::HashFromBytes(*bytes) : Result<ledger::Hash>(bytes.status());
      if (!hash.ok()) return InvalidArgument(url_ + path + ": a hash: " + hash.status().message());
      out.push_back(*hash);
    }
    return out;
  }

 private:
  std::string url_;
  httplib::Client http_;
};

}  // namespace claw
