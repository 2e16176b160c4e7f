"""Load a model for kvviz: the bundled one, a Hugging Face id, a folder, or a custom shape.

    lm = load_model("bundled")                 # the small Shakespeare model that ships with kvviz
    lm = load_model("smollm2")                 # SmolLM2-135M-Instruct, once `kvviz fetch smollm2` has run
    lm = load_model("/path/model.Q4_1.gguf")   # a GGUF file, converted once into kvviz's cache
    lm = load_model("Qwen/Qwen3-0.6B")         # from the local Hugging Face cache, never the network
    lm = load_model("/path/to/checkpoint")     # a folder with config.json and weights
    lm = load_model(shape=CustomShape(num_layers=4, hidden_size=256, num_heads=8, num_kv_heads=2))
    lm = load_model("tiny-mla")                # a small random-weight DeepSeek-V3: MLA's latent cache
    lm = load_model("tiny-gemma3")             # a small random-weight Gemma-3: sliding-window layers

Every refusal is a `ModelLoadError` whose message is one sentence saying what is wrong and
what to do instead.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from huggingface_hub import try_to_load_from_cache
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES

from kvviz.engine.device_memory import available_memory_bytes
from kvviz.hub.cache import FetchError
from kvviz.hub.fetch import PACKAGED, fetch_command, fetched_folder
from kvviz.hub.gguf import converted_gguf
from kvviz.shapes import DEFAULT_CONTEXT, ModelShape

BUNDLED_DIR = Path(__file__).resolve().parent / "bundled_model"
MAX_SOURCE_CHARS = 500
MAX_LAYERS = 1024  # the largest real decoders have about 160
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
TINY_MLA = "tiny-mla"  # built in, like "bundled": random weights, so nothing to download
TINY_GEMMA3 = "tiny-gemma3"  # built in too: five sliding-window layers to one full, as Gemma-3 has them


class ModelLoadError(ValueError):
    """A model that kvviz cannot or will not load; the message says what to do."""


@dataclass(slots=True)
class CustomShape:
    """The size of a random-weight Llama-style model, as the Model lab's sliders set it."""

    num_layers: int = 4
    hidden_size: int = 256
    num_heads: int = 8
    num_kv_heads: int = 2
    head_dim: int | None = None  # None: hidden_size // num_heads
    intermediate_size: int | None = None  # None: about 8/3 of hidden_size, as Llama does
    vocab_size: int | None = None  # None: the bundled tokenizer's vocabulary
    max_context: int = 512

    def resolved_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // max(self.num_heads, 1)

    def resolved_intermediate_size(self) -> int:
        return self.intermediate_size or 64 * max(1, round(self.hidden_size * 8 / 3 / 64))

    def num_params(self, vocab_size: int) -> int:
        """Parameter count of the LlamaForCausalLM this shape builds (tied embeddings)."""
        d, hd = self.hidden_size, self.resolved_head_dim()
        attention = d * self.num_heads * hd * 2 + d * self.num_kv_heads * hd * 2  # q, o, k, v
        mlp = 3 * d * self.resolved_intermediate_size()
        norms = 2 * d
        return vocab_size * d + self.num_layers * (attention + mlp + norms) + d


@dataclass
class LoadedModel:
    """A model ready for the engine: the module, its tokenizer, where it runs and in what dtype."""

    model: torch.nn.Module
    tokenizer: object | None
    device: torch.device
    dtype: torch.dtype
    name: str
    source: str  # "bundled", "packaged", "gguf", "hub", "folder", "custom", "tiny-mla" or "tiny-gemma3"
    max_context: int

    @property
    def config(self):
        return self.model.config

    @property
    def shape(self) -> ModelShape:
        """Layers, heads, KV heads, head size, windows and dtype, read once from the config."""
        return ModelShape.of_model(self.model, name=self.name)

    def describe(self) -> dict:
        """A short summary for the sidebar and for exported lessons (plain JSON values)."""
        shape = self.shape
        return {
            "name": self.name, "source": self.source, "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "layers": shape.num_layers, "heads": shape.num_heads, "kv_heads": shape.num_kv_heads,
            "head_dim": shape.head_dim, "hidden_size": shape.hidden_size, "dtype_bytes": shape.dtype_bytes,
            "max_context": self.max_context, "v_head_dim": shape.v_head_dim or shape.head_dim,
            # MLA (DeepSeek-V3): the cache keeps a latent and a rotary key per token, not K and V per head
            "kv_lora_rank": shape.kv_lora_rank, "qk_rope_head_dim": shape.qk_rope_head_dim,
            # sliding-window layers (Gemma 3): which layers slide, and over how many positions
            "layer_types": list(shape.layer_types) if shape.sliding_window and shape.layer_types else None,
            "sliding_window": shape.sliding_window,
        }


