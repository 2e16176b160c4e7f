"""kvviz: watch a language model's key-value cache fill, step by step.

    streamlit run app.py

The lessons live in lessons/, not pages/: Streamlit treats a pages/ folder as an old-style
multipage app, and a fresh server opened at a lesson's own address would then run that file
bare, without this entry point's navigation, sidebar and page config.
"""

from pathlib import Path

import streamlit as st

from kvviz.ui.common import model_sidebar

# a bundled icon: a :material/...: page icon makes the browser fetch it from a font host
st.set_page_config(page_title="kvviz · the KV cache, live", layout="wide",
                   page_icon=str(Path(__file__).parent / "kvviz" / "ui" / "favicon.png"))

lessons = [
    st.Page("lessons/home.py", title="What kvviz teaches", icon=":material/school:", default=True),
    st.Page("lessons/prefill_decode.py", title="Prefill and decode", icon=":material/play_circle:"),
    st.Page("lessons/memory_bill.py", title="Memory bill", icon=":material/calculate:"),
    st.Page("lessons/model_lab.py", title="Model lab", icon=":material/science:"),
    st.Page("lessons/paged_batching.py", title="Paged cache and batching", icon=":material/grid_view:"),
    st.Page("lessons/cache_strategies.py", title="Cache strategies", icon=":material/compare_arrows:"),
    st.Page("lessons/batch_generation.py", title="Batch generation", icon=":material/dynamic_feed:"),
]
navigation = st.navigation(lessons)
model_sidebar()
navigation.run()
