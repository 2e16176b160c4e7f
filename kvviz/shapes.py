"""What a model looks like to its KV cache: ModelShape, reading it from a config, and presets.

A shape holds only the numbers the memory bill needs (kvviz.memory_bill does the arithmetic), so a
lesson can describe a 405B model without loading a byte of it. `ModelShape.from_hf_config` is
the one place kvviz reads a Hugging Face config's layers, heads and sizes; the engine's cache,
the bill, the lessons and the strategies all start from it; `format_bytes` writes the byte
counts they come to, as every page and the engine's messages show them. Pure Python: transformers,
huggingface_hub and torch are imported only inside the functions that read a checkpoint.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only the annotation names it: torch loads when a checkpoint is read
    import torch

# What a layer caches per token: K and V for every token (full), for the last `window` tokens
# (sliding), or one compressed latent per token (MLA). The first two are transformers' names.
FULL, SLIDING, MLA = "full_attention", "sliding_attention", "mla"
KIND_LABELS = {FULL: "full attention", SLIDING: "sliding window", MLA: "MLA latent"}
DEFAULT_CONTEXT = 2048  # for a config that states no context length (rare)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelShape:
    """The numbers of a decoder that decide its cache size (and, with num_params, its weights)."""
    num_layers: int                      # transformer blocks; each one has its own cache
    num_kv_heads: int                    # K/V heads (= num_heads for MHA, 1 for MQA)
    head_dim: int                        # length of each key vector (and value vector, unless v_head_dim)
    name: str = "custom"
    num_heads: int | None = None         # query heads; the cache does not depend on them, but KV heads divide them
    v_head_dim: int | None = None        # length of each value vector when it differs from the key's (DeepSeek)
    hidden_size: int | None = None
    num_params: int | None = None        # total parameters, for the weights' share of memory
    layer_types: tuple[str, ...] | None = None  # per layer FULL or SLIDING; None: all alike
    sliding_window: int | None = None    # tokens a sliding layer keeps; all layers if layer_types is None
    kv_lora_rank: int | None = None      # MLA: length of the compressed K/V latent per token
    qk_rope_head_dim: int | None = None  # MLA: the decoupled RoPE key stored beside the latent
    max_context: int | None = None       # the longest context the model was built for
    vocab_size: int | None = None
    tied_embeddings: bool | None = None  # the output layer reuses the input embedding matrix; None: unknown
    dtype: torch.dtype | None = None     # the weights' (and so the cache's) dtype; None: not loaded

    def __post_init__(self):
        for field in ("num_layers", "num_kv_heads", "head_dim", "num_heads", "v_head_dim", "hidden_size",
                      "num_params", "sliding_window", "kv_lora_rank", "qk_rope_head_dim",
                      "max_context", "vocab_size"):
            check_positive(field, getattr(self, field), optional=True)
        if (self.kv_lora_rank is None) != (self.qk_rope_head_dim is None):
            raise ValueError("An MLA shape needs both kv_lora_rank and qk_rope_head_dim; "
                             "give both or neither.")
        if self.kv_lora_rank is None and self.num_heads and self.num_heads % self.num_kv_heads:
            # GQA: every KV head serves the same number of query heads (MLA caches no heads to divide)
            divisors = [d for d in range(1, self.num_heads + 1) if self.num_heads % d == 0]
            listed = ", ".join(map(str, divisors[:-1])) + f" or {divisors[-1]}" if len(divisors) > 1 else "1"
            raise ValueError(f"{self.num_heads} query heads cannot be shared evenly by {self.num_kv_heads} KV heads; "
                             f"pick a number of KV heads that divides {self.num_heads} ({listed}).")
        if self.layer_types is not None:
            object.__setattr__(self, "layer_types", tuple(self.layer_types))  # lists hash badly
            if len(self.layer_types) != self.num_layers:
                raise ValueError(f"layer_types lists {len(self.layer_types)} layers but num_layers is "
                                 f"{self.num_layers}; give one type per layer.")
            unknown = set(self.layer_types) - {FULL, SLIDING}
            if unknown:
                raise ValueError(f"Unknown layer type {sorted(unknown)[0]!r}; use {FULL!r} or {SLIDING!r}.")
            if SLIDING in self.layer_types and self.sliding_window is None:
                raise ValueError("Some layers are sliding-window layers but sliding_window is not set; "
                                 "give the window size.")
        if self.sliding_window and self.max_context and self.sliding_window > self.max_context:
            raise ValueError(f"The sliding window ({self.sliding_window:,} tokens) is larger than the context "
                             f"({self.max_context:,} tokens); make the window at most the context.")

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        """FULL, SLIDING or MLA for each layer, in order."""
        if self.kv_lora_rank is not None:
            return (MLA,) * self.num_layers
        if self.layer_types is not None:
            return self.layer_types
        return ((SLIDING if self.sliding_window else FULL),) * self.num_layers

    @property
    def dtype_bytes(self) -> int | None:
        """Bytes of one cached value in the model's dtype (None when the dtype is not known)."""
        return None if self.dtype is None else self.dtype.itemsize

    @classmethod
    def of_model(cls, model, name: str | None = None) -> ModelShape:
        """The shape of a loaded transformers model: its config, and the dtype of its weights."""
        return cls.from_hf_config(model.config, name=name, dtype=next(model.parameters()).dtype)

    @classmethod
    def from_hf_config(cls, config, name: str | None = None, dtype=None) -> ModelShape:
        """Read a shape from a transformers config (GPT-2, Llama, Mistral, Qwen2, Gemma-2/3, DeepSeek).

        dtype: the torch dtype the weights are in, when a model is loaded (see `of_model`)."""
        text = config.get_text_config() if hasattr(config, "get_text_config") else config  # Gemma-3 nests it

        def first(*names):
            return next((v for v in (getattr(text, n, None) for n in names) if v is not None), None)

        num_layers = first("num_hidden_layers", "n_layer", "num_layers")
        num_heads = first("num_attention_heads", "n_head")
        hidden_size = first("hidden_size", "n_embd", "d_model")
        if not (num_layers and num_heads and hidden_size):
            raise ValueError(f"The config of type {type(config).__name__} has no layer, head or hidden size "
                             "that kvviz can read; describe the model with ModelShape(...) instead.")
        num_kv_heads = first("num_key_value_heads", "num_kv_heads", "n_kv_heads") or num_heads  # missing: MHA
        head_dim = first("head_dim") or hidden_size // num_heads
        max_context = first("max_position_embeddings", "n_positions", "n_ctx")
        kv_lora_rank, qk_rope_head_dim = first("kv_lora_rank"), first("qk_rope_head_dim")
        v_head_dim = first("v_head_dim")
        if kv_lora_rank is not None:  # DeepSeek sets head_dim to the RoPE part; report a whole key head
            head_dim = (first("qk_nope_head_dim") or 0) + qk_rope_head_dim
        if v_head_dim == head_dim:
            v_head_dim = None
        window = first("sliding_window")
        if getattr(text, "use_sliding_window", True) is False:  # Qwen2 lists a window it does not use
            window = None
        if window and max_context and window >= max_context:  # a window that never binds is no window
            window = None
        layer_types = first("layer_types")
        if layer_types is None and window and getattr(text, "max_window_layers", None) is not None:
            # Qwen2 before transformers computed layer_types: layers from max_window_layers on slide
            layer_types = [SLIDING if i >= text.max_window_layers else FULL for i in range(num_layers)]
        if layer_types is not None:
            unsupported = set(layer_types) - {FULL, SLIDING}
            if unsupported:
                raise ValueError(f"Layer type {sorted(unsupported)[0]!r} is not one the memory bill knows; "
                                 "describe the model with ModelShape(...) instead.")
            layer_types = tuple(FULL if window is None else kind for kind in layer_types)
        name = name or getattr(config, "name_or_path", None) or getattr(config, "model_type", "custom")
        tied = getattr(config, "tie_word_embeddings", None)  # Gemma-3 sets it on the outer config
        return cls(name=name,
                   num_layers=num_layers, num_kv_heads=num_kv_heads, head_dim=head_dim, num_heads=num_heads,
                   v_head_dim=v_head_dim, tied_embeddings=tied, hidden_size=hidden_size,
                   layer_types=layer_types, sliding_window=window,
                   kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope_head_dim,
                   max_context=max_context, vocab_size=first("vocab_size"), dtype=dtype)


