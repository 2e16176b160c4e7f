import streamlit as st

st.title("kvviz: the KV cache, live")
st.markdown("""
A language model writes one token at a time. To pick each new token, every layer lets the newest
token *attend* to all the tokens before it, and for that it needs each earlier token's **key** and
**value** vectors. Recomputing them for the whole text at every step would repeat almost all of the
work. The **KV cache** keeps them instead: computed once, stored, and read back at every later step.

kvviz runs a real model in front of you, so every number here is measured, not simulated:

1. **Prefill and decode**: the prompt goes through the model in one pass (*prefill*) and fills
   the cache; then each new token (*decode*) adds one column per layer and reads all the others.
   Watch the cache grow, inspect the keys and values, see the newest token's attention, and
   compare the work with and without the cache.
2. **Memory bill**: what the cache weighs. Two tensors (K and V) × layers × KV heads × head size ×
   tokens × requests × bytes per value. See why long contexts and big batches run out of memory,
   and what grouped-query attention, multi-query attention and MLA save.
3. **Model lab**: build a model of any size with random weights and time a decode step against
   the context length, with and without the cache.

The model in the sidebar is a small Llama-style model trained on Shakespeare that ships with
kvviz (8 query heads share 2 KV heads). Point the sidebar at another checkpoint to run it instead.
""")
