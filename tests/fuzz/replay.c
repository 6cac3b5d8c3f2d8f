/*
 * replay.c - runs a fuzz target over saved inputs, without libFuzzer, so the
 * regression corpus is replayed by ctest in every build (gcc included).
 * Arguments: files or directories of inputs. Exit status 0 if all ran.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

static unsigned ran;

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    uint8_t *copy = malloc(n ? n : 1); /* exact size, so ASan sees overreads */
    memcpy(copy, buf, n);
    LLVMFuzzerTestOneInput(copy, n);
    free(copy);
    ran++;
    return 0;
}

static int run_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        perror(path);
        return 1;
    }
    if (!S_ISDIR(st.st_mode))
        return run_file(path);
    DIR *d = opendir(path);
    struct dirent *e;
    int rc = 0;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        rc |= run_path(sub);
    }
    if (d)
        closedir(d);
    return rc;
}

int main(int argc, char **argv)
{
    int rc = 0;
    for (int i = 1; i < argc; i++)
        rc |= run_path(argv[i]);
    printf("replayed %u inputs\n", ran);
    return rc;
}
