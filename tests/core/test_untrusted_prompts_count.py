"""Issue 61 item 12: `kvviz generate --prompts` of a 4 MB file of 2,000,000 one-character lines ran 121 CPU s and took
3.8 GB before it was killed, no request done. A prompts file holds at most MAX_PROMPTS, refused in one sentence."""

import time

import pytest

from kvviz.workloads import MAX_PROMPTS, read_prompts


def test_a_file_of_two_million_prompts_is_refused_in_a_sentence(tmp_path):
    path = tmp_path / "many.txt"
    path.write_text("a\n" * 2_000_000)
    started = time.process_time()
    with pytest.raises(ValueError) as refused:
        read_prompts(path)
    assert time.process_time() - started < 10
    assert f"{MAX_PROMPTS:,}" in str(refused.value) and "2,000,000 prompts" in str(refused.value)


def test_a_file_at_the_limit_is_read(tmp_path):
    path = tmp_path / "enough.txt"
    path.write_text("a\n" * MAX_PROMPTS)
    assert len(read_prompts(path)) == MAX_PROMPTS
