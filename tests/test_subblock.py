"""Subscriptions from the edge to the engine as columns (issue 20 item 2): the Gate hands a
block of subscriptions it judged by columns on as a ``SubBlock``; the engine registers it
without a ``Sub`` a record (``SubTable.add_many`` from columns). These tests hold the
columns to the events they stand for: a block is, as a sequence, exactly its ``Sub``
events; the table a block writes is the table ``add`` writes one by one (a column dropped
or shifted shows); and an engine given the Gate's blocks, batched as ``skpubsub run``
batches them, gives the notifications and results of the same events one by one and of
the reference engine."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from skpubsub.io.events import BLOCKS, Pub, PubBlock, Sub, SubBlock, events_of
from skpubsub.io.validate import Gate
from skpubsub.runtime.engines import make_engine
from skpubsub.store.subscriptions import SubTable, any_given


def _mixed(n: int, seed: int) -> list[Sub]:
    """Subscriptions of every kind, each field drawn per record (so a column read at the
    wrong place, or another record's, differs)."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(30)]
    out = []
    for i in range(n):
        kind = ("range", "knn", "topk")[int(rng.integers(3))]
        kws = tuple(rng.choice(words, size=int(rng.integers(1, 5)), replace=False).tolist())
        x, y = float(rng.uniform(-170, 170)), float(rng.uniform(-80, 80))
        w, h = float(rng.uniform(0, 9)), float(rng.uniform(0, 9))
        out.append(Sub(100 + 3 * i, f"s{i}" if i % 4 else i, i // 5, kind, kws, match_all=bool(rng.integers(2)),
                       rect=(x - w, y - h, x + w + 1, y + h) if kind == "range" else None,
                       x=x if kind != "range" else 0.0, y=y if kind != "range" else 0.0,
                       k=int(rng.integers(1, 9)) if kind != "range" else 0,
                       alpha=float(rng.uniform()) if kind == "topk" else 0.0,
                       weights=tuple(rng.uniform(0.5, 3, len(kws)).tolist()) if kind == "topk" and i % 3 == 0 else None,
                       expires=None if i % 5 else 1e9 + i))
    return out


def _gate_like(subs: list[Sub]) -> SubBlock:
    """The block the Gate makes of ``subs`` (one kind; the columns its kind does not use
    left out, as ``Gate._columns`` leaves them)."""
    kind = subs[0].kind
    cols = dict(seq=range(subs[0].seq, subs[0].seq + len(subs)), id=[s.id for s in subs], t=[s.t for s in subs],
                kind=[kind] * len(subs), keywords=[s.keywords for s in subs], match_all=[s.match_all for s in subs])
    if kind == "range":
        cols["rect"] = [s.rect for s in subs]
    else:
        cols.update(x=[s.x for s in subs], y=[s.y for s in subs], k=[s.k for s in subs])
    return SubBlock(**cols)


def test_a_block_is_its_events():
    subs = _mixed(200, 1)
    b = SubBlock.of(subs)
    assert b.one_kind is None and len(b) == len(subs)
    assert list(b) == subs and [b[i] for i in range(len(b))] == subs and b[-1] == subs[-1]
    for i, j in ((0, 0), (0, 7), (13, 150), (190, 200)):
        assert list(b[i:j]) == subs[i:j]
    assert list(SubBlock.join([b[:50], subs[50], b[51:120], *subs[120:125], b[125:]])) == subs
    ranges = [s for s in subs if s.kind == "range"]
    ranges = [Sub(7 + i, s.id, s.t, "range", s.keywords, s.match_all, s.rect) for i, s in enumerate(ranges)]
    g = _gate_like(ranges)
    assert g.one_kind == "range" and g.x is None and list(g) == ranges and list(g[3:9]) == ranges[3:9]
    assert events_of([subs[0], g, subs[1]]) == [subs[0], *ranges, subs[1]]
    with pytest.raises(ValueError):
        SubBlock(seq=range(3), id=[1, 2], t=[0, 0, 0], kind=["range"] * 3, keywords=[("a",)] * 3,
                 match_all=[True] * 3, rect=[(0, 0, 1, 1)] * 3)


def _same_tables(a: SubTable, b: SubTable) -> None:
    assert np.array_equal(a.cols.records, b.cols.records)
    for name in ("id", "ws"):
        assert np.array_equal(getattr(a.kw, name), getattr(b.kw, name)), name
    assert np.array_equal(a.res.obj, b.res.obj)
    assert np.array_equal(a.ids[: a.cols.top], b.ids[: b.cols.top]) and a.slot_of == b.slot_of
    assert (a.max_k, a.max_kb, a.max_kw) == (b.max_k, b.max_kb, b.max_kw)
    a._check()


@pytest.mark.parametrize("seed", range(4))
def test_the_table_of_a_block_is_the_table_of_add_in_turn(seed):
    """Blocks of mixed kinds, k, match, rects, weights and expiries; a block as the Gate
    makes it (one kind, unused columns left out); blocks joined from parts; onto freed
    slots. Any column dropped, shifted or read off another record changes the records."""
    subs = _mixed(400, seed)
    kw = {w: i for i, w in enumerate(sorted({w for s in subs for w in s.keywords}))}
    ids_of = lambda ss: [kw[w] for s in ss for w in s.keywords]  # noqa: E731
    a, b = SubTable(kmax=1.5), SubTable(kmax=1.5)
    first = subs[:150]
    a.add_many(SubBlock.of(first), np.asarray(ids_of(first), dtype=np.int32))
    for s in first:
        b.add(s, [kw[w] for w in s.keywords])
    _same_tables(a, b)
    for t in (a, b):  # free some slots and segments: the next blocks reuse them
        for s in range(0, 150, 4):
            t.remove(s)
    for kind in ("range", "knn"):  # as the Gate gives them
        one = [s for s in subs[150:300] if s.kind == kind]  # consecutive seqs, as lines are
        one = [Sub(2000 + j, f"g{kind}{s.id}", s.t, kind, s.keywords, s.match_all, s.rect, s.x, s.y, s.k)
               for j, s in enumerate(one)]
        sa = a.add_many(_gate_like(one), ids_of(one))
        sb = [b.add(s, [kw[w] for w in s.keywords]) for s in one]
        assert sa.tolist() == sb
        _same_tables(a, b)
    rest = subs[300:]
    parts = [SubBlock.of(rest[:40]), *rest[40:45], SubBlock.of(rest[45:])]
    sa = a.add_many(SubBlock.join(parts), ids_of(rest))
    sb = [b.add(s, [kw[w] for w in s.keywords]) for s in rest]
    assert sa.tolist() == sb
    _same_tables(a, b)
    lone = Sub(9999, "lone", 9, "knn", ("w1",), x=1.0, y=2.0, k=3)  # a list of Sub events: read into a block
    assert a.add_many([lone], [kw["w1"]]).tolist() == [b.add(lone, [kw["w1"]])]
    _same_tables(a, b)


def test_slot_of_enters_the_blocks_ids_when_read():
    """``add_many`` leaves a block's ids pending; the first read of ``slot_of`` (a removal
    reads it) enters them, a lone ``add`` in between included, so the map is the live ids'
    slots however the adds and reads interleave."""
    subs = _mixed(160, 5)
    kw = {w: i for i, w in enumerate(sorted({w for s in subs for w in s.keywords}))}
    ids_of = lambda ss: [kw[w] for s in ss for w in s.keywords]  # noqa: E731
    t = SubTable()
    t.add_many(SubBlock.of(subs[:50]), ids_of(subs[:50]))
    lone = t.add(subs[50], ids_of(subs[50:51]))
    t.add_many(SubBlock.of(subs[51:100]), ids_of(subs[51:100]))
    assert len(t._pending) == 2 and len(t._slot_of) == 1  # nothing looked up yet
    t.remove(t.slot_of[subs[10].id])
    t.remove(lone)
    t.add_many(SubBlock.of(subs[100:]), ids_of(subs[100:]))  # onto the freed slots, then fresh ones
    t.remove(t.slot_of[subs[120].id])
    live = [s for i, s in enumerate(subs) if i not in (10, 50, 120)]
    assert sorted(map(str, t.slot_of)) == sorted(str(s.id) for s in live)
    assert all(t.ids[t.slot_of[s.id]] == s.id for s in live)
    t._check()


# -- the engine given the Gate's blocks ------------------------------------------------------

def _line(kind: str, ident: str, t: int, draw, ends: bool = False) -> bytes:
    """One event line of ``kind``, its values drawn (``draw``: a random.Random; ``ends``: some
    objects with an expiry of their own)."""
    words = ["a", "b", "c", "de", "mx", "q"]
    kws = draw.sample(words, draw.randint(1, 3))
    x, y = draw.uniform(-20, 20), draw.uniform(-20, 20)
    if kind == "pub":
        rec = {"op": "pub", "id": ident, "t": t, "x": x, "y": y, "keywords": kws}
        if ends and draw.random() < 0.4:  # an object with its own expiry (time windows only)
            rec["expires"] = t + draw.choice([1, 2, 5, 0.5])
    elif kind == "unsub":
        rec = {"op": "unsub", "id": ident, "t": t}
    else:
        rec = {"op": "sub", "id": ident, "t": t, "kind": kind, "keywords": kws}
        if kind == "range":
            w, h = draw.uniform(0, 15), draw.uniform(0, 15)
            rec["rect"] = [x - w, y - h, x + w, y + h]
        else:
            rec.update(x=x, y=y, k=draw.randint(1, 4))
            if kind == "topk":
                rec["alpha"] = draw.choice([0.0, 0.3, 1.0, draw.random()])
        m = draw.choice([None, "all", "any"])
        if m is not None:
            rec["match"] = m
    return json.dumps(rec).encode()


def _batches(gate: Gate, lines: list, cuts: list[int], batch_size: int) -> list[list]:
    """What ``skpubsub run`` hands the engine: the Gate's blocks (``SubBlock`` s and
    ``PubBlock`` s sliced as one item a batch piece), cut into batches of ``batch_size``
    events."""
    out: list[list] = [[]]
    size, start, i = 0, 0, 0
    while start < len(lines):
        end = min(len(lines), start + cuts[i % len(cuts)])
        i += 1
        got = gate.admit_block(start + 1, b"\n".join(lines[start:end]), end - start)
        start = end
        pieces = [got[j:j + 1] for j in range(len(got))] if type(got) in BLOCKS and i % 3 == 0 else [got]
        for piece in pieces:  # (now and then a block in pieces of one: a batch of one block of one)
            j, n = 0, len(piece)
            while j < n:
                k = min(n, j + max(1, batch_size - size))
                if type(piece) in BLOCKS:
                    out[-1].append(piece[j:k])
                else:
                    out[-1].extend(piece[j:k])
                size += k - j
                j = k
                if size >= batch_size:
                    out.append([])
                    size = 0
    return [b for b in out if b]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["none", "count:6", "time:4"]),
       st.lists(st.tuples(st.sampled_from(["range", "range", "knn", "knn", "topk", "pub", "unsub"]), st.integers(1, 30),
                          st.sampled_from([0, 0, 1, 2])), min_size=1, max_size=8),
       st.lists(st.integers(1, 50), min_size=1, max_size=5), st.integers(1, 40), st.randoms(use_true_random=False),
       st.booleans())
