#include "apps/registry.h"

#include "apps/exec.h"
#include "apps/montecarlo.h"
#include "apps/noop.h"
#include "apps/sweep.h"
#include "apps/infer.h"
#include "apps/train.h"
#include "rounds/fedtrain_app.h"
#include "rounds/round_app.h"

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
  // Training in rounds: the job, and its rounds (which only its driver submits).
  r.Register(std::make_unique<rounds::FedTrainApp>());
  r.Register(std::make_unique<rounds::RoundApp>());
  return r;
}

}  // namespace claw
