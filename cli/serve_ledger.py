"""`gpu-advisor serve`'s /project page: the ledger (approved against actual, per run and per project), read-only.

On a loopback address it is shown as it is; a server listening beyond loopback shows it only with a `--token`,
and then only to a request carrying `Authorization: Bearer TOKEN` (compared in constant time), so a team's spend
is never one unauthenticated GET away. The page writes nothing: the ledger's writes are `gpu-advisor track`'s.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from advisor.ledger.store import open_ledger
from advisor.ledger.summary import project_lines, run_lines


@dataclass(frozen=True)
class LedgerView:
    url: str
    loopback: bool
    token: str | None = None

    def refusal(self, authorization: str | None) -> tuple[int, str] | None:
        """(status, one line) when this request may not read the ledger, else None."""
        if self.token is None:
            if self.loopback:
                return None
            return 403, ("the ledger is shown on a loopback address only; start serve with --token to share it "
                         "(requests then send Authorization: Bearer TOKEN).")
        given = (authorization or "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return 401, "the ledger needs this server's token: send Authorization: Bearer TOKEN."
        return None

    def rows(self, project: str | None) -> tuple[list, list]:
        book = open_ledger(self.url)
        runs = run_lines(book.approvals(project), book.runs())
        return runs, project_lines(runs)
