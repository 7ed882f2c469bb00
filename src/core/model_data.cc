#include "core/model_data.h"

#include <algorithm>
#include <iterator>

#include "common/blobs.h"

namespace claw {
namespace {

const char* const kArrays[] = {"train_inputs", "train_targets", "test_inputs", "test_targets"};
const char* const kTokens[] = {"train_tokens", "test_tokens"};

}  // namespace

Result<ModelData> CheckModelData(const nlohmann::json& p, const std::string& prefix, bool need_test) {
  const nlohmann::json* d = p.contains("data") ? &p["data"] : nullptr;
  const bool tokens = d && d->is_object() && (d->contains("train_tokens") || d->contains("test_tokens"));
  const std::string field = prefix + ".data";
  if (!d || !d->is_object()) {
    return InvalidArgument(field + ": {\"train_inputs\", \"train_targets\", \"test_inputs\", \"test_targets\"} "
                           "as .npy blobs, or {\"train_tokens\", \"test_tokens\"} as token files, is "
                           "required (claw submit --data DIR uploads them)");
  }
  ModelData out;
  if (p.contains("block")) {
    const nlohmann::json& b = p["block"];
    if (!b.is_number_integer() || b.get<int64_t>() < 1 || b.get<int64_t>() > 65536) {
      return InvalidArgument(prefix + ".block: the tokens in a row, an integer from 1 to 65536");
    }
    if (!tokens) return InvalidArgument(prefix + ".block: for token files (data.train_tokens) alone");
    out.block = b.get<int64_t>();
  } else if (tokens) {
    return InvalidArgument(prefix + ".block: required with token files: the tokens in a row (the "
                           "model's context), e.g. 128");
  }
  const auto* names = tokens ? std::begin(kTokens) : std::begin(kArrays);
  const auto* names_end = tokens ? std::end(kTokens) : std::end(kArrays);
  for (const auto& item : d->items()) {
    const std::string& key = item.key();
    const nlohmann::json& value = item.value();
    if (std::find_if(names, names_end, [&](const char* n) { return key == n; }) == names_end) {
      return InvalidArgument(field + "." + key.substr(0, 64) +
                             (tokens ? ": unknown beside token files (train_tokens, test_tokens)"
                                     : ": unknown (train_inputs, train_targets, test_inputs, test_targets; "
                                       "or train_tokens, test_tokens)"));
    }
    if (!value.is_string() || !IsBlobHash(value.get_ref<const std::string&>())) {
      return InvalidArgument(field + "." + key + ": must be a blob's SHA-256");
    }
  }
  for (const auto* n = names; n != names_end; ++n) {
    const std::string key = *n;
    const bool test = key.starts_with("test_");
    if (!d->contains(key) && (!test || need_test)) {
      return InvalidArgument(field + "." + key + ": required" +
                             (test ? " (training in rounds evaluates on the test files too)" : ""));
    }
  }
  if (!tokens && d->contains("test_inputs") != d->contains("test_targets")) {
    return InvalidArgument(field + ": test_inputs and test_targets go together");
  }
  out.data = *d;
  return out;
}

std::string ModelDataFile(const std::string& key) {
  if (key.ends_with("_tokens")) return key.substr(0, key.size() - 7) + ".tokens";
  return key + ".npy";
}

}  // namespace claw
