"""Export and replay buttons, shared by every lesson that writes lesson files."""

from __future__ import annotations

import streamlit as st

from kvviz.lessons.files import MAX_LESSON_BYTES, LessonFileError
from kvviz.ui.text import plain


def browser_megabytes(limit_bytes: int) -> int:
    """The upload size to give Streamlit for a limit of `limit_bytes`: its browser counts a megabyte as 10**6
    bytes (on Linux and macOS), so a limit of 20 MiB given as 20 refused a 20 MiB file as "must be 20.0MB or
    smaller"; the whole megabytes above the limit let the file reach kvviz's own check, which says the limit
    in MiB."""
    return -(-limit_bytes // 10**6)


def file_buttons(export, file_name: str, upload_key: str, replay, web_page=None) -> None:
    """Export (when `export`, a function giving the JSON, is not None) and replay buttons, and Download as a
    web page (when `web_page`, a function giving the page's HTML, is not None). An upload goes to
    `replay(data)`, which raises LessonFileError on a bad file: its sentence shows once."""
    a, b = st.columns(2)
    if export is not None:
        # on_click="ignore": a click that also reran the page would re-register the button's function and
        # end a script run, which marks the file just made for deletion; a second run's end (a stage
        # step, another session) deletes it before the browser fetches it, and no file comes
        a.download_button("Export lesson (JSON)", export, file_name=file_name, mime="application/json",
                          width="stretch", on_click="ignore")
    if web_page is not None:
        a.download_button("Download as a web page", web_page, file_name=file_name.removesuffix(".json") + ".html",
                          mime="text/html", width="stretch", on_click="ignore", icon=":material/language:",
                          help="The stage of this lesson as one HTML file, stepped in any browser with no server "
                               "and no network: for students at home or on a phone.")
    b.file_uploader("Replay a lesson file", type=["json"], key=upload_key, on_change=_on_upload,
                    args=(upload_key, replay), max_upload_size=browser_megabytes(MAX_LESSON_BYTES),
                    help=f"Replays every view from the recorded steps, with no model. Files up to "
                         f"{MAX_LESSON_BYTES // 2**20} MiB.")
    if upload_key + "_error" in st.session_state:  # shown once: the next action clears it
        b.error(plain(st.session_state.pop(upload_key + "_error")))  # it may quote the file (a key it names)


def _on_upload(upload_key: str, replay) -> None:
    """Check an uploaded lesson file as it arrives; a bad one leaves the current lesson as it was."""
    upload = st.session_state.get(upload_key)
    if upload is None:
        return
    try:
        replay(upload.getvalue())
    except LessonFileError as error:
        st.session_state[upload_key + "_error"] = str(error)
