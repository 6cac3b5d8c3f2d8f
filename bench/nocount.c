/* nocount.c - the normal build has no atomic counts. */
#include <string.h>

#include "bench.h"

const int bench_counting = 0;

void bench_atomics_read(bench_atomics_t *out)
{
    memset(out, 0, sizeof *out);
}
