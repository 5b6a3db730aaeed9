"""Every number the rater model decides by, named once: how much evidence it acts on, where a worker counts as
unreliable, how sure an interval or an order must be, how strongly its priors hold, and how long EM runs.

The modules of the rater model read them from here (`thresholds.NAME`), so a newcomer finds each in one place
with why it has its value; the figures behind them come from the benches named (bench/annotate/)."""

from __future__ import annotations

# --- evidence: what the model acts on -----------------------------------------------------------------------------
MIN_EVIDENCE = 20  # the evidence the rater model acts on: ratings on known or repeated items that measure the
# people (trust.plan), rated items of known label that measure the shared shift's spread and calibrate the intervals
INFORMATIVE_Z = 3.0  # a model's agreement with people must sit this many standard errors above zero
# Where fewer than this share of the people's answers sit on items another person rated too (the C-STS paper's
# design: one rating an item, a 100-item sample rated three times), the repeats measure the people on those items
# only; beside an informative model the people are then pinned at the reliability their agreement there measures
# (weighing.repeat_reliability), not fitted freely, which trades them against the model on the items one person
# rated (STS-B, one person an item, a 100-item repeat sample and MiniLM: bench.annotate.trust_evidence).
SPARSE_REPEATS_BELOW = 0.5
RELATIVE_PSEUDO = 10.0  # a person's agreement with the models shrinks toward the people's with this many items

# --- verdicts on workers and items --------------------------------------------------------------------------------
UNRELIABLE_BELOW = 0.5  # a person whose reliability (a correlation) is below this answers close to at random
FLAG_SKILL_BELOW = 0.6  # a model's balanced flag accuracy below this: its flags are close to a constant
# A model's mean error on a kind of condition (its expected answer minus the label, KindFit.error) from which
# `export --more` asks people for that kind's items (steps/followup.py): half a point moves a label across a
# rounding boundary, the step the 1-5 labels are read at. Its table on the kind corrects a steady offset, but
# only as well as the people's answers on that kind have measured it.
KIND_ERROR_AT = 0.5
# People's ratings an item of such a kind (or of a weak kind) is asked up to: people alone reach a Spearman of
# 0.91 with 0.89 coverage at a fixed 3 an item on the simulated crowds (bench.annotate.models_in_loop),
# about what their own `--more` rounds spend (3.3 an item), so there the labels are as good as people's alone.
KIND_MIN_RATINGS = 3
UNSURE_BELOW = 0.9  # P(high condition's true label > low's) below this: the order is not established

# --- intervals ----------------------------------------------------------------------------------------------------
INTERVAL_MASS = 0.9  # the posterior mass an item's interval holds
NARROW_P = 0.2  # the known items narrow the runs where the model's own cover them beyond chance at this level (at
# 0.05, 80 known items of a simulated crowd whose runs covered 0.95 of them left its intervals covering 0.96)

# --- priors: how strongly the model holds a worker before their answers speak --------------------------------------
BIAS_PRIOR_SD = 1.0  # a person's bias, in points of the 1-5 scale
PSEUDO_RATINGS = 2.0  # pseudo-ratings at the typical bias and noise (kernel.TYPICAL) behind each person's fit
FREE_PSEUDO = 2.0  # a model worker's confusion: pseudo-answers per true label, spread as its answers overall
KIND_PSEUDO = 3.0  # a model's table on one kind of condition: pseudo-answers per true label from its overall table
SCORE_PSEUDO = 0.5  # a model score's density per true label: pseudo-items at the batch's marginal (mean 0, sd 1)
MAX_AMBIGUITY_SD = 2.0  # `annotate import --ambiguity-sd`: at most this (two points of the 1-5 scale)

# --- EM's limits --------------------------------------------------------------------------------------------------
MAX_ITER, TOL = 200, 1e-4  # EM's iterations at most, and the largest change of a label that counts as converged
MAX_RANKING_ITER = 200  # EM iterations at each point of the spread's grid
RANKING_TOL = 1e-3  # the grid's points are ranked after EM to this posterior change; the chosen one runs on
STRENGTH_ITER = 10  # the people's growth strength is re-chosen in EM's first iterations, then held
SEARCH_TOL = 1e-4  # the equal rule's bisection ranks each noise at this posterior change (the final fit runs on)
EQUAL_MAX_ITER = 1000  # the equal rule's fits: a weak person beside a score's density moves slowly (452 iterations
# to a posterior change of 1e-6 on 600 STS-B items; bench/annotate/trust_evidence.py)
