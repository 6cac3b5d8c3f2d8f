/*
 * nbbs_kmod.c - libnbbs inside the Linux kernel: a self-test and benchmark
 * that runs when the module is loaded.
 *
 * The core (src/nbbs/, built unchanged by kernel/Kbuild) manages a fake
 * physical range: FAKE_BASE is never mapped and never touched, as a kernel's
 * page-frame allocator would hand out frame addresses it does not read. Its
 * metadata comes from kvmalloc. For each layout (BUNCH, TREE) one kthread per
 * online CPU, bound to it, runs concurrent phases:
 *   pairs  - order-0 alloc+free pairs;
 *   held   - many order-0 blocks held, a random one freed and replaced;
 *   mixed  - orders 0..4 at random slots, freed when found live;
 *   churn  - fill ~90% of the frames with order 0 from all CPUs, free a
 *            random half, allocate the same number again, drain;
 *   race   - every thread frees the same blocks: exactly one free of each
 *            may succeed;
 *   irq    - the held loop while a pinned hrtimer on each CPU allocates and
 *            frees in hard interrupt context, interrupting that CPU's
 *            thread anywhere inside nbbs_alloc_order or nbbs_free.
 * A bitmap with one bit per frame, set when a block is handed out and
 * cleared before it is freed, catches any frame handed out twice; after each
 * phase the statistics must be back to empty and nbbs_validate must pass.
 * The API's error cases run on a small instance. The pairs, held and mixed
 * loops are then timed, without the bitmap, against alloc_pages/__free_pages
 * in the same boot, interleaved over `reps` repetitions.
 *
 * Output: one line per result, all starting "nbbs: " (see docs/kernel.md):
 *   nbbs: CHECK <name> PASS|FAIL [detail]
 *   nbbs: CHURN layout=... fill_pct=... free_2m=... bound_2m=...
 *   nbbs: BENCH workload=... alloc=... threads=... rep=... ops=... ns_per_pair=...
 *   nbbs: RATIO workload=... alloc=... vs=alloc_pages median_ns=... base_ns=... ratio=...
 *   nbbs: RESULT PASS|FAIL checks=... failed=...
 * The module's init returns 0 whatever the verdict: busybox insmod retries a
 * module whose init fails, and the verdict is read from the log.
 */
#include <linux/atomic.h>
#include <linux/bitops.h>
#include <linux/completion.h>
#include <linux/cpumask.h>
#include <linux/gfp.h>
#include <linux/hrtimer.h>
#include <linux/kernel.h>
#include <linux/kthread.h>
#include <linux/ktime.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/sort.h>

#include "nbbs.h"

static unsigned int frames_log = 18;
module_param(frames_log, uint, 0444);
MODULE_PARM_DESC(frames_log, "log2 of the 4 KiB frames in the tested range (default 18: 1 GiB)");
static unsigned int iters = 20000;
module_param(iters, uint, 0444);
MODULE_PARM_DESC(iters, "operations per thread in each pairs/held/mixed loop");
static unsigned int held = 4096;
module_param(held, uint, 0444);
MODULE_PARM_DESC(held, "order-0 blocks each thread holds in the held loop");
static unsigned int reps = 1;
module_param(reps, uint, 0444);
MODULE_PARM_DESC(reps, "interleaved repetitions of the timed loops (0: no benchmark)");
static unsigned int phase_timeout = 60;
module_param(phase_timeout, uint, 0444);
MODULE_PARM_DESC(phase_timeout, "seconds a phase may take before the test reports FAIL (a thread that never finishes)");
static unsigned int contend_iters = 200000;
module_param(contend_iters, uint, 0444);
MODULE_PARM_DESC(contend_iters, "operations per thread in the contended phase");
static unsigned int contend_per_cpu = 4;
module_param(contend_per_cpu, uint, 0444);
MODULE_PARM_DESC(contend_per_cpu, "threads per CPU in the contended phase (preempted inside operations)");
static unsigned int churn_pct = 90;
module_param(churn_pct, uint, 0444);
MODULE_PARM_DESC(churn_pct, "fill level of the churn phase, percent of the frames");

#define KT_FRAME_SHIFT 12
#define KT_FRAME_SIZE (1UL << KT_FRAME_SHIFT)
#define MIXED_SLOTS 1024u
#define MIXED_MAX_ORDER 4u
/* The contended phase: every thread in one small tree, so that they meet on
 * the same words all the time (with per-CPU hints over a large range they
 * mostly work apart, and races inside an operation are rare). */
#define CONTEND_LOG 8u		/* 256 frames, one tree */
#define CONTEND_SLOTS 4u
/* Orders 0..6 with probability 1/2, 1/4, ...: a mark lost high in the tree
 * (a live block no longer recorded in an ancestor) then soon lets a large
 * allocation cover a live block, which the bitmap sees at once; with small
 * orders only, such a loss heals when the block is freed and shows nowhere. */
#define CONTEND_MAX_ORDER 6u
#define RACE_BLOCKS 4096u
#define HUGE_ORDER 9u /* 2 MiB of 4 KiB frames */
/* The tested range: 16 TiB up, never mapped; only its addresses are used. */
#define FAKE_BASE ((uintptr_t)1 << 44)

static atomic_t checks = ATOMIC_INIT(0);
static atomic_t failed = ATOMIC_INIT(0);
static atomic_t fail_msgs = ATOMIC_INIT(0);

/* Records one check; prints its line (failures: at most 40 detail lines). */
static bool check(bool ok, const char *name, const char *lname, long a, long b)
{
	atomic_inc(&checks);
	if (ok)
		return true;
	atomic_inc(&failed);
	if (atomic_inc_return(&fail_msgs) <= 40)
		pr_info("nbbs: CHECK %s/%s FAIL got=%ld want=%ld\n", name, lname, a, b);
	return false;
}

/* ------------------------------------------------------------------------
 * An instance over the fake range, and the bitmap of frames handed out
 * ------------------------------------------------------------------------ */