def check_positive(what: str, value, optional: bool = False):
    """Raise a one-sentence ValueError unless value is a whole number above zero (or None, if optional)."""
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{what} must be a whole number above zero, not {value!r}.")


# --- Presets: facts from each model's public config.json on the Hugging Face Hub --------------

def _alternating(num_layers: int, period: int) -> tuple[str, ...]:
    """Every period-th layer global, the rest sliding (Gemma-2: period 2, Gemma-3: period 6)."""
    return tuple(FULL if (i + 1) % period == 0 else SLIDING for i in range(num_layers))


def _preset(name, layers, heads, kv_heads, head_dim, hidden, params, context, vocab, tied, **extra):
    return ModelShape(name=name, num_layers=layers, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                      hidden_size=hidden, num_params=params, max_context=context, vocab_size=vocab,
                      tied_embeddings=tied, **extra)


PRESETS = {p.name: p for p in (
    # name, layers, query heads, KV heads, head_dim, hidden, parameters, context, vocab, tied embeddings
    _preset("gpt2", 12, 12, 12, 64, 768, 124_439_808, 1024, 50257, True),                  # openai-community/gpt2
    _preset("gpt2-xl", 48, 25, 25, 64, 1600, 1_557_611_200, 1024, 50257, True),            # openai-community/gpt2-xl
    _preset("llama-2-7b", 32, 32, 32, 128, 4096, 6_738_415_616, 4096, 32000, False),        # meta-llama/Llama-2-7b-hf
    _preset("llama-3.1-8b", 32, 32, 8, 128, 4096, 8_030_261_248, 131072, 128256, False),    # meta-llama/Llama-3.1-8B
    _preset("llama-3.1-70b", 80, 64, 8, 128, 8192, 70_553_706_496, 131072, 128256, False),  # meta-llama/Llama-3.1-70B
    _preset("llama-3.1-405b", 126, 128, 8, 128, 16384, 405_853_388_800, 131072, 128256, False),  # ...Llama-3.1-405B
    _preset("mistral-7b-v0.1", 32, 32, 8, 128, 4096, 7_241_732_096, 32768, 32000, False,    # mistralai/Mistral-7B-v0.1
            sliding_window=4096),
    # mistralai/Mixtral-8x7B-v0.1
    _preset("mixtral-8x7b", 32, 32, 8, 128, 4096, 46_702_792_704, 32768, 32000, False),
    _preset("qwen2.5-0.5b", 24, 14, 2, 64, 896, 494_032_768, 32768, 151936, True),         # Qwen/Qwen2.5-0.5B
    _preset("qwen2.5-7b", 28, 28, 4, 128, 3584, 7_615_616_512, 131072, 152064, False),      # Qwen/Qwen2.5-7B
    _preset("qwen2.5-72b", 80, 64, 8, 128, 8192, 72_706_203_648, 131072, 152064, False),    # Qwen/Qwen2.5-72B
    _preset("gemma-2-9b", 42, 16, 8, 256, 3584, 9_241_705_984, 8192, 256000, True,         # google/gemma-2-9b
            sliding_window=4096, layer_types=_alternating(42, 2)),
    _preset("gemma-2-27b", 46, 32, 16, 128, 4608, 27_227_128_320, 8192, 256000, True,      # google/gemma-2-27b
            sliding_window=4096, layer_types=_alternating(46, 2)),
    # google/gemma-3-27b-it text_config; parameters of the language model (the vision tower adds ~0.4B)
    _preset("gemma-3-27b", 62, 32, 16, 128, 5376, 27_009_346_304, 131072, 262208, True,
            sliding_window=1024, layer_types=_alternating(62, 6)),
    # google/gemma-3-270m, as `kvviz fetch gemma3` converts it: one KV head, 15 of 18 layers sliding over 512
    _preset("gemma-3-270m", 18, 4, 1, 256, 640, 268_098_176, 32768, 262144, True,
            sliding_window=512, layer_types=_alternating(18, 6)),
    # microsoft/Phi-3-mini-128k-instruct: its listed window (262,144) exceeds the context, so all full
    _preset("phi-3-mini", 32, 32, 32, 96, 3072, 3_821_079_552, 131072, 32064, False),
    # deepseek-ai/DeepSeek-V3: 671B is the paper's total (the Hub's 685B adds the MTP module);
    # head_dim = qk_nope 128 + qk_rope 64, the key a head would cache without the latent
    _preset("deepseek-v3", 61, 128, 128, 192, 7168, 671_000_000_000, 163840, 129280, False,
            v_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64),
    _preset("smollm2-135m", 30, 9, 3, 64, 576, 134_515_008, 8192, 49152, True),            # HuggingFaceTB/SmolLM2-135M
    # scripts/train_bundled_model.py
    _preset("bundled", 6, 8, 2, 32, 256, 5_278_976, 512, 4096, True),
)}


