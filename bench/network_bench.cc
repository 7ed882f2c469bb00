// End-to-end figures of a local network: one coordinator with its durable
// SQLite store, two agents with one worker process each, all on loopback.
//
//   network_bench noop        no-op tasks/s and single-task round trip p50/p99
//   network_bench books       no-op tasks/s with credit, ledger and quota
//                             bookkeeping on and off, alternating
//   network_bench timeline    no-op tasks/s with the dashboard's task timeline on and off
//   network_bench efficiency  parallel efficiency of ~10 ms and ~1 ms tasks
//   network_bench large       one 2e9-path Monte Carlo job in 1,000 tasks
//   network_bench idle        CPU of a connected, idle network
//   network_bench redundancy  compute and wall time of 2/2 and adaptive replication
//   network_bench signatures  the cost of signing and verifying one message
//   network_bench blobs       upload and download of a 256 MiB file against a
//                             plain copy and a plain SHA-256 of it
//   network_bench ml          one CNN epoch on Fashion-MNIST as a train job
//                             against Debian's PyTorch (bench/pytorch_fashion.py)
//   network_bench sweep       a 24-trial sweep on 2 agents against the same
//                             trials one after another in this process
//   network_bench asha        ASHA against the full grid on the same space
//   network_bench infer       batch inference over 60,000 images in 24 shards on
//                             2 agents against one loop in this process
//   network_bench all
//
// Efficiency = (single-threaded time of the same tasks in one loop / 2) /
// time through the network. The baseline is measured in the same run.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "agent/agent.h"
#include "apps/registry.h"
#include "cli/client.h"
#include "coordinator/server.h"
#include "common/blobs.h"
#include "sandbox/sandbox.h"
#include "sandbox/task_group.h"
#include "common/crypto.h"
#include "core/job_spec.h"
#include "ml/api.h"
#include "protocol/signing.h"

