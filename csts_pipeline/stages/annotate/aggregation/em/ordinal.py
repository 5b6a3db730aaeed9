"""The rater model for 1-5 ratings: each item's true label, each worker's table of answers, fitted by EM.

Every item i has a true label t_i in 1..5, drawn from a shared prior; worker w answers y with probability
P(y | t, w), a table that starts from an ordinal kernel (aggregation/em/kernel.py):

    K_w(y | t) = exp(-(y - t - b_w)^2 / (2 s_w^2)) / Z(t, b_w, s_w),   y in 1..5,

a Gaussian around the true label shifted by the worker's bias b_w (lenient > 0, harsh < 0), with spread s_w
(noise); as s_w grows the answers tend to uniform, which is what a spammer gives. Two parameters are what the
10-100 ratings of a crowd worker can estimate, with the order of the scale built in. A person's table then grows
with their evidence (model_tables.grown_tables): their expected counts plus a strength of pseudo-answers per true
label from their kernel, the strength chosen by the data, so a worker with hundreds of answers is read by their
own confusion, as Dawid-Skene would (on USTS-C, a real crowd, the free confusion ordered items better than the
kernel from two ratings an item on). A label is the posterior mean of the crowd's answer (label_values).

EM: the E-step gives each item a posterior over 1..5 from its ratings; the M-step sets the prior to the mean
posterior and picks each worker's (b_w, s_w) on a fixed grid (bias -2..2 by 0.1, noise 0.25..8 log-spaced)
maximising the expected log-likelihood plus a prior (MAP): bias ~ N(0, 1) and two pseudo-ratings of a typical
worker (b 0, s 1), so a worker with a handful of ratings is not judged on them alone. The grid makes the M-step
one matrix product for all workers, exact and free of step sizes.

A **language model** (a worker whose rows carry a distribution q over 1..5, `soft`) is estimated like anyone,
against the people and the hidden gold, with two differences. Its P(y | t) is a free 5 x 5 confusion
estimated from its most likely digits (model_tables.free_tables says why). And each answer enters the item's
posterior as the expected likelihood under its distribution, sum_y q(y) P(y | t): a sure answer weighs as a rating, an
unsure one less, a flat one nothing. It starts uninformative (the widest kernel), so it earns its weight
against the people; aggregation/model_workers.py fits it per kind of condition, judges its reliability and leaves
out what it has not earned (docs/annotate-models.md, "Models in the loop").

**Shared ambiguity** (aggregation/em/shift.py): every rater of an item reads its true label t as t + u, u ~ N(0, sd^2)
the same for all of them, and the E-step integrates u out; the sd is chosen from a grid on the people's answers."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from csts_pipeline.stages.annotate.aggregation import thresholds
from csts_pipeline.stages.annotate.aggregation.em import model_tables, score_density, shift
from csts_pipeline.stages.annotate.aggregation.em.em_answers import (
    FAMILY_SEP,
    Answers,
    answers_of,
    answers_prior,
    known_items,
)
from csts_pipeline.stages.annotate.aggregation.em.em_sums import (
    SCALE,
    joint_posterior,
    one_blas_thread,
    restrict,
    sum_by_index,
    worker_counts,
)
from csts_pipeline.stages.annotate.aggregation.em.interval import (
    calibrated_mass,
    credible_interval,
)
from csts_pipeline.stages.annotate.aggregation.em.kernel import (
    TYPICAL,
    best_parameters,
    grid,
    grid_tables,
    reliability,
)


@dataclass
class OrdinalFit:
    """The fitted model: per item a posterior over 1..5 (rows of zeros-information items equal the prior), per
    worker (in `workers` order) bias, noise and reliability."""

    posterior: np.ndarray
    prior: np.ndarray
    workers: np.ndarray
    bias: np.ndarray
    noise: np.ndarray
    reliability: np.ndarray
    answers: np.ndarray
    iterations: int
    converged: bool
    table: np.ndarray | None = None  # P(y | t) per worker [workers, t, y]: the kernel, or a model's confusion
    ambiguity: float = 0.0  # the sd of the shared per-item shift every rater of an item feels
    log_likelihood: float = 0.0  # of the answers, under the fitted model (before the last M-step)
    spread_log_likelihoods: dict[float, float] = field(default_factory=dict)  # the people's, per spread tried
    spread_on_known: bool = False  # the spread measured on items of known label, not chosen from all answers
    density: dict[str, np.ndarray] = field(default_factory=dict)  # a scored model's score_density parameters
    calibration: tuple[float | None, int] = (None, 0)  # the interval's mass and the known items that set it
    joint: np.ndarray | None = None  # [items, t, g]: the posterior over the true label and the shared shift's node
    values: np.ndarray | None = None  # [t, g]: the label each (true label, shift node) stands for (label_values)
    strength: float = np.inf  # the people's tables: pseudo-answers per true label from their kernel (grown_tables)

    @property
    def label(self) -> np.ndarray:
        """The point label: the posterior mean of the value each (true label, shift) stands for (label_values), a
        float on 1-5 on the scale that anchors it."""
        if self.joint is None or self.values is None:
            return self.posterior @ SCALE
        return np.einsum("itg,tg->i", self.joint, self.values)

    def interval(self, mass: float = thresholds.INTERVAL_MASS) -> tuple[np.ndarray, np.ndarray]:
        """Per item the shortest run of labels lo..hi around its most probable one holding `mass` of its own
        posterior, or the mass the known labels calibrated (interval.calibrated_mass)."""
        held = self.calibration[0] if mass == thresholds.INTERVAL_MASS and self.calibration[0] is not None else mass
        return credible_interval(self.posterior, held)

    def p_higher(self, high: np.ndarray, low: np.ndarray) -> np.ndarray:
        """P(true label of item `high` > that of item `low`), the two posteriors taken as independent."""
        below = np.cumsum(self.posterior[low], axis=1) - self.posterior[low]  # P(low < k) for k = 1..5
        return (self.posterior[high] * below).sum(axis=1)


def answer_likelihood(answers: np.ndarray, code: np.ndarray, table: np.ndarray) -> np.ndarray:
    """[answers, t]: sum_y q(y) P(y | t) of each answer's distribution q under its worker's table[worker, t, y]."""
    return np.einsum("ry,rty->rt", answers, table[code])


def item_posterior(
    item: np.ndarray, code: np.ndarray, answers: np.ndarray, table: np.ndarray, prior: np.ndarray, n_items: int
) -> np.ndarray:
    """E-step without a shared shift: per item, the posterior over 1..5 given its answers ([answers, y],
    answer_matrix); table[worker, t, y] holds P(y | t)."""
    return joint_posterior(item, code, answers, table[None], prior, weights=np.ones(1), n_items=n_items)[0].sum(axis=2)


@dataclass
class State:
    """Where EM stands: the label prior, each worker's grid point and table (a model's free confusion), the
    items' joint posterior over (true label, shift node), the log-likelihood of the answers and the iterations."""

    prior: np.ndarray
    choice: np.ndarray
    table: np.ndarray
    posterior: np.ndarray
    density: np.ndarray | None = None  # score_density's parameters per scored family
    log_likelihood: float = -np.inf
    iterations: int = 0
    converged: bool = False
    strength: float = np.inf  # the people's tables: pseudo-answers per true label (model_tables.grown_tables)


