"""Pretrain Transformer-XL: a thin entry point, the engine lives in txl_dist.engine.train.

deepspeed --num_gpus 2 launch/pretrain.py --config configs/tiny.json
torchrun --nproc_per_node 2 launch/pretrain.py --config configs/tiny.json
python launch/pretrain.py --config configs/tiny.json --set train.max_steps=10
"""

from txl_dist.engine.train import main

if __name__ == "__main__":
    main()
