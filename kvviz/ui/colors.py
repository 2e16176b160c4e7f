"""One palette for every page: a colour per phase, per request, per layer, per block state."""

from __future__ import annotations

PHASE = {
    "prompt": "#4C78A8",  # blue: tokens that entered the cache at prefill
    "decode": "#F58518",  # orange: tokens generated one step at a time
    "new": "#E45756",  # red: what the step that just ran added
    "recompute": "#B279A2",  # purple: work done again without a cache
}
BLOCK_STATE = {"free": "#E5E7EB", "cached_free": "#A7F3D0", "shared": "#7C3AED"}
# Plotly's "Bold" qualitative palette: distinct from the back of a room, colour-blind aware-ish
_REQUEST = ["#7F3C8D", "#11A579", "#3969AC", "#F2B701", "#E73F74", "#80BA5A",
            "#E68310", "#008695", "#CF1C90", "#F97B72", "#4B4B8F", "#A5AA99"]
_LAYER = ["#1F77B4", "#FF7F0E", "#2CA02C", "#D62728", "#9467BD", "#8C564B",
          "#E377C2", "#7F7F7F", "#BCBD22", "#17BECF"]
FONT = dict(size=16)


def request_color(request_id: int) -> str:
    return _REQUEST[request_id % len(_REQUEST)]


def layer_color(layer: int) -> str:
    return _LAYER[layer % len(_LAYER)]

