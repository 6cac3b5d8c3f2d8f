/*
 * cli.c - nbbs-bench's command line: options, their checks, --help.
 * See bench/README.md for what every option does.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "runner.h"

bench_options_t opt = {
    .repeat = 3, .scale = BENCH_SCALE_QUICK, .max_order = -1, .seed = 0x6e6262730001ull,
};

const char *const scale_names[] = { "smoke", "quick", "paper" };
const char *const pin_names[] = { "none", "spread", "pack" };

void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "nbbs-bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

void parse_longs(long_list_t *l, const char *s, const char *what)
{
    char *end;
    l->n = 0;
    while (*s) {
        if (l->n == MAX_LIST)
            die("too many values for %s", what);
        errno = 0;
        long v = strtol(s, &end, 0);
        if (end == s || errno || v < 0)
            die("bad value for %s: '%s'", what, s);
        l->v[l->n++] = v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            die("bad value for %s: '%s'", what, end);
    }
    if (l->n == 0)
        die("empty list for %s", what);
}

/* Is name in the comma-separated list (NULL or "all" means everything)? */
int in_list(const char *list, const char *name)
{
    if (!list || strcmp(list, "all") == 0)
        return 1;
    size_t n = strlen(name);
    for (const char *s = list; *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == n && strncmp(s, name, n) == 0)
            return 1;
        s += len + (e != NULL);
    }
    return 0;
}

/* Every name in list must exist (catches typos before a long run). */
static void check_names(const char *list, int is_alloc)
{
    if (!list || strcmp(list, "all") == 0)
        return;
    char *dup = strdup(list), *save = NULL;
    if (!dup)
        die("out of memory");
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int found = 0;
        if (is_alloc) {
            for (int i = 0; bench_allocators[i]; i++)
                found |= strcmp(bench_allocators[i]->name, tok) == 0;
        } else {
            for (int i = 0; bench_workloads[i]; i++)
                found |= strcmp(bench_workloads[i]->name, tok) == 0;
        }
        if (!found)
            die("unknown %s '%s' (see --list)", is_alloc ? "allocator" : "workload", tok);
    }
    free(dup);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: nbbs-bench [options]\n"
            "Runs workloads on allocators with T threads; prints a table and writes JSON.\n\n"
            "  --workload W[,W...]   workloads to run (default: all)\n"
            "  --allocator A[,A...]  allocators to run (default: all; malloc only where sizes allow)\n"
            "  --threads T[,T...]    thread counts for every workload (default 1,2,4,8, or the\n"
            "                        workload's own list, e.g. churn 4, latency 8)\n"
            "  --repeat N            runs per configuration, median/min/max reported (default 3,\n"
            "                        or the workload's own count, e.g. churn 5)\n"
            "  --scale S             smoke | quick | paper: work per run (default quick)\n"
            "  --size B[,B...]       request bytes of the workloads that sweep a size (default 64)\n"
            "  --order K[,K...]      block order of the workloads that sweep an order (default 0)\n"
            "  --fill P[,P...]       occupancy %% of the workloads that sweep a fill (default: the\n"
            "                        workload's, e.g. fill-cost 5,95, churn 50,75,90)\n"
            "  --min-block B         override the minimum block of every workload's arena\n"
            "  --max-order K         override the maximum order\n"
            "  --arena BYTES         override the arena size\n"
            "  --ops N, --rounds N, --seconds S   override the scale's work amount (--ops is\n"
            "                        the block count of thread-test, --rounds the pool multiplier\n"
            "                        of constant-occupancy)\n"
            "  --pin MODE            where each worker thread runs: none (default: the scheduler\n"
            "                        decides), spread (thread t on CPU t mod n of the n CPUs the\n"
            "                        process may use) or pack (groups of max(2, ceil(T/n))\n"
            "                        consecutive threads share a CPU); a no-op at T=1 or on one CPU\n"
            "  --seed N              random seed (default fixed, runs are reproducible per thread)\n"
            "  --json FILE           write every run and its summary to FILE\n"
            "  --label NAME          name recorded in the JSON (e.g. the LD_PRELOADed malloc)\n"
            "  --quiet               no progress line\n"
            "  --list [--json]       list workloads and allocators (--json: every field, for\n"
            "                        run.sh and plot.py)\n"
            "  --help                this text\n\n");
    list_text(f);
}

/* The index of arg among an option's three names (scale_names, pin_names),
 * or exit with a message naming them. */
static int name_index(const char *const names[3], const char *arg, const char *what)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(arg, names[i]) == 0)
            return i;
    die("%s must be %s, %s or %s, not '%s'", what, names[0], names[1], names[2], arg);
}

