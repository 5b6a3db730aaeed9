"""IVF-Flat in torch, on any device: what a GPU without FAISS's GPU build searches with (stages.mine.budget chooses
it), and what tests run on the CPU.

- Coarse quantiser: spherical k-means (inner product, as FAISS's IVF on unit vectors) on a seeded sample, on the
  device: a block of points against every centroid is one matrix product.
- Lists: the base on the device in the stored dtype (float16 on a GPU when the shards are), sorted by list, with
  each row's id; built from the shards as they come (a piece at a time in transit from the host).
- Search: each query probes its `nprobe` nearest lists. Queries are grouped by their nearest list, and a group is
  scored against the union of its members' lists in one matrix product (float32 accumulation), each query's
  score kept only where the row lies in one of its own probed lists (the same top-k as FAISS's IVF-Flat at that
  nprobe, whatever the grouping), then `top_k`. Scores are exact inner products of the stored vectors, so no
  re-ranking step is needed. Fed queries in list order (`rows_by_list`, as mine's search is), a group is a whole
  list, so the list vectors are read once per group and the product runs at the device's matrix rate.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import numpy as np
import torch

from csts_pipeline.stages.mine.budget import training_rows
from csts_pipeline.stages.mine.knn import SCORE_BYTES, TorchSearch, _scores, running_top_k, top_k

if TYPE_CHECKING:
    from csts_pipeline.pipeline.manifest import MineConfig
    from csts_pipeline.stages.mine.budget import IndexPlan
    from csts_pipeline.stages.mine.vectors import EmbeddingShards

PACK_QUERIES = 64  # small groups (queries from scattered lists) are scored together up to this many queries
KMEANS_ITERATIONS = 10
ASSIGN_ROWS = 1 << 16  # points assigned to centroids per matrix product


class TorchIVF:
    """IVF-Flat with `lists` lists on `device`; `train`, then `add` blocks, then `search` at `nprobe`. Shares the
    `add`/`search` shape of stages.mine.knn's searchers, and tuning's `set_parameter` and `nlist`."""

    def __init__(self, dim: int, lists: int, device: torch.device, dtype: torch.dtype = torch.float32, seed: int = 0):
        self.dim, self.nlist, self.device, self.seed = dim, lists, device, seed
        self.dtype = dtype if device.type == "cuda" else torch.float32  # the CPU computes in float32
        self.nprobe = 1
        self.centroids: torch.Tensor | None = None
        self.pieces: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.base: torch.Tensor | None = None

    @property
    def index(self) -> TorchIVF:
        """The searcher is its own index (what tuning reads `nlist` from)."""
        return self

    def set_parameter(self, name: str, value: int) -> None:
        if name != "nprobe":
            raise ValueError(f"TorchIVF has no parameter {name!r}")
        self.nprobe = max(1, min(int(value), self.nlist))

    def train(self, sample: np.ndarray, iterations: int = KMEANS_ITERATIONS) -> None:
        """Spherical k-means on `sample` (float32 on the device): seeded initial centroids drawn from the sample,
        an empty list re-seeded from a random point."""
        points = torch.from_numpy(np.ascontiguousarray(sample, np.float32)).to(self.device)
        generator = np.random.default_rng(self.seed)
        lists = min(self.nlist, len(points))
        first = torch.from_numpy(np.sort(generator.choice(len(points), lists, replace=False))).to(self.device)
        centroids = points[first].clone()
        for _ in range(iterations):
            assign = self._nearest(points, centroids)
            sums = torch.zeros_like(centroids).index_add_(0, assign, points)
            counts = torch.bincount(assign, minlength=lists)
            empty = torch.nonzero(counts == 0).flatten()
            if len(empty):
                again = generator.choice(len(points), len(empty), replace=False)
                sums[empty] = points[torch.from_numpy(again).to(self.device)]
            centroids = torch.nn.functional.normalize(sums, dim=1)
        self.nlist, self.centroids = lists, centroids

    def _nearest(self, points: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
        """Each point's nearest centroid by inner product, a block of points at a time."""
        parts = [
            (points[lo : lo + ASSIGN_ROWS].float() @ centroids.T).argmax(dim=1)
            for lo in range(0, len(points), ASSIGN_ROWS)
        ]
        return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long, device=self.device)

    def add(self, vectors: np.ndarray) -> None:
        """A block of rows (ids follow on from the rows added before), kept on the device until the first search
        sorts the base by list."""
        if self.centroids is None:
            raise ValueError("add before train")
        if self.base is not None:  # the sorted base holds the earlier rows; mine adds every row before searching
            raise ValueError("add after search")
        # Arrow buffers are read-only, hence the copy of those
        piece = torch.from_numpy(np.require(vectors, requirements="W")).to(self.device, self.dtype)
        self.pieces.append((piece, self._nearest(piece, self.centroids)))

    def _sort(self) -> None:
        """The base sorted by list (stable: rows of a list in the order they were added), its ids, the list
        offsets. Peak device memory: the pieces and the sorted base."""
        if self.base is not None:
            return
        assign = torch.cat([found for _, found in self.pieces])
        order = torch.argsort(assign, stable=True)
        self.ids = order
        destination = torch.empty_like(order)
        destination[order] = torch.arange(len(order), device=self.device)
        base = torch.empty((len(order), self.dim), dtype=self.dtype, device=self.device)
        first = 0
        while self.pieces:
            piece, _ = self.pieces.pop(0)
            base[destination[first : first + len(piece)]] = piece
            first += len(piece)
        counts = torch.bincount(assign, minlength=self.nlist)
        self.offsets = torch.zeros(self.nlist + 1, dtype=torch.long, device=self.device)
        self.offsets[1:] = torch.cumsum(counts, 0)
        self.base = base

    @property
    def ntotal(self) -> int:
        self._sort()
        return len(self.ids)

    def rows_by_list(self) -> np.ndarray:
        """Every row once, grouped by list (the order mine searches its query blocks in)."""
        self._sort()
        return self.ids.cpu().numpy()

    def stored_rows(self) -> contextlib.nullcontext:
        """A reader of base rows by id (`read`), as the re-ranking copy's StoredRows is for compressed indexes."""
        return contextlib.nullcontext(self)

    def read(self, rows: np.ndarray) -> np.ndarray:
        """The stored vectors of rows `rows` (ids), as float32 on the host."""
        self._sort()
        if not hasattr(self, "position"):
            self.position = torch.empty_like(self.ids)
            self.position[self.ids] = torch.arange(len(self.ids), device=self.device)
        at = self.position[torch.from_numpy(np.asarray(rows, np.int64)).to(self.device)]
        return self.base[at].float().cpu().numpy()

    def exact_search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k over the base on its device (the truth tuning measures recall against)."""
        self._sort()
        exact = TorchSearch(self.dim, self.device, self.dtype)
        exact.pieces = [self.base]
        scores, found = exact.search(queries, k)
        return scores, self.ids.cpu().numpy()[found]

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores [B, k] float32, ids [B, k] int64), best first; -inf and -1 where fewer than k rows were probed."""
        self._sort()
        block = torch.from_numpy(np.require(queries, requirements="W")).to(self.device, self.dtype)
        probes = torch.topk(block.float() @ self.centroids.T, self.nprobe, dim=1).indices
        probed = probes.cpu().numpy()
        scores = np.full((len(block), k), -np.inf, np.float32)
        found = np.full((len(block), k), -1, np.int64)
        for rows in query_groups(probed[:, 0], PACK_QUERIES):
            lists = np.unique(probed[rows])
            at = torch.from_numpy(rows).to(self.device)
            values, ids = self._score_group(block[at], probes[at], lists, k)
            scores[rows, : values.shape[1]], found[rows, : ids.shape[1]] = values, ids
        return scores, found

    def _score_group(
        self, queries: torch.Tensor, probes: torch.Tensor, lists: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k of `queries` over the rows of `lists` (sorted), each query's scores masked to its own probes;
        in chunks of candidates when their scores or their gathered vectors would pass SCORE_BYTES."""
        local = torch.from_numpy(lists).to(self.device)
        candidates, owner = list_rows(self.offsets, local)
        member = torch.zeros((len(queries), len(lists)), dtype=torch.bool, device=self.device)
        member.scatter_(1, torch.searchsorted(local, probes), True)
        row_bytes = self.dim * self.base.element_size()  # the gathered candidates stay under SCORE_BYTES too
        chunk = max(k, min(SCORE_BYTES // 4 // max(1, len(queries)), SCORE_BYTES // row_bytes))
        best: tuple[torch.Tensor, torch.Tensor] | None = None
        for lo in range(0, len(candidates), chunk):
            rows = candidates[lo : lo + chunk]
            part = _scores(queries, self.base[rows])
            part.masked_fill_(~member[:, owner[lo : lo + chunk]], -torch.inf)
            values, picked = top_k(part, min(k, len(rows)))
            best = running_top_k(best, (values, rows[picked]), k)
        assert best is not None
        values, rows = best
        ids = torch.where(torch.isfinite(values), self.ids[rows], -1)
        return values.cpu().numpy(), ids.cpu().numpy()


def query_groups(nearest: np.ndarray, pack: int) -> list[np.ndarray]:
    """Query positions grouped by their nearest list; groups smaller than `pack` queries are packed together (in
    list order) up to `pack` queries, so scattered queries do not cost a product each."""
    order = np.argsort(nearest, kind="stable")
    bounds = np.flatnonzero(np.diff(nearest[order])) + 1
    groups = np.split(order, bounds) if len(order) else []
    out: list[np.ndarray] = []
    current: list[np.ndarray] = []
    size = 0
    for group in groups:
        if size and size + len(group) > pack:
            out.append(np.concatenate(current))
            current, size = [], 0
        current.append(group)
        size += len(group)
    if current:
        out.append(np.concatenate(current))
    return out


def list_rows(offsets: torch.Tensor, lists: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows of the sorted base in `lists`, each row's position in `lists`): the lists' ranges [offsets[l],
    offsets[l + 1]), concatenated on the device."""
    starts = offsets[lists]
    sizes = offsets[lists + 1] - starts
    owner = torch.repeat_interleave(torch.arange(len(lists), device=lists.device), sizes)
    first = torch.repeat_interleave(starts - (torch.cumsum(sizes, 0) - sizes), sizes)
    return torch.arange(len(owner), device=lists.device) + first, owner


def build_torch_ivf(plan: IndexPlan, shards: EmbeddingShards, config: MineConfig, device: torch.device) -> TorchIVF:
    """The plan's IVF-Flat on `device`: k-means on the same seeded sample as FAISS's (`training_rows`), then
    filled shard by shard in the stored dtype."""
    rng = np.random.default_rng(config.seed)
    sample = np.sort(rng.choice(len(shards), training_rows("ivf", len(shards), plan.lists), replace=False))
    dtype = torch.float16 if shards.dtype == np.float16 else torch.float32
    ivf = TorchIVF(shards.dim, plan.lists, device, dtype, config.seed)
    ivf.train(shards.rows(sample))
    for vectors in shards.shards(shards.dtype):
        ivf.add(vectors)
    return ivf
