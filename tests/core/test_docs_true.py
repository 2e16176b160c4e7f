"""The docs say only what exists: every command-line flag, KVVIZ_* variable and repository path that
README.md, docs/*.md and kvviz's module docstrings name is checked against the code as it stands.

Flags are checked against the live parser (kvviz.cli.main.build_parser), so flags generated from
EngineConfig keep up by themselves; variables against what the code reads; paths against the tree."""

from __future__ import annotations

import ast
import functools
import importlib
import re
from pathlib import Path

import pytest

from kvviz.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMANDS = ("generate", "bench", "bill")
TOP_FOLDERS = ("kvviz", "lessons", "scripts", "tests", "docs", ".streamlit")
KVVIZ_FOLDERS = ("engine", "strategies", "ui", "rooms", "cli")  # not vllm/: vLLM's own source is named too
TOP_FILES = ("app.py", "requirements.txt", "requirements-dev.txt", "pyproject.toml")
# Where a KVVIZ_* variable may be read: the app, its pages, the package, the scripts, test support.
READERS = [ROOT / "app.py", *(ROOT / "lessons").glob("*.py"), *(ROOT / "kvviz").rglob("*.py"),
           *(ROOT / "scripts").glob("*.*"), *(ROOT / "tests" / "support").glob("*.py")]
# Folders the docs name that the code makes at run time, not the repository.
MADE_AT_RUN_TIME = ("artifacts/", ".venv/", ".venv-vllm/")


@functools.cache
def docstrings() -> dict[str, str]:
    """Every kvviz module's docstring, by path."""
    found = {}
    for path in sorted((ROOT / "kvviz").rglob("*.py")):
        text = ast.get_docstring(ast.parse(path.read_text()))
        if text:
            found[str(path.relative_to(ROOT))] = text
    return found


@functools.cache
def texts() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in DOCS} | docstrings()


