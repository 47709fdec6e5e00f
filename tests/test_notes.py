"""Columnar notifications: the compiled net-change merge against a plain one, and the
engine's columns against its objects."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from skpubsub.core.layouts import Rows, note_cols
from skpubsub.engine.engine import Engine
from skpubsub.io.notewriter import Results, numbered, results_block
from skpubsub.io.sinks import json_line, result_line, result_record
from skpubsub.engine.netting import group_rows, net_changes
from skpubsub.io.notifications import Change, Match, NoteBatch, Notes, note_line, note_lines
from skpubsub.runtime.runner import run
from skpubsub.testing.conformance import validate
from skpubsub.testing.reference import ReferenceEngine
from skpubsub.testing.streams import random_stream


def _plain(rows, oseq):
    """The net change of each (pub, sub) pair, by dicts: (pub, sub, match, added, removed)."""
    out = []
    j = 0
    while j < len(rows):
        e = j + 1
        while e < len(rows) and rows[e][:2] == rows[j][:2]:
            e += 1
        i, s = rows[j][:2]
        if e == j + 1 and rows[j][3] == -2:
            out.append((i, s, True, [rows[j][2]], []))
            j = e
            continue
        added: dict[int, float] = {}
        removed: dict[int, float] = {}
        for _, _, a, d, ka, kd in rows[j:e]:
            if d >= 0:
                if d in added:
                    del added[d]
                else:
                    removed[d] = kd
            if a >= 0:
                if a in removed:
                    del removed[a]
                else:
                    added[a] = ka
        if added or removed:
            out.append((i, s, False, sorted(added, key=lambda o: (added[o], -oseq[o])),
                        sorted(removed, key=lambda o: (removed[o], -oseq[o]))))
        j = e
    return out


def _columnar(rows, oseq):
    """``net_changes`` of ``rows``, stored last first and read in their order through ``order``
    (as it reads the kernel's rows by ``group_rows``' order, not moved)."""
    n = len(rows)
    stored = rows[::-1]
    I, S, A, D = (np.array([r[c] for r in stored], dtype=np.int64) for c in range(4))
    KA, KD = (np.array([r[c] for r in stored], dtype=np.float64) for c in (4, 5))
    out = note_cols(n)
    order = np.arange(n - 1, -1, -1)
    c = net_changes(Rows(I, S, A, D, KA, KD, np.zeros(n, np.int8)), order, oseq, out, np.empty(2 * n))
    n_i, n_s, n_match, ao, ab, ro, rb = out
    return [(int(n_i[j]), int(n_s[j]), bool(n_match[j]), ab[ao[j]:ao[j + 1]].tolist(), rb[ro[j]:ro[j + 1]].tolist())
            for j in range(c)]


def _row():
    # objects 0..5, keys from a small set so ties happen; d -1 (none) or an object
    return st.tuples(st.integers(0, 5), st.integers(-1, 5), st.sampled_from([0.5, 1.0, 2.0]),
                     st.sampled_from([0.5, 1.0, 2.0]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.lists(_row(), min_size=1, max_size=6)),
                min_size=1, max_size=6, unique_by=lambda g: g[:2]),
       st.permutations(list(range(6))))
def test_net_changes_equal_the_plain_merge(groups, seqs):
    oseq = np.array(seqs, dtype=np.int64)
    rows = []
    for i, s, changes in sorted(groups, key=lambda g: g[:2]):
        held = {3, 4, 5}  # a result's members: an object enters only when out, leaves only when in
        for a, d, ka, kd in changes:
            a = a if a not in held else -1
            d = d if d in held else -1
            if a < 0 and d < 0:
                continue
            held.discard(d)
            if a >= 0:
                held.add(a)
            rows.append((i, s, a, d, ka, kd))
    if not rows:
        return
    assert _columnar(rows, oseq) == _plain(rows, oseq)


def test_net_changes_by_hand():
    oseq = np.array([10, 11, 12, 13], dtype=np.int64)
    rows = [
        (0, 0, 1, -2, 0.0, 0.0),  # a range match
        (0, 1, 2, -1, 1.0, 0.0),  # in, then out again: nothing
        (0, 1, -1, 2, 0.0, 1.0),
        (1, 1, 0, 3, 1.0, 0.5),  # two in at one key: the newer (1, seq 11) ranks first
        (1, 1, 1, -1, 1.0, 0.0),
        (1, 2, -1, 0, 0.0, 2.0),  # one out
    ]
    assert _columnar(rows, oseq) == [(0, 0, True, [1], []), (1, 1, False, [1, 0], [3]), (1, 2, False, [], [0])]


def test_notes_to_list_and_batch_order():
    ids = np.array(["a", "b", "c"], dtype=object)
    notes = Notes(np.array([0, 1]), np.array(["s1", "s2"], dtype=object), np.array([5, 6], dtype=object),
                  np.array([True, False]), np.array([0, 1, 3]), ids[[2, 0, 1]], np.array([0, 0, 1]), ids[[2]])
    batch = NoteBatch()
    batch.extend([Change("s0", 4, (), ("a",))])
    batch.add(notes)
    batch.extend([Match("s3", 7, "b")])
    assert len(batch) == 4
    assert batch.to_list() == [Change("s0", 4, (), ("a",)), Match("s1", 5, "c"), Change("s2", 6, ("a", "b"), ("c",)),
                               Match("s3", 7, "b")]
    assert batch.json_lines() == [note_line(n) for n in batch.to_list()]


def test_json_lines_are_the_objects_lines_byte_for_byte():
    """Ids of every JSON kind the SPEC allows, escapes, non-ASCII, int and float times."""
    ids = np.array(["o\"1", "é\n", 7, "o\u2028", "x"], dtype=object)
    notes = Notes(np.array([0, 0, 1, 2]), np.array(["s1", 2, "s\\3", "s1"], dtype=object),
                  np.array([5, 5, 6.0, 1e-7], dtype=object), np.array([True, False, False, False]),
                  np.array([0, 1, 3, 3, 5]), ids[[2, 0, 1, 3, 4]], np.array([0, 0, 1, 3, 3]), ids[[4, 0, 2]])
    want = [note_line(n) for n in notes.to_list()]
    assert notes.json_lines() == want
    assert [json.loads(line) for line in want][1] == {"sub": 2, "t": 5, "added": ["o\"1", "é\n"], "removed": ["x"]}


def test_engine_columns_are_its_notifications():
    for seed in range(12):
        stream = random_stream(seed, n_events=300)
        events, _ = validate(stream.events, stream.window, stream.space)
        a = Engine(stream.window, stream.space, index="dkm")
        b = Engine(stream.window, stream.space, index="dkm")
        batch = a.apply_columnar(events)
        assert any(isinstance(p, Notes) for p in batch.parts)
        assert batch.to_list() == b.apply(events)
        assert batch.json_lines() == [note_line(n) for n in batch.to_list()]
        assert batch.json_block() == "".join(note_line(n) for n in batch.to_list())  # the compiled writer


def test_held_notes_keep_their_ids_through_ends_and_reused_slots():
    """Columnar notifications name subscriptions by slot until asked (``Notes.table``):
    batches held while later events end those subscriptions and give their slots to new
    ones still name the subscriptions they were for, the engine having resolved them
    (``SubTable.lend``) before it cleared a slot."""
    resolved = unresolved = 0
    for seed in range(12):
        stream = random_stream(seed, n_events=400)
        events, _ = validate(stream.events, stream.window, stream.space)
        a = Engine(stream.window, stream.space, index="dkm")
        b = Engine(stream.window, stream.space, index="dkm")
        held, want = [], []
        for i in range(0, len(events), 25):
            held.append(a.apply_columnar(events[i:i + 25]))
            want.append(b.apply(events[i:i + 25]))
        notes = [p for batch in held for p in batch.parts if isinstance(p, Notes)]
        twin = copy.deepcopy(a)  # lends nothing: the weak references are not copied
        assert not twin.subs._lent and (a.subs._lent or not any(n.table is not None for n in notes))
        resolved += sum(n.table is None for n in notes)
        unresolved += sum(n.table is not None for n in notes)
        assert [batch.json_block() for batch in held] == ["".join(map(note_line, w)) for w in want]
        assert [batch.to_list() for batch in held] == want
    assert resolved and unresolved  # both ways were taken


def _as_columns(notes: list) -> Notes:
    """``notes`` (Match/Change objects) as the columns an engine would hand on."""
    def objects(values: list) -> np.ndarray:
        a = np.empty(len(values), dtype=object)  # element by element: numpy must not convert ids
        a[:] = values
        return a

    added: list = []
    removed: list = []
    add_off, rem_off = [0], [0]
    for n in notes:
        added += [n.object] if isinstance(n, Match) else list(n.added)
        removed += [] if isinstance(n, Match) else list(n.removed)
        add_off.append(len(added))
        rem_off.append(len(removed))
    return Notes(np.arange(len(notes)), objects([n.sub for n in notes]), objects([n.t for n in notes]),
                 np.array([isinstance(n, Match) for n in notes], dtype=bool), np.array(add_off), objects(added),
                 np.array(rem_off), objects(removed))


# Ids: integers of any size, strings of any characters (quotes, backslashes, control
# characters, U+2028, astral planes) and ones that look like the formatter's own syntax.
_ids = st.one_of(st.integers(), st.text(), st.sampled_from(["", '"', "\\", "\n", "%s", "%", "{}", "é", "\u2028", "\x00",
                                                            "\U0001F600", "0", "1"]))
_times = st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False))
_notifications = st.one_of(
    st.builds(Match, _ids, _times, _ids),
    st.builds(Change, _ids, _times, st.lists(_ids, max_size=4).map(tuple), st.lists(_ids, max_size=4).map(tuple)))


@settings(max_examples=400, deadline=None)
@given(st.lists(_notifications, max_size=12))
@example([Match("s", -0.0, 1), Match("s", 0.0, 1), Change(1, 0.0, (1, "1", 1.0), (-0.0,))])
def test_columnar_lines_are_the_formatter_s_lines(notes):
    """The columnar path (each id encoded once) writes what ``note_line`` writes, byte for
    byte, whatever the ids and times; the batch and ``note_lines`` agree with both."""
    want = [note_line(n) for n in notes]
    cols = _as_columns(notes)
    assert cols.to_list() == notes
    assert cols.json_lines() == want
    batch = NoteBatch()
    batch.extend(notes[:2])
    batch.add(_as_columns(notes[2:]))
    assert note_lines(batch) == note_lines(notes) == want
    for n, line in zip(notes, want):
        assert json.loads(line) == n.to_json() and line.endswith("}\n") and line.count("\n") == 1


@settings(max_examples=300, deadline=None)
@given(st.lists(_notifications, max_size=12), st.booleans())
@example([Match("s", -0.0, 1), Match("s", 0.0, 1), Change(1, 0.0, (1, "1", 1.0), (-0.0,))], False)
@example([Match("a", 1, "o1"), Match("bc", 2, "o22"), Change("a", 3, ("o3", "o1"), ("o22",))], False)  # groups encoded whole
@example([Match("a", 1, "o1"), Match("b\\", 2, "\x7f"), Change("a", 3, ("é", "o1"), ('"',))], False)  # and not
def test_compiled_writer_writes_the_formatter_s_lines(notes, reused):
    """``json_block`` by slot codes (one slot per distinct id, objects added and removed in
    one space) is ``note_line``'s bytes; when slots name two ids (``reused``: every id in
    slot 0) it falls back to the line formatter, still the same bytes."""
    want = "".join(note_line(n) for n in notes)
    cols = _as_columns(notes)
    objects: dict = {}

    def slots(values: list, key: dict) -> np.ndarray:
        return np.array([0 if reused else key.setdefault((type(v), repr(v)), len(key)) for v in values],
                        dtype=np.int64)

    cols.codes = (slots(cols.sub.tolist(), {}), slots(cols.added.tolist(), objects),
                  slots(cols.removed.tolist(), objects))
    assert cols.json_block() == want
    batch = NoteBatch()
    batch.extend(notes[:3])
    batch.add(cols)
    assert batch.json_block() == "".join(note_line(n) for n in notes[:3]) + want


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-(1 << 20), 1 << 20) | st.integers(0, 5), max_size=60))
def test_numbered_is_first_appearance(slots):
    """The writer's numbering of slots (in place of ``np.unique``'s): the same partition,
    numbered in order of first appearance, whatever the values (negative, sparse, repeated)."""
    a = np.array(slots, dtype=np.int64)
    codes, firsts = numbered(a)
    want = list(dict.fromkeys(slots))
    assert a[firsts].tolist() == want
    assert codes.tolist() == [want.index(v) for v in slots]
    assert (codes[firsts] == np.arange(len(want))).all() and (np.diff(firsts) > 0).all()


@settings(max_examples=300, deadline=None)
@given(_ids, st.lists(_ids, max_size=5))
@example("s1", ["o1", 2, "é\u2028"])
def test_result_lines_are_json_dumps_lines(sid, ids):
    """``results.jsonl`` lines from the values' encodings are ``json_line``'s bytes."""
    assert result_line(sid, ids) == json_line(result_record(sid, ids))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_ids, st.lists(_ids, max_size=5)), max_size=8))
@example([("s1", ["o1", 2, "é\u2028"]), (7, []), ('"', ["o1", "\x00"])])
def test_results_as_columns_write_what_result_line_writes(pairs):
    """``results.jsonl`` from a single engine's columns (``results_block``) is the bytes of
    ``result_line`` a subscription, and the columns stand for the same (id, results)."""
    objects = list(dict.fromkeys(o for _, ids in pairs for o in ids))
    index = {o: c for c, o in enumerate(objects)}
    res = Results([sid for sid, _ in pairs], np.array([len(ids) for _, ids in pairs], dtype=np.int64),
                  np.array([index[o] for _, ids in pairs for o in ids], dtype=np.int64), objects)
    assert res.pairs() == [(sid, list(ids)) for sid, ids in pairs]
    assert bytes(results_block(res)) == "".join(result_line(sid, ids) for sid, ids in pairs).encode("utf-8")


@pytest.mark.parametrize("seed", range(4))
def test_run_writes_the_results_the_reference_writes(tmp_path, seed):
    """Whole ``run``: the compiled engine's ``results.jsonl`` (by columns) is byte for byte the
    reference engine's (by lines), with ids that need escaping, ints and repeated objects."""
    odd = ["é", '"q"', "a\\b", "\u2028", "\x01", "\U0001F600"]
    stream = random_stream(seed, n_events=(150, 250), junk=False)
    ints: dict = {}
    lines = []
    for rec in stream.events:
        if "id" in rec:  # the same id the same new one (even seeds: ints past float precision)
            i = ints.setdefault(rec["id"], len(ints))
            rec = dict(rec, id=f"{rec['id']}{odd[i % len(odd)]}" if seed % 2 else 2**60 + i)
        lines.append(json.dumps(rec))
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n")
    files = {}
    for index in ("reference", "auto"):
        run(src, tmp_path / index, window=stream.window, space=stream.space, index=index, apart=False)
        files[index] = (tmp_path / index / "results.jsonl").read_bytes()
    assert files["auto"] == files["reference"] and files["auto"].count(b"\n") > 0


