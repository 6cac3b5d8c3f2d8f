/*
 * stats.c - statistics: a snapshot, and a printer that needs no stdio.
 */
#include "internal.h"

void nbm_get_stats(nbm_stats_t *out)
{
    if (!out)
        return;
    out->arenas = NBM_STAT(arenas);
    out->arena_bytes = NBM_STAT(arena_bytes);
    out->chunks = NBM_STAT(chunks);
    out->chunk_bytes = NBM_STAT(chunk_bytes);
    out->medium_live = NBM_STAT(medium_live);
    out->medium_cached = NBM_STAT(medium_cached);
    out->purged_bytes = NBM_STAT(purged);
    out->huge_live = NBM_STAT(huge_live);
    out->huge_bytes = NBM_STAT(huge_bytes);
    out->threads = NBM_STAT(threads);
    out->refills = NBM_STAT(refills);
    out->drains = NBM_STAT(drains);
    nbm_tcache_t *tc = nbm__tc; /* the caller's own cache has not joined yet */
    if (tc) {
        out->refills += tc->refills;
        out->drains += tc->drains;
        out->medium_live += (size_t)tc->thr.medium_delta;
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
    line(fd, "moved (total)   ", NBM_STAT(moved) >> 10, " KiB");
    line(fd, "medium splits   ", NBM_STAT(splits), "");
    line(fd, "  lost requests ", NBM_STAT(split_lost), "");
    line(fd, "  retakes       ", NBM_STAT(split_retakes), " (a part taken smaller)");
    line(fd, "  pages skipped ", NBM_STAT(split_skips), "");
    line(fd, "  dirty takes   ", NBM_STAT(dirty_takes), " (blocks taken by others, not zero)");
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