def model_in_words(info: dict) -> str:
    """One sentence on a model, from its `describe()` summary, for a page that names the model in use:
    "SmolLM2-135M-Instruct: 134.5M parameters, 30 layers; 9 query heads share 3 KV heads (GQA)."."""
    heads, kv_heads = info["heads"], info["kv_heads"]
    if info.get("kv_lora_rank"):
        sharing = f"{heads} heads rebuild K and V from one cached latent row per token (MLA)"
    elif kv_heads == 1:
        sharing = f"{heads} query heads share 1 KV head (MQA)"
    elif kv_heads < heads:
        sharing = f"{heads} query heads share {kv_heads} KV heads (GQA)"
    else:
        sharing = f"{heads} query heads, each with its own KV head (MHA)"
    kinds = info.get("layer_types") or []
    sliding = sum(kind == "sliding_attention" for kind in kinds)
    slides = (f"; {sliding} of its {info['layers']} layers slide over the last {info['sliding_window']:,} positions"
              if sliding else "")
    return (f"{info['name']}: {info['parameters'] / 1e6:.1f}M parameters, {info['layers']} layers; "
            f"{sharing}{slides}.")


def summary_shape(info: dict) -> ModelShape:
    """The cache's shape back from a `LoadedModel.describe()` summary: for a lesson replayed without a model."""
    return ModelShape(name=info["name"], num_layers=info["layers"], num_kv_heads=info["kv_heads"],
                      head_dim=info["head_dim"], kv_lora_rank=info.get("kv_lora_rank"),
                      qk_rope_head_dim=info.get("qk_rope_head_dim"),
                      layer_types=tuple(info["layer_types"]) if info.get("layer_types") else None,
                      sliding_window=info.get("sliding_window"))