struct inst {
	nbbs_t *b;
	void *meta;		/* from kvmalloc, NBBS_META_ALIGN-aligned inside */
	unsigned long *bitmap;	/* one bit per frame: handed out */
	unsigned long nframes;
	const char *name;	/* "nbbs-bunch" or "nbbs-tree" */
	atomic_t overlaps;	/* frames handed out twice, or freed unmarked */
	/* Per-CPU frame caches (nbbs_cache_*), one per possible CPU id, used
	 * through raw_smp_processor_id() with preemption off around each call,
	 * as Linux uses its per-CPU page lists: one owner per cache at a time. */
	nbbs_cache_t **cache;
	void *cache_mem;
};

static int inst_init(struct inst *in, nbbs_layout_t layout, unsigned int log)
{
	/* Group free counts: the module's instances are page frames used
	 * through per-CPU frame caches, as NBBS_GROUP_COUNTS is meant for. */
	nbbs_config_t cfg = { .min_block = KT_FRAME_SIZE, .max_order = 0, .layout = layout,
			      .flags = NBBS_GROUP_COUNTS };
	size_t arena = (size_t)KT_FRAME_SIZE << log;
	size_t msz = nbbs_meta_size(arena, &cfg);
	void *aligned;

	memset(in, 0, sizeof(*in));
	in->name = layout == NBBS_LAYOUT_BUNCH ? "nbbs-bunch" : "nbbs-tree";
	in->nframes = 1UL << log;
	if (!msz)
		return -EINVAL;
	in->meta = kvmalloc(msz + NBBS_META_ALIGN, GFP_KERNEL);
	in->bitmap = kvcalloc(BITS_TO_LONGS(in->nframes), sizeof(long), GFP_KERNEL);
	if (!in->meta || !in->bitmap)
		return -ENOMEM;
	aligned = PTR_ALIGN(in->meta, NBBS_META_ALIGN);
	in->b = nbbs_init(aligned, msz, (void *)FAKE_BASE, arena, &cfg);
	return in->b ? 0 : -EINVAL;
}

/* One frame cache per possible CPU on in (library defaults: orders 0..3,
 * batch 16, capacity 64), attached for the instance's lifetime. */
static int inst_caches(struct inst *in)
{
	size_t csz = nbbs_cache_size(NULL);
	unsigned int i;
	char *mem;

	in->cache = kcalloc(nr_cpu_ids, sizeof(*in->cache), GFP_KERNEL);
	in->cache_mem = kvmalloc(csz * nr_cpu_ids + NBBS_CACHE_ALIGN, GFP_KERNEL);
	if (!in->cache || !in->cache_mem)
		return -ENOMEM;
	mem = PTR_ALIGN((char *)in->cache_mem, NBBS_CACHE_ALIGN);
	for (i = 0; i < nr_cpu_ids; i++) {
		in->cache[i] = nbbs_cache_init(mem + (size_t)i * csz, csz, in->b, NULL);
		if (!in->cache[i])
			return -EINVAL;
	}
	return 0;
}

static void inst_fini(struct inst *in)
{
	kfree(in->cache);
	kvfree(in->cache_mem);	/* the caches live as long as the instance */
	in->cache = NULL;
	in->cache_mem = NULL;
	kvfree(in->meta);
	kvfree(in->bitmap);
	in->meta = NULL;
	in->bitmap = NULL;
	in->b = NULL;
}

/* A block was handed out: every frame in it must have been free. */
static void mark(struct inst *in, void *p, unsigned int order)
{
	unsigned long off = (uintptr_t)p - FAKE_BASE;
	unsigned long f = off >> KT_FRAME_SHIFT, i;

	if ((uintptr_t)p < FAKE_BASE || f >= in->nframes || (off & ((KT_FRAME_SIZE << order) - 1)) ||
	    nbbs_block_size(in->b, p) != KT_FRAME_SIZE << order) {
		atomic_inc(&in->overlaps);
		return;
	}
	for (i = 0; i < (1UL << order); i++)
		if (test_and_set_bit(f + i, in->bitmap))
			atomic_inc(&in->overlaps);
}

/* A block is about to be freed: unmark it first, so that its next owner's
 * mark cannot be cleared by us. */
static void unmark(struct inst *in, void *p, unsigned int order)
{
	unsigned long f = ((uintptr_t)p - FAKE_BASE) >> KT_FRAME_SHIFT, i;

	for (i = 0; i < (1UL << order) && f + i < in->nframes; i++)
		if (!test_and_clear_bit(f + i, in->bitmap))
			atomic_inc(&in->overlaps);
}

/* After a phase, with no operation in flight: nothing live, the metadata
 * what a sequential buddy system would hold, no frame marked, no overlap. */
static void check_empty(struct inst *in, const char *phase)
{
	nbbs_stats_t s;
	int v = nbbs_validate(in->b);
	unsigned long marked = bitmap_weight(in->bitmap, in->nframes);
	bool ok = true;

	nbbs_get_stats(in->b, &s);
	ok &= check(atomic_read(&in->overlaps) == 0, phase, "overlaps", atomic_read(&in->overlaps), 0);
	ok &= check(s.live_blocks == 0, phase, "live_blocks", (long)s.live_blocks, 0);
	ok &= check(s.used_bytes == 0, phase, "used_bytes", (long)s.used_bytes, 0);
	ok &= check(s.largest_free == (KT_FRAME_SIZE << s.max_order), phase, "largest_free",
		    (long)s.largest_free, (long)(KT_FRAME_SIZE << s.max_order));
	ok &= check(v == 0, phase, "validate", v, 0);
	ok &= check(marked == 0, phase, "bitmap", (long)marked, 0);
	pr_info("nbbs: CHECK %s/%s %s\n", phase, in->name, ok ? "PASS" : "FAIL");
	atomic_set(&in->overlaps, 0);
}

/* ------------------------------------------------------------------------
 * Workers: one kthread per online CPU, bound to it, per phase
 * ------------------------------------------------------------------------ */

enum work { W_PAIRS, W_HELD, W_MIXED, W_FILL, W_FREE_HALF, W_REFILL, W_DRAIN, W_RACE, W_IRQ,
	     W_CONTEND, W_FIRST };
static const char *const work_name[] = { "pairs", "held", "mixed", "fill", "free-half",
					 "refill", "drain", "race", "irq", "contend", "first" };

enum backend {
	BE_NBBS,
	BE_PAGES,
	/* Through the frame cache of raw_smp_processor_id(), preemption off
	 * around each call so that one owner holds a cache at a time (as
	 * Linux's per-CPU page lists); reported as alloc=nbbs-bunch-cache. */
	BE_NBBS_CACHE,
};

