"""The Model lab page's session state, declared once (LAB): the shape's widgets and the last measurement, which
stay when a model loads (the lab builds its own model), and a measurement under way."""

from __future__ import annotations

from kvviz.ui.session_keys import SessionState, Slot


class LabState(SessionState):
    """The page's widgets and what it keeps between its runs."""

    layers = Slot("lab_layers")
    hidden = Slot("lab_hidden")
    heads = Slot("lab_heads")
    kv_heads = Slot("lab_kv_heads")
    head_dim = Slot("lab_head_dim")  # 0: hidden size / heads
    mlp = Slot("lab_mlp")  # 0: the builder's default
    context = Slot("lab_context")
    result = Slot("lab_result")  # the last measurement (also read by Prefill and decode's memory-bound view)
    result_shape = Slot("lab_result_shape")  # the shape it was measured on
    error = Slot("lab_error")
    stopped = Slot("lab_stopped")  # what a stopped measurement kept: one sentence
    measuring = Slot("lab_measuring")  # (shape, the rounds timed so far) while a measurement runs


LAB = LabState()
