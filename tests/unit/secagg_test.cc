// Secure aggregation (secagg/): Shamir's scheme over GF(2^8), the ring and
// its masks, and the protocol run in one process with devices vanishing at
// every step and sending everything wrong that a device or a relay could.
#include <sodium.h>

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "secagg/protocol.h"

namespace claw::secagg {
namespace {

TEST(Shamir, FieldArithmeticHasInversesAndTheAesProduct) {
  EXPECT_EQ(GfMul(0x57, 0x83), 0xc1);  // FIPS-197's worked example
  EXPECT_EQ(GfMul(0x57, 0x13), 0xfe);
  for (int a = 1; a < 256; ++a) {
    EXPECT_EQ(GfMul(static_cast<uint8_t>(a), GfInv(static_cast<uint8_t>(a))), 1) << a;
    EXPECT_EQ(GfMul(static_cast<uint8_t>(a), 0), 0);
  }
}

TEST(Shamir, AnyThresholdOfSharesGiveTheSecretBackAndFewerCannot) {
  const std::string secret = "thirty-two bytes of a mask seed!";
  std::vector<uint8_t> xs = {1, 2, 3, 4, 5, 6, 7};
  std::vector<Share> shares = Split(secret, 4, xs);
  ASSERT_EQ(shares.size(), 7u);
  // Every 4 of the 7.
  for (int m = 0; m < 128; ++m) {
    if (__builtin_popcount(m) != 4) continue;
    std::vector<Share> pick;
    for (int i = 0; i < 7; ++i) {
      if (m & (1 << i)) pick.push_back(shares[i]);
    }
    auto back = Combine(pick, 4);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, secret);
  }
  std::vector<Share> three(shares.begin(), shares.begin() + 3);
  EXPECT_FALSE(Combine(three, 4).ok());
  // Three shares rebuilt as if the threshold were three: not the secret.
  EXPECT_NE(Combine(three, 3).value(), secret);
  std::vector<Share> twice = {shares[0], shares[0], shares[1], shares[2]};
  EXPECT_NE(Combine(twice, 4).status().message().find("twice"), std::string::npos);
  std::vector<Share> zero = {shares[0], shares[1], shares[2], Share{0, shares[3].y}};
  EXPECT_FALSE(Combine(zero, 4).ok());
  std::vector<Share> ragged = {shares[0], shares[1], shares[2], Share{4, "short"}};
  EXPECT_FALSE(Combine(ragged, 4).ok());
}

TEST(Shamir, OneShareBelowTheThresholdSaysNothingOfTheSecret) {
  // With threshold 2, share 1 of secret 0x00 and of secret 0xFF are both
  // uniform over the 256 bytes.
  for (char secret : {'\x00', '\xff'}) {
    std::vector<int> counts(256);
    const std::vector<uint8_t> xs = {1, 2};
    for (int i = 0; i < 256 * 200; ++i) {
      counts[static_cast<uint8_t>(Split(std::string(1, secret), 2, xs)[0].y[0])]++;
    }
    double chi2 = 0;
    for (int c : counts) chi2 += (c - 200.0) * (c - 200.0) / 200.0;
    EXPECT_LT(chi2, 340) << "255 degrees of freedom; 340 is p ≈ 0.0003";
  }
}

TEST(Ring, TheRingHoldsTheSumAndPackingRoundTrips) {
  EXPECT_EQ(RingBits(16, 127), 12);  // 16 × 127 = 2032 < 2^11
  EXPECT_EQ(RingBits(32, 127), 13);
  EXPECT_EQ(RingBits(1, 1), 2);
  std::mt19937 gen(3);
  for (int bits = 1; bits <= 32; ++bits) {
    std::vector<uint32_t> v(101);
    for (auto& x : v) x = bits == 32 ? gen() : gen() & ((1u << bits) - 1);
    std::string packed = Pack(v, bits);
    EXPECT_EQ(packed.size(), (101 * bits + 7) / 8u);
    auto back = Unpack(packed, v.size(), bits);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, v) << bits;
  }
  EXPECT_NE(Unpack("abc", 101, 12).status().message().find("not 152"), std::string::npos);
}

