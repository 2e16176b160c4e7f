"""Issue 63: the lecture (kvviz.lessons.lecture) lists every lesson, so nothing a lesson imports may import it back,
not even inside a function: the lesson-file checks and a student's room page reach it through
kvviz.lessons.lecture_index, which the lecture fills."""

import ast
import subprocess
import sys

from kvviz.lessons import files, lecture_index
from kvviz.lessons.lecture import LECTURE

from app_tests import ROOT

LESSON_MODULES = [f"kvviz.lessons.{lesson.key}.lesson" for lesson in LECTURE if (ROOT / "kvviz" / "lessons" /
                                                                                   lesson.key).is_dir()]


def imported_names(path) -> set[str]:
    """Every module a file imports, at its top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def test_nothing_the_lessons_import_imports_the_lecture():
    code = ("import sys; " + "; ".join(f"import {name}" for name in LESSON_MODULES) +
            "; print('\\n'.join(sorted(m for m in sys.modules if m.startswith('kvviz.'))))")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    modules = loaded.stdout.split()
    assert "kvviz.lessons.lecture" not in modules
    assert "kvviz.lessons.files" in modules and "kvviz.lessons.room_student" in modules  # the two that name lessons
    below = [ROOT / (name.replace(".", "/") + ".py") for name in modules]
    reaching = [path.relative_to(ROOT).as_posix() for path in below if path.is_file()
                and "kvviz.lessons.lecture" in imported_names(path)]
    assert not reaching, f"import the lecture from below it: {reaching}"


def test_the_lecture_serves_its_lessons_to_the_parts_below_it():
    assert lecture_index.by_key("paged_batching").title == "Paged cache and batching"
    assert lecture_index.by_key("no_such_lesson") is None
    payload = b'{"format": "kvviz-lesson/3", "lesson": "paged_batching"}'
    try:
        files.read_lesson_file(payload, "prefill_decode")
    except files.LessonFileError as error:
        assert "Paged cache and batching" in str(error)  # a file of another lesson names that lesson
    else:
        raise AssertionError("a Paged file was read as a Prefill and decode one")
