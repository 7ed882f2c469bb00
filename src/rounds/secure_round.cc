#include "rounds/secure_round.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace claw::rounds {

using nlohmann::json;

double SecureRange(double spec_range, double clip, uint64_t length) {
  if (spec_range > 0) return spec_range;
  if (clip > 0 && length > 0) {
    return 0.1 * secagg::kLevels * clip / std::sqrt(static_cast<double>(length));
  }
  return 1.0;
}

double SecureSensitivity(double clip, double range, uint64_t length) {
  return clip + std::sqrt(static_cast<double>(length)) * range / secagg::kLevels;
}

Status SecureVectorFits(uint64_t length, uint32_t devices) {
  const int bits = secagg::RingBits(std::max<uint32_t>(devices, 1), secagg::kLevels);
  const uint64_t bytes = secagg::PackedSize(length, bits);
  if (bytes <= kMaxMaskedBytes) return Status::Ok();
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.1f", static_cast<double>(bytes) / (1 << 20));
  return InvalidArgument("secure aggregation: a masked vector of this model (" + std::to_string(length) +
                         " values at " + std::to_string(bits) + " bits for " + std::to_string(devices) +
                         " devices) takes " + mib + " MiB, over the " +
                         std::to_string(kMaxMaskedBytes >> 20) +
                         " MiB a session message carries; train a smaller model (or LoRA "
                         "adapters) or turn secure aggregation off");
}

Result<SecureRound> SecureRound::Start(secagg::Params params, std::vector<Device> devices,
                                       Duration step_time, Time now) {
  secagg::Server server(params);
  // A handle or key two devices announced: neither is kept (one of them
  // copied the other's; which one cannot be told).
  std::map<std::string, int> seen;
  for (const Device& d : devices) {
    for (const std::string* k : {&d.handle, &d.keys.c_pk, &d.keys.s_pk}) seen[*k]++;
  }
  std::vector<Device> kept;
  for (Device& d : devices) {
    d.keys.id = d.id;
    if (seen[d.handle] > 1 || seen[d.keys.c_pk] > 1 || seen[d.keys.s_pk] > 1) continue;
    if (server.Advertise(d.keys).ok()) kept.push_back(std::move(d));  // else: as if it vanished
  }
  auto roster = server.CloseAdvertising();
  if (!roster.ok()) return roster.status();
  SecureRound r(std::move(server), std::move(kept), step_time, now);
  for (const auto& [id, d] : r.devices_) r.Send(d, 1);
  return r;
}

SecureRound::SecureRound(secagg::Server server, std::vector<Device> devices, Duration step_time,
                         Time now)
    : server_(std::move(server)),
      roster_(std::make_shared<const secagg::Roster>(server_.roster())),
      step_time_(step_time),
      started_(now),
      deadline_(now + step_time) {
  for (Device& d : devices) {
    by_handle_[d.handle] = d.id;
    devices_.emplace(d.id, std::move(d));
  }
}

std::vector<SecAggSend> SecureRound::TakeSends() { return std::exchange(outbox_, {}); }

void SecureRound::Send(const Device& d, int step, std::vector<secagg::SealedShare> shares,
                       std::vector<secagg::DeviceId> masked) {
  SecAggSend s{d.agent, d.handle, step, roster_, std::move(shares), std::move(masked), ""};
  bytes_down_ += d.handle.size() + 8;
  if (step == 1) {
    for (const auto& m : server_.roster().members) bytes_down_ += 4 + m.c_pk.size() + m.s_pk.size() + m.commit.size();
  }
  for (const auto& sh : s.shares) bytes_down_ += 8 + sh.box.size();
  bytes_down_ += 4 * s.masked.size();
  outbox_.push_back(std::move(s));
}

void SecureRound::Abandon(std::string why) {
  abandoned_ = std::move(why);
  for (const auto& [id, d] : devices_) {
    outbox_.push_back(ForgetRound(d.agent, d.handle, abandoned_));
  }
}

