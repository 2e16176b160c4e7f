"""kvviz: learn, show and measure how a language model's key-value cache works."""

from kvviz.engine.config import EngineConfig
from kvviz.engine.engine import Engine
from kvviz.engine.errors import EngineError
from kvviz.engine.records import StepRecord
from kvviz.engine.sampling import SamplingParams
from kvviz.memory_bill import kv_cache_bytes
from kvviz.models import CustomShape, LoadedModel, ModelLoadError, load_model
from kvviz.shapes import PRESETS, ModelShape

__all__ = ["Engine", "EngineConfig", "EngineError", "SamplingParams", "StepRecord", "CustomShape", "LoadedModel",
           "ModelLoadError", "load_model", "PRESETS", "ModelShape", "kv_cache_bytes"]
