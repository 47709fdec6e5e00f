"""Compiled publish path: a run of consecutive ``pub`` events in one kernel call.

For each object the kernel first applies the expiries due before it (SPEC section 2):
an expiring object that some buffer holds is found in those buffers through the index
(each holder's region covers it, so probing its cells as an arrival does finds them
all), leaves them, and a buffer left short of k that may have missed objects is
refilled from the alive objects (:mod:`skpubsub.results.refill`) and re-posted. Then
it scans, under each of the object's posting tokens (its keywords; under ``aoiq`` also
its keyword pairs and their blocks), the postings of its cell on every grid level and
the global list, verifies every live candidate once, inserts it into k-best
buffers and follows shrinking balls (tightening a box in place, or re-posting a level
finer). Each change becomes an output row; one pub's rows for one subscription net out
to its notification (:mod:`skpubsub.io.notifications`).

The kernel never allocates: before a call Python reserves posting room and output
rows, and the kernel stops before an event that might not fit (after finding its
holders, before changing anything) so Python drains, reserves more and resumes. A
shrinking ball's re-post that does not fit is queued for Python (its old entries stay
a superset). Arithmetic is that of :mod:`skpubsub.core.scoring`, in the same order, so
results are bit-identical to the reference engine.
"""

from __future__ import annotations

import heapq
import math
from itertools import islice

import numpy as np
from numba import njit

from ..index.aoiq import probe_room, probe_tokens
from ..index.cells import box_at, extent
from ..index.cgrid import post_slot, scan
from ..index.nodecost import slot_level
from ..index.prefix import NC, post_tokens, prefix_bounds, probe_classes, same_classes
from ..io.notifications import Notes, net_changes
from ..results.kbest import after_put, put
from ..results.refill import refill
from ..core.scoring import carries_all, topk_key_ids
from ..store.objects import post_object
from ..store.subscriptions import K_KNN, K_RANGE, K_TOPK
# counters[] fields
(C_OUT, C_QUEUE, C_DEAD, C_CAND, C_AFFECTED, C_LIVE_DROP, C_LIVE_ADD, C_BUDGET, C_MISS, C_REMOVED, C_NEED,
 C_NEED_ROWS, C_REFILLS, C_READS, C_EVICT) = range(15)
BUDGET = 16384  # posting entries a kernel call may append (reserved beforehand)
SEGMENT = 512  # pubs per kernel call: bounds the window bookkeeping done per call
DONE, STOP_EXPIRY, STOP_FULL = 0, 1, 2


