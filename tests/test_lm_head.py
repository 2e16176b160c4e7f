"""The LM head's turned-around product for decode steps gives the plain product's logits.

The turned product is what the engine's CPU steps use where the linears are not packed for oneDNN
(fused_layers.pack_linears); these tests turn packing off to reach it.
"""

import torch
import torch.nn.functional as F

from kvviz import Engine, SamplingParams
from kvviz.engine import runner
from kvviz.engine.cpu import fused_layers
from tiny_models import tiny_model


def unpacked_engine(model, monkeypatch):
    monkeypatch.setattr(fused_layers, "PACK_MEMORY_FRACTION", 0.0)
    return Engine(model)


def test_turned_product_equals_plain_linear_in_engine_steps(monkeypatch):
    model = tiny_model("llama")
    unpacked_engine(model, monkeypatch)  # installs the engine's attention and LM head
    head = model.get_output_embeddings()
    assert "forward" in vars(head)  # the instance's own forward, the class's is untouched
    x = torch.randn(3, 5, head.in_features)  # (batch, tokens, hidden): 15 rows, a decode step's few
    token = runner._IN_ENGINE_FORWARD.set(True)
    try:
        inside = head(x)
        many = head(torch.randn(runner.FEW_ROWS + 1, head.in_features))  # a prefill's many rows
        none = head(torch.randn(1, 0, head.in_features))  # a step that samples nothing (chunked prefill)
    finally:
        runner._IN_ENGINE_FORWARD.reset(token)
    assert inside.shape == (3, 5, head.out_features) and inside.is_contiguous()
    torch.testing.assert_close(inside, F.linear(x, head.weight, head.bias), rtol=1e-5, atol=1e-5)
    assert many.shape == (runner.FEW_ROWS + 1, head.out_features) and none.shape == (1, 0, head.out_features)
    torch.testing.assert_close(head(x), F.linear(x, head.weight, head.bias), rtol=0, atol=0)  # outside


def test_model_generate_beside_the_engine_is_unchanged():
    model = tiny_model("qwen3")
    prompt = torch.tensor([[5, 9, 2, 7]])
    before = model.generate(prompt, max_new_tokens=6, do_sample=False)
    engine = Engine(model)
    outs = engine.generate([prompt[0].tolist()], SamplingParams(max_tokens=6, ignore_eos=True))
    after = model.generate(prompt, max_new_tokens=6, do_sample=False)
    assert torch.equal(before, after)
    assert outs[0].token_ids == before[0, 4:].tolist()


def test_every_linear_turned_with_two_threads_gives_the_same_sums(monkeypatch):
    model = tiny_model("llama")
    unpacked_engine(model, monkeypatch)
    layers = [m for m in model.modules() if type(m) is torch.nn.Linear]
    assert len(layers) > 2 and all("forward" in vars(m) for m in layers)
    proj = model.model.layers[0].mlp.down_proj
    assert vars(proj)["forward"].__func__ is runner.linear_for_steps
    x = torch.randn(7, proj.in_features)
    threads = torch.get_num_threads()
    token = runner._IN_ENGINE_FORWARD.set(True)
    try:
        torch.set_num_threads(2)
        two = proj(x)
        torch.set_num_threads(1)
        one, plain_one = proj(x), F.linear(x, proj.weight, proj.bias)
    finally:
        torch.set_num_threads(threads)
        runner._IN_ENGINE_FORWARD.reset(token)
    plain = F.linear(x, proj.weight, proj.bias)
    torch.testing.assert_close(two, plain, rtol=1e-5, atol=1e-5)
    assert torch.equal(one, plain_one)  # one thread: F.linear itself


def test_engine_outputs_equal_with_one_thread_and_two():
    model = tiny_model("llama")
    prompts = [[5, 9, 2, 7], [3, 1, 4, 1, 5, 9, 2, 6]]
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = [o.token_ids for o in Engine(model).generate(prompts, params)]
        torch.set_num_threads(2)
        two = [o.token_ids for o in Engine(model).generate(prompts, params)]
    finally:
        torch.set_num_threads(threads)
    assert one == two