struct worker {
	struct inst *in;	/* BE_NBBS */
	enum work w;
	enum backend be;
	bool checked;		/* mark/unmark every block in the bitmap */
	int cpu;
	u64 rng;
	void **slot;		/* held blocks (pages: struct page *) */
	u8 *order;		/* their orders */
	unsigned long nslots;	/* capacity */
	unsigned long share;	/* churn: blocks this thread fills */
	unsigned long freed;	/* churn: blocks freed by free-half */
	void **race;		/* W_RACE: the shared blocks */
	unsigned long race_ok;	/* W_RACE: frees that returned 0 */
	unsigned long nulls;	/* allocations that returned NULL */
	unsigned long bad_free;	/* nbbs_free of a live block that did not return 0 */
	unsigned long ops;	/* pairs (timed loops) */
	u64 ns;
	struct completion done;
	/* W_IRQ: the CPU's hrtimer and what its callbacks did */
	struct hrtimer timer;
	void *irq_block;	/* held from one callback to the next */
	unsigned long irq_ops;	/* allocations in hard interrupt context */
	unsigned long irq_wrong;	/* callbacks not in hard interrupt context */
	unsigned long irq_bad_free;	/* nbbs_free refused the callback's block */
	unsigned long irq_period;	/* ns */
	bool irq_stop;
};

static struct worker *workers;
static unsigned int nworkers;	/* in the current phase: one per CPU, or nall */
static unsigned int ncpus, nall;
/* A phase did not finish in time: its threads may still run, so nothing
 * they use is freed and no further phase starts; the verdict is FAIL. */
static bool stuck;

static u64 rnd(struct worker *w)
{
	/* xorshift64*: per thread, no shared state */
	w->rng ^= w->rng >> 12;
	w->rng ^= w->rng << 25;
	w->rng ^= w->rng >> 27;
	return w->rng * 0x2545F4914F6CDD1DULL;
}

static void *get(struct worker *w, unsigned int order)
{
	void *p;

	if (w->be == BE_PAGES)
		return alloc_pages(GFP_KERNEL | __GFP_NOWARN, order);
	if (w->be == BE_NBBS_CACHE) {
		preempt_disable();
		p = nbbs_cache_alloc(w->in->cache[raw_smp_processor_id()], order);
		preempt_enable();
	} else {
		p = nbbs_alloc_order(w->in->b, order);
	}
	if (p && w->checked)
		mark(w->in, p, order);
	return p;
}

static void put(struct worker *w, void *p, unsigned int order)
{
	if (w->be == BE_PAGES) {
		__free_pages(p, order);
		return;
	}
	if (w->checked)
		unmark(w->in, p, order);
	if (w->be == BE_NBBS_CACHE) {
		int rc;

		preempt_disable();
		rc = nbbs_cache_free(w->in->cache[raw_smp_processor_id()], p);
		preempt_enable();
		if (rc != 0)
			w->bad_free++;
		return;
	}
	if (nbbs_free(w->in->b, p) != 0)
		w->bad_free++;
}

static void drain(struct worker *w, unsigned long n)
{
	unsigned long i;

	for (i = 0; i < n; i++) {
		if (w->slot[i]) {
			put(w, w->slot[i], w->order[i]);
			w->slot[i] = NULL;
		}
		if ((i & 1023) == 1023)
			cond_resched();
	}
}

static void fill(struct worker *w, unsigned long n, unsigned int order)
{
	unsigned long i;

	for (i = 0; i < n; i++) {
		if (!w->slot[i]) {
			w->slot[i] = get(w, order);
			w->order[i] = order;
			if (!w->slot[i])
				w->nulls++;
		}
		if ((i & 1023) == 1023)
			cond_resched();
	}
}

static void run_pairs(struct worker *w)
{
	unsigned long i;
	void *p;

	for (i = 0; i < iters; i++) {
		p = get(w, 0);
		if (p)
			put(w, p, 0);
		else
			w->nulls++;
		if ((i & 1023) == 1023)
			cond_resched();
	}
	w->ops = iters;
}

static void run_held(struct worker *w)
{
	unsigned long n = min_t(unsigned long, held, w->nslots), i, j;

	if (!n)
		return;
	for (i = 0; i < iters; i++) {
		j = rnd(w) % n;
		if (w->slot[j])
			put(w, w->slot[j], 0);
		w->slot[j] = get(w, 0);
		w->order[j] = 0;
		if (!w->slot[j])
			w->nulls++;
		if ((i & 1023) == 1023)
			cond_resched();
	}
	w->ops = iters;
}

static void run_mixed(struct worker *w, unsigned long slots, unsigned int max_order,
		      unsigned long count)
{
	unsigned long n = min_t(unsigned long, slots, w->nslots), i, j;

	for (i = 0; i < count; i++) {
		u64 r = rnd(w);

		j = r % n;
		if (w->slot[j]) {
			put(w, w->slot[j], w->order[j]);
			w->slot[j] = NULL;
		} else {
			w->order[j] = max_order == CONTEND_MAX_ORDER ?
				(u8)min_t(unsigned int, __builtin_ctzll((r >> 32) | (1ULL << 31)), max_order) :
				(u8)((r >> 32) % (max_order + 1));
			w->slot[j] = get(w, w->order[j]);
		}
		if ((i & 1023) == 1023)
			cond_resched();
	}
	w->ops = count;
}

static void run_free_half(struct worker *w)
{
	unsigned long i;

	w->freed = 0;
	for (i = 0; i < w->share; i++) {
		if (w->slot[i] && (rnd(w) & 1)) {
			put(w, w->slot[i], 0);
			w->slot[i] = NULL;
			w->freed++;
		}
		if ((i & 1023) == 1023)
			cond_resched();
	}
}

static void run_race(struct worker *w)
{
	unsigned long i;

	for (i = 0; i < RACE_BLOCKS; i++)
		if (nbbs_free(w->in->b, w->race[i]) == 0)
			w->race_ok++;
}

#define IRQ_PERIOD_NS (200 * NSEC_PER_USEC)
#define CONTEND_IRQ_PERIOD_NS (50 * NSEC_PER_USEC)

