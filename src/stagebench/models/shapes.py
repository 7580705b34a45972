"""Fixed batch shapes: what makes a torch model's bf16 (or fp16) arithmetic a function of its input (a
bi-encoder's texts, a cross-encoder's pairs: :func:`stagebench.models.encoders.run_fixed`).

At bf16 a matrix product's fp32 sums round to bf16, and which sums round which way follows the kernel and
blocking the batch's shape selects: padded to its batch's longest text, a text's embedding moved by up to
8.9e-4 with its batch mates (issue 66). Here every batch has one of a few shapes: :data:`ROWS` rows (dummy
rows of one token fill a batch that has fewer texts) by a token bucket (:data:`BUCKETS`) chosen from each
text's own length alone, so a text meets the same shape - the same kernels, blocking and reduction order -
alone, in any batch and in any order. Measured on an AMD EPYC (AVX512-BF16; benchmarks/fixed_shape_bf16.py):
alone, batched and shuffled agree exactly (0.0), where padding to the batch's longest moved 8.9e-4; the
padding costs 1.17-1.29x the texts' own tokens (docs/models.md#fixed-shape-bf16).
"""

from __future__ import annotations

from collections.abc import Sequence

#: the token lengths a batch is padded to (the smallest that holds a text; past the last, the model's maximum)
BUCKETS = (16, 32, 48, 64, 96, 128, 160, 192, 256, 384, 512)
#: the rows of every batch, whatever the call's batch size (a text alone is padded to them too)
ROWS = 32


def bucket(length: int, most: int) -> int:
    """The token length a text of ``length`` tokens is padded to (``most``: the model's maximum)."""
    return next((b for b in BUCKETS if b >= length and b <= most), most)


def fixed_batches(lengths: Sequence[int], most: int, rows: int = ROWS) -> list[tuple[int, list[int]]]:
    """The positions of texts of ``lengths`` tokens cut into batches of one shape each: ``(tokens, positions)``,
    at most ``rows`` positions, every one of them of that token bucket (in order within a bucket)."""
    by: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        by.setdefault(bucket(int(n), most), []).append(i)
    return [(b, members[s : s + rows]) for b in sorted(by) for members in [by[b]] for s in range(0, len(members), rows)]


__all__ = ["BUCKETS", "ROWS", "bucket", "fixed_batches"]
