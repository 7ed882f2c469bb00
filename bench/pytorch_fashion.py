"""The baseline for `network_bench ml`: the train app's CNN (or MLP) trained
for one epoch with Debian's PyTorch, same data, model, batch, optimizer and
threads. Prints one JSON line: {"seconds": train time of the epoch,
"test_accuracy": ...}. Run with /usr/bin/python3 (python3-torch).

    /usr/bin/python3 bench/pytorch_fashion.py --threads 2 --model cnn --width 32
"""
import argparse
import gzip
import json
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530


def idx(path, images):
    with gzip.open(path, "rb") as f:
        data = f.read()
    header = 16 if images else 8
    arr = np.frombuffer(data, dtype=np.uint8, offset=header)
    if images:
        t = torch.from_numpy(arr.copy()).view(-1, 1, 28, 28).float().div_(255.0)
        return t.sub_(MEAN).div_(STD)
    return torch.from_numpy(arr.copy()).long()


class Net(nn.Module):
    """ml/trainer.cc's NetImpl, layer for layer."""

    def __init__(self, model, width, layers, dropout):
        super().__init__()
        self.model, self.dropout = model, dropout
        if model == "mlp":
            sizes = [28 * 28] + [width] * layers
            self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
            self.out = nn.Linear(sizes[-1], 10)
        else:
            convs, ch_in, side = [], 1, 28
            for i in range(layers):
                ch = width if i == 0 else 2 * width
                convs.append(nn.Conv2d(ch_in, ch, 3, padding=1))
                ch_in = ch
                if i < 2:
                    side //= 2
            self.convs = nn.ModuleList(convs)
            self.fc = nn.Linear(ch_in * side * side, 128)
            self.out = nn.Linear(128, 10)

    def forward(self, x):
        if self.model == "mlp":
            x = x.flatten(1)
            for fc in self.hidden:
                x = F.dropout(F.relu(fc(x)), self.dropout, self.training)
            return self.out(x)
        for i, conv in enumerate(self.convs):
            x = F.relu(conv(x))
            if i < 2:
                x = F.max_pool2d(x, 2)
        x = F.dropout(F.relu(self.fc(x.flatten(1))), self.dropout, self.training)
        return self.out(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--model", default="cnn")
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    x = idx(f"{a.data}/train-images-idx3-ubyte.gz", True)
    y = idx(f"{a.data}/train-labels-idx1-ubyte.gz", False)
    tx = idx(f"{a.data}/t10k-images-idx3-ubyte.gz", True)
    ty = idx(f"{a.data}/t10k-labels-idx1-ubyte.gz", False)
    net = Net(a.model, a.width, a.layers, a.dropout)
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=0.9)
    start = time.perf_counter()
    net.train()
    order = torch.randperm(x.shape[0])
    for at in range(0, x.shape[0], a.batch):
        idx_ = order[at:at + a.batch]
        opt.zero_grad()
        loss = F.cross_entropy(net(x[idx_]), y[idx_])
        loss.backward()
        opt.step()
    seconds = time.perf_counter() - start
    net.eval()
    with torch.no_grad():
        correct = sum(int(net(tx[i:i + 1000]).argmax(1).eq(ty[i:i + 1000]).sum())
                      for i in range(0, tx.shape[0], 1000))
    print(json.dumps({"seconds": seconds, "test_accuracy": correct / tx.shape[0]}))


if __name__ == "__main__":
    main()
