"""What the command line's tests share: a prompt file (prompts)."""

import pytest


@pytest.fixture
def prompts(tmp_path):
    """A prompt file of one prompt, "ROMEO:"."""
    path = tmp_path / "p.txt"
    path.write_text("ROMEO:\n")
    return path
