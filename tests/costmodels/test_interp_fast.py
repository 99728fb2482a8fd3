"""The compiled interpolation (:mod:`servecal.costmodels.interp`) and ``max_chunk``'s
search against slow references written out plainly here: the documented arithmetic
order bit for bit, textbook multilinear interpolation to rounding, brute-force
``max_chunk``."""

from __future__ import annotations

import itertools
import math
from bisect import bisect_right

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servecal.costmodels import table as table_module
from servecal.costmodels.grid import make_monotone, uncross
from servecal.costmodels.table import AXES, CostTable, Margin

#: (the ``search`` fixture only sets a module constant: safe to share between inputs)
HEALTH = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
FAST = settings(max_examples=60, deadline=None, suppress_health_check=HEALTH)


def position(axis: list[float], x: float) -> tuple[int, int, float]:
    """(low index, high index, fraction) of ``x`` on ``axis``, clamped to its edges."""
    if x <= axis[0]:
        return 0, 0, 0.0
    if x >= axis[-1]:
        return len(axis) - 1, len(axis) - 1, 0.0
    i = bisect_right(axis, x) - 1
    if x == axis[i]:
        return i, i, 0.0
    return i, i + 1, (x - axis[i]) / (axis[i + 1] - axis[i])


def reference(table: CostTable, grid: np.ndarray, n: float, c: float, ctx: float, p: float):
    """The module's three steps, written as loops over index tuples (no caches, no flat
    offsets): n_decode blend of each row, chunk interpolation, weighted sum over the
    (ctx, prefix) sides, ctx outer."""
    axes = [[float(v) for v in table.axes[a]] for a in AXES]
    (n0, n1, tn), (c0, c1, tc), (p0, p1, tp), (k0, k1, tk) = (
        position(axes[0], n), position(axes[1], ctx), position(axes[2], p), position(axes[3], c)
    )  # fmt: skip
    n_sides = [(n0, 1.0)] if tn == 0.0 else [(n0, 1.0 - tn), (n1, tn)]
    c_sides = [(c0, 1.0)] if tc == 0.0 else [(c0, 1.0 - tc), (c1, tc)]
    p_sides = [(p0, 1.0)] if tp == 0.0 else [(p0, 1.0 - tp), (p1, tp)]
    total = 0.0
    for (ci, cw), (pi, pw) in itertools.product(c_sides, p_sides):
        lo = hi = 0.0
        for ni, nw in n_sides:
            lo += nw * float(grid[ni, ci, pi, k0])
            hi += nw * float(grid[ni, ci, pi, k1])
        total += cw * pw * (lo if tk == 0.0 else lo + tk * (hi - lo))
    return total


def textbook(table: CostTable, grid: np.ndarray, n: float, c: float, ctx: float, p: float):
    """Multilinear interpolation as a weighted sum of the box's 16 corners (exact sum)."""
    axes = [[float(v) for v in table.axes[a]] for a in AXES]
    sides = [position(a, x) for a, x in zip(axes, (n, ctx, p, c), strict=True)]
    terms = []
    for bits in itertools.product((0, 1), repeat=4):
        weight, index = 1.0, []
        for (lo, hi, t), b in zip(sides, bits, strict=True):
            weight *= t if b else 1.0 - t
            index.append(hi if b else lo)
        terms.append(weight * float(grid[tuple(index)]))
    return math.fsum(terms)


