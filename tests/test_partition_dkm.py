"""DkM-SKS family of planners (hash, kop, sop, dkm): src/skpubsub/partition/dkm/."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

from skpubsub.core.config import Space
from skpubsub.io.events import Pub, Sub
from skpubsub.io.validate import Gate
from skpubsub.partition.dkm import (PLANNERS, SampleIndex, eq1_cost, hash_worker, most_overlap, plan_dkm, plan_hash,
                                    plan_kop, plan_sop)
from skpubsub.partition.stats import Statistics

MS = (1, 2, 3, 5)


# ---------------------------------------------------------------------------
# builders
# ---------------------------------------------------------------------------


def obj(i, x, y, *kws):
    return Pub(seq=i, id=f"o{i}", t=0, x=float(x), y=float(y), keywords=tuple(kws))


def knn(sid, x, y, k, *kws, all=False):
    return Sub(seq=0, id=sid, t=0, kind="knn", keywords=tuple(kws), match_all=all, x=float(x), y=float(y), k=k)


def rng_sub(sid, rect, *kws, all=True):
    return Sub(seq=0, id=sid, t=0, kind="range", keywords=tuple(kws), match_all=all, rect=tuple(map(float, rect)))


def topk(sid, x, y, k, alpha, *kws, weights=None):
    return Sub(seq=0, id=sid, t=0, kind="topk", keywords=tuple(kws), x=float(x), y=float(y), k=k, alpha=alpha,
               weights=weights)


def stats_of(objs, **kw):
    return Statistics.from_objects(objs, **kw)


VOCAB = [f"w{i}" for i in range(12)]


def synthetic(seed=0, n_obj=400, n_sub=240):
    """Clustered objects (Zipf-ish keywords) and a mix of knn any/all, topk, range subscriptions."""
    rng = np.random.default_rng(seed)
    centres = np.array([[-120, 40], [10, 50], [120, 30], [-60, -20]], dtype=float)
    p = 1.0 / np.arange(1, len(VOCAB) + 1)
    p /= p.sum()
    objs = []
    for i in range(n_obj):
        c = centres[rng.integers(len(centres))]
        x, y = np.clip(c + rng.normal(0, 6, 2), [-180, -90], [180, 90])
        kws = sorted(set(rng.choice(VOCAB, size=rng.integers(1, 4), p=p).tolist()))
        objs.append(obj(i, x, y, *kws))
    subs = []
    for j in range(n_sub):
        c = centres[rng.integers(len(centres))]
        x, y = np.clip(c + rng.normal(0, 8, 2), [-180, -90], [180, 90])
        kws = sorted(set(rng.choice(VOCAB + ["unseen"], size=rng.integers(1, 4)).tolist()))
        kind = j % 4
        if kind == 0:
            subs.append(knn(f"s{j}", x, y, int(rng.integers(1, 6)), *kws))
        elif kind == 1:
            subs.append(knn(f"s{j}", x, y, int(rng.integers(1, 4)), *kws, all=True))
        elif kind == 2:
            subs.append(topk(f"s{j}", x, y, int(rng.integers(1, 6)), float(rng.uniform(0, 1)), *kws))
        else:
            subs.append(rng_sub(j, (x - 3, y - 2, x + 3, y + 2), *kws, all=bool(j % 8 == 3)))
    return objs, subs


@pytest.fixture(scope="module")
def world():
    objs, subs = synthetic()
    return stats_of(objs), subs


def brute_count(stats, rect, keyword=None):
    x1, y1, x2, y2 = rect
    return sum(1 for x, y, kws in zip(stats.sample_x, stats.sample_y, stats.sample_kw)
               if x1 <= x <= x2 and y1 <= y <= y2 and (keyword is None or keyword in kws))


def brute_region(stats, s):
    """R(s) by brute force: rectangle of the kNN ball / top-k bound, or the range rectangle; clipped."""
    sp = stats.space
    if s.kind == "range":
        r = s.rect
    else:
        if s.kind == "knn":
            ds = sorted(math.dist((s.x, s.y), (x, y)) for x, y, kws in zip(stats.sample_x, stats.sample_y, stats.sample_kw)
                        if (set(s.keywords) <= set(kws) if s.match_all else set(s.keywords) & set(kws)))
            rad = ds[s.k - 1] if len(ds) >= s.k else math.inf
        else:
            rad = brute_topk_radius(stats, s)
        r = (s.x - rad, s.y - rad, s.x + rad, s.y + rad)
    return (max(r[0], sp.x1), max(r[1], sp.y1), min(r[2], sp.x2), min(r[3], sp.y2))


def brute_topk_radius(stats, s):
    md = stats.space.maxdist
    ws = dict(zip(s.keywords, s.weights or (1.0,) * len(s.keywords)))
    norm = math.sqrt(sum(v * v for v in ws.values()))
    scores = []
    for x, y, kws in zip(stats.sample_x, stats.sample_y, stats.sample_kw):
        kws = set(kws)
        shared = kws & set(ws)
        if not shared:
            continue
        tsim = sum(ws[w] / norm / math.sqrt(len(kws)) for w in shared)
        ssim = max(0.0, 1 - math.dist((s.x, s.y), (x, y)) / md)
        scores.append(s.alpha * ssim + (1 - s.alpha) * tsim)
    if s.alpha == 0 or len(scores) < s.k:
        return math.inf
    kscore = sorted(scores, reverse=True)[s.k - 1]
    smin = (kscore - (1 - s.alpha)) / s.alpha
    return math.inf if smin <= 0 else md * (1 - smin)


def brute_eq5(stats, s, R, floor):
    ps = [brute_count(stats, R, w) / len(stats.sample_x) for w in s.keywords]
    c = min(ps) if (s.match_all and s.kind != "topk") else sum(ps)
    return max(c, floor)


# ---------------------------------------------------------------------------
# every planner: a partition of the subscriptions, deterministic
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PLANNERS))
@pytest.mark.parametrize("m", MS)
def test_every_subscription_on_exactly_one_worker(world, name, m):
    stats, subs = world
    plan = PLANNERS[name](subs, stats, m)
    assert plan.m == m
    before = plan.loads()
    assert len(before) == m
    seen = {}
    for s in subs:
        ws = plan.assign(s)
        assert isinstance(ws, tuple) and len(ws) == 1 and ws[0] in range(m), (s.id, ws)
        seen[s.id] = ws[0]
    assert len(seen) == len(subs)
    assert plan.loads() == before  # initial subscriptions were planned, not placed as new ones
    if m > 1 and name != "hash":
        assert len(set(seen.values())) == m  # every worker used
    if name in ("sop", "dkm"):
        flat = [sid for g in plan.groups for sid in g]
        assert sorted(map(str, flat)) == sorted(str(s.id) for s in subs)  # disjoint subsets covering S


@pytest.mark.parametrize("name", sorted(PLANNERS))
def test_deterministic(world, name):
    stats, subs = world
    a, b = PLANNERS[name](subs, stats, 3), PLANNERS[name](subs, stats, 3)
    assert [a.assign(s) for s in subs] == [b.assign(s) for s in subs]
    assert a.loads() == b.loads()
    new = knn("late", 10, 50, 3, "w0", "w5")
    assert a.assign(new) == b.assign(new) and a.loads() == b.loads()


@pytest.mark.parametrize("name", sorted(PLANNERS))
def test_loads_sum_to_total_cost_and_remove(world, name):
    stats, subs = world
    plan = PLANNERS[name](subs, stats, 3)
    total = plan.describe()["total_cost"]
    assert sum(plan.loads()) == pytest.approx(total, rel=1e-9)
    floor = 1.0 / (stats.n + 1)
    if name == "hash":
        expected = float(len(subs))
    elif name == "kop":
        expected = math.fsum(eq1_cost(s, stats, floor) for s in subs)
    else:  # recompute Eq. (3) / Eq. (6) per subset by brute force
        by_id = {s.id: s for s in subs}
        expected = 0.0
        for g in plan.groups:
            members = [by_id[sid] for sid in g]
            rs = [brute_region(stats, s) for s in members]
            R = (min(r[0] for r in rs), min(r[1] for r in rs), max(r[2] for r in rs), max(r[3] for r in rs))
            if name == "sop":
                expected += max(brute_count(stats, R) / len(stats.sample_x), floor) * len(members)
            else:
                expected += sum(brute_eq5(stats, s, R, floor) for s in members)
    assert total == pytest.approx(expected, rel=1e-9)
    victim = subs[5]
    w = plan.assign(victim)[0]
    loads = plan.loads()
    plan.remove(victim.id)
    after = plan.loads()
    assert after[w] < loads[w]
    assert all(after[j] == loads[j] for j in range(3) if j != w)
    plan.remove(victim.id)  # unknown now: no change
    assert plan.loads() == after


def test_bad_arguments(world):
    stats, subs = world
    for f in PLANNERS.values():
        with pytest.raises(ValueError):
            f(subs, stats, 0)
    with pytest.raises(TypeError):
        plan_kop(subs, stats, 2, thetaa=3)
    with pytest.raises(ValueError):
        plan_sop(subs, stats, 2, theta=0)
    with pytest.raises(ValueError):
        plan_dkm(subs, stats, 2, gamma2=-1)


def test_empty_inputs():
    stats = stats_of([])
    subs = [knn("a", 0, 0, 2, "x"), rng_sub("b", (0, 0, 1, 1), "x")]
    for f in PLANNERS.values():
        for ss in ([], subs):
            plan = f(ss, stats, 2)
            for s in ss:
                assert plan.assign(s)[0] in (0, 1)
            assert plan.assign(knn("new", 1, 1, 1, "y"))[0] in (0, 1)


# ---------------------------------------------------------------------------
# hash: DSkype Eq. (14)
# ---------------------------------------------------------------------------


IDS = ["s0", "s1", "abc", "ünï", 0, 1, 17, -5, 2**40]


def test_hash_is_crc32_of_repr():
    for sid in IDS:
        for m in MS:
            assert hash_worker(sid, m) == zlib.crc32(repr(sid).encode()) % m
    assert hash_worker("s1", 1000) == 35  # pinned: crc32(b"'s1'") % 1000


def test_hash_stable_across_processes():
    code = ("from skpubsub.partition.dkm import hash_worker\n"
            f"print([hash_worker(i, 7) for i in {IDS!r}])")
    outs = set()
    for seed in ("1", "2", "random"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        outs.add(r.stdout.strip())
    assert outs == {str([hash_worker(i, 7) for i in IDS])}


def test_hash_plan_and_new_subscription(world):
    stats, subs = world
    plan = plan_hash(subs, stats, 5)
    for s in subs:
        assert plan.assign(s) == (hash_worker(s.id, 5),)
    assert plan.loads() == [float(sum(1 for s in subs if hash_worker(s.id, 5) == w)) for w in range(5)]
    new = knn("brand-new", 0, 0, 1, "w1")
    w = hash_worker("brand-new", 5)
    before = plan.loads()
    assert plan.assign(new) == (w,)
    assert plan.loads()[w] == before[w] + 1


# ---------------------------------------------------------------------------
# kop: Eq. (1), Algorithm 1
# ---------------------------------------------------------------------------


def eq1_world():
    # 5 objects: P(a) = 2/5, P(b) = 2/5, P(c) = 2/5, P(d) = 1/5
    return stats_of([obj(1, 0, 0, "a", "b"), obj(2, 1, 1, "a"), obj(3, 2, 2, "c"), obj(4, 3, 3, "b", "c"),
                     obj(5, 4, 4, "d")])


def test_eq1_by_hand():
    st = eq1_world()
    assert eq1_cost(knn(1, 0, 0, 1, "a", "c"), st) == pytest.approx(2 / 5 + 2 / 5)
    assert eq1_cost(knn(2, 0, 0, 1, "d"), st) == pytest.approx(1 / 5)
    assert eq1_cost(topk(3, 0, 0, 1, 0.5, "a", "b", "d"), st) == pytest.approx(2 / 5 + 2 / 5 + 1 / 5)
    assert eq1_cost(rng_sub(4, (0, 0, 1, 1), "a", "b", "c", all=False), st) == pytest.approx(6 / 5)
    # match all: the rarest keyword (an AND subscription is touched only through it)
    assert eq1_cost(knn(5, 0, 0, 1, "a", "d", all=True), st) == pytest.approx(1 / 5)
    # a keyword absent from O_init has P = 0; the floor applies
    assert eq1_cost(knn(6, 0, 0, 1, "zzz"), st) == 0.0
    assert eq1_cost(knn(6, 0, 0, 1, "zzz"), st, 1 / 6) == pytest.approx(1 / 6)
    subs = [knn(1, 0, 0, 1, "a", "c"), knn(2, 0, 0, 1, "d"), knn(6, 0, 0, 1, "zzz")]
    assert plan_kop(subs, st, 1).loads() == [pytest.approx(4 / 5 + 1 / 5 + 1 / 6)]
    assert plan_kop(subs, st, 1, min_cost=0).loads() == [pytest.approx(1.0)]


def lpt_world(counts):
    """One keyword per object: subscription j on keyword kj costs counts[j]/N under Eq. (1)."""
    objs, i = [], 0
    for j, c in enumerate(counts):
        for _ in range(c):
            objs.append(obj(i, i % 50, 0, f"k{j}"))
            i += 1
    subs = [knn(f"s{j}", 0, 0, 1, f"k{j}") for j in range(len(counts))]
    return stats_of(objs), subs, i


def test_lpt_is_algorithm_1_not_optimal():
    # Graham's example: LPT gives 7 where 6 is optimal ({3,3} | {2,2,2})
    st, subs, n = lpt_world([3, 3, 2, 2, 2])
    plan = plan_kop(subs, st, 2)
    assert sorted(plan.loads()) == [pytest.approx(5 / n), pytest.approx(7 / n)]


@pytest.mark.parametrize("counts,m", [([7, 6, 5, 4, 3, 3, 2], 3), ([9, 8, 2, 2, 2, 1, 1], 2), ([5, 5, 4, 4, 3, 3, 3], 3)])
def test_lpt_bound_exhaustive(counts, m):
    st, subs, n = lpt_world(counts)
    plan = plan_kop(subs, st, m)
    where = {s.id: plan.assign(s)[0] for s in subs}
    # the m costliest subscriptions go to distinct workers
    top = sorted(range(len(counts)), key=lambda j: -counts[j])[:m]
    assert len({where[f"s{j}"] for j in top}) == m
    costs = [c / n for c in counts]
    opt = min(max(sum(c for c, w in zip(costs, assign) if w == k) for k in range(m))
              for assign in itertools.product(range(m), repeat=len(costs)))
    got = max(plan.loads())
    assert got <= (4 / 3 - 1 / (3 * m)) * opt + 1e-12
    assert sum(plan.loads()) == pytest.approx(sum(costs))


def test_kop_new_subscription_goes_to_least_loaded_with_eq1_cost():
    st, subs, n = lpt_world([3, 3, 2, 2, 2])
    plan = plan_kop(subs, st, 2)
    before = plan.loads()
    light = min(range(2), key=lambda w: (before[w], w))
    new = knn("new", 0, 0, 1, "k0", "k2")
    assert plan.assign(new) == (light,)
    assert plan.loads()[light] == pytest.approx(before[light] + 3 / n + 2 / n)
    # now the other worker is the lighter: 5/12+5/12 = 10/12 vs 7/12
    new2 = knn("new2", 0, 0, 1, "k4")
    assert plan.assign(new2) == (1 - light,)


# ---------------------------------------------------------------------------
# sample estimates: counts (Eqs. 2, 4), kNN balls, top-k bound
# ---------------------------------------------------------------------------


def test_count_in_matches_brute_force(world):
    stats, _ = world
    ix = SampleIndex(stats)
    rng = np.random.default_rng(3)
    xs = np.asarray(stats.sample_x)
    ys = np.asarray(stats.sample_y)
    rects, kws = [], []
    for q in range(300):
        if q % 3 == 0:  # edges exactly on sample points (closed rectangles)
            a, b = rng.integers(len(xs), size=2)
            rect = (min(xs[a], xs[b]), min(ys[a], ys[b]), max(xs[a], xs[b]), max(ys[a], ys[b]))
        else:
            c = rng.uniform([-180, -90], [180, 90])
            h = rng.uniform(0, 80, 2)
            rect = (c[0] - h[0], c[1] - h[1], c[0] + h[0], c[1] + h[1])
        rects.append(rect)
        kws.append(None if q % 5 == 0 else str(rng.choice(VOCAB + ["unseen"])))
    ids = np.array([ix.ALL if w is None else ix.kw_id(w) for w in kws])
    got = ix.count_in(ids, np.array(rects))
    want = [brute_count(stats, r, w) for r, w in zip(rects, kws)]
    assert got.tolist() == want
    assert sum(want) > 0


def test_knn_and_topk_regions_match_brute_force(world):
    stats, subs = world
    ix = SampleIndex(stats)
    reg = ix.regions(subs)
    n_inf = 0
    for i, s in enumerate(subs):
        want = brute_region(stats, s)
        assert reg.rect[i].tolist() == pytest.approx(list(want), abs=1e-9), s
        n_inf += want == (-180, -90, 180, 90)
    assert 0 < n_inf < len(subs)  # both bounded and unbounded balls occur


def test_knn_ball_by_hand():
    st = stats_of([obj(1, 3, 0, "a"), obj(2, 0, 4, "a", "b"), obj(3, 1, 0, "b"), obj(4, 0, 2, "c"), obj(5, 1, 1, "a", "b")])
    ix = SampleIndex(st)
    a, b, c = ix.kw_id("a"), ix.kw_id("b"), ix.kw_id("c")
    assert ix.knn_radius(0, 0, 1, [a], False) == pytest.approx(math.sqrt(2))
    assert ix.knn_radius(0, 0, 3, [a], False) == pytest.approx(4)
    assert ix.knn_radius(0, 0, 4, [a], False) == math.inf  # fewer than k qualify
    # any: objects counted once even when they carry both keywords: 1 (o3), sqrt2 (o5), 3 (o1), 4 (o2)
    assert ix.knn_radius(0, 0, 3, [a, b], False) == pytest.approx(3)
    assert ix.knn_radius(0, 0, 4, [a, b], False) == pytest.approx(4)
    assert ix.knn_radius(0, 0, 5, [a, b], False) == math.inf
    # all: o5 and o2 carry both a and b
    assert ix.knn_radius(0, 0, 2, [a, b], True) == pytest.approx(4)
    assert ix.knn_radius(0, 0, 1, [a, c], True) == math.inf
    assert ix.knn_radius(0, 0, 1, [a, -1], True) == math.inf
    assert ix.knn_radius(0, 0, 1, [c, -1], False) == pytest.approx(2)


# ---------------------------------------------------------------------------
# sop: Eqs. (2)-(3), quadtree until theta*m subsets
# ---------------------------------------------------------------------------


def clustered(sizes=(30, 30, 30, 40, 40), seed=1):
    rng = np.random.default_rng(seed)
    centres = [(-150, 70), (-140, 60), (100, -40), (20, 10), (21, 11)]
    objs, subs = [], []
    for c, ((cx, cy), n) in enumerate(zip(centres, sizes)):
        for i in range(n):
            x, y = cx + rng.normal(0, 1), cy + rng.normal(0, 1)
            objs.append(obj(len(objs), x, y, "a", f"c{c}"))
            subs.append(knn(f"s{c}-{i}", x + rng.normal(0, 0.5), y + rng.normal(0, 0.5), 2, "a"))
    return stats_of(objs), subs


@pytest.mark.parametrize("theta,m", [(2, 3), (3, 5), (20, 2), (1, 1)])
def test_sop_reaches_theta_m_subspaces(theta, m):
    st, subs = clustered()
    plan = plan_sop(subs, st, m, theta=theta)
    subsets = plan.describe()["subsets"]
    assert len(subsets) >= theta * m
    assert len(subsets) == len(plan.groups)
    by_id = {s.id: s for s in subs}
    floor = 1 / (st.n + 1)
    for info, g in zip(subsets, plan.groups):
        x1, y1, x2, y2 = info["r"]
        assert info["size"] == len(g) > 0
        for sid in g:  # members lie in their subspace and share its worker
            s = by_id[sid]
            assert x1 <= s.x <= x2 and y1 <= s.y <= y2
            assert plan.assign(s) == (info["worker"],)
        # Eq. (3): C(S_r) = P(R) |S_r| with R enclosing the members' kNN balls
        rs = [brute_region(st, by_id[sid]) for sid in g]
        R = (min(r[0] for r in rs), min(r[1] for r in rs), max(r[2] for r in rs), max(r[3] for r in rs))
        assert info["R"] == pytest.approx(list(R))
        assert info["cost"] == pytest.approx(max(brute_count(st, R) / st.n, floor) * len(g))


def test_sop_splits_the_costliest_subspace_first():
    st, subs = clustered()
    # theta*m = 2: the root split alone gives three subspaces: north-west (two clusters, 60),
    # south-east (30) and north-east (two overlapping clusters, 80)
    first = plan_sop(subs, st, 1, theta=2)
    sizes = {g: i["size"] for g, i in zip(first.groups, first.describe()["subsets"])}
    assert sorted(sizes.values()) == [30, 60, 80]
    costs = {g: i["cost"] for g, i in zip(first.groups, first.describe()["subsets"])}
    costliest = max(costs, key=costs.get)
    assert sizes[costliest] == 80
    # theta*m = 4: the next split is of the costliest subspace; the others stay whole
    second = plan_sop(subs, st, 1, theta=4)
    assert costliest not in second.groups
    assert all(g in second.groups for g in costs if g != costliest)
    assert len(second.groups) >= 4


def test_sop_new_subscription_eq2():
    # objects with "a" at distance 1 and 2 from (0, 0); others inside/outside the ball's rectangle
    objs = [obj(1, 1, 0, "a"), obj(2, 0, 2, "a"), obj(3, 1.5, 1.5, "b"), obj(4, -2, -2, "b"), obj(5, 2.5, 0, "b"),
            obj(6, 50, 50, "a"), obj(7, 51, 50, "a"), obj(8, 50, 51, "a")]
    st = stats_of(objs)
    subs = [knn(f"s{i}", 50, 50, 1, "a") for i in range(3)]
    plan = plan_sop(subs, st, 2, theta=1)
    before = plan.loads()
    light = min(range(2), key=lambda w: (before[w], w))
    new = knn("new", 0, 0, 2, "a")
    # B(new): 2nd nearest "a" at distance 2 -> R = [-2,-2,2,2] holds o1, o2, o3, o4 -> P(R) = 4/8 (Eq. 2)
    assert plan.assign(new) == (light,)
    assert plan.loads()[light] == pytest.approx(before[light] + 4 / 8)


# ---------------------------------------------------------------------------
# dkm: Eqs. (4)-(7), Algorithms 2-3
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("gamma1,m", [(1, 2), (2, 3), (5, 5), (3, 1)])
def test_dkm_reaches_gamma1_m_subsets(world, gamma1, m):
    stats, subs = world
    plan = plan_dkm(subs, stats, m, gamma1=gamma1, gamma2=20)
    d = plan.describe()
    assert not d["singleton_subsets"]
    assert d["n_subsets"] == len(plan.groups) >= gamma1 * m
    assert d["n_subsets"] <= gamma1 * m + 3  # one split adds at most 3 subsets
    assert d["space_only_splits"] + d["hybrid_splits"] >= 1
    # Algorithm 3 visits subsets by C(S') descending
    costs = [s["cost"] for s in d["subsets"]]
    assert costs == sorted(costs, reverse=True)
    # ... and within each subset, subscriptions by C(s) (Eq. (5) with the subset's R) descending,
    # each to the currently least-loaded worker (loads carried across subsets)
    by_id = {s.id: s for s in subs}
    floor = 1 / (stats.n + 1)
    loads = [0.0] * m
    for info, g in zip(d["subsets"], plan.groups):
        members = [by_id[sid] for sid in g]
        rs = [brute_region(stats, s) for s in members]
        R = (min(r[0] for r in rs), min(r[1] for r in rs), max(r[2] for r in rs), max(r[3] for r in rs))
        cs = [plan._cost[s.id] for s in members]  # the plan's own floats, so ties break identically
        assert cs == pytest.approx([brute_eq5(stats, s, R, floor) for s in members])
        assert info["cost"] == pytest.approx(sum(cs))
        for j in sorted(range(len(members)), key=lambda j: -cs[j]):
            w = min(range(m), key=lambda w: (loads[w], w))
            assert plan.assign(members[j]) == (w,)
            loads[w] += cs[j]
    assert plan.loads() == pytest.approx(loads)


def test_dkm_gamma1_beyond_reach_gives_singletons(world):
    stats, subs = world
    a = plan_dkm(subs, stats, 3)  # paper's gamma1 = 100,000
    assert a.describe()["singleton_subsets"] and all(len(g) == 1 for g in a.groups)
    # running Algorithm 2 to the end gives the same subsets (all singletons) and the same costs
    b = plan_dkm(subs, stats, 3, gamma1=(len(subs) - 1) / 3 + 1e-9)
    assert not b.describe()["singleton_subsets"]
    assert len(b.groups) == len(subs)
    assert sum(b.loads()) == pytest.approx(sum(a.loads()))


def example5(bounded: bool):
    """Sixteen subscriptions, four per quadrant (DkM-SKS Example 5).

    bounded: objects with "a" next to each subscription -> small balls (5(a));
    otherwise too few "a" objects -> unbounded, fully overlapping balls (5(b))."""
    centres = [(-90, 45), (90, 45), (-90, -45), (90, -45)]
    objs, subs = [], []
    for q, (cx, cy) in enumerate(centres):
        for i in range(4):
            x, y = cx + i, cy + i
            subs.append(knn(f"s{q}{i}", x, y, 1 if bounded else 50, "a"))
            objs.append(obj(len(objs), x + 0.1, y, "a"))
            objs.append(obj(len(objs), x - 20, y - 20, "b"))
    return stats_of(objs), subs


def test_dkm_space_only_when_cheaper_example_5a():
    st, subs = example5(bounded=True)
    plan = plan_dkm(subs, st, 4, gamma1=1, gamma2=20)
    d = plan.describe()
    assert (d["space_only_splits"], d["hybrid_splits"]) == (1, 0)
    assert sorted(len(g) for g in plan.groups) == [4, 4, 4, 4]
    assert all(len({str(sid)[1] for sid in g}) == 1 for g in plan.groups)  # one quadrant each


def test_dkm_hybrid_when_space_does_not_help_example_5b():
    st, subs = example5(bounded=False)
    plan = plan_dkm(subs, st, 4, gamma1=1, gamma2=20)
    d = plan.describe()
    assert (d["space_only_splits"], d["hybrid_splits"]) == (0, 1)  # C_s == C_h: not C_s < C_h
    assert any(len({str(sid)[1] for sid in g}) > 1 for g in plan.groups)  # hybrid subsets mix quadrants
    # |S'| = 16 > gamma2: SPACE-ONLY without testing HYBRID (Algorithm 2 lines 5-8)
    forced = plan_dkm(subs, st, 4, gamma1=1, gamma2=15).describe()
    assert (forced["space_only_splits"], forced["hybrid_splits"]) == (1, 0)
    tested = plan_dkm(subs, st, 4, gamma1=1, gamma2=16).describe()  # |S'| <= gamma2: both are tested
    assert (tested["space_only_splits"], tested["hybrid_splits"]) == (0, 1)


def test_dkm_gamma2_zero_is_space_only(world):
    stats, subs = world
    d = plan_dkm(subs, stats, 3, gamma1=4, gamma2=0).describe()
    assert d["hybrid_splits"] == 0 and d["space_only_splits"] >= 1 and d["n_subsets"] >= 12


def test_dkm_eq5_costs_by_hand():
    # range subscriptions have known rectangles: R(S) of a singleton is its rectangle
    objs = [obj(1, 1, 1, "a"), obj(2, 2, 2, "a", "b"), obj(3, 9, 9, "b"), obj(4, 25, 5, "a"), obj(5, 40, 40, "a")]
    st = stats_of(objs)
    subs = [rng_sub("A", (0, 0, 10, 10), "a", "b", all=False), rng_sub("B", (20, 0, 30, 10), "a", "b", all=True)]
    plan = plan_dkm(subs, st, 2)
    # Eq. (5): A: P(R,a) + P(R,b) = 2/5 + 2/5; B (all): min(P(R,a), P(R,b)) = min(1/5, 0) -> floor 1/6
    assert sorted(plan.loads()) == pytest.approx(sorted([4 / 5, 1 / 6]))
    assert plan.assign(subs[0]) != plan.assign(subs[1])


def test_dkm_new_subscription_eq7():
    objs = [obj(1, 1, 1, "a"), obj(2, 2, 2, "a", "b"), obj(3, 9, 9, "b"), obj(4, 25, 5, "a"), obj(5, 40, 40, "a"),
            obj(6, 21, 1, "a"), obj(7, 18, 5, "b")]
    st = stats_of(objs)
    subs = [rng_sub("A", (0, 0, 10, 10), "a", "b", all=False), rng_sub("B", (20, 0, 30, 10), "a", all=False)]
    plan = plan_dkm(subs, st, 2)
    before = plan.loads()
    light = min(range(2), key=lambda w: (before[w], w))
    # new kNN at (18, 5), k = 1, keyword "b": nearest "b" is o7 at distance 0 -> R_n is a point (zero area):
    # the subset rectangle nearest to (18, 5) is B (distance 2) vs A (distance 8)
    # Eq. (5) with R* = B: P(B, b) = 0 -> floor 1/8
    new0 = knn("n0", 18, 5, 1, "b")
    assert plan.assign(new0) == (light,)
    assert plan.loads()[light] == pytest.approx(before[light] + 1 / 8)
    # new kNN at (14, 5), k = 3, keyword "a": distances o6 ~8.06, o4 11, o2 ~12.37 -> radius ~12.37,
    # R_n = [1.63, -7.37, 26.37, 17.37] clipped: overlaps A by 8.37*10 and B by 6.37*10 -> R* = A
    # Eq. (5) with R* = A: P(A, a) = 2/7 (o1, o2); with its own R_n it would be 3/7 (o2, o4, o6)
    before = plan.loads()
    light = min(range(2), key=lambda w: (before[w], w))
    new1 = knn("n1", 14, 5, 3, "a")
    assert plan.assign(new1) == (light,)
    assert plan.loads()[light] == pytest.approx(before[light] + 2 / 7)


def test_most_overlap_eq7():
    rects = np.array([[0, 0, 10, 10], [5, 5, 20, 20], [30, 30, 40, 40]], dtype=float)
    assert most_overlap(rects, np.array([6, 6, 19, 19.0]), (12, 12)) == 1
    assert most_overlap(rects, np.array([-5, -5, 7, 7.0]), (1, 1)) == 0
    assert most_overlap(rects, np.array([35, 35, 35, 35.0]), (35, 35)) == 2  # zero area: containing rectangle
    assert most_overlap(rects, np.array([25, 25, 25, 25.0]), (25, 25)) == 1  # zero area: nearest rectangle
    assert most_overlap(np.zeros((0, 4)), np.array([0, 0, 1, 1.0]), (0, 0)) is None


# ---------------------------------------------------------------------------
# real places and real events
# ---------------------------------------------------------------------------


def test_geonames_places_and_gate_events():
    from skpubsub.datasets import load

    places = load("geonames-cities", limit=400)
    objs = [obj(i, places.x[i], places.y[i], *places.keywords[i]) for i in range(250)]
    st = stats_of(objs, sample_cap=200)  # the sample is only part of O_init
    gate = Gate()
    subs = []
    for j in range(250, 400):
        x, y, kws = float(places.x[j]), float(places.y[j]), list(places.keywords[j][:3])
        kind = ("knn", "topk", "range")[j % 3]
        rec = {"op": "sub", "id": f"g{j}", "t": 0, "kind": kind, "keywords": kws}
        if kind == "range":
            rec["rect"] = [x - 0.05, y - 0.05, x + 0.05, y + 0.05]
        else:
            rec.update(x=x, y=y, k=1 + j % 4)
        if kind == "topk":
            rec.update(alpha=0.5, weights={kws[0]: 2.0})
        ev = gate.admit(rec)
        assert isinstance(ev, Sub), ev
        subs.append(ev)
    for name, f in PLANNERS.items():
        plan = f(subs, st, 3)
        assert all(plan.assign(s)[0] in range(3) for s in subs)
        assert sum(plan.loads()) == pytest.approx(plan.describe()["total_cost"])
        assert max(plan.loads()) <= 2 * (sum(plan.loads()) / 3) + 1e-9, name


def test_space_other_than_default():
    sp = Space(0, 0, 100, 100)
    objs = [obj(i, i, (7 * i) % 100, "a" if i % 2 else "b") for i in range(100)]
    st = stats_of(objs, space=sp)
    subs = [knn(f"s{i}", (13 * i) % 100, (29 * i) % 100, 3, "a") for i in range(60)]
    reg = SampleIndex(st).regions(subs + [knn("u", 5, 5, 99, "a")])
    assert (reg.rect[:, 0] >= 0).all() and (reg.rect[:, 2] <= 100).all()
    assert reg.rect[-1].tolist() == [0, 0, 100, 100]  # unbounded ball: the whole space
    for f in PLANNERS.values():
        plan = f(subs, st, 4)
        assert sorted({plan.assign(s)[0] for s in subs}) == [0, 1, 2, 3]


# ---------------------------------------------------------------------------
# compiled regions and Algorithm 3 == the per-subscription NumPy code they replaced
# ---------------------------------------------------------------------------


def oracle_knn_radius(ix, x, y, k, kids, match_all):
    """B(s)'s radius as SampleIndex.knn_radius computed it, one subscription at a time."""
    if k < 1:
        return math.inf
    if match_all:
        if not kids or any(kid < 0 for kid in kids):
            return math.inf
        spans = sorted((ix._posting(kid) for kid in dict.fromkeys(kids)), key=lambda ab: ab[1] - ab[0])
        a, b = spans[0]
        cand = ix.post_obj[a:b]
        for a2, b2 in spans[1:]:
            other = ix.post_obj[a2:b2]
            pos = np.minimum(np.searchsorted(other, cand), len(other) - 1)
            cand = cand[other[pos] == cand]
        if len(cand) < k:
            return math.inf
        d2 = (ix.x[cand] - x) ** 2 + (ix.y[cand] - y) ** 2
        return math.sqrt(float(np.partition(d2, k - 1)[k - 1]))
    spans = [ix._posting(kid) for kid in dict.fromkeys(kids) if kid >= 0]
    if sum(b - a for a, b in spans) < k:
        return math.inf
    d2 = np.concatenate([(ix.post_x[a:b] - x) ** 2 + (ix.post_y[a:b] - y) ** 2 for a, b in spans])
    objs = np.concatenate([ix.post_obj[a:b] for a, b in spans])
    seen = set()
    for d, o in sorted(zip(d2.tolist(), objs.tolist())):
        if o not in seen:
            seen.add(o)
            if len(seen) == k:
                return math.sqrt(d)
    return math.inf


