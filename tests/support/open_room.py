"""A teacher's room in an AppTest page, as the store keeps it now (tests/pages/test_page_room*.py)."""

from kvviz.ui import rooms


def room_of(at) -> "OpenRoom":
    """The room the teacher's page `at` opened, by the code its panel shows."""
    code = next(m.value for m in at.markdown if m.value.startswith("### Room")).split("**")[1]
    return OpenRoom(code)


class OpenRoom:
    """A room as the store keeps it now: each attribute read afresh (a store's `get` gives a snapshot), and
    an empty room once it has closed."""

    def __init__(self, code: str):
        self.code = code

    def __getattr__(self, name):
        kept = rooms.find(self.code)
        if kept is None:
            return {"students": {}, "lesson": None, "payload": {}, "open_question": None}[name]
        return getattr(kept, name)
