"""The rater model's compiled passes (numba), for em_sums.py and shift.py beside it: each a loop over the items or
the workers that numpy would make in several passes over [items, 25] arrays. A module of its own, imported where EM
runs, so an import without the rater model (`--aggregate mean`) does not load numba."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def item_log_posteriors(indptr, indices, data, log_like, log_prior, log_weights, post, top):  # pragma: no cover
    """joint_posterior's sums in one pass an item, into `post` [items, t * g] and `top` [items]: its answers'
    log-likelihoods added in the answers' order (as the sparse product by_item @ log_like adds them), then the
    prior's and the nodes' log masses; each row less its largest value, which goes to `top`. Indexed flat, not
    through row views (a view a row cost as much as the sums)."""
    labels, nodes = log_prior.shape[0], log_weights.shape[0]
    width = labels * nodes
    cells, rows = log_like.ravel(), post.ravel()
    for i in range(indptr.shape[0] - 1):
        at = i * width
        for c in range(width):
            rows[at + c] = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            value, cell = data[k], np.int64(indices[k]) * width
            for c in range(width):
                rows[at + c] += value * cells[cell + c]
        largest = -np.inf
        for t in range(labels):
            for g in range(nodes):
                rows[at + t * nodes + g] = (rows[at + t * nodes + g] + log_prior[t]) + log_weights[g]
                largest = max(largest, rows[at + t * nodes + g])
        for c in range(width):
            rows[at + c] -= largest
        top[i] = largest


@numba.njit(cache=True, nogil=True)
def normalised(post, top):  # pragma: no cover (compiled)
    """Each row of `post` over its total, in place; per row the log of its total plus `top` (the item's
    log-likelihood)."""
    evidence = np.empty(post.shape[0])
    for i in range(post.shape[0]):
        total = 0.0
        for c in range(post.shape[1]):
            total += post[i, c]
        for c in range(post.shape[1]):
            post[i, c] /= total
        evidence[i] = np.log(total) + top[i]
    return evidence


@numba.njit(cache=True, nogil=True)
def restrict(joint, allowed, posterior):  # pragma: no cover (compiled)
    """restrict's pass: per item, each cell times its label's allowance, the row over its total, the sums by t."""
    for i in range(joint.shape[0]):
        total = 0.0
        for t in range(joint.shape[1]):
            for g in range(joint.shape[2]):
                joint[i, t, g] *= allowed[i, t]
                total += joint[i, t, g]
        for t in range(joint.shape[1]):
            mass = 0.0
            for g in range(joint.shape[2]):
                joint[i, t, g] /= total
                mass += joint[i, t, g]
            posterior[i, t] = mass


@numba.njit(cache=True, nogil=True)
def cell_sums(indptr, indices, data, joint, n_cells):  # pragma: no cover (compiled)
    """worker_counts' sum, [worker * y, t * g]: each item's posterior row read once, in order, and added to the
    cells of its answers (times q(y)), rather than gathered by cell from all over the posterior."""
    out = np.zeros((n_cells, joint.shape[1]))
    for i in range(joint.shape[0]):
        for k in range(indptr[i], indptr[i + 1]):
            target, value = indices[k], data[k]
            for c in range(joint.shape[1]):
                out[target, c] += value * joint[i, c]
    return out


@numba.njit(cache=True, nogil=True)
def unshifted(counts, table, low, frac):  # pragma: no cover (compiled)
    """unshifted_counts per worker: each count [g, t, y] split between the rows low and low + 1 of the worker's
    table by how likely each makes the answer, the shares onto the low rows and onto the high rows summed apart
    and then added."""
    workers, nodes, labels, answers = counts.shape
    onto_low = np.zeros((workers, labels, answers))
    onto_high = np.zeros((workers, labels, answers))
    for w in range(workers):
        for g in range(nodes):
            for t in range(labels):
                lo, f = low[g, t], frac[g, t]
                for y in range(answers):
                    below = (1 - f) * table[w, lo, y]
                    share = below / max(below + f * table[w, lo + 1, y], 1e-300)
                    onto_low[w, lo, y] += share * counts[w, g, t, y]
                    onto_high[w, lo + 1, y] += (1 - share) * counts[w, g, t, y]
    return onto_low + onto_high
