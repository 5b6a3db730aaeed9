"""Simulations that the tests and the benches share: crowds with a known truth (simulate), simulated model raters
(simulate_models), a model with chosen answers (chosen_model), people answering the files the annotate commands
write through the functions the command calls (command_path), a loopback OpenAI-compatible server (openai_server),
SmolLM2 from its wheel (smollm2) and a generated C-STS set (train_sample). Nothing of the pipeline imports it, and
`import csts_pipeline` does not load it."""
