/* nbbs_tree.c - NBBS_LAYOUT_TREE: one 8-bit state word per node, one CAS per
 * level climbed (the paper's 1-level layout). */
#include "nbbs_geometry.h"

#define WORD uint8_t
#define LPW 1
#define FN(name) nbbs__tree_##name
#define nb_load_W nb_load_u8
#define nb_store_W nb_store_u8
#define nb_store_rel_W nb_store_rel_u8
#define nb_cas_W nb_cas_u8
#define nb_and_W nb_and_u8
#define VER_ONE ((uint8_t)0x20) /* bits 5..7: a 3-bit version */
#define VER_MASK ((WORD) ~(WORD)(VER_ONE - 1))
_Static_assert(VER_ONE == 1u << SLOT_BITS, "the version sits just above the one slot");
#include "nbbs_core.inc"
