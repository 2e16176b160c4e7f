"""Predict, then reveal: a question asked before stepping, answered by the real engine after.

Each question names the step whose record holds the answer. The answer is read from that
record once the lesson gets there, never computed from a formula, so a learner's guess is
checked against what the engine actually did.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvviz.lessons.prefill_decode.logic import PrefillLesson

QUESTION_KINDS = ("bytes_after_five", "blocks_after_next")


@dataclass
class Question:
    kind: str
    asked_at: int  # the step the learner was looking at
    target: int  # the step whose record answers it
    text: str
    unit: str
    guess: float | None = None
    answer: float | None = None

    @property
    def revealed(self) -> bool:
        return self.answer is not None

    @property
    def correct(self) -> bool:
        # bytes within 1% count as right: nobody should have to type every digit
        if self.answer is None or self.guess is None:
            return False
        return abs(self.guess - self.answer) <= 0.01 * max(abs(self.answer), 1)


def refusal(lesson: PrefillLesson, kind: str) -> str | None:
    """Why a question of this kind cannot be asked now (its answer's step would never come), or None."""
    step = len(lesson.visible_records) - 1
    ahead = 5 if kind == "bytes_after_five" else 1
    ended = lesson.replay or lesson.finished  # its last step is known: a chat model's end of turn may come early
    last_step = len(lesson.records) - 1 if ended else lesson.settings.sampling.max_tokens - 1
    if ended and step >= last_step:  # a live lesson and its replay say the same at the end
        return "The lesson has ended, so no step is left to reveal an answer; press Reset or Prefill to ask again."
    if step + ahead >= last_step:  # the final step frees the request's blocks
        return f"The lesson ends before {ahead} more step(s) can run; ask earlier or generate more tokens."
    return None


def ask(lesson: PrefillLesson, kind: str) -> Question:
    """A question about the lesson's near future, from where it stands now (its newest step, named in the text,
    so that a learner looking back at an earlier step reads which step it counts from)."""
    if kind not in QUESTION_KINDS:
        raise ValueError(f"Unknown question {kind!r}; ask one of {', '.join(QUESTION_KINDS)}.")
    why_not = refusal(lesson, kind)
    if why_not:
        raise ValueError(why_not)
    step = len(lesson.visible_records) - 1
    tokens = lesson.num_tokens_at(step)
    if kind == "bytes_after_five":
        return Question(kind, step, step + 5, f"At step {step} the cache holds {tokens} tokens. How many bytes will "
                        "this request's keys and values take after five more decode steps?", "bytes")
    if kind == "blocks_after_next":
        block_size = lesson.settings.block_size
        return Question(kind, step, step + 1, f"Blocks hold {block_size} tokens and at step {step} the cache holds "
                        f"{tokens}. How many blocks will the request hold after the next step?", "blocks")
    raise ValueError(f"Unknown question {kind!r}; ask one of {', '.join(QUESTION_KINDS)}.")


def reveal(question: Question, lesson: PrefillLesson) -> bool:
    """Fill in the answer from the engine's record, if the lesson has reached the target step."""
    records = lesson.visible_records
    if question.revealed or len(records) <= question.target:
        return question.revealed
    record = records[question.target]
    if question.kind == "bytes_after_five":
        question.answer = record.memory.token_bytes
    else:
        question.answer = len(record.requests[0].block_table)
    return True


def verdict(question: Question) -> str:
    """A revealed question with the engine's answer; a question left blank is shown, not judged."""
    answer = f"the engine holds **{question.answer:,.0f} {question.unit}** at step {question.target}"
    if question.guess is None:
        return f"➖ {question.text} No answer was given; {answer} (not scored)."
    mark, word = ("✅", "right") if question.correct else ("❌", "not quite")
    return f"{mark} {question.text} You said **{question.guess:,.0f}**; {answer} ({word})."


def score(questions: list[Question]) -> tuple[int, int]:
    """(right, answered) over the questions revealed so far."""
    answered = [q for q in questions if q.revealed and q.guess is not None]
    return sum(q.correct for q in answered), len(answered)


@dataclass
class BlockQuestion:
    """Paged lesson: which physical block will a request get when it next needs one?"""

    request_id: int
    label: str
    asked_at: int
    guess: int | None = None
    answer: int | None = None
    answered_at: int | None = None

    @property
    def text(self) -> str:
        return (f"{self.label} will need another block. Which physical block id will the pool give it? "
                "(Hint: the free queue hands out the least recently freed block first.)")

    @property
    def revealed(self) -> bool:
        return self.answer is not None

    @property
    def correct(self) -> bool:
        return self.revealed and self.guess == self.answer


def reveal_block(question: BlockQuestion, records) -> bool:
    """The answer is the first block allocated to the request after the question was asked."""
    for record in records[question.asked_at + 1:]:
        for event in record.events:
            if event.kind == "allocate" and event.request_id == question.request_id and event.block_ids:
                question.answer, question.answered_at = event.block_ids[0], record.step
                return True
    return question.revealed
