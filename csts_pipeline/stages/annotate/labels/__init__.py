"""Label statistics, pure numpy and no files: agreement, the not-pertinent verdict, BWS scores, audit statistics,
the expert sample, sampling and splits. The labels themselves are aggregation/'s."""
