"""Issue 53: Streamlit's private internals are reached through one module (kvviz/ui/streamlit_door.py), and each
name it uses still exists in the installed Streamlit: an upgrade that moves one fails here, by name."""

import ast
from pathlib import Path

import streamlit
from streamlit.delta_generator import DeltaGenerator
from streamlit.proto.ClientState_pb2 import ClientState
from streamlit.runtime import Runtime
from streamlit.runtime.app_session import AppSession
from streamlit.runtime.scriptrunner_utils.script_run_context import (FragmentThreadState, ScriptRunContext,
                                                                     ThreadState)
from streamlit.runtime.session_manager import SessionManager
from streamlit.web.server.starlette.starlette_websocket import StarletteSessionClient

from kvviz.ui import streamlit_door

ROOT = Path(__file__).resolve().parents[2]
CLASSES = {"Runtime": Runtime, "SessionManager": SessionManager, "AppSession": AppSession,
           "ScriptRunContext": ScriptRunContext, "ThreadState": ThreadState,
           "FragmentThreadState": FragmentThreadState, "ClientState": ClientState,
           "DeltaGenerator": DeltaGenerator, "StarletteSessionClient": StarletteSessionClient}


def has(cls, name: str) -> bool:
    """A method, a class attribute, a dataclass field, a protobuf field, or an attribute set in __init__."""
    if hasattr(cls, name) or name in getattr(cls, "__dataclass_fields__", {}):
        return True
    if hasattr(cls, "DESCRIPTOR"):
        return name in cls.DESCRIPTOR.fields_by_name
    source = Path(__import__(cls.__module__, fromlist=["x"]).__file__).read_text()
    return f"self.{name} =" in source or f"self.{name}:" in source


def test_every_internal_the_door_uses_is_in_the_installed_streamlit():
    missing = [f"{owner}.{name}" for owner, name in streamlit_door.USED if not has(CLASSES[owner], name)]
    assert not missing, (f"Streamlit {streamlit.__version__} (the door was written for "
                         f"{streamlit_door.WRITTEN_FOR}) lacks {missing}: update kvviz/ui/streamlit_door.py")


def test_no_other_module_reaches_into_streamlit_internals():
    private = ("streamlit.runtime", "streamlit.proto", "streamlit.delta_generator", "streamlit.web")
    reaching = []
    for path in [*ROOT.glob("kvviz/**/*.py"), *ROOT.glob("lessons/*.py"), ROOT / "app.py"]:
        if path.name == "streamlit_door.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(private):
                reaching.append(f"{path.relative_to(ROOT)}: {node.module}")
            if isinstance(node, ast.Attribute) and node.attr in ("_session_mgr", "_client_state",
                                                                 "_call_soon_on_event_loop"):
                reaching.append(f"{path.relative_to(ROOT)}: .{node.attr}")
    assert not reaching, reaching


def test_outside_a_server_the_door_says_so_and_asks_nothing():
    assert not streamlit_door.server_runs() and streamlit_door.session_id() is None
    assert not streamlit_door.session_ended("no-such-session") and not streamlit_door.rerun("no-such-session", "")
    assert streamlit_door.whole_page_runs() and streamlit_door.fragment_id() is None


def test_the_engines_teaching_modules_reach_the_cpu_fast_path_only_through_its_seam():
    """Issue 53: the compiled kernels and packed layers (engine/cpu/) are chosen in engine/fast_path.py alone."""
    fast = ("kvviz.engine.cpu.kernels", "kvviz.engine.cpu.packed_layers")
    reaching = []
    for path in (ROOT / "kvviz" / "engine").glob("*.py"):
        if path.name == "fast_path.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (
                    (node.module or "").startswith(fast)
                    or (node.module == "kvviz.engine.cpu"
                        and {a.name for a in node.names} & {"kernels", "packed_layers"})):
                reaching.append(f"{path.name}: {node.module}")
    assert not reaching, reaching
