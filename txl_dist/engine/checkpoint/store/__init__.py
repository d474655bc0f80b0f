"""The transport: a checkpoint's files written atomically, recorded, checked and pruned, whatever
they hold.

    transaction.py   one save, in phases every rank passes together; the synchronous save
    asynchronous.py  the asynchronous save: a snapshot taken, then written in the background
    integrity.py     fsync, sizes and CRC-32s, how a checkpoint differs from its record
    writes.py        a save's files written and fsynced, a snapshot's with direct I/O
    trusted.py       the pickle scan before anything loads, and the weights_only loader
    retention.py     pruning to train.keep_last
"""
