"""The language model example (examples/lm/): LoRA against full fine-tuning,
through the network, in one run on this machine.

A byte-level transformer (examples/lm/model.py, default size: 875,264
parameters, rows of 128 bytes) is pre-trained by a `train` job on Debian's
fortunes, then fine-tuned on the licence texts of base-files two ways, each
as a `train` job (one agent) and as round-based training (`fedtrain`, two
agents, DiLoCo on int8 deltas):

  full   every parameter trains and travels;
  LoRA   rank-4 adapters on each attention layer's query and value
         projections (8,192 parameters) train and travel; the base stays
         frozen in the module file, which each agent fetches once.

For each: the bytes a device sends (train: the coordinator's /metrics,
blob bytes from agents, i.e. the trained parameters and the optimizer state
a task uploads; rounds: the deltas, per device per round), the validation
loss reached (nats per byte on the held-out licence paragraphs; before
fine-tuning, the pre-trained model's), and the time.

    /usr/bin/python3 bench/lm_bench.py --claw build/claw [--threads 2] [--pretrain-rows N]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
LM = os.path.join(HERE, "..", "examples", "lm")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples", "models"))
from models_bench import Network  # noqa: E402
from trained import load_trainable  # noqa: E402


def example(script, *args):
    out = subprocess.run(["/usr/bin/python3", os.path.join(LM, script), *args], check=True,
                         capture_output=True, text=True).stdout
    return out.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claw", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--pretrain-rows", type=int, default=0)  # 0: every row of the fortunes, one epoch
    ap.add_argument("--test-rows", type=int, default=170)  # the licences' held-out text: 170 rows of 128
    ap.add_argument("--rank", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=25)
    a = ap.parse_args()
    claw = os.path.abspath(a.claw)
    root = tempfile.mkdtemp(prefix="claw-lm-bench-")
    net = None
    try:
        print(example("corpus.py", f"{root}/corpus"))
        print(example("model.py", f"{root}/lm.pt", "--block", str(a.block)))
        net = Network(claw, root, agents=2)
        common = {"block": a.block, "batch": a.batch, "threads": a.threads}

        wall, pre, _, job = net.train(f"{root}/lm.pt", f"{root}/corpus/pretrain",
                                      dict(common, epochs=1, lr=0.003, train_limit=a.pretrain_rows,
                                           test_limit=500))
        e = pre["epochs"][0]
        rows = a.pretrain_rows or "all"
        print(f"pre-training: {pre['parameters']:,} parameters, one epoch of {rows} rows of {a.block} bytes, "
              f"{e['seconds']:.0f} s, {wall:.0f} s end to end; "
              f"validation loss {e['test_loss']:.3f} (uniform: 5.545)")
        net.download(job, f"{root}/pretrained")
        base = load_trainable(torch.jit.load(f"{root}/lm.pt"), f"{root}/pretrained/trainable.safetensors")
        base.save(f"{root}/pretrained.pt")
        print(example("model.py", f"{root}/lora.pt", "--lora", str(a.rank), "--base", f"{root}/lm.pt",
                      "--trainable", f"{root}/pretrained/trainable.safetensors"))
        sample = example("sample.py", f"{root}/pretrained.pt", "--prompt", "The ", "--tokens", "120")
        print("pre-trained sample: " + repr(sample[:160]))

        # Before fine-tuning: the pre-trained model on the licences' held-out text
        # (a train job of one step at learning rate 1e-9 evaluates it as it was).
        _, before, _, _ = net.train(f"{root}/pretrained.pt", f"{root}/corpus/finetune",
                                    dict(common, epochs=1, lr=1e-9, train_limit=1, test_limit=a.test_rows,
                                         save_model="false"))
        print(f"before fine-tuning: validation loss {before['final']['test_loss']:.3f} on the licences")

        rows = {}
        for name, script, lr in (("full", "pretrained.pt", 0.001), (f"LoRA rank {a.rank}", "lora.pt", 0.01)):
            wall, t, sent, job = net.train(f"{root}/{script}", f"{root}/corpus/finetune",
                                           dict(common, epochs=1, lr=lr, test_limit=a.test_rows))
            rows[name] = {"train": (wall, t, sent, job)}
            print(f"train, {name}: {t['trainable_parameters']:,} trainable, sent {sent / 1e3:,.0f} KB, "
                  f"validation loss {t['final']['test_loss']:.3f}, epoch {t['epochs'][0]['seconds']:.0f} s, "
                  f"{wall:.0f} s end to end")
        for name, script, lr in (("full", "pretrained.pt", 0.001), (f"LoRA rank {a.rank}", "lora.pt", 0.01)):
            wall, r, _, job = net.submit("fedtrain", f"{root}/{script}", f"{root}/corpus/finetune",
                                         {"block": a.block, "threads": 1, "rounds": a.rounds, "workers": 2,
                                          "overprovision": 1, "test_limit": a.test_rows,
                                          "inner": {"steps": a.steps, "batch": a.batch, "lr": lr}})
            per = r["bytes"]["up"] / (a.rounds * 2)
            rows[name]["rounds"] = (wall, r, per)
            print(f"rounds, {name}: {a.rounds} rounds x 2 devices x {a.steps} steps, sent {per / 1e3:,.1f} KB "
                  f"per device per round (int8), validation loss {r['curve'][0]['loss']:.3f} -> "
                  f"{r['curve'][-1]['loss']:.3f}, {wall:.0f} s")
            if name != "full":
                net.download(job, f"{root}/tuned")
                sample = example("sample.py", f"{root}/lora.pt", f"{root}/tuned/model.safetensors",
                                 "--prompt", "The ", "--tokens", "120")
                print("fine-tuned sample: " + repr(sample[:160]))
        full, lora = rows["full"], rows[f"LoRA rank {a.rank}"]
        print(f"LoRA vs full: train {full['train'][2] / lora['train'][2]:.0f}x fewer bytes sent, rounds "
              f"{full['rounds'][2] / lora['rounds'][2]:.0f}x fewer bytes per device per round")
    finally:
        if net:
            net.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
