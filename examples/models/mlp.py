"""Your own model for OpenClaw Compute, the way you would write it: a PyTorch
module with the two methods of the contract (docs/models.md), scripted to
TorchScript, and its data as .npy arrays.

    /usr/bin/python3 examples/models/mlp.py OUT_DIR [FASHION_MNIST_DIR]

writes OUT_DIR/mlp.pt and OUT_DIR/data/{train,test}_{inputs,targets}.npy (a
slice of Fashion-MNIST: 28x28 uint8 images, int64 labels). Then:

    claw submit --app train --script OUT_DIR/mlp.pt --data OUT_DIR/data --wait
"""
import gzip
import os
import sys
from typing import Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self, hidden: int = 64):
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The inputs arrive as the .npy file holds them: uint8 pixels here.
        return self.fc2(F.relu(self.fc1(x.float().flatten(1) / 255.0)))

    @torch.jit.export
    def training_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The batch's mean loss: what the optimizer minimizes."""
        return F.cross_entropy(self.forward(x), y)

    @torch.jit.export
    def eval_step(self, x: torch.Tensor, y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(loss summed over the batch, items right, items counted)."""
        out = self.forward(x)
        return F.cross_entropy(out, y, reduction="sum"), (out.argmax(1) == y).sum(), torch.tensor(y.shape[0])


def write_data(out, fashion, train_rows=6000, test_rows=2000):
    def idx(name, offset):
        return np.frombuffer(gzip.open(f"{fashion}/{name}").read(), dtype=np.uint8, offset=offset)

    os.makedirs(f"{out}/data", exist_ok=True)
    np.save(f"{out}/data/train_inputs.npy", idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)[:train_rows])
    np.save(f"{out}/data/train_targets.npy", idx("train-labels-idx1-ubyte.gz", 8)[:train_rows].astype(np.int64))
    np.save(f"{out}/data/test_inputs.npy", idx("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)[:test_rows])
    np.save(f"{out}/data/test_targets.npy", idx("t10k-labels-idx1-ubyte.gz", 8)[:test_rows].astype(np.int64))


if __name__ == "__main__":
    out = sys.argv[1]
    fashion = sys.argv[2] if len(sys.argv) > 2 else "/usr/share/datasets/fashion-mnist"
    write_data(out, fashion)
    torch.manual_seed(0)
    torch.jit.script(Mlp()).save(f"{out}/mlp.pt")
    print(f"wrote {out}/mlp.pt and {out}/data/")
