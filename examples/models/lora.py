"""LoRA fine-tuning as a TorchScript module: low-rank adapters on a frozen
base's linear layers, so that a train job trains (and sends back) only the
adapters.

Each nn.Linear of the base becomes LoRALinear: the base's weight and bias
frozen (requires_grad False), plus A (rank x in) and B (out x rank) trained,
with output = base(x) + (x A^T B^T) * alpha / rank. B starts at zero, so the
module starts as exactly the base model.

    /usr/bin/python3 examples/models/lora.py BASE.pt OUT.pt [RANK]

wraps every linear layer of a scripted module (one with the contract's
methods, such as examples/models/mlp.py's) and saves the result. Its trained
parameters are the adapters alone: a job returns them in
trainable.safetensors, a few KB where the whole model is hundreds.
"""
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, rank: int = 4, alpha: float = 8.0):
        super().__init__()
        self.weight = nn.Parameter(base.weight.detach().clone(), requires_grad=False)
        self.bias = nn.Parameter(base.bias.detach().clone(), requires_grad=False) if base.bias is not None else None
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))
        self.scale = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias) + F.linear(F.linear(x, self.lora_a), self.lora_b) * self.scale


def add_lora(module: nn.Module, rank: int = 4, alpha: float = 8.0, only=None) -> nn.Module:
    """Replaces every nn.Linear inside `module` (an eager module) by a
    LoRALinear around it (with `only`, a set of names, just the layers of
    those names, e.g. {"q", "v"} for attention's query and value
    projections); freezes everything else."""
    for p in module.parameters():
        p.requires_grad_(False)
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear) and (only is None or name in only):
            setattr(module, name, LoRALinear(child, rank, alpha))
        else:
            add_lora(child, rank, alpha, only)
    return module


if __name__ == "__main__":
    # An eager copy is needed to rewrite layers: mlp.py's Mlp with the
    # scripted base's weights.
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from mlp import Mlp

    base_path, out_path = sys.argv[1], sys.argv[2]
    rank = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    scripted = torch.jit.load(base_path)
    eager = Mlp(hidden=scripted.fc1.weight.shape[0])
    eager.load_state_dict({k: v for k, v in scripted.state_dict().items()})
    torch.manual_seed(0)
    lora = add_lora(eager, rank)
    torch.jit.script(lora).save(out_path)
    trainable = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    total = sum(p.numel() for p in lora.parameters())
    print(f"wrote {out_path}: {trainable} of {total} parameters trainable (rank {rank})")
