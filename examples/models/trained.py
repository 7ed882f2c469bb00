"""Puts what a train job learnt back into your module.

A train job of a TorchScript module returns trainable.safetensors: the
trained parameters alone (those with requires_grad), not the whole module,
so a frozen base never travels back. With the module file you submitted,
that is the whole trained model:

    /usr/bin/python3 examples/models/trained.py MODULE.pt trainable.safetensors OUT.pt

writes OUT.pt, the module with the trained parameters, for torch.jit.load.
From Python: load_trainable(torch.jit.load("MODULE.pt"), "trainable.safetensors").
Needs numpy and torch alone (the safetensors format is read here).
"""
import json
import struct
import sys

import numpy as np
import torch

_DTYPES = {"F32": np.float32, "F16": np.float16}


def read_safetensors(path):
    """{name: numpy array} of a safetensors file of F32 or F16 tensors."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=_DTYPES[t["dtype"]]).reshape(t["shape"])
    return out


def load_trainable(module, path):
    """Copies the file's tensors into the module's parameters of those names."""
    tensors = read_safetensors(path)
    params = dict(module.named_parameters())
    with torch.no_grad():
        for name, value in tensors.items():
            if name not in params:
                raise KeyError(f"{path}: {name} is not a parameter of this module")
            params[name].copy_(torch.from_numpy(value.copy()))
    return module


if __name__ == "__main__":
    module_path, trainable_path, out_path = sys.argv[1:4]
    m = load_trainable(torch.jit.load(module_path), trainable_path)
    m.save(out_path)
    print(f"wrote {out_path}: {module_path} with {len(read_safetensors(trainable_path))} trained tensors")
