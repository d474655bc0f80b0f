"""The Hugging Face export: a directory `transformers` loads with trust_remote_code=True.

export.py writes it (`txl-export --format hf`); configuration_txl.py and modeling_txl.py are
shipped in it, for `AutoConfig` and `AutoModelForCausalLM`; tokenizer_files.py adds what
`AutoTokenizer` and `generate()` read.
"""
