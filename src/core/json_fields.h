// Reading fields of a JSON object with errors that name the field.
//
// Each reader returns the value, the default when the field is absent (if a
// default is given), or InvalidArgument("<prefix>.<field>: <what is wrong>").
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace claw {

class FieldReader {
 public:
  // `prefix` is how the object is named in errors ("spec", "params").
  FieldReader(const nlohmann::json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

  Result<double> Number(const char* key, double min, double max, std::optional<double> def) const;
  Result<int64_t> Integer(const char* key, int64_t min, int64_t max,
                          std::optional<int64_t> def) const;
  Result<uint64_t> Unsigned(const char* key, std::optional<uint64_t> def) const;
  Result<std::string> String(const char* key, size_t max_len, std::optional<std::string> def) const;
  Result<std::string> OneOf(const char* key, const std::vector<std::string>& choices,
                            std::optional<std::string> def) const;
  // InvalidArgument naming the first field not in `known`.
  Status NoUnknownFields(const std::vector<std::string>& known) const;

  std::string Name(const char* key) const { return prefix_ + "." + key; }

 private:
  const nlohmann::json* Get(const char* key) const;

  const nlohmann::json& obj_;
  std::string prefix_;
};

// Fields read with their defaults into an object, the first error kept:
//   FieldsInto put(out);
//   put("lr", reader.Number("lr", 1e-7, 10, 0.01)); ...
//   CLAW_RETURN_IF_ERROR(put.status());
class FieldsInto {
 public:
  explicit FieldsInto(nlohmann::json& out) : out_(out) {}
  template <typename T>
  void operator()(const char* key, Result<T> value) {
    if (!value.ok()) {
      if (first_error_.ok()) first_error_ = value.status();
      return;
    }
    out_[key] = *value;
  }
  const Status& status() const { return first_error_; }

 private:
  nlohmann::json& out_;
  Status first_error_ = Status::Ok();
};

// Why `text` is not valid JSON, naming where: "<prefix>.<path>: <what>" for
// an error inside a value of an object (e.g. a number too large for a
// double: "spec.params.paths: the number 1e999999 is out of range"), else
// "<prefix>: malformed JSON: <the parser's message>".
Status DescribeJsonError(std::string_view text, const std::string& prefix);

}  // namespace claw
