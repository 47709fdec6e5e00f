"""Compiled publish path: a run of consecutive ``pub`` events in one kernel call.

For each object the kernel scans, under each of its keywords, the postings of
its cell on every grid level and the global list, verifies every live
candidate once, inserts it into k-best buffers, follows shrinking balls
(tightening a box in place, or re-posting a level finer), and writes one output
row per affected subscription. It never allocates: Python reserves room for
``BUDGET`` posting entries before each call, and a re-post that does not fit is
queued for Python (the old entries stay valid meanwhile, a superset). An object
leaving the window is handled in the kernel when no buffer holds it; otherwise
the kernel stops before that event and the engine applies it on its plain
Python path, so every refill goes through one well-tested route. Arithmetic is that of :mod:`skpubsub.scoring`, in the same
order, so results are bit-identical to the reference engine.
"""

from __future__ import annotations

import heapq
import math
from itertools import islice

import numpy as np
from numba import njit

from .io.events import Change, Match
from .index import postings as P
from .index.cgrid import best_level, box_at, cell_of, extent, level_key, post_slot
from .subscriptions import K_KNN, K_RANGE
# counters[] fields
C_OUT, C_QUEUE, C_DEAD, C_CAND, C_AFFECTED, C_LIVE_DROP, C_LIVE_ADD, C_BUDGET = 0, 1, 2, 3, 4, 5, 6, 7
BUDGET = 16384  # posting entries a kernel call may append (reserved beforehand)
SEGMENT = 512  # pubs per kernel call: bounds the window bookkeeping done per call
DONE, STOP_EXPIRY, STOP_FULL = 0, 1, 2


@njit(cache=True)
def publish_run(start, n_active,
                b_obj, b_x, b_y, b_kwoff, b_kw, b_wo, b_stamp, exp_off, exp_obj,
                o_refs, o_alive,
                active, kind, match_all, sx, sy, rx1, ry1, rx2, ry2, k, alpha,
                kw_off, kw_len, kw_id, kw_ws, res_off, res_n, kth, res_obj, res_key, kb, complete,
                h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free, meta,
                epoch, lvl, pending, box, nkw, geo, lmax, max_cells, freq, stamp,
                out_i, out_s, out_o, out_d, queue, dead, counters):
    """Process pubs ``start..`` of the batch; returns (next index, status)."""
    maxdist = geo[4]
    tmp = np.empty(4, dtype=np.int32)
    ext = np.empty(4)
    n = len(b_obj)
    for i in range(start, n):
        # Objects leaving the window before this event (SPEC section 2).
        for e in range(exp_off[i], exp_off[i + 1]):
            if o_refs[exp_obj[e]] > 0:
                return i, STOP_EXPIRY
        if counters[C_OUT] + n_active > len(out_i) or counters[C_BUDGET] < BUDGET // 2:
            return i, STOP_FULL  # Python drains the rows / reserves posting room, then resumes
        for e in range(exp_off[i], exp_off[i + 1]):
            o_alive[exp_obj[e]] = False
            dead[counters[C_DEAD]] = exp_obj[e]
            counters[C_DEAD] += 1
        o = b_obj[i]
        x = b_x[i]
        y = b_y[i]
        okw = b_kw[b_kwoff[i]:b_kwoff[i + 1]]
        wo = b_wo[i]
        st = b_stamp[i]
        for w in okw:
            for level in range(-1, lmax + 1):
                if level < 0:
                    key = -(np.int64(w) + 1)
                    cx = cy = 0
                else:
                    cx = cell_of(x, geo[0], geo[2], 1 << level)
                    cy = cell_of(y, geo[1], geo[3], 1 << level)
                    key = level_key(w, level, cx, cy, lmax)
                p = P.lookup(h_keys, h_vals, key)
                if p < 0:
                    continue
                rb = p_head[p]
                wb = rb
                wi = 0
                dropped = 0
                while rb >= 0:
                    cnt = P.B if rb != p_tail[p] else p_fill[p]
                    for ri in range(cnt):
                        ent = blk_data[rb * P.B + ri]
                        s = ent >> 32
                        # cgrid.live(): current epoch, this level, and its box covers this cell
                        if not active[s] or epoch[s] != (ent & 0xFFFFFFFF) or lvl[s] != level or (
                                level >= 0 and not (box[s, 0] <= cx <= box[s, 2] and box[s, 1] <= cy <= box[s, 3])):
                            dropped += 1
                            continue
                        blk_data[wb * P.B + wi] = ent  # compact in place
                        wi += 1
                        if wi == P.B:
                            wb = blk_next[wb]
                            wi = 0
                        if stamp[s] == st:
                            continue  # already seen under another keyword
                        stamp[s] = st
                        counters[C_CAND] += 1
                        # Verify (written inline: a call per candidate costs more than the check).
                        ks = kind[s]
                        off = kw_off[s]
                        ln = kw_len[s]
                        if match_all[s] and ln > 1:
                            ok = True
                            for j in range(off, off + ln):
                                found = False
                                for v in okw:
                                    if v == kw_id[j]:
                                        found = True
                                        break
                                if not found:
                                    ok = False
                                    break
                            if not ok:
                                continue
                        if ks == K_RANGE:
                            if rx1[s] <= x <= rx2[s] and ry1[s] <= y <= ry2[s]:
                                _emit(i, s, o, -2, out_i, out_s, out_o, out_d, counters)
                            continue
                        dx = x - sx[s]
                        dy = y - sy[s]
                        d2 = dx * dx + dy * dy  # scoring.dist2
                        if ks == K_KNN:
                            key = d2
                        else:  # scoring.text_sim then scoring.topk_key, same operation order
                            tsim = 0.0
                            for j in range(off, off + ln):
                                for v in okw:
                                    if v == kw_id[j]:
                                        tsim += kw_ws[j] * wo
                                        break
                            a = alpha[s]
                            ssim = max(0.0, 1.0 - math.sqrt(d2) / maxdist)
                            key = -(a * ssim + (1.0 - a) * tsim)
                        if key <= kth[s]:
                            _insert(i, s, o, key, ks, sx, sy, k, alpha, res_off, res_n, kth, res_obj, res_key,
                                    kb, complete, o_refs, lvl, pending, box, nkw, geo, lmax, max_cells, tmp, ext,
                                    out_i, out_s, out_o, out_d, queue, counters,
                                    match_all, kw_off, kw_len, kw_id, freq, epoch,
                                    h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data,
                                    blk_free, meta)
                    rb = blk_next[rb]
                if dropped:
                    P.truncate(p, wb, wi, h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next,
                               blk_free, meta, dropped)
    return n, DONE


