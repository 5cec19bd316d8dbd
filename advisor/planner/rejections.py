"""Why options were ruled out: one counter per reason, with an example, for the plan's `rejected`."""

from __future__ import annotations

from advisor.results import Rejection


class Rejections:
    """Counts of ruled-out options by reason (each reason keeps its first example)."""

    def __init__(self) -> None:
        self._by: dict[str, list] = {}
        self._offer_stage: set[str] = set()  # reasons that ruled out price rows, not hardware or stacks

    def end_offer_stage(self) -> None:
        """Mark the reasons so far as the offer stage's (sheets and filters)."""
        self._offer_stage = set(self._by)

    def beyond_offers(self) -> list[Rejection]:
        """The reasons after the offer stage (memory, pins, hosts, constraints), most common first."""
        return [r for r in self.to_list() if r.reason not in self._offer_stage]

    def add(self, reason: str, n: int, example: str = "") -> None:
        if n > 0:
            entry = self._by.setdefault(reason, [0, example])
            entry[0] += int(n)

    def copy(self) -> Rejections:
        out = Rejections()
        out._by = {k: list(v) for k, v in self._by.items()}
        out._offer_stage = set(self._offer_stage)
        return out

    def to_list(self) -> list[Rejection]:
        """Most common reason first."""
        return sorted((Rejection(reason=k, count=v[0], example=v[1]) for k, v in self._by.items()),
                      key=lambda r: -r.count)
