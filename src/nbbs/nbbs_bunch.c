/* nbbs_bunch.c - NBBS_LAYOUT_BUNCH: 4 levels (15 nodes) per 64-bit word, kept
 * as the 8 bottom nodes' 5-bit slots (40 bits); one CAS per 4 levels. */
#include "nbbs_geometry.h"

#define WORD uint64_t
#define LPW 4
#define FN(name) nbbs__bunch_##name
#define nb_load_W nb_load_u64
#define nb_store_W nb_store_u64
#define nb_store_rel_W nb_store_rel_u64
#define nb_cas_W nb_cas_u64
#define nb_and_W nb_and_u64
#define VER_ONE (UINT64_C(1) << 40) /* bits 40..63: a 24-bit version */
#define SLOTS_W ((WORD)(VER_ONE - 1))
#define VER_MASK ((WORD) ~SLOTS_W)
_Static_assert(VER_ONE == UINT64_C(1) << (8 * SLOT_BITS), "the version sits just above the 8 slots");
#include "nbbs_core.inc"