@njit(cache=True)
def publish_run(start, n_active,
                b_obj, b_x, b_y, b_kwoff, b_kw, b_wo, exp_off, exp_obj, stamp_next,
                o_refs, o_alive, o_seq, o_life, o_x, o_y, o_kwoff, o_kwlen, o_kw, o_wo, o_stamp, o_next,
                a_keys, a_vals, a_head, a_tail, a_fill, a_key, a_free, a_next, a_data, a_bfree, a_meta,
                retains, policy,
                active, kind, match_all, sx, sy, rx1, ry1, rx2, ry2, k, alpha,
                kw_off, kw_len, kw_id, kw_ws, res_off, res_n, kth, res_obj, res_key, res_dom, kb, complete,
                h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free, meta,
                epoch, lvl, pending, box, nkw, geo, lmax, max_cells, counts, theta_n, warm_n, freq, stamp, rb, pkth,
                prefix, ptok, tok, pk_keys, pk_vals, p_b0, p_start, p_count, d_min, d_max, d_tok, toks, srt,
                cands, hold_s, hold_p, old_o, old_k, hk, hq, ho,
                out_i, out_s, out_o, out_d, out_ka, out_kd, out_r, queue, dead, counters,
                foreign, pc_off, pc, pe_off, pe, rf, rf_n, scanned):
    """Process pubs ``start..`` of the batch; returns (next index, status).

    Candidates may come precomputed per pub (``pc``, CSR by ``pc_off``) and per expiry
    (``pe``), valid while no region grows: for the slots another index holds (igpt's top-k,
    ``foreign`` bit 1, never posted here; igpt.IGPTIndex.precompute), or for every slot when
    the grid is not ``scanned`` per object (aoiq's Algorithm 2, aoiq.batch_probe). A slot
    refilled meanwhile (its region may grow) joins ``rf`` (``rf_n`` of them, ``foreign``
    bit 2) and is a candidate of every later object."""
    maxdist = geo[4]
    tmp = np.empty(4, dtype=np.int32)
    ext = np.empty(4)
    n = len(b_obj)
    for i in range(start, n):
        # Objects leaving the window before this event (SPEC section 2). A held one leaves
        # the buffers that hold it, found through the index (its key is within each
        # holder's region); a buffer left short of k that may have missed objects is
        # refilled from the alive objects (results.refill) and its region re-posted.
        if counters[C_OUT] + n_active > len(out_i) or counters[C_BUDGET] < BUDGET // 2:
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
                nt = probe_tokens(okw, pk_keys, pk_vals, p_b0, p_start, p_count, d_min, d_max, d_tok, srt, toks)
                if prefix:
                    nt = probe_classes(okw, toks, nt)
                nc = scan(o_x[o], o_y[o], toks[:nt], stamp_next[0], active, epoch, lvl, box, stamp, geo, lmax,
                          h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data,
                          blk_free, meta, cands)
            if len(pe_off) > 1:
                nc = _join(pe[pe_off[e]:pe_off[e + 1]], rf[:rf_n[0]], stamp, stamp_next[0], cands, nc)
            found = 0
            for c in range(nc):
                s = cands[c]
                if kind[s] == K_RANGE:
                    continue
                ro = res_off[s]
                for j in range(res_n[s]):
                    if res_obj[ro + j] == o:
                        hold_s[nh] = s
                        hold_p[nh] = e
                        nh += 1
                        found += 1
                        break
                if found == o_refs[o]:
                    break
            if found != o_refs[o]:  # a holder outside the index's regions: cannot happen
                counters[C_MISS] += 1
                return i, STOP_EXPIRY
        # Room for every row and every re-post of a refilled (growing) region, before any change.
        rows = n_active + nh
        posts = 0
        for h in range(nh):
            rows += 2 * k[hold_s[h]]
            posts += kw_len[hold_s[h]] * max_cells
        if counters[C_OUT] + rows > len(out_i) or counters[C_BUDGET] < BUDGET // 2 + posts:
            counters[C_NEED] = posts
            counters[C_NEED_ROWS] = rows
            return i, STOP_FULL
        for h in range(nh):
            _remove(i, hold_s[h], exp_obj[hold_p[h]], k, res_off, res_n, res_obj, res_key, res_dom,
                    o_refs, out_i, out_s, out_o, out_d, out_ka, out_kd, out_r, counters)
        for e in range(exp_off[i], exp_off[i + 1]):
            o_alive[exp_obj[e]] = False
            dead[counters[C_DEAD]] = exp_obj[e]
            counters[C_DEAD] += 1
        for h in range(nh):
            s = hold_s[h]
            if res_n[s] < k[s] and not complete[s]:  # (a second holder row of s finds it refilled)
                kk = k[s]
                ro = res_off[s]
                nold = min(res_n[s], kk)
                for j in range(nold):
                    old_o[j] = res_obj[ro + j]
                    old_k[j] = res_key[ro + j]
                o_next[0] += 1
                counters[C_READS] += refill(
                       s, kind, match_all, sx, sy, alpha, kw_off, kw_len, kw_id, kw_ws, freq,
                       res_off, res_n, kth, res_obj, res_key, res_dom, kb, k, complete, policy,
                       o_refs, o_alive, o_seq, o_life, o_kwoff, o_kwlen, o_kw, o_x, o_y, o_wo, o_stamp, o_next[0],
                       maxdist, hk, hq, ho, a_keys, a_vals, a_head, a_tail, a_fill, a_key, a_free, a_next, a_data, a_bfree,
                       a_meta)
                counters[C_REFILLS] += 1
                nnew = min(res_n[s], kk)
                for j in range(nold):  # the result's net change, as rows
                    if not _holds(res_obj, ro, nnew, old_o[j]):
                        _emit(i, s, -1, 0.0, old_o[j], old_k[j], 1, out_i, out_s, out_o, out_d, out_ka, out_kd,
                              out_r, counters)
                for jj in range(nnew):
                    if not _holds(old_o, 0, nold, res_obj[ro + jj]):
                        _emit(i, s, res_obj[ro + jj], res_key[ro + jj], -1, 0.0, 1, out_i, out_s, out_o, out_d,
                              out_ka, out_kd, out_r, counters)
                if len(pc_off) > 1 and (foreign[s] & 1 or not scanned) and not foreign[s] & 2:
                    foreign[s] |= 2  # its region may have grown: a candidate of every later object
                    rf[rf_n[0]] = s
                    rf_n[0] += 1
                if foreign[s] & 1:
                    continue
                _follow(s, kind[s], sx, sy, kth, alpha, lvl, pending, box, nkw, geo, lmax, max_cells, counts,
                        theta_n, warm_n, tmp, ext, queue, counters, match_all, kw_off, kw_len, kw_id, kw_ws, freq,
                        tok, epoch, rb, pkth, prefix, ptok,
                        h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free, meta)
        o = b_obj[i]
        x = b_x[i]
        y = b_y[i]
        okw = b_kw[b_kwoff[i]:b_kwoff[i + 1]]
        wo = b_wo[i]
        if retains:  # alive from now on: refills see it (room reserved by the caller)
            post_object(a_keys, a_vals, a_head, a_tail, a_fill, a_key, a_free, a_next, a_data, a_bfree, a_meta,
                        o, o_seq[o], okw)
        stamp_next[0] += 1
        nc = 0
        if scanned:
            nt = probe_tokens(okw, pk_keys, pk_vals, p_b0, p_start, p_count, d_min, d_max, d_tok, srt, toks)
            if prefix:
                nt = probe_classes(okw, toks, nt)
            nc = scan(x, y, toks[:nt], stamp_next[0], active, epoch, lvl, box, stamp, geo, lmax,
                      h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free, meta,
                      cands)
        if len(pc_off) > 1:
            nc = _join(pc[pc_off[i]:pc_off[i + 1]], rf[:rf_n[0]], stamp, stamp_next[0], cands, nc)
        counters[C_CAND] += nc
        for c in range(nc):
            s = cands[c]
            ks = kind[s]
            off = kw_off[s]
            ln = kw_len[s]
            if match_all[s] and ln > 1 and not carries_all(okw, kw_id, off, ln):
                continue
            if foreign[s] & 2 and not _shares(okw, kw_id, off, ln):  # from rf: not found by a keyword
                continue
            if ks == K_RANGE:
                if rx1[s] <= x <= rx2[s] and ry1[s] <= y <= ry2[s]:
                    _emit(i, s, o, 0.0, -2, 0.0, 0, out_i, out_s, out_o, out_d, out_ka, out_kd, out_r, counters)
                    counters[C_AFFECTED] += 1
                continue
            dx = x - sx[s]
            dy = y - sy[s]
            d2 = dx * dx + dy * dy  # scoring.dist2
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
                n1, dropped, pos = put(ro, nn, cap, kk, key, o, res_key, res_obj, res_dom, o_refs, o_life,
                                       policy != 0)
                if pos < 0:  # dominated by k objects that stay as long as it does
                    counters[C_EVICT] += 1
                    continue
                counters[C_EVICT] += nn + 1 - n1 - (dropped >= 0)
                counters[C_AFFECTED] += 1
                res_n[s] = n1
                before = kth[s]
                after_put(s, n1, cap, kk, ks, policy, res_key, ro, kth, complete)
                if kth[s] != before and not foreign[s] & 1:  # the region shrank
                    _follow(s, ks, sx, sy, kth, alpha, lvl, pending, box, nkw, geo, lmax, max_cells, counts,
                            theta_n, warm_n, tmp, ext, queue, counters, match_all, kw_off, kw_len, kw_id, kw_ws,
                            freq, tok, epoch, rb, pkth, prefix, ptok,
                            h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free,
                            meta)
                if pos < kk:  # entered the result (below the first k nothing changes)
                    _emit(i, s, o, key, left, left_key, 0, out_i, out_s, out_o, out_d, out_ka, out_kd, out_r,
                          counters)
    return n, DONE


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
def _remove(i, s, o, k, res_off, res_n, res_obj, res_key, res_dom, o_refs,
            out_i, out_s, out_o, out_d, out_ka, out_kd, out_r, counters):
    """Take object ``o`` (leaving the window) out of the k-best list of ``s``; as
    kbest.remove: the entry rule and the region stand, no dominator count changes."""
    ro = res_off[s]
    nn = res_n[s]
    kk = k[s]
    pos = 0
    while res_obj[ro + pos] != o:
        pos += 1
    if pos < kk:  # leaves the result; the (k+1)-th, if any, moves up into it
        if nn > kk:
            _emit(i, s, res_obj[ro + kk], res_key[ro + kk], o, res_key[ro + pos], 1,
                  out_i, out_s, out_o, out_d, out_ka, out_kd, out_r, counters)
        else:
            _emit(i, s, -1, 0.0, o, res_key[ro + pos], 1, out_i, out_s, out_o, out_d, out_ka, out_kd, out_r,
                  counters)
    for j in range(pos, nn - 1):
        res_key[ro + j] = res_key[ro + j + 1]
        res_obj[ro + j] = res_obj[ro + j + 1]
        res_dom[ro + j] = res_dom[ro + j + 1]
    res_n[s] = nn - 1
    o_refs[o] -= 1
    counters[C_REMOVED] += 1