/* Hard interrupt context, on the worker's CPU: free the block the last
 * callback took, take a new one (marked in the bitmap like any other). */
static enum hrtimer_restart irq_cb(struct hrtimer *t)
{
	struct worker *w = container_of(t, struct worker, timer);
	void *p;

	if (!in_hardirq())
		w->irq_wrong++;
	if (w->irq_block) {
		unmark(w->in, w->irq_block, 0);
		if (nbbs_free(w->in->b, w->irq_block) != 0)
			w->irq_bad_free++;
		w->irq_block = NULL;
	}
	if (READ_ONCE(w->irq_stop))
		return HRTIMER_NORESTART;
	p = nbbs_alloc_order(w->in->b, 0);
	if (p) {
		mark(w->in, p, 0);
		w->irq_block = p;
		w->irq_ops++;
	}
	hrtimer_forward_now(t, ns_to_ktime(w->irq_period));
	return HRTIMER_RESTART;
}

static void run_with_irq(struct worker *w, unsigned long period_ns)
{
	w->irq_block = NULL;
	w->irq_ops = 0;
	w->irq_wrong = 0;
	w->irq_bad_free = 0;
	w->irq_period = period_ns;
	WRITE_ONCE(w->irq_stop, false);
	hrtimer_init(&w->timer, CLOCK_MONOTONIC, HRTIMER_MODE_REL_PINNED_HARD);
	w->timer.function = irq_cb;
	hrtimer_start(&w->timer, ns_to_ktime(period_ns), HRTIMER_MODE_REL_PINNED_HARD);
	if (w->w == W_IRQ)
		run_held(w);
	else
		run_mixed(w, CONTEND_SLOTS, CONTEND_MAX_ORDER, contend_iters);
	WRITE_ONCE(w->irq_stop, true);
	hrtimer_cancel(&w->timer);
	/* a callback that ran after the stop flag freed its block; one that
	 * was cancelled before running left it to us */
	if (w->irq_block) {
		unmark(w->in, w->irq_block, 0);
		if (nbbs_free(w->in->b, w->irq_block) != 0)
			w->bad_free++;
		w->irq_block = NULL;
	}
}

static int worker_fn(void *arg)
{
	struct worker *w = arg;
	u64 t0 = ktime_get_ns();

	switch (w->w) {
	case W_PAIRS:
		run_pairs(w);
		break;
	case W_HELD:
		run_held(w);
		break;
	case W_MIXED:
		run_mixed(w, MIXED_SLOTS, MIXED_MAX_ORDER, iters);
		break;
	case W_CONTEND:
		/* the first thread on each CPU also arms that CPU's timer, whose
		 * callbacks interrupt whichever thread runs there mid-operation */
		if (w - workers < ncpus)
			run_with_irq(w, CONTEND_IRQ_PERIOD_NS);
		else
			run_mixed(w, CONTEND_SLOTS, CONTEND_MAX_ORDER, contend_iters);
		break;
	case W_FIRST:
		fill(w, 1, 0);
		break;
	case W_FILL:
	case W_REFILL:
		fill(w, w->share, 0);
		break;
	case W_FREE_HALF:
		run_free_half(w);
		break;
	case W_DRAIN:
		drain(w, w->nslots);
		break;
	case W_RACE:
		run_race(w);
		break;
	case W_IRQ:
		run_with_irq(w, IRQ_PERIOD_NS);
		break;
	}
	w->ns = ktime_get_ns() - t0;
	complete(&w->done);
	return 0;
}


/* Runs phase `wk` on every worker at once, one kthread per CPU, and waits. */
static int run_phase(enum work wk)
{
	unsigned int i;

	if (stuck)
		return -ETIMEDOUT;
	for (i = 0; i < nworkers; i++) {
		struct worker *w = &workers[i];
		struct task_struct *t;

		w->w = wk;
		w->ops = 0;
		w->ns = 0;
		init_completion(&w->done);
		t = kthread_create_on_node(worker_fn, w, cpu_to_node(w->cpu), "nbbs/%d", w->cpu);
		if (IS_ERR(t)) {
			/* run it here instead: the phase still runs, unbound */
			worker_fn(w);
			continue;
		}
		kthread_bind(t, w->cpu);
		wake_up_process(t);
	}
	for (i = 0; i < nworkers; i++) {
		if (!wait_for_completion_timeout(&workers[i].done, (unsigned long)phase_timeout * HZ)) {
			stuck = true;
			check(false, work_name[wk], "phase-timeout-seconds", phase_timeout, 0);
			pr_info("nbbs: CHECK %s FAIL the thread on CPU %d did not finish in %u s\n",
				work_name[wk], workers[i].cpu, phase_timeout);
			return -ETIMEDOUT;
		}
	}
	return 0;
}

static void set_backend(struct inst *in, enum backend be, bool checked)
{
	unsigned int i;

	for (i = 0; i < nworkers; i++) {
		workers[i].in = in;
		workers[i].be = be;
		workers[i].checked = checked;
		workers[i].nulls = 0;
		workers[i].bad_free = 0;
	}
}

static unsigned long sum_nulls(void)
{
	unsigned long s = 0;
	unsigned int i;

	for (i = 0; i < nworkers; i++)
		s += workers[i].nulls;
	return s;
}

static unsigned long sum_bad_free(void)
{
	unsigned long s = 0;
	unsigned int i;

	for (i = 0; i < nworkers; i++)
		s += workers[i].bad_free;
	return s;
}

/* ------------------------------------------------------------------------
 * The checked phases
 * ------------------------------------------------------------------------ */

/* Every frame the caches of in hold back to the tree (the workers are
 * stopped: nbbs_reclaim_cached runs from any thread anyway). */
static void caches_empty(struct inst *in, enum backend be)
{
	if (be == BE_NBBS_CACHE)
		nbbs_reclaim_cached(in->b);
}

