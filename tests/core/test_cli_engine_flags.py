"""Issue 31: every EngineConfig field is a flag of `generate` and `bench`, made from the dataclass, and
`generate --backend vllm` maps each engine flag to vLLM's own or refuses it in one sentence.

The fields are read from dataclasses.fields here, so a new field without a flag fails these tests."""

import argparse
import contextlib
import dataclasses
import io
import json

import pytest

from app_tests import one_sentence
from kvviz.cli.main import build_parser, main
from kvviz.engine.config import DEFAULTS, EngineConfig

FIELDS = dataclasses.fields(EngineConfig)


def other_value(field: dataclasses.Field):
    """A valid value of this field that is not its default."""
    default = field.default
    if field.metadata["choices"]:
        return next(choice for choice in field.metadata["choices"] if choice != default)
    if isinstance(default, bool):
        return not default
    if isinstance(default, float):
        return default / 2
    return 8 if default is None else default + 1


def argv(name: str, value) -> list[str]:
    """The command line for one setting, spelled as a user types it (independent of kvviz's helpers)."""
    dashed = name.replace("_", "-")
    if isinstance(value, bool):
        negative = name.removeprefix("enable_").removeprefix("use_").replace("_", "-")
        return [f"--{dashed}" if value else f"--no-{negative}"]
    return [f"--{dashed}", "none" if value is None else str(value)]


def generate_args(*flags: str) -> argparse.Namespace:
    return build_parser().parse_args(["generate", "--prompts", "p.txt", *flags])


