#include "apps/blob_fields.h"

#include <algorithm>

#include "common/blobs.h"

namespace claw {
namespace {

void SortUnique(std::vector<std::string>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

}  // namespace

std::vector<std::string> BlobHashesIn(const nlohmann::json& object) {
  std::vector<std::string> out;
  if (!object.is_object()) return out;
  for (const auto& [key, value] : object.items()) {
    if (value.is_string() && IsBlobHash(value.get_ref<const std::string&>())) {
      out.push_back(value.get<std::string>());
    }
  }
  SortUnique(out);
  return out;
}

std::vector<std::string> OutputFileBlobs(std::string_view task_output) {
  return OutputFileBlobs(nlohmann::json::parse(task_output, nullptr, false));
}

std::vector<std::string> OutputFileBlobs(const nlohmann::json& o) {
  std::vector<std::string> out;
  if (!o.is_object() || !o.contains("files") || !o["files"].is_array()) return out;
  for (const auto& f : o["files"]) {
    if (f.is_object() && f.contains("sha256") && f["sha256"].is_string() &&
        IsBlobHash(f["sha256"].get_ref<const std::string&>())) {
      out.push_back(f["sha256"].get<std::string>());
    }
  }
  SortUnique(out);
  return out;
}

}  // namespace claw