namespace claw {
namespace {

class LocalNetwork {
 public:
  explicit LocalNetwork(size_t agents, size_t slots = 1, bool keep_books = true, bool timeline = true) {
    dir_ = std::filesystem::temp_directory_path() / ("claw-bench-" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    ServerOptions so;
    so.data_dir = dir_.string();
    so.grpc_port = 0;
    so.http_port = -1;
    so.enroll_tokens = agents;
    so.insecure_local = true;
    so.coordinator.scheduler.keep_books = keep_books;
    so.coordinator.task_timeline = timeline;
    server_ = std::move(CoordinatorServer::Start(so, &apps_, NullLogger()).value());
    for (size_t i = 0; i < agents; ++i) {
      AgentOptions ao;
      ao.coordinator = server_->grpc_target();
      ao.state_dir = (dir_ / ("agent" + std::to_string(i))).string();
      ao.tokens = {server_->enroll_tokens()[i]};
      ao.slots = slots;
      ao.worker_executable = CLAW_BINARY;
      ao.availability.always = true;
      agents_.push_back(std::make_unique<Agent>(ao, SystemClock::Get(), NewSystemSensors(),
                                                NullLogger()));
      threads_.emplace_back([a = agents_.back().get()] { (void)a->Run(); });
    }
    client_ = std::make_unique<Client>(server_->grpc_target());
    // Warm up: wait until every agent is connected and has run a task.
    RunJob(R"({"app":"noop","tasks":)" + std::to_string(agents * 50) + "}");
  }
  ~LocalNetwork() {
    for (auto& a : agents_) a->Stop();
    for (auto& t : threads_) t.join();
    server_->Shutdown();
    std::filesystem::remove_all(dir_);
  }
  CoordinatorMetrics Metrics() { return server_->coordinator()->Metrics(); }
  std::string Checkpoint() { return server_->coordinator()->ledger().SignedCheckpoint(); }
  Client& client() { return *client_; }
  const std::filesystem::path& dir() const { return dir_; }
  // Submits and waits; returns seconds from submit to the job's end.
  // `task_seconds`: the run time of its tasks as the workers measured it.
  double RunJob(const std::string& spec, std::string* result = nullptr,
                double* task_seconds = nullptr) {
    Stopwatch w;
    auto id = client_->Submit(spec);
    if (!id.ok()) {
      std::fprintf(stderr, "submit: %s\n", id.status().ToString().c_str());
      std::exit(1);
    }
    auto last = client_->Watch(*id, [](const v1::JobInfo&) {});
    double s = w.Seconds();
    if (!last.ok() || last->state() != "done") {
      std::fprintf(stderr, "job did not finish: %s\n",
                   last.ok() ? (last->state() + ": " + last->error()).c_str()
                             : last.status().ToString().c_str());
      std::exit(1);
    }
    if (result) *result = client_->Results(*id)->result_json();
    if (task_seconds) *task_seconds = last->task_seconds();
    return s;
  }

 private:
  std::filesystem::path dir_;
  AppRegistry apps_ = BuiltinApps();
  std::unique_ptr<CoordinatorServer> server_;
  std::vector<std::unique_ptr<Agent>> agents_;
  std::vector<std::thread> threads_;
  std::unique_ptr<Client> client_;
};

// CPU seconds used so far by this process: the coordinator and the agents
// (their worker processes are not included).
double SelfCpuSeconds() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// Runs every task of the spec one after another in this thread.
double SequentialSeconds(const std::string& spec) {
  AppRegistry apps = BuiltinApps();
  auto planned = ParseAndPlanJob(spec, apps);
  const App* app = apps.Find(planned->spec.app);
  Stopwatch w;
  for (const auto& t : planned->tasks) {
    auto out = app->Run(t.params, {});
    if (!out.ok()) std::exit(1);
  }
  return w.Seconds();
}

std::string McSpec(uint64_t tasks, uint64_t paths_per_task) {
  // One replica: these figures measure the network itself (redundancy's cost
  // is measured separately).
  return R"({"app":"montecarlo","replication":1,"tasks":)" + std::to_string(tasks) +
         R"(,"params":{"model":"european_call","paths":)" +
         std::to_string(tasks * paths_per_task) + "}}";
}

// Paths per task that make one task take about `seconds` on this machine.
uint64_t CalibratePaths(double seconds) {
  uint64_t paths = 10'000;
  double t = SequentialSeconds(McSpec(20, paths)) / 20;
  return std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(paths) * seconds / t));
}

void BenchNoop() {
  LocalNetwork net(2);
  constexpr int kTasks = 200'000;
  double best = 1e9;
  CoordinatorMetrics before = net.Metrics();
  for (int rep = 0; rep < 3; ++rep) {
    best = std::min(best, net.RunJob(R"({"app":"noop","tasks":)" + std::to_string(kTasks) + "}"));
  }
  CoordinatorMetrics after = net.Metrics();
  std::printf("noop throughput: %d tasks in %.3f s = %.0f tasks/s (best of 3)\n", kTasks, best,
              kTasks / best);
  double n = 3.0 * kTasks;
  std::printf("  per 1000 tasks: %.1f store commits, %.1f agent messages, %.1f messages to agents\n",
              1000 * (after.store_commits - before.store_commits) / n,
              1000 * (after.agent_messages - before.agent_messages) / n,
              1000 * (after.session_sends - before.session_sends) / n);
  std::vector<double> lat;
  for (int i = 0; i < 300; ++i) lat.push_back(net.RunJob(R"({"app":"noop","tasks":1})") * 1e3);
  std::sort(lat.begin(), lat.end());
  std::printf("single-task round trip (submit -> result, client view): p50 %.3f ms  p99 %.3f ms\n",
              lat[lat.size() / 2], lat[lat.size() * 99 / 100]);
  std::printf("  peers measured on this machine class (see docs/benchmarks.md): Dask 633 tasks/s, "
              "10.7 ms; Celery+Redis 558 tasks/s\n");
}

// What credit, the ledger and quotas cost the no-op path: the same jobs on
// two networks, one keeping the books and one not, run alternately.
void BenchBooks() {
  constexpr int kTasks = 200'000;
  const std::string spec = R"({"app":"noop","tasks":)" + std::to_string(kTasks) + "}";
  double best[2] = {1e9, 1e9};
  uint64_t entries = 0;
  for (int rep = 0; rep < 4; ++rep) {
    for (int k = 0; k < 2; ++k) {
      const int books = (k + rep) % 2;  // who goes first alternates too
      LocalNetwork net(2, 1, books == 1);
      best[books] = std::min(best[books], net.RunJob(spec));
      if (books == 1) {
        std::string cp = net.Checkpoint();
        entries = std::strtoull(cp.substr(cp.find('\n') + 1).c_str(), nullptr, 10);
      }
    }
  }
  std::printf("noop throughput, books off: %.0f tasks/s; books on: %.0f tasks/s (%.1f%% lower; "
              "best of 4 each, alternating who goes first; %llu ledger entries for %d tasks + warm-up)\n",
              kTasks / best[0], kTasks / best[1], 100 * (1 - best[0] / best[1]),
              static_cast<unsigned long long>(entries), kTasks);
}

// What the dashboard's per-task timeline costs the no-op path, as above.
void BenchTimeline() {
  constexpr int kTasks = 200'000;
  const std::string spec = R"({"app":"noop","tasks":)" + std::to_string(kTasks) + "}";
  double best[2] = {1e9, 1e9};
  for (int rep = 0; rep < 4; ++rep) {
    for (int k = 0; k < 2; ++k) {
      const int on = (k + rep) % 2;
      LocalNetwork net(2, 1, true, on == 1);
      best[on] = std::min(best[on], net.RunJob(spec));
    }
  }
  std::printf("noop throughput, task timeline off: %.0f tasks/s; on: %.0f tasks/s (%.1f%% lower; "
              "best of 4 each, alternating who goes first)\n",
              kTasks / best[0], kTasks / best[1], 100 * (1 - best[0] / best[1]));
}

void BenchEfficiency(double task_seconds, int tasks) {
  uint64_t paths = CalibratePaths(task_seconds);
  std::string spec = McSpec(tasks, paths);
  double seq = SequentialSeconds(spec);
  LocalNetwork net(2);
  double best = 1e9, wall = 0, best_task_s = 0;
  double cpu0 = SelfCpuSeconds();
  for (int rep = 0; rep < 3; ++rep) {
    double task_s = 0;
    double t = net.RunJob(spec, nullptr, &task_s);
    if (t < best) best = t, best_task_s = task_s;
    wall += t;
  }
  double overhead = (SelfCpuSeconds() - cpu0) / wall;
  std::printf("efficiency at %.1f ms/task: %d tasks, single-thread loop %.3f s, 2 agents %.3f s "
              "(best of 3) -> %.1f%%\n"
              "  task time measured in the workers %.3f s -> %.1f%% of the 2 cores busy in tasks\n"
              "  coordinator + agents used %.1f%% of one core\n",
              seq / tasks * 1e3, tasks, seq, best, 100.0 * (seq / 2) / best, best_task_s,
              100.0 * (best_task_s / 2) / best, 100 * overhead);
}

void BenchLarge() {
  std::string spec = McSpec(1000, 2'000'000);
  double seq = SequentialSeconds(spec);
  LocalNetwork net(2);
  std::string result;
  double task_s = 0;
  double t = net.RunJob(spec, &result, &task_s);
  std::printf("large job: 2e9 paths in 1000 tasks, single-thread loop %.2f s, 2 agents %.2f s "
              "-> %.1f%%\n  task time measured in the workers %.2f s -> %.1f%% of the 2 cores "
              "busy in tasks\n  result %s\n",
              seq, t, 100.0 * (seq / 2) / t, task_s, 100.0 * (task_s / 2) / t, result.c_str());
}

// What redundancy costs on one Monte Carlo job of ~5 ms tasks: the compute
// spent (the workers' task time, every replica counted) and the wall time,
// against the same job run once per task, all on the same network.
void BenchRedundancy() {
  uint64_t paths = CalibratePaths(0.005);
  auto spec = [&](const std::string& redundancy) {
    return R"({"app":"montecarlo","tasks":1000,)" + redundancy +
           R"(,"params":{"model":"european_call","paths":)" + std::to_string(1000 * paths) + "}}";
  };
  LocalNetwork net(2);
  double once_s = 0, once_wall = net.RunJob(spec(R"("replication":1)"), nullptr, &once_s);
  std::printf("redundancy, 1000 tasks of ~5 ms on 2 agents (compute = workers' task time):\n");
  std::printf("  replication 1            %6.2f s compute  %5.2f s wall   1.00x\n", once_s,
              once_wall);
  struct Run {
    const char* name;
    std::string redundancy;
  };
  for (const Run& r : {Run{"adaptive 2/2, new agents", R"("replication":2,"quorum":2)"},
                       Run{"adaptive 2/2, trusted   ", R"("replication":2,"quorum":2)"},
                       Run{"strict 2/2              ",
                           R"("replication":2,"quorum":2,"adaptive":false)"}}) {
    double task_s = 0, wall = net.RunJob(spec(r.redundancy), nullptr, &task_s);
    std::printf("  %s %6.2f s compute  %5.2f s wall   %.2fx compute, %.2fx wall\n", r.name,
                task_s, wall, task_s / once_s, wall / once_wall);
  }
}

// Sign + verify of one message's digest, the per-message cost of signatures
// each way, set against a no-op task's cost.
void BenchSignatures() {
  v1::AgentMessage m;
  for (int i = 0; i < 128; ++i) {
    auto* r = m.add_results();
    r->set_lease_id(1000 + i);
    r->set_output(std::string(24, 'x'));
    r->set_runtime_us(3);
  }
  KeyPair kp = GenerateSigningKey();
  constexpr int kRounds = 2000;
  Stopwatch w;
  for (int i = 0; i < kRounds; ++i) {
    SignReports("a-0123456789ab", kp.secret_key, &m);
    if (!ReportsVerify("a-0123456789ab", kp.public_key, m)) std::exit(1);
  }
  double us = w.Micros() / kRounds;
  std::printf("signatures: sign + verify of a 128-report message %.1f us (both directions: "
              "%.1f us per message pair, %.2f us per task at 128 tasks per message)\n",
              us, 2 * us, 2 * us / 128);
}

// What an idle network (connected, no jobs) costs in CPU.
void BenchIdle() {
  LocalNetwork net(2);
  double cpu0 = SelfCpuSeconds();
  Stopwatch w;
  std::this_thread::sleep_for(std::chrono::seconds(5));
  std::printf("idle: coordinator + 2 agents used %.2f%% of one core over %.1f s\n",
              100 * (SelfCpuSeconds() - cpu0) / w.Seconds(), w.Seconds());
}

}  // namespace
}  // namespace claw

