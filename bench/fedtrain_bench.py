"""Training one model on 2 devices: round-based (claw's fedtrain, DiLoCo with
int8 deltas) against per-step synchronous training (PyTorch's
DistributedDataParallel with Gloo, 2 processes) and a single process, on
the Fashion-MNIST CNN with the same samples, batch, inner optimizer and
threads. All three run in this one run, on this machine, on loopback.

Prints, for each: final test accuracy, seconds to 85% and 88% test
accuracy, wall seconds, and bytes sent + received per worker (DDP: counted,
the gradient allreduce of every step; fedtrain: measured, the coordinator's
file bytes to and from agents, /metrics), then the byte ratio.

    /usr/bin/python3 bench/fedtrain_bench.py --claw build/claw [--rounds 4 --steps 500]

Timing: the PyTorch runs count training time only (their evaluations,
every --eval-steps steps, are not counted); fedtrain counts wall time from
submission, with its evaluations (each round's tasks evaluate the model
before training) and every round trip included.
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

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from claw_net import free_port, metrics  # noqa: E402
from pytorch_fashion import Net, idx  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
TARGETS = (0.85, 0.88)


def load(data):
    return (idx(f"{data}/train-images-idx3-ubyte.gz", True),
            idx(f"{data}/train-labels-idx1-ubyte.gz", False),
            idx(f"{data}/t10k-images-idx3-ubyte.gz", True),
            idx(f"{data}/t10k-labels-idx1-ubyte.gz", False))


def accuracy(net, tx, ty):
    net.eval()
    with torch.no_grad():
        correct = sum(int(net(tx[i:i + 1000]).argmax(1).eq(ty[i:i + 1000]).sum())
                      for i in range(0, tx.shape[0], 1000))
    net.train()
    return correct / tx.shape[0]


def reached(curve):
    """Seconds at which each target accuracy was first reached (None: never)."""
    out = {}
    for target in TARGETS:
        out[f"{target:.2f}"] = next((s for s, acc in curve if acc >= target), None)
    return out


def run_single(a, data):
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    x, y, tx, ty = data
    net = Net("cnn", a.width, 2, 0.2)
    opt = torch.optim.AdamW(net.parameters(), lr=a.lr, weight_decay=0)
    g = torch.Generator().manual_seed(a.seed)
    order, at, trained, curve = torch.randperm(x.shape[0], generator=g), 0, 0.0, []
    steps = a.rounds * 2 * a.steps
    for step in range(1, steps + 1):
        start = time.perf_counter()
        if at + a.batch > x.shape[0]:
            order, at = torch.randperm(x.shape[0], generator=g), 0
        i = order[at:at + a.batch]
        at += a.batch
        opt.zero_grad()
        F.cross_entropy(net(x[i]), y[i]).backward()
        opt.step()
        trained += time.perf_counter() - start
        if step % a.eval_steps == 0 or step == steps:
            curve.append((trained, accuracy(net, tx, ty)))
    return {"accuracy": curve[-1][1], "seconds": trained, "to": reached(curve),
            "samples": steps * a.batch, "curve": curve}


def ddp_worker(rank, a, port, out):
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.manual_seed(a.seed)  # the same initial weights on both
    x, y, tx, ty = load(a.data)
    net = torch.nn.parallel.DistributedDataParallel(Net("cnn", a.width, 2, 0.2))
    opt = torch.optim.AdamW(net.parameters(), lr=a.lr, weight_decay=0)
    g = torch.Generator().manual_seed(a.seed)
    half = a.batch // 2
    order, at, trained, curve = torch.randperm(x.shape[0], generator=g), 0, 0.0, []
    steps = a.rounds * 2 * a.steps
    dist.barrier()
    for step in range(1, steps + 1):
        start = time.perf_counter()
        if at + a.batch > x.shape[0]:
            order, at = torch.randperm(x.shape[0], generator=g), 0
        # Each rank takes its half of the global batch of the same permutation.
        i = order[at + rank * half:at + (rank + 1) * half]
        at += a.batch
        opt.zero_grad()
        F.cross_entropy(net(x[i]), y[i]).backward()  # the gradients' allreduce
        opt.step()
        trained += time.perf_counter() - start
        if step % a.eval_steps == 0 or step == steps:
            dist.barrier()
            if rank == 0:
                curve.append((trained, accuracy(net.module, tx, ty)))
            dist.barrier()
    if rank == 0:
        params = sum(p.numel() for p in net.parameters())
        out.put({"accuracy": curve[-1][1], "seconds": trained, "to": reached(curve),
                 "samples": steps * a.batch, "parameters": params,
                 # Ring allreduce of 4·P bytes with 2 ranks: each sends 4·P·(n−1)/n
                 # twice (reduce-scatter, all-gather) and receives as much.
                 "bytes_per_worker": steps * 2 * 2 * 4 * params * (2 - 1) // 2,
                 "curve": curve})
    dist.destroy_process_group()


def run_ddp(a):
    port = free_port()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=ddp_worker, args=(r, a, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    result = out.get()
    for p in procs:
        p.join()
    return result


def run_fedtrain(a):
    root = tempfile.mkdtemp(prefix="claw-fedbench-")
    grpc, http = free_port(), free_port()
    claw = os.path.abspath(a.claw)
    target = f"127.0.0.1:{grpc}"
    env = dict(os.environ, CLAW_COORDINATOR=target)
    procs = []
    try:
        procs.append(subprocess.Popen(
            [claw, "coordinator", "--insecure-local", "--data", f"{root}/data", "--port", str(grpc),
             "--http-port", str(http), "--enroll-tokens", "2"],
            stdout=subprocess.DEVNULL, stderr=open(f"{root}/coordinator.log", "w")))
        for _ in range(200):
            if os.path.exists(f"{root}/data/coordinator.json"):
                break
            time.sleep(0.05)
        for n in range(2):
            procs.append(subprocess.Popen(
                [claw, "agent", "--coordinator", target, "--state", f"{root}/agent{n}",
                 "--token-file", f"{root}/data/enroll-tokens", "--slots", "1", "--always",
                 "--dataset", f"fashion={a.data}"],
                stdout=subprocess.DEVNULL, stderr=open(f"{root}/agent{n}.log", "w")))
            time.sleep(0.5)  # one token each, in turn
        for _ in range(200):
            if metrics(http).get("claw_connected_agents", 0) == 2:
                break
            time.sleep(0.1)
        before = metrics(http)
        spec = {"app": "fedtrain", "seed": a.seed,
                "params": {"model": "cnn", "width": a.width, "local_dataset": "fashion",
                           "rounds": a.rounds, "workers": 2, "overprovision": 1, "quorum": 1,
                           "threads": a.threads,
                           "inner": {"optimizer": "adamw", "lr": a.lr, "batch": a.batch,
                                     "steps": a.steps},
                           "outer": {"optimizer": a.outer, "lr": a.outer_lr, "momentum": 0.9},
                           "compression": "int8"}}
        submitted = time.time()
        job = subprocess.run([claw, "submit", "-"], input=json.dumps(spec), text=True,
                             capture_output=True, env=env, check=True).stdout.strip().split()[-1]
        subprocess.run([claw, "results", job, "--wait"], env=env, check=True,
                       capture_output=True)
        wall = time.time() - submitted
        after = metrics(http)
        rounds = json.load(urllib.request.urlopen(f"http://127.0.0.1:{http}/api/jobs/{job}/rounds"))
        result = json.loads(subprocess.run([claw, "results", job, "--json"], env=env, check=True,
                                           capture_output=True, text=True).stdout)["result"]
        created = rounds["job"]["created_unix_ms"] / 1e3
        done_at = {r["round"]: r["finished_unix_ms"] / 1e3 - created for r in rounds["rounds"]}
        curve = [(done_at.get(p["round"], wall), p["accuracy"]) for p in result["curve"]]
        moved = (after["claw_blob_bytes_to_agents_total"] - before["claw_blob_bytes_to_agents_total"]
                 + after["claw_blob_bytes_from_agents_total"]
                 - before["claw_blob_bytes_from_agents_total"])
        return {"accuracy": result["curve"][-1]["accuracy"], "seconds": wall, "to": reached(curve),
                "samples": a.rounds * 2 * a.steps * a.batch, "bytes_per_worker": moved / 2,
                "model_bytes": result["bytes"]["model"], "curve": curve}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
        shutil.rmtree(root, ignore_errors=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--claw", default="build/claw")
    p.add_argument("--data", default=DATA)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", type=int, default=500, help="inner steps H per round")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--outer", default="nesterov")
    p.add_argument("--outer-lr", type=float, default=0.7)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval-steps", type=int, default=500)
    p.add_argument("--only", default="single,ddp,fedtrain")
    a = p.parse_args()
    runs = {}
    for name in a.only.split(","):
        start = time.time()
        runs[name] = {"single": lambda: run_single(a, load(a.data)), "ddp": lambda: run_ddp(a),
                      "fedtrain": lambda: run_fedtrain(a)}[name]()
        runs[name]["wall"] = time.time() - start
        r = runs[name]
        to = ", ".join(f"{k}: {'%.1f s' % v if v is not None else 'never'}" for k, v in r["to"].items())
        moved = f", {r['bytes_per_worker'] / 1e6:.2f} MB per worker" if "bytes_per_worker" in r else ""
        print(f"{name:9s} accuracy {r['accuracy']:.4f} after {r['samples']} samples; "
              f"time to {to}; {r['seconds']:.1f} s{moved}", flush=True)
    if "ddp" in runs and "fedtrain" in runs:
        ratio = runs["ddp"]["bytes_per_worker"] / runs["fedtrain"]["bytes_per_worker"]
        print(f"bytes per worker: DDP / fedtrain = {ratio:.0f}x", flush=True)
    if "single" in runs and "fedtrain" in runs:
        print(f"accuracy: fedtrain - single = {100 * (runs['fedtrain']['accuracy'] - runs['single']['accuracy']):+.2f} points",
              flush=True)
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "curve"} for k, v in runs.items()}))


if __name__ == "__main__":
    main()
