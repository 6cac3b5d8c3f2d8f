/*
 * free.c - nbm_free's generic path, and usable sizes.
 *
 * Detected and reported (one line naming the pointer, then abort):
 *  - a pointer outside every arena and huge mapping (never returned);
 *  - a pointer in a small-object chunk that is not on an object boundary, or
 *    past the objects carved so far (never handed out);
 *  - a small object that carries the freed-object tag: freed already
 *    (wherever the first free put it: a thread's list, a page's own or
 *    remote list),
 *    or carved onto a free list and never handed out ("double free");
 *  - a medium pointer that is not the start of a block handed out (interior,
 *    never allocated, back in the back-end: "invalid pointer"), or a block
 *    freed and still cached ("double free");
 *  - a huge pointer that is not the mapping's user pointer, or freed twice.
 * Not detected: a double free of a small object whose tag word the program
 * overwrote after the first free (a use after free).
 */
#include "fast.h"

void nbm__free_bad(const char *what, const void *p)
{
    nbm__fatal(what, p);
}

void nbm__free_unaligned(void *p)
{
    uintptr_t a = (uintptr_t)p;
    nbm_arena_t *ar = nbm__arena_of(a);
    if (nbm__unit_word(ar, a) == 0) {
        nbm__medium_free(ar, p, "free(): invalid pointer");
        return;
    }
    nbm__fatal("free(): invalid pointer", p);
}

void nbm__free_generic(void *p)
{
    if (!p)
        return;
    uintptr_t a = (uintptr_t)p;
    uintptr_t owner = nbm__owner(a);
    if (owner == 0)
        nbm__fatal("free(): invalid pointer", p);
    if (!nbm__map_is_arena(owner)) {
        nbm__huge_free(owner, p, "free(): invalid pointer");
        return;
    }
    nbm_arena_t *ar = nbm__map_arena(owner);
    uint32_t w = nbm__unit_word(ar, a);
    if (w == 0) {
        nbm__medium_free(ar, p, "free(): invalid pointer");
        return;
    }
    /* A small object on a thread whose heap is not set up (or torn down). */
    if (nbm__tcache_get()) {
        nbm__free_fast(p);
        return;
    }
    const nbm_class_t *c = &nbm__classes[nbm__unit_class(w)];
    if (!nbm__offset_ok(c, a, w))
        nbm__fatal("free(): invalid pointer", p);
    if (((uintptr_t *)p)[1] == (a ^ nbm__secret))
        nbm__fatal("free(): double free detected for", p);
    nbm__small_free_generic(p, nbm__page_at(ar, a, c->chunk_mask));
}

/* The usable size of a live block; `who` for a pointer that never was one,
 * `freed` for a block freed already (realloc, malloc_usable_size). */
size_t nbm__usable(const void *p, const char *who, const char *freed)
{
    if (!p)
        return 0;
    uintptr_t a = (uintptr_t)p;
    uintptr_t owner = nbm__owner(a);
    if (owner == 0)
        nbm__fatal(who, p);
    if (!nbm__map_is_arena(owner))
        return nbm__huge_size(owner, p, who, freed);
    nbm_arena_t *ar = nbm__map_arena(owner);
    uint32_t w = nbm__unit_word(ar, a);
    if (w == 0)
        return nbm__medium_size(ar, p, who, freed);
    const nbm_class_t *c = &nbm__classes[nbm__unit_class(w)];
    if (!nbm__offset_ok(c, a, w))
        nbm__fatal(who, p);
    if (((const uintptr_t *)p)[1] == (a ^ nbm__secret))
        nbm__fatal(freed, p);
    return c->size;
}

void nbm_free(void *p) { nbm__free_fast(p); }

size_t nbm_usable_size(const void *p)
{
    return nbm__usable(p, "malloc_usable_size(): invalid pointer", "malloc_usable_size(): freed pointer");
}

void nbm_thread_flush(void)
{
    if (nbm__tc)
        nbm__tcache_flush(nbm__tc, false);
}

/* malloc_trim too: every empty page of this thread's heap and of abandoned
 * heaps, and every cached medium block, goes back with its memory. */
void nbm_purge(void)
{
    if (nbm_load_u32(&nbm__ready) != 2)
        return;
    nbm__heaps_collect(true);
    nbm__decay_sweep(true);
}
