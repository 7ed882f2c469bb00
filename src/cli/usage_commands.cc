// `claw usage` (this month's node-hours against each tier's quota, in the
// manner of Slurm's sreport; -P for a parsable table), `claw users set-tier`
// (admin) and `claw why JOB` (what a job waits for).
#include <cstdio>
#include <ctime>

#include <nlohmann/json.hpp>

#include "cli/client.h"
#include "cli/command_parts.h"
#include "cli/http_client.h"
#include "cli/output.h"

namespace claw {
namespace {

std::string Hours(const nlohmann::json& v) {
  if (!v.is_number()) return "unlimited";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v.get<double>());
  return buf;
}

void PrintUsage(const nlohmann::json& usage, bool parsable) {
  const auto& users = usage["users"];
  if (parsable) {
    std::printf("Month|User|Tier|Used|Quota|Percent|Held\n");
  } else {
    std::printf("Usage of the network in %s (node-hours: run time of every result of a user's tasks)\n",
                usage.value("month", "").c_str());
    std::printf("%-20s %-13s %12s %12s %8s  %s\n", "USER", "TIER", "USED", "QUOTA", "PERCENT", "STATE");
  }
  for (const auto& u : users) {
    const double used = u.value("used_node_hours", 0.0);
    const auto& quota = u["quota_node_hours"];
    std::string percent = "-";
    if (quota.is_number() && quota.get<double>() > 0) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.1f", 100 * used / quota.get<double>());
      percent = buf;
    }
    const bool held = u.value("held", false);
    char used_text[32];
    std::snprintf(used_text, sizeof used_text, "%.2f", used);
    if (parsable) {
      std::printf("%s|%s|%s|%s|%s|%s|%s\n", usage.value("month", "").c_str(),
                  OneLine(u.value("user", "")).c_str(), OneLine(u.value("tier", "")).c_str(),
                  used_text, quota.is_number() ? Hours(quota).c_str() : "", percent.c_str(),
                  held ? "yes" : "no");
    } else {
      const bool warn = percent != "-" && std::stod(percent) >= 80;
      if (percent != "-") percent += "%";
      std::printf("%-20.20s %-13.13s %12s %12s %8s  %s\n", OneLine(u.value("user", "")).c_str(),
                  OneLine(u.value("tier", "")).c_str(), used_text, Hours(quota).c_str(),
                  percent.c_str(), held ? "held: over quota until next month" : warn ? "80% used" : "ok");
    }
  }
}

}  // namespace