def default_heldout_text() -> str:
    """The bundled model's held-out text (kvviz/bundled_model/heldout.txt), never seen in its training."""
    return (BUNDLED_DIR / "heldout.txt").read_text(encoding="utf-8")


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """The device asked for (CUDA when present by default); a sentence for one this machine lacks."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ModelLoadError(f"Unknown device {str(device)[:40]!r}; use cpu, cuda or mps.") from None
    if device.type not in ("cpu", "cuda", "mps"):
        raise ModelLoadError(f"kvviz does not run on {device.type!r} devices; use cpu, cuda or mps.")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("CUDA was asked for but PyTorch sees no CUDA GPU on this machine; use cpu.")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ModelLoadError("MPS was asked for but this machine has no Apple GPU; use cpu.")
    return device


def pick_dtype(device: torch.device, dtype: str | torch.dtype | None = None) -> torch.dtype:
    """float32 on CPU, bfloat16 on CUDA, unless asked otherwise."""
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ModelLoadError(f"Unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}.")
    return DTYPES[dtype]


def clean_source(source: str | None) -> str:
    """The model name as typed, stripped ('bundled' when empty); refuses a name no model has."""
    source = (source or "bundled").strip()
    if len(source) > MAX_SOURCE_CHARS:
        raise ModelLoadError(f"A model name of {len(source):,} characters is too long; give 'bundled', "
                             "'smollm2', a Hugging Face id, a folder or a .gguf file.")
    return source


def load_model(source: str = "bundled", *, shape: CustomShape | None = None,
               device: str | torch.device | None = None,
               dtype: str | torch.dtype | None = None) -> LoadedModel:
    """Load `source` ("bundled", "smollm2", "tiny-mla", "tiny-gemma3", a Hugging Face id, a folder or a .gguf
    file), or build `shape` with random weights."""
    device = pick_device(device)
    dtype = pick_dtype(device, dtype)
    if shape is not None:
        return _build_custom(shape, device, dtype)
    if not isinstance(source, str) or not source.strip():  # load_model(5), (None) or ("") loaded the bundled model
        raise ModelLoadError(f"load_model takes a model name, not {source!r:.40}; give 'bundled', 'tiny-mla', "
                             "'tiny-gemma3', a Hugging Face id or a folder.")
    source = clean_source(source)
    if source == "bundled":
        return _load_pretrained(str(BUNDLED_DIR), "bundled", "bundled", device, dtype)
    if source == TINY_MLA:
        return build_tiny_mla(device, dtype)
    if source == TINY_GEMMA3:
        return build_tiny_gemma3(device, dtype)
    if source in PACKAGED:
        return _load_packaged(source, device, dtype)
    if source.lower().endswith(".gguf"):
        return _load_gguf(source, device, dtype)
    if Path(source).expanduser().is_dir():
        folder = os.path.realpath(Path(source).expanduser())
        return _load_pretrained(folder, Path(folder).name, "folder", device, dtype)
    if source.startswith((".", "/", "~")):
        raise ModelLoadError(f"There is no folder at {source!r}; give a folder that holds "
                             "config.json and the weights, a Hugging Face id, or 'bundled'.")
    return _load_pretrained(source, source, "hub", device, dtype)


def _load_packaged(name: str, device, dtype) -> LoadedModel:
    """A model `kvviz fetch NAME` made ready; kvviz never downloads it here."""
    folder = fetched_folder(name)
    if folder is None:
        raise ModelLoadError(f"{PACKAGED[name].title} is not fetched on this machine yet; run "
                             f"`{fetch_command(name)}` once (it downloads about {PACKAGED[name].download_mb} MB).")
    return _load_pretrained(str(folder), name, "packaged", device, dtype)


def _load_gguf(path: str, device, dtype) -> LoadedModel:
    """A GGUF file, converted into the cache the first time (kvviz.hub.gguf), then loaded as a folder."""
    def refuse_early(config) -> None:  # before the slow dequantization
        check_causal_decoder(config)
        check_fits(estimate_weight_bytes(config, torch.float32), device, Path(path).name)  # dequantized to float32

    try:
        folder = converted_gguf(path, check_config=refuse_early)
    except FetchError as error:
        raise ModelLoadError(str(error)) from None
    return _load_pretrained(str(folder), Path(path).name, "gguf", device, dtype)


def _load_config(where: str, source: str):
    try:
        return AutoConfig.from_pretrained(where, local_files_only=True, trust_remote_code=False)
    except Exception as error:  # transformers raises several kinds; all mean "not here"
        if source == "hub":
            raise ModelLoadError(
                f"{where!r} is not in the local Hugging Face cache and kvviz never downloads; "
                "pick 'bundled', give a local folder, or run `huggingface-cli download "
                f"{where}` on a machine with internet first.") from error
        raise ModelLoadError(f"Could not read a model config in {where!r} ({type(error).__name__}); "
                             "the folder needs a config.json from a Hugging Face checkpoint.") from error


def check_causal_decoder(config) -> None:
    """Refuse encoder-only and encoder-decoder models: kvviz caches a decoder's keys and values."""
    text_config = config.get_text_config()
    model_type = text_config.model_type
    if getattr(config, "is_encoder_decoder", False):
        raise ModelLoadError(f"{config.model_type!r} is an encoder-decoder model; kvviz runs "
                             "decoder-only causal language models such as Llama, Qwen or GPT-2.")
    # BERT-like encoders also register a causal head; having a masked-LM head gives them away
    if model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES or model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ModelLoadError(f"{model_type!r} is not a causal (decoder-only) language model; "
                             "pick one such as Llama, Qwen, Mistral, Gemma or GPT-2.")


