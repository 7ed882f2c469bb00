"""Models and data for the user-model tests (tests/integration/script_test.cc),
made with Debian's PyTorch and numpy into the directory given:

  mlp.pt        an MLP on 28x28 uint8 images, the whole contract
  frozen.pt     the same with its first layer frozen (requires_grad False)
  no_step.pt    no training_step
  throws.pt     a training_step that raises
  escape.pt     a training_step that reads a host file and writes outside
  hog.pt        a training_step that allocates without bound
  data/         train_inputs.npy (uint8 N x 28 x 28), train_targets.npy
                (int64 N), test_inputs.npy, test_targets.npy: Fashion-MNIST
  short/        train_targets.npy with one row fewer than data/'s inputs

    /usr/bin/python3 make.py OUT_DIR FASHION_MNIST_DIR ESCAPE_TARGET
"""
import gzip
import os
import sys
from typing import Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

out, fashion, escape_target = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(f"{out}/data", exist_ok=True)
os.makedirs(f"{out}/short", exist_ok=True)


def idx(name, offset):
    return np.frombuffer(gzip.open(f"{fashion}/{name}").read(), dtype=np.uint8, offset=offset)


x = idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)[:2000]
y = idx("train-labels-idx1-ubyte.gz", 8)[:2000].astype(np.int64)
np.save(f"{out}/data/train_inputs.npy", x)
np.save(f"{out}/data/train_targets.npy", y)
np.save(f"{out}/data/test_inputs.npy", idx("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)[:500])
np.save(f"{out}/data/test_targets.npy", idx("t10k-labels-idx1-ubyte.gz", 8)[:500].astype(np.int64))
np.save(f"{out}/short/train_inputs.npy", x)
np.save(f"{out}/short/train_targets.npy", y[:-1])


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x.float().flatten(1) / 255.0)))

    @torch.jit.export
    def training_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.forward(x), y)

    @torch.jit.export
    def eval_step(self, x: torch.Tensor, y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out = self.forward(x)
        return F.cross_entropy(out, y, reduction="sum"), (out.argmax(1) == y).sum(), torch.tensor(y.shape[0])


class NoStep(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w


class Throws(Mlp):
    @torch.jit.export
    def training_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 0:
            raise RuntimeError("this model refuses to train")
        return self.forward(x).sum()


class Escape(Mlp):
    def __init__(self, target: str):
        super().__init__()
        self.target = target

    @torch.jit.export
    def training_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        torch.save(x, self.target)
        secret = torch.from_file("/etc/hostname", False, 1, dtype=torch.uint8)
        return F.cross_entropy(self.forward(x), y) + secret.float().sum() * 0


class Hog(Mlp):
    @torch.jit.export
    def training_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        keep = []
        total = torch.zeros(1)
        for i in range(1000000):
            keep.append(torch.ones(64 * 1024 * 1024, dtype=torch.uint8) * (i % 7 + 1))
            total = total + keep[-1][0].float()
        return F.cross_entropy(self.forward(x), y) + total.sum() * 0


torch.manual_seed(0)
torch.jit.script(Mlp()).save(f"{out}/mlp.pt")
frozen = Mlp()
frozen.fc1.weight.requires_grad_(False)
frozen.fc1.bias.requires_grad_(False)
torch.jit.script(frozen).save(f"{out}/frozen.pt")
torch.jit.script(NoStep()).save(f"{out}/no_step.pt")
torch.jit.script(Throws()).save(f"{out}/throws.pt")
torch.jit.script(Escape(escape_target)).save(f"{out}/escape.pt")
torch.jit.script(Hog()).save(f"{out}/hog.pt")
