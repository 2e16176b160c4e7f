"""The closing lesson: which cache and which strategy for a script, a chat server and a long-context job."""

import streamlit as st

from kvviz.lessons.putting_it_together.logic import choices, jobs, whole_context
from kvviz.memory_bill import kv_bytes_per_token
from kvviz.shapes import format_bytes
from kvviz.ui.common import current_model

st.title("Putting it together")
st.markdown(
    "A model that streams an answer does not rebuild the conversation at every token: it runs the prompt "
    "once, keeps each layer's keys and values, and adds the newest token's after every step, trading "
    "memory for repeated work. For one request that is the whole idea. For a server it becomes a question "
    "of fitting many growing caches into one accelerator's memory, and each tool of the lessons answers a "
    "different part of it: dynamic or static caches, fewer KV heads, fewer bits, windows, paged blocks.")

lm = current_model()
shape, info = lm.shape, lm.describe()
try:
    context = whole_context(shape)
except ValueError as error:
    st.error(str(error))
    st.stop()


def round_lengths(top: int) -> list[int]:
    """10, 20, 50, 100, ... below `top`, and `top` itself: request lengths, which rarely fill whole blocks."""
    return [n for n in (step * 10**power for power in range(1, 12) for step in (1, 2, 5)) if n < top] + [top]


def powers_up_to(top: int, least: int = 16) -> list[int]:
    """least, 2 × least, ... below `top`, and `top` itself: window sizes."""
    return [least * 2**i for i in range(64) if least * 2**i < top] + [top]


def closest(options: list[int], wanted: int) -> int:
    return min(options, key=lambda option: abs(option - wanted))


lengths = round_lengths(context)
windows = powers_up_to(context)
for key, options in (("together_tokens", lengths), ("together_window", windows)):
    if st.session_state.get(key, options[0]) not in options:  # another model was loaded
        del st.session_state[key]
a, b, c, d = st.columns(4)
tokens = a.select_slider("Tokens in a request", lengths, value=closest(lengths, context // 4), key="together_tokens",
                         help="The script's request and each of the chat server's.")
requests = b.select_slider("Requests on the server", [1, 2, 4, 8, 16, 32, 64, 128, 256], value=16,
                           key="together_requests")
window = c.select_slider("Sliding window (tokens)", windows, value=closest(windows, min(4096, context // 4)),
                         key="together_window", help="For the long-context job's table below.")
dtype_bytes = info["dtype_bytes"]
d.metric("Cache per token", format_bytes(kv_bytes_per_token(shape, dtype_bytes)),
         help=f"K and V, every layer and KV head, {info['dtype']} values: computed from the config.")

for column, job in zip(st.columns(3), jobs(shape, dtype_bytes, tokens, requests, window)):
    with column.container(border=True):
        st.markdown(f"**{job.name}**: {job.workload}")
        st.markdown(job.advice)
        st.markdown("\n".join(f"- {what}: **{format_bytes(num_bytes)}**" for what, num_bytes in job.bill))

rows = choices(shape, dtype_bytes, context, window)
full = rows[0].num_bytes
st.markdown(f"**The long-context job's choices**, for one request of {context:,} tokens:")
st.table([{"cache": row.name, "bytes": format_bytes(row.num_bytes), "of the full cache": f"{row.num_bytes / full:.0%}",
           "the catch": row.catch} for row in rows])
st.caption(f"Computed, not measured: kvviz.memory_bill's formula on {info['name']}'s config ({info['layers']} layers, "
           f"{info['kv_heads']} KV heads of {info['head_dim']} values, {info['dtype']}). The lessons before this one "
           "measured the same formula against the bytes the engine's tensors hold.")