def estimate_weight_bytes(config, dtype: torch.dtype) -> int:
    """Weights' size from the config's numbers alone, before anything is built (a Llama-style count:
    embeddings, attention, a gated MLP per expert, norms); refuses sizes no real model has."""
    text_config = config.get_text_config()
    sizes = {}
    for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
        sizes[name] = getattr(text_config, name, None)
        if isinstance(sizes[name], bool) or not isinstance(sizes[name], int) or sizes[name] <= 0:
            raise ModelLoadError(f"The config's {name} is {sizes[name]!r}; a checkpoint's sizes are whole "
                                 "numbers above zero, so this config is damaged.")
    if sizes["num_hidden_layers"] > MAX_LAYERS:
        raise ModelLoadError(f"The config asks for {sizes['num_hidden_layers']:,} layers, more than the "
                             f"{MAX_LAYERS:,} kvviz loads; check the checkpoint's config.json.")
    hidden, layers, heads = sizes["hidden_size"], sizes["num_hidden_layers"], sizes["num_attention_heads"]
    kv_heads = getattr(text_config, "num_key_value_heads", None) or heads
    head_dim = getattr(text_config, "head_dim", None) or hidden // heads
    intermediate = getattr(text_config, "intermediate_size", None) or 4 * hidden
    experts = getattr(text_config, "num_local_experts", None) or getattr(text_config, "num_experts", None) or 1
    for name, value in (("num_key_value_heads", kv_heads), ("head_dim", head_dim),
                        ("intermediate_size", intermediate), ("experts", experts)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ModelLoadError(f"The config's {name} is {value!r}; a checkpoint's sizes are whole "
                                 "numbers above zero, so this config is damaged.")
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2  # q, o, k, v
    mlp = 3 * hidden * intermediate * experts
    embeddings = sizes["vocab_size"] * hidden * (1 if getattr(config, "tie_word_embeddings", True) else 2)
    params = embeddings + layers * (attention + mlp + 2 * hidden) + hidden
    return params * torch.empty((), dtype=dtype).element_size()


def check_fits(weight_bytes: int, device: torch.device, what: str) -> None:
    available = available_memory_bytes(device)
    # keep a margin for activations and the KV cache
    if weight_bytes > 0.8 * available:
        raise ModelLoadError(
            f"{what} needs about {weight_bytes / 2**30:.2f} GiB for its weights but only "
            f"{available / 2**30:.2f} GiB is free on {device}; choose a smaller size or a smaller dtype.")


def _max_context(config) -> int:
    try:
        return ModelShape.from_hf_config(config).max_context or DEFAULT_CONTEXT
    except ValueError as error:  # a config the memory bill cannot describe
        raise ModelLoadError(str(error)) from None


def _load_pretrained(where: str, name: str, source: str, device, dtype) -> LoadedModel:
    config = _load_config(where, source)
    check_causal_decoder(config)
    check_fits(estimate_weight_bytes(config, dtype), device, name)
    try:
        model, loading = AutoModelForCausalLM.from_pretrained(
            where, local_files_only=True, trust_remote_code=False, dtype=dtype, output_loading_info=True)
    except Exception as error:
        raise ModelLoadError(f"The weights of {name!r} could not be loaded ({type(error).__name__}: "
                             f"{str(error).splitlines()[0][:120]}); check that the checkpoint is complete.") from error
    missing = sorted(loading.get("missing_keys") or [])
    if missing:  # transformers would fill them with random values and run anyway
        raise ModelLoadError(f"The checkpoint {name!r} lacks {len(missing):,} weights ({missing[0]}, ...), so "
                             "parts of it would run on random numbers; download or copy it again in full.")
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, local_files_only=True, trust_remote_code=False)
    except Exception as error:  # a checkpoint without tokenizer still runs on token ids
        if "trust_remote_code" in str(error):  # there is one, but only its own Python would read it
            raise ModelLoadError(f"The tokenizer of {name!r} needs its own code to run (trust_remote_code), and "
                                 "kvviz runs no code from a checkpoint; use a checkpoint whose tokenizer "
                                 "transformers reads by itself.") from None
        tokenizer = None
    vocab_size = model.get_input_embeddings().weight.shape[0]
    if tokenizer is not None and len(tokenizer) > vocab_size:  # its ids past the table: an IndexError mid-lesson
        raise ModelLoadError(f"The tokenizer of {name!r} has {len(tokenizer):,} tokens but the model's embedding "
                             f"table holds {vocab_size:,}, so some text would give ids the model cannot look up; "
                             "put the tokenizer that came with these weights beside them.")
    model.to(device).eval()
    return LoadedModel(model, tokenizer, device, dtype, name, source, _max_context(config))