def fit(
    item: np.ndarray,
    worker: np.ndarray,
    rating: np.ndarray,
    n_items: int,
    max_iter: int = thresholds.MAX_ITER,
    tol: float = thresholds.TOL,
    known: np.ndarray | None = None,
    soft: np.ndarray | None = None,
    ambiguity: float | None = None,
    people_noise: float | dict[str, float] | None = None,
    score: np.ndarray | None = None,
    label_prior: np.ndarray | None = None,
    density_on_known: bool = False,
) -> OrdinalFit:
    """Fit the model by EM to ratings (`item` indexes 0..n_items-1, `worker` ids, `rating` integers 1-5).
    `known` (per item, 0 or a true label 1-5) fixes the true label of control items with a known answer (hidden
    gold) in every E-step, so they anchor the workers' bias and noise and the shared shift; they stay out of
    the label prior. `soft` ([ratings, 5], rows of nan for hard ratings) gives a model worker's distribution for
    its rows: such a worker gets a free confusion (model_tables.free_tables), starts uninformative and earns its weight
    against the others. The shared shift's spread is `ambiguity`, else likeliest_spread's on the people's
    answers. `people_noise` holds every person's noise there (one for all, or per worker id), their biases still
    fitted (aggregation/trust.py: where the items of known label measure the people, or by the symmetric rule).
    `score` (per row, nan where none): a similarity model's score, read by a density per true label
    (score_density.py), not by its bin.
    `label_prior`: the prior over 1..5 held, not learned (an expert sample of the batch measured it);
    `density_on_known`: a scored model's density measured on the items of known label alone, not against the
    posterior (where those items measure the people too: trust.KNOWN)."""
    data = answers_of(item, worker, rating, n_items, known=known, soft=soft, score=score)
    data.hold(people_noise)
    data.label_prior = label_prior if label_prior is not None else answers_prior(data)
    data.density_on_known = density_on_known
    scores: dict[float, float] = {}
    if ambiguity is None:
        spread, state, scores = likeliest_spread(data.without_models(), tol)
        if data.free.any():
            state = start_state(data)
    else:
        spread, state = ambiguity, start_state(data)
    state = expectation_maximisation(data, state, spread, max_iter, tol)
    return fitted(data, state, spread, scores)


