"""Rooms in Redis (KVVIZ_ROOMS_URL=redis://HOST:PORT[/db]): every app process serving a class sees them.

A room's keys, all under its code (a student's input names no other key: a code is checked to be
CODE_LENGTH of CODE_LETTERS and a seat a token before either reaches Redis):

    kvviz:room:CODE            hash: page, teacher, step, progress, payload, questions, version, lesson_version, ...
    kvviz:room:CODE:seats      sorted set: seat -> last seen
    kvviz:room:CODE:answers    hash: [question id, seat] -> the student's number
    kvviz:room:CODE:lesson     the teacher's lesson as its lesson file (kvviz-lesson/4)
    kvviz:room:CODE:changed    the pub/sub channel each change is told on

each expiring after KVVIZ_ROOM_IDLE_S without the teacher's page. Counts that bound the server sit
in sorted sets that hold a digest of each code, never the code (no command lists codes):
kvviz:rooms (every open room) and kvviz:client:DIGEST (the rooms one address opened); wrong codes
count in kvviz:guesses:KIND:DIGEST (their times) for GUESS_WINDOW_S. Lua scripts count and add in one step, so the
bounds hold across processes.

The teacher's lesson cannot cross processes as an object: the teacher's process writes its file
when the lesson is new or has grown, and a follower's process rebuilds a replay from it, once per
(code, lesson_version). One thread per process listens on kvviz:room:*:changed and calls the store's
on_change, which wakes the followers here (kvviz.ui.rooms gives it kvviz.ui.room_wake.changed). A server
that does not answer (1 s timeouts) makes every call answer "no room" for RETRY_S seconds, and `down()`
gives the pages their one sentence.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from kvviz.rooms.codec import MAX_FIELD_CHARS, RoomDataError, add_answers, answer_key, decode_payload, \
    decode_questions, room_number, room_text
from kvviz.rooms.types import CODE_LENGTH, CODE_LETTERS, GUESS_WINDOW_S, MAX_ANSWERS, MAX_QUESTIONS, LessonFiles, \
    Room, RoomQuestion, lesson_token, setting, valid_seat

log = logging.getLogger(__name__)
TIMEOUT_S = 1.0  # connect and read, tried twice: a page waits at most twice this for a server that went away;
# one late answer on a busy class server (a second past this) is not taken for a server gone
RETRY_S = 3.0  # after a failed call, calls answer "no room" at once for this long

OPEN = """
local now, idle = tonumber(ARGV[1]), tonumber(ARGV[2])
if redis.call('EXISTS', KEYS[3]) == 1 then return {'taken', 0} end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - idle)
local open = redis.call('ZCARD', KEYS[1])
if open >= tonumber(ARGV[3]) then return {'KVVIZ_MAX_ROOMS', open} end
if ARGV[6] == '1' then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - idle)
  local mine = redis.call('ZCARD', KEYS[2])
  if mine >= tonumber(ARGV[4]) then return {'KVVIZ_ROOMS_PER_CLIENT', mine} end
  redis.call('ZADD', KEYS[2], now, ARGV[5])
  redis.call('EXPIRE', KEYS[2], idle)
end
redis.call('ZADD', KEYS[1], now, ARGV[5])
redis.call('HSET', KEYS[3], unpack(ARGV, 7))
redis.call('EXPIRE', KEYS[3], idle)
return {'ok', 0}
"""
SIT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local now = tonumber(ARGV[1])
if not redis.call('ZSCORE', KEYS[2], ARGV[4]) then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (now - tonumber(ARGV[2])))
  if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then return 0 end
end
redis.call('ZADD', KEYS[2], now, ARGV[4])
local ttl = redis.call('TTL', KEYS[1])
if ttl > 0 then redis.call('EXPIRE', KEYS[2], ttl) end
return 1
"""
PUBLISH = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local moved = 0
if redis.call('HGET', KEYS[1], 'step') ~= ARGV[3] or redis.call('HGET', KEYS[1], 'progress') ~= ARGV[4] then
  moved = 1
  redis.call('HINCRBY', KEYS[1], 'version', 1)
