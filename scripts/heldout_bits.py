"""Held-out bits per byte of the models kvviz runs, on the bundled model's held-out text.

    python scripts/heldout_bits.py                    # bundled and smollm2 (once fetched)
    python scripts/heldout_bits.py --models bundled --window 256

The text is kvviz/bundled_model/heldout.txt (Shakespeare the bundled model never trained on). Each
model reads it in windows of `--window` tokens, no overlap; every token but a window's first is
scored, and its negative log-likelihood is divided by the UTF-8 bytes that token covers, so models
with different tokenizers compare (fewer bits per byte: the text surprised the model less). SmolLM2
computes with its 4-bit (Q4_1) weights dequantized to float32: its figure includes what the
quantization cost. The bundled model was trained on Shakespeare; SmolLM2 on general web text.
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from kvviz.models import ModelLoadError, default_heldout_text, load_model


def bits_per_byte(source: str, window: int) -> tuple[float, int, int]:
    """(bits per byte, tokens scored, bytes scored) of `source` on the held-out text."""
    lm = load_model(source)
    text = default_heldout_text()
    encoded = lm.tokenizer(text, return_offsets_mapping=True, verbose=False)
    ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
    window = min(window, lm.shape.max_context or window)
    nats, scored_bytes, scored = 0.0, 0, 0
    with torch.inference_mode():
        for start in range(0, len(ids) - 1, window):
            chunk = torch.tensor([ids[start:start + window]], device=lm.device)
            if chunk.shape[1] < 2:
                break
            logits = lm.model(chunk).logits.float()  # (1, tokens, vocab)
            losses = torch.nn.functional.cross_entropy(logits[0, :-1], chunk[0, 1:], reduction="sum")
            nats += float(losses)
            scored += chunk.shape[1] - 1
            scored_bytes += sum(len(text[a:b].encode("utf-8")) for a, b in offsets[start + 1:start + chunk.shape[1]])
    return nats / math.log(2) / scored_bytes, scored, scored_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="bundled,smollm2", help="comma-separated model sources")
    parser.add_argument("--window", type=int, default=512, help="tokens a window holds (capped at the context)")
    args = parser.parse_args()
    print("| model | bits per byte | tokens scored | bytes scored | seconds |")
    print("|---|---:|---:|---:|---:|")
    for source in args.models.split(","):
        began = time.perf_counter()
        try:
            bpb, tokens, size = bits_per_byte(source, args.window)
        except ModelLoadError as error:
            print(f"| {source} | {error} | | | |")
            continue
        print(f"| {source} | {bpb:.3f} | {tokens:,} | {size:,} | {time.perf_counter() - began:.1f} |")


if __name__ == "__main__":
    main()
