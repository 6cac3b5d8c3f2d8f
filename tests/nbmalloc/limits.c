/*
 * limits.c - plain malloc/free under the conditions deployments impose, for
 * scripts/test.d/55-nbmalloc-limits.sh. Uses only the C library interface, so
 * the same binary runs under glibc and under LD_PRELOAD=libnbmalloc.so and
 * the script compares the two. Modes:
 *
 *   small           a few allocations of every tier (runs under ulimit -v)
 *   fill S1,S2,...  for each size in turn: allocate blocks of that size until
 *                   malloc fails, print "fill SIZE BYTES" (bytes reached),
 *                   free them all; then print "after SIZE ok" for malloc of
 *                   100 B, 4000 B, 1 MiB and 100 MiB after the last round
 *   refill R N S    N blocks of R bytes (a reserve), then blocks of S until
 *                   malloc fails; the reserve freed, blocks of S again until
 *                   malloc fails: prints "refill S FREED REGAINED" (bytes
 *                   of the reserve, and of S reached after freeing it)
 *   reuse R N S     N blocks of R bytes allocated and all freed (with room
 *                   left), then blocks of S until malloc fails: prints
 *                   "reuse S FREED REACHED" (bytes of R freed, of S reached)
 *   valid           every alignment glibc serves, up to 2 GiB, allocated,
 *                   written and freed; malloc(64 TiB) must fail with ENOMEM
 *   bogus           each bad free in a child: must abort with a message
 *   threads T R     T threads, R rounds each: fill with mixed small and
 *                   medium blocks until malloc fails (so they run out
 *                   together, and free memory moves between sizes while
 *                   others allocate), check every block's pattern, free all
 *   fuzz N SEED     N frees of random addresses inside and around live and
 *                   freed blocks of every tier, each in a child: every one
 *                   that is not a live block's start must abort with a
 *                   message; prints the counts
 *
 * Exit status 0 when every check held; the script reads the printed figures.
 * Pinned: behaviour only (what is accepted and what aborts, what can be
 * reached), nothing of nbmalloc's internals.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;

static void fail(const char *what)
{
    fprintf(stderr, "limits: FAILED: %s\n", what);
    failures++;
}

/* The pointer array lives outside malloc so that it weighs the same under
 * both allocators. */
static void **ptrs;
static size_t ptrs_cap;

static void ptrs_init(size_t cap)
{
    ptrs = mmap(NULL, cap * sizeof(void *), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ptrs == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    ptrs_cap = cap;
}

static int mode_small(void)
{
    size_t sizes[] = { 1, 24, 100, 1000, 4000, 20000, 300000, 5u << 20, 70u << 20 };
    for (int r = 0; r < 3; r++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            char *p = malloc(sizes[k]);
            if (!p) {
                if (sizes[k] >= (70u << 20))
                    continue; /* may not fit under 64 MiB; must not crash */
                fail("small: malloc");
                continue;
            }
            memset(p, (int)k, sizes[k] < 4096 ? sizes[k] : 4096);
            p = realloc(p, sizes[k] * 2 + 1);
            free(p);
        }
    printf("small ok\n");
    return failures != 0;
}

/* Blocks of size into ptrs[n], ptrs[n + 1], ... until malloc fails or lim
 * is reached, one byte written in each (the rest stays untouched); returns
 * the new n. */
static size_t fill_to(size_t size, size_t n, size_t lim)
{
    while (n < lim) {
        char *p = malloc(size);
        if (!p)
            break;
        p[0] = 1;
        ptrs[n++] = p;
    }
    return n;
}

static int mode_fill(char *list)
{
    ptrs_init((size_t)8 << 20);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        size_t size = strtoull(tok, NULL, 0), n = fill_to(size, 0, ptrs_cap);
        printf("fill %zu %zu\n", size, n * size);
        fflush(stdout);
        while (n)
            free(ptrs[--n]);
    }
    size_t after[] = { 100, 4000, (size_t)1 << 20, (size_t)100 << 20 };
    for (int k = 0; k < 4; k++) {
        void *p = malloc(after[k]);
        printf("after %zu %s\n", after[k], p ? "ok" : "NULL");
        if (!p)
            fail("allocation after freeing everything");
        free(p);
    }
    return failures != 0;
}

