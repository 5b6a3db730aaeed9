"""The ordinal rater model's EM (`ordinal.fit`): each worker's table (`kernel` for the people's prior, `model_tables`
for the models' and the people's own, `score_density` for a similarity model's score), the shared per-item shift
(`shift`), the intervals (`interval`), and the answers and sums EM reads (`em_answers`, `em_sums`, `em_kernels`).
What the fit is told, whom to hold and whom to fit, comes from aggregation/trust.py."""
