"""One way to ask a language model, shared by every step that does (annotate rate, draft, check-conditions) and by
the prompting baseline: a local causal LM loaded with transformers (`--model`: a Hugging Face name, a folder or a
`.gguf` file) or any OpenAI-compatible server (`--endpoint`), behind one interface (`LanguageModel`).

Answers are read as distributions over the answer options from next-token probabilities (or from sampled replies
where a server gives none), each a real distribution or no answer (`Answer`, `option_probs`); `generate` is for
the steps that need words (a drafted condition). `AnswerCache` keeps every
answer in the step's output folder, keyed by the model's identity, the prompt's version and the item, so a rerun
costs nothing and a killed run resumes unit by unit. Prompts are versioned package files (`load_prompt`).
"""

from csts_pipeline.pipeline.language_model.base import (
    Answer,
    Cost,
    LanguageModel,
    Unfinished,
    option_distribution,
)
from csts_pipeline.pipeline.language_model.cache import AnswerCache
from csts_pipeline.pipeline.language_model.open import open_model
from csts_pipeline.pipeline.language_model.prompts import Prompt, load_prompt
from csts_pipeline.pipeline.model_spec import ModelSpec

__all__ = [
    "Answer",
    "AnswerCache",
    "Cost",
    "LanguageModel",
    "ModelSpec",
    "Prompt",
    "Unfinished",
    "load_prompt",
    "open_model",
    "option_distribution",
]
