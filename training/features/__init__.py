"""Features without leakage: per-target feature frames, causal history and activity statistics, the targets each
source can teach, and the serving fast path from job descriptions to a feature matrix.
"""


def __getattr__(name: str) -> object:
    # a model registered when the feature frames were the module ``training.features`` names its
    # TargetSpec here
    if name == "TargetSpec":
        from training.features.frames import TargetSpec
        return TargetSpec
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
