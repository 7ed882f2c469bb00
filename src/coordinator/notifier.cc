#include "coordinator/notifier.h"

#include <arpa/inet.h>
#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <netdb.h>
#include <sodium.h>

#include <cstring>

#include "common/crypto.h"
#include "ledger/note.h"

namespace claw {
namespace {

struct Url {
  std::string scheme;  // http or https
  std::string host;
  int port = 0;
  std::string path;
};

Result<Url> ParseUrl(const std::string& url) {
  Url u;
  const size_t colon = url.find("://");
  if (colon == std::string::npos) return InvalidArgument("url: scheme://host/path, got '" + url.substr(0, 100) + "'");
  u.scheme = url.substr(0, colon);
  if (u.scheme != "http" && u.scheme != "https") {
    return InvalidArgument("url: http or https only, got '" + u.scheme.substr(0, 20) + "'");
  }
  std::string rest = url.substr(colon + 3);
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  u.path = slash == std::string::npos ? "/" : rest.substr(slash);
  if (authority.find('@') != std::string::npos) return InvalidArgument("url: no user:password@ in it");
  u.port = u.scheme == "https" ? 443 : 80;
  if (!authority.empty() && authority[0] == '[') {  // [v6]:port
    const size_t close = authority.find(']');
    if (close == std::string::npos) return InvalidArgument("url: an IPv6 host is in brackets");
    u.host = authority.substr(1, close - 1);
    authority = authority.substr(close + 1);
    if (!authority.empty() && authority[0] == ':') u.port = std::atoi(authority.c_str() + 1);
  } else {
    const size_t p = authority.rfind(':');
    u.host = authority.substr(0, p);
    if (p != std::string::npos) u.port = std::atoi(authority.c_str() + p + 1);
  }
  if (u.host.empty() || u.port <= 0 || u.port > 65535) return InvalidArgument("url: no host or a bad port");
  if (url.size() > 2000) return InvalidArgument("url: longer than 2,000 characters");
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= ' ') return InvalidArgument("url: spaces or control characters in it");
  }
  return u;
}

// Loopback, link-local (metadata), private, unspecified, multicast.
bool IsPrivate(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    const uint32_t a = ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr);
    const uint8_t b0 = a >> 24, b1 = (a >> 16) & 0xff;
    return b0 == 127 || b0 == 0 || b0 == 10 || (b0 == 169 && b1 == 254) ||
           (b0 == 172 && (b1 & 0xf0) == 16) || (b0 == 192 && b1 == 168) || b0 >= 224 ||
           (b0 == 100 && (b1 & 0xc0) == 64);
  }
  if (sa->sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a) || IN6_IS_ADDR_UNSPECIFIED(&a) || IN6_IS_ADDR_LINKLOCAL(&a) ||
        IN6_IS_ADDR_MULTICAST(&a) || (a.s6_addr[0] & 0xfe) == 0xfc) {
      return true;
    }
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
      sockaddr_in v4{};
      v4.sin_family = AF_INET;
      std::memcpy(&v4.sin_addr, a.s6_addr + 12, 4);
      return IsPrivate(reinterpret_cast<const sockaddr*>(&v4));
    }
    return false;
  }
  return true;
}


}  // namespace

Result<std::string> StandardWebhookSignature(const std::string& secret, const std::string& id,
                                             int64_t timestamp, const std::string& body) {
  constexpr std::string_view kPrefix = "whsec_";
  if (secret.rfind(kPrefix, 0) != 0) return InvalidArgument("a webhook secret starts with whsec_");
  auto key = ledger::FromBase64(std::string_view(secret).substr(kPrefix.size()));
  if (!key.ok() || key->empty()) return InvalidArgument("a webhook secret is whsec_ and base64");
  InitCrypto();
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, reinterpret_cast<const unsigned char*>(key->data()), key->size());
  const std::string signed_content = id + "." + std::to_string(timestamp) + "." + body;
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(signed_content.data()),
                                signed_content.size());
  unsigned char mac[crypto_auth_hmacsha256_BYTES];
  crypto_auth_hmacsha256_final(&st, mac);
  return "v1," + ledger::Base64(std::string_view(reinterpret_cast<const char*>(mac), sizeof mac));
}

