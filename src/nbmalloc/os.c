/*
 * os.c - the OS layer: mappings, purging, time and output without stdio.
 *
 * Everything here is a system call or a formatting helper; nothing allocates,
 * so it is safe during bootstrap and in the middle of a failed operation.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* Plain private anonymous mappings, without MAP_NORESERVE: the kernel's
 * overcommit policy decides, so a request that could never be backed (say
 * 64 TiB on a machine with 23 GB) fails with ENOMEM as under glibc, and under
 * strict overcommit (vm.overcommit_memory=2) every reservation is charged
 * against the commit limit when it is made. */
void *nbm__os_map(size_t size)
{
    int saved = errno;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    errno = saved;
    return p == MAP_FAILED ? NULL : p;
}

void nbm__os_unmap(void *p, size_t size)
{
    if (p && size) {
        int saved = errno;
        munmap(p, size);
        errno = saved;
    }
}

/* ThreadSanitizer keeps shadow memory at fixed ranges of the address space
 * and aborts a fixed mapping asked for there ("mmap at bad address") instead
 * of failing it, so under it aligned reservations skip the probing and
 * over-map and trim. */
#if defined(__SANITIZE_THREAD__)
#define NBM_SANITIZER_SHADOW 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NBM_SANITIZER_SHADOW 1
#endif
#endif
#ifndef NBM_SANITIZER_SHADOW
#define NBM_SANITIZER_SHADOW 0
#endif

/* The lowest address a fixed mapping may be asked for (1 GiB). */
#define NBM_MAP_LOWEST ((uintptr_t)1 << 30)

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* Maps [p, p + size) exactly, or nothing: never replaces a mapping. A kernel
 * older than 4.17 takes the flag as a hint and may place it elsewhere. */