def _rows_of(pubs: list[int], slots: list[int]) -> Rows:
    n = len(pubs)
    return Rows(np.array(pubs, dtype=np.int64), np.array(slots, dtype=np.int64), np.arange(n, dtype=np.int64),
                np.arange(n, dtype=np.int64) - 5, np.arange(n) * 0.5, np.arange(n) * 0.25,
                (np.arange(n) % 2).astype(np.int8))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 80)), min_size=1, max_size=6),
       st.lists(st.one_of(st.integers(0, 6), st.integers(2 ** 38 - 1, 2 ** 38 + 1)), min_size=12, max_size=12),
       st.randoms(use_true_random=False))
def test_group_rows_is_the_stable_lexsort(runs, sseq, rnd):
    """``group_rows`` orders rows as ``np.lexsort((seq of slot, pub))`` does, stably (equal
    seqs keep their order), for a pub's rows below and above the insertion-sort bound, and
    with seqs too large to pack with the row's place (the merge sort of the seqs)."""
    pubs, slots = [], []
    for i, (step, m) in enumerate(runs):
        p = (pubs[-1] if pubs else 0) + step
        pubs += [p] * m
        slots += [rnd.randrange(12) for _ in range(m)]
    _grouped_as_lexsort(pubs, slots, sseq)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.lists(st.lists(st.integers(0, 11), max_size=30), max_size=20)),
                min_size=1, max_size=4),
       st.lists(st.integers(0, 6), min_size=12, max_size=12))
