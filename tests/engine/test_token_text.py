"""Issue 50 item 6: an emoji or a Chinese character split over several byte-level tokens showed as "\ufffd"
in the lesson's chips and labels; each piece now shows its bytes, and whole characters their text."""

import pytest

from kvviz.engine.token_text import REPLACEMENT, byte_of_char, piece_text
from kvviz.hub.fetch import fetched_folder


def test_the_byte_alphabet_covers_every_byte_once():
    table = byte_of_char()
    assert sorted(table.values()) == list(range(256)) and len(table) == 256
    assert table["!"] == 33 and table["Ġ"] == 32  # GPT-2's space


@pytest.mark.skipif(fetched_folder("smollm2") is None, reason="SmolLM2 is not fetched here")
def test_pieces_of_an_emoji_and_of_chinese_show_bytes_on_smollm2():
    from kvviz import load_model

    tokenizer = load_model("smollm2").tokenizer
    for text in ("I love 🦙 llamas", "缓存"):
        ids = tokenizer(text)["input_ids"]
        shown = [piece_text(tokenizer, t) for t in ids]
        assert not any(REPLACEMENT in s for s in shown), shown
        assert any(s.startswith("⟨") for s in shown) or "".join(shown) == text  # pieces as bytes, or whole
        raw = b"".join(bytes(int(h, 16) for h in s[1:-1].split()) if s.startswith("⟨") else s.encode()
                       for s in shown)
        assert raw.decode("utf-8") == text  # the bytes shown are the text's own bytes, in order


def test_a_whole_token_keeps_its_text(bundled):
    ids = bundled.tokenizer("ROMEO: But soft")["input_ids"]
    assert [piece_text(bundled.tokenizer, t) for t in ids] == [bundled.tokenizer.decode([t]) for t in ids]
