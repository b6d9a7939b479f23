"""Writing a matplotlib figure as a PNG file: the one way every plot of training, needs and replay is saved."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and CI
import matplotlib.pyplot as plt


def save_png(fig: Any, path: Path) -> Path:
    """``fig`` written to ``path`` (folders made as needed) and closed, so that long runs do not keep figures."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