def test_group_rows_of_sorted_runs_is_the_stable_lexsort(pubs_runs, sseq):
    """The kernel's shape: a pub's rows are a few ascending runs of slots (one a posting
    list it read), merged (``_merge_runs``) up to ``RUNS`` runs, sorted past them."""
    pubs, slots = [], []
    for step, runs in pubs_runs:
        p = (pubs[-1] if pubs else 0) + step
        for run in runs:
            pubs += [p] * len(run)
            slots += sorted(run)
    _grouped_as_lexsort(pubs, slots, sseq)


def _grouped_as_lexsort(pubs: list[int], slots: list[int], sseq: list[int]) -> None:
    if not pubs:
        return
    seq = np.array(sseq, dtype=np.int64)
    rows = _rows_of(pubs, slots)
    n = len(pubs)
    order = np.full(n, -1, dtype=np.int64)
    assert group_rows(rows, n, seq, False, order)
    assert (order == np.lexsort((seq[rows.s], rows.i))).all()
    # by slot: the same order when the seqs ascend with the slots (``SubTable.in_order``)
    rising = np.cumsum(1 + np.abs(seq) % 3)
    order[:] = -1
    assert group_rows(rows, n, rising, True, order)
    assert (order == np.lexsort((rising[rows.s], rows.i))).all()