end
redis.call('HSET', KEYS[1], 'step', ARGV[3], 'progress', ARGV[4], 'payload', ARGV[5], 'touched', ARGV[1])
for i = 1, 4 do redis.call('EXPIRE', KEYS[i], ARGV[2]) end
redis.call('ZADD', KEYS[5], 'XX', ARGV[1], ARGV[6])
redis.call('ZADD', KEYS[6], 'XX', ARGV[1], ARGV[6])
return moved
"""
GUESS = """
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (tonumber(ARGV[1]) - tonumber(ARGV[2])))
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2])) + 1)
return redis.call('ZCARD', KEYS[1])
"""  # a key's wrong codes: their times (the caller's clock), those older than the window dropped


def room_key(code: str, part: str = "") -> str:
    return f"kvviz:room:{code}" + (f":{part}" if part else "")


def digest(text: str) -> str:
    """A name kept in a shared count without the name itself (a code, an address)."""
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def guess_key(kind: str, name: str) -> str:
    """The sorted set of one session's or address's wrong codes (by the time each was tried)."""
    return f"kvviz:guesses:{kind}:{digest(name)}"


def heard(message) -> tuple[str, bool, str] | None:
    """A change message from Redis as (room code, whether the whole page changed, the process that told), or None
    for anything else: a channel that names no room, data that is not JSON kvviz wrote, or not an object."""
    channel, data = message.get("channel"), message.get("data")
    if isinstance(channel, bytes):  # the listener reads bytes: no message can fail in redis-py's own decoding
        channel = channel.decode("utf-8", "replace")
    parts = channel.split(":") if isinstance(channel, str) else []
    if len(parts) != 4 or not valid_code(parts[2]) or not isinstance(data, (str, bytes)) or len(data) > 1000:
        return None
    try:
        news = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(news, dict) or not isinstance(news.get("by", ""), str):
        return None
    return parts[2], news.get("full") is True, news.get("by", "")


def valid_code(code: str) -> bool:
    return len(code) == CODE_LENGTH and all(ch in CODE_LETTERS for ch in code)


@dataclass
class Mine:
    """A room whose teacher's session is on this process."""

    teacher: str
    teacher_runtime: str | None
    page: str
    lesson: object
    shared: tuple = ()  # (id of the lesson, records, progress) as its file was last written


def answering(default):
    """A Redis call that answers `default` while the server does not answer (and starts RETRY_S then)."""
    def wrap(method):
        def call(self, *args):
            if time.time() < self.quiet_until:
                return default
            try:
                result = method(self, *args)
            except redis.ResponseError as error:  # the server answered: a key of the wrong type (WRONGTYPE)
                log.warning("a room's key in Redis is not what kvviz writes (%s)", error)
                return default
            except redis.RedisError:
                self.quiet_until, self.failing = time.time() + RETRY_S, True
                return default
            except RoomDataError as error:  # a room's keys hold what kvviz never wrote: as if it were gone
                log.warning("a room in Redis cannot be read (%s)", error)
                return default
            self.failing = False
            return result
        return call
    return wrap