def fitted(data: Answers, state: State, spread: float, scores: dict[float, float]) -> OrdinalFit:
    """What EM reached, as the fit's results: labels on the crowd's scale, intervals calibrated on the known items."""
    bias_grid, noise_grid, _, _ = grid()
    values = label_values(data, state, spread)
    calibration, offset = known_calibration(data, state, spread, values)
    return OrdinalFit(
        posterior=state.posterior.sum(axis=2),
        prior=state.prior,
        workers=data.workers,
        bias=bias_grid[state.choice],
        noise=noise_grid[state.choice],
        reliability=reliability(state.table, state.prior),
        answers=np.bincount(data.code, minlength=len(data.workers)),
        iterations=state.iterations,
        converged=state.converged,
        table=state.table,
        ambiguity=spread,
        log_likelihood=state.log_likelihood,
        spread_log_likelihoods=scores,
        density=densities(data, state),
        spread_on_known=bool(scores) and known_items(data.without_models()).sum() >= thresholds.MIN_EVIDENCE,
        calibration=calibration,
        joint=state.posterior,
        values=values + offset,
        strength=state.strength,
    )


def label_values(data: Answers, state: State, spread: float) -> np.ndarray:
    """[t, g]: the label a true label t read with shift node g stands for: the crowd's mean answer there (the
    batch's people's tables, each weighed by their answers times their reliability squared, so that a spammer's
    flat answers do not pull the scale to its middle), so the labels sit on the people's scale (the posterior
    mean of t ran 0.1-0.2 points under the crowd's mean on USTS-C). Items of known label move these values as a
    whole afterwards, by their offset as given (known_calibration). A batch with no person's answer: t plus the
    shift."""
    shifts, _ = shift.nodes(spread)
    weight = np.bincount(data.code, minlength=len(data.workers)) * ~data.free
    weight = weight * np.clip(reliability(state.table, state.prior), 0, 1) ** 2
    if weight.sum() <= 0:
        return np.clip(SCALE[:, None] + shifts[None, :], SCALE[0], SCALE[-1])
    return np.einsum("w,gwty,y->tg", weight / weight.sum(), worker_tables(data, state, shifts), SCALE)


def worker_tables(data: Answers, state: State, shifts: np.ndarray) -> np.ndarray:
    """[g, worker, t, y]: each worker's P(y | t + shift_g): the kernel moved by the shift, or the worker's own
    table (a model's confusion, a grown person's) read at t + shift."""
    tables = grid_tables(state.choice, shifts)
    own = data.free | model_tables.grown_people(data, state.strength)
    tables[:, own] = shift.shifted_rows(state.table[own], shifts)
    return tables


def densities(data: Answers, state: State) -> dict[str, np.ndarray]:
    """Each scored model's density parameters by its name (the family's, before FAMILY_SEP)."""
    if state.density is None or not len(data.scored):
        return {}
    groups = np.unique(data.family[data.code[data.scored]])
    names = {int(data.family[w]): str(data.workers[w]).partition(FAMILY_SEP)[0] for w in range(len(data.workers))}
    return {names[int(f)]: state.density[at] for at, f in enumerate(groups)}


