#!/usr/bin/python3
"""A mail server for the email notification test, on 127.0.0.1 (aiosmtpd).

  fake_smtp.py PORT OUT_DIR [--tls CERT KEY] [--refuse-first]

With --tls it offers STARTTLS and refuses MAIL before it (530), so a
message that arrives came over TLS; without it, it offers no STARTTLS (a
client that requires TLS must give up). --refuse-first answers the first
message's DATA with 451 (try again). Each message received is written to
OUT_DIR/<n>.json: {"from", "to", "data"}; refused ones to refused-<n>.json.
"""
import json
import os
import signal
import ssl
import sys
import threading

from aiosmtpd.controller import Controller


class Handler:
    def __init__(self, out, refuse_first):
        self.out = out
        self.refuse = refuse_first
        self.n = 0

    async def handle_DATA(self, server, session, envelope):
        self.n += 1
        record = {"from": envelope.mail_from, "to": envelope.rcpt_tos,
                  "data": envelope.content.decode("utf-8", "replace")}
        name = f"{self.n}.json"
        if self.refuse:
            self.refuse = False
            name = f"refused-{self.n}.json"
        with open(os.path.join(self.out, name + ".tmp"), "w") as f:
            json.dump(record, f)
        os.rename(os.path.join(self.out, name + ".tmp"), os.path.join(self.out, name))
        return "451 4.3.0 try again later" if name.startswith("refused") else "250 OK"


def main():
    port, out = int(sys.argv[1]), sys.argv[2]
    args = sys.argv[3:]
    kwargs = {}
    if "--tls" in args:
        i = args.index("--tls")
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(args[i + 1], args[i + 2])
        kwargs = {"tls_context": ctx, "require_starttls": True}
    controller = Controller(Handler(out, "--refuse-first" in args), hostname="127.0.0.1", port=port,
                            **kwargs)
    controller.start()
    print("ready", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    controller.stop()


if __name__ == "__main__":
    main()