@st.composite
def tables(draw: st.DrawFn) -> CostTable:
    axes = {
        "n_decode": sorted(draw(st.sets(st.integers(0, 300), min_size=1, max_size=5))),
        "ctx": sorted(draw(st.sets(st.integers(0, 8192), min_size=1, max_size=4))),
        "prefix": sorted(draw(st.sets(st.integers(0, 4096), min_size=1, max_size=3))),
        "chunk": sorted(draw(st.sets(st.integers(0, 4096), min_size=1, max_size=9))),
    }
    shape = tuple(len(axes[a]) for a in AXES)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    p50 = make_monotone(rng.gamma(2.0, 2.0, shape))
    p99 = uncross({0.5: p50, 0.99: make_monotone(p50 + rng.gamma(1.0, 1.0, shape))})[0.99]
    rho = draw(st.floats(-0.3, 0.5, allow_nan=False))
    return CostTable(axes, {0.5: p50, 0.99: p99}, margin=Margin(0.99, rho, 0.99, None, 1, 100))


def engine_like_queries(table: CostTable, data: st.DataObject, count: int) -> list[tuple]:
    """Queries the way the engine and the vLLM plug-in ask: a few n_decode and prefix
    values that repeat (warm caches), a float mean context that moves every time."""
    top = {a: max(v) for a, v in table.axes.items()}
    ns = data.draw(st.lists(st.integers(-1, top["n_decode"] + 3), min_size=1, max_size=3))
    prefixes = data.draw(st.lists(st.integers(0, top["prefix"] + 3), min_size=1, max_size=3))
    ctxs = data.draw(
        st.lists(st.floats(0, top["ctx"] + 10, allow_nan=False), min_size=count, max_size=count)
    )
    return [(ns[i % len(ns)], ctx, prefixes[i % len(prefixes)]) for i, ctx in enumerate(ctxs)]


@FAST
@given(table=tables(), data=st.data())
def test_scalar_path_is_the_documented_arithmetic_bit_for_bit(table, data, search) -> None:
    chunks = data.draw(st.lists(st.integers(0, max(table.axes["chunk"]) + 50), min_size=8))
    for (n, ctx, p), c in zip(engine_like_queries(table, data, len(chunks)), chunks, strict=True):
        for q in table.quantiles:
            grid = table.values(q)
            got = table.predict(n, c, ctx, p, q=q)
            assert got == reference(table, grid, n, c, ctx, p)
            assert got == pytest.approx(textbook(table, grid, n, c, ctx, p), rel=1e-12, abs=1e-12)
        assert table.margin(n, c, ctx, p) == table.margin_info.rho * table.predict(
            n, c, ctx, p, q=0.99
        )
    # the vectorised path answers the same, element for element
    n, ctx, p = (
        np.array(v) for v in zip(*engine_like_queries(table, data, len(chunks)), strict=True)
    )
    for q in table.quantiles:
        many = table.predict(n, np.array(chunks), ctx, p, q=q)
        assert many.tolist() == [
            table.predict(*args, q=q)
            for args in zip(n.tolist(), chunks, ctx.tolist(), p.tolist(), strict=True)
        ]


@pytest.fixture(params=["plain", "hot"])
def search(request, monkeypatch) -> str:
    """Either scalar path: plain Python, or compiled (hot) from the first query."""
    if request.param == "hot":
        monkeypatch.setattr(table_module, "HOT_CALLS", 1)
    return request.param


@FAST
@given(table=tables(), data=st.data())
def test_max_chunk_equals_brute_force_on_the_reference(table, data, search) -> None:
    q, use_margin = data.draw(st.sampled_from([(0.5, False), (0.99, False), (0.99, True),
                                               (0.5, True)]))  # fmt: skip
    # (P50 + a negative margin of the P99 can fall as the chunk grows: still the
    # largest chunk that fits, found from the limit down)
    rho = table.margin_info.rho

    def cost(n: float, c: int, ctx: float, p: float) -> float:
        t = reference(table, table.values(q), n, c, ctx, p)
        if not use_margin:
            return t
        return t + rho * reference(table, table.values(0.99), n, c, ctx, p)

    limit = data.draw(st.integers(0, max(table.axes["chunk"]) + 40))
    for n, ctx, p in engine_like_queries(table, data, 4):
        costs = [cost(n, c, ctx, p) for c in range(0, limit + 1)]
        budget = data.draw(st.one_of(st.sampled_from(costs), st.floats(0.0, max(costs) * 1.1)))
        brute = max((c for c in range(1, limit + 1) if costs[c] <= budget), default=0)
        assert table.max_chunk(n, ctx, p, budget, limit, q=q, use_margin=use_margin) == brute


