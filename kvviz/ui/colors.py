"""One palette for every page: a colour per phase, per request, per layer, per block state."""

from __future__ import annotations

PHASE = {
    "prompt": "#4C78A8",  # blue: tokens that entered the cache at prefill
    "decode": "#F58518",  # orange: tokens generated one step at a time
    "new": "#E45756",  # red: what the step that just ran added
    "recompute": "#B279A2",  # purple: work done again without a cache
}
BLOCK_STATE = {"free": "#E5E7EB", "cached_free": "#A7F3D0", "shared": "#7C3AED"}
# Strong colours readable from the back of a room, each away in hue from the block states beside
# them (mint for a free block with a cached prefix, violet for a shared one) and from the stage's
# yellow highlight (--lit in ui/stage/stage.css), so that a request's block never reads as one of those; and
# dark enough that its label in white (the stage's R1, R2 chips) keeps 4.5:1
_REQUEST = ["#3969AC", "#C74B0C", "#007C8A", "#CF1C90", "#5E7D1F", "#8C564B", "#9B2226", "#2F4858"]
_LAYER = ["#1F77B4", "#FF7F0E", "#2CA02C", "#D62728", "#9467BD", "#8C564B",
          "#E377C2", "#7F7F7F", "#BCBD22", "#17BECF"]
FONT = dict(size=16)


def request_color(request_id: int) -> str:
    return _REQUEST[request_id % len(_REQUEST)]


def layer_color(layer: int) -> str:
    return _LAYER[layer % len(_LAYER)]

