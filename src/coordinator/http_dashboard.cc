// The HTTP API's dashboard part: the web application's files, its live
// streams (Server-Sent Events), and the calls its pages make
// (docs/dashboard.md).
#include "coordinator/http_api.h"
#include "coordinator/http_json.h"
#include "coordinator/web_assets.h"

namespace claw {
namespace {

// No inline script, no other origin, no framing: what a page can be made to
// run or load is the coordinator's own files. uPlot sets inline styles.
constexpr const char* kContentSecurityPolicy =
    "default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

}  // namespace

HttpResponse HttpApi::Asset(const std::string& path) {
  const std::string want = path == "/" ? "/ui/index.html" : path;
  for (const WebAsset& a : WebAssets()) {
    if (want != a.path) continue;
    HttpResponse r{200, a.content_type, std::string(reinterpret_cast<const char*>(a.data), a.size)};
    r.headers["Content-Security-Policy"] = kContentSecurityPolicy;
    r.headers["X-Content-Type-Options"] = "nosniff";
    r.headers["X-Frame-Options"] = "DENY";
    r.headers["Referrer-Policy"] = "no-referrer";
    r.headers["Cache-Control"] = "no-cache";
    return r;
  }
  return Error(NotFound("no file " + path.substr(0, 200)));
}

HttpResponse HttpApi::Dashboard(const HttpRequest& req, const std::vector<std::string>& seg,
                                const UserRecord& caller) {
  if (req.method == "GET" && seg.size() == 2 && seg[1] == "whoami") {
    return Json(200, {{"user", caller.name}, {"tier", caller.tier}, {"admin", caller.tier == kAdminTier}});
  }
  if (req.method == "GET" && seg.size() == 2 && seg[1] == "stream") {
    auto stream = feed_->Open(req.Query("page"), req.Query("job"), caller, req.Header("Last-Event-ID"));
    if (!stream.ok()) {
      HttpResponse e = Error(stream.status());
      if (stream.status().code() == StatusCode::kResourceExhausted) e.status = 503;
      return e;
    }
    HttpResponse r{200, "text/event-stream; charset=utf-8", ""};
    r.stream = std::move(stream).value();
    r.headers["Cache-Control"] = "no-store";
    r.headers["X-Accel-Buffering"] = "no";  // a proxy in front must not hold events back
    return r;
  }
  if (req.method == "GET" && seg.size() == 2 && seg[1] == "devices") {
    auto d = coordinator_->Devices(caller);
    if (!d.ok()) return Error(d.status());
    return Json(200, *d);
  }
  if (req.method == "POST" && seg.size() == 4 && seg[1] == "devices" && seg[3] == "control") {
    auto body = nlohmann::json::parse(req.body, nullptr, false);
    if (!body.is_object() || !body.contains("action") || !body["action"].is_string()) {
      return Error(InvalidArgument("body: {\"action\": \"pause\" | \"finish\" | \"resume\"}"));
    }
    auto d = coordinator_->ControlDevice(seg[2], body["action"].get<std::string>(), caller);
    if (!d.ok()) return Error(d.status());
    return Json(200, *d);
  }
  return Error(NotFound("no route " + req.method + " " + req.path.substr(0, 200)));
}

}  // namespace claw
