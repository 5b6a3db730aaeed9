"""Which index fits `mine.memory_budget`: the most accurate one whose estimated peak memory fits, as autofaiss
chooses under a memory budget (exact, IVF-Flat, IVF-SQ8, then IVF-PQ with fewer bytes per vector). IVF-PQ uses
FAISS's 4-bit fast-scan codes (FAISS's advice with a re-ranking step): training them took 15 s where 8-bit codes
took 214 s (65,536 x 512-d on 2 cores), and the re-ranking makes up for the coarser codes. They code each vector's
residual from its list's centroid (`PQ{m}x4fsr`), which ranks the candidates better at the same scan cost
(bench/mine/pq_codes.py). OPQ is not used: its rotation's training costs minutes more on 2 cores for a gain that the
re-ranking already gives.

The estimate is the whole process's peak, not only the index: the interpreter with torch, FAISS and Arrow
(measured 562 MiB on import), the O(N) ids and caption index, the k-means training sample, one query block with
its candidate lists and their re-ranking, and the pages of the neighbour-list memory maps a pair block touches.
Compressed indexes search `mine.rerank` x k candidates and re-rank them exactly from the full vectors
(stages.mine.rerank), so their recall is measured after re-ranking, as for every approximate run (stages.mine.ann).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import MineConfig

SCORE_BYTES = 1 << 30  # float32 scores of one query block against one base chunk (stages.mine.knn)

GIB = 1024**3
# python + torch + faiss + pyarrow: 562 MiB on import, but a 200k-image IVF-PQ run peaked 0.46 GiB over the sum of
# the other parts with 640 MiB here (Arrow's pool, FAISS's search buffers): so counted as 1.1 GiB
PROCESS_BYTES = int(1.1 * GIB)
LIST_GROWTH = 1.5  # inverted lists grow by doubling: 1M x 512-d IVF-Flat peaked at 4.17 GiB, 1.43x its codes
CAPTION_BYTES = 5 * 16 + 32  # per image: about five captions (id + owner) and the image-id arrays
READ_ROWS = 1 << 13  # distinct rows a re-ranking read brings in (stages.mine.rerank)
RERANK_PAIRS = 1 << 24  # (query, candidate) pairs re-ranked at once (about 1 GiB): a block in parts of this many
RERANK_PAIR_BYTES = 64  # a (query, candidate) pair of a block's re-ranking: sort keys, order, rows, scores, temporaries
COMPRESSED = ("ivf_sq8", "ivf_pq")
APPROXIMATE = ("ivf", *COMPRESSED, "hnsw")
# FAISS's guideline for millions of vectors: 4 sqrt(N) to 16 sqrt(N) lists; below a million about sqrt(N) as before
MANY_FROM = 1_000_000
MANY_LISTS_PER_ROOT = 4
# from this many lists the coarse quantiser is an HNSW graph (IndexHNSWFlat), so assigning a vector to its lists
# (training, adding and every query's probe) costs a graph walk, not a distance to every list. Below it a batch of
# queries against every centroid is one matrix product, quicker and exact: at 12,649 lists (10M images) 0.086 ms a
# query for nprobe 256 where the graph took 0.116 and found 97% of the lists (bench/mine/coarse_quantizer.py, 2 cores)
HNSW_QUANTIZER_FROM = 32_768
QUANTIZER_M = 32
QUANTIZER_EF_SEARCH = 128
PIECE_ROWS = 1 << 16  # mine.knn=torch joins shards into pieces of this many rows on their way to the device
TRAIN_CAP = 262_144  # training points: 64 a list up to this cap, then 32 a list (FAISS warns below 39; k-means cost)


@dataclass(kw_only=True)
class IndexPlan:
    """The index mine builds, its parameters and why: what goes into the stage record under `search.budget`."""

    kind: str
    lists: int
    pq_m: int | None = None
    candidates: int = 0  # per query, re-ranked exactly; 0: no re-ranking
    estimate: dict[str, int] = field(default_factory=dict)
    reason: str = ""
    backend: str = "faiss"  # who runs an IVF index: faiss (CPU), faiss-gpu, or torch (stages.mine.torch_ivf)
    gpu_estimate: dict[str, int] = field(default_factory=dict)  # device bytes by part, with `total`

    @property
    def quantizer(self) -> str:
        """The coarse quantiser: `flat` (a distance to every list) or `hnsw` (a graph over the lists)."""
        return "hnsw" if self.lists >= HNSW_QUANTIZER_FROM else "flat"

    @property
    def factory(self) -> str:
        """The FAISS index_factory string of an IVF index."""
        codes = {"ivf": "Flat", "ivf_sq8": "SQ8", "ivf_pq": f"PQ{self.pq_m}x4fsr"}[self.kind]
        coarse = f"_HNSW{QUANTIZER_M}" if self.quantizer == "hnsw" else ""
        return f"IVF{self.lists}{coarse},{codes}"

    def record(self, budget_gib: float) -> dict[str, Any]:
        out: dict[str, Any] = {"memory_budget_gib": budget_gib, "chosen": self.kind, "reason": self.reason}
        out["estimated_gib"] = {name: round(value / GIB, 3) for name, value in self.estimate.items()}
        if self.kind in COMPRESSED:
            out |= {"factory": self.factory, "rerank_candidates": self.candidates}
        if self.kind in ("ivf", *COMPRESSED) and self.quantizer == "hnsw":
            out |= {"factory": self.factory, "quantizer": f"HNSW{QUANTIZER_M}"}
        if self.gpu_estimate:
            out |= {"backend": self.backend}
            out["estimated_gpu_gib"] = {name: round(value / GIB, 3) for name, value in self.gpu_estimate.items()}
        return out


def ivf_lists(n_images: int, configured: int | None) -> int:
    """About sqrt(N) inverted lists (FAISS's rule of thumb) below a million images, 4 sqrt(N) from there (FAISS's
    guideline for millions: fewer codes scanned a query, 25,000 at nprobe 32 of 10M rather than 101,000), with at
    least 39 training points each."""
    if configured is not None:
        return max(1, min(configured, n_images // 39 or 1))
    per_root = MANY_LISTS_PER_ROOT if n_images >= MANY_FROM else 1
    return max(1, min(round(per_root * math.sqrt(n_images)), n_images // 39 or 1))


def training_rows(kind: str, n_images: int, lists: int) -> int:
    """Up to 64 points per list (32 a list past TRAIN_CAP points, as k-means costs points x lists), and at least
    16,384 for the product quantiser's codebooks."""
    wanted = 64 * lists if 64 * lists <= TRAIN_CAP else max(TRAIN_CAP, 32 * lists)
    return min(n_images, wanted if kind != "ivf_pq" else max(wanted, 16_384))