Status SecureRound::OnReply(const AgentId& agent, const SecAggReply& reply) {
  if (step_ > 3 || !abandoned_.empty()) return FailedPrecondition("secure aggregation: the round is over");
  auto h = by_handle_.find(reply.handle);
  if (h == by_handle_.end()) return NotFound("secure aggregation: no such round on this coordinator");
  const Device& d = devices_.at(h->second);
  if (d.agent != agent) {
    return InvalidArgument("secure aggregation: device " + std::to_string(d.id) + " is agent " +
                           d.agent + "'s, not " + agent + "'s");
  }
  if (reply.step != step_) {
    return InvalidArgument("secure aggregation: a reply to step " + std::to_string(reply.step) +
                           "; the round is at step " + std::to_string(step_));
  }
  if (replied_.count(d.id)) {
    return AlreadyExists("secure aggregation: device " + std::to_string(d.id) + " replied twice");
  }
  Status st = Status::Ok();
  if (!reply.error.empty()) {
    st = Status::Ok();  // it drops out: counted as replied, never as a part of the sum
  } else if (step_ == 1) {
    st = server_.ShareKeys(d.id, reply.shares);
    for (const auto& s : reply.shares) bytes_up_ += 8 + s.box.size();
  } else if (step_ == 2) {
    st = server_.Masked(secagg::MaskedInput{d.id, reply.masked});
    bytes_up_ += reply.masked.size();
  } else if (step_ == 3) {
    st = server_.Unmasked(secagg::UnmaskResponse{d.id, reply.revealed});
    bytes_up_ += 5 * reply.revealed.size();
    for (const auto& r : reply.revealed) bytes_up_ += r.share.y.size();
  }
  if (!st.ok()) return st;  // a malformed reply: the device may still send a good one
  replied_.insert(d.id);
  return Status::Ok();
}

void SecureRound::Next(Time now) {
  replied_.clear();
  deadline_ = now + step_time_;
  ++step_;
}

void SecureRound::Advance(Time now) {
  if (step_ > 3 || !abandoned_.empty()) return;
  const std::set<secagg::DeviceId>* expected = nullptr;
  std::set<secagg::DeviceId> all;
  for (const auto& [id, d] : devices_) all.insert(id);
  if (step_ == 1) expected = &all;
  if (step_ == 2) expected = &server_.shared();
  if (step_ == 3) expected = &server_.masked();
  bool everyone = true;
  for (secagg::DeviceId id : *expected) everyone = everyone && replied_.count(id);
  if (!everyone && now < deadline_) return;
  if (step_ == 1) {
    if (Status st = server_.CloseSharing(); !st.ok()) return Abandon(st.message());
    for (secagg::DeviceId id : server_.shared()) Send(devices_.at(id), 2, server_.SharesFor(id));
  } else if (step_ == 2) {
    auto request = server_.CloseMasking();
    if (!request.ok()) return Abandon(request.status().message());
    for (secagg::DeviceId id : server_.masked()) Send(devices_.at(id), 3, {}, request->masked);
  }
  Next(now);  // past step 3: closed
}

void SecureRound::Finish(Time now) {
  if (!closed()) return;
  auto sum = server_.Sum();
  if (!sum.ok()) return Abandon(sum.status().message());
  sum_ = std::move(sum).value();
  done_ = true;
  finished_ = now;
  // Those who unmasked forgot the round then; the rest (vanished, or
  // refused a step) are told it is over.
  for (const auto& [id, d] : devices_) {
    if (server_.unmasked().count(id)) continue;
    outbox_.push_back(ForgetRound(d.agent, d.handle, "the round was summed without you"));
  }
}

json SecureRound::Info() const {
  const secagg::Params& p = server_.roster().params;
  return {{"devices", devices_.size()},
          {"shared", server_.shared().size()},
          {"masked", server_.masked().size()},
          {"unmasked", server_.unmasked().size()},
          {"neighbours", p.neighbours},
          {"threshold", p.threshold},
          {"bits", p.bits},
          {"bytes_up", bytes_up_},
          {"bytes_down", bytes_down_},
          {"seconds", done_ ? static_cast<double>(finished_.us - started_.us) / 1e6 : 0.0}};
}

}  // namespace claw::rounds
