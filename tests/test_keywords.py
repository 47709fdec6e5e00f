"""Keyword normalisation by blocks (``normalise_groups``: NFKC a word, one case fold and one
split over a block's words joined by U+0000; ``split_texts``: the ASCII texts by a table) is,
group by group, ``normalise_keywords`` and ``split_text`` of each: the Gate's column path
relies on it."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from skpubsub.io.keywords import normalise_groups, normalise_keywords, split_text, split_texts

# Characters whose normalisation depends on their neighbours or changes length: combining
# marks (composed with a starter before them), Hangul jamo (L + V compose), ligatures and
# full-width forms (NFKC), ß / İ / Σ / ς (case folding), white space, U+0000 itself.
_TRICKY = "aA \t\u00a0\u0301\u0327\u0308eEıİßẞΣσςﬁＡ\u1100\u1161\u11a8\uac00Å\u212b\x00.-_!"
_text = st.text(st.sampled_from(_TRICKY) | st.characters(codec="utf-8"), max_size=6)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.lists(_text, max_size=4), max_size=6))
@example([["Pizza", "NYC"], ["pizza", "Pizza", "ﬁsh"], [" Straße ", "b"], ["É", "e\u0301"], ["\u1100"], ["\u1161"]])
@example([["a\x00b", "A"], [""]])
def test_normalise_groups_is_normalise_keywords_of_each(groups):
    assert normalise_groups(groups) == [normalise_keywords(g) for g in groups]


_ascii = st.text(st.characters(max_codepoint=127), max_size=12)


@settings(max_examples=500, deadline=None)
@given(st.lists(_ascii | _text, max_size=6))
@example(["Great PIZZA in N.Y.C.! fish & chips", "", "!!", "ΣΑΣ Straße", "a_b-c\x00d", "A\tb\x1fC  9"])
def test_split_texts_is_split_text_of_each(texts):
    assert split_texts(texts) == [split_text(t) for t in texts]
