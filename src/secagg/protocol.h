// Secure aggregation of one round (Bonawitz et al. 2017, with the sparse
// neighbour graph of SecAgg+, Bell et al. 2020; docs/privacy.md): the
// coordinator learns the sum of the devices' vectors and nothing of any one
// of them, and the sum survives devices that vanish at any step.
//
//   0 advertise   each device: two X25519 public keys (c: to seal shares,
//                 s: to agree masks) and a commitment to its self-mask seed
//   1 share       the coordinator fixes the roster; each device splits its
//                 self-mask seed b and its s secret key into Shamir shares
//                 (threshold t) for its k neighbours, sealed to each
//   2 mask        each device, holding its neighbours' shares, sends
//                   y = x + PRG(b) + Σ_{v neighbour, shared} ±PRG(s_uv)
//                 (+ when u < v, − when u > v: pairs cancel in the sum)
//   3 unmask      the coordinator names who sent y (U3); each device gives,
//                 for each neighbour, the share of b if it sent y, the
//                 share of its key if it did not — never both for one peer
//   sum           Σ y − Σ_{U3} PRG(b) and the masks of those who shared but
//                 sent no y, rebuilt from their keys
//
// The coordinator adds each y to a running sum as it comes and keeps no
// vector of any one device. Devices are numbered by the coordinator (a
// round's task numbers); the transport, and who a number is, are the
// caller's (rounds/secure_round.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "secagg/ring.h"
#include "secagg/shamir.h"

namespace claw::secagg {

using DeviceId = uint32_t;

struct Params {
  uint32_t neighbours = 0;     // k (even; all others if at least n − 1)
  uint32_t threshold = 0;      // t shares rebuild a secret (≤ k)
  uint32_t min_survivors = 2;  // the fewest y that may be unmasked as a sum
  int bits = 16;               // the ring, 2^bits
  uint64_t length = 0;         // values in each vector
};

// k ≈ 2·log2(n) + 2 (even), t = k/2 + 1, the ring for n × levels.
Params DefaultParams(uint32_t devices, uint64_t length, uint32_t levels,
                     uint32_t min_survivors);

struct Advertisement {
  DeviceId id = 0;
  std::string c_pk, s_pk;  // 32 bytes each
  std::string commit;      // 32 bytes: BLAKE2b of the self-mask seed
};

struct Roster {
  std::string session;  // 32 random bytes: binds every key and box to the round
  Params params;
  std::vector<Advertisement> members;  // by id
};

// The neighbours of `id` in the roster (sorted): a ring over a permutation
// keyed by the session, each linked to k/2 on either side. Symmetric.
std::vector<DeviceId> Neighbours(const Roster& roster, DeviceId id);

struct SealedShare {
  DeviceId from = 0, to = 0;
  std::string box;  // AEAD: the share number and the shares of b and of s
};

struct MaskedInput {
  DeviceId from = 0;
  std::string packed;  // Pack(y, bits)
};

struct UnmaskRequest {
  std::vector<DeviceId> masked;  // U3: who sent y, sorted
};

struct RevealedShare {
  DeviceId owner = 0;
  bool self_mask = true;  // b's share (the owner sent y); else its key's
  Share share;
};

struct UnmaskResponse {
  DeviceId from = 0;
  std::vector<RevealedShare> shares;
};

// One device's side. Each step once, in order; an error leaves it where it
// was.
class Client {
 public:
  explicit Client(DeviceId id);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  Advertisement Advertise() const;
  // Checks the roster (its own keys, sane parameters) and seals a share of
  // its secrets to each neighbour.
  Result<std::vector<SealedShare>> ShareKeys(const Roster& roster);
  // The shares sealed to it by the neighbours that shared (at least t), and
  // its vector (ring elements, params.length of them).
  Result<MaskedInput> Mask(std::span<const SealedShare> received, std::span<const uint32_t> x);
  // Refuses to unmask fewer than min_survivors (or itself missing), or a
  // peer's other share than one it gave before.
  Result<UnmaskResponse> Unmask(const UnmaskRequest& request);

 private:
  DeviceId id_;
  std::string c_sk_, s_sk_, b_;  // secrets, wiped on destruction
  Advertisement mine_;
  Roster roster_;
  std::vector<DeviceId> neighbours_;
  struct Held {
    Share b, s;
  };
  std::map<DeviceId, Held> held_;       // neighbours that shared with it
  std::map<DeviceId, bool> revealed_;   // peer -> gave b's share (true) or s's
  int step_ = 0;
};

// The coordinator's side.
class Server {
 public:
  // `session`: 32 random bytes (empty: drawn here).
  explicit Server(Params params, std::string session = "");

  // Step 0. InvalidArgument for malformed keys, AlreadyExists for a second.
  Status Advertise(const Advertisement& a);
  // Fixes the roster. FailedPrecondition with fewer than min_survivors.
  Result<Roster> CloseAdvertising();
  // Step 1: a device's sealed shares, one to each of its neighbours.
  Status ShareKeys(DeviceId from, std::vector<SealedShare> shares);
  // Fixes U2; then SharesFor works. FailedPrecondition when too few shared.
  Status CloseSharing();
  std::vector<SealedShare> SharesFor(DeviceId to) const;
  // Step 2: added to the running sum at once.
  Status Masked(const MaskedInput& input);
  // Fixes U3. FailedPrecondition when fewer than min_survivors sent y.
  Result<UnmaskRequest> CloseMasking();
  // Step 3.
  Status Unmasked(const UnmaskResponse& response);
  // The sum of U3's vectors (ring elements). FailedPrecondition naming the
  // device whose secret could not be rebuilt (too few shares, or shares
  // that do not rebuild what it committed to).
  Result<std::vector<uint32_t>> Sum() const;

  const Roster& roster() const { return roster_; }
  const std::set<DeviceId>& shared() const { return u2_; }
  const std::set<DeviceId>& masked() const { return u3_; }
  const std::set<DeviceId>& unmasked() const { return u4_; }

 private:
  const Advertisement* Member(DeviceId id) const;

  Roster roster_;
  std::map<DeviceId, std::vector<DeviceId>> neighbours_;
  int step_ = 0;
  std::map<DeviceId, std::vector<SealedShare>> inbox_;  // by recipient
  std::set<DeviceId> u1_, u2_, u3_, u4_;
  std::vector<uint32_t> sum_;  // Σ y over U3
  // owner -> the shares revealed of its b (owner in U3) or key (not).
  std::map<DeviceId, std::vector<Share>> revealed_;
};

}  // namespace claw::secagg
