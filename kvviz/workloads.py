"""Workloads: the prompts a batch job or a benchmark runs, where they come from, and their outputs.

    mixed_workload(48, 16, 192, 16, 192, vocab_size=8192)      # the bench: random ids, nano-vllm's shape
    shared_prefix_workload(32, 192, 16, 32, vocab_size=8192)   # the bench: one system prompt for all
    synthetic_workload(tokenizer, vocab_size, count=16)        # the batch page: slices of real text
    upload_workload(tokenizer, "prompts.jsonl", data)          # the batch page: an uploaded file
    read_prompts(Path("prompts.txt"))                          # the command line: a file of prompts

A file of prompts is a .txt file (one prompt per non-empty line) or a .jsonl file (one
{"prompt": ...} per line); the command line and the batch page read both with `parse_prompts`,
so they accept the same files. `jsonl_lines` writes outputs in the format both produce.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace
from pathlib import Path

from kvviz.engine.block_pool import blocks_needed
from kvviz.engine.sampling import SamplingParams
from kvviz.models import default_heldout_text

MAX_UPLOAD_BYTES = 2 * 1024 * 1024  # a classroom's prompt file, not a dataset
MAX_PROMPTS_FILE_BYTES = 64 * 2**20  # the command line's --prompts: read only when no larger
MAX_PROMPTS = 100_000  # prompts one file may hold: the engine's requests, their outputs and the JSONL stay bounded
MAX_PROMPT_CHARS = 1_000_000  # one prompt, about 250,000 tokens: checked before the tokenizer reads it
MAX_UPLOAD_PROMPTS = 1024  # prompts in one uploaded file
MAX_JOB_TOKENS = 200_000  # prompt tokens plus tokens to generate, over the whole job
UPLOAD_LIMITS = (f"at most {MAX_UPLOAD_BYTES // 2**20} MiB and {MAX_UPLOAD_PROMPTS:,} prompts, "
                 f"{MAX_JOB_TOKENS:,} tokens in all (prompts plus outputs)")
UPLOAD_SUFFIXES = (".txt", ".jsonl")


class WorkloadError(ValueError):
    """A workload kvviz refuses to build or run; the message is one sentence saying what to do."""


@dataclass(slots=True)
class Workload:
    """Prompts as token ids (what the engine runs), how many tokens each asks for, and their text."""

    name: str  # "mixed", "shared_prefix", "synthetic" or an uploaded file's name
    prompts: list[list[int]]
    max_tokens: list[int]  # tokens to generate, per request
    texts: list[str] | None = None  # the prompts as people read them; None: token ids only

    def __len__(self) -> int:
        return len(self.prompts)

    @property
    def num_prompt_tokens(self) -> int:
        return sum(len(p) for p in self.prompts)

    @property
    def num_output_tokens(self) -> int:
        return sum(self.max_tokens)

    def head(self, num_requests: int) -> Workload:
        texts = None if self.texts is None else self.texts[:num_requests]
        return Workload(self.name, self.prompts[:num_requests], self.max_tokens[:num_requests], texts)

    def blocks_needed(self, block_size: int) -> int:
        """Blocks to hold every request at its full length at once (no sharing)."""
        return sum(blocks_needed(len(p) + n, block_size) for p, n in zip(self.prompts, self.max_tokens))


# ---- random token ids: the bench ---------------------------------------------------------
def mixed_workload(num_requests: int, min_len: int, max_len: int, min_out: int, max_out: int,
                   vocab_size: int, seed: int = 0) -> Workload:
    """nano-vllm's bench shape: prompt and output lengths uniform in their ranges, random tokens."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(vocab_size) for _ in range(rng.randint(min_len, max_len))]
               for _ in range(num_requests)]
    max_tokens = [rng.randint(min_out, max_out) for _ in range(num_requests)]
    return Workload("mixed", prompts, max_tokens)


def shared_prefix_workload(num_requests: int, prefix_len: int, suffix_len: int, max_tokens: int,
                           vocab_size: int, seed: int = 0) -> Workload:
    """One system prompt shared by every request, then a short question of its own."""
    rng = random.Random(seed + 1)
    prefix = [rng.randrange(vocab_size) for _ in range(prefix_len)]
    prompts = [prefix + [rng.randrange(vocab_size) for _ in range(suffix_len)] for _ in range(num_requests)]
    return Workload("shared_prefix", prompts, [max_tokens] * num_requests)


# ---- real text: the batch page -----------------------------------------------------------
def _check_range(what: str, low: int, high: int) -> None:
    if low < 1 or high < low:
        raise WorkloadError(f"The {what} range must start at 1 or more and not end below its start, "
                            f"not {low} to {high}.")


def draw_lengths(count: int, output_len: tuple[int, int], seed: int) -> list[int]:
    """Tokens to generate per request, uniform in output_len (inclusive)."""
    _check_range("output length", *output_len)
    rng = random.Random(seed + 1)
    return [rng.randint(*output_len) for _ in range(count)]