static int mode_refill(size_t rs, size_t rn, size_t size)
{
    ptrs_init((size_t)4 << 20);
    if (rn > ptrs_cap / 2)
        return 2;
    void **res = ptrs + ptrs_cap / 2;
    for (size_t i = 0; i < rn; i++)
        if (!(res[i] = malloc(rs))) {
            fprintf(stderr, "refill: reserve failed at %zu\n", i);
            return 2;
        }
    size_t lim = ptrs_cap / 2, m = fill_to(size, 0, lim);
    for (size_t i = 0; i < rn; i++)
        free(res[i]);
    size_t n = fill_to(size, m, lim);
    printf("refill %zu %zu %zu\n", size, rn * rs, (n - m) * size);
    while (n)
        free(ptrs[--n]);
    return 0;
}

static int mode_reuse(size_t rs, size_t rn, size_t size)
{
    ptrs_init((size_t)4 << 20);
    if (rn > ptrs_cap)
        return 2;
    for (size_t i = 0; i < rn; i++)
        if (!(ptrs[i] = malloc(rs))) {
            fprintf(stderr, "reuse: reserve failed at %zu\n", i);
            return 2;
        }
    for (size_t i = 0; i < rn; i++)
        free(ptrs[i]);
    size_t n = fill_to(size, 0, ptrs_cap);
    printf("reuse %zu %zu %zu\n", size, rn * rs, n * size);
    while (n)
        free(ptrs[--n]);
    return 0;
}

static int mode_valid(void)
{
    for (size_t al = 16; al <= ((size_t)2 << 30); al *= 2) {
        void *p = NULL;
        if (posix_memalign(&p, al, 100) != 0 || ((uintptr_t)p & (al - 1))) {
            fprintf(stderr, "posix_memalign(%zu)\n", al);
            fail("posix_memalign");
            continue;
        }
        memset(p, 1, 100);
        if (malloc_usable_size(p) < 100)
            fail("usable size of an aligned block");
        free(p);
        char *q = aligned_alloc(al, 3 * al / 2);
        if (!q || ((uintptr_t)q & (al - 1))) {
            fprintf(stderr, "aligned_alloc(%zu)\n", al);
            fail("aligned_alloc");
            continue;
        }
        q[0] = 1, q[3 * al / 2 - 1] = 2;
        q = realloc(q, 3 * al / 2 + 4096);
        if (!q || q[0] != 1)
            fail("realloc of an aligned block");
        free(q);
    }
    errno = 0;
    void *big = malloc((size_t)64 << 40);
    if (big || errno != ENOMEM)
        fail("malloc(64 TiB) must fail with ENOMEM");
    free(big);
    printf("valid ok\n");
    return failures != 0;
}

/* Runs free(p) (or realloc/malloc_usable_size) in a child. Returns 1 if the
 * child aborted with a message naming the problem, 0 if the call returned
 * (accepted), -1 on anything else (a crash). */
enum { OP_FREE, OP_REALLOC, OP_USABLE };
static char last_msg[256];

static int in_child(void *p, int op)
{
    int fds[2];
    if (pipe(fds) != 0)
        exit(2);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        if (op == OP_FREE)
            free(p);
        else if (op == OP_REALLOC)
            (void)!realloc(p, 50);
        else
            (void)!malloc_usable_size(p);
        _exit(0);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t r;
    while (got < sizeof last_msg - 1 && (r = read(fds[0], last_msg + got, sizeof last_msg - 1 - got)) > 0)
        got += (size_t)r;
    last_msg[got] = 0;
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 0;
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT &&
        (strstr(last_msg, "invalid pointer") || strstr(last_msg, "double free") || strstr(last_msg, "freed pointer")))
        return 1;
    return -1;
}

static void expect(const char *name, void *p, int op, const char *word)
{
    int r = in_child(p, op);
    if (r != 1 || !strstr(last_msg, word)) {
        fprintf(stderr, "bogus %s: want abort with \"%s\", got %d \"%s\"\n", name, word, r, last_msg);
        fail(name);
    }
}

