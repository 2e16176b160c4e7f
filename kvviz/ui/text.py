"""Text from files, uploads and typed fields, shown as typed: never as markdown, HTML or a link.

    st.info(f"Replaying a lesson of {plain(name)}")        # markdown: Streamlit's text elements, st.table cells
    go.Scatter(name=chart_text(label))                       # Plotly: titles, legends, ticks, hover and labels

Streamlit's markdown turns a bare address (http://..., www.…, a@b.c) into a link even when every
character is escaped: GitHub-flavoured markdown finds addresses in the text after the escapes are
read. An invisible WORD JOINER (U+2060) after each colon and at sign, and before the dot of
"www.", leaves the text as it reads while no address pattern matches. Plotly reads a subset of
HTML (<a href>, <b>, <br>, <span style>) in every string it draws, and decodes entities, so its
text is escaped as HTML.
"""

from __future__ import annotations

import html
import re

_MARKDOWN = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~:$@])")
_ADDRESS = re.compile(r"(?<=[:@])|(?<=[wW])(?=\.)")  # where a bare address or e-mail would start a link
WORD_JOINER = "\u2060"


def plain(text: str) -> str:
    """Text that Streamlit's markdown shows as typed: no links, images, emphasis, HTML or emoji codes."""
    return _MARKDOWN.sub(r"\\\1", _ADDRESS.sub(WORD_JOINER, text))


def chart_text(text: str) -> str:
    """Text that Plotly draws as typed: its tags and entities escaped, so nothing becomes a link or markup."""
    return html.escape(text, quote=False)
