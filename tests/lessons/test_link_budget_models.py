"""A link's estimate (kvviz.lessons.budget) on every built-in model: an engine step's cost outside the
FLOPs grows with the model's layers and their kind, so a link to a late step stays within the budget."""

import pytest
import torch

from kvviz.engine.config import EngineConfig
from kvviz.lessons.batch_generation.logic import BatchSettings, batch_work
from kvviz.lessons.budget import ModelCost, click_seconds
from kvviz.lessons.prefill_decode.logic import furthest_step, lesson_work
from kvviz.models import load_model
from kvviz.workloads import synthetic_workload

CPU = torch.device("cpu")
MODELS = ("bundled", "tiny-gemma3", "tiny-mla")
# measured against these estimates on the 2-core AMD EPYC, quiet (2026-12-06): a 250-token prompt to step 100
# ran 0.72-0.89 of its estimate on each (docs/benchmarks.md); tests here assert how the estimate behaves


@pytest.fixture(scope="module")
def models():
    return {name: load_model(name) for name in MODELS}


@pytest.mark.parametrize("name", MODELS)
def test_a_link_stops_at_the_last_step_its_estimate_fits(models, name, monkeypatch):
    lm = models[name]
    monkeypatch.setenv("KVVIZ_CLICK_SECONDS", f"{lesson_work(lm, 250, 100).seconds(CPU) * 1.0001}")
    assert furthest_step(lm, 250, 255, CPU) == 100
    assert lesson_work(lm, 250, 101).seconds(CPU) > click_seconds()


def test_a_deeper_models_link_stops_sooner_on_the_same_budget(models, monkeypatch):
    monkeypatch.setenv("KVVIZ_CLICK_SECONDS", f"{lesson_work(models['bundled'], 250, 100).seconds(CPU)}")
    reached = {name: furthest_step(lm, 250, 255, CPU) for name, lm in models.items()}
    assert reached["bundled"] == 100 and 0 <= reached["tiny-mla"] < 100 and 0 <= reached["tiny-gemma3"] < 100


def test_the_step_cost_grows_with_the_layers_and_their_kind(models):
    scale = {name: ModelCost.of(lm.model).step_scale for name, lm in models.items()}
    assert scale["bundled"] == 1.0
    assert scale["tiny-mla"] > scale["tiny-gemma3"] > scale["bundled"]  # 4 MLA layers cost more than 6 plain ones
    at = {name: lesson_work(lm, 250, 130).seconds(CPU) for name, lm in models.items()}
    assert at["tiny-mla"] > at["bundled"] and at["tiny-gemma3"] > at["bundled"]


def test_a_batchs_steps_cost_more_on_a_model_whose_steps_do(models):
    settings = BatchSettings(EngineConfig(block_size=16, num_blocks=800))
    works = {name: batch_work(lm, synthetic_workload(lm.tokenizer, 4096, 8, (50, 50), (50, 50), 0, 0), settings)
             for name, lm in models.items()}
    assert works["bundled"].step_scale == 1.0
    assert works["tiny-mla"].step_scale == ModelCost.of(models["tiny-mla"].model).step_scale > 1.0
