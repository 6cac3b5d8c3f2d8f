/*
 * sched.c - a deterministic cooperative scheduler over the back-end's atomics.
 *
 * Logical threads are ucontext coroutines on stacks mapped at a fixed address,
 * so a thread's scan start (the core derives it from a stack address) is the
 * same in every process: a seed and a schedule replay exactly. The core calls
 * nbbs_atomic_hook before every atomic operation; the hook switches back to
 * the scheduler, and the operation runs when the thread is next resumed. As
 * only one coroutine runs at a time, each step is atomic with respect to the
 * others and the interleaving is exactly the sequence of choices.
 *
 * Lock-freedom is checked at every failed CAS: some other thread must have
 * written that word since this thread last read it (a retry is paid for by
 * someone else's progress). A per-call step bound catches loops that make no
 * progress at all.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include "explore.h"
#include "nbbs_atomic.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EX_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define EX_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(EX_ASAN)
#define EX_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(EX_TSAN)
#define EX_TSAN 1
#endif
#ifdef EX_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef EX_TSAN
#include <sanitizer/tsan_interface.h>
#endif

#define STACK_SIZE (256u << 10)
#define STACK_BASE ((uintptr_t)0x7e9000000000ull) /* inside every sanitizer's app range */

typedef struct lthread {
    ucontext_t   ctx;
    char        *stack;
    bool         done;
    ex_pending_t pend;
    unsigned     op_steps; /* atomic operations since the call began */
    uint64_t     prev_seen; /* stamp this thread had seen before the current read */
    void        *fiber;
} lthread_t;

static char     *stacks;
static lthread_t threads[EX_MAX_THREADS];
static unsigned  nthreads;
static lthread_t *cur;          /* running thread, NULL in the scheduler */
static ucontext_t sched_ctx;
static void     *sched_fiber;
static void    (*thread_body)(int);
static bool      hooks_on;
#ifdef EX_ASAN
static const void *main_bottom;
static size_t      main_size;
#endif

static char failure[512];
static bool failed;

void ex_fail(const char *fmt, ...)
{
    if (failed)
        return;
    failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(failure, sizeof failure, fmt, ap);
    va_end(ap);
}
bool ex_failed(void) { return failed; }
const char *ex_failure(void) { return failure; }
void ex_clear_failure(void) { failed = false, failure[0] = 0; }

/* ---- words touched in this run: who wrote last, who saw what --------------- */

#define WORDS 1024
typedef struct word {
    const volatile void *addr;
    uint32_t gen;
    uint64_t last_write;               /* stamp of the last successful write */
    uint64_t seen[EX_MAX_THREADS];     /* stamp at each thread's last access */
} word_t;
static word_t   words[WORDS];
static uint32_t gen = 1;
static uint64_t stamp;

/* The index bytes are also read and written 8 at a time (a carved block's
 * word, nbbs_cache.c): within [alias_lo, alias_hi) an access counts for the
 * aligned 8 bytes around it, so a word CAS is a write of each byte and a
 * byte CAS a write of its word (coarser: a write beside a byte counts too). */
static uintptr_t alias_lo, alias_hi;

void ex_alias_granules(const volatile void *lo, size_t len)
{
    alias_lo = (uintptr_t)lo;
    alias_hi = alias_lo + len;
}

static word_t *word_of(const volatile void *addr)
{
    if ((uintptr_t)addr >= alias_lo && (uintptr_t)addr < alias_hi)
        addr = (const volatile void *)((uintptr_t)addr & ~(uintptr_t)7);
    uintptr_t h = ((uintptr_t)addr * UINT64_C(0x9E3779B97F4A7C15)) >> 54;
    for (unsigned i = 0; i < WORDS; i++) {
        word_t *w = &words[(h + i) & (WORDS - 1)];
        if (w->gen != gen) {
            memset(w, 0, sizeof *w);
            w->gen = gen, w->addr = addr;
            return w;
        }
        if (w->addr == addr)
            return w;
    }
    fprintf(stderr, "explore: more than %d words touched\n", WORDS);
    abort();
}

/* ---- context switches, with the sanitizers told about each stack ------------ */

static void switch_to(ucontext_t *from, ucontext_t *to, void *to_fiber, const void *bottom,
                      size_t size, bool dying)
{
#ifdef EX_TSAN
    __tsan_switch_to_fiber(to_fiber, 0);
#else
    (void)to_fiber;
#endif
#ifdef EX_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(dying ? NULL : &fake, bottom, size);
#else
    (void)bottom, (void)size, (void)dying;
#endif
    swapcontext(from, to);
#ifdef EX_ASAN
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
}

