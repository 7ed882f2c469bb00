// Where apps name blobs in their JSON, shared by the apps that have files.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace claw {

// The distinct blob hashes among the string values of `object` (values that
// are not blob names are skipped), sorted.
std::vector<std::string> BlobHashesIn(const nlohmann::json& object);
// The blobs a task output lists as {"files": [{"path", "sha256", "size"}]}.
std::vector<std::string> OutputFileBlobs(std::string_view task_output);
std::vector<std::string> OutputFileBlobs(const nlohmann::json& task_output);

}  // namespace claw
