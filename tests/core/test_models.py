"""load_model: the bundled model, folders, the local hub cache, custom shapes, and refusals."""

import pytest
import torch

from kvviz import CustomShape, ModelLoadError, load_model


def test_bundled_model_loads_with_its_tokenizer(bundled):
    info = bundled.describe()
    assert bundled.source == "bundled" and bundled.device.type in ("cpu", "cuda")
    assert bundled.dtype == (torch.float32 if bundled.device.type == "cpu" else torch.bfloat16)
    assert info["layers"] == 6 and info["heads"] == 8 and info["kv_heads"] == 2
    assert 3e6 <= info["parameters"] <= 10e6 and bundled.max_context >= 512
    ids = bundled.tokenizer("ROMEO:")["input_ids"]
    assert bundled.tokenizer.decode(ids) == "ROMEO:"


def test_dtype_can_be_overridden():
    lm = load_model("bundled", dtype="bfloat16")
    assert lm.dtype == torch.bfloat16 and next(lm.model.parameters()).dtype == torch.bfloat16


def test_folder_round_trip(tmp_path, bundled):
    bundled.model.save_pretrained(tmp_path)
    bundled.tokenizer.save_pretrained(tmp_path)
    lm = load_model(str(tmp_path))
    assert lm.source == "folder" and lm.tokenizer is not None
    ids = torch.tensor([bundled.tokenizer("JULIET:")["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(lm.model(ids).logits, bundled.model(ids).logits, atol=1e-5)


def test_custom_shape_builds_random_weights_with_the_bundled_tokenizer():
    shape = CustomShape(num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=1)
    lm = load_model(shape=shape)
    assert lm.source == "custom" and lm.tokenizer is not None
    assert lm.model.config.num_key_value_heads == 1
    assert sum(p.numel() for p in lm.model.parameters()) == shape.num_params(len(lm.tokenizer))


@pytest.mark.parametrize("shape, message", [
    (CustomShape(hidden_size=250, num_heads=8, num_kv_heads=2), "does not divide"),
    (CustomShape(hidden_size=256, num_heads=8, num_kv_heads=3), "KV heads evenly"),
    (CustomShape(num_layers=0), "must be positive"),
    (CustomShape(num_layers=400, hidden_size=16384, num_heads=128, num_kv_heads=8), "GiB"),
])
def test_bad_shapes_are_refused_before_allocating(shape, message):
    with pytest.raises(ModelLoadError, match=message):
        load_model(shape=shape)


def test_uncached_hub_id_says_so(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="not in the local Hugging Face cache"):
        load_model("kvviz-tests/no-such-model")


def test_missing_folder_and_encoder_only_models_are_refused(tmp_path):
    with pytest.raises(ModelLoadError, match="no folder"):
        load_model("./no/such/folder")
    from transformers import BertConfig

    BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
               intermediate_size=64).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="not a causal"):
        load_model(str(tmp_path))


def test_unknown_dtype_is_refused():
    with pytest.raises(ModelLoadError, match="Unknown dtype"):
        load_model("bundled", dtype="float8")
