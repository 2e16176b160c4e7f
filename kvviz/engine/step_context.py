"""Whether the code running now is one of the engine's forward passes.

The engine gives the layers of the model it runs faster forms for its own steps (engine/cpu/),
but the model is shared: a lesson's no-cache twin, model.generate in another session or the
bench's transformers runs use the very same modules. Each faster form therefore asks this one
question, per call, and otherwise runs the module's own forward. A context variable is per
thread (and per task), so a forward pass in another thread never sees the engine's flag.
"""

from __future__ import annotations

import contextlib
import contextvars

_IN_ENGINE_STEP = contextvars.ContextVar("kvviz_in_engine_step", default=False)


def in_engine_step() -> bool:
    return _IN_ENGINE_STEP.get()


@contextlib.contextmanager
def engine_step():
    """Mark the forward pass run inside this block as the engine's own."""
    token = _IN_ENGINE_STEP.set(True)
    try:
        yield
    finally:
        _IN_ENGINE_STEP.reset(token)