def code_spans(text: str) -> list[str]:
    """Inline code and the lines of fenced code blocks."""
    blocks = [block.replace("\\\n", " ") for block in re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S)]
    rest = re.sub(r"```.*?```", "", text, flags=re.S)
    inline = [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", rest)]  # may run over a line break
    return [line for block in blocks for line in block.splitlines()] + inline


@functools.cache
def parser_options() -> dict[str, set[str]]:
    """command -> the option strings its live parser takes."""
    parser = build_parser()
    (commands,) = [a for a in parser._actions if a.choices and set(COMMANDS) <= set(a.choices)]
    return {name: {o for action in sub._actions for o in action.option_strings}
            for name, sub in commands.choices.items()}


def flag_uses() -> list[tuple[str, str, str]]:
    """(where, command, flag) for each flag written after a kvviz command in a doc."""
    uses = []
    for where, text in texts().items():
        indented = [line for line in text.replace("\\\n", " ").splitlines() if line.startswith("    ")]
        for span in code_spans(text) + indented:  # fenced, inline, and indented code blocks
            for match in re.finditer(r"(?:(?:python -m )?kvviz |^)(generate|bench|bill)\b([^#|;&`]*)", span.strip()):
                for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", match.group(2)):
                    uses.append((where, match.group(1), flag))
    return uses


def test_the_docs_name_kvviz_commands_and_flags():
    assert len(flag_uses()) >= 15  # the scanner still finds the README's and design.md's commands


@pytest.mark.parametrize("where, command, flag", sorted(set(flag_uses())))
def test_every_documented_flag_is_in_the_parser(where, command, flag):
    assert flag in parser_options()[command], f"{where} names `{command} {flag}`, which the parser does not take"


def test_every_engine_flag_the_readme_lists_is_generates():
    """The README's sentence listing generate's engine flags names flags generate takes."""
    readme = (ROOT / "README.md").read_text()
    sentence = re.search(r"Its engine flags are made from EngineConfig's fields[^(]*\(([^)]*)\)", readme)
    assert sentence, "the README no longer lists generate's engine flags; update this test"
    listed = re.findall(r"`(--[a-z][\w-]*)", sentence.group(1))
    assert listed and set(listed) <= parser_options()["generate"]


@functools.cache
def script_flags() -> set[str]:
    """Flags the scripts define (argparse calls, or a shell script's own options)."""
    flags = set()
    for path in (ROOT / "scripts").glob("*.*"):
        flags |= set(re.findall(r"[\"'](--[a-z][\w-]*)[\"']", path.read_text()))
        if path.suffix == ".sh":
            flags |= set(re.findall(r"(--[a-z][\w-]*)", "\n".join(line for line in path.read_text().splitlines()
                                                                  if line.startswith("#"))))
    return flags


def test_every_flag_of_a_script_the_docs_run_is_the_scripts():
    for where, text in texts().items():
        for span in code_spans(text):
            for script, rest in re.findall(r"scripts/([\w]+\.(?:py|sh))([^`#|;&]*)", span):
                source = (ROOT / "scripts" / script).read_text()
                for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", rest):
                    assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", source), \
                        f"{where} runs scripts/{script} with {flag}, which it does not take"


def test_every_bare_flag_in_the_docs_exists_somewhere():
    """A flag in inline code with no command before it is one of kvviz's or the scripts'."""
    known = set().union(*parser_options().values()) | script_flags() | {"--help"}
    for where, text in texts().items():
        for span in code_spans(text):
            if re.search(r"\b(pip|streamlit|huggingface-cli|git|python3? -c)\b", span):
                continue  # other programs' flags
            for flag in re.findall(r"^(--[a-z][\w-]*)", span):
                assert flag in known, f"{where} names `{flag}`, which no kvviz command or script takes"


@functools.cache
def variables_read() -> set[str]:
    return {name for path in READERS if path.is_file()
            for name in re.findall(r"KVVIZ_[A-Z0-9_]+", path.read_text())}


def test_every_documented_variable_is_read_by_the_code():
    read = variables_read()
    for where, text in texts().items():
        for name in re.findall(r"KVVIZ_[A-Z0-9_]+", text):
            assert name in read, f"{where} names {name}, which nothing in kvviz/, lessons/, app.py or scripts/ reads"


def test_every_variable_the_code_reads_has_a_row_in_the_serving_guides_table():
    """One table in docs/serving.md (the class server's operator guide, linked from the README) documents each
    KVVIZ_* variable, once."""
    guide = (ROOT / "docs" / "serving.md").read_text()
    rows = re.findall(r"^\| `(KVVIZ_[A-Z0-9_]+)` \|", guide, flags=re.M)
    assert len(rows) == len(set(rows)), "a variable has two rows"
    assert set(rows) == variables_read()


def path_mentions(where: str, text: str) -> list[str]:
    """Repository paths a doc names: markdown links, and words that start at a top folder or name a top file."""
    found = [target for target in re.findall(r"\]\(([^)#\s]+)\)", text) if "://" not in target]
    base = (ROOT / where).parent
    found = [str(((base / target).resolve()).relative_to(ROOT)) if (base / target).resolve().is_relative_to(ROOT)
             else target for target in found]
    words = r"(?<![\w./~$-])((?:%s)/[\w./<>*{}-]*|(?:%s))(?![\w/-])" % (
        "|".join(re.escape(f) for f in TOP_FOLDERS), "|".join(re.escape(f) for f in TOP_FILES))
    found += re.findall(words, text)
    inside = r"(?<![\w./~$-])((?:%s)/[\w./<>*{}-]*)" % "|".join(KVVIZ_FOLDERS)  # engine/records.py: in kvviz/
    found += ["kvviz/" + path for path in re.findall(inside, text)]
    return [p.rstrip(".,:;") for p in found]


def test_every_path_the_docs_name_exists():
    missing = []
    for where, text in texts().items():
        for path in path_mentions(where, text):
            if any(mark in path for mark in "<{") or path.startswith(MADE_AT_RUN_TIME):
                continue  # a pattern (kvviz/lessons/<key>/), not a path
            if "*" in path:
                if not list(ROOT.glob(path.rstrip("/"))):
                    missing.append((where, path))
            elif not (ROOT / path).exists():
                missing.append((where, path))
    assert not missing, f"paths the docs name that do not exist: {missing}"


def test_the_vllm_version_the_docs_quote_is_the_one_setup_installs():
    pinned = re.search(r"^VLLM_VERSION=(\S+)", (ROOT / "scripts" / "setup_vllm.sh").read_text(), flags=re.M).group(1)
    # 0.x: not tok/s
    quoted = {version for p in DOCS for version in re.findall(r"vLLM (0\.\d+(?:\.\d+)?)\b", p.read_text())}
    assert quoted and all(pinned == v or pinned.startswith(v + ".") for v in quoted), (pinned, quoted)


def resolves(dotted: str) -> bool:
    """kvviz.a.b.name: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def test_every_dotted_kvviz_name_the_docs_give_exists():
    """kvviz.memory_bill.kv_cache_bytes, kvviz.ui.live_lessons: each module and name is there."""
    missing = sorted({(where, name) for where, text in texts().items()
                      for name in re.findall(r"(?<![\w/.])kvviz(?:\.[A-Za-z_]\w*)+", text) if not resolves(name)})
    assert not missing, f"names the docs give that do not exist: {missing}"


def imports_of(path: Path, inside_functions: bool) -> list[str]:
    """The modules a file imports: at any depth, or only those inside a function."""
    tree, found = ast.parse(path.read_text()), []
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))] \
        if inside_functions else [tree]
    for scope in scopes:
        for node in ast.walk(scope):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.append(node.module)
            elif isinstance(node, ast.Import):
                found += [alias.name for alias in node.names]
    return found


def test_streamlit_is_imported_only_where_the_docs_say():
    """design.md and kvviz/ui/__init__.py: the pages, kvviz/ui and kvviz/lessons import Streamlit; nothing else in
    kvviz."""
    importers = {str(p.relative_to(ROOT / "kvviz")).split("/")[0] for p in (ROOT / "kvviz").rglob("*.py")
                 if any(m.split(".")[0] == "streamlit" for m in imports_of(p, inside_functions=False))}
    assert importers <= {"ui", "lessons"}, importers


def test_the_rooms_import_no_page_and_no_streamlit():
    """design.md: kvviz/rooms/ (a room's data and stores) sits below kvviz/ui and kvviz/lessons; what a store calls
    back into the pages is handed to it, so no import runs back up."""
    upward = {(str(p.relative_to(ROOT)), m) for p in (ROOT / "kvviz" / "rooms").rglob("*.py")
              for m in imports_of(p, inside_functions=False)
              if m.split(".")[0] == "streamlit" or m.startswith(("kvviz.ui", "kvviz.lessons"))}
    assert not upward, upward


def test_design_counts_the_function_level_imports_there_are():
    said = re.search(r"kvviz has (\d+)\s+function-level imports", (ROOT / "docs" / "design.md").read_text())
    counted = sum(len(imports_of(p, inside_functions=True)) for p in (ROOT / "kvviz").rglob("*.py"))
    assert said and int(said.group(1)) == counted, f"design.md says {said and said.group(1)}; kvviz has {counted}"
