#include "secagg/protocol.h"

#include <sodium.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

namespace claw::secagg {
namespace {

constexpr size_t kKey = 32;
constexpr size_t kPlain = 1 + kKey + kKey;  // share number, b's share, s's share
constexpr size_t kBox = kPlain + crypto_aead_chacha20poly1305_ietf_ABYTES;

std::string Random(size_t n) {
  std::string out(n, '\0');
  randombytes_buf(out.data(), n);
  return out;
}

std::string PublicOf(const std::string& sk) {
  std::string pk(kKey, '\0');
  crypto_scalarmult_base(reinterpret_cast<unsigned char*>(pk.data()),
                         reinterpret_cast<const unsigned char*>(sk.data()));
  return pk;
}

// BLAKE2b-256 of the parts, each preceded by its length.
std::string Hash(std::initializer_list<std::string_view> parts) {
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, kKey);
  for (std::string_view p : parts) {
    const uint64_t n = p.size();
    crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(&n), sizeof n);
    crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(p.data()), p.size());
  }
  std::string out(kKey, '\0');
  crypto_generichash_final(&st, reinterpret_cast<unsigned char*>(out.data()), kKey);
  return out;
}

std::string Id(DeviceId id) { return std::string(reinterpret_cast<const char*>(&id), sizeof id); }

// X25519 of our secret and their public key; empty for a key of low order
// (whose result is zero, known to anyone).
std::string Agree(const std::string& sk, const std::string& pk) {
  if (sk.size() != kKey || pk.size() != kKey) return "";
  std::string shared(kKey, '\0');
  if (crypto_scalarmult(reinterpret_cast<unsigned char*>(shared.data()),
                        reinterpret_cast<const unsigned char*>(sk.data()),
                        reinterpret_cast<const unsigned char*>(pk.data())) != 0) {
    return "";
  }
  return shared;
}

// The seed of the mask between a and b (either side computes it).
Result<Seed> PairSeed(const std::string& session, const std::string& my_sk,
                      const std::string& their_pk, DeviceId a, DeviceId b) {
  std::string shared = Agree(my_sk, their_pk);
  if (shared.empty()) return InvalidArgument("device " + std::to_string(b) + "'s key is of low order");
  std::string h = Hash({"claw-secagg-mask", session, shared, Id(std::min(a, b)), Id(std::max(a, b))});
  sodium_memzero(shared.data(), shared.size());
  Seed seed;
  std::memcpy(seed.data(), h.data(), kKey);
  return seed;
}

Seed SelfSeed(const std::string& session, const std::string& b) {
  std::string h = Hash({"claw-secagg-self", session, b});
  Seed seed;
  std::memcpy(seed.data(), h.data(), kKey);
  return seed;
}

std::string Commit(const std::string& b) { return Hash({"claw-secagg-commit", b}); }

// The key that seals shares between two devices, and the box's nonce and
// associated data (the session and both numbers: a box opens only for the
// round, sender and recipient it was made for).
Result<std::string> BoxKey(const std::string& session, const std::string& my_sk,
                           const std::string& their_pk, const std::string& my_pk) {
  std::string shared = Agree(my_sk, their_pk);
  if (shared.empty()) return InvalidArgument("a key of low order");
  const auto& [lo, hi] = std::minmax(my_pk, their_pk);
  std::string key = Hash({"claw-secagg-box", session, shared, lo, hi});
  sodium_memzero(shared.data(), shared.size());
  return key;
}

std::string Nonce(DeviceId from, DeviceId to) {
  std::string n(crypto_aead_chacha20poly1305_ietf_NPUBBYTES, '\0');
  std::memcpy(n.data(), &from, 4);
  std::memcpy(n.data() + 4, &to, 4);
  return n;
}

std::string Ad(const std::string& session, DeviceId from, DeviceId to) {
  return session + Id(from) + Id(to);
}

bool IsKey(const std::string& k) { return k.size() == kKey; }

// A public key that X25519 can agree with: 32 bytes, not of low order (whose
// products are zero: a "shared" secret that everyone knows).
bool IsUsableKey(const std::string& pk) {
  static const std::string probe = Random(kKey);
  if (!IsKey(pk)) return false;
  std::string shared = Agree(probe, pk);
  return !shared.empty();
}

