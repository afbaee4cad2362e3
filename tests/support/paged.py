"""Paged KV caches for the paged attention tests."""

import numpy as np


def fill_unwritten_slots(cache, table, seq_lens, value=np.nan):
    """Every slot of ``cache`` ([num_pages, page_size, H_kv, D]) past each sequence's keys in its pages (the last
    page's tail and the table's pages it does not reach) set to ``value``: memory nobody wrote."""
    num_pages, page_size, kv_heads, head_dim = cache.shape
    for b, length in enumerate(seq_lens):
        rows = cache[table[b]].reshape(-1, kv_heads, head_dim)
        rows[length:] = value
        cache[table[b]] = rows.reshape(-1, page_size, kv_heads, head_dim)