class RedisStore:
    """The rooms of every app process pointed at one Redis (kvviz.rooms.types.RoomStore's methods)."""

    def __init__(self, url: str, on_change: Callable[[str, bool], object] | None = None,
                 lesson_files: LessonFiles | None = None):
        """on_change(code, full): another process changed room `code` (kvviz.ui.rooms passes
        kvviz.ui.room_wake.changed, which wakes this process's followers of it). lesson_files(page): how a
        page's lesson is written to its file and read back (kvviz.rooms.store passes the lessons' own,
        kvviz.lessons.lecture.lesson_files); without it a room carries no lesson."""
        self.url, self.on_change = url, on_change
        self.lesson_files: LessonFiles = lesson_files or (lambda page: None)
        self.pages_known = lesson_files is not None  # a room on a page it does not know is not the app's
        self.redis = redis.Redis.from_url(url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S,
                                          retry=Retry(NoBackoff(), 1), decode_responses=True)
        self.me = secrets.token_hex(6)  # this process, in the changes it tells
        self.mine: dict[str, Mine] = {}  # code -> its teacher here
        self.replays: dict[str, tuple[int, object]] = {}  # code -> (lesson_version, the replay rebuilt here)
        self.rebuilding: dict[str, threading.Lock] = {}  # code -> held while one session rebuilds its replay
        self.lost: dict[str, str] = {}  # teacher -> why their room closed without them: it vanished, or outgrew a room
        self.lock = threading.Lock()
        self.quiet_until, self.failing = 0.0, False
        self.scripts = {name: self.redis.register_script(text)
                        for name, text in (("open", OPEN), ("sit", SIT), ("publish", PUBLISH), ("guess", GUESS))}
        threading.Thread(target=self.listen, name="kvviz-rooms-listener", daemon=True).start()

    def down(self) -> str | None:
        if self.failing and time.time() >= self.quiet_until:
            self.ping()  # a page that makes no other call learns here that the server is back
        if self.failing:
            where = self.url.split("@")[-1]  # no password in a sentence
            where = where if "://" in where else "redis://" + where
            return f"The class room server at {where} does not answer; the lesson goes on without a room."
        return None

    @answering(None)
    def ping(self) -> None:
        self.redis.ping()

    # ---- changes ---------------------------------------------------------------------------------
    def tell(self, code: str, full: bool) -> None:
        self.redis.publish(room_key(code, "changed"), json.dumps({"by": self.me, "full": full}))

    def listen(self) -> None:
        """This process's one subscriber: another process's change wakes the followers here. Whatever a message
        holds, the listener goes on (one PUBLISH of `5` once stopped it in every app process for good); when the
        server goes away its subscription is closed before a new one is made (each retry once leaked one). It reads
        bytes, which heard() decodes: with redis-py decoding them, a message that is no UTF-8 raised there and stopped
        the listener."""
        undecoded = redis.Redis.from_url(self.url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S,
                                         retry=Retry(NoBackoff(), 1))
        while True:
            pubsub = None
            try:
                pubsub = undecoded.pubsub(ignore_subscribe_messages=True)
                pubsub.psubscribe(room_key("*", "changed"))
                while True:
                    message = pubsub.get_message(timeout=1.0)
                    change = heard(message) if message is not None else None
                    if change is None or change[2] == self.me or self.on_change is None:
                        continue
                    try:
                        self.on_change(change[0], change[1])
                    except Exception:  # a follower's wake-up that fails must not stop the others'
                        log.exception("waking room %s's followers failed", change[0])
            except (redis.RedisError, OSError):
                time.sleep(1.0)  # the server went away: try again
            finally:
                if pubsub is not None:
                    with contextlib.suppress(redis.RedisError, OSError):
                        pubsub.close()

    # ---- rooms -------------------------------------------------------------------------------------
    @answering(("down", 0))
    def add(self, room: Room, max_rooms: int, per_client: int) -> tuple[str, int] | None:
        idle = setting("KVVIZ_ROOM_IDLE_S")
        client = digest(room.client) if room.client else ""
        fields = {"page": room.page, "teacher": room.teacher, "client": client, "model": room.model, "step": 0,
                  "progress": 0,
                  "payload": "null", "questions": "[]", "opened": room.opened, "touched": room.touched,
                  "version": 0, "lesson_version": 0}
        flat = [str(item) for pair in fields.items() for item in pair]
        answer, count = self.scripts["open"](
            keys=["kvviz:rooms", f"kvviz:client:{client}", room_key(room.code)],
            args=[room.touched, idle, max_rooms, per_client, digest(room.code), int(bool(client)), *flat])
        if answer != "ok":
            return answer, int(count)
        with self.lock:
            self.mine[room.code] = Mine(room.teacher, room.teacher_runtime, room.page, room.lesson)
        try:
            self.share(room.code, room.lesson, 0, new=True)
        except ValueError:  # a lesson past what a room carries (its sentence goes to the teacher): no ghost room
            self.remove(room)
            raise
        return None

    @answering(None)
    def get(self, code: str) -> Room | None:
        if not valid_code(code):
            return None
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(room_key(code))
            pipe.zrange(room_key(code, "seats"), 0, -1, withscores=True)
            pipe.hgetall(room_key(code, "answers"))
            fields, seats, answers = pipe.execute()
        if not fields:
            with self.lock:
                mine = self.mine.pop(code, None)
                self.replays.pop(code, None)
                self.rebuilding.pop(code, None)
                if mine is not None:  # not closed here: the server restarted empty, or someone deleted it
                    self.lost[mine.teacher] = (f"Room {code} is gone from the class room server (it restarted "
                                               "without its data, or the room was deleted there); open a new room "
                                               "and give the class its new link.")
            return None
        try:
            return self.decode(code, fields, seats, answers)
        except RoomDataError as error:  # not what kvviz writes: the room is gone for this page, never a traceback
            log.warning("room %s in Redis cannot be read (%s); treated as closed", code, error)
            mine = self.mine.get(code)
            if mine is not None:  # the teacher's process closes it, so that no count or follower waits on it
                self._close(code)
                with self.lock:
                    self.lost[mine.teacher] = (f"Room {code} closed: its data on the class room server was changed "
                                               f"there ({error}), so its students could not follow it; open a new "
                                               "room and give the class its new link.")
            return None

    def decode(self, code: str, fields: dict, seats: list, answers: dict) -> Room:
        """A Room from its Redis keys, every field checked (kvviz.rooms.codec); raises RoomDataError."""
        questions = decode_questions(fields.get("questions"))
        add_answers(questions, answers)
        page = room_text(fields, "page")
        if self.pages_known and self.lesson_files(page) is None:  # no lesson of the app follows that page
            raise RoomDataError("the room's page has no lesson a room can follow")
        mine = self.mine.get(code)
        room = Room(code, room_text(fields, "teacher"), mine.teacher_runtime if mine else None, page,
                    self.lesson(code, page, room_number(fields, "lesson_version"), fields.get("lesson_token")),
                    step=room_number(fields, "step"), progress=room_number(fields, "progress"),
                    opened=room_number(fields, "opened", float), touched=room_number(fields, "touched", float),
                    students={seat: seen for seat, seen in seats if valid_seat(seat)}, questions=questions,
                    version=room_number(fields, "version"), client=fields.get("client") or None,
                    model=fields.get("model") or "")
        room.payload = decode_payload(fields.get("payload"))  # what the teacher's step shows, when the page gives it
        return room

    def lesson(self, code: str, page: str, version: int, token: str | None = None):
        """The teacher's lesson object on the teacher's process; elsewhere a replay of its file, rebuilt once
        per version per process, named as the teacher's lesson (`token`), so that its followers' payloads fit it.
        Each teacher's step makes a new version, and every follower on this process wakes to it at once: one
        of them rebuilds the replay while the others wait for it (60 followers each reading the whole file
        again cost 55-128 ms of CPU each per step, and hundreds of MiB, issue 62)."""
        mine = self.mine.get(code)
        if mine is not None:
            return mine.lesson
        cached = self.replays.get(code)
        if cached is not None and cached[0] >= version:
            return cached[1]
        with self.lock:
            rebuilding = self.rebuilding.setdefault(code, threading.Lock())
        with rebuilding:
            cached = self.replays.get(code)  # another follower may have rebuilt it while this one waited
            if cached is not None and cached[0] >= version:
                return cached[1]
            text, read = self.redis.get(room_key(code, "lesson")), (self.lesson_files(page) or (None, None))[1]
            if text is None or read is None:
                return None
            try:
                replay = read(text)
            except ValueError:  # a file kvviz will not replay (LessonFileError): no lesson to follow
                return None
            replay.room_token = token
            with self.lock:
                self.replays[code] = (version, replay)
            return replay

    @answering(None)
    def remove(self, room: Room) -> None:
        self._close(room.code)

    def _close(self, code: str) -> None:
        """The room's keys gone from Redis, its count with them, its followers woken to find it closed."""
        fields = self.redis.hmget(room_key(code), "client")
        with self.redis.pipeline() as pipe:
            pipe.delete(*(room_key(code, part) for part in ("", "seats", "answers", "lesson")))
            pipe.zrem("kvviz:rooms", digest(code))
            if fields[0]:
                pipe.zrem(f"kvviz:client:{fields[0]}", digest(code))
            pipe.publish(room_key(code, "changed"), json.dumps({"by": self.me, "full": True}))
            pipe.execute()
        with self.lock:
            self.mine.pop(code, None)

    def lost_room(self, teacher: str) -> str | None:
        """Why this teacher's room closed without the teacher closing it (once), else None."""
        with self.lock:
            return self.lost.pop(teacher, None)

    @answering([])
    def codes(self) -> list[str]:
        """The codes of the rooms this process's teachers opened (the server keeps only digests of all)."""
        return [code for code in list(self.mine) if self.redis.exists(room_key(code))]

    def teachers(self, teacher: str) -> list[Room]:
        codes = [code for code, mine in list(self.mine.items()) if mine.teacher == teacher]
        return [room for room in map(self.get, codes) if room is not None]

    def sweep(self, now: float, idle: float, gone) -> None:
        """The rooms of this process's teachers that ended; idle rooms expire in Redis on their own."""
        for code, mine in list(self.mine.items()):
            room = Room(code, mine.teacher, mine.teacher_runtime, mine.page, mine.lesson)
            if gone(room):
                self.remove(room)

    # ---- seats -------------------------------------------------------------------------------------
    @answering(False)
    def sit(self, room: Room, seat: str, now: float, most: int) -> bool:
        if not valid_seat(seat):
            return False
        held = self.scripts["sit"](keys=[room_key(room.code), room_key(room.code, "seats")],
                                   args=[now, setting("KVVIZ_SEAT_IDLE_S"), most, seat])
        if held == 1:
            room.students[seat] = now
        return held == 1

    @answering(None)
    def leave(self, room: Room, seat: str) -> None:
        if valid_seat(seat):
            self.redis.zrem(room_key(room.code, "seats"), seat)

    @answering(0)
    def seats(self, room: Room, now: float) -> int:
        key = room_key(room.code, "seats")
        with self.redis.pipeline() as pipe:
            pipe.zremrangebyscore(key, "-inf", f"({now - setting('KVVIZ_SEAT_IDLE_S')}")
            pipe.zcard(key)
            return pipe.execute()[1]

    # ---- the teacher's page ------------------------------------------------------------------------
    @answering(False)
    def publish(self, room: Room, step: int, progress: int, now: float) -> bool:
        """The teacher's step and the payload its followers draw; a lesson grown past what a room carries (or a
        payload past a field's MAX_FIELD_CHARS, which no follower would read) closes the room, and the teacher's
        next look at it says why (lost_room), rather than leave a room its students see as closed."""
        payload = json.dumps(getattr(room, "payload", None))
        try:
            if len(payload) > MAX_FIELD_CHARS:
                raise ValueError(f"one step of this lesson is {len(payload) / 2**20:,.1f} MiB to send, more than "
                                 f"the {MAX_FIELD_CHARS / 2**20:,.1f} MiB a room's step carries; a room holds a "
                                 "shorter lesson (fewer tokens, or a smaller model).")
            self.share(room.code, self.mine[room.code].lesson if room.code in self.mine else None, progress)
        except ValueError as error:
            teacher = self.mine[room.code].teacher if room.code in self.mine else room.teacher
            self.remove(room)
            with self.lock:
                self.lost[teacher] = f"Room {room.code} closed: {str(error)[0].lower()}{str(error)[1:]}"
            return False
        client = self.redis.hget(room_key(room.code), "client") or "-"
        moved = self.scripts["publish"](
            keys=[room_key(room.code), *(room_key(room.code, part) for part in ("seats", "answers", "lesson")),
                  "kvviz:rooms", f"kvviz:client:{client}"],
            args=[now, setting("KVVIZ_ROOM_IDLE_S"), step, progress, payload, digest(room.code)])
        room.touched, room.step, room.progress = now, step, progress
        if moved == 1:
            room.version += 1
            self.tell(room.code, full=False)
        return moved == 1

    def share(self, code: str, lesson, progress: int, new: bool = False) -> bool:
        """Write the lesson's file when it is new to the room or has grown since; True when written."""
        mine = self.mine.get(code)
        export = (self.lesson_files(mine.page) or (None,))[0] if mine else None
        records = getattr(lesson, "records", None)
        if mine is None or export is None or not records:
            return False
        shape = (id(lesson), len(records), progress)
        if shape == mine.shared and not new:
            return False
        text = export(lesson)
        with self.redis.pipeline() as pipe:
            pipe.set(room_key(code, "lesson"), text, ex=setting("KVVIZ_ROOM_IDLE_S"))
            pipe.hset(room_key(code), "lesson_token", lesson_token(lesson))
            pipe.hincrby(room_key(code), "lesson_version", 1)
            pipe.hincrby(room_key(code), "version", 1)
            pipe.execute()
        mine.shared = shape
        if new:  # a lesson that grew comes with its step, which publish tells (only the stage redraws)
            self.tell(code, full=True)
        return True

    @answering(False)
    def show_lesson(self, room: Room, lesson) -> bool:
        mine = self.mine.get(room.code)
        if mine is None or mine.lesson is lesson:
            return False
        mine.lesson, mine.shared, room.lesson, room.questions = lesson, (), lesson, []
        with self.redis.pipeline() as pipe:
            pipe.hset(room_key(room.code), "questions", "[]")
            pipe.delete(room_key(room.code, "answers"))
            pipe.execute()
        self.share(room.code, lesson, room.progress, new=True)
        return True

    def change_questions(self, room: Room, change) -> str:
        """`change(questions)` on the room's questions, read and written in one transaction."""
        def run(pipe):
            if not pipe.exists(room_key(room.code)):  # closed meanwhile: nothing is written for it
                return "gone"
            questions = decode_questions(pipe.hget(room_key(room.code), "questions") or "[]")
            outcome = change(questions)
            if outcome in ("asked", "revealed"):
                pipe.multi()
                pipe.hset(room_key(room.code), "questions", json.dumps(
                    [{k: v for k, v in asdict(q).items() if k != "answers"} for q in questions]))
                pipe.hincrby(room_key(room.code), "version", 1)
            return outcome
        outcome = self.redis.transaction(run, room_key(room.code), value_from_callable=True)
        if outcome in ("asked", "revealed"):
            room.version += 1
            self.tell(room.code, full=True)
        return outcome

    @answering("known")
    def ask(self, room: Room, question: RoomQuestion) -> str:
        def add(questions):
            if any(q.id == question.id for q in questions):
                return "known"
            if len(questions) >= MAX_QUESTIONS:
                return "full"
            questions.append(question)
            return "asked"
        return self.change_questions(room, add)

    @answering(False)
    def reveal(self, room: Room, question_id: str, answer: float, step: int | None) -> bool:
        def tell_answer(questions):
            question = next((q for q in questions if q.id == question_id), None)
            if question is None or question.revealed:
                return "kept"
            question.answer = float(answer)
            question.target = question.target if step is None else step
            return "revealed"
        return self.change_questions(room, tell_answer) == "revealed"

    @answering("gone")
    def answer(self, room: Room, question_id: str, value: float, seat: str) -> str | None:
        if not valid_seat(seat):
            return "gone"
        def keep(pipe):
            questions = decode_questions(pipe.hget(room_key(room.code), "questions") or "[]")
            question = next((q for q in questions if q.id == question_id), None)
            if question is None:
                return "gone"
            if question.revealed:
                return "revealed"
            field = json.dumps([question_id, seat])
            if not pipe.hexists(room_key(room.code, "answers"), field) and sum(
                    (answer_key(key) or ("",))[0] == question_id
                    for key in pipe.hkeys(room_key(room.code, "answers"))) >= MAX_ANSWERS:
                return "full"
            pipe.multi()
            pipe.hset(room_key(room.code, "answers"), field, value)
            return None
        return self.redis.transaction(keep, room_key(room.code), value_from_callable=True)

    @answering([])
    def questions(self, room: Room) -> list[RoomQuestion]:
        fresh = self.get(room.code)
        return fresh.questions if fresh is not None else []

    # ---- wrong codes -------------------------------------------------------------------------------
    @answering(False)
    def guessed_too_often(self, keys: list[tuple[str, str]], limits: dict, now: float) -> bool:
        if not keys:
            return False
        with self.redis.pipeline(transaction=False) as pipe:
            for kind, name in keys:  # the wrong codes within the window before `now`, as the memory store counts
                pipe.zcount(guess_key(kind, name), f"({now - GUESS_WINDOW_S}", "+inf")
            counts = pipe.execute()
        return any(count >= limits[kind] for (kind, _), count in zip(keys, counts))

    @answering(None)
    def wrong_guess(self, keys: list[tuple[str, str]], now: float) -> None:
        for kind, name in keys:
            self.scripts["guess"](keys=[guess_key(kind, name)], args=[now, GUESS_WINDOW_S, secrets.token_hex(6)])
