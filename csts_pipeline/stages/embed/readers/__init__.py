"""The dataset readers embed uses: COCO, Flickr30K, WebDataset tars, Parquet, clip-retrieval output, the generated
sample."""