def test_an_engine_given_the_gates_blocks_equals_one_by_one_and_the_reference(window, runs, cuts, batch_size, rnd,
                                                                            coded):
    """``coded``: subscription blocks with their keywords as codes (``run``'s Gate), which the
    engine reads through ``Vocabulary.ids_of`` while unsubscriptions make it forget words."""
    lines: list[bytes] = []
    t, serial, live = 0, 0, []
    for kind, n, step in runs:
        t += step
        for _ in range(n):
            serial += 1
            if kind == "unsub":
                if not live:
                    continue
                ident = live.pop(rnd.randrange(len(live)))
            else:
                ident = f"{kind[0]}{serial}"
                if kind != "pub":
                    live.append(ident)
            lines.append(_line(kind, ident, t, rnd, window.startswith("time")))
    if not lines:
        return
    batches = _batches(Gate(window, coded=coded), lines, cuts, batch_size)
    events = events_of(e for b in batches for e in b)
    assert all(type(e).__name__ in ("Sub", "Pub", "Unsub") for e in events)  # the stream is clean
    by_line = Gate(window)
    assert list(map(repr, events)) == [repr(by_line.admit_line(raw, i)) for i, raw in enumerate(lines, 1)]
    ref = make_engine("reference", window)
    expect = ref.apply(events)
    one = make_engine("auto", window)
    singly = [note for ev in events for note in one.apply([ev])]
    many = make_engine("auto", window)
    together = [note for b in batches for note in many.apply_columnar(b).to_list()]
    assert singly == expect and together == expect
    assert many.all_results() == ref.all_results() == one.all_results()
    many._check()


