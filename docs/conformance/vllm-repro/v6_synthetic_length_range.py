"""V6 (docs/conformance/vllm-findings.md): a synthetic acceptance length outside [1, n + 1] is
rejected, where SPEC S6 clamps it into [1, max_len].

vLLM's SpeculativeConfig resolves ``synthetic_acceptance_length`` (rejection_sample_method=
"synthetic") with its static ``_resolve_synthetic_acceptance_rates(n, None, length)``, n =
num_speculative_tokens. Its module imports the whole engine configuration, so this compiles
that method (and the ``_acceptance_length_to_rates`` it calls) from the installed
vllm/config/speculative.py, as the adapter does, and calls it: in-range lengths give the
minimum-variance schedule (SPEC S6 match-expected); 0.2, -3 and 9.5 with n = 5 raise
ValueError, where SPEC S6 gives the constant 1, 1 and 6.

Run from a dspark-conformance checkout: PYTHONPATH=<vllm dir>:. python
docs/conformance/vllm-repro/v6_synthetic_length_range.py (no kernel runs).
"""
from conformance.adapters.vllm.loader import load_vllm, source_functions

m = load_vllm()  # registers vLLM's packages bare; m.root holds the installed files
version = m.version
config = source_functions(m.root, version, "vllm/config/speculative.py",
                          ("_acceptance_length_to_rates", "_resolve_synthetic_acceptance_rates"),
                          class_name="SpeculativeConfig")
resolve = config["_resolve_synthetic_acceptance_rates"]
print(f"vllm=={version}: n = 5 (max_len 6)")
for length in (4.7, 6.0, 0.2, -3.0, 9.5):
    try:
        print(f"  length {length}: unconditional rates {resolve(5, None, length)}")
    except ValueError as exc:
        print(f"  length {length}: ValueError: {exc}  (SPEC S6: clamp to {min(max(length, 1.0), 6.0)})")
