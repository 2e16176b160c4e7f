"""The session keys one module of a page makes and answers for: which of them go when another model loads,
which outlive a visit to another page. A lesson gathers its modules' Keys under its one prefix
(kvviz.lessons.lesson); the room's own keys are one Keys too (kvviz.lessons.room_view).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvviz.ui.common import drop


@dataclass(frozen=True)
class Keys:
    """The session keys one module of a lesson makes and answers for."""

    clears: frozenset[str] = frozenset()  # what a run leaves: gone when another model loads
    made_per_question: tuple[str, ...] = ()  # prefixes of keys made on the fly, one per question asked: gone too
    kept: tuple[str, ...] = ()  # widget keys whose values outlive a visit to another page

    def cleared(self, key: str) -> bool:
        """Whether another model's loading drops `key`."""
        return key in self.clears or key.startswith(self.made_per_question)

    def reset(self, state) -> None:
        """Drop what a run left (another model loaded); the inputs stay."""
        drop(state, self.clears, self.made_per_question)
