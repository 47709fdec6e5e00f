"""Keywords numbered where they are read (``io.lexicon``): a coded keyword column is the
tuples it stands for; the Gate's coded blocks are its plain ones; a vocabulary's ids of
codes are its ids of the words, through forgetting and recycling."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skpubsub.core.vocab import Vocabulary
from skpubsub.io.events import SubBlock, events_of
from skpubsub.io.lexicon import Lexicon, Words
from skpubsub.io.validate import Gate

POOL = ["a", "b", "de", "mx", "q", "ñu", "über", "x1"]


def _kws(rng: random.Random, n: int) -> list[tuple[str, ...]]:
    return [tuple(rng.sample(POOL, rng.randint(1, 4))) for _ in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_a_coded_column_is_its_tuples(seed: int) -> None:
    rng = random.Random(seed)
    lex = Lexicon()
    kws = _kws(rng, 40)
    w = Words.of(kws, lex)
    assert list(w) == kws and [w[i] for i in range(-40, 40)] == kws + kws and len(w) == 40
    a, b = sorted(rng.sample(range(41), 2))
    assert list(w[a:b]) == kws[a:b] and list(w[a:b][1:]) == kws[a:b][1:] and w[::3] == kws[::3]
    assert list(w[a:b]) == list(w[a:b][:]) and len(w[b:a]) == 0
    with pytest.raises(IndexError):
        w[40]
    more = Words.of(_kws(rng, 7), lex)
    joined = Words.concat([w[a:b], more, w[:a]])
    assert list(joined) == kws[a:b] + list(more) + kws[:a]
    assert Words.concat([w, Words.of(kws, Lexicon())]) is None  # codes of two lexicons do not mix
    sent = pickle.loads(pickle.dumps(w[a:b]))  # in transit: the codes alone, the receiver's lexicon
    assert sent.lex is None and len(sent) == b - a
    mirror = Lexicon()
    mirror.words.extend(lex.fresh())
    sent.lex = mirror
    assert list(sent) == kws[a:b] and lex.fresh() == []


def _sub_lines(rng: random.Random, n: int, start: int) -> list[bytes]:
    """Range subscription lines, some keywords not normal (case, space, empty, repeated)."""
    odd = ["A", " b", "", "Ü", "ǅ", "de de"]
    out = []
    for i in range(n):
        kws = rng.sample(POOL, rng.randint(1, 3))
        if rng.random() < 0.02:
            kws.append(rng.choice(odd + kws))  # a word to normalise, an empty one, or a repeat
        words = ",".join('"%s"' % k for k in kws)
        out.append(('{"op":"sub","id":"s%d","t":0,"kind":"range","rect":[0,0,1,1],"keywords":[%s]}'
                    % (start + i, words)).encode())
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_gates_coded_blocks_are_its_plain_ones(seed: int, monkeypatch) -> None:
    """Block by block, a coded Gate and a plain one give the same events and rejections (a
    block with a word not normal goes line by line in both); past ``LEX_MAX`` words the
    coded one starts a new lexicon and its blocks still read right."""
    rng = random.Random(seed)
    if seed % 2:
        monkeypatch.setattr("skpubsub.io.validate.LEX_MAX", 3)
    plain, coded = Gate("none"), Gate("none", coded=True)
    first, kinds, gens = 1, set(), set()
    for _ in range(12):
        lines = _sub_lines(rng, rng.randint(1, 60), first)
        a = plain.admit_block(first, b"\n".join(lines), len(lines))
        b = coded.admit_block(first, b"\n".join(lines), len(lines))
        first += len(lines)
        assert type(a) is type(b) and repr(events_of(a if type(a) is list else [a])) == repr(
            events_of(b if type(b) is list else [b]))
        if type(b) is SubBlock:
            assert type(b.keywords) is Words
            gens.add(b.keywords.lex.gen)
        kinds.add(type(b))
    assert kinds == {SubBlock, list}  # both ways were taken
    assert (len(gens) > 1) == bool(seed % 2)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["hold", "release", "recycle"]),
                          st.lists(st.lists(st.sampled_from(POOL), min_size=1, max_size=4, unique=True),
                                   min_size=1, max_size=6)), min_size=1, max_size=30),
       st.sampled_from([None, 0, 3]), st.booleans())
def test_ids_of_codes_are_the_ids_of_the_words(ops, slack, relex) -> None:
    """Two vocabularies given the same holders, one by words (``ids``) and one by codes
    (``ids_of``), give the same ids while words are forgotten and their ids recycled to
    other words (a code's kept id is then stale), and with a new lexicon mid-way."""
    words_v, codes_v = Vocabulary(slack=slack), Vocabulary(slack=slack)
    lex = Lexicon()
    held: list[np.ndarray] = []
    for i, (op, kws) in enumerate(ops):
        if relex and i == len(ops) // 2:
            lex = Lexicon(1)
        if op == "hold" or not held:
            want = np.asarray(words_v.ids([w for k in kws for w in k]), dtype=np.int64)
            got = codes_v.ids_of(Words.of([tuple(k) for k in kws], lex))
            assert got.dtype == np.int64 and got.tolist() == want.tolist()
            for v in (words_v, codes_v):
                v.hold(want)
            held.append(want)
        elif op == "release":
            gone = held.pop(0)
            for v in (words_v, codes_v):
                v.release(gone)
        else:
            for v in (words_v, codes_v):
                v.released()
                v.recycle()
        assert codes_v.words == words_v.words
    codes_v._check()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["learn", "objects", "forget"]),
                          st.lists(st.lists(st.sampled_from(POOL), min_size=1, max_size=4, unique=True),
                                   min_size=1, max_size=6)), min_size=1, max_size=25))
