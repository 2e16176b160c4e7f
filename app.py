"""kvviz: watch a language model's key-value cache fill, step by step.

    streamlit run app.py

The lessons live in lessons/, not pages/: Streamlit treats a pages/ folder as an old-style
multipage app, and a fresh server opened at a lesson's own address would then run that file
bare, without this entry point's navigation, sidebar and page config. The list of pages, in
lecture order, is kvviz.lessons.lecture.LECTURE: the home page and the Previous / Next links read it too.
"""

from pathlib import Path

import streamlit as st

from kvviz.ui import fair_share

fair_share.install()  # first of all: each tab's reruns paced, a flooding tab closed, even while the rest imports

from kvviz.lessons import lecture, navigation, room_student  # noqa: E402
from kvviz.lessons.stepped import serve_web_pages  # noqa: E402
from kvviz.page.build import page_or_refusal  # noqa: E402
from kvviz.rooms.store import serve_lesson_files  # noqa: E402
from kvviz.ui.common import keep_settings, model_from_link, model_sidebar  # noqa: E402
from kvviz.ui.presenter import ACCESSIBLE_CSS, BUSY_CSS, presenter_mode  # noqa: E402
from kvviz.ui.skip_link import skip_link  # noqa: E402

# a bundled icon: a :material/...: page icon makes the browser fetch it from a font host
st.set_page_config(page_title="kvviz · the KV cache, live", layout="wide",
                   page_icon=str(Path(__file__).parent / "kvviz" / "ui" / "favicon.png"))

# a projector's height is short; a metric's figure scales with the window, so at 1280 px a value in a third of the
# results column still shows its unit instead of an ellipsis (presenter mode sets its own size)
st.html("<style>[data-testid='stMainBlockContainer'] {padding-top: 2.5rem;} "
        "[data-testid='stMetricValue'] {font-size: clamp(1.5rem, 2.2vw, 2.25rem);} "
        ".st-key-skip_link {display: none;}</style>")  # its script runs; its place takes no room
st.html(ACCESSIBLE_CSS)
st.html(BUSY_CSS)
skip_link()  # the keyboard's first stop: past the sidebar to the lesson's controls
serve_lesson_files(lecture.lesson_files)  # a room kept in Redis carries its lesson as a file
serve_web_pages(page_or_refusal)  # each stepped lesson's Download as a web page
page = st.navigation(navigation.pages())
room_student.follow_link_elsewhere(page.url_path or lecture.LECTURE[0].key)  # a room link on a page without rooms
keep_settings(lecture.kept_settings())
model_from_link()  # ?model=NAME alone, on any page
model_sidebar(on_model_change=lecture.reset_lessons)
presenter_mode(*lecture.neighbours(page.title))
footer = navigation.footer_container()  # drawn at the bottom even when a page stops early
with footer:
    navigation.previous_next(page.title)
with fair_share.running():  # what this run takes paces this session's next requests
    page.run()
