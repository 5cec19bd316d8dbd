"""Shared by tests in several folders (moved out of tests/reports/test_reports_browser.py, issue 44)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
                None)


FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars"]


class WebSocket:
    """Just enough RFC 6455 for CDP: client text frames (masked), server frames (unmasked)."""

    def __init__(self, url: str, timeout: float = 15.0):
        u = urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
                          .encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self.buf += self._recv()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        assert b" 101 " in head.split(b"\r\n")[0], head

    def _recv(self) -> bytes:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise EOFError("websocket closed")
        return chunk

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            self.buf += self._recv()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send(self, obj: dict) -> None:
        data, mask = json.dumps(obj).encode(), os.urandom(4)
        n = len(data)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                bytes([0x80 | 126]) + n.to_bytes(2, "big") if n < 65536 else
                                bytes([0x80 | 127]) + n.to_bytes(8, "big"))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self) -> dict:
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = int.from_bytes(self._read(2), "big")
            elif n == 127:
                n = int.from_bytes(self._read(8), "big")
            mask = self._read(4) if b1 & 0x80 else None
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            opcode = b0 & 0x0F
            if opcode == 0x8:
                raise EOFError("websocket closed by browser")
            if opcode in (0x9, 0xA):  # ping/pong: not used by CDP in practice
                continue
            message += payload
            if b0 & 0x80:
                return json.loads(message)

    def close(self) -> None:
        self.sock.close()


class DevTools:
    """One headless Chromium with its DevTools socket: `call(method, **params)` returns the result and
    keeps every event that arrives meanwhile in `events`. Used as a context manager (the browser is
    always ended)."""

    def __init__(self, profile: Path, *flags: str, window: str):
        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
                                      *flags, f"--window-size={window}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.profile, self.ws, self.events = profile, None, []
        self._ids = iter(range(1, 100_000))

    def __enter__(self) -> DevTools:
        try:
            port_file = self.profile / "DevToolsActivePort"
            deadline = time.monotonic() + 60  # a ceiling for a stuck browser, not a speed test
            while not (port_file.exists() and port_file.read_text().strip()):
                assert self.proc.poll() is None, "chromium exited before opening the debugging port"
                assert time.monotonic() < deadline, "chromium did not open its debugging port"
                time.sleep(0.05)
            port = int(port_file.read_text().split()[0])
            while True:
                try:
                    targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5))
                    page = next(t for t in targets if t["type"] == "page")
                    break
                except (OSError, StopIteration):
                    assert time.monotonic() < deadline, "no page target"
                    time.sleep(0.1)
            self.ws = WebSocket(page["webSocketDebuggerUrl"], timeout=60)
        except BaseException:
            self.__exit__()
            raise
        return self

    def call(self, method: str, **params) -> dict:
        msg_id = next(self._ids)
        self.ws.send({"id": msg_id, "method": method, "params": params})
        while True:
            msg = self.ws.recv()
            if msg.get("id") == msg_id:
                assert "error" not in msg, msg
                return msg.get("result", {})
            self.events.append(msg)

    def __exit__(self, *exc) -> None:
        if self.ws is not None:
            self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
