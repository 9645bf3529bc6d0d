"""Seeded inputs of the conformance cases, written from the SPEC alone (no ``dspark_ref``).

Every builder takes a CPU ``torch.Generator`` and returns CPU tensors; a case moves them to
the device under test, so one seed gives the same inputs on every device.
``tests/test_inputs.py`` pins the exact tensors by digest: a change of a builder that
changes a case's inputs fails there.

* :mod:`.logits` -- rows of step logits of named families (SPEC S3, S5 inputs);
* :mod:`.markov_heads` -- random Markov heads in the reference layout (SPEC S2);
* :mod:`.verify_rounds` -- random chain-verify rounds and the tiny models of the S5 law
  cases (SPEC S5), seeded with the raw case seed.
* :mod:`.tiny_models` -- the tiny target and drafts of the S9 loop cases (SPEC S9), weights
  drawn from the case seed.
* :mod:`.seeding` -- a case's input streams (``sub_seed``, ``input_generator``), the
  generators the other sections' builders are handed.

To add a builder: one module per SPEC topic, listed here, with a digest in
``tests/test_inputs.py``.
"""

from .logits import LOGIT_FAMILIES, NO_TOP_K_CUT, logit_rows
from .markov_heads import MARKOV_HEAD_TYPES, markov_head_state

__all__ = ["LOGIT_FAMILIES", "NO_TOP_K_CUT", "logit_rows", "MARKOV_HEAD_TYPES", "markov_head_state"]