namespace claw {

void BenchBlobs() {
  LocalNetwork net(1);
  namespace fs = std::filesystem;
  constexpr size_t kBytes = 256u << 20;
  fs::path src = net.dir() / "blob-src";
  {
    std::string chunk(1 << 20, '\0');
    uint64_t x = 88172645463325252ULL;
    std::FILE* f = std::fopen(src.c_str(), "wb");
    for (size_t done = 0; done < kBytes; done += chunk.size()) {
      for (size_t i = 0; i < chunk.size(); i += 8) {  // xorshift: incompressible, fast
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        std::memcpy(&chunk[i], &x, 8);
      }
      std::fwrite(chunk.data(), 1, chunk.size(), f);
    }
    std::fclose(f);
  }
  auto mbs = [&](double s) { return static_cast<double>(kBytes) / s / 1e6; };
  Stopwatch w;
  fs::copy_file(src, net.dir() / "blob-copy", fs::copy_options::overwrite_existing);
  double copy_s = w.Seconds();
  w = Stopwatch();
  Sha256 sha;
  {
    std::FILE* f = std::fopen(src.c_str(), "rb");
    std::string buf(kBlobChunkBytes, '\0');
    for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), f)) > 0;) sha.Update({buf.data(), n});
    std::fclose(f);
  }
  std::string hash = sha.FinishHex();
  double hash_s = w.Seconds();
  BlobClient blobs = net.client().Blobs();
  w = Stopwatch();
  auto up = blobs.UploadFile(src.string());
  double up_s = w.Seconds();
  if (!up.ok() || *up != hash) {
    std::fprintf(stderr, "upload failed: %s\n", up.status().ToString().c_str());
    std::exit(1);
  }
  w = Stopwatch();
  Status down = blobs.Download(hash, (net.dir() / "blob-down").string());
  double down_s = w.Seconds();
  if (!down.ok()) {
    std::fprintf(stderr, "download failed: %s\n", down.ToString().c_str());
    std::exit(1);
  }
  std::printf("blobs: 256 MiB over loopback gRPC (plaintext), every byte hashed on arrival\n");
  std::printf("  baseline: file copy %.0f MB/s, SHA-256 of it %.0f MB/s\n", mbs(copy_s), mbs(hash_s));
  std::printf("  upload   %.0f MB/s (%.2fx the copy's time; the client reads and hashes the file "
              "twice, the coordinator hashes and fsyncs)\n",
              mbs(up_s), up_s / copy_s);
  std::printf("  download %.0f MB/s (%.2fx the copy's time)\n", mbs(down_s), down_s / copy_s);
}

}  // namespace claw