Status CheckParams(const Params& p, size_t members) {
  if (p.threshold < 1 || p.threshold > p.neighbours) {
    return InvalidArgument("secure aggregation: threshold " + std::to_string(p.threshold) +
                           " is not within 1.." + std::to_string(p.neighbours) + " neighbours");
  }
  if (p.bits < 2 || p.bits > 32) return InvalidArgument("secure aggregation: a ring of " + std::to_string(p.bits) + " bits");
  if (p.min_survivors < 2) {
    return InvalidArgument("secure aggregation: min_survivors below 2 would unmask one device's vector");
  }
  if (p.length == 0 || p.length > (uint64_t{1} << 32)) return InvalidArgument("secure aggregation: vector length");
  if (p.neighbours > 255) {
    return InvalidArgument("secure aggregation: " + std::to_string(p.neighbours) +
                           " neighbours; shares are numbered 1..255");
  }
  if (members > (uint64_t{1} << 24)) return InvalidArgument("secure aggregation: too many devices");
  return Status::Ok();
}

}  // namespace

Params DefaultParams(uint32_t devices, uint64_t length, uint32_t levels, uint32_t min_survivors) {
  Params p;
  const uint32_t others = devices > 0 ? devices - 1 : 0;
  uint32_t k = 2 * static_cast<uint32_t>(std::ceil(std::log2(std::max<uint32_t>(devices, 2)))) + 2;
  k += k % 2;
  p.neighbours = std::min(k, others);
  p.threshold = p.neighbours / 2 + 1;
  p.min_survivors = std::max<uint32_t>(min_survivors, 2);
  p.bits = RingBits(devices, levels);
  p.length = length;
  return p;
}