def quantizer_bytes(lists: int, dim: int) -> int:
    """The coarse quantiser: the lists' centroids, and an HNSW graph's links (2 M on the base level) over them."""
    links = QUANTIZER_M * 2 * 4 * 1.2 if lists >= HNSW_QUANTIZER_FROM else 0
    return int(lists * (dim * 4 + links))


def pq_splits(dim: int) -> list[int]:
    """Sub-quantisers for IVF-PQ (4 bits each), most first: sub-vectors of 2, 4, 8 or 16 dimensions. (At 50,000
    mixture vectors, nprobe 64, 256 candidates re-ranked: PQ256x4fs recall@64 0.994, PQ128x4fs 0.940.)"""
    return [m for m in (dim // 2, dim // 4, dim // 8, dim // 16) if m >= 2 and m % 2 == 0 and dim % m == 0] or [2]


def index_bytes(
    kind: str, n: int, *, dim: int, lists: int, pq_m: int | None, config: MineConfig, gpu: bool = False
) -> int:
    """The index's own memory in this process: codes, ids and the coarse quantiser. An exact base or an IVF-Flat
    kept on a GPU (`gpu`) costs the host only a piece in transit, as float32 and as the shards' copy (and an
    IVF's row order, 8 bytes a row)."""
    coarse = quantizer_bytes(lists, dim)
    transit = min(n, PIECE_ROWS) * dim * 4 * 2
    if kind == "exact":
        return transit if gpu else n * dim * 4
    if kind == "ivf" and gpu:
        return transit + n * 8 + coarse
    if kind == "hnsw":
        return int(n * (dim * 4 + config.hnsw_m * 2 * 4) * LIST_GROWTH)
    per_vector = {"ivf": dim * 4, "ivf_sq8": dim, "ivf_pq": (pq_m or 0) // 2}[kind] + 8
    return int(n * per_vector * LIST_GROWTH) + coarse


def estimate(
    kind: str, n: int, dim: int, *, lists: int, pq_m: int | None, config: MineConfig, gpu: bool = False
) -> dict[str, int]:
    """Peak bytes of the mine process by part, with `total` (host memory: an exact base on a GPU is not in it)."""
    k, batch = config.k, config.query_batch
    candidates = config.rerank * k if kind in COMPRESSED else 0
    parts = {
        "process": PROCESS_BYTES,
        "index": index_bytes(kind, n, dim=dim, lists=lists, pq_m=pq_m, config=config, gpu=gpu),
        "ids_and_captions": n * CAPTION_BYTES,
        "training_sample": training_rows(kind, n, lists) * dim * 4 if kind in APPROXIMATE else 0,
        "query_block": batch * (dim * 4 + (k + 1 + candidates) * 12 * 2),
        "rerank": min(batch * candidates, RERANK_PAIRS) * RERANK_PAIR_BYTES + READ_ROWS * dim * 4,
        # one pair block looks up its neighbours' lists: at most a page per looked-up row stays mapped
        "neighbour_maps": min(n * k * 8, batch * k * 4096 // 2),
    }
    return parts | {"total": sum(parts.values())}


def base_on_gpu(config: MineConfig, device: str) -> bool:
    """Whether an exact search keeps its base in GPU memory: `mine.knn: torch` on a CUDA device (`run.device`)."""
    if config.knn != "torch" or device == "cpu":
        return False
    if device.startswith("cuda"):
        return True
    import torch  # `auto`: only here, so that planning a FAISS or CPU run does not load torch

    return torch.cuda.is_available()


GPU_SHARE = 0.9  # of a device's memory, the search's budget there unless mine.gpu_memory_budget says otherwise


@dataclass(frozen=True)
class Accelerator:
    """The CUDA device the search may use: the bytes it may take there, and who runs an IVF index on it."""

    gpu_bytes: int
    ivf: str  # faiss-gpu (FAISS's GPU build installed) or torch (stages.mine.torch_ivf)
    itemsize: int = 4  # bytes a vector component as stored (float16 shards: 2), as the device holds it


def gpu_bytes(backend: str, kind: str, *, n: int, dim: int, lists: int, itemsize: int) -> dict[str, int]:
    """Peak device bytes of a search by part, with `total`: the base (exact, or FAISS GPU's IVF-Flat lists with
    their growth; the torch IVF holds its pieces and the list-sorted base at once while sorting), ids and list
    assignments, the centroids, and one block of scores with its mask and top-k temporaries."""
    if kind == "exact":
        parts = {"base": n * dim * itemsize, "scores": SCORE_BYTES}
    elif backend == "faiss-gpu":
        parts = {"lists": int(n * (dim * 4 + 8) * LIST_GROWTH), "scores": SCORE_BYTES}
    else:
        parts = {"base": 2 * n * dim * itemsize, "ids_and_assignments": n * 8 * 4, "scores": 3 * SCORE_BYTES}
        parts["training_sample"] = training_rows("ivf", n, lists) * dim * 4
    parts["centroids"] = lists * dim * 4 if kind != "exact" else 0
    return parts | {"total": sum(parts.values())}


def find_accelerator(config: MineConfig, device: str, itemsize: int = 4) -> Accelerator | None:
    """The CUDA device of `run.device` (`auto`: the first, where there is one), or None on the CPU. Its budget is
    `mine.gpu_memory_budget`, else GPU_SHARE of its memory; an IVF index runs on FAISS's GPU build where it is
    installed and sees the device, else in torch."""
    if device == "cpu":
        return None
    import torch  # only here: planning a CPU run does not load torch

    if not torch.cuda.is_available():
        return None
    number = torch.device(device).index if device.startswith("cuda") else None
    total = torch.cuda.get_device_properties(number or 0).total_memory
    budget = int(config.gpu_memory_budget * GIB) if config.gpu_memory_budget else int(total * GPU_SHARE)
    return Accelerator(budget, "faiss-gpu" if faiss_gpu() else "torch", itemsize)


def faiss_gpu() -> bool:
    """Whether FAISS's GPU build is installed and sees a GPU."""
    try:
        import faiss
    except ImportError:
        return False
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def _candidates(config: MineConfig, n: int, accelerator: Accelerator | None) -> list[tuple[str, str]]:
    """(kind, backend) in the order tried: exact below `exact_below` (auto), an IVF on the device before one on
    the host, then the compressed ones (FAISS, host)."""
    on_device = [("ivf", accelerator.ivf)] if accelerator is not None else []
    if config.index == "auto":
        exact = [("exact", "faiss")] if n < config.exact_below else []
        return exact + on_device + [("ivf", "faiss"), ("ivf_sq8", "faiss"), ("ivf_pq", "faiss")]
    if config.index == "ivf":
        return [*on_device, ("ivf", "faiss")]
    return [(config.index, "faiss")]


def plan_index(
    config: MineConfig, n: int, dim: int, gpu: bool = False, accelerator: Accelerator | None = None
) -> IndexPlan:
    """The index for N vectors of `dim` under the budget: the first of exact (below `exact_below`), IVF-Flat,
    IVF-SQ8 and IVF-PQ (largest code first) whose estimate fits; an explicit `mine.index` is kept as asked, and
    fails with a one-line error when it cannot fit. `gpu` (`base_on_gpu`): an exact base lives on the GPU, so the
    host's budget does not hold it. `accelerator` (`find_accelerator`): an IVF-Flat on that device is tried before
    one on the host, and fits when its device bytes (`gpu_bytes`) fit the device's budget too."""
    budget = config.memory_budget * GIB
    lists = ivf_lists(n, config.ivf_lists)
    tried = []
    for kind, backend in _candidates(config, n, accelerator):
        on_device = backend != "faiss" or (gpu and kind == "exact")
        for pq_m in pq_splits(dim) if kind == "ivf_pq" else [None]:
            parts = estimate(kind, n, dim, lists=lists, pq_m=pq_m, config=config, gpu=on_device)
            name = f"{kind} (PQ{pq_m})" if pq_m else kind
            name += " (base on the GPU)" if gpu and kind == "exact" else ""
            name += f" (on the GPU, {backend})" if backend != "faiss" else ""
            device, device_note = {}, ""
            if on_device and accelerator is not None:
                device = gpu_bytes(backend, kind, n=n, dim=dim, lists=lists, itemsize=accelerator.itemsize)
                device_note = f", {device['total'] / GIB:.2f} GiB of {accelerator.gpu_bytes / GIB:.1f} on the GPU"
            if parts["total"] <= budget and (not device or device["total"] <= accelerator.gpu_bytes):  # type: ignore[union-attr]
                reason = f"{name}: estimated {parts['total'] / GIB:.2f} GiB of {config.memory_budget:g} GiB"
                reason += device_note + "".join(f"; {other} does not fit" for other in tried)
                candidates = config.rerank * config.k if kind in COMPRESSED else 0
                return IndexPlan(
                    kind=kind,
                    lists=lists,
                    pq_m=pq_m,
                    candidates=candidates,
                    estimate=parts,
                    reason=reason,
                    backend=backend,
                    gpu_estimate=device,
                )
            tried.append(f"{name} ({parts['total'] / GIB:.2f} GiB{device_note})")
    raise UserError(
        f"mine.memory_budget={config.memory_budget:g} GiB is too small for {n:,} images of {dim} dimensions: "
        f"{', '.join(tried)}; raise the budget or use a smaller mine.query_batch"
    )
