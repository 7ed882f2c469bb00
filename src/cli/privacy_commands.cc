// `claw privacy`: the accountant of training with differential privacy
// (docs/privacy.md), offline: what rounds at a sampling rate and noise
// multiplier spend, and the noise a budget needs. The same code the
// coordinator counts with (privacy/accountant.h).
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/command_parts.h"
#include "privacy/accountant.h"

namespace claw {
namespace {

double EpsilonOf(double q, double z, int rounds, double delta) {
  privacy::RdpAccountant acc;
  acc.Compose(q, z, rounds);
  return acc.Epsilon(delta).epsilon;
}

}  // namespace

void AddPrivacy(CLI::App& cli) {
  auto* p = cli.add_subcommand("privacy", "The privacy accountant (Rényi DP of the sampled Gaussian)");
  p->require_subcommand(1);
  struct Args {
    double q = 1, noise = 1, delta = 1e-5, epsilon = 0;
    int rounds = 1;
  };
  auto a = std::make_shared<Args>();
  auto common = [a](CLI::App* c) {
    c->add_option("--q", a->q, "Each device's chance of taking part in a round (1: every round)")
        ->check(CLI::Range(0.0, 1.0));
    c->add_option("--rounds", a->rounds, "Rounds")->check(CLI::Range(1, 100'000'000));
    c->add_option("--delta", a->delta, "δ")->check(CLI::Range(1e-300, 0.999999));
  };
  auto* eps = p->add_subcommand("epsilon", "ε spent by ROUNDS rounds at sampling rate Q and NOISE");
  common(eps);
  eps->add_option("--noise", a->noise, "Noise multiplier z (σ = z × clip norm)")->check(CLI::Range(1e-6, 1e6));
  eps->callback([a] {
    privacy::RdpAccountant acc;
    acc.Compose(a->q, a->noise, a->rounds);
    privacy::EpsilonAt e = acc.Epsilon(a->delta);
    std::printf("ε = %.6g at δ = %g (order %g): %d rounds, q = %g, noise multiplier %g\n", e.epsilon,
                a->delta, e.order, a->rounds, a->q, a->noise);
  });
  auto* noise = p->add_subcommand("noise", "The least noise multiplier for which ROUNDS rounds spend at most EPSILON");
  common(noise);
  noise->add_option("--epsilon", a->epsilon, "The budget ε")->required()->check(CLI::Range(1e-6, 1e6));
  noise->callback([a] {
    double lo = 1e-3, hi = 1e3;
    if (EpsilonOf(a->q, hi, a->rounds, a->delta) > a->epsilon) {
      throw CLI::RuntimeError(Fail(InvalidArgument("no noise multiplier up to 1000 keeps ε within the budget")));
    }
    for (int i = 0; i < 60; ++i) {
      const double mid = std::sqrt(lo * hi);
      (EpsilonOf(a->q, mid, a->rounds, a->delta) > a->epsilon ? lo : hi) = mid;
    }
    std::printf("noise multiplier %.6g: ε = %.6g at δ = %g over %d rounds, q = %g\n", hi,
                EpsilonOf(a->q, hi, a->rounds, a->delta), a->delta, a->rounds, a->q);
  });
}

}  // namespace claw