std::vector<DeviceId> Neighbours(const Roster& roster, DeviceId id) {
  const size_t n = roster.members.size();
  std::vector<std::pair<std::string, DeviceId>> order;
  order.reserve(n);
  for (const Advertisement& a : roster.members) {
    order.emplace_back(Hash({"claw-secagg-graph", roster.session, Id(a.id)}), a.id);
  }
  std::sort(order.begin(), order.end());
  size_t at = n;
  for (size_t i = 0; i < n; ++i) {
    if (order[i].second == id) at = i;
  }
  std::vector<DeviceId> out;
  if (at == n) return out;
  const size_t k = roster.params.neighbours;
  if (k + 1 >= n) {
    for (const auto& [h, other] : order) {
      if (other != id) out.push_back(other);
    }
  } else {
    for (size_t d = 1; d <= (k + 1) / 2; ++d) {
      out.push_back(order[(at + d) % n].second);
      out.push_back(order[(at + n - d) % n].second);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// --- Client ---

Client::Client(DeviceId id) : id_(id), c_sk_(Random(kKey)), s_sk_(Random(kKey)), b_(Random(kKey)) {
  mine_ = Advertisement{id_, PublicOf(c_sk_), PublicOf(s_sk_), Commit(b_)};
}

Client::~Client() {
  for (std::string* s : {&c_sk_, &s_sk_, &b_}) sodium_memzero(s->data(), s->size());
}

Advertisement Client::Advertise() const { return mine_; }

Result<std::vector<SealedShare>> Client::ShareKeys(const Roster& roster) {
  if (step_ != 0) return FailedPrecondition("secure aggregation: keys were shared already");
  if (!IsKey(roster.session)) return InvalidArgument("secure aggregation: the roster has no session");
  CLAW_RETURN_IF_ERROR(CheckParams(roster.params, roster.members.size()));
  const Advertisement* me = nullptr;
  for (const Advertisement& a : roster.members) {
    if (a.id == id_) me = &a;
    if (!IsUsableKey(a.c_pk) || !IsUsableKey(a.s_pk) || !IsKey(a.commit)) {
      return InvalidArgument("secure aggregation: device " + std::to_string(a.id) +
                             "'s keys are malformed or of low order");
    }
  }
  if (!me || me->c_pk != mine_.c_pk || me->s_pk != mine_.s_pk || me->commit != mine_.commit) {
    return InvalidArgument("secure aggregation: the roster does not hold this device's own keys");
  }
  std::vector<DeviceId> neighbours = Neighbours(roster, id_);
  // More than half of the neighbours must be needed to rebuild a secret:
  // then no coordinator can gather t self-mask shares and t key shares of
  // one device from honest neighbours, each of whom reveals only one kind.
  if (2 * roster.params.threshold <= neighbours.size() || neighbours.size() > 255) {
    return InvalidArgument("secure aggregation: threshold " + std::to_string(roster.params.threshold) +
                           " of " + std::to_string(neighbours.size()) +
                           " neighbours; it must be more than half of them (and at most 255 neighbours)");
  }
  if (neighbours.size() < roster.params.threshold) {
    return InvalidArgument("secure aggregation: " + std::to_string(neighbours.size()) +
                           " neighbours, fewer than the threshold " +
                           std::to_string(roster.params.threshold));
  }
  std::vector<uint8_t> xs(neighbours.size());
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<uint8_t>(i + 1);
  std::vector<Share> b_shares = Split(b_, roster.params.threshold, xs);
  std::vector<Share> s_shares = Split(s_sk_, roster.params.threshold, xs);
  std::vector<SealedShare> out;
  for (size_t i = 0; i < neighbours.size(); ++i) {
    const DeviceId to = neighbours[i];
    const Advertisement* peer = nullptr;
    for (const Advertisement& a : roster.members) {
      if (a.id == to) peer = &a;
    }
    auto key = BoxKey(roster.session, c_sk_, peer->c_pk, mine_.c_pk);
    if (!key.ok()) return InvalidArgument("secure aggregation: device " + std::to_string(to) + "'s key is of low order");
    std::string plain = std::string(1, static_cast<char>(xs[i])) + b_shares[i].y + s_shares[i].y;
    std::string box(kBox, '\0');
    const std::string nonce = Nonce(id_, to), ad = Ad(roster.session, id_, to);
    unsigned long long len = 0;
    crypto_aead_chacha20poly1305_ietf_encrypt(
        reinterpret_cast<unsigned char*>(box.data()), &len,
        reinterpret_cast<const unsigned char*>(plain.data()), plain.size(),
        reinterpret_cast<const unsigned char*>(ad.data()), ad.size(), nullptr,
        reinterpret_cast<const unsigned char*>(nonce.data()),
        reinterpret_cast<const unsigned char*>(key->data()));
    sodium_memzero(plain.data(), plain.size());
    sodium_memzero(key->data(), key->size());
    out.push_back(SealedShare{id_, to, std::move(box)});
  }
  for (Share& s : b_shares) sodium_memzero(s.y.data(), s.y.size());
  for (Share& s : s_shares) sodium_memzero(s.y.data(), s.y.size());
  roster_ = roster;
  neighbours_ = std::move(neighbours);
  step_ = 1;
  return out;
}

Result<MaskedInput> Client::Mask(std::span<const SealedShare> received, std::span<const uint32_t> x) {
  if (step_ != 1) return FailedPrecondition("secure aggregation: not the masking step");
  const Params& p = roster_.params;
  if (x.size() != p.length) {
    return InvalidArgument("secure aggregation: a vector of " + std::to_string(x.size()) +
                           " values, not " + std::to_string(p.length));
  }
  std::map<DeviceId, Held> held;
  for (const SealedShare& s : received) {
    if (s.to != id_) {
      return InvalidArgument("secure aggregation: a share for device " + std::to_string(s.to) +
                             " was delivered to device " + std::to_string(id_));
    }
    if (!std::binary_search(neighbours_.begin(), neighbours_.end(), s.from)) {
      return InvalidArgument("secure aggregation: a share from device " + std::to_string(s.from) +
                             ", not a neighbour");
    }
    if (held.count(s.from)) {
      return InvalidArgument("secure aggregation: two shares from device " + std::to_string(s.from));
    }
    const Advertisement* peer = nullptr;
    for (const Advertisement& a : roster_.members) {
      if (a.id == s.from) peer = &a;
    }
    auto key = BoxKey(roster_.session, c_sk_, peer->c_pk, mine_.c_pk);
    std::string plain(kPlain, '\0');
    const std::string nonce = Nonce(s.from, id_), ad = Ad(roster_.session, s.from, id_);
    unsigned long long len = 0;
    if (!key.ok() || s.box.size() != kBox ||
        crypto_aead_chacha20poly1305_ietf_decrypt(
            reinterpret_cast<unsigned char*>(plain.data()), &len, nullptr,
            reinterpret_cast<const unsigned char*>(s.box.data()), s.box.size(),
            reinterpret_cast<const unsigned char*>(ad.data()), ad.size(),
            reinterpret_cast<const unsigned char*>(nonce.data()),
            reinterpret_cast<const unsigned char*>(key->data())) != 0) {
      return InvalidArgument("secure aggregation: the share from device " + std::to_string(s.from) +
                             " does not open (forged, replayed from another round, or for "
                             "another device)");
    }
    const auto x_num = static_cast<uint8_t>(plain[0]);
    held[s.from] = Held{Share{x_num, plain.substr(1, kKey)}, Share{x_num, plain.substr(1 + kKey, kKey)}};
    sodium_memzero(plain.data(), plain.size());
  }
  if (held.size() < p.threshold) {
    return FailedPrecondition("secure aggregation: shares from " + std::to_string(held.size()) +
                              " neighbours, fewer than the threshold " + std::to_string(p.threshold));
  }
  std::vector<uint32_t> y(x.begin(), x.end());
  AddMask(y, SelfSeed(roster_.session, b_), p.bits, false);
  for (const auto& [v, shares] : held) {
    const Advertisement* peer = nullptr;
    for (const Advertisement& a : roster_.members) {
      if (a.id == v) peer = &a;
    }
    auto seed = PairSeed(roster_.session, s_sk_, peer->s_pk, id_, v);
    if (!seed.ok()) return seed.status();
    AddMask(y, *seed, p.bits, id_ > v);
  }
  held_ = std::move(held);
  step_ = 2;
  return MaskedInput{id_, Pack(y, p.bits)};
}

Result<UnmaskResponse> Client::Unmask(const UnmaskRequest& request) {
  if (step_ < 2) return FailedPrecondition("secure aggregation: nothing masked yet");
  const std::set<DeviceId> masked(request.masked.begin(), request.masked.end());
  if (!masked.count(id_)) {
    return InvalidArgument("secure aggregation: the unmasking names this device as missing, but "
                           "it sent its vector");
  }
  if (masked.size() < roster_.params.min_survivors) {
    return FailedPrecondition("secure aggregation: " + std::to_string(masked.size()) +
                              " vectors would be unmasked, fewer than " +
                              std::to_string(roster_.params.min_survivors));
  }
  UnmaskResponse out{id_, {}};
  for (const auto& [v, held] : held_) {
    const bool reported = masked.count(v) > 0;
    auto before = revealed_.find(v);
    if (before != revealed_.end() && before->second != reported) {
      return FailedPrecondition("secure aggregation: asked for device " + std::to_string(v) +
                                "'s " + (reported ? "self-mask" : "key") + " share after its " +
                                (reported ? "key" : "self-mask") +
                                " share: both would unmask its vector");
    }
  }
  for (const auto& [v, held] : held_) {
    const bool reported = masked.count(v) > 0;
    revealed_[v] = reported;
    out.shares.push_back(RevealedShare{v, reported, reported ? held.b : held.s});
  }
  step_ = 3;
  return out;
}

// --- Server ---

Server::Server(Params params, std::string session) {
  roster_.params = params;
  roster_.session = session.size() == kKey ? std::move(session) : Random(kKey);
}

const Advertisement* Server::Member(DeviceId id) const {
  auto it = std::lower_bound(roster_.members.begin(), roster_.members.end(), id,
                             [](const Advertisement& a, DeviceId i) { return a.id < i; });
  return it != roster_.members.end() && it->id == id ? &*it : nullptr;
}

Status Server::Advertise(const Advertisement& a) {
  if (step_ != 0) return FailedPrecondition("secure aggregation: the roster is closed");
  if (!IsUsableKey(a.c_pk) || !IsUsableKey(a.s_pk) || !IsKey(a.commit)) {
    return InvalidArgument("secure aggregation: device " + std::to_string(a.id) +
                           "'s keys are not 32-byte X25519 keys of full order");
  }
  if (a.c_pk == a.s_pk) return InvalidArgument("secure aggregation: device " + std::to_string(a.id) + " uses one key twice");
  if (Member(a.id)) return AlreadyExists("secure aggregation: device " + std::to_string(a.id) + " advertised twice");
  auto at = std::lower_bound(roster_.members.begin(), roster_.members.end(), a.id,
                             [](const Advertisement& m, DeviceId i) { return m.id < i; });
  roster_.members.insert(at, a);
  return Status::Ok();
}

Result<Roster> Server::CloseAdvertising() {
  if (step_ != 0) return FailedPrecondition("secure aggregation: the roster is closed");
  const size_t n = roster_.members.size();
  if (n < roster_.params.min_survivors) {
    return FailedPrecondition("secure aggregation: " + std::to_string(n) + " devices advertised, "
                              "fewer than " + std::to_string(roster_.params.min_survivors));
  }
  roster_.params.neighbours = std::min<uint32_t>(roster_.params.neighbours, static_cast<uint32_t>(n - 1));
  roster_.params.threshold = std::min(roster_.params.threshold, roster_.params.neighbours);
  CLAW_RETURN_IF_ERROR(CheckParams(roster_.params, n));
  for (const Advertisement& a : roster_.members) neighbours_[a.id] = Neighbours(roster_, a.id);
  step_ = 1;
  return roster_;
}

Status Server::ShareKeys(DeviceId from, std::vector<SealedShare> shares) {
  if (step_ != 1) return FailedPrecondition("secure aggregation: not the sharing step");
  if (!Member(from)) return InvalidArgument("secure aggregation: device " + std::to_string(from) + " is not in the roster");
  if (u1_.count(from)) return AlreadyExists("secure aggregation: device " + std::to_string(from) + " shared twice");
  const std::vector<DeviceId>& mine = neighbours_[from];
  if (shares.size() != mine.size()) {
    return InvalidArgument("secure aggregation: device " + std::to_string(from) + " sent " +
                           std::to_string(shares.size()) + " shares for its " +
                           std::to_string(mine.size()) + " neighbours");
  }
  std::set<DeviceId> to;
  for (const SealedShare& s : shares) {
    if (s.from != from) return InvalidArgument("secure aggregation: device " + std::to_string(from) + " sent a share in another's name");
    if (!std::binary_search(mine.begin(), mine.end(), s.to) || !to.insert(s.to).second) {
      return InvalidArgument("secure aggregation: device " + std::to_string(from) +
                             " sent a share to device " + std::to_string(s.to) +
                             ", not a neighbour or twice");
    }
    if (s.box.size() != kBox) return InvalidArgument("secure aggregation: a sealed share of " + std::to_string(s.box.size()) + " bytes");
  }
  u1_.insert(from);
  for (SealedShare& s : shares) inbox_[s.to].push_back(std::move(s));
  return Status::Ok();
}

Status Server::CloseSharing() {
  if (step_ != 1) return FailedPrecondition("secure aggregation: not the sharing step");
  u2_ = u1_;
  if (u2_.size() < roster_.params.min_survivors) {
    step_ = -1;
    return FailedPrecondition("secure aggregation: " + std::to_string(u2_.size()) +
                              " devices shared their keys, fewer than " +
                              std::to_string(roster_.params.min_survivors));
  }
  sum_.assign(roster_.params.length, 0);
  step_ = 2;
  return Status::Ok();
}

std::vector<SealedShare> Server::SharesFor(DeviceId to) const {
  if (step_ < 2) return {};
  auto it = inbox_.find(to);
  return it == inbox_.end() ? std::vector<SealedShare>{} : it->second;
}

Status Server::Masked(const MaskedInput& input) {
  if (step_ != 2) return FailedPrecondition("secure aggregation: not the masking step");
  if (!u2_.count(input.from)) {
    return InvalidArgument("secure aggregation: device " + std::to_string(input.from) +
                           " did not share its keys: its vector could never be unmasked");
  }
  if (u3_.count(input.from)) return AlreadyExists("secure aggregation: device " + std::to_string(input.from) + " sent its vector twice");
  auto y = Unpack(input.packed, roster_.params.length, roster_.params.bits);
  if (!y.ok()) return Status(y.status().code(), "secure aggregation: device " + std::to_string(input.from) + ": " + y.status().message());
  const uint32_t mask = roster_.params.bits >= 32 ? 0xFFFFFFFFu : (uint32_t{1} << roster_.params.bits) - 1;
  for (size_t i = 0; i < sum_.size(); ++i) sum_[i] = (sum_[i] + (*y)[i]) & mask;
  u3_.insert(input.from);
  return Status::Ok();
}

Result<UnmaskRequest> Server::CloseMasking() {
  if (step_ != 2) return FailedPrecondition("secure aggregation: not the masking step");
  if (u3_.size() < roster_.params.min_survivors) {
    step_ = -1;
    return FailedPrecondition("secure aggregation: " + std::to_string(u3_.size()) +
                              " devices sent their vectors, fewer than " +
                              std::to_string(roster_.params.min_survivors));
  }
  step_ = 3;
  return UnmaskRequest{std::vector<DeviceId>(u3_.begin(), u3_.end())};
}

Status Server::Unmasked(const UnmaskResponse& r) {
  if (step_ != 3) return FailedPrecondition("secure aggregation: not the unmasking step");
  if (!u3_.count(r.from)) return InvalidArgument("secure aggregation: device " + std::to_string(r.from) + " sent no vector: it has nothing to unmask");
  if (u4_.count(r.from)) return AlreadyExists("secure aggregation: device " + std::to_string(r.from) + " unmasked twice");
  const std::vector<DeviceId>& mine = neighbours_[r.from];
  std::set<DeviceId> owners;
  for (const RevealedShare& s : r.shares) {
    if (!std::binary_search(mine.begin(), mine.end(), s.owner) || !u2_.count(s.owner) ||
        !owners.insert(s.owner).second) {
      return InvalidArgument("secure aggregation: device " + std::to_string(r.from) +
                             " revealed a share of device " + std::to_string(s.owner) +
                             ", which it holds none of, or twice");
    }
    if (s.self_mask != (u3_.count(s.owner) > 0)) {
      return InvalidArgument("secure aggregation: device " + std::to_string(r.from) + " revealed " +
                             (s.self_mask ? "the self-mask share of device " + std::to_string(s.owner) + ", which sent no vector"
                                          : "the key share of device " + std::to_string(s.owner) + ", which sent its vector"));
    }
    if (s.share.y.size() != kKey || s.share.x == 0) {
      return InvalidArgument("secure aggregation: a malformed share from device " + std::to_string(r.from));
    }
  }
  for (const RevealedShare& s : r.shares) revealed_[s.owner].push_back(s.share);
  u4_.insert(r.from);
  return Status::Ok();
}

Result<std::vector<uint32_t>> Server::Sum() const {
  if (step_ != 3) return FailedPrecondition("secure aggregation: not unmasking");
  const Params& p = roster_.params;
  std::vector<uint32_t> sum = sum_;
  // A secret from its revealed shares, checked against what its owner
  // published; with more shares than needed, a bad one is left out.
  auto rebuild = [&](DeviceId owner, const std::function<bool(const std::string&)>& good)
      -> Result<std::string> {
    auto it = revealed_.find(owner);
    const size_t have = it == revealed_.end() ? 0 : it->second.size();
    if (have < p.threshold) {
      return FailedPrecondition("secure aggregation: " + std::to_string(have) + " shares of device " +
                                std::to_string(owner) + "'s secret came back, fewer than " +
                                std::to_string(p.threshold));
    }
    const std::vector<Share>& shares = it->second;
    for (size_t skip = 0; skip <= (have > p.threshold ? have : 0); ++skip) {
      std::vector<Share> use;
      for (size_t i = 0; i < have && use.size() < p.threshold; ++i) {
        if (i + 1 != skip) use.push_back(shares[i]);
      }
      if (use.size() < p.threshold) continue;
      auto secret = Combine(use, p.threshold);
      if (secret.ok() && good(*secret)) return secret;
    }
    return FailedPrecondition("secure aggregation: the shares of device " + std::to_string(owner) +
                              "'s secret do not rebuild what it committed to");
  };
  for (DeviceId u : u3_) {
    const Advertisement* a = Member(u);
    auto b = rebuild(u, [&](const std::string& s) { return Commit(s) == a->commit; });
    if (!b.ok()) return b.status();
    AddMask(sum, SelfSeed(roster_.session, *b), p.bits, true);
  }
  for (DeviceId d : u2_) {
    if (u3_.count(d)) continue;
    // Its masks are in the sum only through neighbours that sent vectors.
    const std::vector<DeviceId>& theirs = neighbours_.at(d);
    if (std::none_of(theirs.begin(), theirs.end(), [&](DeviceId v) { return u3_.count(v) > 0; })) {
      continue;
    }
    const Advertisement* a = Member(d);
    auto sk = rebuild(d, [&](const std::string& s) { return PublicOf(s) == a->s_pk; });
    if (!sk.ok()) return sk.status();
    // Each neighbour v that sent y added ±PRG(s_vd): + when v < d.
    for (DeviceId v : neighbours_.at(d)) {
      if (!u3_.count(v)) continue;
      auto seed = PairSeed(roster_.session, *sk, Member(v)->s_pk, d, v);
      if (!seed.ok()) return seed.status();
      AddMask(sum, *seed, p.bits, v < d);
    }
  }
  return sum;
}

}  // namespace claw::secagg