def edge_values(axis: list[int], rng: np.random.Generator, integer: bool) -> list[float]:
    """Query coordinates at and around an axis: below and above it (clamped), on each
    grid value, a hair either side of one, and between values."""
    lo, hi = axis[0], axis[-1]
    values = [lo - 7, hi + 9, *axis]
    if not integer:
        values += [math.nextafter(float(v), -math.inf) for v in axis[:2]]
        values += [math.nextafter(float(v), math.inf) for v in axis[-2:]]
    values += (rng.uniform(lo, hi, 4) if not integer else rng.integers(lo, hi + 1, 4)).tolist()
    return [max(v, 0) if integer else v for v in values]


@settings(max_examples=40, deadline=None, suppress_health_check=HEALTH)
@given(table=tables(), data=st.data())
def test_max_chunk_is_the_largest_chunk_the_vectorised_predict_allows(table, data, search) -> None:
    """max_chunk's search (the limit, then a bisection, or from the limit down where
    the bound can fall) against a brute force over the vectorised ``predict`` (+
    ``margin``) of every chunk up to the limit, under either between rule: clamped
    and on-grid coordinates, budgets exactly on a chunk's bound and one ulp either
    side of it, zero, negative, infinite and NaN budgets; queries in a shuffled
    sequence, and again on a fresh copy of the table."""
    q, use_margin = data.draw(st.sampled_from([(0.5, False), (0.99, False), (0.99, True),
                                               (0.5, True)]))  # fmt: skip
    table = table.with_between(data.draw(st.sampled_from(["linear", "round_up"])))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    ax = table.axes
    ns = edge_values(list(ax["n_decode"]), rng, integer=True)
    ctxs = edge_values(list(ax["ctx"]), rng, integer=False)
    prefixes = edge_values(list(ax["prefix"]), rng, integer=True)
    top = max(ax["chunk"]) + 40
    queries = []
    for _ in range(12):
        n, ctx, p = (int(rng.choice(ns)), float(rng.choice(ctxs)), int(rng.choice(prefixes)))
        limit = int(rng.integers(0, top + 1))
        chunks = np.arange(limit + 1)
        costs = table.predict(np.full(limit + 1, n), chunks, np.full(limit + 1, ctx),
                              np.full(limit + 1, p), q=q)  # fmt: skip
        if use_margin:
            costs = costs + table.margin(np.full(limit + 1, n), chunks, np.full(limit + 1, ctx),
                                         np.full(limit + 1, p))  # fmt: skip
        on = float(costs[int(rng.integers(0, limit + 1))])
        for budget in (on, math.nextafter(on, -math.inf), math.nextafter(on, math.inf),
                       float(rng.uniform(0, 1.2 * costs.max() + 1e-9)), 0.0, -1.0, math.inf,
                       math.nan):  # fmt: skip
            fits = np.flatnonzero(costs[1:] <= budget)
            queries.append(((n, ctx, p, budget, limit), int(fits[-1]) + 1 if fits.size else 0))
    order = rng.permutation(len(queries))
    fresh = table.with_between(table.between)
    for i in order:
        args, brute = queries[i]
        assert table.max_chunk(*args, q=q, use_margin=use_margin) == brute, args
    for args, brute in queries:
        assert fresh.max_chunk(*args, q=q, use_margin=use_margin) == brute, args


