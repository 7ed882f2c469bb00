// A Prometheus histogram: counts of observations at or under fixed bucket
// bounds, their sum and count, and its text exposition. Not thread-safe:
// its owner observes and reads it under its own lock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace claw {

class Histogram {
 public:
  // `bounds`: ascending upper bounds; +Inf is implied.
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

  void Observe(double v) {
    const size_t i = static_cast<size_t>(
        std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
    counts_[i]++;
    sum_ += v;
    count_++;
  }
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

  // "# HELP name help\n# TYPE name histogram\nname_bucket{le="0.1"} 3\n..."
  std::string Exposition(const std::string& name, const std::string& help) const {
    std::string out = "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
    uint64_t cumulative = 0;
    char buf[96];
    for (size_t i = 0; i < bounds_.size(); ++i) {
      cumulative += counts_[i];
      std::snprintf(buf, sizeof buf, "_bucket{le=\"%g\"} %llu\n", bounds_[i],
                    static_cast<unsigned long long>(cumulative));
      out += name + buf;
    }
    cumulative += counts_.back();
    std::snprintf(buf, sizeof buf, "_bucket{le=\"+Inf\"} %llu\n", static_cast<unsigned long long>(cumulative));
    out += name + buf;
    std::snprintf(buf, sizeof buf, "_sum %.9g\n", sum_);
    out += name + buf;
    std::snprintf(buf, sizeof buf, "_count %llu\n", static_cast<unsigned long long>(count_));
    out += name + buf;
    return out;
  }

  // Seconds from a millisecond to a day, roughly ×4 apart.
  static std::vector<double> SecondsBounds() {
    return {0.001, 0.004, 0.016, 0.064, 0.25, 1, 4, 16, 64, 256, 1024, 4096, 16384, 86400};
  }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

}  // namespace claw
