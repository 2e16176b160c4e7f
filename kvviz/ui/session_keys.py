"""The session keys one module of a page makes and answers for, declared once, and read and written by name.

A module's state is a `SessionState` class of `Slot`s: each slot names its key once (and whether loading
another model clears it), and the module reads and writes it as an attribute (`BATCH.run = result`,
`del BATCH.error`) instead of through st.session_state and a string. Its `Keys` (which of them go when another
model loads, which outlive a visit to another page) come from the same class; a lesson gathers its modules' Keys
under its one prefix (kvviz.lessons.lesson); the room's own keys are one Keys too (kvviz.lessons.room_view).
Widget keys stay strings in `key=`: Streamlit's own, and `STATE.key("name")` gives a slot's.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st



def drop(state, keys, prefixes: tuple[str, ...] = ()) -> None:
    """Delete `keys`, and keys starting with one of `prefixes`, from a session state (or a dict)."""
    for key in [k for k in state if k in keys or k.startswith(prefixes)]:
        del state[key]


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


class Slot:
    """One session key as an attribute of a SessionState: unset, it reads as its default; `del` drops it."""

    def __init__(self, key: str | None = None, default=None, clears: bool = False):
        self.key, self.default, self.clears = key, default, clears  # key None: the state's key_for(name)

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def key_of(self, state) -> str:
        return self.key if self.key is not None else state.key_for(self.name)

    def __get__(self, state, owner=None):
        if state is None:
            return self
        return st.session_state.get(self.key_of(state), self.default)

    def __set__(self, state, value) -> None:
        st.session_state[self.key_of(state)] = value

    def __delete__(self, state) -> None:
        st.session_state.pop(self.key_of(state), None)


class SessionState:
    """This session's values under a module's keys, each declared once as a Slot."""

    def key_for(self, name: str) -> str:
        raise KeyError(f"the slot {name!r} names no key")

    def key(self, name: str) -> str:
        """The session key of the slot `name` (a widget's key=)."""
        return getattr(type(self), name).key_of(self)

    def has(self, name: str) -> bool:
        """Whether the slot `name` holds a value (its default is not one)."""
        return self.key(name) in st.session_state

    def get(self, name: str, default=None):
        """The slot's value, or `default` when it holds none (whatever its declared default)."""
        return getattr(self, name) if self.has(name) else default

    def setdefault(self, name: str, value):
        """The slot's value, set to `value` first when it holds none."""
        if not self.has(name):
            setattr(self, name, value)
        return getattr(self, name)

    def drop(self, *names: str) -> None:
        for name in names:
            delattr(self, name)

    def take(self, name: str, default=None):
        """The slot's value, dropped (`default` when it held none)."""
        value = getattr(self, name) if self.has(name) else default
        delattr(self, name)
        return value

    @classmethod
    def slots(cls) -> list[Slot]:
        return [value for klass in cls.__mro__ for value in vars(klass).values() if isinstance(value, Slot)]

    @classmethod
    def cleared_keys(cls) -> frozenset[str]:
        """The keys of its slots that loading another model clears (slots with a key of their own)."""
        return frozenset(slot.key for slot in cls.slots() if slot.clears)
