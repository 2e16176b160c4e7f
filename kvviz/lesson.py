"""Old name of kvviz.prefill_decode (the "Prefill and decode" lesson's logic); kept for one release."""
from kvviz.prefill_decode import *  # noqa: F401,F403
