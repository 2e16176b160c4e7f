"""A token as the views show it. A byte-level tokenizer (GPT-2's, SmolLM2's) may split one character (an
emoji, a Chinese character) over several tokens; decoded alone, each is no character at all and prints as
"\ufffd" (the replacement character). Such a piece shows its bytes instead: ⟨F0 9F 98⟩.

    piece_text(tokenizer, 12345)   # 'Hello' or '⟨F0 9F 98⟩'
"""

from __future__ import annotations

import functools
import re

REPLACEMENT = "\ufffd"
BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece's byte fallback: <0xF0>


@functools.cache
def byte_of_char() -> dict[str, int]:
    """Byte-level BPE's alphabet back to bytes: printable bytes are their own character; the other 68 bytes
    (controls, space, 127-160, 173) were given the characters from U+0100 on, in order."""
    own = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in own]
    table = {chr(b): b for b in own}
    table.update({chr(256 + i): b for i, b in enumerate(others)})
    return table


def piece_bytes(tokenizer, token_id: int) -> bytes | None:
    """The bytes a token stands for, read from its vocabulary entry; None when the entry is not bytes."""
    piece = tokenizer.convert_ids_to_tokens(int(token_id))
    if not isinstance(piece, str):
        return None
    if BYTE_TOKEN.fullmatch(piece):
        return bytes([int(BYTE_TOKEN.fullmatch(piece).group(1), 16)])
    table = byte_of_char()
    if all(ch in table for ch in piece):
        return bytes(table[ch] for ch in piece)
    return None


def piece_text(tokenizer, token_id: int) -> str:
    """The token's text; for a piece of a character, its bytes as ⟨F0 9F 98⟩."""
    text = tokenizer.decode([int(token_id)])
    if REPLACEMENT not in text:
        return text
    raw = piece_bytes(tokenizer, token_id)
    if raw is None:
        return text
    readable = raw.decode("utf-8", errors="replace")
    if REPLACEMENT not in readable:
        return readable
    return "⟨" + " ".join(f"{b:02X}" for b in raw) + "⟩"
