import streamlit as st

from kvviz.lessons.navigation import lecture_table
from kvviz.models import model_in_words
from kvviz.ui.common import current_model
from kvviz.ui.text import plain

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
