/*
 * state.c - the process-wide state every layer reads (the options, read once
 * from the environment; the global counters; the tag secret) and its
 * start-up. The bottom of nbmalloc's layers but for the system calls
 * (docs/architecture.md): it calls only the size classes' set-up and os.c.
 *
 * Options (docs/nbmalloc.md):
 *   NBM_SHOW_STATS=1         print statistics to stderr at exit
 *   NBM_VERBOSE=1            print the options in force at start-up
 *   NBM_PURGE_DELAY_MS=N     the memory policy's window (decay.c): freed medium
 *                            blocks are kept up to the peak use of the last N ms,
 *                            the rest goes back to the OS (default 1000; 0 = at once)
 *   NBM_MEDIUM_CACHE_MB=N    a fixed cap on cached medium blocks on top of the
 *                            policy (default: none; 0 = no cache)
 *   NBM_LIMIT_MB=N           at most N MiB of arenas and huge mappings
 *                            reserved at once (default 0 = no limit but the
 *                            OS's): beyond it, requests fail with ENOMEM
 *   NBM_MOVE_BUDGET=N        at most N moves of resident pages outstanding
 *                            (medium.c; default 4096, at most 16384; 0 = no
 *                            moves): lowered by the tests to reach the cap
 *
 * Start-up must not allocate: under LD_PRELOAD the first malloc may come from
 * the dynamic loader or libc's own initialisation. getenv, getauxval and
 * mmap do not call malloc. Start-up is a one-time state machine; a second
 * thread arriving mid-way waits for it (one of two waits in nbmalloc, each
 * once per process, before any allocation exists: the other is the heap's
 * thread key, heap.c).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#include "internal.h"

nbm_options_t nbm__opt = { .purge_delay_ns = 1000000000ull, .cache_max = UINT64_MAX,
                           .move_budget = NBM_MOVE_BUDGET };
uintptr_t nbm__secret;
_Atomic uint32_t nbm__ready;
nbm_gstats_t nbm__gstats;
_Thread_local nbm_thread_t *nbm__thr NBM_TLS;

/* Every thread record registered so far, newest first: a push-only list
 * (records are never unmapped, so a reader needs no protection). */
static _Atomic uintptr_t threads;

void nbm__thread_register(nbm_thread_t *t)
{
    uintptr_t head = nbm_load_uptr(&threads);
    do
        nbm_store_uptr_relaxed(&t->next, head);
    while (!nbm_cas_uptr(&threads, &head, (uintptr_t)t));
}

uint64_t nbm__stat_sum(size_t off)
{
    uint64_t v = nbm_load_u64_relaxed((_Atomic uint64_t *)((char *)&nbm__gstats + off));
    for (uintptr_t x = nbm_load_uptr(&threads); x; x = nbm_load_uptr_relaxed(&((nbm_thread_t *)x)->next))
        v += nbm_load_u64_relaxed((_Atomic uint64_t *)((char *)&((nbm_thread_t *)x)->st + off));
    return v;
}

static uint64_t env_num(const char *name, uint64_t dflt)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return dflt;
    uint64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++)
        v = v * 10 + (uint64_t)(*s - '0');
    return v;
}

void nbm__options_read(void)
{
    nbm__opt.show_stats = env_num("NBM_SHOW_STATS", 0) != 0;
    nbm__opt.verbose = env_num("NBM_VERBOSE", 0) != 0;
    nbm__opt.purge_delay_ns = env_num("NBM_PURGE_DELAY_MS", 1000) * 1000000ull;
    nbm__opt.cache_max = env_num("NBM_MEDIUM_CACHE_MB", UINT64_MAX >> 20);
    nbm__opt.cache_max = nbm__opt.cache_max >= (UINT64_MAX >> 20) ? UINT64_MAX : nbm__opt.cache_max << 20;
    nbm__opt.limit = env_num("NBM_LIMIT_MB", 0) << 20;
    uint64_t mb = env_num("NBM_MOVE_BUDGET", NBM_MOVE_BUDGET);
    nbm__opt.move_budget = mb > NBM_MOVE_BUDGET_MAX ? NBM_MOVE_BUDGET_MAX : (uint32_t)mb;
    nbm__opt.stats_fd = 2;
    if (nbm__opt.show_stats) {
        int fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
        if (fd >= 0)
            nbm__opt.stats_fd = fd;
    }
}

/* The tag secret: the kernel's 16 random bytes for this process, mixed with
 * an address (ASLR) so it is never 0. */
static uintptr_t make_secret(void)
{
    uintptr_t s = (uintptr_t)&nbm__opt * UINT64_C(0x9E3779B97F4A7C15);
    const void *r = (const void *)getauxval(AT_RANDOM);
    if (r) {
        uint64_t w[2]; /* the bytes need not be 8-aligned */
        memcpy(w, r, sizeof w);
        s ^= w[0] ^ (w[1] << 1);
    }
    return s | 1;
}

bool nbm__once(_Atomic uint32_t *state, bool (*make)(void))
{
    uint32_t s = nbm_load_u32(state);
    if (NBM_LIKELY(s >= 2))
        return s == 2;
    uint32_t none = 0;
    if (nbm_cas_u32(state, &none, 1)) {
        s = make() ? 2 : 3;
        nbm_store_u32(state, s);
        return s == 2;
    }
    while ((s = nbm_load_u32(state)) < 2)
        sched_yield();
    return s == 2;
}

static bool start(void)
{
    nbm__options_read();
    nbm__classes_init();
    nbm__secret = make_secret();
    if (nbm__opt.verbose) {
        nbm__write_str(2, "nbmalloc: purge_delay_ms=");
        nbm__write_num(2, nbm__opt.purge_delay_ns / 1000000);
        nbm__write_str(2, " medium_cache_mb=");
        if (nbm__opt.cache_max == UINT64_MAX)
            nbm__write_str(2, "none");
        else
            nbm__write_num(2, nbm__opt.cache_max >> 20);
        nbm__write_str(2, " limit_mb=");
        nbm__write_num(2, nbm__opt.limit >> 20);
        nbm__write_str(2, " move_budget=");
        nbm__write_num(2, nbm__opt.move_budget);
        nbm__write_str(2, " show_stats=");
        nbm__write_num(2, nbm__opt.show_stats);
        nbm__write_str(2, "\n");
    }
    return true;
}

void nbm__init(void)
{
    if (NBM_LIKELY(nbm_load_u32(&nbm__ready) == 2))
        return;
    (void)nbm__once(&nbm__ready, start);
}

/* Initialise before main so the options are in force for the whole run. */
__attribute__((constructor)) static void nbm_start(void) { nbm__init(); }
