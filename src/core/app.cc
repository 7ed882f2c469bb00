#include "core/app.h"

namespace claw {

std::string App::Difference(std::string_view, std::string_view a, std::string_view b) const {
  return a.size() == b.size() ? "their values" : "their values (" + std::to_string(a.size()) +
                                                     " bytes against " + std::to_string(b.size()) + ")";
}

void AppRegistry::Register(std::unique_ptr<App> app) {
  std::string name(app->Name());
  apps_[name] = std::move(app);
}

const App* AppRegistry::Find(std::string_view name) const {
  auto it = apps_.find(name);
  return it == apps_.end() ? nullptr : it->second.get();
}

std::vector<std::string> AppRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, app] : apps_) names.push_back(name);
  return names;
}

}  // namespace claw
