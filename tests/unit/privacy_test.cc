// The accountant against Google's dp_accounting (python/dp_accounting/
// dp_accounting/rdp/rdp_privacy_accountant_test.py, commit b5b0286): its
// literal expected figures, at its tolerances (np.allclose rtol 1e-4, or
// assertAlmostEqual's 7 places).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "privacy/accountant.h"
#include "rounds/privacy.h"

namespace claw::privacy {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// np.allclose: |a - b| <= atol + rtol·|b|, inf equal to inf.
void ExpectClose(double actual, double expected, double rtol, double atol = 1e-8) {
  if (std::isinf(expected)) {
    EXPECT_EQ(actual, expected);
    return;
  }
  EXPECT_LE(std::abs(actual - expected), atol + rtol * std::abs(expected))
      << "actual " << actual << ", expected " << expected;
}

// assertAlmostEqual(a, b): round(a - b, 7) == 0.
void ExpectSevenPlaces(double actual, double expected) {
  EXPECT_LT(std::abs(actual - expected), 5e-8) << "actual " << actual << ", expected " << expected;
}

TEST(Accountant, PoissonSampledGaussianMatchesDpAccountingsTest) {
  // test_compute_rdp_poisson_sampled_gaussian: z 2.5, q 0.01, 50 steps.
  const std::vector<double> orders = {1.5, 2.5, 5, 50, 100, kInf};
  const std::vector<double> expected = {6.70579741e-04, 1.08548710e-03, 2.18075656e-03,
                                        2.38460375e-02, 1.67416308e02, kInf};
  RdpAccountant acc(orders);
  acc.Compose(0.01, 2.5, 50);
  for (size_t i = 0; i < orders.size(); ++i) ExpectClose(acc.rdp()[i], expected[i], 1e-4);
}

TEST(Accountant, GaussianEpsilonAndDeltaMatchDpAccountingsTest) {
  // test_compute_epsilon_delta_gaussian: orders 1.000 .. 99.999, q 1,
  // z 4.530877117: ε(δ = 1e-6) = 1 and δ(ε = 1) = 1e-6.
  std::vector<double> orders;
  for (int i = 1000; i < 100000; ++i) orders.push_back(0.001 * i);
  std::vector<double> rdp;
  for (double a : orders) rdp.push_back(SampledGaussianRdp(1, 4.530877117, a));
  ExpectSevenPlaces(RdpToEpsilon(orders, rdp, 1e-6).epsilon, 1);
  ExpectSevenPlaces(RdpToDelta(orders, rdp, 1), 1e-6);
}

TEST(Accountant, PureDpConversionMatchesDpAccountingsTest) {
  // test_compute_epsilon_delta_pure_dp: RDP 1.1 at orders 2 .. 32.
  std::vector<double> orders, rdp;
  for (int a = 2; a < 33; ++a) {
    orders.push_back(a);
    rdp.push_back(1.1);
  }
  EpsilonAt e = RdpToEpsilon(orders, rdp, 1e-5);
  ExpectSevenPlaces(e.epsilon, 1.32783806176);
  EXPECT_EQ(e.order, 32);
  ExpectSevenPlaces(RdpToDelta(orders, rdp, 1.32783806176), 1e-5);
}

TEST(Accountant, PlainGaussianIsOrderOverTwoZSquaredAndComposesByAddition) {
  // test_compute_rdp_gaussian and test_compute_rdp_multi_gaussian.
  const std::vector<double> order = {3.14159};
  RdpAccountant one(order);
  one.Compose(1, 2.71828);
  ExpectSevenPlaces(one.rdp()[0], 0.21258427222223966);
  one.Compose(1, 6.28319);
  ExpectSevenPlaces(one.rdp()[0], 0.25237291495195807);
  // test_rdp_composition: six rounds are six times one.
  const std::vector<double> order_e = {2.71828};
  RdpAccountant six(order_e);
  six.Compose(1, 3.14159, 6);
  ExpectClose(six.rdp()[0], 6 * SampledGaussianRdp(1, 3.14159, 2.71828), 1e-12);
}

TEST(Accountant, NoSamplingCostsNothingAndNoNoiseIsNotPrivate) {
  // test_zero_poisson_sample, test_epsilon_non_private_gaussian.
  const std::vector<double> pi = {3.14159};
  for (double z : {1.0, 0.0}) {
    RdpAccountant acc(pi);
    acc.Compose(0, z);
    EXPECT_EQ(acc.Epsilon(1e-10).epsilon, 0);
    EXPECT_EQ(acc.Delta(1e-10), 0);
  }
  RdpAccountant open(pi);
  open.Compose(1, 0);
  EXPECT_EQ(open.Epsilon(0.1).epsilon, kInf);
}

TEST(Accountant, EpsilonAndDeltaAreInversesOverTheTestsGrid) {
  // test_epsilon_delta_consistency.
  std::vector<double> orders;
  for (int a = 2; a < 50; ++a) orders.push_back(a);
  for (double q : {0.0, 0.01, 0.1, 0.8, 1.0}) {
    for (double z : {0.0, 0.1, 1.0, 10.0, 100.0}) {
      for (double delta : {0.99, 0.9, 0.1, 0.01, 1e-3, 1e-5, 1e-9, 1e-12}) {
        RdpAccountant acc(orders);
        acc.Compose(q, z);
        const double eps = acc.Epsilon(delta).epsilon;
        const double delta2 = acc.Delta(eps);
        SCOPED_TRACE("q " + std::to_string(q) + " z " + std::to_string(z) + " delta " +
                     std::to_string(delta));
        if (std::isinf(eps)) {
          EXPECT_EQ(delta2, 1.0);
        } else if (eps == 0) {
          EXPECT_LE(delta2, delta);
        } else {
          ExpectSevenPlaces(delta2, delta);
        }
      }
    }
  }
}

TEST(Accountant, DeltaLiesBetweenTheExactGaussianAndItsTailBound) {
  // test_delta_bounds_gaussian: q 1, z 1, orders 1.0 .. 50.4.
  std::vector<double> orders, rdp;
  for (int x = 10; x < 505; ++x) {
    orders.push_back(0.1 * x);
    rdp.push_back(SampledGaussianRdp(1, 1, 0.1 * x));
  }
  for (int x = 0; x < 500; ++x) {
    const double eps = 0.1 * x;
    const double delta = RdpToDelta(orders, rdp, eps);
    const double exact = std::erfc((eps - 0.5) / M_SQRT2) / 2 -
                         std::exp(eps) * std::erfc((eps + 0.5) / M_SQRT2) / 2;
    const double tail = eps >= 0.5 ? std::exp(-0.5 * (eps - 0.5) * (eps - 0.5)) : 1.0;
    EXPECT_LE(exact, delta + 1e-300) << "eps " << eps;
    EXPECT_LE(delta, tail + 1e-300) << "eps " << eps;
  }
}

TEST(Accountant, FractionalOrdersOfAWideSeriesStayPositive) {
  // test_log_a_frac_positive: q 0.4, z 12, orders 58.5 .. 59.5.
  for (int i = 0; i <= 20; ++i) {
    const double a = 58.5 + i * 0.05;
    if (a == std::floor(a)) continue;  // the integer path
    EXPECT_GT(SampledGaussianRdp(0.4, 12, a), 0) << a;
  }
}

TEST(Accountant, DefaultOrdersGiveDpAccountingsFigures) {
  // The library's own figures at its default orders (computed by it, not
  // literals of its test): DP-SGD on MNIST's classic setting and a
  // federated one.
  RdpAccountant mnist;
  mnist.Compose(256.0 / 60000, 1.1, 14063);
  ExpectClose(mnist.Epsilon(1e-5).epsilon, 2.596655529521983, 1e-6);
  RdpAccountant fed;
  fed.Compose(0.01, 1.0, 1000);
  ExpectClose(fed.Epsilon(1e-5).epsilon, 2.101366525420273, 1e-6);
  ExpectClose(fed.Delta(2.0), 1.9812564713985378e-05, 1e-6);
  RdpAccountant gauss;
  gauss.Compose(1, 1);
  ExpectClose(gauss.Epsilon(1e-5).epsilon, 4.728507067217623, 1e-9);
  EXPECT_EQ(DefaultOrders().size(), 156u);
}

}  // namespace
}  // namespace claw::privacy