static void to_scheduler(bool dying)
{
    lthread_t *t = cur;
    cur = NULL;
#ifdef EX_ASAN
    switch_to(&t->ctx, &sched_ctx, sched_fiber, main_bottom, main_size, dying);
#else
    switch_to(&t->ctx, &sched_ctx, sched_fiber, NULL, 0, dying);
#endif
}

static void to_thread(lthread_t *t)
{
    cur = t;
    switch_to(&sched_ctx, &t->ctx, t->fiber, t->stack, STACK_SIZE, false);
}

static void entry(int i)
{
#ifdef EX_ASAN
    __sanitizer_finish_switch_fiber(NULL, &main_bottom, &main_size);
#endif
    thread_body(i);
    threads[i].done = true;
    threads[i].pend.op = EX_OP_NONE;
    for (;;) /* never resumed again; the stack is re-made for the next run */
        to_scheduler(true);
}

static void make(unsigned i, unsigned slot)
{
    lthread_t *t = &threads[i];
    t->stack = stacks + (size_t)slot * STACK_SIZE;
#ifdef EX_ASAN
    __asan_unpoison_memory_region(t->stack, STACK_SIZE);
#endif
#ifdef EX_TSAN
    if (t->fiber)
        __tsan_destroy_fiber(t->fiber);
    t->fiber = __tsan_create_fiber(0);
#endif
    getcontext(&t->ctx);
    t->ctx.uc_stack.ss_sp = t->stack;
    t->ctx.uc_stack.ss_size = STACK_SIZE;
    t->ctx.uc_link = NULL;
    makecontext(&t->ctx, (void (*)(void))entry, 1, (int)i);
    t->done = false;
    t->op_steps = 0;
    t->pend.op = EX_OP_NONE;
    t->pend.addr = NULL;
}

void sched_init(void)
{
    size_t len = (size_t)EX_STACK_SLOTS * STACK_SIZE;
    void *p = mmap((void *)STACK_BASE, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED || p != (void *)STACK_BASE) {
        if (p != MAP_FAILED)
            munmap(p, len);
        fprintf(stderr, "explore: note: stacks not at the fixed address; schedules replay only in this process\n");
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            exit(2);
        }
    }
    stacks = p;
#ifdef EX_TSAN
    sched_fiber = __tsan_get_current_fiber();
#endif
}

void sched_begin(unsigned n, const unsigned *slots, void (*body)(int))
{
    gen++, stamp = 0;
    nthreads = n;
    thread_body = body;
    hooks_on = true;
    for (unsigned i = 0; i < n; i++)
        make(i, slots[i]);
    for (unsigned i = 0; i < n && !failed; i++)
        to_thread(&threads[i]);
}

bool sched_done(int t) { return threads[t].done; }
ex_pending_t sched_pending(int t) { return threads[t].pend; }
int sched_self(void) { return cur ? (int)(cur - threads) : -1; }

void sched_step(int t)
{
    if (!threads[t].done)
        to_thread(&threads[t]);
}

void sched_end(void) { hooks_on = false; }

void sched_point(int op, const volatile void *addr)
{
    if (!cur || !hooks_on)
        return;
    if (op == EX_OP_MODEL)
        cur->op_steps = 0; /* a model point sits at each call's start and end */
    cur->pend.op = op, cur->pend.addr = addr;
    to_scheduler(false);
}

void nbbs_atomic_hook(int op, const volatile void *addr, int phase)
{
    lthread_t *t = cur;
    if (!t || !hooks_on)
        return;
    int self = (int)(t - threads);
    if (phase == NBBS_HOOK_BEFORE) {
        if (++t->op_steps > EX_OP_STEP_LIMIT)
            ex_fail("thread %d: one call took more than %d atomic operations (not lock-free, or an endless loop)",
                    self, EX_OP_STEP_LIMIT);
        t->pend.op = op, t->pend.addr = addr;
        to_scheduler(false);
        /* Resumed: the operation happens now. Remember what it reads. */
        if (op != NBBS_OP_STORE) {
            word_t *w = word_of(addr);
            t->prev_seen = w->seen[self];
            w->seen[self] = stamp;
        }
        return;
    }
    word_t *w = word_of(addr);
    if (phase == NBBS_HOOK_OK) {
        if (op != NBBS_OP_LOAD) {
            w->last_write = ++stamp;
            w->seen[self] = stamp;
        }
    } else if (w->last_write <= t->prev_seen) {
        ex_fail("thread %d: a CAS on %p failed although no other thread wrote it since this thread read it",
                self, (const void *)addr);
    }
}
