import sys, time, torch
sys.path.insert(0, sys.argv[1])  # the folder of _boundary_prev.py (README.md)
from conformance import contract as c
from conformance.boundary import validating, deferred_checks
from conformance.adapters.reference import PrefixScheduler
import _boundary_prev
torch.set_num_threads(1)
SPS = [1.0, 0.5, 0.45]
conf = [torch.tensor([[0.8, 0.9]], dtype=torch.float64), torch.tensor([[0.8, 0.0]], dtype=torch.float64)]
new = validating(c.PrefixScheduler, PrefixScheduler()); old = _boundary_prev.validating(c.PrefixScheduler, PrefixScheduler())
raw = PrefixScheduler()
def t(f, n=20000):
    s = time.perf_counter()
    for i in range(n): f(i)
    return 1e6 * (time.perf_counter() - s) / n
res = {"raw": [], "old": [], "new": [], "new-in-block": []}
for rep in range(5):
    res["raw"].append(t(lambda i: raw.schedule(conf[i & 1], SPS)))
    res["old"].append(t(lambda i: old.schedule(conf[i & 1], SPS)))
    res["new"].append(t(lambda i: new.schedule(conf[i & 1], SPS)))
    with deferred_checks():
        res["new-in-block"].append(t(lambda i: new.schedule(conf[i & 1], SPS)))
for k, v in res.items(): print(f"{k:14s} min {min(v):6.1f} us  median {sorted(v)[2]:6.1f} us")
