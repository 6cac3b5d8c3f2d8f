/*
 * decay.c - the memory policy: how much freed memory is kept for reuse.
 *
 * A policy (nbm_decay_t) follows one kind of interchangeable free range (the
 * medium blocks of one order, or any other memory its owner can hand out
 * again): the bytes in use ("live") and the bytes freed but kept ("held").
 * Time is cut into epochs of window/4 (NBM_PURGE_DELAY_MS is the window); a
 * ring of the last 4 epochs remembers the highest live count seen in each, so
 * the ring's maximum is the peak demand of the last window. What is kept is
 * what that peak needs on top of what is live now:
 *
 *     target = max(peak over the window - live, 0),  excess = held - target
 *
 * A program that cycles through a steady working set keeps every block it
 * will need again (live + held never exceeds the peak it reached when it last
 * took fresh memory, and that peak stays in the window while it repeats), so
 * it never purges and refaults. A program whose demand fell sees the old
 * peak leave the window, and its owner returns about half of the excess per
 * epoch, oldest ranges first: after one window plus a few epochs (about 2 s
 * at the default 1 s window) little beyond the new peak is left.
 *
 * The owner keeps the ranges (lists, stacks) and does the returning; the
 * policy only counts and decides:
 *
 *   take(bytes)   bytes came into use (from the owner's held ranges or new)
 *   give(bytes)   bytes left use; true if a range may be kept at all
 *   hold/unhold   the owner's held bytes changed (a range kept, reused or
 *                 returned)
 *   excess()      held bytes beyond the target; at a sweep the owner returns
 *                 oldest ranges while what it returned is below half the
 *                 excess (rounded up) and a range still fits in the excess
 *   due(clock)    true for one caller per epoch: that caller sweeps
 *
 * Everything is a relaxed or seq_cst word; no lock. Counters may be read a
 * little stale by a racing thread: the policy is a heuristic, and the worst
 * a stale read does is keep or return one range more.
 */
#include "internal.h"

static uint64_t epoch_ns(void)
{
    uint64_t e = nbm__opt.purge_delay_ns / NBM_DECAY_SLOTS;
    return e ? e : 1000000u; /* window 0: nothing is kept; epochs of 1 ms */
}

/* Moves the ring to the epoch of `now`: every slot entered gets the live
 * bytes of this moment as its first peak. One thread wins the CAS and
 * rotates; a max raced in by another thread meanwhile may be overwritten
 * (a peak lower by one range at worst). */
static uint64_t rotate(nbm_decay_t *d, uint64_t now)
{
    uint64_t e = now / epoch_ns();
    uint64_t old = nbm_load_u64_relaxed(&d->epoch);
    if (NBM_LIKELY(e <= old) || !nbm_cas_u64(&d->epoch, &old, e))
        return old > e ? old : e;
    uint64_t live = nbm_load_u64_relaxed(&d->live);
    for (uint64_t k = old + 1; k <= e && k <= old + NBM_DECAY_SLOTS; k++)
        nbm_store_u64_relaxed(&d->peak[k % NBM_DECAY_SLOTS], live);
    return e;
}

void nbm__decay_take(nbm_decay_t *d, size_t bytes, uint64_t now)
{
    uint64_t e = rotate(d, now);
    uint64_t live = nbm_add_u64(&d->live, bytes) + bytes;
    _Atomic uint64_t *pk = &d->peak[e % NBM_DECAY_SLOTS];
    uint64_t p = nbm_load_u64_relaxed(pk);
    while (live > p && !nbm_cas_u64(pk, &p, live))
        ;
}

bool nbm__decay_give(nbm_decay_t *d, size_t bytes, uint64_t now)
{
    rotate(d, now);
    nbm_sub_u64(&d->live, bytes);
    return nbm__opt.purge_delay_ns != 0;
}

void nbm__decay_hold(nbm_decay_t *d, size_t bytes) { nbm_add_u64(&d->held, bytes); }
void nbm__decay_unhold(nbm_decay_t *d, size_t bytes) { nbm_sub_u64(&d->held, bytes); }

uint64_t nbm__decay_peak(nbm_decay_t *d, uint64_t now)
{
    rotate(d, now);
    uint64_t peak = 0;
    for (unsigned k = 0; k < NBM_DECAY_SLOTS; k++) {
        uint64_t p = nbm_load_u64_relaxed(&d->peak[k]);
        peak = p > peak ? p : peak;
    }
    return peak;
}

size_t nbm__decay_excess(nbm_decay_t *d, uint64_t now)
{
    uint64_t peak = nbm__decay_peak(d, now);
    uint64_t live = nbm_load_u64_relaxed(&d->live), held = nbm_load_u64_relaxed(&d->held);
    if (nbm__opt.purge_delay_ns == 0)
        return (size_t)held;
    uint64_t target = peak > live ? peak - live : 0;
    return held > target ? (size_t)(held - target) : 0;
}

bool nbm__decay_due(_Atomic uint64_t *clock, uint64_t now)
{
    uint64_t last = nbm_load_u64_relaxed(clock);
    return now - last >= epoch_ns() && nbm_cas_u64(clock, &last, now);
}
