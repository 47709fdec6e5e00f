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
from skpubsub.io.lexicon import SHIFTS, Lexicon, Words, repeats
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
    """Range subscription lines, some keywords not normal (case, space, empty, repeated), a
    few with no keyword at all (rejected)."""
    odd = ["A", " b", "", "Ü", "ǅ", "de de"]
    out = []
    for i in range(n):
        kws = rng.sample(POOL, rng.randint(1, 3))
        if rng.random() < 0.02:
            kws.append(rng.choice(odd + kws))  # a word to normalise, an empty one, or a repeat
        elif rng.random() < 0.01:
            kws = [" "]  # none left: the block goes line by line
        words = ",".join('"%s"' % k for k in kws)
        out.append(('{"op":"sub","id":"s%d","t":0,"kind":"range","rect":[0,0,1,1],"keywords":[%s]}'
                    % (start + i, words)).encode())
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_gates_coded_blocks_are_its_plain_ones(seed: int, monkeypatch) -> None:
    """Block by block, a coded Gate and a plain one give the same events and rejections (a
    word not normal is normalised by columns in both; a record left without a keyword sends
    its block line by line in both); past ``LEX_MAX`` words the coded one starts a new
    lexicon and its blocks still read right."""
    rng = random.Random(seed)
    if seed % 2:
        monkeypatch.setattr("skpubsub.io.validate.LEX_MAX", 3)
    read_raw = []
    spans_judged = Lexicon.spans_judged  # (``raw_judged``'s too)
    monkeypatch.setattr(Lexicon, "spans_judged",
                        lambda lex, *spans: read_raw.append(spans_judged(lex, *spans)) or read_raw[-1])
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
    assert any(w is not None for w in read_raw)  # blocks whose words were read from their bytes


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


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 40), max_size=SHIFTS + 6), max_size=12), st.integers(0, 3))
def test_repeats_is_a_record_naming_a_code_twice(records, lead) -> None:
    """``repeats`` (array passes: neighbours up to ``SHIFTS`` codes a record, a sort past it)
    says whether some record holds a code twice, whatever the records' lengths, empty ones
    and codes before the first record included."""
    codes = np.asarray([7] * lead + [c for r in records for c in r], dtype=np.int32)
    off = np.asarray(np.cumsum([lead] + [len(r) for r in records]), dtype=np.int64)
    assert repeats(codes, off) == any(len(set(r)) != len(r) for r in records)


# Keywords coded from their bytes (``io.rawwords``, ``Lexicon.raw_judged``)

SPELLED = ["a", "de", "über", "ñu", "x\"y", "b\\c", "tā", "A", "ǅ", "", " b", "a b"]


@st.composite
def _spelling(draw, word: str) -> str:
    """``word`` as a JSON string, each character as itself or as a \\u escape (escaped
    where JSON requires it)."""
    out = []
    for ch in word:
        if ch in '"\\' or draw(st.booleans()):
            out.append("\\u%04x" % ord(ch) if ch not in '"\\' or draw(st.booleans()) else "\\" + ch)
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


@st.composite
def _keywords_json(draw) -> str | None:
    """A record's keywords as JSON text, mostly arrays of strings in varied spellings and
    spacing, sometimes something else (None: no keywords field)."""
    odd = draw(st.sampled_from([None] * 12 + ["none", "[]", "[1]", '"a"', '["a",["b"]]', "null",
                                              '["a","\xff"]', '["\\ud800"]', '["a",2]']))
    if odd is not None:
        return None if odd == "none" else odd
    words = draw(st.lists(st.sampled_from(SPELLED), min_size=1, max_size=4))
    gap = draw(st.sampled_from(["", " ", "\t", " \t "]))
    return "[" + gap + ("," + gap).join([draw(_spelling(w)) for w in words]) + gap + "]"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_keywords_json(), min_size=1, max_size=12), min_size=1, max_size=8), st.booleans())
def test_keywords_coded_from_their_bytes_are_the_lines_own(blocks, small_lexicon) -> None:
    """A coded Gate reading a block's keywords from their bytes gives the events and
    rejections a plain Gate and ``admit_line`` give, whatever the spellings (escapes, two
    spellings of one word, white space), words to normalise, repeats, and keyword fields
    that are not arrays of strings or do not decode; its lexicon's codes read back as the
    words, through a new lexicon mid-way."""
    import skpubsub.io.validate as validate

    old = validate.LEX_MAX
    validate.LEX_MAX = 2 if small_lexicon else old
    try:
        plain, coded, lined = Gate("none"), Gate("none", coded=True), Gate("none")
        first = 1
        for b, kws in enumerate(blocks):
            lines = [('{"op":"sub","id":"s%d","t":%d,"kind":"range","rect":[0,0,1,1]%s}'
                      % (first + i, b, "" if k is None else ',"keywords":' + k)).encode()
                     for i, k in enumerate(kws)]
            buf = b"\n".join(lines)
            want = [lined.admit_line(raw, first + i) for i, raw in enumerate(lines)]
            a = plain.admit_block(first, buf, len(lines))
            got = coded.admit_block(first, buf, len(lines))
            first += len(lines)
            for out in (a, got):
                assert repr(events_of(out if type(out) is list else [out])) == repr(want)
            if type(got) is SubBlock:
                assert list(got.keywords) == [ev.keywords for ev in want]
    finally:
        validate.LEX_MAX = old


def test_spelling_verdicts_and_table_growth() -> None:
    """``spell`` takes arrays of one string or more with white space anywhere JSON allows,
    and nothing else; the table keeps every spelling through its growth (slots and arena)."""
    from skpubsub.io.rawwords import FIRST_SLOTS, RawTable

    t = RawTable()

    def read(*records: str):
        raws = [r.encode() for r in records]
        ends = np.cumsum([len(r) for r in raws]).astype(np.int64)
        return t.codes(np.frombuffer(b"".join(raws), np.uint8), ends - [len(r) for r in raws], ends)

    starts, stops, codes, off = read('["ab"]', ' [ "c" ,\t"\\"d" ] ', '["ab","\\u00fc"]')
    assert off.tolist() == [0, 1, 3, 5] and codes.tolist() == [-1] * 5
    joined = b'["ab"] [ "c" ,\t"\\"d" ] ["ab","\\u00fc"]'
    assert [joined[a:b] for a, b in zip(starts, stops)] == [b"ab", b"c", b'\\"d', b"ab", b"\\u00fc"]
    for bad in ("[]", "[ ]", '["a",]', '["a"', '"a"', "[1]", '["a"] x', '["a\x01"]', '["a\\', ""):
        assert read('["ok"]', bad) is None, bad
    spellings = ['"w%d"' % i for i in range(3 * FIRST_SLOTS)]  # past the first slots and arena
    raws = [("[" + s + "]").encode() for s in spellings]
    buf = np.frombuffer(b"".join(raws), np.uint8)
    ends = np.cumsum([len(r) for r in raws]).astype(np.int64)
    begins = ends - [len(r) for r in raws]
    starts, stops, codes, _ = t.codes(buf, begins, ends)
    t.learn(buf, starts, stops, np.arange(len(codes), dtype=np.int64))
    t.learn(buf, starts[:5], stops[:5], np.full(5, 99, np.int64))  # kept already: unchanged
    assert t.codes(buf, begins, ends)[2].tolist() == list(range(len(spellings)))
