"""The last page: the work each lesson rests on, with links."""

import streamlit as st

from kvviz.lessons.sources.logic import SOURCES

st.title("Where this comes from")
st.markdown("kvviz's engine and lessons put together ideas from these papers and code bases. "
            "Each entry says what the idea is and which lesson shows it.")
for source in SOURCES:
    st.markdown(f"**[{source.title}]({source.url})** · {source.authors}  \n{source.idea}  \n"
                f"*Used in:* {', '.join(source.lessons)}")
st.caption("The lessons follow the article “How the LLM KV Cache Works” for their arc; the text in kvviz "
           "is written anew. The bundled model was trained for kvviz on Shakespeare (see its model card).")
