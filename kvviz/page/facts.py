"""What a lesson's web page says around its stage: the model, the prompts, the settings and, at each step,
the answer so far. One function per stepped lesson, each reading a replay of the lesson's file (build.py
makes every page from one), so a page says what the file holds and nothing a model would add.

    describe = FACTS["speculative"]
    facts = describe(replay)    # {"model", "prompts", "settings", "answers"}

Every value is plain text; the page writes it with textContent.
"""

from __future__ import annotations

from kvviz.lessons.prefill_decode.logic import steps_text


def _sampling_words(sampling) -> str:
    if sampling.temperature == 0:
        return "greedy: the most likely token at each step"
    return (f"sampled: temperature {sampling.temperature:g}, top-k {sampling.top_k or 'off'}, "
            f"top-p {sampling.top_p:g}, seed {sampling.seed}")


def prefill_decode(run) -> dict:
    """One request, prefill then decode. Its answer at a step is the text of the tokens sampled by then, less a
    token that ended it (a chat model's end of turn, which the step's sentence names)."""
    info, settings = run.model_info, run.settings
    stops = set(settings.sampling.stop_token_ids or [])
    sampled = [token for record in run.records for _, token in record.sampled]
    texts = run.token_texts[len(run.prompt_token_ids):]
    answers, words = [], []
    for record in run.records:
        for _ in record.sampled:
            position = len(words)
            words.append("" if sampled[position] in stops else texts[position])
        answers.append([{"label": "Answer so far", "text": "".join(words)}])
    return {"model": f"{info['name']} ({info['layers']} layers, {info['heads']} query heads over {info['kv_heads']} "
                     f"KV heads, {info['dtype']})",
            "prompts": [{"label": "Message (the model's chat template wraps it)" if settings.chat else "Prompt",
                         "text": settings.prompt}],
            "settings": [f"{settings.sampling.max_tokens} tokens asked for; {steps_text(len(run.records))}",
                         _sampling_words(settings.sampling), f"blocks of {settings.block_size} tokens"],
            "answers": answers}


def paged_batching(run) -> dict:
    """Several requests into one pool. The answer at a step is each request's output by then."""
    prompts = [{"label": f"R{i + 1}: arrives at step {spec.arrival_step}, up to {spec.max_tokens} tokens",
                "text": spec.prompt} for i, spec in enumerate(run.specs)]
    answers = []
    for step in range(len(run.records)):
        outputs = sorted((run.label(request_id), state, text) for request_id, (state, text)
                         in run.texts_so_far(step).items())
        answers.append([{"label": f"{label} ({state})", "text": text} for label, state, text in outputs])
    return {"model": run.model_name, "prompts": prompts,
            "settings": [f"{len(run.records)} engine steps", f"blocks of {run.block_size} tokens, a pool of "
                         f"{run.num_blocks} blocks", f"prefix caching {'on' if run.enable_prefix_caching else 'off'}"],
            "answers": answers}


def speculative(run) -> dict:
    """One greedy request with prompt-lookup drafts. The answer after a pass is the text it has generated."""
    asked = run.settings
    return {"model": run.model_name, "prompts": [{"label": "Prompt", "text": asked["prompt"]}],
            "settings": [f"{asked['max_tokens']} tokens asked for; {len(run.records)} passes with drafts against "
                         f"{len(run.plain_records)} without", f"up to {asked['num_speculative']} drafts a pass, "
                         "copied from earlier in the text", f"blocks of {asked['block_size']} tokens"],
            "answers": [[{"label": "Answer so far", "text": run.decode(run.output(step))}]
                        for step in range(len(run.records))]}


FACTS = {"prefill_decode": prefill_decode, "paged_batching": paged_batching, "speculative": speculative}