@njit(cache=True)
def _follow(s, ks, sx, sy, kth, alpha, lvl, pending, box, nkw, geo, lmax, max_cells, counts, theta_n, warm_n,
            tmp, ext, queue, counters, match_all, kw_off, kw_len, kw_id, kw_ws, freq, tok, epoch, rb, pkth, prefix,
            ptok, h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free, meta):
    """The region of ``s`` changed (cgrid.CompiledGrid.update, same rule): tighten its box in
    place, or re-post it under a new epoch when it grew, left or entered the global lists, or
    shrank a level finer, or (a top-k slot) its keywords' size classes changed
    (prefix.same_classes). A re-post beyond the reserved room is queued for Python; only a
    shrinking region may be (its old entries stay a superset), which the caller's reserve
    guarantees."""
    cur = lvl[s]
    pre = prefix and ks == K_TOPK
    same = not pre or same_classes(kw_off[s], kw_len[s], kth[s], pkth[s], alpha[s], rb)
    old = 1 if cur < 0 else (box[s, 2] - box[s, 0] + 1) * (box[s, 3] - box[s, 1] + 1)
    best = -1
    if extent(ks, sx[s], sy[s], 0.0, 0.0, 0.0, 0.0, kth[s], alpha[s], geo[4], ext):
        best = slot_level(ks, match_all[s], tok[s], kw_off[s], kw_len[s], kw_id, freq, ext, geo, lmax, max_cells,
                          counts, theta_n, warm_n, tmp)
        if 0 <= best <= cur:
            after = box_at(cur, ext, geo, tmp)
            if same and box[s, 0] <= tmp[0] and box[s, 1] <= tmp[1] and tmp[2] <= box[s, 2] and tmp[3] <= box[s, 3]:
                box[s, 0] = tmp[0]
                box[s, 1] = tmp[1]
                box[s, 2] = tmp[2]
                box[s, 3] = tmp[3]
                counters[C_LIVE_DROP] += (old - after) * nkw[s]
                return
            box_at(best, ext, geo, tmp)
    elif cur < 0 and same:
        return  # unbounded, and already in the global lists
    off = kw_off[s]
    ln = kw_len[s]
    if tok[s] >= 0:  # under its own token (aoiq)
        ln = 1
    elif match_all[s] and ln > 1:  # GI²: only under the least frequent keyword
        j = off
        for jj in range(off + 1, off + ln):
            if freq[kw_id[jj]] < freq[kw_id[j]]:
                j = jj
        off = j
        ln = 1
    if best < 0:
        tmp[:] = -1
        n = ln
    else:
        n = ln * (tmp[2] - tmp[0] + 1) * (tmp[3] - tmp[1] + 1)  # at most (top-k: some keywords may go)
    if n <= counters[C_BUDGET]:
        if pre:  # the prefix order follows the frequencies as they are now
            prefix_bounds(off, ln, kw_id, kw_ws, freq, rb)
            pkth[s] = kth[s]
            m = post_tokens(off, ln, kw_id, kth[s], alpha[s], rb, ptok)
            n = n // ln * m
            ln = m
        counters[C_LIVE_DROP] += old * nkw[s]
        epoch[s] = (epoch[s] + 1) & 0xFFFFFFFF
        lvl[s] = best
        box[s, 0] = tmp[0]
        box[s, 1] = tmp[1]
        box[s, 2] = tmp[2]
        box[s, 3] = tmp[3]
        nkw[s] = ln
        pending[s] = False
        if tok[s] >= 0:
            post_slot(h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free,
                      meta, s, epoch[s], best, tmp, tok[s:s + 1], lmax)
        elif pre:
            post_slot(h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free,
                      meta, s, epoch[s], best, tmp, ptok[:ln], lmax)
        else:
            post_slot(h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free,
                      meta, s, epoch[s], best, tmp, kw_id[off:off + ln], lmax)
        counters[C_LIVE_ADD] += n
        counters[C_BUDGET] -= n
    elif not pending[s]:  # out of reserved room: Python re-posts it after the call
        pending[s] = True
        queue[counters[C_QUEUE]] = s
        counters[C_QUEUE] += 1