def validate_shape(shape: CustomShape, vocab_size: int) -> None:
    sizes = asdict(shape)
    for field_name, value in sizes.items():
        if value is not None and value <= 0:
            raise ModelLoadError(f"{field_name.replace('_', ' ')} must be positive, not {value}.")
    if shape.head_dim is None and shape.hidden_size % shape.num_heads:
        raise ModelLoadError(f"Hidden size {shape.hidden_size} does not divide into {shape.num_heads} heads; "
                             "pick a hidden size that is a multiple of the head count.")
    if shape.num_heads % shape.num_kv_heads:
        raise ModelLoadError(f"{shape.num_heads} query heads cannot share {shape.num_kv_heads} KV heads evenly; "
                             "pick a KV head count that divides the query head count.")
    if shape.resolved_head_dim() % 2:
        raise ModelLoadError(f"Head size {shape.resolved_head_dim()} is odd; rotary embeddings need an even head size.")


def _build_custom(shape: CustomShape, device, dtype) -> LoadedModel:
    tokenizer = AutoTokenizer.from_pretrained(str(BUNDLED_DIR), local_files_only=True)
    vocab_size = shape.vocab_size or len(tokenizer)
    validate_shape(shape, vocab_size)
    weight_bytes = shape.num_params(vocab_size) * torch.empty((), dtype=dtype).element_size()
    check_fits(weight_bytes, device, "This shape")
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=shape.hidden_size,
        intermediate_size=shape.resolved_intermediate_size(), num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads, num_key_value_heads=shape.num_kv_heads,
        head_dim=shape.resolved_head_dim(), max_position_embeddings=shape.max_context,
        tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)  # the same shape always gets the same random weights
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype)
    model.eval()
    name = (f"random {shape.num_layers}L d{shape.hidden_size} "
            f"{shape.num_heads}h/{shape.num_kv_heads}kv")
    if shape.vocab_size and shape.vocab_size < len(tokenizer):
        tokenizer = None  # the bundled tokenizer would produce ids outside this vocabulary
    return LoadedModel(model, tokenizer, device, dtype, name, "custom", shape.max_context)