namespace claw {

// Runs `command` and returns its last line of output.
std::string LastLine(const std::string& command) {
  std::string out, line;
  std::FILE* p = popen(command.c_str(), "r");
  if (!p) return "";
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) out = buf;
  pclose(p);
  return out;
}

// The BLAS that libtorch's convolutions call: the OpenMP build of OpenBLAS
// that setup selects, against Debian's reference BLAS (loaded ahead of it
// by LD_LIBRARY_PATH in the workers), on a 10,000-image epoch.
nlohmann::json UploadFashionMnist(LocalNetwork& net, const std::string& data) {
  BlobClient blobs = net.client().Blobs();
  nlohmann::json dataset;
  for (auto [key, file] : {std::pair{"train_images", "train-images-idx3-ubyte.gz"},
                           std::pair{"train_labels", "train-labels-idx1-ubyte.gz"},
                           std::pair{"test_images", "t10k-images-idx3-ubyte.gz"},
                           std::pair{"test_labels", "t10k-labels-idx1-ubyte.gz"}}) {
    dataset[key] = blobs.UploadFile(data + "/" + file).value();
  }
  return dataset;
}

void BenchBlas(const std::string& data, int threads) {
  std::string arch = LastLine("dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null");
  while (!arch.empty() && arch.back() == '\n') arch.pop_back();
  std::string reference = "/usr/lib/" + arch + "/blas";
  if (arch.empty() || !std::filesystem::exists(reference + "/libblas.so.3")) {
    std::printf("  blas: skipped (no reference BLAS to compare with)\n");
    return;
  }
  std::string active = std::filesystem::canonical("/usr/lib/" + arch + "/libblas.so.3").string();
  auto epoch_seconds = [&] {
    LocalNetwork net(1);
    nlohmann::json spec = {
        {"app", "train"},
        {"params", {{"dataset", UploadFashionMnist(net, data)}, {"model", "cnn"}, {"width", 32},
                    {"epochs", 1}, {"train_limit", 10000}, {"test_limit", 1000},
                    {"threads", threads}, {"save_model", false}}}};
    std::string result;
    net.RunJob(spec.dump(), &result);
    return nlohmann::json::parse(result)["trials"][0]["epochs"][0]["seconds"].get<double>();
  };
  double selected = epoch_seconds();
  setenv("LD_LIBRARY_PATH", reference.c_str(), 1);
  double slow = epoch_seconds();
  unsetenv("LD_LIBRARY_PATH");
  std::printf("  blas: 10,000-image epoch %.2f s with %s, %.2f s with the reference BLAS "
              "(%.2fx faster)\n", selected, active.c_str(), slow, slow / selected);
}