TEST(Ring, QuantizingIsUnbiasedAndClampsOutsideTheRange) {
  const int bits = 12;
  std::vector<float> x = {0.0123f, -0.5f, 2.0f, -7.0f};
  double sum = 0;
  std::vector<uint32_t> q;
  size_t clamped = 0;
  for (int i = 0; i < 20000; ++i) {
    clamped = Quantize(x, 1.0, 127, bits, &q);
    sum += static_cast<double>(Signed(q[0], bits));
    EXPECT_EQ(Signed(q[2], bits), 127);
    EXPECT_EQ(Signed(q[3], bits), -127);
    EXPECT_TRUE(Signed(q[1], bits) == -63 || Signed(q[1], bits) == -64);
  }
  EXPECT_EQ(clamped, 2u);
  EXPECT_NEAR(sum / 20000, 0.0123 * 127, 0.02);  // 1.562: between 1 and 2, on average right
}

TEST(Ring, AMaskAddedThenSubtractedLeavesTheVector) {
  std::vector<uint32_t> v(70000, 5), w = v;
  Seed a{}, b{};
  b[0] = 1;
  AddMask(v, a, 13, false);
  EXPECT_NE(v, w);
  size_t same = 0;
  for (size_t i = 0; i < v.size(); ++i) same += v[i] == w[i];
  EXPECT_LT(same, 50u);  // ~70000 / 8192 by chance
  std::vector<uint32_t> other = w;
  AddMask(other, b, 13, false);
  EXPECT_NE(other, v);
  AddMask(v, a, 13, true);
  EXPECT_EQ(v, w);
}

TEST(Ring, TheMaskIsTheChaChaStreamAsLittleEndianWordsAcrossItsChunks) {
  // What any device computes, whatever its byte order: word i of the mask
  // is bytes 4i..4i+3 of the ChaCha20-IETF stream (zero nonce),
  // little-endian, over the 16,384-word chunks AddMask works in.
  Seed seed{};
  for (size_t i = 0; i < seed.size(); ++i) seed[i] = static_cast<uint8_t>(3 * i + 1);
  const size_t n = 20000;
  std::vector<unsigned char> stream(4 * n);
  const unsigned char nonce[crypto_stream_chacha20_ietf_NONCEBYTES] = {};
  crypto_stream_chacha20_ietf(stream.data(), stream.size(), nonce, seed.data());
  std::vector<uint32_t> v(n, 0);
  AddMask(v, seed, 32, false);
  for (size_t i : {size_t{0}, size_t{1}, size_t{16383}, size_t{16384}, size_t{19999}}) {
    const uint32_t want = uint32_t{stream[4 * i]} | uint32_t{stream[4 * i + 1]} << 8 |
                          uint32_t{stream[4 * i + 2]} << 16 | uint32_t{stream[4 * i + 3]} << 24;
    EXPECT_EQ(v[i], want) << "word " << i;
  }
}

// --- the protocol ---

// A round run step by step; devices in drop[s] vanish before step s
// (1 share, 2 mask, 3 unmask).
struct RoundRun {
  Status status = Status::Ok();
  std::vector<uint32_t> sum, expected;
  size_t roster = 0;
};

RoundRun RunRound(uint32_t n, uint64_t length, std::map<int, std::set<DeviceId>> drop,
             uint32_t min_survivors = 2) {
  const int levels = 127;
  Params params = DefaultParams(n, length, levels, min_survivors);
  Server server(params);
  std::map<DeviceId, std::unique_ptr<Client>> clients;
  std::map<DeviceId, std::vector<uint32_t>> inputs;
  std::mt19937 gen(n * 7919 + static_cast<uint32_t>(length));
  RoundRun run;
  for (DeviceId id = 0; id < n; ++id) {
    clients[id] = std::make_unique<Client>(id * 3 + 1);  // numbers need not be dense
    EXPECT_TRUE(server.Advertise(clients[id]->Advertise()).ok());
    std::vector<uint32_t> x(length);
    for (auto& v : x) v = static_cast<uint32_t>(static_cast<int>(gen() % 255) - levels) & ((1u << params.bits) - 1);
    inputs[id] = x;
  }
  auto roster = server.CloseAdvertising();
  if (!roster.ok()) return {roster.status()};
  run.roster = roster->members.size();
  auto gone = [&](int step, DeviceId id) {
    for (int s = 1; s <= step; ++s) {
      if (drop[s].count(id)) return true;
    }
    return false;
  };
  for (auto& [id, c] : clients) {
    if (gone(1, id)) continue;
    auto shares = c->ShareKeys(*roster);
    EXPECT_TRUE(shares.ok()) << shares.status().ToString();
    EXPECT_TRUE(server.ShareKeys(id * 3 + 1, std::move(*shares)).ok());
  }
  if (Status st = server.CloseSharing(); !st.ok()) return {st};
  for (auto& [id, c] : clients) {
    if (gone(2, id)) continue;
    auto masked = c->Mask(server.SharesFor(id * 3 + 1), inputs[id]);
    if (!masked.ok()) return {masked.status()};
    EXPECT_TRUE(server.Masked(*masked).ok());
  }
  auto request = server.CloseMasking();
  if (!request.ok()) return {request.status()};
  for (auto& [id, c] : clients) {
    if (gone(3, id) || gone(2, id)) continue;
    auto response = c->Unmask(*request);
    if (!response.ok()) return {response.status()};
    EXPECT_TRUE(server.Unmasked(*response).ok());
  }
  auto sum = server.Sum();
  if (!sum.ok()) return {sum.status()};
  run.sum = *sum;
  run.expected.assign(length, 0);
  for (auto& [id, x] : inputs) {
    if (gone(2, id)) continue;  // its vector never came
    for (size_t i = 0; i < length; ++i) run.expected[i] = (run.expected[i] + x[i]) & ((1u << params.bits) - 1);
  }
  return run;
}

