#include "agent/secagg_device.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>

#include "common/crypto.h"
#include <cmath>

#include "rounds/privacy.h"
#include "rounds/secure_round.h"
#include "rounds/weights.h"

namespace claw {

using nlohmann::json;

Result<std::string> SecAggDevice::Begin(std::string output, Time now) {
  if (output.find("\"secagg\"") == std::string::npos) return output;
  json o = json::parse(output, nullptr, false);
  if (!o.is_object() || !o.contains("secagg")) return output;
  if (!o["secagg"].is_object() || !(o["secagg"].value("range", -1.0) >= 0) || !o.contains("delta") ||
      !o["delta"].is_string()) {
    return InvalidArgument("the round asks for secure aggregation and the task's output cannot be "
                           "masked (no delta or no range): not sent");
  }
  Pending p;
  p.client = std::make_unique<secagg::Client>(o.value("task", 0u));
  p.delta = o["delta"].get<std::string>();
  p.range = o["secagg"].value("range", 0.0);  // 0: from the model's size (SecureRange)
  p.clip = o["secagg"].value("clip", 0.0);
  p.heard = now;
  const double wait_s = o["secagg"].value("wait_s", 3600.0);
  p.wait = std::chrono::seconds(static_cast<int64_t>(std::clamp(wait_s, 60.0, 7.0 * 86400)));
  const secagg::Advertisement a = p.client->Advertise();
  std::string handle = FromHex(RandomHex(16)).value();
  o.erase("delta");
  o["files"] = json::array();
  o["secagg"] = {{"handle", ToHex(handle)},
                 {"c_pk", ToHex(a.c_pk)},
                 {"s_pk", ToHex(a.s_pk)},
                 {"commit", ToHex(a.commit)}};
  pending_[handle] = std::move(p);
  return o.dump();
}

std::vector<std::string> SecAggDevice::Deltas() const {
  std::vector<std::string> out;
  for (const auto& [h, p] : pending_) out.push_back(p.delta);
  return out;
}

void SecAggDevice::Expire(Time now) {
  std::erase_if(pending_, [&](const auto& kv) { return kv.second.heard + kv.second.wait < now; });
}

Result<std::vector<uint32_t>> SecAggDevice::Vector(const Pending& p, const v1::SecAggDown& down) const {
  auto bytes = cache_->Load(p.delta, uint64_t{16} << 30);
  if (!bytes.ok()) return Status(bytes.status().code(), "the delta: " + bytes.status().message());
  auto w = rounds::ReadWeights(*bytes);
  if (!w.ok()) return w.status();
  if (rounds::ParameterCount(*w) != p.length) {
    return InvalidArgument("the delta has " + std::to_string(rounds::ParameterCount(*w)) +
                           " values; the round sums " + std::to_string(p.length));
  }
  // The coordinator cannot see the delta any more: what it would refuse,
  // the device refuses to send.
  if (!std::isfinite(rounds::Norm(*w))) return InvalidArgument("the delta has a value that is not finite");
  // With differential privacy the device clips, since the coordinator will
  // see only the sum.
  if (p.clip > 0) rounds::ClipToNorm(&*w, p.clip);
  std::vector<float> flat;
  flat.reserve(down.length());
  for (const rounds::Named& t : *w) flat.insert(flat.end(), t.values.begin(), t.values.end());
  const double range = rounds::SecureRange(p.range, p.clip, p.length);
  if (!(range > 0)) return InvalidArgument("the range is not above 0");
  std::vector<uint32_t> x;
  secagg::Quantize(flat, range, secagg::kLevels, p.bits, &x);
  return x;
}

std::optional<v1::SecAggUp> SecAggDevice::Handle(const v1::SecAggDown& down, Time now) {
  auto it = pending_.find(down.handle());
  if (it == pending_.end()) return std::nullopt;
  Pending& p = it->second;
  p.heard = now;
  v1::SecAggUp up;
  up.set_handle(down.handle());
  up.set_step(down.step());
  Status st = Status::Ok();
  switch (down.step()) {
    case 1: {
      secagg::Roster roster;
      roster.session = down.session();
      roster.params = {down.neighbours(), down.threshold(), down.min_survivors(),
                       static_cast<int>(down.bits()), down.length()};
      if (down.levels() != secagg::kLevels) {
        st = InvalidArgument("the round quantizes to " + std::to_string(down.levels()) + " levels, not " +
                             std::to_string(secagg::kLevels));
        break;
      }
      for (const auto& m : down.members()) {
        roster.members.push_back({m.id(), m.c_pk(), m.s_pk(), m.commit()});
      }
      p.bits = roster.params.bits;
      p.length = roster.params.length;
      auto shares = p.client->ShareKeys(roster);
      if (!shares.ok()) {
        st = shares.status();
        break;
      }
      for (const auto& s : *shares) {
        auto* out = up.add_shares();
        out->set_from(s.from);
        out->set_to(s.to);
        out->set_box(s.box);
      }
      break;
    }
    case 2: {
      std::vector<secagg::SealedShare> received;
      for (const auto& s : down.shares()) received.push_back({s.from(), s.to(), s.box()});
      auto x = Vector(p, down);
      if (!x.ok()) {
        st = x.status();
        break;
      }
      auto masked = p.client->Mask(received, *x);
      if (!masked.ok()) {
        st = masked.status();
        break;
      }
      up.set_masked(std::move(masked->packed));
      break;
    }
    case 3: {
      secagg::UnmaskRequest request{{down.masked().begin(), down.masked().end()}};
      auto r = p.client->Unmask(request);
      if (!r.ok()) {
        st = r.status();
        break;
      }
      for (const auto& s : r->shares) {
        auto* out = up.add_revealed();
        out->set_owner(s.owner);
        out->set_self_mask(s.self_mask);
        out->set_x(s.share.x);
        out->set_y(s.share.y);
      }
      pending_.erase(it);  // its part is done
      break;
    }
    default:  // 0: abandoned
      pending_.erase(it);
      return std::nullopt;
  }
  if (!st.ok()) up.set_error(st.message());
  return up;
}

}  // namespace claw
