"""Issue 33 item 11: a request's colour must not read as a block state (R2's green was the cached
prefix's green) or as the stage's highlight."""

import colorsys
import re
from itertools import combinations

from kvviz.ui.colors import BLOCK_STATE, _REQUEST, request_color
from kvviz.ui.stage import __file__ as stage_init

STAGE_CSS = open(stage_init.replace("__init__.py", "stage.css")).read()


def hsv(color: str) -> tuple[float, float, float]:
    r, g, b = (int(color[i:i + 2], 16) / 255 for i in (1, 3, 5))
    h, s, v = colorsys.rgb_to_hsv(r, g, b)
    return h * 360, s, v


def hue_apart(a: str, b: str) -> float:
    d = abs(hsv(a)[0] - hsv(b)[0]) % 360
    return min(d, 360 - d)


def test_request_colours_stay_away_from_the_block_states_and_the_highlight():
    lit = re.search(r"--lit:\s*(#[0-9A-Fa-f]{6})", STAGE_CSS).group(1)
    cached = re.search(r"--cached:\s*(#[0-9A-Fa-f]{6})", STAGE_CSS).group(1)
    assert cached.upper() == BLOCK_STATE["cached_free"].upper()
    for color in _REQUEST:
        for state in (BLOCK_STATE["cached_free"], BLOCK_STATE["shared"], lit):
            assert hue_apart(color, state) >= 25, (color, state)
        assert hsv(color)[2] < 0.9  # dark enough to stand apart from the pale free block


def contrast_with_white(color: str) -> float:
    channels = [int(color[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 1.05 / (0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2] + 0.05)


def test_a_requests_label_in_white_on_its_colour_keeps_4_5_to_1():
    """Issue 60: axe found R2's and R3's chips at 4.3:1 on a lesson's web page (the stage writes R1, R2 in white)."""
    for color in _REQUEST:
        assert contrast_with_white(color) >= 4.5, color


def test_request_colours_differ_from_each_other():
    for a, b in combinations(_REQUEST, 2):
        distance = sum((int(a[i:i + 2], 16) - int(b[i:i + 2], 16)) ** 2 for i in (1, 3, 5)) ** 0.5
        assert distance > 60, (a, b)
    assert request_color(0) == request_color(len(_REQUEST))  # the palette repeats past its end
