"""What the commands do with an exported model (txl-export's plain PyTorch directory).

- loading.py: the export's directory as the commands read it: dtypes, the vocabulary, the model
  loaded for evaluation with its lengths; imports no training or evaluation loop;
- text.py: the export's text to ids and back as its data was prepared;
- generation.py: generation with the memory: sampling, the token loop, prompts, detokenizers.

Sweeps and the evaluation loop are txl_dist.evaluation's (below these: it never imports them).
"""