// The trials of a sweep spec run one after another in this process, with
// the dataset in a local blob dir: the baseline of BenchSweep.
double SequentialTrials(const nlohmann::json& spec, const std::string& data) {
  AppRegistry apps = BuiltinApps();
  BlobDir blobs((std::filesystem::temp_directory_path() / ("claw-seq-" + std::to_string(getpid())))
                    .string());
  (void)blobs.Init();
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    (void)blobs.Import(data + "/" + f, 1 << 30);
  }
  auto planned = ParseAndPlanJob(spec.dump(), apps);
  if (!planned.ok()) {
    std::fprintf(stderr, "plan: %s\n", planned.status().ToString().c_str());
    std::exit(1);
  }
  const App* sweep = apps.Find("sweep");
  Stopwatch w;
  for (const auto& t : planned->tasks) {
    if (!sweep->Run(t.params, RunContext{&blobs}).ok()) std::exit(1);
  }
  double s = w.Seconds();
  std::filesystem::remove_all(blobs.root());
  return s;
}

void BenchSweep() {
  const std::string data = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(data + "/train-images-idx3-ubyte.gz")) return;
  LocalNetwork net(2);
  nlohmann::json spec = {
      {"app", "sweep"},
      {"params",
       {{"base", {{"dataset", UploadFashionMnist(net, data)}, {"model", "mlp"}, {"epochs", 1},
                  {"save_model", false}}},
        {"space", {{"lr", {0.01, 0.05, 0.1}}, {"width", {32, 128}}, {"dropout", {0.1, 0.3}},
                   {"batch", {32, 64}}}}}}};
  double sequential = SequentialTrials(spec, data);
  std::string result;
  double task_seconds = 0;
  double wall = net.RunJob(spec.dump(), &result, &task_seconds);
  auto r = nlohmann::json::parse(result);
  std::printf("  (task time measured in the workers: %.2f s)\n", task_seconds);
  std::printf("sweep: 24 trials (MLP, 1 epoch on 60,000 images, tested on 10,000), 2 agents x 1 "
              "slot\n");
  std::printf("  one after another in one process %.2f s; through the network %.2f s\n",
              sequential, wall);
  std::printf("  parallel efficiency %.1f%% (sequential / 2 / network); best trial %s "
              "test accuracy %.4f\n",
              100.0 * sequential / 2 / wall, r["best"]["values"].dump().c_str(),
              r["best"]["metric"].get<double>());
}

