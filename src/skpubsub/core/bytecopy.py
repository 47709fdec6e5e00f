"""Short byte copies for the compiled writers: 16 bytes in one unaligned load and store.

A writer's pieces and values are a few bytes each (an id, a time, ``,"t":``); copied a byte
at a time, the loop's set-up and its byte steps were most of ``notewriter.write``'s time
(~100 ns a range notification line of 43 bytes). ``copy16`` moves 16 bytes whatever the
length wanted, so the caller pads: the source readable and the destination writable 16
bytes past the last byte it means (``notewriter.PAD``)."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


@intrinsic
def copy16(typingctx, dst, i, src, j):
    """Copy ``src[j:j + 16]`` to ``dst[i:i + 16]`` (1-d uint8 arrays, no bounds test: both
    must reach 16 bytes past the index)."""
    if not all(isinstance(a, types.Array) and a.dtype == types.uint8 and a.ndim == 1 for a in (dst, src)):
        return None

    def codegen(context, builder, sig, args):
        d = context.make_array(sig.args[0])(context, builder, args[0])
        s = context.make_array(sig.args[2])(context, builder, args[2])
        word = ir.IntType(128).as_pointer()
        v = builder.load(builder.bitcast(builder.gep(s.data, [args[3]]), word), align=1)
        builder.store(v, builder.bitcast(builder.gep(d.data, [args[1]]), word), align=1)
        return context.get_dummy_value()

    return types.void(dst, types.intp, src, types.intp), codegen
