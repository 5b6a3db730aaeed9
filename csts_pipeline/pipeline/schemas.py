"""Every table that passes between stages, in one place: writers build these schemas, readers check them, tests
import them (docs/schemas.md describes each column).

A stage folder holds one folder per table (`<stage>/<table>/part-NNNNN.parquet`), so that
`pyarrow.dataset.dataset(<stage>/<table>)` reads any of them, plus `_stage.json` and report files.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from csts_pipeline.pipeline.errors import UserError

# embed/
EMBEDDINGS = "embeddings"
CAPTIONS = "captions"
CAPTIONS_SCHEMA = pa.schema([("caption_id", pa.int64()), ("image_id", pa.int64()), ("caption", pa.string())])


def embeddings_schema(dim: int, dtype: str = "float32") -> pa.Schema:
    """float32, or float16 (embed.dtype): readers take either and compute in float32."""
    value = pa.float16() if dtype == "float16" else pa.float32()
    return pa.schema([("image_id", pa.int64()), ("file_name", pa.string()), ("embedding", pa.list_(value, dim))])


# mine/ (plus CAPTIONS: the captions of the embedded images)
IMAGE_PAIRS = "image_pairs"
IMAGE_PAIRS_SCHEMA = pa.schema(
    [("image_id_1", pa.int64()), ("image_id_2", pa.int64()), ("rank", pa.int32()), ("cosine", pa.float32())]
)
CANDIDATES = "candidates"
CANDIDATES_SCHEMA = pa.schema(
    [
        ("pair_id", pa.int64()),
        ("caption_id_1", pa.int64()),
        ("caption_id_2", pa.int64()),
        ("image_id_1", pa.int64()),
        ("image_id_2", pa.int64()),
        ("image_cosine", pa.float32()),
    ]
)

# filter/
KEPT = "kept"
REJECTED = "rejected"
KEPT_SCHEMA = pa.schema(
    [
        ("pair_id", pa.int64()),
        ("image_id_1", pa.int64()),
        ("image_id_2", pa.int64()),
        ("caption_id_1", pa.int64()),
        ("caption_id_2", pa.int64()),
        ("sentence1", pa.string()),
        ("sentence2", pa.string()),
        ("image_cosine", pa.float32()),
        ("iou", pa.float32()),
        ("simcse_cosine", pa.float32()),
        ("ratio", pa.float32()),
        ("length", pa.int32()),
    ]
)
REJECTED_SCHEMA = KEPT_SCHEMA.append(pa.field("failed", pa.string()))


# annotate/csts/ (annotate split) -> train, evaluate: the C-STS columns, with the kept pair's provenance
PROVENANCE = ("pair_id", "image_id_1", "image_id_2", "caption_id_1", "caption_id_2")
CSTS_SCHEMA = pa.schema(
    [
        ("sentence1", pa.string()),
        ("sentence2", pa.string()),
        ("condition", pa.string()),
        ("label", pa.float64()),
        *((name, pa.int64()) for name in PROVENANCE),
        ("condition_type", pa.string()),
        ("split", pa.string()),
    ]
)

# annotate/ratings/workers.parquet (annotate import --stage ratings --aggregate model): one row per worker
WORKERS_SCHEMA = pa.schema(
    [
        ("worker_id", pa.string()),
        ("answers", pa.int64()),  # accepted answers (ratings and not-pertinent flags)
        ("ratings", pa.int64()),  # of which 1-5 ratings
        ("reliability", pa.float64()),  # ordinal model: corr(true label, answer) under the worker's fit, 0..1
        ("bias", pa.float64()),  # ordinal model: shift in points (> 0 lenient, < 0 harsh)
        ("noise", pa.float64()),  # ordinal model: spread of the answers around the shifted true label
        ("flag_skill", pa.float64()),  # not-pertinent votes: mean P(vote = verdict | verdict) (Dawid-Skene)
        ("unreliable", pa.bool_()),  # reliability below the stated threshold (a language model: or its flag skill)
        # language models: per kind of condition, answers, reliability, mean error and whether left out (weak)
        (
            "kinds",
            pa.list_(
                pa.struct(
                    [
                        ("kind", pa.string()),
                        ("answers", pa.int64()),
                        ("reliability", pa.float64()),
                        ("error", pa.float64()),
                        ("weak", pa.bool_()),
                    ]
                )
            ),
        ),
        ("weak_kinds", pa.list_(pa.string())),
        ("gold_accuracy", pa.float64()),  # share of gold items answered right; null until gold is scored
        ("gold_answers", pa.int64()),
        # what measured the reliability: "expert sample 12, gold 8, repeats 40" for a person, "agreement with
        # people 0.41 over 400 items" for a model, or "assumed ..." where nothing in the batch measured it
        ("evidence", pa.string()),
        ("model_kind", pa.string()),  # a model worker: "language model" or "similarity model"; null for people
        ("model_reading", pa.string()),  # a model worker: how its answers were read (a similarity model's bin edges)
    ]
)


def check_columns(table: pa.Table, schema: pa.Schema, source: Path) -> pa.Table:
    """`table` with the schema's columns, in its order and types; a missing column is an error naming `source`."""
    missing = [name for name in schema.names if name not in table.column_names]
    if missing:
        raise UserError(f"{source}: missing column(s) {', '.join(missing)} (found: {', '.join(table.column_names)})")
    try:
        return table.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise UserError(f"{source}: columns of the wrong type ({exc})") from None