@njit(inline="always", cache=True)
def _emit(i, s, a, ka, d, kd, r, out_i, out_s, out_o, out_d, out_ka, out_kd, out_r, counters):
    """One output row of pub ``i`` for slot ``s``: object ``a`` (key ``ka``) entered its
    result and ``d`` (key ``kd``) left it; ``r`` 1 for a removal on expiry. ``d`` -2 marks a
    range match of ``a``."""
    n = counters[C_OUT]
    out_i[n] = i
    out_s[n] = s
    out_o[n] = a
    out_d[n] = d
    out_ka[n] = ka
    out_kd[n] = kd
    out_r[n] = r
    counters[C_OUT] = n + 1


# -- the driver ----------------------------------------------------------------------------
def publish_pubs(eng, pubs: list, out: list, tags: list | None = None, expire: list | None = None) -> None:
    """Apply a run of pub events on ``eng`` (an Engine over a compiled index), appending
    notifications to ``out`` (a list or a ``NoteBatch``) in stream order (and, with ``tags``, each one's pub index).
    ``expire``: under external expiry, the seqs of the objects that leave before each pub."""
    slots = [eng._add_object(ev) for ev in pubs]
    eng.index.refresh(eng.stats["objects"])  # the run's keywords are counted: review `all` postings
    i = 0
    while i < len(pubs):
        h = eng._sub_expiry
        if h and h[0][0] <= float(pubs[i].t):  # a subscription ends first: plain path
            _extend(out, tags, eng._apply(pubs[i], slots[i], expire[i] if expire else ()), i)
            i += 1
            continue
        j = i + 1
        limit = h[0][0] if h else math.inf
        end = min(len(pubs), i + SEGMENT)
        while j < end and float(pubs[j].t) < limit:
            j += 1
        done = _segment(eng, pubs[i:j], slots[i:j], expire[i:j] if expire else None, out, tags, i)
        i += done
        if done < j - i + done:  # stopped: a holder not found through the index (never expected)
            _extend(out, tags, eng._apply(pubs[i], slots[i], expire[i] if expire else ()), i)
            i += 1