@njit(cache=True)
def _insert(i, s, o, key, ks, sx, sy, k, alpha, res_off, res_n, kth, res_obj, res_key,
            kb, complete, o_refs, lvl, pending, box, nkw, geo, lmax, max_cells, tmp, ext,
            out_i, out_s, out_o, out_d, queue, counters,
            match_all, kw_off, kw_len, kw_id, freq, epoch,
            h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free, meta):
    """Put object ``o`` into the k-best list of ``s`` (its key is ``<= kth``) and follow the ball."""
    # Insert the newest object before equal keys (it wins ties); O(kb). See SubTable for
    # the buffer (kb >= k entries, the result is its first k) and its entry rule.
    ro = res_off[s]
    nn = res_n[s]
    kk = k[s]
    cap = kb[s]
    pos = nn
    while pos > 0 and res_key[ro + pos - 1] >= key:
        pos -= 1
    left = res_obj[ro + kk - 1] if nn >= kk else -1  # leaves the first k if pos < k
    if nn == cap:
        o_refs[res_obj[ro + cap - 1]] -= 1
        end = cap - 1
    else:
        end = nn
        nn += 1
        res_n[s] = nn
    if nn == cap:  # full: from now on objects may pass it by unseen
        complete[s] = False
    for j in range(end, pos, -1):
        res_key[ro + j] = res_key[ro + j - 1]
        res_obj[ro + j] = res_obj[ro + j - 1]
    res_key[ro + pos] = key
    res_obj[ro + pos] = o
    o_refs[o] += 1
    kth[s] = res_key[ro + nn - 1] if (nn == cap or not complete[s]) else np.inf  # kbest.threshold
    if np.isfinite(kth[s]):
        # The ball shrank (cgrid.CompiledGrid.update, same rule): leave the global list or go a
        # level finer by re-posting under a new epoch; else tighten the box in place.
        cur = lvl[s]
        if extent(ks, sx[s], sy[s], 0.0, 0.0, 0.0, 0.0, kth[s], alpha[s], geo[4], ext):
            best = best_level(ext, geo, lmax, max_cells, tmp)
            old = 1 if cur < 0 else (box[s, 2] - box[s, 0] + 1) * (box[s, 3] - box[s, 1] + 1)
            if cur < 0 or best > cur:
                off = kw_off[s]
                ln = kw_len[s]
                if match_all[s] and ln > 1:  # GI²: only under the least frequent keyword
                    j = off
                    for jj in range(off + 1, off + ln):
                        if freq[kw_id[jj]] < freq[kw_id[j]]:
                            j = jj
                    off = j
                    ln = 1
                n = ln * (tmp[2] - tmp[0] + 1) * (tmp[3] - tmp[1] + 1)
                if n <= counters[C_BUDGET]:
                    counters[C_LIVE_DROP] += old * nkw[s]
                    epoch[s] = (epoch[s] + 1) & 0xFFFFFFFF
                    lvl[s] = best
                    box[s, 0] = tmp[0]
                    box[s, 1] = tmp[1]
                    box[s, 2] = tmp[2]
                    box[s, 3] = tmp[3]
                    nkw[s] = ln
                    pending[s] = False
                    post_slot(h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free,
                          meta, s, epoch[s], best, tmp, kw_id[off:off + ln], lmax)
                    counters[C_LIVE_ADD] += n
                    counters[C_BUDGET] -= n
                elif not pending[s]:  # out of reserved room: Python re-posts it after the call
                    pending[s] = True
                    queue[counters[C_QUEUE]] = s
                    counters[C_QUEUE] += 1
            else:
                after = box_at(cur, ext, geo, tmp)
                box[s, 0] = tmp[0]
                box[s, 1] = tmp[1]
                box[s, 2] = tmp[2]
                box[s, 3] = tmp[3]
                counters[C_LIVE_DROP] += (old - after) * nkw[s]
    _emit(i, s, o, left if pos < kk else -3, out_i, out_s, out_o, out_d, counters)