# annotate/: the steps' tables (docs/annotate.md, docs/schemas.md)
REPORT_SCHEMA = pa.schema(
    [("file", pa.string()), ("row", pa.int64()), ("id", pa.string()), ("problem", pa.string()), ("detail", pa.string())]
)
TRIPLET_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        ("task_id", pa.string()),
        *((name, pa.int64()) for name in PROVENANCE),
        ("sentence1", pa.string()),
        ("sentence2", pa.string()),
        ("condition", pa.string()),
        ("condition_type", pa.string()),
        ("worker_id", pa.string()),
        ("assignment_id", pa.string()),
        # drafted_accepted, drafted_edited (with the edit distance to the draft) or written (annotate draft)
        ("origin", pa.string()),
        ("edit_distance", pa.int64()),
    ]
)
ITEM_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        *((name, pa.int64()) for name in PROVENANCE),
        ("sentence1", pa.string()),
        ("sentence2", pa.string()),
        ("condition", pa.string()),
        ("condition_type", pa.string()),
        ("label", pa.float64()),
        ("ratings", pa.int64()),
        ("not_pertinent", pa.int64()),
        ("answers", pa.int64()),
        ("status", pa.string()),
        # --aggregate model only (null otherwise): posterior over 1..5, the 90% interval, P(not pertinent)
        ("distribution", pa.list_(pa.float64())),
        ("interval_low", pa.int64()),
        ("interval_high", pa.int64()),
        ("p_not_pertinent", pa.float64()),
        # --aggregate model with a model worker (null otherwise): a log10 likelihood ratio, how many times less
        # likely the models' answers make the people's label than the label they favour (quality.model_log10_ratio)
        ("model_log10_ratio", pa.float64()),
    ]
)
RATING_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        ("worker_id", pa.string()),
        ("assignment_id", pa.string()),
        ("rating", pa.int8()),
        ("not_pertinent", pa.bool_()),
        # model workers only (null for people): P(rating = 1..5 | pertinent) and P(not pertinent)
        ("distribution", pa.list_(pa.float64())),
        ("p_not_pertinent", pa.float64()),
    ]
)
# `annotate rate`'s table (<annotate>/model_ratings/ratings.parquet): the ratings schema, and how each of the two
# questions was read (language_model.base.Answer). An item without an answer to either question has a null
# `rating` (never a made-up one), a null `distribution` or `p_not_pertinent` for the question without one, and
# `no_answer` saying why ("rate:low_mass", "pertinent:few_readable", ...); the ratings import skips it.
MODEL_RATING_SCHEMA = pa.schema(
    [
        *RATING_SCHEMA,
        ("no_answer", pa.string()),  # null: both questions answered
        ("read_mode", pa.string()),  # the rating question: logprobs or samples
        ("option_mass", pa.float64()),  # logprobs: P(next token is one of 1-5); samples: readable share of those asked
        ("samples_asked", pa.int64()),  # samples only
        ("samples_readable", pa.int64()),
        ("pertinent_read_mode", pa.string()),  # the same for the yes/no question
        ("pertinent_option_mass", pa.float64()),
        ("pertinent_samples_asked", pa.int64()),
        ("pertinent_samples_readable", pa.int64()),
    ]
)
BWS_ITEM_SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        *((name, pa.int64()) for name in PROVENANCE),
        ("sentence1", pa.string()),
        ("sentence2", pa.string()),
        ("condition", pa.string()),
        ("condition_type", pa.string()),
        ("label", pa.float64()),  # the score mapped onto 1-5: 1 + 4 * score_unit
        ("score", pa.float64()),  # (best - worst) / seen, in [-1, 1]
        ("score_unit", pa.float64()),  # the score rescaled to [0, 1]
        ("best", pa.int64()),
        ("worst", pa.int64()),
        ("seen", pa.int64()),
        ("status", pa.string()),  # kept (seen in an annotated tuple) or unanswered
    ]
)
ANNOTATION_SCHEMA = pa.schema(
    [
        ("tuple_id", pa.string()),
        ("worker_id", pa.string()),
        ("assignment_id", pa.string()),
        ("best_item_id", pa.string()),
        ("worst_item_id", pa.string()),
    ]
)
INVERSION_SCHEMA = pa.schema(
    [
        ("pair_id", pa.int64()),
        ("problem", pa.string()),  # inverted (high's label <= low's) or unsure (the model's P below UNSURE_BELOW)
        ("label_high", pa.float64()),
        ("label_low", pa.float64()),
        ("p_high_above_low", pa.float64()),
        ("item_id_high", pa.string()),
        ("item_id_low", pa.string()),
        ("sentence1", pa.string()),
        ("sentence2", pa.string()),
        ("condition_high", pa.string()),
        ("condition_low", pa.string()),
    ]
)
PUBLISHED_RATINGS = pa.schema(
    [
        ("item_id", pa.string()),
        ("pair_id", pa.int64()),
        ("condition_type", pa.string()),
        ("worker", pa.string()),
        ("rating", pa.int8()),
        ("not_pertinent", pa.bool_()),
        # a language model's answer (worker `model:<name>`, not pseudonymised): null for people
        ("distribution", pa.list_(pa.float64())),
        ("p_not_pertinent", pa.float64()),
    ]
)
GOLD_SCHEMA = pa.schema([("item_id", pa.string()), ("gold_answer", pa.string()), ("source", pa.string())])
BLOCK_SCHEMA = pa.schema([("WorkerId", pa.string()), ("Reason", pa.string())])