def held_by(eng, o: int) -> list[int]:
    """Slots whose buffer holds object ``o``, found through the index (the plain path's
    expiry on a compiled index): each holder's region covers ``o``."""
    sc, oc = eng.subs.cols, eng.objs.cols
    cands = eng.index.candidates(oc.x[o], oc.y[o], eng.objs.keywords(o))
    return _holding(cands, o, sc.kind, sc.res_off, sc.res_n, eng.subs.res.obj).tolist()


@njit(cache=True)
def _holding(cands, o, kind, res_off, res_n, res_obj):
    out = np.empty(len(cands), dtype=np.int64)
    n = 0
    for s in cands:
        if kind[s] == K_RANGE:
            continue
        for j in range(res_off[s], res_off[s] + res_n[s]):
            if res_obj[j] == o:
                out[n] = s
                n += 1
                break
    return out[:n]


def _extend(out: list, tags: list | None, notes: list, i: int) -> None:
    out.extend(notes)
    if tags is not None:
        tags.extend([i] * len(notes))


def _expiries(eng, pubs: list, slots: list[int], expire: list | None) -> tuple[np.ndarray, np.ndarray, list]:
    """CSR of the objects that leave the window before each pub, and the heap entries taken."""
    m = len(pubs)
    w = eng.window
    owner: list[int] = []
    objs: list[int] = []
    taken: list = []  # popped from the time-window heap; what is not consumed goes back
    if eng.external:
        if expire:
            alive = eng._alive_by_seq
            here = {ev.seq: o for ev, o in zip(pubs, slots)}  # may leave within the run
            for i, seqs in enumerate(expire):
                for q in seqs:
                    owner.append(i)
                    objs.append(alive[q] if q in alive else here[q])
    elif w.kind == "count":
        a = len(eng._fifo)
        seq = list(islice(eng._fifo, max(0, min(a, a + m - w.n))))  # only the ones that leave
        seq.extend(slots)
        for i in range(m):
            e = a + i - w.n
            if e >= 0:
                owner.append(i)
                objs.append(seq[e])
    elif w.kind == "time":
        times = np.array([float(ev.t) for ev in pubs])
        last = times[-1]
        heap = eng._obj_expiry
        while heap and heap[0][0] <= last:
            taken.append(heapq.heappop(heap))
        ex = eng.objs.cols.expiry
        due = [(float(ex[o]), pubs[i].seq, o) for i, o in enumerate(slots) if ex[o] <= last]
        entries = sorted(taken + due)
        if entries:  # each leaves before the first pub at or after its expiry
            owner = np.searchsorted(times, [e[0] for e in entries], side="left").tolist()
            objs = [e[2] for e in entries]
    off = np.zeros(m + 1, dtype=np.int64)
    if owner:
        np.add.at(off, np.array(owner) + 1, 1)
        order = np.argsort(np.array(owner), kind="stable")
        exp_obj = np.array(objs, dtype=np.int64)[order]
    else:
        exp_obj = np.empty(0, dtype=np.int64)
    return np.cumsum(off), exp_obj, taken


