"""The roofline of "Prefill and decode": what a decode step reads and multiplies, when a what-if cannot
run, its three words defined, and int4 billed as the Memory bill and the Cache strategies lesson bill it."""

import pytest
import torch
import transformers

from kvviz.lessons.prefill_decode import roofline
from kvviz.memory_bill import bits_per_value, cache_format, kv_cache_bytes
from kvviz.shapes import PRESETS, ModelShape
from kvviz.strategies.bill import full_attention_shape
from kvviz.strategies.run import run_strategy

H100 = roofline.ACCELERATORS["H100 SXM"]


def test_an_untied_input_embedding_is_looked_up_not_read_and_multiplied():
    llama = PRESETS["llama-3.1-8b"]  # untied: 128,256 × 4,096 embedding rows beside an lm_head as large
    assert roofline.untied_embedding_params(llama) == 128_256 * 4_096 == 525_336_576
    step = roofline.decode_step(llama, llama.num_params, 8192)
    multiplied = 8_030_261_248 - 525_336_576
    assert step.weight_bytes == 2 * multiplied == 15_009_849_344
    attention = 4 * 32 * 32 * 128 * 8192
    assert step.flops == 2 * multiplied + attention
    assert step.held_bytes == 2 * 8_030_261_248 + step.cache_bytes  # memory still holds the embedding
    prefill = roofline.prefill_step(llama, llama.num_params, 100)
    assert prefill.weight_bytes == 2 * multiplied
    # tied (GPT-2): the one matrix is the output projection, so it is read and multiplied once
    gpt2 = PRESETS["gpt2"]
    assert roofline.untied_embedding_params(gpt2) == 0
    assert roofline.decode_step(gpt2, gpt2.num_params, 512).weight_bytes == 2 * gpt2.num_params


def test_configs_say_whether_their_embeddings_are_tied():
    llama = ModelShape.from_hf_config(transformers.LlamaConfig(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64, vocab_size=96))
    gpt2 = ModelShape.from_hf_config(transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=96))
    assert llama.tied_embeddings is False and gpt2.tied_embeddings is True
    assert roofline.untied_embedding_params(llama) == 96 * 64 and roofline.untied_embedding_params(gpt2) == 0


def test_what_ifs_that_cannot_run_say_why_in_one_sentence_each():
    seventy = PRESETS["llama-3.1-70b"]
    step = roofline.decode_step(seventy, seventy.num_params, 131_072, batch=256)
    assert step.cache_bytes == 10 * 2**40  # 256 × 131,072 tokens × 320 KiB a token
    (memory,) = roofline.what_if_problems(seventy, step, H100)
    assert "10.13 TiB in memory" in memory and "80.00 GiB of the H100 SXM" in memory and "no ceiling" in memory
    gpt2 = PRESETS["gpt2"]
    (context,) = roofline.what_if_problems(gpt2, roofline.decode_step(gpt2, gpt2.num_params, 32_768), H100)
    assert context.startswith("gpt2 was built for 1,024 tokens")
    llama = PRESETS["llama-3.1-8b"]
    assert roofline.what_if_problems(llama, roofline.decode_step(llama, llama.num_params, 8192), H100) == []
    for sentence in (memory, context):
        assert sentence.endswith(".") and ". " not in sentence


def test_the_three_words_are_defined_in_two_sentences_at_most():
    terms = [term for term, _ in roofline.DEFINITIONS]
    assert terms == ["Arithmetic intensity", "Roofline", "Ridge point"]
    for _, text in roofline.DEFINITIONS:
        assert text.endswith(".") and 1 <= text.count(". ") + 1 <= 2


def test_int4_costs_the_same_in_the_memory_bill_the_roofline_and_the_cache_strategies():
    # a bf16 model with 64-wide heads, so a group of 64 is one head: int4 costs 4 + 2 × 16 / 64 = 4.5 bits
    assert bits_per_value("int4") == 4.5 and bits_per_value("int4", group_size=32) == 5
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=96, hidden_size=128, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                                      max_position_embeddings=256, bos_token_id=95, eos_token_id=95, pad_token_id=0)
    model = transformers.AutoModelForCausalLM.from_config(config).to(torch.bfloat16).eval()
    run = run_strategy(model, list(range(1, 21)), "quantized", 4, bits=4, group_size=64, residual=0)
    last = run.steps[-1]
    tokens, measured = last.context_tokens, last.bill.measured_bytes  # nbytes of the codes, scales and zeros
    shape = full_attention_shape(model)
    assert measured * 8 / (tokens * 2 * 2 * 64) == 4.5  # layers × (K and V) × head_dim values a token
    bill = kv_cache_bytes(shape, tokens, 1, **cache_format("int4"))  # the Memory bill's int4
    params = sum(p.numel() for p in model.parameters())
    in_roofline = next(cost for cost in roofline.variants(shape, params, tokens, cache_bytes=2)
                       if cost.label.startswith("int4 cache"))
    assert measured == bill == in_roofline.cache_bytes == last.bill.predicted_bytes
    assert "4.5 bits" in in_roofline.label


@pytest.mark.parametrize("name", ["H100 SXM", "A100 40GB"])
def test_accelerators_know_their_memory(name):
    assert roofline.ACCELERATORS[name].memory_bytes == {"H100 SXM": 80, "A100 40GB": 40}[name] * 2**30