def likeliest_spread(data: Answers, tol: float) -> tuple[float, State, dict[float, float]]:
    """The point of shift.AMBIGUITY_GRID with the highest likelihood of `data` plus shift.log_prior, each point's
    EM started where the last ended and ranked at thresholds.RANKING_TOL; with the state EM reached there and each
    point's log-likelihood (how well the answers tell them apart: shift.evidence_span). Fitted on
    people's answers only: a model's soft answer enters as an expected likelihood, not the probability of an
    observation, and with a model among the raters the grid's likelihoods favoured no shift by 3-6 log units
    whether the crowd's items were ambiguous (sd 0.4) or not."""
    state = start_state(data)
    best: tuple[float, float, State] | None = None
    scores = {}
    on_known = known_items(data).sum() >= thresholds.MIN_EVIDENCE
    for spread in shift.AMBIGUITY_GRID:
        state = expectation_maximisation(
            data, state, float(spread), thresholds.MAX_RANKING_ITER, max(tol, thresholds.RANKING_TOL), grow=False
        )
        scores[float(spread)] = known_log_likelihood(data, state, float(spread)) if on_known else state.log_likelihood
        score = scores[float(spread)] + shift.log_prior(float(spread))
        if best is None or score > best[0]:
            best = (score, float(spread), state)
    assert best is not None
    return best[1], best[2], scores


def known_log_likelihood(data: Answers, state: State, spread: float) -> float:
    """The log-likelihood of the answers on the known items given their true labels, the shared shift integrated
    out: how well a spread explains how raters of an item with a known label err together (aggregation/em/shift.py)."""
    known = known_items(data)
    rows = known[data.item]
    shifts, weights = shift.nodes(spread)
    tables = worker_tables(data, state, shifts)
    like = np.einsum("ry,grty->rtg", data.answers[rows], tables[:, data.code[rows]])
    truth = np.argmax(data.allowed[data.item[rows]], axis=1)
    per_rating = np.log(np.maximum(like[np.arange(len(truth)), truth], 1e-300))  # [rows, g]
    per_item = sum_by_index(data.item[rows], per_rating, data.n_items)[known] + np.log(weights)[None, :]
    top = per_item.max(axis=1, keepdims=True)
    return float((np.log(np.exp(per_item - top).sum(axis=1)) + top[:, 0]).sum())


def start_state(data: Answers) -> State:
    """People start as a typical worker; models uninformative (bias 0, the widest noise: answers carry nothing)."""
    bias_grid, noise_grid, log_grid, _ = grid()
    typical = int(np.argmin(np.abs(bias_grid - TYPICAL[0]) + np.abs(np.log(noise_grid / TYPICAL[1]))))
    flat = int(np.argmin(np.abs(bias_grid) - noise_grid))
    choice = np.where(data.free, flat, typical)
    if data.pinned is not None:
        held = np.argmin(
            np.abs(bias_grid)[None, :]
            + np.abs(np.log(noise_grid[None, :] / np.nan_to_num(data.pinned, nan=1.0)[:, None])),
            1,
        )
        choice = np.where(data.free | np.isnan(data.pinned), choice, held)
    table = np.exp(log_grid[choice].reshape(len(choice), len(SCALE), len(SCALE)))
    prior = np.full(len(SCALE), 1 / len(SCALE)) if data.label_prior is None else data.label_prior
    return State(prior=prior, choice=choice, table=table, posterior=np.tile(prior[None, :, None], (data.n_items, 1, 1)))


@one_blas_thread
def expectation_maximisation(
    data: Answers, state: State, spread: float, max_iter: int, tol: float, grow: bool = True
) -> State:
    """EM at a fixed spread of the shared shift, from `state`, until no item's posterior moves by `tol`; `grow`:
    the people's tables grow from their answers (model_tables.grown_tables), else they are their kernels (the
    spread's ranking: growth made each point of the grid take six times the iterations, for the same choice)."""
    _, _, log_grid, _ = grid()
    shifts, _ = shift.nodes(spread)
    prior, choice, table, before = state.prior, state.choice, state.table, state.posterior.sum(axis=2)
    strength = state.strength
    scored = data.scored
    groups, group = np.unique(data.family[data.code[scored]], return_inverse=True)
    measured = known_items(data)[data.item[scored]] if data.density_on_known else np.ones(len(scored), bool)
    density = state.density if state.density is not None else score_density.start(len(groups))
    buffers = [np.empty((data.n_items, len(SCALE), len(shifts))) for _ in range(2)]  # this iteration's, the last's
    for iterations in range(1, max_iter + 1):
        now = State(prior=prior, choice=choice, table=table, posterior=before, density=density, strength=strength)
        joint, evidence = e_step(data, now, group, spread, buffers[iterations % 2])
        posterior = restrict(joint, data.allowed)  # in place: each item's known label, normalised again
        if data.label_prior is None:
            prior = (posterior[data.answered].sum(axis=0) + 1) / (data.answered.sum() + len(SCALE))
        counts = worker_counts(joint, data.item, data.code, data.digits, n=len(data.workers), layout=data.count_layout)
        choice = best_parameters(counts, shifts, data.pinned)
        kernel = np.exp(log_grid[choice].reshape(len(choice), len(SCALE), len(SCALE)))
        people = model_tables.grown_people(data, 1.0) & grow
        # the counts moved onto the tables' rows: what a model's or a grown person's table is estimated from
        unshifted = shift.unshifted_counts(counts, shifts, table) if data.free.any() or people.any() else counts
        table = model_tables.free_tables(unshifted, kernel, data.free, data.family)
        # re-chosen in the first iterations, then held: a choice re-made every iteration flipped
        if people.any() and iterations <= thresholds.STRENGTH_ITER:
            strength = model_tables.growth_strength(unshifted[people], kernel[people])  # between neighbours
        table = model_tables.grown_tables(table, unshifted, kernel, people, strength)
        if len(scored):
            on = scored[measured]
            density = score_density.m_step(data.z[on], group[measured], joint[data.item[on]].sum(axis=2), len(groups))
            table = model_tables.density_tables(table, data, groups, density)
        change = float(np.abs((posterior - before) @ SCALE).max()) if data.n_items else 0.0
        before = posterior
        heard = float(evidence[data.heard].sum())
        done = State(prior=prior, choice=choice, table=table, posterior=joint, density=density, log_likelihood=heard,
                     iterations=iterations, converged=change < tol, strength=strength)  # fmt: skip
        if done.converged:
            break
    return done


