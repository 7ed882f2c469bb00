// One training round's secure aggregation as the coordinator runs it
// (docs/privacy.md): the devices whose tasks announced keys, the protocol's
// server (secagg/protocol.h), each step's deadline, and what to send whom.
// No transport here: the driver hands messages to its host, which wraps
// them for each device's session.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "core/types.h"
#include "secagg/protocol.h"

namespace claw::rounds {

// The range each value is clamped to before it is quantized to ±kLevels:
// the spec's if set; with differential privacy (clip > 0) 12.7·C / √d, so
// that rounding can add at most a tenth of C to a clipped delta's norm
// (√d · range / 127, see SecureSensitivity).
double SecureRange(double spec_range, double clip, uint64_t length);
// What one device can add to the sum's norm: C plus the most stochastic
// rounding can add, √d · range / kLevels (clamping only shrinks it). The
// noise is calibrated to this, not to C.
double SecureSensitivity(double clip, double range, uint64_t length);

// The most a masked vector may take: it travels in one session message,
// and the coordinator's and agents' limit is 16 MiB (with room for the
// message around it).
constexpr uint64_t kMaxMaskedBytes = uint64_t{15} << 20;
// InvalidArgument, saying by how much, when a model of `length` values
// summed over up to `devices` devices cannot be masked within it.
Status SecureVectorFits(uint64_t length, uint32_t devices);

// Coordinator -> device.
struct SecAggSend {
  AgentId agent;
  std::string handle;  // the device's round, as its task's output named it
  int step = 0;        // 1 roster, 2 its shares, 3 unmask, 0 abandoned
  std::shared_ptr<const secagg::Roster> roster;  // the round's (every step)
  std::vector<secagg::SealedShare> shares;
  std::vector<secagg::DeviceId> masked;
  std::string error;
};

// Step 0: the round is over for the device (abandoned, summed without it,
// or it was left out); it forgets its keys and delta.
inline SecAggSend ForgetRound(AgentId agent, std::string handle, std::string why) {
  return SecAggSend{std::move(agent), std::move(handle), 0, nullptr, {}, {}, std::move(why)};
}

// Device -> coordinator.
struct SecAggReply {
  std::string handle;
  int step = 0;
  std::vector<secagg::SealedShare> shares;
  std::string masked;
  std::vector<secagg::RevealedShare> revealed;
  std::string error;  // the device could not or would not
};

class SecureRound {
 public:
  struct Device {
    secagg::DeviceId id;
    AgentId agent;
    std::string handle;
    secagg::Advertisement keys;
  };
  // Fixes the roster of the devices that announced keys (a device whose
  // keys or handle another device also announced is left out, as if it
  // vanished). FailedPrecondition when fewer than params.min_survivors are
  // left.
  static Result<SecureRound> Start(secagg::Params params, std::vector<Device> devices,
                                   Duration step_time, Time now);

  // What to send now (the roster, at first; then each step's messages).
  std::vector<SecAggSend> TakeSends();
  // A device's reply: refused (InvalidArgument, nothing changes) if it is
  // not from the device's own agent, for another step, or does not fit.
  Status OnReply(const AgentId& agent, const SecAggReply& reply);
  // Moves on when every device of the step has replied or its deadline
  // passed. After the last step, closed(): no reply is taken any more, and
  // Finish() unmasks the sum (the costly part, which the caller may run
  // without holding what serialises replies). Then done() or abandoned();
  // either way every device still holding the round is told it is over.
  void Advance(Time now);
  bool closed() const { return step_ > 3 && !done_ && abandoned_.empty(); }
  void Finish(Time now);
  // Ends the round before its sum (the training was cancelled or failed):
  // every device is told to forget it.
  void Cancel(std::string why) { Abandon(std::move(why)); }
  bool done() const { return done_; }
  // Whether the device that announced `handle` is in the roster.
  bool Has(const std::string& handle) const { return by_handle_.count(handle) > 0; }
  const std::string& abandoned() const { return abandoned_; }
  // The sum of the vectors of the devices that sent one (ring elements).
  const std::vector<uint32_t>& sum() const { return sum_; }
  const secagg::Server& server() const { return server_; }
  // {"devices", "shared", "masked", "unmasked", "neighbours", "threshold",
  //  "bits", "bytes_up", "bytes_down", "seconds"}.
  nlohmann::json Info() const;

 private:
  SecureRound(secagg::Server server, std::vector<Device> devices, Duration step_time, Time now);
  void Abandon(std::string why);
  void Send(const Device& d, int step, std::vector<secagg::SealedShare> shares = {},
            std::vector<secagg::DeviceId> masked = {});
  void Next(Time now);

  secagg::Server server_;
  std::shared_ptr<const secagg::Roster> roster_;
  std::map<secagg::DeviceId, Device> devices_;
  std::map<std::string, secagg::DeviceId> by_handle_;
  Duration step_time_;
  Time started_, deadline_, finished_;
  int step_ = 1;  // waiting for the replies of this step
  std::set<secagg::DeviceId> replied_;
  std::vector<SecAggSend> outbox_;
  std::vector<uint32_t> sum_;
  bool done_ = false;
  std::string abandoned_;
  uint64_t bytes_up_ = 0, bytes_down_ = 0;
};

}  // namespace claw::rounds
