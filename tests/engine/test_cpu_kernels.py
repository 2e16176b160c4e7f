"""The compiled paged-attention kernel: the same outputs as attention over gathered keys and
values, in every shape the engine meets, and the engine's choice of it."""

import pytest
import torch

from kvviz import Engine, SamplingParams
from kvviz.engine.cpu import kernels as cpu_kernels
from kvviz.engine.cpu.kernels import KernelMetadata

kernel = cpu_kernels.load()
needs_kernel = pytest.mark.skipif(kernel is None, reason=f"no compiled kernel here: {cpu_kernels.why_not()}")


def reference(query, key_cache, value_cache, tables, token_seq, token_pos, window, scale, softcap):
    """Plain attention, one token at a time, over keys read through the block table."""
    num_tokens, num_heads, head_dim = query.shape
    num_kv_heads = key_cache.shape[2]
    group = num_heads // num_kv_heads
    out = torch.empty_like(query)
    for n in range(num_tokens):
        last = int(token_pos[n])
        first = max(0, last - window + 1) if window else 0
        blocks = tables[token_seq[n]].long()
        keys = key_cache[blocks].reshape(-1, num_kv_heads, head_dim)[first:last + 1]  # (L, KVH, D)
        values = value_cache[blocks].reshape(-1, num_kv_heads, head_dim)[first:last + 1]
        keys, values = keys.repeat_interleave(group, 1).double(), values.repeat_interleave(group, 1).double()
        scores = torch.einsum("hd,lhd->hl", query[n].double(), keys) * scale  # (H, L)
        if softcap:
            scores = torch.tanh(scores / softcap) * softcap
        out[n] = torch.einsum("hl,lhd->hd", scores.softmax(-1), values).float()
    return out


def random_step(num_heads, num_kv_heads, head_dim, lengths, chunk, block_size=16, seed=0):
    """A pool with requests of the given context lengths; each runs its last `chunk` tokens."""
    generator = torch.Generator().manual_seed(seed)
    max_blocks = max(-(-n // block_size) for n in lengths)
    num_blocks = len(lengths) * max_blocks + 3
    key_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=generator)
    value_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=generator)
    tables = torch.randperm(num_blocks, generator=generator)[:len(lengths) * max_blocks]
    tables = tables.view(len(lengths), max_blocks).to(torch.int32)  # blocks scattered over the pool
    token_seq, token_pos = [], []
    for s, n in enumerate(lengths):
        for pos in range(max(0, n - chunk), n):
            token_seq.append(s)
            token_pos.append(pos)
    # queries laid out as the model hands them over: (1, H, N, D) seen as (N, H, D), not contiguous
    query = torch.randn(1, num_heads, len(token_seq), head_dim, generator=generator)[0].transpose(0, 1)
    metadata = KernelMetadata(tables, torch.tensor(token_seq, dtype=torch.int32),
                              torch.tensor(token_pos, dtype=torch.int32))
    return query, key_cache, value_cache, metadata


CASES = {
    "GQA decode": dict(num_heads=8, num_kv_heads=2, head_dim=64, lengths=[1, 17, 200, 33], chunk=1),
    "MHA prefill chunks": dict(num_heads=4, num_kv_heads=4, head_dim=32, lengths=[40, 7, 70], chunk=24),
    "MQA, head size 40": dict(num_heads=6, num_kv_heads=1, head_dim=40, lengths=[300, 5], chunk=3),
    "more heads than one item holds": dict(num_heads=96, num_kv_heads=2, head_dim=16, lengths=[50, 9], chunk=2),
    "MQA with 80 heads": dict(num_heads=80, num_kv_heads=1, head_dim=8, lengths=[20], chunk=1),
    "head size 128, long": dict(num_heads=4, num_kv_heads=2, head_dim=128, lengths=[600], chunk=5),
}


@needs_kernel
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("window, softcap", [(None, None), (10, None), (None, 5.0)])
def test_kernel_matches_attention_over_gathered_blocks(case, window, softcap):
    query, key_cache, value_cache, metadata = random_step(**CASES[case])
    scale = query.shape[-1] ** -0.5
    out = torch.full(query.shape, float("nan"))
    kernel(query, key_cache, value_cache, out, metadata, window, scale, softcap)
    expected = reference(query, key_cache, value_cache, metadata.block_tables, metadata.token_seq,
                         metadata.token_pos, window, scale, softcap)
    torch.testing.assert_close(out, expected, atol=2e-5, rtol=1e-4)