def synthetic_workload(tokenizer, vocab_size: int, count: int = 16, prompt_len: tuple[int, int] = (8, 32),
                       output_len: tuple[int, int] = (16, 32), shared_prefix: int = 0,
                       seed: int = 0, text: str | None = None) -> Workload:
    """`count` prompts: `shared_prefix` tokens common to all, then each its own part of a length
    drawn uniformly from prompt_len. Tokens are slices of real text when there is a tokenizer
    (default: the bundled model's held-out text), random ids otherwise."""
    if count < 1:
        raise WorkloadError(f"Ask for at least one prompt, not {count}.")
    _check_range("prompt length", *prompt_len)
    if shared_prefix < 0:
        raise WorkloadError(f"The shared prefix must be 0 or more tokens, not {shared_prefix}.")
    rng = random.Random(seed)
    if tokenizer is not None:
        corpus = tokenizer(text if text is not None else default_heldout_text(), verbose=False)["input_ids"]
    else:
        corpus = [rng.randrange(vocab_size) for _ in range(20_000)]
    longest = shared_prefix + prompt_len[1]
    if len(corpus) <= longest:
        raise WorkloadError(f"The text has {len(corpus)} tokens, too few for {longest}-token prompts; "
                            "ask for shorter prompts.")

    def piece(length: int) -> list[int]:
        start = rng.randrange(len(corpus) - length)
        return list(corpus[start:start + length])

    prefix = piece(shared_prefix) if shared_prefix else []
    prompts = [prefix + piece(rng.randint(*prompt_len)) for _ in range(count)]
    texts = [tokenizer.decode(p) if tokenizer is not None else " ".join(map(str, p)) for p in prompts]
    return Workload("synthetic", prompts, draw_lengths(count, output_len, seed), texts)


# ---- files of prompts: the command line and uploads ---------------------------------------
def read_prompts(path: Path) -> list[str]:
    """A .txt file gives one prompt per non-empty line; a .jsonl file one {"prompt": ...} per line.

    The file is read only up to MAX_PROMPTS_FILE_BYTES (a 2 GB file was read whole, 28 s and 4.4 GB,
    before the tokenizer aborted the process), and its bytes are decoded as an upload's are."""
    if not path.exists():
        raise ValueError(f"There is no prompts file at {str(path)!r}; give a .txt or .jsonl file.")
    if not path.is_file():  # a folder, a pipe or a device (/dev/zero): not opened
        raise ValueError(f"{str(path)!r} is a folder, a pipe or a device, not a file; give a .txt or .jsonl file.")
    size = path.stat().st_size
    if size <= MAX_PROMPTS_FILE_BYTES:  # a bigger file is not opened
        with path.open("rb") as file:
            data = file.read(MAX_PROMPTS_FILE_BYTES + 1)  # no more, even if the file grows while it is read
        size = max(size, len(data))
    if size > MAX_PROMPTS_FILE_BYTES:
        raise ValueError(f"{str(path)!r} is {size / 2**20:,.1f} MiB, more than the {MAX_PROMPTS_FILE_BYTES // 2**20} "
                         "MiB a prompts file may be; split it into smaller files.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{str(path)!r} is not UTF-8 text (byte {error.object[error.start]:#04x} at offset "
                         f"{error.start:,} cannot be read); save it as UTF-8, one prompt per line or one "
                         "{\"prompt\": ...} object per line.") from None
    return parse_prompts(text, path.name)


def parse_prompts(text: str, name: str) -> list[str]:
    """The prompts in the text of a file called `name` (.jsonl: JSON lines; anything else: lines).

    Lines end at \\n (or \\r\\n) only: a form feed or U+2028 inside a prompt stays in that prompt.
    """
    lines = [line.removesuffix("\r") for line in text.removeprefix("\ufeff").split("\n")]
    for number, line in enumerate(lines, 1):  # before the tokenizer: a 5 MB line took 19 s and 1.5 GB
        if len(line) > MAX_PROMPT_CHARS:
            raise ValueError(f"Line {number} of {name} has {len(line):,} characters, more than the "
                             f"{MAX_PROMPT_CHARS:,} a prompt may have; shorten it or split it into several.")
    if name.lower().endswith(".jsonl"):
        prompts = [_jsonl_prompt(line, number, name) for number, line in enumerate(lines, 1) if line.strip()]
    else:
        prompts = [line for line in lines if line.strip()]
    if not prompts:
        raise ValueError(f"{name} holds no prompts; write at least one non-empty line.")
    if len(prompts) > MAX_PROMPTS:  # 2,000,000 one-character lines ran 121 CPU s and 3.8 GB, no request done
        raise ValueError(f"{name} holds {len(prompts):,} prompts, more than the {MAX_PROMPTS:,} one run takes; "
                         "split it into several files.")
    return prompts


