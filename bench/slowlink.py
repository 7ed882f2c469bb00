"""Training over a home link: round-based training (claw's fedtrain, DiLoCo
with int8 deltas) against PyTorch's DistributedDataParallel (Gloo), each
over a link of 20 Mbit/s and 50 ms round-trip time, and each on loopback
as its baseline, all in this one run. Needs root (network namespaces).

The link, set up and torn down here: each device is a network namespace
joined to this machine's own namespace (the coordinator's side) by a pair
of TUN interfaces; every IP packet either way passes through a relay in
this script that holds it for half the RTT, and each TUN interface's egress
is rate-limited by `tc tbf` (this kernel has no netem). So TCP itself sees
the delay and the rate: slow start, flow-control windows and ACK clocking
are those of a real link, not of a byte proxy.

  rounds  a coordinator here (TLS on, as deployed), 2 agents, each in its
          own namespace behind its own link, training on its own copy of
          the data (a local dataset: only models and deltas cross links).
          Compute utilization = the time the devices spend in their
          training loops (each round: the mean over its devices) / the
          time from submission to the last round's close. Everything else
          (the first model made on an agent and fetched whole, update
          downloads, delta uploads, the evaluation before each round, lease
          round trips, TLS) counts against it; in brackets, with the whole
          task on the device (evaluation, decoding, encoding) as compute.
          "After round 1": the rounds after the first, from its close to
          the last's (what a long training sees). One run for each H in
          --steps: a round's compute grows with H, its traffic does not.
  ddp     rank 0 here, rank 1 in a device's namespace: one link between
          them, as between a device and the coordinator. Compute
          utilization = time per step with gradient sync turned off
          (`no_sync`, the same processes) / time per step with it.

    /usr/bin/python3 bench/slowlink.py --claw build/claw
"""
import argparse
import fcntl
import heapq
import json
import os
import select
import shutil
import signal
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

DATA = "/usr/share/datasets/fashion-mnist"
HERE = os.path.dirname(os.path.abspath(__file__))
NS = "claw-slow"  # namespaces claw-slow1, claw-slow2, ...


def sh(cmd):
    subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL)


def free_port():
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


# ---- the link ---------------------------------------------------------------

def open_tun(name):
    TUNSETIFF, IFF_TUN, IFF_NO_PI = 0x400454CA, 0x0001, 0x1000
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def relay(pairs, delay):
    """Moves each packet read from one TUN to its peer `delay` seconds later."""
    peer = {}
    for a, b in pairs:
        peer[a], peer[b] = b, a
    due, seq = [], 0
    while True:
        timeout = max(0.0, due[0][0] - time.monotonic()) if due else 1.0
        ready, _, _ = select.select(list(peer), [], [], timeout)
        now = time.monotonic()
        for fd in ready:
            while True:
                try:
                    packet = os.read(fd, 65536)
                except BlockingIOError:
                    break
                heapq.heappush(due, (now + delay, seq, peer[fd], packet))
                seq += 1
        while due and due[0][0] <= time.monotonic():
            _, _, fd, packet = heapq.heappop(due)
            try:
                os.write(fd, packet)
            except OSError:
                pass  # a full queue drops the packet, as a router does


class Link:
    """Device i (1-based) lives in namespace claw-slow<i> at 10.77.<i>.2 and
    reaches this namespace at 10.77.<i>.1 over a shaped, delayed link."""

    def __init__(self, devices, mbit, rtt_ms):
        self.devices = devices
        self.cleanup()
        fds = []
        for i in range(1, devices + 1):
            ns, here, there = f"{NS}{i}", f"clawh{i}", f"clawd{i}"
            fh, fd = open_tun(here), open_tun(there)
            fds.append((fh, fd))
            sh(f"ip netns add {ns}")
            sh(f"ip link set {there} netns {ns}")
            sh(f"ip addr add 10.77.{i}.1 peer 10.77.{i}.2 dev {here}")
            sh(f"ip link set {here} up")
            sh(f"ip netns exec {ns} ip addr add 10.77.{i}.2 peer 10.77.{i}.1 dev {there}")
            sh(f"ip netns exec {ns} ip link set {there} up")
            sh(f"ip netns exec {ns} ip link set lo up")
            # The rate each way; a queue of 100 ms at that rate, like a
            # home router's.
            tbf = f"root tbf rate {mbit}mbit burst 32kbit latency 100ms"
            sh(f"tc qdisc add dev {here} {tbf}")
            sh(f"ip netns exec {ns} tc qdisc add dev {there} {tbf}")
        self.pid = os.fork()
        if self.pid == 0:
            try:
                relay(fds, rtt_ms / 2000.0)
            finally:
                os._exit(0)
        for a, b in fds:
            os.close(a)
            os.close(b)

    def prefix(self, i):
        return ["ip", "netns", "exec", f"{NS}{i}"]

    @staticmethod
    def cleanup():
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith(NS):
                subprocess.run(["ip", "netns", "del", name])

    def close(self):
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        self.cleanup()