TEST(SecAgg, TheSumIsExactWithTheFullGraphAndTheSparseOne) {
  RoundRun full = RunRound(6, 1000, {});
  ASSERT_TRUE(full.status.ok()) << full.status.ToString();
  EXPECT_EQ(full.sum, full.expected);
  EXPECT_EQ(DefaultParams(6, 1, 127, 2).neighbours, 5u);  // everyone
  RoundRun sparse = RunRound(32, 500, {});
  ASSERT_TRUE(sparse.status.ok()) << sparse.status.ToString();
  EXPECT_EQ(sparse.sum, sparse.expected);
  EXPECT_EQ(DefaultParams(32, 1, 127, 2).neighbours, 12u);  // 2·log2(32) + 2, not 31
}

TEST(SecAgg, NeighboursAreSymmetricAndKOfThem) {
  Params p = DefaultParams(40, 1, 127, 2);
  Roster r;
  r.session = std::string(32, 'x');
  r.params = p;
  for (DeviceId id = 0; id < 40; ++id) r.members.push_back(Advertisement{id, "", "", ""});
  for (DeviceId id = 0; id < 40; ++id) {
    auto mine = Neighbours(r, id);
    EXPECT_EQ(mine.size(), p.neighbours);
    for (DeviceId v : mine) {
      auto theirs = Neighbours(r, v);
      EXPECT_TRUE(std::binary_search(theirs.begin(), theirs.end(), id)) << id << " " << v;
    }
  }
}

TEST(SecAgg, DevicesVanishingAtEveryStepLeaveTheExactSumOfThoseWhoSentVectors) {
  // 16 devices, k = 10, t = 6.
  for (int step = 1; step <= 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    RoundRun r = RunRound(16, 300, {{step, {2, 5, 11}}});
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(r.sum, r.expected);
  }
  // All at once: one after advertising, one after sharing, one after
  // masking; and the sparse graph at 32.
  RoundRun mixed = RunRound(32, 200, {{1, {0}}, {2, {7, 8}}, {3, {20}}});
  ASSERT_TRUE(mixed.status.ok()) << mixed.status.ToString();
  EXPECT_EQ(mixed.sum, mixed.expected);
}

