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
# CPU seconds measured on the 2-core machine (issue 35): a 250-token prompt linked to step 255 ran to the
# furthest step the old estimate allowed
MEASURED = {"bundled": (132, 28.8), "tiny-gemma3": (130, 33.5), "tiny-mla": (141, 38.2)}


@pytest.fixture(scope="module")
def models():
    return {name: load_model(name) for name in MEASURED}


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_the_estimate_is_at_least_the_measured_run(models, name):
    step, seconds = MEASURED[name]
    assert lesson_work(models[name], 250, step).seconds(CPU) >= seconds


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_a_link_stops_where_the_measured_runs_fit_the_budget(models, name):
    step, seconds = MEASURED[name]
    reachable = furthest_step(models[name], 250, 255, CPU)
    assert reachable >= 0
    # the measured run's seconds per step at most, times the reachable steps, within the budget
    assert seconds * (reachable + 1) / (step + 1) <= click_seconds()


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