def test_group_rows_refuses_pubs_out_of_order():
    rows = _rows_of([0, 2, 1], [0, 1, 2])
    order = np.full(3, 7, dtype=np.int64)
    assert not group_rows(rows, 3, np.arange(3), False, order)
    assert (order == 7).all()  # nothing written


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), _notifications), max_size=12),
       st.lists(_times, min_size=4, max_size=4))
@example([(0, Match("a", 0, 1)), (1, Match("a", 0, 1))], [1, 1.0, 2, 3])  # equal times, int and float
def test_run_times_by_pub_are_the_given_times(notes, times):
    """Notes whose times are the run's (``times[pub]``, boxed only when asked for) read and
    write as the same notes with their times given one by one."""
    notes = sorted(notes, key=lambda pn: pn[0])
    pubs = np.array([p for p, _ in notes], dtype=np.int64)
    timed = [Match(n.sub, times[p], n.object) if isinstance(n, Match) else Change(n.sub, times[p], n.added, n.removed)
             for p, n in notes]
    eager = _as_columns(timed)
    lazy = _as_columns(timed)
    lazy.pub, lazy._t, lazy.times = pubs, None, tuple(times)
    objects: dict = {}

    def slots(values: list, key: dict) -> np.ndarray:
        return np.array([key.setdefault((type(v), repr(v)), len(key)) for v in values], dtype=np.int64)

    lazy.codes = (slots(lazy.sub.tolist(), {}), slots(lazy.added.tolist(), objects), slots(lazy.removed.tolist(), objects))
    assert lazy.to_list() == eager.to_list() == timed
    want = "".join(note_line(n) for n in timed)
    assert lazy.json_block() == want
    assert "".join(lazy.json_lines()) == want
    assert [type(t) for t in lazy.t.tolist()] == [type(n.t) for n in timed]


