"""vllm-ascend's reader of ``profile_table.csv``, re-implemented for the export tests (not
a test module).

Source: ``BudgetRefiner`` in ``vllm_ascend/core/scheduler_dynamic_batch.py`` of
vllm-ascend **v0.23.0** (github.com/vllm-project/vllm-ascend, tag v0.23.0; the file is
gone from v0.24.0rc1 on, removed by PR #11933). What is kept on purpose, because it
decides which budget a batch gets:

* the lookup keeps, per ``(ctx_len, d_num)`` group, the ``chunk_size`` of the first row
  with the largest ``chunk_size`` among rows with ``cost <= slo_limit``; a group with no
  such row adds nothing, not even its keys;
* the keys live in Python ``set`` objects (``set(sorted(...))`` does not sort a set) and
  ``_align_key`` returns the *first key in iteration order* that is ``>= value``;
* no aligned key gives the default budget, and so does an aligned pair without a row
  ("Table miss"): the default is vLLM's ``max_num_batched_tokens``;
* ``refine_budget`` looks a batch up at its number of decodes and their mean
  ``num_tokens_with_spec`` (a float), and leaves a batch with no decodes alone.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd


class BudgetRefiner:
    """The v0.23.0 reader, with the table's path and the default budget as arguments."""

    def __init__(self, table_file: str | Path, slo_limit: float, default_budget: int) -> None:
        assert slo_limit > 0  # its `enabled`
        self.default_budget = default_budget
        self.lookup: dict[tuple[int, int], int] = {}
        self.context_keys: set[int] = set()
        self.dnum_keys: set[int] = set()
        self.misses = 0
        df = pd.read_csv(table_file)
        for (ctx_len, d_num), group in df.groupby(["ctx_len", "d_num"]):
            valid = group[group["cost"] <= slo_limit]
            if not valid.empty:
                max_row = valid.loc[valid["chunk_size"].idxmax()]
                assert isinstance(ctx_len, int), "ctx_len must be an integer"
                assert isinstance(d_num, int), "d_num must be an integer"
                self.lookup[(ctx_len, d_num)] = int(max_row["chunk_size"])
                self.context_keys.add(ctx_len)
                self.dnum_keys.add(d_num)
        self.context_keys = set(sorted(self.context_keys))
        self.dnum_keys = set(sorted(self.dnum_keys))

    @staticmethod
    def align_key(value: float, valid_keys: set[int]) -> int | None:
        for k in valid_keys:
            if k >= value:
                return k
        return None

    def max_budget(self, num_decode_tokens: float, num_decode: int) -> int:
        """``_get_max_budget``: the budget of ``num_decode`` decodes of mean context
        ``num_decode_tokens``."""
        aligned_ctx = self.align_key(num_decode_tokens, self.context_keys)
        aligned_dnum = self.align_key(num_decode, self.dnum_keys)
        if aligned_ctx is None or aligned_dnum is None:
            return self.default_budget
        budget = self.lookup.get((aligned_ctx, aligned_dnum), None)
        if budget is None:
            self.misses += 1  # its logger.warning("Table miss ...")
            budget = self.default_budget
        return budget

    def refine_budget(self, contexts: list[int], budget: int) -> int:
        """``refine_budget`` for running decodes of these ``num_tokens_with_spec``."""
        num_decode = len(contexts)
        if num_decode <= 0:
            return budget
        return self.max_budget(sum(contexts) / num_decode, num_decode)