def _segment(eng, pubs: list, slots: list[int], expire: list | None, out: list, tags: list | None,
             base: int) -> int:
    """Run the kernel over ``pubs``; returns how many it applied (all but on a missing holder)."""
    m = len(pubs)
    exp_off, exp_obj, taken = _expiries(eng, pubs, slots, expire)
    oc, sc, top = eng.objs.cols, eng.subs.cols, eng.index
    ix = getattr(top, "grid_index", top)  # the compiled grid the kernel scans (igpt keeps range, knn in one)
    st = ix.store
    objs = eng.objs
    ix._fit(sc.capacity - 1)
    b_obj = np.array(slots, dtype=np.int64)
    kw_lists = [objs.keywords(o) for o in slots]
    b_kwoff = np.zeros(m + 1, dtype=np.int64)
    b_kwoff[1:] = np.cumsum([len(k) for k in kw_lists])
    b_kw = np.concatenate(kw_lists).astype(np.int32)
    b_x = oc.x[b_obj]
    b_y = oc.y[b_obj]
    b_wo = oc.wo[b_obj]
    cap = max(65536, 2 * sc.count + 16)
    rows = _Rows(cap)
    queue = np.empty(sc.capacity, dtype=np.int64)
    cands = np.empty(sc.capacity, dtype=np.int64)
    hold_s = np.empty(cap, dtype=np.int64)
    hold_p = np.empty(cap, dtype=np.int64)
    maxk = int(sc.k[: sc.top].max()) if sc.top else 1
    old_o = np.empty(maxk, dtype=np.int64)
    old_k = np.empty(maxk)
    hk, hq, ho = eng._scratch(int(sc.kb[: sc.top].max()) if sc.top else 1)
    dead = np.empty(max(1, len(exp_obj)), dtype=np.int64)
    m_kw = int(max(oc.kw_len[b_obj].max(), oc.kw_len[exp_obj].max() if len(exp_obj) else 0))
    # an object's posting tokens (aoiq.probe_tokens, prefix.probe_classes)
    toks = np.empty(probe_room(m_kw, ix.directory) + NC * m_kw, dtype=np.int64)
    srt = np.empty(m_kw, dtype=np.int64)
    ptok = np.empty(max(1, int(sc.kw_len[: sc.top].max()) if sc.top else 1), dtype=np.int64)  # a re-post's tokens
    rf = np.empty(sc.capacity, dtype=np.int64)
    rf_n = np.zeros(1, dtype=np.int64)
    scanned = getattr(top, "scans", True)  # aoiq[batch=true]: every candidate comes precomputed
    pre = getattr(top, "precompute", None)
    got = None
    if pre is not None and (top is not ix or not scanned):  # slots a scan of ix would not find (publish_run)
        # Only an object held now or arriving in the run can be held when it leaves, unless a
        # refill takes it, and a refilled slot is in rf: the others need no candidates.
        may_hold = (oc.refs[exp_obj] > 0) | np.isin(exp_obj, b_obj)
        e_kw = [objs.keywords(o) if h else objs.keywords(o)[:0] for o, h in zip(exp_obj.tolist(), may_hold)]
        e_kwoff = np.zeros(len(e_kw) + 1, dtype=np.int64)
        e_kwoff[1:] = np.cumsum([len(k) for k in e_kw])
        e_kw = np.concatenate(e_kw).astype(np.int32) if e_kw else np.empty(0, dtype=np.int32)
        got = pre(b_x, b_y, b_kwoff, b_kw, oc.x[exp_obj], oc.y[exp_obj], e_kwoff, e_kw)
    touch = got is not None and hasattr(top, "touched")  # igpt's score snapshots
    changed = [rf[:0]]
    if got is not None:
        foreign, pc_off, pc, pe_off, pe = got
        if not scanned:
            eng.stats["candidates"] += top.rejected
    else:
        foreign = np.zeros(sc.capacity, dtype=np.int8)
        pc_off = pe_off = np.zeros(1, dtype=np.int64)
        pc = pe = np.empty(0, dtype=np.int64)
    eng._fit_object_stamps()
    retains = eng.window.retains
    start = 0
    status = DONE
    budget = BUDGET
    while True:
        counters = np.zeros(15, dtype=np.int64)
        counters[C_BUDGET] = budget
        st.reserve(budget, budget)
        if retains:
            eng.alive.store.reserve(len(b_kw), len(b_kw))
        nxt, status = publish_run(
            start, sc.count, b_obj, b_x, b_y, b_kwoff, b_kw, b_wo, exp_off, exp_obj, ix.stamp_next,
            oc.refs, oc.alive, oc.seq, oc.expiry, oc.x, oc.y, oc.kw_off, oc.kw_len, objs.kw.id, oc.wo,
            eng._ostamp, eng._ostamp_next, *eng.alive.store.arrays, retains, eng.subs.policy,
            sc.active, sc.kind, sc.match_all, sc.x, sc.y, sc.rx1, sc.ry1, sc.rx2, sc.ry2, sc.k, sc.alpha,
            sc.kw_off, sc.kw_len, eng.subs.kw.id, eng.subs.kw.ws, sc.res_off, sc.res_n, sc.kth,
            eng.subs.res.obj, eng.subs.res.key, eng.subs.res.dom, sc.kb, sc.complete,
            *st.arrays,
            ix.epoch, ix.level, ix.pending, ix.box, ix.nkw, ix.geo, ix.lmax, ix.max_cells, ix.counts, ix.theta_n,
            ix.warm_n, eng.vocab.freq, ix.stamp, ix.class_bounds(), ix.pkth, ix.n_topk > 0, ptok,
            ix.tok, *ix.directory, toks, srt, cands, hold_s, hold_p, old_o, old_k, hk, hq, ho,
            *rows.arrays, queue, dead, counters, foreign, pc_off, pc, pe_off, pe, rf, rf_n, scanned)
        if touch:
            changed.append(np.unique(rows.s[: counters[C_OUT]]))
        _drain(eng, pubs, counters, rows, queue, dead, out, tags, base)
        if retains:
            eng.alive.added(nxt - start, int(b_kwoff[nxt] - b_kwoff[start]))
        if status != STOP_FULL:
            break
        start = nxt
        budget = max(BUDGET, 2 * int(counters[C_NEED]))
        if counters[C_NEED_ROWS] > len(hold_s):
            cap = 2 * int(counters[C_NEED_ROWS])
            rows = _Rows(cap)
            hold_s = np.empty(cap, dtype=np.int64)
            hold_p = np.empty(cap, dtype=np.int64)
    done = nxt
    if touch:  # scores that rose (results changed) or may have dropped (refills)
        top.touched(np.concatenate([*changed, rf[: rf_n[0]]]))
    ix.count(b_x[:done], b_y[:done])  # after the fact: a level choice is cost, never results
    if status == STOP_EXPIRY:
        eng.stats["expiry_stops"] += 1
    _sync(eng, pubs[:done], slots[:done], exp_off, exp_obj, taken, done)
    return done


