"""Models and data for the user-model tests (tests/integration/script_test.cc),
made with Debian's PyTorch and numpy into the directory given:

  mlp.pt        the README's example (examples/models/mlp.py), the contract
  frozen.pt     the same with its first layer frozen (requires_grad False)
  lora.pt       mlp.pt with rank-4 adapters on its linear layers (examples/models/lora.py)
  no_step.pt    no training_step
  throws.pt     a training_step that raises
  escape.pt     a training_step that reads a host file and writes outside
  hog.pt        a training_step that allocates without bound
  data/         train_inputs.npy (uint8 N x 28 x 28), train_targets.npy
                (int64 N), test_inputs.npy, test_targets.npy: Fashion-MNIST
  data.npz      the same arrays as one archive (numpy.savez_compressed)
  data.safetensors  and as one safetensors file
  short/        train_targets.npy with one row fewer than data/'s inputs

    /usr/bin/python3 make.py OUT_DIR FASHION_MNIST_DIR ESCAPE_TARGET
"""
import os
import sys
from typing import Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../examples/models"))
from mlp import Mlp, write_data  # noqa: E402  the README's example model
from lora import add_lora  # noqa: E402

out, fashion, escape_target = sys.argv[1], sys.argv[2], sys.argv[3]
write_data(out, fashion, train_rows=2000, test_rows=500)
# The same arrays in one .npz archive (claw submit --data takes either).
np.savez_compressed(f"{out}/data.npz", **{k: np.load(f"{out}/data/{k}.npy") for k in
                                           ("train_inputs", "train_targets", "test_inputs", "test_targets")})
# And as one safetensors file (its format written out here: 8 bytes of header
# length, the JSON header, the tensors' bytes).
import json, struct  # noqa: E401,E402
arrays = {k: np.load(f"{out}/data/{k}.npy") for k in ("train_inputs", "train_targets", "test_inputs", "test_targets")}
header, at = {}, 0
for k, a in arrays.items():
    header[k] = {"dtype": {"uint8": "U8", "int64": "I64"}[str(a.dtype)], "shape": list(a.shape),
                 "data_offsets": [at, at + a.nbytes]}
    at += a.nbytes
h = json.dumps(header).encode()
with open(f"{out}/data.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(np.ascontiguousarray(a).tobytes() for a in arrays.values()))
os.makedirs(f"{out}/short", exist_ok=True)
np.save(f"{out}/short/train_inputs.npy", np.load(f"{out}/data/train_inputs.npy"))
np.save(f"{out}/short/train_targets.npy", np.load(f"{out}/data/train_targets.npy")[:-1])


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
torch.manual_seed(0)
torch.jit.script(add_lora(Mlp(), rank=4)).save(f"{out}/lora.pt")
torch.jit.script(NoStep()).save(f"{out}/no_step.pt")
torch.jit.script(Throws()).save(f"{out}/throws.pt")
torch.jit.script(Escape(escape_target)).save(f"{out}/escape.pt")
torch.jit.script(Hog()).save(f"{out}/hog.pt")
