"""Tiny random-weight decoders of several architectures, built in the test (nothing downloaded)."""

from __future__ import annotations

import torch

VOCAB = 96


def tiny_config(arch: str):
    import transformers as tf

    special = dict(bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1, pad_token_id=0)
    common = dict(**special, vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    if arch == "llama":
        return tf.LlamaConfig(**common)
    if arch == "qwen2":
        return tf.Qwen2Config(**common)
    if arch == "qwen3":
        return tf.Qwen3Config(head_dim=16, **common)
    if arch == "mistral":  # a window shorter than the prompts, so it matters
        return tf.MistralConfig(sliding_window=8, **common)
    if arch == "gemma2":  # sliding and global layers interleaved, logit soft-capping
        return tf.Gemma2Config(head_dim=16, sliding_window=8, query_pre_attn_scalar=16,
                               layer_types=["sliding_attention", "full_attention"], **common)
    if arch == "gemma3":  # five sliding layers to one global, as Gemma-3 has them
        return tf.Gemma3TextConfig(head_dim=16, sliding_window=8, query_pre_attn_scalar=16,
                                   **(common | dict(num_hidden_layers=6)))
    if arch == "olmo2":
        return tf.Olmo2Config(**common)
    if arch == "deepseek_v3":  # MLA: a 32-value latent + an 8-value rotary key per token; layer 1 is MoE
        return tf.DeepseekV3Config(**{**common, "num_key_value_heads": 4}, kv_lora_rank=32, q_lora_rank=24,
                                   qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, first_k_dense_replace=1,
                                   n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
                                   moe_intermediate_size=32)
    if arch == "gpt2":
        return tf.GPT2Config(**special, vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=256)
    raise ValueError(arch)


ARCHS = ("llama", "qwen2", "qwen3", "mistral", "gemma2", "olmo2", "gpt2")

# what the engine's greedy outputs are checked against transformers' under (tests/engine/test_engine_matches_hf.py,
# test_mla.py): the tokens each prompt generates, the engine's settings, and the prompts
MAX_TOKENS = 10
ENGINE_SETTINGS = {
    "prefix caching": dict(),
    "no prefix caching": dict(enable_prefix_caching=False),
    "chunked prefill": dict(max_num_batched_tokens=7),
    "tight pool": dict(num_blocks=12, block_size=4),
    "no cache": dict(use_cache=False),
}


def mixed_prompts(seed=1):
    generator = torch.Generator().manual_seed(seed)
    shared = torch.randint(0, VOCAB - 1, (20,), generator=generator).tolist()
    lengths = (5, 19, 33, 2)
    prompts = [torch.randint(0, VOCAB - 1, (n,), generator=generator).tolist() for n in lengths]
    return prompts + [shared + [3, 4], shared + [5]]  # two share a 20-token prefix


def tiny_model(arch: str, seed: int = 0):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    config = tiny_config(arch)
    # HF's own attention is the reference; Gemma-2 soft-caps logits, which only "eager" does
    config._attn_implementation = "eager" if arch in ("gemma2", "gemma3") else "sdpa"
    return AutoModelForCausalLM.from_config(config).eval()


def hf_greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    """transformers' own greedy generation, one prompt at a time (no padding involved)."""
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False,
                             eos_token_id=None, pad_token_id=0,
                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    return out[0, len(prompt):].tolist()
