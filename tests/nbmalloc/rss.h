/*
 * rss.h - the resident set of the calling process, for the nbmalloc tests
 * that check memory goes back to the OS. Header-only; not part of the API.
 */
#ifndef NBM_TEST_RSS_H
#define NBM_TEST_RSS_H

#include <stddef.h>
#include <stdio.h>
#include <unistd.h>

/* Resident bytes of this process (/proc/self/statm), 0 if unreadable. */
static inline size_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%lu %lu", &size, &res) != 2)
        res = 0;
    fclose(f);
    return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

#endif /* NBM_TEST_RSS_H */