def oracle_topk_radius(ix, s, kids):
    """The top-k bound as SampleIndex.topk_radius computed it, one subscription at a time."""
    from skpubsub.core.scoring import unit_weights
    alpha, k = float(s.alpha), int(s.k)
    if alpha <= 0.0 or k < 1:
        return math.inf
    known = [(kid, w) for kid, w in zip(kids, unit_weights(s.weights, len(s.keywords))) if kid >= 0]
    if not known:
        return math.inf
    spans = [ix._posting(kid) for kid, _ in known]
    lens = [b - a for a, b in spans]
    objs = np.concatenate([ix.post_obj[a:b] for a, b in spans])
    uniq, inv = np.unique(objs, return_inverse=True)
    if len(uniq) < k:
        return math.inf
    tsim = np.bincount(inv, weights=np.repeat([w for _, w in known], lens), minlength=len(uniq)) * ix.inv_sqrt_nkw[uniq]
    ssim = np.maximum(0.0, 1.0 - np.hypot(ix.x[uniq] - s.x, ix.y[uniq] - s.y) / ix.maxdist)
    score = alpha * ssim + (1.0 - alpha) * tsim
    kscore = float(np.partition(score, len(score) - k)[len(score) - k])
    smin = (kscore - (1.0 - alpha)) / alpha
    return math.inf if smin <= 0.0 else ix.maxdist * max(0.0, 1.0 - smin)


