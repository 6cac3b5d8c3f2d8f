/*
 * main.c - nbbs-bench: parse the command line (cli.c), run the selected
 * workloads on the selected allocators (runner.c), write the table and the
 * JSON (output.c). Workloads and allocators register themselves (bench.h).
 */
#include <errno.h>
#include <string.h>

#include "runner.h"

int main(int argc, char **argv)
{
    bench_registry_init();
    parse_args(argc, argv);
    FILE *json = NULL;
    if (opt.json) {
        json = fopen(opt.json, "w");
        if (!json)
            die("cannot write %s: %s", opt.json, strerror(errno));
        json_header(json, argv[0]);
    }
    int skipped = run_suite(json);
    if (json && fclose(json) != 0)
        die("error writing %s", opt.json);
    return skipped ? 1 : 0;
}
