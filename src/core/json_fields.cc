#include "core/json_fields.h"

#include <cmath>
#include <sstream>

namespace claw {
namespace {

std::string Fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

const char* TypeName(const nlohmann::json& v) { return v.type_name(); }

}  // namespace

const nlohmann::json* FieldReader::Get(const char* key) const {
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

Result<double> FieldReader::Number(const char* key, double min, double max,
                                   std::optional<double> def) const {
  const nlohmann::json* v = Get(key);
  if (!v) {
    if (def) return *def;
    return InvalidArgument(Name(key) + ": required number is missing");
  }
  if (!v->is_number()) {
    return InvalidArgument(Name(key) + ": must be a number, got " + TypeName(*v));
  }
  double d = v->get<double>();
  if (!std::isfinite(d) || d < min || d > max) {
    return InvalidArgument(Name(key) + ": " + Fmt(d) + " is out of range [" + Fmt(min) + ", " +
                           Fmt(max) + "]");
  }
  return d;
}

Result<int64_t> FieldReader::Integer(const char* key, int64_t min, int64_t max,
                                     std::optional<int64_t> def) const {
  const nlohmann::json* v = Get(key);
  if (!v) {
    if (def) return *def;
    return InvalidArgument(Name(key) + ": required integer is missing");
  }
  int64_t n = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return InvalidArgument(Name(key) + ": " + v->dump() + " is out of range [" +
                             std::to_string(min) + ", " + std::to_string(max) + "]");
    }
    n = v->get<int64_t>();
  } else if (v->is_number_float()) {
    // Accept 1e8-style literals when they are whole numbers in range.
    double d = v->get<double>();
    if (!std::isfinite(d) || std::floor(d) != d || d < static_cast<double>(min) ||
        d > static_cast<double>(max)) {
      return InvalidArgument(Name(key) + ": must be a whole number in [" + std::to_string(min) +
                             ", " + std::to_string(max) + "], got " + v->dump());
    }
    n = static_cast<int64_t>(d);
  } else {
    return InvalidArgument(Name(key) + ": must be an integer, got " + TypeName(*v));
  }
  if (n < min || n > max) {
    return InvalidArgument(Name(key) + ": " + std::to_string(n) + " is out of range [" +
                           std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return n;
}

Result<uint64_t> FieldReader::Unsigned(const char* key, std::optional<uint64_t> def) const {
  const nlohmann::json* v = Get(key);
  if (!v) {
    if (def) return *def;
    return InvalidArgument(Name(key) + ": required integer is missing");
  }
  if (!v->is_number_integer() || (v->is_number_integer() && !v->is_number_unsigned() &&
                                  v->get<int64_t>() < 0)) {
    return InvalidArgument(Name(key) + ": must be a non-negative integer, got " + v->dump());
  }
  return v->get<uint64_t>();
}

Result<std::string> FieldReader::String(const char* key, size_t max_len,
                                        std::optional<std::string> def) const {
  const nlohmann::json* v = Get(key);
  if (!v) {
    if (def) return *def;
    return InvalidArgument(Name(key) + ": required string is missing");
  }
  if (!v->is_string()) {
    return InvalidArgument(Name(key) + ": must be a string, got " + TypeName(*v));
  }
  std::string s = v->get<std::string>();
  if (s.size() > max_len) {
    return InvalidArgument(Name(key) + ": longer than " + std::to_string(max_len) + " characters");
  }
  return s;
}

Result<std::string> FieldReader::OneOf(const char* key, const std::vector<std::string>& choices,
                                       std::optional<std::string> def) const {
  auto s = String(key, 256, def);
  if (!s.ok()) return s.status();
  for (const auto& c : choices) {
    if (*s == c) return s;
  }
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  return InvalidArgument(Name(key) + ": '" + *s + "' is not one of: " + list);
}

Status FieldReader::NoUnknownFields(const std::vector<std::string>& known) const {
  for (auto it = obj_.begin(); it != obj_.end(); ++it) {
    bool found = false;
    for (const auto& k : known) found = found || it.key() == k;
    if (!found) return InvalidArgument(prefix_ + "." + it.key() + ": unknown field");
  }
  return Status::Ok();
}

}  // namespace claw