def test_the_gate_judges_subscriptions_with_ends_by_columns():
    """Else the test above could not tell the two paths apart."""
    lines = [json.dumps({**json.loads(_line(kind, f"{kind}{i}", 0, __import__("random").Random(i))), "expires": 5 + i})
             .encode() for kind in ("range", "knn") for i in range(30)]
    g = Gate("none")
    assert type(g.admit_block(1, b"\n".join(lines), 60)) is not SubBlock  # two kinds
    g = Gate("none")
    assert type(b := g.admit_block(1, b"\n".join(lines[:30]), 30)) is SubBlock and b.expires == list(range(5, 35))
    assert g._expires["range3"] == (8, 4) and len(g._ends) == 30


def test_the_gate_hands_subscriptions_and_objects_on_as_columns():
    """Else the test above could not tell the two paths apart."""
    lines = [_line(kind, f"{kind}{i}", 0, __import__("random").Random(i)) for kind in ("range", "knn", "topk", "pub")
             for i in range(30)]
    g = Gate("none")
    assert type(g.admit_block(1, b"\n".join(lines[:30]), 30)) is SubBlock
    assert type(g.admit_block(31, b"\n".join(lines[30:60]), 30)) is SubBlock
    assert type(g.admit_block(61, b"\n".join(lines[60:90]), 30)) is SubBlock
    assert type(g.admit_block(91, b"\n".join(lines[90:]), 30)) is PubBlock
    timed = [_line("pub", f"p{i}", 0, __import__("random").Random(i), True) for i in range(60)]
    g = Gate("time:5")
    assert type(b := g.admit_block(1, b"\n".join(timed), 60)) is PubBlock and any_given(b.expires)


