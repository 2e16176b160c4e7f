"""Issue 25 item 3 on the rooms added later (issue 27): a lesson file's room answers are text from
the file, and show as text, never as a link or an image, in the panel every replaying page draws."""

from streamlit.testing.v1 import AppTest

HOST = "kvviz.invalid"


def replayed_answers():
    """The panel of a replayed file's room answers (room_answers.file_answers), one row revealed, one not
    (AppTest runs this function's source alone, so its names are imported and spelled inside it)."""
    from types import SimpleNamespace

    from kvviz.lessons import room_answers
    from kvviz.lessons.files import RoomAnswers

    crafted = "![p](http://kvviz.invalid/x.png) [Log in again](http://kvviz.invalid/login) www.kvviz.invalid"
    room_answers.file_answers(SimpleNamespace(room_answers=[
        RoomAnswers("K7QW2MXP", crafted, crafted, 3, 9.0, [4.0, 9.0]),
        RoomAnswers(crafted[:12], crafted, "bytes", 6, None, [1000.0])]))


def test_a_files_room_answers_show_as_text():
    at = AppTest.from_function(replayed_answers, default_timeout=60).run()
    assert not at.exception
    shown = [element.value for element in [*at.markdown, *at.caption]]
    assert len(shown) == 2 and all("answered" in text for text in shown)
    for text in shown:  # as markdown reads it: no link or image syntax, no bare address left to link
        assert "](" not in text and f"http://{HOST}" not in text and f"www.{HOST}" not in text, text
        assert "Log in again" in text  # the question is still there to read


def many_answers():
    """A file's 100 questions, each revealed: the panel draws one (AppTest runs this source alone)."""
    from types import SimpleNamespace

    from kvviz.lessons import room_answers
    from kvviz.lessons.files import RoomAnswers

    room_answers.file_answers(SimpleNamespace(room_answers=[
        RoomAnswers("K7QW2MXP", f"Question {i}?", "bytes", i, 9.0, [float(a) for a in range(60)]) for i in range(100)]))


def test_a_file_of_many_questions_draws_one_chart_at_a_time():
    """Issue 35 item 4: every rerun redrew all of a file's charts (500 questions: 37 s of CPU)."""
    at = AppTest.from_function(many_answers, default_timeout=60).run()
    assert not at.exception
    assert len(at.markdown) == 1 and "Question 99?" in at.markdown[0].value
    at.selectbox(key="file_room_question").select(3).run()
    assert len(at.markdown) == 1 and "Question 3?" in at.markdown[0].value


def unit_answers():
    from types import SimpleNamespace

    from kvviz.lessons import room_answers
    from kvviz.lessons.files import RoomAnswers

    room_answers.file_answers(SimpleNamespace(room_answers=[RoomAnswers("K7QW2MXP", "How many?", "KV_bytes (x)", 3, 9.0,
                                                                     [4.0, 9.0])]))


def test_a_charts_axis_shows_the_unit_as_typed():
    """Issue 35 item 9: the replayed answers' axis showed the unit's markdown escapes (KV\\_bytes)."""
    at = AppTest.from_function(unit_answers, default_timeout=60).run()
    assert not at.exception
    charts = [element.proto.spec for element in at.get("plotly_chart")]  # the figure's JSON, as sent
    assert charts and all("KV_bytes (x)" in spec and "KV\\\\_bytes" not in spec for spec in charts), charts
    assert "KV\\_bytes \\(x\\)" in at.markdown[0].value  # the sentence above it escapes it for markdown
