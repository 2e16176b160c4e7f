"""A lesson's session state, declared: one key prefix for everything its page keeps, and which keys go
when another model loads.

    KEYS = Keys(clears=frozenset({"batch_run", "batch_error"}))       # in a module that makes them
    LESSON = LessonState("batch_generation", "batch_", (state.KEYS,))  # in the lesson folder's lesson.py

Every session key a lesson's page makes starts with its prefix, so a key's prefix names its owner; the
keys its modules' `Keys` (kvviz.ui.session_keys) clear are what a run leaves (a run belongs to the model
it ran on), the rest are the page's inputs, which stay. A stepped lesson adds its `Stepped`
(kvviz.lessons.stepped: how a run starts, steps, is written to a file and read back, and how a room
follows it). kvviz.lessons.registry lists one LessonState per lesson folder.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvviz.lessons.stepped import Stepped
from kvviz.ui.session_keys import Keys


@dataclass(frozen=True)
class LessonState:
    """One lesson's session state: its page, its prefix, its modules' keys and (when stepped) its run."""

    page: str  # its key in the catalog (kvviz.lessons.catalog)
    prefix: str  # every session key its page makes starts with it
    parts: tuple[Keys, ...] = ()  # the keys each of its modules makes
    stepped: Stepped | None = None  # a run taken a step at a time: its new, step, export and read

    def __post_init__(self):
        if self.stepped is not None and (self.stepped.page, self.stepped.keys.prefix) != (self.page, self.prefix):
            raise ValueError(f"the stepped run of {self.page!r} is declared for {self.stepped.page!r}")

    @property
    def kept(self) -> tuple[str, ...]:
        """Widget keys whose values outlive a visit to another page: its modules' and, for a stepped run, the step
        in view (the look-back slider's key: the stage came back at step 0 while the engine was at step 11)."""
        view = (self.stepped.keys.view,) if self.stepped is not None else ()
        return tuple(key for part in self.parts for key in part.kept) + view

    def owns(self, key: str) -> bool:
        return key.startswith(self.prefix)

    def cleared(self, key: str) -> bool:
        return any(part.cleared(key) for part in self.parts)

    def reset(self, state) -> None:
        for part in self.parts:
            part.reset(state)