def format_bytes(num_bytes: float) -> str:
    """1073741824 -> '1.00 GiB' (binary units, as GPU memory is counted)."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= size:
            return f"{num_bytes / size:.2f} {unit}"
    return f"{num_bytes:,.0f} bytes"


def get_preset(name: str) -> ModelShape:
    """A preset by name (case-insensitive), or a ValueError naming a few that exist."""
    shape = PRESETS.get(str(name).lower())
    if shape is None:
        raise ValueError(f"Unknown preset {name!r}; try one of {', '.join(list(PRESETS)[:6])} "
                         f"(all {len(PRESETS)}: kvviz.shapes.PRESETS).")
    return shape


def shape_from_pretrained(name_or_path: str) -> ModelShape:
    """Read the shape of a model in the local Hugging Face cache or a folder; never downloads, and never
    runs a folder's own code (trust_remote_code=False: without it transformers asks on the terminal
    whether to run a config.json's `auto_map` modules, and a typed y ran them)."""
    from transformers import AutoConfig  # lazy: most callers never need transformers
    try:
        config = AutoConfig.from_pretrained(name_or_path, local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError, KeyError) as error:
        if "trust_remote_code" in str(error) or "custom code" in str(error):
            raise ValueError(f"{name_or_path!r} needs its own Python code to describe the model (auto_map), and "
                             "kvviz never runs a checkpoint's code; use a checkpoint of an architecture "
                             "transformers knows.") from None
        raise ValueError(f"No readable config for {name_or_path!r} in the local Hugging Face cache or as a "
                         "folder; download it first or pass a folder that holds config.json.") from error
    shape = ModelShape.from_hf_config(config, name=str(name_or_path))
    num_params = _count_checkpoint_params(name_or_path)
    return replace(shape, num_params=num_params) if num_params else shape