def oracle_regions(ix, subs):
    """SampleIndex.regions as the per-subscription loop computed it: (px, py, rect, radius,
    kw_ptr, kw_ids, any_mode)."""
    sp = ix.space
    N = len(subs)
    px, py, rect, radius = np.empty(N), np.empty(N), np.empty((N, 4)), np.full(N, np.nan)
    kw_ptr, kw_ids, any_mode = np.zeros(N + 1, dtype=np.int64), [], np.empty(N, dtype=bool)
    for i, s in enumerate(subs):
        kids = [ix.vocab.get(w, -1) for w in s.keywords]
        kw_ids.extend(kids)
        kw_ptr[i + 1] = len(kw_ids)
        any_mode[i] = s.kind == "topk" or not s.match_all
        if s.kind == "range":
            x1, y1, x2, y2 = s.rect
            rect[i] = s.rect
            px[i] = (max(x1, sp.x1) + min(x2, sp.x2)) / 2.0
            py[i] = (max(y1, sp.y1) + min(y2, sp.y2)) / 2.0
            continue
        r = oracle_topk_radius(ix, s, kids) if s.kind == "topk" else oracle_knn_radius(ix, s.x, s.y, s.k, kids, s.match_all)
        radius[i], px[i], py[i] = r, s.x, s.y
        rect[i] = (s.x - r, s.y - r, s.x + r, s.y + r)
    rect[:, :2] = np.maximum(rect[:, :2], (sp.x1, sp.y1))
    rect[:, 2:] = np.minimum(rect[:, 2:], (sp.x2, sp.y2))
    return (np.clip(px, sp.x1, sp.x2), np.clip(py, sp.y1, sp.y2), rect, radius, kw_ptr,
            np.asarray(kw_ids, dtype=np.int64), any_mode)