class _Rows:
    """The kernel's output rows (see ``_emit``)."""

    def __init__(self, cap: int) -> None:
        self.i = np.empty(cap, dtype=np.int64)
        self.s = np.empty(cap, dtype=np.int64)
        self.a = np.empty(cap, dtype=np.int64)
        self.d = np.empty(cap, dtype=np.int64)
        self.ka = np.empty(cap)
        self.kd = np.empty(cap)
        self.r = np.empty(cap, dtype=np.int8)

    @property
    def arrays(self) -> tuple:
        return self.i, self.s, self.a, self.d, self.ka, self.kd, self.r


def _drain(eng, pubs, counters, rows: _Rows, queue, dead, out, tags: list | None, base: int) -> None:
    """Turn one kernel call's rows into notifications, one net change per (pub, subscription)
    (SPEC section 6), appended to ``out`` (a list, or columns to a ``NoteBatch``);
    re-post queued slots; free objects."""
    sc = eng.subs.cols
    ix = getattr(eng.index, "grid_index", eng.index)
    n = int(counters[C_OUT])
    eng.stats["candidates"] += int(counters[C_CAND])
    eng.stats["affected"] += int(counters[C_AFFECTED])
    ix.live_entries += int(counters[C_LIVE_ADD]) - int(counters[C_LIVE_DROP])
    if n:
        d_all = rows.d[:n]
        left = d_all[(rows.r[:n] == 0) & (d_all >= 0)]  # pushed past k: out of a buffer of k
        if len(left):
            eng._unref.update(left.tolist())
        keep = np.lexsort((sc.seq[rows.s[:n]], rows.i[:n]))  # stable: a pair's rows stay in order
        n_i = np.empty(n, dtype=np.int64)
        n_s = np.empty(n, dtype=np.int64)
        n_match = np.empty(n, dtype=np.bool_)
        add_off = np.empty(n + 1, dtype=np.int64)
        add_obj = np.empty(n, dtype=np.int64)
        rem_off = np.empty(n + 1, dtype=np.int64)
        rem_obj = np.empty(n, dtype=np.int64)
        c = net_changes(rows.i[keep], rows.s[keep], rows.a[keep], rows.d[keep], rows.ka[keep], rows.kd[keep],
                        eng.objs.cols.seq, n_i, n_s, n_match, add_off, add_obj, rem_off, rem_obj,
                        np.empty(2 * n))
        oids = eng.objs.ids
        times = np.empty(len(pubs), dtype=object)
        times[:] = [ev.t for ev in pubs]
        notes = Notes(n_i[:c], eng.subs.ids[n_s[:c]], times[n_i[:c]], n_match[:c], add_off[: c + 1],
                      oids[add_obj[: add_off[c]]], rem_off[: c + 1], oids[rem_obj[: rem_off[c]]])
        if isinstance(out, list):
            out.extend(notes.to_list())
        else:
            out.add(notes)
        if tags is not None:
            tags.extend((notes.pub + base).tolist())
    for s in queue[: int(counters[C_QUEUE])].tolist():
        if sc.active[s] and ix.pending[s]:
            ix._place(s)
    ix.maybe_compact()
    eng._dead.extend(dead[: int(counters[C_DEAD])].tolist())
    eng.stats["expired"] += int(counters[C_DEAD])
    eng.stats["expiry_misses"] += int(counters[C_MISS])
    eng.stats["expiry_removals"] += int(counters[C_REMOVED])
    eng.stats["refills"] += int(counters[C_REFILLS])
    eng.stats["refill_reads"] += int(counters[C_READS])
    eng.stats["evictions"] += int(counters[C_EVICT])


