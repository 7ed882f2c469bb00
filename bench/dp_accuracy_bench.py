"""Accuracy against ε for DP-FedAvg on the Fashion-MNIST CNN, with the number
of devices as a parameter (docs/privacy.md). User-level privacy needs many
devices: this machine cannot hold thousands of agents as processes, so the
population is simulated in one process — each simulated device holds an
equal shard of the training set, exactly as `fedtrain` with `shards` and
`privacy` draws them — and trained with the round driver's arithmetic:
each round draws `--per-round` devices uniformly, each runs `--local-steps`
SGD steps from the model, its delta is clipped to C, the sum gets Gaussian
noise of σ = z·C, the mean feeds server momentum. The noise multiplier z for
each target ε comes from claw's own accountant (`claw privacy noise`,
the code that counts `fedtrain`'s rounds), for the rounds and sampling rate
of the run, at δ = 1e-5.

    /usr/bin/python3 bench/dp_accuracy_bench.py --claw build/claw \
        [--populations 600 6000 60000 --per-round 100 --rounds 100]

All devices of a round train at once (functorch's vmap over their copies of
the model); one thread. Prints the final test accuracy for each population
and ε (and without DP: the same clipping, no noise).
"""
import argparse
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from functorch import grad, make_functional, vmap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_fashion import Net, idx  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
DELTA = 1e-5


def noise_for(claw, q, rounds, epsilon):
    out = subprocess.run([claw, "privacy", "noise", "--q", str(q), "--rounds", str(rounds),
                          "--delta", str(DELTA), "--epsilon", str(epsilon)],
                         capture_output=True, text=True, check=True).stdout
    return float(out.split()[2].rstrip(":"))


def accuracy(fmodel, params, tx, ty):
    with torch.no_grad():
        correct = 0
        for i in range(0, tx.shape[0], 2000):
            correct += int(fmodel(params, tx[i:i + 2000]).argmax(1).eq(ty[i:i + 2000]).sum())
    return correct / tx.shape[0]


def train(a, data, population, z, seed):
    torch.manual_seed(seed)
    tx, ty, vx, vy = data
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(tx.shape[0], generator=gen)
    per = tx.shape[0] // population
    shards_x = tx[order[:per * population]].view(population, per, 1, 28, 28)
    shards_y = ty[order[:per * population]].view(population, per)
    net = Net("cnn", 32, 2, 0.0)
    fmodel, params = make_functional(net)
    params = tuple(p.detach() for p in params)
    momentum = tuple(torch.zeros_like(p) for p in params)
    batch = min(a.batch, per)

    def loss(p, x, y):
        return F.cross_entropy(fmodel(p, x), y)

    per_device_grad = vmap(grad(loss), in_dims=(0, 0, 0))
    for r in range(a.rounds):
        chosen = torch.randperm(population, generator=gen)[:a.per_round]
        local = tuple(p.unsqueeze(0).repeat(a.per_round, *([1] * p.dim())) for p in params)
        for s in range(a.local_steps):
            pick = torch.randint(0, per, (a.per_round, batch), generator=gen)
            xb = shards_x[chosen.unsqueeze(1), pick]
            yb = shards_y[chosen.unsqueeze(1), pick]
            g = per_device_grad(local, xb, yb)
            local = tuple(lp - a.lr * gp for lp, gp in zip(local, g))
        deltas = tuple(lp - p.unsqueeze(0) for lp, p in zip(local, params))
        norms = torch.sqrt(sum(d.flatten(1).pow(2).sum(1) for d in deltas))
        scale = torch.clamp(a.clip / (norms + 1e-12), max=1.0)
        summed = tuple((d * scale.view(-1, *([1] * (d.dim() - 1)))).sum(0) for d in deltas)
        if z > 0:
            summed = tuple(s + torch.randn_like(s) * z * a.clip for s in summed)
        mean = tuple(s / a.per_round for s in summed)
        momentum = tuple(a.server_momentum * m + d for m, d in zip(momentum, mean))
        params = tuple(p + a.server_lr * m for p, m in zip(params, momentum))
    return accuracy(fmodel, params, vx, vy)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claw", default="build/claw")
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--populations", type=int, nargs="+", default=[600, 6000, 60000])
    ap.add_argument("--epsilons", type=float, nargs="+", default=[1, 3, 8])
    ap.add_argument("--per-round", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--local-steps", type=int, default=2)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--server-lr", type=float, default=1.0)
    ap.add_argument("--server-momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(1)
    data = (idx(f"{a.data}/train-images-idx3-ubyte.gz", True),
            idx(f"{a.data}/train-labels-idx1-ubyte.gz", False),
            idx(f"{a.data}/t10k-images-idx3-ubyte.gz", True),
            idx(f"{a.data}/t10k-labels-idx1-ubyte.gz", False))
    claw = os.path.abspath(a.claw)
    print(f"CNN, {a.rounds} rounds of {a.per_round} devices, {a.local_steps} local SGD steps of "
          f"{a.batch} (lr {a.lr}), clip {a.clip}, server momentum {a.server_momentum}, δ = {DELTA}")
    print(f"{'devices':>8} {'q':>7} {'epsilon':>8} {'z':>7} {'test acc':>9} {'seconds':>8}")
    for n in a.populations:
        q = a.per_round / n
        for eps in [None] + a.epsilons:
            z = 0.0 if eps is None else noise_for(claw, q, a.rounds, eps)
            t = time.time()
            acc = train(a, data, n, z, a.seed)
            print(f"{n:>8} {q:>7.4f} {'none' if eps is None else eps:>8} {z:>7.3f} {acc:>9.4f} "
                  f"{time.time() - t:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
