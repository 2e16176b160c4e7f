"""A tab without a browser: one Streamlit session over a websocket, speaking the protocol as a hostile script would
(issue 61's probes, scripts/probe_hostile.py).

    tab = await SocketTab.open(url)
    drawn = await tab.run("prefill_decode")                      # the page's first run: what it drew
    drawn = await tab.run("prefill_decode", {drawn.id_of("button", "Prefill"): True})
    drawn.alerts("error")                                         # the sentences it refused with
    await tab.close()

A run sends one BackMsg rerun_script (the page's name, the link's query and the widgets' values: a click is a
trigger, True; a toggle turned off, False; text a str; a slider a list of numbers; a component's report a JSON
string under "json:"+id) and reads the ForwardMsgs the server sends back until the run ends (a run the page ends
with st.rerun() goes on into the next). What it drew is kept as (kind, id, label, text) rows: an alert's kind is
"alert:error" and so on, its text the sentence; a code block's text its code.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState

ALERTS = {1: "error", 2: "warning", 3: "info", 4: "success"}
EARLY = ForwardMsg.ScriptFinishedStatus.Value("FINISHED_EARLY_FOR_RERUN")
FRAGMENT = ForwardMsg.ScriptFinishedStatus.Value("FINISHED_FRAGMENT_RUN_SUCCESSFULLY")


@dataclass
class Drawn:
    """What one run drew: (kind, widget id, label, text) per element."""

    elements: list[tuple[str, str, str, str]] = field(default_factory=list)

    def id_of(self, kind: str, label: str = "") -> str:
        """The id of the last `kind` element whose label is `label` (or whose id ends with `-label`)."""
        found = [e[1] for e in self.elements if e[0] == kind and (e[2] == label or e[1].endswith("-" + label))]
        if not found:
            raise LookupError(f"no {kind} {label!r} among {[e[:3] for e in self.elements if e[1]]}")
        return found[-1]

    def alerts(self, kind: str) -> list[str]:
        """The sentences of the `kind` ("error", "warning", ...) alerts, their markdown escapes undone."""
        return [re.sub(r"\\([^\w\s])", r"\1", e[3]) for e in self.elements if e[0] == f"alert:{kind}"]

    @property
    def exceptions(self) -> int:
        return sum(e[0] == "exception" for e in self.elements)


def element_row(element) -> tuple[str, str, str, str]:
    kind = element.WhichOneof("type")
    inner = getattr(element, kind)
    if kind == "alert":
        return f"alert:{ALERTS.get(inner.format, 'other')}", "", "", inner.body
    if kind == "exception":
        return kind, "", "", inner.message
    text = getattr(inner, "code_text", "") if kind == "code" else getattr(inner, "body", "")
    return kind, getattr(inner, "id", ""), getattr(inner, "label", ""), text


class SocketTab:
    def __init__(self, socket):
        self.socket = socket

    @classmethod
    async def open(cls, url: str) -> SocketTab:
        socket = await websockets.connect(url.replace("http", "ws", 1) + "/_stcore/stream",
                                          subprotocols=["streamlit"], max_size=None, open_timeout=60)
        return cls(socket)

    async def run(self, page: str, widgets: dict[str, object] | None = None, query: str = "",
                  within_s: float = 300.0) -> Drawn:
        message = BackMsg()
        message.rerun_script.page_name, message.rerun_script.query_string = page, query
        for key, value in (widgets or {}).items():
            state = WidgetState(id=key.removeprefix("json:"))
            if key.startswith("json:"):
                state.json_value = value
            elif value is True:
                state.trigger_value = True
            elif value is False:  # a checkbox or toggle turned off
                state.bool_value = False
            elif isinstance(value, (list, tuple)):  # a slider's value(s)
                state.double_array_value.data[:] = [float(v) for v in value]
            else:
                state.string_value = value
            message.rerun_script.widget_states.widgets.append(state)
        await self.socket.send(message.SerializeToString())
        return await asyncio.wait_for(self.drawn(), within_s)

    async def drawn(self) -> Drawn:
        drawn = Drawn()
        while True:
            reply = ForwardMsg()
            reply.ParseFromString(await self.socket.recv())
            kind = reply.WhichOneof("type")
            if kind == "delta" and reply.delta.WhichOneof("type") == "new_element":
                drawn.elements.append(element_row(reply.delta.new_element))
            elif kind == "script_finished" and reply.script_finished not in (EARLY, FRAGMENT):
                return drawn

    async def close(self) -> None:
        await self.socket.close()
