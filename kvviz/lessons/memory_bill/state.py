"""The Memory bill page's session state, declared once (BILL): its inputs only, which stay when a model loads, and
the pair of models measured on the page."""

from __future__ import annotations

from kvviz.ui.session_keys import SessionState, Slot


class BillState(SessionState):
    """The page's widgets and what it keeps between its runs. The shape sliders' keys are
    kvviz.lessons.memory_bill.logic.slider_values'."""

    preset = Slot("bill_preset")  # the preset picked, or logic.CUSTOM once a slider moved
    base = Slot("bill_base")  # the preset the sliders started from
    device = Slot("bill_device")
    custom_gib = Slot("bill_custom_gib", default=48)  # the device's memory when "custom size"
    dtype = Slot("bill_dtype")
    weights_dtype = Slot("bill_weights_dtype")
    context = Slot("bill_context")
    batch = Slot("bill_batch")
    utilization = Slot("bill_utilization")
    gpus = Slot("bill_gpus")
    last_good = Slot("bill_last_good")  # the last shape the sliders made that a model can have
    compare = Slot("bill_compare", default="models")
    compare_models = Slot("bill_compare_models", default=[])
    pair = Slot("bill_pair")  # the pair of models measured side by side
    pair_error = Slot("bill_pair_error")
    pair_note = Slot("bill_pair_note")


BILL = BillState()
