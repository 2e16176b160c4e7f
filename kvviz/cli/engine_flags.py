"""EngineConfig's fields as command-line flags, made from the dataclass: a new field gets its flag.

    --block-size 16   --num-blocks none   --no-prefix-caching   --kv-cache-dtype fp8   --attention sdpa

A flag is its field's name with dashes, its help the field's help, its choices the field's. A
True/False field is a pair of flags, one turning it on and one off (--enable-x / --no-x, --use-x /
--no-x, --x / --no-x); a field whose default is None also takes `none`. A flag left out stays out
of the parsed arguments, so `given(args)` is what the user set and EngineConfig keeps the rest.
`vllm_engine_options` turns the flags given to `generate --backend vllm` into vLLM's LLM(...)
arguments, and refuses, in one sentence, any that vLLM cannot honour.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing

from kvviz.engine.config import DEFAULTS, EngineConfig

FIELDS = dataclasses.fields(EngineConfig)
TYPES = typing.get_type_hints(EngineConfig)  # field name -> int, bool, float, str or int | None


class Switch(argparse.Action):
    """One True/False setting as two flags: the first turns it on, the --no- one off."""

    def __init__(self, option_strings, dest, default=None, help=None):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, not option_string.startswith("--no-"))

    def format_usage(self) -> str:
        return " | ".join(self.option_strings)


def whole_or_none(text: str) -> int | None:
    """A whole number, or `none` for a setting whose None means 'let the engine decide'."""
    return None if text.strip().lower() == "none" else int(text)


whole_or_none.__name__ = "whole number or none"  # argparse names the type in its refusal


def flag_names(name: str) -> list[str]:
    """The flags of one field: ['--block-size'], or for a True/False one ['--enable-x', '--no-x']."""
    dashed = "--" + name.replace("_", "-")
    if TYPES[name] is not bool:
        return [dashed]
    return [dashed, "--no-" + name.removeprefix("enable_").removeprefix("use_").replace("_", "-")]


def flag(name: str, value) -> str:
    """How a user gives this value of this field, e.g. '--no-prefix-caching' or '--num-blocks 8'."""
    names = flag_names(name)
    if TYPES[name] is bool:
        return names[0] if value else names[1]
    return f"{names[0]} {'none' if value is None else value}"


def add_engine_arguments(parser: argparse.ArgumentParser, note: str = "") -> None:
    """A flag for every EngineConfig field, each with its field's help and default, in one group."""
    group = parser.add_argument_group("engine settings (EngineConfig's fields)", note or None)
    for field in FIELDS:
        kind, default = TYPES[field.name], field.default
        shown = ("on" if default else "off") if kind is bool else default
        options = dict(dest=field.name, default=argparse.SUPPRESS, help=f"{field.metadata['help']} (default: {shown})")
        if kind is bool:
            group.add_argument(*flag_names(field.name), action=Switch, **options)
            continue
        if default is None:  # the flag takes `none` too
            kind, options["metavar"] = whole_or_none, f"{field.name.upper()}|none"
        group.add_argument(*flag_names(field.name), type=kind, choices=field.metadata["choices"], **options)


def given(args: argparse.Namespace) -> dict:
    """The engine settings the user gave, by field name; the flags left out are not there."""
    return {field.name: getattr(args, field.name) for field in FIELDS if hasattr(args, field.name)}


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """The engine flags as an EngineConfig: EngineConfig's defaults, overridden by the flags given."""
    return DEFAULTS.with_overrides(**given(args))


# ---- the same flags on vLLM -------------------------------------------------------------------
# EngineConfig field -> vLLM's LLM(...) argument of the same meaning
VLLM_ARGUMENTS = {"block_size": "block_size", "num_blocks": "num_gpu_blocks_override",
                  "enable_prefix_caching": "enable_prefix_caching", "max_num_seqs": "max_num_seqs",
                  "max_num_batched_tokens": "max_num_batched_tokens",
                  "enable_chunked_prefill": "enable_chunked_prefill"}
# kvviz's kv_cache_dtype -> vLLM's of the same scheme (vLLM 0.32's names): a scale per token and KV head, or
# fp8 with one scale
VLLM_KV_CACHE_DTYPES = {"auto": "auto", "int8": "int8_per_token_head", "fp8": "fp8_per_token_head",
                        "fp8_per_tensor": "fp8"}
# kvviz's own settings: the values vLLM always runs with (a flag asking for one is honoured), and why
VLLM_FIXED = {
    "use_cache": ((True,), "vLLM always keeps the KV cache"),
    "record_blocks": ((False,), "vLLM writes no kvviz step records"),
    "memory_fraction": ((), "vLLM sizes its cache from --kv-cache-bytes or its own share of the whole GPU"),
    "preemption_mode": (("recompute",), "vLLM's engine preempts by recomputing only"),
    "swap_space_blocks": ((None,), "vLLM's engine preempts by recomputing, with no swap space"),
    "attention": (("auto",), "vLLM picks its own attention backend"),
}
SPECULATIVE = ("speculative_tokens", "prompt_lookup_max", "prompt_lookup_min")  # vLLM's n-gram drafts


def vllm_engine_options(settings: dict) -> dict:
    """The engine settings given to `generate --backend vllm` (field -> value, see `given`) as vLLM's
    LLM(...) arguments; a setting vLLM cannot honour is refused in one sentence, never dropped."""
    options = {}
    for name, value in settings.items():
        if name in VLLM_ARGUMENTS:
            if value is not None:  # None: vLLM sizes the pool itself, as kvviz does
                # vLLM keeps one block of its pool as the empty null block: one more gives num_blocks usable
                options[VLLM_ARGUMENTS[name]] = value + 1 if name == "num_blocks" else value
        elif name in VLLM_FIXED:
            honoured, reason = VLLM_FIXED[name]
            if value not in honoured:
                raise ValueError(f"{flag(name, value)} is a setting of kvviz's engine that vLLM cannot honour "
                                 f"({reason}); drop it or run without --backend vllm.")
        elif name == "kv_cache_dtype":
            if value not in VLLM_KV_CACHE_DTYPES:
                raise ValueError(f"{flag(name, value)} has no vLLM counterpart; give one of "
                                 f"{', '.join(VLLM_KV_CACHE_DTYPES)}, or run without --backend vllm.")
            options["kv_cache_dtype"] = VLLM_KV_CACHE_DTYPES[value]
        elif name not in SPECULATIVE:  # a new EngineConfig field, not mapped here yet
            raise ValueError(f"{flag(name, value)} is not passed to vLLM yet; drop it or run without --backend vllm.")
    config = DEFAULTS.with_overrides(**{name: settings[name] for name in SPECULATIVE if name in settings})
    if config.speculative_tokens:  # the lookup's n-gram lengths matter only with drafts, on either engine
        options["speculative_config"] = {"method": "ngram", "num_speculative_tokens": config.speculative_tokens,
                                         "prompt_lookup_max": config.prompt_lookup_max,
                                         "prompt_lookup_min": config.prompt_lookup_min}
    return options
