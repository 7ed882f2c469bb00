"""Text from a trained language model of model.py.

    /usr/bin/python3 examples/lm/sample.py MODULE.pt [TRAINABLE.safetensors] \\
        [--prompt "This program is "] [--tokens 400] [--temperature 0.8] [--seed 1]

MODULE.pt is the module a job trained (lm.pt, or a LoRA module), and
TRAINABLE what the job sent back (claw results JOB --out DIR gives
DIR/trainable.safetensors; a fedtrain job, DIR/model.safetensors). Each
next byte is drawn from forward's logits over the last `block` bytes.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
from trained import load_trainable  # noqa: E402


def sample(module, prompt: bytes, tokens: int, temperature: float, seed: int) -> bytes:
    torch.manual_seed(seed)
    ids = list(prompt) or [ord("\n")]
    with torch.no_grad():
        for _ in range(tokens):
            logits = module(torch.tensor([ids[-module.block:]], dtype=torch.int64))[0]
            if temperature <= 0:
                ids.append(int(logits.argmax()))
            else:
                ids.append(int(torch.multinomial((logits / temperature).softmax(0), 1)))
    return bytes(ids)


def main():
    ap = argparse.ArgumentParser(description="Sample text from a trained model.py module")
    ap.add_argument("module")
    ap.add_argument("trainable", nargs="?", default="")
    ap.add_argument("--prompt", default="")
    ap.add_argument("--tokens", type=int, default=400)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    m = torch.jit.load(a.module)
    if a.trainable:
        load_trainable(m, a.trainable)
    m.eval()
    text = sample(m, a.prompt.encode(), a.tokens, a.temperature, a.seed)
    sys.stdout.write(text.decode("utf-8", errors="replace") + "\n")


if __name__ == "__main__":
    main()