def probe(link):
    """The link as TCP sees it: round trips of one byte, then 4 MB up and
    4 MB down."""
    port = free_port()
    srv = socket.create_server(("10.77.1.1", port))
    size = 4 << 20

    def serve():
        c, _ = srv.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(20):
            c.sendall(c.recv(1))
        got = 0
        while got < size:
            got += len(c.recv(1 << 20))
        c.sendall(b"k")
        c.sendall(b"x" * size)
        c.close()

    t = threading.Thread(target=serve)
    t.start()
    client = f"""
import socket, time, json
s = socket.create_connection(("10.77.1.1", {port}))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtts = []
for _ in range(20):
    t = time.perf_counter(); s.sendall(b"p"); s.recv(1); rtts.append(time.perf_counter() - t)
t = time.perf_counter(); s.sendall(b"x" * {size}); s.recv(1); up = time.perf_counter() - t
t = time.perf_counter(); got = 0
while got < {size}:
    got += len(s.recv(1 << 20))
down = time.perf_counter() - t
rtts.sort()
print(json.dumps({{"rtt_ms": 1e3 * rtts[len(rtts) // 2], "up_mbit": {size} * 8 / up / 1e6,
                   "down_mbit": {size} * 8 / down / 1e6}}))
"""
    out = subprocess.run(link.prefix(1) + [sys.executable, "-c", client], capture_output=True,
                         text=True, check=True).stdout
    t.join()
    srv.close()
    return json.loads(out)


# ---- round-based training ---------------------------------------------------

class Coordinator:
    def __init__(self, claw, names, debug=False):
        self.claw, self.debug = claw, debug
        self.root = tempfile.mkdtemp(prefix="claw-slowlink-")
        self.port = free_port()
        self.data = f"{self.root}/data"
        args = [claw, "coordinator", "--data", self.data, "--host", "0.0.0.0",
                "--port", str(self.port), "--http-port", "0", "--enroll-tokens", "4"]
        for n in names:
            args += ["--tls-name", n]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                     stderr=open(f"{self.root}/coordinator.log", "w"))
        for _ in range(400):
            if os.path.exists(f"{self.data}/coordinator.json"):
                break
            time.sleep(0.05)
        self.info = json.load(open(f"{self.data}/coordinator.json"))
        self.token = open(f"{self.data}/admin-token").read().strip()
        self.ca = f"{self.data}/ca.pem"
        self.env = dict(os.environ, CLAW_COORDINATOR=f"127.0.0.1:{self.port}", CLAW_CA=self.ca,
                        CLAW_TOKEN=self.token)
        self.agents = []

    def cli(self, args, **kw):
        return subprocess.run([self.claw] + args, env=self.env,
                              capture_output=True, text=True, check=True, **kw).stdout

    def start_agent(self, n, address, prefix, data):
        self.agents.append(subprocess.Popen(
            prefix + [self.claw, "agent", "--coordinator", f"{address}:{self.port}", "--ca", self.ca,
                      "--state", f"{self.root}/agent{n}", "--token-file",
                      f"{self.data}/enroll-tokens", "--slots", "1", "--always",
                      "--dataset", f"fashion={data}"],
            stdout=subprocess.DEVNULL, stderr=open(f"{self.root}/agent{n}.log", "w"),
            env=dict(os.environ, CLAW_LOG="debug" if self.debug else "info")))
        time.sleep(0.5)  # one token each, in turn

    def wait_agents(self, n):
        for _ in range(600):
            listed = json.loads(self.cli(["agents", "--json"]))
            if sum(1 for a in listed if a.get("connected")) >= n:
                return
            time.sleep(0.2)
        raise RuntimeError(f"{n} agents did not connect (see {self.root})")

    def rounds(self, job):
        http = self.info["http"].replace("0.0.0.0", "127.0.0.1")
        ctx = ssl.create_default_context(cafile=self.ca)
        req = urllib.request.Request(f"{http}/api/jobs/{job}/rounds",
                                     headers={"Authorization": f"Bearer {self.token}"})
        return json.load(urllib.request.urlopen(req, context=ctx))

    def close(self, keep=False):
        for p in self.agents + [self.proc]:
            if p.poll() is None:
                p.terminate()
        for p in self.agents + [self.proc]:
            p.wait()
        if keep:
            print(f"  logs in {self.root}", flush=True)
        else:
            shutil.rmtree(self.root, ignore_errors=True)


