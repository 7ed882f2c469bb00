"""What the benchmarks that start claw processes share: a free loopback port
and the coordinator's /metrics as a dict."""
import socket
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(http):
    text = urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics").read().decode()
    m = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.split()
            m[k] = float(v)
    return m