static int mode_bogus(void)
{
    int on_stack = 0;
    char *s = malloc(64), *m = malloc(200000), *h = malloc((size_t)80 << 20);
    char *sf0 = malloc(48), *mf0 = malloc(300000), *hf0 = malloc((size_t)90 << 20);
    if (!s || !m || !h || !sf0 || !mf0 || !hf0)
        return 2;
    /* Kept as integers: the compiler rightly warns about a freed pointer. */
    volatile uintptr_t sfa = (uintptr_t)sf0, mfa = (uintptr_t)mf0, hfa = (uintptr_t)hf0;
    free(sf0), free(mf0), free(hf0);
    void *sf = (void *)sfa, *mf = (void *)mfa, *hf = (void *)hfa;
    expect("stack", &on_stack, OP_FREE, "invalid pointer");
    expect("small interior", s + 16, OP_FREE, "invalid pointer");
    expect("small misaligned", s + 8, OP_FREE, "invalid pointer");
    expect("small far inside its chunk", s + 64 * 900, OP_FREE, "");
    expect("small double free", sf, OP_FREE, "double free");
    expect("medium interior", m + 4096, OP_FREE, "invalid pointer");
    expect("medium double free", mf, OP_FREE, "double free");
    expect("huge interior", h + 4096, OP_FREE, "invalid pointer");
    expect("huge double free", hf, OP_FREE, "double free");
    expect("realloc of a freed block", sf, OP_REALLOC, "");
    expect("usable size of a freed block", sf, OP_USABLE, "");
    expect("realloc of the stack", &on_stack, OP_REALLOC, "invalid pointer");
    expect("usable size of the stack", &on_stack, OP_USABLE, "invalid pointer");
    free(s), free(m), free(h);
    printf("bogus %s\n", failures ? "FAILED" : "ok");
    return failures != 0;
}

static uint64_t rng;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

#define NBLK 256

static int mode_fuzz(long n, uint64_t seed)
{
    rng = seed * 2654435761u + 1;
    char *blk[NBLK];
    size_t sz[NBLK];
    int live[NBLK];
    for (int i = 0; i < NBLK; i++) {
        uint64_t r = rnd() % 100;
        sz[i] = r < 70 ? 1 + rnd() % 16384 : r < 97 ? 16385 + rnd() % (4u << 20) : (65u << 20) + rnd() % (8u << 20);
        blk[i] = malloc(sz[i]);
        if (!blk[i])
            return 2;
        live[i] = 1;
    }
    for (int i = 0; i < NBLK; i += 2) { /* half the blocks are freed */
        free(blk[i]);
        live[i] = 0;
    }
    long accepted = 0, aborted = 0, crashed = 0, valid = 0;
    for (long k = 0; k < n; k++) {
        int i = (int)(rnd() % NBLK);
        intptr_t off;
        switch (rnd() % 4) {
        case 0: off = (intptr_t)(rnd() % 256) - 128; break;                  /* around the start */
        case 1: off = (intptr_t)((rnd() % (sz[i] + 256)) & ~(uint64_t)15); break; /* inside, 16-aligned */
        case 2: off = (intptr_t)(rnd() % (1u << 20)) - (1 << 19); break;       /* the neighbourhood */
        default: off = (intptr_t)((rnd() % (4u << 20)) & ~(uint64_t)4095) - (2 << 20); break; /* nearby pages */
        }
        char *p = blk[i] + off;
        int is_live = 0;
        for (int j = 0; j < NBLK; j++)
            is_live |= live[j] && blk[j] == p;
        if (is_live) {
            valid++;
            continue; /* a live block's start: freeing it is right */
        }
        int r = in_child(p, OP_FREE);
        if (r == 1)
            aborted++;
        else if (r == 0)
            accepted++, fprintf(stderr, "fuzz: free(%p) accepted (block %d %s, offset %ld)\n", (void *)p, i,
                                live[i] ? "live" : "freed", (long)off);
        else
            crashed++, fprintf(stderr, "fuzz: free(%p) crashed (block %d, offset %ld): %s\n", (void *)p, i,
                               (long)off, last_msg);
    }
    printf("fuzz %ld frees: %ld aborted with a message, %ld accepted, %ld crashed, %ld live starts skipped\n",
           n, aborted, accepted, crashed, valid);
    return accepted || crashed;
}

