"""Old name of kvviz.batch_generation (the "Batch generation" lesson's logic); kept for one release."""
from kvviz.batch_generation import *  # noqa: F401,F403
