/*
 * child.h - runs a bad call in a forked child and checks that nbmalloc
 * aborted it with the expected message, for the nbmalloc tests of pointer
 * checks. Header-only; not part of the API.
 */
#ifndef NBM_TEST_CHILD_H
#define NBM_TEST_CHILD_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs fn(shared) in a child with stderr piped; true if the child died of
 * SIGABRT and wrote `want` and a pointer ("0x"). Says what it got if not. */
static inline bool child_aborts(const char *name, void (*fn)(void **), const char *want)
{
    int fds[2];
    if (pipe(fds) != 0)
        abort();
    void *shared[1] = { NULL };
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        fn(shared);
        _exit(0); /* not reached when detection works */
    }
    close(fds[1]);
    char buf[512] = { 0 };
    size_t got = 0;
    ssize_t r;
    while (got < sizeof buf - 1 && (r = read(fds[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)r;
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    bool ok = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(buf, want) && strstr(buf, "0x");
    if (!ok)
        fprintf(stderr, "%s: expected abort with \"%s\", got status %d, stderr \"%s\"\n", name, want, st, buf);
    return ok;
}

#endif /* NBM_TEST_CHILD_H */