@njit(cache=True)
def _emit(i, s, o, d, out_i, out_s, out_o, out_d, counters):
    n = counters[C_OUT]
    out_i[n] = i
    out_s[n] = s
    out_o[n] = o
    out_d[n] = d
    counters[C_OUT] = n + 1
    counters[C_AFFECTED] += 1


# -- the driver ----------------------------------------------------------------------------
def publish_pubs(eng, pubs: list, out: list, tags: list | None = None) -> None:
    """Apply a run of pub events on ``eng`` (an Engine over a compiled index), appending
    notifications to ``out`` in stream order (and, with ``tags``, each one's pub index)."""
    slots = [eng._add_object(ev) for ev in pubs]
    eng.index.refresh(eng.stats["objects"])  # the run's keywords are counted: review `all` postings
    i = 0
    while i < len(pubs):
        h = eng._sub_expiry
        if h and h[0][0] <= float(pubs[i].t):  # a subscription ends first: plain path
            _extend(out, tags, eng._apply(pubs[i], slots[i]), i)
            i += 1
            continue
        j = i + 1
        limit = h[0][0] if h else math.inf
        end = min(len(pubs), i + SEGMENT)
        while j < end and float(pubs[j].t) < limit:
            j += 1
        done = _segment(eng, pubs[i:j], slots[i:j], out, tags, i)
        i += done
        if done < j - i + done:  # stopped: a held object leaves before this pub
            _extend(out, tags, eng._apply(pubs[i], slots[i]), i)
            i += 1


def _extend(out: list, tags: list | None, notes: list, i: int) -> None:
    out.extend(notes)
    if tags is not None:
        tags.extend([i] * len(notes))


def _expiries(eng, pubs: list, slots: list[int]) -> tuple[np.ndarray, np.ndarray, list]:
    """CSR of the objects that leave the window before each pub, and the heap entries taken."""
    m = len(pubs)
    w = eng.window
    owner: list[int] = []
    objs: list[int] = []
    taken: list = []  # popped from the time-window heap; what is not consumed goes back
    if eng.external:
        pass  # the dispatcher says what leaves, and such pubs take the plain path
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


