"""Borrowed views: a kernel's arrays without their reference counts.

Numba counts references to every array a compiled function binds: each call that passes
arrays, each view, slice or field of a record array, each tuple member taken out, is an
atomic increment on the array's memory-info block and a decrement when the variable dies,
and LLVM's pruning removes only the pairs it can match within a few blocks. In the
publish kernel's loops that was about 30% of the object phase (kNN, 100k subscriptions:
17k objects per CPU second with the counts, 25k with every count compiled out).

``borrowed(x)`` returns ``x`` (an array, or a tuple / named tuple holding arrays, nested)
with each array's memory-info and parent pointers null, as an array made over a raw
pointer (``numba.carray``) has: everything derived from it then carries no count, and
Numba's ``NRT_incref``/``NRT_decref`` return at their null test. Sound only while the
caller keeps the originals alive and nothing borrowed outlives the call: a kernel that
borrows its arguments at its top, never allocates into them and returns no array.
"""

from __future__ import annotations

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def _strip(context, builder, typ, val):
    if isinstance(typ, types.Array):
        ary = context.make_array(typ)(context, builder, value=val)
        ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
        ary.parent = cgutils.get_null_value(ary.parent.type)
        return ary._getvalue()
    if isinstance(typ, types.BaseTuple):
        for i, t in enumerate(typ.types):
            val = builder.insert_value(val, _strip(context, builder, t, builder.extract_value(val, i)), i)
    return val


@intrinsic
def borrowed(typingctx, x):
    """``x`` with no reference counts on its arrays (see the module docstring)."""
    def codegen(context, builder, sig, args):
        return _strip(context, builder, sig.args[0], args[0])
    return x(x), codegen