bool nbm__os_map_at(void *p, size_t size)
{
    /* Never near address 0: root may map page 0 (mmap_min_addr does not bind
     * CAP_SYS_RAWIO), and a block there would look like NULL. An aligned
     * candidate rounded down from a low placement is 0; ThreadSanitizer
     * aborted on it ("mmap at bad address: addr=0"), which is how it showed. */
    if ((uintptr_t)p < NBM_MAP_LOWEST)
        return false;
    int saved = errno;
    void *q = mmap(p, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    errno = saved;
    if (q == MAP_FAILED)
        return false;
    if (q != p) {
        nbm__os_unmap(q, size);
        return false;
    }
    return true;
}

#define NBM_USER_TOP ((uintptr_t)1 << 47)

static _Atomic uintptr_t low_hint; /* lowest aligned placement so far */

/* The kernel has no aligned mmap. Map where it likes; if that is aligned,
 * done (no over-map). Else try aligned addresses next to where it placed us
 * (it fills top-down, so the slots just below are usually free), each taken
 * only if wholly free; only if all of those are taken, over-map by `align`
 * and trim both ends. So the reservation costs `size` bytes of address space,
 * and `size + align` only transiently and only in that last case. */
void *nbm__os_reserve_aligned(size_t size, size_t align)
{
    if (size == 0 || size > NBM_USER_TOP || align > NBM_USER_TOP)
        return NULL;
    char *p = nbm__os_map(size);
    if (!p)
        return NULL;
    uintptr_t a = (uintptr_t)p;
    if (!(a & (align - 1)))
        return p;
    nbm__os_unmap(p, size);
    uintptr_t down = a & ~(uintptr_t)(align - 1);
    if (NBM_SANITIZER_SHADOW)
        goto overmap; /* its shadow ranges are not ours to probe */
    if (nbm__os_map_at((void *)down, size))
        goto placed;
    /* Below the lowest aligned placement so far (a hint shared by all
     * threads: a stale value only costs a few more tries), else below where
     * the kernel put us, else just above. */
    uintptr_t low = nbm_load_uptr_relaxed(&low_hint) & ~(uintptr_t)(align - 1);
    uintptr_t starts[2] = { low && low < down ? low : down, down };
    for (int s = 0; s < 2; s++)
        for (int k = 1; k <= 32; k++) {
            uintptr_t h = starts[s] - (uintptr_t)k * align;
            if (h == 0 || h > starts[s])
                break;
            if (h + size <= NBM_USER_TOP && nbm__os_map_at((void *)h, size)) {
                down = h;
                goto placed;
            }
        }
    for (int k = 1; k <= 4; k++) {
        uintptr_t h = down + (uintptr_t)k * align;
        if (h + size > NBM_USER_TOP)
            break;
        if (nbm__os_map_at((void *)h, size)) {
            down = h;
            goto placed;
        }
    }
overmap:
    if (size > SIZE_MAX - align)
        return NULL;
    char *raw = nbm__os_map(size + align);
    if (!raw)
        return NULL;
    a = ((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1);
    size_t head = a - (uintptr_t)raw, tail = align - head;
    nbm__os_unmap(raw, head);
    nbm__os_unmap((char *)a + size, tail);
    return (void *)a;
placed:
    if (down < nbm_load_uptr_relaxed(&low_hint) || nbm_load_uptr_relaxed(&low_hint) == 0)
        nbm_store_uptr_relaxed(&low_hint, down);
    return (void *)down;
}

/* Resizes the mapping [p, p + old) to `size` bytes: in place when `to` is
 * NULL (shrinking always can; growing only into free address space), else
 * moved to `to` (a mapping of `size` bytes the caller reserved, replaced),
 * pages carried over without a copy. False if the kernel refused. */
bool nbm__os_remap(void *p, size_t old, size_t size, void *to)
{
    int saved = errno;
    void *q = to ? mremap(p, old, size, MREMAP_MAYMOVE | MREMAP_FIXED, to) : mremap(p, old, size, 0);
    errno = saved;
    return q != MAP_FAILED && q == (to ? to : p);
}

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4 /* Linux 5.7 */
#endif

static _Atomic uint32_t move_broken; /* no MREMAP_DONTUNMAP: no move is tried again */

/* Moves the pages of [from, from + len) to [to, to + len) without copying
 * them (mremap with MREMAP_DONTUNMAP): `to` gets the pages that were
 * resident in `from` (what was resident at `to` is dropped), and `from` stays
 * mapped, reading as zeros as after nbm__os_purge. Both ranges are the
 * caller's alone and page-aligned. A page-table move costs a few
 * microseconds a call (about 40 ms for 256 MiB in 64 KiB moves, 3 ms in
 * 1 MiB moves, measured on the development machine) where faulting the
 * same memory in afresh cost 190 ms. False when the kernel refuses: then
 * `to` is mapped again empty (the kernel may have unmapped it before
 * failing; it held nothing to keep); if the kernel has no MREMAP_DONTUNMAP
 * (before Linux 5.7), no move is tried again in this process. */
bool nbm__os_move(void *from, size_t len, void *to)
{
    if (nbm_load_u32_relaxed(&move_broken))
        return false;
    int saved = errno;
    void *q = mremap(from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, to);
    if (q == to) {
        errno = saved;
        return true;
    }
    if (errno == EINVAL) /* no MREMAP_DONTUNMAP: before Linux 5.7 */
        nbm_store_u32_relaxed(&move_broken, 1);
    q = mmap(to, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    errno = saved;
    if (q != to)
        nbm__fatal("cannot map again a range a failed mremap left unmapped at", to);
    return false;
}

/* A fresh mapping replaces the range in one step (the mmap lock is held
 * throughout: a stale reader sees the old pages or zeros, never a hole).
 * Should the kernel fail it after unmapping (out of mappings), the range
 * can no longer be used, and nothing can be done but stop. */
bool nbm__os_renew(void *p, size_t size)
{
    int saved = errno;
    void *q = mmap(p, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    bool ok = q == p;
    if (!ok && madvise(p, size, MADV_DONTNEED) != 0)
        nbm__fatal("a failed mmap left a range unmapped at", p);
    errno = saved;
    return ok;
}

size_t nbm__os_mappings(void)
{
    int saved = errno;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        errno = saved;
        return SIZE_MAX;
    }
    char buf[4096];
    size_t n = 0;
    ssize_t k;
    while ((k = read(fd, buf, sizeof buf)) > 0)
        for (ssize_t i = 0; i < k; i++)
            n += buf[i] == '\n';
    close(fd);
    errno = saved;
    return k < 0 ? SIZE_MAX : n;
}

/* The address space RLIMIT_AS leaves the process (the limit less its whole
 * size, VmSize of /proc/self/statm: the limit counts every mapping, not only
 * ours), or UINT64_MAX without a limit. A few system calls: called when an
 * arena is added or revived, never on an allocation's path. If
 * /proc cannot be read, the size is taken as 0 (the wall, when hit, still
 * counts as short). */
uint64_t nbm__os_as_room(void)
{
    int saved = errno;
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) {
        errno = saved;
        return UINT64_MAX;
    }
    uint64_t size = 0;
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        char buf[64];
        ssize_t k = read(fd, buf, sizeof buf);
        for (ssize_t i = 0; i < k && buf[i] >= '0' && buf[i] <= '9'; i++)
            size = size * 10 + (uint64_t)(buf[i] - '0');
        size *= NBM_PAGE;
        close(fd);
    }
    errno = saved;
    return (uint64_t)rl.rlim_cur > size ? (uint64_t)rl.rlim_cur - size : 0;
}

/* vec[i] = 1 if page i of [p, p + pages * 4 KiB) is resident, else 0
 * (mincore); all 1 if the kernel cannot tell. */
void nbm__os_resident(void *p, size_t pages, unsigned char *vec)
{
    int saved = errno;
    if (mincore(p, pages << NBM_PAGE_SHIFT, vec) != 0)
        memset(vec, 1, pages);
    for (size_t i = 0; i < pages; i++)
        vec[i] &= 1u;
    errno = saved;
}

/* The range stays mapped (reads give zeros), so stale readers stay safe. */
void nbm__os_purge(void *p, size_t size)
{
    int saved = errno;
    madvise(p, size, MADV_DONTNEED);
    errno = saved;
}

/* Zeroes [p, p + n), p page-aligned, without making resident what is not:
 * pages in memory are cleared with memset; runs of at least
 * NBM_ZERO_RUN_PAGES pages that are not (never touched, purged, or swapped
 * out) are dropped with MADV_DONTNEED instead, so they read as zeros and
 * cost nothing until the user writes them. A calloc served from a reused
 * block of which the last user touched little so stays small, as with fresh
 * memory. mincore reports 4 KiB pages (x86-64); if it fails, plain memset. */
#define NBM_ZERO_RUN_PAGES 16
void nbm__os_zero(void *p, size_t n)
{
    unsigned char vec[512]; /* 2 MiB of pages per mincore call */
    char *c = p;
    size_t pages = n >> NBM_PAGE_SHIFT;
    for (size_t done = 0; done < pages;) {
        size_t k = pages - done < sizeof vec ? pages - done : sizeof vec;
        char *a = c + (done << NBM_PAGE_SHIFT);
        int saved = errno;
        int rc = mincore(a, k << NBM_PAGE_SHIFT, vec);
        errno = saved;
        if (rc != 0) {
            memset(a, 0, n - (done << NBM_PAGE_SHIFT));
            return;
        }
        for (size_t i = 0, j; i < k; i = j) {
            unsigned in = vec[i] & 1u;
            for (j = i + 1; j < k && (vec[j] & 1u) == in; j++)
                ;
            if (in || j - i < NBM_ZERO_RUN_PAGES)
                memset(a + (i << NBM_PAGE_SHIFT), 0, (j - i) << NBM_PAGE_SHIFT);
            else
                nbm__os_purge(a + (i << NBM_PAGE_SHIFT), (j - i) << NBM_PAGE_SHIFT);
        }
        done += k;
    }
    memset(c + (pages << NBM_PAGE_SHIFT), 0, n & (NBM_PAGE - 1));
}

uint64_t nbm__os_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

size_t nbm__os_peak_rss(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (size_t)ru.ru_maxrss * 1024u;
}

void nbm__write_str(int fd, const char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w <= 0) {
            if (w < 0 && errno == EINTR)
                continue;
            return;
        }
        s += w, n -= (size_t)w;
    }
}