void AddUsage(CLI::App& cli, std::shared_ptr<ClientConfig> target) {
  auto parsable = std::make_shared<bool>(false);
  auto json = std::make_shared<bool>(false);
  auto* usage = cli.add_subcommand("usage", "This month's node-hours against each tier's quota");
  usage->add_flag("-P,--parsable", *parsable, "One line per user, fields separated by |");
  usage->add_flag("--json", *json, "Print JSON");
  usage->callback([=] {
    HttpApiClient api(*target);
    auto u = api.GetJson("/api/usage");
    if (!u.ok()) throw CLI::RuntimeError(Fail(u.status()));
    if (*json) {
      std::printf("%s\n", u->dump(2).c_str());
      return;
    }
    PrintUsage(*u, *parsable);
  });

  auto user = std::make_shared<std::string>();
  auto tier = std::make_shared<std::string>();
  CLI::App* users = cli.get_subcommand("users");
  auto* set_tier = users->add_subcommand("set-tier", "Move a user to another tier (admin)");
  set_tier->add_option("name", *user, "The user")->required();
  set_tier->add_option("tier", *tier, "free, researcher, professional or enterprise")->required();
  set_tier->callback([=] {
    HttpApiClient api(*target);
    auto r = api.Post("/api/users/" + *user + "/tier", nlohmann::json{{"tier", *tier}}.dump());
    if (!r.ok()) throw CLI::RuntimeError(Fail(r.status()));
    auto j = nlohmann::json::parse(*r, nullptr, false);
    std::printf("user %s is now in the %s tier\n", user->c_str(), tier->c_str());
    if (j.is_object()) PrintUsage(j, false);
  });

  auto webhook = std::make_shared<std::string>();
  auto slack = std::make_shared<std::string>();
  auto remove_id = std::make_shared<int64_t>(0);
  auto* notify = cli.add_subcommand("notify", "Where you are told about your jobs and devices");
  notify->require_subcommand(1);
  auto email = std::make_shared<std::string>();
  auto* add = notify->add_subcommand(
      "add", "Add a target: a signed webhook, a Slack incoming webhook, or an email address");
  auto* w = add->add_option("--webhook", *webhook, "A URL that gets Standard Webhooks POSTs");
  auto* sl = add->add_option("--slack", *slack, "A Slack incoming webhook URL")->excludes(w);
  add->add_option("--email", *email,
                  "An email address (sent through the coordinator's SMTP server, over STARTTLS)")
      ->excludes(w)
      ->excludes(sl);
  add->callback([=] {
    const int given = !webhook->empty() + !slack->empty() + !email->empty();
    if (given != 1) {
      throw CLI::RuntimeError(Fail(InvalidArgument("one of --webhook URL, --slack URL or --email ADDRESS")));
    }
    HttpApiClient api(*target);
    const char* kind = !webhook->empty() ? "webhook" : !slack->empty() ? "slack" : "email";
    const std::string url = !webhook->empty() ? *webhook : !slack->empty() ? *slack : "mailto:" + *email;
    auto r = api.Post("/api/notifications", nlohmann::json{{"kind", kind}, {"url", url}}.dump());
    if (!r.ok()) throw CLI::RuntimeError(Fail(r.status()));
    auto j = nlohmann::json::parse(*r, nullptr, false);
    std::printf("target %lld: %s %s\n", static_cast<long long>(j.value("id", 0)),
                j.value("kind", "").c_str(), OneLine(j.value("url", "")).c_str());
    if (j.contains("secret")) {
      std::printf("signing secret (shown once; check webhook-signature with it): %s\n",
                  j["secret"].get<std::string>().c_str());
    }
  });
  notify->add_subcommand("list", "Your targets")->callback([=] {
    HttpApiClient api(*target);
    auto r = api.GetJson("/api/notifications");
    if (!r.ok()) throw CLI::RuntimeError(Fail(r.status()));
    for (const auto& t : (*r)["targets"]) {
      std::printf("%-6lld %-8s %s\n", static_cast<long long>(t.value("id", 0)),
                  t.value("kind", "").c_str(), OneLine(t.value("url", "")).c_str());
    }
  });
  auto* remove = notify->add_subcommand("remove", "Remove one of your targets");
  remove->add_option("id", *remove_id, "Its id (claw notify list)")->required();
  remove->callback([=] {
    HttpApiClient api(*target);
    auto r = api.Delete("/api/notifications/" + std::to_string(*remove_id));
    if (!r.ok()) throw CLI::RuntimeError(Fail(r.status()));
    std::printf("removed target %lld\n", static_cast<long long>(*remove_id));
  });

  auto all = std::make_shared<bool>(false);
  auto* q = cli.add_subcommand("q", "The queue, as condor_q shows it: running jobs by owner");
  q->add_flag("--all", *all, "Finished jobs too (the last 1,000)");
  q->callback([=] {
    auto list = Connect(*target).ListJobs(1000);
    if (!list.ok()) throw CLI::RuntimeError(Fail(list.status()));
    std::printf("%-12s %-16s %-11s %7s %7s %7s %7s %7s  %s\n", "OWNER", "BATCH_NAME", "SUBMITTED",
                "DONE", "RUN", "IDLE", "HOLD", "TOTAL", "JOB_IDS");
    size_t jobs = 0, finished = 0;
    uint64_t done = 0, run = 0, idle = 0, hold = 0;
    for (const v1::JobInfo& j : *list) {
      const bool running = j.state() == "running";
      if (!running) finished++;
      if (!running && !*all) continue;
      jobs++;
      const uint64_t out = uint64_t{j.tasks_done()} + j.tasks_running() + j.tasks_failed();
      const uint64_t waiting = j.tasks_total() > out && running ? j.tasks_total() - out : 0;
      const bool held = j.waiting().rfind("held:", 0) == 0;
      done += j.tasks_done();
      run += j.tasks_running();
      (held ? hold : idle) += waiting;
      char when[32] = "-";
      const time_t t = static_cast<time_t>(j.created_unix_ms() / 1000);
      std::tm tm{};
      if (localtime_r(&t, &tm)) std::strftime(when, sizeof when, "%m/%d %H:%M", &tm);
      auto cell = [](uint64_t n) { return n == 0 ? std::string("_") : std::to_string(n); };
      const std::string name = j.name().empty() ? j.app() : j.name();
      std::printf("%-12.12s %-16.16s %-11s %7s %7s %7s %7s %7u  %s%s\n",
                  j.owner().empty() ? "-" : OneLine(j.owner()).c_str(), OneLine(name).c_str(), when,
                  cell(j.tasks_done()).c_str(), cell(j.tasks_running()).c_str(),
                  cell(held ? 0 : waiting).c_str(), cell(held ? waiting : 0).c_str(), j.tasks_total(),
                  j.job_id().c_str(), running ? "" : (" (" + j.state() + ")").c_str());
    }
    std::printf("\nTotal for query: %zu jobs; %llu tasks done, %llu running, %llu idle, %llu held",
                jobs, static_cast<unsigned long long>(done), static_cast<unsigned long long>(run),
                static_cast<unsigned long long>(idle), static_cast<unsigned long long>(hold));
    std::printf(*all ? "\n" : "; %zu finished not shown (--all)\n", finished);
  });

  auto job = std::make_shared<std::string>();
  auto* why = cli.add_subcommand("why", "Say why a job waits (quota, no device, a tie to break)");
  why->add_option("job", *job, "The job")->required();
  why->callback([=] {
    auto j = Connect(*target).GetJob(*job);
    if (!j.ok()) throw CLI::RuntimeError(Fail(j.status()));
    std::printf("job %s (%s): %s, %u of %u tasks done, %u running\n", j->job_id().c_str(),
                OneLine(j->app()).c_str(), j->state().c_str(), j->tasks_done(), j->tasks_total(),
                j->tasks_running());
    if (j->state() != "running") {
      std::printf("it does not wait: it is %s%s\n", j->state().c_str(),
                  j->error().empty() ? "" : (": " + OneLine(j->error())).c_str());
    } else if (!j->waiting().empty()) {
      std::printf("waiting: %s\n", OneLine(j->waiting()).c_str());
    } else if (j->tasks_running() > 0) {
      std::printf("not waiting: its tasks run on devices now\n");
    } else {
      std::printf("waiting for a device to ask for work: the connected devices are busy, or their "
                  "owners are using them (claw agents shows which are connected)\n");
    }
  });
}

}  // namespace claw