static void phase_be(struct inst *in, enum work wk, bool nulls_allowed, enum backend be)
{
	char name[32];

	/* The contended phase runs contend_per_cpu threads on each CPU: the
	 * scheduler then preempts them inside operations, leaving one
	 * half-done for milliseconds while the others work on the same words. */
	nworkers = wk == W_CONTEND ? nall : ncpus;
	set_backend(in, be, true);
	run_phase(wk);
	if (wk == W_HELD || wk == W_MIXED || wk == W_IRQ || wk == W_CONTEND)
		run_phase(W_DRAIN);
	if (wk == W_CONTEND && !stuck)
		pr_info("nbbs: CONTEND layout=%s threads=%u frames=%lu ops_per_thread=%u\n",
			in->name, nworkers, in->nframes, contend_iters);
	if (stuck) {
		nworkers = ncpus;
		return;
	}
	if (wk == W_IRQ || wk == W_CONTEND) {
		unsigned long ops = 0, wrong = 0, bad = 0;
		unsigned int i;

		for (i = 0; i < nworkers; i++) {
			ops += workers[i].irq_ops;
			wrong += workers[i].irq_wrong;
			bad += workers[i].irq_bad_free;
		}
		check(bad == 0, work_name[wk], "free-of-live-block-in-hardirq", (long)bad, 0);
		check(ops > 0, work_name[wk], "allocations-in-hardirq", (long)ops, 1);
		check(wrong == 0, work_name[wk], "callbacks-not-in-hardirq", (long)wrong, 0);
		pr_info("nbbs: IRQ phase=%s layout=%s hardirq_allocs=%lu\n", work_name[wk], in->name, ops);
	}
	snprintf(name, sizeof(name), "%s%s", work_name[wk], be == BE_NBBS_CACHE ? "-cache" : "");
	check(sum_bad_free() == 0, name, "free-of-live-block", (long)sum_bad_free(), 0);
	if (!nulls_allowed)
		check(sum_nulls() == 0, name, "alloc-null", (long)sum_nulls(), 0);
	nworkers = ncpus;
	caches_empty(in, be);
	check_empty(in, name);
}

static void phase(struct inst *in, enum work wk, bool nulls_allowed)
{
	phase_be(in, wk, nulls_allowed, BE_NBBS);
}

static void churn(struct inst *in, enum backend be)
{
	const char *lname = be == BE_NBBS_CACHE ? "nbbs-bunch-cache" : in->name;
	unsigned long nfree2m_reclaimed = 0;
	unsigned long target = in->nframes / 100 * churn_pct, share = target / nworkers;
	unsigned long nblocks = in->nframes >> HUGE_ORDER, nfree2m = 0, freed = 0, i;
	nbbs_stats_t s;
	u8 *map;
	int n;
	bool ok = true;

	for (i = 0; i < nworkers; i++)
		workers[i].share = min(share, workers[i].nslots);
	set_backend(in, be, true);
	if (run_phase(W_FILL))
		return;
	ok &= check(sum_nulls() == 0, "churn", "fill-null", (long)sum_nulls(), 0);
	if (run_phase(W_FREE_HALF))
		return;
	for (i = 0; i < nworkers; i++)
		freed += workers[i].freed;
	set_backend(in, be, true);
	if (run_phase(W_REFILL))
		return;
	/* Only allocations ran since the free-half: a frame still free at the
	 * end was free all along, so NULL would break nbbs_alloc's contract. */
	ok &= check(sum_nulls() == 0, "churn", "refill-null", (long)sum_nulls(), 0);
	nbbs_get_stats(in->b, &s);
	/* frames held by caches count as live blocks in the statistics */
	ok &= check(s.live_blocks - s.cached_blocks == share * nworkers, "churn", "live-after-refill",
		    (long)(s.live_blocks - s.cached_blocks), (long)(share * nworkers));
	ok &= check(nbbs_validate(in->b) == 0, "churn", "validate-full", nbbs_validate(in->b), 0);
	map = kvmalloc(nblocks, GFP_KERNEL);
	if (map) {
		n = nbbs_occupancy_map(in->b, HUGE_ORDER, map, nblocks);
		ok &= check(n == (int)nblocks, "churn", "occupancy-map", n, (long)nblocks);
		for (i = 0; n > 0 && i < (unsigned long)n; i++)
			nfree2m += map[i] == NBBS_MAP_FREE;
		/* With caches: also after every cached frame went back, as an
		 * allocation of a 2 MiB block under pressure would have it. */
		if (be == BE_NBBS_CACHE) {
			nbbs_reclaim_cached(in->b);
			n = nbbs_occupancy_map(in->b, HUGE_ORDER, map, nblocks);
			for (i = 0; n > 0 && i < (unsigned long)n; i++)
				nfree2m_reclaimed += map[i] == NBBS_MAP_FREE;
		}
		kvfree(map);
	}
	/* bound: the most 2 MiB blocks any placement could keep free */
	if (be == BE_NBBS_CACHE)
		pr_info("nbbs: CHURN layout=%s threads=%u fill_pct=%u frames=%lu freed=%lu free_2m=%lu bound_2m=%lu free_2m_after_reclaim=%lu\n",
			lname, nworkers, churn_pct, in->nframes, freed, nfree2m,
			(in->nframes - (s.live_blocks - s.cached_blocks)) >> HUGE_ORDER, nfree2m_reclaimed);
	else
		pr_info("nbbs: CHURN layout=%s threads=%u fill_pct=%u frames=%lu freed=%lu free_2m=%lu bound_2m=%lu\n",
			lname, nworkers, churn_pct, in->nframes, freed, nfree2m,
			(in->nframes - s.live_blocks) >> HUGE_ORDER);
	set_backend(in, be, true);
	if (run_phase(W_DRAIN))
		return;
	ok &= check(sum_bad_free() == 0, "churn", "free-of-live-block", (long)sum_bad_free(), 0);
	for (i = 0; i < nworkers; i++)
		workers[i].share = 0;
	pr_info("nbbs: CHECK churn-phases/%s %s\n", lname, ok ? "PASS" : "FAIL");
	caches_empty(in, be);
	check_empty(in, be == BE_NBBS_CACHE ? "churn-cache" : "churn");
}

/* Where each CPU's first frame lands on a fresh instance of 2^log frames:
 * its hint cell (the CPU's, NBBS_CPU_ID) starts at the slot of the CPU
 * number's bits reversed, so the first 32 CPUs start in 32 different 2 MiB
 * groups even when the cells are 1 MiB apart (64 MiB: 64 cells of 256
 * frames; in plain order CPUs 0 and 1 would share group 0). */