def seeded_model(model_class, config, seed: int, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """A small model's random weights drawn on the CPU, then moved: CUDA's generator draws other numbers
    for the same seed, so a model built there would differ from the one the CPU builds."""
    torch.manual_seed(seed)
    return model_class(config).to(device=device, dtype=dtype).eval()


def build_tiny_mla(device=None, dtype=None, seed: int = 0) -> LoadedModel:
    """A small DeepSeek-V3 with random weights and the bundled tokenizer, the same for the same seed.

    Its attention is MLA: per token and layer the cache keeps a 128-value latent and a 16-value
    rotary key (DeepSeek-V3's proportions: a latent of 4 key heads, a rotary key of half a head),
    where the same 8 heads without the latent would keep 8 × (48 + 32) = 640 values. Dense MLPs
    only, so it is as quick as the bundled model. It says nothing sensible: it shows the cache.
    """
    device = pick_device(device)
    dtype = pick_dtype(device, dtype)
    tokenizer = AutoTokenizer.from_pretrained(str(BUNDLED_DIR), local_files_only=True)
    config = DeepseekV3Config(
        vocab_size=len(tokenizer), hidden_size=256, intermediate_size=704, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=8, kv_lora_rank=128, q_lora_rank=None,
        qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, first_k_dense_replace=4,  # no MoE layer
        max_position_embeddings=512, tie_word_embeddings=True, initializer_range=0.05,  # 0.02 repeats one token
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = seeded_model(DeepseekV3ForCausalLM, config, seed, device, dtype)
    return LoadedModel(model, tokenizer, device, dtype, "tiny MLA (random DeepSeek-V3)", TINY_MLA, 512)


def build_tiny_gemma3(device=None, dtype=None, seed: int = 0) -> LoadedModel:
    """A small Gemma-3 with random weights and the bundled tokenizer, the same for the same seed.

    Five of its six layers attend to a sliding window of 16 tokens and one to the whole context,
    as Gemma-3 interleaves them (its real window is 1,024). The engine gives the sliding layers a
    block table of their own (engine/layer_groups.py) and hands back the blocks the window has
    left, so the Paged lesson shows one table growing and one staying flat. It says nothing
    sensible: it shows the cache.
    """
    device = pick_device(device)
    dtype = pick_dtype(device, dtype)
    tokenizer = AutoTokenizer.from_pretrained(str(BUNDLED_DIR), local_files_only=True)
    config = Gemma3TextConfig(
        vocab_size=len(tokenizer), hidden_size=256, intermediate_size=704, num_hidden_layers=6,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, query_pre_attn_scalar=64,
        sliding_window=16, max_position_embeddings=512, initializer_range=0.05,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = seeded_model(Gemma3ForCausalLM, config, seed, device, dtype)
    return LoadedModel(model, tokenizer, device, dtype, "tiny Gemma-3 (random, sliding window 16)",
                       TINY_GEMMA3, 512)


# ---- what students may load on a shared server -------------------------------------------------
ALLOWED_MODELS_ENV = "KVVIZ_MODELS"
DEFAULT_ALLOWED = "bundled,hf-cache"


def allowed_source(source: str, policy: str | None = None) -> str:
    """The canonical name of `source` if the server's policy lets a student load it.

    policy: comma-separated rules from KVVIZ_MODELS (default "bundled,hf-cache"): "bundled" (also
    allows "tiny-mla" and "tiny-gemma3", built in too, and the packaged models such as "smollm2",
    loaded only once the server's owner has fetched them); "hf-cache" (any id already in the local
    Hugging Face cache); "folders" (any folder or .gguf file); or a folder, a .gguf file, a packaged
    model or a hub id allowed by name. A refused folder gets the same sentence whether it
    exists or not, so the field cannot probe the disk. Folders come back as their real path, so
    one folder spelled several ways is one cache entry.
    """
    policy = os.environ.get(ALLOWED_MODELS_ENV, DEFAULT_ALLOWED) if policy is None else policy
    rules = [rule.strip() for rule in policy.split(",") if rule.strip()]
    source = clean_source(source)
    if source in ("bundled", TINY_MLA, TINY_GEMMA3, *PACKAGED) and "bundled" in rules:
        return source
    named_folders = {os.path.realpath(os.path.expanduser(r)) for r in rules if r.startswith(("/", ".", "~"))}
    if source.startswith(("/", ".", "~")):
        folder = os.path.realpath(os.path.expanduser(source))
        if "folders" in rules or folder in named_folders:
            return folder
    elif source in rules or ("hf-cache" in rules and _in_hf_cache(source)):
        return source
    allowed = ", ".join(rules) or "nothing"
    raise ModelLoadError(f"This server lets students load only these models ({allowed}); pick one of them, "
                         f"or ask the teacher to allow more with {ALLOWED_MODELS_ENV}.")


def _in_hf_cache(repo_id: str) -> bool:
    """True when the id is a well-formed hub id whose config is in the local cache (never downloads)."""
    if not re.fullmatch(r"[\w.-]{1,96}(/[\w.-]{1,96})?", repo_id) or ".." in repo_id:
        return False
    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # a malformed id: not in the cache
        return False
