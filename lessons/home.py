import streamlit as st

from kvviz.lessons.navigation import lecture_table

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
st.markdown("""
The model in the sidebar is a small Llama-style model trained on Shakespeare that ships with
kvviz (8 query heads share 2 KV heads). Point the sidebar at another checkpoint to run it instead.
""")