#define PER_THREAD 400000

typedef struct worker {
    int id, rounds;
    long reached_min, bad;
} worker_t;

/* Every thread exists before any fills: a thread created while the others
 * already hold the whole limit has no room for its stack (pthread_create
 * failed that way, once, in CI under load). */
static pthread_barrier_t fill_start;

static void *fill_worker(void *arg)
{
    worker_t *w = arg;
    pthread_barrier_wait(&fill_start);
    void **mine = ptrs + (size_t)(w->id - 1) * PER_THREAD;
    uint64_t r = (uint64_t)w->id * 0x9E3779B97F4A7C15u + 1;
    w->reached_min = -1;
    for (int round = 0; round < w->rounds; round++) {
        long n = 0;
        while (n < PER_THREAD) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            size_t size = r % 64 ? 16 + r % (r % 3 ? 256 : 16000) : 20000 + r % (1u << 20);
            uintptr_t *p = malloc(size);
            if (!p)
                break;
            p[0] = (uintptr_t)p ^ 0x5a5a5a5a;
            p[1] = size;
            mine[n++] = p;
        }
        for (long k = 0; k < n; k++) {
            uintptr_t *p = mine[k];
            if (p[0] != ((uintptr_t)p ^ 0x5a5a5a5a) || malloc_usable_size(p) < p[1]) {
                if (w->bad++ < 5)
                    fprintf(stderr, "thread %d: block %p (#%ld) holds %#lx %#lx, usable %zu\n", w->id, (void *)p, k,
                            (unsigned long)p[0], (unsigned long)p[1], malloc_usable_size(p));
            }
            free(p);
        }
        if (w->reached_min < 0 || n < w->reached_min)
            w->reached_min = n;
    }
    return NULL;
}

static int mode_threads(int t, int rounds)
{
    pthread_t th[16];
    worker_t w[16];
    if (t > 16)
        t = 16;
    ptrs_init((size_t)t * PER_THREAD); /* before the threads use up the limit */
    pthread_barrier_init(&fill_start, NULL, (unsigned)t + 1);
    for (int i = 0; i < t; i++) {
        w[i] = (worker_t){ .id = i + 1, .rounds = rounds };
        if (pthread_create(&th[i], NULL, fill_worker, &w[i]) != 0) {
            fprintf(stderr, "threads: pthread_create %d failed before any thread filled\n", i + 1);
            return 2;
        }
    }
    pthread_barrier_wait(&fill_start);
    long bad = 0, least = -1;
    for (int i = 0; i < t; i++) {
        pthread_join(th[i], NULL);
        bad += w[i].bad;
        if (least < 0 || w[i].reached_min < least)
            least = w[i].reached_min;
    }
    void *big = malloc((size_t)100 << 20);
    printf("threads %d rounds %d: %ld corrupted, fewest blocks in a round %ld, 100 MiB after: %s\n", t, rounds,
           bad, least, big ? "ok" : "NULL");
    free(big);
    return bad != 0 || least <= 0 || !big;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && !strcmp(argv[1], "threads"))
        return mode_threads(atoi(argv[2]), atoi(argv[3]));
    if (argc >= 2 && !strcmp(argv[1], "small"))
        return mode_small();
    if (argc >= 3 && !strcmp(argv[1], "fill"))
        return mode_fill(argv[2]);
    if (argc >= 5 && !strcmp(argv[1], "refill"))
        return mode_refill(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0), strtoull(argv[4], NULL, 0));
    if (argc >= 5 && !strcmp(argv[1], "reuse"))
        return mode_reuse(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0), strtoull(argv[4], NULL, 0));
    if (argc >= 2 && !strcmp(argv[1], "valid"))
        return mode_valid();
    if (argc >= 2 && !strcmp(argv[1], "bogus"))
        return mode_bogus();
    if (argc >= 4 && !strcmp(argv[1], "fuzz"))
        return mode_fuzz(atol(argv[2]), strtoull(argv[3], NULL, 0));
    fprintf(stderr, "usage: %s small | fill S1,S2,... | refill R N S | reuse R N S | threads T R | valid | bogus | fuzz N SEED\n", argv[0]);
    return 2;
}
