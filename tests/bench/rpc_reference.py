"""The reference peer of tests/bench/rpc.lua: the reference system's stdlib HTTP RPC server
(src/environment/utils/rpc_server.py, whose path the caller passes; its code is not part of seer),
driven the way its generated client calls it: a new HTTP request per call, arguments as keyword
JSON ({"fn", "args": [], "kwargs": {...}}). Prints one JSON line {p50, p99, mbps} (microseconds,
MB/s of 1 MB arguments).

How the server is started and called is set by two templates, because the reference's command
line is its own: SEER_REFERENCE_RPC_CMD (default "{python} {server} {interface} {port}") and
SEER_REFERENCE_RPC_URL (default "http://127.0.0.1:{port}/call")."""
import argparse
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

INTERFACE = '''
@expose
def ping(x):
    """Returns its argument."""
    return x

@expose
def size(data: str) -> int:
    """The length of a string."""
    return len(data)
'''


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--m", type=int, default=50)
    a = ap.parse_args()
    if not os.path.exists(a.server):
        sys.exit(f"SEER_REFERENCE_RPC={a.server}: no such file")
    d = tempfile.mkdtemp(prefix="seer-rpc-ref-")
    iface = os.path.join(d, "interface.py")
    with open(iface, "w") as f:
        f.write(INTERFACE)
    port = free_port()
    fields = {"python": sys.executable, "server": a.server, "interface": iface, "port": port, "dir": d}
    cmd = [x.format(**fields) for x in shlex.split(os.environ.get("SEER_REFERENCE_RPC_CMD", "{python} {server} {interface} {port}"))]
    url = os.environ.get("SEER_REFERENCE_RPC_URL", "http://127.0.0.1:{port}/call").format(**fields)
    log = open(os.path.join(d, "server.log"), "w+")
    proc = subprocess.Popen(cmd, cwd=d, stdout=log, stderr=subprocess.STDOUT)
    try:
        def call(fn, **kwargs):
            body = json.dumps({"fn": fn, "args": [], "kwargs": kwargs}).encode()
            req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                out = json.loads(r.read())
            if isinstance(out, dict) and out.get("ok") is False:
                raise RuntimeError(out.get("error"))
            return out
        deadline = time.time() + 60
        while True:
            if proc.poll() is not None:
                log.seek(0)
                sys.exit(f"the reference server exited ({proc.returncode}) started as {cmd}:\n{log.read()[-3000:]}"
                         "\n(set SEER_REFERENCE_RPC_CMD / SEER_REFERENCE_RPC_URL to how it is started and called)")
            try:
                call("ping", x=1)
                break
            except Exception as e:  # not up yet
                if time.time() > deadline:
                    sys.exit(f"the reference server did not answer {url} within 60 s: {e}")
                time.sleep(0.1)
        for _ in range(200):
            call("ping", x=1)
        ts = []
        for _ in range(a.n):
            t = time.perf_counter()
            call("ping", x=1)
            ts.append((time.perf_counter() - t) * 1e6)
        ts.sort()
        data = "0123456789abcdef" * 65536
        call("size", data=data)
        t = time.perf_counter()
        for _ in range(a.m):
            call("size", data=data)
        mbps = a.m * len(data) / 1e6 / (time.perf_counter() - t)
        print(json.dumps({"p50": ts[len(ts) // 2], "p99": ts[min(len(ts) - 1, int(len(ts) * 0.99))], "mbps": mbps}))
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
        subprocess.run(["rm", "-rf", d])


if __name__ == "__main__":
    main()