def _segment(eng, pubs: list, slots: list[int], out: list, tags: list | None, base: int) -> int:
    """Run the kernel over ``pubs``; returns how many it applied (it stops before a pub
    whose expiries touch a result)."""
    m = len(pubs)
    exp_off, exp_obj, taken = _expiries(eng, pubs, slots)
    oc, sc, ix, st = eng.objs.cols, eng.subs.cols, eng.index, eng.index.store
    objs = eng.objs
    ix._fit(sc.capacity - 1)
    if len(eng._stamp) < sc.capacity:
        eng._stamp = np.full(sc.capacity, -1, dtype=np.int64)
    b_obj = np.array(slots, dtype=np.int64)
    kw_lists = [objs.keywords(o) for o in slots]
    b_kwoff = np.zeros(m + 1, dtype=np.int64)
    b_kwoff[1:] = np.cumsum([len(k) for k in kw_lists])
    b_kw = np.concatenate(kw_lists).astype(np.int32)
    b_x = oc.x[b_obj]
    b_y = oc.y[b_obj]
    b_wo = oc.wo[b_obj]
    b_stamp = eng._stamp_base + np.arange(m, dtype=np.int64)
    eng._stamp_base += m
    cap = max(65536, 2 * sc.count + 16)
    out_i = np.empty(cap, dtype=np.int64)
    out_s = np.empty(cap, dtype=np.int64)
    out_o = np.empty(cap, dtype=np.int64)
    out_d = np.empty(cap, dtype=np.int64)
    queue = np.empty(sc.capacity, dtype=np.int64)
    dead = np.empty(max(1, len(exp_obj)), dtype=np.int64)
    start = 0
    status = DONE
    while True:
        counters = np.zeros(8, dtype=np.int64)
        counters[C_BUDGET] = BUDGET
        st.reserve(BUDGET, BUDGET)
        nxt, status = publish_run(
            start, sc.count, b_obj, b_x, b_y, b_kwoff, b_kw, b_wo, b_stamp, exp_off, exp_obj,
            oc.refs, oc.alive,
            sc.active, sc.kind, sc.match_all, sc.x, sc.y, sc.rx1, sc.ry1, sc.rx2, sc.ry2, sc.k, sc.alpha,
            sc.kw_off, sc.kw_len, eng.subs.kw.id, eng.subs.kw.ws, sc.res_off, sc.res_n, sc.kth,
            eng.subs.res.obj, eng.subs.res.key, sc.kb, sc.complete,
            *st.arrays,
            ix.epoch, ix.level, ix.pending, ix.box, ix.nkw, ix.geo, ix.lmax, ix.max_cells, eng.vocab.freq,
            eng._stamp,
            out_i, out_s, out_o, out_d, queue, dead, counters)
        _drain(eng, pubs, counters, out_i, out_s, out_o, out_d, queue, dead, out, tags, base)
        if status != STOP_FULL:
            break
        start = nxt
    done = nxt
    _sync(eng, pubs[:done], slots[:done], exp_off, exp_obj, taken, done)
    return done


def _drain(eng, pubs, counters, out_i, out_s, out_o, out_d, queue, dead, out: list, tags: list | None,
           base: int) -> None:
    """Turn one kernel call's rows into notifications; re-post queued slots; free objects."""
    sc, oids, sids = eng.subs.cols, eng.objs.ids, eng.subs.ids
    n = int(counters[C_OUT])
    eng.stats["candidates"] += int(counters[C_CAND])
    eng.stats["affected"] += int(counters[C_AFFECTED])
    eng.index.live_entries += int(counters[C_LIVE_ADD]) - int(counters[C_LIVE_DROP])
    if n:
        ri, rs, ro, rd = out_i[:n], out_s[:n], out_o[:n], out_d[:n]
        order = np.lexsort((sc.seq[rs], ri))
        holders = eng._holders if eng.window.retains else None
        for i, s, o, d in zip(ri[order].tolist(), rs[order].tolist(), ro[order].tolist(), rd[order].tolist()):
            t = pubs[i].t
            if d == -2:
                out.append(Match(sids[s], t, oids[o]))
                if tags is not None:
                    tags.append(base + i)
                continue
            if d != -3:  # -3: entered the buffer below the first k, nothing to notify
                out.append(Change(sids[s], t, (oids[o],), (oids[d],) if d >= 0 else ()))
                if tags is not None:
                    tags.append(base + i)
            if holders is not None:
                holders.setdefault(o, []).append(s)
            if d >= 0:
                eng._unref.add(d)
    for s in queue[: int(counters[C_QUEUE])].tolist():
        if sc.active[s] and eng.index.pending[s]:
            eng.index._place(s)
    eng.index.maybe_compact()
    eng._dead.extend(dead[: int(counters[C_DEAD])].tolist())
    eng.stats["expired"] += int(counters[C_DEAD])


def _sync(eng, pubs, slots, exp_off, exp_obj, taken, done: int) -> None:
    """Bring the window bookkeeping up to the ``done`` pubs the kernel applied."""
    w = eng.window
    consumed = set(exp_obj[: exp_off[done]].tolist())
    if eng.external:
        for i in range(done):
            if w.retains:
                eng._alive_by_seq[pubs[i].seq] = slots[i]
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
    if w.retains:
        for o in slots[:done]:
            eng.alive.add(o, eng.objs.keywords(o).tolist())
        for o in eng._dead:
            eng.alive.remove(o, eng.objs.keywords(o).tolist())
            eng._holders.pop(o, None)
            eng._unref.add(o)
    eng._dead.clear()
    eng._unref.update(slots[:done])
    oc = eng.objs.cols
    for o in eng._unref:
        if oc.refs[o] == 0 and not oc.alive[o]:
            eng.objs.free(o)
    eng._unref.clear()