@needs_kernel
def test_kernel_uses_every_thread_count():
    query, key_cache, value_cache, metadata = random_step(**CASES["GQA decode"])
    outs = []
    threads = torch.get_num_threads()
    try:
        for count in (1, 3):
            torch.set_num_threads(count)
            out = torch.empty(query.shape)
            outs.append(kernel(query, key_cache, value_cache, out, metadata, None, 0.125, None).clone())
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(outs[0], outs[1])  # each work item is one thread's: no order of sums changes


@needs_kernel
def test_engine_takes_the_kernel_by_default_and_agrees_with_sdpa():
    from kvviz.bench import build_random_llama
    from kvviz.models import CustomShape

    model = build_random_llama(CustomShape(num_layers=2, hidden_size=128, num_heads=4, num_kv_heads=2,
                                           vocab_size=256, max_context=256))
    generator = torch.Generator().manual_seed(3)
    shared = torch.randint(0, 255, (40,), generator=generator).tolist()
    prompts = [shared + torch.randint(0, 255, (n,), generator=generator).tolist() for n in (3, 30, 70)]
    prompts += [torch.randint(0, 255, (n,), generator=generator).tolist() for n in (1, 5, 120)]
    params = SamplingParams(max_tokens=24, ignore_eos=True)
    outputs = {}
    # a small pool and step budget: chunked prefill, prefix hits and preemption, all under the kernel
    for attention in ("auto", "sdpa"):
        engine = Engine(model, attention=attention, num_blocks=20, block_size=8, max_num_batched_tokens=32)
        assert (engine.attention_kernel is not None) == (attention == "auto")
        outputs[attention] = [o.token_ids for o in engine.generate(prompts, params)]
        assert engine.scheduler.num_preemptions > 0 and engine.stats["cached_tokens"] > 0
    assert outputs["auto"] == outputs["sdpa"]


def test_engine_keeps_sdpa_where_the_kernel_does_not_apply():
    from kvviz.bench import build_random_llama
    from kvviz.models import CustomShape

    shape = CustomShape(num_layers=1, hidden_size=64, num_heads=4, num_kv_heads=2, vocab_size=64, max_context=64)
    assert Engine(build_random_llama(shape, dtype=torch.bfloat16), num_blocks=8).attention_kernel is None
    assert Engine(build_random_llama(shape), use_cache=False).attention_kernel is None
    with pytest.raises(Exception, match="attention must be 'auto' or 'sdpa'"):
        Engine(build_random_llama(shape), attention="flash")


def test_kernel_can_be_turned_off_and_says_why(monkeypatch):
    monkeypatch.setenv("KVVIZ_CPU_KERNELS", "0")
    kernels, why_not = cpu_kernels._build_and_load()
    assert kernels is None and "KVVIZ_CPU_KERNELS=0" in why_not
    monkeypatch.setenv("KVVIZ_CPU_KERNELS", "1")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CC", raising=False)
    kernels, why_not = cpu_kernels._build_and_load()
    assert kernels is None and "No C compiler" in why_not


@needs_kernel
def test_only_linears_gated_silu_mlps_rotary_attentions_and_rms_norms_are_switched():
    from kvviz.engine.cpu import packed_layers

    from tiny_models import tiny_model

    if not torch.backends.mkldnn.is_available():
        pytest.skip("no oneDNN here")
    switched = {arch: packed_layers.install(tiny_model(arch)) for arch in ("llama", "gemma2", "gpt2")}
    assert "model.layers.0.mlp" in switched["llama"] and "lm_head" in switched["llama"]
    assert "model.norm" in switched["llama"] and "model.layers.0.input_layernorm" in switched["llama"]
    assert "model.layers.0.self_attn" in switched["llama"] and "model.layers.0.self_attn.o_proj" in switched["llama"]
    assert not any(name.endswith(("q_proj", "gate_proj")) for name in switched["llama"])  # their packed copies multiply
    assert not any(name.endswith("self_attn") for name in switched["gemma2"])  # a sliding window, a softcap
    assert not any("norm" in name for name in switched["gemma2"])  # Gemma scales by (1 + weight)
    assert "model.layers.0.mlp.down_proj" in switched["gemma2"]
    assert not any(name.endswith("mlp") for name in switched["gemma2"])  # GELU, not SiLU
    assert "lm_head" in switched["gpt2"] and not any("attn" in name for name in switched["gpt2"])  # Conv1D stays
    assert not any(name.endswith(("ln_1", "ln_f")) for name in switched["gpt2"])  # LayerNorm stays


