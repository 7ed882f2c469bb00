// A device's side of secure aggregation in training rounds (docs/privacy.md,
// secagg/protocol.h), kept by the agent between its round task's end and
// the round's sum: the task's delta stays on the device; its output
// announces the device's keys instead, and the coordinator's SecAggDown
// messages are answered from here.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "claw.pb.h"
#include "common/blobs.h"
#include "common/clock.h"
#include "secagg/protocol.h"

namespace claw {

class SecAggDevice {
 public:
  explicit SecAggDevice(const BlobDir* cache) : cache_(cache) {}

  // A fedround output whose task asked for secure aggregation ("secagg":
  // {"range", "clip"}): keeps its delta's hash and a protocol client, and
  // returns the output with the delta and its file taken out and the keys
  // announced ("secagg": {"handle", "c_pk", "s_pk", "commit"}, hex).
  // Any other output comes back as it was. An error when the task asked
  // for secure aggregation and its output cannot be taken (the agent then
  // fails the task rather than upload the delta).
  Result<std::string> Begin(std::string output, Time now);
  // The answer to a coordinator's message; none for a handle it does not
  // hold (forgotten, or never its). A round is forgotten after its step 3,
  // or a step-0 message (abandoned, or over without this device).
  std::optional<v1::SecAggUp> Handle(const v1::SecAggDown& down, Time now);
  // Forgets rounds it has heard nothing of for longer than their task's
  // "wait_s" (the round's deadline and protocol; 1 hour if not given).
  void Expire(Time now);
  size_t pending() const { return pending_.size(); }
  // The delta hashes it holds (the agent keeps them in its cache).
  std::vector<std::string> Deltas() const;

 private:
  struct Pending {
    std::unique_ptr<secagg::Client> client;
    std::string delta;
    double range = 0, clip = 0;
    int bits = 0;  // the round's, from its roster (step 1)
    uint64_t length = 0;
    Time heard;     // began, or its last message
    Duration wait;  // forgotten after this long unheard
  };
  Result<std::vector<uint32_t>> Vector(const Pending& p, const v1::SecAggDown& down) const;

  const BlobDir* cache_;
  std::map<std::string, Pending> pending_;  // by handle (bytes)
};

}  // namespace claw
