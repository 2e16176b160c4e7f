"""DESIGN.md's public API, spelled exactly as it is written there, and the old names kept for one release."""

from types import ModuleType

from kvviz import Engine, SamplingParams, load_model
from kvviz.memory import PRESETS, ModelShape, kv_cache_bytes


def test_design_public_api_as_written(bundled):
    lm = load_model("bundled")
    assert (lm.model, lm.tokenizer, lm.device, lm.dtype) == (lm.model, lm.tokenizer, bundled.device, bundled.dtype)
    engine = Engine(lm, block_size=16, num_blocks=None, enable_prefix_caching=True,
                    max_num_seqs=64, max_num_batched_tokens=2048)
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    outs = engine.generate(["ROMEO:", [5, 6, 7]], params)
    assert [len(o.token_ids) for o in outs] == [4, 4] and isinstance(outs[0].text, str)
    rid = engine.add_request("JULIET:", params)
    record = engine.step()
    assert rid in [r.request_id for r in record.requests] and engine.has_unfinished()
    assert kv_cache_bytes(ModelShape(num_layers=32, num_kv_heads=8, head_dim=128),
                          tokens=8192, batch=1, dtype_bytes=2) == 1_073_741_824
    assert "llama-3.1-8b" in PRESETS


def test_old_adapter_name_still_works(bundled):
    from kvviz.engine.model_parts import model_parts
    from kvviz.strategies.run import unpack

    assert unpack(bundled) == model_parts(bundled)


def test_old_lesson_module_name_still_works(bundled):
    from kvviz.lesson import Lesson, LessonSettings, lesson_sampling
    from kvviz.prefill_decode import Lesson as Current

    lesson = Lesson.start(bundled, LessonSettings(prompt="ROMEO:", sampling=lesson_sampling(max_tokens=2)))
    assert Lesson is Current and lesson.prefill() is not None and lesson.records


def test_old_memory_module_name_still_works():
    import kvviz.memory
    import kvviz.memory_bill

    public = [name for name, value in vars(kvviz.memory_bill).items() if not name.startswith("_")
              and not isinstance(value, ModuleType)  # its own names and constants, not math or os
              and getattr(value, "__module__", "kvviz").startswith("kvviz")]
    assert "kv_cache_bytes" in public and "ACCELERATORS" in public
    assert all(getattr(kvviz.memory, name) is getattr(kvviz.memory_bill, name) for name in public)


def test_old_comparison_names_still_work():
    import kvviz.cache_strategies
    from kvviz.strategies import compare, compare_strategies, comparison_table

    assert compare_strategies is kvviz.cache_strategies.compare_strategies
    assert comparison_table is compare.comparison_table is kvviz.cache_strategies.comparison_table
