"""seer kernel against ipykernel, both started and driven through jupyter_client in the same run:
  - cold start: KernelManager.start_kernel() to the kernel_info_reply (no model), median of N;
  - round trip: a trivial execute ("1+1"), from sending the request to the kernel's `idle`
    status for it, p50 and p90 over M requests after a warm-up.
Prints each kernel's numbers and the ratios seer/ipykernel (targets: cold start <= 0.1x,
round-trip p50 <= 0.25x).

The client side is jupyter_client's KernelManager (launch), connection info and Session
(framing, signing); the sockets are plain pyzmq, polled directly, and received messages are
checked with Session.sign and parsed with json.loads, so the client adds as little as possible to
what is measured: Session.deserialize parses every header's dates (~0.3 ms a message on a small
VM, four messages per execute), which would measure jupyter_client more than the kernel. The
round trip through Session.deserialize is printed too. Both kernels get the same client, and the client's ZMQ
reconnect interval is 1 ms: a client connects before the kernel has bound its ports, and ZMQ's
default 100 ms reconnect interval would otherwise round every start-up up to its next retry.

Usage: /usr/bin/python3 tests/bench/kernel.py [--seer PATH] [--starts N] [--runs M]
Exits non-zero only when a kernel cannot be measured."""
import argparse
import hmac
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import zmq
from jupyter_client.manager import KernelManager

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Conn:
    """shell + iopub sockets to a started kernel, with jupyter_client's Session."""

    def __init__(self, km, ctx):
        self.km = km
        self.session = km.session
        info = km.get_connection_info()
        ip, tr = info["ip"], info["transport"]
        url = (lambda p: f"{tr}://{ip}:{p}") if tr == "tcp" else (lambda p: f"{tr}://{ip}-{p}")
        self.shell = ctx.socket(zmq.DEALER)
        self.shell.setsockopt(zmq.IDENTITY, self.session.bsession)
        self.shell.connect(url(info["shell_port"]))
        self.iopub = ctx.socket(zmq.SUB)
        self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
        self.iopub.connect(url(info["iopub_port"]))

    lean = False

    def recv(self, sock, timeout_ms):
        if not sock.poll(timeout_ms):
            raise TimeoutError("no message within %d ms" % timeout_ms)
        frames = sock.recv_multipart(copy=True)
        if not self.lean:
            _, parts = self.session.feed_identities(frames)
            return self.session.deserialize(parts, content=True)
        # Session.sign checks the signature as deserialize would; the JSON is parsed without
        # jupyter_client's date extraction.
        i = frames.index(b"<IDS|MSG>")
        sig, h, p, md, c = frames[i + 1:i + 6]
        if self.session.auth is not None and not hmac.compare_digest(sig, self.session.sign([h, p, md, c])):
            raise RuntimeError("bad signature from the kernel")
        header = json.loads(h)
        return {"header": header, "msg_type": header["msg_type"], "parent_header": json.loads(p),
                "content": json.loads(c)}

    def request(self, msg_type, content):
        msg = self.session.msg(msg_type, content)
        self.session.send(self.shell, msg)
        return msg["header"]["msg_id"]

    def wait_idle(self, msg_id, timeout_ms=10000):
        while True:
            m = self.recv(self.iopub, timeout_ms)
            if (m["msg_type"] == "status" and m["parent_header"].get("msg_id") == msg_id
                    and m["content"]["execution_state"] == "idle"):
                return

    def wait_reply(self, msg_id, timeout_ms=10000):
        while True:
            m = self.recv(self.shell, timeout_ms)
            if m["parent_header"].get("msg_id") == msg_id:
                return m

    def close(self):
        self.shell.close(0)
        self.iopub.close(0)


def start(name, ctx):
    km = KernelManager(kernel_name=name, context=ctx)
    t0 = time.perf_counter()
    km.start_kernel()
    conn = Conn(km, ctx)
    mid = conn.request("kernel_info_request", {})
    conn.wait_reply(mid, timeout_ms=60000)
    return km, conn, time.perf_counter() - t0


def stop(km, conn):
    conn.close()
    km.shutdown_kernel(now=True)


def cold_start(name, ctx, n):
    times = []
    for _ in range(n):
        km, conn, dt = start(name, ctx)
        times.append(dt)
        stop(km, conn)
    return statistics.median(times)


def round_trip(name, ctx, runs, warmup, lean):
    km, conn, _ = start(name, ctx)
    conn.lean = lean
    # The iopub subscription needs a moment after connecting; until the first status arrives
    # nothing on iopub can be relied on.
    deadline = time.monotonic() + 30
    while True:
        mid = conn.request("kernel_info_request", {})
        try:
            conn.wait_idle(mid, timeout_ms=200)
            conn.wait_reply(mid)
            break
        except TimeoutError:
            if time.monotonic() > deadline:
                raise
            conn.wait_reply(mid)
    content = {"code": "1+1", "silent": False, "store_history": True, "user_expressions": {},
               "allow_stdin": False, "stop_on_error": True}
    times = []
    for i in range(warmup + runs):
        t0 = time.perf_counter()
        mid = conn.request("execute_request", content)
        conn.wait_idle(mid)
        dt = time.perf_counter() - t0
        reply = conn.wait_reply(mid)
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"{name}: 1+1 failed: {reply['content']}")
        if i >= warmup:
            times.append(dt)
    stop(km, conn)
    times.sort()
    return times[len(times) // 2], times[int(len(times) * 0.9)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seer", default=os.environ.get("SEER") or os.path.join(ROOT, "seer"))
    ap.add_argument("--starts", type=int, default=10)
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=50)
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="seer-kbench-")
    try:
        env = dict(os.environ, SEER_LUA_DIR=os.environ.get("SEER_LUA_DIR", os.path.join(ROOT, "lua")))
        subprocess.run([args.seer, "kernel", "install", "--prefix", tmp, "--name", "seer-bench"], env=env,
                       check=True, stdout=subprocess.DEVNULL)
        os.environ["JUPYTER_PATH"] = os.path.join(tmp, "share", "jupyter") + os.pathsep + os.environ.get("JUPYTER_PATH", "")
        ctx = zmq.Context()
        ctx.setsockopt(zmq.RECONNECT_IVL, 1)
        ctx.setsockopt(zmq.LINGER, 0)
        rows = {}
        for label, name in (("seer", "seer-bench"), ("ipykernel", "python3")):
            cs = cold_start(name, ctx, args.starts)
            lean = round_trip(name, ctx, args.runs, args.warmup, True)
            full = round_trip(name, ctx, args.runs // 2, args.warmup, False)
            rows[label] = (cs, lean, full)
            print(f"  {label:<10} cold start {cs * 1000:7.1f} ms   round trip p50 {lean[0] * 1000:6.3f} ms "
                  f"p90 {lean[1] * 1000:6.3f} ms   (with Session.deserialize: p50 {full[0] * 1000:6.3f} ms "
                  f"p90 {full[1] * 1000:6.3f} ms)", flush=True)
        s, p = rows["seer"], rows["ipykernel"]
        print(f"  seer/ipykernel: cold start {s[0] / p[0]:.3f}x (target <= 0.1x), "
              f"round trip p50 {s[1][0] / p[1][0]:.3f}x (target <= 0.25x), p90 {s[1][1] / p[1][1]:.3f}x; "
              f"with Session.deserialize p50 {s[2][0] / p[2][0]:.3f}x")
        ctx.term()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
