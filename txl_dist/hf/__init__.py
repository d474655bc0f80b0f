"""The Hugging Face export: a directory `transformers` loads with trust_remote_code=True."""
