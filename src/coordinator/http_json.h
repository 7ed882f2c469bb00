// Helpers shared by the HTTP API's source files (http_api.cc, http_books.cc):
// JSON responses, errors as JSON, path segments. Internal to the coordinator.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "coordinator/http_server.h"

namespace claw {

inline int HttpCode(StatusCode c) {
  switch (c) {
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
      return 409;
    case StatusCode::kResourceExhausted:
      return 413;
    case StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

inline HttpResponse Json(int code, const nlohmann::json& body) {
  return HttpResponse{code, "application/json", body.dump(2) + "\n"};
}

inline HttpResponse Error(const Status& st) {
  return Json(HttpCode(st.code()),
              {{"error", {{"code", StatusCodeName(st.code())}, {"message", st.message()}}}});
}

// "/api/jobs/ID/results" -> {"api", "jobs", "ID", "results"}.
inline std::vector<std::string> Segments(const std::string& path) {
  std::vector<std::string> out;
  for (size_t at = 0; at < path.size();) {
    size_t slash = path.find('/', at);
    if (slash == std::string::npos) slash = path.size();
    if (slash > at) out.push_back(path.substr(at, slash - at));
    at = slash + 1;
  }
  return out;
}

}  // namespace claw
