"""What a room keeps in Redis, read back with checks (kvviz.rooms.redis_store): a key another program wrote,
a server restored from an old dump or a hand-typed HSET must never become a traceback on every page.

    questions = decode_questions(fields["questions"])      # raises RoomDataError
    add_answers(questions, answers_hash)                   # drops entries it cannot read
    room_number(fields, "step", int)                       # raises RoomDataError

A room whose own fields cannot be read is treated as gone (its followers are told the room closed; the
lesson goes on locally); one bad answer is dropped and the others kept.
"""

from __future__ import annotations

import json
import logging
import math

from kvviz.rooms.types import MAX_ANSWER, MAX_ANSWERS, MAX_QUESTIONS, RoomQuestion

log = logging.getLogger(__name__)
MAX_FIELD_CHARS = 1_000_000  # a room's questions or payload, as JSON: 50 questions are a few KB


class RoomDataError(ValueError):
    """A room's data in the store is not what kvviz writes."""


def decode_json(text, what: str):
    if not isinstance(text, str) or len(text) > MAX_FIELD_CHARS:
        raise RoomDataError(f"the room's {what} is not JSON kvviz wrote")
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise RoomDataError(f"the room's {what} is not JSON") from None


def room_number(fields: dict, name: str, kind=int):
    """A numeric field of the room's hash (step, progress, version, times), checked finite."""
    try:
        value = kind(fields[name])
    except (KeyError, TypeError, ValueError):
        raise RoomDataError(f"the room's {name} is missing or not a number") from None
    if not math.isfinite(value):
        raise RoomDataError(f"the room's {name} is not a finite number")
    return value


def room_text(fields: dict, name: str) -> str:
    value = fields.get(name)
    if not isinstance(value, str) or not value:
        raise RoomDataError(f"the room's {name} is missing")
    return value


def decode_question(entry) -> RoomQuestion:
    if not isinstance(entry, dict):
        raise RoomDataError("a question is not an object")
    try:
        question = RoomQuestion(id=entry["id"], text=entry["text"], unit=entry["unit"], target=entry["target"],
                                exact=entry.get("exact", False), answer=entry.get("answer"))
    except (KeyError, TypeError):
        raise RoomDataError("a question lacks its id, text, unit or step") from None
    kinds_ok = (isinstance(question.id, str) and isinstance(question.text, str) and isinstance(question.unit, str)
                and isinstance(question.target, int) and not isinstance(question.target, bool)
                and question.target >= 0 and isinstance(question.exact, bool)
                and (question.answer is None or (isinstance(question.answer, (int, float))
                                                 and math.isfinite(question.answer))))
    if not kinds_ok:
        raise RoomDataError("a question's fields have the wrong types")
    return question


def decode_questions(text) -> list[RoomQuestion]:
    entries = decode_json(text, "questions")
    if not isinstance(entries, list) or len(entries) > MAX_QUESTIONS:
        raise RoomDataError(f"the room's questions are not a list of at most {MAX_QUESTIONS}")
    return [decode_question(entry) for entry in entries]


def answer_key(text) -> tuple[str, str] | None:
    """(question id, seat) from an answers hash's field; None for one kvviz did not write."""
    try:
        key = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        return None
    if isinstance(key, list) and len(key) == 2 and all(isinstance(part, str) for part in key):
        return key[0], key[1]
    return None


def add_answers(questions: list[RoomQuestion], answers: dict) -> None:
    """The answers hash into its questions; an entry that is not kvviz's is dropped (and logged)."""
    by_id = {question.id: question for question in questions}
    dropped = 0
    for text, value in answers.items():
        key = answer_key(text)
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        question = by_id.get(key[0]) if key else None
        if question is None or not 0 <= number < MAX_ANSWER or len(question.answers) >= MAX_ANSWERS:
            dropped += 1
            continue
        question.answers[key[1]] = number
    if dropped:
        log.warning("dropped %d answers in Redis that kvviz did not write", dropped)


PAYLOAD_FIELDS = {"lesson": str, "step": int, "progress": int, "steps_from": int, "sentence": str, "stage": str}


def decode_payload(text) -> dict:
    """The teacher's step as followers draw it (kvviz.lessons.room_student.step_payload): {} before the first, else
    an object with exactly PAYLOAD_FIELDS, each of its type (steps whole numbers from 0); raises RoomDataError."""
    payload = decode_json(text, "payload")
    if payload is None or payload == {}:
        return {}
    if not isinstance(payload, dict) or set(payload) != set(PAYLOAD_FIELDS):
        raise RoomDataError("the room's payload is not the object kvviz writes")
    for name, kind in PAYLOAD_FIELDS.items():
        value = payload[name]
        if not isinstance(value, kind) or isinstance(value, bool) or (kind is int and not 0 <= value < 2**31):
            raise RoomDataError(f"the room's payload field {name} is not what kvviz writes")
    return payload
