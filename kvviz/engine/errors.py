"""The engine's two errors: one a person can cause and fix, one a model's numbers cause."""

from __future__ import annotations


class EngineError(ValueError):
    """A request or setting the engine refuses; the message says what to do."""


class NonFiniteLogits(ArithmeticError):
    """A step's logits hold NaN or +inf, or a row has no finite logit: nothing can be sampled."""

    def __init__(self, row):
        self.what = "NaN" if bool(row.isnan().any()) else "infinite" if bool(row.isposinf().any()) else "all -inf"
        super().__init__(f"logits are {self.what}")