void BenchAsha() {
  const std::string data = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(data + "/train-images-idx3-ubyte.gz")) return;
  LocalNetwork net(2);
  nlohmann::json base = {{"dataset", UploadFashionMnist(net, data)}, {"model", "mlp"},
                         {"train_limit", 5000}, {"test_limit", 2000}, {"batch", 64}};
  nlohmann::json space = {{"lr", {0.001, 0.01, 0.1}}, {"width", {16, 64, 256}},
                          {"dropout", {0.0, 0.3, 0.6}}};
  nlohmann::json grid_base = base;
  grid_base["epochs"] = 9;
  grid_base["save_model"] = false;
  nlohmann::json grid = {{"app", "sweep"}, {"params", {{"base", grid_base}, {"space", space}}}};
  nlohmann::json asha = {
      {"app", "sweep"},
      {"params", {{"base", base}, {"space", space}, {"method", "asha"},
                  {"asha", {{"min_epochs", 1}, {"max_epochs", 9}, {"eta", 3}}}}}};
  std::string gr, ar;
  double grid_s = net.RunJob(grid.dump(), &gr);
  double asha_s = net.RunJob(asha.dump(), &ar);
  auto g = nlohmann::json::parse(gr), a = nlohmann::json::parse(ar);
  double g_best = g["best"]["metric"], a_best = a["best"]["metric"];
  double g_epochs = g["compute"]["trial_epochs"], a_epochs = a["compute"]["trial_epochs"];
  std::printf("asha: 27 configurations (lr x width x dropout), MLP on 5,000 images, 2 agents\n");
  std::printf("  full grid, 9 epochs each  best test accuracy %.4f %s  %.0f trial-epochs  %.1f s\n",
              g_best, g["best"]["values"].dump().c_str(), g_epochs, grid_s);
  std::printf("  ASHA 1/3/9 epochs, eta 3  best test accuracy %.4f %s  %.0f trial-epochs  %.1f s "
              "(%d tasks)\n",
              a_best, a["best"]["values"].dump().c_str(), a_epochs, asha_s,
              a["compute"]["tasks"].get<int>());
  std::printf("  ASHA: %.2f points from the grid's best with %.1f%% of its compute\n",
              100 * (g_best - a_best), 100 * a_epochs / g_epochs);
}

