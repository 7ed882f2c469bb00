"""Training in rounds under faults: liars and dropouts, on the Fashion-MNIST
CNN, a coordinator and agent processes on loopback (1 slot, 1 thread each).
Each scenario's baseline is measured in the same run.

  liars     10 agents, 2 of which lie in every round: one returns its delta
            sign-flipped, the other sign-flipped and scaled 10 times (`claw agent --misbehave`).
            Rounds take all 10 deltas. A clean run (10 honest agents, mean)
            against the liars with the plain mean, the coordinate-wise
            median and the trimmed mean (beta 0.2).
  dropouts  8 agents, one of them 3 times slower (a CPU cap: its cgroup
            may use 1/12 of a core, a third of the fair share of 8 agents on
            2 cores; where no cgroup can be made, `--misbehave slow=3`, which
            sleeps twice its task's time, and the output says so), and in
            each round 2 of the others killed with SIGKILL
            while the round runs (and started again at once, so that they
            rejoin). Rounds of 8 tasks close at 5 deltas. Against a
            fault-free run (8 honest agents, the same spec). For each round:
            its time from submission to close against the median time its
            reporting devices took for their tasks (task_seconds: model,
            data, evaluation, training, encoding, on the device).

  private   the dropouts scenario with differential privacy: each round's
            ε against `claw privacy epsilon` run on who took part.

    /usr/bin/python3 bench/fedtrain_faults.py --claw build/claw [--only liars,dropouts,private]
"""
import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from claw_net import free_port  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"


def get_json(url):
    return json.load(urllib.request.urlopen(url))


def cpu_cap(name, cores):
    """A cgroup whose processes may use at most `cores` CPUs (cgroup v1's
    cpu controller, or v2's cpu.max): the file to write a pid to, or None
    where none can be made."""
    period = 100000
    quota = max(1000, int(cores * period))
    for base, limit in (("/sys/fs/cgroup/cpu", lambda d: [("cpu.cfs_period_us", period),
                                                           ("cpu.cfs_quota_us", quota)]),
                        ("/sys/fs/cgroup", lambda d: [("cpu.max", f"{quota} {period}")])):
        try:
            if base == "/sys/fs/cgroup":
                with open(f"{base}/cgroup.subtree_control", "w") as f:
                    f.write("+cpu")
            d = f"{base}/{name}"
            os.makedirs(d, exist_ok=True)
            for file, value in limit(d):
                with open(f"{d}/{file}", "w") as f:
                    f.write(str(value))
            return f"{d}/cgroup.procs"
        except OSError:
            continue
    return None


def remove_cgroup(procs):
    if procs:
        try:
            os.rmdir(os.path.dirname(procs))
        except OSError:
            pass