def test_notifications_follow_seqs_once_a_slot_is_reused():
    """While every subscription took a slot above the ones before (``SubTable.in_order``),
    a pub's notifications are ordered by slot; a reused slot ends that, and the order is
    by seq again: a newer subscription in an older one's slot is notified after the
    older ones, as the reference engine does."""
    lines = ['{"op":"sub","id":"a","t":1,"kind":"range","rect":[0,0,10,10],"keywords":["x"]}',
             '{"op":"sub","id":"b","t":2,"kind":"range","rect":[0,0,10,10],"keywords":["x"]}',
             '{"op":"pub","id":"o1","t":3,"x":5,"y":5,"keywords":["x"]}',
             '{"op":"unsub","id":"a","t":4}',
             '{"op":"sub","id":"c","t":5,"kind":"range","rect":[0,0,10,10],"keywords":["x"]}',
             '{"op":"pub","id":"o2","t":6,"x":5,"y":5,"keywords":["x"]}']
    events, _ = validate([json.loads(x) for x in lines], "none", None)
    ref = ReferenceEngine("none", None)
    want = [ref.apply([ev]) for ev in events]
    eng = Engine("none", None, index="auto")
    got = []
    for ev in events:
        got.append(eng.apply_columnar([ev]).to_list())
        eng._check()
        assert eng.subs.in_order == (ev.seq < 5)
    assert got == want
    assert [n.sub for n in got[-1]] == ["b", "c"]  # c holds a's slot, below b's
