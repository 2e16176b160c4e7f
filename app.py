"""kvviz: watch a language model's key-value cache fill, step by step.

    streamlit run app.py
"""

import streamlit as st

from kvviz.ui.common import model_sidebar

st.set_page_config(page_title="kvviz · the KV cache, live", page_icon=":material/memory:", layout="wide")

lessons = [
    st.Page("pages/home.py", title="What kvviz teaches", icon=":material/school:", default=True),
    st.Page("pages/prefill_decode.py", title="Prefill and decode", icon=":material/play_circle:"),
    st.Page("pages/memory_bill.py", title="Memory bill", icon=":material/calculate:"),
    st.Page("pages/model_lab.py", title="Model lab", icon=":material/science:"),
    st.Page("pages/paged_batching.py", title="Paged cache and batching", icon=":material/grid_view:"),
]
navigation = st.navigation(lessons)
model_sidebar()
navigation.run()
