"""Issue 25 item 3 on the rooms added later (issue 27): a lesson file's room answers are text from
the file, and show as text, never as a link or an image, in the panel every replaying page draws."""

from streamlit.testing.v1 import AppTest

HOST = "kvviz.invalid"


def replayed_answers():
    """The panel of a replayed file's room answers (room_view.file_answers), one row revealed, one not
    (AppTest runs this function's source alone, so its names are imported and spelled inside it)."""
    from types import SimpleNamespace

    from kvviz.lessons import room_view
    from kvviz.lessons.files import RoomAnswers

    crafted = "![p](http://kvviz.invalid/x.png) [Log in again](http://kvviz.invalid/login) www.kvviz.invalid"
    room_view.file_answers(SimpleNamespace(room_answers=[
        RoomAnswers("K7QW2M", crafted, crafted, 3, 9.0, [4.0, 9.0]),
        RoomAnswers(crafted[:12], crafted, "bytes", 6, None, [1000.0])]))


def test_a_files_room_answers_show_as_text():
    at = AppTest.from_function(replayed_answers, default_timeout=60).run()
    assert not at.exception
    shown = [element.value for element in [*at.markdown, *at.caption]]
    assert len(shown) == 2 and all("answered" in text for text in shown)
    for text in shown:  # as markdown reads it: no link or image syntax, no bare address left to link
        assert "](" not in text and f"http://{HOST}" not in text and f"www.{HOST}" not in text, text
        assert "Log in again" in text  # the question is still there to read