void nbm__write_num(int fd, uint64_t v)
{
    char buf[24];
    int i = (int)sizeof buf - 1;
    buf[i] = 0;
    do {
        buf[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    nbm__write_str(fd, buf + i);
}

void nbm__write_hex(int fd, uintptr_t v)
{
    char buf[24];
    int i = (int)sizeof buf - 1;
    buf[i] = 0;
    do {
        buf[--i] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    buf[--i] = 'x';
    buf[--i] = '0';
    nbm__write_str(fd, buf + i);
}

/* One line, like glibc's "free(): invalid pointer", written with one
 * write(2) so it cannot interleave with other output, then abort. */
void nbm__fatal(const char *what, const void *p)
{
    char line[256], hex[20];
    size_t n = 0, h = 0;
    const char *parts[2] = { "nbmalloc: ", what };
    for (int k = 0; k < 2; k++)
        for (const char *s = parts[k]; *s && n < sizeof line - 24; s++)
            line[n++] = *s;
    line[n++] = ' ';
    line[n++] = '0';
    line[n++] = 'x';
    uintptr_t v = (uintptr_t)p;
    do {
        hex[h++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    while (h)
        line[n++] = hex[--h];
    line[n++] = '\n';
    ssize_t w = write(2, line, n);
    (void)w;
    abort();
}
