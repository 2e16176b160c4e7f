"""What pages share: the model picker and shared model, sampling settings, kept settings, exports and "Show the
code"."""

from __future__ import annotations

import inspect
import os
import threading
import weakref
from dataclasses import fields, replace

import streamlit as st

from kvviz.engine.sampling import SamplingParams
from kvviz.hub.fetch import PACKAGED, fetch_command, fetched_folder
from kvviz.models import LoadedModel, ModelLoadError, allowed_source, load_model
from kvviz.ui import memory_budget
from kvviz.ui.session_keys import SessionState, Slot
from kvviz.ui.text import plain

DEFAULT_SOURCE = "bundled"  # the offline fallback: in the repository, always there
DEFAULT_VARIABLE = "KVVIZ_DEFAULT_MODEL"


def default_source() -> str:
    """The model a new session opens on: KVVIZ_DEFAULT_MODEL when set, else SmolLM2 once `kvviz fetch
    smollm2` made it ready (a real instruct model writes real English), else the bundled model."""
    chosen = os.environ.get(DEFAULT_VARIABLE, "").strip()
    if chosen:
        return chosen
    return "smollm2" if fetched_folder("smollm2") is not None else DEFAULT_SOURCE


class ModelState(SessionState):
    """The sidebar's model in this session: the app's own keys, which stay when another model loads."""

    source = Slot("model_source")  # what this session's model was loaded from
    request = Slot("model_request", default="")  # the sidebar's field
    error = Slot("model_error")  # why the model asked for is not the one loaded: one sentence
    link_read = Slot("model_link_read")  # a link's ?model= was read (once a session)


MODEL = ModelState()


def session_source() -> str:
    """This session's model source, the default fixed on its first read (so a fetch mid-session moves nothing)."""
    if not MODEL.has("source"):
        MODEL.source = default_source()
    return MODEL.source


# One copy of each model in this process. Streamlit's cache keeps the last MODELS_KEPT loaded; a model it lets go
# that a live lesson still holds is found here instead of being loaded a second time (five models cycled through
# links once held a copy per lesson: 15 GiB after 15 tabs, issue 61).
MODELS_KEPT = 3
# source -> (a weak reference to its torch module, the LoadedModel's other fields): a lesson's engines hold the
# module, not the LoadedModel around it, so the module is what tells whether a copy still lives
_live_models: dict[str, tuple[weakref.ref, dict]] = {}
_live_lock = threading.Lock()


@st.cache_resource(show_spinner="Loading the model…", max_entries=MODELS_KEPT)
def _loaded(source: str):
    live = live_model(source)
    if live is not None:
        return live
    memory_budget.check_model_load(source)  # a sentence, and nothing loads, past the server's memory budget
    loaded = load_model(source)
    others = {field.name: getattr(loaded, field.name) for field in fields(loaded) if field.name != "model"}
    with _live_lock:
        _live_models[source] = (weakref.ref(loaded.model), others)
    return loaded


def live_model(source: str):
    """The copy of `source` this process holds (in Streamlit's cache, or in a live lesson's engines), or None."""
    with _live_lock:
        held = _live_models.get(source)
        module = held[0]() if held else None
        if held and module is None:
            del _live_models[source]
    return LoadedModel(model=module, **held[1]) if module is not None else None


def shared_model(source: str):
    """One copy of each model for every session; sessions only read it."""
    return live_model(source) or _loaded(source)


def current_model():
    """The model this session picked (the bundled one until another loads). A model the server can no longer load
    for it (past its memory budget, once Streamlit's cache let it go) leaves the session on the bundled model, with
    the sidebar's sentence saying why."""
    try:
        return shared_model(session_source())
    except ModelLoadError as error:
        MODEL.error = str(error)
        MODEL.source = DEFAULT_SOURCE
        return shared_model(DEFAULT_SOURCE)


def _load_requested_model(on_model_change) -> None:
    """Load what the field names, if this server's KVVIZ_MODELS allows it (kvviz.models.allowed_source),
    then call on_model_change(st.session_state)."""
    try:
        wanted = allowed_source(MODEL.request)  # canonical: one cache entry per model
        shared_model(wanted)
    except ModelLoadError as error:
        MODEL.error = str(error)
        return
    MODEL.source = wanted
    del MODEL.error
    # the address follows the sidebar: a link's ?model= would otherwise load the old model again when the cleared
    # lesson reads its link anew (the link's prompt and step then rerun on the model just loaded)
    if "model" in st.query_params:
        st.query_params["model"] = wanted
    on_model_change(st.session_state)


def load_linked_model(source: str, whose: str = "The link's model") -> str | None:
    """A link's model (?model=...), or a room's on Take over: load it for this session as the sidebar
    would, under the same KVVIZ_MODELS rules. None when it is loaded (or already was); otherwise the
    sentence to show, and the session keeps the model it had."""
    if source == session_source():
        return None
    try:
        wanted = allowed_source(source[:300])  # a link is untrusted: a bounded id, checked like a typed one
        shared_model(wanted)
    except ModelLoadError as error:
        current = session_source()
        return (f"{whose} could not be loaded here: {error} The lesson runs on {current} instead, "
                "so its tokens may differ from the teacher's.")
    MODEL.source = wanted
    return None