@needs_kernel
@pytest.mark.parametrize("arch", ["llama", "gemma2"])
@pytest.mark.parametrize("small_rows, mkl", [(range(0, 10**9), True), (range(0), True), (range(0), False)],
                         ids=["panels", "transposed", "oneDNN"])
def test_switched_modules_give_their_own_results_inside_the_engine(arch, small_rows, mkl, monkeypatch):
    from kvviz.engine.cpu import packed_layers
    from kvviz.engine.step_context import engine_step

    from tiny_models import tiny_model

    if not torch.backends.mkldnn.is_available():
        pytest.skip("no oneDNN here")
    monkeypatch.setattr(packed_layers, "SMALL_ROWS", small_rows)  # which copy multiplies: the panels at every
    monkeypatch.setattr(packed_layers, "mkl_first", lambda: mkl)  # row count, or W^T, or oneDNN's copy
    model = tiny_model(arch)
    names = packed_layers.install(model)
    assert names
    with engine_step():
        for name in names:
            module = model.get_submodule(name)
            with torch.inference_mode():
                if hasattr(module, "q_proj"):  # an attention: rotated by the model's own rotary embedding
                    x = torch.randn(1, 5, module.q_proj.in_features) * 4
                    rotation = model.model.rotary_emb(x, torch.arange(40, 45)[None])
                    packed = module(x, position_embeddings=rotation)[0]
                    own = type(module).forward(module, x, position_embeddings=rotation)[0]
                else:
                    width = (module.in_features if hasattr(module, "in_features") else module.gate_proj.in_features
                             if hasattr(module, "gate_proj") else module.weight.shape[0])  # a linear, an MLP, a norm
                    x = torch.randn(1, 5, width) * 4
                    packed = module(x)
                    own = type(module).forward(module, x)
            torch.testing.assert_close(packed, own, rtol=1e-4, atol=1e-5)
            assert module.forward.__func__.__module__ == "kvviz.engine.cpu.packed_layers"