def _jsonl_prompt(line: str, number: int, name: str) -> str:
    try:
        item = json.loads(line)
    except json.JSONDecodeError:
        raise ValueError(f"Line {number} of {name} is not valid JSON; "
                         "write one object like {\"prompt\": \"...\"} per line.") from None
    except RecursionError:
        raise ValueError(f"Line {number} of {name} nests lists or objects too deeply to read; "
                         "write one object like {\"prompt\": \"...\"} per line.") from None
    prompt = item.get("prompt") if isinstance(item, dict) else item if isinstance(item, str) else None
    if not isinstance(prompt, str):
        raise ValueError(f"Line {number} of {name} has no \"prompt\" string; "
                         "write one object like {\"prompt\": \"...\"} per line.")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError:  # JSON's "\ud800" escape: half of a character, which no tokenizer reads
        raise ValueError(f"Line {number} of {name} holds a lone surrogate (\\ud800 to \\udfff), half of a "
                         "character; write the whole character or remove it.") from None
    return prompt


def parse_upload(name: str, data: bytes) -> list[str]:
    """The prompts of an uploaded .txt or .jsonl file; refuses big, binary or empty files."""
    file_name = Path(name).name or "the upload"
    suffix = Path(file_name).suffix.lower()
    if suffix not in UPLOAD_SUFFIXES:
        raise WorkloadError(f"{file_name} is not a .txt or .jsonl file; upload prompts as text, one per line, "
                            "or as JSON lines like {\"prompt\": \"...\"}.")
    if len(data) > MAX_UPLOAD_BYTES:
        raise WorkloadError(f"{file_name} is {len(data) / 2**20:.1f} MiB, more than the "
                            f"{MAX_UPLOAD_BYTES // 2**20} MiB limit; upload fewer prompts.")
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError:
        decoded = None
    if decoded is None:
        raise WorkloadError(f"{file_name} is not UTF-8 text; upload a plain-text .txt or .jsonl file.")
    if "\x00" in decoded:  # UTF-8 all right, but a NUL byte: a binary file
        raise WorkloadError(f"{file_name} holds a NUL byte (character {decoded.index(chr(0)):,}), so it is binary, "
                            "not text; upload a plain-text .txt or .jsonl file.")
    try:
        prompts = parse_prompts(decoded, file_name)  # as `python -m kvviz generate` reads its file
    except ValueError as error:
        raise WorkloadError(str(error)) from None
    if len(prompts) > MAX_UPLOAD_PROMPTS:
        raise WorkloadError(f"{file_name} holds {len(prompts):,} prompts, more than the {MAX_UPLOAD_PROMPTS:,} "
                            "one job takes; split it into smaller files.")
    return prompts


def upload_workload(tokenizer, name: str, data: bytes, output_len: tuple[int, int] = (16, 32),
                    seed: int = 0) -> Workload:
    prompts = parse_upload(name, data)
    if tokenizer is None:
        raise WorkloadError("This model has no tokenizer, so it cannot read text prompts; "
                            "use a synthetic workload instead.")
    token_ids = [tokenizer(p)["input_ids"] for p in prompts]
    empty = next((i for i, t in enumerate(token_ids) if not t), None)
    if empty is not None:
        raise WorkloadError(f"Prompt {empty + 1} of {Path(name).name} has no tokens; remove it or add text.")
    output_lens = draw_lengths(len(prompts), output_len, seed)
    total = sum(map(len, token_ids)) + sum(output_lens)
    if total > MAX_JOB_TOKENS:
        raise WorkloadError(f"{Path(name).name} makes a job of {total:,} tokens (prompts plus outputs), more than "
                            f"the {MAX_JOB_TOKENS:,} allowed; upload fewer or shorter prompts, or ask for fewer "
                            "tokens.")
    return Workload(Path(name).name, token_ids, output_lens, prompts)


# ---- sampling and outputs ----------------------------------------------------------------
def request_sampling(params: SamplingParams, request_index: int, max_tokens: int | None = None) -> SamplingParams:
    """Request i's sampling in a job: `params` with seed + i * n (equal prompts need not give equal
    samples, and a rerun gives the same ones), and its own max_tokens when given. With n samples a
    request, sample j draws with its request's seed + j, so request i owns seeds seed + i*n to
    seed + i*n + n - 1 and no two samples of a job share one."""
    seed = None if params.seed is None else params.seed + request_index * params.n
    return replace(params, seed=seed, max_tokens=params.max_tokens if max_tokens is None else max_tokens)


def jsonl_lines(prompts: list[str], outputs: list) -> list[str]:
    """One JSON object a line per request (kvviz.engine.RequestOutput): what `generate --out` writes."""
    lines = []
    for prompt, out in zip(prompts, outputs):
        line = {"prompt": prompt, "text": out.text, "token_ids": out.token_ids,
                "finish_reason": out.finish_reason, "num_cached_tokens": out.num_cached_tokens}
        if len(out.samples) > 1:  # SamplingParams(n > 1): every sample, sample 0 first
            line |= {"samples": out.samples, "texts": out.texts}
        lines.append(json.dumps(line) + "\n")
    return lines
