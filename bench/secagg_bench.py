"""The cost of secure aggregation in training rounds (docs/privacy.md): round
wall time and bytes per device, with and without it, for 4, 8, 16 and 32
devices, on the Fashion-MNIST CNN with int8 deltas. Each size runs both
ways in this one run, on this machine: a coordinator and N agents (1 slot
each; several per core) on loopback, each agent with the dataset as its own
local data.

    /usr/bin/python3 bench/secagg_bench.py --claw build/claw [--devices 4 8 16 32 --steps 20]

Round time: from one round's end to the next's (the first round, which
includes each agent's first download of the model and data, is not
counted): the tasks' training and evaluation, and with secure aggregation
the protocol's three extra exchanges after the round closes.
Bytes per device and round: the coordinator's file bytes to and from agents
(/metrics: deltas up; the model or update down) plus, with secure
aggregation, the protocol's messages (keys, sealed shares, the masked
vector, revealed shares; counted by the coordinator, in each round's info).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from claw_net import free_port, metrics  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"


def run(a, n, secure):
    root = tempfile.mkdtemp(prefix="claw-secagg-bench-")
    grpc, http = free_port(), free_port()
    claw = os.path.abspath(a.claw)
    target = f"127.0.0.1:{grpc}"
    env = dict(os.environ, CLAW_COORDINATOR=target)
    procs = []
    try:
        procs.append(subprocess.Popen(
            [claw, "coordinator", "--insecure-local", "--data", f"{root}/data", "--port", str(grpc),
             "--http-port", str(http), "--enroll-tokens", str(n)],
            stdout=subprocess.DEVNULL, stderr=open(f"{root}/coordinator.log", "w")))
        for _ in range(200):
            if os.path.exists(f"{root}/data/coordinator.json"):
                break
            time.sleep(0.05)
        tokens = open(f"{root}/data/enroll-tokens").read().split()
        for i in range(n):
            procs.append(subprocess.Popen(
                [claw, "agent", "--coordinator", target, "--state", f"{root}/agent{i}",
                 "--token", tokens[i], "--slots", "1", "--always", "--dataset", f"fashion={a.data}"],
                stdout=subprocess.DEVNULL, stderr=open(f"{root}/agent{i}.log", "w")))
        for _ in range(600):
            if metrics(http).get("claw_connected_agents", 0) == n:
                break
            time.sleep(0.1)
        params = {"model": "cnn", "local_dataset": "fashion", "rounds": a.rounds, "workers": n,
                  "overprovision": 1, "quorum": 1, "threads": 1, "train_limit": a.train_limit,
                  "test_limit": a.test_limit,
                  "inner": {"optimizer": "adamw", "lr": 0.001, "batch": 32, "steps": a.steps},
                  "outer": {"optimizer": "fedavg", "lr": 1.0}, "compression": "int8"}
        if secure:
            params["secure_aggregation"] = {"step_s": 120}
        spec = {"app": "fedtrain", "seed": 3, "params": params}
        job = subprocess.run([claw, "submit", "-"], input=json.dumps(spec), text=True,
                             capture_output=True, env=env, check=True).stdout.strip().split()[-1]
        before = None
        while True:
            r = json.load(urllib.request.urlopen(f"http://127.0.0.1:{http}/api/jobs/{job}/rounds"))
            if before is None and len(r["rounds"]) >= 2:  # round 1 stored: count from here
                before = metrics(http)
            if r["job"]["state"] != "running" or len(r["rounds"]) > a.rounds:
                break
            time.sleep(0.2)
        after = metrics(http)
        rounds = r["rounds"]
        if len(rounds) <= a.rounds or r["job"]["state"] == "failed":
            raise RuntimeError(f"{n} devices, secure={secure}: {r['job']}")
        measured = rounds[2:a.rounds + 1]
        seconds = (rounds[a.rounds]["finished_unix_ms"] - rounds[1]["finished_unix_ms"]) / 1e3 / len(measured)
        files = (after["claw_blob_bytes_to_agents_total"] - before["claw_blob_bytes_to_agents_total"]
                 + after["claw_blob_bytes_from_agents_total"] - before["claw_blob_bytes_from_agents_total"])
        protocol = 0
        abandoned = 0
        for rd in measured:
            info = rd.get("info", rd)
            sa = info.get("secure_aggregation")
            if sa:
                protocol += sa["bytes_up"] + sa["bytes_down"]
            abandoned += "abandoned" in info
        per_device = (files + protocol) / n / len(measured)
        proto_s = sum((rd.get("info", rd).get("secure_aggregation") or {}).get("seconds", 0)
                      for rd in measured) / len(measured)
        acc = [rd.get("info", rd).get("eval", {}).get("accuracy") for rd in rounds]
        return {"seconds": seconds, "bytes": per_device, "protocol_s": proto_s,
                "abandoned": abandoned, "accuracy": acc[-1]}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(root, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claw", default="build/claw")
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--devices", type=int, nargs="+", default=[4, 8, 16, 32])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--train-limit", type=int, default=6000)
    ap.add_argument("--test-limit", type=int, default=2000)
    a = ap.parse_args()
    print(f"CNN, int8 deltas, {a.steps} AdamW steps of 32 a round, {a.rounds - 1} rounds measured "
          f"after the first; 1 slot per agent on {os.cpu_count()} cores")
    print(f"{'devices':>7} {'round s':>9} {'+secagg s':>9} {'ratio':>6} {'protocol s':>10} "
          f"{'KB/dev':>8} {'+secagg KB':>10} {'ratio':>6} {'abandoned':>9}")
    for n in a.devices:
        plain = run(a, n, False)
        secure = run(a, n, True)
        print(f"{n:>7} {plain['seconds']:>9.2f} {secure['seconds']:>9.2f} "
              f"{secure['seconds'] / plain['seconds']:>6.2f} {secure['protocol_s']:>10.2f} "
              f"{plain['bytes'] / 1e3:>8.1f} {secure['bytes'] / 1e3:>10.1f} "
              f"{secure['bytes'] / plain['bytes']:>6.2f} {secure['abandoned']:>9}", flush=True)


if __name__ == "__main__":
    main()