@pytest.mark.parametrize("coded", [False, True])
def test_the_gate_takes_texts_and_words_to_normalise_by_columns(coded):
    """Keywords a user writes as they come (capitals, a word twice, NFKC forms, white space)
    and objects with a ``text`` are made by columns, each record's as ``fastline.event``
    makes it: the block's events are those of the lines one by one. A record left without
    a keyword sends its block line by line, which gives the reason."""
    words = [["Pizza", "NYC"], ["pizza", "Pizza", "ﬁsh"], [" Straße ", "b"], ["É", "e\u0301"], ["a"]]
    subs = [{"op": "sub", "id": f"s{i}", "t": 0, "keywords": words[i % 5],
             **({"kind": "range", "rect": [0, 0, 2, 2]} if i % 3 == 0 else
                {"kind": "knn", "x": 1, "y": 1, "k": 2} if i % 3 == 1 else
                {"kind": "topk", "x": 1, "y": 1, "k": 2, "alpha": 0.5,
                 **({"weights": {"PIZZA": 3.0, "b": 0.5, "zz": 2}} if i % 4 == 2 else {})})} for i in range(60)]
    pubs = [{"op": "pub", "id": f"o{i}", "t": 1, "x": 1, "y": 1,
             **({"text": ("Great PIZZA in N.Y.C.! ﬁsh & chips", "Great PIZZA_2 in N.Y.C.!")[i % 4 // 2]} if i % 2
                else {"keywords": words[i % 5]})}
            for i in range(40)]
    cases = [([r for r in subs if r["kind"] == kind], SubBlock) for kind in ("range", "knn", "topk")]
    texts = [r for r in pubs if "text" in r]  # (a block of texts alone: split by blocks)
    for recs, block in cases + [(pubs, PubBlock), (texts, PubBlock)]:
        lines = [json.dumps(r, ensure_ascii=False).encode() for r in recs]
        g, one = Gate("none", coded=coded), Gate("none")
        out = g.admit_block(1, b"\n".join(lines), len(lines))
        assert type(out) is block
        assert list(out) == [one.admit_line(line, i + 1) for i, line in enumerate(lines)]
    weighted = Gate("none").admit_block(1, b"\n".join(json.dumps(r).encode() for r in cases[2][0]), len(cases[2][0]))
    assert sum(w is not None for w in weighted.weights) == 5  # top-k weights by columns too
    bad = [json.dumps(r).encode() for r in pubs[:5]] + [b'{"op":"pub","id":"q","t":1,"x":1,"y":1,"text":"!?"}']
    g = Gate("none", coded=coded)
    out = g.admit_block(1, b"\n".join(bad), len(bad))
    assert type(out) is list and [type(e).__name__ for e in out] == ["Pub"] * 5 + ["Rejection"]
    topk = cases[2][0][:3] + [dict(cases[2][0][0], id="w", weights={"a": -1})]
    out = Gate("none", coded=coded).admit_block(1, b"\n".join(json.dumps(r).encode() for r in topk), len(topk))
    assert type(out) is list and "weight" in out[-1].error


def test_a_pub_block_is_its_events():
    """A ``PubBlock`` is, as a sequence, exactly its ``Pub`` events (with and without an
    ``expires`` column), and ``pub_columns`` of it is ``pub_columns`` of its events."""
    from skpubsub.store.objects import pub_columns
    rng = np.random.default_rng(3)
    pubs = [Pub(50 + i, f"o{i}" if i % 3 else i, i // 4, float(rng.uniform(-9, 9)), float(rng.uniform(-9, 9)),
                tuple(rng.choice(["a", "b", "c", "d"], size=int(rng.integers(1, 4)), replace=False).tolist()),
                None if i % 5 else 100 + i) for i in range(60)]
    b = PubBlock.of(pubs)
    assert list(b) == pubs and [b[i] for i in range(60)] == pubs and b.expires is not None
    assert list(PubBlock.join([b[:10], pubs[10], b[11:40], *pubs[40:45], b[45:]])) == pubs
    plain = [Pub(p.seq, p.id, p.t, p.x, p.y, p.keywords) for p in pubs[:20]]
    g = PubBlock(seq=range(50, 70), id=[p.id for p in plain], t=[p.t for p in plain], x=[p.x for p in plain],
                 y=[p.y for p in plain], keywords=[p.keywords for p in plain])
    assert g.expires is None and list(g) == plain and list(g[3:9]) == plain[3:9]
    assert events_of([pubs[0], g, b[:2]]) == [pubs[0], *plain, *pubs[:2]]
    for block, evs in ((b, pubs), (g, plain), (g[5:5], [])):
        got, want = pub_columns(block), pub_columns(evs)
        assert [list(c) for c in got] == [list(c) for c in want]
        assert len(got.seq) == len(evs)
