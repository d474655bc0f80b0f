"""txl-dist: distributed pretraining of Transformer-XL."""