class Network:
    """A coordinator and agents; agents[i] is started with extra[i] (and in
    the cgroup whose procs file is cgroups[i], if given)."""

    def __init__(self, claw, data, extra, cgroups=None):
        self.claw, self.data, self.extra = os.path.abspath(claw), data, extra
        self.cgroups = cgroups or {}
        self.root = tempfile.mkdtemp(prefix="claw-faults-")
        self.grpc, self.http = free_port(), free_port()
        self.target = f"127.0.0.1:{self.grpc}"
        self.env = dict(os.environ, CLAW_COORDINATOR=self.target)
        self.coordinator = subprocess.Popen(
            [self.claw, "coordinator", "--insecure-local", "--data", f"{self.root}/data",
             "--port", str(self.grpc), "--http-port", str(self.http),
             "--enroll-tokens", str(len(extra))],
            stdout=subprocess.DEVNULL, stderr=open(f"{self.root}/coordinator.log", "w"))
        for _ in range(200):
            if os.path.exists(f"{self.root}/data/coordinator.json"):
                break
            time.sleep(0.05)
        self.agents = [None] * len(extra)
        for i in range(len(extra)):
            self.start_agent(i)
            time.sleep(0.3)  # one token each, in turn
        self.wait_connected(len(extra))

    def start_agent(self, i):
        procs = self.cgroups.get(i)

        def enter():
            if procs:
                with open(procs, "w") as f:
                    f.write(str(os.getpid()))

        self.agents[i] = subprocess.Popen(
            [self.claw, "agent", "--coordinator", self.target, "--state", f"{self.root}/agent{i}",
             "--token-file", f"{self.root}/data/enroll-tokens", "--slots", "1", "--always",
             "--dataset", f"fashion={self.data}"] + self.extra[i],
            stdout=subprocess.DEVNULL, stderr=open(f"{self.root}/agent{i}.log", "a"),
            preexec_fn=enter)

    def kill_agent(self, i):
        self.agents[i].send_signal(signal.SIGKILL)
        self.agents[i].wait()

    def metrics(self):
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.http}/metrics").read().decode()
        return {k: float(v) for k, v in (l.split() for l in text.splitlines()
                                         if l and not l.startswith("#"))}

    def wait_connected(self, n):
        for _ in range(300):
            if self.metrics().get("claw_connected_agents", 0) >= n:
                return
            time.sleep(0.1)
        raise RuntimeError(f"{n} agents did not connect (see {self.root})")

    def submit(self, spec):
        out = subprocess.run([self.claw, "submit", "-"], input=json.dumps(spec), text=True,
                             capture_output=True, env=self.env, check=True)
        return out.stdout.strip().split()[-1]

    def rounds(self, job):
        return get_json(f"http://127.0.0.1:{self.http}/api/jobs/{job}/rounds")

    def wait(self, job):
        r = subprocess.run([self.claw, "results", job, "--json"] + ["--wait"], env=self.env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"job {job}: {r.stdout} {r.stderr} (see {self.root})")
        return json.loads(r.stdout)

    def close(self):
        for p in self.agents + [self.coordinator]:
            if p and p.poll() is None:
                p.terminate()
        for p in self.agents + [self.coordinator]:
            if p:
                p.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def spec(a, workers, overprovision, rounds, steps, rule="mean", trim=0.1):
    return {"app": "fedtrain", "seed": a.seed,
            "params": {"model": "cnn", "width": 32, "local_dataset": "fashion",
                       "rounds": rounds, "workers": workers, "overprovision": overprovision,
                       "quorum": 1, "threads": 1, "test_limit": a.test_limit,
                       "inner": {"optimizer": "adamw", "lr": 1e-3, "batch": 64, "steps": steps},
                       "outer": {"optimizer": "nesterov", "lr": 0.7, "momentum": 0.9},
                       "compression": "int8",
                       "aggregation": {"rule": rule, "trim": trim}}}


def final_accuracy(result):
    return result["result"]["curve"][-1]["accuracy"]


def liars(a):
    out = {}
    net = Network(a.claw, a.data, [[] for _ in range(10)])
    try:
        s = spec(a, 10, 1, a.rounds, a.steps)
        start = time.time()
        out["clean, mean"] = (final_accuracy(net.wait(net.submit(s))), time.time() - start)
    finally:
        net.close()
    net = Network(a.claw, a.data, [[] for _ in range(8)] + [["--misbehave", "flip"],
                                                            ["--misbehave", "scale=-10"]])
    try:
        for name, rule, trim in (("2 liars, mean", "mean", 0.1), ("2 liars, median", "median", 0.1),
                                 ("2 liars, trimmed mean 0.2", "trimmed_mean", 0.2)):
            start = time.time()
            res = net.wait(net.submit(spec(a, 10, 1, a.rounds, a.steps, rule, trim)))
            out[name] = (final_accuracy(res), time.time() - start)
    finally:
        net.close()
    clean = out["clean, mean"][0]
    for name, (acc, secs) in out.items():
        print(f"liars     {name:28s} accuracy {acc:.4f} ({100 * (acc - clean):+.2f} points "
              f"against the clean run), {secs:.0f} s", flush=True)
    return {k: {"accuracy": v[0], "seconds": v[1]} for k, v in out.items()}


