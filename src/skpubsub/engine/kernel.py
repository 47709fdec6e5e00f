"""The publish kernel: a run of consecutive ``pub`` events in one compiled call
(:class:`.driver.Publisher` prepares the run and turns its output rows into notifications).

For each object the kernel first applies the expiries due before it (SPEC section 2):
an expiring object that some buffer holds is found in those buffers through the index
(each holder's region covers it, so probing its cells as an arrival does finds them
all), leaves them, and a buffer left short of k that may have missed objects is
refilled from the alive objects (:mod:`skpubsub.results.refill`) and re-posted. Then
it scans, under each of the object's posting tokens (its keywords; under ``aoiq`` also
its keyword pairs and their blocks), the postings of its cell on every grid level and
the global list, verifies every live candidate once (a range match its entry decided comes
verified: ``probe.decided``), inserts it into k-best
buffers and follows shrinking balls (tightening a box in place, or re-posting a level
finer). Each change becomes an output row; one pub's rows for one subscription net out
to its notification (:mod:`.netting`). A step whose object is -1 only
applies its expiries: the objects due before a subscription or an unsubscription
(:meth:`.driver.Publisher.leave`).

The kernel never allocates: before a call Python reserves posting room and output
rows, and the kernel stops before an event that might not fit (after finding its
holders, before changing anything) so Python drains, reserves more and resumes. A
shrinking ball's re-post that does not fit is queued for Python (its old entries stay
a superset). Arithmetic is that of :mod:`skpubsub.core.scoring`, in the same order, so
results are bit-identical to the reference engine.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..core import postings as P
from ..core.borrow import borrowed
from ..core.columns import LINE
from ..core.scoring import carries_all, topk_key_ids
from ..index.aoiq import probe_tokens
from ..index.cells import box_at, extent, filter_holds
from ..index.placing import Keywords, post_slot, rarest
from ..index.probe import kw_sig, scan
from ..index.nodecost import finest_cells, not_finer, slot_level, slot_level_cells
from ..index.prefix import post_tokens, prefix_bounds, probe_classes, same_classes
from ..results.kbest import after_put, put
from ..results.refill import refill
from ..store.objects import post_object
from ..store.subscriptions import K_KNN, K_RANGE, K_TOPK

# counters[] fields
(C_OUT, C_QUEUE, C_DEAD, C_CAND, C_AFFECTED, C_LIVE_DROP, C_LIVE_ADD, C_BUDGET, C_MISS, C_REMOVED, C_NEED,
 C_NEED_ROWS, C_REFILLS, C_READS, C_EVICT, C_DECIDED) = range(16)
N_COUNTERS = 16
BUDGET = 16384  # posting entries a kernel call may append (reserved beforehand)
DONE, STOP_EXPIRY, STOP_FULL = 0, 1, 2
AHEAD = 8  # candidates ahead whose lines are asked for while one is verified
NEAR = AHEAD // 2  # candidates ahead whose result buffers are asked for (by then their record's second line came)


@njit(cache=True, nogil=True)  # (the GIL is free for ``run``'s writer thread)
def publish_run(start, n_active, run, tables, grid, directory, work, kbest):
    """Process pubs ``start..`` of ``run`` (over ``tables``: the subscription table ``subs``,
    the object table ``objs``, the alive objects' postings ``alive``; and the compiled ``grid``
    with aoiq's pair ``directory``); returns (next index, status). ``work`` bundles the
    precomputed candidates ``pre``, the work arrays ``scratch``, the output ``rows`` the
    changes go to and the ``counters`` (``C_*``) tallies go to (``core.layouts.Tables``,
    ``Work``).

    Candidates may come precomputed (``pre``) per pub (``pc``, CSR by ``pc_off``) and per
    expiry (``pe``), valid while no region grows: for the slots another index holds (igpt's
    top-k, ``foreign`` bit 1, never posted here; igpt.IGPTIndex.precompute), or for every slot
    when the grid is not ``scanned`` per object (aoiq's Algorithm 2, aoiq.batch_probe). A slot
    refilled meanwhile (its region may grow) joins ``rf`` (``rf_n`` of them, ``foreign`` bit 2)
    and is a candidate of every later object.

    ``kbest`` None: no slot is a kNN or top-k one (``driver.Publisher.kbest``); the code of their
    buffers (``_remove``, ``refill``, ``_follow``, ``put``) is then pruned from this
    specialisation, so a range-only run never compiles it (engine/NOTES.md, "A cold run's compile")."""
    # Every array below is the caller's, alive through the call, and none is returned or
    # stored: borrowed, they pay no reference counts (core.borrow).
    run, tables, grid, directory, work = borrowed((run, tables, grid, directory, work))
    subs, objs, alive = tables
    pre, scratch, rows, counters = work
    sr = subs.rec
    active, kind, match_all, sx, sy, k = sr.active, sr.kind, sr.match_all, sr.x, sr.y, sr.k
    rx1, ry1, rx2, ry2, alpha, kth = sr.rx1, sr.ry1, sr.rx2, sr.ry2, sr.alpha, sr.kth
    kw_off, kw_len, res_off, res_n, kb, complete = sr.kw_off, sr.kw_len, sr.res_off, sr.res_n, sr.kb, sr.complete
    kw_id, kw_ws, res_obj, res_key = subs.kw_id, subs.kw_ws, subs.res_obj, subs.res_key
    orec = objs.rec
    o_refs, o_alive, o_seq, o_x, o_y, o_kwoff, o_kwlen = (orec.refs, orec.alive, orec.seq, orec.x, orec.y,
                                                          orec.kw_off, orec.kw_len)
    o_kw = objs.kw
    b_obj, b_x, b_y, b_kwoff, b_kw, b_wo = run.obj, run.x, run.y, run.kwoff, run.kw, run.wo
    exp_off, exp_obj = run.exp_off, run.exp_obj
    foreign, pc_off, pc, pe_off, pe, rf, rf_n, scanned = pre
    toks, srt, cands, hold_s, hold_p, hold_j = (scratch.toks, scratch.srt, scratch.cands, scratch.hold_s, scratch.hold_p,
                                               scratch.hold_j)
    old_o, old_k, dead = scratch.old_o, scratch.old_k, scratch.dead
    prefix = grid.prefix
    stamp_next, stamp = grid.stamp_next, grid.slots.stamp
    o_life, o_lo = orec.expiry, orec.expiry_lo  # exact pairs (kbest.later; SPEC 6 "Times")
    maxdist = grid.geo[4]
    once = len(pc_off) <= 1 and len(pe_off) <= 1  # the scan is the only source of candidates (probe.scan)
    n = len(b_obj)
    for i in range(start, n):
        # Objects leaving the window before this event (SPEC section 2). A held one leaves
        # the buffers that hold it, found through the index (its key is within each
        # holder's region); a buffer left short of k that may have missed objects is
        # refilled from the alive objects (results.refill) and its region re-posted.
        if counters[C_OUT] + n_active > len(rows.i) or counters[C_BUDGET] < BUDGET // 2:
            return i, STOP_FULL  # Python drains the rows / reserves posting room, then resumes
        held = 0
        for e in range(exp_off[i], exp_off[i + 1]):
            held += o_refs[exp_obj[e]]
        if held > len(hold_s):
            counters[C_NEED_ROWS] = n_active + held
            return i, STOP_FULL
        nh = 0
        for e in range(exp_off[i], exp_off[i + 1]):
            o = exp_obj[e]
            if o_refs[o] == 0:
                continue
            stamp_next[0] += 1
            nc = 0
            if scanned:
                okw = o_kw[o_kwoff[o]:o_kwoff[o] + o_kwlen[o]]
                nt = probe_tokens(okw, directory, srt, toks)
                if prefix:
                    nt = probe_classes(okw, toks, nt)
                nc = scan(o_x[o], o_y[o], toks[:nt], stamp_next[0], active, grid, cands, kw_sig(okw), once, okw[:0],
                           scratch.probe)
            if len(pe_off) > 1:
                nc = _join(pe[pe_off[e]:pe_off[e + 1]], rf[:rf_n[0]], stamp, stamp_next[0], cands, nc)
            found = 0
            for c in range(min(nc, AHEAD)):
                _ask_line(cands[c], kind, sr)
            for c in range(min(nc, NEAR)):
                _ask_held(cands[c], kind, res_off, res_obj)
            for c in range(nc):
                if c + AHEAD < nc:
                    _ask_line(cands[c + AHEAD], kind, sr)
                if c + NEAR < nc:
                    _ask_held(cands[c + NEAR], kind, res_off, res_obj)
                s = cands[c]
                if kind[s] == K_RANGE:
                    continue
                ro = res_off[s]
                for j in range(res_n[s]):
                    if res_obj[ro + j] == o:
                        P.prefetch(res_key, ro + j)  # _remove reads and shifts from there
                        P.prefetch(subs.res_dom, ro + j)
                        hold_s[nh] = s
                        hold_p[nh] = e
                        hold_j[nh] = j
                        nh += 1
                        found += 1
                        break
                if found == o_refs[o]:
                    break
            if found != o_refs[o]:  # a holder outside the index's regions: cannot happen
                counters[C_MISS] += 1
                return i, STOP_EXPIRY
        # Room for every row and every re-post of a refilled (growing) region, before any change.
        need = n_active + nh
        posts = 0
        for h in range(nh):
            need += 2 * k[hold_s[h]]
            posts += kw_len[hold_s[h]] * grid.max_cells
        if counters[C_OUT] + need > len(rows.i) or counters[C_BUDGET] < BUDGET // 2 + posts:
            counters[C_NEED] = posts
            counters[C_NEED_ROWS] = need
            return i, STOP_FULL
        for h in range(nh):
            if kbest is None:  # (nothing is held: pruned when compiled for a range-only run)
                break
            _remove(i, hold_s[h], exp_obj[hold_p[h]], hold_j[h], subs, orec, rows, counters)
        for e in range(exp_off[i], exp_off[i + 1]):
            o_alive[exp_obj[e]] = False
            dead[counters[C_DEAD]] = exp_obj[e]
            counters[C_DEAD] += 1
        for h in range(nh):
            if kbest is None:
                break
            s = hold_s[h]
            if res_n[s] < k[s] and not complete[s]:  # (a second holder row of s finds it refilled)
                kk = k[s]
                ro = res_off[s]
                nold = min(res_n[s], kk)
                for j in range(nold):
                    old_o[j] = res_obj[ro + j]
                    old_k[j] = res_key[ro + j]
                objs.next[0] += 1
                counters[C_READS] += refill(s, subs, objs, alive, grid.freq, maxdist, scratch.heap)
                counters[C_REFILLS] += 1
                nnew = min(res_n[s], kk)
                for j in range(nold):  # the result's net change, as rows
                    if not _holds(res_obj, ro, nnew, old_o[j]):
                        _emit(i, s, -1, 0.0, old_o[j], old_k[j], 1, rows, counters)
                for jj in range(nnew):
                    if not _holds(old_o, 0, nold, res_obj[ro + jj]):
                        _emit(i, s, res_obj[ro + jj], res_key[ro + jj], -1, 0.0, 1, rows, counters)
                if len(pc_off) > 1 and (foreign[s] & 1 or not scanned) and not foreign[s] & 2:
                    foreign[s] |= 2  # its region may have grown: a candidate of every later object
                    rf[rf_n[0]] = s
                    rf_n[0] += 1
                if foreign[s] & 1:
                    continue
                _follow(s, subs, grid, scratch, counters)
        o = b_obj[i]
        if o < 0:  # a leave-only step (driver.Publisher.leave): objects left, none arrives
            continue
        x = b_x[i]
        y = b_y[i]
        okw = b_kw[b_kwoff[i]:b_kwoff[i + 1]]
        wo = b_wo[i]
        if run.retains:  # alive from now on: refills see it (room reserved by the caller)
            post_object(alive, o, o_seq[o], okw)
        stamp_next[0] += 1
        nc = 0
        if scanned:
            nt = probe_tokens(okw, directory, srt, toks)
            if prefix:
                nt = probe_classes(okw, toks, nt)
            nc = scan(x, y, toks[:nt], stamp_next[0], active, grid, cands, kw_sig(okw), once, okw, scratch.probe)
        if len(pc_off) > 1:
            nc = _join(pc[pc_off[i]:pc_off[i + 1]], rf[:rf_n[0]], stamp, stamp_next[0], cands, nc)
        counters[C_CAND] += nc
        for c in range(min(nc, AHEAD)):
            _ask(cands[c], kind, kw_off, sr, kw_id)
        for c in range(min(nc, NEAR)):
            _ask_buffer(cands[c], kind, res_off, k, subs)
        for c in range(nc):
            if c + AHEAD < nc:
                _ask(cands[c + AHEAD], kind, kw_off, sr, kw_id)
            if c + NEAR < nc:
                _ask_buffer(cands[c + NEAR], kind, res_off, k, subs)
            s = cands[c]
            if s < 0:  # a range match its entry decided (probe.scan): no record read
                _emit(i, ~s, o, 0.0, -2, 0.0, 0, rows, counters)
                counters[C_AFFECTED] += 1
                counters[C_DECIDED] += 1
                continue
            ks = kind[s]
            # The spatial test first: it reads the record the scan brought in, the keyword
            # test reads the subscription's keywords elsewhere (most candidates fail the
            # former). Both must pass either way: the order changes no outcome.
            d2 = 0.0
            if ks == K_RANGE:
                if not (rx1[s] <= x <= rx2[s] and ry1[s] <= y <= ry2[s]):
                    continue
            else:
                dx = x - sx[s]
                dy = y - sy[s]
                d2 = dx * dx + dy * dy  # scoring.dist2
                if ks == K_KNN and not d2 <= kth[s]:
                    continue
            off = kw_off[s]
            ln = kw_len[s]
            if match_all[s] and ln > 1 and not carries_all(okw, kw_id, off, ln):
                continue
            if foreign[s] and not _shares(okw, kw_id, off, ln):
                continue  # not found under one of its keywords (another index's, or refilled): SPEC 1 needs one
            if ks == K_RANGE:
                _emit(i, s, o, 0.0, -2, 0.0, 0, rows, counters)
                counters[C_AFFECTED] += 1
                continue
            if kbest is None:  # (no such slot: pruned when compiled for a range-only run)
                continue
            if ks == K_KNN:
                key = d2
            else:
                key = topk_key_ids(okw, kw_id, kw_ws, off, ln, wo, alpha[s], d2, maxdist)
            if key <= kth[s]:  # enters the buffer (kbest.put; SubTable's entry rule)
                ro = res_off[s]
                nn = res_n[s]
                kk = k[s]
                cap = kb[s]
                left = res_obj[ro + kk - 1] if nn >= kk else -1  # leaves the first k if o enters them
                left_key = res_key[ro + kk - 1] if nn >= kk else 0.0
                n1, dropped, pos = put(subs, o_refs, o_life, o_lo, ro, nn, cap, kk, key, o)
                if pos < 0:  # dominated by k objects that stay as long as it does
                    counters[C_EVICT] += 1
                    continue
                counters[C_EVICT] += nn + 1 - n1 - (dropped >= 0)
                counters[C_AFFECTED] += 1
                res_n[s] = n1
                before = kth[s]
                after_put(subs, s)
                if kth[s] != before and not foreign[s] & 1:  # the region shrank
                    _follow(s, subs, grid, scratch, counters)
                if pos < kk:  # entered the result (below the first k nothing changes)
                    _emit(i, s, o, key, left, left_key, 0, rows, counters)
    return n, DONE


@njit(inline="always", cache=True)
def _ask(s, kind, kw_off, sr, kw_id):
    """Ask for what verifying candidate ``s`` reads beyond its record's first line (which the
    scan read): its keywords and, but for a range subscription, the second line (``kth``,
    the buffer's place). Verifying waited on both, one candidate after another
    (engine/NOTES.md, "Candidates asked for ahead")."""
    if s >= 0:
        P.prefetch_read(kw_id, kw_off[s])
        if kind[s] != K_RANGE:
            P.prefetch_read_at(sr, s, LINE)


@njit(inline="always", cache=True)
def _ask_line(s, kind, sr):
    """Ask for the second line of a kNN or top-k slot's record (``res_off``, ``res_n``): the
    search for an expiring object's holders reads it for every candidate."""
    if kind[s] != K_RANGE:
        P.prefetch_read_at(sr, s, LINE)


@njit(inline="always", cache=True)
def _ask_held(s, kind, res_off, res_obj):
    """Ask for the start of a kNN or top-k slot's buffer (``res_obj``), which the search for an
    expiring object's holders reads next (its line ``_ask_line`` asked for before)."""
    if kind[s] != K_RANGE:
        P.prefetch_read(res_obj, res_off[s])


@njit(inline="always", cache=True)
def _ask_buffer(s, kind, res_off, k, subs):
    """Ask for the result buffer of kNN or top-k candidate ``s`` (its first and k-th entries'
    lines in ``res_key``, ``res_obj`` and ``res_dom``), which ``put`` reads and shifts when the
    candidate enters: three more misses one after another (engine/NOTES.md, "Result buffers
    asked for ahead"). ``res_off`` and ``k`` are on the record's second line, which ``_ask``
    asked for ``AHEAD - NEAR`` candidates before."""
    if s >= 0 and kind[s] != K_RANGE:
        ro = res_off[s]
        last = ro + k[s] - 1
        P.prefetch(subs.res_key, ro)
        P.prefetch(subs.res_obj, ro)
        P.prefetch(subs.res_dom, ro)
        P.prefetch(subs.res_key, last)
        P.prefetch(subs.res_obj, last)


@njit(inline="always", cache=True)
def _holds(objs, lo, n, o):
    """Is ``o`` among ``objs[lo:lo + n]``?"""
    for j in range(lo, lo + n):
        if objs[j] == o:
            return True
    return False


@njit(inline="always", cache=True)
def _shares(okw, kw_id, off, ln):
    """Does an object with keyword ids ``okw`` carry one of ``kw_id[off:off+ln]``?"""
    for j in range(off, off + ln):
        for v in okw:
            if v == kw_id[j]:
                return True
    return False


@njit(cache=True)
def _join(more, rf, stamp, st, cands, nc):
    """Append the slots of ``more`` and ``rf`` not yet among ``cands`` (``stamp`` ``st``)."""
    for s in more:
        if stamp[s] != st:
            stamp[s] = st
            cands[nc] = s
            nc += 1
    for s in rf:
        if stamp[s] != st:
            stamp[s] = st
            cands[nc] = s
            nc += 1
    return nc


@njit(cache=True)
def _remove(i, s, o, at, subs, orec, rows, counters):
    """Take object ``o`` (leaving the window) out of the k-best list of ``s``, where the search
    for its holders found it (``at``; earlier, if another object left the list since); as
    kbest.remove: the entry rule and the region stand, no dominator count changes."""
    r = subs.rec[s]
    res_obj, res_key, res_dom = subs.res_obj, subs.res_key, subs.res_dom
    ro = r.res_off
    nn = r.res_n
    kk = r.k
    pos = min(at, nn - 1)
    while pos > 0 and res_obj[ro + pos] != o:  # moved up by removals before it
        pos -= 1
    while res_obj[ro + pos] != o:
        pos += 1
    if pos < kk:  # leaves the result; the (k+1)-th, if any, moves up into it
        if nn > kk:
            _emit(i, s, res_obj[ro + kk], res_key[ro + kk], o, res_key[ro + pos], 1, rows, counters)
        else:
            _emit(i, s, -1, 0.0, o, res_key[ro + pos], 1, rows, counters)
    for j in range(pos, nn - 1):
        res_key[ro + j] = res_key[ro + j + 1]
        res_obj[ro + j] = res_obj[ro + j + 1]
        res_dom[ro + j] = res_dom[ro + j + 1]
    r.res_n = nn - 1
    orec[o].refs -= 1
    counters[C_REMOVED] += 1


@njit(cache=True)
def _follow(s, subs, grid, scratch, counters):
    """The region of ``s`` changed (cgrid.CompiledGrid.update, same rule): tighten its box in
    place, or re-post it under a new epoch when it grew, left or entered the global lists, or
    shrank a level finer, or (a top-k slot) its keywords' size classes changed
    (prefix.same_classes). A re-post beyond the reserved room is queued for Python; only a
    shrinking region may be (its old entries stay a superset), which the caller's reserve
    guarantees."""
    r = subs.rec[s]
    g = grid.slots[s]
    ks = r.kind
    kw_id, freq, rb, geo = subs.kw_id, grid.freq, grid.rb, grid.geo
    tmp, ext, ptok, queue = scratch.cell, scratch.ext, scratch.ptok, scratch.queue
    box = g.box
    cur = g.level
    pre = grid.prefix and ks == K_TOPK
    same = not pre or same_classes(r.kw_off, r.kw_len, r.kth, g.pkth, r.alpha, rb)
    same = same and filter_holds(ks, r.kth, g.pkth, r.alpha, geo[4])
    old = 1 if cur < 0 else (box[2] - box[0] + 1) * (box[3] - box[1] + 1)
    best = -1
    if extent(r, geo[4], ext):
        lmax = grid.lmax
        ok, a0, b0, a1, b1 = finest_cells(ext, geo, lmax)
        inside = False  # the region's box on its level cur lies in the posted one: tighten in place
        c0 = c1 = c2 = c3 = 0
        if cur >= 0:
            if ok:  # the box on cur from the finest one by shifts (finest_cells)
                d = lmax - cur
                c0 = a0 >> d
                c1 = b0 >> d
                c2 = a1 >> d
                c3 = b1 >> d
            else:
                box_at(cur, ext, geo, tmp)
                c0 = np.int64(tmp[0])
                c1 = np.int64(tmp[1])
                c2 = np.int64(tmp[2])
                c3 = np.int64(tmp[3])
            inside = same and box[0] <= c0 and box[1] <= c1 and c2 <= box[2] and c3 <= box[3]
            # Tightening in place needs only best <= cur: when no rule goes finer than cur,
            # the cost model (text rate, object counts) need not be asked.
            if inside and ok and not_finer(cur, a0, b0, a1, b1, lmax, grid.max_cells):
                best = 0
        if best < 0:
            if ok:
                best = slot_level_cells(s, subs, grid, a0, b0, a1, b1, tmp)  # its box into tmp
            else:
                best = slot_level(s, subs, grid, ext, tmp)
        if 0 <= best <= cur and inside:
            box[0] = c0
            box[1] = c1
            box[2] = c2
            box[3] = c3
            counters[C_LIVE_DROP] += (old - (c2 - c0 + 1) * (c3 - c1 + 1)) * g.nkw
            return
    elif cur < 0 and same:
        return  # unbounded, and already in the global lists
    off = r.kw_off
    ln = r.kw_len
    if g.tok >= 0:  # under its own token (aoiq)
        ln = 1
    elif r.match_all and ln > 1:  # GI²: only under the least frequent keyword
        off = rarest(kw_id, off, ln, freq, grid.refs)
        ln = 1
    if best < 0:
        tmp[:] = -1
        n = ln
    else:
        n = ln * (tmp[2] - tmp[0] + 1) * (tmp[3] - tmp[1] + 1)  # at most (top-k: some keywords may go)
    if n <= counters[C_BUDGET]:
        g.pkth = r.kth  # the k-th key posted at (placing.regions)
        if pre:  # the prefix order follows the frequencies as they are now
            prefix_bounds(off, ln, kw_id, subs.kw_ws, freq, rb)
            m = post_tokens(off, ln, kw_id, r.kth, r.alpha, rb, ptok)
            n = n // ln * m
            ln = m
        counters[C_LIVE_DROP] += old * g.nkw
        g.epoch = (g.epoch + 1) & 0xFFFFFFFF
        g.level = best
        box[0] = tmp[0]
        box[1] = tmp[1]
        box[2] = tmp[2]
        box[3] = tmp[3]
        g.nkw = ln
        g.pending = False
        # the tokens as int64 in ptok and the keywords alone, as place_slot passes them: one
        # specialisation of post_slot (engine/NOTES.md, "A cold run's compile")
        if g.tok >= 0:
            ptok[0] = g.tok
        elif not pre:
            for j in range(ln):  # (no slice assigned an array: engine/NOTES.md, "A cold run's compile")
                ptok[j] = kw_id[off + j]
        post_slot(grid.store, Keywords(subs.rec, kw_id), grid.slots, s, ptok[:ln], grid.lmax, geo[4])
        counters[C_LIVE_ADD] += n
        counters[C_BUDGET] -= n
    elif not g.pending:  # out of reserved room: Python re-posts it after the call
        g.pending = True
        queue[counters[C_QUEUE]] = s
        counters[C_QUEUE] += 1


@njit(inline="always", cache=True)
def _emit(i, s, a, ka, d, kd, r, rows, counters):
    """One output row of pub ``i`` for slot ``s``: object ``a`` (key ``ka``) entered its
    result and ``d`` (key ``kd``) left it; ``r`` 1 for a removal on expiry. ``d`` -2 marks a
    range match of ``a``."""
    n = counters[C_OUT]
    rows.i[n] = i
    rows.s[n] = s
    rows.a[n] = a
    rows.d[n] = d
    rows.ka[n] = ka
    rows.kd[n] = kd
    rows.r[n] = r
    counters[C_OUT] = n + 1


@njit(cache=True)
def holding(cands, o, subs):
    """The slots among ``cands`` whose buffer holds object ``o``."""
    sr = subs.rec
    out = np.empty(len(cands), dtype=np.int64)
    n = 0
    for s in cands:
        r = sr[s]
        if r.kind == K_RANGE:
            continue
        for j in range(r.res_off, r.res_off + r.res_n):
            if subs.res_obj[j] == o:
                out[n] = s
                n += 1
                break
    return out[:n]
