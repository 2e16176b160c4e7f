"""Issue 35, item 2: a link's values are quoted as text. The Prefill and decode page's refusal quoted
the raw view, tokens, temperature and seed: ?view=![a](http://HOST/x) made every opener's browser
fetch that address, and a [text](address) value put a working link in the app's own error box."""

from streamlit.testing.v1 import AppTest

from app_tests import ROOT

IMAGE, LINK = "![a](http://kvviz.invalid/x)", "[CLICK ME](http://kvviz.invalid/y)"


def test_link_values_in_the_refusal_are_text_not_markdown():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.query_params.update(prompt="ROMEO:", step="0", view=IMAGE, tokens=LINK, temperature=IMAGE, seed=LINK,
                           greedy="0")
    at.run()
    at.switch_page("lessons/prefill_decode.py").run()
    assert not at.exception
    message = " ".join(error.value for error in at.error)
    for name in ("view", "tokens", "temperature", "seed"):
        assert f"The link's {name} " in message
    assert "](" not in message and "![" not in message and "http://" not in message, message
    shown = message.replace("\\", "").replace("\u2060", "")  # as the reader sees it
    assert "view '![a](http://kvviz.invalid/x)'" in shown and "tokens '[CLICK ME](http://kv'" in shown


def test_a_link_to_a_step_without_a_prompt_opens_the_pages_own_prompt_there():
    """?step=3 alone once opened the page at its defaults and quietly ignored the step."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.query_params.update(step="3")
    at.run()
    at.switch_page("lessons/prefill_decode.py").run()
    assert not at.exception and not at.error, [error.value for error in at.error]
    run = at.session_state["lesson_run"]
    assert len(run.records) == 4 and at.session_state["lesson_view_step"] == 3  # prefill and three decode steps
    assert run.settings.prompt == at.session_state["lesson_prompt"]  # the page's own prompt, as its box shows it


def refused_upload():
    """A crafted file's refusal as the upload shows it (AppTest runs this source alone)."""
    import json

    import streamlit as st

    from kvviz.lessons.files import LessonFileError
    from kvviz.lessons.paged_batching.file import import_paged
    from kvviz.lessons.uploads import file_buttons

    crafted = {"format": "kvviz-lesson/4", "lesson": "paged_batching", "![a](http://kvviz.invalid/x)": 1}
    try:
        import_paged(json.dumps(crafted))
    except LessonFileError as error:  # the sentence names the file's unknown key
        st.session_state.setdefault("crafted_upload_error", str(error))
    file_buttons(None, "x.json", "crafted_upload", import_paged)


def test_an_upload_refusal_quoting_the_file_is_text():
    at = AppTest.from_function(refused_upload, default_timeout=60).run()
    assert not at.exception
    message = at.error[0].value
    assert "is not one kvviz writes" in message
    assert "](" not in message and "![" not in message and "http://" not in message, message


def long_prompt_link():
    """The lesson's link kept in the address, for a prompt past what a link carries (AppTest runs this alone)."""
    import streamlit as st

    from kvviz.lessons.prefill_decode.classroom import MAX_LINK_PROMPT_CHARS, sync_query_params

    st.query_params["prompt"] = "an older, shorter prompt"
    for prompt in ("ROMEO:", "x" * (MAX_LINK_PROMPT_CHARS + 1)):
        note = sync_query_params(prompt, 3)
        st.session_state.setdefault("link_seen", []).append((dict(st.query_params), note))


def test_a_prompt_too_long_for_a_link_stays_out_of_it_with_a_sentence():
    at = AppTest.from_function(long_prompt_link, default_timeout=60).run()
    assert not at.exception
    (short, short_note), (long, long_note) = at.session_state["link_seen"]
    assert short["prompt"] == "ROMEO:" and short["step"] == "3" and short_note is None
    assert "prompt" not in long and "step" not in long  # the old prompt's link does not stand for this lesson
    assert long_note.startswith("This prompt is too long for the page's link (4,001 characters")


def test_a_negative_or_enormous_step_in_a_link_gets_a_sentence():
    """Issue 51 item 9 and 3: step=-5 opened at the prefill without a word; a step of 4,000 nines was parsed
    whole and its lesson then ran past the click budget."""
    for step, words, shown in (("-5", "The link's step -5 is before the prefill (step 0); showing the prefill.", 0),
                               ("9" * 4000, "The link's step (4,000 digits) is past the last step", None)):
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
        at.query_params.update(prompt="ROMEO:", step=step)
        at.run()
        at.switch_page("lessons/prefill_decode.py").run()
        assert not at.exception
        message = " ".join(error.value for error in at.error)
        assert words in message, message
        if shown is not None:
            assert at.session_state["lesson_view_step"] == shown
