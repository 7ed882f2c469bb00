// Notifier: tells users what happened to their jobs and devices, at the
// URLs they registered (ADR 0012).
//
//   webhook  a POST signed as the Standard Webhooks spec says: headers
//            webhook-id (the same on every retry of one event: receivers
//            deduplicate by it), webhook-timestamp, webhook-signature
//            ("v1," + base64 HMAC-SHA256 of "id.timestamp.body" under the
//            target's whsec_ secret); body {"type", "timestamp", "data"}.
//   slack    a Slack incoming webhook: {"text", "blocks"}, with &, < and >
//            escaped as Slack asks.
//   email    a text message to the address ("mailto:" URL) through the
//            operator's SMTP server, over STARTTLS (mailer.h); its
//            Message-ID is the event's id on every retry.
//
// Events: job.done, job.failed, job.cancelled, quota.warning, quota.held,
// device.offline. Delivery is at least once, on a thread of its own:
// attempts back off (1 s, 2 s, 4 s ... up to `max_attempts`); a 2xx ends
// them, a 4xx other than 408/429 too (the receiver refused it). Nothing
// here blocks the caller, and the queue is bounded (the oldest deliveries
// are dropped past it, counted).
//
// A target's URL must be http(s) and its host must resolve to public
// addresses only: loopback (the coordinator itself among them), link-local
// (the cloud metadata service at 169.254.169.254), private (10/8,
// 172.16/12, 192.168/16, fc00::/7) and unspecified addresses are refused — at registration and again before every delivery (a name
// may resolve elsewhere later) — unless the operator allows private
// targets (`--allow-private-webhooks`).
//
// Thread-safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "core/types.h"
#include "coordinator/mailer.h"
#include "store/store.h"

namespace claw {

struct NotifierOptions {
  bool allow_private = false;
  int max_attempts = 6;
  Duration first_backoff = std::chrono::seconds(1);
  Duration timeout = std::chrono::seconds(10);
  size_t max_queue = 10'000;
  size_t max_targets_per_user = 10;
  SmtpOptions smtp;  // url empty: email targets are refused
};

struct Notification {
  std::string id;    // unique per event: "msg_<hex>"
  std::string user;  // whose targets
  std::string type;  // job.done, ...
  std::string text;  // one line, for people (Slack)
  nlohmann::json data;
  Time at;
};

// "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)), the
// key being the base64 after "whsec_". InvalidArgument for a bad secret.
Result<std::string> StandardWebhookSignature(const std::string& secret, const std::string& id,
                                             int64_t timestamp, const std::string& body);
// &, < and > as Slack's formatting rules ask.
std::string SlackEscape(std::string_view text);
// InvalidArgument naming what is wrong with the URL; PermissionDenied for a
// host that resolves to a private or loopback address.
Status CheckTargetUrl(const std::string& url, bool allow_private);

class Notifier {
 public:
  Notifier(Store* store, const Clock* clock, NotifierOptions options, Logger log);
  ~Notifier();

  Result<NotifyTarget> Add(const std::string& user, const std::string& kind, const std::string& url);
  std::vector<NotifyTarget> List(const std::string& user);
  Status Remove(int64_t id, const std::string& user);
  // Queues the event for each of its user's targets.
  void Notify(Notification n);

  uint64_t delivered() const;
  uint64_t failed() const;

 private:
  struct Delivery {
    NotifyTarget target;
    Notification event;
    int attempts = 0;
    Time next;
  };
  void Loop();
  Status Deliver(const Delivery& d);

  Store* store_;
  const Clock* clock_;
  NotifierOptions options_;
  Logger log_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<NotifyTarget> targets_;  // guarded by mu_
  std::deque<Delivery> queue_;         // guarded by mu_
  bool stop_ = false;                  // guarded by mu_
  uint64_t delivered_ = 0, failed_ = 0, dropped_ = 0;  // guarded by mu_
  std::thread thread_;
};

}  // namespace claw
