"""kvviz's inference engine: a paged KV cache, prefix caching and continuous batching."""

from kvviz.engine.config import EngineConfig
from kvviz.engine.engine import Engine, RequestOutput
from kvviz.engine.errors import EngineError
from kvviz.engine.records import StepRecord
from kvviz.engine.sampling import SamplingParams

__all__ = ["Engine", "EngineConfig", "EngineError", "RequestOutput", "SamplingParams", "StepRecord"]
