"""Users' own models (docs/models.md): a TorchScript module trained by a claw
`train` job against the same module trained by Debian's PyTorch in Python,
and LoRA against full fine-tuning, all in this one run on this machine.

The model is the built-in Fashion-MNIST CNN (bench/pytorch_fashion.py's Net,
width 32) with the contract's two methods; the data, the whole of
Fashion-MNIST as .npy files (uint8 images, normalized inside the module, as
a user's module would). Same batch, optimizer, learning rate and threads.

  epoch     the training loop's time for one epoch: the job's trial reports
            it (the sandboxed runner times its loop alone); PyTorch's is
            timed the same way, in an eager loop. Ratio claw / PyTorch.
  end to end  from `claw submit` (which checks the module and uploads it and
            the data) to the printed result, against a PyTorch script run
            as a process that does the same work: load the data, train one
            epoch, evaluate the test set, save the trained parameters.
            "cold": the agent has nothing cached; "warm": a second job on
            the same module and data (what a user iterating sees).
  lora      bytes a device sends back per task (the coordinator's
            /metrics: blob bytes from agents), fine-tuning the trained
            CNN whole against LoRA adapters (rank 4) on its linear layers,
            its convolutions frozen; with the test accuracy each reaches.

    /usr/bin/python3 bench/models_bench.py --claw build/claw [--threads 2]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples", "models"))
from pytorch_fashion import Net  # noqa: E402
from fedtrain_bench import free_port, metrics  # noqa: E402
from lora import add_lora  # noqa: E402
from trained import load_trainable  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"


class ScriptCnn(Net):
    """The built-in CNN, taking uint8 images as the .npy files hold them."""

    def __init__(self, width):
        super().__init__("cnn", width, 2, 0.0)

    def prep(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float().unsqueeze(1) / 255.0 - 0.2860) / 0.3530  # MEAN, STD of pytorch_fashion.py

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.prep(x)
        for i, conv in enumerate(self.convs):
            h = F.relu(conv(h))
            if i < 2:
                h = F.max_pool2d(h, 2)
        return self.out(F.relu(self.fc(h.flatten(1))))

    @torch.jit.export
    def training_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.forward(x), y)

    @torch.jit.export
    def eval_step(self, x: torch.Tensor, y: torch.Tensor):
        out = self.forward(x)
        return F.cross_entropy(out, y, reduction="sum"), (out.argmax(1) == y).sum(), torch.tensor(y.shape[0])


# The PyTorch script of "end to end": what a user would run on one machine.
PYTORCH_SCRIPT = r'''
import json, sys, time
import numpy as np, torch
sys.path.insert(0, sys.argv[1])
from models_bench import ScriptCnn
data, out, threads, batch, lr, width = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7])
torch.set_num_threads(threads)
x, y = torch.from_numpy(np.load(data + "/train_inputs.npy")), torch.from_numpy(np.load(data + "/train_targets.npy"))
tx, ty = torch.from_numpy(np.load(data + "/test_inputs.npy")), torch.from_numpy(np.load(data + "/test_targets.npy"))
torch.manual_seed(1)
net = ScriptCnn(width)
opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0)
start = time.perf_counter()
order = torch.randperm(x.shape[0])
for at in range(0, x.shape[0], batch):
    idx = order[at:at + batch]
    opt.zero_grad()
    loss = net.training_step(x[idx], y[idx])
    loss.backward()
    opt.step()
epoch = time.perf_counter() - start
net.eval()
right = 0
with torch.no_grad():
    for at in range(0, tx.shape[0], 1000):
        right += int(net(tx[at:at + 1000]).argmax(1).eq(ty[at:at + 1000]).sum())
torch.save({k: v for k, v in net.state_dict().items()}, out)
print(json.dumps({"epoch_seconds": epoch, "test_accuracy": right / tx.shape[0]}))
'''


def write_data(out, data):
    import gzip

    def idx(name, offset):
        return np.frombuffer(gzip.open(f"{data}/{name}").read(), dtype=np.uint8, offset=offset)

    os.makedirs(out, exist_ok=True)
    np.save(f"{out}/train_inputs.npy", idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28))
    np.save(f"{out}/train_targets.npy", idx("train-labels-idx1-ubyte.gz", 8).astype(np.int64))
    np.save(f"{out}/test_inputs.npy", idx("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28))
    np.save(f"{out}/test_targets.npy", idx("t10k-labels-idx1-ubyte.gz", 8).astype(np.int64))


class Network:
    """A coordinator and `agents` agents (one slot each) on loopback."""

    def __init__(self, claw, root, agents=1):
        self.claw, self.root = claw, root
        grpc, self.http = free_port(), free_port()
        self.env = dict(os.environ, CLAW_COORDINATOR=f"127.0.0.1:{grpc}")
        self.procs = [subprocess.Popen(
            [claw, "coordinator", "--insecure-local", "--data", f"{root}/data", "--port", str(grpc),
             "--http-port", str(self.http), "--enroll-tokens", str(agents)],
            stdout=subprocess.DEVNULL, stderr=open(f"{root}/coordinator.log", "w"))]
        for _ in range(200):
            if os.path.exists(f"{root}/data/coordinator.json"):
                break
            time.sleep(0.05)
        for n in range(agents):
            self.procs.append(subprocess.Popen(
                [claw, "agent", "--coordinator", f"127.0.0.1:{grpc}", "--state", f"{root}/agent{n}",
                 "--token-file", f"{root}/data/enroll-tokens", "--slots", "1", "--always"],
                stdout=subprocess.DEVNULL, stderr=open(f"{root}/agent{n}.log", "w")))
            time.sleep(0.5)  # one enrollment token each, in turn
        for _ in range(300):
            if metrics(self.http).get("claw_connected_agents", 0) == agents:
                break
            time.sleep(0.1)

    def submit(self, app, script, data, params):
        """Submits a job and waits: (wall seconds, its result, bytes from agents, job)."""
        before = metrics(self.http)["claw_blob_bytes_from_agents_total"]
        args = [self.claw, "submit", "--app", app, "--script", script, "--data", data, "--wait"]
        for k, v in params.items():
            args += ["-p", f"{k}={json.dumps(v) if isinstance(v, dict) else v}"]
        start = time.perf_counter()
        out = subprocess.run(args, env=self.env, check=True, capture_output=True, text=True).stdout
        wall = time.perf_counter() - start
        job = out[out.index("j-"):][:12]
        result = json.loads(subprocess.run([self.claw, "results", job, "--json"], env=self.env, check=True,
                                           capture_output=True, text=True).stdout)["result"]
        sent = metrics(self.http)["claw_blob_bytes_from_agents_total"] - before
        return wall, result, sent, job

    def train(self, script, data, params):
        """Submits a train job and waits: (wall seconds, its trial, bytes from agents, job)."""
        wall, result, sent, job = self.submit("train", script, data, params)
        return wall, result["trials"][0], sent, job

    def download(self, job, out):
        subprocess.run([self.claw, "results", job, "--out", out], env=self.env, check=True, capture_output=True)

    def close(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claw", required=True)
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--width", type=int, default=32)
    a = ap.parse_args()
    claw = os.path.abspath(a.claw)
    root = tempfile.mkdtemp(prefix="claw-models-bench-")
    net = None
    try:
        write_data(f"{root}/npy", a.data)
        torch.manual_seed(1)
        torch.jit.script(ScriptCnn(a.width)).save(f"{root}/cnn.pt")
        params = {"epochs": 1, "threads": a.threads, "batch": a.batch, "lr": a.lr, "optimizer": "adamw"}

        # PyTorch first, alone on the machine: as Debian ships it, and with
        # glibc's malloc keeping large blocks (what claw's ML processes do:
        # src/ml/loader.cc), so that the comparison is of the training alone.
        with open(f"{root}/pytorch_script.py", "w") as f:
            f.write(PYTORCH_SCRIPT)

        def pytorch(env):
            start = time.perf_counter()
            out = json.loads(subprocess.run(
                ["/usr/bin/python3", f"{root}/pytorch_script.py", HERE, f"{root}/npy", f"{root}/py.pt",
                 str(a.threads), str(a.batch), str(a.lr), str(a.width)],
                check=True, capture_output=True, text=True, env=dict(os.environ, **env)).stdout)
            return out, time.perf_counter() - start

        py, py_wall = pytorch({})
        pyt, pyt_wall = pytorch({"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 30)})

        net = Network(claw, root)
        cold, trial, _, job = net.train(f"{root}/cnn.pt", f"{root}/npy", params)
        warm, trial2, full_sent, _ = net.train(f"{root}/cnn.pt", f"{root}/npy", params)
        claw_epoch = min(trial["epochs"][0]["seconds"], trial2["epochs"][0]["seconds"])
        print(f"model: the built-in CNN (width {a.width}) as TorchScript, {trial['parameters']:,} parameters; "
              f"Fashion-MNIST, 60,000 rows, batch {a.batch}, AdamW, {a.threads} threads, one epoch")
        print(f"epoch: claw {claw_epoch:.2f} s (cold {trial['epochs'][0]['seconds']:.2f}, warm "
              f"{trial2['epochs'][0]['seconds']:.2f}); PyTorch {py['epoch_seconds']:.2f} s (ratio "
              f"{claw_epoch / py['epoch_seconds']:.2f}), with malloc tuned {pyt['epoch_seconds']:.2f} s "
              f"(ratio {claw_epoch / pyt['epoch_seconds']:.2f})")
        print(f"end to end: claw cold {cold:.2f} s, warm {warm:.2f} s; the PyTorch script {py_wall:.2f} s "
              f"(cold {cold / py_wall:.2f}x, warm {warm / py_wall:.2f}x), with malloc tuned {pyt_wall:.2f} s "
              f"(cold {cold / pyt_wall:.2f}x, warm {warm / pyt_wall:.2f}x)")
        print(f"test accuracy: claw {trial['final']['test_accuracy']:.4f}, PyTorch {py['test_accuracy']:.4f}, "
              f"{pyt['test_accuracy']:.4f}")

        # Fine-tuning the trained CNN: whole, and with LoRA adapters.
        net.download(job, f"{root}/trained")
        base = load_trainable(torch.jit.load(f"{root}/cnn.pt"), f"{root}/trained/trainable.safetensors")
        base.save(f"{root}/trained.pt")
        eager = ScriptCnn(a.width)
        eager.load_state_dict(base.state_dict())
        torch.manual_seed(0)
        torch.jit.script(add_lora(eager, rank=4)).save(f"{root}/lora.pt")
        ft = dict(params, lr=a.lr / 2)
        _, full, full_sent, _ = net.train(f"{root}/trained.pt", f"{root}/npy", ft)
        _, lora, lora_sent, _ = net.train(f"{root}/lora.pt", f"{root}/npy", dict(ft, lr=a.lr * 5))
        print(f"fine-tuning one more epoch: whole model {full['trainable_parameters']:,} trainable, "
              f"{full_sent / 1e3:.0f} KB sent, test accuracy {full['final']['test_accuracy']:.4f}, "
              f"{full['epochs'][0]['seconds']:.1f} s; LoRA rank 4 {lora['trainable_parameters']:,} trainable, "
              f"{lora_sent / 1e3:.0f} KB sent, test accuracy {lora['final']['test_accuracy']:.4f}, "
              f"{lora['epochs'][0]['seconds']:.1f} s: {full_sent / max(lora_sent, 1):.1f}x fewer bytes")
    finally:
        if net:
            net.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
