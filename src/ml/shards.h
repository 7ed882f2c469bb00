// Which rows a round's task trains on (ShardSpec, trainer.h), for the
// built-in models and users' modules alike; inside the ML library.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/status.h"
#include "ml/trainer.h"

namespace claw::ml {

// Fisher-Yates with mt19937_64 (whose output the standard fixes), so that
// every platform cuts the same shards and draws the same batches.
inline void Shuffle(std::vector<int64_t>& v, std::mt19937_64& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng() % i]);
}

// The rows of shard s.shard of `n` rows; `labels` (n of them) are needed for
// a by_label split alone (null otherwise, or when the targets are not class
// labels: then by_label is refused).
inline Result<std::vector<int64_t>> ShardRows(int64_t n, const int64_t* labels, const ShardSpec& s) {
  if (s.shards == 0 || s.shard >= s.shards || s.shards > static_cast<size_t>(n)) {
    return InvalidArgument("shard " + std::to_string(s.shard) + " of " + std::to_string(s.shards) +
                           ": not a shard of " + std::to_string(n) + " rows");
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  if (s.split == "by_label") {
    if (!labels) return InvalidArgument("split by_label: the targets must be class labels, one integer a row");
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return labels[a] < labels[b]; });
  } else if (s.split == "iid") {
    std::mt19937_64 rng(s.data_seed);
    Shuffle(order, rng);
  } else {
    return InvalidArgument("split: iid or by_label");
  }
  size_t begin = s.shard * order.size() / s.shards, end = (s.shard + 1) * order.size() / s.shards;
  return std::vector<int64_t>(order.begin() + static_cast<ptrdiff_t>(begin),
                              order.begin() + static_cast<ptrdiff_t>(end));
}

// The batches of a round's steps: rows of the shard in a shuffled order,
// reshuffled after each pass, drawn from `seed` alone (so every platform
// draws the same).
class ShardBatches {
 public:
  ShardBatches(std::vector<int64_t> rows, uint64_t seed) : order_(std::move(rows)), rng_(seed) {
    Shuffle(order_, rng_);
  }
  std::vector<int64_t> Next(size_t batch) {
    std::vector<int64_t> idx;
    idx.reserve(batch);
    while (idx.size() < batch) {
      if (at_ == order_.size()) {
        Shuffle(order_, rng_);
        at_ = 0;
      }
      idx.push_back(order_[at_++]);
    }
    return idx;
  }

 private:
  std::vector<int64_t> order_;
  std::mt19937_64 rng_;
  size_t at_ = 0;
};

}  // namespace claw::ml
