"""`gpu-advisor serve` speed: a warm plan page against the index page, measured in one run.

Prints, after a line with the date, CPU count and Python version (paste the output whole, that line included):
(1) a warm `/plan` (its plan made once before timing) against `/` (the form), one request of each in turn over
    --pairs pairs on fresh connections, each pair's ratio taken: the median with its min-max (issue 51's target:
    <= 2x);
(2) requests per second with --clients concurrent clients (16), `/` and the warm `/plan` in alternating blocks of
    --requests requests each, --blocks blocks of each: the median of each, and warm `/plan` over `/` (target: at
    least 0.5).
The server is the real command (`python -m advisor serve --port 0`) in its own process, run from compiled bytecode
as an installed tool runs. `--against DIR` measures another checkout's server (an older commit) in the same run.

Run: python benchmarks/bench_serve.py [--pairs N] [--clients N] [--requests N] [--blocks N] [--against DIR]
"""

from __future__ import annotations

import argparse
import http.client
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_planner import ENV, header, spread  # noqa: E402

PLAN_QUERY = "/plan?model=meta-llama/Llama-3.1-8B&tokens=100M"


class Server:
    """`gpu-advisor serve --port 0` from `tree` (this checkout by default) in a subprocess."""

    def __init__(self, tree: str | None = None):
        code = ("import runpy, sys; " + (f"sys.path.insert(0, {tree!r}); " if tree else "")
                + "sys.argv = ['gpu-advisor', 'serve', '--port', '0']; runpy.run_module('advisor', run_name='__main__')")
        self.name = tree or "this checkout"
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        found = re.search(r"http://([\d.]+):(\d+)", line)
        if not found:
            self.close()
            raise SystemExit(f"serve did not start: {line.strip()!r}")
        self.host, self.port = found.group(1), int(found.group(2))

    def get(self, target: str) -> tuple[int, float]:
        """(status, wall seconds) of one GET on a fresh connection, the body read whole."""
        t = time.perf_counter()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=600)
        try:
            conn.request("GET", target)
            r = conn.getresponse()
            r.read()
            return r.status, time.perf_counter() - t
        finally:
            conn.close()

    def warm(self, target: str) -> None:
        """Ask until the plan is made (202 "Planning..." pages first), then once more from the cache."""
        for _ in range(1200):
            status, _ = self.get(target)
            if status == 200:
                break
            if status != 202:
                raise SystemExit(f"{target}: status {status}")
            time.sleep(0.5)
        self.get(target)

    def rate(self, target: str, clients: int, requests: int) -> float:
        """Requests per second for `requests` GETs of `target` shared by `clients` threads."""
        left = [requests]
        lock, failed = threading.Lock(), []

        def client() -> None:
            while True:
                with lock:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                status, _ = self.get(target)
                if status != 200:
                    failed.append(status)

        threads = [threading.Thread(target=client) for _ in range(clients)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.perf_counter() - t
        if failed:
            raise SystemExit(f"{target}: {len(failed)} requests failed ({sorted(set(failed))})")
        return requests / wall

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def measure(servers: list[Server], pairs: int, clients: int, requests: int, blocks: int) -> list[str]:
    for s in servers:
        s.warm(PLAN_QUERY)
        s.get("/")
    ratios: dict[str, list[float]] = {s.name: [] for s in servers}
    for _ in range(pairs):
        for s in servers:  # the servers' pairs interleaved too
            _, index = s.get("/")
            _, page = s.get(PLAN_QUERY)
            ratios[s.name].append(page / index)
    rates: dict[str, dict[str, list[float]]] = {s.name: {"/": [], "/plan": []} for s in servers}
    for _ in range(blocks):
        for s in servers:
            rates[s.name]["/"].append(s.rate("/", clients, requests))
            rates[s.name]["/plan"].append(s.rate(PLAN_QUERY, clients, requests))
    lines = []
    for s in servers:
        index, page = statistics.median(rates[s.name]["/"]), statistics.median(rates[s.name]["/plan"])
        lines += [f"[{s.name}] warm /plan / '/' per request: {spread(ratios[s.name])}; target <= 2x",
                  f"[{s.name}] {clients} clients: '/' {index:.0f} req/s, warm /plan {page:.0f} req/s (medians of "
                  f"{blocks} blocks of {requests}); /plan / '/' = {page / index:.2f}; target >= 0.5"]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=31)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=160)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--against", metavar="DIR", help="another checkout (an older commit) served in the same run")
    args = parser.parse_args()
    print(header(args.pairs).replace("bench_planner", "bench_serve").replace("interleaved runs each",
                                                                            "interleaved request pairs"))
    servers = [Server()] + ([Server(args.against)] if args.against else [])
    try:
        for line in measure(servers, args.pairs, args.clients, args.requests, args.blocks):
            print(line, flush=True)
    finally:
        for s in servers:
            s.close()


if __name__ == "__main__":
    main()
