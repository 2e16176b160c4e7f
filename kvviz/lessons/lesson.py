"""What a lesson is, said once in its folder's lesson.py: its page, title, icon, line, minutes, key prefix, its
modules' keys and, for a lesson taken a step at a time, its run.

    LESSON = Lesson("batch_generation", "Batch generation", ":material/dynamic_feed:",
                    "Many prompts through the same engine ...", 5, prefix="batch_", parts=(state.KEYS,))

Every session key a lesson's page makes starts with its prefix, so a key's prefix names its owner; the keys
its modules' `Keys` (kvviz.ui.session_keys) clear are what a run leaves (a run belongs to the model it ran
on), the rest are the page's inputs, which stay. A stepped lesson adds the object of its class implementing
`Stepped` (kvviz.lessons.stepped: how a run starts, steps, is written to a file and read back); it has rooms
when that class implements `InRoom` too (kvviz.lessons.room_view). kvviz.lessons.lecture lists the lessons in
lecture order; navigation, the home page, Reset, a model change, rooms and the lesson-file checks read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kvviz.lessons.room_view import InRoom
from kvviz.lessons.stepped import Stepped
from kvviz.ui.session_keys import Keys


@runtime_checkable
class Replays(Protocol):
    """A lesson whose page exports its run as a lesson file and replays one (a Stepped is one)."""

    file_name: str  # what Export names the lesson file

    def read_file(self, data: bytes): ...  # the replayed run (raises LessonFileError)


@dataclass(frozen=True)
class Lesson:
    """One lesson: its place in the lecture, its session state and (when stepped) its run."""

    key: str  # its folder under kvviz/lessons/, its page script's stem, a lesson file's `lesson` field
    title: str
    icon: str
    summary: str  # one line for the home page
    minutes: int  # about how long it takes in class
    prefix: str  # every session key its page makes starts with it
    parts: tuple[Keys, ...] = ()  # the keys each of its modules makes
    stepped: Stepped | None = None  # a run taken a step at a time: its new, step, export and read
    files: Replays | None = None  # the lesson files of a lesson that is not stepped

    def __post_init__(self):
        if self.stepped is not None and (self.stepped.page, self.stepped.keys.prefix) != (self.key, self.prefix):
            raise ValueError(f"the stepped run of {self.key!r} is declared for {self.stepped.page!r}")

    @property
    def path(self) -> str:
        """The page script, as st.Page and st.page_link take it."""
        return f"lessons/{self.key}.py"

    @property
    def replays(self) -> bool:
        """Whether its page exports and replays lesson files."""
        return isinstance(self.stepped or self.files, Replays)

    @property
    def rooms(self) -> bool:
        """Whether a teacher can open a room on it (its page then reads a room link itself)."""
        return isinstance(self.stepped, InRoom)

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
