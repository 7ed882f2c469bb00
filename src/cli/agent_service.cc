// `claw agent install` and `claw agent uninstall`: a contributor's device set
// up in one step, as BOINC's and Folding@home's installers do — the agent as
// a service that starts at boot and restarts on failure (a systemd unit on
// Linux, a launchd job on macOS), enrolled with the token given, its state
// in a directory of its own; uninstall stops it and removes the service and
// that directory.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "cli/command_parts.h"
#include "common/files.h"
#include "common/text.h"

namespace claw {
namespace {

namespace fs = std::filesystem;

struct ServiceOptions {
  std::string coordinator;
  std::string token;
  std::string ca_file;
  std::string state_dir;
  std::string unit_dir;  // where the unit (or plist) goes
  std::string name = "claw-agent";
  std::vector<std::string> agent_args;  // more flags for `claw agent` (--hours 22-7 ...)
  bool start = true;
};

std::string SelfPath() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("claw") : p.string();
}

// systemd's quoting for ExecStart: each argument in double quotes, with
// backslashes, quotes, `%` and `$` escaped.
std::string SystemdQuote(const std::string& arg) {
  std::string out = "\"";
  for (char c : arg) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '%') {
      out += "%%";
      continue;
    }
    if (c == '$') {
      out += "$$";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

bool Run(const std::vector<std::string>& argv) {
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execvp(a[0], a.data());
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::vector<std::string> AgentCommand(const ServiceOptions& o) {
  std::vector<std::string> cmd = {SelfPath(), "agent", "--coordinator", o.coordinator, "--state",
                                  o.state_dir, "--token-file", o.state_dir + "/enroll-token"};
  if (!o.ca_file.empty()) cmd.insert(cmd.end(), {"--ca", o.state_dir + "/ca.pem"});
  cmd.insert(cmd.end(), o.agent_args.begin(), o.agent_args.end());
  return cmd;
}

std::string SystemdUnit(const ServiceOptions& o) {
  std::string exec;
  for (const auto& a : AgentCommand(o)) exec += (exec.empty() ? "" : " ") + SystemdQuote(a);
  return "# Written by `claw agent install`; `claw agent uninstall` removes it.\n"
         "[Unit]\n"
         "Description=OpenClaw Compute agent (lends this machine's idle time)\n"
         "Wants=network-online.target\n"
         "After=network-online.target\n"
         "\n"
         "[Service]\n"
         "Type=simple\n"
         "ExecStart=" + exec + "\n"
         "Restart=on-failure\n"
         "RestartSec=5\n"
         "# Stopping hands the agent's tasks back and removes their sandboxes.\n"
         "KillMode=mixed\n"
         "TimeoutStopSec=60\n"
         "\n"
         "[Install]\n"
         "WantedBy=multi-user.target\n";
}

std::string LaunchdPlist(const ServiceOptions& o) {
  std::string args;
  for (const auto& a : AgentCommand(o)) args += "    <string>" + XmlEscape(a) + "</string>\n";
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
         "<!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" "
         "\"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n"
         "<plist version=\"1.0\">\n<dict>\n"
         "  <key>Label</key><string>org.openclaw." + o.name + "</string>\n"
         "  <key>ProgramArguments</key>\n  <array>\n" + args + "  </array>\n"
         "  <key>RunAtLoad</key><true/>\n"
         "  <key>KeepAlive</key><dict><key>SuccessfulExit</key><false/></dict>\n"
         "  <key>StandardErrorPath</key><string>" + XmlEscape(o.state_dir) + "/agent.log</string>\n"
         "</dict>\n</plist>\n";
}

bool IsApple() {
#if defined(__APPLE__)
  return true;
#else
  return false;
#endif
}

std::string UnitPath(const ServiceOptions& o) {
  return IsApple() ? o.unit_dir + "/org.openclaw." + o.name + ".plist"
                   : o.unit_dir + "/" + o.name + ".service";
}

Status Install(const ServiceOptions& o) {
  if (o.token.empty()) return InvalidArgument("--token: the enrollment token this device joins with");
  std::error_code ec;
  fs::create_directories(o.state_dir, ec);
  if (ec) return Unavailable("cannot make " + o.state_dir + ": " + ec.message());
  chmod(o.state_dir.c_str(), 0700);
  CLAW_RETURN_IF_ERROR(WriteFileAtomically(o.state_dir + "/enroll-token", o.token + "\n", 0600));
  if (!o.ca_file.empty()) {
    auto ca = ReadWholeFile(o.ca_file);
    if (!ca.ok()) return NotFound("cannot read --ca " + o.ca_file);
    CLAW_RETURN_IF_ERROR(WriteFileAtomically(o.state_dir + "/ca.pem", *ca, 0644));
  }
  fs::create_directories(o.unit_dir, ec);
  const std::string unit = UnitPath(o);
  CLAW_RETURN_IF_ERROR(
      WriteFileAtomically(unit, IsApple() ? LaunchdPlist(o) : SystemdUnit(o), 0644));
  std::printf("wrote %s\n", unit.c_str());
  if (!o.start) {
    std::printf("not started (--no-start)\n");
    return Status::Ok();
  }
  const bool ok = IsApple() ? Run({"launchctl", "load", "-w", unit})
                            : Run({"systemctl", "daemon-reload"}) &&
                                  Run({"systemctl", "enable", "--now", o.name + ".service"});
  if (!ok) {
    return Unavailable(std::string("the service is written but could not be started (") +
                       (IsApple() ? "launchctl" : "systemctl") +
                       " failed: is this machine run by systemd/launchd, and are you root?)");
  }
  std::printf("started %s; it starts at boot and restarts on failure (claw agent status --state %s)\n",
              o.name.c_str(), o.state_dir.c_str());
  return Status::Ok();
}

Status Uninstall(const ServiceOptions& o) {
  const std::string unit = UnitPath(o);
  if (o.start) {
    if (IsApple()) {
      Run({"launchctl", "unload", "-w", unit});
    } else {
      Run({"systemctl", "disable", "--now", o.name + ".service"});
    }
  }
  std::error_code ec;
  const bool had_unit = fs::remove(unit, ec);
  if (!IsApple() && o.start) Run({"systemctl", "daemon-reload"});
  const auto removed = fs::remove_all(o.state_dir, ec);
  if (ec) return Unavailable("cannot remove " + o.state_dir + ": " + ec.message());
  std::printf("%s %s; removed %s (%llu files: its key, cache and logs)\n",
              had_unit ? "removed" : "no service at", unit.c_str(), o.state_dir.c_str(),
              static_cast<unsigned long long>(removed));
  return Status::Ok();
}

void AddServiceOptions(CLI::App* c, ServiceOptions* o) {
  c->add_option("--state", o->state_dir, "The agent's state directory")->capture_default_str();
  c->add_option("--unit-dir", o->unit_dir, "Where the service definition goes")->capture_default_str();
  c->add_option("--name", o->name, "The service's name")->capture_default_str();
  c->add_flag("!--no-start", o->start, "Write the service, do not start (or stop) it");
}

}  // namespace

void AddAgentService(CLI::App* agent) {
  auto o = std::make_shared<ServiceOptions>();
  o->coordinator = DefaultCoordinator();
  const bool root = geteuid() == 0;
  const char* home = std::getenv("HOME");
  o->state_dir = root ? "/var/lib/claw-agent" : std::string(home ? home : ".") + "/.claw-agent";
  o->unit_dir = IsApple() ? (root ? "/Library/LaunchDaemons"
                                  : std::string(home ? home : ".") + "/Library/LaunchAgents")
                          : "/etc/systemd/system";
  auto* install = agent->add_subcommand(
      "install", "Set this device up as a contributor: the agent as a service that starts at "
                 "boot and restarts on failure (systemd; launchd on macOS)");
  install->add_option("--coordinator,-c", o->coordinator, "Coordinator host:port")->capture_default_str();
  install->add_option("--token", o->token, "Enrollment token (claw enroll-token makes one)")->required();
  install->add_option("--ca", o->ca_file, "The coordinator's CA certificate to pin");
  AddServiceOptions(install, o.get());
  install->add_option("agent_args", o->agent_args,
                      "More `claw agent` flags after --, e.g. -- --hours 22-7 --slots 2");
  install->callback([o] {
    if (Status st = Install(*o); !st.ok()) throw CLI::RuntimeError(Fail(st));
  });
  auto* uninstall = agent->add_subcommand("uninstall", "Stop the agent's service and remove it and its data");
  AddServiceOptions(uninstall, o.get());
  uninstall->callback([o] {
    if (Status st = Uninstall(*o); !st.ok()) throw CLI::RuntimeError(Fail(st));
  });
}

}  // namespace claw
