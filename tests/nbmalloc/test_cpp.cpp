// test_cpp.cpp - a C++ program with several threads using std::string,
// std::vector and std::map (and aligned, nothrow and array new). Its output
// depends only on its arguments, so a run under LD_PRELOAD=libnbmalloc.so
// must print exactly what a run under the system allocator prints.
//
//   nbm_test_cpp THREADS N
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

struct alignas(256) Wide {
    std::uint64_t v[40];
};

static std::uint64_t work(unsigned id, unsigned n)
{
    std::map<std::string, std::vector<std::uint32_t>> m;
    std::uint64_t x = id * 2654435761u + 1, sum = 0;
    for (unsigned i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        std::string key = "key-" + std::to_string(x % (n / 4 + 1)) + std::string(x % 40, 'x');
        auto &v = m[key];
        v.push_back(static_cast<std::uint32_t>(x >> 33));
        if (v.size() > 8)
            v.erase(v.begin(), v.begin() + 4);
        if (i % 97 == 0)
            m.erase(m.begin());
        if (i % 13 == 0) {
            std::unique_ptr<Wide> w(new Wide{});
            if (reinterpret_cast<std::uintptr_t>(w.get()) % 256 != 0)
                std::abort();
            w->v[0] = x;
            sum += w->v[0] & 1;
            std::unique_ptr<int[]> a(new (std::nothrow) int[1 + x % 3000]);
            if (!a)
                std::abort();
            a[0] = 1;
            sum += static_cast<std::uint64_t>(a[0]);
        }
    }
    for (auto &kv : m) {
        sum += kv.first.size();
        for (auto e : kv.second)
            sum = sum * 31 + e;
    }
    return sum ^ m.size();
}

int main(int argc, char **argv)
{
    unsigned threads = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 4;
    unsigned n = argc > 2 ? static_cast<unsigned>(std::atoi(argv[2])) : 20000;
    std::vector<std::uint64_t> out(threads);
    for (int round = 0; round < 3; round++) { // threads are recreated
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < threads; t++)
            ts.emplace_back([&out, t, n, round] { out[t] += work(t + 100 * round, n); });
        for (auto &t : ts)
            t.join();
    }
    // A request that cannot be met: the new_handler runs once (it uninstalls
    // itself), then std::bad_alloc is thrown; the same under any allocator.
    static int handler_calls;
    std::set_new_handler([] { handler_calls++; std::set_new_handler(nullptr); });
    try {
        volatile std::size_t huge = SIZE_MAX / 4;
        char *p = new char[huge];
        p[0] = 1;
        std::printf("huge new succeeded?\n");
    } catch (const std::bad_alloc &) {
        std::printf("bad_alloc caught after %d handler call(s)\n", handler_calls);
    }
    try {
        volatile std::size_t huge = SIZE_MAX / 4;
        void *p = ::operator new(huge, std::align_val_t(64));
        std::printf("huge aligned new succeeded? %p\n", p);
    } catch (const std::bad_alloc &) {
        std::printf("aligned bad_alloc caught\n");
    }
    // The nothrow forms run the new_handler too ([new.delete.single]: they
    // call the throwing form and return null where it throws): once with a
    // handler that uninstalls itself, once with one that throws bad_alloc.
    static int nothrow_calls;
    for (int form = 0; form < 4; form++) {
        for (int throws = 0; throws < 2; throws++) {
            nothrow_calls = 0;
            if (throws)
                std::set_new_handler([] { nothrow_calls++; throw std::bad_alloc(); });
            else
                std::set_new_handler([] { nothrow_calls++; std::set_new_handler(nullptr); });
            volatile std::size_t huge = SIZE_MAX / 4;
            void *p = form == 0   ? ::operator new(huge, std::nothrow)
                      : form == 1 ? ::operator new[](huge, std::nothrow)
                      : form == 2 ? ::operator new(huge, std::align_val_t(64), std::nothrow)
                                  : ::operator new[](huge, std::align_val_t(64), std::nothrow);
            std::printf("nothrow form %d, handler %s: %s after %d handler call(s)\n", form,
                        throws ? "throws" : "uninstalls itself", p ? "a block" : "null", nothrow_calls);
            std::set_new_handler(nullptr);
        }
    }
    std::uint64_t total = 0;
    for (unsigned t = 0; t < threads; t++) {
        std::printf("thread %u: %llu\n", t, static_cast<unsigned long long>(out[t]));
        total ^= out[t];
    }
    std::printf("total: %llu\n", static_cast<unsigned long long>(total));
    return 0;
}