static void start_points(nbbs_layout_t layout, unsigned int log)
{
	struct inst in;
	unsigned long shared = 0;
	unsigned int i, j;

	if (inst_init(&in, layout, log)) {
		check(false, "start-points", "inst_init", 0, 0);
		inst_fini(&in);
		return;
	}
	set_backend(&in, BE_NBBS, true);
	if (run_phase(W_FIRST))
		return; /* stuck: leave everything in place */
	for (i = 0; i < nworkers; i++)
		for (j = i + 1; j < nworkers; j++)
			if (workers[i].cpu < 32 && workers[j].cpu < 32 && workers[i].slot[0] && workers[j].slot[0] &&
			    ((uintptr_t)workers[i].slot[0] - FAKE_BASE) / (KT_FRAME_SIZE << HUGE_ORDER) ==
				    ((uintptr_t)workers[j].slot[0] - FAKE_BASE) / (KT_FRAME_SIZE << HUGE_ORDER))
				shared++;
	check(sum_nulls() == 0, "start-points", "alloc-null", (long)sum_nulls(), 0);
	check(shared == 0, "start-points", "cpus-sharing-a-2m-group", (long)shared, 0);
	pr_info("nbbs: START-POINTS layout=%s frames=%lu cpu0_frame=%lu cpu1_frame=%ld\n", in.name, in.nframes,
		workers[0].slot[0] ? (unsigned long)(((uintptr_t)workers[0].slot[0] - FAKE_BASE) / KT_FRAME_SIZE) : 0UL,
		nworkers > 1 && workers[1].slot[0] ?
			(long)(((uintptr_t)workers[1].slot[0] - FAKE_BASE) / KT_FRAME_SIZE) : -1L);
	run_phase(W_DRAIN);
	if (stuck)
		return;
	check(sum_bad_free() == 0, "start-points", "free-of-live-block", (long)sum_bad_free(), 0);
	check_empty(&in, "start-points");
	inst_fini(&in);
}

/* Every thread frees the same blocks at once: each must be freed once. */
static void race(struct inst *in)
{
	void **blocks = kvmalloc_array(RACE_BLOCKS, sizeof(void *), GFP_KERNEL);
	unsigned long ok = 0, i;
	unsigned int j;

	if (stuck || !check(blocks != NULL, "race", "kvmalloc", 0, 1))
		return;
	for (i = 0; i < RACE_BLOCKS; i++)
		blocks[i] = nbbs_alloc_order(in->b, (unsigned int)(i % 3));
	for (j = 0; j < nworkers; j++) {
		workers[j].race = blocks;
		workers[j].race_ok = 0;
	}
	if (run_phase(W_RACE))
		return; /* the threads may still use blocks: leave it */
	for (j = 0; j < nworkers; j++)
		ok += workers[j].race_ok;
	check(ok == RACE_BLOCKS, "race", "frees-that-succeeded", (long)ok, RACE_BLOCKS);
	kvfree(blocks);
	check_empty(in, "race");
}

/* ------------------------------------------------------------------------
 * The API's error cases, on a small instance (64 frames, max order 3)
 * ------------------------------------------------------------------------ */

#define E(cond, what) check((cond), "api", (what), 0, 0)

