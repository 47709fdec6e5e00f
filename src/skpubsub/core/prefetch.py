"""Prefetch hints for the compiled kernels (``llvm.prefetch``): ask for a cache line ahead of
its use. A hint only, so an index past the end does no harm. Re-exported by
:mod:`.postings` (``P.prefetch_read``) where the kernels call them."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def _prefetch_codegen(rw: int, at: bool):
    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), ir.IntType(8).as_pointer())
        if at:  # a byte offset from the element
            ptr = builder.gep(ptr, [args[2]])
        i32 = ir.IntType(32)
        fty = ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fty,
                                            "llvm.prefetch.p0" if ptr.type.is_opaque else "llvm.prefetch.p0i8")
        builder.call(fn, [ptr, i32(rw), i32(3), i32(1)])  # (address, write?, keep in all levels, data)
        return context.get_dummy_value()

    return codegen


def _prefetcher(rw: int, doc: str):
    @intrinsic
    def prefetch(typingctx, arr, idx):
        return types.void(arr, types.intp), _prefetch_codegen(rw, False)

    prefetch.__doc__ = doc
    return prefetch


@intrinsic
def prefetch_read_at(typingctx, arr, idx, off):
    """``prefetch_read`` of the line ``off`` bytes past the start of ``arr[idx]`` (a record's
    second cache line)."""
    return types.void(arr, types.intp, types.intp), _prefetch_codegen(0, True)


prefetch = _prefetcher(1, """Ask for the cache line of ``arr[idx]`` ahead of a write to it (``llvm.prefetch``,
kept in all cache levels); a hint only, so an index past the end does no harm.""")
prefetch_read = _prefetcher(0, """``prefetch`` ahead of a read (the line need not be taken for writing).""")