def e_step(
    data: Answers, state: State, group: np.ndarray, spread: float, out: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The items' joint posterior [items, t, g] from their answers under `state`'s parameters, the known labels
    not yet applied, and each item's log-likelihood; `group`: each scored row's family among the scored ones;
    `out`: an array to write the posterior into (joint_posterior)."""
    shifts, weights = shift.nodes(spread)
    tables = worker_tables(data, state, shifts)
    joint, evidence = joint_posterior(
        data.item, data.code, data.answers, tables, state.prior, weights=weights, n_items=data.n_items,
        layout=data.layout, out=out,
    )  # fmt: skip
    if len(data.scored) and state.density is not None:
        extra = score_density.log_likelihood(data.z[data.scored], group, state.density, shifts)
        per_item = sum_by_index(data.item[data.scored], extra.reshape(len(data.scored), -1), data.n_items)
        joint, evidence = with_evidence(joint, evidence, per_item.reshape(joint.shape))
    return joint, evidence


def known_calibration(
    data: Answers, state: State, spread: float, values: np.ndarray
) -> tuple[tuple[float | None, int], float]:
    """What the items of known label calibrate, from their posteriors on their answers alone, under a fit that did
    not see their labels (EM again from `state` with every label free: a fit that saw them shaped the workers'
    tables to them, and its posteriors on them were sharper than on the other items): the interval's mass
    (interval.calibrated_mass) with how many items measured it (None and their count where too few), and the
    scale's offset, the mean of their known labels as given (decimals kept) less their labels on the crowd's scale
    (0 where too few): a crowd lenient by a point as a whole is brought back to the known labels' scale."""
    known = known_items(data)
    if known.sum() < thresholds.MIN_EVIDENCE:
        return (None, int(known.sum())), 0.0
    blind_data = replace(data, allowed=np.ones_like(data.allowed), answered=data.heard.copy(), density_on_known=False)
    blind = expectation_maximisation(blind_data, state, spread, thresholds.MAX_ITER, thresholds.TOL)
    label = np.argmax(data.allowed[known], axis=1)
    mass = calibrated_mass(blind.posterior[known].sum(axis=2), label, thresholds.INTERVAL_MASS)
    given = data.known_value[known] if len(data.known_value) else SCALE[label]  # an expert's 3.47, not its 3
    offset = float(np.mean(given - np.einsum("itg,tg->i", blind.posterior[known], values)))
    return (mass, int(known.sum())), offset


def with_evidence(joint: np.ndarray, evidence: np.ndarray, extra: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The joint posterior [items, t, g] and each item's log-likelihood with one more log-likelihood term per
    (item, t, g) multiplied in (the scored answers)."""
    top = extra.max(axis=(1, 2), keepdims=True)
    moved = joint * np.exp(extra - top)
    total = moved.sum(axis=(1, 2), keepdims=True)
    return moved / total, evidence + np.log(total).reshape(-1) + top.reshape(-1)
