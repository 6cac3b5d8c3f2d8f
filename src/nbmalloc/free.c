/*
 * free.c - nbm_free's generic path, and usable sizes.
 *
 * Detected and reported (one line naming the pointer, then abort):
 *  - a pointer outside every arena and huge mapping (never returned);
 *  - a pointer in a small-object chunk that is not on an object boundary;
 *  - a small object freed while it carries the freed-object tag (double free,
 *    wherever the first free put it: any thread's cache or a shared batch);
 *  - a medium pointer that is not the start of a block handed out (interior,
 *    never allocated, or already freed: its page byte is taken by exchange);
 *  - a huge pointer that is not the mapping's user pointer, or freed twice.
 * Not detected: an object-aligned address inside a chunk that was never
 * handed out; a double free of a small object whose tag word the program
 * overwrote after the first free (a use after free).
 */
#include "internal.h"

void nbm__free_generic(void *p)
{
    if (!p)
        return;
    uintptr_t a = (uintptr_t)p;
    uintptr_t owner = nbm__owner(a);
    if (owner == 0)
        nbm__fatal("free(): invalid pointer", p);
    if (owner & NBM_HUGE_TAG) {
        nbm__huge_free(owner, p, "free(): invalid pointer");
        return;
    }
    nbm_arena_t *ar = (nbm_arena_t *)owner;
    unsigned c1 = nbm__unit_class(ar, a);
    if (c1 == 0) {
        nbm__medium_free(ar, p, "free(): invalid pointer");
        return;
    }
    /* A small object on a thread whose cache is not set up (or torn down). */
    if (nbm__tcache_get()) {
        nbm__free_fast(p);
        return;
    }
    const nbm_class_t *c = &nbm__classes[c1 - 1];
    if (!nbm__offset_ok(c, a))
        nbm__fatal("free(): invalid pointer", p);
    if (((uintptr_t *)p)[1] == (a ^ nbm__secret))
        nbm__fatal("free(): double free detected for", p);
    nbm__small_free_generic(p, c1 - 1);
}

size_t nbm__usable(const void *p, const char *who)
{
    if (!p)
        return 0;
    uintptr_t a = (uintptr_t)p;
    uintptr_t owner = nbm__owner(a);
    if (owner == 0)
        nbm__fatal(who, p);
    if (owner & NBM_HUGE_TAG)
        return nbm__huge_size(owner, p, who);
    nbm_arena_t *ar = (nbm_arena_t *)owner;
    unsigned c1 = nbm__unit_class(ar, a);
    if (c1 == 0)
        return nbm__medium_size(ar, p, who);
    const nbm_class_t *c = &nbm__classes[c1 - 1];
    if (!nbm__offset_ok(c, a))
        nbm__fatal(who, p);
    return c->size;
}

void nbm_free(void *p) { nbm__free_fast(p); }

size_t nbm_usable_size(const void *p) { return nbm__usable(p, "malloc_usable_size(): invalid pointer"); }

void nbm_thread_flush(void)
{
    if (nbm__tc)
        nbm__tcache_flush(nbm__tc);
}

void nbm_purge(void)
{
    if (nbm_load_u32(&nbm__ready) != 2)
        return;
    nbm_tcache_t *tc = nbm__tc;
    for (unsigned o = 0; tc && o < NBM_MCACHE_ORDERS; o++)
        if (tc->mcache[o]) {
            void *p = tc->mcache[o];
            tc->mcache[o] = NULL;
            nbm__medium_release(p, o);
        }
    nbm__decay_sweep(true);
}
