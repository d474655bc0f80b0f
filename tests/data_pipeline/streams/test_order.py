"""An epoch's order: samples joined by a cut document move as one chain; documents in a sample
are permuted, the pieces of a cut document kept where they join their neighbours."""

import numpy as np

from data_pipeline.streams.order import EpochOrder, shuffle_documents, shuffled_chains


def test_chains_of_a_cut_document_move_whole_in_corpus_order():
    continues = np.array([0, 1, 1, 0, 0, 1, 0], bool)  # chains [0 1 2] [3] [4 5] [6]
    seen = set()
    for seed in range(20):
        order = shuffled_chains(continues, np.random.default_rng(seed)).tolist()
        assert sorted(order) == list(range(7))
        for chain in ([0, 1, 2], [4, 5]):
            at = order.index(chain[0])
            assert order[at : at + len(chain)] == chain
        seen.add(tuple(order))
    assert len(seen) > 1


def test_a_samples_documents_are_permuted_but_cut_pieces_stay_at_its_ends():
    lengths = np.array([2, 1, 3, 2, 2])
    tokens = np.repeat(np.arange(5), lengths)  # each document's tokens are its number
    order = EpochOrder(starts=np.array([0]), samples=np.array([0]), shuffle_seed=7, epoch=0)
    shuffled_orders = set()
    for sample in range(10):
        new_tokens, new_lengths = shuffle_documents(tokens, lengths, order, sample, (True, True))
        documents = [int(d) for d in new_tokens[np.cumsum(new_lengths) - 1]]
        assert documents[0] == 0 and documents[-1] == 4  # the cut pieces
        assert sorted(documents) == [0, 1, 2, 3, 4]
        assert np.array_equal(new_lengths, lengths[documents])
        assert np.array_equal(new_tokens, np.repeat(documents, new_lengths))
        shuffled_orders.add(tuple(documents))
    assert len(shuffled_orders) > 1
    corpus = EpochOrder(starts=np.array([0]), samples=np.array([0]), shuffle_seed=None, epoch=0)
    assert shuffle_documents(tokens, lengths, corpus, 0, (False, False))[0] is tokens


def test_a_token_range_of_the_epoch_is_cut_into_its_samples_pieces():
    order = EpochOrder(epoch=0, samples=np.array([2, 0, 1]), starts=np.array([0, 5, 8, 12]),
                       shuffle_seed=None)  # fmt: skip
    assert list(order.pieces(3, 10)) == [(2, 3, 5), (0, 0, 3), (1, 0, 2)]
    assert list(order.pieces(5, 8)) == [(0, 0, 3)]
