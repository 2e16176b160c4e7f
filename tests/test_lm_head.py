"""The LM head's turned-around product for decode steps gives the plain product's logits."""

import torch
import torch.nn.functional as F

from kvviz import Engine, SamplingParams
from kvviz.engine import runner
from tiny_models import tiny_model


def test_turned_product_equals_plain_linear_in_engine_steps():
    model = tiny_model("llama")
    Engine(model)  # installs the engine's attention and LM head
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
