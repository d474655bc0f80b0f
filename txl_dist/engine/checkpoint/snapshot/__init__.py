"""Asynchronous saves (train.async_save): what a save holds, kept in host memory and written on
a thread while training goes on.

    background.py    DeepSpeed's state dicts kept at the step boundary, the writing thread
    arena.py         torch.save's bytes in page-aligned blocks a run reuses
    memory.py        how much host memory a snapshot takes, and whether the ranks have room
    budget.py        SnapshotBudget: that memory said, reserved once, asked for before each save
"""
