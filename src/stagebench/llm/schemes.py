"""Sorting schemes of the comparison families, free of any model: which candidates each call
compares, in which order, and how many calls a query can take - counted before it runs.

* :func:`prp_sliding` - pairwise ranking prompting's sliding passes (Qin et al., 2024): pass
  ``p`` walks from the bottom of the list to position ``p``, comparing neighbours and swapping
  when the lower one wins, so after ``k`` passes the top ``k`` are the best ``k`` in order
  (for a consistent comparator). Exactly :func:`prp_sliding_comparisons` comparisons; each
  is asked in both orders (two calls) to cancel the model's position bias.
* :func:`setwise_heap` - setwise heap sort (Zhuang et al., SIGIR 2024): a heap in which each
  node has ``c - 1`` children, so one call ("which of these c is best?") settles a node and
  its children; ``k`` extractions give the top ``k``. At most :func:`setwise_heap_calls`
  calls (the leftmost, longest sift paths).

Candidates are indices ``0..n-1`` in input order; the result is a permutation of them: the
top ``k`` as the scheme found them, then the rest in their input order. Nothing is lost or
invented whatever the comparator answers, and a comparator with no preference anywhere leaves
the input order (tests/llm/test_families.py property-tests both).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def prp_sliding_comparisons(n: int, k: int) -> int:
    """The comparisons :func:`prp_sliding` makes over ``n`` candidates for the top ``k``."""
    return sum(n - 1 - p for p in range(min(k, n - 1)))


def prp_sliding(n: int, k: int, prefer: Callable[[int, int], int]) -> list[int]:
    """``prefer(a, b)`` > 0: ``a`` beats ``b``; < 0: ``b`` beats ``a``; 0: no preference
    (the two keep their places). Returns the new order of ``range(n)``."""
    order = list(range(n))
    for p in range(min(k, n - 1)):
        for j in range(n - 2, p - 1, -1):
            if prefer(order[j + 1], order[j]) > 0:
                order[j], order[j + 1] = order[j + 1], order[j]
    return order


def _sift_calls(i: int, size: int, d: int) -> int:
    calls = 0
    while d * i + 1 < size:
        calls += 1
        i = d * i + 1
    return calls


def setwise_heap_calls(n: int, k: int, c: int) -> int:
    """The most calls :func:`setwise_heap` can make (each sift down its longest path)."""
    d = c - 1
    build = sum(_sift_calls(i, n, d) for i in range((n - 2) // d + 1)) if n > 1 else 0
    return build + sum(_sift_calls(0, n - 1 - t, d) for t in range(min(k, n) - 1))


def setwise_heap(n: int, k: int, c: int, best_of: Callable[[Sequence[int]], int | None]) -> list[int]:
    """``best_of(group)``: the position in ``group`` (a node, then its children) of the best
    candidate, or None for no preference: then the one earliest in the input order wins, so that
    calls that say nothing (failed, unreadable) leave the input order as it was rather than
    promoting the candidate a heap extraction moved to the root. Returns the new order of ``range(n)``."""
    if c < 2:
        raise ValueError("a set holds at least two candidates")
    d = c - 1
    heap = list(range(n))

    def sift(i: int, size: int) -> None:
        while d * i + 1 < size:
            kids = range(d * i + 1, min(d * i + d + 1, size))
            group = [heap[i], *(heap[x] for x in kids)]
            w = best_of(group)
            if w is None:  # no preference: the earliest in the input
                w = group.index(min(group))
            if w == 0:  # the node is the best of its group
                return
            pos = d * i + w
            heap[i], heap[pos] = heap[pos], heap[i]
            i = pos

    if n > 1:
        for i in reversed(range((n - 2) // d + 1)):
            sift(i, n)
    top: list[int] = []
    size = n
    for _ in range(min(k, n)):
        top.append(heap[0])
        size -= 1
        if size == 0:
            break
        heap[0] = heap[size]
        if len(top) < min(k, n):
            sift(0, size)
    return top + sorted(heap[:size])


__all__ = ["prp_sliding", "prp_sliding_comparisons", "setwise_heap", "setwise_heap_calls"]