def model_from_link() -> None:
    """?model=NAME on any page, read once per session: that model loads as the sidebar would load it
    (KVVIZ_MODELS decides), or the sidebar says in a sentence why not."""
    if MODEL.link_read or "model" not in st.query_params:
        return
    MODEL.link_read = True
    refused = load_linked_model(st.query_params["model"])
    if refused:
        MODEL.error = refused


def model_sidebar(on_model_change) -> None:
    """The sidebar's model picker; on_model_change(session_state) runs after another model loads
    (app.py passes kvviz.lessons.lecture.reset_lessons: lessons belong to the model they ran on)."""
    with st.sidebar:
        st.markdown("### Model")
        st.text_input("bundled, smollm2, gemma3, tiny-mla, tiny-gemma3, a Hugging Face id (local cache), a folder "
                      "or a .gguf file",
                      key="model_request", placeholder=session_source(),
                      on_change=_load_requested_model,
                      args=(on_model_change,))
        st.button("Load model", on_click=_load_requested_model, args=(on_model_change,), width="stretch")
        if MODEL.has("error"):
            st.error(plain(MODEL.error))  # it quotes what was typed: show it as text
        if session_source() != DEFAULT_SOURCE:
            st.caption("Offline fallback: **bundled**, the small Shakespeare model in the repository.")
        for name in (name for name in PACKAGED if fetched_folder(name) is None):  # the app never downloads
            st.caption(f"{PACKAGED[name].title} ({name}): not fetched here; run `{fetch_command(name)}` once.")
        info = current_model().describe()
        heads = (f"{info['heads']} query heads / {info['kv_heads']} KV heads · head size {info['head_dim']}"
                 if not info.get("kv_lora_rank") else  # MLA: one latent row per token, for all heads
                 f"{info['heads']} heads · MLA latent {info['kv_lora_rank']} + RoPE key {info['qk_rope_head_dim']}")
        st.caption(f"**{info['name']}** · {info['parameters'] / 1e6:.1f}M parameters · {info['layers']} layers · "
                   f"{heads} · context {info['max_context']} · {info['dtype']} on {info['device']}")


def page_sampling(setting, prefix: str, sampling: SamplingParams) -> SamplingParams:
    """`sampling` with the page's temperature, top-k and top-p (widgets prefix + "temperature", ...),
    unless its prefix + "greedy" box is ticked: greedy keeps SamplingParams' temperature 0, no cut.

    setting: key -> the widget's value (or its default)."""
    if setting(prefix + "greedy"):
        return sampling
    return replace(sampling, temperature=float(setting(prefix + "temperature")),
                   top_k=int(setting(prefix + "top_k")), top_p=float(setting(prefix + "top_p")))


def show_code(*objects, caption: str = "") -> None:
    """The real source of the engine code that just ran, drawn only while its expander is open: the
    browser highlights every line of it again at each rerun (a stepped lesson's every click)."""
    with st.expander("Show the code", key=code_key(objects[0]), on_change="rerun") as shown:
        if not shown.open:
            return
        if caption:
            st.caption(caption)
        for obj in objects:
            st.code(inspect.getsource(obj), language="python")


def code_key(first) -> str:
    """The session state key of the "Show the code" expander whose first object is `first` (True: open)."""
    return "show_code:" + first.__qualname__


def keep_settings(keys) -> None:
    """Copy these widget values into plain session state, which outlives a visit to another page.

    Streamlit drops a widget's value while its page is away, so a page came back showing a default
    beside a run made with another value (kvviz.lessons.lecture.kept_settings names the keys)."""
    for key in keys:
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]


def kept_defaults(defaults: dict) -> None:
    """The defaults of widgets whose values keep_settings keeps, set once in session state: those widgets take
    no value= of their own (a value= beside a value set through the Session State API makes Streamlit warn)."""
    for key, value in defaults.items():
        st.session_state.setdefault(key, value)


def bound_export(run, view_key: str, export):
    """A function giving `export(run, step in view)`, the run's lesson file; None before a run.
    Streamlit calls it in a thread of its own when the export button is clicked, where
    st.session_state cannot be read, so the run and the step are bound here, as the page draws."""
    if run is None:
        return None
    step = int(st.session_state.get(view_key, len(run.records) - 1))
    return lambda: export(run, step)


def show_file_settings(controls: dict[str, tuple[object, object, object]]) -> None:
    """Set a page's controls to a replayed file's settings, so the controls and the replay agree.

    controls: widget key -> (the file's value, lowest, highest the control offers); lowest and
    highest are None for a toggle or a text box. A value the control cannot show (a file made
    with a larger pool, say) leaves that control as it was: the replay banner gives the value.
    Call it from the upload's callback, before the page draws its widgets."""
    for key, (value, lowest, highest) in controls.items():
        if lowest is None or lowest <= value <= highest:
            st.session_state[key] = value
