#include "apps/registry.h"

#include "apps/exec.h"
#include "apps/montecarlo.h"
#include "apps/noop.h"
#ifdef CLAW_WITH_TORCH
#include "apps/train.h"
#endif

namespace claw {

AppRegistry BuiltinApps() {
  AppRegistry r;
  r.Register(std::make_unique<MonteCarloApp>());
  r.Register(std::make_unique<NoopApp>());
  r.Register(std::make_unique<ExecApp>());
#ifdef CLAW_WITH_TORCH
  r.Register(std::make_unique<TrainApp>());
#endif
  return r;
}

}  // namespace claw