// DP-FedAvg's parts (rounds/privacy.h).
namespace claw::rounds {
namespace {

TEST(DpFedAvg, ClippingScalesDownToTheNormAndLeavesSmallerDeltas) {
  Weights w = {{"a", {2}, {3, 4}}};
  EXPECT_DOUBLE_EQ(ClipToNorm(&w, 1), 5);
  EXPECT_NEAR(Norm(w), 1, 1e-6);
  EXPECT_NEAR(w[0].values[0], 0.6, 1e-6);
  Weights small = {{"a", {2}, {0.3f, 0.4f}}};
  ClipToNorm(&small, 1);
  EXPECT_EQ(small[0].values, (std::vector<float>{0.3f, 0.4f}));
}

TEST(DpFedAvg, NoiseIsGaussianWithTheStandardDeviationAskedAndNeverRepeats) {
  const size_t n = 200'000;
  Weights a = {{"x", {static_cast<int64_t>(n)}, std::vector<float>(n, 0.0f)}}, b = a;
  AddGaussianNoise(&a, 2.0);
  AddGaussianNoise(&b, 2.0);
  double sum = 0, sq = 0, beyond3 = 0;
  for (float x : a[0].values) {
    sum += x;
    sq += double{x} * x;
    beyond3 += std::abs(x) > 6.0;
  }
  const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_LT(std::abs(mean), 5 * 2.0 / std::sqrt(double(n)));  // 5 standard errors
  EXPECT_NEAR(sd, 2.0, 0.02);
  EXPECT_NEAR(beyond3 / n, 0.0027, 0.0008);  // the tails of a normal, not of a uniform
  EXPECT_NE(a[0].values, b[0].values);       // a fresh key each time
}

TEST(DpFedAvg, ShardsAreDrawnDistinctUniformAndTheSameAfterARestart) {
  std::vector<int> seen(20);
  for (uint32_t round = 0; round < 5000; ++round) {
    auto drawn = DrawShards(7, round, 5, 20);
    ASSERT_EQ(drawn.size(), 5u);
    std::set<uint64_t> distinct(drawn.begin(), drawn.end());
    EXPECT_EQ(distinct.size(), 5u);
    for (uint64_t s : drawn) seen.at(s)++;
  }
  // Each shard 1,250 times on average (q = 1/4); a binomial's spread is ~31.
  for (int count : seen) EXPECT_NEAR(count, 1250, 160);
  EXPECT_EQ(DrawShards(7, 3, 5, 20), DrawShards(7, 3, 5, 20));
  EXPECT_NE(DrawShards(7, 3, 5, 20), DrawShards(7, 4, 5, 20));
}

TEST(DpFedAvg, EachDeviceCountsTheRoundsItTookPartInAndTheWorstIsReported) {
  // Devices without sampling: a device in two rounds has spent two
  // Gaussian mechanisms, one in a single round one.
  std::vector<RoundSpend> rounds = {{1, 2.0, {"a", "b"}}, {1, 2.0, {"a"}}};
  privacy::RdpAccountant two, one;
  two.Compose(1, 2.0, 2);
  one.Compose(1, 2.0, 1);
  EXPECT_DOUBLE_EQ(EpsilonSpent(rounds, 1e-5, true), two.Epsilon(1e-5).epsilon);
  EXPECT_DOUBLE_EQ(EpsilonSpent({{1, 2.0, {"b"}}}, 1e-5, true), one.Epsilon(1e-5).epsilon);
  EXPECT_LT(one.Epsilon(1e-5).epsilon, two.Epsilon(1e-5).epsilon);
  // Shards: the sampled composition at each round's q.
  privacy::RdpAccountant sampled;
  sampled.Compose(0.1, 1.0);
  sampled.Compose(0.05, 1.0);
  EXPECT_DOUBLE_EQ(EpsilonSpent({{0.1, 1.0, {}}, {0.05, 1.0, {}}}, 1e-5, false),
                   sampled.Epsilon(1e-5).epsilon);
}

TEST(DpFedAvg, ThePlanCountsTheRoundsThatFitTheBudget) {
  PrivacySpec p{true, 1.0, 1.0, 1e-5, 3.0};
  PrivacyPlan plan = PlanPrivacy(p, 0.01, 10'000);
  ASSERT_GT(plan.rounds_in_budget, 0u);
  ASSERT_LT(plan.rounds_in_budget, 10'000u);
  privacy::RdpAccountant in, over;
  in.Compose(0.01, 1.0, static_cast<int>(plan.rounds_in_budget));
  over.Compose(0.01, 1.0, static_cast<int>(plan.rounds_in_budget) + 1);
  EXPECT_LE(in.Epsilon(1e-5).epsilon, 3.0);
  EXPECT_GT(over.Epsilon(1e-5).epsilon, 3.0);
}

TEST(DpFedAvg, ThePrivateAverageIsTheMeanOfClippedDeltasPlusNoise) {
  PrivacySpec p{true, 1.0, 1e-6, 1e-5, 0};  // noise too small to see
  std::vector<Delta> units = {{{{"a", {2}, {30, 40}}}, 5, "x"}, {{{"a", {2}, {0.2f, 0}}}, 50, "y"}};
  PrivateMean m = PrivateAverage(p, units);
  EXPECT_EQ(m.units, 2u);
  EXPECT_EQ(m.clipped, 1u);
  // (0.6 + 0.2) / 2 and (0.8 + 0) / 2: equal weights, not by samples.
  EXPECT_NEAR(m.mean[0].values[0], 0.4, 1e-4);
  EXPECT_NEAR(m.mean[0].values[1], 0.4, 1e-4);
}

}  // namespace
}  // namespace claw::rounds
