"""From the accepted ratings to one label per item: the label policies (`aggregators`: Mean, Median,
RoundedMedian, OrdinalModel) and the rater model behind OrdinalModel.

The rater model's decision, how far each worker is trusted and by what evidence, lives in five modules:
`thresholds` (every number it decides by), `trust` (which evidence measures whom), `weighing` (the fit as that plan
says), `model_workers` (what models among the raters may do) and `quality` (the labels, the workers' table and the
high-against-low check). The estimator they run, the EM over each worker's table, is `em/`, which imports none of
them but `thresholds`."""
