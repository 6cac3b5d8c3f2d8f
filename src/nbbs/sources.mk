# The back-end's source list, written once. Every consumer reads it from here:
# CMake (src/nbbs/CMakeLists.txt), the freestanding check
# (scripts/test.d/10-freestanding.sh), the interleaving explorer (through the
# CMake targets) and the kernel module's Kbuild file (kernel/Kbuild).
#
# NBBS_CORE_SOURCES: the freestanding core (no libc; types and atomics come
# from nbbs_platform.h). NBBS_HOSTED_SOURCES: conveniences that use libc.
NBBS_CORE_SOURCES := nbbs_init.c nbbs_alloc.c nbbs_stats.c nbbs_validate.c nbbs_tree.c nbbs_bunch.c nbbs_cache.c nbbs_carve.c nbbs_reclaim.c
NBBS_HOSTED_SOURCES := nbbs_hosted.c
