import io
import zipfile

import streamlit as st

from kvviz.lessons.budget import click_seconds
from kvviz.lessons.navigation import lecture_table
from kvviz.lessons.room_address import room_address
from kvviz.models import model_in_words
from kvviz.page.record import lecture_pages
from kvviz.shapes import format_bytes
from kvviz.ui.common import current_model
from kvviz.ui.progress import StopBar, how_it_stopped
from kvviz.ui.text import plain


def make_lecture_pack(slot) -> None:
    """Record the stepped lessons on this session's model under a bar with Stop (the clock stops it at one click's
    budget) and keep them as one zip; a lesson the model refuses leaves one sentence."""
    st.session_state.pop("home_pack", None)
    st.session_state["home_pack_making"] = True  # still there in the next run: Stop or the clock ended it
    bar = StopBar(slot, "home_pack_stop", "Recording the lessons", "Ends the recording; nothing is kept.",
                  budget_s=click_seconds())
    lm = current_model()
    try:
        pages = lecture_pages(lm, room_address("")[0].rstrip("/"), lambda done, total, title: bar.move(
            done / total, f"Recording {title} on {lm.name} ({done} of {total} lessons done)", every_s=0.0))
    except ValueError as error:  # EngineError, LessonFileError: a lesson this model cannot record
        st.session_state["home_pack_error"] = str(error)
    else:
        data = io.BytesIO()
        with zipfile.ZipFile(data, "w", zipfile.ZIP_DEFLATED) as pack:
            for name, text in pages:
                pack.writestr(f"kvviz-lecture/{name}", text)
        st.session_state["home_pack"] = ("kvviz-lecture.zip", data.getvalue())
    st.session_state.pop("home_pack_making")
    slot.empty()


if st.session_state.pop("home_pack_making", False):
    st.session_state["home_pack_error"] = (f"{how_it_stopped()} before every lesson was recorded, so no pack was "
                                           "made; press Make the lecture pack again (a smaller model records faster).")

st.title("kvviz: the KV cache, live")
st.markdown("""
A language model writes one token at a time. To pick each new token, every layer lets the newest
token *attend* to all the tokens before it, and for that it needs each earlier token's **key** and
**value** vectors. Recomputing them for the whole text at every step would repeat almost all of the
work. The **KV cache** keeps them instead: computed once, stored, and read back at every later step.

kvviz runs a real model in front of you, and its numbers are of two kinds. **Measured**: what the
model and the engine do here (the bytes the cache holds, its keys and values, attention, blocks,
tokens per pass, errors and step times). **Computed** from a model's config with the article's
formula and from an accelerator's data sheet: the Memory bill and its tensor-parallel split, the
roofline in *Why decode is memory-bound* (its "this machine" line measures the speeds it uses) and
the bill on *Putting it together*.

The lessons, in the order a lecture takes them:
""")
lecture_table()
model = current_model()
bundled = (" It is the small Llama-style model trained on Shakespeare that ships with kvviz."
           if model.source == "bundled" else "")
st.markdown(f"The lessons run on the model in the sidebar. {plain(model_in_words(model.describe()))}{bundled} "
            "Load another in the sidebar (bundled, smollm2, gemma3, a folder) to run them on it instead.")

st.subheader("Take the lecture home")
st.markdown("The three stepped lessons (Prefill and decode, Paged cache and batching, Speculative decoding), run at "
            "their defaults on this model, as web pages that open from a folder or a course site in any browser, "
            "on a phone too, with no server and no network; a student steps them with the arrow keys. Each "
            "lesson's page also has *Download as a web page* for the run on screen.")
if st.button("Make the lecture pack", icon=":material/folder_zip:", key="home_pack_make"):
    make_lecture_pack(st.empty())
if "home_pack_error" in st.session_state:
    st.error(st.session_state.pop("home_pack_error"))
if (pack := st.session_state.get("home_pack")) is not None:
    name, data = pack
    st.download_button(f"Download the lecture pack ({format_bytes(len(data))}, a zip of four pages)", data,
                       file_name=name, mime="application/zip", on_click="ignore", icon=":material/download:")
