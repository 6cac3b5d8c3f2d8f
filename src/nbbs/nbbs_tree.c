/* nbbs_tree.c - NBBS_LAYOUT_TREE: one 8-bit state word per node, one CAS per
 * level climbed (the paper's 1-level layout). Bits 0..4 are the slot, bit 5
 * OWN_P and bit 6 OWN_D (the owner of the slot's clearing and its flag, see
 * FN(clear_owned) in nbbs_core.inc), bit 7 is unused. No version: the owner
 * bits make phase 3's ABA impossible instead of unlikely. */
#include "nbbs_geometry.h"

#define WORD uint8_t
#define LPW 1
#define FN(name) nbbs__tree_##name
#define nb_load_W nb_load_u8
#define nb_store_W nb_store_u8
#define nb_store_rel_W nb_store_rel_u8
#define nb_cas_W nb_cas_u8
#define nb_and_W nb_and_u8
#define SLOTS_W ((WORD)((1u << SLOT_BITS) - 1))
#define VER_MASK ((WORD) ~SLOTS_W)
#define OWN_P ((WORD)0x20) /* a phase 3 owns the clearing of this slot */
#define OWN_D ((WORD)0x40) /* the owner must look below again before it clears */
_Static_assert(OWN_P == 1u << SLOT_BITS && OWN_D == 2u << SLOT_BITS,
               "the owner bits sit just above the one slot");
#include "nbbs_core.inc"