def test_max_chunk_counts_a_clamped_query_once(search) -> None:
    axes = {"n_decode": [1, 16], "ctx": [0, 1024], "prefix": [0, 512], "chunk": [0, 64, 256]}
    grid = make_monotone(np.random.default_rng(2).gamma(2.0, 2.0, (2, 2, 2, 3)))
    table = CostTable(axes, {0.5: grid})
    table.max_chunk(8, 100.0, 0, 1e9, 200, q=0.5, use_margin=False)  # inside, limit inside
    assert table.out_of_domain == 0
    for args in ((40, 100.0, 0), (8, 2000.0, 0), (8, 100.0, 600), (0, 100.0, 0)):
        before = table.out_of_domain
        table.max_chunk(*args, 5.0, 200, q=0.5, use_margin=False)
        assert table.out_of_domain == before + 1, args
    before = table.out_of_domain
    assert table.max_chunk(8, 100.0, 0, 1e9, 300, q=0.5, use_margin=False) == 300  # past the top
    assert table.out_of_domain == before + 1


def _brute_max_chunk(table: CostTable, n, ctx, p, budget, limit, q=0.5, use_margin=False) -> int:
    """The largest chunk in [1, limit] whose vectorised predict (+ margin) fits, else 0."""
    chunks = np.arange(1, limit + 1)
    full = np.full(limit, 1.0)
    costs = table.predict(full * n, chunks, full * ctx, full * p, q=q)
    if use_margin:
        costs = costs + table.margin(full * n, chunks, full * ctx, full * p)
    fits = np.flatnonzero(costs <= budget)
    return int(fits[-1]) + 1 if fits.size else 0


def _small_table() -> CostTable:
    axes = {"n_decode": [0, 16, 64], "ctx": [0, 1024], "prefix": [0, 512], "chunk": [0, 64, 256]}
    rng = np.random.default_rng(3)
    p50 = make_monotone(rng.gamma(2.0, 2.0, (3, 2, 2, 3)))
    return CostTable(axes, {0.5: p50, 0.99: p50 * 1.5}, Margin(0.99, 0.1, 0.99, 0.99, 10, 100))


def test_planning_on_p50_plus_the_p99_margin_takes_numpy_scalars_as_python_numbers() -> None:
    """The two-grid search (P50 + the P99's margin) and the round-up rule compute with
    the Python numbers a float32 n_decode or prefix holds, as predict does."""
    fresh = _small_table()
    rng = np.random.default_rng(11)
    for table in (_small_table(), _small_table().with_between("round_up")):
        check = fresh if table.between == "linear" else _small_table().with_between("round_up")
        for n32, p32 in zip(rng.uniform(1, 60, 40).astype(np.float32),
                            rng.uniform(1, 500, 40).astype(np.float32), strict=True):  # fmt: skip
            n, prefix, c = float(n32), float(p32), int(rng.integers(70, 250))
            bound = float(check.predict(n, c, 300.7, prefix) + check.margin(n, c, 300.7, prefix))
            got = table.max_chunk(n32, 300.7, p32, bound, 256, 0.5, True)
            assert got == _brute_max_chunk(check, n, 300.7, prefix, bound, 256, 0.5, True)


