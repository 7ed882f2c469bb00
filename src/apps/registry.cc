#include "apps/registry.h"

#include "apps/exec.h"
#include "apps/montecarlo.h"
#include "apps/noop.h"

namespace claw {

AppRegistry BuiltinApps() {
  AppRegistry r;
  r.Register(std::make_unique<MonteCarloApp>());
  r.Register(std::make_unique<NoopApp>());
  r.Register(std::make_unique<ExecApp>());
  return r;
}

}  // namespace claw
