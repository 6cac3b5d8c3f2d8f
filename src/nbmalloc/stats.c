/*
 * stats.c - statistics: a snapshot, and a printer that needs no stdio.
 */
#include "internal.h"

void nbm_get_stats(nbm_stats_t *out)
{
    if (!out)
        return;
    nbm_gstats_t *g = &nbm__gstats;
    out->arenas = nbm_load_u64_relaxed(&g->arenas);
    out->arena_bytes = nbm_load_u64_relaxed(&g->arena_bytes);
    out->chunks = nbm_load_u64_relaxed(&g->chunks);
    out->chunk_bytes = nbm_load_u64_relaxed(&g->chunk_bytes);
    out->medium_live = nbm_load_u64_relaxed(&g->medium_live);
    out->medium_cached = nbm_load_u64_relaxed(&g->medium_cached);
    out->purged_bytes = nbm_load_u64_relaxed(&g->purged);
    out->huge_live = nbm_load_u64_relaxed(&g->huge_live);
    out->huge_bytes = nbm_load_u64_relaxed(&g->huge_bytes);
    out->threads = nbm_load_u64_relaxed(&g->threads);
    out->refills = nbm_load_u64_relaxed(&g->refills);
    out->drains = nbm_load_u64_relaxed(&g->drains);
    nbm_tcache_t *tc = nbm__tc; /* the caller's own cache has not joined yet */
    if (tc) {
        out->refills += tc->refills;
        out->drains += tc->drains;
        out->medium_live += (size_t)tc->medium_delta;
    }
    out->peak_rss = nbm__os_peak_rss();
}

static void line(int fd, const char *name, uint64_t v, const char *unit)
{
    nbm__write_str(fd, "nbmalloc:   ");
    nbm__write_str(fd, name);
    nbm__write_str(fd, " ");
    nbm__write_num(fd, v);
    nbm__write_str(fd, unit);
    nbm__write_str(fd, "\n");
}

void nbm_stats_print(int fd)
{
    nbm_stats_t s;
    nbm_get_stats(&s);
    uint64_t used = 0;
    for (uint32_t i = 0; i < nbm__arena_count(); i++) {
        nbbs_stats_t bs;
        nbbs_get_stats(nbm__arena_at(i)->bb, &bs);
        used += bs.used_bytes;
    }
    nbm__write_str(fd, "nbmalloc: statistics\n");
    line(fd, "arenas          ", s.arenas, "");
    line(fd, "arena reserved  ", s.arena_bytes >> 20, " MiB");
    line(fd, "back-end in use ", used >> 10, " KiB");
    line(fd, "pages           ", s.chunks, "");
    line(fd, "page bytes      ", s.chunk_bytes >> 10, " KiB");
    line(fd, "medium live     ", s.medium_live, " blocks");
    line(fd, "medium cached   ", s.medium_cached >> 10, " KiB");
    line(fd, "purged (total)  ", s.purged_bytes >> 10, " KiB");
    line(fd, "moved (total)   ", nbm_load_u64_relaxed(&nbm__gstats.moved) >> 10, " KiB");
    line(fd, "huge live       ", s.huge_live, " mappings");
    line(fd, "huge bytes      ", s.huge_bytes >> 10, " KiB");
    line(fd, "thread heaps    ", s.threads, " taken (new or adopted)");
    line(fd, "pages taken     ", s.refills, "");
    line(fd, "pages emptied   ", s.drains, "");
    line(fd, "descriptors     ", nbm_load_u64_relaxed(&nbm__desc_pool.mapped) >> 10, " KiB mapped");
    line(fd, "peak RSS        ", s.peak_rss >> 10, " KiB");
}

__attribute__((destructor)) static void nbm_exit_stats(void)
{
    if (nbm__opt.show_stats)
        nbm_stats_print(nbm__opt.stats_fd);
}
