#include "apps/registry.h"

#include "apps/montecarlo.h"
#include "apps/noop.h"

namespace claw {

AppRegistry BuiltinApps() {
  AppRegistry r;
  r.Register(std::make_unique<MonteCarloApp>());
  r.Register(std::make_unique<NoopApp>());
  return r;
}

}  // namespace claw