static void api_errors(nbbs_layout_t layout)
{
	nbbs_config_t cfg = { .min_block = KT_FRAME_SIZE, .max_order = 3, .layout = layout };
	nbbs_config_t bad = cfg;
	size_t arena = 64 * KT_FRAME_SIZE, msz = nbbs_meta_size(arena, &cfg);
	char *base = (char *)FAKE_BASE;
	void *raw = kvmalloc(msz + 2 * NBBS_META_ALIGN, GFP_KERNEL);
	void *meta, *p, *q, *all[64];
	unsigned int before = atomic_read(&failed), n;
	u8 map[8];
	nbbs_stats_t s;
	nbbs_t *b;
	int i;

	if (!check(msz != 0 && raw != NULL, "api", "setup", (long)msz, 1))
		goto out;
	meta = PTR_ALIGN(raw, NBBS_META_ALIGN);

	/* configurations nbbs_meta_size must refuse */
	E(nbbs_meta_size(0, &cfg) == 0, "meta_size-arena-0");
	E(nbbs_meta_size(arena + 1, &cfg) == 0, "meta_size-arena-not-multiple");
	bad.min_block = 4095;
	E(nbbs_meta_size(arena, &bad) == 0, "meta_size-min_block-not-pow2");
	bad.min_block = 4;
	E(nbbs_meta_size(arena, &bad) == 0, "meta_size-min_block-4");
	bad = cfg;
	bad.layout = (nbbs_layout_t)7;
	E(nbbs_meta_size(arena, &bad) == 0, "meta_size-layout-unknown");
	bad = cfg;
	bad.max_order = NBBS_MAX_ORDER + 1;
	E(nbbs_meta_size(arena, &bad) == 0, "meta_size-max_order-too-big");
	bad.max_order = 7; /* 128 frames > 64 */
	E(nbbs_meta_size(arena, &bad) == 0, "meta_size-max-block-beyond-arena");
	bad = cfg;
	bad.flags = 2;
	E(nbbs_meta_size(arena, &bad) == 0, "meta_size-flag-unknown");

	/* nbbs_init refuses bad arguments and writes nothing */
	E(nbbs_init(NULL, msz, base, arena, &cfg) == NULL, "init-meta-NULL");
	E(nbbs_init((char *)meta + 8, msz, base, arena, &cfg) == NULL, "init-meta-misaligned");
	E(nbbs_init(meta, msz - 1, base, arena, &cfg) == NULL, "init-meta-too-small");
	E(nbbs_init(meta, msz, NULL, arena, &cfg) == NULL, "init-base-NULL");
	E(nbbs_init(meta, msz, base + 8, arena, &cfg) == NULL, "init-base-misaligned");
	E(nbbs_init(meta, msz, (void *)(UINTPTR_MAX & ~(KT_FRAME_SIZE - 1)), arena, &cfg) == NULL,
	  "init-base-wraps");

	b = nbbs_init(meta, msz, base, arena, &cfg);
	if (!check(b != NULL, "api", "init", 0, 1))
		goto out;

	/* allocation beyond the limits */
	E(nbbs_alloc_order(b, 4) == NULL, "alloc_order-beyond-max");
	E(nbbs_alloc(b, (KT_FRAME_SIZE << 3) + 1) == NULL, "alloc-size-beyond-max");
	E(nbbs_alloc(NULL, 1) == NULL, "alloc-NULL-instance");
	E(nbbs_alloc_order(NULL, 0) == NULL, "alloc_order-NULL-instance");

	/* frees that must be refused, changing nothing */
	p = nbbs_alloc_order(b, 1);
	E(p != NULL && nbbs_block_size(b, p) == 2 * KT_FRAME_SIZE, "alloc-order-1");
	E(nbbs_free(b, NULL) == 0, "free-NULL");
	E(nbbs_free(NULL, p) == NBBS_EINVAL, "free-NULL-instance");
	E(nbbs_free(b, base - KT_FRAME_SIZE) == NBBS_EINVAL, "free-below-arena");
	E(nbbs_free(b, base + arena) == NBBS_EINVAL, "free-beyond-arena");
	E(nbbs_free(b, (char *)p + 8) == NBBS_EINVAL, "free-misaligned");
	E(nbbs_free(b, (char *)p + KT_FRAME_SIZE) == NBBS_EINVAL, "free-inside-block");
	q = (char *)p == base ? base + 8 * KT_FRAME_SIZE : base;
	E(nbbs_free(b, q) == NBBS_EINVAL, "free-never-allocated");
	E(nbbs_block_size(b, (char *)p + KT_FRAME_SIZE) == 0, "block_size-inside");
	E(nbbs_block_size(b, NULL) == 0 && nbbs_block_size(NULL, p) == 0, "block_size-NULL");
	E(nbbs_validate(b) == 0, "validate-after-refused-frees");
	E(nbbs_free(b, p) == 0, "free");
	E(nbbs_free(b, p) == NBBS_EINVAL, "double-free");
	E(nbbs_block_size(b, p) == 0, "block_size-after-free");

	/* introspection's error cases */
	E(nbbs_occupancy_map(NULL, 0, map, sizeof(map)) == NBBS_EINVAL, "map-NULL-instance");
	E(nbbs_occupancy_map(b, 0, NULL, 64) == NBBS_EINVAL, "map-NULL-out");
	E(nbbs_occupancy_map(b, 4, map, sizeof(map)) == NBBS_EINVAL, "map-order-beyond-max");
	E(nbbs_occupancy_map(b, 3, map, 7) == NBBS_EINVAL, "map-out-too-short");
	E(nbbs_occupancy_map(b, 3, map, 8) == 8, "map");
	nbbs_get_stats(NULL, &s);
	nbbs_get_stats(b, NULL);
	E(nbbs_validate(NULL) == NBBS_EINVAL, "validate-NULL");

	/* exhaustion: exactly 64 order-0 blocks, then NULL; all distinct */
	for (n = 0; n < 64; n++) {
		all[n] = nbbs_alloc_order(b, 0);
		if (!all[n])
			break;
	}
	E(n == 64, "exhaust-count");
	E(nbbs_alloc_order(b, 0) == NULL, "exhaust-then-NULL");
	nbbs_get_stats(b, &s);
	E(s.live_blocks == 64 && s.free_bytes == 0 && s.largest_free == 0, "exhaust-stats");
	E(nbbs_validate(b) == 0, "exhaust-validate");
	for (i = 0; i < (int)n; i++)
		E(nbbs_free(b, all[i]) == 0, "exhaust-free");
	nbbs_get_stats(b, &s);
	E(s.live_blocks == 0 && s.largest_free == 8 * KT_FRAME_SIZE, "exhaust-empty");
out:
	kvfree(raw);
	pr_info("nbbs: CHECK api/%s %s\n", layout == NBBS_LAYOUT_BUNCH ? "nbbs-bunch" : "nbbs-tree",
		atomic_read(&failed) == before ? "PASS" : "FAIL");
}

/* ------------------------------------------------------------------------
 * The benchmark: the same loops, unchecked, nbbs against alloc_pages
 * ------------------------------------------------------------------------ */

static const enum work bench_work[] = { W_PAIRS, W_HELD, W_MIXED };
#define NBENCH ARRAY_SIZE(bench_work)
#define NALLOC 4 /* nbbs-bunch, nbbs-tree, alloc_pages, nbbs-bunch through the per-CPU caches */
static const char *const alloc_name[NALLOC] = { "nbbs-bunch", "nbbs-tree", "alloc_pages", "nbbs-bunch-cache" };
#define A_PAGES 2

static int cmp_u64(const void *a, const void *b)
{
	u64 x = *(const u64 *)a, y = *(const u64 *)b;

	return x < y ? -1 : x > y;
}

/* ns per pair, in tenths, of one timed loop: the mean over the threads of
 * each thread's time per operation. */
static u64 timed(struct inst *in, enum backend be, enum work wk)
{
	u64 t = 0, ops = 0;
	unsigned int i;

	set_backend(in, be, false);
	if (wk == W_HELD) {
		for (i = 0; i < nworkers; i++)
			fill(&workers[i], min_t(unsigned long, held, workers[i].nslots), 0);
	}
	if (run_phase(wk))
		return 0;
	for (i = 0; i < nworkers; i++) {
		t += workers[i].ns;
		ops += workers[i].ops;
	}
	run_phase(W_DRAIN);
	caches_empty(in, be);
	return ops ? div64_u64(t * 10, ops) : 0;
}

