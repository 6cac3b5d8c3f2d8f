/*
 * registry.c - the lists --allocator and --workload choose from, gathered
 * from the records BENCH_ALLOCATOR and BENCH_WORKLOAD leave in two linker
 * sections: adding an allocator or a workload is one file, named nowhere
 * else. Ordered as the report wants them: lock-free allocators first, then
 * the locked ones, the malloc last; workloads by report section; within
 * that, by the file and line that registered them (deterministic, whatever
 * the link).
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

extern const bench_reg_t __start_nbbs_bench_alloc[] __attribute__((weak));
extern const bench_reg_t __stop_nbbs_bench_alloc[] __attribute__((weak));
extern const bench_reg_t __start_nbbs_bench_wl[] __attribute__((weak));
extern const bench_reg_t __stop_nbbs_bench_wl[] __attribute__((weak));

const bench_allocator_t *const *bench_allocators;
const bench_workload_t *const *bench_workloads;

static int alloc_rank(const bench_reg_t *r)
{
    const bench_allocator_t *a = r->item;
    return a->is_malloc ? 2 : a->lockfree ? 0 : 1;
}

static int by_place(const bench_reg_t *x, const bench_reg_t *y)
{
    int c = strcmp(x->file, y->file);
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

static int cmp_alloc(const void *a, const void *b)
{
    const bench_reg_t *x = a, *y = b;
    int rx = alloc_rank(x), ry = alloc_rank(y);
    return rx != ry ? rx - ry : by_place(x, y);
}

/* Workloads by report section (bench.h names them), then by place. */
static int group_rank(const bench_reg_t *r)
{
    static const char *const order[] = { "paper", "page", "llfree", "frontend", "experiment" };
    const bench_workload_t *w = r->item;
    for (int i = 0; i < 5; i++)
        if (w->group && strcmp(w->group, order[i]) == 0)
            return i;
    return 5;
}

static int cmp_wl(const void *a, const void *b)
{
    int rx = group_rank(a), ry = group_rank(b);
    return rx != ry ? rx - ry : by_place(a, b);
}

/* A sorted, NULL-terminated array of the items of [begin, end). */
static const void **gather(const bench_reg_t *begin, const bench_reg_t *end, int (*cmp)(const void *, const void *))
{
    size_t n = begin && end > begin ? (size_t)(end - begin) : 0;
    bench_reg_t *tmp = malloc((n ? n : 1) * sizeof *tmp);
    const void **out = calloc(n + 1, sizeof *out);
    if (!tmp || !out)
        abort();
    if (n)
        memcpy(tmp, begin, n * sizeof *tmp);
    qsort(tmp, n, sizeof *tmp, cmp);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[i].item;
    free(tmp);
    return out;
}

void bench_registry_init(void)
{
    if (bench_allocators)
        return;
    bench_allocators = (const bench_allocator_t *const *)gather(__start_nbbs_bench_alloc, __stop_nbbs_bench_alloc,
                                                                cmp_alloc);
    bench_workloads = (const bench_workload_t *const *)gather(__start_nbbs_bench_wl, __stop_nbbs_bench_wl, cmp_wl);
}
