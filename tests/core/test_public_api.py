"""The public API of docs/design.md, spelled exactly as it is written there."""

from kvviz import PRESETS, Engine, ModelShape, SamplingParams, kv_cache_bytes, load_model


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
