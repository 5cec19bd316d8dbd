"""Make docs/serve.png: the /plan page of `gpu-advisor serve` in headless Chromium, from the real server.

The server runs as its own process (`python -m advisor serve --port 0`) with an empty temporary HOME and
cache, so the page shows the bundled price sheets only, as a new user sees them. The plan is fetched
once as /plan.json first (it waits for the plan), so the screenshot finds it in the server's cache and
shows the page, not "Planning...". Chromium runs with the flags tests/reports/test_reports_browser.py uses and a
proxy that is not there, so nothing but the local server is reached.

    python scripts/serve_screenshot.py [--out docs/serve.png] [--width 1280] [--height 1500]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUERY = "model=meta-llama/Llama-3.1-8B&tokens=100M"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "serve.png")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1500)
    args = parser.parse_args()
    chromium = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
                    None)
    if chromium is None:
        print("error: chromium not found (apt-get install chromium)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_ADVISOR_", "HF_", "XDG_"))}
        env.update(HOME=home, XDG_CACHE_HOME=os.path.join(home, ".cache"), HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
        server = subprocess.Popen([sys.executable, "-m", "advisor", "serve", "--port", "0"], cwd=ROOT, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            line = server.stdout.readline()  # "Serving gpu-advisor on http://127.0.0.1:PORT/ (Ctrl-C to stop)"
            url = line.split(" on ", 1)[1].split()[0]
            urllib.request.urlopen(f"{url}plan.json?{QUERY}", timeout=600).read()  # planned once, then cached
            args.out.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run([chromium, *FLAGS, f"--user-data-dir={home}/chromium", f"--screenshot={args.out}",
                            f"--window-size={args.width},{args.height}", "--proxy-server=http://127.0.0.1:9",
                            f"{url}plan?{QUERY}"], check=True, capture_output=True, timeout=120)
        finally:
            server.terminate()
            server.wait(timeout=60)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