def _count_checkpoint_params(name_or_path: str) -> int | None:
    """Parameters counted from the safetensors headers of a local checkpoint (None if there are none)."""
    folder = name_or_path
    if not os.path.isdir(folder):
        try:
            from huggingface_hub import snapshot_download  # lazy; local_files_only never downloads
            folder = snapshot_download(name_or_path, local_files_only=True)
        except Exception:  # not cached, or no hub library: the count is only a nicety
            return None
    files = sorted(name for name in os.listdir(folder) if name.endswith(".safetensors"))
    # some repositories ship the same weights twice (Mistral's consolidated.safetensors); count model*
    files = [name for name in files if name.startswith("model")] or files
    total = 0
    for file_name in files:
        path = os.path.join(folder, file_name)
        with open(path, "rb") as file:
            header_length = int.from_bytes(file.read(8), "little")  # safetensors: u64 length, then JSON
            if not 2 <= header_length <= min(MAX_SAFETENSORS_HEADER, os.path.getsize(path) - 8):
                return None  # a damaged or crafted file: the count is only a nicety, never a huge read
            try:
                header = json.loads(file.read(header_length))
                total += sum(math.prod(entry["shape"]) for key, entry in header.items() if key != "__metadata__")
            except (ValueError, TypeError, KeyError, AttributeError):
                return None
    return total or None


MAX_SAFETENSORS_HEADER = 100 * 2**20  # the safetensors format's own limit on its JSON header
