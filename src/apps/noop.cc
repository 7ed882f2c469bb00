#include "apps/noop.h"

#include "core/json_fields.h"

namespace claw {

Result<std::vector<TaskSpec>> NoopApp::Plan(const JobSpec& spec) const {
  FieldReader f(spec.params, "params");
  CLAW_RETURN_IF_ERROR(f.NoUnknownFields({}));
  return std::vector<TaskSpec>(spec.tasks == 0 ? 1 : spec.tasks, TaskSpec{"", 1.0});
}

Result<std::string> NoopApp::Run(std::string_view, const RunContext&) const { return std::string(); }

Result<nlohmann::json> NoopApp::Merge(const JobSpec&,
                                      const std::vector<std::string_view>& outputs) const {
  return nlohmann::json{{"tasks", outputs.size()}};
}

}  // namespace claw