#ifndef CLAW_WITH_TORCH
void BenchInfer() { std::printf("infer: skipped (built without libtorch)\n"); }
#else
void BenchInfer() {
  const std::string data = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(data + "/train-images-idx3-ubyte.gz")) return;
  LocalNetwork net(2);
  nlohmann::json dataset = UploadFashionMnist(net, data);
  nlohmann::json train = {{"app", "train"},
                          {"params", {{"dataset", dataset}, {"model", "cnn"}, {"width", 32},
                                      {"train_limit", 5000}, {"test_limit", 1000}}}};
  std::string trained;
  net.RunJob(train.dump(), &trained);
  std::string model = nlohmann::json::parse(trained)["trials"][0]["files"][0]["sha256"];
  // The baseline: one loop over all 60,000 training images in this process.
  std::filesystem::path local = net.dir() / "infer-local.pt";
  if (!net.client().Blobs().Download(model, local.string()).ok()) std::exit(1);
  Stopwatch w;
  auto base = ml::LoadMl().value()->predict(local.string(), data + "/train-images-idx3-ubyte.gz",
                                            data + "/train-labels-idx1-ubyte.gz", 0, 60000, 1);
  double loop_s = w.Seconds();  // includes decoding the images, as each shard's worker does
  if (!base.ok()) std::exit(1);
  nlohmann::json infer = {{"app", "infer"},
                          {"params", {{"model", model}, {"dataset", dataset}, {"split", "train"},
                                      {"shards", 24}}}};
  std::string result;
  double wall = net.RunJob(infer.dump(), &result);
  auto r = nlohmann::json::parse(result);
  std::printf("infer: the CNN (width 32) over 60,000 images, 24 shards, 2 agents x 1 slot x 1 "
              "thread\n");
  std::printf("  one loop in one process %.2f s (%.0f images/s, accuracy %.4f)\n", loop_s,
              60000 / loop_s, base->accuracy);
  std::printf("  through the network     %.2f s (%.0f images/s, accuracy %.4f)\n", wall,
              60000 / wall, r["accuracy"].get<double>());
  std::printf("  parallel efficiency %.1f%% (loop / 2 / network)\n", 100 * loop_s / 2 / wall);
}
#endif

void BenchMl() {
  const std::string data = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(data + "/train-images-idx3-ubyte.gz")) {
    std::printf("ml: skipped (no %s)\n", data.c_str());
    return;
  }
  const int threads = static_cast<int>(std::thread::hardware_concurrency());
  LocalNetwork net(1);  // one agent, one slot, `threads` torch threads
  nlohmann::json dataset = UploadFashionMnist(net, data);
  nlohmann::json spec = {{"app", "train"},
                         {"params", {{"dataset", dataset}, {"model", "cnn"}, {"width", 32},
                                     {"layers", 2}, {"batch", 64}, {"lr", 0.01}, {"epochs", 1},
                                     {"threads", threads}}}};
  std::string result;
  double wall = net.RunJob(spec.dump(), &result);
  auto trial = nlohmann::json::parse(result)["trials"][0];
  double epoch = trial["epochs"][0]["seconds"];
  double acc = trial["final"]["test_accuracy"];
  std::string base = LastLine("/usr/bin/python3 " CLAW_SOURCE_DIR
                              "/bench/pytorch_fashion.py --threads " + std::to_string(threads) +
                              " --model cnn --width 32 --layers 2 --batch 64 --lr 0.01");
  auto b = nlohmann::json::parse(base, nullptr, false);
  if (!b.is_object()) {
    std::printf("ml: the PyTorch baseline did not run (/usr/bin/python3 with python3-torch?)\n");
    return;
  }
  double py = b["seconds"];
  std::printf("ml: one epoch of the CNN (width 32, 2 conv layers, batch 64, SGD) on 60,000 "
              "Fashion-MNIST images, %d threads\n", threads);
  std::printf("  PyTorch (baseline)   %.2f s of training, test accuracy %.4f\n", py,
              b["test_accuracy"].get<double>());
  std::printf("  train job, epoch     %.2f s of training, test accuracy %.4f  ratio %.2f\n", epoch,
              acc, epoch / py);
  std::printf("  train job, end to end %.2f s (submit to result: fetch, decode, train, test, "
              "save)  ratio %.2f\n", wall, wall / py);
  BenchBlas(data, threads);
}

}  // namespace claw