def test_known_of_codes_is_known_runs_of_the_words(ops) -> None:
    """Objects' words by codes (``known_of``: nothing learnt, placeholders for the rest,
    a code found unknown remembered until a word is learnt) against ``known_runs`` of the
    words, while subscriptions' words are learnt and forgotten in between."""
    words_v, codes_v = Vocabulary(), Vocabulary()
    lex = Lexicon()
    held: list[np.ndarray] = []
    for op, kws in ops:
        flat = [w for k in kws for w in k]
        if op == "learn":
            ids = np.asarray(words_v.ids(flat), dtype=np.int64)
            assert codes_v.ids_of(Words.of([tuple(k) for k in kws], lex)).tolist() == ids.tolist()
            for v in (words_v, codes_v):
                v.hold(ids)
            held.append(ids)
        elif op == "forget" and held:
            gone = held.pop(0)
            for v in (words_v, codes_v):
                v.release(gone)
                v.released()
                v.recycle()
        else:
            col = Words.of([tuple(k) for k in kws], lex)
            off = np.zeros(len(kws) + 1, dtype=np.int64)
            np.cumsum([len(k) for k in kws], out=off[1:])
            want = words_v.known_runs(flat, off, np.diff(off))
            got = codes_v.known_of(col)
            assert got.dtype == np.int32 and got.tolist() == want.tolist()
        assert codes_v.words == words_v.words


def test_coded_objects_a_result_holds_keep_their_words() -> None:
    """Under a window that retains no object, the objects of a coded run that kNN results
    hold are named once the run is done (the others freed unnamed), so ``export`` gives
    them with their words, as an engine given plain blocks does."""
    from skpubsub.runtime.engines import make_engine

    rng = random.Random(4)
    lines = []
    for i in range(40):
        lines.append(('{"op":"sub","id":"k%d","t":0,"kind":"knn","x":%.3f,"y":%.3f,"k":2,"keywords":["%s"]}'
                      % (i, rng.uniform(-9, 9), rng.uniform(-9, 9), rng.choice(POOL[:4]))).encode())
    for i in range(300):
        kws = ",".join('"%s"' % w for w in rng.sample(POOL, rng.randint(1, 4)))
        lines.append(('{"op":"pub","id":"o%d","t":%d,"x":%.3f,"y":%.3f,"keywords":[%s]}'
                      % (i, 1 + i // 50, rng.uniform(-9, 9), rng.uniform(-9, 9), kws)).encode())
    got = {}
    for coded in (False, True):
        gate, eng = Gate("none", coded=coded), make_engine("auto", "none")
        for a in range(0, len(lines), 70):
            block = gate.admit_block(a + 1, b"\n".join(lines[a:a + 70]), len(lines[a:a + 70]))
            eng.apply_columnar([block] if type(block) is not list else block)
        if coded:
            assert type(block.keywords) is Words and not eng.objs._unnamed
        eng._check()
        got[coded] = [eng.export(f"k{i}") for i in range(40)]
    assert got[True] == got[False] and sum(map(len, got[True])) == 80