def help_text(*command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main([*command, "--help"])
    return " ".join(out.getvalue().split())  # argparse wraps lines anywhere


def test_generate_help_lists_every_field_with_its_help_and_default():
    text = help_text("generate")
    for field in FIELDS:
        assert f"--{field.name.replace('_', '-')}" in text, f"EngineConfig.{field.name} has no flag"
        shown = ("on" if field.default else "off") if isinstance(field.default, bool) else field.default
        assert f"{' '.join(field.metadata['help'].split())} (default: {shown})" in text, field.name
        if field.metadata["choices"]:
            assert "{" + ",".join(field.metadata["choices"]) + "}" in text, field.name
    assert "--no-prefix-caching" in text and "--no-chunked-prefill" in text and "--no-cache" in text


def test_every_field_round_trips_into_the_engine_config():
    from kvviz.cli.engine_flags import engine_config, given

    assert given(generate_args()) == {} and engine_config(generate_args()) == DEFAULTS
    everything = []
    for field in FIELDS:
        value = other_value(field)
        args = generate_args(*argv(field.name, value))
        assert given(args) == {field.name: value}, field.name  # only what was given
        assert engine_config(args) == DEFAULTS.with_overrides(**{field.name: value}), field.name
        everything += argv(field.name, value)
    assert engine_config(generate_args(*everything)) == EngineConfig(**{f.name: other_value(f) for f in FIELDS})
    for field in FIELDS:  # the default, given, is given
        args = generate_args(*argv(field.name, field.default))
        assert given(args) == {field.name: field.default} and engine_config(args) == DEFAULTS


def test_bench_takes_every_engine_flag_and_refuses_a_bad_one_before_loading(capsys):
    from kvviz.cli.bench import add_bench_arguments, run_bench
    from kvviz.cli.engine_flags import given

    parser = add_bench_arguments(argparse.ArgumentParser())
    assert given(parser.parse_args([])) == {}  # the headline row: Engine(model), every default
    for field in FIELDS:
        assert given(parser.parse_args(argv(field.name, other_value(field)))) == {field.name: other_value(field)}
    assert run_bench(parser.parse_args(["--quick", "--max-num-seqs", "0", "--model", "/no/such/model"])) == 2
    assert "max_num_seqs must be a whole number from 1 to 1,024" in capsys.readouterr().out


# ---- the same flags on vLLM ------------------------------------------------------------------
def test_vllm_maps_what_it_can_to_its_own_arguments():
    from kvviz.cli.engine_flags import given, vllm_engine_options

    args = generate_args("--block-size", "32", "--num-blocks", "8", "--max-num-seqs", "4",
                         "--max-num-batched-tokens", "512", "--no-prefix-caching", "--no-chunked-prefill",
                         "--kv-cache-dtype", "fp8_per_tensor")
    assert vllm_engine_options(given(args)) == {
        "block_size": 32, "num_gpu_blocks_override": 9,  # vLLM keeps one block empty as its null block
        "max_num_seqs": 4, "max_num_batched_tokens": 512, "enable_prefix_caching": False,
        "enable_chunked_prefill": False, "kv_cache_dtype": "fp8"}
    for ours, theirs in (("int8", "int8_per_token_head"), ("fp8", "fp8_per_token_head"), ("auto", "auto")):
        assert vllm_engine_options({"kv_cache_dtype": ours}) == {"kv_cache_dtype": theirs}  # a scale per token, head
    assert vllm_engine_options(given(generate_args())) == {}  # nothing given: vLLM's own defaults
    # what vLLM always does anyway, asked for, is honoured
    honoured = generate_args("--preemption-mode", "recompute", "--attention", "auto", "--use-cache",
                             "--no-record-blocks", "--swap-space-blocks", "none", "--num-blocks", "none")
    assert vllm_engine_options(given(honoured)) == {}
    drafts = generate_args("--speculative-tokens", "4", "--prompt-lookup-max", "5")
    assert vllm_engine_options(given(drafts)) == {"speculative_config": {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 5, "prompt_lookup_min": 1}}


@pytest.mark.parametrize("flags, words", [
    (["--preemption-mode", "swap"], "--preemption-mode swap is a setting of kvviz's engine that vLLM cannot honour"),
    (["--swap-space-blocks", "4"], "--swap-space-blocks 4 is a setting of kvviz's engine"),
    (["--attention", "sdpa"], "--attention sdpa is a setting of kvviz's engine"),
    (["--no-cache"], "--no-cache is a setting of kvviz's engine that vLLM cannot honour (vLLM always keeps"),
    (["--record-blocks"], "--record-blocks is a setting"),
    (["--memory-fraction", "0.5"], "--memory-fraction 0.5 is a setting of kvviz's engine"),
])
def test_vllm_refuses_what_it_cannot_honour_in_one_sentence(flags, words):
    from kvviz.cli.engine_flags import given, vllm_engine_options

    with pytest.raises(ValueError) as refused:
        vllm_engine_options(given(generate_args(*flags)))
    assert words in str(refused.value) and one_sentence(str(refused.value)), str(refused.value)


def test_vllm_never_drops_a_field_silently():
    """Every field, set to another value, is mapped to a vLLM argument or refused."""
    from kvviz.cli.engine_flags import vllm_engine_options

    for field in FIELDS:
        settings = {field.name: other_value(field)}
        if field.name.startswith("prompt_lookup"):  # the lookup's lengths matter only with drafts
            settings["speculative_tokens"] = 2
        try:
            options = vllm_engine_options(settings)
        except ValueError as refusal:
            assert one_sentence(str(refusal)), str(refusal)
            continue
        assert options, f"{field.name} is dropped on the way to vLLM"
        if field.name.startswith("prompt_lookup"):
            assert options["speculative_config"][field.name] == other_value(field)


def test_generate_on_vllm_refuses_before_any_work(tmp_path, capsys):
    prompts = tmp_path / "p.txt"
    prompts.write_text("ROMEO:\n")
    common = ["generate", "--prompts", str(prompts), "--out", str(tmp_path / "o.jsonl"), "--backend", "vllm",
              "--vllm-python", str(tmp_path / "nowhere" / "python")]
    assert main([*common, "--preemption-mode", "swap"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: --preemption-mode swap is a setting of kvviz's engine") and "\n" not in error
    # --num-blocks maps to vLLM's num_gpu_blocks_override: the next refusal is that vLLM is not there
    assert main([*common, "--num-blocks", "8"]) == 2
    assert "vLLM's Python is not at" in capsys.readouterr().err and not (tmp_path / "o.jsonl").exists()


def test_new_flags_reach_the_engine(tmp_path, bundled):
    """--kv-cache-dtype, --attention and --no-chunked-prefill, which the command line lacked, run the engine so."""
    from kvviz import Engine, SamplingParams

    prompts = tmp_path / "p.txt"
    prompts.write_text("ROMEO: I love thee\n")
    out = tmp_path / "o.jsonl"
    flags = ["--kv-cache-dtype", "int8", "--attention", "sdpa", "--no-chunked-prefill", "--max-num-batched-tokens",
             "64", "--block-size", "8"]
    assert main(["generate", "--prompts", str(prompts), "--max-tokens", "6", "--out", str(out), *flags]) == 0
    expected = Engine(bundled, kv_cache_dtype="int8", attention="sdpa", enable_chunked_prefill=False,
                      max_num_batched_tokens=64, block_size=8).generate(["ROMEO: I love thee"],
                                                                         SamplingParams(max_tokens=6))[0]
    assert json.loads(out.read_text())["token_ids"] == expected.token_ids