def test_max_chunk_takes_numpy_scalars_as_the_python_numbers_they_hold() -> None:
    """numpy scalars answer as the Python numbers of the same value: a float32 context
    or prefix is not computed with in single precision (budgets exactly on a chunk's
    bound tell),
    and an n_decode first asked as a float32 does not leave a cache entry that answers
    a nearby Python float wrongly."""
    table, fresh = _small_table(), _small_table()
    rng = np.random.default_rng(5)
    for ctx32 in rng.uniform(1.0, 1023.0, 40).astype(np.float32):
        ctx, c = float(ctx32), int(rng.integers(70, 250))
        bound = float(fresh.predict(5, c, ctx, 100, q=0.99) + fresh.margin(5, c, ctx, 100))
        got = table.max_chunk(np.int64(5), ctx32, np.int64(100), np.float64(bound),
                              np.int64(256), np.float64(0.99), np.bool_(True))  # fmt: skip
        assert got == _brute_max_chunk(fresh, 5, ctx, 100, bound, 256, 0.99, True) >= c
    for prefix32 in rng.uniform(1.0, 500.0, 40).astype(np.float32):  # a later chunk's
        prefix, c = float(prefix32), int(rng.integers(70, 250))
        bound = float(
            fresh.predict(5, c, 300.7, prefix, q=0.99) + fresh.margin(5, c, 300.7, prefix)
        )
        got = table.max_chunk(5, 300.7, prefix32, bound, 256, 0.99, True)
        assert got == _brute_max_chunk(fresh, 5, 300.7, prefix, bound, 256, 0.99, True) >= c
    n32 = np.float32(5.3)
    budget = float(table.predict(float(n32), 150, 300.7, 100, q=0.99)) * 1.1
    assert table.max_chunk(n32, 300.7, 100, np.float32(budget), 256, 0.99, True) == (
        _brute_max_chunk(fresh, float(n32), 300.7, 100, float(np.float32(budget)), 256, 0.99,
                         True)
    )  # fmt: skip
    # 5.3 is not float32(5.3): its own entry, its own answer
    budget = float(table.predict(5.3, 150, 300.7, 100, q=0.99)) * 1.1
    assert table.max_chunk(5.3, 300.7, 100, budget, 256, 0.99, True) == _brute_max_chunk(
        fresh, 5.3, 300.7, 100, budget, 256, q=0.99, use_margin=True
    )


def test_read_only_and_broadcast_arrays_answer_as_scalars_do() -> None:
    """Arrays numpy hands out read-only (a pandas column's values, np.broadcast_to)
    take the same compiled routine as writable ones, element for element."""
    table = _small_table()
    n = np.array([0.0, 5.0, 16.0, 70.0])
    n.flags.writeable = False
    chunk = np.broadcast_to(np.array(100), n.shape)
    got = table.predict(n, chunk, 300.7, 100, q=0.99)
    assert got.tolist() == [table.predict(x, 100, 300.7, 100, q=0.99) for x in n.tolist()]
    assert table.lookup(0.5, n, chunk)[0].tolist() == [table.predict(x, 100) for x in n.tolist()]


def test_a_table_turns_hot_after_its_calls_and_answers_and_counts_the_same(monkeypatch) -> None:
    """The switch to the compiled search (``HOT_CALLS``) changes no answer and no
    count, pickled before or after it."""
    import pickle

    monkeypatch.setattr(table_module, "HOT_CALLS", 7)
    plain, hot = _small_table(), _small_table()
    queries = [(n, ctx, p, budget, limit) for n in (0, 9, 70) for ctx in (0.0, 600.0, 2000.0)
               for p in (0, 300) for budget in (1.0, 6.0, 40.0)
               for limit in (1, 100, 300)]  # fmt: skip
    for i, args in enumerate(queries):
        if i == 3:
            hot = pickle.loads(pickle.dumps(hot))  # before the switch
        assert hot.max_chunk(*args) == _brute_max_chunk(plain, *args, q=0.5, use_margin=True)
    assert hot._hot is not None
    for n, ctx, p, _, limit in queries:  # the compiled scalar query: the arrays' answers
        want, _ = plain.lookup(0.99, [n], [limit], [ctx], [p])
        assert hot.predict(n, limit, ctx, p, q=0.99) == float(want[0])
    again = pickle.loads(pickle.dumps(hot))  # after it: still hot, the counts kept
    assert again._hot is not None and again.out_of_domain == hot.out_of_domain > 0
    counted = _small_table()  # (plain's counts include the brute force's predictions)
    for args in queries:
        counted.max_chunk(*args)
    for n, ctx, p, _, limit in queries:
        counted.predict(n, limit, ctx, p, q=0.99)
    assert hot.out_of_domain == counted.out_of_domain
    assert hot.beyond_grid == counted.beyond_grid
