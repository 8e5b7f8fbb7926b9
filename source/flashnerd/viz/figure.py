"""Writing matplotlib figures reproducibly (every plot of the suite goes through here)."""

from __future__ import annotations

import os
from pathlib import Path


def save_figure(fig, path: str | Path, dpi: int = 120) -> None:
    """Write a matplotlib figure as PNG through a temporary file, without a version stamp (rebuilds match), and
    close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, dpi=dpi, format="png", metadata={"Software": None})
    plt.close(fig)
    os.replace(tmp, path)
