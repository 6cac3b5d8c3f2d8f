# dicts.py - builds and sorts large dictionaries; prints a digest of the
# results, which depends on nothing but the code (a preload subject).
import hashlib
import random

rng = random.Random(12345)
h = hashlib.sha256()
for rnd in range(3):
    d = {}
    for i in range(300000):
        k = "%08x-%d" % (rng.getrandbits(32), i % 977)
        d[k] = [i, str(i) * (i % 7), {"n": i}]
    items = sorted(d.items(), key=lambda kv: (len(kv[1][1]), kv[0]))
    for k, v in items[:: 1000]:
        h.update(k.encode())
        h.update(v[1].encode())
    inv = {v[0]: k for k, v in d.items()}
    h.update(str(sorted(inv)[-10:]).encode())
    del d, items, inv
print(h.hexdigest())
