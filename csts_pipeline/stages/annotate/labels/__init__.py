"""Label statistics, pure numpy and no files: agreement, the ordinal rater model, the not-pertinent verdict,
aggregators, BWS scores, audit statistics, sampling and splits."""