def dropout_run(a, faults, extra_params=None):
    slow = 7  # the last agent
    extra = [[] for _ in range(8)]
    cgroups = {}
    if faults:
        procs = cpu_cap("claw-bench-slow", 2 / 8 / 3)
        if procs:
            cgroups[slow] = procs
        else:
            print("dropouts  no cgroup can be made here: the slow agent sleeps instead "
                  "(--misbehave slow=3)", flush=True)
            extra[slow] = ["--misbehave", "slow=3"]
    net = Network(a.claw, a.data, extra, cgroups)
    kills = []
    try:
        sp = spec(a, 5, 1.6, a.rounds, a.steps)
        sp["params"].update(extra_params or {})
        job = net.submit(sp)
        done = threading.Event()

        def killer():
            rng = random.Random(a.seed)
            seen = 0
            while not done.is_set():
                try:
                    n = len(net.rounds(job)["rounds"])  # round 0 .. the last closed
                except Exception:
                    n = 0
                if n > seen and n <= a.rounds:
                    seen = n
                    time.sleep(a.kill_after)  # round n is under way
                    victims = rng.sample(range(7), 2)
                    for i in victims:
                        net.kill_agent(i)
                    kills.append((n, victims))
                    for i in victims:
                        net.start_agent(i)
                time.sleep(0.1)

        t = threading.Thread(target=killer)
        if faults:
            t.start()
        res = net.wait(job)
        done.set()
        if faults:
            t.join()
        rounds = net.rounds(job)["rounds"]
    finally:
        net.close()
        remove_cgroup(cgroups.get(slow))
    per_round = []
    for r in rounds[1:]:
        info = r.get("info", r)
        tasks = [x.get("task_seconds", 0) for x in info.get("reporters", [])]
        median = statistics.median(tasks) if tasks else 0
        per_round.append({"round": r["round"], "seconds": info["seconds"], "median_task": median,
                          "ratio": info["seconds"] / median if median else None,
                          "reporters": len(tasks)})
    return {"accuracy": final_accuracy(res), "rounds": per_round, "kills": kills,
            "result": res["result"], "raw_rounds": rounds}


def dropouts(a):
    clean = dropout_run(a, False)
    faulty = dropout_run(a, True)
    for name, r in (("fault-free", clean), ("faults", faulty)):
        ratios = [x["ratio"] for x in r["rounds"] if x["ratio"]]
        print(f"dropouts  {name:10s} accuracy {r['accuracy']:.4f}; round time / median device "
              f"time: max {max(ratios):.2f}, median {statistics.median(ratios):.2f} over "
              f"{len(ratios)} rounds", flush=True)
        for x in r["rounds"]:
            print(f"          round {x['round']}: {x['seconds']:.1f} s, median device "
                  f"{x['median_task']:.1f} s, ratio {x['ratio'] or 0:.2f}, "
                  f"{x['reporters']} reporters", flush=True)
    print(f"dropouts  accuracy: faults - fault-free = "
          f"{100 * (faulty['accuracy'] - clean['accuracy']):+.2f} points; "
          f"killed: {faulty['kills']}", flush=True)
    return {"fault-free": clean, "faults": faulty}


def private(a):
    """Differential privacy under the dropouts above (2 of 8 agents killed in
    each round): every round closes, and the ε the coordinator reports is
    what `claw privacy epsilon` gives for the rounds each device took part
    in (a local dataset: no sampling, the worst device)."""
    z = 1.0
    r = dropout_run(a, True, {"privacy": {"clip_norm": 1.0, "noise_multiplier": z},
                              "outer": {"optimizer": "fedavg", "lr": 1.0}})
    taken = {}
    ok = True
    for rd in r["raw_rounds"][1:]:
        info = rd.get("info", rd)
        p = info.get("privacy", {})
        agents = [x["agent"] for x in info.get("reporters", [])]
        ok &= p.get("units") == len(agents) == len(set(agents))
        for ag in agents:
            taken[ag] = taken.get(ag, 0) + 1
    worst = 0.0
    for ag, k in taken.items():
        out = subprocess.run([a.claw, "privacy", "epsilon", "--q", "1", "--noise", str(z),
                              "--rounds", str(k), "--delta", "1e-5"],
                             capture_output=True, text=True, check=True).stdout
        worst = max(worst, float(out.split()[2]))
    reported = r["result"]["privacy"]["epsilon_spent"]
    print(f"private   {len(r['raw_rounds']) - 1} of {a.rounds} rounds closed with 2 of 8 agents "
          f"killed in each ({r['kills']}); rounds each device took part in: "
          f"{sorted(taken.values())}; ε reported {reported:.4f}, accountant on that participation "
          f"{worst:.4f} ({'equal' if abs(reported - worst) < 1e-3 else 'DIFFERENT'}); units = "
          f"reporters in every round: {ok}; accuracy {r['accuracy']:.4f}", flush=True)
    return {"reported": reported, "accountant": worst, "rounds": len(r["raw_rounds"]) - 1,
            "accuracy": r["accuracy"]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--claw", default="build/claw")
    p.add_argument("--data", default=DATA)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--steps", type=int, default=50, help="inner steps H per round")
    p.add_argument("--test-limit", type=int, default=5000)
    p.add_argument("--kill-after", type=float, default=1.0,
                   help="seconds into each round before its 2 agents are killed")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--only", default="liars,dropouts")
    a = p.parse_args()
    out = {}
    for name in a.only.split(","):
        out[name] = {"liars": liars, "dropouts": dropouts, "private": private}[name](a)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