void parse_args(int argc, char **argv)
{
    enum { O_WL = 256, O_AL, O_TH, O_REP, O_SCALE, O_SIZE, O_ORDER, O_FILL, O_MINB, O_MAXO, O_ARENA, O_OPS,
           O_ROUNDS, O_SECS, O_SEED, O_PIN, O_JSON, O_LABEL, O_QUIET, O_LIST, O_HELP };
    static const struct option lo[] = {
        { "workload", 1, 0, O_WL }, { "allocator", 1, 0, O_AL }, { "threads", 1, 0, O_TH },
        { "repeat", 1, 0, O_REP }, { "scale", 1, 0, O_SCALE }, { "size", 1, 0, O_SIZE },
        { "order", 1, 0, O_ORDER }, { "fill", 1, 0, O_FILL }, { "min-block", 1, 0, O_MINB },
        { "max-order", 1, 0, O_MAXO }, { "arena", 1, 0, O_ARENA }, { "ops", 1, 0, O_OPS },
        { "rounds", 1, 0, O_ROUNDS }, { "seconds", 1, 0, O_SECS }, { "seed", 1, 0, O_SEED },
        { "pin", 1, 0, O_PIN },
        { "json", 1, 0, O_JSON }, { "label", 1, 0, O_LABEL }, { "quiet", 0, 0, O_QUIET },
        { "list", 0, 0, O_LIST }, { "help", 0, 0, O_HELP }, { 0, 0, 0, 0 },
    };
    parse_longs(&opt.threads, "1,2,4,8", "--threads");
    parse_longs(&opt.sizes, "64", "--size");
    parse_longs(&opt.orders, "0", "--order");
    parse_longs(&opt.fills, "5,95", "--fill");
    /* `--list --json` asks for the list as JSON: a --json with no file after
     * it (last, or followed by another option) becomes --json= (empty). */
    static char json_flag[] = "--json=";
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--json") == 0 && (i + 1 == argc || strncmp(argv[i + 1], "--", 2) == 0))
            argv[i] = json_flag;
    long_list_t one;
    int c, list = 0;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case O_WL: opt.workloads = optarg; break;
        case O_AL: opt.allocators = optarg; break;
        case O_TH: parse_longs(&opt.threads, optarg, "--threads"); opt.threads_set = 1; break;
        case O_REP: parse_longs(&one, optarg, "--repeat"); opt.repeat = (int)one.v[0]; opt.repeat_set = 1; break;
        case O_SCALE: opt.scale = (bench_scale_t)name_index(scale_names, optarg, "--scale"); break;
        case O_SIZE: parse_longs(&opt.sizes, optarg, "--size"); opt.sizes_set = 1; break;
        case O_ORDER: parse_longs(&opt.orders, optarg, "--order"); opt.orders_set = 1; break;
        case O_FILL: parse_longs(&opt.fills, optarg, "--fill"); opt.fills_set = 1; break;
        case O_MINB: parse_longs(&one, optarg, "--min-block"); opt.min_block = (size_t)one.v[0]; break;
        case O_MAXO: parse_longs(&one, optarg, "--max-order"); opt.max_order = one.v[0]; break;
        case O_ARENA: parse_longs(&one, optarg, "--arena"); opt.arena = (size_t)one.v[0]; break;
        case O_OPS: parse_longs(&one, optarg, "--ops"); opt.ops = (uint64_t)one.v[0]; break;
        case O_ROUNDS: parse_longs(&one, optarg, "--rounds"); opt.rounds = one.v[0]; break;
        case O_SECS: opt.seconds = strtod(optarg, NULL); if (opt.seconds <= 0) die("bad --seconds"); break;
        case O_SEED: parse_longs(&one, optarg, "--seed"); opt.seed = (uint64_t)one.v[0]; break;
        case O_PIN: opt.pin = name_index(pin_names, optarg, "--pin"); break;
        case O_JSON: opt.json = optarg; break;
        case O_LABEL: opt.label = optarg; break;
        case O_QUIET: opt.quiet = 1; break;
        case O_LIST: list = 1; break;
        case O_HELP: usage(stdout); exit(0);
        default: usage(stderr); exit(2);
        }
    }
    if (optind < argc)
        die("unexpected argument '%s'", argv[optind]);
    if (list) {
        if (opt.json && *opt.json)
            die("--list --json prints to stdout: give no file name");
        if (opt.json)
            list_json(stdout);
        else
            list_text(stdout);
        exit(0);
    }
    if (opt.json && !*opt.json)
        die("--json needs a file name (or --list --json for the list)");
    if (opt.repeat < 1 || opt.repeat > BENCH_MAX_REPEAT)
        die("--repeat must be 1..%d", BENCH_MAX_REPEAT);
    for (int i = 0; i < opt.threads.n; i++)
        if (opt.threads.v[i] < 1 || opt.threads.v[i] > 1024)
            die("--threads values must be 1..1024");
    check_names(opt.workloads, 0);
    check_names(opt.allocators, 1);
}