static void bench(struct inst *insts)
{
	u64 *res = kcalloc(NALLOC * NBENCH * reps, sizeof(u64), GFP_KERNEL);
	unsigned int r, a, k;

	if (!res)
		return;
	for (r = 0; r < reps && !stuck; r++) {
		for (k = 0; k < NBENCH && !stuck; k++) {
			for (a = 0; a < NALLOC; a++) {
				struct inst *in = a == A_PAGES ? NULL : &insts[a == 3 ? 0 : a];
				u64 v = timed(in, a == A_PAGES ? BE_PAGES : a == 3 ? BE_NBBS_CACHE : BE_NBBS,
					      bench_work[k]);

				res[(a * NBENCH + k) * reps + r] = v;
				pr_info("nbbs: BENCH workload=%s alloc=%s threads=%u rep=%u ops=%u ns_per_pair=%llu.%llu\n",
					work_name[bench_work[k]], alloc_name[a], nworkers, r, iters,
					v / 10, v % 10);
				if (a != A_PAGES)
					check(sum_bad_free() == 0, "bench", "free-of-live-block",
					      (long)sum_bad_free(), 0);
			}
		}
	}
	for (k = 0; k < NBENCH; k++) {
		u64 base;

		for (a = 0; a < NALLOC; a++)
			sort(&res[(a * NBENCH + k) * reps], reps, sizeof(u64), cmp_u64, NULL);
		base = res[(A_PAGES * NBENCH + k) * reps + reps / 2];
		for (a = 0; a < NALLOC; a++) {
			u64 m;
			u64 ratio;

			if (a == A_PAGES)
				continue;
			m = res[(a * NBENCH + k) * reps + reps / 2];
			ratio = base ? div64_u64(m * 1000, base) : 0;

			pr_info("nbbs: RATIO workload=%s alloc=%s vs=alloc_pages threads=%u reps=%u median_ns=%llu.%llu base_ns=%llu.%llu ratio=%llu.%03llu\n",
				work_name[bench_work[k]], alloc_name[a], nworkers, reps, m / 10, m % 10,
				base / 10, base % 10, ratio / 1000, ratio % 1000);
		}
	}
	kfree(res);
	if (stuck)
		return;
	check_empty(&insts[0], "bench");
	check_empty(&insts[1], "bench");
}

/* ------------------------------------------------------------------------
 * Module entry
 * ------------------------------------------------------------------------ */

static int __init nbbs_kmod_init(void)
{
	struct inst insts[2] = {}, small[2] = {};
	unsigned long per_thread;
	unsigned int i, cpu;
	u64 t0 = ktime_get_ns();
	int err = 0;

	if (frames_log < 12 || frames_log > 24)
		frames_log = 18;
	if (contend_per_cpu < 1 || contend_per_cpu > 16)
		contend_per_cpu = 4;
	ncpus = num_online_cpus();
	nall = ncpus * contend_per_cpu;
	per_thread = max3((unsigned long)held, (unsigned long)MIXED_SLOTS,
			  (1UL << frames_log) / 100 * churn_pct / ncpus + 1);
	pr_info("nbbs: START cpus=%u frames=%lu iters=%u held=%u reps=%u churn_pct=%u contend_threads=%u contend_iters=%u\n",
		ncpus, 1UL << frames_log, iters, held, reps, churn_pct, nall, contend_iters);
	workers = kcalloc(nall, sizeof(*workers), GFP_KERNEL);
	if (!workers) {
		err = -ENOMEM;
		goto out;
	}
	/* workers[0..ncpus) one per CPU; the rest, for the contended phase,
	 * cycle over the CPUs again */
	for (i = 0; i < nall;) {
		for_each_online_cpu(cpu) {
			struct worker *w;
			unsigned long n = i < ncpus ? per_thread : CONTEND_SLOTS;

			if (i >= nall)
				break;
			w = &workers[i++];
			w->cpu = cpu;
			w->rng = 0x9E3779B97F4A7C15ULL * i;
			w->nslots = n;
			w->slot = kvcalloc(n, sizeof(void *), GFP_KERNEL);
			w->order = kvcalloc(n, 1, GFP_KERNEL);
			if (!w->slot || !w->order)
				err = -ENOMEM;
		}
	}
	nworkers = ncpus;
	if (err)
		goto out;

	api_errors(NBBS_LAYOUT_BUNCH);
	api_errors(NBBS_LAYOUT_TREE);

	if (inst_init(&insts[0], NBBS_LAYOUT_BUNCH, frames_log) ||
	    inst_init(&insts[1], NBBS_LAYOUT_TREE, frames_log) ||
	    inst_init(&small[0], NBBS_LAYOUT_BUNCH, CONTEND_LOG) ||
	    inst_init(&small[1], NBBS_LAYOUT_TREE, CONTEND_LOG) || inst_caches(&insts[0])) {
		check(false, "setup", "inst_init", 0, 0);
		goto fini;
	}
	start_points(NBBS_LAYOUT_BUNCH, 14);
	start_points(NBBS_LAYOUT_TREE, 14);
	for (i = 0; i < 2 && !stuck; i++) {
		struct inst *in = &insts[i];

		phase(in, W_PAIRS, false);
		phase(in, W_HELD, false);
		phase(in, W_MIXED, true);
		phase(in, W_IRQ, false);
		churn(in, BE_NBBS);
		if (i == 0 && !stuck) { /* the bunch instance again, through per-CPU caches */
			phase_be(in, W_PAIRS, false, BE_NBBS_CACHE);
			phase_be(in, W_HELD, false, BE_NBBS_CACHE);
			phase_be(in, W_MIXED, true, BE_NBBS_CACHE);
			churn(in, BE_NBBS_CACHE);
		}
		race(in);
		if (!stuck)
			phase(&small[i], W_CONTEND, true);
	}
	if (reps && !stuck)
		bench(insts);
	if (stuck)
		goto verdict; /* threads may still run: free nothing they use */
fini:
	inst_fini(&insts[0]);
	inst_fini(&insts[1]);
	inst_fini(&small[0]);
	inst_fini(&small[1]);
out:
	if (workers) {
		for (i = 0; i < nall; i++) {
			kvfree(workers[i].slot);
			kvfree(workers[i].order);
		}
		kfree(workers);
		workers = NULL;
	}
	if (err)
		check(false, "setup", "memory", err, 0);
verdict:
	pr_info("nbbs: RESULT %s checks=%d failed=%d seconds=%llu\n",
		atomic_read(&failed) ? "FAIL" : "PASS", atomic_read(&checks), atomic_read(&failed),
		div64_u64(ktime_get_ns() - t0, NSEC_PER_SEC));
	return 0;
}

static void __exit nbbs_kmod_exit(void)
{
}

module_init(nbbs_kmod_init);
module_exit(nbbs_kmod_exit);
MODULE_LICENSE("Dual MIT/GPL");
MODULE_DESCRIPTION("libnbbs lock-free buddy allocator: in-kernel self-test and benchmark");
