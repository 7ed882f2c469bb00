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

namespace {

// Follows the parse with a stack of where it is (object keys and array
// indexes), so that an error can say which field it is in.
class PathTracker : public nlohmann::json::json_sax_t {
 public:
  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override {
    Value();
    stack_.push_back({true, "", 0, false});
    return true;
  }
  bool key(string_t& k) override {
    stack_.back().key = k;
    return true;
  }
  bool end_object() override {
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    Value();
    stack_.push_back({false, "", 0, false});
    return true;
  }
  bool end_array() override {
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string& token,
                   const nlohmann::detail::exception& e) override {
    token_ = token;
    message_ = e.what();
    id_ = e.id;
    return false;
  }

  // Where the parser stopped, as "a.b[2]" (empty: at the top). An error in
  // an array is in the element after the last one that parsed.
  std::string Path() const {
    std::string path;
    for (size_t i = 0; i < stack_.size(); ++i) {
      const Level& l = stack_[i];
      if (l.object) {
        if (!l.key.empty()) path += (path.empty() ? "" : ".") + l.key;
      } else {
        size_t index = i + 1 == stack_.size() && l.seen ? l.index + 1 : l.index;
        path += "[" + std::to_string(index) + "]";
      }
    }
    return path;
  }
  const std::string& token() const { return token_; }
  const std::string& message() const { return message_; }
  int id() const { return id_; }

 private:
  struct Level {
    bool object;
    std::string key;   // objects: the key of the value being read
    size_t index = 0;  // arrays: the element being read
    bool seen = false; // arrays: an element has started
  };
  // A value starts: in an array, it is the next element.
  bool Value() {
    if (!stack_.empty() && !stack_.back().object) {
      Level& l = stack_.back();
      if (l.seen) l.index++;
      l.seen = true;
    }
    return true;
  }
  std::vector<Level> stack_;
  std::string token_, message_;
  int id_ = 0;
};

}  // namespace

Status DescribeJsonError(std::string_view text, const std::string& prefix) {
  PathTracker tracker;
  nlohmann::json::sax_parse(text.begin(), text.end(), &tracker);
  std::string path = tracker.Path();
  // out_of_range.406: a number literal too large for a double.
  if (tracker.id() == 406 && !path.empty()) {
    std::string number = tracker.token().substr(0, 40);
    return InvalidArgument(prefix + "." + path + ": the number " + number +
                           " is out of range (larger than a double can hold)");
  }
  if (tracker.message().empty()) return InvalidArgument(prefix + ": malformed JSON");
  return InvalidArgument(prefix + ": malformed JSON" +
                         (path.empty() ? "" : " (in " + prefix + "." + path + ")") + ": " +
                         tracker.message());
}

}  // namespace claw