def run_rounds(a, link, steps):
    names = [f"10.77.{i}.1" for i in (1, 2)] if link else []
    c = Coordinator(os.path.abspath(a.claw), names, a.keep)
    try:
        for n in (1, 2):
            if link:
                c.start_agent(n, f"10.77.{n}.1", link.prefix(n), a.data)
            else:
                c.start_agent(n, "127.0.0.1", [], a.data)
        c.wait_agents(2)
        spec = {"app": "fedtrain", "seed": a.seed,
                "params": {"model": "cnn", "width": 32, "local_dataset": "fashion",
                           "rounds": a.rounds, "workers": 2, "overprovision": 1, "quorum": 1,
                           "threads": 1, "test_limit": a.test_limit,
                           "inner": {"optimizer": "adamw", "lr": 1e-3, "batch": 64,
                                     "steps": steps},
                           "outer": {"optimizer": "nesterov", "lr": 0.7, "momentum": 0.9},
                           "compression": "int8"}}
        submitted = time.time()
        job = c.cli(["submit", "-"], input=json.dumps(spec)).strip().split()[-1]
        c.cli(["results", job, "--wait"])
        result = json.loads(c.cli(["results", job, "--json"]))["result"]
        rounds = sorted((r for r in c.rounds(job)["rounds"] if r["round"] > 0),
                        key=lambda r: r["round"])
    finally:
        c.close(a.keep)
    closed = [r["finished_unix_ms"] / 1e3 - submitted for r in rounds]
    training = [statistics.mean(w["seconds"] for w in r["reporters"]) for r in rounds]
    on_device = [statistics.mean(w["task_seconds"] for w in r["reporters"]) for r in rounds]
    if a.verbose:
        for r, t in zip(rounds, closed):
            print(f"  round {r['round']}: closes at {t:.2f} s, took {r['seconds']:.2f} s; devices "
                  "(training, task) " + ", ".join(f"{w['seconds']:.2f}/{w['task_seconds']:.2f}"
                                                  for w in r["reporters"]), flush=True)
    # The whole job from submission (with its start: the first model made
    # on an agent and fetched whole by each), and its steady state: the
    # rounds after the first, from the first's close to the last's.
    return {"wall": closed[-1], "utilization": sum(training) / closed[-1],
            "task_utilization": sum(on_device) / closed[-1],
            "steady": sum(training[1:]) / (closed[-1] - closed[0]),
            "steady_task": sum(on_device[1:]) / (closed[-1] - closed[0]),
            "round_seconds": [r["seconds"] for r in rounds],
            "accuracy": result["curve"][-1]["accuracy"],
            "delta_bytes": rounds[-1]["bytes_up"] / len(rounds[-1]["reporters"]),
            "update_bytes": rounds[-1]["update_bytes"]}


# ---- DDP --------------------------------------------------------------------

def ddp_worker(rank, master, port, ifname, steps, threads, seed):
    """One DDP process; prints its seconds per step with and without the
    gradients' allreduce."""
    os.environ["GLOO_SOCKET_IFNAME"] = ifname
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    sys.path.insert(0, HERE)
    from fedtrain_bench import load  # noqa: E402
    from pytorch_fashion import Net  # noqa: E402
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"tcp://{master}:{port}", rank=rank, world_size=2)
    torch.manual_seed(seed)
    x, y, _, _ = load(DATA)
    net = torch.nn.parallel.DistributedDataParallel(Net("cnn", 32, 2, 0.2))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0)
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(x.shape[0], generator=g)

    def step(k):
        i = order[(k * 64 + rank * 32) % 59968:][:32]
        opt.zero_grad()
        F.cross_entropy(net(x[i]), y[i]).backward()
        opt.step()

    def timed(k0, sync):
        dist.barrier()
        start = time.perf_counter()
        for k in range(k0, k0 + steps):
            if sync:
                step(k)
            else:
                with net.no_sync():
                    step(k)
        dist.barrier()
        return (time.perf_counter() - start) / steps

    for k in range(3):
        step(k)  # warm-up, with sync
    alone = timed(3, False)
    synced = timed(3 + steps, True)
    if rank == 0:
        print(json.dumps({"compute_step": alone, "synced_step": synced,
                          "utilization": alone / synced}), flush=True)
    dist.destroy_process_group()


