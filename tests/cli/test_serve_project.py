"""`gpu-advisor serve`'s /project: the ledger read-only, on loopback as it is; beyond loopback only with the
server's token, which a request must send (Authorization: Bearer)."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from helpers.serve_helpers import serving

from advisor.ledger.store import open_ledger
from cli.serve_ledger import LedgerView

TOKEN = "s3cret-token-of-a-team-0001"


def _ledger(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    book = open_ledger(url)
    book.add_approval({"digest": "sha256:aa", "project": "llama<b>sft</b>", "plan_digest": "sha256:p",
                       "candidate": "runpod 8x H100", "approved_by": "Ana", "approved_at": "2026-12-01T00:00:00+00:00",
                       "price_hour": 20.0, "price_source": "s", "price_date": "2026-11-30", "cap_usd": 400.0,
                       "cap_hours": 20.0, "estimate_usd": 300.0, "estimate_hours": 15.0, "estimate_p50_usd": 280.0,
                       "estimate_p90_usd": 390.0})
    book.add_run({"approval": "sha256:aa", "run": "run-1", "observed_at": "2026-12-02T00:00:00", "observer": "t",
                  "status": "running or killed", "hours": 5.0, "cost_usd": 100.0, "steps": 50, "max_steps": 150,
                  "tokens_per_sec": 9000.0})
    return url


def test_the_project_page_shows_the_ledger_escaped_on_loopback(tmp_path):
    url = _ledger(tmp_path)
    with serving() as s:
        s.app.ledger = LedgerView(url, loopback=True)
        with urllib.request.urlopen(s.url + "/project") as r:
            page = r.read().decode()
    assert r.status == 200 and "run-1" in page and "$400.00" in page and "$100.00" in page
    assert "llama&lt;b&gt;sft&lt;/b&gt;" in page and "<b>sft" not in page  # text from the ledger stays text
    assert "$200.00 / $278.57" in page  # what remains: 100 steps at $2 each, times the plan's p90/p50


def test_beyond_loopback_the_ledger_needs_the_servers_token(tmp_path):
    url = _ledger(tmp_path)
    with serving() as s:
        s.app.ledger = LedgerView(url, loopback=False)  # a server bound beyond loopback without --token
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(s.url + "/project")
        assert refused.value.code == 403
        s.app.ledger = LedgerView(url, loopback=False, token=TOKEN)
        for header in (None, "Bearer wrong-token-of-the-same-len", f"Basic {TOKEN}x"):
            request = urllib.request.Request(s.url + "/project", headers={"Authorization": header} if header else {})
            with pytest.raises(urllib.error.HTTPError) as denied:
                urllib.request.urlopen(request)
            assert denied.value.code == 401
        ok = urllib.request.Request(s.url + "/project", headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(ok) as r:
            assert r.status == 200 and "run-1" in r.read().decode()


def test_a_short_token_is_refused_at_start(capsys):
    from helpers.cli_run import gpu_advisor, one_line_error

    assert "--token" in one_line_error(*gpu_advisor(capsys, "serve", "--port", "0", "--token", "short")[::2])
