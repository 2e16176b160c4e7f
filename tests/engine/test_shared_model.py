"""The model is shared: the engine's faster layers must leave everyone else's forward passes as
plain transformers runs them, even at the same moment in another thread."""

import threading

import torch

from kvviz import Engine, SamplingParams

from tiny_models import tiny_model


def test_model_generate_beside_the_engine_is_unchanged():
    model = tiny_model("qwen3")
    prompt = torch.tensor([[5, 9, 2, 7]])
    before = model.generate(prompt, max_new_tokens=6, do_sample=False)
    engine = Engine(model)
    outs = engine.generate([prompt[0].tolist()], SamplingParams(max_tokens=6, ignore_eos=True))
    after = model.generate(prompt, max_new_tokens=6, do_sample=False)
    assert torch.equal(before, after)
    assert outs[0].token_ids == before[0, 4:].tolist()


def test_plain_transformers_and_the_engine_at_once_in_threads_each_get_what_they_get_alone():
    model = tiny_model("llama")
    prompts = [[5, 9, 2, 7], [3, 1, 4, 1, 5, 9, 2, 6]]
    params = SamplingParams(max_tokens=24, ignore_eos=True)
    inputs = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6] * 4])

    def plain_logits():
        with torch.inference_mode():
            return model(inputs).logits  # a lesson's no-cache twin, or another session's model.generate

    def engine_tokens():
        return [o.token_ids for o in Engine(model, num_blocks=32).generate(prompts, params)]

    untouched = plain_logits()  # before any engine installed its layers
    alone_engine = engine_tokens()  # installs the packed layers into the shared model
    alone_plain = plain_logits()
    assert torch.equal(alone_plain, untouched) and "forward" in vars(model.lm_head)
    results = {"plain": [], "engine": []}

    def repeat(name, run, times):
        for _ in range(times):
            results[name].append(run())

    threads = [threading.Thread(target=repeat, args=("plain", plain_logits, 12)),
               threading.Thread(target=repeat, args=("engine", engine_tokens, 3))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results["plain"]) == 12 and len(results["engine"]) == 3
    assert all(torch.equal(logits, alone_plain) for logits in results["plain"])  # bit for bit
    assert all(tokens == alone_engine for tokens in results["engine"])


def test_engine_outputs_equal_with_one_thread_and_two():
    model = tiny_model("llama")
    prompts = [[5, 9, 2, 7], [3, 1, 4, 1, 5, 9, 2, 6]]
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = [o.token_ids for o in Engine(model).generate(prompts, params)]
        torch.set_num_threads(2)
        two = [o.token_ids for o in Engine(model).generate(prompts, params)]
    finally:
        torch.set_num_threads(threads)
    assert one == two
