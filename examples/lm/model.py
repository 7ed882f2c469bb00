"""A small byte-level transformer language model, as a TorchScript module
that the network trains (docs/models.md has the contract).

    /usr/bin/python3 examples/lm/model.py lm.pt [--dim 128 --layers 4 --heads 4 --block 128]

writes a fresh model (with the defaults, 0.87 million parameters). Its
inputs are rows of `block` byte tokens (a train job with -p block=128 reads
token files that way), its targets the next token of each; eval_step counts
every token (accuracy: the next byte guessed right); forward gives the
logits of the token after a row, which sample.py draws from.

    /usr/bin/python3 examples/lm/model.py lora.pt --lora 4 --base lm.pt \\
        [--trainable trained/trainable.safetensors]

writes the base (with what a train job learnt, if given) frozen, with
rank-4 LoRA adapters on each attention layer's query and value projections:
the only parameters that train and travel (8,192 of 0.88 million with the
defaults: a task sends back 32 KB where the whole model is 3.5 MB).
"""
import argparse
import math
import os
import sys
from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
from lora import add_lora  # noqa: E402
from trained import load_trainable  # noqa: E402


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        d = c // self.heads
        h = self.ln1(x)
        q = self.q(h).view(b, t, self.heads, d).transpose(1, 2)
        k = self.k(h).view(b, t, self.heads, d).transpose(1, 2)
        v = self.v(h).view(b, t, self.heads, d).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        att = att.masked_fill(causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Lm(nn.Module):
    def __init__(self, vocab: int = 256, dim: int = 128, layers: int = 4, heads: int = 4, block: int = 128):
        super().__init__()
        self.vocab, self.dim, self.layers, self.heads, self.block = vocab, dim, layers, heads, block
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(block, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def logits(self, inputs: torch.Tensor) -> torch.Tensor:
        t = inputs.shape[1]
        pos = torch.arange(t, device=inputs.device)
        x = self.tokens(inputs) + self.positions(pos)
        causal = torch.ones(t, t, dtype=torch.bool, device=inputs.device).triu(1)
        for block in self.blocks:
            x = block(x, causal)
        return self.head(self.ln(x))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """The logits of the token after each row: [rows, vocab]."""
        return self.logits(inputs[:, -self.block:])[:, -1, :]

    @torch.jit.export
    def training_step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.logits(inputs).reshape(-1, self.vocab), targets.reshape(-1))

    @torch.jit.export
    def eval_step(self, inputs: torch.Tensor, targets: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits = self.logits(inputs).reshape(-1, self.vocab)
        y = targets.reshape(-1)
        loss = F.cross_entropy(logits, y, reduction="sum")
        right = (logits.argmax(dim=1) == y).sum()
        return loss, right, torch.tensor(y.numel())


def describe(m: nn.Module) -> str:
    total = sum(p.numel() for p in m.parameters())
    trainable = sum(p.numel() for p in m.parameters() if p.requires_grad)
    return f"{trainable:,} of {total:,} parameters trainable"


def lora_of(base_path: str, rank: int, trainable: str = "") -> nn.Module:
    """The scripted base (with trained parameters, if given) as an eager Lm,
    frozen, with LoRA adapters on the attention's query and value layers."""
    scripted = torch.jit.load(base_path)
    if trainable:
        load_trainable(scripted, trainable)
    eager = Lm(scripted.vocab, scripted.dim, scripted.layers, scripted.heads, scripted.block)
    eager.load_state_dict(scripted.state_dict())
    torch.manual_seed(0)
    return add_lora(eager, rank, alpha=2.0 * rank, only={"q", "v"})


def main():
    ap = argparse.ArgumentParser(description="A byte-level transformer as TorchScript")
    ap.add_argument("out")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lora", type=int, default=0, help="rank of adapters on --base")
    ap.add_argument("--base", help="the scripted model to fine-tune with --lora")
    ap.add_argument("--trainable", default="", help="a train job's trainable.safetensors for --base")
    a = ap.parse_args()
    if a.lora:
        if not a.base:
            sys.exit("model.py: --lora needs --base")
        m = lora_of(a.base, a.lora, a.trainable)
    else:
        torch.manual_seed(a.seed)
        m = Lm(256, a.dim, a.layers, a.heads, a.block)
    torch.jit.script(m).save(a.out)
    print(f"wrote {a.out}: {describe(m)}" + (f" (LoRA rank {a.lora})" if a.lora else ""))


if __name__ == "__main__":
    main()