@needs_kernel
@pytest.mark.parametrize("rows", [1, 2, 7, 8, 9, 17, 40])
@pytest.mark.parametrize("out_features, in_features", [(96, 64), (33, 5), (70, 130)])
def test_small_product_is_the_linear_product_for_any_rows_and_shape(rows, out_features, in_features):
    """Row counts below, at and past the kernel's block of 8 rows; outputs not a whole number of 32-column
    panels; a bias; rows that are slices of a wider tensor."""
    generator = torch.Generator().manual_seed(rows)
    weight = torch.randn(out_features, in_features, generator=generator)
    bias = torch.randn(out_features, generator=generator)
    wide = torch.randn(rows, in_features + 3, generator=generator) * 3
    x = wide[:, 2:in_features + 2]  # each row contiguous, rows in_features + 3 apart
    panels = kernel.pack_panels(weight)
    assert panels.shape == (-(-out_features // 32), in_features, 32)
    expected = (x.double() @ weight.double().T + bias.double()).float()
    torch.testing.assert_close(kernel.small_product(x, panels, bias, out_features), expected, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(kernel.small_product(x.contiguous(), panels, None, out_features), expected - bias,
                               rtol=1e-5, atol=1e-4)


@needs_kernel
def test_silu_and_mul_is_the_gated_activation_in_the_plain_layout():
    gate_up = torch.randn(2, 5, 2 * 33) * 6  # (..., 2I): gate then up in each row
    expected = torch.nn.functional.silu(gate_up[..., :33]) * gate_up[..., 33:]
    torch.testing.assert_close(kernel.silu_and_mul(gate_up), expected, rtol=1e-5, atol=1e-6)


@needs_kernel
def test_rms_norm_is_llamas_on_rows_of_any_size():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    norm = LlamaRMSNorm(96, eps=1e-6)
    torch.nn.init.normal_(norm.weight)
    for rows in (1, 3, 1000):  # 1000 x 96 is split over the threads
        x = torch.randn(rows, 96) * 30
        with torch.inference_mode():
            torch.testing.assert_close(kernel.rms_norm(x, norm.weight.detach(), 1e-6), norm(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(kernel.rms_norm(torch.zeros(2, 96), norm.weight.detach(), 1e-6), torch.zeros(2, 96))


@needs_kernel
def test_rotary_is_transformers_rotation_to_the_last_bit_and_leaves_the_values_alone():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    rows, heads, kv_heads, head_dim = 7, 9, 3, 64
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * head_dim) * 3  # one packed product's rows
    angles = torch.randn(1, rows, head_dim // 2) * 5
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
    q = qkv[:, :heads * head_dim].view(1, rows, heads, head_dim).transpose(1, 2)
    k = qkv[:, heads * head_dim:(heads + kv_heads) * head_dim].view(1, rows, kv_heads, head_dim).transpose(1, 2)
    expected_q, expected_k = apply_rotary_pos_emb(q, k, cos, sin)
    rotated = qkv.clone()
    kernel.rotary_(rotated, heads + kv_heads, head_dim, cos, sin)
    assert torch.equal(rotated[:, :heads * head_dim], expected_q.transpose(1, 2).reshape(rows, -1))
    assert torch.equal(rotated[:, heads * head_dim:(heads + kv_heads) * head_dim],
                       expected_k.transpose(1, 2).reshape(rows, -1))
    assert torch.equal(rotated[:, (heads + kv_heads) * head_dim:], qkv[:, (heads + kv_heads) * head_dim:])


@needs_kernel
def test_argmax_is_torchs_on_ties_nan_and_infinities():
    logits = torch.randn(9, 5000)
    logits[1, 70] = logits[1, 4000] = 50.0  # a tie: the first
    logits[2, 3000] = logits[2, 10] = float("nan")  # NaN wins, the first one
    logits[3] = float("-inf")
    logits[4, ::7] = float("inf")
    logits[5] = 0.0
    logits[6, 4999] = 99.0  # the last value
    logits[7, 0] = float("nan")
    assert kernel.argmax(logits).tolist() == logits.argmax(-1).tolist()
    assert kernel.argmax(torch.empty(0, 5)).tolist() == []


def test_linears_are_packed_where_they_fit_and_a_copied_model_packs_again(monkeypatch):
    import copy

    from kvviz.bench import build_random_llama
    from kvviz.engine.cpu import packed_layers
    from kvviz.models import CustomShape

    if kernel is None or not torch.backends.mkldnn.is_available():
        pytest.skip("no compiled kernels or no oneDNN here")
    shape = CustomShape(num_layers=1, hidden_size=64, num_heads=4, num_kv_heads=2, vocab_size=64, max_context=64)
    model = build_random_llama(shape)
    monkeypatch.setattr(packed_layers, "PACK_MEMORY_FRACTION", 0.0)  # as if memory were short
    Engine(model, num_blocks=8)
    assert getattr(model.lm_head, "kvviz_packed", None) is None
    assert "quarter of the free memory" in model.kvviz_why_not_packed
    norms = [m for m in model.modules() if type(m).__name__ == "LlamaRMSNorm"]
    assert len(norms) == 3 and all(vars(m)["forward"].__func__ is packed_layers.fused_rms_norm for m in norms)
    monkeypatch.undo()
    Engine(model, num_blocks=8)
    assert model.lm_head.kvviz_packed is not None and model.model.layers[0].mlp.kvviz_gate_up_packed is not None
    twin = copy.deepcopy(model)  # oneDNN's tensors cannot be copied: the twin starts unpacked
    assert twin.lm_head.kvviz_packed is None
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    prompts = [[1, 2, 3, 4, 5], list(range(40))]
    packed_out = [o.token_ids for o in Engine(model, num_blocks=16).generate(prompts, params)]
    assert twin.lm_head.kvviz_packed is None  # nothing ran on the twin yet
    twin_out = [o.token_ids for o in Engine(twin, num_blocks=16).generate(prompts, params)]
    assert twin.lm_head.kvviz_packed is not None and twin_out == packed_out


def test_a_switched_model_copied_and_cast_to_bfloat16_runs_its_own_mlps():
    """The bench copies a model the engine has switched and casts it to bfloat16: the switched
    forwards must then run their own product, not the float32-only packed path."""
    import copy

    from kvviz.bench import build_random_llama
    from kvviz.engine.cpu import packed_layers
    from kvviz.models import CustomShape

    if kernel is None or not torch.backends.mkldnn.is_available():
        pytest.skip("no compiled kernels or no oneDNN here")
    shape = CustomShape(num_layers=1, hidden_size=64, num_heads=4, num_kv_heads=2, vocab_size=64, max_context=64)
    model = build_random_llama(shape)
    assert "model.layers.0.mlp" in packed_layers.install(model)
    half = copy.deepcopy(model).to(torch.bfloat16)
    assert packed_layers.install(half) == []  # nothing float32 left to pack
    outs = Engine(half, num_blocks=16).generate([[1, 2, 3, 4, 5]], SamplingParams(max_tokens=6, ignore_eos=True))
    assert len(outs[0].token_ids) == 6 and outs[0].finish_reason == "length"