TEST(SecAgg, TooFewSurvivorsAbandonTheRoundAndUnmaskNothing) {
  // Fewer vectors than min_survivors: the coordinator may not ask.
  RoundRun few = RunRound(6, 10, {{2, {0, 1, 2, 3}}}, 3);
  EXPECT_EQ(few.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(few.status.message().find("fewer than 3"), std::string::npos) << few.status.message();
  // Too many vanish while unmasking: a secret cannot be rebuilt.
  RoundRun lost = RunRound(8, 10, {{3, {0, 1, 2, 3, 4}}});
  EXPECT_EQ(lost.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(lost.status.message().find("fewer than"), std::string::npos) << lost.status.message();
}

// A round between a server and clients that the test drives by hand.
struct Manual {
  explicit Manual(uint32_t n, uint64_t length = 8)
      : params(DefaultParams(n, length, 127, 2)), server(params) {
    for (DeviceId id = 0; id < n; ++id) {
      clients.push_back(std::make_unique<Client>(id));
      EXPECT_TRUE(server.Advertise(clients.back()->Advertise()).ok());
    }
    roster = server.CloseAdvertising().value();
    for (DeviceId id = 0; id < n; ++id) shares[id] = clients[id]->ShareKeys(roster).value();
  }
  void ShareAll() {
    for (auto& [id, s] : shares) EXPECT_TRUE(server.ShareKeys(id, s).ok());
    EXPECT_TRUE(server.CloseSharing().ok());
  }
  Params params;
  Server server;
  Roster roster;
  std::vector<std::unique_ptr<Client>> clients;
  std::map<DeviceId, std::vector<SealedShare>> shares;
};

TEST(SecAgg, ForgedReplayedAndMisaddressedSharesDoNotOpen) {
  Manual m(5);
  m.ShareAll();
  std::vector<SealedShare> mine = m.server.SharesFor(0);
  ASSERT_EQ(mine.size(), 4u);
  const std::vector<uint32_t> x(8, 1);
  // A flipped bit.
  auto forged = mine;
  forged[1].box[10] ^= 1;
  EXPECT_NE(m.clients[0]->Mask(forged, x).status().message().find("does not open"), std::string::npos);
  // A share sealed to device 1, relabelled for device 0.
  auto other = mine;
  other[0] = m.server.SharesFor(1)[0];
  other[0].to = 0;
  EXPECT_FALSE(m.clients[0]->Mask(other, x).ok());
  // Delivered as it is, to the wrong device.
  auto wrong = mine;
  wrong[0] = m.server.SharesFor(1)[0];
  EXPECT_NE(m.clients[0]->Mask(wrong, x).status().message().find("delivered to device 0"),
            std::string::npos);
  // Replayed from another round of the same devices' keys: the session
  // differs, the box does not open.
  Manual again(5);
  again.ShareAll();
  auto replay = mine;
  replay[2] = again.server.SharesFor(0)[2];
  EXPECT_NE(m.clients[0]->Mask(replay, x).status().message().find("does not open"), std::string::npos);
  // Twice from one sender.
  auto dup = mine;
  dup[1] = dup[0];
  EXPECT_NE(m.clients[0]->Mask(dup, x).status().message().find("two shares"), std::string::npos);
  // Nothing of that took: the right shares still mask.
  EXPECT_TRUE(m.clients[0]->Mask(mine, x).ok());
}

TEST(SecAgg, TheServerRefusesWhatDoesNotFitAndKeepsTheSumUnaffected) {
  Manual m(4);
  // Shares: in another's name, to a non-neighbour, twice, malformed.
  auto s0 = m.shares[0];
  auto named = s0;
  named[0].from = 1;
  EXPECT_FALSE(m.server.ShareKeys(0, named).ok());
  auto twice = s0;
  twice[1].to = twice[0].to;
  EXPECT_FALSE(m.server.ShareKeys(0, twice).ok());
  auto short_box = s0;
  short_box[0].box.resize(10);
  EXPECT_FALSE(m.server.ShareKeys(0, short_box).ok());
  EXPECT_FALSE(m.server.ShareKeys(9, s0).ok()) << "not in the roster";
  m.ShareAll();
  EXPECT_EQ(m.server.ShareKeys(0, s0).code(), StatusCode::kFailedPrecondition) << "closed";
  std::vector<std::vector<uint32_t>> x = {{1, 2, 3, 4, 5, 6, 7, 8}, {10, 20, 30, 40, 50, 60, 70, 80},
                                          {3, 3, 3, 3, 3, 3, 3, 3}, {0, 0, 0, 0, 0, 0, 0, 1}};
  std::vector<MaskedInput> y;
  for (DeviceId id = 0; id < 4; ++id) y.push_back(m.clients[id]->Mask(m.server.SharesFor(id), x[id]).value());
  // The coordinator holds y, not x: nearly every value differs.
  int equal = 0;
  auto y0 = Unpack(y[0].packed, 8, m.params.bits).value();
  for (size_t i = 0; i < 8; ++i) equal += y0[i] == x[0][i];
  EXPECT_LE(equal, 1);
  // A vector of the wrong length, then twice.
  MaskedInput cut = y[0];
  cut.packed.pop_back();
  EXPECT_NE(m.server.Masked(cut).message().find("bytes, not"), std::string::npos);
  for (const auto& v : y) EXPECT_TRUE(m.server.Masked(v).ok());
  EXPECT_EQ(m.server.Masked(y[1]).code(), StatusCode::kAlreadyExists);
  auto request = m.server.CloseMasking().value();
  std::vector<UnmaskResponse> responses;
  for (DeviceId id = 0; id < 4; ++id) responses.push_back(m.clients[id]->Unmask(request).value());
  // A response revealing the key share of a device that sent its vector.
  UnmaskResponse lie = responses[0];
  lie.shares[0].self_mask = false;
  EXPECT_NE(m.server.Unmasked(lie).message().find("which sent its vector"), std::string::npos);
  for (const auto& r : responses) EXPECT_TRUE(m.server.Unmasked(r).ok());
  EXPECT_EQ(m.server.Unmasked(responses[2]).code(), StatusCode::kAlreadyExists);
  auto sum = m.server.Sum();
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ((*sum)[i], x[0][i] + x[1][i] + x[2][i] + x[3][i]);
}

TEST(SecAgg, ADeviceNeverRevealsBothSharesOfAPeer) {
  Manual m(4);
  m.ShareAll();
  const std::vector<uint32_t> x(8, 2);
  for (DeviceId id = 0; id < 4; ++id) ASSERT_TRUE(m.clients[id]->Mask(m.server.SharesFor(id), x).ok());
  // Told that device 3 vanished: device 0 gives 3's key share...
  auto first = m.clients[0]->Unmask(UnmaskRequest{{0, 1, 2}});
  ASSERT_TRUE(first.ok());
  // ...and then, told it did not, refuses its self-mask share: with both,
  // the coordinator would strip every mask off 3's vector.
  auto second = m.clients[0]->Unmask(UnmaskRequest{{0, 1, 2, 3}});
  EXPECT_NE(second.status().message().find("both would unmask"), std::string::npos)
      << second.status().ToString();
  // Unmasking a set that leaves the device itself out, or too small.
  EXPECT_FALSE(m.clients[1]->Unmask(UnmaskRequest{{0, 2, 3}}).ok());
  EXPECT_FALSE(m.clients[1]->Unmask(UnmaskRequest{{1}}).ok());
}

TEST(SecAgg, ARosterWithoutTheDevicesOwnKeysOrWithALowOrderKeyIsRefused) {
  Client a(1), b(2), c(3);
  Server server(DefaultParams(3, 4, 127, 2));
  for (Client* x : {&a, &b, &c}) ASSERT_TRUE(server.Advertise(x->Advertise()).ok());
  EXPECT_EQ(server.Advertise(a.Advertise()).code(), StatusCode::kAlreadyExists);
  Advertisement bad = c.Advertise();
  bad.id = 4;
  bad.c_pk = "short";
  EXPECT_EQ(server.Advertise(bad).code(), StatusCode::kInvalidArgument);
  // The identity point: every product with it is zero, a secret all know.
  bad = c.Advertise();
  bad.id = 4;
  bad.s_pk = std::string(32, '\0');
  EXPECT_NE(server.Advertise(bad).message().find("full order"), std::string::npos);
  Roster roster = server.CloseAdvertising().value();
  // A roster that swaps a device's key, or slips a low-order one in.
  Roster swapped = roster;
  swapped.members[1].c_pk = swapped.members[0].c_pk;
  EXPECT_NE(b.ShareKeys(swapped).status().message().find("own keys"), std::string::npos);
  Roster weak = roster;
  weak.members[2].s_pk = std::string(32, '\0');
  EXPECT_NE(b.ShareKeys(weak).status().message().find("low order"), std::string::npos);
  // A threshold of half the neighbours or less would let a coordinator
  // gather both kinds of share of one device from honest neighbours.
  Roster low = roster;
  low.params.threshold = 1;
  EXPECT_NE(b.ShareKeys(low).status().message().find("more than half"), std::string::npos);
  // Refusals left it able to go on with the real roster.
  EXPECT_TRUE(b.ShareKeys(roster).ok());
  EXPECT_EQ(b.ShareKeys(roster).status().code(), StatusCode::kFailedPrecondition) << "twice";
}

}  // namespace
}  // namespace claw::secagg