def run_ddp(a, link):
    port = free_port()
    master = "10.77.1.1" if link else "127.0.0.1"
    steps = a.ddp_steps if link else a.ddp_steps * 5
    procs = []
    for rank in (0, 1):
        prefix = link.prefix(1) if link and rank == 1 else []
        ifname = ("clawh1" if rank == 0 else "clawd1") if link else "lo"
        procs.append(subprocess.Popen(
            prefix + [sys.executable, os.path.abspath(__file__), "ddp-worker", str(rank), master,
                      str(port), ifname, str(steps), "1", str(a.seed)],
            stdout=subprocess.PIPE, text=True))
    out = procs[0].communicate()[0]
    procs[1].wait()
    if procs[0].returncode or procs[1].returncode:
        raise RuntimeError("a DDP process failed")
    return json.loads(out.strip().splitlines()[-1])


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "ddp-worker":
        r, master, port, ifname, steps, threads, seed = sys.argv[2:9]
        ddp_worker(int(r), master, int(port), ifname, int(steps), int(threads), int(seed))
        return
    p = argparse.ArgumentParser()
    p.add_argument("--claw", default="build/claw")
    p.add_argument("--data", default=DATA)
    p.add_argument("--mbit", type=float, default=20)
    p.add_argument("--rtt-ms", type=float, default=50)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", default="250,500,1000", help="inner steps H per round, each a run")
    p.add_argument("--test-limit", type=int, default=2000)
    p.add_argument("--ddp-steps", type=int, default=30, help="steps timed on the link (5x on loopback)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--only", default="rounds,ddp")
    p.add_argument("--where", default="loopback,link")
    p.add_argument("--verbose", action="store_true", help="each round's timeline")
    p.add_argument("--keep", action="store_true",
                   help="keep the coordinator's and agents' logs (agents at debug level)")
    a = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("slowlink: needs root (it makes network namespaces and TUN interfaces)")
    wheres = [w for w in ("loopback", "link") if w in a.where.split(",")]
    link = Link(2, a.mbit, a.rtt_ms)
    try:
        seen = probe(link)
        print(f"link: {a.mbit:g} Mbit/s and {a.rtt_ms:g} ms RTT asked; TCP measured "
              f"{seen['rtt_ms']:.1f} ms RTT, {seen['up_mbit']:.1f} Mbit/s up, "
              f"{seen['down_mbit']:.1f} Mbit/s down", flush=True)
        out = {"link": seen}
        if "rounds" in a.only.split(","):
            for steps in (int(x) for x in a.steps.split(",")):
                for where in wheres:
                    r = run_rounds(a, link if where == "link" else None, steps)
                    out[f"rounds-H{steps}-{where}"] = r
                    print(f"rounds H={steps:<4d} {where:8s}: {r['wall']:5.1f} s to the last close; "
                          f"utilization {100 * r['utilization']:.1f}% (tasks "
                          f"{100 * r['task_utilization']:.1f}%), after round 1 "
                          f"{100 * r['steady']:.1f}% ({100 * r['steady_task']:.1f}%); rounds "
                          + " ".join(f"{x:.1f}" for x in r["round_seconds"])
                          + f" s; delta {r['delta_bytes'] / 1e3:.0f} kB, update "
                          f"{r['update_bytes'] / 1e3:.0f} kB; accuracy {r['accuracy']:.4f}",
                          flush=True)
        if "ddp" in a.only.split(","):
            for where in wheres:
                r = run_ddp(a, link if where == "link" else None)
                out[f"ddp-{where}"] = r
                print(f"ddp              {where:8s}: {1e3 * r['synced_step']:.1f} ms a step, "
                      f"{1e3 * r['compute_step']:.1f} ms without the allreduce: "
                      f"utilization {100 * r['utilization']:.1f}%", flush=True)
        print(json.dumps(out))
    finally:
        link.close()


if __name__ == "__main__":
    main()