std::string SlackEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else out += c;
  }
  return out;
}

Status CheckTargetUrl(const std::string& url, bool allow_private) {
  auto u = ParseUrl(url);
  if (!u.ok()) return u.status();
  if (allow_private) return Status::Ok();
  // "localhost" and names under it are loopback by definition (RFC 6761),
  // whatever this machine's resolver says (or when it has no /etc/hosts).
  std::string host = u->host;
  std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return std::tolower(c); });
  while (!host.empty() && host.back() == '.') host.pop_back();
  bool bad = host == "localhost" || (host.size() > 10 && host.ends_with(".localhost"));
  if (!bad) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(u->host.c_str(), nullptr, &hints, &res) != 0 || !res) {
      return InvalidArgument("url: host " + u->host.substr(0, 100) + " does not resolve");
    }
    for (addrinfo* a = res; a; a = a->ai_next) bad = bad || IsPrivate(a->ai_addr);
    freeaddrinfo(res);
  }
  if (bad) {
    return PermissionDenied("url: " + u->host.substr(0, 100) +
                            " is a loopback, private or link-local address (the coordinator "
                            "itself, a metadata service?); the operator may allow such targets "
                            "with --allow-private-webhooks");
  }
  return Status::Ok();
}

Notifier::Notifier(Store* store, const Clock* clock, NotifierOptions options, Logger log)
    : store_(store), clock_(clock), options_(options), log_(std::move(log)) {
  if (auto t = store_->NotifyTargets(); t.ok()) targets_ = std::move(t).value();
  thread_ = std::thread([this] { Loop(); });
}

Notifier::~Notifier() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Result<NotifyTarget> Notifier::Add(const std::string& user, const std::string& kind,
                                   const std::string& url) {
  if (kind != "webhook" && kind != "slack" && kind != "email") {
    return InvalidArgument("kind: webhook, slack or email, got '" + kind.substr(0, 20) + "'");
  }
  if (kind == "email") {
    if (options_.smtp.url.empty()) {
      return FailedPrecondition("this coordinator sends no email: its operator has set no SMTP server (--smtp)");
    }
    if (url.rfind("mailto:", 0) != 0) return InvalidArgument("url: an email target is mailto:ADDRESS");
    CLAW_RETURN_IF_ERROR(CheckMailAddress(url.substr(7)));
  } else {
    CLAW_RETURN_IF_ERROR(CheckTargetUrl(url, options_.allow_private));
  }
  {
    std::lock_guard lock(mu_);
    size_t mine = 0;
    for (const auto& t : targets_) mine += t.user == user;
    if (mine >= options_.max_targets_per_user) {
      return ResourceExhausted("at most " + std::to_string(options_.max_targets_per_user) +
                               " notification targets per user");
    }
  }
  NotifyTarget t{0, user, kind, url, "", clock_->Now()};
  if (kind == "webhook") {
    InitCrypto();
    std::string key(24, '\0');
    randombytes_buf(key.data(), key.size());
    t.secret = "whsec_" + ledger::Base64(key);
  }
  auto id = store_->AddNotifyTarget(t);
  if (!id.ok()) return id.status();
  t.id = *id;
  std::lock_guard lock(mu_);
  targets_.push_back(t);
  return t;
}

std::vector<NotifyTarget> Notifier::List(const std::string& user) {
  std::lock_guard lock(mu_);
  std::vector<NotifyTarget> out;
  for (const auto& t : targets_) {
    if (t.user == user) out.push_back(t);
  }
  return out;
}

Status Notifier::Remove(int64_t id, const std::string& user) {
  CLAW_RETURN_IF_ERROR(store_->RemoveNotifyTarget(id, user));
  std::lock_guard lock(mu_);
  std::erase_if(targets_, [&](const NotifyTarget& t) { return t.id == id; });
  return Status::Ok();
}

void Notifier::Notify(Notification n) {
  {
    std::lock_guard lock(mu_);
    for (const auto& t : targets_) {
      if (t.user != n.user) continue;
      if (queue_.size() >= options_.max_queue) {
        queue_.pop_front();
        dropped_++;
      }
      queue_.push_back(Delivery{t, n, 0, clock_->Now()});
    }
  }
  cv_.notify_one();
}