namespace claw {

// What a sandboxed command costs to start and end: `true` under bubblewrap
// (namespaces, seccomp, the launcher's options in a descriptor) in a
// process-tree group and in a cgroup (limits written, entered, killed and
// waited for at the end), against a bare fork and exec of the same `true`.
void BenchSandbox() {
  namespace fs = std::filesystem;
  if (!SandboxAvailable().ok()) {
    std::printf("sandbox: not available here (%s)\n", SandboxAvailable().message().c_str());
    return;
  }
  constexpr int kRuns = 200;
  fs::path dir = fs::temp_directory_path() / ("claw-bench-sandbox-" + std::to_string(getpid()));
  fs::create_directories(dir);
  Stopwatch w;
  for (int i = 0; i < kRuns; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/true", "true", nullptr);
      _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
  }
  double bare_ms = w.Seconds() * 1000 / kRuns;
  auto run = [&](TaskGroup* group) {
    Stopwatch t;
    for (int i = 0; i < kRuns; ++i) {
      auto r = RunSandboxed({"true"}, dir.string(), SandboxLimits{}, group);
      if (!r.ok() || r->exit_code != 0) {
        std::fprintf(stderr, "sandbox run failed\n");
        std::exit(1);
      }
    }
    return t.Seconds() * 1000 / kRuns;
  };
  auto tree = OpenTaskGroup("", getpid(), GroupMode::kNone);
  double tree_ms = run(tree.get());
  std::string name = "claw-bench-" + std::to_string(getpid()) + "/slot-0";
  auto cgroup = OpenTaskGroup(name, getpid(), GroupMode::kAuto);
  double cgroup_ms = run(cgroup.get());
  std::printf("sandbox: bare fork+exec of true %.2f ms; sandboxed, process tree %.2f ms (%.1fx); "
              "sandboxed, %s %.2f ms (%.1fx); %d runs each\n",
              bare_ms, tree_ms, tree_ms / bare_ms,
              cgroup->BindsMemory() ? "in a cgroup" : "no cgroup here", cgroup_ms,
              cgroup_ms / bare_ms, kRuns);
  cgroup.reset();
  RemoveTaskGroup(name);
  fs::remove_all(dir);
}

}  // namespace claw

int main(int argc, char** argv) {
  std::string what = argc > 1 ? argv[1] : "all";
  std::printf("machine: %u hardware threads\n", std::thread::hardware_concurrency());
  if (what == "noop" || what == "all") claw::BenchNoop();
  if (what == "books" || what == "all") claw::BenchBooks();
  if (what == "timeline" || what == "all") claw::BenchTimeline();
  if (what == "efficiency" || what == "all") {
    claw::BenchEfficiency(0.010, 1000);
    claw::BenchEfficiency(0.001, 5000);
  }
  if (what == "large" || what == "all") claw::BenchLarge();
  if (what == "idle" || what == "all") claw::BenchIdle();
  if (what == "redundancy" || what == "all") claw::BenchRedundancy();
  if (what == "signatures" || what == "all") claw::BenchSignatures();
  if (what == "blobs" || what == "all") claw::BenchBlobs();
  if (what == "ml" || what == "all") claw::BenchMl();
  if (what == "sweep" || what == "all") claw::BenchSweep();
  if (what == "asha" || what == "all") claw::BenchAsha();
  if (what == "infer" || what == "all") claw::BenchInfer();
  if (what == "sandbox" || what == "all") claw::BenchSandbox();
  return 0;
}
