"""Why options were ruled out: one counter per reason, with an example, for the plan's `rejected`."""

from __future__ import annotations

from advisor.results import Rejection


class Rejections:
    """Counts of ruled-out options by reason (each reason keeps its first example)."""

    def __init__(self) -> None:
        self._by: dict[str, list] = {}

    def add(self, reason: str, n: int, example: str = "") -> None:
        if n > 0:
            entry = self._by.setdefault(reason, [0, example])
            entry[0] += int(n)

    def copy(self) -> "Rejections":
        out = Rejections()
        out._by = {k: list(v) for k, v in self._by.items()}
        return out

    def to_list(self) -> list[Rejection]:
        """Most common reason first."""
        return sorted((Rejection(reason=k, count=v[0], example=v[1]) for k, v in self._by.items()),
                      key=lambda r: -r.count)