uint64_t Notifier::delivered() const {
  std::lock_guard lock(mu_);
  return delivered_;
}

uint64_t Notifier::failed() const {
  std::lock_guard lock(mu_);
  return failed_;
}

Status Notifier::Deliver(const Delivery& d) {
  if (d.target.kind == "email") {
    std::string text = d.event.text + "\n\n";
    text += "Event: " + d.event.type + " at " + Iso8601(d.event.at) + "\n";
    text += "Details: " + d.event.data.dump() + "\n\n";
    text += "-- \nOpenClaw Compute. You get this because an email target is set for your user\n"
            "(claw notify list; claw notify remove ID ends it).\n";
    return SendMail(options_.smtp, d.target.url.substr(7), "[OpenClaw] " + d.event.text, text,
                    d.event.id + "@openclaw-compute", d.event.at);
  }
  CLAW_RETURN_IF_ERROR(CheckTargetUrl(d.target.url, options_.allow_private));
  auto u = ParseUrl(d.target.url);
  if (!u.ok()) return u.status();
  std::string body;
  httplib::Headers headers;
  if (d.target.kind == "webhook") {
    body = nlohmann::json{{"type", d.event.type}, {"timestamp", Iso8601(d.event.at)},
                          {"data", d.event.data}}
               .dump();
    const int64_t ts = clock_->Now().unix_ms() / 1000;
    auto sig = StandardWebhookSignature(d.target.secret, d.event.id, ts, body);
    if (!sig.ok()) return sig.status();
    headers = {{"webhook-id", d.event.id},
               {"webhook-timestamp", std::to_string(ts)},
               {"webhook-signature", *sig}};
  } else {
    const std::string text = SlackEscape(d.event.text);
    body = nlohmann::json{{"text", text},
                          {"blocks", nlohmann::json::array({{{"type", "section"},
                                                             {"text", {{"type", "mrkdwn"},
                                                                       {"text", text}}}}})}}
               .dump();
  }
  httplib::Client http(u->scheme + "://" + (u->host.find(':') != std::string::npos ? "[" + u->host + "]" : u->host) +
                       ":" + std::to_string(u->port));
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(options_.timeout).count();
  http.set_connection_timeout(secs);
  http.set_read_timeout(secs);
  http.set_write_timeout(secs);
  http.set_follow_location(false);  // a redirect could point anywhere
  auto res = http.Post(u->path, headers, body, "application/json");
  if (!res) return Unavailable("cannot reach " + u->host + ": " + httplib::to_string(res.error()));
  if (res->status >= 200 && res->status < 300) return Status::Ok();
  if (res->status >= 400 && res->status < 500 && res->status != 408 && res->status != 429) {
    return InvalidArgument("refused: HTTP " + std::to_string(res->status));
  }
  return Unavailable("HTTP " + std::to_string(res->status));
}

void Notifier::Loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    const Time now = clock_->Now();
    auto due = std::find_if(queue_.begin(), queue_.end(), [&](const Delivery& d) { return d.next <= now; });
    if (due == queue_.end()) {
      cv_.wait_for(lock, std::chrono::milliseconds(200));
      continue;
    }
    Delivery d = std::move(*due);
    queue_.erase(due);
    lock.unlock();
    Status st = Deliver(d);
    lock.lock();
    d.attempts++;
    if (st.ok()) {
      delivered_++;
      continue;
    }
    const bool final = st.code() == StatusCode::kInvalidArgument ||
                       st.code() == StatusCode::kPermissionDenied || d.attempts >= options_.max_attempts;
    log_->warn("notification {} to target {} of {}: attempt {}: {}{}", d.event.type, d.target.id,
               d.target.user, d.attempts, st.message(), final ? " (given up)" : "");
    if (final) {
      failed_++;
      continue;
    }
    d.next = clock_->Now() + options_.first_backoff * (1 << std::min(d.attempts - 1, 10));
    queue_.push_back(std::move(d));
  }
}

}  // namespace claw
