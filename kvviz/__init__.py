"""kvviz: learn, show and measure how a language model's key-value cache works."""

from kvviz.engine import Engine, EngineConfig, EngineError, SamplingParams, StepRecord
from kvviz.memory_bill import kv_cache_bytes
from kvviz.models import CustomShape, LoadedModel, ModelLoadError, load_model
from kvviz.shapes import PRESETS, ModelShape

__all__ = ["Engine", "EngineConfig", "EngineError", "SamplingParams", "StepRecord", "CustomShape", "LoadedModel",
           "ModelLoadError", "load_model", "PRESETS", "ModelShape", "kv_cache_bytes"]
