#include "apps/registry.h"

#include "apps/exec.h"
#include "apps/montecarlo.h"
#include "apps/noop.h"
#include "apps/sweep.h"
#include "apps/infer.h"
#include "apps/train.h"

namespace claw {

AppRegistry BuiltinApps() {
  AppRegistry r;
  r.Register(std::make_unique<MonteCarloApp>());
  r.Register(std::make_unique<NoopApp>());
  r.Register(std::make_unique<ExecApp>());
  // Their libtorch code loads only in processes that run them (ml/api.h).
  r.Register(std::make_unique<TrainApp>());
  r.Register(std::make_unique<InferApp>());
  // Sweeps run any of the apps above (their addresses stay put when the
  // registry moves: it holds them by unique_ptr).
  std::map<std::string, const App*, std::less<>> inner;
  for (const std::string& name : r.Names()) inner[name] = r.Find(name);
  r.Register(std::make_unique<SweepApp>(std::move(inner)));
  return r;
}

}  // namespace claw