def _sync(eng, pubs, slots, exp_off, exp_obj, taken, done: int) -> None:
    """Bring the window bookkeeping up to the ``done`` pubs the kernel applied."""
    w = eng.window
    consumed = set(exp_obj[: exp_off[done]].tolist())
    if eng.external:
        for i in range(done):
            if w.retains:
                eng._alive_by_seq[pubs[i].seq] = slots[i]
        seq = eng.objs.cols.seq
        for o in consumed:
            eng._alive_by_seq.pop(int(seq[o]), None)
    elif w.kind == "count":
        for i in range(done):
            if exp_off[i + 1] > exp_off[i]:
                eng._fifo.popleft()
            eng._fifo.append(slots[i])
    elif w.kind == "time":
        for entry in taken:
            if entry[2] not in consumed:
                heapq.heappush(eng._obj_expiry, entry)
        ex = eng.objs.cols.expiry
        for i in range(done):
            if slots[i] not in consumed:
                heapq.heappush(eng._obj_expiry, (float(ex[slots[i]]), pubs[i].seq, slots[i]))
    if w.retains:  # the kernel posted the pubs it applied as alive
        for o in eng._dead:
            eng.alive.remove(o, eng.objs.keywords(o).tolist())
            eng._unref.add(o)
    eng._dead.clear()
    eng._unref.update(slots[:done])
    oc = eng.objs.cols
    for o in eng._unref:
        if oc.refs[o] == 0 and not oc.alive[o]:
            eng.objs.free(o)
    eng._unref.clear()
