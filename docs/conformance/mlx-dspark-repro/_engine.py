"""Shared by the reproducers: mlx-dspark's DSpark modules, loaded as the adapter loads them
(package __init__ skipped, mlx-lm / mlx-vlm stubbed: conformance/adapters/mlx_dspark/loader.py),
and a drafter with an empty backbone around a vanilla Markov head."""
from conformance.adapters.mlx_dspark.loader import load_mlx_dspark

engine = load_mlx_dspark()
mx, generate, model, config = engine.mx, engine["generate"], engine["model"], engine["config"]


def drafter(vocab_size: int, rank: int, draft_vocab_size: int | None = None):
    """A DSparkDrafter with no attention layer (the suite feeds base logits)."""
    return model.DSparkDrafter(config.DSparkConfig(
        family="qwen3", hidden_size=1, intermediate_size=1, num_hidden_layers=0, target_layer_ids=[0],
        vocab_size=vocab_size, draft_vocab_size=draft_vocab_size, markov_rank=rank,
        enable_confidence_head=False, final_logit_softcapping=None))