def random_world(seed, n_obj, n_sub):
    """Objects on a coarse grid (equal distances: ties) or anywhere, a few keywords each; kNN
    (any/all), top-k (alpha 0, 1 or between; weights none, even or of any magnitude) and
    range subscriptions with k from 1 to past the sample size, keywords the sample lacks,
    repeated keywords."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(int(rng.integers(1, 8)))]
    grid = rng.random() < 0.5

    def point(spread=180.0):
        if grid:
            return float(rng.integers(-4, 5) * 20), float(rng.integers(-4, 5) * 10)
        return float(rng.uniform(-spread, spread)), float(rng.uniform(-spread / 2, spread / 2))

    objs = [obj(i, *point(), *rng.choice(words, size=int(rng.integers(1, 4))).tolist()) for i in range(n_obj)]
    subs = []
    for j in range(n_sub):
        kws = tuple(rng.choice(words + ["zz", "yy"], size=int(rng.integers(0 if j % 17 == 0 else 1, 5))).tolist())
        x, y = point()
        k = int(rng.integers(1, n_obj + 4))
        if j % 5 == 4:
            k = int(rng.integers(1, 4))
        kind = rng.integers(5)
        if kind <= 1:
            subs.append(knn(f"s{j}", x, y, k, *kws, all=bool(kind)))
        elif kind <= 3 and kws:
            alpha = [0.0, 1.0, float(rng.random())][int(rng.integers(3))]
            weights = None
            if rng.random() < 0.6:
                weights = tuple(float(v) for v in rng.uniform(0.1, 5, len(kws)) * 10.0 ** rng.integers(-200, 200))
            subs.append(topk(f"s{j}", x, y, k, alpha, *kws, weights=weights))
        else:
            h = rng.uniform(0, 60, 2)
            subs.append(rng_sub(f"s{j}", (x - h[0], y - h[1], x + h[0], y + h[1]), *kws, all=bool(j % 2)))
    return objs, subs


@pytest.mark.parametrize("seed", range(40))
def test_regions_equal_per_subscription_oracle(seed):
    objs, subs = random_world(seed, n_obj=int(np.random.default_rng(seed).integers(1, 60)), n_sub=120)
    ix = SampleIndex(stats_of(objs))
    reg = ix.regions(subs)
    want = oracle_regions(ix, subs)
    for name, got, w in zip(("px", "py", "rect", "radius", "kw_ptr", "kw_ids", "any_mode"),
                            (reg.px, reg.py, reg.rect, reg.radius, reg.kw_ptr, reg.kw_ids, reg.any_mode), want):
        assert got.dtype == w.dtype and got.tobytes() == w.tobytes(), (seed, name)  # bit for bit
    assert np.isinf(reg.radius).any() and np.isfinite(reg.radius).any() or len(objs) < 3
    # the per-subscription methods (kept for callers) are the kernel too
    for s in subs[:30]:
        kids = [ix.kw_id(w) for w in s.keywords]
        if s.kind == "knn":
            assert ix.knn_radius(s.x, s.y, s.k, kids, s.match_all) == oracle_knn_radius(ix, s.x, s.y, s.k, kids, s.match_all)
        elif s.kind == "topk":
            assert ix.topk_radius(s, kids) == oracle_topk_radius(ix, s, kids)


def test_lpt_runs_equal_lpt_run_after_run():
    from skpubsub.partition.common import lpt, lpt_runs
    rng = np.random.default_rng(5)
    for m in (1, 2, 3, 7):
        sizes = rng.integers(0, 9, 30)
        costs = rng.integers(0, 4, int(sizes.sum())) / 4.0  # many ties
        ptr = np.concatenate([[0], np.cumsum(sizes)])
        got, got_loads = lpt_runs(costs, ptr, m, [0.5] + [0.0] * (m - 1))
        loads, want = [0.5] + [0.0] * (m - 1), []
        for a, b in zip(ptr[:-1], ptr[1:]):
            where, loads = lpt(enumerate(costs[a:b].tolist()), m, loads)
            want.extend(where[p] for p in range(b - a))
        assert got.tolist() == want and got_loads == loads


@pytest.mark.parametrize("gamma1, gamma2", [(100_000, 20), (0.2, 20), (0.05, 3), (1.0, 0)])
def test_plan_dkm_unchanged_by_compiled_regions_and_lpt(monkeypatch, gamma1, gamma2):
    """plan_dkm with the compiled regions and Algorithm 3 == plan_dkm on the oracles."""
    from skpubsub.partition.common import lpt
    from skpubsub.partition.dkm import dkm as dkm_mod
    from skpubsub.partition.dkm.sample import Regions

    objs, subs = synthetic(seed=11, n_obj=300, n_sub=400)
    st = stats_of(objs)

    def summary(plan):
        d = plan.describe()
        return ([plan.assign(s) for s in subs], plan._cost, plan.loads(), plan.groups, d)

    got = summary(plan_dkm(subs, st, 3, gamma1=gamma1, gamma2=gamma2))

    def lpt_runs_oracle(costs, ptr, m, loads=None):
        loads, out = list(loads or [0.0] * m), []
        for a, b in zip(ptr[:-1], ptr[1:]):
            where, loads = lpt(enumerate(np.asarray(costs)[a:b].tolist()), m, loads)
            out.extend(where[p] for p in range(b - a))
        return np.array(out, dtype=np.int64), loads

    monkeypatch.setattr(dkm_mod, "lpt_runs", lpt_runs_oracle)
    monkeypatch.setattr(SampleIndex, "regions", lambda ix, ss: Regions(*oracle_regions(ix, ss)))
    want = summary(plan_dkm(subs, st, 3, gamma1=gamma1, gamma2=gamma2))
    assert got == want
